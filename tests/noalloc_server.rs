//! The redirect path of a real `ricochet serve --cores 2` makes no heap allocation once warm:
//! local hits, foreign keys (forwarded, then LRU hits), 404s, HEAD and pipelined batches,
//! counted by the binary's counting allocator and read back from `/metrics`. One link in ten
//! has a non-ASCII target, sent percent-encoded (`http::location::put_location`). Click
//! analytics is on in `full` mode (the default) throughout; the second test sends a
//! `User-Agent`, `Referer` and `X-Forwarded-For` on every request, with
//! `--client-ip x-forwarded-for`, so every click is classified and hashed. Another runs the
//! links of a declared domain, its `Host` looked up among several on every request, with its
//! invalid-short-URL redirect for the misses.

mod common;

use common::*;

fn core_allocs(r: &mut Reader) -> Vec<u64> {
    r.send(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    let resp = r.read_response(false);
    assert_eq!(resp.status, 200);
    let text = String::from_utf8(resp.body).unwrap();
    let v: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("ricochet_core_heap_allocations_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(v.len(), 2, "{text}");
    v
}

/// The `Location` a stored target is sent as: non-ASCII bytes percent-encoded.
fn sent_as(url: &str) -> String {
    url.bytes()
        .map(|b| {
            if b.is_ascii() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The path and query a visit asks for `key`: with `reshape`, an extra path and a query
/// (served with `--extra-path append --forward-query`).
fn path_of(key: &str, reshape: bool) -> String {
    match reshape {
        true => format!("/{key}/more/x?utm=1&q=2"),
        false => format!("/{key}"),
    }
}

/// The `Location` a visit of [`path_of`] gets for `url`: the extra path at the end of its
/// path, its `q` replaced by the visitor's, the visitor's parameters last.
fn location_of(url: &str, reshape: bool) -> String {
    if !reshape {
        return sent_as(url);
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut out = format!("{}/more/x?", base.strip_suffix('/').unwrap_or(base));
    for p in query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("q=") && *p != "q")
    {
        out.push_str(p);
        out.push('&');
    }
    out.push_str("utm=1&q=2");
    sent_as(&out)
}

/// A GET of `key`, with click headers when `fields` (varied by `n`: 40 user agents, 300
/// referrer hosts, a new client address for every request).
fn get_with(key: &str, fields: bool, n: usize, host: &str) -> Vec<u8> {
    get_shaped(&path_of(key, false), fields, n, host)
}

/// A GET of `path`, as [`get_with`].
/// Every fourth request names its target in absolute form (`GET http://HOST/key`), as a
/// proxy sends it.
fn get_shaped(path: &str, fields: bool, n: usize, host: &str) -> Vec<u8> {
    let key = path.trim_start_matches('/');
    let authority = if n % 4 == 0 {
        format!("http://{host}")
    } else {
        String::new()
    };
    if !fields {
        return format!("GET {authority}/{key} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    }
    format!(
        "GET {authority}/{key} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/{}.0\r\nReferer: https://www.site{}.example/page/{n}?q=secret\r\nX-Forwarded-For: 198.51.100.7, 10.{}.{}.{}\r\n\r\n",
        80 + n % 40,
        n % 300,
        (n >> 16) & 255,
        (n >> 8) & 255,
        n & 255
    )
    .into_bytes()
}

/// Where the links live: the `Host` the requests name, and what a key with no link gets.
#[derive(Clone, Copy)]
struct Domain {
    host: &'static str,
    miss: u16,
}

const DEFAULT: Domain = Domain {
    host: "t",
    miss: 404,
};

fn round(
    conns: &mut [Reader],
    links: &[Link],
    (pipelined, fields): (bool, bool),
    d: Domain,
    reshape: bool,
) {
    let mut n = 0;
    for (i, r) in conns.iter_mut().enumerate() {
        let chunk: Vec<&Link> = links.iter().skip(i).step_by(7).take(64).collect();
        if pipelined {
            for batch in chunk.chunks(16) {
                let mut bytes = Vec::new();
                for l in batch {
                    n += 1;
                    bytes.extend_from_slice(&get_shaped(
                        &path_of(&l.key, reshape),
                        fields,
                        n,
                        d.host,
                    ));
                }
                bytes.extend_from_slice(&get_with("no-such-key-here", false, n, d.host));
                r.send(&bytes);
                for l in batch {
                    let resp = r.read_response(false);
                    assert_eq!(
                        resp.header("location"),
                        Some(location_of(&l.url, reshape).as_str())
                    );
                }
                assert_eq!(r.read_response(false).status, d.miss);
            }
        } else {
            for l in chunk {
                let path = path_of(&l.key, reshape);
                r.send(format!("HEAD {path} HTTP/1.1\r\nHost: {}\r\n\r\n", d.host).as_bytes());
                assert_eq!(r.read_response(true).status, l.status);
                n += 1;
                r.send(&get_shaped(&path, fields, n, d.host));
                assert_eq!(
                    r.read_response(false).header("location"),
                    Some(location_of(&l.url, reshape).as_str())
                );
            }
        }
    }
}

#[test]
fn redirect_path_allocates_nothing_once_warm() {
    run(false, &[], DEFAULT);
}

/// Links of a declared domain, chosen by `Host` among several, with its not-found redirect.
#[test]
fn a_domains_redirects_allocate_nothing() {
    run(
        true,
        &[],
        Domain {
            host: "Go.Brand.com:8080",
            miss: 302,
        },
    );
}

#[test]
fn counting_classified_clicks_allocates_nothing_on_the_cores() {
    run(
        true,
        &["--analytics", "full", "--client-ip", "x-forwarded-for"],
        DEFAULT,
    );
}

/// With the cores aggregating their clicks between requests, the redirect path still makes
/// no allocation (the aggregation's own are counted apart).
#[test]
fn the_redirect_path_allocates_nothing_when_the_cores_aggregate_clicks() {
    run(
        true,
        &[
            "--analytics",
            "full",
            "--client-ip",
            "x-forwarded-for",
            "--clicks-on-cores",
        ],
        DEFAULT,
    );
}

/// With an abuse blocklist loaded (none of the links' targets on it): each redirect's target
/// is checked, plain ones in place and the tenth with a Unicode host through the per-core
/// verdict memo, and nothing is allocated once warm.
#[test]
fn checking_targets_against_a_blocklist_allocates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("blocklist.txt");
    let mut text = String::from("# no target of the dataset\n0.0.0.0 evil.example\n");
    for i in 0..1000 {
        text.push_str(&format!("phish{i}.example\nexample{i}.org/login\n"));
    }
    std::fs::write(&list, text).unwrap();
    run(true, &["--blocklist", list.to_str().unwrap()], DEFAULT);
}

/// Visits with an extra path and a query, appended and forwarded into every target
/// (`--extra-path append --forward-query`), single and pipelined (the forwarded ones keep
/// their reshaping in their batch until the owner answers).
#[test]
fn reshaped_redirects_allocate_nothing() {
    run_shaped(
        true,
        &["--extra-path", "append", "--forward-query"],
        DEFAULT,
        true,
    );
}

/// The same visits, forwarded by each link's own `forward_query` (set by a PATCH of every
/// link; the server's `--forward-query` is off): the per-link choice made on the redirect
/// path, for local hits, LRU hits and forwards.
#[test]
fn per_link_query_forwarding_allocates_nothing() {
    run_with(
        true,
        &["--extra-path", "append"],
        DEFAULT,
        (true, true),
        None,
    );
}

/// Every link with a visit limit it never reaches: each GET is counted by its owner in a log
/// record before the redirect leaves (forwarded from the other core, or deferred to this
/// core's own owner role), and nothing is allocated for it.
#[test]
fn visits_of_limited_links_allocate_nothing() {
    run_with(true, &[], DEFAULT, (false, false), Some(1_000_000_000));
}

/// Every link with 5 redirect rules of 3 conditions (device, language, query, address,
/// date): 4 that no visit matches, and one that GETs with click fields match (a Linux user
/// agent from the loopback address) whose target is the link's own, so the `Location` stays
/// checkable. Half the links get them by import (their rules read from the table's mapping),
/// half by PATCH (shared from the memtable). The rules are evaluated where the request was
/// read: local hits, LRU hits and forwards, whose fields wait in the batch.
#[test]
fn evaluating_redirect_rules_allocates_nothing() {
    run_with(true, &[], DEFAULT, (false, false), Some(RULES));
}

/// `max_visits` of this value stands for "give every link redirect rules" in [`run_with`].
const RULES: u64 = u64::MAX;

/// Imports `links` as NDJSON, every other one with [`rules_of`] (so they stay in the tables).
fn import_with_rules(dir: &std::path::Path, links: &[Link]) {
    // Every other link imported with its rules: they stay in the tables.
    let ndjson = dir.with_extension("ndjson");
    let lines: Vec<String> = links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut v = serde_json::json!({"key": l.key, "long_url": l.url, "status": l.status});
            if i % 2 == 0 {
                v["redirect_rules"] = rules_of(l)["redirect_rules"].clone();
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&ndjson, lines.join("\n") + "\n").unwrap();
    let out = std::process::Command::new(server_bin())
        .args(["import", "--data-dir"])
        .arg(dir)
        .arg(&ndjson)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn rules_of(l: &Link) -> serde_json::Value {
    let miss = |i: usize| {
        serde_json::json!({"target": format!("https://rule{i}.example/"), "conditions": [
            {"type": "device", "value": "android"},
            {"type": "language", "value": "de"},
            {"type": "query-param", "key": "k", "value": format!("{i}")}]})
    };
    serde_json::json!({"redirect_rules": [miss(0), miss(1), miss(2), miss(3),
        {"target": l.url, "conditions": [
            {"type": "ip-address", "value": "127.0.0.0/8"},
            {"type": "after-date", "value": "2001-01-01T00:00:00Z"},
            {"type": "device", "value": "linux"}]}]})
}

fn run(fields: bool, flags: &[&str], d: Domain) {
    run_shaped(fields, flags, d, false);
}

fn run_shaped(fields: bool, flags: &[&str], d: Domain, reshape: bool) {
    run_with(fields, flags, d, (reshape, false), None);
}

/// PATCHes every link to forward the query itself (`per_link`), or to a visit limit.
fn give_behaviour(server: &Server, links: &[Link], per_link: bool, max_visits: Option<u64>) {
    let body = |l: &Link| match (per_link, max_visits) {
        (true, _) => Some(serde_json::json!({"forward_query": true})),
        (false, Some(RULES)) => Some(rules_of(l)),
        (false, Some(m)) => Some(serde_json::json!({"max_visits": m})),
        (false, None) => None,
    };
    let mut c = common::api::Client::new(server);
    for (i, l) in links.iter().enumerate() {
        if max_visits == Some(RULES) && i % 2 == 0 {
            continue; // imported with them
        }
        let Some(body) = body(l) else {
            return;
        };
        let r = c.patch(&l.key, &body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// `reshape`: visits with an extra path and query; `per_link`: every link is PATCHed to
/// forward the query itself; `max_visits`: every link is PATCHed to this visit limit.
fn run_with(
    fields: bool,
    flags: &[&str],
    d: Domain,
    (reshape, per_link): (bool, bool),
    max_visits: Option<u64>,
) {
    let (tmp, mut links) = (tempfile::tempdir().unwrap(), dataset(3000, 11));
    let dir = tmp.path().join("data");
    for (i, l) in links.iter_mut().enumerate().step_by(10) {
        l.url = format!("https://bücher.example/straße/{i}?q=ü");
    }
    if max_visits == Some(RULES) {
        import_with_rules(&dir, &links);
    } else if d.host == DEFAULT.host {
        import(&dir, &links);
    } else {
        // Domain number 1's links, imported under their stored keys (`1.key`); other
        // domains declared around it, so the `Host` is looked up among several.
        let stored: Vec<Link> = links
            .iter()
            .map(|l| Link {
                key: format!("1.{}", l.key),
                ..l.clone()
            })
            .collect();
        import(&dir, &stored);
        for args in [
            &[
                "add",
                "go.brand.com",
                "--invalid-short-url",
                "https://brand.example/",
            ][..],
            &["add", "sho.rt", "--default"],
            &["add", "other.example"],
        ] {
            let out = std::process::Command::new(server_bin())
                .args(["domains", "--data-dir"])
                .arg(&dir)
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
    }
    let server = Server::start_with_env(&dir, flags, &[("RICOCHET_API_KEY", common::api::API_KEY)]);
    give_behaviour(&server, &links, per_link, max_visits);
    let mut conns: Vec<Reader> = (0..16).map(|_| Reader::new(server.connect())).collect();
    // One long-lived connection reads /metrics, so reading costs the same every time.
    let mut metrics = Reader::new(server.connect());
    core_allocs(&mut metrics);
    // Warm up: pools, per-connection pending lists, LRU entries for foreign keys (and, for
    // limited links, the owners' log batches and waiting queues at their peak).
    let limited = max_visits.is_some_and(|m| m != RULES);
    let warm_rounds = if limited { 4 } else { 2 };
    for _ in 0..warm_rounds {
        round(&mut conns, &links, (false, fields), d, reshape);
        round(&mut conns, &links, (true, fields), d, reshape);
    }
    let a1: u64 = core_allocs(&mut metrics).iter().sum();
    let a2: u64 = core_allocs(&mut metrics).iter().sum();
    let per_metrics_request = a2 - a1;
    for _ in 0..3 {
        round(&mut conns, &links, (false, fields), d, reshape);
        round(&mut conns, &links, (true, fields), d, reshape);
    }
    let a3: u64 = core_allocs(&mut metrics).iter().sum();
    let under_load = a3 - a2;
    assert_eq!(
        under_load, per_metrics_request,
        "{} heap allocations on the core threads during {} warm redirect requests (beyond the /metrics request itself)",
        under_load - per_metrics_request,
        3 * 16 * (64 * 2 + 64 + 4)
    );
    assert!(a1 > 0, "the counting allocator is installed");
    if limited {
        // The visits went through the owners' counts.
        let v = common::api::Client::new(&server)
            .get_link(&links[0].key)
            .json();
        assert!(v["visits"].as_u64().unwrap() >= 10, "{v}");
    }
}
