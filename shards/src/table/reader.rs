//! Reading a table: mmap, check the header and the payload checksum once at open, then
//! zero-copy lookups that bounds-check every access.
//!
//! Why lookups check instead of trusting an open-time walk: walking every record and slot at
//! open cost ~360 ms per 1M links, far over the restart budget, while the checks a lookup needs
//! (a few compares and a short byte scan of the one target it returns) cost nanoseconds. The
//! payload CRC32C catches damage (truncation, torn writes, bit rot); what it cannot catch is a
//! file deliberately forged with valid checksums. For such a file every access is still
//! bounds-checked and total, so a lookup gives a miss or a wrong but well-formed answer (a
//! UTF-8 target without whitespace or control characters, a valid status), never a panic or
//! undefined behaviour. Whoever can write the data dir can publish any links anyway.

use super::header::{Header, HEADER_BYTES};
use super::layout::{
    home_slot, index_hash, read_record, slot_record_offset, slot_tag, ArchivedPayload, RawRecord,
    SLOT_POS_BITS,
};
use crate::error::Error;
use crate::link::{validate_stored_key, RedirectStatus};
use crate::placement::MAX_SHARD_COUNT;
use memmap2::Mmap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// One link as stored in a table, borrowed from the mapping.
#[derive(Clone, Copy, Debug)]
pub struct LinkRef<'a> {
    /// The long URL.
    pub target: &'a str,
    /// The redirect status.
    pub status: RedirectStatus,
    /// When the link stops answering, seconds since the Unix epoch; 0 = never.
    pub expires_at_s: u64,
    /// When the link was created, seconds since the Unix epoch.
    pub created_at_s: u64,
    /// Per-link flags: the creation tag (`link::CREATION_TAG_MASK`); other bits reserved.
    pub flags: u32,
    /// Who created the link (`Author::NONE`: unknown).
    pub author: crate::link::Author,
    /// What it does when visited (`Behaviour::NONE`: a plain redirect).
    pub behaviour: crate::behaviour::Behaviour,
    /// Its redirect rules (empty: none).
    pub rules: crate::rules::RuleSet<'a>,
    /// Its labels block's body, unparsed (`labels::Labels::from_body`; empty: none).
    pub labels: &'a [u8],
}

/// An immutable, memory-mapped shard table. `Send + Sync`: lookups only read the mapping.
///
/// Table files are never modified in place (writers rename a new file over the old one), so
/// the mapping cannot shrink under a reader and cause SIGBUS; a file truncated before open is
/// caught by the exact-length check.
#[derive(Debug)]
pub struct Table {
    map: Mmap,
    path: PathBuf,
    header: Header,
    /// Where the index lies in `map`: `n_slots` little-endian u64 words from `slots_at`.
    slots_at: usize,
    n_slots: usize,
    /// Where the record bytes lie in `map`.
    records_at: usize,
    records_len: usize,
}

impl Table {
    /// Whether `bytes` lie inside this table's mapping (answers that point into a table are
    /// checked against it in debug builds).
    pub fn contains(&self, bytes: &[u8]) -> bool {
        let map = self.map.as_ptr_range();
        let b = bytes.as_ptr_range();
        map.start <= b.start && b.end <= map.end
    }

