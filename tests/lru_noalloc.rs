//! The LRU allocates nothing after construction: gets, inserts, replacements, evictions,
//! removals and clears all run on the preallocated slab and index.

mod common {
    pub mod counting_alloc;
}

use common::counting_alloc::{allocations, CountingAlloc};
use ricochet::base::cache::Lru;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn no_allocation_after_construction() {
    let cap = 1024;
    let mut lru: Lru<u64> = Lru::with_capacity(cap);
    // Keys built on the stack, so the only possible allocations are the cache's.
    let key = |i: u64| {
        let mut k = [b'k'; 24];
        let mut buf = itoa::Buffer::new();
        let s = buf.format(i).as_bytes();
        k[..s.len()].copy_from_slice(s);
        (k, s.len() + 4)
    };

    let before = allocations();
    let mut hits = 0u64;
    for round in 0..4u64 {
        for i in 0..3 * cap as u64 {
            let (k, len) = key(i * 7 + round);
            lru.insert(&k[..len], i);
            let (k2, len2) = key(i * 7);
            if lru.get(&k2[..len2]).is_some() {
                hits += 1;
            }
            if i % 5 == 0 {
                lru.remove(&k[..len]);
            }
            lru.insert(&k2[..len2], i); // replace or insert-with-eviction
        }
        lru.clear();
    }
    let after = allocations();
    assert_eq!(after - before, 0, "LRU allocated after construction");
    assert!(hits > 0);

    // The counter works: a Vec does allocate.
    let v: Vec<u8> = Vec::with_capacity(16);
    assert!(allocations() > after);
    drop(v);
}
