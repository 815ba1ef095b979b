//! Click analytics storage: per-link-day aggregates, the records that change them, and their
//! durable form (a CRC-framed click log per owner core with periodic snapshots, `files.rs`).
//! No networking; the server's aggregator threads (`src/analytics`) drive it.
//!
//! What is stored is already aggregated and classified: counts, HyperLogLog registers and
//! low-cardinality facet values (referrer host, country code, browser, OS, device class).
//! No IP address, user agent, full referrer URL or query string reaches this module, except
//! the opt-in visit log (`visits`): user agents and addresses cut to their network.

pub mod codec;
pub mod files;
pub mod frozen;
pub mod hll;
pub mod key;
mod store;
mod table;
pub mod visits;

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
    /// Which of the link's redirect rules sent the click: its priority (`"1"` to `"16"`),
    /// or [`DEFAULT_RULE`] when the link has rules and none matched. Clicks of links
    /// without rules have none.
    Rule = 6,
}

/// The [`FacetKind::Rule`] value of a click on a link with rules that matched none.
pub const DEFAULT_RULE: &str = "default";

impl FacetKind {
    /// The kinds every `full` click has, in the order its delta lists them: one visitor's
    /// profile (`table` keeps such a run as one entry).
    pub const ALL: [FacetKind; 5] = [
        FacetKind::Referrer,
        FacetKind::Country,
        FacetKind::Browser,
        FacetKind::Os,
        FacetKind::Device,
    ];

