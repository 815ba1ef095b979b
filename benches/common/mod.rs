//! Setup shared by the benches: synthetic links written as real shard tables.
//!
//! Each bench binary includes this module and uses a subset of it.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use shards::link::RedirectStatus;
use shards::placement::shard_of;
use shards::table::{write_table, OwnedLink, Table};
use tempfile::TempDir;

/// Characters of generated keys (base62, like most short links).
pub const KEY_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Length of every dataset key. Misses use [`MISS_KEY_BYTES`], so they can never be present.
pub const HIT_KEY_BYTES: usize = 8;

/// Length of keys that are never in a dataset.
pub const MISS_KEY_BYTES: usize = 9;

/// Env var that adds the 10M-link sizes (`RICOCHET_BENCH_10M=1`); they take minutes to set up.
pub const BENCH_10M_ENV: &str = "RICOCHET_BENCH_10M";

/// Random `len`-character key.
pub fn random_key(rng: &mut StdRng, len: usize) -> String {
    (0..len)
        .map(|_| KEY_ALPHABET[rng.gen_range(0..KEY_ALPHABET.len())] as char)
        .collect()
}

/// Dataset sizes to bench: 1M always, 10M when [`BENCH_10M_ENV`] is `1`.
pub fn sizes() -> Vec<usize> {
    let mut v = vec![1_000_000];
    if std::env::var_os(BENCH_10M_ENV).is_some_and(|v| v == "1") {
        v.push(10_000_000);
    }
    v
}

/// Links written as shard tables in a temporary directory, opened.
pub struct Dataset {
    /// Keeps the table files alive for the bench's duration.
    _dir: TempDir,
    /// `tables[s]`: shard `s`'s table, `None` if no key landed in it.
    pub tables: Vec<Option<Table>>,
    /// Every key, shuffled (random lookup order).
    pub keys: Vec<String>,
    pub shard_count: u32,
}

/// `links` random 8-character keys (unique) in `shard_count` shard tables, placed by the same
/// hash the server routes by. Targets are ~60-byte URLs, all 302.
pub fn dataset(links: usize, shard_count: u32, seed: u64) -> Dataset {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut keys: Vec<String> = (0..links)
        .map(|_| random_key(&mut rng, HIT_KEY_BYTES))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); shard_count as usize];
    for (i, k) in keys.iter().enumerate() {
        by_shard[shard_of(k.as_bytes(), shard_count) as usize].push(i);
    }
    let mut tables = Vec::with_capacity(shard_count as usize);
    for (shard, idx) in by_shard.iter().enumerate() {
        if idx.is_empty() {
            tables.push(None);
            continue;
        }
        let path = dir.path().join(format!("{shard:05}.tbl"));
        let entries = idx.iter().map(|&i| OwnedLink {
            key: keys[i].clone(),
            target: format!("https://example.com/some/long/path/{i}?utm_source=bench"),
            status: RedirectStatus::Found,
            expires_at_s: 0,
            created_at_s: 1_700_000_000,
            flags: 0,
            author: shards::link::Author::NONE,
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
        });
        write_table(&path, shard as u32, shard_count, 0, entries).expect("write table");
        tables.push(Some(Table::open(&path).expect("open table")));
    }
    keys.shuffle(&mut rng);
    Dataset {
        _dir: dir,
        tables,
        keys,
        shard_count,
    }
}

/// `keys` concatenated, as a server holds them in its read buffer: probing reads contiguous
/// memory, so only the lookup itself can miss the cache.
pub fn packed(keys: &[String]) -> Vec<u8> {
    keys.iter().flat_map(|k| k.bytes()).collect()
}

/// `n` packed keys of [`MISS_KEY_BYTES`] that are in no dataset.
pub fn packed_misses(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .flat_map(|_| random_key(&mut rng, MISS_KEY_BYTES).into_bytes())
        .collect()
}

/// Cycles through fixed-length keys packed in one buffer.
pub struct KeyCycle<'a> {
    keys: &'a [u8],
    key_len: usize,
    at: usize,
}

impl<'a> KeyCycle<'a> {
    pub fn new(keys: &'a [u8], key_len: usize) -> Self {
        assert!(!keys.is_empty() && keys.len() % key_len == 0);
        KeyCycle {
            keys,
            key_len,
            at: 0,
        }
    }

    /// The next key, wrapping around.
    #[inline]
    pub fn next_key(&mut self) -> &'a [u8] {
        let key = &self.keys[self.at..self.at + self.key_len];
        self.at += self.key_len;
        if self.at == self.keys.len() {
            self.at = 0;
        }
        key
    }
}
