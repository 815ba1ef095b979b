//! Table build + lookup against a HashMap oracle, and corrupt-file handling.

use proptest::prelude::*;
use shards::behaviour::{Behaviour, Disabled, DisabledReason};
use shards::link::{Author, RedirectStatus};
use shards::placement::shard_of;
use shards::table::{
    write_table, OwnedLink, Table, HEADER_BYTES, INDEX_LOAD_PERCENT, TABLE_FORMAT_VERSION,
};
use shards::Error;
use std::collections::HashMap;
use std::path::Path;

fn link(key: &str, target: &str, status: RedirectStatus, n: u64) -> OwnedLink {
    OwnedLink {
        key: key.to_owned(),
        target: target.to_owned(),
        status,
        expires_at_s: n * 3,
        created_at_s: 1_700_000_000 + n,
        flags: (n % 7) as u32,
        author: if n % 3 == 0 {
            Author::from_id(&format!("k{n}")).unwrap()
        } else {
            Author::NONE
        },
        behaviour: match n % 4 {
            0 => Behaviour {
                valid_since_s: n,
                forward_query: Some(n % 8 == 0),
                disabled: Some(Disabled {
                    reason: DisabledReason::Legal,
                    at_s: n + 1,
                    by: Author::from_id("adm1n").unwrap(),
                }),
                max_visits: n + 2,
                visits: n / 3,
                crawlable: n % 8 == 4,
            },
            _ => Behaviour::NONE,
        },
        rules: match n % 5 {
            1 => shards::rules::Rules::from_rules(&[shards::rules::Rule {
                target: format!("https://rule.example/{n}"),
                conditions: vec![
                    shards::rules::Condition::Language("de".into()),
                    shards::rules::Condition::QueryPresent(format!("p{n}")),
                ],
            }])
            .unwrap(),
            _ => shards::rules::Rules::NONE,
        },
        labels: match n % 6 {
            2 => shards::labels::Labels::new(Some(&format!("Title {n}")), &["b", "a"]).unwrap(),
            3 => shards::labels::Labels::new::<&str>(None, &[&format!("tag{n}")]).unwrap(),
            _ => shards::labels::Labels::NONE,
        },
    }
}

fn status_strategy() -> impl Strategy<Value = RedirectStatus> {
    prop_oneof![
        Just(RedirectStatus::MovedPermanently),
        Just(RedirectStatus::Found),
        Just(RedirectStatus::TemporaryRedirect),
        Just(RedirectStatus::PermanentRedirect),
    ]
}

