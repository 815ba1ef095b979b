//! Fleet mode's link services on this node, and what they deliver to the cores: the link
//! writer's answers (`fleet::links`, for the owner that asked) and the change feed (the
//! follower thread here), which brings every node's committed changes to their owner cores.
//!
//! The follower (`ricochet-fleet-feed`) polls `fleet::feed::poll` every
//! [`FEED_POLL_INTERVAL_MS`] (at once again while a poll comes back full), splits the rows by
//! owner core (`Router::owner`), hands each core its part through the fleet outlet (bounded
//! queue and doorbell), and waits until every core acknowledged its part as durable and
//! invalidated (`owner/fleet.rs`). Only then does it save the cursor, atomically
//! ([`CURSOR_FILE`](super::files::CURSOR_FILE)): a restart resumes at the first row not yet durable everywhere on this
//! node, so a row is applied at least once, and applying is idempotent by version.
//!
//! A poll or an apply that fails is retried after [`FEED_RETRY_MS`] from the same cursor;
//! redirects never wait for any of this.

use super::continuity::cursor_behind;
use super::continuity::links_origin;
use super::continuity::unfollowable;
use super::continuity::Followed;
use super::continuity::RegenCause;
use super::files::load_cursor_at;
use super::files::load_cursor_file;
use super::files::save_cursor;
use super::files::save_cursor_file;
use super::files::LinksOrigin;
use super::files::REBOOTSTRAP_MARKER;
use super::files::REGEN_DIR;
use super::files::RESETS_CURSOR_FILE;
use super::messages::feed_link;
use super::messages::FeedAck;
use super::messages::FeedLink;
use super::messages::FleetToCore;
use super::messages::RegenStep;
use super::regen::build_generation;
use super::regen::Generation;
use crate::base::key::InlineKey;
use crate::mesh::router::Router;
use crate::mesh::service::Outlets;
use anyhow::Context;
use fleet::DB_REFUSED_RECHECK_MS;
use shards::datadir::DataDir;
use shards::table::Table;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause between feed polls that find nothing new: the floor of propagation delay between
/// nodes, and one indexed query per node per interval on the database.
pub const FEED_POLL_INTERVAL_MS: u64 = 20;

/// Rows one poll asks for at most; a full poll is followed at once by the next.
pub const FEED_BATCH_ROWS: i64 = 2_000;

/// Longest the follower waits for the cores to make a batch durable before it gives up on
/// the batch and sends it again (a poisoned or stalled core).
pub const FEED_APPLY_TIMEOUT_MS: u64 = 10_000;

/// Pause after a failed poll or apply before the next try.
pub const FEED_RETRY_MS: u64 = 500;

/// How often a node whose feed is held back by an open transaction looks up which backend
/// holds it (`pg_stat_activity`).
pub const XMIN_HOLDER_CHECK_MS: u64 = 1_000;

/// How often the follower looks for stats resets.
pub const RESETS_POLL_INTERVAL_MS: u64 = 100;

/// How often the follower checks that its cursor can be continued ([`unfollowable`]).
pub const HORIZON_CHECK_INTERVAL_S: u64 = 60;

/// Tombstone removal batches one run takes at most.
pub const TOMBSTONE_GC_BATCHES_PER_RUN: usize = 10;

/// What the follower thread needs.
pub struct Follower {
    pub db: fleet::Db,
    /// The database's URL, for the snapshot of a regeneration (its own connection).
    pub url: String,
    pub data_dir: PathBuf,
    pub router: Router,
    pub outlets: Arc<Outlets<FleetToCore>>,
    pub acks: crossbeam::channel::Receiver<FeedAck>,
    pub stats: Arc<fleet::FleetStats>,
    pub stop: Arc<AtomicBool>,
    /// Test-only (`--fault-pause-feed`): poll nothing while this file exists.
    pub pause_file: Option<PathBuf>,
    pub secret: [u8; 32],
    pub namespace: String,
}

