//! The owner in fleet mode: the fleet database is the system of record.
//!
//! - An API create, PATCH or DELETE of a key this core owns goes to the link writer
//!   (`fleet::links`, a service thread) instead of being judged here: the database's primary
//!   key decides uniqueness across the fleet. The key is in flight meanwhile, so later writes
//!   to it on this node wait their turn as usual. The database's answer comes back
//!   ([`Owner::on_fleet_written`]); a committed change is then logged here with its version
//!   (`LogOp::FleetPut` / `FleetDelete`), and answered once durable and invalidated, exactly
//!   like a single-node write. 201/200/204 thus mean: committed on the primary, durable and
//!   visible on this node.
//! - A change feed batch (`fleet_mode::follower`, another service thread) brings every node's changes
//!   in commit-safe order. Each row newer than this core's state is logged, applied and
//!   invalidated on every core; the batch is acknowledged only once all of its rows are, so
//!   the follower saves its cursor after they are durable ([`Owner::on_feed_batch`]).
//!
//! Versions make both paths idempotent and order-free: a key's state with the higher version
//! wins, in the memtable (`Writes::apply_newest`) and in replay (`shards::log::NewestWins`).
//! One race is left to close: a feed poll answered just before this node committed a newer
//! version can arrive after it. The memtable guards that while the newer entry is in it;
//! `unconfirmed` keeps such an entry from being folded away (`compaction.rs`) until the feed
//! itself has delivered that version, after which no older poll can still be in flight.

use super::fleet_state::{FleetLinks, Judge, ReadFlight, ReadRow, ReadWaiter};
use super::fleet_state::{MAX_READS_IN_FLIGHT, MAX_READ_WAITERS_PER_KEY};
use super::writes::{Durable, MemEntry, Then};
use super::Owner;
use crate::api::request::ExpiryUpdate;
use crate::base::key::InlineKey;
use crate::fleet_mode::messages::{FeedAck, FeedLink};
use crate::mesh::{Answer, Fetched, RedirectMsg, Target};
use crate::mesh::{ApiMsg, LinkInfo, Mesh, ReplyTo, WriteOutcome, WriteReq};
use fleet::ceiling::Ceilings;
use fleet::links::{
    ExpiryChange, LinkWrite, LinkWritten, ReadAnswer, ReadJob, Stored, WriteAnswer, WriteJob,
};
use shards::link::RedirectStatus;
use shards::log::{LinkFields, LogOpRef};
use std::sync::Arc;
use std::time::Instant;

impl Owner {
    /// Fleet mode: changes are judged by the fleet database, misses asked of it.
    pub fn set_fleet(&mut self, links: FleetLinks) {
        self.judge = Judge::Fleet(Box::new(links));
    }

    /// A new read of the namespaces' ceilings (fleet mode).
    pub fn on_ceilings(&mut self, c: Arc<Ceilings>) {
        if let Some(f) = self.judge.fleet_mut() {
            f.on_ceilings(c);
        }
    }

    /// Whether a local miss is asked of the fleet database (fleet mode).
    #[inline]
    pub fn reads_through(&self) -> bool {
        self.judge.reads_through()
    }

    /// A lookup of a key this node does not hold: ask the database, once per key at a time.
    pub(super) fn read_through(
        &mut self,
        w: ReadWaiter,
        key: InlineKey,
        now_s: u64,
        mesh: &mut Mesh,
    ) {
        let fleet = self.judge.fleet_mut().expect("fleet mode");
        if fleet.stats.refused().is_some() {
            // Its rows may be another fleet's links: answered as if it did not answer.
            return self.answer_read(w, key, &Err(()), now_s, mesh);
        }
        if fleet.never_issued(&key, Instant::now()) {
            fleet.stats.shed();
            return self.answer_read(w, key, &Ok(None), now_s, mesh);
        }
        if let Some(f) = fleet.reads.get_mut(&key) {
            if f.asked.len() + f.later.len() < MAX_READ_WAITERS_PER_KEY {
                return f.later.push(w);
            }
            return self.answer_read(w, key, &Err(()), now_s, mesh);
        }
        self.ask_database(key, vec![w], now_s, mesh);
    }

