//! Click analytics against real `ricochet serve` processes: every redirect path counts each
//! click once (2 and 3 cores), HEAD, 404s, expired links and API calls count nothing, bots are
//! flagged, unique visitors follow `--client-ip`, deletes purge, the stats API refuses bad
//! input, SIGTERM loses no click and kill -9 loses at most the documented window, and nothing
//! private reaches the disk.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{data_dir, start, Client, NO_RATE_LIMIT};
use common::Server;
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = NO_RATE_LIMIT.to_vec();
    v.extend_from_slice(extra);
    v
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn parse_ms(rfc3339: &str) -> u64 {
    // 2026-12-01T14:15:21.123Z
    let (secs, frac) = rfc3339.trim_end_matches('Z').split_once('.').unwrap();
    let s = shards::timefmt::parse_rfc3339_s(&format!("{secs}Z")).unwrap();
    s * 1000 + frac.parse::<u64>().unwrap()
}

/// The stats of `key`, once every click answered before now is included
/// (`complete_until`), without sleeping longer than that takes.
fn settled(c: &mut Client, key: &str, query: &str) -> Value {
    let since = unix_ms();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = c
            .send(
                "GET",
                &format!("/api/v1/urls/{key}/stats?{query}"),
                true,
                &[],
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        // Strictly after: `complete_until` covers clicks answered before it, and `since`
        // (a whole millisecond) may be the one the last click was answered in.
        if parse_ms(v["complete_until"].as_str().unwrap()) > since {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "complete_until never passed {since}: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn click(c: &mut Client, key: &str, headers: &[(&str, &str)]) -> u16 {
    c.send("GET", &format!("/{key}"), false, headers, b"")
        .unwrap()
        .status
}

fn facet(v: &Value, name: &str, value: &str) -> u64 {
    v[name]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["value"] == json!(value))
        .map_or(0, |r| r["clicks"].as_u64().unwrap())
}

fn metric_sum(c: &mut Client, name: &str) -> u64 {
    let r = c.send("GET", "/metrics", false, &[], b"").unwrap();
    r.text()
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

fn counts_every_path_once(cores: &str) {
    counts_every_path_once_with(cores, &[]);
}

fn counts_every_path_once_with(cores: &str, more: &[&str]) {
    let (_t, dir) = data_dir();
    let mut extra = vec!["--cores", cores];
    extra.extend_from_slice(more);
    if cores != "2" {
        extra.push("--test-oversubscribe");
    }
    let s = start(&dir, &flags(&extra));
    let mut admin = Client::new(&s);
    let keys: Vec<String> = (0..12)
        .map(|i| admin.create_ok(&format!("https://example.com/{i}"), Some(&format!("k{i}"))))
        .collect();
    // Many connections, so every core answers some: local hits, forwards, then LRU hits.
    let per_conn = 5;
    let conns = 10;
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let (addr, keys) = (s.addr, keys.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).unwrap();
                for _ in 0..per_conn {
                    for k in &keys {
                        assert_eq!(click(&mut c, k, &[("User-Agent", CHROME)]), 302);
                        // Not clicks: HEAD, a 404, an API read.
                        let r = c.send("HEAD", &format!("/{k}"), false, &[], b"").unwrap();
                        assert_eq!(r.status, 302);
                        assert_eq!(click(&mut c, &format!("{k}-none"), &[]), 404);
                        assert_eq!(c.get_link(k).status, 200);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        metric_sum(&mut admin, "ricochet_forwarded_total") > 0,
        "some lookups were forwarded"
    );
    assert!(
        metric_sum(&mut admin, "ricochet_lru_hits_total") > 0,
        "some were LRU hits"
    );
    let n = (per_conn * conns) as u64;
    for k in &keys {
        let v = settled(&mut admin, k, "bots=include");
        assert_eq!(
            v["summary"]["clicks"],
            json!(n),
            "{k} on {cores} cores: {v}"
        );
        assert_eq!(v["summary"]["bot_clicks"], json!(0), "{v}");
        assert_eq!(v["dropped_clicks"], json!(0), "{v}");
        let days = v["days"].as_array().unwrap();
        assert_eq!(
            days.len(),
            30,
            "the default range is the last 30 days, zeros included"
        );
        assert_eq!(
            common::api::last_two_days(days, |d| d["clicks"].as_u64().unwrap()),
            n
        );
    }
    assert_eq!(
        metric_sum(&mut admin, "ricochet_clicks_total"),
        n * keys.len() as u64
    );
}

#[test]
fn every_redirect_path_counts_each_click_once_on_2_cores() {
    counts_every_path_once("2");
}

#[test]
fn every_redirect_path_counts_each_click_once_on_3_cores() {
    counts_every_path_once("3");
}

/// The same with each core aggregating its own clicks (`--clicks-on-cores`): peers' deltas,
/// queries and purges ring the owner core, three owners on two CPUs.
#[test]
fn every_redirect_path_counts_each_click_once_on_3_cores_aggregating_themselves() {
    counts_every_path_once_with("3", &["--clicks-on-cores"]);
}

#[test]
fn expired_links_count_nothing() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let exp = shards::timefmt::format_rfc3339_utc(shards::timefmt::now_s() + 2);
    let r = c.create(
        &json!({"long_url": "https://example.com/e", "custom_alias": "soon", "expires_at": exp}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(click(&mut c, "soon", &[]), 302);
    let deadline = Instant::now() + Duration::from_secs(5);
    while click(&mut c, "soon", &[]) != 404 {
        assert!(Instant::now() < deadline, "the link never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = settled(&mut c, "soon", "bots=include")["summary"]["clicks"]
        .as_u64()
        .unwrap();
    for _ in 0..5 {
        assert_eq!(click(&mut c, "soon", &[]), 404);
    }
    let v = settled(&mut c, "soon", "bots=include");
    assert_eq!(v["summary"]["clicks"].as_u64().unwrap(), before, "{v}");
}

#[test]
fn bots_are_flagged_not_dropped_and_facets_are_counted() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/b", Some("bots"));
    let mix: &[(&[(&str, &str)], u64)] = &[
        (
            &[
                ("User-Agent", CHROME),
                ("Referer", "https://www.News.Example.com/a/b?x=1"),
            ],
            5,
        ),
        (
            &[("User-Agent", FIREFOX), ("Referer", "https://t.co/xyz")],
            3,
        ),
        (&[("User-Agent", CHROME)], 2),
        (
            &[(
                "User-Agent",
                "Googlebot/2.1 (+http://www.google.com/bot.html)",
            )],
            4,
        ),
        (&[("User-Agent", "curl/8.4.0")], 1),
        (&[], 2), // no User-Agent at all: a bot
    ];
    for (headers, n) in mix {
        for _ in 0..*n {
            assert_eq!(click(&mut c, &k, headers), 302);
        }
    }
    let v = settled(&mut c, &k, "");
    let sum = &v["summary"];
    assert_eq!(sum["clicks"], json!(10), "bots=exclude counts humans: {v}");
    assert_eq!(sum["human_clicks"], json!(10));
    assert_eq!(sum["bot_clicks"], json!(7));
    // Two human (IP, UA) pairs, the bots' three left out. HyperLogLog counts a handful by the
    // registers they set, and under the day's random salt the two share one of the 1,024 in
    // about 1 run in 1,000: then 1. Counting bots would give 5.
    let uniques = sum["unique_visitors"].as_u64().unwrap();
    assert!((1..=2).contains(&uniques), "two human (IP, UA) pairs: {v}");
    assert_eq!(facet(&v, "referrers", "news.example.com"), 5, "{v}");
    assert_eq!(facet(&v, "referrers", "t.co"), 3);
    assert_eq!(facet(&v, "referrers", "(direct)"), 2);
    assert_eq!(facet(&v, "browsers", "Chrome"), 7);
    assert_eq!(facet(&v, "browsers", "Firefox"), 3);
    assert_eq!(facet(&v, "os", "Windows 10"), 7);
    assert_eq!(facet(&v, "os", "Linux"), 3);
    assert_eq!(facet(&v, "devices", "desktop"), 10);
    assert_eq!(facet(&v, "countries", "ZZ"), 10, "no GeoIP database: ZZ");
    let refs = v["referrers"].as_array().unwrap();
    assert_eq!(
        refs[0]["value"],
        json!("news.example.com"),
        "facets are sorted by clicks"
    );
    let only = settled(&mut c, &k, "bots=only");
    assert_eq!(only["summary"]["clicks"], json!(7), "{only}");
    assert_eq!(facet(&only, "devices", "bot"), 7);
    let all = settled(&mut c, &k, "bots=include");
    assert_eq!(all["summary"]["clicks"], json!(17));
    let days = all["days"].as_array().unwrap();
    assert_eq!(
        common::api::last_two_days(days, |d| d["bot_clicks"].as_u64().unwrap()),
        7
    );
}

#[test]
fn operator_bot_patterns_extend_the_list() {
    let (_t, dir) = data_dir();
    let patterns = dir.parent().unwrap().join("bots.txt");
    std::fs::write(&patterns, "# our monitor\n^AcmeUptime/\n").unwrap();
    let s = start(
        &dir,
        &flags(&["--bot-patterns", patterns.to_str().unwrap()]),
    );
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/p", Some("pat"));
    click(&mut c, &k, &[("User-Agent", "AcmeUptime/3.1")]);
    click(&mut c, &k, &[("User-Agent", CHROME)]);
    let v = settled(&mut c, &k, "bots=include");
    assert_eq!(v["summary"]["bot_clicks"], json!(1), "{v}");
    // A pattern that is not a regular expression is refused at start, naming the line.
    std::fs::write(&patterns, "ok\n(unclosed\n").unwrap();
    drop(c);
    s.terminate();
    let e = common::api::try_start(
        &dir,
        &flags(&["--bot-patterns", patterns.to_str().unwrap()]),
    )
    .err()
    .expect("refused");
    assert!(e.contains("bots.txt line 2"), "{e}");
}

#[test]
fn unique_visitors_follow_the_forwarded_address() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&["--client-ip", "x-forwarded-for"]));
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/u", Some("uniq"));
    for i in 0..5 {
        let xff = format!("198.51.100.200, 203.0.113.{i}");
        for _ in 0..3 {
            click(
                &mut c,
                &k,
                &[("User-Agent", CHROME), ("X-Forwarded-For", &xff)],
            );
        }
    }
    // The same address with another browser is another visitor; a bad header falls back
    // to the peer (one more).
    click(
        &mut c,
        &k,
        &[("User-Agent", FIREFOX), ("X-Forwarded-For", "203.0.113.0")],
    );
    click(
        &mut c,
        &k,
        &[("User-Agent", CHROME), ("X-Forwarded-For", "not-an-ip")],
    );
    let v = settled(&mut c, &k, "");
    assert_eq!(v["summary"]["clicks"], json!(17), "{v}");
    // Seven visitors. HyperLogLog counts a handful by the registers they set, so two of them
    // share one of the 1,024 registers (under the day's random salt) in about 2% of runs: 6
    // then, never more than 7. Ignoring the header would give 2 (the peer with two browsers).
    let uniques = v["summary"]["unique_visitors"].as_u64().unwrap();
    assert!((6..=7).contains(&uniques), "{v}");
    drop(c);
    s.terminate();
    // Without --client-ip the header is ignored: every click is the peer 127.0.0.1.
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let k2 = c.create_ok("https://example.com/u2", Some("uniq2"));
    for i in 0..4 {
        let xff = format!("203.0.113.{i}");
        click(
            &mut c,
            &k2,
            &[("User-Agent", CHROME), ("X-Forwarded-For", &xff)],
        );
    }
    let v = settled(&mut c, &k2, "");
    assert_eq!(v["summary"]["unique_visitors"], json!(1), "{v}");
    // A restart the same day kept the salt: 127.0.0.1 with Chrome (the "not-an-ip" click
    // above) is the same visitor as before, not a new one.
    for _ in 0..5 {
        click(
            &mut c,
            &k,
            &[("User-Agent", CHROME), ("X-Forwarded-For", "203.0.113.1")],
        );
    }
    let v = settled(&mut c, &k, "");
    assert_eq!(v["summary"]["clicks"], json!(22), "{v}");
    assert_eq!(
        v["summary"]["unique_visitors"],
        json!(uniques),
        "the same visitors after a restart: {v}"
    );
}

#[test]
fn delete_purges_stats_and_a_new_link_starts_at_zero() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&["--cores", "3", "--test-oversubscribe"]));
    let mut c = Client::new(&s);
    let mut others: Vec<Client> = (0..6).map(|_| Client::new(&s)).collect();
    for round in 0..3 {
        let k = c.create_ok("https://example.com/d", Some("gone"));
        // Clicks from every core, some still in their combiners when the DELETE comes.
        for o in &mut others {
            for _ in 0..4 {
                assert_eq!(click(o, &k, &[("User-Agent", CHROME)]), 302);
            }
        }
        assert_eq!(c.delete(&k).status, 204);
        c.send("GET", &format!("/api/v1/urls/{k}/stats"), true, &[], b"")
            .unwrap()
            .assert_problem(404);
        let k = c.create_ok("https://example.com/d2", Some("gone"));
        let v = settled(&mut c, &k, "bots=include");
        assert_eq!(
            v["summary"]["clicks"],
            json!(0),
            "round {round}: late batches revived the old link: {v}"
        );
        for o in others.iter_mut().take(3) {
            click(o, &k, &[("User-Agent", CHROME)]);
        }
        let v = settled(&mut c, &k, "bots=include");
        assert_eq!(v["summary"]["clicks"], json!(3), "round {round}: {v}");
        assert_eq!(c.delete(&k).status, 204);
    }
    // PATCH keeps the stats; DELETE .../stats resets them and keeps the link.
    let k = c.create_ok("https://example.com/p", Some("kept"));
    click(&mut c, &k, &[]);
    click(&mut c, &k, &[]);
    assert_eq!(
        c.patch(&k, &json!({"long_url": "https://example.org/q"}))
            .status,
        200
    );
    assert_eq!(
        settled(&mut c, &k, "bots=include")["summary"]["clicks"],
        json!(2)
    );
    let r = c
        .send("DELETE", &format!("/api/v1/urls/{k}/stats"), true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        settled(&mut c, &k, "bots=include")["summary"]["clicks"],
        json!(0)
    );
    assert_eq!(click(&mut c, &k, &[]), 302, "the link stays");
    c.send("DELETE", "/api/v1/urls/nosuch/stats", true, &[], b"")
        .unwrap()
        .assert_problem(404);
    // A purge is durable: after a restart the deleted link's stats do not come back.
    drop(others);
    drop(c);
    s.terminate();
    let s = start(&dir, &flags(&["--cores", "3", "--test-oversubscribe"]));
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/d3", Some("gone"));
    assert_eq!(
        settled(&mut c, &k, "bots=include")["summary"]["clicks"],
        json!(0)
    );
    assert_eq!(
        settled(&mut c, "kept", "bots=include")["summary"]["clicks"],
        json!(1)
    );
}

