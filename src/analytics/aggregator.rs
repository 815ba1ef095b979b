//! One aggregator thread per core (`ricochet-clicks-<core>`), in two roles:
//!
//! - **source**: takes its core's batches, classifies each distinct user agent and referrer
//!   once (`classify`), hashes visitors under the day's salt (`salts`), groups the clicks by
//!   the core that owns each key (`Router::owner`) and sends every owner one message per batch
//!   (an empty one for a tick, which still says how far that core's clicks have come);
//! - **owner**: merges what every source sends it for its keys into its `ClickStore`, logs
//!   the merged deltas in its click log with one fdatasync per [`CLICK_SYNC_INTERVAL_MS`]
//!   (group commit), snapshots the log when it grows, applies retention, answers stats
//!   queries and purges.
//!
//! Nothing here runs on a core: blocking (fsync, a full peer queue, the salt file's mutex) is
//! fine. Between aggregators nothing blocks either: a full peer queue keeps the message in an
//! outbox and the source stops taking batches until it drains, which the core sees as no clean
//! batch (clicks dropped and counted), so the core never waits and two aggregators never wait
//! on each other.

use super::classify::{self, Classifier, StringCache, UaClass, Vocabulary};
use super::combiner::{Batch, CoreMsg, StrKind};
use super::salts::SaltBook;
use super::stats::{self, StatsQuery};
use super::step_aside::StepAside;
use super::{ClickStats, Control, ToCore, CLICK_SYNC_INTERVAL_MS};
use crate::mesh::router::Router;
use crate::mesh::service::Outlets;
use crossbeam::channel::{Receiver, Sender, TrySendError};
use shards::clicks::codec;
use shards::clicks::files::ClickLog;
use shards::clicks::visits::Visit;
use shards::clicks::{hll, Delta, FacetCount, FacetKind, Record};
use std::collections::{HashMap, VecDeque};
use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

/// Messages one aggregator queues for another before the sender stops taking batches.
pub const MAX_PEER_OUTBOX: usize = 64;
/// Capacity of the sync buffer kept for the next sync (a larger one, after a burst, is freed).
pub const SYNC_BUFFER_KEPT_BYTES: usize = 16 << 20;
/// A guess at a link-day's bytes in a snapshot, to make room for a first snapshot's body on
/// the service thread (later ones take the last one's size).
pub const SNAPSHOT_BYTES_PER_LINK_DAY_GUESS: usize = 128;
/// How long a purged key's filter (what keeps late batches from reviving it) lives at most
/// when some core never sends again.
pub const PURGE_FILTER_TTL: Duration = Duration::from_secs(600);

/// Deltas one source sends one owner for one batch.
pub enum PeerMsg {
    Deltas {
        from: u16,
        seq: u64,
        sealed_ms: u64,
        deltas: Vec<Delta>,
        /// The visit log's records of these clicks (empty with the log off).
        visits: Vec<Visit>,
    },
    /// The source's core stopped: nothing more comes from it.
    Closed { from: u16 },
}

/// The ends one aggregator thread holds.
pub struct AggregatorSetup {
    pub me: usize,
    pub router: Router,
    pub full: bool,
    pub retention_days: u32,
    pub from_core: Receiver<CoreMsg>,
    pub clean: Sender<Box<Batch>>,
    pub peers_rx: Receiver<PeerMsg>,
    pub peers_tx: Vec<Sender<PeerMsg>>,
    pub control: Receiver<Control>,
    pub replies: Arc<Outlets<ToCore>>,
    pub store: shards::clicks::ClickStore,
    pub log: ClickLog,
    pub salts: Arc<Mutex<SaltBook>>,
    pub classifier: Arc<Classifier>,
    pub epoch: Arc<AtomicU64>,
    pub stats: Arc<ClickStats>,
    /// `--geoip`: the database countries come from (`ZZ` without one, or for an address it
    /// does not know).
    pub geoip: Option<Arc<maxminddb::Reader<Vec<u8>>>>,
    /// Test only: every click log write fails.
    pub fail_sync: bool,
    /// Fleet mode: where durable states go to be flushed to the fleet database
    /// (`analytics::fleet`).
    pub fleet: Option<Sender<super::fleet::FlushPart>>,
    /// The cores' doorbells: where each core runs and whether it is parked (`step_aside`).
    pub bells: Arc<crate::mesh::Doorbells>,
    /// `--service-cpus`: the CPUs this thread is pinned to (none of them a core's).
    pub cpus: Option<Vec<usize>>,
    /// The aggregators run on their cores (`analytics::on_core`): a message to another one
    /// rings its core's doorbell, or a parked core would not see it before its park ends.
    pub on_cores: bool,
    /// The click log's size past which a snapshot replaces it.
    pub snapshot_bytes: u64,
    /// `--visit-log-days`: this core's visit log.
    pub visits: Option<super::visit_log::VisitLog>,
}

/// What filters a purged key: per source core, the last message number holding clicks of
/// the deleted link.
struct Filter {
    cutoffs: Box<[u64]>,
    since: Instant,
}

/// One aggregator's state.
pub struct Aggregator {
    s: AggregatorSetup,
    outbox: Vec<VecDeque<PeerMsg>>,
    filters: HashMap<shards::clicks::ShortKey, Filter>,
    /// Per source: the last message merged and its seal time (unix ms).
    last_seq: Vec<u64>,
    through_ms: Vec<u64>,
    cache: StringCache,
    values: Vocabulary,
    /// Shared values of the classes and facets every click may have.
    no_ua: UaClass,
    unknown_ua: UaClass,
    direct: Arc<str>,
    unknown_referrer: Arc<str>,
    country: Arc<str>,
    /// The visit log's text of an absent user agent or referrer.
    no_text: Arc<str>,
    next_sync: Instant,
    today: shards::clicks::Day,
    own_closed: bool,
    peers_closed: usize,
    /// A sync failed: these frames are written first by the next one.
    retry: Vec<u8>,
    /// The sync's buffer, kept between syncs (growing it anew each second cost page faults
    /// and copies on the cores' CPUs).
    buf: Vec<u8>,
    failing: bool,
    /// Log bytes past which the next snapshot is written.
    snapshot_after: u64,
    /// `--click-export`, and the lines of a sync that failed (written after the retry).
    exporter: Option<super::export::Exporter>,
    retry_lines: (Vec<u8>, u64),
    /// Fleet mode: states and purges not yet handed to the flusher (its queue was full, or
    /// the sync that made them durable failed and is retried first).
    fleet_part: super::fleet::FlushPart,
    fleet_unsynced: super::fleet::FlushPart,
    /// Merged deltas and their lists, reused by the next batch's classification.
    spare: Spare,
    /// On a core: the message taken and not finished yet (`step` does it a slice at a time).
    job: Option<Job>,
    jobs_since_control: u32,
    /// On a core: the visitor salt of the day it was last asked for (`Chore::Salt`).
    salt: Option<(shards::clicks::Day, [u8; 16])>,
    /// On a core: the incremental snapshot being encoded, when the queues leave time for it.
    snap: Option<SnapJob>,
    last_snapshot_bytes: usize,
}