    pub fn from_u8(b: u8) -> Option<FacetKind> {
        match b {
            6 => Some(FacetKind::Rule),
            _ => FacetKind::ALL.into_iter().find(|k| *k as u8 == b),
        }
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

impl Delta {
    /// No clicks, sketch updates or facets any more; the vectors keep their room (the key and
    /// day stay: whoever reuses the delta sets them).
    pub fn clear(&mut self) {
        self.clicks = 0;
        self.bot_clicks = 0;
        self.humans.clear();
        self.bots.clear();
        self.facets.clear();
    }
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
mod tests {
    use super::codec::{decode, encode};
    use super::files::ClickDir;
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::collections::HashMap;

    fn delta(key: &str, day: Day, clicks: u64, bots: u64, refs: &[&str]) -> Delta {
        Delta {
            key: key.as_bytes().into(),
            day,
            clicks,
            bot_clicks: bots,
            humans: vec![(3, 2), (900, 1)],
            bots: vec![],
            facets: refs
                .iter()
                .map(|r| FacetCount {
                    kind: FacetKind::Referrer,
                    bot: false,
                    value: (*r).into(),
                    count: 1,
                })
                .collect(),
        }
    }

    /// What happens to a store: a flush's delta, a purge, 404s, or a group commit.
    #[derive(Clone, Debug)]
    enum Step {
        Merge(Delta),
        Purge(&'static str),
        NotFound(Day, u64),
        Commit,
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        let key = prop::sample::select(vec!["a", "bb", "ccc", "dddd"]);
        prop_oneof![
            6 => (key.clone(), 0u32..5, 0u64..100, 0u64..10, prop::collection::vec((0u16..1024, 1u8..20), 0..5), 0u8..3)
                .prop_map(|(k, day, c, b, regs, browser)| Step::Merge(Delta {
                    key: k.as_bytes().into(),
                    day,
                    clicks: c + b,
                    bot_clicks: b,
                    humans: regs,
                    bots: vec![],
                    facets: vec![FacetCount { kind: FacetKind::Browser, bot: false, value: ["Chrome", "Firefox", "Safari"][browser as usize].into(), count: c }],
                })),
            1 => key.prop_map(Step::Purge),
            1 => (0u32..5, 1u64..9).prop_map(|(day, count)| Step::NotFound(day, count)),
            2 => Just(Step::Commit),
        ]
    }

    proptest! {
        /// Merging against a `HashMap` oracle of clicks per (key, day); and what the group
        /// commits logged, replayed, rebuilds the same store (twice over: states replace).
        #[test]
        fn store_matches_a_map_oracle_and_its_log_replays_to_it(steps in prop::collection::vec(arb_step(), 0..80)) {
            let mut store = ClickStore::default();
            let mut oracle: HashMap<(Vec<u8>, Day), (u64, u64)> = HashMap::new();
            let mut nf: HashMap<Day, u64> = HashMap::new();
            let mut log = Vec::new();
            for st in &steps {
                match st {
                    Step::Merge(d) => {
                        store.merge(d);
                        let e = oracle.entry((d.key.to_vec(), d.day)).or_default();
                        e.0 += d.clicks;
                        e.1 += d.bot_clicks;
                    }
                    Step::Purge(key) => {
                        store.purge(key.as_bytes());
                        // A purge is logged at once (its own sync), after what was committed.
                        log.push(Record::Purge { key: key.as_bytes().into() });
                        oracle.retain(|(k, _), _| k[..] != *key.as_bytes());
                    }
                    Step::NotFound(day, count) => {
                        store.add_not_found(*day, *count);
                        *nf.entry(*day).or_default() += count;
                    }
                    Step::Commit => log.extend(store.take_dirty()),
                }
            }
            log.extend(store.take_dirty());
            for key in ["a", "bb", "ccc", "dddd"] {
                for day in 0..5 {
                    let got = store.days(key.as_bytes(), day, day).next().map(|(_, l)| (l.clicks, l.bot_clicks));
                    prop_assert_eq!(got, oracle.get(&(key.as_bytes().to_vec(), day)).copied());
                }
            }
            for day in 0..5 {
                prop_assert_eq!(store.not_found(day), nf.get(&day).copied().unwrap_or(0));
            }
            let mut replayed = ClickStore::default();
            for r in &log {
                replayed.apply(r);
            }
            prop_assert_eq!(&replayed, &store);
            for r in &log {
                replayed.apply(r);
            }
            prop_assert_eq!(&replayed, &store, "a second replay changes nothing");
            // A snapshot (the store as records) rebuilds the same store.
            let mut again = ClickStore::default();
            for r in store.to_records() {
                again.apply(&r);
            }
            prop_assert_eq!(&again, &store);
        }

        #[test]
        fn records_round_trip_through_the_codec(steps in prop::collection::vec(arb_step(), 0..20)) {
            let mut store = ClickStore::default();
            let mut records = Vec::new();
            for st in steps {
                match st {
                    Step::Merge(d) => store.merge(&d),
                    Step::Purge(k) => records.push(Record::Purge { key: k.as_bytes().into() }),
                    Step::NotFound(day, count) => store.add_not_found(day, count),
                    Step::Commit => records.extend(store.take_dirty()),
                }
            }
            let mut bytes = Vec::new();
            for r in &records {
                encode(r, &mut bytes);
            }
            let mut pos = 0;
            let mut back = Vec::new();
            while let Some((r, n)) = decode(&bytes[pos..]).unwrap() {
                back.push(r);
                pos += n;
            }
            prop_assert_eq!(pos, bytes.len());
            prop_assert_eq!(back, records);
        }
    }

    fn state_frames(store: &mut ClickStore) -> Vec<u8> {
        let mut b = Vec::new();
        for r in store.take_dirty() {
            encode(&r, &mut b);
        }
        b
    }

    #[test]
    fn referrers_past_the_cap_count_as_other() {
        let mut s = ClickStore::default();
        let hosts: Vec<String> = (0..MAX_REFERRERS_PER_LINK_DAY + 5)
            .map(|i| format!("h{i}.example"))
            .collect();
        for h in &hosts {
            s.merge(&delta("k", 1, 1, 0, &[h]));
        }
        s.merge(&delta("k", 1, 1, 0, &["h0.example"]));
        let (_, day) = s.days(b"k", 1, 1).next().unwrap();
        let refs: Vec<_> = day
            .facets
            .iter()
            .filter(|f| f.kind == FacetKind::Referrer)
            .collect();
        assert_eq!(refs.len(), MAX_REFERRERS_PER_LINK_DAY + 1);
        let other = refs.iter().find(|f| &*f.value == OTHER_REFERRER).unwrap();
        assert_eq!(other.count, 5);
        assert_eq!(
            refs.iter()
                .find(|f| &*f.value == "h0.example")
                .unwrap()
                .count,
            2
        );
    }

    proptest! {
        /// A sync drained a few links at a time (a core's slices) lists the same link-days
        /// and 404 counts as one drained whole, and leaves nothing dirty behind.
        #[test]
        fn draining_in_parts_lists_what_draining_whole_does(
            merges in prop::collection::vec((0u8..20, 0u32..3, 1u64..4), 1..80),
            nf in prop::collection::vec((0u32..3, 1u64..5), 0..5),
            part in 1usize..7,
        ) {
            let mut whole = ClickStore::default();
            let mut parts = ClickStore::default();
            for &(k, day, n) in &merges {
                let d = delta(&format!("k{k}"), day, n, 0, &["r.example"]);
                whole.merge(&d);
                parts.merge(&d);
            }
            for &(day, n) in &nf {
                whole.add_not_found(day, n);
                parts.add_not_found(day, n);
            }
            let mut a = BTreeMap::new();
            let mut a_nf = BTreeMap::new();
            whole.drain_dirty(
                |k, day, l| { a.insert((k.to_vec(), day), (l.clicks, l.facets.len())); },
                |day, n| { a_nf.insert(day, n); },
            );
            let mut b = BTreeMap::new();
            let mut b_nf = BTreeMap::new();
            let mut rounds = 0;
            while !parts.drain_dirty_some(
                part,
                |k, day, l| { assert!(b.insert((k.to_vec(), day), (l.clicks, l.facets.len())).is_none(), "listed twice"); },
                |day, n| { b_nf.insert(day, n); },
            ) {
                rounds += 1;
                prop_assert!(rounds <= merges.len());
            }
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(&a_nf, &b_nf);
            let (mut again, mut again_nf) = (0, 0);
            prop_assert!(parts.drain_dirty_some(usize::MAX, |_, _, _| again += 1, |_, _| again_nf += 1));
            prop_assert_eq!((again, again_nf), (0, 0));
        }
    }

    #[test]
    fn retention_drops_old_days() {
        let mut s = ClickStore::default();
        for d in 0..10 {
            s.merge(&delta("k", d, 1, 0, &[]));
        }
        assert_eq!(s.drop_before(7), 7);
        assert_eq!(s.days(b"k", 0, 100).count(), 3);
    }

    fn owner_of(k: &[u8], cores: usize) -> usize {
        k.iter().map(|&b| b as usize).sum::<usize>() % cores
    }

    #[test]
    fn logs_snapshots_and_a_core_count_fold_recover_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, rec) = ClickDir::open(tmp.path(), 2, |k| owner_of(k, 2)).unwrap();
        assert_eq!(rec.stores.len(), 2);
        let mut logs: Vec<_> = (0..2)
            .map(|c| dir.open_log(c, rec.next_log[c]).unwrap())
            .collect();
        let mut stores = [ClickStore::default(), ClickStore::default()];
        for (i, key) in ["a", "bb", "ccc", "dddd", "e"].iter().enumerate() {
            let c = owner_of(key.as_bytes(), 2);
            stores[c].merge(&delta(key, 3, i as u64 + 1, 0, &["x.example"]));
            stores[c].merge(&delta(key, 3, 1, 0, &["y.example"]));
        }
        for c in 0..2 {
            let b = state_frames(&mut stores[c]);
            logs[c].write_and_sync(&b).unwrap();
        }
        // Core 0 snapshots, then logs more.
        logs[0].snapshot(&mut stores[0], None).unwrap();
        let c = owner_of(b"a", 2);
        stores[c].merge(&delta("a", 4, 7, 1, &[]));
        let b = state_frames(&mut stores[c]);
        logs[c].write_and_sync(&b).unwrap();
        // A torn tail on core 1's log: cut, not refused.
        let mut torn = Vec::new();
        encode(&Record::State(delta("bb", 5, 1, 0, &[])), &mut torn);
        logs[1].write_and_sync(&torn[..torn.len() - 3]).unwrap();
        drop(logs);
        let (_, rec) = ClickDir::open(tmp.path(), 2, |k| owner_of(k, 2)).unwrap();
        assert_eq!(rec.stores[0], stores[0]);
        assert_eq!(rec.stores[1], stores[1]);
        assert_eq!(rec.torn_bytes, torn.len() as u64 - 3);
        // Three cores now: every link lands on its new owner, nothing lost or doubled.
        let (_, rec3) = ClickDir::open(tmp.path(), 3, |k| owner_of(k, 3)).unwrap();
        let mut all = stores[0].clone();
        all.absorb(stores[1].clone());
        for key in ["a", "bb", "ccc", "dddd", "e"] {
            let want: Vec<_> = all
                .days(key.as_bytes(), 0, 9)
                .map(|(d, l)| (d, l.clicks))
                .collect();
            let c = owner_of(key.as_bytes(), 3);
            let got: Vec<_> = rec3.stores[c]
                .days(key.as_bytes(), 0, 9)
                .map(|(d, l)| (d, l.clicks))
                .collect();
            assert_eq!(got, want, "{key}");
            assert!(!want.is_empty());
        }
        // And again: the fold is not repeated.
        let (_, again) = ClickDir::open(tmp.path(), 3, |k| owner_of(k, 3)).unwrap();
        assert_eq!(again.stores, rec3.stores);
    }

    #[test]
    fn damage_inside_a_log_is_refused_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, rec) = ClickDir::open(tmp.path(), 1, |_| 0).unwrap();
        let mut log = dir.open_log(0, rec.next_log[0]).unwrap();
        let mut b = Vec::new();
        for i in 0..3 {
            encode(&Record::State(delta("k", i, 1, 0, &[])), &mut b);
        }
        log.write_and_sync(&b).unwrap();
        drop(log);
        let path = tmp.path().join("clicks/g1/core-0.0.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12] ^= 0xff; // inside the first record's payload
        std::fs::write(&path, &bytes).unwrap();
        let err = ClickDir::open(tmp.path(), 1, |_| 0)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("core-0.0.log") && err.contains("at byte 0"),
            "{err}"
        );
    }

