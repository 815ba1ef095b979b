//! The click store's memory: every link-day one owner core holds, compact.
//!
//! ```text
//! index: INDEX_PARTS hash tables of u32 ──► slab: chunks of SLAB_CHUNK records (72 B each)
//!   (5 B per bucket: a u32 and a control byte)     Rec ┌ key: ShortKey            24 B ┐
//!                                                      └ days: SmallVec<[Held; 1]> 48 B ┘
//!  Held (40 B): day u32 · dirty · clicks u64 · bot_clicks u64 · slot: Slot (16 B)
//!  Slot: Empty (`counts` mode) | One { facet, register } inline (one visitor's link-day,
//!        the commonest in a large store) | Many(Box<Ext>)
//!  Ext (72 B, one allocation, `full` mode only, past one visitor):
//!      humans, bots: SmallHll (16 B each: up to 7 registers inline, then a thin heap list
//!                    of 2-byte registers, then a boxed dense `Hll`)
//!      facets: SmallVec<[Facet; 4]>, a Facet = tag (u32) + count (u32); the tag is a
//!              visitor profile id (one click's referrer, country, browser, OS and device
//!              values at once, interned in `Values`) or one value id, with the kind and
//!              whether the clicks are bots'
//! ```
//!
//! Why this shape (`clickmem`, perf/reports/2026-12-04-issue23-clickmem.md): one
//! `HashMap<key, days>` of 128-byte entries cost 300 B per link-day in `counts` mode (a hash
//! table is half empty right after it doubles, at 1M entries exactly), and `full` mode's
//! per-day vectors of 32-byte facets with `Arc<str>` values and a heap `Vec` per sketch cost
//! 400-600 B. The index holds only u32s, so its empty half costs 5 B a bucket, and it is split
//! into [`INDEX_PARTS`] tables, so a resize moves a few thousand u32s (tens of microseconds)
//! instead of rehashing every link at once (milliseconds the aggregator could not give back to
//! a core: `perf sched` showed a 1M-entry rehash holding the core's CPU). Records live in
//! fixed-size chunks, so growth never copies them and wastes at most one chunk. Facet values
//! are interned once per store ([`Values`]) and counted in u32s ([`MAX_FACET_COUNT`]). A
//! click's five values are held as one interned profile, so a link-day clicked by three
//! visitors holds three entries inline instead of a dozen spilled ones; a link-day's view
//! sums the profiles back into values, in the order `LinkDay::add` would list them. Its
//! state record writes each profile as a run of its five values, so a restart reads the
//! profiles back (`Held::state_into`, `Ext::hold`).
//!
//! A removal moves the slab's last record into the hole (one index entry rewritten); the
//! store's dirty list holds slab positions, so a record that moves while it has unlogged days
//! is listed again at its new place (a stale entry finds no dirty day, or another record's,
//! which it logs once: the per-day `dirty` flag is what decides).

use super::hll::{HLL_M, SPARSE_MAX};
use super::{
    Day, Delta, FacetCount, FacetKind, Hll, LinkDay, RegUpdate, ShortKey,
    MAX_REFERRERS_PER_LINK_DAY, OTHER_REFERRER,
};
use hashbrown::HashTable;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;
use thin_vec::ThinVec;

/// Hash tables the link index is split into (a power of two): a resize moves 1/256 of it.
pub const INDEX_PARTS: usize = 256;
/// Records per slab chunk: 256 KiB, the most a growing slab holds unused.
pub const SLAB_CHUNK: usize = 4096;
/// Records one store holds at most (slab positions are u32).
pub const MAX_RECORDS: usize = u32::MAX as usize;
/// A facet value's clicks on one link-day are counted up to this (then stay there; the
/// link-day's own clicks are u64 and exact). Reached only by one link clicked ~50,000 times a
/// second for a whole day on one owner core.
pub const MAX_FACET_COUNT: u32 = u32::MAX;
/// Distinct facet values one store interns; later new values count as [`OTHER_REFERRER`].
pub const MAX_FACET_VALUES: u32 = 1 << 27;

/// Distinct visitor profiles one store interns (about 50 B each); a click with a new profile
/// past this is held as five plain facets, as a state read back is.
pub const MAX_PROFILES: u32 = 1 << 22;

/// Facets a link-day's state record lists at most when it writes profiles as runs of five
/// values; a link-day with more profiles is written with each value once (its view: a
/// restart then holds it as plain values). Keeps a record far below the codec's u16 facet
/// count and `MAX_CLICK_RECORD_BYTES`.
pub const MAX_STATE_RUN_FACETS: usize = 1024;

/// Slots of [`Values`]' memory of the `Arc`s it was last handed (direct-mapped by address).
const RECENT_SLOTS: usize = 256;