    /// Queues `key` for the reader with `asked` waiting on its answer; if that cannot be done
    /// now (too many keys in flight, a full queue), they are answered 503.
    fn ask_database(
        &mut self,
        key: InlineKey,
        asked: Vec<ReadWaiter>,
        now_s: u64,
        mesh: &mut Mesh,
    ) {
        let me = self.me as u16;
        let fleet = self.judge.fleet_mut().expect("fleet mode");
        let job = ReadJob {
            core: me,
            key: key.as_str().to_owned(),
        };
        if fleet.reads.len() < MAX_READS_IN_FLIGHT && fleet.reader.try_submit(job).is_ok() {
            let later = Vec::new();
            fleet.reads.insert(key, ReadFlight { asked, later });
        } else {
            for w in asked {
                self.answer_read(w, key, &Err(()), now_s, mesh);
            }
        }
    }

    /// The database answered a read-through: answer the lookups it covers; a "not found" is
    /// given only to those that were waiting when it was asked, the rest ask again.
    pub fn on_read(&mut self, a: ReadAnswer, now_s: u64, mesh: &mut Mesh) {
        let Some(key) = InlineKey::new(a.key.as_bytes()) else {
            return;
        };
        let Some(flight) = self.judge.fleet_mut().and_then(|f| f.reads.remove(&key)) else {
            return;
        };
        let row: ReadRow = match a.result {
            Err(_) => Err(()),
            Ok(Stored::Row { state, deleted }) => Ok(Some((state, deleted))),
            Ok(_) => Ok(None),
        };
        let ReadFlight { asked, later } = flight;
        for w in asked {
            self.answer_read(w, key, &row, now_s, mesh);
        }
        // Those that came after the query was queued may not share its "not found": they ask
        // again, together.
        let mut again = Vec::new();
        for w in later {
            if !self.answer_found(w, key, &row, now_s, mesh) {
                again.push(w);
            }
        }
        if !again.is_empty() {
            self.ask_database(key, again, now_s, mesh);
        }
    }

    /// Answers `w` from the local state or `row`, "not found" included.
    fn answer_read(
        &mut self,
        w: ReadWaiter,
        key: InlineKey,
        row: &ReadRow,
        now_s: u64,
        mesh: &mut Mesh,
    ) {
        if !self.answer_found(w, key, row, now_s, mesh) {
            match w {
                ReadWaiter::Redirect(r, _) => fetched_to(mesh, r, key, Fetched::Absent),
                ReadWaiter::Get(r, _) | ReadWaiter::StatsOf(r, _) => {
                    let outcome = WriteOutcome::NotFound;
                    mesh.deliver(r.core(), ApiMsg::WriteDone { reply: r, outcome });
                }
            }
        }
    }