impl Follower {
    /// Starts the follower thread from the saved cursor. Nothing here waits for the database
    /// (a node may start while it is down and serve the links it holds): the thread checks the
    /// cursor (`unfollowable`) before its first poll, and regenerates the links first if the
    /// database cannot continue it. Only a dir written before identities were recorded needs
    /// the database here, to learn which one its links came from.
    pub fn spawn(mut self) -> anyhow::Result<()> {
        let (cursor, at) = load_cursor_at(&self.data_dir)?;
        let identity = links_origin(&self.data_dir, &mut self.db)?;
        // Link writes answered before this start are not counted: unknown until a poll.
        let followed = Followed {
            at,
            writes_before: None,
        };
        std::thread::Builder::new()
            .name("ricochet-fleet-feed".into())
            .spawn(move || self.run(cursor, identity, followed))?;
        Ok(())
    }

    /// The feed from `cursor` (of the database `identity`). It polls only once the cursor was
    /// checked against the database since the database last failed to answer: a database that
    /// comes back may be another one or may have gone back in time (a restore, a failover).
    /// `followed` is where in the database's history the node is (`fleet::history`).
    fn run(mut self, cursor: fleet::feed::Cursor, identity: LinksOrigin, followed: Followed) {
        let mut at = Place {
            cursor,
            identity,
            followed,
            batch: 0,
        };
        let mut chores = Chores::new(&self.data_dir);
        let mut phase = Phase::Checking;
        let retry = Duration::from_millis(FEED_RETRY_MS);
        while !self.stop.load(Ordering::Relaxed) {
            if self.pause_file.as_ref().is_some_and(|p| p.exists()) {
                std::thread::sleep(Duration::from_millis(FEED_POLL_INTERVAL_MS));
                // A resumed feed checks the cursor at once, as after an outage.
                phase = phase.unchecked();
                continue;
            }
            // Only against a database checked since it last failed (one the node refuses is
            // not this fleet's to judge by): the IDs stay on hold until then.
            if self.stats.ids_unproven()
                && phase.db_checked()
                && self.stats.refused().is_none()
                && due(&mut chores.ids, retry)
            {
                self.prove_ids();
            }
            phase = match phase {
                Phase::Regenerating { cause, db_checked } => {
                    self.regenerating(cause, db_checked, &mut at, &mut chores)
                }
                Phase::Checking => self.checking(&mut at),
                Phase::Following => self.following(&mut at, &mut chores),
            };
        }
    }

    /// One try at regenerating the links (`regen.rs`): following from the snapshot's cursor,
    /// or regenerating again after a pause.
    fn regenerating(
        &mut self,
        cause: RegenCause,
        db_checked: bool,
        at: &mut Place,
        chores: &mut Chores,
    ) -> Phase {
        match self.regenerate(&mut at.batch, cause, &mut at.identity) {
            Ok((resume, followed)) => {
                at.followed = followed;
                if chores.resets_cursor > resume {
                    // Ahead of a restored database: follow its resets from here.
                    chores.resets_cursor = resume.clone();
                }
                at.cursor = resume;
                Phase::Following // A fresh snapshot's cursor.
            }
            Err(e) => {
                eprintln!(
                    "fleet: regenerating this node's links failed: {e:#}; retrying in {} ms",
                    super::regen::REGEN_RETRY_MS
                );
                self.stats.feed_failed();
                std::thread::sleep(Duration::from_millis(super::regen::REGEN_RETRY_MS));
                Phase::Regenerating { cause, db_checked }
            }
        }
    }

    /// The database checked (is it this fleet's?), then the cursor against it (can it be
    /// continued?).
    fn checking(&mut self, at: &mut Place) -> Phase {
        let retry = |stats: &fleet::FleetStats, ms| {
            stats.feed_failed();
            std::thread::sleep(Duration::from_millis(ms));
            Phase::Checking
        };
        match self.check_database() {
            Ok(None) => self.accept_database(),
            Ok(Some((refusal, why))) => {
                self.refuse_database(refusal, &why);
                std::thread::sleep(Duration::from_millis(DB_REFUSED_RECHECK_MS));
                return Phase::Checking;
            }
            Err(e) => {
                eprintln!("fleet: checking the database failed: {e}; retrying");
                return retry(&self.stats, FEED_RETRY_MS);
            }
        }
        match self.check_cursor(&at.cursor, &at.identity, &mut at.followed) {
            Ok(None) => Phase::Following,
            Ok(Some(cause)) => Phase::Regenerating {
                cause,
                db_checked: false,
            },
            Err(e) => {
                eprintln!("fleet: checking the feed cursor failed: {e}; retrying");
                retry(&self.stats, FEED_RETRY_MS)
            }
        }
    }

