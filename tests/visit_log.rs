//! The opt-in visit log (issue 28, `--visit-log-days`), end to end on 3 cores (more than this
//! machine's CPUs: visits cross aggregators to their owners): every redirect's visit listed
//! by Shlink's visit endpoints with its user agent, referrer host, bot flag and the address's
//! network only; pages, date and bot filters exact; totals equal to the native stats; kept
//! across `kill -9` (past the click sync window) and a restart on another number of cores;
//! gone with Shlink's delete of a link's visits (which resets its figures); and deleted from the data dir when the log is turned off (then
//! Shlink's `visit-log-off`).
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{self, data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const UA_HUMAN: &str =
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0 VisitLogTest";
const UA_BOT: &str = "Googlebot/2.1 (+http://www.google.com/bot.html) VisitLogTest";
/// The visitor's full address: never stored; its /24 is.
const VISITOR: &str = "203.0.113.77";

fn flags(cores: &'static str) -> Vec<&'static str> {
    let mut f = vec![
        "--cores",
        cores,
        "--test-oversubscribe",
        "--visit-log-days",
        "7",
        "--client-ip",
        "x-forwarded-for",
    ];
    f.extend(NO_RATE_LIMIT);
    f
}

fn shlink(c: &mut Client, path: &str) -> (u16, Value) {
    let h = [("X-Api-Key", api::API_KEY)];
    let r = c.send("GET", path, false, &h, b"").unwrap();
    let v = match r.text().is_empty() {
        true => Value::Null,
        false => r.json(),
    };
    (r.status, v)
}

/// A redirect of `key` by a visitor with `ua`, from `referer`.
fn visit(c: &mut Client, key: &str, ua: &str, referer: Option<&str>) {
    let mut h = vec![("User-Agent", ua), ("X-Forwarded-For", VISITOR)];
    if let Some(r) = referer {
        h.push(("Referer", r));
    }
    let r = c.send("GET", &format!("/{key}"), false, &h, b"").unwrap();
    assert_eq!(r.status, 302, "{}", r.text());
}

/// The sum over every core of the series whose lines start with `prefix` in `/metrics`.
fn metric_sum(c: &mut Client, prefix: &str) -> u64 {
    let text = c.send("GET", "/metrics", false, &[], b"").unwrap().text();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// `path`'s `totalItems` once it reaches `want` (visits arrive within a sweep and a merge).
fn wait_total(c: &mut Client, path: &str, want: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, v) = shlink(c, path);
        assert_eq!(st, 200, "{path}: {v}");
        if v["visits"]["pagination"]["totalItems"] == want {
            return v;
        }
        assert!(Instant::now() < deadline, "{path}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every file under `dir` holding `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                if b.windows(needle.len()).any(|w| w == needle) {
                    out.push(p.display().to_string());
                }
            }
        }
    }
    out
}

