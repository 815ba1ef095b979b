//! The archived payload: an open-addressed hash index over a blob of link records.
//!
//! Chosen over rkyv's `ArchivedHashMap` (SwissTable groups, out-of-line strings) because a hit
//! here touches only two places: the slot (one u64: 24-bit hash tag + record position, eight
//! to a cache line) and the record, whose fixed fields, key and target sit together. A miss
//! usually touches only the slot's cache line, since the tag is compared first (a false tag
//! match, 1 in 2^24 per probed slot, costs one record read and a key compare).
//!
//! Record (starts 8-aligned within `records`, little-endian):
//!
//! ```text
//! off  size  field
//!   0     8  expires_at_s (0 = never)
//!   8     8  created_at_s
//!  16     4  flags (bits 0..24: creation tag, `link::CREATION_TAG_MASK`;
//!              bit 24: `link::AUTHOR_FLAG`; bit 25: `behaviour::BEHAVIOUR_FLAG`;
//!              bit 26: `rules::RULES_FLAG`; bit 27: `labels::LABELS_FLAG`; others 0)
//!  20     4  target_len
//!  24     2  status (301/302/307/308)
//!  26     1  key_len
//!  27     k  key bytes
//! 27+k    t  target bytes (UTF-8)
//! 27+k+t  8  author (`link::Author`), only when flags has `AUTHOR_FLAG` (format 2)
//!  ...    b  behaviour block (`behaviour::Behaviour`, its length first), only when flags
//!            has `BEHAVIOUR_FLAG` (format 3)
//!  ...    r  rules block (`rules`: `len:u16` then the program), only when flags has
//!            `RULES_FLAG` (format 4)
//!  ...    l  labels block (`labels`: `len:u16` then title and tags), only when flags has
//!            `LABELS_FLAG` (format 5)
//!            zero padding to a multiple of 8
//! ```

use crate::behaviour::{Behaviour, BEHAVIOUR_FLAG};
use crate::labels::{Labels, LABELS_FLAG};
use crate::link::{Author, AUTHOR_BYTES, AUTHOR_FLAG};
use crate::rules::{RuleSet, RULES_FLAG};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// What the rkyv payload of a table file holds.
#[derive(rkyv::Archive, rkyv::Serialize)]
pub(crate) struct Payload {
    /// One word per slot: `tag << 40 | (record_offset / 8 + 1)`; 0 = empty slot.
    pub slots: Vec<u64>,
    /// Link records, see the module docs.
    pub records: Vec<u8>,
}

/// Seed of the in-table index hash. Deliberately not placement's seed 0: every key in one
/// shard shares the top bits of `xxh3(key, 0)`, which would crowd one region of the index.
pub(crate) const INDEX_HASH_SEED: u64 = 0x7269_636f_6368_6574; // "ricochet"

/// Share of index slots in use, in percent. 60 keeps linear-probe chains short (a miss scans
/// about 3 slots on average, usually within one cache line) at 8 bytes × 1.67 ≈ 13 bytes of
/// index per link.
pub const INDEX_LOAD_PERCENT: u64 = 60;

/// Fixed part of a record before the key.
pub(crate) const RECORD_FIXED_BYTES: usize = 27;

/// Records start at multiples of this, so one bit per 8 bytes can mark record starts.
pub(crate) const RECORD_ALIGN: usize = 8;

#[inline]
pub(crate) fn index_hash(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, INDEX_HASH_SEED)
}

/// Bits of a slot word holding the record position (`offset / 8 + 1`): 2^40 × 8 bytes = 8 TiB
/// of records, far beyond any one shard.
pub(crate) const SLOT_POS_BITS: u32 = 40;

/// Mask of the record position in a slot word.
pub(crate) const SLOT_POS_MASK: u64 = (1 << SLOT_POS_BITS) - 1;

/// The 24-bit tag of hash `h` stored in its slot (low bits; the home slot uses the high bits).
#[inline]
pub(crate) fn slot_tag(h: u64) -> u64 {
    h & ((1 << (64 - SLOT_POS_BITS)) - 1)
}

