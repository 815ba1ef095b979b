//! Per-core LRU cache of answers owned by other cores.
//!
//! Fixed capacity, and no allocation after construction: entries live in a preallocated slab,
//! recency is an intrusive doubly-linked list of `u32` slab indices, and lookups go through an
//! open-addressing index (linear probing, backward-shift deletion so no tombstones) sized at
//! construction to at most half full, so it never grows or rehashes. Keys are stored inline.

use crate::base::key::InlineKey;
use shards::link::MAX_STORED_KEY_BYTES;

/// Default entries per core. 65536: at roughly 100 bytes of key and bookkeeping plus the value
/// per entry, a few MiB per core, enough to hold the hot set of a skewed (Zipf-like) key
/// distribution so most cross-core lookups are answered locally.
pub const DEFAULT_LRU_CAPACITY: usize = 65_536;

/// Largest capacity: slab indices are `u32` with one value reserved as "none", and the index is
/// twice the capacity rounded up to a power of two.
pub const MAX_LRU_CAPACITY: usize = 1 << 30;

/// "No entry" in links and index slots.
const NIL: u32 = u32::MAX;

struct Entry<V> {
    key: InlineKey,
    hash: u64,
    /// Toward the most recently used end; for free entries unused.
    prev: u32,
    /// Toward the least recently used end; for free entries, the next free entry.
    next: u32,
    /// `Some` exactly when the entry is in use.
    value: Option<V>,
}

/// A fixed-capacity least-recently-used map from link keys to `V`.
pub struct Lru<V> {
    entries: Vec<Entry<V>>,
    /// Open-addressing index: slab index per slot, `NIL` when empty. Length is a power of two.
    slots: Vec<u32>,
    /// Most recently used entry.
    head: u32,
    /// Least recently used entry (next to evict).
    tail: u32,
    /// First free entry, chained through `next`.
    free: u32,
    len: usize,
    hasher: ahash::RandomState,
}