#[test]
fn the_stats_api_refuses_bad_input() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/s", Some("st"));
    for q in [
        "from=2026-13-01",
        "to=yesterday",
        "from=2026-02-01&to=2026-01-01",
        "from=2020-01-01&to=2026-01-01",
        "bots=all",
        "limit=3",
    ] {
        let r = c
            .send(
                "GET",
                &format!("/api/v1/urls/{k}/stats?{q}"),
                true,
                &[],
                b"",
            )
            .unwrap();
        let p = r.assert_problem(422);
        assert_eq!(
            p["type"],
            json!("https://ricochet.dev/problems/invalid-field"),
            "{q}: {p}"
        );
    }
    c.send("GET", "/api/v1/urls/nosuch/stats", true, &[], b"")
        .unwrap()
        .assert_problem(404);
    c.send("GET", &format!("/api/v1/urls/{k}/stats"), false, &[], b"")
        .unwrap()
        .assert_problem(401);
    let r = c
        .send(
            "PATCH",
            &format!("/api/v1/urls/{k}/stats"),
            true,
            &[],
            b"{}",
        )
        .unwrap();
    r.assert_problem(405);
    assert_eq!(r.header("allow"), Some("GET, DELETE"));
    let v = settled(&mut c, &k, "from=2026-01-01&to=2026-01-03");
    assert_eq!(v["days"].as_array().unwrap().len(), 3);
    assert_eq!(v["timezone"], json!("UTC"));
    drop(c);
    s.terminate();
    let s = start(&dir, &flags(&["--analytics", "off"]));
    let mut c = Client::new(&s);
    let p = c
        .send("GET", &format!("/api/v1/urls/{k}/stats"), true, &[], b"")
        .unwrap()
        .assert_problem(404);
    assert!(
        p["detail"].as_str().unwrap().contains("--analytics off"),
        "{p}"
    );
    assert_eq!(click(&mut c, &k, &[]), 302);
}