/// Facet values interned: a facet holds an id, the string is held once.
#[derive(Clone, Debug, Default)]
pub(crate) struct Values {
    list: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32, ahash::RandomState>,
    /// The aggregator hands the same `Arc` for the same value (its vocabulary), so most
    /// lookups are answered by the `Arc`'s address instead of hashing the string. Each slot
    /// keeps its `Arc` alive, so an address is never reused for another string while cached.
    recent: Vec<Option<(Arc<str>, u32)>>,
    /// Visitor profiles interned: one click's five facet values (referrer, country, browser,
    /// OS, device, by value id), so a link-day holds one 8-byte entry per profile seen.
    profiles: Vec<[u32; 5]>,
    profile_ids: HashMap<[u32; 5], u32, ahash::RandomState>,
}

impl Values {
    /// The id of `v`, interned now if new.
    fn id(&mut self, v: &Arc<str>) -> u32 {
        if self.recent.is_empty() {
            self.recent.resize(RECENT_SLOTS, None);
        }
        let addr = Arc::as_ptr(v) as *const u8 as usize;
        let slot = (addr >> 4).wrapping_mul(0x9E37_79B9) % RECENT_SLOTS;
        if let Some((a, id)) = &self.recent[slot] {
            if Arc::ptr_eq(a, v) {
                return *id;
            }
        }
        let id = self.intern(v);
        self.recent[slot] = Some((v.clone(), id));
        id
    }

    fn intern(&mut self, v: &Arc<str>) -> u32 {
        if let Some(&id) = self.ids.get(v) {
            return id;
        }
        if self.list.len() as u32 >= MAX_FACET_VALUES - 1 {
            return self.id_of(OTHER_REFERRER);
        }
        let id = self.list.len() as u32;
        self.list.push(v.clone());
        self.ids.insert(v.clone(), id);
        id
    }

    fn id_of(&mut self, v: &str) -> u32 {
        match self.ids.get(v) {
            Some(&id) => id,
            None => {
                let id = self.list.len() as u32;
                let a: Arc<str> = Arc::from(v);
                self.list.push(a.clone());
                self.ids.insert(a, id);
                id
            }
        }
    }

    fn get(&self, id: u32) -> &Arc<str> {
        &self.list[id as usize]
    }

    /// The id of the profile of `ids`, interned now if new; `None` once [`MAX_PROFILES`] are.
    fn profile(&mut self, ids: [u32; 5]) -> Option<u32> {
        if let Some(&p) = self.profile_ids.get(&ids) {
            return Some(p);
        }
        if self.profiles.len() as u32 >= MAX_PROFILES {
            return None;
        }
        let p = self.profiles.len() as u32;
        self.profiles.push(ids);
        self.profile_ids.insert(ids, p);
        Some(p)
    }

    fn profile_values(&self, p: u32) -> [u32; 5] {
        self.profiles[p as usize]
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.list.len()
    }
}

/// Interns only the values `links` still use and renumbers their facets (a snapshot's
/// clean-up: values of dropped and frozen link-days would otherwise stay interned for good).
pub(crate) fn compact_values(links: &mut Links, values: &mut Values, pause: &mut dyn FnMut()) {
    let mut fresh = Values::default();
    let mut map: HashMap<u32, u32, ahash::RandomState> = HashMap::default();
    let mut profile_map: HashMap<u32, u32, ahash::RandomState> = HashMap::default();
    let mut value =
        |id: u32, fresh: &mut Values| *map.entry(id).or_insert_with(|| fresh.id(values.get(id)));
    for c in &mut links.chunks {
        for rec in c.iter_mut() {
            pause();
            for h in rec.days.iter_mut() {
                for f in h.slot.facets_mut() {
                    if f.is_profile() {
                        let p = match profile_map.get(&f.id()) {
                            Some(&p) => p,
                            None => {
                                let old = values.profile_values(f.id());
                                let ids = old.map(|id| value(id, &mut fresh));
                                // As many profiles as before at most: one always fits.
                                let p = fresh.profile(ids).expect("room for a kept profile");
                                profile_map.insert(f.id(), p);
                                p
                            }
                        };
                        f.tag = Facet::profile_tag(p, f.bot());
                    } else {
                        let id = value(f.id(), &mut fresh);
                        f.tag = Facet::tag(id, f.kind(), f.bot());
                    }
                }
            }
        }
    }
    *values = fresh;
}

/// One facet value's clicks on a link-day, or one visitor profile's (kind 0: five values at
/// once): `tag` packs the value or profile id, the kind and whether the clicks are bots'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Facet {
    tag: u32,
    count: u32,
}