/// Slot word for a record at byte offset `off` (a multiple of [`RECORD_ALIGN`]).
#[inline]
pub(crate) fn slot_word(h: u64, off: usize) -> u64 {
    debug_assert_eq!(off % RECORD_ALIGN, 0);
    (slot_tag(h) << SLOT_POS_BITS) | ((off / RECORD_ALIGN) as u64 + 1)
}

/// The record offset a non-empty slot word points at; `None` for a word with a tag but no
/// position, which the writer never produces (only a forged file can hold one).
#[inline]
pub(crate) fn slot_record_offset(word: u64) -> Option<usize> {
    let pos = (word & SLOT_POS_MASK).checked_sub(1)?;
    // pos < 2^40, so the product fits in 43 bits.
    Some(pos as usize * RECORD_ALIGN)
}

/// Home slot of hash `h` in an index of `n_slots` (multiply-shift, so any slot count works).
#[inline]
pub(crate) fn home_slot(h: u64, n_slots: usize) -> usize {
    ((u128::from(h) * n_slots as u128) >> 64) as usize
}

/// Index size for `entries` links: always at least one empty slot, so probing terminates.
pub(crate) fn slot_count_for(entries: usize) -> usize {
    let sized = (entries as u64 * 100).div_ceil(INDEX_LOAD_PERCENT) as usize;
    sized.max(entries + 1)
}

/// Padded size of a record with a `key_len`-byte key, `target_len`-byte target, if
/// `authored` an author, and `blocks_len` bytes of behaviour and rules blocks.
#[inline]
pub(crate) fn record_len(
    key_len: usize,
    target_len: usize,
    authored: bool,
    blocks_len: usize,
) -> usize {
    let author = if authored { AUTHOR_BYTES } else { 0 };
    (RECORD_FIXED_BYTES + key_len + target_len + author + blocks_len).next_multiple_of(RECORD_ALIGN)
}

/// A record's fields, borrowed from the link being written.
pub(crate) struct RecordFields<'a> {
    pub key: &'a str,
    pub target: &'a str,
    pub status: crate::link::RedirectStatus,
    pub expires_at_s: u64,
    pub created_at_s: u64,
    pub flags: u32,
    pub author: Author,
    pub behaviour: Behaviour,
    pub rules: RuleSet<'a>,
    pub labels: &'a Labels,
}

/// Appends link `l`'s record to `out` (which must be at a multiple of [`RECORD_ALIGN`]).
pub(crate) fn push_record(out: &mut Vec<u8>, l: &RecordFields<'_>) {
    debug_assert_eq!(out.len() % RECORD_ALIGN, 0);
    debug_assert_eq!(
        l.flags & (AUTHOR_FLAG | BEHAVIOUR_FLAG | RULES_FLAG | LABELS_FLAG),
        0,
        "the author, behaviour, rules and labels flags are the encoder's"
    );
    let (key, target, author) = (l.key.as_bytes(), l.target.as_bytes(), l.author);
    let start = out.len();
    out.extend_from_slice(&l.expires_at_s.to_le_bytes());
    out.extend_from_slice(&l.created_at_s.to_le_bytes());
    let flags = l.flags
        | author.flag()
        | l.behaviour.flag()
        | crate::rules::block_flag(l.rules)
        | l.labels.flag();
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&(target.len() as u32).to_le_bytes());
    out.extend_from_slice(&l.status.code().to_le_bytes());
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out.extend_from_slice(target);
    if author.is_some() {
        out.extend_from_slice(&author.bytes());
    }
    l.behaviour.encode(out);
    crate::rules::encode_block(l.rules, out);
    l.labels.encode_block(out);
    out.resize(
        start
            + record_len(
                key.len(),
                target.len(),
                author.is_some(),
                l.behaviour.encoded_len() + crate::rules::block_len(l.rules) + l.labels.block_len(),
            ),
        0,
    );
}

