//! A blocking std I/O driver for [`LogWriter`], for tools and tests. The server drives the same
//! state machine through io_uring instead.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{recover, LogError, LogOp, LogWriter, Recovery};
use crate::durable;

/// Where log bytes go: positional writes and data syncs. The seam for fault injection.
pub trait LogStorage {
    /// Writes all of `buf` at offset `off`.
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()>;
    /// `fdatasync`: makes every completed write durable.
    fn sync_data(&mut self) -> io::Result<()>;
}

/// A real file.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
}

impl FileStorage {
    /// Wraps an open, writable file.
    pub fn new(file: File) -> FileStorage {
        FileStorage { file }
    }
}

impl LogStorage for FileStorage {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// Wraps a storage and fails chosen calls, for tests of the failure paths.
#[derive(Debug)]
pub struct FaultyStorage<S> {
    inner: S,
    writes: u64,
    syncs: u64,
    fail_write: Option<(u64, i32, usize)>,
    fail_sync: Option<(u64, i32)>,
}

impl<S: LogStorage> FaultyStorage<S> {
    /// No faults until configured.
    pub fn new(inner: S) -> FaultyStorage<S> {
        FaultyStorage {
            inner,
            writes: 0,
            syncs: 0,
            fail_write: None,
            fail_sync: None,
        }
    }

    /// Fails the `nth` write (1-based) with OS error `errno` (e.g. `libc::ENOSPC`) after
    /// passing its first `written_prefix` bytes through, as a short write would.
    pub fn fail_write(mut self, nth: u64, errno: i32, written_prefix: usize) -> Self {
        self.fail_write = Some((nth, errno, written_prefix));
        self
    }

    /// Fails the `nth` sync (1-based) with OS error `errno` (e.g. `libc::EIO`). The writes
    /// before it stay in the file, as they would stay in the page cache.
    pub fn fail_sync(mut self, nth: u64, errno: i32) -> Self {
        self.fail_sync = Some((nth, errno));
        self
    }

    /// Writes attempted so far.
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// Syncs attempted so far.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }
}

impl<S: LogStorage> LogStorage for FaultyStorage<S> {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.writes += 1;
        match self.fail_write {
            Some((nth, errno, prefix)) if nth == self.writes => {
                self.inner.write_at(off, &buf[..prefix.min(buf.len())])?;
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => self.inner.write_at(off, buf),
        }
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.syncs += 1;
        match self.fail_sync {
            Some((nth, errno)) if nth == self.syncs => Err(io::Error::from_raw_os_error(errno)),
            _ => self.inner.sync_data(),
        }
    }
}

/// A [`LogWriter`] plus the storage it writes to, driven synchronously.
#[derive(Debug)]
pub struct BlockingLog<S: LogStorage = FileStorage> {
    writer: LogWriter,
    storage: S,
}

impl BlockingLog<FileStorage> {
    /// Opens (creating if missing, with its directory) the log at `path` for writer
    /// `writer_id`: runs [`recover`], checks the header's writer id, and positions the writer
    /// after the last valid record.
    pub fn open(path: &Path, writer_id: u32, salvage: bool) -> Result<(Self, Recovery), LogError> {
        Self::open_with(path, writer_id, salvage, |s| s)
    }
}

impl<S: LogStorage> BlockingLog<S> {
    /// [`BlockingLog::open`] with the file storage wrapped by `wrap` (e.g. in
    /// [`FaultyStorage`]).
    pub fn open_with(
        path: &Path,
        writer_id: u32,
        salvage: bool,
        wrap: impl FnOnce(FileStorage) -> S,
    ) -> Result<(Self, Recovery), LogError> {
        let io_err = |op: &'static str| {
            move |source: io::Error| LogError::Io {
                op,
                path: path.to_path_buf(),
                source,
            }
        };
        if !path.exists() {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
            if let Some(dir) = dir {
                durable::create_dir_durable(dir).map_err(io_err("create directory for"))?;
            }
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(io_err("create"))?;
            if let Some(dir) = dir {
                durable::sync_dir(dir).map_err(io_err("fsync directory of"))?;
            }
        }
        let rec = recover(path, salvage)?;
        if let Some(found) = rec.writer.filter(|&w| w != writer_id) {
            return Err(LogError::WriterMismatch {
                path: path.to_path_buf(),
                found,
                expected: writer_id,
            });
        }
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io_err("open"))?;
        let writer = LogWriter::new(writer_id, rec.valid_len, rec.max_seq + 1);
        Ok((
            BlockingLog {
                writer,
                storage: wrap(FileStorage::new(file)),
            },
            rec,
        ))
    }

    /// Drives `writer` over `storage`.
    pub fn with_storage(storage: S, writer: LogWriter) -> Self {
        BlockingLog { writer, storage }
    }

    /// Appends to the pending batch (not yet durable); returns the record's seq.
    pub fn append(&mut self, shard: u32, op: &LogOp) -> Result<u64, LogError> {
        self.writer.append(shard, op)
    }

    /// Writes and syncs everything pending; returns the durable seq.
    pub fn commit(&mut self) -> Result<u64, LogError> {
        match self.writer.take_batch()? {
            None => Ok(self.writer.durable_seq()),
            Some(batch) => {
                let result = self
                    .storage
                    .write_at(batch.offset, &batch.bytes)
                    .and_then(|()| self.storage.sync_data());
                self.writer.complete(batch, result)
            }
        }
    }

    /// Appends and commits one record; returns its seq once durable.
    pub fn append_durable(&mut self, shard: u32, op: &LogOp) -> Result<u64, LogError> {
        let seq = self.append(shard, op)?;
        self.commit()?;
        Ok(seq)
    }

    /// The state machine.
    pub fn writer(&self) -> &LogWriter {
        &self.writer
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }
}
