//! Click analytics: every GET answered with a redirect is counted, off the hot path.
//!
//! - On the core (connection role): [`combiner::Combiner`], one increment per click into a
//!   preallocated batch, handed off at each sweep.
//! - Off the core: one [`aggregator::Aggregator`] thread per core, which classifies the
//!   batches of its core, routes them to the owners' aggregators, and, as owner, merges, logs
//!   (`shards::clicks`), answers queries and purges.
//!
//! The data path, the durability contract and the privacy rules are in docs/analytics.md.

pub mod aggregator;
pub mod classify;
pub mod combiner;
pub mod export;
pub mod fleet;
mod launch;
pub mod on_core;
pub mod page;
pub mod salts;
pub mod stats;
pub mod step_aside;
pub mod visit_log;

pub use combiner::{client_ip, referrer_host};
pub use launch::{open_geoip, start, Aggregators, CoreClicks, GeoIp};
pub use visit_log::{VisitLogConfig, VisitLogIp};

use crate::base::key::InlineKey;

use crate::mesh::ReplyTo;

use std::path::PathBuf;

use std::sync::atomic::{AtomicU64, Ordering};

/// How often an owner's aggregator makes merged clicks durable (group commit). With the
/// sweep's hand-off (`core::TIMEOUT_SWEEP_INTERVAL_MS`) it bounds what kill -9 loses: ~1.1 s.
pub const CLICK_SYNC_INTERVAL_MS: u64 = 1_000;

/// Days of closed per-link stats kept (`--click-retention-days`).
pub const DEFAULT_RETENTION_DAYS: u32 = 400;

/// Most days `--click-retention-days` takes.
pub const MAX_RETENTION_DAYS: u32 = 3_660;

/// The click log is replaced by a snapshot once it passes this many bytes.
pub const CLICK_LOG_SNAPSHOT_BYTES: u64 = 64 << 20;

/// Queries and purges waiting for one aggregator.
pub const CONTROL_QUEUE_CAPACITY: usize = 1_024;

/// Answers waiting for one core (a core keeps fewer than this many stats queries in flight).
pub const REPLY_QUEUE_CAPACITY: usize = 1_024;

/// Stats queries one core may have in flight; past it they answer 503.
pub const MAX_STATS_IN_FLIGHT_PER_CORE: usize = 512;

/// Messages one aggregator's peer queue holds.
pub const PEER_QUEUE_CAPACITY: usize = 256;

/// The country of every click until a GeoIP database is configured.
pub const NO_COUNTRY: &str = "ZZ";

/// `--analytics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// No click is counted.
    Off,
    /// Clicks per link-day only: no user agent, referrer, visitor or bot classification.
    Counts,
    /// Clicks, bots, unique visitors, referrers, browsers, OS, devices, countries.
    Full,
}

/// `--client-ip`: where a click's address (for unique visitors) comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientIp {
    /// The TCP peer.
    #[default]
    Peer,
    /// The rightmost `X-Forwarded-For` address (the one the fleet's own load balancer added),
    /// the peer without one.
    XForwardedFor,
}

/// Analytics settings of `serve`.
#[derive(Clone, Debug)]
pub struct AnalyticsConfig {
    pub mode: Mode,
    pub client_ip: ClientIp,
    pub retention_days: u32,
    pub bot_patterns: Option<PathBuf>,
    /// `--click-export DIR`: NDJSON lines of every change (`export.rs`).
    pub export_dir: Option<PathBuf>,
    /// `--geoip FILE`: a MaxMind-format `.mmdb` with `country.iso_code` (GeoLite2/GeoIP2
    /// Country or City, or any database of that shape).
    pub geoip: Option<PathBuf>,
    /// Test only (`--fault-fail-click-sync`): every click log write fails.
    pub fail_sync: bool,
    /// `--service-cpus`: the CPUs the aggregators are pinned to (the cores run on the others);
    /// `None`: they share the cores' CPUs and step aside (`step_aside`).
    pub service_cpus: Option<Vec<usize>>,
    /// `--clicks-on-cores`: without `--service-cpus`, each core aggregates its clicks itself
    /// between requests (`on_core`), and only the slow chores go to a service thread.
    pub clicks_on_cores: bool,
    /// The click log's size past which it is replaced by a snapshot
    /// ([`CLICK_LOG_SNAPSHOT_BYTES`]; smaller in tests).
    pub snapshot_bytes: u64,
    /// `--visit-log-days`: the log of individual visits, when on.
    pub visit_log: Option<VisitLogConfig>,
}

impl AnalyticsConfig {
    /// Whether each core does its aggregation itself (`on_core`) rather than a thread.
    pub fn on_cores(&self) -> bool {
        self.service_cpus.is_none() && self.clicks_on_cores
    }
}