    /// Answers `w` unless the answer would be "not found" (`false`). The feed (or an API
    /// write) may have brought the key meanwhile: the local state is then the answer.
    fn answer_found(
        &mut self,
        w: ReadWaiter,
        key: InlineKey,
        row: &ReadRow,
        now_s: u64,
        mesh: &mut Mesh,
    ) -> bool {
        let shard = self.shard_of(&key);
        let live = |at: u64| match row {
            Ok(Some((state, false))) if state.expires_at_s == 0 || at < state.expires_at_s => {
                Some(state)
            }
            _ => None,
        };
        match w {
            ReadWaiter::Redirect(r, visit) => {
                let fetched = match (self.local_answer(shard, key.as_bytes(), now_s), row) {
                    (Some(local), _) => Fetched::Found(local),
                    (None, Err(())) => Fetched::Unavailable,
                    (None, Ok(_)) => match live(now_s) {
                        Some(state) => {
                            let info = info_of(key, state);
                            Fetched::Found(Answer::new(
                                Target::Shared(info.target.clone()),
                                info.status,
                                info.expires_at_s,
                                (
                                    &info.behaviour,
                                    crate::base::target::RulesText::of(&info.rules),
                                ),
                            ))
                        }
                        None => return false,
                    },
                };
                // A limited link's visit is counted by the database before its redirect.
                if let (Fetched::Found(a), true) = (&fetched, visit) {
                    if a.limited() {
                        let answer = a.clone();
                        self.submit_fleet_visit(r, key, answer, mesh);
                        return true;
                    }
                }
                fetched_to(mesh, r, key, fetched);
            }
            ReadWaiter::Get(r, reach) | ReadWaiter::StatsOf(r, reach) => {
                // An expired link keeps its stats: the stats API judges as if at time 0.
                let at = if matches!(w, ReadWaiter::Get(..)) {
                    now_s
                } else {
                    0
                };
                let outcome = match (self.link_info(shard, &key, at), row) {
                    (Some(local), _) if reach.admits(local.author) => {
                        WriteOutcome::Found(Box::new(local))
                    }
                    // Outside the key's reach: no link, to it (`api::roles`).
                    (Some(_), _) => WriteOutcome::NotFound,
                    (None, Err(())) => WriteOutcome::DatabaseUnavailable,
                    (None, Ok(_)) => match live(at) {
                        Some(state) => {
                            let info = info_of(key, state);
                            match reach.admits(info.author) {
                                true => WriteOutcome::Found(Box::new(info)),
                                false => WriteOutcome::NotFound,
                            }
                        }
                        None => return false,
                    },
                };
                mesh.deliver(r.core(), ApiMsg::WriteDone { reply: r, outcome });
            }
        }
        true
    }

    /// Whether this key's memtable entry must stay (not folded into a table yet).
    pub fn fleet_keeps(&self, key: &InlineKey) -> bool {
        self.judge
            .fleet()
            .is_some_and(|f| f.unconfirmed.contains_key(key))
    }

    /// Sends an API write to the link writer; the key is in flight until it answers.
    pub(super) fn submit_fleet_write(&mut self, reply: ReplyTo, req: WriteReq, mesh: &mut Mesh) {
        let fleet = self.judge.fleet_mut().expect("fleet mode");
        let key = req.key();
        let write = match &req {
            WriteReq::Create { new, .. } => LinkWrite::Create {
                key: key.as_str().to_owned(),
                target: new.target.to_string(),
                status: new.status.code(),
                created_at_s: new.created_at_s,
                expires_at_s: new.expires_at_s,
                idem: new.idem.clone(),
                author: new.author.as_str().to_owned(),
                behaviour: crate::fleet_mode::messages::behaviour_column(
                    &new.behaviour,
                    &new.rules,
                    &new.labels,
                ),
            },
            WriteReq::Patch {
                target,
                expiry,
                status,
                reach,
                behaviour,
                ..
            } => LinkWrite::Patch {
                key: key.as_str().to_owned(),
                target: target.as_ref().map(|t| t.to_string()),
                status: status.map(|s| s.code()),
                expiry: match expiry {
                    ExpiryUpdate::Keep => ExpiryChange::Keep,
                    ExpiryUpdate::Clear => ExpiryChange::Clear,
                    ExpiryUpdate::Set(t) => ExpiryChange::Set(*t),
                },
                author_only: reach.author_only().to_owned(),
                behaviour: behaviour.as_deref().map(|b| Box::new(behaviour_patch(b))),
            },
            WriteReq::Delete { reach, .. } => LinkWrite::Delete {
                key: key.as_str().to_owned(),
                author_only: reach.author_only().to_owned(),
            },
            WriteReq::ResetStats { reach, .. } => LinkWrite::ResetStats {
                key: key.as_str().to_owned(),
                author_only: reach.author_only().to_owned(),
            },
        };
        if let Some(r) = fleet.stats.refused() {
            let outcome = match r {
                fleet::DbRefusal::Unchecked => WriteOutcome::DatabaseUnavailable,
                r => WriteOutcome::DatabaseRefused(r),
            };
            return mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        }
        let token = fleet.next_token;
        fleet.next_token += 1;
        let job = WriteJob {
            core: self.me as u16,
            token,
            write,
        };
        if fleet.writer.try_submit(job).is_err() {
            let outcome = WriteOutcome::DatabaseUnavailable;
            return mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        }
        fleet.pending.insert(token, (reply, req));
        let holds = self.writes.memtable.get(&key).map_or(0, MemEntry::version);
        fleet.floors.insert(key, holds);
        self.writes.in_flight_keys.insert(key);
    }

