//! A data dir: `MANIFEST.json`, a `LOCK` file, and `tables/NNNNN.tbl`, one immutable table per
//! virtual shard that has data. See `docs/storage.md` for the layout.

use crate::durable;
use crate::error::Error;
use crate::manifest::{Manifest, MANIFEST_FILE};
use crate::placement::DEFAULT_SHARD_COUNT;
use crate::table::Table;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Serializes [`DataDir::record_tables`] within a process.
static INVENTORY_WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Subdirectory holding shard tables.
pub const TABLES_DIR: &str = "tables";

/// Name of the lock file taken by whoever writes to or serves from the dir.
pub const LOCK_FILE: &str = "LOCK";

/// The table inventory, relative to the dir: one shard id per line, every shard that has
/// had a table written. Tables are only ever replaced, never removed, so a listed shard whose
/// file is gone is lost data, refused at start (`DataDir::missing_tables`).
pub const TABLE_INVENTORY_FILE: &str = "tables/INVENTORY";

/// Entries whose presence means a directory holds ricochet data (besides the manifest).
const DATA_MARKERS: &[&str] = &["logs", "alloc", "keygen.secret", "api_keys.json"];

/// An opened data dir (manifest read and checked).
#[derive(Debug, Clone)]
pub struct DataDir {
    path: PathBuf,
    manifest: Manifest,
}

impl DataDir {
    /// Opens `path`, creating it (with [`DEFAULT_SHARD_COUNT`] shards) if it has no manifest.
    pub fn open_or_create(path: &Path) -> Result<DataDir, Error> {
        if path.join(MANIFEST_FILE).exists() {
            DataDir::open(path)
        } else {
            DataDir::create(path, DEFAULT_SHARD_COUNT)
        }
    }

    /// Creates a data dir at `path` with `shard_count` shards. The directory may exist but must
    /// not already have a manifest (a dir's shard count can never change).
    pub fn create(path: &Path, shard_count: u32) -> Result<DataDir, Error> {
        let manifest = Manifest::new(shard_count)?;
        if let Some(found) = data_without_manifest(path) {
            return Err(Error::MissingManifest {
                path: path.to_path_buf(),
                found,
            });
        }
        std::fs::create_dir_all(path.join(TABLES_DIR))
            .map_err(|e| Error::io(path, "create directory", e))?;
        let mpath = path.join(MANIFEST_FILE);
        if mpath.exists() {
            return Err(Error::BadManifest {
                path: mpath,
                reason: "data dir already exists; refusing to overwrite its manifest".into(),
            });
        }
        // The tables dir entry must be durable before the manifest claims the dir is complete.
        durable::fsync_dir(path)?;
        manifest.write(&mpath)?;
        Ok(DataDir {
            path: path.to_path_buf(),
            manifest,
        })
    }