    /// What happens to one core's store on disk: the aggregator's operations, a snapshot that
    /// freezes the days up to a day, retention, and a restart (after a commit).
    #[derive(Clone, Debug)]
    enum DiskStep {
        Merge(Delta),
        Purge(&'static str),
        Commit,
        Snapshot(Day),
        Retain(Day),
        Reopen,
        /// An incremental snapshot (`ClickLog::begin_snapshot`) freezing up to a day, a part
        /// of its body encoded (links), and its end.
        BeginSnapshot(Day),
        EncodeSome(usize),
        EndSnapshot,
    }

    fn arb_disk_step() -> impl Strategy<Value = DiskStep> {
        let key = prop::sample::select(vec!["a", "bb", "ccc", "dddd", "e5"]);
        prop_oneof![
            8 => (key.clone(), 0u32..8, 1u64..50, 0u64..5, prop::collection::vec((0u16..1024, 1u8..20), 0..3))
                .prop_map(|(k, day, c, b, regs)| DiskStep::Merge(Delta {
                    key: k.as_bytes().into(),
                    day,
                    clicks: c + b,
                    bot_clicks: b,
                    humans: regs,
                    bots: vec![],
                    facets: vec![FacetCount { kind: FacetKind::Os, bot: false, value: "Linux".into(), count: c }],
                })),
            1 => key.prop_map(DiskStep::Purge),
            3 => Just(DiskStep::Commit),
            2 => (0u32..8).prop_map(DiskStep::Snapshot),
            1 => (0u32..4).prop_map(DiskStep::Retain),
            1 => Just(DiskStep::Reopen),
            2 => (0u32..8).prop_map(DiskStep::BeginSnapshot),
            2 => (1usize..3).prop_map(DiskStep::EncodeSome),
            2 => Just(DiskStep::EndSnapshot),
        ]
    }

