//! Live regeneration: what a running fleet node does when its change feed cursor cannot be
//! continued (not past the tombstone horizon: deletes it never saw may be gone; ahead of the
//! database: a restore from an older backup; or from another database identity: a dump
//! restored into a new one). Its links are rebuilt from one database
//! snapshot into a fresh table generation, swapped in like compaction's while the node keeps
//! serving, and the feed resumes. The node reports not ready meanwhile (`/readyz`, the
//! `feed` check): until the swap it may serve links deleted elsewhere.
//!
//! The follower's steps ([`Follower::regenerate`](super::follower::Follower::regenerate)); each core's side is `owner/regen.rs`:
//!
//! 1. Write [`REBOOTSTRAP_MARKER`](super::files::REBOOTSTRAP_MARKER): a crash or stop from here on makes the next start wipe the
//!    links and bootstrap from scratch (`bootstrap::rebootstrap_if_behind`), so no step
//!    below needs its own recovery.
//! 2. Take the resume cursor: `(xmin, "")` of a fresh snapshot. The feed later resumes there,
//!    so it brings every change that commits after this point.
//! 3. Every core rotates its log and snapshots its memtable (acked like a feed batch).
//! 4. One `REPEATABLE READ` snapshot of the live links, taken after every rotation, goes
//!    through the importer into a staging data dir ([`REGEN_DIR`]); shards that have a table
//!    here but no links in the snapshot get an empty one, so the generation is complete.
//! 5. The staging tables are renamed over `tables/` (the cores keep reading their old
//!    mappings), the directory fsynced, the inventory updated; each core gets its tables,
//!    opened and checked here, and swaps them in.
//! 6. The database's identity and the resume cursor are saved, the marker removed, the
//!    staging dir deleted.
//!
//! A failure before step 6 is retried after [`REGEN_RETRY_MS`] from step 2; the cores keep
//! their rotation (it holds for a later snapshot too).

use super::continuity::RegenCause;
use super::files::REGEN_DIR;
use super::lost::export_held;
use super::lost::write_lost;
use anyhow::Context;
use shards::datadir::DataDir;
use shards::table::Table;

/// Pause after a failed regeneration before the next try.
pub const REGEN_RETRY_MS: u64 = 5_000;

/// Steps 4 and 5: the snapshot into a staging dir, published over `main`'s tables, and every
/// table of the new generation opened.
pub(crate) fn build_generation(
    main: &DataDir,
    url: &str,
    cause: RegenCause,
) -> anyhow::Result<Generation> {
    let staging_path = main.path().join(REGEN_DIR);
    match std::fs::remove_dir_all(&staging_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", staging_path.display())),
    }
    let staging = DataDir::create(&staging_path, main.shard_count())?;
    let (_, at, links) = super::bootstrap::import_snapshot(&staging, url)?;
    if cause == RegenCause::Rollback {
        save_lost(main, &staging)?;
    }
    let listed = main.inventory()?.unwrap_or_default();
    let mut shards = Vec::new();
    for shard in 0..main.shard_count() {
        let staged = staging.table_path(shard);
        if !staged.exists() {
            if !listed.contains(&shard) && !main.table_path(shard).exists() {
                continue;
            }
            // The shard's links are all gone: an empty table replaces the old one.
            shards::table::write_table(&staged, shard, main.shard_count(), 0, [])?;
        }
        shards.push(shard);
    }
    for &shard in &shards {
        let (from, to) = (staging.table_path(shard), main.table_path(shard));
        std::fs::rename(&from, &to)
            .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
    }
    shards::durable::sync_dir(&main.tables_dir()).context("syncing the tables dir")?;
    main.record_tables(shards.iter().copied())?;
    let mut tables = Vec::with_capacity(shards.len());
    for shard in shards {
        let table = main
            .open_table(shard)?
            .with_context(|| format!("shard {shard}'s new table vanished"))?;
        tables.push((shard, table));
    }
    Ok(Generation { links, at, tables })
}

/// What [`build_generation`] made: the links, the database's position as of the snapshot,
/// and the tables by shard.
pub(crate) struct Generation {
    pub(crate) links: u64,
    pub(crate) at: Option<fleet::history::Position>,
    pub(crate) tables: Vec<(u32, Table)>,
}

/// Before a regeneration after a rollback replaces them: the links this node holds that the
/// new generation (`staging`) lacks or holds with another target or status, to a
/// [`LOST_FILE_PREFIX`] file ([`write_lost`]).
fn save_lost(main: &DataDir, staging: &DataDir) -> anyhow::Result<()> {
    let held_path = staging.path().join("held.ndjson");
    export_held(main, &held_path)?;
    write_lost(&held_path, main.path(), staging)
}
