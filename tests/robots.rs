//! `robots.txt` per domain (issue 27): each domain allows exactly its links marked
//! `crawlable` (set by create, PATCH or Shlink's API) and disallows the rest, on 3 cores
//! (more than this machine's CPUs, so the walk crosses every owner); a core keeps a text
//! for `ROBOTS_TTL_S`; the mark survives `kill -9`, NDJSON export and import; the list stops
//! at `MAX_ROBOTS_ALLOWS`.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{cli, data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Mirrors `api_front::robots::MAX_ROBOTS_ALLOWS` (a test binary cannot name the server's
/// constants); the last part of the test fails if they differ.
const MAX_ROBOTS_ALLOWS: usize = 10_000;

fn server(dir: &std::path::Path) -> common::Server {
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    start(dir, &flags)
}

/// The keys `host`'s `robots.txt` allows, after checking its shape: a header, one
/// `Allow: /{key}$` per link, `Disallow: /` last; HEAD gets the same status and no body.
fn allowed(c: &mut Client, host: &str) -> BTreeSet<String> {
    c.host = host.into();
    let r = c.send("GET", "/robots.txt", false, &[], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let text = r.text();
    let head = c.send("HEAD", "/robots.txt", false, &[], b"").unwrap();
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert!(text.ends_with("Disallow: /\n"), "{text}");
    let mut keys = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Allow: /") {
            let key = rest.strip_suffix('$').expect("each key is anchored");
            assert!(keys.insert(key.to_owned()), "{key} listed twice");
        } else {
            assert!(
                line.is_empty()
                    || line.starts_with('#')
                    || line == "User-agent: *"
                    || line == "Disallow: /",
                "unexpected line {line:?}"
            );
        }
    }
    if keys.is_empty() {
        assert_eq!(text, "User-agent: *\nDisallow: /\n");
    }
    keys
}