    /// The chores that are due, then one poll of the feed and its rows applied.
    fn following(&mut self, at: &mut Place, chores: &mut Chores) -> Phase {
        let due_regen = self.run_chores(
            chores,
            &at.cursor,
            &at.identity,
            &mut at.followed,
            &mut at.batch,
        );
        if let Some(cause) = due_regen {
            return Phase::Regenerating {
                cause,
                db_checked: true,
            };
        }
        // Read before the poll: answers counted here committed before it (`Followed`).
        let writes = self.stats.link_writes_done();
        let polled = fleet::feed::poll_with_horizon(&mut self.db, &at.cursor, FEED_BATCH_ROWS);
        let (rows, held_back) = match self.usable_rows(polled, at, writes) {
            Ok(usable) => usable,
            Err(next) => return next,
        };
        let Some(last) = rows.last().map(|r| r.cursor()) else {
            match held_back {
                true => self.note_held_back(chores),
                false => {
                    chores.caught_up_once = true;
                    self.stats.feed_caught_up(unix_ms());
                }
            }
            std::thread::sleep(Duration::from_millis(FEED_POLL_INTERVAL_MS));
            return Phase::Following;
        };
        let full = rows.len() as i64 == FEED_BATCH_ROWS;
        let n = rows.len() as u64;
        at.batch += 1;
        if !self.apply(at.batch, rows) {
            self.stats.feed_failed();
            std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
            return Phase::Following;
        }
        if let Err(e) = save_cursor(&self.data_dir, &last, at.followed.at.as_ref()) {
            // The rows are durable; only the resume point is not. Keep going from memory:
            // a restart re-applies from the older cursor, which is harmless.
            eprintln!("fleet: cannot save the feed cursor: {e}");
        }
        at.cursor = last;
        self.stats.feed_applied(n);
        if !full && !held_back {
            chores.caught_up_once = true;
            self.stats.feed_caught_up(unix_ms());
        } else if held_back {
            self.note_held_back(chores);
        }
        Phase::Following
    }

    /// A poll's rows and whether an open transaction holds more back, or the phase to go to
    /// instead of applying them: the database is a standby or on another history (check it
    /// again), a removal may have taken a delete not applied (regenerate), or the poll failed.
    fn usable_rows(
        &mut self,
        polled: Result<fleet::feed::Polled, fleet::FleetError>,
        at: &mut Place,
        writes: u64,
    ) -> Result<(Vec<fleet::feed::FeedRow>, bool), Phase> {
        use fleet::history::Where;
        match polled {
            Ok(fleet::feed::Polled {
                at: Where::InRecovery,
                ..
            }) => {
                eprintln!(
                    "fleet: the database is in recovery (a standby): no history to follow \
                     writes on; retrying"
                );
                self.stats.feed_failed();
                std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                Err(Phase::Checking)
            }
            Ok(fleet::feed::Polled {
                at: Where::At(now), ..
            }) if at.followed.at.is_some_and(|f| f.timeline != now.timeline) => {
                // Another history under the same connection (a pooler that followed a
                // failover): nothing of this poll is applied before the check.
                Err(Phase::Checking)
            }
            Ok(fleet::feed::Polled {
                rows,
                tombstones,
                held_back,
                at: now,
            }) => {
                // A server that cannot say (`Where::Unknown`) leaves the identity and
                // transaction-id checks alone to catch a rollback.
                if let Some(now) = now.position() {
                    at.followed.polled(now, writes);
                }
                // Read with the rows: a removal since the last poll may have taken a delete
                // this node had not applied.
                if at.identity.removals != Some(tombstones.removals)
                    && cursor_behind(&at.cursor, tombstones.horizon)
                {
                    eprintln!(
                        "fleet: the feed cursor (transaction {}) is not past the tombstone \
                         horizon ({}) read with this poll: deletes this node has not applied \
                         may be gone; regenerating this node's links",
                        at.cursor.xid, tombstones.horizon
                    );
                    return Err(Phase::Regenerating {
                        cause: RegenCause::Horizon,
                        db_checked: true,
                    });
                }
                Ok((rows, held_back))
            }
            Err(e) => {
                eprintln!("fleet: change feed poll failed: {e}; retrying");
                use fleet::FailureClass::{Connect, Connection};
                if matches!(e.class(), Some(Connect | Connection)) {
                    // What answers next may be a promoted standby: the writer may reach it
                    // before this thread does, so the IDs on hand wait until it is checked.
                    self.stats.suspect_ids();
                }
                self.stats.feed_failed();
                std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                Err(Phase::Checking)
            }
        }
    }