    /// Opens an existing data dir; fails with [`Error::NotADataDir`] if it has no manifest.
    pub fn open(path: &Path) -> Result<DataDir, Error> {
        let mpath = path.join(MANIFEST_FILE);
        if !mpath.exists() {
            return Err(Error::NotADataDir {
                path: path.to_path_buf(),
            });
        }
        let manifest = Manifest::read(&mpath)?;
        std::fs::create_dir_all(path.join(TABLES_DIR))
            .map_err(|e| Error::io(path.join(TABLES_DIR), "create directory", e))?;
        Ok(DataDir {
            path: path.to_path_buf(),
            manifest,
        })
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Number of virtual shards.
    pub fn shard_count(&self) -> u32 {
        self.manifest.shard_count
    }

    /// The dir's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Directory of the shard tables.
    pub fn tables_dir(&self) -> PathBuf {
        self.path.join(TABLES_DIR)
    }

    /// Where shard `shard`'s table lives, e.g. `tables/00007.tbl`.
    pub fn table_path(&self, shard: u32) -> PathBuf {
        self.tables_dir().join(format!("{shard:05}.tbl"))
    }

    /// Opens shard `shard`'s table, or `None` if the shard has no table yet. Also checks that
    /// the table really belongs to this shard of this dir.
    pub fn open_table(&self, shard: u32) -> Result<Option<Table>, Error> {
        if shard >= self.shard_count() {
            return Err(Error::ShardOutOfRange {
                shard,
                shard_count: self.shard_count(),
            });
        }
        let path = self.table_path(shard);
        if !path.exists() {
            return Ok(None);
        }
        let table = Table::open(&path)?;
        if table.shard() != shard || table.shard_count() != self.shard_count() {
            return Err(Error::CorruptTable {
                path,
                reason: format!(
                    "table is shard {} of {}, expected shard {shard} of {}",
                    table.shard(),
                    table.shard_count(),
                    self.shard_count()
                ),
            });
        }
        Ok(Some(table))
    }

    /// The shards the inventory lists, or `None` for a dir written before inventories existed.
    pub fn inventory(&self) -> Result<Option<std::collections::BTreeSet<u32>>, Error> {
        let path = self.path.join(TABLE_INVENTORY_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, "read", e)),
        };
        let mut set = std::collections::BTreeSet::new();
        for (i, line) in text.lines().enumerate() {
            let shard: u32 = line.trim().parse().map_err(|_| Error::CorruptTable {
                path: path.clone(),
                reason: format!("line {}: {line:?} is not a shard id", i + 1),
            })?;
            if shard >= self.shard_count() {
                return Err(Error::ShardOutOfRange {
                    shard,
                    shard_count: self.shard_count(),
                });
            }
            set.insert(shard);
        }
        Ok(Some(set))
    }

    /// Adds `shards` to the inventory (crash-safe replace). Called after their tables are
    /// durable: a crash in between leaves a table the inventory does not list yet, which is
    /// harmless, never the reverse.
    ///
    /// One at a time in a process ([`INVENTORY_WRITES`]): several cores' compactions and a
    /// regeneration may record tables at once, and two read-modify-writes through the one temp
    /// file interleaved into an inventory with an empty line, refused at the next start
    /// (`tests/fleet_links.rs`, `a_running_node_behind_the_horizon_regenerates_while_serving`,
    /// on 3 cores). Other processes are kept out by the dir's lock. Never on a redirect path.
    pub fn record_tables(&self, shards: impl IntoIterator<Item = u32>) -> Result<(), Error> {
        let _one_writer = INVENTORY_WRITES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut set = self.inventory()?.unwrap_or_default();
        let before = set.len();
        set.extend(shards);
        if set.len() == before && self.path.join(TABLE_INVENTORY_FILE).exists() {
            return Ok(());
        }
        let text: String = set.iter().map(|s| format!("{s}\n")).collect();
        durable::write_file_durable(&self.path.join(TABLE_INVENTORY_FILE), text.as_bytes())
    }

    /// Table files the inventory lists that are gone (relative paths). A dir without an
    /// inventory (written by an older version) gets one from the tables it has now.
    pub fn missing_tables(&self) -> Result<Vec<String>, Error> {
        let Some(listed) = self.inventory()? else {
            let present: Vec<u32> = (0..self.shard_count())
                .filter(|&s| self.table_path(s).exists())
                .collect();
            self.record_tables(present)?;
            return Ok(Vec::new());
        };
        Ok(listed
            .into_iter()
            .filter(|&s| !self.table_path(s).exists())
            .map(|s| format!("{TABLES_DIR}/{s:05}.tbl"))
            .collect())
    }

    /// Takes the dir's exclusive lock (flock on `LOCK`, non-blocking) so a server and an import
    /// cannot both use the dir. Released when the [`DirLock`] is dropped or the process exits.
    pub fn lock_exclusive(&self) -> Result<DirLock, Error> {
        let path = self.path.join(LOCK_FILE);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, "open", e))?;
        // SAFETY: flock is called on a file descriptor owned by `file`, which outlives the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(Error::Locked {
                    path: self.path.clone(),
                });
            }
            return Err(Error::io(&path, "flock", err));
        }
        Ok(DirLock { _file: file, path })
    }
}

/// The first sign that `path` holds data although it has no manifest: a table, a log, the
/// allocator's state, the key secret or API keys.
fn data_without_manifest(path: &Path) -> Option<String> {
    if path.join(crate::manifest::MANIFEST_FILE).exists() {
        return None;
    }
    let tables = path.join(TABLES_DIR);
    if let Ok(entries) = std::fs::read_dir(&tables) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tbl") || name == "INVENTORY" {
                return Some(format!("{TABLES_DIR}/{name}"));
            }
        }
    }
    DATA_MARKERS
        .iter()
        .find(|m| path.join(m).exists())
        .map(|m| m.to_string())
}