/// A message taken from a queue whose work is not finished: on a core, the work is done a
/// slice at a time between requests ([`Aggregator::step`]).
enum Job {
    /// A batch of this core's clicks.
    Batch(BatchJob),
    /// Deltas for this owner.
    Merge(MergeJob),
    /// The once-a-second sync's encoding (its writes go to the service thread).
    Sync(SyncJob),
}

/// An incremental snapshot begun on the service thread and encoded by the core: the log it
/// starts, the slab place below which links are still to be encoded, the body so far.
pub struct SnapJob {
    next: u64,
    cursor: usize,
    body: Vec<u8>,
}

/// A sync in progress: the click log frames, export lines and 404 records of the link-days
/// drained so far.
pub struct SyncJob {
    bytes: Vec<u8>,
    lines: Vec<u8>,
    n: u64,
    now: u64,
    nf: Vec<Record>,
}

/// A batch of this core's clicks: strings learned and entries classified so far.
struct BatchJob {
    b: Box<Batch>,
    learned: usize,
    classified: usize,
    salt: Option<[u8; 16]>,
    out: Vec<Vec<Delta>>,
    /// Per owner, the visit log's records (no owner's with the log off).
    visits: Vec<Vec<Visit>>,
}

/// Deltas for this owner, merged from the back (merges of one message commute).
struct MergeJob {
    from: u16,
    seq: u64,
    sealed_ms: u64,
    deltas: Vec<Delta>,
    visits: Vec<Visit>,
}

/// What a slice of work on a core came to.
pub enum Step {
    /// Work was done and more may be waiting: call again at the next idle moment.
    Worked,
    /// Nothing to do: the queues are empty.
    Idle,
    /// What comes next blocks or takes long (file writes and fsyncs, a query over the whole
    /// store, a new day's salt): the aggregator goes to its service thread for this chore.
    Away(Chore),
}

/// Work an aggregator does on its service thread, never on a core.
pub enum Chore {
    /// The once-a-second sync's writes (the click log's group commit, exports, the fleet's
    /// part) after the core encoded it, then retention and purge filters.
    Sync(SyncJob),
    /// A purge or a stats query.
    Control(Control),
    /// The day's visitor salt, from the shared book (made and saved for a new day: a file
    /// write), kept by the aggregator for its core.
    Salt(shards::clicks::Day),
    /// The core stops: what it took is finished, then the thread's loop runs to the end.
    Finish,
    /// An incremental snapshot's body is encoded: written, the older logs removed.
    EndSnapshot(SnapJob),
}

/// Items (strings learned, clicks classified, deltas merged) between two readings of the
/// clock in a slice of work on a core.
const ITEMS_PER_CLOCK_CHECK: usize = 8;

/// Jobs a core's aggregator takes from its queues before it looks at its control queue
/// regardless (otherwise it looks only when they are empty).
const JOBS_BEFORE_CONTROL: u32 = 64;

/// What the next slice on a core does.
enum Next {
    Job(Job),
    Chore(Chore),
    /// A message handled whole (a tick, a closing): look again.
    Again,
    Nothing,
}

/// How far a slice got with the current job.
enum Progress {
    Done,
    Paused,
    Needs(Chore),
}

/// Most merged deltas an aggregator keeps for reuse: two full batches' worth.
pub const MAX_SPARE_DELTAS: usize = 2 * super::combiner::BATCH_MAX_ENTRIES;

/// Most emptied delta lists an aggregator keeps for reuse.
const MAX_SPARE_LISTS: usize = 64;

/// Deltas already merged, kept with their vectors' capacity: classifying a click reuses one
/// instead of allocating the delta's three vectors and growing the owner's list (malloc and
/// free were a sixth of an aggregator's CPU at 20k clicks/s, perf/reports/
/// 2026-12-05-issue23-aggregator-allocations.md), CPU the cores' CPUs then lack.
#[derive(Default)]
struct Spare {
    deltas: Vec<Delta>,
    lists: Vec<Vec<Delta>>,
}

impl Spare {
    /// A delta with no clicks, sketches or facets (its key and day are the caller's to set).
    fn delta(&mut self) -> Delta {
        self.deltas.pop().unwrap_or_default()
    }

    /// An empty list for one owner's deltas of a batch.
    fn list(&mut self) -> Vec<Delta> {
        self.lists.pop().unwrap_or_default()
    }

    /// A merged delta: kept (up to [`MAX_SPARE_DELTAS`]) for the next batches, emptied at
    /// once (a kept facet value would keep an interned string alive past its freeze). Called
    /// once per delta inside the merge loop, between its yield points: emptying a whole
    /// batch in one go held the CPU from a core for up to a batch's worth of frees.
    fn keep(&mut self, mut d: Delta) {
        if self.deltas.len() >= MAX_SPARE_DELTAS {
            return;
        }
        d.clear();
        self.deltas.push(d);
    }

    /// A list whose deltas were all taken: kept (up to [`MAX_SPARE_LISTS`]) for its room.
    fn keep_list(&mut self, list: Vec<Delta>) {
        debug_assert!(list.is_empty());
        if self.lists.len() < MAX_SPARE_LISTS {
            self.lists.push(list);
        }
    }
}

impl Aggregator {
    pub fn new(s: AggregatorSetup, exporter: Option<super::export::Exporter>) -> Aggregator {
        let n = s.router.cores();
        Aggregator {
            outbox: (0..n).map(|_| VecDeque::new()).collect(),
            filters: HashMap::new(),
            last_seq: vec![0; n],
            // No click of this process was answered before its aggregators started (the cores
            // start after them), so "complete before now - 1 ms" holds until a source says
            // more. Not `now`: a click in this same millisecond may not be in yet (the
            // pipeline test found that).
            through_ms: vec![super::combiner::unix_ms().saturating_sub(1); n],
            cache: StringCache::default(),
            values: Vocabulary::default(),
            no_ua: UaClass::no_ua(),
            unknown_ua: UaClass::unknown(),
            direct: Arc::from(shards::clicks::DIRECT_REFERRER),
            unknown_referrer: Arc::from("(unknown)"),
            country: Arc::from(super::NO_COUNTRY),
            no_text: Arc::from(""),
            next_sync: Instant::now() + Duration::from_millis(CLICK_SYNC_INTERVAL_MS),
            today: shards::clicks::day_of(shards::timefmt::now_s()),
            own_closed: false,
            peers_closed: 0,
            failing: false,
            retry: Vec::new(),
            buf: Vec::new(),
            snapshot_after: s.snapshot_bytes,
            exporter,
            retry_lines: (Vec::new(), 0),
            fleet_part: super::fleet::FlushPart::default(),
            fleet_unsynced: super::fleet::FlushPart::default(),
            spare: Spare::default(),
            job: None,
            jobs_since_control: 0,
            salt: None,
            snap: None,
            last_snapshot_bytes: 0,
            s,
        }
    }

    /// The thread's loop; returns once its core and every peer closed.
    pub fn run(mut self) {
        self.prepare();
        self.serve();
    }

