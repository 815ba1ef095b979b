//! Which declared domain a request's `Host` names. The table is built once from the declared
//! names, each normalized by [`normalize`] (IDNA to ASCII, lowercase, no trailing dot), and
//! looked up on the redirect path (through `api::domains`, after its per-core memo) with no
//! allocation and no lock: the `Host` value's port is cut, its bytes hashed ASCII-lowercased
//! eight at a time as they are read, and compared without case the same way. A name of 8 to
//! 32 bytes (most) is read as four fixed words, so neither the hash nor the comparison loops:
//! a mix of hosts of random lengths mispredicts no loop exit.
//!
//! Layout: an open-addressing index of `u64` slots at most half full, each holding where its
//! record starts in one packed buffer, the name's length and 24 bits of its hash (0 = empty);
//! a record is the domain's id (4 bytes) then its name. A lookup reads one slot (a miss with
//! another hash stops there) and one record. 10,000 domains take 256 KiB of slots plus about
//! 25 bytes a name.

use std::ops::Range;

/// Domains one table holds at most.
pub const MAX_DOMAINS: usize = 100_000;

/// Longest domain name, in bytes of its ASCII form (RFC 1035 section 2.3.4).
pub const MAX_DOMAIN_BYTES: usize = 253;

/// A declared domain's number: its place in the order the names were given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DomainId(pub u32);

/// Why a name cannot be declared.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DomainError {
    #[error("{name:?} is not a domain name: {reason}")]
    NotADomain { name: String, reason: String },
    #[error("{name:?} is longer than {MAX_DOMAIN_BYTES} bytes in its ASCII form")]
    TooLong { name: String },
    #[error("{name:?} is declared twice (as {ascii:?})")]
    Duplicate { name: String, ascii: String },
    #[error("more than {MAX_DOMAINS} domains")]
    TooMany,
}