/// Holds a data dir's exclusive lock; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    // Closing the descriptor releases the flock.
    _file: File,
    path: PathBuf,
}

impl DirLock {
    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_open_and_paths() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("data");
        let d = DataDir::open_or_create(&p).unwrap();
        assert_eq!(d.shard_count(), DEFAULT_SHARD_COUNT);
        assert_eq!(d.table_path(7), p.join("tables/00007.tbl"));
        assert!(d.open_table(7).unwrap().is_none());
        assert!(matches!(
            d.open_table(DEFAULT_SHARD_COUNT),
            Err(Error::ShardOutOfRange { .. })
        ));
        let again = DataDir::open_or_create(&p).unwrap();
        assert_eq!(again.manifest(), d.manifest());
        assert!(DataDir::create(&p, 8).is_err());

        let q = t.path().join("small");
        assert_eq!(DataDir::create(&q, 8).unwrap().shard_count(), 8);
        assert_eq!(DataDir::open(&q).unwrap().shard_count(), 8);
        let e = DataDir::open(&t.path().join("nope")).unwrap_err();
        assert!(matches!(e, Error::NotADataDir { .. }));
        assert!(e.to_string().contains("nope"));
    }

    #[test]
    fn a_dir_with_data_but_no_manifest_is_refused_and_left_alone() {
        let t = tempfile::tempdir().unwrap();
        let d = DataDir::create(t.path(), 64).unwrap();
        std::fs::write(d.table_path(3), b"table bytes").unwrap();
        std::fs::remove_file(t.path().join(MANIFEST_FILE)).unwrap();
        let e = DataDir::open_or_create(t.path()).unwrap_err();
        assert!(matches!(e, Error::MissingManifest { .. }), "{e}");
        assert!(e.to_string().contains("tables/00003.tbl"), "{e}");
        assert!(
            !t.path().join(MANIFEST_FILE).exists(),
            "no manifest written"
        );
        let u = tempfile::tempdir().unwrap();
        std::fs::create_dir(u.path().join("logs")).unwrap();
        let e = DataDir::open_or_create(u.path()).unwrap_err();
        assert!(e.to_string().contains("logs"), "{e}");
    }

    #[test]
    fn the_inventory_names_tables_that_went_missing() {
        let t = tempfile::tempdir().unwrap();
        let d = DataDir::create(t.path(), 64).unwrap();
        std::fs::write(d.table_path(3), b"x").unwrap();
        // No inventory yet (an older dir): made from what is there.
        assert!(d.missing_tables().unwrap().is_empty());
        assert_eq!(d.inventory().unwrap().unwrap().len(), 1);
        d.record_tables([9]).unwrap();
        std::fs::write(d.table_path(9), b"x").unwrap();
        assert!(d.missing_tables().unwrap().is_empty());
        std::fs::remove_file(d.table_path(9)).unwrap();
        assert_eq!(d.missing_tables().unwrap(), vec!["tables/00009.tbl"]);
    }

    #[test]
    fn unknown_version_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(
            t.path().join(MANIFEST_FILE),
            r#"{"format_version": 7, "shard_count": 4, "created_at_s": 1}"#,
        )
        .unwrap();
        let e = DataDir::open_or_create(t.path()).unwrap_err();
        assert!(
            matches!(e, Error::UnsupportedFormat { found: 7, .. }),
            "{e}"
        );
    }

    #[test]
    fn lock_is_exclusive() {
        let t = tempfile::tempdir().unwrap();
        let d = DataDir::open_or_create(t.path()).unwrap();
        let held = d.lock_exclusive().unwrap();
        // A second open file description conflicts, as another process's would.
        let e = DataDir::open(t.path())
            .unwrap()
            .lock_exclusive()
            .unwrap_err();
        assert!(matches!(e, Error::Locked { .. }));
        assert!(
            e.to_string().contains(&t.path().display().to_string()),
            "{e}"
        );
        drop(held);
        d.lock_exclusive().unwrap();
    }
}
