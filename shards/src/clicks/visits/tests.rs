//! The visit log against a `Vec` oracle: what is added, purged, kept by retention and the
//! bounds is what a query lists, before and after a reopen (with the same or another number
//! of cores); torn tails are cut, damage refused; a purge leaves no byte of the link's
//! visits on disk.

use super::*;
use proptest::prelude::*;

const DAY_MS: u64 = 86_400_000;
const T0: u64 = 20_000 * DAY_MS;

fn visit(key: &str, at_ms: u64, count: u32, bot: bool, ua: &str) -> Visit {
    Visit {
        key: ShortKey::new(key.as_bytes()),
        at_ms,
        count,
        bot,
        orphan: false,
        country: *b"DE",
        ip: AnonIp::V4([203, 0, 113]),
        referrer: "news.example".into(),
        user_agent: ua.into(),
    }
}

fn owner_of(cores: usize) -> impl Fn(&[u8]) -> usize {
    move |k: &[u8]| k.iter().map(|b| usize::from(*b)).sum::<usize>() % cores
}

fn all(book: &VisitBook, key: &str) -> VisitPage {
    let k = key.as_bytes().to_vec();
    let keys = move |s: &[u8]| s == k.as_slice();
    book.query(&VisitQuery {
        keys: &keys,
        from_ms: 0,
        to_ms: u64::MAX,
        exclude_bots: false,
        orphans: false,
        skip: 0,
        take: usize::MAX,
    })
}

#[test]
fn a_visit_round_trips_and_addresses_lose_their_host_part() {
    let mut interned = HashSet::new();
    for (orphan, ip) in [false, true, false].into_iter().zip([
        AnonIp::None,
        AnonIp::of(
            &std::net::Ipv4Addr::new(198, 51, 100, 77)
                .to_ipv6_mapped()
                .octets(),
            true,
        ),
        AnonIp::of(
            &"2001:db8:aaaa:bbbb::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
            true,
        ),
    ]) {
        let v = Visit {
            ip,
            orphan,
            ..visit("abc", T0 + 5, 3, true, "Mozilla/5.0 é")
        };
        let mut b = Vec::new();
        v.encode(&mut b);
        assert_eq!(b.len(), v.encoded_len());
        let (back, n) = Visit::decode(&b, &mut interned).unwrap().unwrap();
        assert_eq!((back, n), (v, b.len()));
    }
    let v4 = AnonIp::of(
        &std::net::Ipv4Addr::new(198, 51, 100, 77)
            .to_ipv6_mapped()
            .octets(),
        true,
    );
    assert_eq!(v4.text().as_deref(), Some("198.51.100.0"));
    let v6 = "2001:db8:aaaa:bbbb::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    assert_eq!(
        AnonIp::of(&v6, true).text().as_deref(),
        Some("2001:db8:aaaa::")
    );
    assert_eq!(AnonIp::of(&v6, false), AnonIp::None);
}

#[test]
fn a_page_lists_visits_newest_first_with_counts_expanded() {
    let dir = tempfile::tempdir().unwrap();
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 100).unwrap().remove(0);
    book.add(visit("k", T0 + 1_000, 3, false, "a"), 0);
    book.add(visit("k", T0 + 3_000, 1, true, "b"), 0);
    book.add(visit("k", T0 + 2_000, 2, false, "c"), 0);
    book.add(visit("other", T0 + 4_000, 1, false, "d"), 0);
    let k = |s: &[u8]| s == b"k";
    let page = |skip, take, exclude_bots| {
        let p = book.query(&VisitQuery {
            keys: &k,
            from_ms: 0,
            to_ms: u64::MAX,
            exclude_bots,
            orphans: false,
            skip,
            take,
        });
        let uas: String = p.visits.iter().map(|v| &*v.user_agent).collect();
        (p.total, uas)
    };
    assert_eq!(page(0, 10, false), (6, "bccaaa".into()));
    assert_eq!(page(2, 2, false), (6, "ca".into()));
    assert_eq!(page(0, 10, true), (5, "ccaaa".into()));
    let window = book.query(&VisitQuery {
        keys: &k,
        from_ms: T0 + 1_500,
        to_ms: T0 + 2_500,
        exclude_bots: false,
        orphans: false,
        skip: 0,
        take: 10,
    });
    assert_eq!(window.total, 2);
}

