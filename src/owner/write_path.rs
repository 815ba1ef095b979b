//! The owner's write path: conditional insert, patch, delete and read of the keys this core
//! owns; the log record each write appends; what happens when its batch is durable (memtable
//! apply, LRU invalidation on every other core, the answer) or fails.
//!
//! Not the redirect hot path: allocation is fine here.

use super::fleet_state::Judge;
use super::writes::{
    Durable, MemEntry, Then, MAX_QUEUED_WRITES_PER_KEY, MAX_WRITES_AWAITING_ROTATION,
};
use super::Owner;
use crate::api::request::ExpiryUpdate;
use crate::base::key::InlineKey;
use crate::mesh::{ApiMsg, LinkInfo, Mesh, ReadReq, RedirectMsg, ReplyTo, WriteOutcome, WriteReq};
use shards::log::{Batch, LogOpRef};
use std::io;
use std::os::fd::RawFd;

/// Microseconds into the current second by the system clock (a vDSO read, no syscall): the
/// raw material of a creation tag (`shards::link::CreationTag`).
fn micros_into_second() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros())
}

/// A planned `Put`: the new link, its generated ID, the key to invalidate on other cores, and
/// how to report it.
type Planned = (
    LinkInfo,
    u64,
    Option<InlineKey>,
    fn(Box<LinkInfo>) -> WriteOutcome,
);

impl Owner {
    /// Executes a change on this core, which owns its key: it waits its turn behind the key's
    /// write in flight, then is judged by the fleet database (fleet mode) or here, and logged.
    /// A single node's stats reset logs nothing and waits for no write.
    pub fn on_write(&mut self, reply: ReplyTo, req: WriteReq, now_s: u64, mesh: &mut Mesh) {
        match (&self.judge, &req) {
            (Judge::Local, WriteReq::ResetStats { key, reach }) => {
                self.reset_stats_here(reply, *key, *reach, mesh)
            }
            (Judge::Local, _) => {
                if let Some(req) = self.admit(reply, req, mesh) {
                    self.write_locally(reply, req, now_s, mesh);
                }
            }
            // The fleet database judges it (`fleet.rs`); the key waits like any in flight.
            (Judge::Fleet(_), _) => {
                if let Some(req) = self.admit(reply, req, mesh) {
                    self.submit_fleet_write(reply, req, mesh);
                }
            }
        }
    }

    /// Answers an API read from what this core holds; in fleet mode, a link it does not hold
    /// (yet) may exist, and is asked of the database.
    pub fn on_api_read(&mut self, reply: ReplyTo, req: ReadReq, now_s: u64, mesh: &mut Mesh) {
        let key = req.key();
        let shard = self.router.owner(key.as_bytes()).shard;
        // Expired links keep their stats: a stats read judges them as if at time 0.
        let at = match req {
            ReadReq::StatsOf { .. } => 0,
            ReadReq::Get { .. } | ReadReq::Replay { .. } => now_s,
        };
        let held = self.link_info(shard, &key, at);
        if held.is_none() && self.reads_through() {
            let waiter = match req {
                ReadReq::StatsOf { reach, .. } => {
                    super::fleet_state::ReadWaiter::StatsOf(reply, reach)
                }
                // A replay is never read through: its scope's records are this node's.
                ReadReq::Replay { .. } => return answer(mesh, reply, WriteOutcome::NotFound),
                ReadReq::Get { reach, .. } => super::fleet_state::ReadWaiter::Get(reply, reach),
            };
            return self.read_through(waiter, key, now_s, mesh);
        }
        // A link outside the request's reach is, to it, no link (`api::roles`).
        let link = held.filter(|i| req.reach().admits(i.author));
        let link = match req {
            ReadReq::Replay {
                created_at_s,
                created_tag,
                ..
            } => link.filter(|i| {
                shards::link::same_creation(
                    (i.created_at_s, i.created_tag),
                    (created_at_s, created_tag),
                )
            }),
            ReadReq::Get { .. } | ReadReq::StatsOf { .. } => link,
        };
        answer(mesh, reply, found(link));
    }

    /// A single node's stats reset: nothing to log (the stats live with the aggregator, which
    /// makes the purge durable before the 204).
    fn reset_stats_here(
        &mut self,
        reply: ReplyTo,
        key: InlineKey,
        reach: crate::api::roles::AuthorReach,
        mesh: &mut Mesh,
    ) {
        let shard = self.router.owner(key.as_bytes()).shard;
        let link = self.link_info(shard, &key, 0);
        if !link.is_some_and(|i| reach.admits(i.author)) {
            return answer(mesh, reply, WriteOutcome::NotFound);
        }
        self.broadcast_invalidate(key, reply, WriteOutcome::Deleted, true, mesh);
    }