    fn reopen(path: &std::path::Path) -> (files::ClickLog, ClickStore) {
        let (dir, mut rec) = ClickDir::open(path, 1, |_| 0).unwrap();
        let log = dir.open_log(0, rec.next_log[0]).unwrap();
        (log, rec.stores.pop().unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Frozen days against a `HashMap` oracle of clicks per (key, day): through snapshots
        /// that freeze, late clicks of frozen days, purges of frozen keys, retention and
        /// restarts, every query answers the oracle, memory keeps no clean link-day of a frozen
        /// day, and a restart recovers the same store. Incremental snapshots interleave with
        /// all of it (a restart or a whole snapshot abandons one half encoded).
        #[test]
        fn frozen_days_match_a_map_oracle_through_restarts(steps in prop::collection::vec(arb_disk_step(), 1..60)) {
            let tmp = tempfile::tempdir().unwrap();
            let (mut log, mut store) = reopen(tmp.path());
            // An incremental snapshot in progress: its log number, cursor and body.
            let mut snap: Option<(u64, usize, Vec<u8>)> = None;
            let mut oracle: HashMap<(Vec<u8>, Day), (u64, u64)> = HashMap::new();
            let commit = |store: &mut ClickStore, log: &mut files::ClickLog| {
                let mut b = Vec::new();
                store.encode_dirty(&mut b);
                log.write_and_sync(&b).unwrap();
            };
            for st in &steps {
                match st {
                    DiskStep::Merge(d) => {
                        store.merge(d);
                        let e = oracle.entry((d.key.to_vec(), d.day)).or_default();
                        e.0 += d.clicks;
                        e.1 += d.bot_clicks;
                    }
                    DiskStep::Purge(key) => {
                        store.purge(key.as_bytes());
                        let mut b = Vec::new();
                        encode(&Record::Purge { key: key.as_bytes().into() }, &mut b);
                        log.write_and_sync(&b).unwrap();
                        oracle.retain(|(k, _), _| k[..] != *key.as_bytes());
                    }
                    DiskStep::Commit => commit(&mut store, &mut log),
                    DiskStep::Snapshot(through) => {
                        snap = None;
                        log.snapshot(&mut store, Some(*through)).unwrap();
                        for rec in store.links.iter() {
                            for h in rec.days.iter().filter(|h| h.day <= *through) {
                                prop_assert!(h.dirty, "{:?} day {} frozen and in memory", rec.key, h.day);
                            }
                        }
                    }
                    DiskStep::Retain(first) => {
                        snap = None;
                        store.drop_before(*first);
                        log.snapshot(&mut store, None).unwrap();
                        oracle.retain(|(_, d), _| d >= first);
                    }
                    DiskStep::BeginSnapshot(through) => {
                        if snap.is_none() {
                            let next = log.begin_snapshot(&mut store, Some(*through)).unwrap();
                            snap = Some((next, store.link_slots(), Vec::new()));
                            for rec in store.links.iter() {
                                for h in rec.days.iter().filter(|h| h.day <= *through) {
                                    prop_assert!(h.dirty, "{:?} day {} frozen and in memory", rec.key, h.day);
                                }
                            }
                        }
                    }
                    DiskStep::EncodeSome(n) => {
                        if let Some((_, cursor, body)) = &mut snap {
                            store.snapshot_links_some(cursor, *n, body);
                        }
                    }
                    DiskStep::EndSnapshot => {
                        if let Some((next, mut cursor, mut body)) = snap.take() {
                            while !store.snapshot_links_some(&mut cursor, 1, &mut body) {}
                            store.snapshot_tail(&mut body);
                            log.end_snapshot(&store, next, &body).unwrap();
                        }
                    }
                    DiskStep::Reopen => {
                        snap = None;
                        commit(&mut store, &mut log);
                        drop(log);
                        let (l, recovered) = reopen(tmp.path());
                        prop_assert_eq!(&recovered, &store);
                        log = l;
                        store = recovered;
                    }
                }
                for key in ["a", "bb", "ccc", "dddd", "e5"] {
                    let got: Vec<(Day, (u64, u64))> = store
                        .days(key.as_bytes(), 0, 9)
                        .map(|(d, l)| (d, (l.clicks, l.bot_clicks)))
                        .collect();
                    let mut want: Vec<(Day, (u64, u64))> = oracle
                        .iter()
                        .filter(|((k, _), _)| k[..] == *key.as_bytes())
                        .map(|((_, d), v)| (*d, *v))
                        .collect();
                    want.sort();
                    prop_assert_eq!(got, want, "{}", key);
                }
                let mut total = 0;
                store.for_each_link_day(0, 9, |_, _, l| total += l.clicks);
                prop_assert_eq!(total, oracle.values().map(|v| v.0).sum::<u64>());
            }
        }
    }

    /// What happens while an incremental snapshot is being encoded.
    #[derive(Clone, Debug)]
    enum During {
        Merge(u8, Day),
        Purge(u8),
        Commit,
        Encode(usize),
    }

    fn arb_during() -> impl Strategy<Value = During> {
        prop_oneof![
            4 => (0u8..30, 0u32..3).prop_map(|(k, d)| During::Merge(k, d)),
            1 => (0u8..30).prop_map(During::Purge),
            2 => Just(During::Commit),
            4 => (1usize..4).prop_map(During::Encode),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// An incremental snapshot encoded while links are added, changed and purged (each
        /// purge moving the last link into its hole) recovers exactly the store: no link
        /// the cursor passed over is lost, whether the restart comes before its end (the old
        /// snapshot and every log) or after (the new snapshot and the new log).
        #[test]
        fn an_incremental_snapshot_recovers_the_store_whatever_changes_meanwhile(
            before in prop::collection::vec((0u8..30, 0u32..3), 1..60),
            during in prop::collection::vec(arb_during(), 0..60),
            end in any::<bool>(),
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let (mut log, mut store) = reopen(tmp.path());
            let commit = |store: &mut ClickStore, log: &mut files::ClickLog| {
                let mut b = Vec::new();
                store.encode_dirty(&mut b);
                log.write_and_sync(&b).unwrap();
            };
            let merge = |store: &mut ClickStore, k: u8, day: Day| {
                store.merge(&delta(&format!("k{k}"), day, 2, 1, &["r.example"]));
            };
            for &(k, day) in &before {
                merge(&mut store, k, day);
            }
            commit(&mut store, &mut log);
            let next = log.begin_snapshot(&mut store, None).unwrap();
            let mut cursor = store.link_slots();
            let mut body = Vec::new();
            for st in &during {
                match *st {
                    During::Merge(k, day) => merge(&mut store, k, day),
                    During::Purge(k) => {
                        let key = format!("k{k}");
                        store.purge(key.as_bytes());
                        let mut b = Vec::new();
                        encode(&Record::Purge { key: key.as_bytes().into() }, &mut b);
                        log.write_and_sync(&b).unwrap();
                    }
                    During::Commit => commit(&mut store, &mut log),
                    During::Encode(n) => {
                        store.snapshot_links_some(&mut cursor, n, &mut body);
                    }
                }
            }
            if end {
                while !store.snapshot_links_some(&mut cursor, 1, &mut body) {}
                store.snapshot_tail(&mut body);
                log.end_snapshot(&store, next, &body).unwrap();
            }
            commit(&mut store, &mut log);
            drop(log);
            let (_, recovered) = reopen(tmp.path());
            prop_assert_eq!(&recovered, &store);
        }
    }

    #[test]
    fn a_damaged_or_missing_frozen_day_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, mut store) = reopen(tmp.path());
        for d in 0..3 {
            store.merge(&delta("k", d, 2, 0, &["x.example"]));
        }
        let mut b = Vec::new();
        store.encode_dirty(&mut b);
        log.write_and_sync(&b).unwrap();
        log.snapshot(&mut store, Some(1)).unwrap();
        assert_eq!(store.frozen().listed().len(), 2);
        assert_eq!(store.link_days(), 1, "only the open day stays in memory");
        drop(log);
        let gen = tmp.path().join("clicks/g1");
        let name = frozen::file_name(0, 1, 1);
        // An orphan (a file no snapshot lists) is removed, not read.
        std::fs::write(gen.join(frozen::file_name(0, 2, 9)), b"orphan").unwrap();
        let (_, again) = reopen(tmp.path());
        assert_eq!(again, store);
        assert!(!gen.join(frozen::file_name(0, 2, 9)).exists());
        let path = gen.join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x55;
        std::fs::write(&path, &bytes).unwrap();
        let err = ClickDir::open(tmp.path(), 1, |_| 0)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(&name) && err.contains("checksum"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = ClickDir::open(tmp.path(), 1, |_| 0)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(&name) && err.contains("missing"), "{err}");
    }