#[test]
fn a_link_day_and_the_core_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 3).unwrap().remove(0);
    let bound = u64::from(MAX_LOGGED_VISITS_PER_LINK_DAY);
    // Logged while the link's clicks that day (the store's count) stay within the bound.
    assert!(book.add(visit("busy", T0, 2, false, "a"), bound));
    assert!(!book.add(visit("busy", T0 + 1, 1, false, "b"), bound + 1));
    assert_eq!(book.capped, 1);
    assert_eq!(all(&book, "busy").total, 2);
    // A full core's log takes no more (the oldest stay: no rewrite per eviction).
    assert!(book.add(visit("x", T0 + DAY_MS, 1, false, "e"), 1));
    assert!(book.add(visit("x", T0 + DAY_MS + 1, 1, false, "e"), 2));
    assert!(!book.add(visit("x", T0 + DAY_MS + 2, 1, false, "e"), 3));
    assert_eq!((book.len(), book.capped), (3, 2));
    book.sync(&mut || {}).unwrap();
    drop(book);
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 3).unwrap().remove(0);
    assert_eq!(
        (all(&book, "x").total, all(&book, "busy").total),
        (2, 1 + 1)
    );
    // Retention frees room.
    book.retain_from(super::super::day_of((T0 + DAY_MS) / 1000));
    assert!(book.add(visit("x", T0 + DAY_MS + 3, 1, false, "e"), 3));
}

#[test]
fn a_purge_is_durable_at_once_and_leaves_the_disk_at_the_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir_of(dir.path()).join("core-0.log");
    let has = |needle: &[u8]| {
        let b = fs::read(&path).unwrap();
        b.windows(needle.len()).any(|w| w == needle)
    };
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 100).unwrap().remove(0);
    book.add(visit("gone", T0, 1, false, "SecretAgent/1.0"), 0);
    book.add(visit("kept", T0, 1, false, "Mozilla/5.0"), 0);
    book.sync(&mut || {}).unwrap();
    assert!(has(b"SecretAgent"));
    book.purge(b"gone", &mut || {}).unwrap();
    assert_eq!(all(&book, "gone").total, 0);
    // Not rewritten yet (a burst of purges costs one rewrite); a crash now keeps the purge.
    assert!(has(b"SecretAgent"));
    drop(book);
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 100).unwrap().remove(0);
    assert_eq!((all(&book, "gone").total, all(&book, "kept").total), (0, 1));
    assert!(
        !has(b"SecretAgent"),
        "the purge frames found at open rewrite the file"
    );
    // The link comes back with new visits: only those are its.
    book.add(visit("gone", T0 + 5, 1, false, "New/1.0"), 1);
    book.purge(b"kept", &mut || {}).unwrap();
    book.set_rewrite_delay(std::time::Duration::ZERO);
    book.sync(&mut || {}).unwrap();
    assert!(!has(b"Mozilla"), "the next sync past the delay rewrites it");
    assert_eq!(all(&book, "gone").total, 1);
    drop(book);
    let book = open_all(dir.path(), 1, |_| 0, 0, 100).unwrap().remove(0);
    assert_eq!((all(&book, "gone").total, all(&book, "kept").total), (1, 0));
}

#[test]
fn a_torn_tail_is_cut_and_damage_inside_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 100).unwrap().remove(0);
    for i in 0..5 {
        book.add(visit("k", T0 + i, 1, false, "ua"), 0);
    }
    book.sync(&mut || {}).unwrap();
    drop(book);
    let path = dir_of(dir.path()).join("core-0.log");
    let good = fs::read(&path).unwrap();
    let mut torn = good.clone();
    torn.truncate(good.len() - 3);
    fs::write(&path, &torn).unwrap();
    let book = open_all(dir.path(), 1, |_| 0, 0, 100).unwrap().remove(0);
    assert_eq!(all(&book, "k").total, 4);
    drop(book);
    let mut bad = good.clone();
    bad[FRAME_HEADER_BYTES + 3] ^= 0xff;
    fs::write(&path, &bad).unwrap();
    let err = open_all(dir.path(), 1, |_| 0, 0, 100)
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("core-0.log") && msg.contains("not a torn tail"),
        "{msg}"
    );
}