/// A declared name in the form a `Host` header carries it: IDNA to ASCII (punycode),
/// lowercase, no trailing dot. IP addresses, ports and anything else that is not a domain
/// name are refused.
pub fn normalize(name: &str) -> Result<String, DomainError> {
    let not = |reason: &str| DomainError::NotADomain {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.is_empty() || trimmed.contains([':', '/', '@', ' ']) {
        return Err(not(
            "a bare host name is expected (no scheme, port or path)",
        ));
    }
    match url::Host::parse(trimmed) {
        Ok(url::Host::Domain(ascii)) if ascii.len() > MAX_DOMAIN_BYTES => {
            Err(DomainError::TooLong {
                name: name.to_owned(),
            })
        }
        Ok(url::Host::Domain(ascii)) if ascii.bytes().all(|b| b.is_ascii_digit() || b == b'.') => {
            Err(not("an IP address, not a domain name"))
        }
        Ok(url::Host::Domain(ascii)) => Ok(ascii),
        Ok(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => Err(not("an IP address, not a domain name")),
        Err(e) => Err(not(&e.to_string())),
    }
}

/// The declared domains, looked up by `Host`.
#[derive(Debug, Default)]
pub struct HostTable {
    /// Every domain's record, back to back: its id (`u32`, little-endian), then its name.
    bytes: Vec<u8>,
    /// Each domain's id and its name's range in `bytes`, ids ascending.
    names: Vec<(DomainId, Range<u32>)>,
    /// Open addressing: a record's start (bits 0-31), its name's length (32-39) and the top
    /// 24 bits of its hash (40-63); 0 = empty.
    slots: Vec<u64>,
}

impl HostTable {
    /// A table of `names` (each normalized; `DomainId`s follow their order).
    pub fn new<S: AsRef<str>>(names: &[S]) -> Result<HostTable, DomainError> {
        let numbered: Vec<(DomainId, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (DomainId(i as u32), n.as_ref()))
            .collect();
        HostTable::numbered(&numbered)
    }

    /// A table of `names`, each with its own id (ascending: the domain book's numbers).
    pub fn numbered<S: AsRef<str>>(names: &[(DomainId, S)]) -> Result<HostTable, DomainError> {
        assert!(
            names.windows(2).all(|w| w[0].0 .0 < w[1].0 .0),
            "domain ids ascend"
        );
        if names.len() > MAX_DOMAINS {
            return Err(DomainError::TooMany);
        }
        let slot_count = (names.len() * 2).next_power_of_two().max(8);
        let mut t = HostTable {
            bytes: Vec::new(),
            names: Vec::with_capacity(names.len()),
            slots: vec![0; slot_count],
        };
        for (id, name) in names {
            let ascii = normalize(name.as_ref())?;
            if t.lookup(ascii.as_bytes()).is_some() {
                return Err(DomainError::Duplicate {
                    name: name.as_ref().to_owned(),
                    ascii,
                });
            }
            t.insert(*id, &ascii);
        }
        Ok(t)
    }

    fn insert(&mut self, id: DomainId, ascii: &str) {
        let record = self.bytes.len();
        self.bytes.extend_from_slice(&id.0.to_le_bytes());
        self.bytes.extend_from_slice(ascii.as_bytes());
        self.names
            .push((id, record as u32 + 4..self.bytes.len() as u32));
        let hash = hash_lowercase(ascii.as_bytes());
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = slot_word(record as u32, ascii.len(), hash);
    }

    /// How many domains it holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The ASCII name of `id`, if the table holds it.
    pub fn name(&self, id: DomainId) -> Option<&str> {
        let i = self.names.binary_search_by_key(&id.0, |(d, _)| d.0).ok()?;
        let r = &self.names[i].1;
        Some(std::str::from_utf8(&self.bytes[r.start as usize..r.end as usize]).expect("ASCII"))
    }

    /// The domain a `Host` header value names: its port (and a trailing dot) cut, compared
    /// without case. `None` for a name not declared, or a value that is no domain name.
    #[inline]
    pub fn lookup(&self, host: &[u8]) -> Option<DomainId> {
        let name = host_name(host);
        if name.is_empty() || name.len() > MAX_DOMAIN_BYTES || self.names.is_empty() {
            return None;
        }
        if (8..=FOUR_WORDS).contains(&name.len()) {
            // Most names: their four words read and lowercased once, for the hash and for
            // every comparison.
            let words = words4(name).map(lower8);
            let hash = hash_words4(words, name.len());
            return self.probe(name.len(), hash, |stored| same_words(words4(stored), words));
        }
        self.probe(name.len(), hash_lowercase(name), |stored| {
            eq_lowercase(stored, name)
        })
    }

    /// The domain whose slot matches `len` and `hash` and whose name `same` accepts.
    #[inline(always)]
    fn probe(&self, len: usize, hash: u64, same: impl Fn(&[u8]) -> bool) -> Option<DomainId> {
        let want = slot_word(0, len, hash);
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return None;
            }
            if slot >> 32 == want >> 32 {
                let record = slot as u32 as usize;
                if same(&self.bytes[record + 4..record + 4 + len]) {
                    let id = &self.bytes[record..record + 4];
                    return Some(DomainId(u32::from_le_bytes(
                        id.try_into().expect("4 bytes"),
                    )));
                }
            }
            i = (i + 1) & mask;
        }
    }
}

/// A slot: the record's start, the name's length and the hash's top 24 bits.
#[inline]
fn slot_word(record: u32, len: usize, hash: u64) -> u64 {
    debug_assert!((1..=MAX_DOMAIN_BYTES).contains(&len));
    u64::from(record) | (len as u64) << 32 | (hash >> 40) << 40
}

/// The name part of a `Host` value: without its port (`:` and digits, at the end) and without
/// a trailing dot. A bracketed IPv6 literal keeps its brackets and so names no domain.
#[inline]
fn host_name(host: &[u8]) -> &[u8] {
    // Scanned from the end: a port is a few digits, and a name holds no `:`.
    let mut i = host.len();
    while i > 0 && host[i - 1].is_ascii_digit() {
        i -= 1;
    }
    let name = match i.checked_sub(1) {
        Some(colon) if host[colon] == b':' => &host[..colon],
        _ => host,
    };
    name.strip_suffix(b".").unwrap_or(name)
}

/// Names of this many bytes at most are hashed and compared as four words (`words4`), with no
/// loop; longer ones word by word.
const FOUR_WORDS: usize = 32;

/// Four words that together cover a name of 8..=32 bytes: at 0, 8 and 16 (each moved back so
/// it ends by the name's end) and its last eight bytes. Overlaps are fine: both the hash and
/// the comparison read the same words of a name of one length.
#[inline]
fn words4(b: &[u8]) -> [u64; 4] {
    debug_assert!((8..=FOUR_WORDS).contains(&b.len()));
    let last = b.len() - 8;
    let at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    [at(0), at(8.min(last)), at(16.min(last)), at(last)]
}