    /// A visit of a limited link, counted by the database (`LinkWrite::Visit`, every node's
    /// visits against one count); `answer` is sent once it is counted. The feed then brings
    /// the row's new count to every node, this one included.
    pub(super) fn submit_fleet_visit(
        &mut self,
        reply: ReplyTo,
        key: InlineKey,
        answer: Answer,
        mesh: &mut Mesh,
    ) {
        let fleet = self.judge.fleet_mut().expect("fleet mode");
        if fleet.stats.refused().is_some() {
            return super::visits::unavailable(reply, key, mesh);
        }
        let token = fleet.next_token;
        fleet.next_token += 1;
        let job = WriteJob {
            core: self.me as u16,
            token,
            write: LinkWrite::Visit {
                key: key.as_str().to_owned(),
            },
        };
        if fleet.writer.try_submit(job).is_err() {
            return super::visits::unavailable(reply, key, mesh);
        }
        fleet.visits.insert(token, (reply, key, answer));
    }

    /// The database counted a visit (the redirect goes), found the limit reached (answered
    /// as an expired link), or could not be asked (503, never an uncounted redirect).
    fn on_fleet_visited(
        &mut self,
        (reply, key, answer): (ReplyTo, InlineKey, Answer),
        result: Result<LinkWritten, fleet::FailureClass>,
        mesh: &mut Mesh,
    ) {
        let answer = match result {
            Ok(LinkWritten::Visited { .. }) => Some(answer),
            Ok(LinkWritten::NotFound) => None,
            _ => return super::visits::unavailable(reply, key, mesh),
        };
        mesh.deliver(reply.core(), RedirectMsg::Answer { reply, key, answer });
    }