#[derive(Clone, Debug)]
enum Op {
    Add {
        key: u8,
        day: u8,
        count: u32,
        bot: bool,
    },
    Purge(u8),
    Retain(u8),
    Sync,
    Reopen {
        cores: usize,
    },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u8..6, 0u8..4, 1u32..4, any::<bool>())
            .prop_map(|(key, day, count, bot)| Op::Add { key, day, count, bot }),
        1 => (0u8..6).prop_map(Op::Purge),
        1 => (0u8..4).prop_map(Op::Retain),
        3 => Just(Op::Sync),
        1 => (1usize..4).prop_map(|cores| Op::Reopen { cores }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Synced visits survive a reopen with any number of cores; each key's visits are what
    /// the oracle holds (unsynced ones may be lost by a reopen, as by a crash, so the test
    /// syncs before each).
    #[test]
    fn the_log_keeps_what_a_vec_keeps(ops in prop::collection::vec(arb_op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut cores = 2;
        let mut first_day = 0u32;
        let mut books = open_all(dir.path(), cores, owner_of(cores), 0, 1_000).unwrap();
        let mut oracle: Vec<Visit> = Vec::new();
        let mut t = 0u64;
        for op in ops {
            match op {
                Op::Add { key, day, count, bot } => {
                    t += 1;
                    let k = format!("key{key}");
                    let v = visit(&k, T0 + u64::from(day) * DAY_MS + t, count, bot, "ua");
                    oracle.push(v.clone());
                    books[owner_of(cores)(k.as_bytes())].add(v, 0);
                }
                Op::Purge(key) => {
                    let k = format!("key{key}");
                    oracle.retain(|v| v.key.as_bytes() != k.as_bytes());
                    books[owner_of(cores)(k.as_bytes())].purge(k.as_bytes(), &mut || {}).unwrap();
                }
                Op::Retain(day) => {
                    first_day = first_day.max(super::super::day_of(T0 / 1000) + u32::from(day));
                    oracle.retain(|v| v.day() >= first_day);
                    for b in &mut books {
                        b.retain_from(first_day);
                    }
                }
                Op::Sync => {
                    for b in &mut books {
                        b.sync(&mut || {}).unwrap();
                    }
                }
                Op::Reopen { cores: n } => {
                    for b in &mut books {
                        b.sync(&mut || {}).unwrap();
                    }
                    drop(books);
                    oracle.retain(|v| v.day() >= first_day);
                    cores = n;
                    books = open_all(dir.path(), cores, owner_of(cores), first_day, 1_000).unwrap();
                }
            }
        }
        for key in 0..6u8 {
            let k = format!("key{key}");
            let want: u64 = oracle
                .iter()
                .filter(|v| v.key.as_bytes() == k.as_bytes())
                .map(|v| u64::from(v.count))
                .sum();
            let got = all(&books[owner_of(cores)(k.as_bytes())], &k).total;
            prop_assert_eq!(got, want, "{}", k);
            for (c, b) in books.iter().enumerate() {
                if c != owner_of(cores)(k.as_bytes()) {
                    prop_assert_eq!(all(b, &k).total, 0);
                }
            }
        }
    }
}

#[test]
fn orphans_are_listed_apart_and_capped_per_day() {
    let dir = tempfile::tempdir().unwrap();
    let mut book = open_all(dir.path(), 1, |_| 0, 0, 1_000).unwrap().remove(0);
    book.add(
        Visit {
            orphan: true,
            ..visit("k", T0, 1, false, "o")
        },
        0,
    );
    book.add(visit("k", T0 + 1, 2, false, "l"), 0);
    let any = |_: &[u8]| true;
    let q = |orphans| VisitQuery {
        keys: &any,
        from_ms: 0,
        to_ms: u64::MAX,
        exclude_bots: false,
        orphans,
        skip: 0,
        take: 10,
    };
    assert_eq!(book.query(&q(true)).total, 1);
    assert_eq!(book.query(&q(false)).total, 2);
    // A day's orphans stop at their bound, whatever their codes; links' visits go on.
    let per_key = MAX_LOGGED_VISITS_PER_LINK_DAY;
    let keys = MAX_LOGGED_ORPHANS_PER_CORE_DAY / per_key + 1;
    for i in 0..keys {
        book.add(
            Visit {
                orphan: true,
                ..visit(&format!("scan{i}"), T0 + 2, per_key, false, "o")
            },
            0,
        );
    }
    assert_eq!(
        book.query(&q(true)).total,
        u64::from(MAX_LOGGED_ORPHANS_PER_CORE_DAY)
    );
    assert!(book.add(visit("k", T0 + 3, 1, false, "l"), 0));
    assert!(book.add(
        Visit {
            orphan: true,
            ..visit("next", T0 + DAY_MS, 1, false, "o")
        },
        0
    ));
}