    /// Opens the table at `path` and checks it: header CRC, magic and version, shard range,
    /// exact file length, payload CRC32C, and the payload's rkyv root (so the index and record
    /// areas lie inside the file). Any failure is an [`Error::CorruptTable`] naming the file.
    /// Records are not walked here; lookups check what they read (see the module docs).
    pub fn open(path: &Path) -> Result<Table, Error> {
        let corrupt = |reason: String| Error::CorruptTable {
            path: path.to_path_buf(),
            reason,
        };
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(path, "stat", e))?
            .len();
        if len < HEADER_BYTES as u64 {
            return Err(corrupt(format!(
                "file is {len} bytes, shorter than the {HEADER_BYTES}-byte header"
            )));
        }
        // SAFETY: table files are immutable once renamed into place (writers never modify or
        // truncate them), so the mapped bytes do not change while this mapping exists.
        // `populate` maps every page up front: the CRC below reads them all anyway, and one
        // batched populate is cheaper than a page fault per 64 KiB during the checksum (see
        // docs/storage.md, "Open cost"); lookups then take no page faults.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
            .map_err(|e| Error::io(path, "mmap", e))?;
        if map.len() as u64 != len {
            return Err(corrupt("file changed size while opening".into()));
        }
        let header = checked_header(&map).map_err(corrupt)?;
        let payload = &map[HEADER_BYTES..];
        // Checks the root and that both vectors lie inside the payload. The element checks
        // of `u64`/`u8` are no-ops, so this costs O(1), not a walk.
        let archived = rkyv::access::<ArchivedPayload, rkyv::rancor::Error>(payload)
            .map_err(|e| corrupt(format!("payload structure: {e}")))?;
        let base = map.as_ptr() as usize;
        let slots = archived.slots.as_slice();
        let records = archived.records.as_slice();
        let (slots_at, n_slots) = (slots.as_ptr() as usize - base, slots.len());
        let (records_at, records_len) = (records.as_ptr() as usize - base, records.len());
        if n_slots == 0 {
            return Err(corrupt("index has no slots".into()));
        }
        if header.entry_count >= n_slots as u64 {
            return Err(corrupt(format!(
                "{} entries do not fit an index of {n_slots} slots",
                header.entry_count
            )));
        }
        // Lookups jump around; readahead would only pollute the page cache.
        let _ = map.advise(memmap2::Advice::Random);
        collapse_to_huge_pages(&map);
        Ok(Table {
            map,
            path: path.to_path_buf(),
            header,
            slots_at,
            n_slots,
            records_at,
            records_len,
        })
    }

    /// The index words, as bytes (8 per slot).
    #[inline]
    fn slots(&self) -> &[u8] {
        // In bounds by construction (`rkyv::access` at open); slicing re-checks regardless.
        &self.map[self.slots_at..self.slots_at + self.n_slots * SLOT_BYTES]
    }

    /// The record area.
    #[inline]
    fn records(&self) -> &[u8] {
        &self.map[self.records_at..self.records_at + self.records_len]
    }

    /// Looks `key` up. No heap allocation; one index probe sequence plus one record read.
    /// Every read is bounds-checked: for a forged file this returns a miss or a wrong (but
    /// well-formed) link, never panics.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<LinkRef<'_>> {
        let slots = self.slots();
        let records = self.records();
        let n_slots = self.n_slots;
        let h = index_hash(key);
        let tag = slot_tag(h);
        let mut i = home_slot(h, n_slots);
        // The writer always leaves an empty slot, which ends the probe; the bound ends it for
        // a forged index that has none.
        for _ in 0..n_slots {
            let word = slot_word_at(slots, i)?;
            if word == 0 {
                return None;
            }
            if word >> SLOT_POS_BITS == tag {
                let rec = read_record(records, slot_record_offset(word)?)?;
                if rec.key == key {
                    return to_link_ref(&rec);
                }
            }
            i = if i + 1 == n_slots { 0 } else { i + 1 };
        }
        None
    }

    /// First step of a batched lookup: starts loading `key`'s home slot into the cache and
    /// returns where it is for [`Table::prefetch_record`]. Hints only; never changes a result.
    /// A pipelined batch issues this for every key, then the record step, then the `get`s, so
    /// the batch's memory misses overlap instead of queueing one after another.
    #[inline]
    pub fn prefetch_slot(&self, key: &[u8]) -> SlotHint {
        let h = index_hash(key);
        let slot = home_slot(h, self.n_slots);
        if let Some(p) = self.slots().get(slot * SLOT_BYTES) {
            prefetch(p);
        }
        SlotHint {
            slot,
            tag: slot_tag(h),
        }
    }

    /// Second step: once the home slot is (probably) cached, follows the probe sequence to the
    /// slot whose tag matches (at 60% load about 4 in 10 keys are not in their home slot, and
    /// prefetching the home slot's record would load some other link) and starts loading the
    /// record it names. Gives up after [`PREFETCH_PROBE_SLOTS`] slots: the `get` still probes
    /// on, only without the hint.
    #[inline]
    pub fn prefetch_record(&self, hint: SlotHint) {
        let Some(off) = self.hinted_record(hint) else {
            return;
        };
        let records = self.records();
        // Points at most a cache line apart, ending on the last byte: every line of the
        // range is hinted, wherever the record starts within its first line.
        let points = (0..RECORD_PREFETCH_BYTES).step_by(CACHE_LINE_BYTES);
        for at in points.chain([RECORD_PREFETCH_BYTES - 1]).map(|d| off + d) {
            if let Some(p) = records.get(at) {
                prefetch(p);
            }
        }
    }

    /// The offset of the record in the first slot with `hint`'s tag along its probe, within
    /// [`PREFETCH_PROBE_SLOTS`]; `None` at an empty slot (a miss) or past the bound.
    #[inline]
    fn hinted_record(&self, hint: SlotHint) -> Option<usize> {
        let slots = self.slots();
        let mut i = hint.slot;
        for _ in 0..PREFETCH_PROBE_SLOTS {
            let word = slot_word_at(slots, i)?;
            if word == 0 {
                return None;
            }
            if word >> SLOT_POS_BITS == hint.tag {
                return slot_record_offset(word);
            }
            i = if i + 1 == self.n_slots { 0 } else { i + 1 };
        }
        None
    }

    /// All entries, in ascending byte order of key (for compaction and merges). Each record is
    /// checked as it is read (valid key, well-formed target, valid status); iteration ends at
    /// the first record that fails, which only a forged file can hold.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            records: self.records(),
            off: 0,
        }
    }

    /// The entries after `key`, in key order: from the record after `key`'s when the table
    /// holds `key` (found through the index: a walk that resumes a shard step by step does
    /// not read the shard again from its start each step), else every entry (the caller
    /// skips those not after `key`).
    pub fn iter_after(&self, key: &[u8]) -> Iter<'_> {
        let records = self.records();
        let (slots, n_slots) = (self.slots(), self.n_slots);
        let h = index_hash(key);
        let (tag, mut i) = (slot_tag(h), home_slot(h, n_slots));
        for _ in 0..n_slots {
            let Some(word) = slot_word_at(slots, i).filter(|w| *w != 0) else {
                break;
            };
            if word >> SLOT_POS_BITS == tag {
                if let Some(rec) = slot_record_offset(word).and_then(|o| read_record(records, o)) {
                    if rec.key == key {
                        return Iter {
                            records,
                            off: rec.next,
                        };
                    }
                }
            }
            i = if i + 1 == n_slots { 0 } else { i + 1 };
        }
        self.iter()
    }

    /// Number of links.
    pub fn len(&self) -> u64 {
        self.header.entry_count
    }

    /// Whether the table has no links.
    pub fn is_empty(&self) -> bool {
        self.header.entry_count == 0
    }

    /// Highest append-log sequence folded into this table (0 for imports).
    pub fn max_log_seq(&self) -> u64 {
        self.header.max_log_seq
    }

    /// The virtual shard this table holds.
    pub fn shard(&self) -> u32 {
        self.header.shard
    }

    /// The shard count of the data dir the table was written for.
    pub fn shard_count(&self) -> u32 {
        self.header.shard_count
    }

    /// Size of the file, in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.map.len() as u64
    }

    /// The file the table was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Bytes of a record [`Table::prefetch_record`] loads: fixed fields, key and target of a typical
