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
pub mod page;
pub mod salts;
pub mod stats;
pub mod step_aside;

pub use combiner::{client_ip, referrer_host};
pub use launch::{start, Aggregators, CoreClicks};

use crate::key::InlineKey;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientIp {
    /// The TCP peer.
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
mod tests;