    /// Rows wait behind an open transaction: the node is not caught up (its lag grows), and
    /// the backend holding it is looked up (at most every [`XMIN_HOLDER_CHECK_MS`]) for
    /// `/readyz?verbose` and `/metrics`.
    fn note_held_back(&mut self, chores: &mut Chores) {
        let refresh = Duration::from_millis(XMIN_HOLDER_CHECK_MS);
        if !due(&mut chores.holder, refresh) {
            return;
        }
        match fleet::feed::xmin_holder(&mut self.db) {
            Ok(Some((pid, age_s))) => self
                .stats
                .feed_held_back(pid.max(0) as u64, age_s.max(0) as u64),
            Ok(None) => {}
            Err(e) => eprintln!("fleet: looking up the transaction that holds the feed back: {e}"),
        }
    }

    /// The follower's periodic work besides the feed, each when due: tombstone removal and
    /// the cursor check (`unfollowable`), stats resets, ceilings. `Some`: the cursor cannot
    /// be continued and the links must be regenerated first.
    fn run_chores(
        &mut self,
        c: &mut Chores,
        cursor: &fleet::feed::Cursor,
        identity: &LinksOrigin,
        followed: &mut Followed,
        batch: &mut u64,
    ) -> Option<RegenCause> {
        if due(
            &mut c.horizon,
            Duration::from_secs(HORIZON_CHECK_INTERVAL_S),
        ) {
            let gc_every = Duration::from_secs(fleet::feed::TOMBSTONE_GC_INTERVAL_S);
            if due(&mut c.gc, gc_every) {
                self.remove_old_tombstones();
            }
            // A database that does not answer is no finding here: the poll fails too, and
            // the cursor is checked again before the next one.
            if let Ok(Some(cause)) = self.check_cursor(cursor, identity, followed) {
                return Some(cause);
            }
        }
        if due(
            &mut c.resets,
            Duration::from_millis(RESETS_POLL_INTERVAL_MS),
        ) {
            self.follow_resets(batch, &mut c.resets_cursor);
        }
        let refresh = Duration::from_millis(fleet::ceiling::HIGH_WATER_REFRESH_MS);
        if c.caught_up_once && due(&mut c.ceilings, refresh) {
            match self.send_ceilings() {
                Ok(()) => c.ceilings_failing = false,
                Err(e) if !c.ceilings_failing => {
                    c.ceilings_failing = true;
                    eprintln!("fleet: reading the namespaces' ceilings failed: {e}");
                }
                Err(_) => {}
            }
        }
        None
    }

    /// What a start checks before it serves with the database (`node::requirements`:
    /// the schema version, the fleet's key-space secret, the namespace), checked again each time
    /// the database answers after not answering: the node may have started while it was down
    /// (`DbAtStart::Down`), and what answers now may be an older restore or another fleet's
    /// database. `Some`: why this node must not use it (new keys under another secret could
    /// collide with keys other nodes issue; its rows are not this fleet's links).
    fn check_database(&mut self) -> Result<Option<(fleet::DbRefusal, String)>, fleet::FleetError> {
        let target = self.db.target().to_owned();
        Ok(
            match super::node::requirements(&mut self.db, &self.namespace)? {
                Err(refusal) => Some(refusal),
                Ok(r) if r.secret != self.secret => Some((
                    fleet::DbRefusal::Secret,
                    format!(
                        "the key-space secret in {target} is not the one data dir {} adopted: \
                         it is another fleet's database; point --fleet-pg at this fleet's, or \
                         start the node on an empty data dir",
                        self.data_dir.display()
                    ),
                )),
                Ok(_) => None,
            },
        )
    }