    /// Lets a write start now, or holds it (a compaction drains the log), queues it behind its
    /// key's write in flight, or refuses it (poisoned log, full queue).
    fn admit(&mut self, reply: ReplyTo, req: WriteReq, mesh: &mut Mesh) -> Option<WriteReq> {
        let refused = if self.writes.log.is_poisoned() {
            WriteOutcome::StorageFailed
        } else if let Some(held) = &mut self.writes.awaiting_rotation {
            // A compaction waits for the log to drain (`compaction.rs`).
            if held.len() < MAX_WRITES_AWAITING_ROTATION {
                held.push_back((reply, req));
                return None;
            }
            WriteOutcome::WriteInProgress
        } else if self.writes.in_flight_keys.contains(&req.key()) {
            // Wait for the in-flight write: judged against the state it leaves, this one
            // then gets the answer it would have got had it come a moment later.
            let queue = self.writes.queued.entry(req.key()).or_default();
            if queue.len() < MAX_QUEUED_WRITES_PER_KEY {
                queue.push_back((reply, req));
                return None;
            }
            WriteOutcome::WriteInProgress
        } else {
            return Some(req);
        };
        let outcome = refused;
        mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        None
    }

    /// A single node's write: judged against the link this core holds, then logged.
    fn write_locally(&mut self, reply: ReplyTo, req: WriteReq, now_s: u64, mesh: &mut Mesh) {
        let key = req.key();
        let shard = self.router.owner(key.as_bytes()).shard;
        // A link outside the request's reach is, to it, no link (`api::roles`).
        let current = self
            .link_info(shard, &key, now_s)
            .filter(|i| req.reach().admits(i.author));
        let exists = current.is_some();
        let planned = match req {
            WriteReq::Create { new, .. } => (!exists).then(|| {
                let tag = self.creations.next(new.created_at_s, micros_into_second());
                let planned: Planned = (new.info(key, tag), new.id, None, WriteOutcome::Created);
                (planned, new.idem)
            }),
            WriteReq::Patch {
                target,
                expiry,
                status,
                behaviour,
                ..
            } => current.map(|mut info| {
                if let Some(b) = behaviour {
                    b.apply(&mut info.behaviour, &mut info.rules, &mut info.labels);
                }
                // Visits counted but not yet durable are in the log before this record.
                if info.behaviour.max_visits != 0 {
                    info.behaviour.visits =
                        self.newest_visits(&key).unwrap_or(info.behaviour.visits);
                }
                if let Some(t) = target {
                    info.target = t;
                }
                if let Some(s) = status {
                    info.status = s;
                }
                match expiry {
                    ExpiryUpdate::Keep => {}
                    ExpiryUpdate::Clear => info.expires_at_s = 0,
                    ExpiryUpdate::Set(t) => info.expires_at_s = t,
                }
                let id = self.writes.id_of(&key);
                let planned: Planned = (info, id, Some(key), WriteOutcome::Updated);
                (planned, None)
            }),
            WriteReq::Delete { .. } if exists => {
                return self.log_delete(reply, shard, key, mesh);
            }
            WriteReq::Delete { .. } => None,
            WriteReq::ResetStats { .. } => unreachable!("a single node's reset logs nothing"),
        };
        let Some((planned, idem)) = planned else {
            // A create of a key that exists, a change of one that does not.
            let outcome = match exists {
                true => WriteOutcome::Exists,
                false => WriteOutcome::NotFound,
            };
            return mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        };
        self.log_put(reply, shard, planned, idem, mesh);
    }

    /// Logs the delete of `key`; its answer waits for the batch to be durable.
    fn log_delete(&mut self, reply: ReplyTo, shard: u32, key: InlineKey, mesh: &mut Mesh) {
        let op = LogOpRef::Delete { key: key.as_str() };
        let Ok(seq) = self.writes.log.append_ref(shard, op) else {
            let outcome = WriteOutcome::StorageFailed;
            return mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        };
        self.writes.in_flight_keys.insert(key);
        self.writes.waiting.push_back(Durable {
            seq,
            apply: Some((key, MemEntry::Deleted { version: 0 })),
            then: Then::Reply {
                reply,
                outcome: WriteOutcome::Deleted,
                invalidate: Some(key),
            },
        });
    }