/// A record's fields as byte slices, bounds-checked against `records`.
pub(crate) struct RawRecord<'a> {
    pub key: &'a [u8],
    pub target: &'a [u8],
    pub status: u16,
    pub expires_at_s: u64,
    pub created_at_s: u64,
    /// Without [`AUTHOR_FLAG`] and [`BEHAVIOUR_FLAG`] (those are `author` and `behaviour`).
    pub flags: u32,
    /// [`Author::NONE`] for a record without [`AUTHOR_FLAG`], or whose author bytes are not
    /// a valid author (only a forged file holds one; the table's CRC vouches for the rest).
    pub author: Author,
    /// [`Behaviour::NONE`] for a record without [`BEHAVIOUR_FLAG`].
    pub behaviour: Behaviour,
    /// Empty for a record without [`RULES_FLAG`].
    pub rules: RuleSet<'a>,
    /// The labels block's body, unparsed ([`Labels::from_body`]); empty for a record without
    /// [`LABELS_FLAG`].
    pub labels: &'a [u8],
    /// Offset of the next record.
    pub next: usize,
}

/// Parses the record at `off`. `None` if it does not fit in `records` (only possible for a
/// file that was not written by [`super::write_table`]). Total: every offset and length is
/// checked against `records`, so arbitrary bytes give `None` or some record, never a panic.
#[inline]
pub(crate) fn read_record(records: &[u8], off: usize) -> Option<RawRecord<'_>> {
    let fixed: &[u8; RECORD_FIXED_BYTES] = records
        .get(off..off.checked_add(RECORD_FIXED_BYTES)?)?
        .try_into()
        .ok()?;
    let expires_at_s = u64::from_le_bytes(fixed[0..8].try_into().ok()?);
    let created_at_s = u64::from_le_bytes(fixed[8..16].try_into().ok()?);
    let flags = u32::from_le_bytes(fixed[16..20].try_into().ok()?);
    let target_len = u32::from_le_bytes(fixed[20..24].try_into().ok()?) as usize;
    let status = u16::from_le_bytes(fixed[24..26].try_into().ok()?);
    let key_len = fixed[26] as usize;
    let key_at = off + RECORD_FIXED_BYTES;
    let target_at = key_at + key_len;
    let key = records.get(key_at..target_at)?;
    let target_end = target_at.checked_add(target_len)?;
    let target = records.get(target_at..target_end)?;
    let authored = flags & AUTHOR_FLAG != 0;
    let author = if authored {
        let b = records.get(target_end..target_end.checked_add(AUTHOR_BYTES)?)?;
        Author::from_bytes(b.try_into().ok()?).unwrap_or(Author::NONE)
    } else {
        Author::NONE
    };
    let at = target_end + if authored { AUTHOR_BYTES } else { 0 };
    let (behaviour, behaviour_len) = if flags & BEHAVIOUR_FLAG != 0 {
        Behaviour::decode(records.get(at..)?).ok()?
    } else {
        (Behaviour::NONE, 0)
    };
    let (rules, rules_len) = if flags & RULES_FLAG != 0 {
        crate::rules::block_in_table(records.get(at + behaviour_len..)?)?
    } else {
        (RuleSet::EMPTY, 0)
    };
    let (labels, labels_len) = if flags & LABELS_FLAG != 0 {
        crate::labels::block_in_table(records.get(at + behaviour_len + rules_len..)?)?
    } else {
        (&[][..], 0)
    };
    Some(RawRecord {
        key,
        target,
        status,
        expires_at_s,
        created_at_s,
        flags: flags & !(AUTHOR_FLAG | BEHAVIOUR_FLAG | RULES_FLAG | LABELS_FLAG),
        author,
        behaviour,
        rules,
        labels,
        next: off
            + record_len(
                key_len,
                target_len,
                authored,
                behaviour_len + rules_len + labels_len,
            ),
    })
}