    /// On the service thread, before anything else: its CPUs, its scheduling policy, the
    /// store's yield point, retention at start (a snapshot if anything is dropped).
    pub fn prepare(&mut self) {
        super::step_aside::mark_service_thread();
        if let Some(cpus) = &self.s.cpus {
            if let Err(e) = crate::base::cpus::pin_current_thread(cpus) {
                eprintln!(
                    "clicks core {}: cannot pin the aggregator to --service-cpus {cpus:?} ({e}); it shares the cores' CPUs",
                    self.s.me
                );
            }
        }
        // One yield point for this thread's long loops and the store's own (logging,
        // snapshots, retention, whole-store queries): the CPU goes back to a core that wants it.
        let mut pause = StepAside::new(self.s.bells.clone(), yield_to_cores(self.s.me));
        self.s.store.set_pause(Box::new(move || pause.point()));
        self.apply_retention(true);
    }

    /// The service thread's loop (after [`Aggregator::prepare`]); returns once its core and
    /// every peer closed.
    pub fn serve(mut self) {
        self.finish_job();
        let n = self.s.router.cores();
        loop {
            if self.own_closed && self.peers_closed + 1 >= n && self.outbox_empty() {
                // Everything any core counted has arrived: make it durable and stop.
                while let Ok(c) = self.s.control.try_recv() {
                    self.on_control(c);
                }
                self.sync();
                if let Some(x) = &mut self.exporter {
                    if let Err(e) = x.close() {
                        eprintln!("clicks core {}: closing the export file: {e}", self.s.me);
                    }
                }
                return;
            }
            let timeout = if self.outbox_empty() {
                self.next_sync.saturating_duration_since(Instant::now())
            } else {
                Duration::from_millis(1)
            };
            let take_batches = !self.own_closed && self.outbox_len() < MAX_PEER_OUTBOX;
            let never = crossbeam::channel::never();
            let from_core = if take_batches {
                &self.s.from_core
            } else {
                &never
            };
            crossbeam::select! {
                recv(from_core) -> m => match m {
                    Ok(m) => self.on_core_msg(m),
                    Err(_) => self.close_source(),
                },
                recv(self.s.peers_rx) -> m => if let Ok(m) = m { self.on_peer_msg(m) },
                recv(self.s.control) -> c => if let Ok(c) = c { self.on_control(c) },
                default(timeout) => {}
            }
            // A batch's own deltas, when they were left as a job (`on_cores`).
            self.finish_job();
            self.flush_outbox();
            if Instant::now() >= self.next_sync {
                self.sync();
                self.apply_retention(false);
                self.expire_filters();
            }
        }
    }

    // ----- on a core: slices of work between requests (`analytics::on_core`) -----------

    /// Works until `deadline` (checked every [`ITEMS_PER_CLOCK_CHECK`] items) on what the
    /// queues hold, without blocking and without a syscall: classifying this core's batches
    /// and merging the deltas it owns. Whatever would block or take long is returned as a
    /// [`Chore`] for the service thread, with the aggregator.
    pub fn step(&mut self, deadline: Instant) -> Step {
        let mut worked = false;
        loop {
            if self.job.is_none() {
                match self.next_job() {
                    Next::Job(j) => self.job = Some(j),
                    Next::Chore(c) => return Step::Away(c),
                    Next::Again => {
                        worked = true;
                        continue;
                    }
                    Next::Nothing => {
                        if self.snap.is_some() {
                            return match self.continue_snapshot(deadline) {
                                Some(chore) => Step::Away(chore),
                                None => Step::Worked,
                            };
                        }
                        return if worked { Step::Worked } else { Step::Idle };
                    }
                }
            }
            worked = true;
            match self.continue_job(Some(deadline)) {
                Progress::Done if Instant::now() < deadline => {}
                Progress::Done | Progress::Paused => return Step::Worked,
                Progress::Needs(c) => return Step::Away(c),
            }
        }
    }

    /// The next message to work on: deltas from peers, then this core's batches, then control
    /// messages (a query answered after what arrived before it, as the thread's loop does
    /// over time), which also come first after [`JOBS_BEFORE_CONTROL`] jobs so a busy core
    /// does not keep them waiting.
    fn next_job(&mut self) -> Next {
        if Instant::now() >= self.next_sync {
            return Next::Job(Job::Sync(self.begin_sync()));
        }
        self.jobs_since_control += 1;
        if self.jobs_since_control > JOBS_BEFORE_CONTROL {
            self.jobs_since_control = 0;
            if let Ok(c) = self.s.control.try_recv() {
                return Next::Chore(Chore::Control(c));
            }
        }
        match self.next_message() {
            Next::Nothing => match self.s.control.try_recv() {
                Ok(c) => {
                    self.jobs_since_control = 0;
                    Next::Chore(Chore::Control(c))
                }
                Err(_) => Next::Nothing,
            },
            next => next,
        }
    }

    /// The next message from a peer or this core.
    fn next_message(&mut self) -> Next {
        self.flush_outbox();
        match self.s.peers_rx.try_recv() {
            Ok(PeerMsg::Deltas {
                from,
                seq,
                sealed_ms,
                deltas,
                visits,
            }) => {
                return Next::Job(Job::Merge(MergeJob {
                    from,
                    seq,
                    sealed_ms,
                    deltas,
                    visits,
                }))
            }
            Ok(PeerMsg::Closed { .. }) => {
                self.peers_closed += 1;
                return Next::Again;
            }
            Err(_) => {}
        }
        if self.own_closed || self.outbox_len() >= MAX_PEER_OUTBOX {
            return Next::Nothing;
        }
        match self.s.from_core.try_recv() {
            Ok(CoreMsg::Batch(b)) => {
                self.begin_batch(&b);
                let out = self.owner_lists();
                let visits = self.owner_visit_lists();
                Next::Job(Job::Batch(BatchJob {
                    b,
                    learned: 0,
                    classified: 0,
                    salt: None,
                    out,
                    visits,
                }))
            }
            Ok(CoreMsg::Tick { seq, sealed_ms }) => {
                self.send_all(seq, sealed_ms);
                Next::Again
            }
            Ok(CoreMsg::Closed) => {
                self.close_source();
                Next::Again
            }
            Err(crossbeam::channel::TryRecvError::Empty) => Next::Nothing,
            Err(crossbeam::channel::TryRecvError::Disconnected) => {
                self.close_source();
                Next::Again
            }
        }
    }

    /// Works on the current job until it is done or `deadline` passes (`None`: no deadline,
    /// on the service thread).
    fn continue_job(&mut self, deadline: Option<Instant>) -> Progress {
        let late = move |n: usize| {
            n % ITEMS_PER_CLOCK_CHECK == 0 && deadline.is_some_and(|d| Instant::now() >= d)
        };
        match self.job.take() {
            None => Progress::Done,
            Some(Job::Batch(j)) => self.continue_batch(j, late),
            Some(Job::Merge(j)) => self.continue_merge(j, late),
            Some(Job::Sync(mut j)) => {
                let mut parts = 0;
                while !self.encode_some(&mut j, ITEMS_PER_CLOCK_CHECK) {
                    parts += 1;
                    if late(parts * ITEMS_PER_CLOCK_CHECK) {
                        self.job = Some(Job::Sync(j));
                        return Progress::Paused;
                    }
                }
                Progress::Needs(Chore::Sync(j))
            }
        }
    }