    /// The database judged a write: log what it committed, or answer what it refused.
    pub fn on_fleet_written(&mut self, answer: WriteAnswer, now_s: u64, mesh: &mut Mesh) {
        let Some(fleet) = self.judge.fleet_mut() else {
            return;
        };
        if let Some(visit) = fleet.visits.remove(&answer.token) {
            return self.on_fleet_visited(visit, answer.result, mesh);
        }
        let Some((reply, req)) = fleet.pending.remove(&answer.token) else {
            return;
        };
        let key = req.key();
        let floor = fleet.floors.remove(&key).unwrap_or(0);
        let refuse = |owner: &mut Owner, mesh: &mut Mesh, outcome: WriteOutcome| {
            owner.writes.in_flight_keys.remove(&key);
            mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
            owner.run_queued(key, now_s, mesh);
        };
        let written = match answer.result {
            Ok(w) => w,
            Err(_) => return refuse(self, mesh, WriteOutcome::DatabaseUnavailable),
        };
        if let Some(outcome) = superseded(&written, &req, floor) {
            // Committed, and already overtaken here: answered, not applied.
            return refuse(self, mesh, outcome);
        }
        let (entry, idem, outcome, invalidate) = match self.committed(written, req) {
            Verdict::Answer(outcome) => return refuse(self, mesh, outcome),
            Verdict::StatsReset => {
                // Every node's rows are gone and the reset is recorded for the other nodes;
                // this node purges its own now (durably) before the 204.
                self.writes.in_flight_keys.remove(&key);
                self.broadcast_invalidate(key, reply, WriteOutcome::Deleted, true, mesh);
                return self.run_queued(key, now_s, mesh);
            }
            Verdict::Log {
                entry,
                idem,
                outcome,
                invalidate,
            } => (entry, idem, outcome, invalidate),
        };
        let op = match &entry {
            MemEntry::Live { info, id, version } => LogOpRef::FleetPut {
                link: link_fields(info, *id),
                version: *version,
                idem: idem.as_deref().map(|(s, h)| (s.as_str(), h)),
            },
            MemEntry::Deleted { version } => LogOpRef::FleetDelete {
                key: key.as_str(),
                version: *version,
            },
        };
        let Ok(seq) = self.writes.log.append_ref(self.shard_of(&key), op) else {
            return refuse(self, mesh, WriteOutcome::StorageFailed);
        };
        let fleet = self.judge.fleet_mut().expect("checked");
        let v = entry.version();
        let seen = fleet.unconfirmed.entry(key).or_insert(v);
        *seen = (*seen).max(v);
        self.writes.waiting.push_back(Durable {
            seq,
            apply: Some((key, entry)),
            then: Then::Reply {
                reply,
                outcome,
                invalidate,
            },
        });
    }

    /// What the database's answer to `req` means here: an answer alone (refused, or an
    /// idempotent replay), a stats reset, or a link state to log and apply.
    fn committed(&self, written: LinkWritten, req: WriteReq) -> Verdict {
        let key = req.key();
        match (written, req) {
            (LinkWritten::Exists, _) => Verdict::Answer(WriteOutcome::Exists),
            (
                LinkWritten::IdemClaimed {
                    request_hash,
                    key: made,
                    created_at_s,
                    same_creation,
                    link,
                },
                WriteReq::Create { new, .. },
            ) => {
                let claim = (request_hash, made, created_at_s, same_creation);
                Verdict::Answer(replayed(new.idem.as_deref(), claim, link))
            }
            (LinkWritten::NotFound, _) => Verdict::Answer(WriteOutcome::NotFound),
            (LinkWritten::Deleted { .. }, WriteReq::ResetStats { .. }) => Verdict::StatsReset,
            (LinkWritten::Created { version }, WriteReq::Create { new, .. }) => {
                let (info, id, idem) = (new.info(key, 0), new.id, new.idem);
                Verdict::Log {
                    outcome: WriteOutcome::Created(Box::new(info.clone())),
                    entry: MemEntry::Live { info, id, version },
                    idem,
                    invalidate: None,
                }
            }
            (LinkWritten::Updated(state), _) => {
                let info = info_of(key, &state);
                Verdict::Log {
                    outcome: WriteOutcome::Updated(Box::new(info.clone())),
                    entry: MemEntry::Live {
                        info,
                        id: self.writes.id_of(&key),
                        version: state.version,
                    },
                    idem: None,
                    invalidate: Some(key),
                }
            }
            (LinkWritten::Deleted { version }, _) => Verdict::Log {
                entry: MemEntry::Deleted { version },
                idem: None,
                outcome: WriteOutcome::Deleted,
                invalidate: Some(key),
            },
            (
                LinkWritten::IdemClaimed { .. }
                | LinkWritten::Created { .. }
                | LinkWritten::Visited { .. },
                _,
            ) => {
                debug_assert!(false, "the database's answer to another request");
                Verdict::Answer(WriteOutcome::DatabaseUnavailable)
            }
        }
    }

