//! Redirect rules (issue 27, Shlink 4's model): a link's ordered rules, each a set of
//! conditions that must all match and a target; the first matching rule wins, else the link's
//! own target. On 3 cores (more than this machine's CPUs), so a visit is answered by the
//! key's owner, through a forward (the request's fields kept in its batch until the owner
//! answers) and from the LRU, one request at a time and pipelined. Every visit's `Location`
//! is checked against a model of the rules written here, independently of `shards::rules`.
//! The rules go through create, GET, PATCH (visible on every core before its 200), a
//! `kill -9`, a compaction, and an NDJSON export and import; the blocklist judges rule
//! targets at create and at redirect; bad rules get a 422 naming the member.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{cli, data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::{json, Value};

const ANDROID: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36";
const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
const WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";

/// The rules every test link gets (the loopback peer is 127.0.0.1).
fn rules(i: usize) -> Value {
    json!([
        {"target": format!("https://android-de.example/{i}"), "conditions": [
            {"type": "device", "value": "android"},
            {"type": "language", "value": "de"}]},
        {"target": format!("https://ios.example/{i}"), "conditions": [
            {"type": "device", "value": "ios"}]},
        {"target": format!("https://promo.example/{i}"), "conditions": [
            {"type": "query-param", "key": "promo", "value": "spring sale"}]},
        {"target": format!("https://flagged.example/{i}"), "conditions": [
            {"type": "valueless-query-param", "key": "beta"}]},
        {"target": format!("https://office.example/{i}"), "conditions": [
            {"type": "ip-address", "value": "10.0.0.0/8"}]},
        {"target": format!("https://loopback.example/{i}"), "conditions": [
            {"type": "ip-address", "value": "127.0.0.0/8"},
            {"type": "any-value-query-param", "key": "lb"}]},
        {"target": format!("https://past.example/{i}"), "conditions": [
            {"type": "before-date", "value": "2001-01-01T00:00:00Z"}]},
    ])
}

/// One visitor: its `User-Agent`, `Accept-Language` and query.
struct Visitor {
    ua: &'static str,
    lang: &'static str,
    query: &'static str,
}

const VISITORS: &[Visitor] = &[
    Visitor {
        ua: ANDROID,
        lang: "de-DE,de;q=0.9,en;q=0.5",
        query: "",
    },
    Visitor {
        ua: ANDROID,
        lang: "en-US,de;q=0.8",
        query: "",
    },
    Visitor {
        ua: IPHONE,
        lang: "de",
        query: "",
    },
    Visitor {
        ua: WINDOWS,
        lang: "",
        query: "promo=spring+sale",
    },
    Visitor {
        ua: WINDOWS,
        lang: "",
        query: "promo=spring%20sale&x=1",
    },
    Visitor {
        ua: WINDOWS,
        lang: "",
        query: "promo=winter",
    },
    Visitor {
        ua: WINDOWS,
        lang: "",
        query: "beta",
    },
    Visitor {
        ua: WINDOWS,
        lang: "",
        query: "beta=1",
    },
    Visitor {
        ua: WINDOWS,
        lang: "",
        query: "lb=1",
    },
    Visitor {
        ua: "",
        lang: "",
        query: "",
    },
];

/// Where the model says visitor `v` goes on link `i` (its own target: `own`).
fn model(i: usize, v: &Visitor, own: &str) -> String {
    let q: Vec<(&str, Option<&str>)> = v
        .query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, val)) => (k, Some(val)),
            None => (p, None),
        })
        .collect();
    let param = |k: &str| q.iter().rev().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let decoded = |s: &str| s.replace('+', " ").replace("%20", " ");
    let android = v.ua.contains("Android");
    let ios = v.ua.contains("iPhone");
    // Shlink's language rule: a range of quality at least 0.9.
    let german = v.lang.split(',').any(|r| {
        let mut parts = r.split(';');
        let lang = parts.next().unwrap().trim();
        let q: f64 = parts
            .find_map(|p| p.trim().strip_prefix("q="))
            .map_or(1.0, |q| q.parse().unwrap());
        lang.split('-').next() == Some("de") && q >= 0.9
    });
    if android && german {
        return format!("https://android-de.example/{i}");
    }
    if ios {
        return format!("https://ios.example/{i}");
    }
    if param("promo").flatten().map(decoded).as_deref() == Some("spring sale") {
        return format!("https://promo.example/{i}");
    }
    if matches!(param("beta"), Some(None) | Some(Some(""))) {
        return format!("https://flagged.example/{i}");
    }
    if param("lb").is_some() {
        return format!("https://loopback.example/{i}");
    }
    own.to_owned()
}