    fn continue_batch(&mut self, mut j: BatchJob, late: impl Fn(usize) -> bool) -> Progress {
        let mut n = 0;
        while j.learned < j.b.carried.len() {
            self.learn_string(&j.b, j.learned);
            j.learned += 1;
            n += 1;
            if late(n) {
                self.job = Some(Job::Batch(j));
                return Progress::Paused;
            }
        }
        if self.s.full && j.salt.is_none() {
            // The day's salt as this aggregator last had it: the shared book (a `Mutex`, and
            // a file write for a new day) is for the service thread only.
            match self.salt {
                Some((day, s)) if day == j.b.day => j.salt = Some(s),
                _ => {
                    let day = j.b.day;
                    self.job = Some(Job::Batch(j));
                    return Progress::Needs(Chore::Salt(day));
                }
            }
        }
        while j.classified < j.b.len() {
            let (owner, d, v) = {
                let (key, ctx, count) = j.b.entries_from(j.classified).next().expect("in range");
                let at = (j.b.day, j.b.sealed_ms);
                self.classify_click(at, key, ctx, count, j.salt)
            };
            let orphan = v.as_ref().is_some_and(|v| v.orphan.is_some());
            match orphan {
                // Not a click: the visit log's only (`ClickRule::ORPHAN`).
                true => self.spare.keep(d),
                false => j.out[owner].push(d),
            }
            if let Some(v) = v {
                j.visits[owner].push(v);
            }
            j.classified += 1;
            n += 1;
            if late(n) && j.classified < j.b.len() {
                self.job = Some(Job::Batch(j));
                return Progress::Paused;
            }
        }
        self.end_batch(j.b, j.out, j.visits);
        Progress::Done
    }

    fn continue_merge(&mut self, mut j: MergeJob, late: impl Fn(usize) -> bool) -> Progress {
        let mut n = 0;
        while let Some(d) = j.deltas.pop() {
            self.merge_delta(j.from, j.seq, d);
            n += 1;
            if late(n) && !j.deltas.is_empty() {
                self.job = Some(Job::Merge(j));
                return Progress::Paused;
            }
        }
        self.log_visits(j.from, j.seq, j.visits);
        self.merged(j.from, j.seq, j.sealed_ms, j.deltas);
        Progress::Done
    }

    /// Finishes the current job, if any, with no deadline (on the service thread).
    fn finish_job(&mut self) {
        while self.job.is_some() {
            if let Progress::Needs(c) = self.continue_job(None) {
                self.do_chore(c);
            }
        }
    }

    /// Does `chore` (on the service thread). After [`Chore::Finish`] the caller runs
    /// [`Aggregator::serve`].
    pub fn do_chore(&mut self, chore: Chore) {
        match chore {
            Chore::Sync(j) => {
                self.finish_sync(j);
                self.apply_retention(false);
                self.expire_filters();
            }
            Chore::Control(c) => self.on_control(c),
            Chore::Salt(day) => {
                let salt = self.s.salts.lock().expect("salt book").salt(day);
                self.salt = Some((day, salt));
            }
            Chore::Finish => self.finish_job(),
            Chore::EndSnapshot(j) => self.end_snapshot(j),
        }
    }

    /// When the next sync is due (a parked core wakes for it).
    pub fn next_sync(&self) -> Instant {
        self.next_sync
    }

    /// A sync is due or being encoded.
    pub fn sync_pending(&self) -> bool {
        matches!(self.job, Some(Job::Sync(_))) || Instant::now() >= self.next_sync
    }

    fn outbox_empty(&self) -> bool {
        self.outbox.iter().all(|q| q.is_empty())
    }

    fn outbox_len(&self) -> usize {
        self.outbox.iter().map(|q| q.len()).sum()
    }

    // ----- source role ---------------------------------------------------------------------

    fn on_core_msg(&mut self, m: CoreMsg) {
        match m {
            CoreMsg::Batch(b) => self.on_batch(b),
            CoreMsg::Tick { seq, sealed_ms } => self.send_all(seq, sealed_ms),
            CoreMsg::Closed => self.close_source(),
        }
    }

    fn close_source(&mut self) {
        if self.own_closed {
            return;
        }
        self.own_closed = true;
        let from = self.s.me as u16;
        for o in 0..self.s.router.cores() {
            if o != self.s.me {
                self.send_peer(o, PeerMsg::Closed { from });
            }
        }
    }

    /// A thread's batch, whole: the day's salt from the shared book, then the same work a core
    /// does in slices.
    fn on_batch(&mut self, b: Box<Batch>) {
        self.begin_batch(&b);
        let salt = self
            .s
            .full
            .then(|| self.s.salts.lock().expect("salt book").salt(b.day));
        let out = self.owner_lists();
        let visits = self.owner_visit_lists();
        let j = BatchJob {
            b,
            learned: 0,
            classified: 0,
            salt,
            out,
            visits,
        };
        let done = self.continue_batch(j, |_| false);
        debug_assert!(matches!(done, Progress::Done), "a salt and no deadline");
    }

