//! Background compaction: folds a core's memtable (and so its log) into new shard table
//! generations, off the core thread, then swaps the tables in and drops the folded log.
//!
//! Steps, each crash-safe:
//! 1. On the core, when the memtable reaches `--compact-entries` and the log has drained (new
//!    writes are held meanwhile, `owner/compaction.rs`): rename `wal-<core>.log` to `wal-<core>.folding`, start a fresh `wal-<core>.log`
//!    (directory fsynced), re-log live idempotency records into it, and snapshot the memtable.
//!    Recovery replays `.folding` before `.log`, so a crash anywhere below loses nothing.
//! 2. On a compaction thread: for each touched shard, merge table + snapshot (deleted and
//!    expired links dropped), write the new table (temp file, fsync, rename, directory fsync)
//!    and open it (validated like any table).
//! 3. Back on the core: swap the new tables in, drop memtable entries the snapshot folded
//!    (unless changed since), delete `.folding`. The core's pause is this swap: proportional to
//!    the snapshot, and other cores never pause.
//!
//! The replaced tables are unmapped once every other core has cleared its LRU (the only place
//! an answer pointing into them can outlive its message): `Owner::retire_tables` (`owner/compaction.rs`).

use crate::base::key::InlineKey;
use crate::mesh::router::Router;
use crate::owner::writes::MemEntry;
use shards::datadir::DataDir;
use shards::table::{write_table, OwnedLink, Table};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Memtable entries on one core that trigger a compaction (`--compact-entries`). At ~200 bytes
/// an entry this bounds memtable memory to ~20 MB per core, and replay at start to well under
/// a second.
pub const DEFAULT_COMPACT_ENTRIES: usize = 100_000;

/// Suffix of a log being folded.
pub const FOLDING_SUFFIX: &str = "folding";

/// The path of core `core`'s log being folded.
pub fn folding_path(data_dir: &Path, core: u32) -> PathBuf {
    data_dir
        .join(shards::log::LOG_DIR_NAME)
        .join(format!("wal-{core}.{FOLDING_SUFFIX}"))
}

/// What a finished compaction hands back to its core.
pub struct Compacted {
    pub tables: Vec<(u32, Table)>,
    pub snapshot: HashMap<InlineKey, MemEntry, ahash::RandomState>,
    pub error: Option<String>,
}

/// Runs on the compaction thread: writes new tables for the shards `snapshot` touches.
pub fn fold_snapshot(
    data_dir: &Path,
    router: Router,
    snapshot: HashMap<InlineKey, MemEntry, ahash::RandomState>,
    now_s: u64,
) -> Compacted {
    let mut by_shard: BTreeMap<u32, Vec<(&InlineKey, &MemEntry)>> = BTreeMap::new();
    for (k, e) in &snapshot {
        by_shard
            .entry(router.owner(k.as_bytes()).shard)
            .or_default()
            .push((k, e));
    }
    let result = (|| -> Result<Vec<(u32, Table)>, shards::Error> {
        let dir = DataDir::open(data_dir)?;
        let mut tables = Vec::with_capacity(by_shard.len());
        for (shard, entries) in &by_shard {
            let mut links: BTreeMap<String, OwnedLink> = BTreeMap::new();
            if let Some(t) = dir.open_table(*shard)? {
                for (k, l) in t.iter() {
                    links.insert(k.to_string(), OwnedLink::from((k, l)));
                }
            }
            for (k, e) in entries {
                let key = String::from_utf8_lossy(k.as_bytes()).into_owned();
                match e {
                    MemEntry::Live { info, .. } => {
                        links.insert(
                            key.clone(),
                            OwnedLink {
                                key,
                                target: info.target.to_string(),
                                status: info.status,
                                expires_at_s: info.expires_at_s,
                                created_at_s: info.created_at_s,
                                flags: info.created_tag,
                                author: info.author,
                                behaviour: info.behaviour,
                                rules: info.rules.clone(),
                                labels: info.labels.clone(),
                            },
                        );
                    }
                    MemEntry::Deleted { .. } => {
                        links.remove(&key);
                    }
                }
            }
            let live = links
                .into_values()
                .filter(|l| l.expires_at_s == 0 || l.expires_at_s > now_s);
            let path = dir.table_path(*shard);
            write_table(&path, *shard, dir.shard_count(), 0, live)?;
            tables.push((*shard, Table::open(&path)?));
        }
        dir.record_tables(tables.iter().map(|(s, _)| *s))?;
        Ok(tables)
    })();
    match result {
        Ok(tables) => Compacted {
            tables,
            snapshot,
            error: None,
        },
        Err(e) => Compacted {
            tables: Vec::new(),
            snapshot,
            error: Some(e.to_string()),
        },
    }
}

/// Whether the entry now in the memtable is the one the snapshot folded.
pub fn unchanged(now: &MemEntry, folded: &MemEntry) -> bool {
    match (now, folded) {
        (MemEntry::Deleted { version: a }, MemEntry::Deleted { version: b }) => a == b,
        (
            MemEntry::Live {
                info: a,
                version: va,
                ..
            },
            MemEntry::Live {
                info: b,
                version: vb,
                ..
            },
        ) => {
            va == vb
                && std::sync::Arc::ptr_eq(&a.target, &b.target)
                && a.status == b.status
                && a.expires_at_s == b.expires_at_s
        }
        _ => false,
    }
}