impl Facet {
    fn tag(id: u32, kind: FacetKind, bot: bool) -> u32 {
        debug_assert!(id < MAX_FACET_VALUES);
        id << 4 | (kind as u32) << 1 | bot as u32
    }
    fn profile_tag(p: u32, bot: bool) -> u32 {
        debug_assert!(p < MAX_PROFILES);
        p << 4 | bot as u32
    }
    fn is_profile(self) -> bool {
        (self.tag >> 1) & 7 == 0
    }
    /// Facets this entry takes in a state record written as runs.
    fn run_len(self) -> usize {
        match self.is_profile() {
            true => FacetKind::ALL.len(),
            false => 1,
        }
    }
    fn id(self) -> u32 {
        self.tag >> 4
    }
    fn kind(self) -> FacetKind {
        FacetKind::from_u8(((self.tag >> 1) & 7) as u8).expect("packed from a FacetKind")
    }
    fn bot(self) -> bool {
        self.tag & 1 == 1
    }
}

fn count32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(MAX_FACET_COUNT)
}

/// Registers kept inline before a sketch moves to the heap.
const INLINE_REGISTERS: usize = 7;

/// A HyperLogLog sketch that holds its first registers inline (most link-days see a handful
/// of visitors; seven fit in the 16 bytes a pointer form takes anyway), then in a thin heap
/// list (8 bytes here, a 16-byte header and 2 bytes per register there), then dense: each
/// register as `idx << 6 | rank`, sorted by index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SmallHll {
    Inline {
        n: u8,
        regs: [u16; INLINE_REGISTERS],
    },
    Sparse(ThinVec<u16>),
    Dense(Box<Hll>),
}

impl Default for SmallHll {
    fn default() -> SmallHll {
        SmallHll::Inline {
            n: 0,
            regs: [0; INLINE_REGISTERS],
        }
    }
}

fn packed(idx: u16, rank: u8) -> u16 {
    idx << 6 | u16::from(rank)
}

/// Sets register `idx` of a sorted packed list to at least `rank`; `Err(at)` if the list has
/// no such register (it belongs at `at`).
fn raise(regs: &mut [u16], idx: u16, rank: u8) -> Result<(), usize> {
    let at = regs.partition_point(|r| r >> 6 < idx);
    match regs.get_mut(at) {
        Some(r) if *r >> 6 == idx => {
            if u16::from(rank) > *r & 63 {
                *r = packed(idx, rank);
            }
            Ok(())
        }
        _ => Err(at),
    }
}

impl SmallHll {
    fn apply(&mut self, (idx, rank): RegUpdate) {
        debug_assert!(rank < 64);
        match self {
            SmallHll::Dense(h) => {
                h.apply((idx, rank));
            }
            SmallHll::Inline { n, regs } => {
                let len = *n as usize;
                let Err(at) = raise(&mut regs[..len], idx, rank) else {
                    return;
                };
                if len < INLINE_REGISTERS {
                    regs.copy_within(at..len, at + 1);
                    regs[at] = packed(idx, rank);
                    *n += 1;
                    return;
                }
                let mut v = ThinVec::with_capacity(INLINE_REGISTERS + 2);
                v.extend_from_slice(&regs[..len]);
                v.insert(at, packed(idx, rank));
                *self = SmallHll::Sparse(v);
            }
            SmallHll::Sparse(v) => {
                let Err(at) = raise(v, idx, rank) else {
                    return;
                };
                if v.len() == SPARSE_MAX {
                    let mut d = Box::new([0u8; HLL_M]);
                    for r in v.iter() {
                        d[usize::from(r >> 6)] = (r & 63) as u8;
                    }
                    d[usize::from(idx)] = rank;
                    *self = SmallHll::Dense(Box::new(Hll::Dense(d)));
                    return;
                }
                // Grown by a quarter, as `Hll`'s own sparse list is.
                if v.len() == v.capacity() {
                    v.reserve_exact(v.len() / 4 + 1);
                }
                v.insert(at, packed(idx, rank));
            }
        }
    }

    /// As an [`Hll`]: what a fresh sketch given the same registers would be.
    fn to_hll(&self) -> Hll {
        let sparse = |regs: &[u16]| match regs {
            [] => Hll::Empty,
            _ => Hll::Sparse(regs.iter().map(|r| (r >> 6, (r & 63) as u8)).collect()),
        };
        match self {
            SmallHll::Dense(h) => (**h).clone(),
            SmallHll::Inline { n, regs } => sparse(&regs[..*n as usize]),
            SmallHll::Sparse(v) => sparse(v),
        }
    }

    fn from_hll(h: &Hll) -> SmallHll {
        let mut s = SmallHll::default();
        h.for_each_update(|i, r| s.apply((i, r)));
        s
    }
}

/// What `full` mode adds to a link-day (`counts` mode never allocates one).
#[derive(Clone, Debug, Default)]
struct Ext {
    humans: SmallHll,
    bots: SmallHll,
    facets: SmallVec<[Facet; 4]>,
}

