//! The click store: every link-day one owner core keeps, what changed since it was last
//! logged, and the store's long loops with their yield point ([`Pause`]).

use super::{codec, frozen, table, Day, Delta, LinkDay, Record, ShortKey};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A yield point the store's owner installs ([`ClickStore::set_pause`]): the store's long
/// loops (logging, snapshots, freezing, retention, whole-store queries) call it once per
/// link-day, so a thread that shares a CPU with a latency-bound one can step aside mid-loop.
#[derive(Default)]
pub struct Pause(Option<std::cell::RefCell<Box<dyn FnMut() + Send>>>);

impl Pause {
    #[inline]
    pub fn point(&self) {
        if let Some(p) = &self.0 {
            (p.borrow_mut())();
        }
    }
}

impl Clone for Pause {
    /// A copy of a store (tests, folds) has no yield point of its own.
    fn clone(&self) -> Pause {
        Pause(None)
    }
}

impl std::fmt::Debug for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Pause(set)"
        } else {
            "Pause(none)"
        })
    }
}

/// Every link-day one owner core keeps, plus its server-wide 404 counts, and which of them
/// changed since they were last logged.
///
/// Layout for millions of links (`table.rs` draws it): a split index of u32s into a slab of
/// 72-byte records, one per link, holding its days sorted by day; `full` mode's sketches and
/// facets inline for a link-day of one visitor, else in one small allocation per link-day,
/// facet values interned.
#[derive(Clone, Debug, Default)]
pub struct ClickStore {
    pub(super) links: table::Links,
    pub(super) values: table::Values,
    not_found: BTreeMap<Day, u64>,
    /// Slab places of records with link-days changed since the last `drain_dirty` (a place is
    /// listed when one of its days turns dirty; `Held::dirty` decides what is logged).
    dirty: Vec<u32>,
    dirty_not_found: Vec<Day>,
    /// Closed days frozen into files (`frozen.rs`); memory holds what is newer, and late
    /// clicks of frozen days (added when read).
    frozen: frozen::Frozen,
    pause: Pause,
}

impl PartialEq for ClickStore {
    /// Same link-days (frozen or in memory, an overlay added to its file's) and 404 counts;
    /// what is dirty or where a day is held does not matter.
    fn eq(&self, other: &ClickStore) -> bool {
        self.not_found == other.not_found && self.logical() == other.logical()
    }
}

impl ClickStore {
    /// Installs the yield point the long loops call once per link-day.
    pub fn set_pause(&mut self, f: Box<dyn FnMut() + Send>) {
        self.pause = Pause(Some(std::cell::RefCell::new(f)));
    }

    /// Calls the installed yield point (the owner's own loops around the store use it too, so
    /// one thread has one).
    #[inline]
    pub fn pause_point(&self) {
        self.pause.point();
    }

    /// Adds a delta (a flush's clicks of one link-day) and marks the link-day changed.
    pub fn merge(&mut self, d: &Delta) {
        let i = self.links.position_or_insert(&d.key);
        let rec = self.links.at_mut(i);
        let at = match rec.days.binary_search_by_key(&d.day, |h| h.day) {
            Ok(at) => at,
            Err(at) => {
                rec.days.insert(at, table::Held::new(d.day));
                at
            }
        };
        let h = &mut rec.days[at];
        h.add(d, &mut self.values);
        if !h.dirty {
            h.dirty = true;
            self.dirty.push(i as u32);
        }
    }

    /// Clicks of `key` on `day` while the day is open in memory (0 when none): the visit
    /// log's per-link-day bound reads it right after the day's merge (its entry is still in
    /// cache then).
    pub fn open_day_clicks(&self, key: &[u8], day: Day) -> u64 {
        self.links
            .get(key)
            .and_then(|rec| {
                let i = rec.days.binary_search_by_key(&day, |h| h.day).ok()?;
                Some(rec.days[i].clicks())
            })
            .unwrap_or(0)
    }

    /// Adds 404s on `day`.
    pub fn add_not_found(&mut self, day: Day, count: u64) {
        *self.not_found.entry(day).or_default() += count;
        if !self.dirty_not_found.contains(&day) {
            self.dirty_not_found.push(day);
        }
    }