#[test]
fn each_domain_allows_exactly_its_crawlable_links() {
    let (tmp, dir) = data_dir();
    for args in [
        &["add", "sho.rt", "--default"][..],
        &["add", "go.brand.com"][..],
        &["add", "empty.example"][..],
    ] {
        let (ok, text) = cli(&dir, "domains", args);
        assert!(ok, "{text}");
    }
    let s = server(&dir);
    let mut c = Client::new(&s);

    let mut want: [BTreeSet<String>; 2] = Default::default();
    for i in 0..60 {
        let (domain, d) = if i % 2 == 0 {
            ("sho.rt", 0)
        } else {
            ("go.brand.com", 1)
        };
        let key = format!("k{i}");
        let crawlable = i % 3 == 0;
        let mut body = json!({"long_url": format!("https://t.example/{i}"),
                              "custom_alias": key, "domain": domain});
        if crawlable || i % 5 == 0 {
            body["crawlable"] = json!(crawlable);
        }
        c.host = "t".into();
        let r = c.create(&body);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["crawlable"].as_bool().unwrap_or(false), crawlable);
        if crawlable {
            want[d].insert(key);
        }
    }
    // Shlink's API sets and shows the flag.
    let r = c
        .send(
            "POST",
            "/rest/v3/short-urls",
            false,
            &[("X-Api-Key", common::api::API_KEY)],
            br#"{"longUrl": "https://t.example/shlink", "customSlug": "viaShlink", "crawlable": true}"#,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["crawlable"], true);
    want[0].insert("viaShlink".into());

    assert_eq!(allowed(&mut c, "sho.rt"), want[0]);
    assert_eq!(allowed(&mut c, "go.brand.com:8080"), want[1]);
    // An undeclared host is the default domain's (`--unknown-host default`).
    assert_eq!(allowed(&mut c, "other.example"), want[0]);
    assert!(allowed(&mut c, "empty.example").is_empty());
    // A crawlable link still redirects as before.
    c.host = "sho.rt".into();
    assert_eq!(c.redirect("k6").status, 302);

    // A PATCH marks and unmarks; the same key on the other domain is another link. This
    // connection's core keeps the texts it served for `ROBOTS_TTL_S` (60 s): unchanged yet.
    let before = want.clone();
    c.host = "t".into();
    let r = c.patch("k1?domain=go.brand.com", &json!({"crawlable": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["crawlable"], true);
    want[1].insert("k1".into());
    let r = c.patch("k0", &json!({"crawlable": null}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json().get("crawlable").is_none(), "{}", r.text());
    want[0].remove("k0");
    assert_eq!(allowed(&mut c, "sho.rt"), before[0]);
    assert_eq!(allowed(&mut c, "go.brand.com"), before[1]);
    assert_ne!(before, want);

    // kill -9: the marks are in the log (each write acknowledged only once durable), and a
    // new server walks afresh.
    s.kill9();
    let s = server(&dir);
    let mut c = Client::new(&s);
    assert_eq!(allowed(&mut c, "sho.rt"), want[0]);
    assert_eq!(allowed(&mut c, "go.brand.com"), want[1]);
    let _ = s.terminate();

    // NDJSON export and import keep them.
    let out = tmp.path().join("links.ndjson");
    let (ok, text) = cli(
        &dir,
        "export",
        &["--format", "ndjson", "--output", out.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let marked = lines.iter().filter(|l| l["crawlable"] == true).count();
    assert_eq!(marked, want[0].len() + want[1].len());
    let (_t2, dir2) = data_dir();
    for args in [
        &["add", "sho.rt", "--default"][..],
        &["add", "go.brand.com"][..],
    ] {
        assert!(cli(&dir2, "domains", args).0);
    }
    let (ok, text) = cli(&dir2, "import", &[out.to_str().unwrap()]);
    assert!(ok, "{text}");

    // Past the limit, the first MAX_ROBOTS_ALLOWS are listed and the rest stay disallowed.
    let many = tmp.path().join("many.ndjson");
    let text: String = (0..MAX_ROBOTS_ALLOWS + 50)
        .map(|i| {
            format!(
                "{}\n",
                json!({"key": format!("m{i}"), "long_url": "https://t.example/m",
                       "domain": "go.brand.com", "crawlable": true})
            )
        })
        .collect();
    std::fs::write(&many, text).unwrap();
    let (ok, text) = cli(&dir2, "import", &[many.to_str().unwrap()]);
    assert!(ok, "{text}");
    let s = server(&dir2);
    let mut c = Client::new(&s);
    assert_eq!(allowed(&mut c, "sho.rt"), want[0]);
    let listed = allowed(&mut c, "go.brand.com");
    assert_eq!(listed.len(), MAX_ROBOTS_ALLOWS);
    let every: BTreeSet<String> = want[1]
        .iter()
        .cloned()
        .chain((0..MAX_ROBOTS_ALLOWS + 50).map(|i| format!("m{i}")))
        .collect();
    assert!(listed.is_subset(&every));
}

/// Under `--unknown-host not-found` a host with no keyspace allows nothing (its `robots.txt`
/// is still answered, 200), while a declared one lists its crawlable links; with no domain
/// declared at all, the default domain's links are listed for any host.
#[test]
fn a_host_without_a_keyspace_allows_nothing() {
    let (_tmp, dir) = data_dir();
    let (ok, text) = cli(&dir, "domains", &["add", "sho.rt", "--default"]);
    assert!(ok, "{text}");
    let mut flags = vec!["--unknown-host", "not-found"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    let r = c.create(
        &json!({"long_url": "https://t.example/", "custom_alias": "open",
                             "crawlable": true}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(allowed(&mut c, "other.example").is_empty());
    assert_eq!(
        allowed(&mut c, "sho.rt"),
        BTreeSet::from(["open".to_owned()])
    );

    let (_tmp2, plain) = data_dir();
    let s = start(&plain, &NO_RATE_LIMIT);
    let mut c = Client::new(&s);
    let r = c.create(
        &json!({"long_url": "https://t.example/", "custom_alias": "open",
                             "crawlable": true}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        allowed(&mut c, "any.example"),
        BTreeSet::from(["open".to_owned()])
    );
}
