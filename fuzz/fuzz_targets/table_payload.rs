//! `Table::open` on an arbitrary payload behind a *valid* header (magic, version, lengths and
//! both CRCs fixed up), so the fuzzer gets past the checksums into the payload's validation:
//! the index, the records, the rkyv archive. An error, or a table whose records iterate and
//! look up in bounds (a forged one may miss). Run it with `-s address`: the reader has
//! `unsafe`.
//! Input: 1 byte of entry count, then the payload. Header layout: `shards/src/table/header.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ricochet_fuzz::{open_and_walk, temp_table_path};
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    let Some((&entries, payload)) = data.split_first() else {
        return;
    };
    let mut h = [0u8; 64];
    h[0..8].copy_from_slice(b"RICOTBL\0");
    h[8..12].copy_from_slice(&1u32.to_le_bytes()); // format version
    h[12..16].copy_from_slice(&0u32.to_le_bytes()); // shard
    h[16..20].copy_from_slice(&1u32.to_le_bytes()); // shard count
    h[20..24].copy_from_slice(&64u32.to_le_bytes()); // header bytes
    h[24..32].copy_from_slice(&u64::from(entries).to_le_bytes());
    h[40..48].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h[48..52].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    let mut file = h.to_vec();
    file.extend_from_slice(payload);
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    open_and_walk(PATH.get_or_init(|| temp_table_path("payload")), &file);
});