/// Load on `conns` connections until `stop`; returns the unix ms of every redirect answered.
fn load(
    s: &Server,
    conns: usize,
    key: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..conns)
        .map(|_| {
            let (addr, key, stop) = (s.addr, key.to_string(), stop.clone());
            std::thread::spawn(move || {
                let mut answered = Vec::new();
                let Ok(mut c) = Client::connect(addr) else {
                    return answered;
                };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match c.send(
                        "GET",
                        &format!("/{key}"),
                        false,
                        &[("User-Agent", CHROME)],
                        b"",
                    ) {
                        Ok(r) if r.status == 302 => {
                            answered.push(unix_ms());
                            if r.header("connection") == Some("close") {
                                break;
                            }
                        }
                        _ => break,
                    }
                    // About 1,000 requests per second per connection: an open loop, not a
                    // flood, so the loss window is measured in time.
                    std::thread::sleep(Duration::from_micros(900));
                }
                answered
            })
        })
        .collect()
}

#[test]
fn sigterm_loses_no_click() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&[]));
    let k = Client::new(&s).create_ok("https://example.com/t", Some("term"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads = load(&s, 4, &k, stop.clone());
    std::thread::sleep(Duration::from_millis(1500));
    // SIGTERM under load: every request answered before the drain closed its connection is
    // counted, and nothing more, except what the server says it dropped by design (no clean
    // batch free: its aggregator got no CPU, as on a machine busy with a build beside the
    // tests). 0 on an idle machine.
    let mut s = s;
    let status = s.sigterm_and_wait();
    assert!(status.success(), "{status}");
    let said = s
        .wait_stderr("clicks dropped since start: ", Duration::from_secs(1))
        .expect("the exit line");
    let dropped: usize = said.rsplit(' ').next().unwrap().trim().parse().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: usize = threads.into_iter().map(|t| t.join().unwrap().len()).sum();
    assert!(answered > 500, "the load ran: {answered}");
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let v = settled(&mut c, &k, "bots=include");
    assert_eq!(v["summary"]["clicks"], json!(answered - dropped), "{v}");
}

/// What kill -9 may lose: the sweep's hand-off plus the click log's sync interval (the
/// contract in docs/clicks.md, ~1.1 s), plus this much for a loaded test machine.
const KILL9_SLACK_MS: u64 = 400;

#[test]
fn kill9_loses_at_most_the_last_second_of_clicks_and_counts_none_twice() {
    kill9_under_load(&[]);
}

/// The same with a snapshot begun after every sync: a core encodes each one between requests
/// while it keeps merging (`ClickLog::begin_snapshot`), and the kill lands before, during or
/// after one.
#[test]
fn kill9_through_snapshots_encoded_by_the_core_loses_no_older_click() {
    kill9_under_load(&["--clicks-on-cores", "--test-click-snapshot-bytes", "1"]);
}

fn kill9_under_load(extra: &[&str]) {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(extra));
    let k = Client::new(&s).create_ok("https://example.com/k", Some("nine"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads = load(&s, 4, &k, stop.clone());
    std::thread::sleep(Duration::from_millis(3000));
    let killed_ms = unix_ms();
    s.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answered: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    answered.sort_unstable();
    let s = start(&dir, &flags(extra));
    let mut c = Client::new(&s);
    let v = settled(&mut c, &k, "bots=include");
    let counted = v["summary"]["clicks"].as_u64().unwrap() as usize;
    assert!(
        counted <= answered.len(),
        "counted {counted} of {} answered",
        answered.len()
    );
    let bound_ms = ricochet::node::core_loop::TIMEOUT_SWEEP_INTERVAL_MS
        + ricochet::analytics::CLICK_SYNC_INTERVAL_MS
        + KILL9_SLACK_MS;
    let safe = answered.partition_point(|&t| t + bound_ms <= killed_ms);
    let lost = answered.len() - counted;
    // The newest counted click tells the window actually lost.
    let window_ms = killed_ms.saturating_sub(
        answered
            .get(counted.saturating_sub(1))
            .copied()
            .unwrap_or(killed_ms),
    );
    eprintln!(
        "kill -9: {} answered, {counted} counted, {lost} lost (the last ~{window_ms} ms)",
        answered.len()
    );
    assert!(
        counted >= safe,
        "lost clicks older than {bound_ms} ms: counted {counted}, {safe} answered before then"
    );
    // "None twice": a second restart with no load between replays the same log and
    // snapshot; a click counted twice by a replay would show up here as a higher count.
    assert!(s.terminate().success());
    let s = start(&dir, &flags(extra));
    let again = settled(&mut Client::new(&s), &k, "bots=include");
    assert_eq!(
        again["summary"]["clicks"].as_u64().unwrap() as usize,
        counted,
        "a restart with no load in between changed the count: {again}"
    );
}

#[test]
fn nothing_private_reaches_the_disk() {
    let (_t, dir) = data_dir();
    let export = dir.parent().unwrap().join("export");
    let s = start(
        &dir,
        &flags(&[
            "--client-ip",
            "x-forwarded-for",
            "--click-export",
            export.to_str().unwrap(),
        ]),
    );
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/priv", Some("priv"));
    let ua = "Mozilla/5.0 (X11; PrivacyProbe/7.7) Gecko/20100101 Firefox/121.0";
    let referer = "https://www.probe-site.example/secret/path?token=hunter2-query";
    for _ in 0..20 {
        click(
            &mut c,
            &k,
            &[
                ("User-Agent", ua),
                ("Referer", referer),
                ("X-Forwarded-For", "203.0.113.77"),
            ],
        );
    }
    let v = settled(&mut c, &k, "");
    assert_eq!(facet(&v, "referrers", "probe-site.example"), 20, "{v}");
    drop(c);
    s.terminate();
    let mut mapped = vec![0u8; 10];
    mapped.extend_from_slice(&[0xff, 0xff, 203, 0, 113, 77]);
    let needles: Vec<&[u8]> = vec![
        b"PrivacyProbe",
        b"hunter2",
        b"/secret/path",
        b"203.0.113.77",
        &mapped,
        &[203, 0, 113, 77],
    ];
    let mut files = Vec::new();
    let mut stack = vec![dir.clone(), export.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    assert!(
        files.iter().any(|f| f.to_string_lossy().contains("clicks")),
        "{files:?}"
    );
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        for n in &needles {
            assert!(
                !bytes.windows(n.len()).any(|w| w == *n),
                "{} holds {:?}",
                f.display(),
                String::from_utf8_lossy(n)
            );
        }
    }
}

#[test]
fn server_wide_stats_sum_every_core_and_list_the_top_links() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&["--cores", "3", "--test-oversubscribe"]));
    let mut c = Client::new(&s);
    let mut others: Vec<Client> = (0..4).map(|_| Client::new(&s)).collect();
    for (alias, n) in [("top1", 7), ("top2", 4), ("top3", 1)] {
        let k = c.create_ok("https://example.com/t", Some(alias));
        for i in 0..n {
            click(&mut others[i % 4], &k, &[("User-Agent", CHROME)]);
        }
    }
    click(&mut others[0], "top1", &[("User-Agent", "Googlebot/2.1")]);
    for i in 0..5 {
        assert_eq!(click(&mut others[i % 4], &format!("missing{i}"), &[]), 404);
    }
    // HEAD 404s and API calls are not counted.
    others[1]
        .send("HEAD", "/missing-head", false, &[], b"")
        .unwrap();
    let since = unix_ms();
    let v = loop {
        let r = c.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        // Strictly after: `complete_until` covers clicks answered before it, and `since`
        // (a whole millisecond) may be the one the last click was answered in.
        if parse_ms(v["complete_until"].as_str().unwrap()) > since {
            break v;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(v["summary"]["clicks"], json!(13), "{v}");
    assert_eq!(v["summary"]["bot_clicks"], json!(1));
    assert_eq!(v["summary"]["human_clicks"], json!(12));
    assert_eq!(v["summary"]["not_found"], json!(5));
    let top: Vec<(String, u64)> = v["top_links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                r["clicks"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        top,
        vec![("top1".into(), 8), ("top2".into(), 4), ("top3".into(), 1)]
    );
    assert_eq!(v["days"].as_array().unwrap().len(), 30);
    c.send("GET", "/api/v1/stats?from=2026-13-01", true, &[], b"")
        .unwrap()
        .assert_problem(422);
    c.send("GET", "/api/v1/stats", false, &[], b"")
        .unwrap()
        .assert_problem(401);
    let r = c.send("POST", "/api/v1/stats", true, &[], b"{}").unwrap();
    r.assert_problem(405);
    assert_eq!(r.header("allow"), Some("GET"));
}

#[test]
fn the_export_stream_has_a_line_per_change_with_unique_ids() {
    let (_t, dir) = data_dir();
    let export = dir.parent().unwrap().join("export");
    let s = start(
        &dir,
        &flags(&[
            "--cores",
            "3",
            "--test-oversubscribe",
            "--click-export",
            export.to_str().unwrap(),
        ]),
    );
    let mut c = Client::new(&s);
    let a = c.create_ok("https://example.com/a", Some("exp_a"));
    let b = c.create_ok("https://example.com/b", Some("exp_b"));
    for _ in 0..3 {
        click(
            &mut c,
            &a,
            &[("User-Agent", CHROME), ("Referer", "https://t.co/x")],
        );
    }
    settled(&mut c, &a, "");
    std::thread::sleep(Duration::from_millis(1200)); // a group commit writes the lines
    for _ in 0..2 {
        click(&mut c, &a, &[("User-Agent", CHROME)]);
        click(&mut c, &b, &[("User-Agent", FIREFOX)]);
    }
    settled(&mut c, &b, "");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(c.delete(&b).status, 204);
    drop(c);
    // While running, open files end in .part; SIGTERM closes them.
    let parts: Vec<_> = std::fs::read_dir(&export)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        parts
            .iter()
            .any(|n| n.to_string_lossy().ends_with(".ndjson.part")),
        "{parts:?}"
    );
    assert!(s.terminate().success());
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&export).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(name.ends_with(".ndjson"), "closed at shutdown: {name}");
        for l in std::fs::read_to_string(e.path()).unwrap().lines() {
            lines.push(serde_json::from_str::<Value>(l).unwrap());
        }
    }
    let ids: std::collections::HashSet<&str> =
        lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), lines.len(), "ids are unique");
    assert!(lines.iter().all(|l| l["v"] == json!(1)));
    let last = |key: &str| {
        lines
            .iter()
            .rev()
            .find(|l| l["key"] == json!(key) && l["type"] == json!("link_day"))
            .cloned()
    };
    let la = last("exp_a").expect("lines for exp_a");
    assert_eq!(
        la["clicks"],
        json!(5),
        "the latest line carries the totals: {la}"
    );
    assert_eq!(la["referrers"]["t.co"], json!(3), "{la}");
    assert!(
        lines.iter().filter(|l| l["key"] == json!("exp_a")).count() >= 2,
        "one line per change"
    );
    assert_eq!(last("exp_b").unwrap()["clicks"], json!(2));
    let purge = lines
        .iter()
        .position(|l| l["type"] == json!("purge") && l["key"] == json!("exp_b"));
    let state = lines
        .iter()
        .position(|l| l["type"] == json!("link_day") && l["key"] == json!("exp_b"));
    assert!(
        purge > state,
        "the delete is a purge line, after the link's last state"
    );
}