    /// Every day's 404 count set to 0 (Shlink's delete of orphan visits): the counts there
    /// were, summed, and the days whose count the caller must log as 0 (`Record::NotFound`
    /// replaces a day's count, so those frames undo every earlier one).
    pub fn reset_not_found(&mut self) -> (u64, Vec<Day>) {
        let mut sum = 0;
        let mut days = Vec::new();
        for (day, n) in self.not_found.iter_mut().filter(|(_, n)| **n > 0) {
            sum += *n;
            *n = 0;
            days.push(*day);
        }
        (sum, days)
    }

    /// Applies one record read back from a file. Replaying the same records in the same
    /// order gives the same store; replaying one twice changes nothing.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::State(d) => {
                let held = table::Held::from_state(d, &mut self.values);
                self.put(&d.key, held);
            }
            Record::Purge { key } => self.purge(key),
            Record::NotFound { day, count } => {
                self.not_found.insert(*day, *count);
            }
            Record::PurgedUpTo { key, seq } => {
                let e = self.frozen.purged.entry(key.clone()).or_insert(*seq);
                *e = (*e).max(*seq);
            }
        }
    }

    /// Sets `key`'s link-day `held.day` to `held` (clean).
    fn put(&mut self, key: &ShortKey, held: table::Held) {
        let i = self.links.position_or_insert(key);
        let days = &mut self.links.at_mut(i).days;
        match days.binary_search_by_key(&held.day, |h| h.day) {
            Ok(at) => days[at] = held,
            Err(at) => days.insert(at, held),
        }
    }

    /// Removes every day of `key` (a delete or a reset), frozen ones included.
    pub fn purge(&mut self, key: &[u8]) {
        if let Some((_, Some(moved))) = self.links.remove(key) {
            self.dirty.push(moved as u32);
        }
        self.frozen.purge(key);
    }

    /// Appends the state record of everything changed since the last call to `out` (what a
    /// group commit logs, encoded straight from the store), and forgets the changes.
    pub fn encode_dirty(&mut self, out: &mut Vec<u8>) {
        let mut nf = Vec::new();
        self.drain_dirty_as(
            table::Held::state_into,
            |key, day, l| codec::encode_state(key, day, l, out),
            |day, count| nf.push(Record::NotFound { day, count }),
        );
        for r in &nf {
            codec::encode(r, out);
        }
    }

    /// Calls `link` with every link-day changed since the last call and `not_found` with
    /// every day whose 404 count changed (with the count), and forgets the changes.
    pub fn drain_dirty(
        &mut self,
        link: impl FnMut(&[u8], Day, &LinkDay),
        not_found: impl FnMut(Day, u64),
    ) {
        self.drain_dirty_as(table::Held::view_into, link, not_found)
    }

    /// [`ClickStore::drain_dirty`], each link-day written by `form` (its view, or its state
    /// record's facets).
    fn drain_dirty_as(
        &mut self,
        form: fn(&table::Held, &table::Values, &mut LinkDay),
        link: impl FnMut(&[u8], Day, &LinkDay),
        not_found: impl FnMut(Day, u64),
    ) {
        let done = self.drain_dirty_part(usize::MAX, form, link, not_found);
        debug_assert!(done, "no limit");
    }

    /// [`ClickStore::drain_dirty`] a part at a time: at most `max` changed links, and `true`
    /// once none is left (the 404 counts come with the last part). Between two parts the
    /// store may not change (a core does a sync this way in slices, `analytics::on_core`).
    pub fn drain_dirty_some(
        &mut self,
        max: usize,
        link: impl FnMut(&[u8], Day, &LinkDay),
        not_found: impl FnMut(Day, u64),
    ) -> bool {
        self.drain_dirty_part(max, table::Held::view_into, link, not_found)
    }

    fn drain_dirty_part(
        &mut self,
        max: usize,
        form: fn(&table::Held, &table::Values, &mut LinkDay),
        mut link: impl FnMut(&[u8], Day, &LinkDay),
        mut not_found: impl FnMut(Day, u64),
    ) -> bool {
        let mut view = LinkDay::default();
        for _ in 0..max {
            let Some(i) = self.dirty.pop() else {
                break;
            };
            let i = i as usize;
            if i >= self.links.len() {
                continue; // Listed before a removal shortened the slab.
            }
            let rec = self.links.at_mut(i);
            for h in rec.days.iter_mut().filter(|h| h.dirty) {
                self.pause.point();
                h.dirty = false;
                form(h, &self.values, &mut view);
                link(rec.key.as_bytes(), h.day, &view);
            }
        }
        if !self.dirty.is_empty() {
            return false;
        }
        for day in std::mem::take(&mut self.dirty_not_found) {
            if let Some(&count) = self.not_found.get(&day) {
                not_found(day, count);
            }
        }
        true
    }

    /// The state records of everything changed since the last call, as [`Record`]s (what
    /// [`ClickStore::encode_dirty`] encodes), and the changes forgotten.
    pub fn take_dirty(&mut self) -> Vec<Record> {
        let mut out = Vec::new();
        let mut nf = Vec::new();
        self.drain_dirty_as(
            table::Held::state_into,
            |key, day, l| out.push(Record::State(l.as_state(key, day))),
            |day, count| nf.push(Record::NotFound { day, count }),
        );
        out.extend(nf);
        out
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.links.len() == 0 && self.not_found.is_empty()
    }

    /// The days of `key` in `from..=to` that have clicks, in day order: memory's, frozen
    /// ones, and a frozen day's late clicks added to its file's.
    pub fn days(&self, key: &[u8], from: Day, to: Day) -> std::vec::IntoIter<(Day, LinkDay)> {
        let mut out: Vec<(Day, LinkDay)> = match self.links.get(key) {
            None => Vec::new(),
            Some(rec) => {
                let start = rec.days.partition_point(|h| h.day < from);
                rec.days[start..]
                    .iter()
                    .take_while(|h| h.day <= to)
                    .map(|h| (h.day, h.view(&self.values)))
                    .collect()
            }
        };
        for f in self.frozen.range(from, to) {
            if !self.frozen.visible(key, f) {
                continue;
            }
            if let Some(l) = f.get(key) {
                match out.binary_search_by_key(&f.day(), |x| x.0) {
                    Ok(i) => out[i].1.add(&l.as_state(key, f.day())),
                    Err(i) => out.insert(i, (f.day(), l)),
                }
            }
        }
        out.into_iter()
    }

    /// Calls `f` with every link-day in `from..=to`: memory's, then the frozen files'. A
    /// frozen day with late clicks comes in two parts (the file's and memory's); their
    /// counts add up.
    pub fn for_each_link_day(&self, from: Day, to: Day, mut f: impl FnMut(&[u8], Day, &LinkDay)) {
        let mut view = LinkDay::default();
        for rec in self.links.iter() {
            let start = rec.days.partition_point(|h| h.day < from);
            for h in rec.days[start..].iter().take_while(|h| h.day <= to) {
                self.pause.point();
                h.view_into(&self.values, &mut view);
                f(rec.key.as_bytes(), h.day, &view);
            }
        }
        for file in self.frozen.range(from, to) {
            for (k, l) in file.iter() {
                self.pause.point();
                if self.frozen.visible(&k, file) {
                    f(&k, file.day(), &l);
                }
            }
        }
    }

    /// Every link-day as one figure each (an overlay added to its file's), for comparisons.
    fn logical(&self) -> BTreeMap<(Vec<u8>, Day), LinkDay> {
        let mut all: BTreeMap<(Vec<u8>, Day), LinkDay> = BTreeMap::new();
        self.for_each_link_day(0, Day::MAX, |k, day, l| {
            match all.entry((k.to_vec(), day)) {
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    e.get_mut().add(&l.as_state(k, day))
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(l.clone());
                }
            }
        });
        all
    }

    /// Moves every clean link-day of the days up to `through` into frozen files written at
    /// `seq` in `dir` (`frozen.rs`); a day frozen before is written again with its late
    /// clicks added. Link-days changed since the last log write stay in memory (their state
    /// is logged first; they freeze at a later snapshot). The interned facet values are cut
    /// to those memory still holds. Returns the files written.
    /// Whether memory holds a clean (logged) link-day of day `through` or earlier: what
    /// [`ClickStore::freeze`] would write to a frozen file.
    pub fn holds_clean_through(&self, through: Day) -> bool {
        self.links
            .iter()
            .any(|rec| rec.days.iter().any(|h| h.day <= through && !h.dirty))
    }

    pub fn freeze(
        &mut self,
        dir: &std::path::Path,
        core: usize,
        through: Day,
        seq: u64,
    ) -> Result<usize, crate::Error> {
        let mut by_day: BTreeMap<Day, BTreeMap<ShortKey, LinkDay>> = BTreeMap::new();
        for rec in self.links.iter() {
            for h in rec.days.iter().filter(|h| h.day <= through && !h.dirty) {
                self.pause.point();
                by_day
                    .entry(h.day)
                    .or_default()
                    .insert(rec.key.clone(), h.view(&self.values));
            }
        }
        let mut done = std::collections::BTreeSet::new();
        let result = self.write_frozen(dir, core, seq, by_day, &mut done);
        // One pass over memory for every day frozen, also after a failure midway (a day
        // both frozen and in memory would count twice).
        let (dirty, pause) = (&mut self.dirty, &self.pause);
        self.links.retain(
            |rec| {
                pause.point();
                rec.days.retain(|h| h.dirty || !done.contains(&h.day));
                !rec.days.is_empty()
            },
            |moved| dirty.push(moved as u32),
        );
        self.frozen.prune_purges();
        let pause = &self.pause;
        table::compact_values(&mut self.links, &mut self.values, &mut || pause.point());
        result.map(|()| done.len())
    }

    fn write_frozen(
        &mut self,
        dir: &std::path::Path,
        core: usize,
        seq: u64,
        by_day: BTreeMap<Day, BTreeMap<ShortKey, LinkDay>>,
        done: &mut std::collections::BTreeSet<Day>,
    ) -> Result<(), crate::Error> {
        for (day, mut entries) in by_day {
            if let Some(old) = self.frozen.days.get(&day) {
                for (k, l) in old.iter() {
                    if !self.frozen.visible(&k, old) {
                        continue;
                    }
                    match entries.get_mut(&k) {
                        Some(m) => m.add(&l.as_state(&k, day)),
                        None => {
                            entries.insert(k, l);
                        }
                    }
                }
            }
            let path = frozen::FrozenDay::write(
                dir,
                core,
                day,
                seq,
                entries.iter().map(|(k, l)| (&k[..], l)),
            )
            .map_err(|e| crate::Error::io(dir, "write a frozen click day", e))?;
            let f = frozen::FrozenDay::open(&path, day, seq)?;
            self.frozen.days.insert(day, Arc::new(f));
            done.insert(day);
        }
        Ok(())
    }

    /// Whether memory holds a link-day of a day up to `through` (a snapshot would freeze it).
    pub fn holds_days_through(&self, through: Day) -> bool {
        self.links
            .iter()
            .any(|rec| rec.days.first().is_some_and(|h| h.day <= through))
    }

    /// Moves every frozen link-day back into memory (a core-count fold re-splits them).
    pub fn thaw(&mut self) {
        let frozen = std::mem::take(&mut self.frozen);
        for f in frozen.days.values() {
            for (k, l) in f.iter() {
                if !frozen.visible(&k, f) {
                    continue;
                }
                self.add_day(&k, f.day(), &l);
            }
        }
    }

    /// Adds a link-day's figures to what is held of it (clean).
    fn add_day(&mut self, key: &ShortKey, day: Day, l: &LinkDay) {
        let i = self.links.position_or_insert(key);
        let days = &mut self.links.at_mut(i).days;
        match days.binary_search_by_key(&day, |h| h.day) {
            Ok(at) => days[at].add(&l.as_state(key, day), &mut self.values),
            Err(at) => days.insert(at, table::Held::from_view(day, l, &mut self.values)),
        }
    }

    /// The frozen days and purges (the snapshot lists them).
    pub fn frozen(&self) -> &frozen::Frozen {
        &self.frozen
    }

    /// Takes over frozen files recovery opened (before any record is applied).
    pub fn set_frozen(&mut self, days: Vec<frozen::FrozenDay>) {
        for f in days {
            self.frozen.days.insert(f.day(), Arc::new(f));
        }
    }

    /// 404s counted on `day`.
    pub fn not_found(&self, day: Day) -> u64 {
        self.not_found.get(&day).copied().unwrap_or(0)
    }

    /// Drops every day before `first_kept` (retention); returns the link-days dropped.
    pub fn drop_before(&mut self, first_kept: Day) -> usize {
        let mut dropped = 0;
        let (dirty, pause) = (&mut self.dirty, &self.pause);
        self.links.retain(
            |rec| {
                pause.point();
                let cut = rec.days.partition_point(|h| h.day < first_kept);
                dropped += cut;
                rec.days.drain(..cut);
                !rec.days.is_empty()
            },
            |moved| dirty.push(moved as u32),
        );
        self.not_found = self.not_found.split_off(&first_kept);
        let kept = self.frozen.days.split_off(&first_kept);
        dropped += std::mem::replace(&mut self.frozen.days, kept)
            .values()
            .map(|f| f.len())
            .sum::<usize>();
        self.frozen.prune_purges();
        dropped
    }

    /// The whole store as records that rebuild it (a snapshot).
    pub fn to_records(&self) -> impl Iterator<Item = Record> + '_ {
        let links = self.links.iter().flat_map(move |rec| {
            rec.days.iter().map(move |h| {
                self.pause.point();
                let mut l = LinkDay::default();
                h.state_into(&self.values, &mut l);
                Record::State(l.as_state(&rec.key, h.day))
            })
        });
        links.chain(self.tail_records())
    }

    /// The records of a snapshot besides the links' states: 404 counts, purges of keys with
    /// frozen days.
    fn tail_records(&self) -> impl Iterator<Item = Record> + '_ {
        let nf = self
            .not_found
            .iter()
            .map(|(&day, &count)| Record::NotFound { day, count });
        let min_seq = self.frozen.days.values().map(|f| f.seq()).min();
        let purged = self
            .frozen
            .purged
            .iter()
            .filter(move |(_, &p)| min_seq.is_some_and(|m| p >= m))
            .map(|(k, &seq)| Record::PurgedUpTo {
                key: k.clone(),
                seq,
            });
        nf.chain(purged)
    }

    /// Slab places of the links held: an incremental snapshot's cursor starts here
    /// ([`ClickStore::snapshot_links_some`]).
    pub fn link_slots(&self) -> usize {
        self.links.len()
    }

    /// Encodes the state records of up to `max` links below `*cursor` into `out`, moving the
    /// cursor down; `true` once it reached 0. The store may change between two calls: a link
    /// added lands above the cursor (and, being dirty, goes to the new log), and a removal
    /// moves the last link into the hole, so a link is either encoded already or still
    /// below the cursor (at worst encoded twice, and states replace).
    pub fn snapshot_links_some(&self, cursor: &mut usize, max: usize, out: &mut Vec<u8>) -> bool {
        *cursor = (*cursor).min(self.links.len());
        let mut l = LinkDay::default();
        for _ in 0..max {
            if *cursor == 0 {
                break;
            }
            *cursor -= 1;
            self.pause.point();
            let rec = self.links.at(*cursor);
            for h in rec.days.iter() {
                h.state_into(&self.values, &mut l);
                codec::encode(&Record::State(l.as_state(&rec.key, h.day)), out);
            }
        }
        *cursor == 0
    }

    /// The records of a snapshot besides the links' states (404 counts, purges of frozen
    /// days), as they are now: the last part of an incremental snapshot.
    pub fn snapshot_tail(&self, out: &mut Vec<u8>) {
        for r in self.tail_records() {
            codec::encode(&r, out);
        }
    }

    /// Moves every link for which `keep` says no into a new store (a core-count fold).
    pub fn split_off_by(&mut self, mut keep: impl FnMut(&[u8]) -> bool) -> ClickStore {
        let mut out = ClickStore::default();
        let mut moved = Vec::new();
        let values = &self.values;
        let dirty = &mut self.dirty;
        self.links.retain(
            |rec| {
                if keep(rec.key.as_bytes()) {
                    return true;
                }
                for h in &rec.days {
                    moved.push((rec.key.clone(), h.day, h.view(values)));
                }
                false
            },
            |i| dirty.push(i as u32),
        );
        for (k, day, l) in moved {
            out.add_day(&k, day, &l);
        }
        out
    }

    /// Merges `other` into this store (a fold: a link is on one core only, so its days are
    /// taken whole; 404 counts add up).
    pub fn absorb(&mut self, mut other: ClickStore) {
        let values = std::mem::take(&mut other.values);
        for rec in other.links.drain() {
            for h in &rec.days {
                self.add_day(&rec.key, h.day, &h.view(&values));
            }
        }
        for (d, n) in other.not_found {
            *self.not_found.entry(d).or_default() += n;
        }
    }

    /// Link-days held in memory (frozen ones: `frozen().link_days()`).
    pub fn link_days(&self) -> usize {
        self.links.iter().map(|r| r.days.len()).sum()
    }

    /// Takes the 404 counts out (a fold keeps them on core 0 only).
    pub fn take_not_found(&mut self) -> BTreeMap<Day, u64> {
        std::mem::take(&mut self.not_found)
    }
}
