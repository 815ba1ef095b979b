//! What a link does when visited (issue 27, per link, single node): `valid_since` (not yet
//! valid answers as an expired link does), `forward_query` (overrides the server's
//! `--forward-query` either way) and an admin's `disabled` (410 for abuse and owner, 451 for
//! legal, with who and when kept; only admin keys may set or clear it; the API and stats keep
//! working). Set through the native API and Shlink's, on 3 cores (more than this machine's
//! CPUs, so links are answered by owners, forwards and the LRU), kept across `kill -9`, a
//! compaction, and an NDJSON export and import. (Fleet mode: `tests/fleet_links.rs`,
//! `link_behaviours_are_the_fleets_on_every_node`.)
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{self, data_dir, make_key, start, Client, NO_RATE_LIMIT};
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn rfc3339(s: u64) -> String {
    shards::timefmt::format_rfc3339_utc(s)
}

/// `GET /{path}` with no credentials: (status, Location, body).
fn visit(s: &common::Server, path: &str) -> (u16, Option<String>, String) {
    let mut c = Client::new(s);
    let r = c.send("GET", path, false, &[], b"").unwrap();
    (r.status, r.location().map(str::to_owned), r.text())
}

fn flags(extra: &[&'static str]) -> Vec<&'static str> {
    let mut f = vec![
        "--cores",
        "3",
        "--test-oversubscribe",
        "--compact-entries",
        "64",
    ];
    f.extend_from_slice(extra);
    f.extend(NO_RATE_LIMIT);
    f
}

/// Every link's API view, by key.
fn views(s: &common::Server, keys: &[String]) -> Vec<Value> {
    let mut c = Client::new(s);
    keys.iter()
        .map(|k| {
            let r = c.get_link(k);
            assert_eq!(r.status, 200, "{k}: {}", r.text());
            let mut v = r.json();
            v.as_object_mut().unwrap().remove("short_url");
            v
        })
        .collect()
}

#[test]
fn behaviours_shape_visits_on_every_core_and_survive_restarts_and_exports() {
    let (_t, dir) = data_dir();
    let author_only = make_key(&dir, "writer", &["--author-only"]);
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let opens = now_s() + 3;
    // Many links of each kind, so every core owns some and others forward to it.
    let mut later = Vec::new();
    let mut fwd = Vec::new();
    let mut plain = Vec::new();
    for i in 0..6 {
        let r = c.create(&json!({
            "long_url": format!("https://later.example/{i}"),
            "valid_since": rfc3339(opens),
        }));
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["valid_since"], rfc3339(opens));
        later.push(r.key());
        let r = c.create(&json!({
            "long_url": format!("https://fwd.example/{i}?a=1"),
            "forward_query": true,
        }));
        assert_eq!(r.status, 201, "{}", r.text());
        fwd.push(r.key());
        plain.push(c.create_ok(&format!("https://plain.example/{i}?a=1"), None));
    }
    // Not valid yet: answered as an expired link (404), on every core, twice (the LRU).
    for _ in 0..2 {
        for k in &later {
            assert_eq!(visit(&s, &format!("/{k}")).0, 404, "/{k} before it opens");
        }
    }
    // The link's own forward_query against the server's default (off).
    for (i, k) in fwd.iter().enumerate() {
        let (st, loc, _) = visit(&s, &format!("/{k}?a=2&b=3"));
        assert_eq!(
            (st, loc.as_deref()),
            (
                302,
                Some(format!("https://fwd.example/{i}?a=2&b=3").as_str())
            )
        );
    }
    for (i, k) in plain.iter().enumerate() {
        let (st, loc, _) = visit(&s, &format!("/{k}?a=2"));
        assert_eq!(
            (st, loc.as_deref()),
            (302, Some(format!("https://plain.example/{i}?a=1").as_str()))
        );
    }

    // Disabling is an admin's: an author-only key is refused, even on its own link.
    let mut w = Client::new(&s);
    w.token = author_only;
    let own = w.create(&json!({"long_url": "https://own.example/"})).key();
    let r = w.patch(&own, &json!({"disabled": {"reason": "abuse"}}));
    assert_eq!(r.status, 403, "{}", r.text());
    let r = c.patch(&own, &json!({"disabled": {"reason": "spam"}}));
    let p = r.assert_problem(422);
    assert_eq!(p["field"], "disabled", "{p}");
    // An admin disables: abuse and owner are 410, legal 451; the API shows who and when.
    for (i, k) in plain.iter().enumerate() {
        let reason = ["abuse", "legal", "owner"][i % 3];
        let r = c.patch(k, &json!({"disabled": {"reason": reason}}));
        assert_eq!(r.status, 200, "{}", r.text());
        let d = &r.json()["disabled"];
        assert_eq!(d["reason"], reason, "{d}");
        assert_eq!(
            d["by"], "env",
            "the environment's admin key, by its id: {d}"
        );
        assert!(d["at"].as_str().unwrap().starts_with("20"), "{d}");
    }
    let disabled_status = |i: usize| if i % 3 == 1 { 451 } else { 410 };
    for _ in 0..2 {
        for (i, k) in plain.iter().enumerate() {
            let (st, loc, body) = visit(&s, &format!("/{k}"));
            assert_eq!((st, loc), (disabled_status(i), None), "/{k}");
            assert!(body.contains("<h1>Link "), "{body}");
            let head = Client::new(&s)
                .send("HEAD", &format!("/{k}"), false, &[], b"")
                .unwrap();
            assert_eq!((head.status, head.body.len()), (disabled_status(i), 0));
        }
    }
    // Stats still answer for a disabled link.
    let r = c
        .send(
            "GET",
            &format!("/api/v1/urls/{}/stats", plain[0]),
            true,
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // Shlink's API: validSince and forwardQuery in, and back in its short URL object.
    let shlink = |c: &mut Client, method: &str, path: &str, body: Value| {
        let headers = [
            ("X-Api-Key", api::API_KEY),
            ("Content-Type", "application/json"),
        ];
        c.send(method, path, false, &headers, body.to_string().as_bytes())
            .unwrap()
    };
    let r = shlink(
        &mut c,
        "POST",
        "/rest/v3/short-urls",
        json!({"longUrl": "https://shlink.example/x", "forwardQuery": true,
               "validSince": rfc3339(opens)}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["forwardQuery"], true, "{v}");
    assert_eq!(v["meta"]["validSince"], rfc3339(opens), "{v}");
    let code = v["shortCode"].as_str().unwrap().to_owned();
    let r = shlink(
        &mut c,
        "PATCH",
        &format!("/rest/v3/short-urls/{code}"),
        json!({"forwardQuery": false, "validSince": null}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["forwardQuery"], false);
    assert_eq!(r.json()["meta"]["validSince"], Value::Null);
    assert_eq!(
        visit(&s, &format!("/{code}?q=1")).1.as_deref(),
        Some("https://shlink.example/x")
    );

    // Enough writes for compactions (--compact-entries 64) to fold them into tables.
    for i in 0..400 {
        c.create_ok(&format!("https://filler.example/{i}"), None);
    }
    let mut keys: Vec<String> = later.iter().chain(&fwd).chain(&plain).cloned().collect();
    keys.push(code.clone());
    let before = views(&s, &keys);

    // kill -9 and restart: every behaviour as it was.
    s.kill9();
    let s = start(&dir, &flags(&[]));
    assert_eq!(views(&s, &keys), before);
    for (i, k) in plain.iter().enumerate() {
        assert_eq!(visit(&s, &format!("/{k}")).0, disabled_status(i));
    }
    // Opened: once valid_since passes, the links redirect.
    let deadline = Instant::now() + Duration::from_secs(10);
    while now_s() < opens {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(200));
    }
    for (i, k) in later.iter().enumerate() {
        assert_eq!(
            visit(&s, &format!("/{k}")).1,
            Some(format!("https://later.example/{i}"))
        );
    }
    // Enabled again by an admin (null clears), and the server's default forward can be
    // refused per link.
    let r = c_for(&s).patch(&plain[0], &json!({"disabled": null}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json().get("disabled").is_none());
    assert_eq!(visit(&s, &format!("/{}", plain[0])).0, 302);
    let before = views(&s, &keys);

    // NDJSON export and import into a fresh dir: the same links, behaviours and all; TSV
    // refuses to drop them.
    let out = dir.join("..").join("export.ndjson");
    let (ok, text) = api::cli(
        &dir,
        "export",
        &["--format", "ndjson", "--output", out.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let (ok, text) = api::cli(&dir, "export", &["--format", "tsv"]);
    assert!(!ok && text.contains("--format ndjson"), "{text}");
    drop(s);
    let (_t2, dir2) = data_dir();
    let (ok, text) = api::cli(&dir2, "import", &[out.to_str().unwrap()]);
    assert!(ok, "{text}");
    let s2 = start(&dir2, &flags(&["--forward-query"]));
    assert_eq!(views(&s2, &keys), before);
    // With --forward-query on, a link that says false does not forward; one that says
    // nothing does.
    assert_eq!(
        visit(&s2, &format!("/{code}?q=1")).1.as_deref(),
        Some("https://shlink.example/x")
    );
    assert_eq!(
        visit(&s2, &format!("/{}?q=1", plain[0])).1.as_deref(),
        Some("https://plain.example/0?a=1&q=1")
    );
}

fn c_for(s: &common::Server) -> Client {
    Client::new(s)
}

/// `max_visits`: 1,000 concurrent GETs on 40 connections, spread over 3 cores, get exactly
/// `max_visits` redirects; HEADs count nothing; the count survives `kill -9`, a raised limit
/// gives exactly the difference, and Shlink's `maxVisits` is the same field.
#[test]
fn a_visit_limit_is_exact_across_cores_connections_and_crashes() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let mut limited = Vec::new();
    for i in 0..3 {
        let r = c.create(&json!({"long_url": format!("https://limited.example/{i}"),
                                 "max_visits": 100}));
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(
            (r.json()["max_visits"].as_u64(), r.json()["visits"].as_u64()),
            (Some(100), Some(0))
        );
        limited.push(r.key());
    }
    // HEADs are no visits.
    for k in &limited {
        for _ in 0..5 {
            let head = Client::new(&s)
                .send("HEAD", &format!("/{k}"), false, &[], b"")
                .unwrap();
            assert_eq!(head.status, 302);
        }
    }
    let addr = s.addr;
    let threads: Vec<_> = (0..40)
        .map(|t| {
            let keys = limited.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).unwrap();
                let mut got = vec![(0u32, 0u32); keys.len()];
                for n in 0..75 {
                    let i = (t + n) % keys.len();
                    let r = c
                        .send("GET", &format!("/{}", keys[i]), false, &[], b"")
                        .unwrap();
                    match r.status {
                        302 => got[i].0 += 1,
                        404 => got[i].1 += 1,
                        other => panic!("/{}: {other}", keys[i]),
                    }
                }
                got
            })
        })
        .collect();
    let mut total = vec![(0u32, 0u32); limited.len()];
    for t in threads {
        for (i, (ok, gone)) in t.join().unwrap().into_iter().enumerate() {
            total[i].0 += ok;
            total[i].1 += gone;
        }
    }
    for (i, k) in limited.iter().enumerate() {
        assert_eq!(
            total[i],
            (100, 900),
            "/{k}: (redirects, 404s) of 1,000 GETs"
        );
        assert_eq!(c.get_link(k).json()["visits"], 100, "/{k}");
    }

    // A second link partly used, then kill -9: the counts stand after the restart.
    let part = c
        .create(&json!({"long_url": "https://part.example/", "max_visits": 5}))
        .key();
    for _ in 0..3 {
        assert_eq!(visit(&s, &format!("/{part}")).0, 302);
    }
    s.kill9();
    let s = start(&dir, &flags(&[]));
    let mut c = Client::new(&s);
    let statuses: Vec<u16> = (0..4).map(|_| visit(&s, &format!("/{part}")).0).collect();
    assert_eq!(statuses, [302, 302, 404, 404], "two visits were left");
    assert_eq!(visit(&s, &format!("/{}", limited[0])).0, 404);
    // A raised limit gives exactly the difference; null removes it.
    let r = c.patch(&limited[0], &json!({"max_visits": 103}));
    assert_eq!(r.status, 200, "{}", r.text());
    let statuses: Vec<u16> = (0..5)
        .map(|_| visit(&s, &format!("/{}", limited[0])).0)
        .collect();
    assert_eq!(statuses, [302, 302, 302, 404, 404]);
    let r = c.patch(&limited[0], &json!({"max_visits": null}));
    assert!(r.json().get("max_visits").is_none(), "{}", r.text());
    assert_eq!(visit(&s, &format!("/{}", limited[0])).0, 302);
    // Shlink's maxVisits.
    let headers = [
        ("X-Api-Key", api::API_KEY),
        ("Content-Type", "application/json"),
    ];
    let body = json!({"longUrl": "https://shlink.example/m", "maxVisits": 1});
    let r = c
        .send(
            "POST",
            "/rest/v3/short-urls",
            false,
            &headers,
            body.to_string().as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["meta"]["maxVisits"], 1);
    let code = r.json()["shortCode"].as_str().unwrap().to_owned();
    assert_eq!(visit(&s, &format!("/{code}")).0, 302);
    assert_eq!(visit(&s, &format!("/{code}")).0, 404);
}
