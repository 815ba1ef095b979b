//! Clicks in fleet mode: every node's per-link-day states go to the fleet database, and the
//! stats API answers for the whole fleet from there.
//!
//! - **Flush** (`ricochet-fleet-clicks`): each owner aggregator hands this thread the states
//!   it just made durable (`FlushPart`, at its group commit, bounded queue). The thread keeps
//!   the newest state per link-day and, every `--fleet-click-flush-ms`
//!   ([`CLICK_FLUSH_INTERVAL_MS`] by default), writes them in one
//!   transaction under the next flush number (`fleet::clicks::flush`). A flush that fails is
//!   retried as it was, same number and rows, so a lost COMMIT reply is recognised by its
//!   number and never applied twice; states that came meanwhile wait for the next number.
//!   A row is a state (totals), so even a repeat could not count twice.
//! - **Stats** (`ricochet-fleet-stats`): `Control::Stats` and `Control::Global` from the cores
//!   (in fleet mode they come here, not to the aggregators) are answered from the sums over
//!   every node, with the JSON built as for one node.
//!
//! Neither thread is on a core; cores only `try_send` to the stats thread's bounded queue.

use super::stats::{self, DayFigures};
use super::{Control, ToCore};
use crate::mesh::service::Outlets;
use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use fleet::clicks::{ClickRow, Facet, Flush, Flushed};
use shards::clicks::{Day, FacetKind, LinkDay};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a node flushes its changed click states to the fleet database, by default
/// (`--fleet-click-flush-ms`): with the click log's group commit, what fleet-wide stats lag
/// behind (`complete_until` says exactly). Each flush writes one row per link-day clicked
/// since the last, so the database's write rate per node is about (distinct link-days clicked
/// per interval) / interval; perf/reports has the measured cost.
pub const CLICK_FLUSH_INTERVAL_MS: u64 = 5_000;

/// Bounds of `--fleet-click-flush-ms`.
pub const MIN_CLICK_FLUSH_INTERVAL_MS: u64 = 200;
pub const MAX_CLICK_FLUSH_INTERVAL_MS: u64 = 600_000;

/// Parts (one per aggregator group commit) queued for the flusher; a full queue makes the
/// aggregator keep its part and send it with its next one.
pub const FLUSH_QUEUE_CAPACITY: usize = 256;

/// Link-day states the flusher keeps waiting at most (a long database outage): past it, new
/// states are dropped and counted (`ricochet_fleet_click_rows_dropped_total`); each link-day
/// is sent again at its next change.
pub const MAX_PENDING_CLICK_ROWS: usize = 1_000_000;

/// Stats queries queued for the fleet stats thread.
pub const FLEET_STATS_QUEUE_CAPACITY: usize = 1_024;

/// Pause after a failed flush before it is tried again.
pub const FLUSH_RETRY_MS: u64 = 1_000;

/// What one aggregator's group commit hands the flusher.
#[derive(Debug, Default)]
pub struct FlushPart {
    pub core: usize,
    /// Every click this core's aggregator merged was answered before this (unix ms).
    pub complete_until_ms: u64,
    pub purged: Vec<String>,
    pub rows: Vec<ClickRow>,
    pub not_found: Vec<(Day, u64)>,
}

impl FlushPart {
    /// Adds `later` (a part of the same core after this one) to this one.
    pub fn absorb(&mut self, later: FlushPart) {
        self.complete_until_ms = later.complete_until_ms;
        self.purged.extend(later.purged);
        self.rows.extend(later.rows);
        self.not_found.extend(later.not_found);
    }
}

/// A link-day's state as the fleet database stores it.
pub fn click_row(key: &[u8], day: Day, l: &LinkDay) -> ClickRow {
    let f = DayFigures::of(l);
    ClickRow {
        key: String::from_utf8_lossy(key).into_owned(),
        day,
        clicks: f.clicks,
        bot_clicks: f.bot_clicks,
        unique_humans: f.unique_humans,
        unique_bots: f.unique_bots,
        unique_all: f.unique_all,
        facets: f
            .facets
            .into_iter()
            .map(|(kind, bot, value, count)| Facet {
                kind: kind as u8,
                bot,
                value: value.to_string(),
                count,
            })
            .collect(),
        humans: fleet::clicks::encode_sketch(&l.humans),
        bots: fleet::clicks::encode_sketch(&l.bots),
    }
}

/// Counters of the fleet click services (`/metrics`).
#[derive(Default)]
pub struct FleetClickStats {
    pub flushes: std::sync::atomic::AtomicU64,
    pub flush_failures: std::sync::atomic::AtomicU64,
    pub rows_flushed: std::sync::atomic::AtomicU64,
    pub rows_dropped: std::sync::atomic::AtomicU64,
    /// Unix ms of the last applied flush's `complete_until`.
    pub complete_until_ms: std::sync::atomic::AtomicU64,
}

