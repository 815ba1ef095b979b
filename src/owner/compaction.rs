//! Compaction as the owner drives it: rotate the log, fold a memtable snapshot on a thread
//! (`fold.rs`), swap the new tables in, and unmap the replaced ones once no core can hold an
//! answer pointing into them. The crash-safety argument is in `fold.rs`.

use super::fold::{fold_snapshot, folding_path, unchanged};
use super::Owner;
use crate::api::idempotency::{scope_string, IdemTable};
use crate::mesh::{CacheMsg, Mesh};
use shards::table::Table;
use std::io;

/// After a failed compaction, wait this long before trying again.
pub const COMPACTION_RETRY_MS: u64 = 10_000;

/// When and where a core compacts.
pub struct CompactionSetup {
    pub data_dir: std::path::PathBuf,
    /// Memtable entries that trigger a compaction.
    pub entries: usize,
    /// A log from an interrupted compaction was replayed: compact as soon as possible.
    pub folding: bool,
}

impl Owner {
    /// Starts a compaction if the memtable is big enough. A failure to start is reported and
    /// retried after [`COMPACTION_RETRY_MS`].
    ///
    /// The log is rotated only when it is quiet (no batch in flight, nothing pending or
    /// waiting). Under sustained writes it never is, so once a compaction is due new writes
    /// are held (`Writes::awaiting_rotation`) while the batch in flight and the one pending drain; then
    /// the log rotates and the held writes run. Called at every sweep and after every log
    /// sync, so a compaction starts with at most `entries` plus the writes of two batches plus
    /// those made durable while the previous fold ran (docs/storage.md, "When compaction
    /// runs").
    pub fn maybe_compact(&mut self, now_ms: u64, now_s: u64, idem: &IdemTable, mesh: &mut Mesh) {
        if self.regen_may_rotate() {
            // A regeneration's rotation (`regen.rs`) goes first and drains the log the same way.
            if !self.try_regen_rotate(now_s, idem) {
                self.release_held_writes(now_s, mesh);
            }
            return;
        }
        if let Err(e) = self.try_compact(now_ms, now_s, idem) {
            eprintln!("core {}: cannot start compaction: {e}", self.me);
            self.next_compaction_ms = now_ms + COMPACTION_RETRY_MS;
        }
        let draining_for_rotation = self.compaction_due(now_ms) && !self.writes.log.is_poisoned();
        if !draining_for_rotation {
            // Started, failed to start (retried later) or the log failed: the wait is over.
            self.release_held_writes(now_s, mesh);
        }
    }

    /// Whether a compaction (or a regeneration's rotation) is due and not yet started.
    pub fn compaction_due(&self, now_ms: u64) -> bool {
        if self.regen_may_rotate() {
            return true;
        }
        if self.regen_holds_compaction() {
            return false;
        }
        let due = self.compaction.folding || self.writes.memtable.len() >= self.compaction.entries;
        due && self.compacting.is_none() && now_ms >= self.next_compaction_ms
    }

    fn try_compact(&mut self, now_ms: u64, now_s: u64, idem: &IdemTable) -> io::Result<()> {
        if !self.compaction_due(now_ms) || self.writes.log.is_poisoned() {
            return Ok(());
        }
        if !self.writes.log_is_quiet() {
            self.writes
                .awaiting_rotation
                .get_or_insert_with(Default::default);
            return Ok(());
        }
        self.start_compaction(now_s, idem)
    }

    /// Runs the writes held while the log drained, in arrival order.
    fn release_held_writes(&mut self, now_s: u64, mesh: &mut Mesh) {
        for (reply, req) in self.writes.awaiting_rotation.take().into_iter().flatten() {
            self.on_write(reply, req, now_s, mesh);
        }
    }

    /// Rotates the quiet log (unless a replayed one is being folded again) and starts the fold
    /// of a memtable snapshot on its own thread.
    fn start_compaction(&mut self, now_s: u64, idem: &IdemTable) -> io::Result<()> {
        if !self.compaction.folding {
            self.rotate_log(now_s, idem)?;
        }
        self.compaction.folding = true;
        let snapshot = self.writes.memtable.clone();
        let (dir, router) = (self.compaction.data_dir.clone(), self.router);
        let rx = crate::mesh::service::run_once(
            format!("ricochet-compact-{}", self.me),
            self.doorbells.clone(),
            self.me,
            move || fold_snapshot(&dir, router, snapshot, now_s),
        )?;
        self.compacting = Some(rx);
        self.compaction_started = Some(std::time::Instant::now());
        Ok(())
    }