/// What `full` mode holds of a link-day besides its counts: nothing (`counts` mode, or no
/// click yet), one visitor inline, or the general form on the heap.
#[derive(Clone, Debug, Default)]
enum Slot {
    #[default]
    Empty,
    /// Exactly one facet entry (a visitor profile, or one value) and one sketch register
    /// (`bots`: in the bots' sketch, else the humans'): a link-day clicked by one visitor, the
    /// most common kind in a large store, without the 80-byte box.
    One {
        facet: Facet,
        reg: u16,
        bots: bool,
    },
    Many(Box<Ext>),
}

impl Slot {
    /// The general form of what this holds (a `One` built inline: no allocation).
    fn as_ext(&self) -> Option<std::borrow::Cow<'_, Ext>> {
        match self {
            Slot::Empty => None,
            Slot::One { facet, reg, bots } => {
                Some(std::borrow::Cow::Owned(Ext::one(*facet, *reg, *bots)))
            }
            Slot::Many(e) => Some(std::borrow::Cow::Borrowed(e)),
        }
    }

    /// `ext`, inline if it is one visitor's.
    fn of(ext: Ext) -> Slot {
        match ext.as_one() {
            Some((facet, reg, bots)) => Slot::One { facet, reg, bots },
            None => Slot::Many(Box::new(ext)),
        }
    }

    /// The facet entries held, to renumber in place.
    fn facets_mut(&mut self) -> &mut [Facet] {
        match self {
            Slot::Empty => &mut [],
            Slot::One { facet, .. } => std::slice::from_mut(facet),
            Slot::Many(e) => &mut e.facets,
        }
    }

    /// The general form, to change: a `One` moves to the heap first.
    fn ext_mut(&mut self) -> &mut Ext {
        if !matches!(self, Slot::Many(_)) {
            let ext = self
                .as_ext()
                .map(std::borrow::Cow::into_owned)
                .unwrap_or_default();
            *self = Slot::Many(Box::new(ext));
        }
        match self {
            Slot::Many(e) => e,
            Slot::Empty | Slot::One { .. } => unreachable!("made the general form above"),
        }
    }
}

/// One link-day held, and whether it changed since it was last logged.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub day: Day,
    pub dirty: bool,
    clicks: u64,
    bot_clicks: u64,
    slot: Slot,
}

impl Held {
    /// Every click of the link-day, bots included.
    pub fn clicks(&self) -> u64 {
        self.clicks
    }

    pub fn new(day: Day) -> Held {
        Held {
            day,
            dirty: false,
            clicks: 0,
            bot_clicks: 0,
            slot: Slot::Empty,
        }
    }

    /// Adds a delta's clicks (or a state's, a fold or a thaw adding up two parts).
    pub fn add(&mut self, d: &Delta, values: &mut Values) {
        self.clicks += d.clicks;
        self.bot_clicks += d.bot_clicks;
        if d.humans.is_empty() && d.bots.is_empty() && d.facets.is_empty() {
            return;
        }
        if matches!(self.slot, Slot::Empty) {
            if let Some(one) = one_visitor(d, values) {
                self.slot = one;
                return;
            }
        }
        let ext = self.slot.ext_mut();
        for &u in &d.humans {
            ext.humans.apply(u);
        }
        for &u in &d.bots {
            ext.bots.apply(u);
        }
        // One click's profile, then its rule, if any: the profile as one entry.
        let mut rest = &d.facets[..];
        if let Some((bot, n)) = profile_run(rest) {
            let ids = [0, 1, 2, 3, 4].map(|i| values.id(&d.facets[i].value));
            if ext.add_profile(ids, bot, n, values) {
                rest = &rest[FacetKind::ALL.len()..];
            }
        }
        for f in rest {
            let id = values.id(&f.value);
            ext.add_facet(f.kind, f.bot, id, f.count, values);
        }
    }

    /// The link-day a state record describes.
    pub fn from_state(d: &Delta, values: &mut Values) -> Held {
        let mut h = Held::new(d.day);
        h.clicks = d.clicks;
        h.bot_clicks = d.bot_clicks;
        if !(d.humans.is_empty() && d.bots.is_empty() && d.facets.is_empty()) {
            let mut ext = Ext::default();
            for &u in &d.humans {
                ext.humans.apply(u);
            }
            for &u in &d.bots {
                ext.bots.apply(u);
            }
            // A state's facets as they were, in order (a state replaces; no cap applies).
            ext.hold(&d.facets, values);
            h.slot = Slot::of(ext);
        }
        h
    }

    /// The same link-day, from a `LinkDay` (a frozen day thawed).
    pub fn from_view(day: Day, l: &LinkDay, values: &mut Values) -> Held {
        let mut h = Held::new(day);
        h.clicks = l.clicks;
        h.bot_clicks = l.bot_clicks;
        if l.humans != Hll::Empty || l.bots != Hll::Empty || !l.facets.is_empty() {
            let mut ext = Ext {
                humans: SmallHll::from_hll(&l.humans),
                bots: SmallHll::from_hll(&l.bots),
                facets: SmallVec::new(),
            };
            ext.hold(&l.facets, values);
            h.slot = Slot::of(ext);
        }
        h
    }