/// A name of 1..=7 bytes as one word covering it (two overlapping halves from four bytes up).
#[inline]
fn short_word(b: &[u8]) -> u64 {
    debug_assert!((1..8).contains(&b.len()));
    if b.len() >= 4 {
        let half = |i: usize| u64::from(u32::from_le_bytes(b[i..i + 4].try_into().expect("4")));
        half(0) | half(b.len() - 4) << 32
    } else {
        b.iter()
            .enumerate()
            .fold(0, |w, (i, &x)| w | u64::from(x) << (8 * i))
    }
}

/// The words a name of more than 32 bytes is hashed as: every whole word, then the last eight
/// bytes if a part word is left.
#[inline]
fn for_each_word(b: &[u8], mut f: impl FnMut(u64)) {
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        f(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    if !words.remainder().is_empty() {
        f(u64::from_le_bytes(
            b[b.len() - 8..].try_into().expect("8 bytes"),
        ));
    }
}

/// Secrets of the hash's multiply-folds (wyhash's constants).
const S: [u64; 4] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
];

/// The 128-bit product of `a` and `b`, its halves folded together.
#[inline]
fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    r as u64 ^ (r >> 64) as u64
}

/// A hash of the bytes ASCII-lowercased as they are read (a name's hash whatever the case it
/// arrives in, with no copy). Up to 32 bytes it is two independent multiply-folds of four
/// words, with no loop to mispredict: a `Host` mix of random lengths costs the same as one.
/// The blocklist's coarse filter hashes its keys with it too (`api::blocklist`).
#[inline]
pub(crate) fn hash_lowercase(bytes: &[u8]) -> u64 {
    let w = match bytes.len() {
        0 => return S[0],
        1..=7 => [short_word(bytes); 4],
        8..=FOUR_WORDS => words4(bytes),
        _ => {
            let mut h = S[0] ^ bytes.len() as u64;
            for_each_word(bytes, |w| h = mum(h ^ lower8(w), S[1]));
            return mum(h, S[2]);
        }
    };
    hash_words4(w.map(lower8), bytes.len())
}

/// [`hash_lowercase`] of a name of `len` bytes up to 32 from its four words, lowercased.
#[inline]
fn hash_words4(w: [u64; 4], len: usize) -> u64 {
    let len = len as u64;
    mum(w[0] ^ S[0], w[1] ^ S[1]) ^ mum(w[2] ^ S[2], w[3] ^ S[3] ^ len)
}

/// Whether two names' words are equal: folded with `|` rather than compared as arrays (an
/// array compare reads the words back as 16-byte vectors from where they were stored as 8-byte
/// ones, a store-forwarding stall per lookup).
#[inline(always)]
fn same_words(a: [u64; 4], b: [u64; 4]) -> bool {
    (a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) == 0
}

/// `host` equals the lowercase `name` without regard to ASCII case, compared a word at a time
/// (up to 32 bytes with no branch but the length's).
#[inline]
fn eq_lowercase(name: &[u8], host: &[u8]) -> bool {
    if name.len() != host.len() {
        return false;
    }
    match name.len() {
        0 => true,
        1..=7 => short_word(name) == lower8(short_word(host)),
        8..=FOUR_WORDS => same_words(words4(name), words4(host).map(lower8)),
        len => {
            let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
            let whole = (name.chunks_exact(8).zip(host.chunks_exact(8)))
                .all(|(a, b)| word(a) == lower8(word(b)));
            whole && word(&name[len - 8..]) == lower8(word(&host[len - 8..]))
        }
    }
}

