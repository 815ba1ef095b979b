//! Crash-safe file replacement: write a temp file, fsync it, rename it over the target, fsync
//! the directory. After a crash a reader sees either the old file or the complete new one.

use crate::error::Error;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// Replaces `path` with `bytes` crash-safely.
pub(crate) fn write_file_durable(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = temp_path_for(path);
    let result = (|| {
        let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
        f.write_all(bytes)
            .map_err(|e| Error::io(&tmp, "write", e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, "fsync", e))?;
        rename_durable(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
