//! Live regeneration: what a running fleet node does when its change feed cursor cannot be
//! continued (not past the tombstone horizon: deletes it never saw may be gone; ahead of the
//! database: a restore from an older backup; or from another database identity: a dump
//! restored into a new one). Its links are rebuilt from one database
//! snapshot into a fresh table generation, swapped in like compaction's while the node keeps
//! serving, and the feed resumes. The node reports not ready meanwhile (`/readyz`, the
//! `feed` check): until the swap it may serve links deleted elsewhere.
//!
//! The follower's steps ([`Follower::regenerate`]); each core's side is `owner/regen.rs`:
//!
//! 1. Write [`REBOOTSTRAP_MARKER`]: a crash or stop from here on makes the next start wipe the
//!    links and bootstrap from scratch (`fleet_sync::rebootstrap_if_behind`), so no step
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

use crate::fleet_sync::{FleetToCore, Followed, Follower, REBOOTSTRAP_MARKER};
use crate::owner::regen::RegenStep;
use anyhow::Context;
use shards::datadir::DataDir;
use shards::table::Table;

/// The staging data dir a regeneration builds its table generation in, relative to the data
/// dir. Removed when the regeneration is done, and at the start of the next one.
pub const REGEN_DIR: &str = "fleet-regen";

/// Pause after a failed regeneration before the next try.
pub const REGEN_RETRY_MS: u64 = 5_000;

/// Why a node regenerates its links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegenCause {
    /// The cursor is not past the tombstone horizon: what the node holds and the database
    /// does not are links deleted elsewhere.
    Horizon,
    /// The database went back in time (a restore, a promoted standby that lagged) or is
    /// another one: links the node holds and the database lacks may be acknowledged links it
    /// lost. They are saved to a [`LOST_FILE_PREFIX`] file first, for the operator.
    Rollback,
}

/// Prefix of the file (in the data dir, `<prefix><unix s>.ndjson`, the importer's and the
/// API's format) that lists the links a regeneration after a rollback found here and not in
/// the database.
pub const LOST_FILE_PREFIX: &str = "fleet-lost-";

impl Follower {
    /// Regenerates this node's links from a database snapshot (the module doc's steps) and
    /// returns the cursor the feed resumes from and where in the database's history the
    /// node then is. `batch` numbers the steps' core batches. `identity` becomes the
    /// database's.
    pub(crate) fn regenerate(
        &mut self,
        batch: &mut u64,
        cause: RegenCause,
        identity: &mut crate::fleet_sync::Held,
    ) -> anyhow::Result<(fleet::feed::Cursor, Followed)> {
        self.stats.regenerating();
        let started = std::time::Instant::now();
        // Answers counted here committed before the snapshot, which holds them.
        let writes = self.stats.link_writes_done();
        let dir = self.data_dir.clone();
        shards::durable::write_atomic(&dir, REBOOTSTRAP_MARKER, b"rebootstrap\n", 0o644)
            .context("writing the re-bootstrap marker")?;
        // Read before the snapshot (in `build_generation`): it reflects every removal counted.
        let now_identity = crate::fleet_sync::Held::now(&mut self.db)?;
        let resume = fleet::feed::current_cursor(&mut self.db)?;
        let resume_at = fleet::history::position(&mut self.db)?;
        let rotate = (0..self.outlets.cores())
            .map(|_| RegenStep::Rotate)
            .collect();
        if !self.regen_step(batch, rotate) {
            anyhow::bail!("a core did not rotate its log in time");
        }
        let main = DataDir::open(&dir)?;
        let url = self.url.clone();
        // On a thread of its own at the lowest priority, as a compaction's fold: the import
        // is CPU work, and a core sharing its CPU must win.
        let Generation { links, at, tables } = std::thread::Builder::new()
            .name("ricochet-fleet-regen".into())
            .spawn(move || {
                crate::cpus::yield_thread_to_cores("fleet regeneration");
                build_generation(&main, &url, cause)
            })?
            .join()
            .map_err(|_| anyhow::anyhow!("the regeneration thread panicked"))??;
        if at.map(|p| p.timeline) != resume_at.map(|p| p.timeline) {
            // The resume cursor's transaction ids are another history's than the snapshot's.
            anyhow::bail!("the database changed timeline during the snapshot");
        }
        let mut parts: Vec<Vec<(u32, Table)>> =
            (0..self.outlets.cores()).map(|_| Vec::new()).collect();
        for (shard, table) in tables {
            parts[self.router.core_of_shard(shard)].push((shard, table));
        }
        let swap = parts.into_iter().map(RegenStep::Swap).collect();
        if !self.regen_step(batch, swap) {
            anyhow::bail!("a core did not swap its new tables in");
        }
        crate::fleet_sync::save_identity(&dir, &now_identity).context("saving the identity")?;
        crate::fleet_sync::save_cursor(&dir, &resume, at.as_ref())
            .context("saving the feed cursor")?;
        *identity = now_identity;
        crate::fleet_sync::rebootstrap_done(&dir).context("removing the re-bootstrap marker")?;
        let _ = std::fs::remove_dir_all(dir.join(REGEN_DIR));
        self.stats.regenerated();
        eprintln!(
            "fleet: regenerated this node's links from a database snapshot while serving: \
             {links} links in {} ms; the feed resumes at transaction {}",
            started.elapsed().as_millis(),
            resume.xid
        );
        let followed = Followed {
            at,
            writes_before: Some(writes),
        };
        Ok((resume, followed))
    }

