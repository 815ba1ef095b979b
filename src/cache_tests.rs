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
    let len = [1, 7, 33, MAX_KEY_BYTES][usize::from(k) % 4];
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
    let long = [b'k'; MAX_KEY_BYTES + 1];
    lru.insert(&long, 1);
    assert_eq!(lru.len(), 0);
    assert_eq!(lru.get(&long), None);
    assert_eq!(lru.remove(&long), None);
    assert!(InlineKey::new(&long).is_none());
    let max = [b'k'; MAX_KEY_BYTES];
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