#[test]
fn countries_come_from_the_operators_geoip_database() {
    let (_t, dir) = data_dir();
    let db = dir.parent().unwrap().join("country.mmdb");
    common::geo::test_mmdb(
        &db,
        &[
            ("81.2.69.0/24", "GB"),
            ("89.160.20.0/24", "SE"),
            ("2a02:cf40::/29", "NO"),
        ],
    );
    let s = start(
        &dir,
        &flags(&[
            "--geoip",
            db.to_str().unwrap(),
            "--client-ip",
            "x-forwarded-for",
        ]),
    );
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/geo", Some("geo"));
    for (ip, n) in [
        ("81.2.69.142", 3),
        ("89.160.20.112", 2),
        ("2a02:cf40::1", 1),
        ("198.51.100.1", 1),
    ] {
        for _ in 0..n {
            click(
                &mut c,
                &k,
                &[("User-Agent", CHROME), ("X-Forwarded-For", ip)],
            );
        }
    }
    let v = settled(&mut c, &k, "");
    assert_eq!(facet(&v, "countries", "GB"), 3, "{v}");
    assert_eq!(facet(&v, "countries", "SE"), 2, "{v}");
    assert_eq!(facet(&v, "countries", "NO"), 1, "IPv6 too: {v}");
    assert_eq!(
        facet(&v, "countries", "ZZ"),
        1,
        "an address the database does not know: {v}"
    );
    drop(c);
    s.terminate();
    std::fs::write(&db, b"not a database").unwrap();
    let e = common::api::try_start(&dir, &flags(&["--geoip", db.to_str().unwrap()]))
        .err()
        .expect("refused");
    assert!(e.contains("--geoip") && e.contains("country.mmdb"), "{e}");
}