/// link (27 + ~8 + ~90 bytes) span two or three cache lines, and a hint for only the first
/// left the key-length byte or the target to miss later.
const RECORD_PREFETCH_BYTES: usize = 192;

/// Cache line size of the x86-64 and arm64 CPUs ricochet runs on.
const CACHE_LINE_BYTES: usize = 64;

/// Slots [`Table::prefetch_record`] follows from a key's home slot looking for its tag: one
/// cache line of slots, which holds the whole probe of nearly every key at 60% load.
pub const PREFETCH_PROBE_SLOTS: usize = 8;

/// Where a key's index probe starts, from [`Table::prefetch_slot`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SlotHint {
    slot: usize,
    tag: u64,
}

/// Bytes per index slot word.
const SLOT_BYTES: usize = 8;

/// A cache-prefetch hint for the line holding (the start of) `p`. Also the blocklist's
/// (`api::blocklist`), for its filters' lines and index slots.
#[inline(always)]
pub fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache; it never faults or reads into a register,
    // and `p` is a valid reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            std::ptr::from_ref(p).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Index word `i`; `None` only if `i` is out of range (never for an index built at open).
#[inline]
fn slot_word_at(slots: &[u8], i: usize) -> Option<u64> {
    let at = i.checked_mul(SLOT_BYTES)?;
    let bytes: [u8; SLOT_BYTES] = slots.get(at..at + SLOT_BYTES)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// Iterator over a table's entries as `(key, link)`, in ascending key order.
pub struct Iter<'a> {
    records: &'a [u8],
    off: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, LinkRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.off >= self.records.len() {
            return None;
        }
        let Some(item) = read_record(self.records, self.off).and_then(|rec| {
            validate_stored_key(rec.key).ok()?;
            let key = std::str::from_utf8(rec.key).ok()?;
            Some((rec.next, key, to_link_ref(&rec)?))
        }) else {
            // Malformed record (forged file): stop rather than guess where the next one is.
            self.off = self.records.len();
            return None;
        };
        let (next, key, link) = item;
        // Records are at least RECORD_FIXED_BYTES long, so this always advances.
        self.off = next;
        Some((key, link))
    }
}