/// `GET path` with `headers` on a fresh connection (as a new visitor would send it).
fn visit_as(s: &common::Server, path: &str, headers: &[(&str, &str)]) -> common::api::Resp {
    Client::new(s)
        .send("GET", path, false, headers, b"")
        .unwrap()
}

fn headers(v: &Visitor) -> Vec<(&'static str, &'static str)> {
    let mut h = Vec::new();
    if !v.ua.is_empty() {
        h.push(("User-Agent", v.ua));
    }
    if !v.lang.is_empty() {
        h.push(("Accept-Language", v.lang));
    }
    h
}

fn path(key: &str, v: &Visitor) -> String {
    match v.query {
        "" => format!("/{key}"),
        q => format!("/{key}?{q}"),
    }
}

fn server(dir: &std::path::Path, extra: &[&str]) -> common::Server {
    let mut flags = vec![
        "--cores",
        "3",
        "--test-oversubscribe",
        "--compact-entries",
        "40",
    ];
    flags.extend_from_slice(extra);
    flags.extend(NO_RATE_LIMIT);
    start(dir, &flags)
}

/// Visits every link as every visitor, one at a time (twice: foreign keys then come from
/// the LRU) and pipelined, checking each `Location` against the model.
fn check_visits(
    s: &common::Server,
    links: &[(String, String)],
    own_target: impl Fn(usize) -> String,
) {
    for round in 0..2 {
        for (i, (key, _)) in links.iter().enumerate() {
            for v in VISITORS {
                let r = visit_as(s, &path(key, v), &headers(v));
                assert_eq!(r.status, 302, "round {round} {} {:?}", path(key, v), v.ua);
                assert_eq!(
                    r.location(),
                    Some(model(i, v, &own_target(i)).as_str()),
                    "round {round}: {} as {:?} / {:?}",
                    path(key, v),
                    v.ua,
                    v.lang
                );
            }
        }
    }
    // Pipelined: every visitor of every link in one write, answers read in order with
    // httparse (strict).
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for (i, (key, _)) in links.iter().enumerate() {
        for v in VISITORS {
            wire.extend_from_slice(
                format!("GET {} HTTP/1.1\r\nHost: x\r\n", path(key, v)).as_bytes(),
            );
            for (n, val) in headers(v) {
                wire.extend_from_slice(format!("{n}: {val}\r\n").as_bytes());
            }
            wire.extend_from_slice(b"\r\n");
            want.push(model(i, v, &own_target(i)));
        }
    }
    for chunk in wire_chunks(&wire, &want) {
        let mut r = common::Reader::connect(s.addr);
        r.send(&chunk.0);
        for w in chunk.1 {
            let resp = r.read_response(false);
            assert_eq!(resp.status, 302);
            assert_eq!(resp.header("location"), Some(w.as_str()), "pipelined");
        }
    }
}

/// The pipelined requests in writes of at most 40 (the server's pipelining bound is 64).
fn wire_chunks(wire: &[u8], want: &[String]) -> Vec<(Vec<u8>, Vec<String>)> {
    let mut out = Vec::new();
    let mut reqs: Vec<&[u8]> = Vec::new();
    let mut at = 0;
    while let Some(end) = memchr::memmem::find(&wire[at..], b"\r\n\r\n") {
        reqs.push(&wire[at..at + end + 4]);
        at += end + 4;
    }
    assert_eq!(reqs.len(), want.len());
    for (rs, ws) in reqs.chunks(40).zip(want.chunks(40)) {
        out.push((rs.concat(), ws.to_vec()));
    }
    out
}