/// What the two threads need.
pub struct FleetClicksSetup {
    pub url: String,
    /// This data dir's click identity (`fleet_mode::node::click_identity`).
    pub node: String,
    pub node_id: String,
    pub retention_days: u32,
    /// `--fleet-click-flush-ms`.
    pub flush_interval_ms: u64,
    pub cores: usize,
    pub stats: Arc<FleetClickStats>,
    /// Clicks dropped on every core (`ClickStats::dropped_total`).
    pub dropped: Arc<dyn Fn() -> u64 + Send + Sync>,
    /// The database answered at start (`fleet_mode::node::DbAtStart`); if not, the flusher reads
    /// its last flush number and the fleet's salts once it does.
    pub db_answers_at_start: bool,
}

/// Fleet mode's shared salts: the flusher makes the salt book hold the fleet's salts of today
/// and tomorrow (made by the first node that asks, `fleet::clicks::salt_for`), so every node
/// hashes a visitor the same way and the stats API can merge their sketches; it also deletes
/// the fleet's salts 48 hours after their day. Done at start, then once a day (and again
/// after a failure, at the next flush).
struct SharedSalts {
    book: Arc<std::sync::Mutex<super::salts::SaltBook>>,
    synced: Option<Day>,
    /// Days this node hashed under a salt of its own (reported once each).
    own: BTreeSet<Day>,
}

impl SharedSalts {
    fn sync(&mut self, db: &mut fleet::Db) -> Result<(), fleet::FleetError> {
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        if self.synced == Some(today) {
            return Ok(());
        }
        for day in [today, today + 1] {
            let have = self.book.lock().expect("salt book").peek(day);
            let candidate = match have {
                Some(s) => s,
                None => {
                    let mut s = [0u8; 16];
                    getrandom::getrandom(&mut s).expect("the OS gives random bytes");
                    s
                }
            };
            let salt = fleet::clicks::salt_for(db, day, candidate)?;
            let adopted = self.book.lock().expect("salt book").adopt(day, salt);
            if !adopted && self.own.insert(day) {
                eprintln!(
                    "fleet: this node hashed visitors of {} under a salt of its own (the \
                     database was out of reach when the day began): its unique visitors of \
                     that day add to the other nodes' instead of merging",
                    super::stats::format_day(day)
                );
            }
        }
        fleet::clicks::forget_salts_before(db, today)?;
        self.synced = Some(today);
        Ok(())
    }
}

/// The running threads: the flusher is joined after the aggregators, so it writes their last
/// states at shutdown.
pub struct FleetClicks {
    pub parts: Sender<FlushPart>,
    pub queries: Sender<Control>,
    flusher: std::thread::JoinHandle<()>,
}

impl FleetClicks {
    /// Starts both threads. The stats thread answers through `replies`.
    pub fn start(
        setup: FleetClicksSetup,
        replies: Arc<Outlets<ToCore>>,
        salts: Arc<std::sync::Mutex<super::salts::SaltBook>>,
    ) -> anyhow::Result<FleetClicks> {
        use anyhow::Context;
        let mut db = fleet::Db::new(&setup.url)?;
        let mut salts = SharedSalts {
            book: salts,
            synced: None,
            own: BTreeSet::new(),
        };
        let mut last = None;
        if setup.db_answers_at_start {
            last = Some(
                fleet::clicks::last_flush(&mut db, &setup.node)
                    .with_context(|| "reading this node's last click flush number")?,
            );
            // Before the first click is hashed: the fleet's salt of today from the start.
            salts
                .sync(&mut db)
                .with_context(|| "reading the fleet's daily salts")?;
        }
        let (parts_tx, parts_rx) = crossbeam::channel::bounded(FLUSH_QUEUE_CAPACITY);
        let (q_tx, q_rx) = crossbeam::channel::bounded(FLEET_STATS_QUEUE_CAPACITY);
        let stats_db = fleet::Db::new(&setup.url)?;
        std::thread::Builder::new()
            .name("ricochet-fleet-stats".into())
            .spawn(move || {
                crate::base::cpus::yield_thread_to_cores("the fleet stats thread");
                answer_queries(stats_db, q_rx, replies)
            })
            .context("starting the fleet stats thread")?;
        let flusher = Flusher::new(setup, db, last, salts);
        let flusher = std::thread::Builder::new()
            .name("ricochet-fleet-clicks".into())
            .spawn(move || flusher.run(parts_rx))
            .context("starting the fleet click flusher")?;
        Ok(FleetClicks {
            parts: parts_tx,
            queries: q_tx,
            flusher,
        })
    }