/// The link of a record, or `None` if its target or status is not one the writer could have
/// written (see [`serve_safe_target`]).
#[inline]
fn to_link_ref<'a>(rec: &RawRecord<'a>) -> Option<LinkRef<'a>> {
    Some(LinkRef {
        target: serve_safe_target(rec.target)?,
        status: RedirectStatus::from_code(rec.status)?,
        expires_at_s: rec.expires_at_s,
        created_at_s: rec.created_at_s,
        flags: rec.flags,
        author: rec.author,
        behaviour: rec.behaviour,
        rules: rec.rules,
        labels: rec.labels,
    })
}

/// `target` as a `&str` if it is UTF-8 without whitespace or control characters, the part of
/// `check_storable_url`'s rules that keeps a `Location` header from being split or smuggled.
/// The writer enforced all of `check_storable_url`; this re-check is what stands between a forged file
/// and the response. The common case (printable ASCII) costs a few vector compares.
#[inline]
fn serve_safe_target(target: &[u8]) -> Option<&str> {
    if target.len() > crate::link::MAX_URL_BYTES {
        return None; // Longer than any writer could have stored (answers carry a `u16` length).
    }
    if all_printable_ascii(target) {
        // SAFETY: every byte is in 0x21..=0x7e (checked just above), and ASCII is UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(target) });
    }
    let s = std::str::from_utf8(target).ok()?;
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    Some(s)
}

/// Whether `b` is printable ASCII other than space (`'!'..='~'`), branch-free.
#[inline(always)]
fn printable(b: u8) -> bool {
    b.wrapping_sub(0x21) < 0x5e
}

/// Whether every byte of `t` is printable ASCII other than space (branch-shaped for lookups:
/// [`crate::link::every_target_byte`]).
#[inline]
fn all_printable_ascii(t: &[u8]) -> bool {
    crate::link::every_target_byte(t, printable)
}

/// Smallest table (4 MiB) whose mapping is collapsed to huge pages: below it the TLB's 4 KiB
/// entries already cover the table, and a 2 MiB page would mostly map nothing.
pub const HUGE_PAGE_MIN_TABLE_BYTES: usize = 4 << 20;

/// Best effort: back the mapping with 2 MiB pages so random lookups stop missing the TLB
/// (measured on 1M links: uniform-random hit 152 -> 96 ns, cache-resident hit 51 -> 36 ns,
/// miss 80 -> 54 ns). Needs a kernel with
/// MADV_COLLAPSE (6.1+) and read-only file THP; elsewhere the calls fail and are ignored.
fn collapse_to_huge_pages(map: &Mmap) {
    /// `MADV_COLLAPSE` from linux/mman.h (not in every libc crate version).
    const MADV_COLLAPSE: libc::c_int = 25;
    if map.len() < HUGE_PAGE_MIN_TABLE_BYTES {
        return;
    }
    let _ = map.advise(memmap2::Advice::HugePage);
    // SAFETY: the range is exactly this live mapping; MADV_COLLAPSE only changes how the
    // (unchanged, read-only) pages are mapped, never their contents.
    let _ = unsafe { libc::madvise(map.as_ptr() as *mut libc::c_void, map.len(), MADV_COLLAPSE) };
}