/// Writes `links` (unique keys) as one table per shard under `dir`; returns the tables.
fn build(dir: &Path, shard_count: u32, links: &[OwnedLink]) -> Vec<Table> {
    let mut by_shard: Vec<Vec<OwnedLink>> = vec![Vec::new(); shard_count as usize];
    for l in links {
        by_shard[shard_of(l.key.as_bytes(), shard_count) as usize].push(l.clone());
    }
    by_shard
        .into_iter()
        .enumerate()
        .map(|(s, v)| {
            let p = dir.join(format!("{s}.tbl"));
            let stats = write_table(&p, s as u32, shard_count, 42, v.clone()).unwrap();
            let t = Table::open(&p).unwrap();
            assert_eq!(stats.entries, v.len() as u64);
            assert_eq!(stats.file_bytes, t.file_bytes());
            assert_eq!(t.len(), v.len() as u64);
            assert_eq!(t.shard(), s as u32);
            assert_eq!(t.max_log_seq(), 42);
            t
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn lookups_match_hashmap(
        keys in proptest::collection::hash_set("[A-Za-z0-9_-]{1,12}", 0..300),
        absent in proptest::collection::vec("[A-Za-z0-9_-]{1,64}", 0..100),
        shard_count in 1u32..9,
        status in status_strategy(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut keys: Vec<String> = keys.into_iter().collect();
        keys.sort();
        // Add case-flipped twins so keys differing only in case coexist.
        let twins: Vec<String> = keys.iter().take(20).map(|k| {
            k.chars().map(|c| if c.is_ascii_lowercase() { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() }).collect()
        }).collect();
        keys.extend(twins);
        keys.sort();
        keys.dedup();
        let links: Vec<OwnedLink> = keys.iter().enumerate()
            .map(|(i, k)| link(k, &format!("https://example.com/{i}/{k}"), status, i as u64))
            .collect();
        let oracle: HashMap<&str, &OwnedLink> = links.iter().map(|l| (l.key.as_str(), l)).collect();
        let tables = build(dir.path(), shard_count, &links);

        for probe in keys.iter().chain(absent.iter()) {
            let s = shard_of(probe.as_bytes(), shard_count);
            prop_assert!(s < shard_count);
            let got = tables[s as usize].get(probe.as_bytes());
            match oracle.get(probe.as_str()) {
                Some(want) => {
                    let got = got.expect("present key found");
                    prop_assert_eq!(got.target, want.target.as_str());
                    prop_assert_eq!(got.status, want.status);
                    prop_assert_eq!(got.expires_at_s, want.expires_at_s);
                    prop_assert_eq!(got.created_at_s, want.created_at_s);
                    prop_assert_eq!(got.flags, want.flags);
                    prop_assert_eq!(got.author, want.author);
                }
                None => prop_assert!(got.is_none(), "absent key {} found", probe),
            }
            // A key is only ever in its own shard's table.
            for (other, t) in tables.iter().enumerate() {
                if other as u32 != s {
                    prop_assert!(t.get(probe.as_bytes()).is_none());
                }
            }
        }
        // iter() returns every entry once, in key order.
        let mut seen = 0;
        for t in &tables {
            let entries: Vec<OwnedLink> = t.iter().map(OwnedLink::from).collect();
            prop_assert!(entries.windows(2).all(|w| w[0].key < w[1].key));
            for e in &entries {
                prop_assert_eq!(Some(&e), oracle.get(e.key.as_str()));
            }
            seen += entries.len();
        }
        prop_assert_eq!(seen, links.len());
    }

    #[test]
    fn shard_of_in_range(key in "[A-Za-z0-9_-]{1,64}", n in 1u32..=65_536) {
        prop_assert!(shard_of(key.as_bytes(), n) < n);
    }
}

#[test]
fn large_table_and_long_values() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("https://example.com/{}", "x".repeat(8000));
    let links: Vec<OwnedLink> = (0..20_000u64)
        .map(|i| {
            let t = if i % 1000 == 0 {
                long.clone()
            } else {
                format!("https://e.com/{i}")
            };
            link(&format!("k{i:x}"), &t, RedirectStatus::Found, i)
        })
        .chain(std::iter::once(link(
            &"Z".repeat(64),
            "http://h",
            RedirectStatus::PermanentRedirect,
            1,
        )))
        .collect();
    let tables = build(dir.path(), 1, &links);
    for l in &links {
        assert_eq!(tables[0].get(l.key.as_bytes()).unwrap().target, l.target);
    }
    assert!(tables[0].get(b"nope").is_none());
    assert!(tables[0].get(b"").is_none());
}

#[test]
fn empty_table() {
    let dir = tempfile::tempdir().unwrap();
    let t = &build(dir.path(), 1, &[])[0];
    assert!(t.is_empty());
    assert!(t.get(b"a").is_none());
    assert_eq!(t.iter().count(), 0);
}

#[test]
fn writer_rejects_bad_entries() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.tbl");
    let dup = vec![
        link("a", "https://x", RedirectStatus::Found, 0),
        link("a", "https://y", RedirectStatus::Found, 0),
    ];
    assert!(matches!(
        write_table(&p, 0, 1, 0, dup),
        Err(Error::BadEntry { .. })
    ));
    let bad_url = vec![link("a", "ftp://x", RedirectStatus::Found, 0)];
    assert!(matches!(
        write_table(&p, 0, 1, 0, bad_url),
        Err(Error::BadEntry { .. })
    ));
    let bad_key = vec![link("a/b", "https://x", RedirectStatus::Found, 0)];
    assert!(matches!(
        write_table(&p, 0, 1, 0, bad_key),
        Err(Error::BadEntry { .. })
    ));
    // "a" lives in exactly one of two shards; writing it to the other is refused.
    let wrong = 1 - shard_of(b"a", 2);
    let e = write_table(
        &p,
        wrong,
        2,
        0,
        vec![link("a", "https://x", RedirectStatus::Found, 0)],
    );
    assert!(matches!(e, Err(Error::BadEntry { .. })));
    assert!(!p.exists(), "no file left behind on error");
    assert!(!dir.path().join("t.tbl.tmp").exists());
}

/// A valid table file's bytes, for corrupting.
fn good_table(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let p = dir.join("00000.tbl");
    let links: Vec<OwnedLink> = (0..500u64)
        .map(|i| {
            link(
                &format!("key{i}"),
                &format!("https://example.com/{i}"),
                RedirectStatus::Found,
                i,
            )
        })
        .collect();
    write_table(&p, 0, 1, 0, links).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    (p, bytes)
}

fn expect_corrupt(p: &Path, bytes: &[u8], what: &str) {
    std::fs::write(p, bytes).unwrap();
    match Table::open(p) {
        Err(e @ Error::CorruptTable { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("00000.tbl"),
                "{what}: error must name the file: {msg}"
            );
        }
        Err(e) => panic!("{what}: wrong error kind: {e}"),
        Ok(_) => panic!("{what}: corrupt table opened"),
    }
}

#[test]
fn corrupt_tables_are_rejected_with_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let (p, good) = good_table(dir.path());
    assert!(Table::open(&p).is_ok());

    expect_corrupt(&p, &[], "zero-length");
    expect_corrupt(&p, &good[..HEADER_BYTES - 1], "shorter than header");
    expect_corrupt(&p, &good[..good.len() - 1], "truncated by one byte");
    expect_corrupt(&p, &good[..good.len() / 2], "truncated by half");
    let mut longer = good.clone();
    longer.push(0);
    expect_corrupt(&p, &longer, "extended");

    let mut magic = good.clone();
    magic[0..8].copy_from_slice(b"NOTATABL");
    expect_corrupt(&p, &magic, "wrong magic");

    for at in [8usize, 12, 24, 40, 48, 60] {
        let mut h = good.clone();
        h[at] ^= 0x01;
        expect_corrupt(&p, &h, &format!("header byte {at} flipped"));
    }
    for at in [
        HEADER_BYTES,
        HEADER_BYTES + 100,
        good.len() / 2,
        good.len() - 1,
    ] {
        let mut b = good.clone();
        b[at] ^= 0x40;
        expect_corrupt(&p, &b, &format!("payload byte {at} flipped"));
    }
    let e = Table::open(&dir.path().join("missing.tbl")).unwrap_err();
    assert!(e.to_string().contains("missing.tbl"), "{e}");
}