    /// A feed batch's rows for this core: log and apply each row newer than what is here.
    pub fn on_feed_batch(&mut self, batch: u64, rows: Vec<FeedLink>) {
        let Some(fleet) = self.judge.fleet_mut() else {
            return;
        };
        fleet.batches.insert(batch, (rows.len() + 1, false));
        // Keys a row of this batch brings live: their rows wait for durability before they
        // reach the memtable, so a later tombstone in the same batch must not take them for
        // keys this node never held.
        let mut live: std::collections::HashSet<InlineKey, ahash::RandomState> = Default::default();
        for row in rows {
            let earlier = live.contains(&row.key);
            if !row.deleted {
                live.insert(row.key);
            }
            self.apply_feed_row(batch, row, earlier);
        }
        // The +1 above keeps the batch open while its rows are queued.
        self.feed_row_done(batch, true);
    }

    /// Stats resets made on other nodes (or this one) for keys this core owns: each key's
    /// clicks are cut on every core and purged durably, then the batch is acknowledged.
    pub fn on_resets(&mut self, batch: u64, keys: Vec<InlineKey>, mesh: &mut Mesh) {
        let Some(fleet) = self.judge.fleet_mut() else {
            return;
        };
        fleet.batches.insert(batch, (keys.len() + 1, false));
        for key in keys {
            self.invalidate_then(key, super::purge_state::Waiter::Feed(batch), true, mesh);
        }
        self.feed_row_done(batch, true);
    }

    /// `earlier`: a row before this one in its batch brought the key live.
    fn apply_feed_row(&mut self, batch: u64, row: FeedLink, earlier: bool) {
        let key = row.key;
        let shard = self.shard_of(&key);
        let local = self.writes.memtable.get(&key).map(MemEntry::version);
        if let Some(f) = self.judge.fleet_mut() {
            if f.unconfirmed.get(&key).is_some_and(|&v| v <= row.version) {
                f.unconfirmed.remove(&key);
            }
            if let Some(floor) = f.floors.get_mut(&key) {
                // Applied below, or already here: either way this core holds it.
                *floor = (*floor).max(row.version);
            }
        }
        // LinksOrigin here, or about to be: a row earlier in the batch, or an API write of this
        // node waiting for its answer or its durability.
        let known = local.is_some()
            || earlier
            || self.writes.in_flight_keys.contains(&key)
            || self.store.get_ref(shard, key.as_bytes()).is_some();
        if local.is_some_and(|v| v >= row.version) || (row.deleted && !known) {
            // Already here (or newer), or a tombstone of a key this node never held.
            return self.feed_row_done(batch, true);
        }
        if self.writes.log.is_poisoned() {
            return self.feed_row_done(batch, false);
        }
        let (appended, entry) = if row.deleted {
            let op = LogOpRef::FleetDelete {
                key: key.as_str(),
                version: row.version,
            };
            let entry = MemEntry::Deleted {
                version: row.version,
            };
            (self.writes.log.append_ref(shard, op), entry)
        } else {
            let info = LinkInfo {
                key,
                target: row.target.clone(),
                status: row.status,
                created_at_s: row.created_at_s,
                created_tag: 0,
                expires_at_s: row.expires_at_s,
                author: row.author,
                behaviour: row.behaviour,
                rules: row.rules.clone(),
                labels: row.labels.clone(),
            };
            let op = LogOpRef::FleetPut {
                link: link_fields(&info, 0),
                version: row.version,
                idem: None,
            };
            let appended = self.writes.log.append_ref(shard, op);
            let entry = MemEntry::Live {
                info,
                id: 0,
                version: row.version,
            };
            (appended, entry)
        };
        let Ok(seq) = appended else {
            return self.feed_row_done(batch, false);
        };
        self.writes.waiting.push_back(Durable {
            seq,
            apply: Some((key, entry)),
            then: Then::Feed {
                batch,
                key,
                purge: row.deleted,
            },
        });
    }

    /// A feed row is durable here: other cores drop the key, then the row is done.
    pub(super) fn invalidate_for_feed(
        &mut self,
        key: InlineKey,
        batch: u64,
        purge: bool,
        mesh: &mut Mesh,
    ) {
        self.invalidate_then(key, super::purge_state::Waiter::Feed(batch), purge, mesh)
    }

