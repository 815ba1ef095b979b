//! Click analytics storage: per-link-day aggregates, the records that change them, and their
//! durable form (a CRC-framed click log per owner core with periodic snapshots, `files.rs`).
//! No networking; the server's aggregator threads (`src/analytics`) drive it.
//!
//! What is stored is already aggregated and classified: counts, HyperLogLog registers and
//! low-cardinality facet values (referrer host, country code, browser, OS, device class).
//! No IP address, user agent, full referrer URL or query string reaches this module.

pub mod codec;
pub mod files;
pub mod frozen;
pub mod hll;
pub mod key;
mod store;
mod table;

pub use hll::{Hll, RegUpdate};
pub use key::ShortKey;
pub use store::{ClickStore, Pause};
pub use table::{INDEX_PARTS, MAX_FACET_COUNT, MAX_FACET_VALUES, SLAB_CHUNK};

use std::sync::Arc;

/// A UTC day: days since 1970-01-01.
pub type Day = u32;

/// Distinct referrer hosts kept per link-day; later ones count as [`OTHER_REFERRER`].
pub const MAX_REFERRERS_PER_LINK_DAY: usize = 50;

/// The referrer value of clicks without a `Referer`.
pub const DIRECT_REFERRER: &str = "(direct)";

/// The referrer value past [`MAX_REFERRERS_PER_LINK_DAY`].
pub const OTHER_REFERRER: &str = "(other)";

/// Longest facet value stored (a DNS name is at most 253 bytes).
pub const MAX_FACET_VALUE_BYTES: usize = 253;

/// The day `unix_s` falls in (UTC).
pub fn day_of(unix_s: u64) -> Day {
    (unix_s / 86_400) as Day
}

/// A facet: a dimension clicks are counted along.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FacetKind {
    Referrer = 1,
    Country = 2,
    Browser = 3,
    Os = 4,
    Device = 5,
}

impl FacetKind {
    pub const ALL: [FacetKind; 5] = [
        FacetKind::Referrer,
        FacetKind::Country,
        FacetKind::Browser,
        FacetKind::Os,
        FacetKind::Device,
    ];

    pub fn from_u8(b: u8) -> Option<FacetKind> {
        FacetKind::ALL.into_iter().find(|k| *k as u8 == b)
    }
}

/// Clicks of one facet value (by humans, or by bots). Values are shared (`Arc`): a handful of
/// distinct strings serve millions of link-days.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FacetCount {
    pub kind: FacetKind,
    pub bot: bool,
    pub value: Arc<str>,
    pub count: u64,
}

/// One link-day's clicks: as a delta (what a flush adds, sent from a source aggregator to the
/// owner's) and as a state (what the click log stores: the link-day's totals, which replace).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Delta {
    pub key: ShortKey,
    pub day: Day,
    /// Every click, bots included.
    pub clicks: u64,
    pub bot_clicks: u64,
    /// HyperLogLog register updates of human and of bot visitors.
    pub humans: Vec<RegUpdate>,
    pub bots: Vec<RegUpdate>,
    pub facets: Vec<FacetCount>,
}

/// A change to the click store, as the click log and snapshots store it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A link-day's totals now: replaces what was there (so replaying a record twice counts
    /// nothing twice).
    State(Delta),
    /// The link was deleted or its stats reset: every day of it is gone.
    Purge { key: ShortKey },
    /// GET requests for unknown keys on `day` so far (server-wide, no key kept): replaces.
    NotFound { day: Day, count: u64 },
    /// The key was purged while frozen files up to `seq` existed: its entries in them are
    /// hidden (a snapshot's copy of `frozen::Frozen::purged`).
    PurgedUpTo { key: ShortKey, seq: u64 },
}

/// One link's clicks on one day.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkDay {
    pub clicks: u64,
    pub bot_clicks: u64,
    pub humans: Hll,
    pub bots: Hll,
    pub facets: Vec<FacetCount>,
}

impl LinkDay {
    fn add(&mut self, d: &Delta) {
        self.clicks += d.clicks;
        self.bot_clicks += d.bot_clicks;
        for &u in &d.humans {
            self.humans.apply(u);
        }
        for &u in &d.bots {
            self.bots.apply(u);
        }
        for f in &d.facets {
            self.add_facet(f);
        }
    }

    /// Counts `f`, under `(other)` if it is a new referrer past the cap.
    fn add_facet(&mut self, f: &FacetCount) {
        if let Some(g) = self
            .facets
            .iter_mut()
            .find(|g| g.kind == f.kind && g.bot == f.bot && g.value == f.value)
        {
            g.count += f.count;
            return;
        }
        let mut value = f.value.clone();
        if f.kind == FacetKind::Referrer && !self.has_referrer(&value) {
            let mut distinct: Vec<&str> = self
                .facets
                .iter()
                .filter(|g| g.kind == FacetKind::Referrer && &*g.value != OTHER_REFERRER)
                .map(|g| &*g.value)
                .collect();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() >= MAX_REFERRERS_PER_LINK_DAY {
                value = Arc::from(OTHER_REFERRER);
            }
        }
        match self
            .facets
            .iter_mut()
            .find(|g| g.kind == f.kind && g.bot == f.bot && g.value == value)
        {
            Some(g) => g.count += f.count,
            None => self.facets.push(FacetCount { value, ..f.clone() }),
        }
    }

    fn has_referrer(&self, v: &str) -> bool {
        self.facets
            .iter()
            .any(|g| g.kind == FacetKind::Referrer && &*g.value == v)
    }

    /// This day as a state record.
    pub fn as_state(&self, key: &[u8], day: Day) -> Delta {
        Delta {
            key: key.into(),
            day,
            clicks: self.clicks,
            bot_clicks: self.bot_clicks,
            humans: self.humans.updates(),
            bots: self.bots.updates(),
            facets: self.facets.clone(),
        }
    }

    pub(crate) fn from_state(d: &Delta) -> LinkDay {
        let mut l = LinkDay {
            clicks: d.clicks,
            bot_clicks: d.bot_clicks,
            facets: d.facets.clone(),
            ..LinkDay::default()
        };
        for &u in &d.humans {
            l.humans.apply(u);
        }
        for &u in &d.bots {
            l.bots.apply(u);
        }
        l
    }
}

#[cfg(test)]
mod tests;