    /// Waits for the flusher's last flush (after every aggregator ended and dropped its
    /// sender). Bounded by the database call timeouts.
    pub fn join(self) {
        drop(self.parts);
        if self.flusher.join().is_err() {
            eprintln!("the fleet click flusher panicked; its last states were not flushed");
        }
    }
}

struct Flusher {
    s: FleetClicksSetup,
    db: fleet::Db,
    /// The next flush's number; `None` until this node's last one was read from the database.
    next_id: Option<u64>,
    /// Newest state per (key, day), purges, 404 counts, per-core completeness.
    rows: BTreeMap<(String, Day), ClickRow>,
    purged: BTreeSet<String>,
    not_found: BTreeMap<Day, u64>,
    complete: Vec<u64>,
    /// A flush that failed: sent again, as it was, before anything newer.
    retry: Option<Flush>,
    failing: bool,
    retention_day: Day,
    /// The completeness the last flush formed carried.
    flushed_complete: u64,
    salts: SharedSalts,
}

impl Flusher {
    fn new(s: FleetClicksSetup, db: fleet::Db, last: Option<u64>, salts: SharedSalts) -> Flusher {
        let now = super::combiner::unix_ms().saturating_sub(1);
        Flusher {
            complete: vec![now; s.cores],
            s,
            db,
            next_id: last.map(|n| n + 1),
            rows: BTreeMap::new(),
            purged: BTreeSet::new(),
            not_found: BTreeMap::new(),
            retry: None,
            failing: false,
            retention_day: 0,
            flushed_complete: 0,
            salts,
        }
    }

    fn run(mut self, parts: Receiver<FlushPart>) {
        // A flush's encoding is a burst of CPU: a core on the same CPU goes first.
        crate::base::cpus::yield_thread_to_cores("the fleet click flusher");
        let every = Duration::from_millis(self.s.flush_interval_ms);
        let mut next = Instant::now() + every;
        loop {
            match parts.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(p) => self.take(p),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // Shutdown: every aggregator's last part is in. One last try each.
                    self.flush_once();
                    self.flush_once();
                    return;
                }
            }
            if Instant::now() >= next {
                let ok = self.flush_once();
                let pause = if ok {
                    every
                } else {
                    Duration::from_millis(FLUSH_RETRY_MS)
                };
                next = Instant::now() + pause;
                self.apply_retention();
                if let Err(e) = self.salts.sync(&mut self.db) {
                    eprintln!("fleet: syncing the daily salts failed: {e}; retrying later");
                }
            }
        }
    }

    fn take(&mut self, p: FlushPart) {
        if let Some(c) = self.complete.get_mut(p.core) {
            *c = (*c).max(p.complete_until_ms);
        }
        for k in p.purged {
            // States before the purge are of the old link; the purge goes first in a flush,
            // so states after it (a new link) still land.
            self.rows.retain(|(key, _), _| *key != k);
            self.purged.insert(k);
        }
        for r in p.rows {
            let slot = (r.key.clone(), r.day);
            if self.rows.len() >= MAX_PENDING_CLICK_ROWS && !self.rows.contains_key(&slot) {
                self.s
                    .stats
                    .rows_dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                continue;
            }
            self.rows.insert(slot, r);
        }
        for (d, n) in p.not_found {
            self.not_found.insert(d, n);
        }
    }

    /// The next flush: the retry if one is due, else everything pending (up to the limit).
    fn next_flush(&mut self) -> Option<Flush> {
        if let Some(f) = self.retry.take() {
            return Some(f);
        }
        let complete = self.complete.iter().copied().min().unwrap_or(0);
        let idle = self.rows.is_empty() && self.purged.is_empty() && self.not_found.is_empty();
        if idle && complete <= self.flushed_complete {
            return None; // Nothing new, not even how far the figures are complete.
        }
        let id = self.next_id?;
        let mut rows = Vec::with_capacity(self.rows.len().min(fleet::clicks::MAX_FLUSH_ROWS));
        while rows.len() < fleet::clicks::MAX_FLUSH_ROWS {
            let Some((_, r)) = self.rows.pop_first() else {
                break;
            };
            rows.push(r);
        }
        self.next_id = Some(id + 1);
        Some(Flush {
            id,
            complete_until_ms: if self.rows.is_empty() {
                self.flushed_complete = complete;
                complete
            } else {
                0 // Rows are still waiting: this flush proves nothing about completeness.
            },
            dropped: (self.s.dropped)(),
            purged: std::mem::take(&mut self.purged).into_iter().collect(),
            rows,
            not_found: std::mem::take(&mut self.not_found).into_iter().collect(),
        })
    }

    /// Writes one flush; `false` if it failed (it is kept to be sent again as it is).
    fn flush_once(&mut self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.next_id.is_none() {
            // Started while the database did not answer: numbering continues from its record.
            match fleet::clicks::last_flush(&mut self.db, &self.s.node) {
                Ok(last) => self.next_id = Some(last + 1),
                Err(e) => {
                    self.s.stats.flush_failures.fetch_add(1, Relaxed);
                    if !self.failing {
                        eprintln!("fleet: reading this node's last click flush failed: {e}");
                        self.failing = true;
                    }
                    return false;
                }
            }
        }
        let Some(f) = self.next_flush() else {
            return true;
        };
        match fleet::clicks::flush(&mut self.db, &self.s.node, &self.s.node_id, &f) {
            Ok(outcome) => {
                if self.failing {
                    eprintln!("fleet: click flushes work again");
                    self.failing = false;
                }
                let st = &self.s.stats;
                st.flushes.fetch_add(1, Relaxed);
                if outcome == Flushed::Applied {
                    st.rows_flushed.fetch_add(f.rows.len() as u64, Relaxed);
                }
                st.complete_until_ms.fetch_max(f.complete_until_ms, Relaxed);
                true
            }
            Err(e) => {
                self.s.stats.flush_failures.fetch_add(1, Relaxed);
                if !self.failing {
                    eprintln!("fleet: click flush {} failed: {e}; retrying it", f.id);
                    self.failing = true;
                }
                self.retry = Some(f);
                false
            }
        }
    }

    /// Once a UTC day: this node's rows older than its retention go.
    fn apply_retention(&mut self) {
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        if today == self.retention_day || self.failing {
            return;
        }
        let first_kept = today.saturating_sub(self.s.retention_days.saturating_sub(1));
        match fleet::clicks::forget_before(&mut self.db, &self.s.node, first_kept) {
            Ok(_) => self.retention_day = today,
            Err(e) => eprintln!("fleet: click retention failed: {e}; retrying later"),
        }
    }
}

