//! Crash-safe file operations, the one place the write-temp, fsync, rename, fsync-directory
//! dance lives: after a crash a reader sees either the old file or the complete new one, and
//! once a call returns `Ok` its effect survives a crash. Used by tables, the manifest, the
//! allocation authority, the key-generation secret, API keys and the logs' directory.
//!
//! The public functions return `io::Result` (callers add the file to the message); the
//! crate-private ones return [`Error`] naming the file.

use crate::error::Error;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Fsyncs a directory so that entries created, renamed or removed in it survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` with `bytes` atomically and durably: after a crash the file holds either
/// the old contents or the new, never a mix, and once this returns `Ok` the new contents survive
/// a crash. The file is created with permission bits `mode` (e.g. `0o600`).
///
/// Steps: write `dir/name.tmp` (truncating any leftover from an earlier crash: it was never
/// renamed, so nothing ever read it), fsync it, rename over `dir/name`, fsync `dir`. On error
/// the temp file is removed.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_paced(dir, name, bytes, mode, usize::MAX, &mut || {})
}

/// `bytes` to `f` in writes of at most `chunk` bytes, with `pause` between two.
pub fn write_all_paced(
    f: &mut impl Write,
    bytes: &[u8],
    chunk: usize,
    pause: &mut dyn FnMut(),
) -> io::Result<()> {
    for (i, part) in bytes.chunks(chunk.max(1)).enumerate() {
        if i > 0 {
            pause();
        }
        f.write_all(part)?;
    }
    Ok(())
}

/// [`write_atomic`] in writes of at most `chunk` bytes with `pause` between them (a service
/// thread's yield point, so a core sharing its CPU is not kept waiting on one long `write`).
pub fn write_atomic_paced(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    chunk: usize,
    pause: &mut dyn FnMut(),
) -> io::Result<()> {
    let dst = dir.join(name);
    let tmp = temp_path_for(&dst);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        write_all_paced(&mut f, bytes, chunk, pause)?;
        f.sync_all()?;
        fs::rename(&tmp, &dst)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `dir` (and parents) if missing and makes its directory entry durable by fsyncing
/// its parent.
pub fn create_dir_durable(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` crash-safely ([`write_atomic`], mode 0o644), naming `path` in
/// the error.
pub(crate) fn write_file_durable(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    write_atomic(parent_dir(path), name, bytes, 0o644)
        .map_err(|e| Error::io(path, "replace (write temp, fsync, rename)", e))
}

/// The temp-file name used while `path` is being written (same directory, so rename is atomic).
pub(crate) fn temp_path_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Asks the kernel to start writing `file`'s dirty pages back now, without waiting, so a later
/// fsync finds most of the work done. Best effort: an error only means the fsync does it all.
pub(crate) fn start_writeback(file: &File) {
    // SAFETY: sync_file_range on a descriptor owned by `file`, alive for the call; with
    // SYNC_FILE_RANGE_WRITE it only queues writeback and touches no memory of ours.
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

/// fsyncs every file in `paths`, up to `max_in_flight` at a time (one thread each). Returns the
/// first error (naming its file) after all workers stop; on error some files may not be durable.
pub(crate) fn fsync_all_parallel(paths: &[PathBuf], max_in_flight: usize) -> Result<(), Error> {
    let next = AtomicUsize::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let workers = paths.len().min(max_in_flight.max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = paths.get(i) else { break };
                let result = File::open(path)
                    .map_err(|e| Error::io(path, "open", e))
                    .and_then(|f| f.sync_all().map_err(|e| Error::io(path, "fsync", e)));
                if let Err(e) = result {
                    first_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    // Skip the rest: the caller fails the whole operation anyway.
                    next.store(paths.len(), Ordering::Relaxed);
                    break;
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Flushes a directory entry change (create/rename/unlink) to disk.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), Error> {
    let d = File::open(dir).map_err(|e| Error::io(dir, "open directory", e))?;
    d.sync_all()
        .map_err(|e| Error::io(dir, "fsync directory", e))
}

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Renames `from` over `to` and fsyncs the directory of `to`.
pub(crate) fn rename_durable(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::rename(from, to).map_err(|e| Error::io(to, "rename into place", e))?;
    fsync_dir(parent_dir(to))
}

/// Takes an exclusive `flock` on `file`, waiting for it (retried on EINTR). Serializes the
/// read-modify-write of small operator files (API keys, domains) between processes.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: `file` owns an open descriptor for the whole call; flock only takes an
        // advisory lock on it and touches no memory.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn parallel_fsync_syncs_all_and_names_the_failing_file() {
        let t = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..40).map(|i| t.path().join(format!("{i}.f"))).collect();
        for p in &paths {
            let f = File::create(p).unwrap();
            start_writeback(&f);
        }
        fsync_all_parallel(&paths, 16).unwrap();
        fsync_all_parallel(&paths, 0).unwrap();
        fsync_all_parallel(&[], 16).unwrap();

        let mut with_missing = paths.clone();
        with_missing.insert(17, t.path().join("missing.f"));
        let e = fsync_all_parallel(&with_missing, 4).unwrap_err();
        assert!(e.to_string().contains("missing.f"), "{e}");
    }

    #[test]
    fn replaces_and_sets_mode() {
        let d = tempfile::tempdir().unwrap();
        write_atomic(d.path(), "f", b"one", 0o600).unwrap();
        write_atomic(d.path(), "f", b"two", 0o600).unwrap();
        assert_eq!(fs::read(d.path().join("f")).unwrap(), b"two");
        assert!(!d.path().join("f.tmp").exists());
        let mode = fs::metadata(d.path().join("f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn creates_nested_dir() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("a/b");
        create_dir_durable(&sub).unwrap();
        assert!(sub.is_dir());
        create_dir_durable(&sub).unwrap();
    }
}
