//! Which virtual shard a key belongs to. This is the only place a key is hashed for placement.
//!
//! The hash is XXH3-64 with seed 0 (a published, stable algorithm; not a per-process random
//! seed), reduced to `[0, shard_count)` by Lemire's multiply-shift on the full 64-bit hash. The
//! shard a key lands in is therefore fixed for the life of a data dir and identical on every
//! machine and every core count. Changing this function is a data-format change.

use xxhash_rust::xxh3::xxh3_64;

/// Virtual shards in a new data dir unless chosen otherwise. 256 spreads evenly over any core
/// count up to 64 (worst imbalance 256/3 vs 256/3+1 shards per core, about 1%), and keeps the
/// per-shard tables small enough to rebuild one at a time.
pub const DEFAULT_SHARD_COUNT: u32 = 256;

/// Most virtual shards a data dir may have (each is a table file).
pub const MAX_SHARD_COUNT: u32 = 65_536;

/// The virtual shard of `key`, in `[0, shard_count)`.
#[inline]
pub fn shard_of(key: &[u8], shard_count: u32) -> u32 {
    debug_assert!(shard_count > 0 && shard_count <= MAX_SHARD_COUNT);
    let h = xxh3_64(key);
    ((u128::from(h) * u128::from(shard_count)) >> 64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_known_values() {
        // Pinned values: if these change, every existing data dir is misrouted.
        let pinned: Vec<u32> = [&b"a"[..], b"aB3xZ9", b"hello-world", b"Z"]
            .iter()
            .map(|k| shard_of(k, DEFAULT_SHARD_COUNT))
            .collect();
        assert_eq!(pinned, PINNED);
    }

    const PINNED: [u32; 4] = [230, 102, 233, 39];

    #[test]
    fn in_range_and_spread() {
        let mut counts = vec![0u32; 16];
        for i in 0..16_000u32 {
            let s = shard_of(format!("k{i}").as_bytes(), 16);
            counts[s as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
