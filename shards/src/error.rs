//! The storage engine's cold-path error type (opening data dirs, reading and writing tables).
//! Every variant names the file or directory involved so an operator can act on it.

use std::path::PathBuf;

/// Why a data dir, manifest or table could not be opened, created or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed on `path`.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// What was being done ("open", "fsync", ...).
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A table file is truncated, corrupt, or not a ricochet table.
    #[error("{}: corrupt table: {reason}", path.display())]
    CorruptTable {
        /// The table file.
        path: PathBuf,
        /// What check failed.
        reason: String,
    },
    /// A manifest is unreadable or inconsistent.
    #[error("{}: bad manifest: {reason}", path.display())]
    BadManifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A manifest or table was written by a format this build does not understand.
    #[error("{}: unsupported format version {found} (this build reads version {supported})", path.display())]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// `DataDir::open` was given a directory without a manifest.
    #[error("{}: not a ricochet data dir (no MANIFEST.json)", path.display())]
    NotADataDir {
        /// The directory.
        path: PathBuf,
    },
    /// A directory holds ricochet data but its manifest is gone: writing a fresh one could
    /// give it the wrong shard count and hide the data.
    #[error(
        "{}: MANIFEST.json is missing but the dir holds data ({found}); refusing to create a new manifest over it. Restore MANIFEST.json from a backup",
        path.display()
    )]
    MissingManifest {
        /// The directory.
        path: PathBuf,
        /// A file that shows the dir is not empty.
        found: String,
    },
    /// Tables the inventory lists are gone: the links in them would silently 404. (The
    /// message spells `datadir::TABLE_INVENTORY_FILE` out, as the others spell
    /// MANIFEST.json: errors are the bottom layer and import nothing above them. A test holds
    /// the two equal.)
    #[error(
        "{}: {} listed in tables/INVENTORY {} missing; refusing to start without the links in them. Restore from a backup, or start with --accept-data-loss to serve without them",
        dir.display(),
        missing.join(", "),
        if missing.len() == 1 { "is" } else { "are" }
    )]
    MissingTables {
        /// The data dir.
        dir: PathBuf,
        /// The missing table files, relative to the dir.
        missing: Vec<String>,
    },
    /// Another process (a server or an import) holds the data dir's lock.
    #[error("{}: data dir is in use by another process (LOCK is held)", path.display())]
    Locked {
        /// The data dir.
        path: PathBuf,
    },
    /// A table was asked to hold an invalid entry (a programmer or input error caught before writing).
    #[error("{}: cannot write table: {reason}", path.display())]
    BadEntry {
        /// The table being written.
        path: PathBuf,
        /// What is wrong with the entry.
        reason: String,
    },
    /// A shard number or shard count is out of range.
    #[error("shard {shard} is out of range for a data dir of {shard_count} shards")]
    ShardOutOfRange {
        /// The shard asked for.
        shard: u32,
        /// The data dir's shard count.
        shard_count: u32,
    },
    /// A click analytics file (manifest, snapshot or log) is damaged: refused, never served as
    /// silently lost clicks.
    #[error("{}: corrupt click analytics file: {detail}. Restore it from a backup, or move the clicks/ directory away to start counting from zero", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the byte offset.
        detail: String,
    },
    /// A data dir was asked for with an invalid shard count.
    #[error("shard count {0} is out of range (1..={max})", max = crate::placement::MAX_SHARD_COUNT)]
    BadShardCount(u32),
}

impl Error {
    /// Wraps an I/O error with the path and operation.
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The missing-tables message names the inventory file the data dir really uses.
    #[test]
    fn the_missing_tables_message_names_the_inventory_file() {
        let e = super::Error::MissingTables {
            dir: "/d".into(),
            missing: vec!["tables/0007.rtbl".into()],
        };
        let text = e.to_string();
        assert!(
            text.contains(&format!(" {} ", crate::datadir::TABLE_INVENTORY_FILE)),
            "{text}"
        );
    }
}
