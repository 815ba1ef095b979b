//! Click analytics storage: per-link-day aggregates, the records that change them, and their
//! durable form (a CRC-framed click log per owner core with periodic snapshots, `files.rs`).
//! No networking; the server's aggregator threads (`src/analytics`) drive it.
//!
//! What is stored is already aggregated and classified: counts, HyperLogLog registers and
//! low-cardinality facet values (referrer host, country code, browser, OS, device class).
//! No IP address, user agent, full referrer URL or query string reaches this module.

pub mod codec;
pub mod files;
pub mod hll;

pub use hll::{Hll, RegUpdate};
use std::collections::{BTreeMap, HashMap};

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

/// Clicks of one facet value (by humans, or by bots).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FacetCount {
    pub kind: FacetKind,
    pub bot: bool,
    pub value: Box<str>,
    pub count: u64,
}

/// One link-day's change, as merged from a flush and as the click log stores it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Delta {
    pub key: Box<[u8]>,
    pub day: Day,
    /// Every click, bots included.
    pub clicks: u64,
    pub bot_clicks: u64,
    /// HyperLogLog register updates of human and of bot visitors.
    pub humans: Vec<RegUpdate>,
    pub bots: Vec<RegUpdate>,
    pub facets: Vec<FacetCount>,
}

/// A change to the click store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Delta(Delta),
    /// The link was deleted or its stats reset: every day of it is gone.
    Purge {
        key: Box<[u8]>,
    },
    /// GET requests for unknown keys on `day` (server-wide, no key kept).
    NotFound {
        day: Day,
        count: u64,
    },
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
    fn apply(&mut self, d: &Delta) -> Vec<FacetCount> {
        self.clicks += d.clicks;
        self.bot_clicks += d.bot_clicks;
        for &u in &d.humans {
            self.humans.apply(u);
        }
        for &u in &d.bots {
            self.bots.apply(u);
        }
        d.facets.iter().map(|f| self.add_facet(f)).collect()
    }

    /// Counts `f`, under `(other)` if it is a referrer past the cap; returns it as counted.
    fn add_facet(&mut self, f: &FacetCount) -> FacetCount {
        let mut value = &*f.value;
        if f.kind == FacetKind::Referrer {
            let known = self
                .facets
                .iter()
                .any(|g| g.kind == f.kind && *g.value == *value);
            let distinct = self
                .facets
                .iter()
                .filter(|g| g.kind == FacetKind::Referrer && *g.value != *OTHER_REFERRER)
                .map(|g| &g.value)
                .collect::<std::collections::HashSet<_>>()
                .len();
            if !known && distinct >= MAX_REFERRERS_PER_LINK_DAY {
                value = OTHER_REFERRER;
            }
        }
        let counted = FacetCount {
            kind: f.kind,
            bot: f.bot,
            value: value.into(),
            count: f.count,
        };
        match self
            .facets
            .iter_mut()
            .find(|g| g.kind == f.kind && g.bot == f.bot && *g.value == *value)
        {
            Some(g) => g.count += f.count,
            None => self.facets.push(counted.clone()),
        }
        counted
    }

    /// This day as one delta (what a snapshot stores).
    pub fn as_delta(&self, key: &[u8], day: Day) -> Delta {
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
}

/// Every link-day one owner core keeps, plus its server-wide 404 counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClickStore {
    links: HashMap<Box<[u8]>, BTreeMap<Day, LinkDay>>,
    not_found: BTreeMap<Day, u64>,
}

impl ClickStore {
    /// Applies one record. Replaying the same records in the same order gives the same store.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Delta(d) => {
                self.apply_delta(d);
            }
            Record::Purge { key } => {
                self.links.remove(key);
            }
            Record::NotFound { day, count } => *self.not_found.entry(*day).or_default() += count,
        }
    }

    /// Applies a delta and returns it as counted (referrers past the cap as `(other)`): what
    /// the click log must store so that replaying it gives this same store.
    pub fn apply_delta(&mut self, d: &Delta) -> Delta {
        let facets = self
            .links
            .entry(d.key.clone())
            .or_default()
            .entry(d.day)
            .or_default()
            .apply(d);
        Delta {
            facets,
            ..d.clone()
        }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty() && self.not_found.is_empty()
    }

    /// The days of `key` in `from..=to` that have clicks.
    pub fn days(&self, key: &[u8], from: Day, to: Day) -> impl Iterator<Item = (Day, &LinkDay)> {
        self.links
            .get(key)
            .into_iter()
            .flat_map(move |m| m.range(from..=to).map(|(d, l)| (*d, l)))
    }

    /// Every link with clicks in `from..=to`, with its days there.
    pub fn all_links(
        &self,
        from: Day,
        to: Day,
    ) -> impl Iterator<Item = (&[u8], impl Iterator<Item = (Day, &LinkDay)>)> {
        self.links
            .iter()
            .map(move |(k, m)| (&k[..], m.range(from..=to).map(|(d, l)| (*d, l))))
    }

    /// 404s counted on `day`.
    pub fn not_found(&self, day: Day) -> u64 {
        self.not_found.get(&day).copied().unwrap_or(0)
    }

    /// Drops every day before `first_kept` (retention); returns the link-days dropped.
    pub fn drop_before(&mut self, first_kept: Day) -> usize {
        let mut dropped = 0;
        self.links.retain(|_, days| {
            let keep = days.split_off(&first_kept);
            dropped += days.len();
            *days = keep;
            !days.is_empty()
        });
        self.not_found = self.not_found.split_off(&first_kept);
        dropped
    }

    /// The whole store as records that rebuild it (a snapshot).
    pub fn to_records(&self) -> impl Iterator<Item = Record> + '_ {
        let links = self.links.iter().flat_map(|(k, days)| {
            days.iter()
                .map(move |(d, l)| Record::Delta(l.as_delta(k, *d)))
        });
        let nf = self
            .not_found
            .iter()
            .map(|(&day, &count)| Record::NotFound { day, count });
        links.chain(nf)
    }

    /// Moves every link for which `keep` says no into a new store (a core-count fold).
    pub fn split_off_by(&mut self, mut keep: impl FnMut(&[u8]) -> bool) -> ClickStore {
        let mut out = ClickStore::default();
        let keys: Vec<Box<[u8]>> = self.links.keys().filter(|k| !keep(k)).cloned().collect();
        for k in keys {
            let v = self.links.remove(&k).expect("listed");
            out.links.insert(k, v);
        }
        out
    }

    /// Merges `other` into this store.
    pub fn absorb(&mut self, other: ClickStore) {
        for r in other.to_records() {
            self.apply(&r);
        }
    }

    /// Link-days held.
    pub fn link_days(&self) -> usize {
        self.links.values().map(|d| d.len()).sum()
    }

    /// Takes the 404 counts out (a fold keeps them on core 0 only).
    pub fn take_not_found(&mut self) -> BTreeMap<Day, u64> {
        std::mem::take(&mut self.not_found)
    }
}

#[cfg(test)]
mod tests;