    /// Writes this link-day into `out` (its vectors reused).
    pub fn view_into(&self, values: &Values, out: &mut LinkDay) {
        out.clicks = self.clicks;
        out.bot_clicks = self.bot_clicks;
        out.facets.clear();
        match self.slot.as_ext() {
            None => {
                out.humans = Hll::Empty;
                out.bots = Hll::Empty;
            }
            Some(e) => {
                out.humans = e.humans.to_hll();
                out.bots = e.bots.to_hll();
                out.facets
                    .extend(
                        e.plain_facets(values)
                            .into_iter()
                            .map(|(f, count)| FacetCount {
                                kind: f.kind(),
                                bot: f.bot(),
                                value: values.get(f.id()).clone(),
                                count,
                            }),
                    );
            }
        }
    }

    /// Writes this link-day into `out` as its state record holds it: the facets as held,
    /// each profile as a run of its five values (so a restart reads the profiles back; a
    /// value may appear more than once, its count is the sum).
    pub fn state_into(&self, values: &Values, out: &mut LinkDay) {
        self.view_into(values, out);
        let Some(e) = self.slot.as_ext() else { return };
        let run_len: usize = e.facets.iter().map(|f| f.run_len()).sum();
        if run_len > MAX_STATE_RUN_FACETS {
            return; // The view: each value once, so the record stays small.
        }
        out.facets.clear();
        let mut put = |tag: u32, count: u32| {
            let f = Facet { tag, count };
            out.facets.push(FacetCount {
                kind: f.kind(),
                bot: f.bot(),
                value: values.get(f.id()).clone(),
                count: u64::from(count),
            })
        };
        for f in &e.facets {
            if f.is_profile() {
                let ids = values.profile_values(f.id());
                for (id, kind) in ids.into_iter().zip(FacetKind::ALL) {
                    put(Facet::tag(id, kind, f.bot()), f.count);
                }
            } else {
                put(f.tag, f.count);
            }
        }
    }

    /// Facet entries held (a profile is one).
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.slot.as_ext().map_or(0, |e| e.facets.len())
    }

    pub fn view(&self, values: &Values) -> LinkDay {
        let mut l = LinkDay::default();
        self.view_into(values, &mut l);
        l
    }
}

/// A link-day's first delta as one visitor inline, if it is one: a profile (the cap has
/// nothing to count yet on an empty link-day) and one register. `None`: the general form.
fn one_visitor(d: &Delta, values: &mut Values) -> Option<Slot> {
    let (reg, bots) = match (d.humans.as_slice(), d.bots.as_slice()) {
        ([(idx, rank)], []) => (packed(*idx, *rank), false),
        ([], [(idx, rank)]) => (packed(*idx, *rank), true),
        _ => return None,
    };
    let (bot, n) = profile_shape(d)?;
    let ids = [0, 1, 2, 3, 4].map(|i| values.id(&d.facets[i].value));
    let p = values.profile(ids)?;
    let facet = Facet {
        tag: Facet::profile_tag(p, bot),
        count: count32(n),
    };
    Some(Slot::One { facet, reg, bots })
}

/// A delta shaped as one click's (the aggregator's deltas are: one combined entry, one
/// visitor): five facets, one of each kind in order, all of the same count and bot flag.
fn profile_shape(d: &Delta) -> Option<(bool, u64)> {
    match d.facets.len() == FacetKind::ALL.len() {
        true => profile_run(&d.facets),
        false => None,
    }
}

/// Whether `facets` starts with one visitor profile's five values: one of each kind in
/// order, all of the same count and bot flag.
fn profile_run(facets: &[FacetCount]) -> Option<(bool, u64)> {
    let run = facets.get(..FacetKind::ALL.len())?;
    let first = &run[0];
    let same = run
        .iter()
        .zip(FacetKind::ALL)
        .all(|(f, k)| f.kind == k && f.bot == first.bot && f.count == first.count);
    same.then_some((first.bot, first.count))
}

impl Ext {
    /// The general form of [`Slot::One`].
    fn one(facet: Facet, reg: u16, bots: bool) -> Ext {
        let mut regs = [0; INLINE_REGISTERS];
        regs[0] = reg;
        let sketch = SmallHll::Inline { n: 1, regs };
        let mut ext = Ext::default();
        match bots {
            true => ext.bots = sketch,
            false => ext.humans = sketch,
        }
        ext.facets.push(facet);
        ext
    }

    /// This as [`Slot::One`]'s parts, if it is one visitor's: one facet entry, one register.
    fn as_one(&self) -> Option<(Facet, u16, bool)> {
        let [facet] = self.facets.as_slice() else {
            return None;
        };
        let empty = SmallHll::default();
        let reg = |h: &SmallHll| match h {
            SmallHll::Inline { n: 1, regs } => Some(regs[0]),
            _ => None,
        };
        match (reg(&self.humans), reg(&self.bots)) {
            (Some(r), None) if self.bots == empty => Some((*facet, r, false)),
            (None, Some(r)) if self.humans == empty => Some((*facet, r, true)),
            _ => None,
        }
    }