#[test]
fn rules_pick_targets_on_every_core_through_patch_restart_compaction_and_export() {
    let (_t, dir) = data_dir();
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, "blocked.example\n").unwrap();
    let list_flag = ["--blocklist", list.to_str().unwrap()];
    let s = server(&dir, &list_flag);
    let mut c = Client::new(&s);
    let mut links = Vec::new();
    for i in 0..9 {
        let r = c.create(&json!({
            "long_url": format!("https://own.example/{i}"),
            "custom_alias": format!("rule{i}"),
            "redirect_rules": rules(i),
        }));
        assert_eq!(r.status, 201, "{}", r.text());
        let body = r.json();
        assert_eq!(body["redirect_rules"][0]["conditions"][1]["value"], "de");
        assert_eq!(
            body["redirect_rules"][4]["conditions"][0]["value"],
            "10.0.0.0/8"
        );
        links.push((
            body["key"].as_str().unwrap().to_owned(),
            format!("https://own.example/{i}"),
        ));
    }
    check_visits(&s, &links, |i| format!("https://own.example/{i}"));
    let metrics = c.send("GET", "/metrics", false, &[], b"").unwrap().text();
    assert!(
        metrics.contains("ricochet_rule_redirects"),
        "the metric is exported"
    );

    // GET shows them as sent (types and values normalized).
    let got = c.get_link("rule0").json();
    assert_eq!(got["redirect_rules"], created_view(0));

    // PATCH replaces the rules; every core sees it before the 200 (LRU entries included).
    for (i, (key, _)) in links.iter().enumerate() {
        let r = c.patch(
            key,
            &json!({"redirect_rules": [
            {"target": format!("https://moved.example/{i}"), "conditions": [
                {"type": "device", "value": "mobile"}]}]}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for (i, (key, own)) in links.iter().enumerate() {
        for _ in 0..3 {
            let r = visit_as(&s, &format!("/{key}"), &[("User-Agent", IPHONE)]);
            assert_eq!(
                r.location(),
                Some(format!("https://moved.example/{i}").as_str())
            );
            let r = visit_as(&s, &format!("/{key}"), &[("User-Agent", WINDOWS)]);
            assert_eq!(r.location(), Some(own.as_str()));
        }
    }
    // Back to the first rules, then `null` clears them on one link.
    for (i, (key, _)) in links.iter().enumerate() {
        assert_eq!(
            c.patch(key, &json!({"redirect_rules": rules(i)})).status,
            200
        );
    }
    let r = c.patch("rule8", &json!({"redirect_rules": null}));
    assert_eq!(r.status, 200);
    assert!(r.json().get("redirect_rules").is_none(), "{}", r.text());
    assert_eq!(
        c.patch("rule8", &json!({"redirect_rules": rules(8)}))
            .status,
        200
    );

    // The blocklist judges rule targets: at create (422 naming the entry) ...
    let r = c.create(&json!({"long_url": "https://own.example/b", "redirect_rules": [
        {"target": "https://www.blocked.example/x", "conditions": [{"type": "device", "value": "ios"}]}]}));
    let p = r.assert_problem(422);
    assert!(
        p["detail"].as_str().unwrap().contains("blocked.example"),
        "{p}"
    );
    // ... and at redirect: a rule whose target becomes blocked answers 451 to its visitors.
    std::fs::write(&list, "blocked.example\nios.example\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r = visit_as(&s, "/rule3", &[("User-Agent", IPHONE)]);
        if r.status == 451 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reload did not reach the rule"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let r = visit_as(&s, "/rule3", &[("User-Agent", WINDOWS)]);
    assert_eq!(
        r.location(),
        Some("https://own.example/3"),
        "other visitors still redirect"
    );
    std::fs::write(&list, "blocked.example\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));

    // Bad rules: 422 naming the member.
    for (bad, needle) in [
        (json!("x"), "redirect_rules"),
        (json!([{"target": "ftp://x", "conditions": [{"type": "device", "value": "ios"}]}]), "redirect_rules[0].target"),
        (json!([{"target": "https://a.example", "conditions": []}]), "redirect_rules[0].conditions"),
        (json!([{"target": "https://a.example", "conditions": [{"type": "device", "value": "toaster"}]}]), "redirect_rules[0].conditions[0]"),
        (json!([{"target": "https://a.example", "conditions": [{"type": "ip-address", "value": "10.0.0.1/8"}]}]), "prefix"),
        (json!([{"target": "https://a.example", "conditions": [{"type": "language", "value": "x"}]}]), "language"),
        (json!([{"target": "https://a.example", "conditions": [{"type": "query-param", "value": "x"}]}]), "key"),
        (json!((0..17).map(|_| json!({"target": "https://a.example", "conditions": [{"type": "device", "value": "ios"}]})).collect::<Vec<_>>()), "at most 16"),
    ] {
        let r = c.create(&json!({"long_url": "https://own.example/", "redirect_rules": bad}));
        let p = r.assert_problem(422);
        assert!(p["detail"].as_str().unwrap().contains(needle), "{needle}: {p}");
    }

    // kill -9: the rules are in the log; then enough writes for compactions to fold them
    // into tables (read there from the mapping).
    s.kill9();
    let s = server(&dir, &list_flag);
    check_visits(&s, &links, |i| format!("https://own.example/{i}"));
    let mut c = Client::new(&s);
    for i in 0..120 {
        c.create_ok(&format!("https://filler.example/{i}"), None);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    s.kill9();
    let s = server(&dir, &list_flag);
    check_visits(&s, &links, |i| format!("https://own.example/{i}"));
    let mut c = Client::new(&s);
    assert_eq!(
        c.get_link("rule0").json()["redirect_rules"],
        created_view(0)
    );
    let _ = s.terminate();

    // NDJSON export and import round-trip them.
    let out = tmp.path().join("links.ndjson");
    let (ok, text) = cli(
        &dir,
        "export",
        &["--format", "ndjson", "--output", out.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let exported = std::fs::read_to_string(&out).unwrap();
    let line: Value = exported
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["key"] == "rule0")
        .unwrap();
    assert_eq!(line["redirect_rules"], created_view(0));
    let (_t2, dir2) = data_dir();
    let (ok, text) = cli(&dir2, "import", &[out.to_str().unwrap()]);
    assert!(ok, "{text}");
    let s = server(&dir2, &[]);
    check_visits(&s, &links, |i| format!("https://own.example/{i}"));
    // TSV has no column for them: refused, naming the way that keeps them.
    let (ok, text) = cli(
        &dir2,
        "export",
        &[
            "--format",
            "tsv",
            "--output",
            tmp.path().join("x.tsv").to_str().unwrap(),
        ],
    );
    assert!(!ok && text.contains("ndjson"), "{text}");
}

/// Link `i`'s rules as the API and exports show them: every condition has a `value` (empty
/// for the two presence tests).
fn created_view(i: usize) -> Value {
    let mut v = rules(i);
    for r in v.as_array_mut().unwrap() {
        for c in r["conditions"].as_array_mut().unwrap() {
            if c.get("value").is_none() {
                c["value"] = json!("");
            }
        }
    }
    v
}

/// Country and address conditions read the client's address as `--client-ip` says (here the
/// rightmost `X-Forwarded-For`) and its country from `--geoip`, with analytics off too (the
/// database is opened for the rules), on every core.
#[test]
fn country_and_address_conditions_follow_client_ip_and_geoip() {
    let (_t, dir) = data_dir();
    let db = dir.parent().unwrap().join("country.mmdb");
    common::geo::test_mmdb(&db, &[("81.2.69.0/24", "GB"), ("2a02:cf40::/29", "NO")]);
    let s = server(
        &dir,
        &[
            "--geoip",
            db.to_str().unwrap(),
            "--client-ip",
            "x-forwarded-for",
            "--analytics",
            "off",
        ],
    );
    let mut c = Client::new(&s);
    let mut keys = Vec::new();
    for i in 0..6 {
        let r = c.create(&json!({
            "long_url": format!("https://own.example/{i}"),
            "redirect_rules": [
                {"target": "https://uk.example/", "conditions": [
                    {"type": "geolocation-country-code", "value": "gb"}]},
                {"target": "https://no.example/", "conditions": [
                    {"type": "geolocation-country-code", "value": "NO"}]},
                {"target": "https://lan.example/", "conditions": [
                    {"type": "ip-address", "value": "192.168.*.*"}]},
            ],
        }));
        assert_eq!(r.status, 201, "{}", r.text());
        keys.push(r.json()["key"].as_str().unwrap().to_owned());
    }
    for _ in 0..2 {
        for (i, k) in keys.iter().enumerate() {
            for (xff, want) in [
                ("10.0.0.1, 81.2.69.142", "https://uk.example/".to_owned()),
                ("2a02:cf40::7", "https://no.example/".to_owned()),
                ("192.168.4.4", "https://lan.example/".to_owned()),
                (
                    "81.2.69.142, 198.51.100.1",
                    format!("https://own.example/{i}"),
                ),
            ] {
                let r = visit_as(&s, &format!("/{k}"), &[("X-Forwarded-For", xff)]);
                assert_eq!(r.location(), Some(want.as_str()), "{k} from {xff}");
            }
        }
    }
}

/// A click records which rule sent it: the link's stats count clicks per rule (its
/// priority, or `default` when none matched); a HEAD is no click; a link without rules has
/// none. On 3 cores, each visit on a fresh connection (so on any core).
#[test]
fn clicks_record_the_rule_that_sent_them() {
    let (_t, dir) = data_dir();
    let s = server(&dir, &[]);
    let mut c = Client::new(&s);
    let r = c.create(&json!({
        "long_url": "https://own.example/",
        "custom_alias": "ruled",
        "redirect_rules": [
            {"target": "https://android.example/", "conditions": [{"type": "device", "value": "android"}]},
            {"target": "https://mail.example/", "conditions": [
                {"type": "query-param", "key": "src", "value": "mail"}]}]
    }));
    assert_eq!(r.status, 201, "{}", r.text());
    c.create_ok("https://plain.example/", Some("plain"));
    let android = [(
        "User-Agent",
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile Safari",
    )];
    let desktop = [(
        "User-Agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36",
    )];
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let visits: [(&str, Headers<'_>, &str, usize); 4] = [
        ("/ruled", &android, "https://android.example/", 3),
        ("/ruled?src=mail", &desktop, "https://mail.example/", 2),
        ("/ruled", &desktop, "https://own.example/", 4),
        ("/plain", &desktop, "https://plain.example/", 5),
    ];
    for (path, headers, want, n) in visits {
        for _ in 0..n {
            let r = visit_as(&s, path, headers);
            assert_eq!((r.status, r.location()), (302, Some(want)), "{path}");
        }
    }
    let head = Client::new(&s)
        .send("HEAD", "/ruled", false, &android, b"")
        .unwrap();
    assert_eq!(head.location(), Some("https://android.example/"));

    let stats = |c: &mut Client, key: &str, clicks: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let r = c.get_link(&format!("{key}/stats?bots=include"));
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            if v["summary"]["clicks"] == clicks {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "{v}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let v = stats(&mut c, "ruled", 9);
    assert_eq!(
        v["rules"],
        json!([{"value": "default", "clicks": 4}, {"value": "1", "clicks": 3},
               {"value": "2", "clicks": 2}]),
        "{v}"
    );
    let v = stats(&mut c, "plain", 5);
    assert_eq!(v["rules"], json!([]), "{v}");
}