#[test]
fn a_failing_click_log_never_fails_a_redirect() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&["--fault-fail-click-sync"]));
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/f", Some("fsyncfail"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    // Clicks across several failed group commits: every one is answered with its redirect.
    while metric_sum(&mut c, "ricochet_click_log_sync_failures_total") < 2 {
        assert_eq!(click(&mut c, &k, &[("User-Agent", CHROME)]), 302);
        n += 1;
        assert!(
            Instant::now() < deadline,
            "no click log write was attempted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Counted in memory all the same (and logged once writes work again).
    let v = settled(&mut c, &k, "");
    assert_eq!(v["summary"]["clicks"], json!(n), "{v}");
    let errs = s.stderr_lines().join("\n");
    assert_eq!(
        errs.matches("click log write failed").count(),
        1,
        "reported once: {errs}"
    );
}

/// Closed days are frozen by the running server: a data dir whose click log holds three
/// past days of a link (written here through the store's own files, as a server running on
/// those days would have) is started; the start-up snapshot freezes the days closed for more
/// than a day into immutable files, the stats API answers them as before, a delete purges
/// them too, and a restart after that does not bring them back.
#[test]
fn past_days_are_frozen_into_files_and_still_answered_and_purged() {
    use shards::clicks::{ClickStore, Delta};
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&["--cores", "1"]));
    let mut c = Client::new(&s);
    let key = c.create_ok("https://example.com/frozen", Some("frozen-days"));
    assert!(s.terminate().success());
    let today = shards::clicks::day_of(shards::timefmt::now_s());
    {
        let (cd, rec) = shards::clicks::files::ClickDir::open(&dir, 1, |_| 0).unwrap();
        let mut log = cd.open_log(0, rec.next_log[0]).unwrap();
        let mut store = ClickStore::default();
        for (ago, n) in [(5u32, 7u64), (3, 11), (2, 13)] {
            store.merge(&Delta {
                key: key.as_bytes().into(),
                day: today - ago,
                clicks: n,
                humans: vec![(1, 1)],
                ..Delta::default()
            });
        }
        let mut bytes = Vec::new();
        store.encode_dirty(&mut bytes);
        log.write_and_sync(&bytes).unwrap();
    }
    let s = start(&dir, &flags(&["--cores", "1"]));
    let mut c = Client::new(&s);
    let v = settled(&mut c, &key, "");
    assert_eq!(v["summary"]["clicks"], 31, "{v}");
    let gen = dir.join("clicks/g1");
    let frozen_files: Vec<String> = std::fs::read_dir(&gen)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".frz"))
        .collect();
    let want: Vec<String> = [5u32, 3, 2]
        .iter()
        .map(|ago| format!("core-0.day-{}.", today - ago))
        .collect();
    for w in &want {
        assert!(
            frozen_files.iter().any(|f| f.starts_with(w.as_str())),
            "{w}* frozen: {frozen_files:?}"
        );
    }
    // Restarted: answered from the frozen files alone.
    assert!(s.terminate().success());
    let s = start(&dir, &flags(&["--cores", "1"]));
    let mut c = Client::new(&s);
    assert_eq!(settled(&mut c, &key, "")["summary"]["clicks"], 31);
    // A delete purges the frozen days too, and the link created again starts at zero, after
    // a restart as well.
    assert_eq!(c.delete(&key).status, 204);
    c.create_ok("https://example.com/frozen-again", Some(&key));
    assert_eq!(settled(&mut c, &key, "")["summary"]["clicks"], 0);
    assert!(s.terminate().success());
    let s = start(&dir, &flags(&["--cores", "1"]));
    let mut c = Client::new(&s);
    assert_eq!(settled(&mut c, &key, "")["summary"]["clicks"], 0);
}