    /// Counts one visitor profile's clicks (its referrer under `(other)` if it is new past the
    /// cap); `false` if the store holds no more profiles (the caller counts plain facets).
    fn add_profile(&mut self, ids: [u32; 5], bot: bool, n: u64, values: &mut Values) -> bool {
        let mut ids = ids;
        ids[0] = self.capped_referrer(ids[0], values);
        let Some(p) = values.profile(ids) else {
            return false;
        };
        self.count(Facet::profile_tag(p, bot), count32(n));
        true
    }

    /// Holds the facets of a state or a view as they are (no cap: a state replaces), runs of
    /// one profile's five values as that profile.
    fn hold(&mut self, facets: &[FacetCount], values: &mut Values) {
        let mut rest = facets;
        while let Some(f) = rest.first() {
            if let Some((bot, n)) = profile_run(rest) {
                let ids = [0, 1, 2, 3, 4].map(|i| values.id(&rest[i].value));
                if let Some(p) = values.profile(ids) {
                    self.count(Facet::profile_tag(p, bot), count32(n));
                    rest = &rest[FacetKind::ALL.len()..];
                    continue;
                }
            }
            self.count(
                Facet::tag(values.id(&f.value), f.kind, f.bot),
                count32(f.count),
            );
            rest = &rest[1..];
        }
    }

    /// Counts a facet value, under `(other)` if it is a new referrer past the cap.
    fn add_facet(&mut self, kind: FacetKind, bot: bool, id: u32, n: u64, values: &mut Values) {
        let n = count32(n);
        let tag = Facet::tag(id, kind, bot);
        if let Some(f) = self.facets.iter_mut().find(|f| f.tag == tag) {
            f.count = f.count.saturating_add(n);
            return;
        }
        let id = match kind {
            FacetKind::Referrer => self.capped_referrer(id, values),
            _ => id,
        };
        self.count(Facet::tag(id, kind, bot), n);
    }

    fn count(&mut self, tag: u32, n: u32) {
        match self.facets.iter_mut().find(|f| f.tag == tag) {
            Some(f) => f.count = f.count.saturating_add(n),
            None => {
                // Past the inline five, grow by a quarter: a doubling would leave a third of
                // a link-day's facets unused on average.
                if self.facets.len() == self.facets.capacity() {
                    self.facets.reserve_exact(self.facets.len() / 4 + 1);
                }
                self.facets.push(Facet { tag, count: n })
            }
        }
    }

    /// The referrer `id` is counted under: itself if this link-day has it already or holds
    /// fewer than [`MAX_REFERRERS_PER_LINK_DAY`] others, else `(other)` (as `LinkDay::add`).
    fn capped_referrer(&self, id: u32, values: &mut Values) -> u32 {
        let mut held: SmallVec<[u32; 64]> = SmallVec::new();
        for f in &self.facets {
            if f.is_profile() {
                held.push(values.profile_values(f.id())[0]);
            } else if f.kind() == FacetKind::Referrer {
                held.push(f.id());
            }
        }
        if held.contains(&id) {
            return id;
        }
        let other = values.ids.get(OTHER_REFERRER).copied();
        held.retain(|i| Some(*i) != other);
        held.sort_unstable();
        held.dedup();
        if held.len() >= MAX_REFERRERS_PER_LINK_DAY {
            return values.id_of(OTHER_REFERRER);
        }
        id
    }

    /// The link-day's facets one value each, profiles spread into their five, in the order
    /// each was first counted (what `LinkDay::add` keeps).
    fn plain_facets(&self, values: &Values) -> SmallVec<[(Facet, u64); 16]> {
        let mut out: SmallVec<[(Facet, u64); 16]> = SmallVec::new();
        let mut add = |tag: u32, n: u32| match out.iter_mut().find(|(f, _)| f.tag == tag) {
            Some((_, c)) => *c += u64::from(n),
            None => out.push((Facet { tag, count: 0 }, u64::from(n))),
        };
        for f in &self.facets {
            if f.is_profile() {
                let ids = values.profile_values(f.id());
                for (id, kind) in ids.into_iter().zip(FacetKind::ALL) {
                    add(Facet::tag(id, kind, f.bot()), f.count);
                }
            } else {
                add(f.tag, f.count);
            }
        }
        out
    }
}

/// A link's days, sorted; the first inline (most links are clicked on one of the days held).
pub(crate) type Days = SmallVec<[Held; 1]>;

/// One link's record in the slab.
#[derive(Clone, Debug)]
pub(crate) struct Rec {
    pub key: ShortKey,
    pub days: Days,
}