    /// Logs the planned link (with its idempotency record, if any); its answer waits for the
    /// batch to be durable.
    fn log_put(
        &mut self,
        reply: ReplyTo,
        shard: u32,
        (info, id, invalidate, outcome_of): Planned,
        idem: Option<Box<(String, [u8; 32])>>,
        mesh: &mut Mesh,
    ) {
        let key = info.key;
        let link = info.log_fields(id);
        let op = match &idem {
            None => LogOpRef::Put(link),
            Some(i) => LogOpRef::PutWithIdem {
                link,
                scope: &i.0,
                request_hash: &i.1,
            },
        };
        let Ok(seq) = self.writes.log.append_ref(shard, op) else {
            let outcome = WriteOutcome::StorageFailed;
            return mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        };
        self.writes.in_flight_keys.insert(key);
        let entry = MemEntry::Live {
            info: info.clone(),
            id,
            version: 0,
        };
        self.writes.waiting.push_back(Durable {
            seq,
            apply: Some((key, entry)),
            then: Then::Reply {
                reply,
                outcome: outcome_of(Box::new(info)),
                invalidate,
            },
        });
    }

    /// The log is durable through `seq`: make those writes visible and answer them, then start
    /// the next queued write of each key that is free now.
    pub fn on_durable(&mut self, seq: u64, now_s: u64, mesh: &mut Mesh) {
        let mut freed = Vec::new();
        while self.writes.waiting.front().is_some_and(|d| d.seq <= seq) {
            let d = self.writes.waiting.pop_front().expect("checked");
            if let Some((key, entry)) = d.apply {
                if matches!(d.then, Then::Reply { .. }) {
                    self.writes.in_flight_keys.remove(&key);
                    freed.push(key);
                }
                self.writes.apply_newest(key, entry);
            }
            let (reply, outcome, invalidate) = match d.then {
                Then::Reply {
                    reply,
                    outcome,
                    invalidate,
                } => (reply, outcome, invalidate),
                Then::Feed { batch, key, purge } => {
                    self.invalidate_for_feed(key, batch, purge, mesh);
                    continue;
                }
                Then::Visit { reply, key, answer } => {
                    let answer = Some(answer);
                    mesh.deliver(reply.core(), RedirectMsg::Answer { reply, key, answer });
                    continue;
                }
            };
            match invalidate {
                Some(key) => {
                    let purge = matches!(outcome, WriteOutcome::Deleted);
                    self.broadcast_invalidate(key, reply, outcome, purge, mesh)
                }
                None => mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome }),
            }
        }
        for key in freed {
            self.run_queued(key, now_s, mesh);
        }
    }

    /// Starts the oldest write queued behind `key`, if `key` is free (`on_write` queues again
    /// or answers at once when it is not).
    pub(super) fn run_queued(&mut self, key: InlineKey, now_s: u64, mesh: &mut Mesh) {
        if self.writes.in_flight_keys.contains(&key) {
            return;
        }
        let Some(queue) = self.writes.queued.get_mut(&key) else {
            return;
        };
        let next = queue.pop_front();
        if queue.is_empty() {
            self.writes.queued.remove(&key);
        }
        if let Some((reply, req)) = next {
            self.on_write(reply, req, now_s, mesh);
            // A write answered without logging (404, 409) leaves the key free: go on.
            self.run_queued(key, now_s, mesh);
        }
    }

    /// Every queued write failed to become durable: answer them all with a storage error.
    pub fn on_log_failed(&mut self, mesh: &mut Mesh) {
        self.cut_unacknowledged_log_tail();
        let failed = |mesh: &mut Mesh, reply: ReplyTo| {
            let outcome = WriteOutcome::StorageFailed;
            mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        };
        // Queued and held writes would meet the poisoned log: answer them the same way.
        for (reply, _) in self.writes.awaiting_rotation.take().into_iter().flatten() {
            failed(mesh, reply);
        }
        for (_, queue) in std::mem::take(&mut self.writes.queued) {
            for (reply, _) in queue {
                failed(mesh, reply);
            }
        }
        while let Some(d) = self.writes.waiting.pop_front() {
            match d.then {
                Then::Reply { reply, .. } => {
                    if let Some((key, _)) = d.apply {
                        self.writes.in_flight_keys.remove(&key);
                    }
                    failed(mesh, reply);
                }
                Then::Feed { batch, .. } => self.feed_row_done(batch, false),
                // Not counted, so not sent: a 503 to retry, never a redirect past the limit.
                Then::Visit { reply, key, .. } => super::visits::unavailable(reply, key, mesh),
            }
        }
    }

    /// Cuts the log back to its last durable batch. The failed batch's bytes may well be in the
    /// file (the write succeeded and only the fsync failed, or the page cache still holds them):
    /// left there, recovery would replay writes that were just answered as failed. Blocking
    /// syscalls on the core loop are acceptable here: this runs once, when the log is poisoned
    /// for the rest of the run, and no I/O on the log is in flight (the failed batch completed).
    fn cut_unacknowledged_log_tail(&mut self) {
        let len = self.writes.log.durable_len();
        let fd = self.writes.log_fd;
        // SAFETY: `fd` is this core's open log file descriptor, owned by `Writes` for the run;
        // ftruncate and fdatasync take no pointers.
        let rc = unsafe {
            if libc::ftruncate(fd, len as libc::off_t) == 0 {
                libc::fdatasync(fd)
            } else {
                -1
            }
        };
        if rc != 0 {
            eprintln!(
                "core {}: could not cut the log back to its durable length {len} ({}); a restart may \
                 replay writes that were answered as failed",
                self.me,
                io::Error::last_os_error()
            );
        }
    }

    // ----- the log batch, driven by the core's ring ----------------------------------------

    /// Takes the next batch to write and sync, if none is in flight: the log's fd and the
    /// batch, whose bytes stay put until [`Owner::on_log_sync`].
    pub fn start_log_batch(&mut self) -> Option<(RawFd, &Batch)> {
        let w = &mut self.writes;
        if w.batch.is_some() || w.log.is_poisoned() {
            return None;
        }
        let batch = w.log.take_batch().ok()??;
        w.batch = Some(batch);
        self.batch_started = Some(std::time::Instant::now());
        w.batch_error = None;
        Some((w.log_fd, w.batch.as_ref().expect("just set")))
    }

    /// The batch's write completed (`res` as io_uring reports it).
    pub fn on_log_write(&mut self, res: i32) {
        let w = &mut self.writes;
        let len = w.batch.as_ref().map_or(0, |b| b.bytes.len());
        if res < 0 {
            w.batch_error = Some(io::Error::from_raw_os_error(-res));
        } else if (res as usize) < len {
            w.batch_error = Some(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short log write: {res} of {len} bytes"),
            ));
        }
    }

    /// The batch's fdatasync completed: its writes are durable (or the log is poisoned).
    pub fn on_log_sync(&mut self, res: i32, now_s: u64, mesh: &mut Mesh) {
        let w = &mut self.writes;
        let Some(batch) = w.batch.take() else {
            return;
        };
        let records = batch.last_seq + 1 - batch.first_seq;
        let took_us = self
            .batch_started
            .take()
            .map_or(0, |t| t.elapsed().as_micros() as u64);
        let counts = &mut self.counts;
        counts.log_batches += 1;
        counts.log_records += records;
        counts
            .batch_records
            .observe(&crate::metrics::BATCH_RECORDS_BUCKETS, records, 1);
        counts
            .fsync_us
            .observe(&crate::metrics::FSYNC_US_BUCKETS, took_us, 1);
        let result = if let Some(e) = w.batch_error.take() {
            Err(e)
        } else if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else if w.faults.fail_fsync_after.is_some_and(|n| w.fsyncs_ok >= n) {
            Err(io::Error::other(
                "injected fsync failure (--fault-fail-fsync-after)",
            ))
        } else {
            w.fsyncs_ok += 1;
            Ok(())
        };
        match w.log.complete(batch, result) {
            Ok(durable) => self.on_durable(durable, now_s, mesh),
            Err(e) => {
                eprintln!("core {}: {e}; creates, updates and deletes on this core now fail until restart; redirects continue", self.me);
                self.on_log_failed(mesh);
            }
        }
    }
}

/// Sends `outcome` to the core `reply` names.
fn answer(mesh: &mut Mesh, reply: ReplyTo, outcome: WriteOutcome) {
    mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
}

/// A read's outcome: the link, or 404.
fn found(link: Option<LinkInfo>) -> WriteOutcome {
    link.map_or(WriteOutcome::NotFound, |l| WriteOutcome::Found(Box::new(l)))
}
