//! The click store's memory: every link-day one owner core holds, compact.
//!
//! ```text
//! index: INDEX_PARTS hash tables of u32 ──► slab: chunks of SLAB_CHUNK records (64 B each)
//!   (5 B per bucket: a u32 and a control byte)     Rec ┌ key: ShortKey            24 B ┐
//!                                                      └ days: SmallVec<[Held; 1]> 40 B ┘
//!  Held (32 B): day u32 · dirty · clicks u64 · bot_clicks u64 · ext: Option<Box<Ext>>
//!  Ext (80 B, one allocation, `full` mode only):
//!      humans, bots: SmallHll (16 B each: up to 7 registers inline, else a boxed `Hll`)
//!      facets: SmallVec<[Facet; 5]> (5 inline: one click's referrer, country, browser,
//!              OS and device), a Facet = value id · kind · bot (u32) + count (u32)
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
//! are interned once per store ([`Values`]) and counted in u32s ([`MAX_FACET_COUNT`]).
//!
//! A removal moves the slab's last record into the hole (one index entry rewritten); the
//! store's dirty list holds slab positions, so a record that moves while it has unlogged days
//! is listed again at its new place (a stale entry finds no dirty day, or another record's,
//! which it logs once: the per-day `dirty` flag is what decides).

use super::{
    Day, Delta, FacetCount, FacetKind, Hll, LinkDay, RegUpdate, ShortKey,
    MAX_REFERRERS_PER_LINK_DAY, OTHER_REFERRER,
};
use hashbrown::HashTable;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

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
    for c in &mut links.chunks {
        for rec in c.iter_mut() {
            pause();
            for h in rec.days.iter_mut() {
                let Some(ext) = h.ext.as_mut() else { continue };
                for f in ext.facets.iter_mut() {
                    let id = *map
                        .entry(f.id())
                        .or_insert_with(|| fresh.id(values.get(f.id())));
                    f.tag = Facet::tag(id, f.kind(), f.bot());
                }
            }
        }
    }
    *values = fresh;
}

/// One facet value's clicks on a link-day: `tag` packs the value id, the kind and whether the
/// clicks are bots'.
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
/// of visitors; seven fit in the 16 bytes the boxed form takes anyway): `idx << 6 | rank` per
/// register, sorted by index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SmallHll {
    Inline {
        n: u8,
        regs: [u16; INLINE_REGISTERS],
    },
    Big(Box<Hll>),
}

impl Default for SmallHll {
    fn default() -> SmallHll {
        SmallHll::Inline {
            n: 0,
            regs: [0; INLINE_REGISTERS],
        }
    }
}

impl SmallHll {
    fn apply(&mut self, (idx, rank): RegUpdate) {
        debug_assert!(rank < 64);
        match self {
            SmallHll::Big(h) => {
                h.apply((idx, rank));
            }
            SmallHll::Inline { n, regs } => {
                let len = *n as usize;
                let at = regs[..len].partition_point(|r| r >> 6 < idx);
                if at < len && regs[at] >> 6 == idx {
                    if u16::from(rank) > regs[at] & 63 {
                        regs[at] = idx << 6 | u16::from(rank);
                    }
                    return;
                }
                if len < INLINE_REGISTERS {
                    regs.copy_within(at..len, at + 1);
                    regs[at] = idx << 6 | u16::from(rank);
                    *n += 1;
                    return;
                }
                let mut h = Hll::Empty;
                for r in &regs[..len] {
                    h.apply((r >> 6, (r & 63) as u8));
                }
                h.apply((idx, rank));
                *self = SmallHll::Big(Box::new(h));
            }
        }
    }

    /// As an [`Hll`]: what a fresh sketch given the same registers would be.
    fn to_hll(&self) -> Hll {
        match self {
            SmallHll::Big(h) => (**h).clone(),
            SmallHll::Inline { n: 0, .. } => Hll::Empty,
            SmallHll::Inline { n, regs } => Hll::Sparse(
                regs[..*n as usize]
                    .iter()
                    .map(|r| (r >> 6, (r & 63) as u8))
                    .collect(),
            ),
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
    facets: SmallVec<[Facet; 5]>,
}

/// One link-day held, and whether it changed since it was last logged.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub day: Day,
    pub dirty: bool,
    clicks: u64,
    bot_clicks: u64,
    ext: Option<Box<Ext>>,
}

impl Held {
    pub fn new(day: Day) -> Held {
        Held {
            day,
            dirty: false,
            clicks: 0,
            bot_clicks: 0,
            ext: None,
        }
    }