    /// The current log becomes the one being folded; a fresh log continues the sequence and
    /// carries the live idempotency records (they live only in logs). Blocking file syscalls
    /// on the core: a bounded pause, once per compaction.
    pub(super) fn rotate_log(&mut self, now_s: u64, idem: &IdemTable) -> io::Result<()> {
        let dir = &self.compaction.data_dir;
        let me = self.me as u32;
        let live = shards::log::wal_path(dir, me);
        std::fs::rename(&live, folding_path(dir, me))?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&live)?;
        shards::durable::sync_dir(&dir.join(shards::log::LOG_DIR_NAME))?;
        let w = &mut self.writes;
        let next_seq = w.log.next_seq();
        // SAFETY: the old fd is ours, no batch is in flight on it (checked by the caller), and
        // it is closed exactly once here.
        unsafe { libc::close(w.log_fd) };
        w.log_fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        w.log = shards::log::LogWriter::new(me, 0, next_seq);
        let mut relog_seq = 0;
        for (scope, rec) in idem.live_records(now_s) {
            let scope_s = scope_string(scope);
            let shard = self.router.owner(scope_s.as_bytes()).shard;
            let op = shards::log::LogOpRef::IdemRecord {
                scope: &scope_s,
                request_hash: &rec.request_hash.0,
                response_key: &rec.key,
                created_at_s: rec.created_at_s,
                created_tag: rec.created_tag,
            };
            if let Ok(seq) = w.log.append_ref(shard, op) {
                relog_seq = seq;
            }
        }
        self.relog_seq = relog_seq;
        Ok(())
    }

    /// Swaps in the tables of a finished compaction and drops the folded log.
    pub fn poll_compaction(&mut self, now_ms: u64, mesh: &mut Mesh) {
        self.poll_regen_swap(mesh);
        let Some(rx) = &self.compacting else {
            return;
        };
        if self.writes.log.durable_seq() < self.relog_seq {
            return; // The re-logged idempotency records are not durable yet.
        }
        let Ok(done) = rx.try_recv() else {
            return;
        };
        self.compacting = None;
        if let Some(e) = done.error {
            eprintln!(
                "core {}: compaction failed (will retry; nothing lost, the log is kept): {e}",
                self.me
            );
            self.next_compaction_ms = now_ms + COMPACTION_RETRY_MS;
            return;
        }
        let shards_n = done.tables.len();
        let mut old = Vec::with_capacity(shards_n);
        for (shard, table) in done.tables {
            old.extend(
                self.store
                    .set_table(shard, table)
                    .map(|(t, gen)| (shard, t, gen)),
            );
        }
        self.retire_tables(old, false, mesh);
        let folded = done.snapshot.len();
        self.counts.compactions += 1;
        self.counts.compacted_entries += folded as u64;
        self.counts.compaction_ms += self
            .compaction_started
            .take()
            .map_or(0, |t| t.elapsed().as_millis() as u64);
        for (k, e) in done.snapshot {
            let now = self.writes.memtable.get(&k);
            // Fleet mode: an entry the feed has not confirmed yet stays (`fleet.rs`).
            if now.is_some_and(|now| unchanged(now, &e)) && !self.fleet_keeps(&k) {
                self.writes.memtable.remove(&k);
            }
        }
        let dir = &self.compaction.data_dir;
        let path = folding_path(dir, self.me as u32);
        if let Err(e) = std::fs::remove_file(&path) {
            eprintln!(
                "core {}: cannot remove folded log {}: {e}",
                self.me,
                path.display()
            );
        }
        let _ = shards::durable::sync_dir(&dir.join(shards::log::LOG_DIR_NAME));
        self.compaction.folding = false;
        eprintln!(
            "core {}: compacted {folded} logged links into {shards_n} shard tables",
            self.me
        );
    }

    /// Frees tables a compaction replaced once no core can read them: every core, this one
    /// included, raises its `TableView` past their generations and acknowledges
    /// (`CacheMsg::RetireTables`); the last ack drops them (`crate::base::target`). `forget_all`:
    /// every core also drops every cached answer (a regeneration, `regen.rs`), even if no
    /// table was replaced.
    pub(super) fn retire_tables(
        &mut self,
        old: Vec<(u32, Table, u32)>,
        forget_all: bool,
        mesh: &mut Mesh,
    ) {
        if old.is_empty() && !forget_all {
            return;
        }
        let token = self.token();
        let retired: Box<[(u32, u32)]> = old.iter().map(|&(shard, _, gen)| (shard, gen)).collect();
        let tables = old.into_iter().map(|(_, t, _)| t).collect();
        self.retiring.insert(token, (self.router.cores(), tables));
        let from = self.me as u16;
        for core in 0..self.router.cores() {
            let retired = retired.clone();
            mesh.deliver(
                core,
                CacheMsg::RetireTables {
                    from,
                    token,
                    retired,
                    forget_all,
                },
            );
        }
    }

    /// A core retired the tables of `token`; the last ack frees them.
    pub fn on_retire_ack(&mut self, token: u64) {
        let Some(entry) = self.retiring.get_mut(&token) else {
            return;
        };
        entry.0 -= 1;
        if entry.0 == 0 {
            // No core can resolve an answer into them any more. Unmapped on a thread: munmap
            // of a large populated mapping takes tens of milliseconds (25-52 ms for a core's
            // 41 MB of tables, perf/fleet_regen.sh), a pause no request should wait behind.
            // If no thread can be started, the failed spawn drops them here.
            if let Some((_, tables)) = self.retiring.remove(&token) {
                let _ = std::thread::Builder::new()
                    .name(format!("ricochet-unmap-{}", self.me))
                    .spawn(move || drop(tables));
            }
        }
    }
}