/// The stats thread: answers each query from the fleet's sums.
fn answer_queries(mut db: fleet::Db, queries: Receiver<Control>, replies: Arc<Outlets<ToCore>>) {
    for q in queries {
        let (reply, body) = match q {
            Control::Stats { reply, query } => (reply, link_stats(&mut db, &query)),
            Control::Global { reply, from, to } => (reply, global_stats(&mut db, from, to)),
            // The visit log is a single node's (`--visit-log-days` refuses fleet mode).
            Control::Purge { .. } | Control::Visits { .. } => {
                debug_assert!(false, "purges and visit queries go to the aggregators");
                continue;
            }
        };
        let body = body
            .map_err(|e| eprintln!("fleet: a stats query failed: {e}"))
            .ok();
        let mut item = ToCore::Stats { reply, body };
        // The core drains its queue every loop turn: wait for room rather than lose an answer.
        while let Err(back) = replies.offer(reply.core(), item) {
            item = back;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn link_stats(db: &mut fleet::Db, q: &stats::StatsQuery) -> Result<Vec<u8>, fleet::FleetError> {
    let (days, done) = fleet::clicks::link_days(db, q.key.as_str(), q.from, q.to)?;
    let figures = days.into_iter().map(|d| {
        let facets = d
            .facets
            .into_iter()
            .filter_map(|f| {
                let kind = FacetKind::from_u8(f.kind)?;
                Some((kind, f.bot, Arc::<str>::from(f.value), f.count))
            })
            .collect();
        (
            d.day,
            DayFigures {
                clicks: d.clicks,
                bot_clicks: d.bot_clicks,
                unique_humans: d.unique_humans,
                unique_bots: d.unique_bots,
                unique_all: d.unique_all,
                facets,
            },
        )
    });
    Ok(stats::link_json_from(
        q,
        figures.collect(),
        done.complete_until_ms,
        done.dropped,
        Some(done.nodes),
    ))
}

fn global_stats(db: &mut fleet::Db, from: Day, to: Day) -> Result<Vec<u8>, fleet::FleetError> {
    let (days, top, done) = fleet::clicks::global(db, from, to, stats::TOP_LINKS)?;
    let part = stats::GlobalPart {
        days: days.iter().map(|d| [d.1, d.2, d.3]).collect(),
        top,
        complete_until_ms: done.complete_until_ms,
    };
    Ok(stats::global_json(from, to, &[part], done.dropped))
}