/// A table of format 1 (before authors: no record has one) opens and reads unchanged in a
/// build that writes format 2; a version above this build's is refused, naming both.
#[test]
fn format_1_tables_read_unchanged_and_a_future_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("00000.tbl");
    let links: Vec<OwnedLink> = (0..200u64)
        .map(|i| OwnedLink {
            author: Author::NONE,
            behaviour: Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
            ..link(
                &format!("key{i}"),
                &format!("https://e.com/{i}"),
                RedirectStatus::Found,
                i,
            )
        })
        .collect();
    write_table(&p, 0, 1, 0, links.clone()).unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    assert_eq!(bytes[8..12], TABLE_FORMAT_VERSION.to_le_bytes());
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    reseal(&mut bytes);
    std::fs::write(&p, &bytes).unwrap();
    let t = Table::open(&p).unwrap();
    let read: Vec<OwnedLink> = t.iter().map(OwnedLink::from).collect();
    let mut want = links;
    want.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(read, want);
    assert_eq!(t.get(b"key7").unwrap().target, "https://e.com/7");
    drop(t);
    let future = TABLE_FORMAT_VERSION + 1;
    bytes[8..12].copy_from_slice(&future.to_le_bytes());
    reseal(&mut bytes);
    std::fs::write(&p, &bytes).unwrap();
    let e = Table::open(&p).unwrap_err().to_string();
    let range = format!("1 to {TABLE_FORMAT_VERSION}");
    assert!(
        e.contains(&format!("version {future}")) && e.contains(&range),
        "{e}"
    );
}