/// The CPUs a thread of `pid` named `name` may run on, from /proc (`Cpus_allowed_list`).
fn thread_cpus(pid: u32, name: &str) -> String {
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(t.join("status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap();
            return line.split_once(':').unwrap().1.trim().to_owned();
        }
    }
    panic!("no thread named {name}");
}

#[test]
fn service_cpus_give_the_aggregators_cpus_the_cores_do_not_use() {
    let allowed = ricochet::base::cpus::allowed().unwrap();
    assert!(
        allowed.len() >= 2,
        "this test needs 2 CPUs (the CI machine has them): {allowed:?}"
    );
    let (core_cpu, service_cpu) = (allowed[0], allowed[1]);
    let (_t, dir) = data_dir();
    let service = service_cpu.to_string();
    let s = start(&dir, &flags(&["--cores", "1", "--service-cpus", &service]));
    assert_eq!(thread_cpus(s.child.id(), "ricochet-clicks"), service);
    assert_eq!(
        thread_cpus(s.child.id(), "ricochet-core-0"),
        core_cpu.to_string()
    );
    // Clicks are counted as without it.
    let mut c = Client::new(&s);
    let r = c.create(&json!({"long_url": "https://example.com/s", "custom_alias": "svc"}));
    assert_eq!(r.status, 201, "{}", r.text());
    for _ in 0..3 {
        assert_eq!(click(&mut c, "svc", &[("User-Agent", CHROME)]), 302);
    }
    let v = settled(&mut c, "svc", "bots=include");
    assert_eq!(v["summary"]["clicks"].as_u64().unwrap(), 3, "{v}");
    drop(c);
    s.terminate();

    // A list that leaves the cores nothing, or names a CPU the process may not use, is
    // refused naming the flag.
    let every: Vec<String> = allowed.iter().map(|c| c.to_string()).collect();
    let e = common::api::try_start(&dir, &flags(&["--service-cpus", &every.join(",")]))
        .err()
        .expect("refused");
    assert!(
        e.contains("--service-cpus") && e.contains("leaves none"),
        "{e}"
    );
    let e = common::api::try_start(
        &dir,
        &flags(&[
            "--cores",
            &allowed.len().to_string(),
            "--service-cpus",
            &service,
        ]),
    )
    .err()
    .expect("refused");
    assert!(
        e.contains("--cores") && e.contains("besides --service-cpus"),
        "{e}"
    );
    let e = common::api::try_start(&dir, &flags(&["--service-cpus", "1023"]))
        .err()
        .expect("refused");
    assert!(
        e.contains("--service-cpus") && e.contains("CPU 1023"),
        "{e}"
    );
    let e = common::api::try_start(&dir, &flags(&["--service-cpus", "x"]))
        .err()
        .expect("refused");
    assert!(e.contains("--service-cpus") && e.contains("'x'"), "{e}");
}

