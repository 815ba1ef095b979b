//! Per-bucket spill files: pass 1 appends validated records, pass 2 reads one bucket at a time.
//! Shard `s` spills to bucket `s % buckets`, so a bucket holds whole shards.
//!
//! Record: `line u64 | shard u32 | status u16 | key_len u8 | url_len u32 | key | url`, little-endian.

use crate::error::Error;
use crate::link::RedirectStatus;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Most spill files open at once. Bounds file descriptors (a dir may have 65,536 shards) and
/// buffer memory; with 256 shards each shard gets its own file.
pub const MAX_SPILL_FILES: u32 = 256;

/// Write buffer per spill file: 256 × 64 KiB = 16 MiB at most.
pub const SPILL_BUFFER_BYTES: usize = 64 * 1024;

/// A spilled record.
pub(crate) struct Spilled {
    pub line: u64,
    pub shard: u32,
    pub status: RedirectStatus,
    pub key: String,
    pub url: String,
}

pub(crate) struct SpillWriter {
    dir: PathBuf,
    files: Vec<Option<BufWriter<File>>>,
}

impl SpillWriter {
    /// Creates an empty spill dir at `dir` (removing a stale one from a crashed import).
    pub fn create(dir: &Path, buckets: u32) -> Result<SpillWriter, Error> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .map_err(|e| Error::io(dir, "remove stale spill dir", e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create directory", e))?;
        Ok(SpillWriter {
            dir: dir.to_path_buf(),
            files: (0..buckets).map(|_| None).collect(),
        })
    }

    pub fn bucket_count(&self) -> u32 {
        self.files.len() as u32
    }

    pub fn bucket_path(dir: &Path, bucket: u32) -> PathBuf {
        dir.join(format!("{bucket:05}.spill"))
    }

    pub fn push(
        &mut self,
        line: u64,
        shard: u32,
        status: RedirectStatus,
        key: &str,
        url: &str,
    ) -> Result<(), Error> {
        let bucket = shard % self.bucket_count();
        let path = || Self::bucket_path(&self.dir, bucket);
        let slot = &mut self.files[bucket as usize];
        if slot.is_none() {
            let f = File::create(path()).map_err(|e| Error::io(path(), "create", e))?;
            *slot = Some(BufWriter::with_capacity(SPILL_BUFFER_BYTES, f));
        }
        let w = slot.as_mut().expect("opened above");
        let mut head = [0u8; 19];
        head[0..8].copy_from_slice(&line.to_le_bytes());
        head[8..12].copy_from_slice(&shard.to_le_bytes());
        head[12..14].copy_from_slice(&status.code().to_le_bytes());
        head[14] = key.len() as u8;
        head[15..19].copy_from_slice(&(url.len() as u32).to_le_bytes());
        let r = w
            .write_all(&head)
            .and_then(|()| w.write_all(key.as_bytes()))
            .and_then(|()| w.write_all(url.as_bytes()));
        r.map_err(|e| Error::io(path(), "write", e))
    }

    /// Flushes every bucket; returns which buckets have a file.
    pub fn finish(self) -> Result<Vec<bool>, Error> {
        let mut present = Vec::with_capacity(self.files.len());
        for (b, f) in self.files.into_iter().enumerate() {
            present.push(f.is_some());
            if let Some(mut w) = f {
                w.flush()
                    .map_err(|e| Error::io(Self::bucket_path(&self.dir, b as u32), "write", e))?;
            }
        }
        Ok(present)
    }
}

/// Reads a whole bucket back.
pub(crate) fn read_bucket(path: &Path) -> Result<Vec<Spilled>, Error> {
    let f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut r = BufReader::with_capacity(SPILL_BUFFER_BYTES, f);
    let mut out = Vec::new();
    let io = |e| Error::io(path, "read", e);
    let mut head = [0u8; 19];
    loop {
        match r.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(out),
            Err(e) => return Err(io(e)),
        }
        let line = u64::from_le_bytes(head[0..8].try_into().expect("8"));
        let shard = u32::from_le_bytes(head[8..12].try_into().expect("4"));
        let code = u16::from_le_bytes(head[12..14].try_into().expect("2"));
        let key_len = head[14] as usize;
        let url_len = u32::from_le_bytes(head[15..19].try_into().expect("4")) as usize;
        let mut bytes = vec![0u8; key_len + url_len];
        r.read_exact(&mut bytes).map_err(io)?;
        let url = bytes.split_off(key_len);
        // The spill was written by this process moments ago from validated `&str`s.
        let corrupt = || Error::io(path, "read", std::io::Error::other("spill file corrupted"));
        out.push(Spilled {
            line,
            shard,
            status: RedirectStatus::from_code(code).ok_or_else(corrupt)?,
            key: String::from_utf8(bytes).map_err(|_| corrupt())?,
            url: String::from_utf8(url).map_err(|_| corrupt())?,
        });
    }
}