/// Rules written by a format-4 or -5 build (the first program form: conditions in order)
/// are read from a table in place and evaluate; a record read out of it (for compaction, an
/// export) carries them compiled.
#[test]
fn first_form_rules_read_back_and_evaluate() {
    use shards::rules::{encode, Condition, Device, Rule, RuleSet, Rules, Visitor};
    let target = b"https://e.com/android";
    // count 1; target; 1 condition: kind 1 (device), Android (1).
    let mut program = vec![1, target.len() as u8, 0];
    program.extend_from_slice(target);
    program.extend_from_slice(&[1, 1, 1]);
    let set = RuleSet::parse(&program).expect("a first-form program parses");
    let rules = [Rule {
        target: "https://e.com/android".into(),
        conditions: vec![Condition::Device(Device::Android)],
    }];
    assert_eq!(set.decode().unwrap(), rules);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("00000.tbl");
    let l = OwnedLink {
        rules: Rules::new(set),
        ..link("k", "https://e.com/", RedirectStatus::Found, 1)
    };
    write_table(&p, 0, 1, 0, vec![l.clone()]).unwrap();
    let t = Table::open(&p).unwrap();
    let in_place = t.get(b"k").unwrap().rules;
    assert_eq!(
        in_place.bytes(),
        &program[..],
        "the table keeps the first form"
    );
    let read = OwnedLink::from(("k", t.get(b"k").unwrap()));
    assert_eq!(
        read.rules.set().bytes(),
        encode(&rules).unwrap(),
        "read out compiled"
    );
    assert_eq!(read.rules.set().decode().unwrap(), rules);
    let android = Visitor {
        user_agent: b"Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile",
        ..Visitor::default()
    };
    for set in [in_place, read.rules.set()] {
        let m = set.first_match(&android, &mut |_| None).unwrap();
        assert_eq!((m.index, m.target), (0, &target[..]));
        assert!(set
            .first_match(&Visitor::default(), &mut |_| None)
            .is_none());
    }
}

#[test]
fn table_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Table>();
}

/// Re-seals `bytes` with correct CRCs, as a crafted (not merely damaged) file would be.
fn reseal(bytes: &mut [u8]) {
    let pcrc = crc32c::crc32c(&bytes[HEADER_BYTES..]);
    bytes[48..52].copy_from_slice(&pcrc.to_le_bytes());
    let hcrc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&hcrc.to_le_bytes());
}

#[test]
fn crafted_tables_with_valid_checksums_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("00000.tbl");
    let links: Vec<OwnedLink> = (0..40u64)
        .map(|i| {
            link(
                &format!("key{i}"),
                &format!("https://e.com/{i}"),
                RedirectStatus::Found,
                i,
            )
        })
        .collect();
    write_table(&p, 0, 1, 0, links).unwrap();
    let good = std::fs::read(&p).unwrap();
    let probes: Vec<String> = (0..50).map(|i| format!("key{i}")).collect();
    let mut rejected = 0;
    // Every payload byte, three different corruptions each.
    for at in HEADER_BYTES..good.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = good.clone();
            b[at] ^= flip;
            reseal(&mut b);
            // Unlink first: rewriting a file in place makes ext4 flush it on close (slow).
            std::fs::remove_file(&p).unwrap();
            std::fs::write(&p, &b).unwrap();
            match Table::open(&p) {
                // Open checks structure, not every record; lookups and iteration of whatever
                // it accepted must stay total and hand out only serve-safe targets.
                Ok(t) => exercise_forged(&t, &probes),
                Err(e) => {
                    assert!(e.to_string().contains("00000.tbl"), "{e}");
                    rejected += 1;
                }
            }
        }
    }
    assert!(rejected > 0, "structural checks rejected nothing");
}

/// What a lookup may hand out even from a forged table: a target that cannot split or smuggle
/// a `Location` header.
fn assert_serve_safe(target: &str) {
    assert!(
        !target.chars().any(|c| c.is_whitespace() || c.is_control()),
        "unsafe target {target:?}"
    );
}

/// Looks up every probe and walks the table; must not panic whatever the bytes are.
fn exercise_forged(t: &Table, probes: &[String]) {
    for k in probes {
        if let Some(l) = t.get(k.as_bytes()) {
            assert_serve_safe(l.target);
        }
    }
    // Records are at least 32 bytes, so iteration is bounded by the file size.
    let mut n = 0u64;
    for (key, l) in t.iter() {
        assert!(shards::link::validate_key(key.as_bytes()).is_ok());
        assert_serve_safe(l.target);
        n += 1;
        assert!(n <= t.file_bytes() / 32, "iteration does not advance");
    }
}

/// One forgery applied to a valid table before its checksums are recomputed.
#[derive(Clone, Debug)]
enum Forge {
    /// Keep slot `slot`'s tag, point it at record position `pos` (any 40-bit value).
    SlotPosition { slot: usize, pos: u64 },
    /// Replace slot `slot` with an arbitrary word.
    SlotWord { slot: usize, word: u64 },
    /// Fill every empty slot, so no probe sequence ends at an empty slot.
    NoEmptySlot { word: u64 },
    /// Overwrite 4 record bytes at `at` (hits lengths, status, key and target bytes).
    RecordU32 { at: usize, value: u32 },
    /// Overwrite one record byte.
    RecordByte { at: usize, value: u8 },
    /// Claim a different entry count in the header.
    EntryCount { count: u64 },
}

