//! Folding logged writes into shard tables: a new table generation per touched shard, written
//! crash-safely (temp file, fsync, rename, directory fsync by `write_table`). Deleted and
//! expired links are dropped here.
//!
//! Replaying a log over a table that already contains some of its records gives the same
//! result (each key ends at its last op), so a crash between publishing the tables and removing
//! the folded logs is harmless: the next start folds or replays them again.

use crate::datadir::DataDir;
use crate::log::{LogRecord, NewestWins};
use crate::table::{write_table, OwnedLink};
use crate::Error;
use std::collections::{BTreeMap, HashMap};

/// What a fold did.
#[derive(Debug, Default, Clone, Copy)]
pub struct FoldStats {
    pub shards_written: u32,
    pub links: u64,
    pub dropped_expired_or_deleted: u64,
}

/// Applies `records` (in order) to the tables of the shards they touch and writes new tables.
/// Records for the same key must be in the order they were acknowledged.
pub fn fold_records(dir: &DataDir, records: &[LogRecord], now_s: u64) -> Result<FoldStats, Error> {
    let mut by_shard: HashMap<u32, Vec<&LogRecord>> = HashMap::new();
    for r in records {
        if r.op.link().is_some() || r.op.deleted_key().is_some() {
            by_shard.entry(r.shard).or_default().push(r);
        }
    }
    let mut stats = FoldStats::default();
    let mut shards: Vec<u32> = by_shard.keys().copied().collect();
    shards.sort_unstable();
    let mut written = Vec::with_capacity(shards.len());
    for shard in shards {
        let mut links: BTreeMap<String, Option<OwnedLink>> = BTreeMap::new();
        if let Some(t) = dir.open_table(shard)? {
            for (k, l) in t.iter() {
                links.insert(k.to_string(), Some(OwnedLink::from((k, l))));
            }
        }
        let mut newest = NewestWins::default();
        for r in &by_shard[&shard] {
            if !newest.admits(&r.op) {
                continue;
            }
            if let Some(l) = r.op.link() {
                links.insert(l.key.clone(), Some(OwnedLink::from(l)));
            } else if let Some(key) = r.op.deleted_key() {
                links.insert(key.to_owned(), None);
            }
        }
        let before = links.len() as u64;
        let live: Vec<OwnedLink> = links
            .into_values()
            .flatten()
            .filter(|l| l.expires_at_s == 0 || l.expires_at_s > now_s)
            .collect();
        stats.dropped_expired_or_deleted += before - live.len() as u64;
        stats.links += live.len() as u64;
        write_table(&dir.table_path(shard), shard, dir.shard_count(), 0, live)?;
        stats.shards_written += 1;
        written.push(shard);
    }
    dir.record_tables(written)?;
    Ok(stats)
}