impl<V> Lru<V> {
    /// A cache holding at most `n` entries, with all its memory allocated now.
    ///
    /// Panics if `n` is 0 or above [`MAX_LRU_CAPACITY`] (a configuration bug).
    pub fn with_capacity(n: usize) -> Self {
        assert!(
            (1..=MAX_LRU_CAPACITY).contains(&n),
            "LRU capacity must be in 1..={MAX_LRU_CAPACITY}, got {n}"
        );
        let entries = (0..n)
            .map(|i| Entry {
                key: InlineKey::EMPTY,
                hash: 0,
                prev: NIL,
                next: if i + 1 < n { (i + 1) as u32 } else { NIL },
                value: None,
            })
            .collect();
        Lru {
            entries,
            slots: vec![NIL; (2 * n).next_power_of_two()],
            head: NIL,
            tail: NIL,
            free: 0,
            len: 0,
            // Random keys per process: a remote client choosing keys cannot aim for collisions.
            hasher: ahash::RandomState::new(),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most entries held.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The value for `key`, marking it most recently used.
    pub fn get(&mut self, key: &[u8]) -> Option<&V> {
        let (_, idx) = self.find(key)?;
        self.unlink(idx);
        self.push_front(idx);
        self.entries[idx as usize].value.as_ref()
    }

    /// The value for `key` without changing recency.
    pub fn peek(&self, key: &[u8]) -> Option<&V> {
        let (_, idx) = self.find(key)?;
        self.entries[idx as usize].value.as_ref()
    }

    /// Inserts or replaces `key`'s value and marks it most recently used, evicting the least
    /// recently used entry when full. A key longer than [`MAX_STORED_KEY_BYTES`] cannot name a link and
    /// is not cached.
    pub fn insert(&mut self, key: &[u8], v: V) {
        let Some(inline) = InlineKey::new(key) else {
            return;
        };
        let hash = self.hash(key);
        if let Some((_, idx)) = self.find_hashed(key, hash) {
            self.entries[idx as usize].value = Some(v);
            self.unlink(idx);
            self.push_front(idx);
            return;
        }
        if self.free == NIL {
            self.evict_lru();
        }
        let idx = self.free;
        let e = &mut self.entries[idx as usize];
        self.free = e.next;
        e.key = inline;
        e.hash = hash;
        e.value = Some(v);
        self.push_front(idx);
        let mut slot = self.home(hash);
        while self.slots[slot] != NIL {
            slot = (slot + 1) & self.mask();
        }
        self.slots[slot] = idx;
        self.len += 1;
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let (slot, idx) = self.find(key)?;
        self.remove_at(slot, idx)
    }

    /// Drops the least recently used entry, reusing its stored hash rather than rehashing.
    fn evict_lru(&mut self) {
        let idx = self.tail;
        debug_assert_ne!(idx, NIL, "evicting from an empty cache");
        // An entry in use is always reachable from its home slot, so this probe terminates.
        let mut slot = self.home(self.entries[idx as usize].hash);
        while self.slots[slot] != idx {
            debug_assert_ne!(self.slots[slot], NIL, "entry missing from index");
            slot = (slot + 1) & self.mask();
        }
        drop(self.remove_at(slot, idx));
    }

    fn remove_at(&mut self, slot: usize, idx: u32) -> Option<V> {
        self.delete_slot(slot);
        self.unlink(idx);
        let e = &mut self.entries[idx as usize];
        let v = e.value.take();
        e.next = self.free;
        self.free = idx;
        self.len -= 1;
        v
    }

    /// Removes every entry (dropping the values), keeping the memory.
    pub fn clear(&mut self) {
        let n = self.entries.len();
        for (i, e) in self.entries.iter_mut().enumerate() {
            e.value = None;
            e.prev = NIL;
            e.next = if i + 1 < n { (i + 1) as u32 } else { NIL };
        }
        self.slots.fill(NIL);
        self.head = NIL;
        self.tail = NIL;
        self.free = 0;
        self.len = 0;
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, hash: u64) -> usize {
        // The table is at most half full, so the low bits of a good hash are enough.
        hash as usize & self.mask()
    }

    fn find(&self, key: &[u8]) -> Option<(usize, u32)> {
        if key.len() > MAX_STORED_KEY_BYTES {
            return None;
        }
        self.find_hashed(key, self.hash(key))
    }

    /// (slot, slab index) of `key`.
    fn find_hashed(&self, key: &[u8], hash: u64) -> Option<(usize, u32)> {
        let mut slot = self.home(hash);
        loop {
            let idx = self.slots[slot];
            if idx == NIL {
                return None;
            }
            let e = &self.entries[idx as usize];
            if e.hash == hash && e.key.as_bytes() == key {
                return Some((slot, idx));
            }
            slot = (slot + 1) & self.mask();
        }
    }

    /// Empties `slot`, shifting later entries of the probe run back so every entry stays
    /// reachable from its home slot without tombstones.
    fn delete_slot(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut slot = hole;
        loop {
            slot = (slot + 1) & mask;
            let idx = self.slots[slot];
            if idx == NIL {
                break;
            }
            let home = self.home(self.entries[idx as usize].hash);
            // The entry may move into the hole only if its home is not cyclically within
            // (hole, slot]; otherwise moving it would put it before its home.
            let dist_home = slot.wrapping_sub(home) & mask;
            let dist_hole = slot.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                self.slots[hole] = idx;
                hole = slot;
            }
        }
        self.slots[hole] = NIL;
    }

    fn unlink(&mut self, idx: u32) {
        let (prev, next) = {
            let e = &self.entries[idx as usize];
            (e.prev, e.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, idx: u32) {
        let old = self.head;
        {
            let e = &mut self.entries[idx as usize];
            e.prev = NIL;
            e.next = old;
        }
        if old == NIL {
            self.tail = idx;
        } else {
            self.entries[old as usize].prev = idx;
        }
        self.head = idx;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    /// Reference model: front is most recently used.
    struct Model {
        cap: usize,
        items: VecDeque<(Vec<u8>, u32)>,
    }

    impl Model {
        fn pos(&self, k: &[u8]) -> Option<usize> {
            self.items.iter().position(|(key, _)| key == k)
        }
        fn get(&mut self, k: &[u8]) -> Option<u32> {
            let i = self.pos(k)?;
            let item = self.items.remove(i).unwrap();
            let v = item.1;
            self.items.push_front(item);
            Some(v)
        }
        fn insert(&mut self, k: &[u8], v: u32) {
            if let Some(i) = self.pos(k) {
                self.items.remove(i);
            } else if self.items.len() == self.cap {
                self.items.pop_back();
            }
            self.items.push_front((k.to_vec(), v));
        }
        fn remove(&mut self, k: &[u8]) -> Option<u32> {
            let i = self.pos(k)?;
            self.items.remove(i).map(|(_, v)| v)
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Get(u8),
        Peek(u8),
        Insert(u8, u32),
        Remove(u8),
        Clear,
    }

    fn key(k: u8) -> Vec<u8> {
        // Varied lengths, including the maximum, from a small key space so operations collide.
        let len = [1, 7, 33, MAX_STORED_KEY_BYTES][usize::from(k) % 4];
        let mut v = vec![b'a' + k % 26; len];
        v[0] = k;
        v
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..24).prop_map(Op::Get),
            1 => (0u8..24).prop_map(Op::Peek),
            5 => (0u8..24, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0u8..24).prop_map(Op::Remove),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn matches_model(cap in 1usize..10, ops in prop::collection::vec(op(), 0..400)) {
            let mut lru = Lru::with_capacity(cap);
            let mut model = Model { cap, items: VecDeque::new() };
            for op in ops {
                match op {
                    Op::Get(k) => prop_assert_eq!(lru.get(&key(k)).copied(), model.get(&key(k))),
                    Op::Peek(k) => {
                        let want = model.pos(&key(k)).map(|i| model.items[i].1);
                        prop_assert_eq!(lru.peek(&key(k)).copied(), want);
                    }
                    Op::Insert(k, v) => {
                        lru.insert(&key(k), v);
                        model.insert(&key(k), v);
                    }
                    Op::Remove(k) => prop_assert_eq!(lru.remove(&key(k)), model.remove(&key(k))),
                    Op::Clear => {
                        lru.clear();
                        model.items.clear();
                    }
                }
                prop_assert_eq!(lru.len(), model.items.len());
                // Recency order from the intrusive list matches the model exactly.
                let mut order = Vec::new();
                let mut i = lru.head;
                while i != NIL {
                    let e = &lru.entries[i as usize];
                    order.push((e.key.as_bytes().to_vec(), *e.value.as_ref().unwrap()));
                    i = e.next;
                }
                let want: Vec<_> = model.items.iter().cloned().collect();
                prop_assert_eq!(order, want);
            }
        }
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut lru = Lru::with_capacity(2);
        lru.insert(b"a", 1);
        lru.insert(b"b", 2);
        assert_eq!(lru.get(b"a"), Some(&1)); // b is now LRU
        lru.insert(b"c", 3);
        assert_eq!(lru.peek(b"b"), None);
        assert_eq!(lru.peek(b"a"), Some(&1));
        assert_eq!(lru.peek(b"c"), Some(&3));
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn replace_keeps_len_and_promotes() {
        let mut lru = Lru::with_capacity(2);
        lru.insert(b"a", 1);
        lru.insert(b"b", 2);
        lru.insert(b"a", 10);
        assert_eq!(lru.len(), 2);
        lru.insert(b"c", 3); // evicts b, not a
        assert_eq!(lru.get(b"a"), Some(&10));
        assert_eq!(lru.get(b"b"), None);
    }

    #[test]
    fn over_long_keys_are_never_cached() {
        let mut lru = Lru::with_capacity(4);
        let long = [b'k'; MAX_STORED_KEY_BYTES + 1];
        lru.insert(&long, 1);
        assert_eq!(lru.len(), 0);
        assert_eq!(lru.get(&long), None);
        assert_eq!(lru.remove(&long), None);
        assert!(InlineKey::new(&long).is_none());
        let max = [b'k'; MAX_STORED_KEY_BYTES];
        assert_eq!(InlineKey::new(&max).unwrap().as_bytes(), &max);
    }

    #[test]
    fn values_are_dropped_on_evict_remove_and_clear() {
        use std::rc::Rc;
        let v = Rc::new(());
        let mut lru = Lru::with_capacity(2);
        lru.insert(b"a", Rc::clone(&v));
        lru.insert(b"b", Rc::clone(&v));
        lru.insert(b"c", Rc::clone(&v)); // evicts a
        assert_eq!(Rc::strong_count(&v), 3);
        drop(lru.remove(b"b"));
        assert_eq!(Rc::strong_count(&v), 2);
        lru.clear();
        assert_eq!(Rc::strong_count(&v), 1);
        assert!(lru.is_empty());
    }

    #[test]
    fn full_large_cache_finds_everything_after_churn() {
        let cap = 4096;
        let mut lru = Lru::with_capacity(cap);
        for i in 0..3 * cap as u32 {
            lru.insert(format!("key{i}").as_bytes(), i);
            if i % 3 == 0 {
                lru.remove(format!("key{}", i / 2).as_bytes());
            }
        }
        // The most recent `cap` inserts minus the ones removed are all present.
        let last = 3 * cap as u32;
        for i in last - cap as u32 / 2..last {
            let removed = (i..last).any(|j| j % 3 == 0 && j / 2 == i);
            assert_eq!(
                lru.peek(format!("key{i}").as_bytes()).is_some(),
                !removed,
                "key{i}"
            );
        }
        assert!(lru.len() <= cap);
    }

    #[test]
    #[should_panic(expected = "LRU capacity")]
    fn zero_capacity_is_a_bug() {
        let _ = Lru::<u8>::with_capacity(0);
    }
}