fn forge_strategy() -> impl Strategy<Value = Forge> {
    prop_oneof![
        4 => (any::<usize>(), prop_oneof![Just(0u64), 0u64..4096, any::<u64>()])
            .prop_map(|(slot, pos)| Forge::SlotPosition { slot, pos }),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(slot, word)| Forge::SlotWord { slot, word }),
        1 => any::<u64>().prop_map(|word| Forge::NoEmptySlot { word }),
        3 => (any::<usize>(), prop_oneof![0u32..300, any::<u32>()])
            .prop_map(|(at, value)| Forge::RecordU32 { at, value }),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Forge::RecordByte { at, value }),
        1 => (0u64..200).prop_map(|count| Forge::EntryCount { count }),
    ]
}

/// Bits of a slot word holding the record position (docs/storage.md).
const SLOT_POS_BITS: u32 = 40;
/// Size of the payload's rkyv root (two relative pointers + lengths) at its end.
const ROOT_BYTES: usize = 32;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A forged table (garbage offsets, lengths and bytes, then valid CRCs) either fails to
    /// open with an error naming the file or answers every lookup without panicking.
    #[test]
    fn forged_tables_never_panic(
        n in 1usize..60,
        forges in proptest::collection::vec(forge_strategy(), 1..12),
        absent in proptest::collection::vec("[A-Za-z0-9_-]{1,64}", 0..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000.tbl");
        let links: Vec<OwnedLink> = (0..n as u64)
            .map(|i| link(&format!("key{i}"), &format!("https://e.com/{i}"), RedirectStatus::Found, i))
            .collect();
        write_table(&p, 0, 1, 0, links).unwrap();
        let mut b = std::fs::read(&p).unwrap();
        // Payload layout: slot words, then record bytes, then the rkyv root.
        let n_slots = ((n as u64 * 100).div_ceil(INDEX_LOAD_PERCENT) as usize).max(n + 1);
        let slots_end = HEADER_BYTES + n_slots * 8;
        let records_end = b.len() - ROOT_BYTES;
        let word_at = |b: &[u8], s: usize| {
            u64::from_le_bytes(b[HEADER_BYTES + s * 8..][..8].try_into().unwrap())
        };
        let used = (0..n_slots).filter(|&s| word_at(&b, s) != 0).count();
        prop_assert_eq!(used, n, "slot area located wrongly: layout changed?");
        let records_len = records_end - slots_end;
        for f in &forges {
            match *f {
                Forge::SlotPosition { slot, pos } => {
                    let s = slot % n_slots;
                    let w = word_at(&b, s);
                    let w = (w >> SLOT_POS_BITS << SLOT_POS_BITS) | (pos & ((1 << SLOT_POS_BITS) - 1));
                    b[HEADER_BYTES + s * 8..][..8].copy_from_slice(&w.to_le_bytes());
                }
                Forge::SlotWord { slot, word } => {
                    let s = slot % n_slots;
                    b[HEADER_BYTES + s * 8..][..8].copy_from_slice(&word.to_le_bytes());
                }
                Forge::NoEmptySlot { word } => {
                    for s in 0..n_slots {
                        if word_at(&b, s) == 0 {
                            b[HEADER_BYTES + s * 8..][..8].copy_from_slice(&(word | 1).to_le_bytes());
                        }
                    }
                }
                Forge::RecordU32 { at, value } if records_len >= 4 => {
                    let at = slots_end + at % (records_len - 3);
                    b[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
                Forge::RecordU32 { .. } => {}
                Forge::RecordByte { at, value } => {
                    b[slots_end + at % records_len] = value;
                }
                Forge::EntryCount { count } => b[24..32].copy_from_slice(&count.to_le_bytes()),
            }
        }
        reseal(&mut b);
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, &b).unwrap();
        let probes: Vec<String> = (0..n + 10).map(|i| format!("key{i}")).chain(absent).collect();
        match Table::open(&p) {
            Ok(t) => exercise_forged(&t, &probes),
            Err(e) => {
                prop_assert!(matches!(e, Error::CorruptTable { .. }), "{}", e);
                prop_assert!(e.to_string().contains("00000.tbl"), "{}", e);
            }
        }
    }
}