/// The sending end of one aggregator's control queue (purges, stats queries). When the
/// aggregators run on the cores it rings the owner core's doorbell after each message, or a
/// parked core would see it only when its park times out.
#[derive(Clone)]
pub struct ControlTx {
    tx: crossbeam::channel::Sender<Control>,
    bell: Option<(std::sync::Arc<crate::mesh::Doorbells>, usize)>,
}

impl ControlTx {
    /// A queue whose reader is a thread (the fleet stats thread, an aggregator thread).
    pub fn to_thread(tx: crossbeam::channel::Sender<Control>) -> ControlTx {
        ControlTx { tx, bell: None }
    }

    /// A queue read by `core`'s own loop.
    pub fn to_core(
        tx: crossbeam::channel::Sender<Control>,
        bells: std::sync::Arc<crate::mesh::Doorbells>,
        core: usize,
    ) -> ControlTx {
        ControlTx {
            tx,
            bell: Some((bells, core)),
        }
    }

    pub fn try_send(&self, c: Control) -> Result<(), crossbeam::channel::TrySendError<Control>> {
        self.tx.try_send(c)?;
        self.ring();
        Ok(())
    }

    /// Waits for room (tests).
    pub fn send(&self, c: Control) -> Result<(), crossbeam::channel::SendError<Control>> {
        self.tx.send(c)?;
        self.ring();
        Ok(())
    }

    fn ring(&self) {
        if let Some((bells, core)) = &self.bell {
            bells.ring(*core);
        }
    }
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        AnalyticsConfig {
            mode: Mode::Full,
            client_ip: ClientIp::Peer,
            retention_days: DEFAULT_RETENTION_DAYS,
            bot_patterns: None,
            export_dir: None,
            geoip: None,
            fail_sync: false,
            service_cpus: None,
            clicks_on_cores: false,
            snapshot_bytes: CLICK_LOG_SNAPSHOT_BYTES,
            visit_log: None,
        }
    }
}

/// Asks sent to an owner core's aggregator.
pub enum Control {
    /// Delete every stat of `key` (the link was deleted, or its stats reset), make that
    /// durable, and from then on drop clicks from each core `c` in messages numbered up to
    /// `cutoffs[c]` (counted before the delete, arriving after it).
    Purge {
        key: InlineKey,
        cutoffs: Box<[u64]>,
        token: u64,
        reply_core: u16,
    },
    /// A link's stats, answered as JSON to the asking core.
    Stats {
        reply: ReplyTo,
        query: stats::StatsQuery,
    },
    /// Visits from the visit log (`visit_log`), answered as JSON to the asking core.
    Visits {
        reply: ReplyTo,
        query: Box<visit_log::VisitLogQuery>,
    },
    /// This aggregator's part of the server-wide stats.
    Global {
        reply: ReplyTo,
        from: shards::clicks::Day,
        to: shards::clicks::Day,
    },
}

/// Answers from an aggregator to a core.
pub enum ToCore {
    Purged {
        token: u64,
    },
    /// A link's (or, in fleet mode, the server-wide) stats as JSON; `None`: the fleet
    /// database did not answer (503).
    Stats {
        reply: ReplyTo,
        body: Option<Vec<u8>>,
    },
    GlobalPart {
        reply: ReplyTo,
        part: Box<stats::GlobalPart>,
    },
}

/// One aggregator's counters (for `/metrics`).
#[derive(Default)]
pub struct AggCounters {
    /// Clicks the core counted and dropped (published by the core at each sweep).
    pub clicks: AtomicU64,
    pub dropped: AtomicU64,
    /// Batches this aggregator classified.
    pub batches: AtomicU64,
    /// Link-day deltas merged as owner, and the clicks in them.
    pub records: AtomicU64,
    pub merged_clicks: AtomicU64,
    /// Clicks of deleted links that arrived after the delete and were dropped.
    pub filtered: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_failures: AtomicU64,
    /// Milliseconds between the last batch's hand-off and its classification.
    pub lag_ms: AtomicU64,
    /// Records in this owner's visit log (`--visit-log-days`), at its last sync.
    pub visit_records: AtomicU64,
    /// Visits this owner counted but did not log (past a link's day or the core's bound).
    pub visits_not_logged: AtomicU64,
}

/// Every core's analytics counters.
pub struct ClickStats {
    pub per_core: Vec<AggCounters>,
}

impl ClickStats {
    pub fn new(cores: usize) -> ClickStats {
        ClickStats {
            per_core: (0..cores).map(|_| AggCounters::default()).collect(),
        }
    }