/// The index and the slab: links by key, each with its days.
#[derive(Clone, Debug)]
pub(crate) struct Links {
    parts: Vec<HashTable<u32>>,
    chunks: Vec<Vec<Rec>>,
    len: usize,
    hasher: ahash::RandomState,
}

impl Default for Links {
    fn default() -> Links {
        Links {
            parts: (0..INDEX_PARTS).map(|_| HashTable::new()).collect(),
            chunks: Vec::new(),
            len: 0,
            hasher: ahash::RandomState::new(),
        }
    }
}

/// The part of the index a hash picks: bits the tables do not use (they take the low bits for
/// the bucket and the top 7 for the control byte).
fn part_of(hash: u64) -> usize {
    (hash >> 40) as usize & (INDEX_PARTS - 1)
}

impl Links {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn at(&self, i: usize) -> &Rec {
        &self.chunks[i / SLAB_CHUNK][i % SLAB_CHUNK]
    }

    pub fn at_mut(&mut self, i: usize) -> &mut Rec {
        &mut self.chunks[i / SLAB_CHUNK][i % SLAB_CHUNK]
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        let h = self.hash(key);
        let chunks = &self.chunks;
        self.parts[part_of(h)]
            .find(h, |&i| {
                chunks[i as usize / SLAB_CHUNK][i as usize % SLAB_CHUNK]
                    .key
                    .as_bytes()
                    == key
            })
            .map(|&i| i as usize)
    }

    pub fn get(&self, key: &[u8]) -> Option<&Rec> {
        self.find(key).map(|i| self.at(i))
    }

    /// The slab position of `key`'s record, made (with no days) if it has none.
    pub fn position_or_insert(&mut self, key: &ShortKey) -> usize {
        if let Some(i) = self.find(key.as_bytes()) {
            return i;
        }
        assert!(self.len < MAX_RECORDS, "click store full");
        let i = self.len;
        if i % SLAB_CHUNK == 0 {
            self.chunks.push(Vec::with_capacity(SLAB_CHUNK));
        }
        self.chunks[i / SLAB_CHUNK].push(Rec {
            key: key.clone(),
            days: Days::new(),
        });
        self.len += 1;
        let h = self.hash(key.as_bytes());
        let (hasher, chunks) = (&self.hasher, &self.chunks);
        self.parts[part_of(h)].insert_unique(h, i as u32, |&j| {
            let j = j as usize;
            hasher.hash_one(chunks[j / SLAB_CHUNK][j % SLAB_CHUNK].key.as_bytes())
        });
        i
    }

    /// Removes the record at `i`: the last record moves into its place. Returns it, and
    /// whether a record moved to `i` with unlogged days (the caller lists `i` as dirty).
    fn remove_at(&mut self, i: usize) -> (Rec, bool) {
        let last = self.len - 1;
        let key_hash = self.hash(self.at(i).key.as_bytes());
        self.unindex(key_hash, i);
        let mut moved_dirty = false;
        if i != last {
            let last_hash = self.hash(self.at(last).key.as_bytes());
            let slot = self.parts[part_of(last_hash)]
                .find_mut(last_hash, |&j| j as usize == last)
                .expect("every record is indexed");
            *slot = i as u32;
            let tail = self.chunks.last_mut().expect("a last record").pop();
            let tail = tail.expect("a last record");
            moved_dirty = tail.days.iter().any(|h| h.dirty);
            let rec = std::mem::replace(self.at_mut(i), tail);
            self.len -= 1;
            self.drop_empty_chunk();
            return (rec, moved_dirty);
        }
        let rec = self
            .chunks
            .last_mut()
            .expect("a last record")
            .pop()
            .expect("a last record");
        self.len -= 1;
        self.drop_empty_chunk();
        (rec, moved_dirty)
    }