    /// The database failed the check: nothing it says is used (no feed, no IDs, no writes,
    /// no read-through, no API keys) until it passes; the node serves what it holds. Never a
    /// stop: only a start may refuse to run.
    fn refuse_database(&mut self, refusal: fleet::DbRefusal, why: &str) {
        let was = self.stats.refused();
        // Set before it is said: whoever reads the log line finds the node refusing.
        self.stats.set_refused(Some(refusal));
        if was != Some(refusal) {
            eprintln!(
                "fleet: {why}; serving the links this node holds, refusing creates, edits and \
                 lookups of others until the database is put right (checked again every \
                 {DB_REFUSED_RECHECK_MS} ms)"
            );
        }
    }

    /// The database passed the check.
    fn accept_database(&mut self) {
        if let Some(was) = self.stats.refused() {
            if was != fleet::DbRefusal::Unchecked {
                eprintln!("fleet: the database passes its check again; using it");
            }
            self.stats.set_refused(None);
        }
    }

    /// [`unfollowable`] for the running feed, reporting what it found.
    fn check_cursor(
        &mut self,
        cursor: &fleet::feed::Cursor,
        identity: &LinksOrigin,
        followed: &mut Followed,
    ) -> Result<Option<RegenCause>, fleet::FleetError> {
        let writes = self.stats.link_writes_done();
        let timeline = followed.at.map(|a| a.timeline);
        let found = unfollowable(&mut self.db, cursor, identity, followed, writes)?;
        let moved = followed.at.map(|a| a.timeline) != timeline;
        if moved || matches!(found, Some((RegenCause::Rollback, _))) {
            // Another history: the IDs on hand may be ones it hands out again. None is used
            // until the allocation they came from is proven there (issue #24, hole 2).
            self.stats.suspect_ids();
            self.prove_ids();
        }
        let Some((cause, why)) = found else {
            if self.stats.ids_unproven() {
                self.prove_ids();
            }
            return Ok(None);
        };
        eprintln!("fleet: {why}; regenerating this node's links");
        Ok(Some(cause))
    }

    /// Proves that the database holds this node's last confirmed allocation, so the IDs on
    /// hand are still good, or fences the node (`fleet::evidence_lost`). A database that does
    /// not answer leaves them on hold; the run loop asks again.
    fn prove_ids(&mut self) {
        match fleet::evidence_lost(&mut self.db, &self.data_dir, &self.namespace) {
            Ok(None) => self.stats.ids_proven(),
            Ok(Some(reason)) => {
                eprintln!("fleet: FENCED: {reason}");
                self.stats.fence();
                self.stats.ids_proven();
            }
            Err(e) => eprintln!(
                "fleet: checking this node's allocation evidence failed: {e}; generated-key \
                 creates wait"
            ),
        }
    }

    /// Reads the namespaces' ceilings and offers them to every core. Called only once the feed
    /// has caught up since start: a custom alias of the generated shape written before fleet
    /// nodes refused them (schema 5) is then held here, never shed. A failed read (the caller
    /// logs the first of a run) or a core's full queue only lets that core's last read go
    /// stale, and a stale read sheds nothing.
    fn send_ceilings(&mut self) -> Result<(), fleet::FleetError> {
        let c = Arc::new(fleet::ceiling::read(&mut self.db)?);
        for core in 0..self.outlets.cores() {
            let _ = self.outlets.offer(core, FleetToCore::Ceilings(c.clone()));
        }
        Ok(())
    }

    /// Retention: removes tombstones older than `TOMBSTONE_RETENTION_DAYS`, a few batches at
    /// most per run (the next run goes on).
    fn remove_old_tombstones(&mut self) {
        let age = fleet::feed::TOMBSTONE_RETENTION_DAYS * 86_400;
        for _ in 0..TOMBSTONE_GC_BATCHES_PER_RUN {
            match fleet::feed::purge_tombstones(&mut self.db, age) {
                Ok((n, _)) => {
                    self.stats.tombstones_removed(n);
                    if n < fleet::feed::TOMBSTONE_GC_BATCH as u64 {
                        return;
                    }
                }
                Err(e) => {
                    eprintln!("fleet: removing old tombstones failed: {e}; retrying in an hour");
                    return;
                }
            }
        }
    }

