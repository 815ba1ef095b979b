//! Clicks in fleet mode, against a real PostgreSQL: every node flushes its per-link-day
//! states to the fleet database (`ricochet_click_days`), a retried or stale flush is never
//! applied twice, and the stats API answers for the whole fleet from any node.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{self, Client};
use common::pg::{prepare_fleet, TestDb};
use common::Server;
use fleet::clicks::{ClickRow, Facet, Flush, Flushed};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// A short flush interval keeps the tests quick (the default is 5 s).
const FLUSH_MS: &str = "500";

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";

fn node(dir: &Path, url: &str, id: &str, cores: &str) -> Server {
    let mut args = common::pg::fleet_node_args(url, id, cores);
    args.extend(["--fleet-click-flush-ms", FLUSH_MS]);
    api::start(dir, &args)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn parse_ms(rfc3339: &str) -> u64 {
    let (secs, frac) = rfc3339.trim_end_matches('Z').split_once('.').unwrap();
    shards::timefmt::parse_rfc3339_s(&format!("{secs}Z")).unwrap() * 1000
        + frac.parse::<u64>().unwrap()
}

/// `path`'s JSON on `s` once its `complete_until` passed now (every click answered so far, on
/// every node, is in), and `done` holds.
fn settled(s: &Server, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let since = unix_ms();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut c = Client::new(s);
    loop {
        let r = c.send("GET", path, true, &[], b"").unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let v = r.json();
        // Strictly after: `since` (a whole millisecond) may hold the last click's answer.
        if parse_ms(v["complete_until"].as_str().unwrap()) > since && done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{path} never settled: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn clicks(s: &Server, key: &str, n: usize, ua: &str, referer: Option<&str>) {
    let mut c = Client::new(s);
    let mut headers = vec![("User-Agent", ua)];
    if let Some(r) = referer {
        headers.push(("Referer", r));
    }
    for _ in 0..n {
        let r = c
            .send("GET", &format!("/{key}"), false, &headers, b"")
            .unwrap();
        assert_eq!(r.status, 302);
    }
}

fn facet(v: &Value, name: &str, value: &str) -> u64 {
    v[name]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["value"] == value)
        .and_then(|f| f["clicks"].as_u64())
        .unwrap_or(0)
}

/// Clicks answered by two nodes (one with 2 cores) add up in the stats of either node, with
/// bots, facets and days; the server-wide stats too. A stats reset on one node clears every
/// node's part for good; a DELETE on one node purges every node's rows; the alias created
/// again starts at zero everywhere.
#[test]
fn every_nodes_clicks_add_up_in_the_stats_of_any_node() {
    let Some(db) = TestDb::create("fleet_clicks") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "2");
    let b = node(&dir_b, &db.url, "b", "1");
    let key = Client::new(&a).create_ok("https://example.com/clicked", Some("clicked-1"));
    // Let the feed bring it to b first: b's clicks should be local hits, not read-throughs.
    let t = Instant::now();
    while Client::new(&b).get_link(&key).status != 200 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    clicks(
        &a,
        &key,
        30,
        CHROME,
        Some("https://news.example.com/story?id=1"),
    );
    clicks(&b, &key, 20, CHROME, None);
    clicks(&b, &key, 5, "curl/8.5.0", None);
    let path = format!("/api/v1/urls/{key}/stats?bots=include");
    let want = |v: &Value| v["summary"]["clicks"] == 55;
    for s in [&a, &b] {
        let v = settled(s, &path, want);
        assert_eq!(v["summary"]["human_clicks"], 50, "{v}");
        assert_eq!(v["summary"]["bot_clicks"], 5, "{v}");
        assert_eq!(v["nodes"], 2, "{v}");
        assert_eq!(facet(&v, "referrers", "news.example.com"), 30, "{v}");
        assert_eq!(facet(&v, "referrers", "(direct)"), 25, "{v}");
        let days = v["days"].as_array().unwrap();
        let recent = api::last_two_days(days, |d| d["clicks"].as_u64().unwrap());
        assert_eq!(recent, 55, "{v}");
        // Humans only (the default): bots leave the counts and the facets.
        let h = settled(s, &format!("/api/v1/urls/{key}/stats"), |v| {
            v["summary"]["clicks"] == 50
        });
        assert_eq!(facet(&h, "referrers", "(direct)"), 20, "{h}");
        // One visitor (the same address and browser) on both nodes: the nodes hash under the
        // fleet's daily salt and their sketches merge, so it counts once, not once per node.
        assert_eq!(h["summary"]["unique_visitors"], 1, "{h}");
    }
    let g = settled(&b, "/api/v1/stats", |v| v["summary"]["clicks"] == 55);
    assert_eq!(g["top_links"][0]["key"], key.as_str(), "{g}");
    assert_eq!(g["top_links"][0]["domain"], Value::Null, "{g}");
    assert_eq!(g["top_links"][0]["clicks"], 55, "{g}");
    // A key with a role: the fleet's figures of the links it reaches (each link's from the
    // database), on either node, and no 404s.
    let reader = common::pg::fleet_key(&db.url, "reader", &["--read-only"]);
    for s in [&a, &b] {
        let mut c = Client::new(s);
        c.token = reader.clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        let v = loop {
            // 503 until the node's key watcher has read the new key.
            let r = c.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
            if r.status == 200 {
                break r.json();
            }
            assert!(Instant::now() < deadline, "{}", r.text());
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(v["summary"]["clicks"], 55, "{v}");
        assert_eq!(v["summary"]["bot_clicks"], 5, "{v}");
        assert_eq!(v["summary"]["not_found"], 0, "{v}");
        assert_eq!(v["links"], 1, "{v}");
        assert_eq!(v["top_links"][0]["key"], key.as_str(), "{v}");
    }
    // Shlink's figures are the fleet's on either node: one short URL, the list, the overview.
    let want = serde_json::json!({"total": 55, "nonBots": 50, "bots": 5});
    for s in [&a, &b] {
        let mut c = Client::new(s);
        let headers = [("X-Api-Key", common::api::API_KEY)];
        let get = |c: &mut Client, path: &str| {
            let r = c.send("GET", path, false, &headers, b"").unwrap();
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            r.json()
        };
        let one = get(&mut c, &format!("/rest/v3/short-urls/{key}"));
        assert_eq!(one["visitsSummary"], want, "{one}");
        let list = get(&mut c, "/rest/v3/short-urls?itemsPerPage=50");
        let listed = list["shortUrls"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["shortCode"] == key.as_str())
            .cloned()
            .unwrap_or_default();
        assert_eq!(listed["visitsSummary"], want, "{list}");
        let overview = get(&mut c, "/rest/v3/visits");
        assert_eq!(overview["visits"]["nonOrphanVisits"], want, "{overview}");
    }
    // Both nodes' rows are in the database, one per node.
    assert_eq!(
        db.sql(&format!(
            "SELECT count(*), sum(clicks) FROM ricochet_click_days WHERE key = '{key}'"
        )),
        "2|55"
    );
    // A reset on b: every node's stats of the link go, and stay gone (a's own part too,
    // which a purges when the reset reaches it); clicks after it count from zero.
    let r = Client::new(&b)
        .send(
            "DELETE",
            &format!("/api/v1/urls/{key}/stats"),
            true,
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    for s in [&a, &b] {
        settled(s, &path, |v| v["summary"]["clicks"] == 0);
    }
    std::thread::sleep(Duration::from_millis(
        2 * FLUSH_MS.parse::<u64>().unwrap() + 500,
    ));
    for s in [&a, &b] {
        let v = settled(s, &path, |_| true);
        assert_eq!(
            v["summary"]["clicks"], 0,
            "a flush brought reset stats back: {v}"
        );
    }
    clicks(&a, &key, 4, CHROME, None);
    settled(&b, &path, |v| v["summary"]["clicks"] == 4);
    let r = Client::new(&a)
        .send("DELETE", "/api/v1/urls/no-such-link/stats", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.text());

    // Delete on a: gone from the database, and neither node's flushes bring it back.
    assert_eq!(Client::new(&a).delete(&key).status, 204);
    let t = Instant::now();
    let rows = || {
        db.sql(&format!(
            "SELECT count(*) FROM ricochet_click_days WHERE key = '{key}'"
        ))
    };
    while rows() != "0" {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "rows of a deleted link stay"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(
        2 * FLUSH_MS.parse::<u64>().unwrap() + 500,
    ));
    assert_eq!(rows(), "0", "a later flush revived a deleted link's clicks");
    for s in [&a, &b] {
        let r = Client::new(s)
            .send("GET", &format!("/api/v1/urls/{key}/stats"), true, &[], b"")
            .unwrap();
        assert_eq!(r.status, 404, "{}", r.text());
    }
    // Created again (on b): zero everywhere, then counts anew.
    Client::new(&b).create_ok("https://example.com/again", Some(&key));
    let t = Instant::now();
    // The feed brings it, so a's clicks below are counted for the new link.
    while Client::new(&a).get_link(&key).status != 200 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    clicks(&a, &key, 3, CHROME, None);
    for s in [&a, &b] {
        let v = settled(s, &path, |v| v["summary"]["clicks"] == 3);
        assert_eq!(v["summary"]["bot_clicks"], 0, "{v}");
    }
}

/// kill -9 of a node after its clicks were flushed, then a restart on the same data dir: it
/// flushes on under higher flush numbers (read back from the database), and its totals
/// replace its rows, so nothing is counted twice or stuck.
#[test]
fn a_restarted_node_flushes_on_without_counting_twice() {
    let Some(db) = TestDb::create("fleet_clicks_restart") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "2");
    let key = Client::new(&a).create_ok("https://example.com/r", Some("restart-1"));
    clicks(&a, &key, 40, CHROME, None);
    let path = format!("/api/v1/urls/{key}/stats");
    settled(&a, &path, |v| v["summary"]["clicks"] == 40);
    // Past the click log's group commit too: the 40 are durable on the node.
    std::thread::sleep(Duration::from_millis(1_500));
    let flushes = db.sql("SELECT last_flush FROM ricochet_click_nodes");
    a.kill9();
    let a = node(&dir_a, &db.url, "a", "2");
    clicks(&a, &key, 10, CHROME, None);
    let v = settled(&a, &path, |v| v["summary"]["clicks"] == 50);
    assert_eq!(v["nodes"], 1, "{v}");
    let after: u64 = db
        .sql("SELECT last_flush FROM ricochet_click_nodes")
        .parse()
        .unwrap();
    assert!(
        after > flushes.parse::<u64>().unwrap(),
        "{after} vs {flushes}"
    );
    assert_eq!(
        db.sql(&format!(
            "SELECT sum(clicks) FROM ricochet_click_days WHERE key = '{key}'"
        )),
        "50"
    );
}

fn row(key: &str, clicks: u64) -> ClickRow {
    ClickRow {
        key: key.into(),
        day: 20_000,
        clicks,
        bot_clicks: 1,
        unique_humans: 2,
        unique_bots: 1,
        unique_all: 3,
        facets: vec![Facet {
            kind: 1,
            bot: false,
            value: "t.co \"quoted\"".into(),
            count: clicks - 1,
        }],
        humans: sketch(&[(1, 1), (2, 1)]),
        bots: sketch(&[(3, 1)]),
    }
}

fn sketch(registers: &[(u16, u8)]) -> Vec<u8> {
    let mut h = shards::clicks::Hll::default();
    for &r in registers {
        h.apply(r);
    }
    fleet::clicks::encode_sketch(&h)
}

/// The flush protocol itself: a flush number is applied once (a retry of it, even with other
/// rows, is recognised and skipped), an older number after a newer one is skipped, states
/// replace (never add), and a purge takes only its node's rows.
#[test]
fn a_flush_number_is_applied_once_and_states_replace() {
    let Some(db) = TestDb::create("fleet_click_flush") else {
        return;
    };
    prepare_fleet(&db.url);
    let mut d = fleet::Db::new(&db.url).unwrap();
    let (n1, n2) = ("0".repeat(32), "1".repeat(32));
    let flush = |id: u64, rows: Vec<ClickRow>, purged: Vec<String>| Flush {
        id,
        complete_until_ms: 1_000 * id,
        dropped: 0,
        purged,
        rows,
        not_found: vec![(20_000, id)],
    };
    let sum = |db: &TestDb| db.sql("SELECT sum(clicks) FROM ricochet_click_days WHERE key = 'k'");
    let first = flush(1, vec![row("k", 5)], vec![]);
    assert_eq!(
        fleet::clicks::flush(&mut d, &n1, "a", &first).unwrap(),
        Flushed::Applied
    );
    // The same number again (a lost COMMIT reply retried), even carrying more: skipped.
    let again = flush(1, vec![row("k", 9)], vec![]);
    assert_eq!(
        fleet::clicks::flush(&mut d, &n1, "a", &again).unwrap(),
        Flushed::AlreadyApplied
    );
    assert_eq!(sum(&db), "5");
    assert_eq!(fleet::clicks::last_flush(&mut d, &n1).unwrap(), 1);
    // A newer state replaces; an older number after it is skipped.
    fleet::clicks::flush(&mut d, &n1, "a", &flush(3, vec![row("k", 7)], vec![])).unwrap();
    assert_eq!(
        fleet::clicks::flush(&mut d, &n1, "a", &flush(2, vec![row("k", 6)], vec![])).unwrap(),
        Flushed::AlreadyApplied
    );
    assert_eq!(sum(&db), "7");
    // Another node's rows add up; its purge takes only its own.
    fleet::clicks::flush(&mut d, &n2, "b", &flush(1, vec![row("k", 4)], vec![])).unwrap();
    let (days, done) = fleet::clicks::link_days(&mut d, "k", 19_999, 20_001).unwrap();
    assert_eq!(days.len(), 1);
    // The same visitors on both nodes (the same sketches): merged, not summed (2 + 1, not 6).
    assert_eq!(
        (days[0].clicks, days[0].bot_clicks, days[0].unique_all),
        (11, 2, 3)
    );
    assert_eq!((days[0].unique_humans, days[0].unique_bots), (2, 1));
    assert_eq!(days[0].facets.len(), 2);
    assert_eq!(days[0].facets[0].value, "t.co \"quoted\"");
    assert_eq!(done.nodes, 2);
    assert_eq!(done.complete_until_ms, 1_000, "the older node's figure");
    fleet::clicks::flush(&mut d, &n2, "b", &flush(2, vec![], vec!["k".into()])).unwrap();
    assert_eq!(sum(&db), "7");
    let (days, top, _) = fleet::clicks::global(&mut d, 20_000, 20_000, 10).unwrap();
    assert_eq!(days, vec![(20_000, 7, 1, 3 + 2)]);
    assert_eq!(top, vec![("k".to_owned(), 7)]);
}

/// Hole 8: click retention deletes in batches of `CLICK_FORGET_BATCH`, each its own
/// transaction (one big delete would hold every node's feed back for as long as it runs):
/// 25,000 old rows of one node, more than two batches, all go; the node's kept days and
/// another node's rows stay.
#[test]
fn click_retention_removes_a_nodes_old_days_batch_by_batch() {
    let Some(db) = TestDb::create("click_forget") else {
        return;
    };
    prepare_fleet(&db.url);
    let (me, other) = ("a".repeat(32), "b".repeat(32));
    for n in [&me, &other] {
        db.sql(&format!(
            "INSERT INTO ricochet_click_nodes (node, node_id, last_flush, complete_until, dropped) \
             VALUES ('{n}', 'x', 1, 0, 0)"
        ));
    }
    db.sql(&format!(
        "INSERT INTO ricochet_click_days (key, day, node, clicks, bot_clicks, unique_humans, \
             unique_bots, unique_all, facets, flush) \
         SELECT 'k' || i, 10 + i % 5, n, 1, 0, 1, 0, 1, '[]', 1 \
           FROM generate_series(1, 25000) i, (VALUES ('{me}'), ('{other}')) v(n)"
    ));
    db.sql(&format!(
        "INSERT INTO ricochet_click_days (key, day, node, clicks, bot_clicks, unique_humans, \
             unique_bots, unique_all, facets, flush) \
         SELECT 'k' || i, 20, '{me}', 1, 0, 1, 0, 1, '[]', 1 FROM generate_series(1, 100) i"
    ));
    let removed =
        fleet::clicks::forget_before(&mut fleet::Db::new(&db.url).unwrap(), &me, 15).unwrap();
    assert_eq!(removed, 25_000);
    let count = |n: &str| {
        db.sql(&format!(
            "SELECT count(*) FROM ricochet_click_days WHERE node = '{n}'"
        ))
    };
    assert_eq!(count(&me), "100");
    assert_eq!(count(&other), "25000");
}