/// The eight bytes of `x` with `A`-`Z` lowercased and every other byte as it was (SWAR: each
/// byte's high bit says whether it is an uppercase ASCII letter; no carry crosses bytes, as
/// the sums are taken over the low seven bits).
#[inline]
fn lower8(x: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let h = x & LOW7;
    let at_least_a = h.wrapping_add(0x3f3f_3f3f_3f3f_3f3f); // byte >= b'A'
    let past_z = h.wrapping_add(0x2525_2525_2525_2525); // byte > b'Z'
    let upper = at_least_a & !past_z & !x & HIGH;
    x | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn declared_names_are_normalized_as_hosts_carry_them() {
        assert_eq!(normalize("Go.Brand.COM").unwrap(), "go.brand.com");
        assert_eq!(normalize("sho.rt.").unwrap(), "sho.rt");
        assert_eq!(
            normalize("bücher.example").unwrap(),
            "xn--bcher-kva.example"
        );
        for bad in [
            "",
            "go.brand.com:8080",
            "https://go.brand.com",
            "go.brand.com/x",
            "127.0.0.1",
            "[::1]",
            "a b.com",
        ] {
            assert!(
                matches!(normalize(bad), Err(DomainError::NotADomain { .. })),
                "{bad:?}: {:?}",
                normalize(bad)
            );
        }
        let long = format!("{}.com", "a.".repeat(130));
        assert!(matches!(normalize(&long), Err(DomainError::TooLong { .. })));
    }

    #[test]
    fn a_host_finds_its_domain_whatever_its_case_port_or_trailing_dot() {
        let t = HostTable::new(&["go.brand.com", "sho.rt", "Bücher.example"]).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup(b"go.brand.com"), Some(DomainId(0)));
        assert_eq!(t.lookup(b"GO.Brand.com:8080"), Some(DomainId(0)));
        assert_eq!(t.lookup(b"sho.rt."), Some(DomainId(1)));
        assert_eq!(t.lookup(b"xn--bcher-kva.example:443"), Some(DomainId(2)));
        assert_eq!(t.name(DomainId(2)), Some("xn--bcher-kva.example"));
        for unknown in [
            &b"brand.com"[..],
            b"go.brand.co",
            b"",
            b":80",
            b"[::1]:80",
            b"sho.rt:x",
        ] {
            assert_eq!(
                t.lookup(unknown),
                None,
                "{:?}",
                String::from_utf8_lossy(unknown)
            );
        }
        assert_eq!(HostTable::default().lookup(b"sho.rt"), None);
    }

    #[test]
    fn lower8_lowercases_ascii_letters_and_nothing_else() {
        for b in 0..=255u8 {
            let word = u64::from_le_bytes([b, b'Q', 0xff, b'@', b'[', b'z', b, 0x80]);
            let want = u64::from_le_bytes([
                b.to_ascii_lowercase(),
                b'q',
                0xff,
                b'@',
                b'[',
                b'z',
                b.to_ascii_lowercase(),
                0x80,
            ]);
            assert_eq!(lower8(word), want, "byte {b:#04x}");
        }
    }

    #[test]
    fn a_name_declared_twice_is_refused() {
        let e = HostTable::new(&["sho.rt", "SHO.RT."]).unwrap_err();
        assert!(matches!(e, DomainError::Duplicate { .. }), "{e}");
    }

    proptest! {
        /// Against a map of the lowercase names: every declared name is found under any case
        /// and with a port, and no other name is: neither random names nor a declared one with
        /// one byte changed (so each word of the comparison; names of 3 to about 80 bytes).
        #[test]
        fn lookups_answer_as_a_map_of_lowercase_names(
            // One hyphen at most: IDNA refuses `--` in the third and fourth places (`xn--`).
            names in proptest::collection::btree_set(
                "[a-z0-9]{1,10}(-[a-z0-9]{1,9})?(\\.[a-z]{1,20}){1,3}",
                1..200,
            ),
            others in proptest::collection::vec("[a-z]{1,8}\\.[a-z]{2,5}", 0..50),
            changed in proptest::collection::vec(
                (any::<proptest::sample::Index>(), any::<proptest::sample::Index>(), b'a'..=b'z'),
                0..50,
            ),
            upper in any::<bool>(),
            port in proptest::option::of(1u16..),
        ) {
            let names: Vec<String> = names.into_iter().collect();
            let t = HostTable::new(&names).unwrap();
            for (i, n) in names.iter().enumerate() {
                let mut host = if upper { n.to_ascii_uppercase() } else { n.clone() };
                if let Some(p) = port {
                    host.push_str(&format!(":{p}"));
                }
                prop_assert_eq!(t.lookup(host.as_bytes()), Some(DomainId(i as u32)));
            }
            for o in others.iter().filter(|o| !names.contains(o)) {
                prop_assert_eq!(t.lookup(o.as_bytes()), None);
            }
            for (which, at, byte) in changed {
                let mut n = names[which.index(names.len())].clone().into_bytes();
                let i = at.index(n.len());
                n[i] = byte;
                let found = names.iter().position(|m| m.as_bytes() == n.as_slice());
                prop_assert_eq!(t.lookup(&n), found.map(|i| DomainId(i as u32)));
            }
        }
    }
}