/// The header of a mapped table (at least `HEADER_BYTES` long), checked: its own CRC, magic
/// and version, the shard range, the file's exact length, and the payload's CRC32C.
fn checked_header(map: &memmap2::Mmap) -> Result<Header, String> {
    let header_bytes: &[u8; HEADER_BYTES] = map[..HEADER_BYTES].try_into().expect("length checked");
    let header = Header::decode(header_bytes)?;
    if header.shard_count == 0
        || header.shard_count > MAX_SHARD_COUNT
        || header.shard >= header.shard_count
    {
        return Err(format!(
            "shard {} of {} is out of range",
            header.shard, header.shard_count
        ));
    }
    let len = map.len() as u64;
    let expected = (HEADER_BYTES as u64).checked_add(header.payload_bytes);
    if expected != Some(len) {
        return Err(format!(
            "file is {len} bytes but its header says {} (truncated or extended)",
            HEADER_BYTES as u128 + u128::from(header.payload_bytes)
        ));
    }
    let crc = crc32c::crc32c(&map[HEADER_BYTES..]);
    if crc != header.payload_crc {
        return Err(format!(
            "payload checksum mismatch (stored {:#010x}, computed {crc:#010x})",
            header.payload_crc
        ));
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::RedirectStatus;
    use crate::table::{write_table, OwnedLink};

    /// The batch hint must lead to each key's own record, including keys linear probing put
    /// past their home slot (an earlier hint loaded the home slot's record, some other link,
    /// for ~4 in 10 keys), and to nothing for a miss.
    #[test]
    fn hint_finds_each_keys_own_record_and_none_for_misses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tbl");
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        let links = keys.iter().map(|k| OwnedLink {
            key: k.clone(),
            target: format!("https://example.com/{k}"),
            status: RedirectStatus::Found,
            expires_at_s: 0,
            created_at_s: 0,
            flags: 0,
            author: crate::link::Author::NONE,
            behaviour: crate::behaviour::Behaviour::NONE,
            rules: crate::rules::Rules::NONE,
            labels: crate::labels::Labels::NONE,
        });
        write_table(&path, 0, 1, 0, links).unwrap();
        let table = Table::open(&path).unwrap();
        let mut displaced = 0;
        let mut found = 0;
        for k in &keys {
            let hint = table.prefetch_slot(k.as_bytes());
            let home_word = slot_word_at(table.slots(), hint.slot).unwrap();
            if home_word >> SLOT_POS_BITS != hint.tag {
                displaced += 1;
            }
            // Keys probing past the bound get no hint; every other one its own record.
            if let Some(off) = table.hinted_record(hint) {
                let rec = read_record(table.records(), off).unwrap();
                assert_eq!(rec.key, k.as_bytes());
                found += 1;
            }
        }
        assert!(
            displaced > 500,
            "{displaced} displaced keys: the test needs some"
        );
        // At 60% load ~1.5% of keys probe past PREFETCH_PROBE_SLOTS.
        assert!(
            found > keys.len() * 97 / 100,
            "{found} of {} hinted",
            keys.len()
        );
        for miss in ["nope", "k5000", "K1"] {
            let hint = table.prefetch_slot(miss.as_bytes());
            assert_eq!(table.hinted_record(hint), None, "{miss}");
        }
    }

    /// `iter_after` of every key gives exactly the keys after it, in order; of a key the table
    /// does not hold, every entry (the caller skips the rest).
    #[test]
    fn iteration_after_a_key_starts_right_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tbl");
        let mut keys: Vec<String> = (0..700).map(|i| format!("k{i}")).collect();
        keys.sort();
        let links = keys.iter().map(|k| OwnedLink {
            key: k.clone(),
            target: format!("https://example.com/{k}"),
            status: RedirectStatus::Found,
            expires_at_s: 0,
            created_at_s: 0,
            flags: 0,
            author: crate::link::Author::NONE,
            behaviour: crate::behaviour::Behaviour::NONE,
            rules: crate::rules::Rules::NONE,
            labels: crate::labels::Labels::NONE,
        });
        write_table(&path, 0, 1, 0, links).unwrap();
        let table = Table::open(&path).unwrap();
        for (i, k) in keys.iter().enumerate() {
            let after: Vec<&str> = table.iter_after(k.as_bytes()).map(|(k, _)| k).collect();
            let want: Vec<&str> = keys[i + 1..].iter().map(String::as_str).collect();
            assert_eq!(after, want, "after {k}");
        }
        assert_eq!(table.iter_after(b"k35x").count(), keys.len());
    }

    #[test]
    fn printable_check_matches_naive_for_every_length_and_position() {
        for len in 0..=300usize {
            let good = vec![b'a'; len];
            assert!(all_printable_ascii(&good), "len {len}");
            for at in 0..len {
                for bad in [b' ', b'\r', b'\n', 0u8, 0x7f, 0x80, 0xff] {
                    let mut t = good.clone();
                    t[at] = bad;
                    assert!(!all_printable_ascii(&t), "len {len}, {bad:#x} at {at}");
                }
            }
        }
    }

    #[test]
    fn serve_safe_target_allows_utf8_refuses_controls() {
        assert_eq!(
            serve_safe_target(b"https://e.com/a?b=c#d"),
            Some("https://e.com/a?b=c#d")
        );
        let unicode = "https://e.com/caf\u{e9}/\u{1f600}";
        assert_eq!(serve_safe_target(unicode.as_bytes()), Some(unicode));
        assert_eq!(serve_safe_target(b"https://e.com/\xff"), None);
        assert_eq!(serve_safe_target(b"https://e.com/\r\nSet-Cookie: x"), None);
        assert_eq!(serve_safe_target("https://e.com/\u{85}".as_bytes()), None);
        assert_eq!(serve_safe_target("https://e.com/\u{2028}".as_bytes()), None);
    }
}