    /// Adds a delta's clicks (or a state's, a fold or a thaw adding up two parts).
    pub fn add(&mut self, d: &Delta, values: &mut Values) {
        self.clicks += d.clicks;
        self.bot_clicks += d.bot_clicks;
        if d.humans.is_empty() && d.bots.is_empty() && d.facets.is_empty() {
            return;
        }
        let ext = self.ext.get_or_insert_with(Box::default);
        for &u in &d.humans {
            ext.humans.apply(u);
        }
        for &u in &d.bots {
            ext.bots.apply(u);
        }
        for f in &d.facets {
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
            let mut ext = Box::<Ext>::default();
            for &u in &d.humans {
                ext.humans.apply(u);
            }
            for &u in &d.bots {
                ext.bots.apply(u);
            }
            // A state's facets as they were, in order (a state replaces; no cap applies).
            for f in &d.facets {
                ext.facets.push(Facet {
                    tag: Facet::tag(values.id(&f.value), f.kind, f.bot),
                    count: count32(f.count),
                });
            }
            h.ext = Some(ext);
        }
        h
    }

    /// The same link-day, from a `LinkDay` (a frozen day thawed).
    pub fn from_view(day: Day, l: &LinkDay, values: &mut Values) -> Held {
        let mut h = Held::new(day);
        h.clicks = l.clicks;
        h.bot_clicks = l.bot_clicks;
        if l.humans != Hll::Empty || l.bots != Hll::Empty || !l.facets.is_empty() {
            let mut ext = Box::new(Ext {
                humans: SmallHll::from_hll(&l.humans),
                bots: SmallHll::from_hll(&l.bots),
                facets: SmallVec::new(),
            });
            for f in &l.facets {
                ext.facets.push(Facet {
                    tag: Facet::tag(values.id(&f.value), f.kind, f.bot),
                    count: count32(f.count),
                });
            }
            h.ext = Some(ext);
        }
        h
    }

    /// Writes this link-day into `out` (its vectors reused).
    pub fn view_into(&self, values: &Values, out: &mut LinkDay) {
        out.clicks = self.clicks;
        out.bot_clicks = self.bot_clicks;
        out.facets.clear();
        match &self.ext {
            None => {
                out.humans = Hll::Empty;
                out.bots = Hll::Empty;
            }
            Some(e) => {
                out.humans = e.humans.to_hll();
                out.bots = e.bots.to_hll();
                out.facets.extend(e.facets.iter().map(|f| FacetCount {
                    kind: f.kind(),
                    bot: f.bot(),
                    value: values.get(f.id()).clone(),
                    count: u64::from(f.count),
                }));
            }
        }
    }

    pub fn view(&self, values: &Values) -> LinkDay {
        let mut l = LinkDay::default();
        self.view_into(values, &mut l);
        l
    }
}

impl Ext {
    /// Counts a facet value, under `(other)` if it is a new referrer past the cap.
    fn add_facet(&mut self, kind: FacetKind, bot: bool, id: u32, n: u64, values: &mut Values) {
        let n = count32(n);
        let tag = Facet::tag(id, kind, bot);
        if let Some(f) = self.facets.iter_mut().find(|f| f.tag == tag) {
            f.count = f.count.saturating_add(n);
            return;
        }
        let mut id = id;
        let referrer = |f: &&Facet| f.kind() == FacetKind::Referrer;
        if kind == FacetKind::Referrer && !self.facets.iter().filter(referrer).any(|f| f.id() == id)
        {
            let other = values.ids.get(OTHER_REFERRER).copied();
            let mut distinct: SmallVec<[u32; 64]> = self
                .facets
                .iter()
                .filter(referrer)
                .map(|f| f.id())
                .filter(|&i| Some(i) != other)
                .collect();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() >= MAX_REFERRERS_PER_LINK_DAY {
                id = values.id_of(OTHER_REFERRER);
            }
        }
        let tag = Facet::tag(id, kind, bot);
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
        assert_eq!(std::mem::size_of::<Held>(), 32);
        assert_eq!(std::mem::size_of::<Rec>(), 64);
        assert_eq!(std::mem::size_of::<Ext>(), 80);
        assert_eq!(std::mem::size_of::<SmallHll>(), 16);
    }

    #[test]
    fn a_small_sketch_spills_to_the_heap_and_answers_as_a_plain_one() {
        let mut plain = Hll::Empty;
        let mut small = SmallHll::default();
        for (n, h) in [7u64, 1 << 60, 99, 7, 12345, 1 << 33, 5, 8, 9, 10, 11, 12]
            .iter()
            .enumerate()
        {
            let u = super::super::hll::update_of(h.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            plain.apply(u);
            small.apply(u);
            assert_eq!(small.to_hll(), plain, "after {} visitors", n + 1);
        }
        assert!(matches!(small, SmallHll::Big(_)));
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