/// Shlink's visit figures come from the click aggregators (issue 26), the same as the native
/// stats: a short URL's `visitsSummary` (total, non-bots, bots) and the overview
/// (`GET /rest/v3/visits`: clicks as non-orphan visits, 404s as orphan ones), on 3 cores. A key
/// with a role sees, there and in `GET /api/v1/stats`, the figures of the links it reaches.
#[test]
fn shlink_visit_figures_are_the_aggregators() {
    let (_t, dir) = data_dir();
    let reader = common::api::make_key(&dir, "reader", &["--read-only"]);
    let author = common::api::make_key(&dir, "author", &["--author-only"]);
    let s = start(&dir, &flags(&["--cores", "3", "--test-oversubscribe"]));
    let mut c = Client::new(&s);
    let key = c.create_ok("https://example.com/visits", Some("vis"));
    let other = c.create_ok("https://example.com/other", Some("oth"));
    for _ in 0..5 {
        assert_eq!(click(&mut c, &key, &[("User-Agent", CHROME)]), 302);
    }
    for _ in 0..2 {
        assert_eq!(click(&mut c, &key, &[("User-Agent", "Googlebot/2.1")]), 302);
    }
    assert_eq!(click(&mut c, &other, &[("User-Agent", FIREFOX)]), 302);
    for _ in 0..3 {
        assert_eq!(
            click(&mut c, "no-such-link", &[("User-Agent", CHROME)]),
            404
        );
    }
    let native = settled(&mut c, &key, "bots=include");
    assert_eq!(native["summary"]["clicks"], 7, "{native}");
    let shlink = |c: &mut Client, token: &str, path: &str| {
        c.send("GET", path, false, &[("X-Api-Key", token)], b"")
            .unwrap()
    };
    let one = shlink(&mut c, common::api::API_KEY, "/rest/v3/short-urls/vis");
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(
        one.json()["visitsSummary"],
        json!({"total": 7, "nonBots": 5, "bots": 2}),
        "{}",
        one.text()
    );
    assert_eq!(one.json()["longUrl"], "https://example.com/visits");
    // The overview, once every aggregator's part includes the 404s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let overview = loop {
        let r = shlink(&mut c, common::api::API_KEY, "/rest/v3/visits");
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        if v["visits"]["orphanVisits"]["total"] == 3 && v["visits"]["nonOrphanVisits"]["total"] == 8
        {
            break v;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        overview["visits"]["nonOrphanVisits"],
        json!({"total": 8, "nonBots": 6, "bots": 2})
    );
    // The list (every click is merged now): each link's own figures (its aggregator's, on whichever of the 3 cores owns
    // it), on every page size, links with no clicks at zero.
    for _ in 0..6 {
        c.create_ok("https://example.com/quiet", None);
    }
    for per_page in [1, 3, 50] {
        let mut seen = std::collections::BTreeMap::new();
        for page in 1..=(8 / per_page + 1) {
            let path = format!("/rest/v3/short-urls?itemsPerPage={per_page}&page={page}");
            let r = shlink(&mut c, &reader, &path);
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            for u in r.json()["shortUrls"]["data"].as_array().unwrap() {
                let code = u["shortCode"].as_str().unwrap().to_owned();
                seen.insert(code, u["visitsSummary"].clone());
            }
        }
        assert_eq!(seen.len(), 8, "{per_page}: {seen:?}");
        for (code, summary) in &seen {
            let want = match code.as_str() {
                "vis" => json!({"total": 7, "nonBots": 5, "bots": 2}),
                "oth" => json!({"total": 1, "nonBots": 1, "bots": 0}),
                _ => json!({"total": 0, "nonBots": 0, "bots": 0}),
            };
            assert_eq!(summary, &want, "{code} with {per_page} per page");
        }
    }
    let global = c
        .send("GET", "/api/v1/stats", true, &[], b"")
        .unwrap()
        .json();
    assert_eq!(global["summary"]["clicks"], 8, "{global}");
    assert_eq!(global["summary"]["not_found"], 3, "{global}");
    // A key with a role: the overview of the links it reaches, no orphan visits (Shlink's
    // rule: those belong to no link).
    let r = shlink(&mut c, &reader, "/rest/v3/visits");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["visits"],
        json!({"nonOrphanVisits": {"total": 8, "nonBots": 6, "bots": 2},
               "orphanVisits": {"total": 0, "nonBots": 0, "bots": 0}}),
        "{}",
        r.text()
    );
    let r = shlink(&mut c, &reader, "/rest/v3/short-urls/vis");
    assert_eq!(r.json()["visitsSummary"]["total"], 7);
    // The native server-wide stats of the same key: the same clicks, per day and per link,
    // and no 404s (they belong to no link).
    let mut cr = Client::new(&s);
    cr.token = reader.clone();
    let mine = cr.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
    assert_eq!(mine.status, 200, "{}", mine.text());
    let v = mine.json();
    assert_eq!(
        v["summary"],
        json!({"clicks": 8, "human_clicks": 6, "bot_clicks": 2, "not_found": 0}),
        "{v}"
    );
    assert_eq!(
        v["top_links"],
        json!([{"key": "vis", "domain": null, "clicks": 7}, {"key": "oth", "domain": null, "clicks": 1}]),
        "{v}"
    );
    assert_eq!(v["links"], 8, "{v}");
    let today = v["days"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (today["clicks"].clone(), today["bot_clicks"].clone()),
        (json!(8), json!(2)),
        "{v}"
    );
    assert_eq!(
        v["days"],
        global["days"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d["not_found"] = json!(0);
                d
            })
            .collect::<serde_json::Value>(),
        "the admin's days without 404s: {v}"
    );
    let mut ca = Client::new(&s);
    ca.token = author.clone();
    let mine = ca.create_ok("https://example.com/mine", Some("mine"));
    for _ in 0..2 {
        assert_eq!(click(&mut c, &mine, &[("User-Agent", CHROME)]), 302);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = shlink(&mut c, &author, "/rest/v3/visits");
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json()["visits"].clone();
        if v["nonOrphanVisits"]["total"] == 2 {
            assert_eq!(v["orphanVisits"]["total"], 0, "{v}");
            ca.token = author.clone();
            let r = ca.send("GET", "/api/v1/stats", true, &[], b"").unwrap();
            let n = r.json();
            assert_eq!(n["summary"]["clicks"], 2, "{n}");
            assert_eq!(
                n["top_links"],
                json!([{"key": "mine", "domain": null, "clicks": 2}])
            );
            assert_eq!(n["links"], 1, "{n}");
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another method on the overviews is refused as a method, with what is allowed.
    for path in ["/rest/v3/visits", "/rest/v3/domains"] {
        let r = c.send("DELETE", path, false, &[], b"").unwrap();
        assert_eq!((r.status, r.header("allow")), (405, Some("GET")), "{path}");
    }
}