    /// Hands each owner core its rows of `batch` and waits until all are durable there.
    fn apply(&mut self, batch: u64, rows: Vec<fleet::feed::FeedRow>) -> bool {
        let mut parts: Vec<Vec<FeedLink>> = vec![Vec::new(); self.outlets.cores()];
        for r in rows {
            let Some(link) = feed_link(&r) else {
                // Not silent: counted (`/metrics`, `/readyz?verbose`) and logged. It comes again
                // once the row is changed (a new xid).
                self.stats.feed_row_unusable();
                eprintln!(
                    "fleet: feed row for {:?} (version {}) is not a link this node can hold \
                     (status {}, created_at {}, expires_at {}); not applied, counted in \
                     ricochet_fleet_feed_rows_unusable_total; fix the row in ricochet_links",
                    r.key, r.version, r.status, r.created_at, r.expires_at
                );
                continue;
            };
            parts[self.router.owner(link.key.as_bytes()).core].push(link);
        }
        let items = parts
            .into_iter()
            .enumerate()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(core, rows)| (core, FleetToCore::Feed { batch, rows }))
            .collect();
        self.deliver_and_wait(batch, items)
    }

    /// Hands each owner core its keys of a batch of stats resets and waits until each core
    /// purged them durably.
    fn apply_resets(&mut self, batch: u64, keys: Vec<String>) -> bool {
        let mut parts: Vec<Vec<InlineKey>> = vec![Vec::new(); self.outlets.cores()];
        for k in keys {
            if let Some(key) = InlineKey::new(k.as_bytes()) {
                parts[self.router.owner(key.as_bytes()).core].push(key);
            }
        }
        let items = parts
            .into_iter()
            .enumerate()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(core, keys)| (core, FleetToCore::Resets { batch, keys }))
            .collect();
        self.deliver_and_wait(batch, items)
    }

    /// Offers each core its item of `batch` and waits for every one's ack (`FeedAck`).
    pub(crate) fn deliver_and_wait(
        &mut self,
        batch: u64,
        items: Vec<(usize, FleetToCore)>,
    ) -> bool {
        while self.acks.try_recv().is_ok() {} // Acks of a batch given up on.
        let mut waiting = 0;
        for (core, mut item) in items {
            let deadline = Instant::now() + Duration::from_millis(FEED_APPLY_TIMEOUT_MS);
            loop {
                match self.outlets.offer(core, item) {
                    Ok(()) => break,
                    Err(back) if Instant::now() < deadline => {
                        item = back;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return false,
                }
            }
            waiting += 1;
        }
        let deadline = Instant::now() + Duration::from_millis(FEED_APPLY_TIMEOUT_MS);
        let mut ok = true;
        while waiting > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.acks.recv_timeout(left) {
                Ok(a) if a.batch == batch => {
                    waiting -= 1;
                    ok &= a.ok;
                }
                Ok(_) => {}
                Err(_) => {
                    eprintln!("fleet: feed batch {batch} not applied within {FEED_APPLY_TIMEOUT_MS} ms; sending it again");
                    return false;
                }
            }
        }
        ok
    }

    /// Follows the stats resets (`ricochet_click_resets`) from `cursor`: each batch is purged
    /// on its owner cores, then the cursor is saved ([`RESETS_CURSOR_FILE`]). `false` if a
    /// batch failed (tried again next time from the same cursor).
    fn follow_resets(&mut self, batch: &mut u64, cursor: &mut fleet::feed::Cursor) -> bool {
        loop {
            let rows = match fleet::feed::poll_resets(&mut self.db, cursor, FEED_BATCH_ROWS) {
                Ok(r) => r,
                Err(_) => return false, // The links poll reports the database.
            };
            let Some(last) = rows.last().map(|r| r.1.clone()) else {
                return true;
            };
            let full = rows.len() as i64 == FEED_BATCH_ROWS;
            *batch += 1;
            if !self.apply_resets(*batch, rows.into_iter().map(|r| r.0).collect()) {
                return false;
            }
            if let Err(e) = save_cursor_file(&self.data_dir, RESETS_CURSOR_FILE, &last, None) {
                eprintln!("fleet: cannot save the stats resets cursor: {e}");
            }
            *cursor = last;
            if !full {
                return true;
            }
        }
    }
}