    /// Hands core `i` its `steps[i]` as a new batch and waits until every core acknowledged.
    fn regen_step(&mut self, batch: &mut u64, steps: Vec<RegenStep>) -> bool {
        *batch += 1;
        let b = *batch;
        let items = steps
            .into_iter()
            .enumerate()
            .map(|(core, step)| (core, FleetToCore::Regen { batch: b, step }))
            .collect();
        self.deliver_and_wait(b, items)
    }
}

/// Steps 4 and 5: the snapshot into a staging dir, published over `main`'s tables, and every
/// table of the new generation opened.
fn build_generation(main: &DataDir, url: &str, cause: RegenCause) -> anyhow::Result<Generation> {
    let staging_path = main.path().join(REGEN_DIR);
    match std::fs::remove_dir_all(&staging_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", staging_path.display())),
    }
    let staging = DataDir::create(&staging_path, main.shard_count())?;
    let (_, at, links) = crate::fleet_sync::import_snapshot(&staging, url)?;
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
struct Generation {
    links: u64,
    at: Option<fleet::history::Position>,
    tables: Vec<(u32, Table)>,
}

/// Before a regeneration after a rollback replaces them: the links this node holds that the
/// new generation (`staging`) lacks or holds with another target or status, to a
/// [`LOST_FILE_PREFIX`] file ([`write_lost`]).
fn save_lost(main: &DataDir, staging: &DataDir) -> anyhow::Result<()> {
    let held_path = staging.path().join("held.ndjson");
    export_held(main, &held_path)?;
    write_lost(&held_path, main.path(), staging)
}

/// The links `dir` holds (its tables and logs, `shards::export`), to `to` (NDJSON).
pub(crate) fn export_held(dir: &DataDir, to: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let mut held = std::io::BufWriter::new(std::fs::File::create(to)?);
    shards::export::export(
        dir.path(),
        shards::export::ExportFormat::Ndjson,
        shards::timefmt::now_s(),
        &mut held,
    )?;
    held.flush()?;
    held.get_ref().sync_all()?;
    Ok(())
}

/// The links of `held_path` (an [`export_held`] file) that `generation`'s tables lack or hold
/// with another target or status, as they were held, to a [`LOST_FILE_PREFIX`] file in
/// `data_dir`, reported in the log. Nothing is written when there are none.
pub(crate) fn write_lost(
    held_path: &std::path::Path,
    data_dir: &std::path::Path,
    generation: &DataDir,
) -> anyhow::Result<()> {
    use std::io::BufRead;
    let now_s = shards::timefmt::now_s();
    let main_shards = generation.shard_count();
    let mut tables: std::collections::HashMap<u32, Option<Table>> = Default::default();
    let mut lost = Vec::new();
    for line in std::io::BufReader::new(std::fs::File::open(held_path)?).lines() {
        let line = line?;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let Some(key) = v["key"].as_str() else {
            continue;
        };
        let shard = shards::placement::shard_of(key.as_bytes(), main_shards);
        let table = match tables.entry(shard) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(generation.open_table(shard)?),
        };
        // Lost: gone from the database, or there with another target or status (a change
        // the database lost; the node served this one).
        let kept = table.as_ref().and_then(|t| t.get(key.as_bytes()));
        let same = kept.is_some_and(|l| {
            v["long_url"].as_str() == Some(l.target)
                && v["status"].as_u64() == Some(u64::from(l.status.code()))
        });
        if !same {
            lost.extend_from_slice(line.as_bytes());
            lost.push(b'\n');
        }
    }
    if lost.is_empty() {
        return Ok(());
    }
    let n = lost.iter().filter(|&&b| b == b'\n').count();
    // Never over another one: two regenerations in one second each keep their own file.
    let name = (0u32..)
        .map(|i| match i {
            0 => format!("{LOST_FILE_PREFIX}{now_s}.ndjson"),
            i => format!("{LOST_FILE_PREFIX}{now_s}-{i}.ndjson"),
        })
        .find(|name| !data_dir.join(name).exists())
        .expect("some suffix is free");
    shards::durable::write_atomic(data_dir, &name, &lost, 0o600)?;
    eprintln!(
        "fleet: {n} links this node held are not in the database it regenerates from, or are \
         there with another target or status (lost there by the rollback, or changed or \
         deleted since): saved to {}, as this node held them. Re-create or change the ones \
         that should be so through the API (`ricochet import` reads the file's format into a \
         single-node dir)",
        data_dir.join(&name).display()
    );
    Ok(())
}