    fn unindex(&mut self, hash: u64, i: usize) {
        match self.parts[part_of(hash)].find_entry(hash, |&j| j as usize == i) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("every record is indexed"),
        }
    }

    fn drop_empty_chunk(&mut self) {
        if self.chunks.last().is_some_and(|c| c.is_empty()) {
            self.chunks.pop();
        }
    }

    /// Removes `key`'s record; `true` if one moved into a dirty-listed place (see `remove_at`),
    /// with that place.
    pub fn remove(&mut self, key: &[u8]) -> Option<(Rec, Option<usize>)> {
        let i = self.find(key)?;
        let (rec, moved_dirty) = self.remove_at(i);
        Some((rec, moved_dirty.then_some(i)))
    }

    /// Keeps the records `keep` says yes to (it may change their days); calls `moved` with the
    /// new place of every record with unlogged days that moved.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Rec) -> bool, mut moved: impl FnMut(usize)) {
        // From the end: the record moved into a hole has been looked at already.
        let mut i = self.len;
        while i > 0 {
            i -= 1;
            if !keep(self.at_mut(i)) {
                let (_, moved_dirty) = self.remove_at(i);
                if moved_dirty && i < self.len {
                    moved(i);
                }
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rec> + '_ {
        self.chunks.iter().flatten()
    }

    /// Moves every record out.
    pub fn drain(&mut self) -> impl Iterator<Item = Rec> {
        let chunks = std::mem::take(&mut self.chunks);
        for p in &mut self.parts {
            p.clear();
        }
        self.len = 0;
        chunks.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_stay_at_their_budget() {
        // 8 B more than a bare box pointer, so a link-day of one visitor needs no box (80 B).
        assert_eq!(std::mem::size_of::<Slot>(), 16);
        assert_eq!(std::mem::size_of::<Held>(), 40);
        assert_eq!(std::mem::size_of::<Rec>(), 72);
        // 72 B: an 80-byte block from malloc (an 80-byte Ext took 96).
        assert_eq!(std::mem::size_of::<Ext>(), 72);
        assert_eq!(std::mem::size_of::<SmallHll>(), 16);
    }

    /// One click's delta by visitor `v` (a register of its own) with profile `agent`.
    fn one_click(v: u16, bot: bool, agent: &str) -> Delta {
        let reg = vec![(v, 3)];
        Delta {
            key: b"k"[..].into(),
            day: 7,
            clicks: 1,
            bot_clicks: u64::from(bot),
            humans: if bot { vec![] } else { reg.clone() },
            bots: if bot { reg } else { vec![] },
            facets: FacetKind::ALL
                .into_iter()
                .zip(["r.example", "ZZ", agent, "Linux", "desktop"])
                .map(|(kind, v)| FacetCount {
                    kind,
                    bot,
                    value: v.into(),
                    count: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn one_visitors_link_day_is_held_inline_and_answers_as_the_general_form() {
        for bot in [false, true] {
            let mut values = Values::default();
            let mut h = Held::new(7);
            let mut want = LinkDay::default();
            let first = one_click(5, bot, "Chrome");
            h.add(&first, &mut values);
            want.add(&first);
            assert!(matches!(h.slot, Slot::One { .. }), "no box for one visitor");
            assert_eq!(h.view(&values), want);
            // Read back from its state record (a restart): inline again.
            let mut state = LinkDay::default();
            h.state_into(&values, &mut state);
            let d = Delta {
                key: b"k"[..].into(),
                day: 7,
                clicks: state.clicks,
                bot_clicks: state.bot_clicks,
                humans: state.humans.updates(),
                bots: state.bots.updates(),
                facets: state.facets.clone(),
            };
            let back = Held::from_state(&d, &mut values);
            assert!(
                matches!(back.slot, Slot::One { .. }),
                "a restart keeps it inline"
            );
            assert_eq!(back.view(&values), want);
            // A second visitor moves it to the general form, answers unchanged.
            let second = one_click(9, bot, "Firefox");
            h.add(&second, &mut values);
            want.add(&second);
            assert!(matches!(h.slot, Slot::Many(_)));
            assert_eq!(h.view(&values), want);
            assert_eq!(h.entries(), 2);
        }
    }

    #[test]
    fn a_small_sketch_spills_to_the_heap_and_answers_as_a_plain_one() {
        let mut plain = Hll::Empty;
        let mut small = SmallHll::default();
        let mut seen = [false; 3];
        for n in 0..3000u64 {
            // Repeats too: every fifth visitor comes back.
            let h = if n % 5 == 4 { n - 3 } else { n };
            let u = super::super::hll::update_of(h.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            plain.apply(u);
            small.apply(u);
            assert_eq!(small.to_hll(), plain, "after {} visitors", n + 1);
            let form = match small {
                SmallHll::Inline { .. } => 0,
                SmallHll::Sparse(_) => 1,
                SmallHll::Dense(_) => 2,
            };
            seen[form] = true;
        }
        assert_eq!(seen, [true; 3], "inline, then a thin list, then dense");
    }

    #[test]
    fn removals_move_the_last_record_and_keep_the_index_right() {
        let mut l = Links::default();
        let keys: Vec<ShortKey> = (0..3 * SLAB_CHUNK as u32)
            .map(|i| ShortKey::new(format!("k{i}").as_bytes()))
            .collect();
        for k in &keys {
            l.position_or_insert(k);
        }
        assert_eq!(l.len(), keys.len());
        for k in keys.iter().step_by(3) {
            assert!(l.remove(k.as_bytes()).is_some());
        }
        l.retain(|r| !r.key.as_bytes().ends_with(b"7"), |_| {});
        for (n, k) in keys.iter().enumerate() {
            let gone = n % 3 == 0 || k.as_bytes().ends_with(b"7");
            assert_eq!(l.get(k.as_bytes()).is_none(), gone, "{n}");
        }
        assert_eq!(l.iter().count(), l.len());
        assert_eq!(l.chunks.len(), l.len().div_ceil(SLAB_CHUNK));
    }
}
