//! Crash-safe small-file replacement: the write-temp, fsync, rename, fsync-directory dance.
//! Shared by the allocation authority and the key-generation secret.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Fsyncs a directory so that entries created, renamed or removed in it survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` with `bytes` atomically and durably: after a crash the file holds either
/// the old contents or the new, never a mix, and once this returns `Ok` the new contents survive
/// a crash. The file is created with permission bits `mode` (e.g. `0o600`).
///
/// Steps: write `dir/name.tmp` (truncating any leftover from an earlier crash: it was never
/// renamed, so nothing ever read it), fsync it, rename over `dir/name`, fsync `dir`.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, &dst)?;
    sync_dir(dir)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