    /// Clicks dropped on every core since start.
    pub fn dropped_total(&self) -> u64 {
        self.per_core
            .iter()
            .map(|c| c.dropped.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    //! The whole pipeline without sockets: cores' combiners, three aggregators routing to each
    //! other by owner, merges and queries, against a `HashMap` oracle of clicks per key (proptest),
    //! with purges among the clicks.

    use super::combiner::ClickFields;
    use super::stats::{Bots, StatsQuery};
    use super::*;
    use crate::base::key::InlineKey;
    use crate::mesh::router::Router;
    use crate::mesh::Doorbells;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const CORES: usize = 3;

    /// What happens on the cores.
    #[derive(Clone, Debug)]
    enum Step {
        /// Core `core` answers a redirect for key `k` (a bot when `bot`).
        Click { core: usize, k: u8, bot: bool },
        /// Every core hands off what it counted.
        Sweep,
        /// The link `k` is deleted: each core cuts its clicks, its owner's aggregator purges.
        Purge(u8),
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        prop_oneof![
            20 => (0..CORES, 0u8..12, prop::bool::weighted(0.2)).prop_map(|(core, k, bot)| Step::Click { core, k, bot }),
            2 => Just(Step::Sweep),
            1 => (0u8..12).prop_map(Step::Purge),
        ]
    }

    fn key(k: u8) -> String {
        format!("key{k}")
    }

    struct Rig {
        cores: Vec<CoreClicks>,
        aggs: Option<Aggregators>,
        router: Router,
        /// On cores: a thread per core standing in for its loop, doing slices of click work
        /// while `running`, and giving the core's `ClickSlices` back when stopped.
        loops: Vec<std::thread::JoinHandle<on_core::ClickSlices>>,
        running: Arc<std::sync::atomic::AtomicBool>,
        _dir: tempfile::TempDir,
    }

    impl Rig {
        /// Aggregators on their own threads (`on_cores` false) or run by stand-ins for the
        /// cores' loops, a slice at a time (`on_core`, the server's default).
        fn new(on_cores: bool) -> Rig {
            let dir = tempfile::tempdir().unwrap();
            let router = Router::new(64, CORES);
            let bells = Arc::new(Doorbells::new(CORES).unwrap());
            let cfg = AnalyticsConfig {
                clicks_on_cores: on_cores,
                ..AnalyticsConfig::default()
            };
            let (mut cores, aggs) = start(
                &cfg,
                dir.path(),
                router,
                bells,
                Arc::new(ClickStats::new(CORES)),
                (None, None),
            )
            .unwrap()
            .unwrap();
            let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let mut loops = Vec::new();
            for c in &mut cores {
                assert_eq!(c.slices.is_some(), on_cores);
                if let Some(mut slices) = c.slices.take() {
                    let running = running.clone();
                    loops.push(std::thread::spawn(move || {
                        while running.load(std::sync::atomic::Ordering::Relaxed) {
                            if !slices.slice() {
                                std::thread::sleep(Duration::from_micros(100));
                            }
                        }
                        slices
                    }));
                }
            }
            Rig {
                cores,
                aggs: Some(aggs),
                router,
                loops,
                running,
                _dir: dir,
            }
        }

        fn reply(seq: u32) -> crate::mesh::ReplyTo {
            crate::mesh::ReplyTo::request(0, 0, 0, seq)
        }

        /// Waits for a message in core 0's inbox.
        fn next_reply(&self) -> ToCore {
            self.cores[0]
                .inbox
                .recv_timeout(Duration::from_secs(10))
                .expect("an aggregator answered")
        }

        fn purge(&mut self, k: u8, token: u64) {
            let cutoffs: Box<[u64]> = self.cores.iter_mut().map(|c| c.combiner.cut()).collect();
            let owner = self.router.owner(key(k).as_bytes()).core;
            let msg = Control::Purge {
                key: InlineKey::new(key(k).as_bytes()).unwrap(),
                cutoffs,
                token,
                reply_core: 0,
            };
            self.cores[0].control[owner].send(msg).unwrap();
            match self.next_reply() {
                ToCore::Purged { token: t } => assert_eq!(t, token),
                _ => panic!("expected the purge's answer"),
            }
        }

        /// Clicks of `k` (bots included) once every core's clicks are in.
        fn clicks(&mut self, k: u8) -> (u64, u64) {
            let owner = self.router.owner(key(k).as_bytes()).core;
            // Generous: the aggregator threads run at the lowest priority (`base::cpus`), so
            // a machine busy with other work (parallel tests, a build) can hold them off for
            // seconds; only no progress at all for this long is a failure.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                for c in &mut self.cores {
                    c.combiner.sweep();
                }
                let since = combiner::unix_ms();
                std::thread::sleep(Duration::from_millis(5));
                for c in &mut self.cores {
                    c.combiner.sweep();
                }
                let today = shards::clicks::day_of(shards::timefmt::now_s());
                let query = StatsQuery {
                    key: InlineKey::new(key(k).as_bytes()).unwrap(),
                    from: today,
                    to: today,
                    bots: Bots::Include,
                };
                let msg = Control::Stats {
                    reply: Rig::reply(1),
                    query,
                };
                self.cores[0].control[owner].send(msg).unwrap();
                let ToCore::Stats {
                    body: Some(body), ..
                } = self.next_reply()
                else {
                    panic!("expected stats");
                };
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let until = v["complete_until"].as_str().unwrap();
                let until_ms =
                    shards::timefmt::parse_rfc3339_s(&format!("{}Z", &until[..19])).unwrap() * 1000
                        + until[20..23].parse::<u64>().unwrap();
                // `complete_until` is a whole millisecond: every click answered before it is in.
                // A click answered in the millisecond `since` was read in is covered only by a
                // later one (`>=` took a seal from earlier in that same millisecond for enough).
                if until_ms > since {
                    let s = &v["summary"];
                    return (
                        s["clicks"].as_u64().unwrap(),
                        s["bot_clicks"].as_u64().unwrap(),
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "complete_until never passed {since}: {v}"
                );
            }
        }

        fn close(mut self) {
            for c in &mut self.cores {
                c.combiner.close();
            }
            self.running
                .store(false, std::sync::atomic::Ordering::Relaxed);
            for l in self.loops.drain(..) {
                l.join().expect("a core's stand-in").finish();
            }
            self.aggs.take().unwrap().join();
        }
    }

    #[test]
    fn on_cores_a_click_is_counted() {
        let mut rig = Rig::new(true);
        let now_s = shards::timefmt::now_s();
        let c = &mut rig.cores[1].combiner;
        let fields = ClickFields {
            peer: [1; 16],
            forwarded_for: None,
            user_agent: Some(b"Mozilla/5.0 Firefox/121.0"),
            referer: None,
        };
        let click = c.take(ClientIp::Peer, &fields, now_s);
        c.record(key(2).as_bytes(), &click, combiner::ClickRule::NONE, now_s);
        assert_eq!(rig.clicks(2), (1, 0));
        rig.close();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        /// Clicks recorded on any core end up, once each, with their key's owner; a purge
        /// forgets exactly the clicks before it, even those still in flight.
        #[test]
        fn the_pipeline_counts_like_a_map(steps in prop::collection::vec(arb_step(), 1..120)) {
            for on_cores in [false, true] {
            let mut rig = Rig::new(on_cores);
            let mut oracle: HashMap<u8, (u64, u64)> = HashMap::new();
            let now_s = shards::timefmt::now_s();
            let mut token = 0;
            for st in &steps {
                match *st {
                    Step::Click { core, k, bot } => {
                        let ua: &[u8] = if bot { b"Googlebot/2.1" } else { b"Mozilla/5.0 Firefox/121.0" };
                        let c = &mut rig.cores[core].combiner;
                        let fields = ClickFields { peer: [k; 16], forwarded_for: None, user_agent: Some(ua), referer: None };
                        let click = c.take(ClientIp::Peer, &fields, now_s);
                        let dropped = c.tally.dropped;
                        c.record(key(k).as_bytes(), &click, combiner::ClickRule::NONE, now_s);
                        // Dropped when no clean batch was free (the aggregators are behind): by
                        // design, and counted; the oracle counts what the combiner took.
                        if c.tally.dropped == dropped {
                            let e = oracle.entry(k).or_default();
                            e.0 += 1;
                            e.1 += u64::from(bot);
                        }
                    }
                    Step::Sweep => {
                        for c in &mut rig.cores {
                            c.combiner.sweep();
                        }
                    }
                    Step::Purge(k) => {
                        token += 1;
                        let dropped: u64 = rig.cores.iter().map(|c| c.combiner.tally.dropped).sum();
                        rig.purge(k, token);
                        let after: u64 = rig.cores.iter().map(|c| c.combiner.tally.dropped).sum();
                        prop_assert_eq!(after, dropped, "a cut hands its batch off");
                        oracle.remove(&k);
                    }
                }
            }
            for k in 0..12u8 {
                let want = oracle.get(&k).copied().unwrap_or((0, 0));
                prop_assert_eq!(rig.clicks(k), want, "key{} on_cores {}", k, on_cores);
            }
            rig.close();
            }
        }
    }
}