    #[test]
    fn a_core_count_fold_thaws_frozen_days_and_loses_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, rec) = ClickDir::open(tmp.path(), 2, |k| owner_of(k, 2)).unwrap();
        let mut logs: Vec<_> = (0..2)
            .map(|c| dir.open_log(c, rec.next_log[c]).unwrap())
            .collect();
        let mut stores = [ClickStore::default(), ClickStore::default()];
        for (i, key) in ["a", "bb", "ccc", "dddd", "e"].iter().enumerate() {
            let c = owner_of(key.as_bytes(), 2);
            for d in 0..4 {
                stores[c].merge(&delta(key, d, i as u64 + d as u64 + 1, 0, &[]));
            }
        }
        for c in 0..2 {
            let b = state_frames(&mut stores[c]);
            logs[c].write_and_sync(&b).unwrap();
            logs[c].snapshot(&mut stores[c], Some(2)).unwrap();
        }
        stores[owner_of(b"a", 2)].purge(b"a");
        let mut b = Vec::new();
        encode(
            &Record::Purge {
                key: b"a"[..].into(),
            },
            &mut b,
        );
        logs[owner_of(b"a", 2)].write_and_sync(&b).unwrap();
        drop(logs);
        let (_, rec3) = ClickDir::open(tmp.path(), 3, |k| owner_of(k, 3)).unwrap();
        for key in ["a", "bb", "ccc", "dddd", "e"] {
            let want: Vec<_> = stores[owner_of(key.as_bytes(), 2)]
                .days(key.as_bytes(), 0, 9)
                .map(|(d, l)| (d, l.clicks))
                .collect();
            let got: Vec<_> = rec3.stores[owner_of(key.as_bytes(), 3)]
                .days(key.as_bytes(), 0, 9)
                .map(|(d, l)| (d, l.clicks))
                .collect();
            assert_eq!(got, want, "{key}");
            assert_eq!(want.is_empty(), key == "a", "{key}");
        }
    }

    /// What happens to a store in the compact-layout oracle test.
    #[derive(Clone, Debug)]
    enum Op {
        Merge(Delta),
        Purge(u16),
        DropBefore(Day),
        Drain,
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        // Few enough keys that they repeat and removals move records that have unlogged days
        // (moves across slab chunks: `table::tests`).
        let key = 0u16..300;
        let facet =
            (1u8..=6, any::<bool>(), 0usize..70, 1u64..4).prop_map(|(k, bot, v, n)| FacetCount {
                kind: FacetKind::from_u8(k).unwrap(),
                bot,
                value: format!("v{v}").into(),
                count: n,
            });
        let regs = prop::collection::vec((0u16..1024, 1u8..56), 0..6);
        prop_oneof![
            12 => (key.clone(), 0u32..4, 0u64..5, 0u64..3, regs.clone(), regs, prop::collection::vec(facet, 0..8))
                .prop_map(|(k, day, c, b, humans, bots, facets)| Op::Merge(Delta {
                    key: format!("k{k}").as_bytes().into(),
                    day,
                    clicks: c + b,
                    bot_clicks: b,
                    humans,
                    bots,
                    facets,
                })),
            // One click's shape, as the aggregator merges it (held as one interned profile),
            // with the redirect rule that sent it or none: referrers many enough to pass the
            // cap, the other four values few.
            12 => (0u16..20, 0u32..2, any::<bool>(), 1u64..4, 0usize..70, prop::array::uniform4(0usize..3), 0u16..1024, prop::option::of(prop::sample::select(vec!["1", "2", DEFAULT_RULE])))
                .prop_map(|(k, day, bot, n, referrer, rest, reg, rule)| {
                    let values = [format!("v{referrer}")]
                        .into_iter()
                        .chain(rest.iter().map(|v| format!("w{v}")));
                    let visitor = vec![(reg, 1 + (referrer % 50) as u8)];
                    Op::Merge(Delta {
                        key: format!("k{k}").as_bytes().into(),
                        day,
                        clicks: n,
                        bot_clicks: if bot { n } else { 0 },
                        humans: if bot { vec![] } else { visitor.clone() },
                        bots: if bot { visitor } else { vec![] },
                        facets: FacetKind::ALL
                            .into_iter()
                            .zip(values)
                            .map(|(kind, v)| FacetCount { kind, bot, value: v.into(), count: n })
                            .chain(rule.map(|r| FacetCount { kind: FacetKind::Rule, bot, value: r.into(), count: n }))
                            .collect(),
                    })
                }),
            1 => key.prop_map(Op::Purge),
            1 => (0u32..3).prop_map(Op::DropBefore),
            2 => Just(Op::Drain),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// The compact layout (`table.rs`: a split index into a slab, interned facet values,
        /// inline sketches) answers every link-day exactly as `LinkDay::add` on a map does: the
        /// same clicks, sketches and facets in the same order (the referrer cap included), through
        /// removals that move records while they have unlogged days; and what the drains logged
        /// replays to the same store.
        #[test]
        fn the_compact_layout_answers_as_a_map_of_link_days(ops in prop::collection::vec(arb_op(), 1..400)) {
            let mut store = ClickStore::default();
            let mut oracle: BTreeMap<(Vec<u8>, Day), LinkDay> = BTreeMap::new();
            let mut log: Vec<Record> = Vec::new();
            for op in &ops {
                match op {
                    Op::Merge(d) => {
                        store.merge(d);
                        oracle.entry((d.key.to_vec(), d.day)).or_default().add(d);
                    }
                    Op::Purge(k) => {
                        let key = format!("k{k}");
                        store.purge(key.as_bytes());
                        log.push(Record::Purge { key: key.as_bytes().into() });
                        oracle.retain(|(x, _), _| x[..] != *key.as_bytes());
                    }
                    Op::DropBefore(first) => {
                        store.drop_before(*first);
                        oracle.retain(|(_, d), _| d >= first);
                        // What retention leaves is logged by the next snapshot; the test's log
                        // stands for it with the whole store.
                        log.clear();
                        log.extend(store.to_records());
                        store.take_dirty();
                    }
                    Op::Drain => log.extend(store.take_dirty()),
                }
            }
            log.extend(store.take_dirty());
            prop_assert_eq!(store.link_days(), oracle.len());
            for ((k, day), want) in &oracle {
                let got: Vec<(Day, LinkDay)> = store.days(k, *day, *day).collect();
                prop_assert_eq!(got.len(), 1);
                prop_assert_eq!(&got[0].1, want, "{:?} day {}", String::from_utf8_lossy(k), day);
            }
            let mut replayed = ClickStore::default();
            for r in &log {
                replayed.apply(r);
            }
            prop_assert_eq!(&replayed, &store);
        }
    }

    /// One click's delta: the five facets of one visitor profile.
    fn click(key: &str, bot: bool, referrer: &str, agent: usize) -> Delta {
        let values = [
            referrer,
            "ZZ",
            ["Chrome", "Firefox"][agent % 2],
            ["Linux", "iOS"][agent % 2],
            "desktop",
        ];
        Delta {
            key: key.as_bytes().into(),
            day: 3,
            clicks: 1,
            bot_clicks: u64::from(bot),
            facets: FacetKind::ALL
                .into_iter()
                .zip(values)
                .map(|(kind, v)| FacetCount {
                    kind,
                    bot,
                    value: v.into(),
                    count: 1,
                })
                .collect(),
            ..Delta::default()
        }
    }

    #[test]
    fn profiles_and_plain_facets_share_the_referrer_cap_as_linkday_does() {
        let mut store = ClickStore::default();
        let mut want = LinkDay::default();
        let mut merge = |d: Delta| {
            store.merge(&d);
            want.add(&d);
        };
        for i in 0..MAX_REFERRERS_PER_LINK_DAY + 10 {
            merge(click("a", i % 3 == 0, &format!("r{}.example", i % 40), i));
            if i % 5 == 0 {
                // A state-shaped delta (not one click's): held as plain facets.
                merge(delta(
                    "a",
                    3,
                    2,
                    0,
                    &[&format!("p{i}.example"), "r1.example"],
                ));
            }
        }
        merge(click("a", false, "r1.example", 1));
        merge(click("a", false, "new.example", 1));
        let (_, got) = store.days(b"a", 3, 3).next().unwrap();
        assert_eq!(got, want);
        assert!(
            got.facets.iter().any(|f| &*f.value == OTHER_REFERRER),
            "the cap was reached"
        );
    }

    #[test]
    fn a_restart_reads_profiles_back_as_profiles() {
        let mut store = ClickStore::default();
        for (i, r) in ["a.example", "b.example", "c.example", "a.example"]
            .iter()
            .enumerate()
        {
            store.merge(&click("a", i == 2, r, 0));
        }
        store.merge(&delta("a", 3, 1, 0, &["plain.example"]));
        let entries = |s: &ClickStore| s.links.get(b"a").unwrap().days[0].entries();
        assert_eq!(
            entries(&store),
            4,
            "three profiles (one clicked twice) and a plain facet"
        );
        let mut log = Vec::new();
        store.encode_dirty(&mut log);
        let mut restarted = ClickStore::default();
        let mut at = &log[..];
        while let Some((r, len)) = decode(at).unwrap() {
            restarted.apply(&r);
            at = &at[len..];
        }
        assert_eq!(restarted, store);
        assert_eq!(entries(&restarted), 4);
        let snapshot: Vec<Record> = store.to_records().collect();
        let mut again = ClickStore::default();
        for r in &snapshot {
            again.apply(r);
        }
        assert_eq!(entries(&again), 4);
    }

    #[test]
    fn a_link_day_of_many_profiles_is_logged_with_each_value_once() {
        let mut store = ClickStore::default();
        let profiles = table::MAX_STATE_RUN_FACETS / 5 + 1;
        for i in 0..profiles {
            let mut d = click("a", false, "r.example", 0);
            d.facets[1].value = format!("C{i}").into();
            store.merge(&d);
        }
        let log = store.take_dirty();
        let Record::State(d) = &log[0] else {
            panic!("a state first")
        };
        assert_eq!(d.facets.len(), 4 + profiles, "each value once");
        let mut restarted = ClickStore::default();
        restarted.apply(&log[0]);
        assert_eq!(restarted, store);
    }

    #[test]
    fn freezing_renumbers_the_profiles_still_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = ClickStore::default();
        let mut old = click("old", false, "gone.example", 0);
        old.day = 10;
        store.merge(&old);
        let mut want = LinkDay::default();
        for (i, r) in ["a.example", "b.example", "a.example"].iter().enumerate() {
            let mut d = click("new", i == 1, r, i);
            d.day = 12;
            store.merge(&d);
            want.add(&d);
        }
        store.take_dirty();
        store.freeze(dir.path(), 0, 11, 1).unwrap();
        assert_eq!(
            store.values.len(),
            8,
            "gone.example is forgotten, the rest kept"
        );
        assert_eq!(store.days(b"new", 12, 12).next().unwrap().1, want);
        let mut more = click("new", false, "b.example", 0);
        more.day = 12;
        store.merge(&more);
        want.add(&more);
        assert_eq!(store.days(b"new", 12, 12).next().unwrap().1, want);
    }

    #[test]
    fn freezing_forgets_the_facet_values_only_frozen_days_used() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = ClickStore::default();
        store.merge(&delta("old", 10, 1, 0, &["a.example", "b.example"]));
        store.merge(&delta("new", 12, 1, 0, &["c.example"]));
        store.take_dirty();
        assert_eq!(store.values.len(), 3);
        store.freeze(dir.path(), 0, 11, 1).unwrap();
        assert_eq!(
            store.values.len(),
            1,
            "only c.example is still held in memory"
        );
        let (_, l) = store.days(b"new", 12, 12).next().unwrap();
        assert_eq!(&*l.facets[0].value, "c.example");
        let (_, l) = store.days(b"old", 10, 10).next().unwrap();
        assert_eq!(l.facets.len(), 2, "the frozen day answers from its file");
    }

    #[test]
    fn a_reset_of_404s_logs_zeros_that_replace_every_earlier_count() {
        let mut store = ClickStore::default();
        let before = [
            Record::NotFound { day: 5, count: 3 },
            Record::NotFound { day: 6, count: 2 },
            Record::NotFound { day: 7, count: 0 },
        ];
        before.iter().for_each(|r| store.apply(r));
        let (sum, days) = store.reset_not_found();
        assert_eq!((sum, days.as_slice()), (5, &[5, 6][..]));
        assert_eq!((store.not_found(5), store.not_found(6)), (0, 0));
        // The log read back: the earlier counts, then the zeros the reset wrote.
        let mut replayed = ClickStore::default();
        let zeros = days.iter().map(|&day| Record::NotFound { day, count: 0 });
        before
            .into_iter()
            .chain(zeros)
            .for_each(|r| replayed.apply(&r));
        assert_eq!((replayed.not_found(5), replayed.not_found(6)), (0, 0));
        store.add_not_found(6, 1);
        assert_eq!(
            store.not_found(6),
            1,
            "404s after the reset count from zero"
        );
    }
}