#[test]
fn the_visit_log_lists_each_visit_and_keeps_only_what_it_should() {
    let (_t, dir) = data_dir();
    let reader = api::make_key(&dir, "reader", &["--read-only"]);
    let s = start(&dir, &flags("3"));
    let mut c = Client::new(&s);
    for key in ["vl-a", "vl-b"] {
        let r = c.create(&json!({"long_url": "https://visits.example/", "custom_alias": key}));
        assert_eq!(r.status, 201, "{}", r.text());
    }
    for _ in 0..5 {
        visit(
            &mut c,
            "vl-a",
            UA_HUMAN,
            Some("https://news.example/story?id=1"),
        );
    }
    for _ in 0..2 {
        visit(&mut c, "vl-a", UA_BOT, None);
    }
    for _ in 0..3 {
        visit(&mut c, "vl-b", UA_HUMAN, None);
    }

    // A link's visits, newest first, each as Shlink shows it.
    let v = wait_total(&mut c, "/rest/v3/short-urls/vl-a/visits", 7);
    // `/metrics` counts the records every core's log holds (at its last sync; identical
    // visits of one batch are one record).
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_sum(&mut c, "ricochet_visit_log_records{") == 0 {
        let text = c.send("GET", "/metrics", false, &[], b"").unwrap().text();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("visit")).collect();
        assert!(Instant::now() < deadline, "{lines:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric_sum(&mut c, "ricochet_visits_not_logged_total{"), 0);
    let data = v["visits"]["data"].as_array().unwrap();
    assert_eq!(data.len(), 7, "{v}");
    let bots = data.iter().filter(|d| d["potentialBot"] == true).count();
    assert_eq!(bots, 2, "{v}");
    for d in data {
        assert!(d["visitedUrl"].as_str().unwrap().ends_with("/vl-a"), "{d}");
        assert!(d["visitLocation"].is_null(), "no GeoIP database: {d}");
        let date = d["date"].as_str().unwrap();
        assert!(date.starts_with("20") && date.ends_with('Z'), "{d}");
        match d["potentialBot"].as_bool().unwrap() {
            true => {
                assert_eq!(d["userAgent"], UA_BOT);
                assert_eq!(d["referer"], "");
            }
            false => {
                assert_eq!(d["userAgent"], UA_HUMAN);
                // The host only: never the path or query of the page the visitor came from.
                assert_eq!(d["referer"], "news.example");
            }
        }
    }
    let dates: Vec<&str> = data.iter().map(|d| d["date"].as_str().unwrap()).collect();
    let mut sorted = dates.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(dates, sorted, "newest first");

    // Pages, bots and dates filter exactly.
    let (st, v) = shlink(
        &mut c,
        "/rest/v3/short-urls/vl-a/visits?page=2&itemsPerPage=3",
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["visits"]["pagination"],
        json!({"currentPage": 2, "pagesCount": 3, "itemsPerPage": 3,
               "itemsInCurrentPage": 3, "totalItems": 7})
    );
    let (_, v) = shlink(&mut c, "/rest/v3/short-urls/vl-a/visits?excludeBots=true");
    assert_eq!(v["visits"]["pagination"]["totalItems"], 5, "{v}");
    let (_, v) = shlink(&mut c, "/rest/v3/short-urls/vl-a/visits?endDate=2000-01-01");
    assert_eq!(v["visits"]["pagination"]["totalItems"], 0, "{v}");
    let (_, v) = shlink(
        &mut c,
        "/rest/v3/short-urls/vl-a/visits?startDate=2000-01-01T00:00:00Z",
    );
    assert_eq!(v["visits"]["pagination"]["totalItems"], 7, "{v}");

    // Totals equal the aggregates.
    let stats = c
        .send(
            "GET",
            "/api/v1/urls/vl-a/stats?bots=include",
            true,
            &[],
            b"",
        )
        .unwrap()
        .json();
    assert_eq!(stats["summary"]["clicks"], 7, "{stats}");
    assert_eq!(stats["summary"]["bot_clicks"], 2, "{stats}");

    // Lists over every link and over a domain merge every core's visits.
    let v = wait_total(&mut c, "/rest/v3/visits/non-orphan?itemsPerPage=4", 10);
    assert_eq!(v["visits"]["data"].as_array().unwrap().len(), 4);
    wait_total(&mut c, "/rest/v3/domains/DEFAULT/visits", 10);
    wait_total(&mut c, "/rest/v3/visits/non-orphan?domain=DEFAULT", 10);

    // A tag's visits: its links' (a walk for them first).
    let r = c.patch("vl-a", &json!({"tags": ["Spring Sale"]}));
    assert_eq!(r.status, 200, "{}", r.text());
    wait_total(&mut c, "/rest/v3/tags/spring-sale/visits", 7);
    wait_total(
        &mut c,
        "/rest/v3/tags/Spring%20Sale/visits?excludeBots=true",
        5,
    );
    let (st, v) = shlink(&mut c, "/rest/v3/tags/no-such-tag/visits");
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["type"], "https://shlink.io/api/error/tag-not-found");

    // Visits that reach no link are orphan visits, listed apart, as many as the overview
    // counts, of Shlink's three kinds: short codes no link has, the base URL, other paths.
    // A HEAD is no visit.
    for path in [
        "/no-such-1",
        "/no-such-2",
        "/no-such-1",
        "/",
        "/",
        "/no/such/path.html",
    ] {
        let h = [("User-Agent", UA_HUMAN), ("X-Forwarded-For", VISITOR)];
        let r = c.send("GET", path, false, &h, b"").unwrap();
        assert_eq!(r.status, 404);
    }
    let r = c.send("HEAD", "/", false, &[], b"").unwrap();
    assert_eq!(r.status, 404);
    let v = wait_total(&mut c, "/rest/v3/visits/orphan", 6);
    for d in v["visits"]["data"].as_array().unwrap() {
        assert_eq!(d["userAgent"], UA_HUMAN);
    }
    let (_, o) = shlink(&mut c, "/rest/v3/visits");
    assert_eq!(o["visits"]["orphanVisits"]["total"], 6, "{o}");
    let v = wait_total(&mut c, "/rest/v3/visits/orphan?type=invalid_short_url", 3);
    let first = v["visits"]["data"][0]["visitedUrl"].as_str().unwrap();
    let base = first
        .rsplit_once("/no-such-")
        .expect("a code's URL")
        .0
        .to_string();
    for (kind, n, url) in [
        ("invalid_short_url", 3, "/no-such-"),
        ("base_url", 2, "/"),
        ("regular_404", 1, "/no/such/path.html"),
    ] {
        let v = wait_total(&mut c, &format!("/rest/v3/visits/orphan?type={kind}"), n);
        for d in v["visits"]["data"].as_array().unwrap() {
            assert_eq!(d["type"], kind, "{d}");
            let visited = d["visitedUrl"].as_str().unwrap();
            assert!(visited.starts_with(&format!("{base}{url}")), "{d}");
            if kind == "base_url" {
                assert_eq!(visited, format!("{base}/"), "{d}");
            }
        }
    }
    let (st, _) = shlink(&mut c, "/rest/v3/visits/orphan?type=bogus");
    assert_eq!(st, 400);
    wait_total(&mut c, "/rest/v3/visits/non-orphan", 10);
    let (_, v) = shlink(&mut c, "/rest/v3/short-urls/vl-a/visits");
    assert_eq!(
        v["visits"]["pagination"]["totalItems"], 7,
        "orphans are not a link's: {v}"
    );

    // Refusals in Shlink's words.
    let (st, v) = shlink(&mut c, "/rest/v3/short-urls/nope/visits");
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["type"], "https://shlink.io/api/error/short-url-not-found");
    let (st, v) = shlink(&mut c, "/rest/v3/short-urls/vl-a/visits?page=0");
    assert_eq!(
        (st, v["invalidElements"].clone()),
        (400, json!(["page"])),
        "{v}"
    );
    let (st, v) = shlink(
        &mut c,
        "/rest/v3/short-urls/vl-a/visits?page=11&itemsPerPage=5000",
    );
    assert_eq!(st, 400, "past the window: {v}");
    let r = c
        .send("GET", "/rest/v3/short-urls/vl-a/visits", false, &[], b"")
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.text());

    // Durable: past the click sync window a kill -9 loses nothing; a restart on 2 cores
    // sorts every visit to its new owner.
    std::thread::sleep(Duration::from_millis(2_500));
    s.kill9();
    let s = start(&dir, &flags("2"));
    let mut c = Client::new(&s);
    wait_total(&mut c, "/rest/v3/short-urls/vl-a/visits", 7);
    wait_total(&mut c, "/rest/v3/short-urls/vl-b/visits", 3);
    wait_total(&mut c, "/rest/v3/visits/non-orphan", 10);
    wait_total(&mut c, "/rest/v3/visits/orphan", 6);

    // Privacy: the network is kept, never the address; user agents only in the visit log.
    assert_eq!(
        files_holding(&dir, VISITOR.as_bytes()),
        Vec::<String>::new()
    );
    let holding = files_holding(&dir, b"VisitLogTest");
    assert!(!holding.is_empty());
    assert!(
        holding.iter().all(|p| p.contains("clicks/visits/")),
        "user agents outside the visit log: {holding:?}"
    );

    // Shlink's delete of a link's visits says how many went, and resets the link's
    // figures with them, from memory and disk.
    let h = [("X-Api-Key", api::API_KEY)];
    let r = c
        .send("DELETE", "/rest/v3/short-urls/vl-b/visits", false, &h, b"")
        .unwrap();
    assert_eq!((r.status, r.json()), (200, json!({"deletedVisits": 3})));
    let stats = c
        .send(
            "GET",
            "/api/v1/urls/vl-b/stats?bots=include",
            true,
            &[],
            b"",
        )
        .unwrap()
        .json();
    assert_eq!(stats["summary"]["clicks"], 0, "{stats}");
    let r = c
        .send("DELETE", "/rest/v3/short-urls/nope/visits", false, &h, b"")
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    let (_, v) = shlink(&mut c, "/rest/v3/short-urls/vl-b/visits");
    assert_eq!(v["visits"]["pagination"]["totalItems"], 0, "{v}");
    // Durable at once (a purge frame), and gone from the disk at the file's next rewrite:
    // here the one a restart does.
    drop(c);
    s.kill9();
    let s = start(&dir, &flags("2"));
    let mut c = Client::new(&s);
    let (_, v) = shlink(&mut c, "/rest/v3/short-urls/vl-b/visits");
    assert_eq!(v["visits"]["pagination"]["totalItems"], 0, "{v}");
    assert!(files_holding(&dir.join("clicks/visits"), b"vl-b").is_empty());
    wait_total(&mut c, "/rest/v3/visits/non-orphan", 7);

    // Shlink's delete of orphan visits (admin keys): the overview's count, reset with the
    // logged ones on every aggregator, durably; the links' visits stay.
    let r = c
        .send(
            "DELETE",
            "/rest/v3/visits/orphan",
            false,
            &[("X-Api-Key", &reader)],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    let r = c
        .send("DELETE", "/rest/v3/visits/orphan", false, &h, b"")
        .unwrap();
    assert_eq!((r.status, r.json()), (200, json!({"deletedVisits": 6})));
    let (_, o) = shlink(&mut c, "/rest/v3/visits");
    assert_eq!(o["visits"]["orphanVisits"]["total"], 0, "{o}");
    wait_total(&mut c, "/rest/v3/visits/orphan", 0);
    drop(c);
    s.kill9();
    let s = start(&dir, &flags("2"));
    let mut c = Client::new(&s);
    let (_, o) = shlink(&mut c, "/rest/v3/visits");
    assert_eq!(
        o["visits"]["orphanVisits"]["total"], 0,
        "after a kill -9: {o}"
    );
    wait_total(&mut c, "/rest/v3/visits/orphan", 0);
    wait_total(&mut c, "/rest/v3/visits/non-orphan", 7);
    let r = c.send("GET", "/no-such-3", false, &[], b"").unwrap();
    assert_eq!(r.status, 404);
    wait_total(&mut c, "/rest/v3/visits/orphan", 1);
    drop(c);
    s.kill9();

    // Turned off: the log is deleted, and Shlink's visit lists say it is off.
    let mut off: Vec<&str> = vec!["--cores", "2", "--test-oversubscribe"];
    off.extend(NO_RATE_LIMIT);
    let s = start(&dir, &off);
    let mut c = Client::new(&s);
    assert!(!dir.join("clicks/visits").exists());
    assert!(files_holding(&dir, b"VisitLogTest").is_empty());
    let (st, v) = shlink(&mut c, "/rest/v3/short-urls/vl-a/visits");
    assert_eq!(st, 501, "{v}");
    assert_eq!(v["type"], "https://ricochet.dev/problems/visit-log-off");
    let stats = c
        .send(
            "GET",
            "/api/v1/urls/vl-a/stats?bots=include",
            true,
            &[],
            b"",
        )
        .unwrap()
        .json();
    assert_eq!(
        stats["summary"]["clicks"], 7,
        "the aggregates stay: {stats}"
    );
}

/// The log needs what it lists: `--analytics full`; and it is a node's own, not a fleet's.
#[test]
fn the_visit_log_is_refused_without_full_analytics() {
    let (_t, dir) = data_dir();
    let err = api::try_start(&dir, &["--visit-log-days", "7", "--analytics", "counts"])
        .err()
        .expect("refused");
    assert!(
        err.contains("--visit-log-days needs --analytics full"),
        "{err}"
    );
    let (ok, out) = api::cli(&dir, "serve", &["--visit-log-days", "0"]);
    assert!(!ok && out.contains("--visit-log-days"), "{out}");
}