    /// One row of `batch` is applied (or failed); the last one acknowledges the batch.
    pub(super) fn feed_row_done(&mut self, batch: u64, ok: bool) {
        let Some(fleet) = self.judge.fleet_mut() else {
            return;
        };
        let Some((left, failed)) = fleet.batches.get_mut(&batch) else {
            return;
        };
        *left -= 1;
        *failed |= !ok;
        if *left > 0 {
            return;
        }
        let failed = *failed;
        fleet.batches.remove(&batch);
        let ack = FeedAck {
            batch,
            core: self.me as u16,
            ok: !failed,
        };
        if fleet.acks.try_send(ack).is_err() {
            // The follower waits for at most one ack per core per batch; a full queue means
            // it gave up on this batch and will send it again.
            eprintln!("core {}: feed ack for batch {batch} dropped", self.me);
        }
    }

    fn shard_of(&self, key: &InlineKey) -> u32 {
        self.router.owner(key.as_bytes()).shard
    }
}

/// What a database answer means for the owner ([`Owner::committed`]).
#[expect(
    clippy::large_enum_variant,
    reason = "a local value, made once per database answer and matched at once; never stored or queued"
)]
enum Verdict {
    /// Answer this, log nothing.
    Answer(WriteOutcome),
    /// A stats reset the database committed: purge this node's clicks of the key.
    StatsReset,
    /// Log and apply this state, then answer (and invalidate the key on every core).
    Log {
        entry: MemEntry,
        idem: Option<Box<(String, [u8; 32])>>,
        outcome: WriteOutcome,
        invalidate: Option<InlineKey>,
    },
}

/// Another request (on any node) holds this create's Idempotency-Key (`claim`: its request
/// hash, the key it made, when, and whether the link is still that creation): the same request
/// replays its link if that link is still the one it created (the same creating transaction;
/// rows older than schema 11: the same second); another request is refused.
fn replayed(
    idem: Option<&(String, [u8; 32])>,
    (request_hash, made, created_at_s, same_creation): ([u8; 32], String, u64, Option<bool>),
    link: Option<fleet::links::LinkState>,
) -> WriteOutcome {
    match (idem, InlineKey::new(made.as_bytes()), link) {
        (Some(i), _, _) if i.1 != request_hash => WriteOutcome::IdemMismatch,
        (_, Some(made), Some(state))
            if same_creation.unwrap_or(state.created_at_s == created_at_s) =>
        {
            WriteOutcome::Created(Box::new(info_of(made, &state)))
        }
        _ => WriteOutcome::NotFound,
    }
}

/// Answers a redirect lookup that waited for the database.
/// The answer to a write the database committed at a version not above `floor` (the newest
/// this core applied for the key while the write was out): what the client is told, without
/// the older state being logged or applied. `None`: apply it as usual.
fn superseded(written: &LinkWritten, req: &WriteReq, floor: u64) -> Option<WriteOutcome> {
    let key = req.key();
    let (version, outcome) = match (written, req) {
        (LinkWritten::Deleted { .. }, WriteReq::ResetStats { .. }) => return None,
        (LinkWritten::Created { version }, WriteReq::Create { new, .. }) => {
            (*version, WriteOutcome::Created(Box::new(new.info(key, 0))))
        }
        (LinkWritten::Updated(state), _) => (
            state.version,
            WriteOutcome::Updated(Box::new(info_of(key, state))),
        ),
        (LinkWritten::Deleted { version }, _) => (*version, WriteOutcome::Deleted),
        _ => return None,
    };
    (version <= floor).then_some(outcome)
}

fn fetched_to(mesh: &mut Mesh, reply: ReplyTo, key: InlineKey, fetched: Fetched) {
    let msg = RedirectMsg::Fetched {
        reply,
        key,
        fetched,
    };
    mesh.deliver(reply.core(), msg);
}

