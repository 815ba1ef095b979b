//! Which core owns a key. [`Router::owner`] is the only function that decides it.
//!
//! A key belongs to virtual shard `shards::placement::shard_of(key, shard_count)` (a stable,
//! documented hash fixed when the data dir was created), and shard `s` belongs to core
//! `s % cores`. The data dir therefore serves on any core count; only the shard-to-core mapping
//! changes.

use shards::placement::shard_of;

/// Maps keys to their owning core.
#[derive(Clone, Copy, Debug)]
pub struct Router {
    shard_count: u32,
    cores: u32,
}

/// A key's place: its virtual shard and the core that owns that shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub core: usize,
    pub shard: u32,
}

impl Router {
    pub fn new(shard_count: u32, cores: usize) -> Router {
        assert!(shard_count > 0, "a data dir has at least one shard");
        assert!(
            cores > 0 && cores <= shard_count as usize,
            "more cores than shards"
        );
        Router {
            shard_count,
            cores: cores as u32,
        }
    }

    /// The shard and owning core of `key`.
    #[inline]
    pub fn owner(&self, key: &[u8]) -> Owner {
        let shard = shard_of(key, self.shard_count);
        Owner {
            core: self.core_of_shard(shard),
            shard,
        }
    }

    /// The core that owns `shard`.
    #[inline]
    pub fn core_of_shard(&self, shard: u32) -> usize {
        (shard % self.cores) as usize
    }

    /// The shards `core` owns, in order.
    pub fn shards_of_core(&self, core: usize) -> impl Iterator<Item = u32> + '_ {
        (0..self.shard_count).filter(move |&s| self.core_of_shard(s) == core)
    }

    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    pub fn cores(&self) -> usize {
        self.cores as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_has_exactly_one_owner_and_loads_are_even() {
        for cores in [1, 2, 3, 7, 64] {
            let r = Router::new(256, cores);
            let mut seen = vec![0u32; 256];
            let mut per_core = vec![0usize; cores];
            for (c, count) in per_core.iter_mut().enumerate() {
                for s in r.shards_of_core(c) {
                    seen[s as usize] += 1;
                    *count += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1));
            let (min, max) = (
                per_core.iter().min().unwrap(),
                per_core.iter().max().unwrap(),
            );
            assert!(max - min <= 1, "{per_core:?}");
        }
    }

    #[test]
    fn owner_is_stable_and_consistent_with_the_shard_hash() {
        let r = Router::new(256, 2);
        for key in [&b"aB3xZ9"[..], b"a", b"hello-world"] {
            let o = r.owner(key);
            assert_eq!(o.shard, shard_of(key, 256));
            assert_eq!(o.core, (o.shard % 2) as usize);
            assert_eq!(r.owner(key), o);
        }
        // Case matters: keys are case-sensitive.
        assert_ne!(r.owner(b"abcdef").shard, r.owner(b"ABCDEF").shard);
    }
}
