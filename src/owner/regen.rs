//! A live regeneration, as the owner takes part in it: fleet mode's answer to a feed cursor
//! that cannot be continued (behind the tombstone horizon, or ahead of a restored database),
//! while the node keeps serving. The follower drives it (`fleet_mode::follower`, `fleet_mode::regen`); each core does two
//! steps, each acknowledged like a feed batch:
//!
//! 1. **Rotate** (`RegenStep::Rotate`): once no compaction runs and the log is quiet (new
//!    writes are held meanwhile, as for compaction), the log is rotated to `.folding` and the
//!    memtable snapshotted. From here every state in the memtable snapshot was committed
//!    before the database snapshot the follower takes next; compactions wait.
//! 2. **Swap** (`RegenStep::Swap`): the follower has written a complete table generation from
//!    that database snapshot and renamed it into `tables/`. The core swaps those tables in,
//!    drops the memtable entries of its snapshot that have not changed since (the database
//!    snapshot is at least as new for each), deletes `.folding` (its entries are superseded;
//!    replayed over the new tables they would bring deleted links back), tells every core to
//!    forget its cached answers, and retires the old tables as compaction does.
//!
//! Entries written after the rotation stay: a local write's or a read-through's answer is at
//! least as new as the database snapshot or is corrected by the feed, which resumes from a
//! cursor taken before step 1 and so brings every change committed since. A crash anywhere in
//! between leaves `fleet-regenerate`'s marker, and the next start bootstraps from scratch.

use super::fold::{folding_path, unchanged};
use super::regen_state::Regen;
use super::Owner;
use crate::api::idempotency::IdemTable;
use crate::fleet_mode::messages::RegenStep;
use crate::mesh::Mesh;

impl Owner {
    /// A step of a regeneration, from the follower.
    pub fn on_regen(&mut self, batch: u64, step: RegenStep) {
        match (step, self.regen.take()) {
            (RegenStep::Rotate, None | Some(Regen::Rotating { .. })) => {
                self.regen = Some(Regen::Rotating { batch });
            }
            (RegenStep::Rotate, Some(Regen::Rotated { snapshot })) => {
                // A retry after a failed attempt: the rotation done holds for a later
                // database snapshot too.
                self.regen = Some(Regen::Rotated { snapshot });
                self.regen_ack(batch, true);
            }
            (RegenStep::Swap(tables), Some(Regen::Rotated { snapshot })) => {
                self.regen = Some(Regen::Swapping {
                    batch,
                    snapshot,
                    tables,
                });
            }
            (step, state) => {
                eprintln!(
                    "core {}: regeneration step {step:?} out of order; refused",
                    self.me
                );
                self.regen = state;
                self.regen_ack(batch, false);
            }
        }
    }

    /// Whether a regeneration waits for this core's rotation and nothing stands in its way
    /// (no compaction running, no folded log left by a failed one).
    pub(super) fn regen_may_rotate(&self) -> bool {
        matches!(self.regen, Some(Regen::Rotating { .. }))
            && self.compacting.is_none()
            && !self.compaction.folding
    }

    /// Whether compactions must wait: the log is rotated for a regeneration.
    pub(super) fn regen_holds_compaction(&self) -> bool {
        matches!(
            self.regen,
            Some(Regen::Rotated { .. } | Regen::Swapping { .. })
        )
    }

    /// Step 1 once the log is quiet: rotate, snapshot the memtable, acknowledge. `true` if it
    /// is still waiting for the log to drain.
    pub(super) fn try_regen_rotate(&mut self, now_s: u64, idem: &IdemTable) -> bool {
        let Some(Regen::Rotating { batch }) = self.regen else {
            return false;
        };
        if self.writes.log.is_poisoned() {
            self.regen = None;
            self.regen_ack(batch, false);
            return false;
        }
        if !self.writes.log_is_quiet() {
            self.writes
                .awaiting_rotation
                .get_or_insert_with(Default::default);
            return true;
        }
        if let Err(e) = self.rotate_log(now_s, idem) {
            eprintln!("core {}: regeneration: cannot rotate the log: {e}", self.me);
            self.regen = None;
            self.regen_ack(batch, false);
            return false;
        }
        let snapshot = self.writes.memtable.clone();
        self.regen = Some(Regen::Rotated { snapshot });
        self.regen_ack(batch, true);
        false
    }

    /// Step 2 once the re-logged idempotency records are durable: swap the new generation in.
    pub(super) fn poll_regen_swap(&mut self, mesh: &mut Mesh) {
        if !matches!(self.regen, Some(Regen::Swapping { .. }))
            || self.writes.log.durable_seq() < self.relog_seq
        {
            return;
        }
        let Some(Regen::Swapping {
            batch,
            snapshot,
            tables,
        }) = self.regen.take()
        else {
            return;
        };
        let swapped = tables.len();
        let mut old = Vec::with_capacity(swapped);
        for (shard, table) in tables {
            old.extend(
                self.store
                    .set_table(shard, table)
                    .map(|(t, gen)| (shard, t, gen)),
            );
        }
        self.retire_tables(old, true, mesh);
        let mut dropped = 0usize;
        for (k, e) in snapshot {
            if self
                .writes
                .memtable
                .get(&k)
                .is_some_and(|now| unchanged(now, &e))
            {
                self.writes.memtable.remove(&k);
                dropped += 1;
            }
        }
        if let Some(f) = self.judge.fleet_mut() {
            // An unconfirmed entry dropped here is superseded by the snapshot; no feed poll
            // older than the swap is in flight (the feed is stopped until it is done).
            let memtable = &self.writes.memtable;
            f.unconfirmed.retain(|k, _| memtable.contains_key(k));
            // A write still at the database may be older than what the new tables hold.
            for floor in f.floors.values_mut() {
                *floor = super::fleet_state::SUPERSEDED_BY_REGENERATION;
            }
        }
        let dir = &self.compaction.data_dir;
        let path = folding_path(dir, self.me as u32);
        let ok = match std::fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => {
                eprintln!("core {}: cannot remove {}: {e}", self.me, path.display());
                false
            }
        };
        let ok = ok && shards::durable::sync_dir(&dir.join(shards::log::LOG_DIR_NAME)).is_ok();
        eprintln!(
            "core {}: regeneration swapped in {swapped} shard tables; {dropped} superseded \
             memtable entries dropped, {} kept",
            self.me,
            self.writes.memtable.len()
        );
        self.regen_ack(batch, ok);
    }

    fn regen_ack(&mut self, batch: u64, ok: bool) {
        if let Some(f) = self.judge.fleet_mut() {
            f.batches.insert(batch, (1, false));
        }
        self.feed_row_done(batch, ok);
    }
}