/// A link as the database holds it, as the API answers it.
fn info_of(key: InlineKey, state: &fleet::links::LinkState) -> LinkInfo {
    // The nodes write only what they validated; a row changed around them reads as none.
    let (behaviour, rules, labels) =
        crate::fleet_mode::messages::behaviour_of(state.behaviour.as_deref()).unwrap_or((
            shards::behaviour::Behaviour::NONE,
            shards::rules::Rules::NONE,
            shards::labels::Labels::NONE,
        ));
    LinkInfo {
        key,
        target: Arc::from(state.target.as_str()),
        status: RedirectStatus::from_code(state.status).unwrap_or_default(),
        created_at_s: state.created_at_s,
        created_tag: 0,
        expires_at_s: state.expires_at_s,
        // The column's CHECK admits only key ids; anything else reads as no author.
        author: crate::fleet_mode::messages::author_of(&state.author)
            .unwrap_or(shards::link::Author::NONE),
        behaviour,
        rules,
        labels,
    }
}

/// A PATCH's behaviour change as the database merges it: the members it sets, the members
/// it removes. A new `max_visits` keeps the fleet's count (`visits` is never sent); removing
/// the limit removes the count too, as on a single node.
fn behaviour_patch(u: &crate::api::request::BehaviourUpdate) -> fleet::links::BehaviourPatch {
    let mut set = shards::behaviour::Behaviour::NONE;
    let mut unset = Vec::new();
    let mut drop = |name: &str| unset.push(name.to_owned());
    match u.max_visits {
        Some(0) => {
            drop("max_visits");
            drop("visits");
        }
        Some(n) => set.max_visits = n,
        None => {}
    }
    match u.valid_since_s {
        Some(0) => drop("valid_since"),
        Some(t) => set.valid_since_s = t,
        None => {}
    }
    match u.forward_query {
        Some(None) => drop("forward_query"),
        Some(f) => set.forward_query = f,
        None => {}
    }
    match u.disabled {
        Some(None) => drop("disabled"),
        Some(d) => set.disabled = d,
        None => {}
    }
    match u.crawlable {
        Some(false) => drop("crawlable"),
        Some(true) => set.crawlable = true,
        None => {}
    }
    let rules = match &u.rules {
        Some(r) if r.is_empty() => {
            drop("redirect_rules");
            shards::rules::Rules::NONE
        }
        Some(r) => r.clone(),
        None => shards::rules::Rules::NONE,
    };
    // Title and tags are set or removed one at a time: a patch of one keeps the other.
    if let Some(None) = &u.title {
        drop("title");
    }
    if u.tags.as_ref().is_some_and(Vec::is_empty) {
        drop("tags");
    }
    let labels = shards::labels::Labels::new(
        u.title.clone().flatten().as_deref(),
        u.tags.as_deref().unwrap_or(&[]),
    )
    .expect("a patch's labels were normalized and counted");
    let set = shards::behaviour::json_object(&set, &rules, &labels).map(|mut obj| {
        obj.remove("visits");
        serde_json::Value::Object(obj).to_string()
    });
    let (retag_from, retag_to) = match &u.retag {
        Some(r) => (r.from.clone(), r.to.clone()),
        None => (Vec::new(), None),
    };
    fleet::links::BehaviourPatch {
        set,
        unset,
        retag_from,
        retag_to,
    }
}

fn link_fields(info: &LinkInfo, id: u64) -> LinkFields<&str> {
    LinkFields {
        key: info.key.as_str(),
        target: &info.target,
        status: info.status,
        expires_at_s: info.expires_at_s,
        created_at_s: info.created_at_s,
        flags: 0,
        id,
        author: info.author,
        behaviour: info.behaviour,
        rules: info.rules.clone(),
        labels: info.labels.clone(),
    }
}