    /// A batch is taken: its counters, and the string cache is emptied if the batch's
    /// strings would not fit.
    fn begin_batch(&mut self, b: &Batch) {
        let st = &self.s.stats.per_core[self.s.me];
        st.batches.fetch_add(1, Ordering::Relaxed);
        let lag = super::combiner::unix_ms().saturating_sub(b.sealed_ms);
        st.lag_ms.store(lag, Ordering::Relaxed);
        if self.cache.len() + b.carried.len() > classify::MAX_CACHED_STRINGS {
            // Forget everything and have the cores send strings again.
            self.cache = StringCache::default();
            self.values = Vocabulary::default();
            self.s.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Every owner's empty list of deltas for a batch.
    fn owner_lists(&mut self) -> Vec<Vec<Delta>> {
        (0..self.s.router.cores())
            .map(|_| self.spare.list())
            .collect()
    }

    /// Every owner's empty list of visits for a batch (none with the visit log off).
    fn owner_visit_lists(&self) -> Vec<Vec<Visit>> {
        match self.s.visits {
            Some(_) => (0..self.s.router.cores()).map(|_| Vec::new()).collect(),
            None => Vec::new(),
        }
    }

    /// A batch is classified: its unknown-key count, the batch back to its core, the deltas
    /// (and visits) to their owners.
    fn end_batch(&mut self, b: Box<Batch>, out: Vec<Vec<Delta>>, visits: Vec<Vec<Visit>>) {
        if b.not_found > 0 {
            self.s.store.add_not_found(b.day, b.not_found);
        }
        let (seq, sealed) = (b.seq, b.sealed_ms);
        self.give_back(b);
        let mut visits = visits.into_iter();
        for (o, deltas) in out.into_iter().enumerate() {
            let v = visits.next().unwrap_or_default();
            self.send_to(o, seq, sealed, (deltas, v));
        }
    }

    fn give_back(&mut self, mut b: Box<Batch>) {
        b.clear();
        // The core's clean queue has room for every batch there is.
        let _ = self.s.clean.try_send(b);
    }

    /// Learns the `i`-th string `b` carries (a user agent classified, a referrer normalized).
    fn learn_string(&mut self, b: &Batch, i: usize) {
        self.s.store.pause_point();
        let c = b.carried[i];
        let bytes = b.string(&c);
        match c.kind {
            StrKind::UserAgent => {
                let class = self.s.classifier.classify(bytes, &mut self.values);
                self.cache.uas.insert(c.hash, class);
                if self.s.visits.is_some() {
                    let text: Arc<str> = String::from_utf8_lossy(bytes).into();
                    self.cache.ua_texts.insert(c.hash, text);
                }
            }
            StrKind::Referrer => {
                let v = self.values.get(&classify::normalize_referrer(bytes));
                self.cache.referrers.insert(c.hash, v);
            }
        }
    }

    /// The [`FacetKind::Rule`] value of a click sent by `rule` (none for a link without
    /// rules): the rule's priority, or `default`.
    fn rule_value(&mut self, rule: super::combiner::ClickRule) -> Option<Arc<str>> {
        match rule {
            super::combiner::ClickRule::NONE => None,
            super::combiner::ClickRule::DEFAULT => {
                Some(self.values.get(shards::clicks::DEFAULT_RULE))
            }
            super::combiner::ClickRule(n) => {
                const NAMES: [&str; shards::rules::MAX_RULES_PER_LINK] = [
                    "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14",
                    "15", "16",
                ];
                let name = NAMES.get(usize::from(n).wrapping_sub(1))?;
                Some(self.values.get(name))
            }
        }
    }

    /// The ISO 3166 alpha-2 country of `ip` (IPv6 or v4-mapped), `ZZ` if unknown.
    fn country(&mut self, ip: &[u8; 16]) -> Arc<str> {
        let Some(db) = &self.s.geoip else {
            return self.country.clone();
        };
        let v6 = std::net::Ipv6Addr::from(*ip);
        let addr = match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(v6),
        };
        let path = [
            maxminddb::PathElement::Key("country"),
            maxminddb::PathElement::Key("iso_code"),
        ];
        let code: Option<&str> = db
            .lookup(addr)
            .ok()
            .and_then(|r| r.decode_path(&path).ok().flatten());
        match code {
            Some(c) if c.len() == 2 && c.bytes().all(|b| b.is_ascii_uppercase()) => {
                self.values.get(c)
            }
            _ => self.country.clone(),
        }
    }

    /// One combined entry of a batch (of `day`, sealed at `sealed_ms`) as a delta, the core
    /// that owns its key, and with the visit log on its visit.
    fn classify_click(
        &mut self,
        (day, sealed_ms): (shards::clicks::Day, u64),
        key: &crate::base::key::InlineKey,
        ctx: &super::combiner::ClickCtx,
        count: u32,
        salt: Option<[u8; 16]>,
    ) -> (usize, Delta, Option<Visit>) {
        self.s.store.pause_point();
        let owner = self.s.router.owner(key.as_bytes()).core;
        let count = u64::from(count);
        let mut d = self.spare.delta();
        d.key = key.as_bytes().into();
        d.day = day;
        d.clicks = count;
        let mut visit = None;
        if let Some(salt) = salt {
            let class = if ctx.ua == 0 {
                &self.no_ua
            } else {
                self.cache.uas.get(&ctx.ua).unwrap_or(&self.unknown_ua)
            };
            let bot = class.bot;
            let mut h = siphasher::sip::SipHasher13::new_with_key(&salt);
            h.write(&ctx.ip);
            h.write_u64(ctx.ua);
            h.write(key.as_bytes());
            let visitor = hll::update_of(h.finish());
            if bot {
                d.bot_clicks = count;
                d.bots.push(visitor);
            } else {
                d.humans.push(visitor);
            }
            let referrer = if ctx.referrer == 0 {
                &self.direct
            } else {
                self.cache
                    .referrers
                    .get(&ctx.referrer)
                    .unwrap_or(&self.unknown_referrer)
            };
            let referrer = referrer.clone();
            let class = class.clone();
            let country = self.country(&ctx.ip);
            let facets = [
                (FacetKind::Referrer, &referrer),
                (FacetKind::Country, &country),
                (FacetKind::Browser, &class.browser),
                (FacetKind::Os, &class.os),
                (FacetKind::Device, &class.device),
            ];
            d.facets
                .extend(facets.into_iter().map(|(kind, value)| FacetCount {
                    kind,
                    bot,
                    value: value.clone(),
                    count,
                }));
            if let Some(value) = self.rule_value(ctx.rule) {
                d.facets.push(FacetCount {
                    kind: FacetKind::Rule,
                    bot,
                    value,
                    count,
                });
            }
            visit = self.visit_of((key, ctx), (sealed_ms, count, bot), &country, referrer);
        }
        (owner, d, visit)
    }

    /// With the visit log on, the visit of a classified click.
    fn visit_of(
        &self,
        (key, ctx): (&crate::base::key::InlineKey, &super::combiner::ClickCtx),
        (at_ms, count, bot): (u64, u64, bool),
        country: &str,
        referrer: Arc<str>,
    ) -> Option<Visit> {
        let log = self.s.visits.as_ref()?;
        let referrer = match ctx.referrer {
            0 => self.no_text.clone(),
            _ => referrer,
        };
        let ua = self.cache.ua_texts.get(&ctx.ua).unwrap_or(&self.no_text);
        let texts = (country, referrer, ua.clone());
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        let mut v = log.visit_of(key.as_bytes(), at_ms, n, bot, &ctx.ip, texts);
        v.orphan = ctx.rule.orphan();
        Some(v)
    }

    /// A tick: every owner hears how far this core's clicks have come.
    fn send_all(&mut self, seq: u64, sealed_ms: u64) {
        for o in 0..self.s.router.cores() {
            self.send_to(o, seq, sealed_ms, (Vec::new(), Vec::new()));
        }
    }

    fn send_to(
        &mut self,
        owner: usize,
        seq: u64,
        sealed_ms: u64,
        (deltas, visits): (Vec<Delta>, Vec<Visit>),
    ) {
        let from = self.s.me as u16;
        if owner == self.s.me {
            if self.s.on_cores && self.job.is_none() {
                // On a core, merged a slice at a time like a peer's message.
                self.job = Some(Job::Merge(MergeJob {
                    from,
                    seq,
                    sealed_ms,
                    deltas,
                    visits,
                }));
                return;
            }
            return self.merge(from, seq, sealed_ms, (deltas, visits));
        }
        self.send_peer(
            owner,
            PeerMsg::Deltas {
                from,
                seq,
                sealed_ms,
                deltas,
                visits,
            },
        );
    }

    fn send_peer(&mut self, owner: usize, m: PeerMsg) {
        if !self.outbox[owner].is_empty() {
            return self.outbox[owner].push_back(m); // Keep the order.
        }
        match self.s.peers_tx[owner].try_send(m) {
            Ok(()) => self.ring(owner),
            Err(TrySendError::Full(m)) => self.outbox[owner].push_back(m),
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// On cores, wakes `owner`'s core for a message just queued for its aggregator.
    fn ring(&self, owner: usize) {
        if self.s.on_cores {
            self.s.bells.ring(owner);
        }
    }

    fn flush_outbox(&mut self) {
        for o in 0..self.outbox.len() {
            while let Some(m) = self.outbox[o].pop_front() {
                match self.s.peers_tx[o].try_send(m) {
                    Ok(()) => self.ring(o),
                    Err(TrySendError::Full(m)) => {
                        self.outbox[o].push_front(m);
                        break;
                    }
                    Err(TrySendError::Disconnected(_)) => {}
                }
            }
        }
    }

    // ----- owner role ----------------------------------------------------------------------

    fn on_peer_msg(&mut self, m: PeerMsg) {
        match m {
            PeerMsg::Deltas {
                from,
                seq,
                sealed_ms,
                deltas,
                visits,
            } => self.merge(from, seq, sealed_ms, (deltas, visits)),
            PeerMsg::Closed { .. } => self.peers_closed += 1,
        }
    }

    fn merge(
        &mut self,
        from: u16,
        seq: u64,
        sealed_ms: u64,
        (mut deltas, visits): (Vec<Delta>, Vec<Visit>),
    ) {
        for d in deltas.drain(..) {
            self.merge_delta(from, seq, d);
        }
        self.log_visits(from, seq, visits);
        self.merged(from, seq, sealed_ms, deltas);
    }

    /// The visits of message `seq` from `from` into the visit log (unless a purge filters
    /// their link, as it filters the link's deltas).
    fn log_visits(&mut self, from: u16, seq: u64, visits: Vec<Visit>) {
        let (Some(log), store) = (&mut self.s.visits, &self.s.store) else {
            return;
        };
        let no_filters = self.filters.is_empty();
        for v in visits {
            let filtered = !no_filters
                && self
                    .filters
                    .get(&v.key)
                    .is_some_and(|f| seq <= f.cutoffs[from as usize]);
            if !filtered {
                let day_clicks = match v.orphan.is_some() {
                    true => 0,
                    false => store.open_day_clicks(v.key.as_bytes(), v.day()),
                };
                log.add(v, day_clicks);
            }
        }
    }

    /// One delta of message `seq` from source `from` into the store (unless a purge filters
    /// it), the delta kept for reuse.
    fn merge_delta(&mut self, from: u16, seq: u64, d: Delta) {
        self.s.store.pause_point();
        let st = &self.s.stats.per_core[self.s.me];
        if self
            .filters
            .get(&d.key)
            .is_some_and(|f| seq <= f.cutoffs[from as usize])
        {
            // Clicks of a deleted link, counted before the delete but arriving after it.
            st.filtered.fetch_add(d.clicks, Ordering::Relaxed);
        } else {
            self.s.store.merge(&d);
            st.records.fetch_add(1, Ordering::Relaxed);
            st.merged_clicks.fetch_add(d.clicks, Ordering::Relaxed);
        }
        self.spare.keep(d);
    }

    /// Every delta of message `seq` from `from` is merged: the source's progress moves on
    /// (queries say how complete they are from it), its emptied list is kept.
    fn merged(&mut self, from: u16, seq: u64, sealed_ms: u64, deltas: Vec<Delta>) {
        let src = from as usize;
        debug_assert!(
            seq > self.last_seq[src],
            "messages from a source arrive in order"
        );
        self.last_seq[src] = seq;
        self.through_ms[src] = sealed_ms;
        self.spare.keep_list(deltas);
    }

    fn on_control(&mut self, c: Control) {
        match c {
            Control::Purge {
                key,
                cutoffs,
                token,
                reply_core,
            } => {
                let k = shards::clicks::ShortKey::new(key.as_bytes());
                let r = Record::Purge { key: k.clone() };
                self.s.store.purge(&k);
                self.purge_visits(key.as_bytes());
                // Logged at once (after anything a failed write left): the 204 waits for
                // this fsync. States of other keys not logged yet are logged later; states
                // replace, so their order after the purge does not matter.
                let mut bytes = std::mem::take(&mut self.retry);
                codec::encode(&r, &mut bytes);
                let ok = self.write(bytes);
                if ok && self.s.fleet.is_some() {
                    // The node's rows of the key go from the fleet database too. States of
                    // the old link not handed over yet are dropped: every state of the key
                    // after this purge in a part is a new link's.
                    let name = key.as_str().to_owned();
                    self.fleet_unsynced.rows.retain(|r| r.key != name);
                    self.fleet_part.rows.retain(|r| r.key != name);
                    self.fleet_part.purged.push(name);
                    self.hand_to_flusher();
                }
                if ok && self.exporter.is_some() {
                    let now = super::combiner::unix_ms();
                    let id = self.exporter.as_ref().expect("checked").next_id(0, now);
                    let mut line = Vec::new();
                    super::export::purge_line(&id, now, key.as_bytes(), &mut line);
                    self.export(&line, 1, now);
                }
                if !ok {
                    eprintln!(
                        "clicks core {}: could not make the purge of {} durable; its stats may reappear after a restart",
                        self.s.me,
                        key.as_str()
                    );
                }
                self.filters.insert(
                    k,
                    Filter {
                        cutoffs,
                        since: Instant::now(),
                    },
                );
                let _ = self
                    .s
                    .replies
                    .offer(reply_core as usize, ToCore::Purged { token });
            }
            Control::Global { reply, from, to } => {
                let through = self.through_ms.iter().copied().min().unwrap_or(0);
                let part = Box::new(stats::global_part(&self.s.store, from, to, through));
                let _ = self
                    .s
                    .replies
                    .offer(reply.core(), ToCore::GlobalPart { reply, part });
            }
            Control::Visits { reply, query } if query.delete_orphans => {
                self.delete_orphans(reply);
            }
            Control::Visits { reply, query } => self.answer_visits(reply, &query),
            Control::Stats { reply, query } => {
                let body = self.answer(&query);
                let _ = self.s.replies.offer(
                    reply.core(),
                    ToCore::Stats {
                        reply,
                        body: Some(body),
                    },
                );
            }
        }
    }

    /// A page of the visit log (`None` with the log off: the asker answers 503).
    fn answer_visits(&self, reply: crate::mesh::ReplyTo, q: &super::visit_log::VisitLogQuery) {
        let through = self.through_ms.iter().copied().min().unwrap_or(0);
        let body = self.s.visits.as_ref().map(|l| l.answer(q, through));
        let _ = self
            .s
            .replies
            .offer(reply.core(), ToCore::Stats { reply, body });
    }

    /// Shlink's delete of orphan visits, this aggregator's part: its 404 counts (the orphan
    /// visits its core counted) set to 0 and its logged orphan visits purged, both durable
    /// before the answer, which is the counts reset (`None`, so 503, if a write failed).
    fn delete_orphans(&mut self, reply: crate::mesh::ReplyTo) {
        let (reset, days) = self.s.store.reset_not_found();
        let mut bytes = std::mem::take(&mut self.retry);
        for day in days {
            codec::encode(&Record::NotFound { day, count: 0 }, &mut bytes);
        }
        let mut ok = self.write(bytes);
        if let (Some(log), store) = (&mut self.s.visits, &self.s.store) {
            if let Err(e) = log.purge_orphans(&mut || store.pause_point()) {
                eprintln!(
                    "clicks core {}: could not make the purge of orphan visits durable in the visit log ({e}); they may reappear after a restart",
                    self.s.me
                );
                ok = false;
            }
        }
        let body = ok.then(|| {
            serde_json::to_vec(&serde_json::json!({"total": reset, "visits": []})).expect("json")
        });
        let _ = self
            .s
            .replies
            .offer(reply.core(), ToCore::Stats { reply, body });
    }

    /// The link's visits go from the visit log, in memory and on disk.
    fn purge_visits(&mut self, key: &[u8]) {
        let (Some(log), store) = (&mut self.s.visits, &self.s.store) else {
            return;
        };
        if let Err(e) = log.purge(key, &mut || store.pause_point()) {
            eprintln!(
                "clicks core {}: could not make the purge of a link's visits durable in the visit log ({e}); they may reappear after a restart",
                self.s.me
            );
        }
    }

    /// The visits logged since the last sync are made durable (after the clicks').
    fn sync_visits(&mut self) {
        let (Some(log), store) = (&mut self.s.visits, &self.s.store) else {
            return;
        };
        if let Err(e) = log.sync(&mut || store.pause_point()) {
            eprintln!(
                "clicks core {}: visit log write failed ({e}); its visits are kept in memory and written by the next sync",
                self.s.me
            );
        }
        let (records, not_logged) = log.counts();
        let st = &self.s.stats.per_core[self.s.me];
        st.visit_records.store(records, Ordering::Relaxed);
        st.visits_not_logged.store(not_logged, Ordering::Relaxed);
    }

    fn answer(&self, q: &StatsQuery) -> Vec<u8> {
        let complete_until_ms = self.through_ms.iter().copied().min().unwrap_or(0);
        let dropped = self.s.stats.dropped_total();
        stats::link_json(&self.s.store, q, complete_until_ms, dropped)
    }

    /// Group commit: logs the state of every link-day changed since the last sync, in one
    /// fdatasync (after anything a failed write left); then exports them and, in fleet mode,
    /// hands them to the flusher.
    fn sync(&mut self) {
        let mut j = self.begin_sync();
        while !self.encode_some(&mut j, usize::MAX) {}
        self.finish_sync(j);
    }

    /// A sync begins (the next is due an interval from now): after a failed write, its
    /// frames and lines come first.
    fn begin_sync(&mut self) -> SyncJob {
        self.next_sync = Instant::now() + Duration::from_millis(CLICK_SYNC_INTERVAL_MS);
        let bytes = if self.retry.is_empty() {
            std::mem::take(&mut self.buf)
        } else {
            std::mem::take(&mut self.retry)
        };
        let (lines, n) = std::mem::take(&mut self.retry_lines);
        SyncJob {
            bytes,
            lines,
            n,
            now: super::combiner::unix_ms(),
            nf: Vec::new(),
        }
    }

    /// Encodes up to `max` changed links into `j`; `true` once every change is in (the 404
    /// counts last).
    fn encode_some(&mut self, j: &mut SyncJob, max: usize) -> bool {
        let fleet = self.s.fleet.is_some();
        let part = &mut self.fleet_unsynced;
        let x = self.exporter.as_ref();
        let SyncJob {
            bytes,
            lines,
            n,
            now,
            nf,
        } = j;
        let done = self.s.store.drain_dirty_some(
            max,
            |key, day, l| {
                codec::encode_state(key, day, l, bytes);
                if let Some(x) = x {
                    let id = x.next_id(*n, *now);
                    super::export::state_line(&id, *now, key, day, l, lines);
                    *n += 1;
                }
                if fleet {
                    part.rows.push(super::fleet::click_row(key, day, l));
                }
            },
            |day, count| nf.push(Record::NotFound { day, count }),
        );
        if done {
            for r in nf.drain(..) {
                codec::encode(&r, bytes);
                if let (true, Record::NotFound { day, count }) = (fleet, r) {
                    part.not_found.push((day, count));
                }
            }
        }
        done
    }

    /// Writes and syncs what `j` encoded, then exports it and hands it to the flusher.
    fn finish_sync(&mut self, j: SyncJob) {
        let SyncJob {
            bytes,
            lines,
            n,
            now,
            ..
        } = j;
        if bytes.is_empty() {
            self.buf = bytes;
        } else {
            if !self.write(bytes) {
                self.retry_lines = (lines, n);
                return;
            }
            self.export(&lines, n, now);
        }
        self.sync_visits();
        self.hand_to_flusher();
    }

    /// Fleet mode: hands what is durable here to the flusher, with how far it is complete.
    /// A full queue keeps it for the next sync.
    fn hand_to_flusher(&mut self) {
        let Some(tx) = &self.s.fleet else {
            return;
        };
        let unsynced = std::mem::take(&mut self.fleet_unsynced);
        self.fleet_part.absorb(unsynced);
        let mut part = std::mem::take(&mut self.fleet_part);
        part.core = self.s.me;
        part.complete_until_ms = self.through_ms.iter().copied().min().unwrap_or(0);
        if let Err(e) = tx.try_send(part) {
            self.fleet_part = e.into_inner();
        }
    }

    /// Hands lines of a durable sync to the export files (a failure is reported, never fatal).
    fn export(&mut self, lines: &[u8], n: u64, now: u64) {
        if let Some(x) = &mut self.exporter {
            if let Err(e) = x.write(lines, n, now) {
                eprintln!(
                    "clicks core {}: --click-export write failed: {e}",
                    self.s.me
                );
            }
        }
    }

    /// Writes and syncs `bytes`; on failure they are kept for the next sync, in order.
    fn write(&mut self, bytes: Vec<u8>) -> bool {
        let st = &self.s.stats.per_core[self.s.me];
        let result = if self.s.fail_sync {
            Err(std::io::Error::other(
                "injected failure (--fault-fail-click-sync)",
            ))
        } else {
            let (log, store) = (&mut self.s.log, &self.s.store);
            log.write_and_sync_paced(&bytes, &mut || store.pause_point())
        };
        match result {
            Ok(()) => {
                let mut bytes = bytes;
                if bytes.capacity() <= SYNC_BUFFER_KEPT_BYTES {
                    // Room for twice this sync, made here: on a core, the encoding's vector
                    // would otherwise double (a copy of megabytes) between requests.
                    let room = (2 * bytes.len()).min(SYNC_BUFFER_KEPT_BYTES);
                    bytes.clear();
                    bytes.reserve(room);
                    self.buf = bytes;
                }
                st.syncs.fetch_add(1, Ordering::Relaxed);
                if self.failing {
                    eprintln!("clicks core {}: click log writes work again", self.s.me);
                    self.failing = false;
                }
                if self.s.log.len() > self.snapshot_after {
                    match self.s.on_cores {
                        true => self.begin_snapshot(),
                        false => self.snapshot(),
                    }
                }
                true
            }
            Err(e) => {
                self.retry = bytes;
                st.sync_failures.fetch_add(1, Ordering::Relaxed);
                if !self.failing {
                    eprintln!(
                        "clicks core {}: click log write failed ({e}); clicks stay counted in memory and are written when it works again",
                        self.s.me
                    );
                    self.failing = true;
                }
                false
            }
        }
    }

    /// Replaces the logs with a snapshot, freezing the days closed for more than
    /// `FREEZE_AFTER_DAYS` into files first (`shards::clicks::frozen`).
    fn snapshot(&mut self) {
        // A whole snapshot supersedes one being encoded on the core (its log is folded in).
        self.snap = None;
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        let through = shards::clicks::frozen::freeze_through(today);
        if let Err(e) = self.s.log.snapshot(&mut self.s.store, through) {
            eprintln!(
                "clicks core {}: snapshot failed ({e}); the log keeps growing",
                self.s.me
            );
        }
    }

    /// On the service thread of an aggregator a core runs: begins an incremental snapshot
    /// (`ClickLog::begin_snapshot`), whose body the core encodes in slices while it keeps
    /// merging ([`Aggregator::step`]), so the aggregator is not away for a whole store's
    /// worth of encoding and writing (at 45k clicks/s over 1M links that dropped clicks every
    /// ~14 s: perf/reports/2026-12-05-issue23-on-core.md).
    fn begin_snapshot(&mut self) {
        if self.snap.is_some() {
            return;
        }
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        let through = shards::clicks::frozen::freeze_through(today);
        match self.s.log.begin_snapshot(&mut self.s.store, through) {
            Ok(next) => {
                // Room for the whole body now, on this thread: a vector doubling on the core
                // copies megabytes in one go (measured: the p99 after an overload rose 7-9x).
                let room = self
                    .last_snapshot_bytes
                    .max(self.s.store.link_days() * SNAPSHOT_BYTES_PER_LINK_DAY_GUESS);
                self.snap = Some(SnapJob {
                    next,
                    cursor: self.s.store.link_slots(),
                    body: Vec::with_capacity(room.saturating_mul(2)),
                });
            }
            Err(e) => eprintln!(
                "clicks core {}: snapshot failed ({e}); the log keeps growing",
                self.s.me
            ),
        }
    }

    /// Encodes the incremental snapshot's body until `deadline`; the chore that writes it
    /// once it is whole.
    fn continue_snapshot(&mut self, deadline: Instant) -> Option<Chore> {
        let mut j = self.snap.take()?;
        loop {
            if self
                .s
                .store
                .snapshot_links_some(&mut j.cursor, ITEMS_PER_CLOCK_CHECK, &mut j.body)
            {
                self.s.store.snapshot_tail(&mut j.body);
                return Some(Chore::EndSnapshot(j));
            }
            if Instant::now() >= deadline {
                self.snap = Some(j);
                return None;
            }
        }
    }

    fn end_snapshot(&mut self, j: SnapJob) {
        match self.s.log.end_snapshot(&self.s.store, j.next, &j.body) {
            Ok(n) => self.last_snapshot_bytes = n as usize,
            Err(e) => eprintln!(
                "clicks core {}: snapshot failed ({e}); the log keeps growing",
                self.s.me
            ),
        }
    }

    fn apply_retention(&mut self, at_start: bool) {
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        if !at_start && today == self.today {
            return;
        }
        self.today = today;
        let first = today.saturating_sub(self.s.retention_days.saturating_sub(1));
        let dropped = self.s.store.drop_before(first);
        let freezable = shards::clicks::frozen::freeze_through(today)
            .is_some_and(|t| self.s.store.holds_days_through(t));
        if (dropped > 0 || freezable) && self.retry.is_empty() {
            // Retention's drops go, and days past `FREEZE_AFTER_DAYS` are frozen (changes
            // not logged yet stay in memory). With neither, no snapshot is written.
            self.snapshot();
        }
        if self.s.me == 0 {
            self.s.salts.lock().expect("salt book").forget_before(today);
        }
        if let Some(log) = &mut self.s.visits {
            log.retain(today);
        }
    }

    fn expire_filters(&mut self) {
        let (last, now) = (&self.last_seq, Instant::now());
        self.filters.retain(|_, f| {
            let pending = f.cutoffs.iter().zip(last).any(|(c, l)| l <= c);
            pending && now.duration_since(f.since) < PURGE_FILTER_TTL
        });
    }
}

fn yield_to_cores(me: usize) -> bool {
    crate::base::cpus::yield_thread_to_cores(&format!("clicks core {me}: the aggregator"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shards::clicks::{FacetKind, ShortKey};

    fn full_delta(key: &str) -> Delta {
        let value: Arc<str> = Arc::from("example.com");
        Delta {
            key: ShortKey::new(key.as_bytes()),
            day: 20_000,
            clicks: 3,
            bot_clicks: 1,
            humans: vec![hll::update_of(7)],
            bots: vec![hll::update_of(9)],
            facets: vec![FacetCount {
                kind: FacetKind::Referrer,
                bot: false,
                value,
                count: 3,
            }],
        }
    }

    /// A reused delta carries nothing of the click it held (its counts, sketch updates and
    /// facet values are gone, so no interned value is kept alive), and the spares stay within
    /// their bounds however much is given back.
    #[test]
    fn a_spare_delta_is_empty_and_the_spares_are_bounded() {
        let mut spare = Spare::default();
        let value = full_delta("a").facets[0].value.clone();
        let mut given: Vec<Delta> = (0..MAX_SPARE_DELTAS + 10)
            .map(|i| {
                let mut d = full_delta(&format!("k{i}"));
                d.facets[0].value = value.clone();
                d
            })
            .collect();
        for d in given.drain(..) {
            spare.keep(d);
        }
        spare.keep_list(given);
        assert_eq!(spare.deltas.len(), MAX_SPARE_DELTAS);
        assert_eq!(Arc::strong_count(&value), 1, "no spare holds a facet value");
        let d = spare.delta();
        assert_eq!((d.clicks, d.bot_clicks), (0, 0));
        assert!(d.humans.is_empty() && d.bots.is_empty() && d.facets.is_empty());
        assert!(d.facets.capacity() >= 1, "the vectors keep their room");
        let list = spare.list();
        assert!(list.is_empty() && list.capacity() > MAX_SPARE_DELTAS);
        for _ in 0..2 * MAX_SPARE_LISTS {
            spare.keep_list(Vec::with_capacity(4));
        }
        assert_eq!(spare.lists.len(), MAX_SPARE_LISTS);
    }
}
