//! Crash-safe file replacement: write a temp file, fsync it, rename it over the target, fsync
//! the directory. After a crash a reader sees either the old file or the complete new one.

use crate::error::Error;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The temp-file name used while `path` is being written (same directory, so rename is atomic).
pub(crate) fn temp_path_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
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