/// Where the follower is in its cycle. It polls only in `Following`, which it reaches only
/// through a check of the database and the cursor, or a regeneration (a fresh snapshot's
/// cursor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The database is to be checked (at start, after a failure, a pause or another history).
    Checking,
    /// The links are to be regenerated from a snapshot; `db_checked`: the database was checked
    /// since it last failed (the IDs on hand may be proven meanwhile).
    Regenerating { cause: RegenCause, db_checked: bool },
    /// Polling the feed from the cursor.
    Following,
}

impl Phase {
    /// The database was checked since it last failed to answer.
    fn db_checked(self) -> bool {
        match self {
            Phase::Checking => false,
            Phase::Regenerating { db_checked, .. } => db_checked,
            Phase::Following => true,
        }
    }

    /// The phase after a pause: the database must be checked again; a regeneration due stays
    /// due.
    fn unchecked(self) -> Phase {
        match self {
            Phase::Regenerating { cause, .. } => Phase::Regenerating {
                cause,
                db_checked: false,
            },
            Phase::Checking | Phase::Following => Phase::Checking,
        }
    }
}

/// Where the node is in the database's feed: the cursor, the database it belongs to, the
/// place in its history, and the count of row batches sent to the cores.
struct Place {
    cursor: fleet::feed::Cursor,
    identity: LinksOrigin,
    followed: Followed,
    batch: u64,
}

/// When the follower last did each of its periodic chores (`Follower::run_chores`).
struct Chores {
    /// The feed has found the node caught up since start (ceilings are read from then on).
    caught_up_once: bool,
    horizon: Option<Instant>,
    /// The last lookup of the backend holding the feed back (`note_held_back`).
    holder: Option<Instant>,
    gc: Option<Instant>,
    resets: Option<Instant>,
    resets_cursor: fleet::feed::Cursor,
    ceilings: Option<Instant>,
    ceilings_failing: bool,
    /// Last try to prove the IDs on hand (`Follower::prove_ids`).
    ids: Option<Instant>,
}

impl Chores {
    fn new(data_dir: &Path) -> Chores {
        let resets_cursor = load_cursor_file(data_dir, RESETS_CURSOR_FILE)
            .map(|(c, _)| c)
            .unwrap_or_else(|e| {
                eprintln!("fleet: {e}; stats resets are not followed");
                fleet::feed::Cursor {
                    xid: u64::MAX,
                    key: String::new(),
                }
            });
        Chores {
            caught_up_once: false,
            horizon: None,
            holder: None,
            gc: None,
            resets: None,
            resets_cursor,
            ceilings: None,
            ceilings_failing: false,
            ids: None,
        }
    }
}

/// Whether a chore last done at `last` is due again after `every`; if so, it counts as done now.
fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    if last.is_some_and(|t| t.elapsed() < every) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Follower {
    /// Regenerates this node's links from a database snapshot (the module doc's steps) and
    /// returns the cursor the feed resumes from and where in the database's history the
    /// node then is. `batch` numbers the steps' core batches. `identity` becomes the
    /// database's.
    pub(crate) fn regenerate(
        &mut self,
        batch: &mut u64,
        cause: RegenCause,
        identity: &mut super::files::LinksOrigin,
    ) -> anyhow::Result<(fleet::feed::Cursor, Followed)> {
        self.stats.regenerating();
        let started = std::time::Instant::now();
        // Answers counted here committed before the snapshot, which holds them.
        let writes = self.stats.link_writes_done();
        let dir = self.data_dir.clone();
        shards::durable::write_atomic(&dir, REBOOTSTRAP_MARKER, b"rebootstrap\n", 0o644)
            .context("writing the re-bootstrap marker")?;
        // Read before the snapshot (in `build_generation`): it reflects every removal counted.
        let now_identity = super::files::LinksOrigin::now(&mut self.db)?;
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
                crate::base::cpus::yield_thread_to_cores("fleet regeneration");
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
        super::files::save_identity(&dir, &now_identity).context("saving the identity")?;
        super::files::save_cursor(&dir, &resume, at.as_ref()).context("saving the feed cursor")?;
        *identity = now_identity;
        super::files::rebootstrap_done(&dir).context("removing the re-bootstrap marker")?;
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
