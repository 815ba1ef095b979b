//! Domains as keyspaces (issue 26, single node): `ricochet domains`, the `Host` header choosing
//! the keyspace on the redirect path (on 3 cores, more than this machine's CPUs, so keys and
//! forwards land on every owner), the API's `domain`, live reload, removal and re-adding, and
//! links of every domain surviving `kill -9`.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn domains(dir: &Path, args: &[&str]) -> (bool, String) {
    common::api::cli(dir, "domains", args)
}

/// `GET /{key}` with `Host: host`: (status, Location).
fn visit(c: &mut Client, host: &str, key: &str) -> (u16, Option<String>) {
    c.host = host.to_owned();
    let r = c.redirect(key);
    (r.status, r.location().map(str::to_owned))
}

/// Waits until `key` on `host` answers `status` (a reload is in force within about a second).
fn until(c: &mut Client, host: &str, key: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (got, _) = visit(c, host, key);
        if got == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "GET /{key} with Host {host}: {got}, wanted {status} within 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create(c: &mut Client, body: serde_json::Value) -> serde_json::Value {
    let r = c.create(&body);
    assert_eq!(r.status, 201, "{body}: {}", r.text());
    r.json()
}

#[test]
fn each_domain_is_its_own_keyspace_chosen_by_host() {
    let (_t, dir) = data_dir();
    assert!(domains(&dir, &["list"]).1.contains("No domains declared"));
    let (ok, text) = domains(&dir, &["add", "Sho.RT", "--default"]);
    assert!(
        ok && text.contains("sho.rt as the default domain"),
        "{text}"
    );
    let (ok, text) = domains(&dir, &["add", "go.brand.com", "--scheme", "http"]);
    assert!(ok && text.contains("domain number 1"), "{text}");
    let (ok, text) = domains(&dir, &["add", "127.0.0.1"]);
    assert!(!ok && text.contains("not a domain name"), "{text}");

    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);

    // The same key on two domains: two links.
    let keys: Vec<String> = (0..24).map(|i| format!("promo{i}")).collect();
    for k in &keys {
        let v = create(
            &mut c,
            json!({"long_url": format!("https://default.example/{k}"), "custom_alias": k}),
        );
        assert_eq!(v["domain"], "sho.rt", "{v}");
        let v = create(
            &mut c,
            json!({"long_url": format!("https://brand.example/{k}"), "custom_alias": k,
                   "domain": "GO.brand.com"}),
        );
        assert_eq!(v["domain"], "go.brand.com", "{v}");
        assert_eq!(v["short_url"], format!("http://go.brand.com/{k}"), "{v}");
    }
    // A generated key on a domain.
    let v = create(
        &mut c,
        json!({"long_url": "https://brand.example/gen", "domain": "go.brand.com"}),
    );
    let generated = v["key"].as_str().unwrap().to_owned();
    let r = c.create(&json!({"long_url": "https://x.example/", "domain": "nope.example"}));
    let p = r.assert_problem(422);
    assert!(
        p["detail"].as_str().unwrap().contains("nope.example"),
        "{p}"
    );

    let check_all = |c: &mut Client| {
        for k in &keys {
            let want_default = format!("https://default.example/{k}");
            let want_brand = format!("https://brand.example/{k}");
            assert_eq!(visit(c, "sho.rt", k), (302, Some(want_default.clone())));
            assert_eq!(
                visit(c, "SHO.RT:8080", k),
                (302, Some(want_default.clone()))
            );
            assert_eq!(visit(c, "go.brand.com", k), (302, Some(want_brand)));
            // An undeclared host is the default domain's (--unknown-host default).
            assert_eq!(visit(c, "other.example", k), (302, Some(want_default)));
        }
        assert_eq!(
            visit(c, "go.brand.com.", &generated),
            (302, Some("https://brand.example/gen".into()))
        );
        assert_eq!(visit(c, "sho.rt", &generated).0, 404);
    };
    check_all(&mut c);

    // The API reads each domain's link by `?domain=`.
    c.host = "t".into();
    let r = c.get_link("promo3?domain=go.brand.com");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["long_url"], "https://brand.example/promo3");
    let r = c.get_link("promo3");
    assert_eq!(r.json()["long_url"], "https://default.example/promo3");
    c.get_link("promo3?domain=nope.example").assert_problem(422);
    let r = c
        .send("GET", "/api/v1/stats?domain=go.brand.com", true, &[], b"")
        .unwrap();
    let p = r.assert_problem(422);
    assert!(
        p["detail"].as_str().unwrap().contains("every domain"),
        "{p}"
    );
    // The server-wide top links name each link's domain: the generated key, clicked most.
    for _ in 0..5 {
        assert_eq!(visit(&mut c, "go.brand.com", &generated).0, 302);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = c
            .send("GET", "/api/v1/stats", true, &[], b"")
            .unwrap()
            .json();
        let top = v["top_links"][0].clone();
        if top["clicks"] == 6 {
            assert_eq!(
                top,
                json!({"key": generated, "domain": "go.brand.com", "clicks": 6})
            );
            assert_eq!(v["top_links"][1]["domain"], "sho.rt", "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(50));
    }

    pipelined_hosts_choose_each_requests_keyspace(s.addr, &keys);

    // `/robots.txt` on every domain asks crawlers to follow no short link.
    for host in ["sho.rt", "GO.brand.com:443", "other.example"] {
        c.host = host.into();
        let r = c.send("GET", "/robots.txt", false, &[], b"").unwrap();
        assert_eq!(
            (r.status, r.text()),
            (200, "User-agent: *\nDisallow: /\n".into())
        );
        let r = c.send("HEAD", "/robots.txt", false, &[], b"").unwrap();
        assert_eq!((r.status, r.body.len()), (200, 0));
    }

    // A domain added while the server runs is in force within about a second.
    let (ok, text) = domains(&dir, &["add", "third.example"]);
    assert!(ok, "{text}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        c.host = "t".into();
        let r = c.create(
            &json!({"long_url": "https://third.example/p", "custom_alias": "promo0",
                                 "domain": "third.example"}),
        );
        if r.status == 201 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "third.example not in force: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        visit(&mut c, "third.example", "promo0"),
        (302, Some("https://third.example/p".into()))
    );

    // Removed: its links stop redirecting (the undeclared host is the default domain's
    // again) but are kept; added again, they are back.
    assert!(domains(&dir, &["remove", "go.brand.com"]).0);
    until(&mut c, "go.brand.com", &generated, 404);
    assert_eq!(
        visit(&mut c, "go.brand.com", "promo1"),
        (302, Some("https://default.example/promo1".into()))
    );
    assert!(domains(&dir, &["add", "go.brand.com", "--scheme", "http"]).0);
    until(&mut c, "go.brand.com", &generated, 302);
    check_all(&mut c);

    // Every domain's links survive kill -9.
    s.kill9();
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    check_all(&mut c);
    pipelined_hosts_choose_each_requests_keyspace(s.addr, &keys);
    assert_eq!(
        visit(&mut c, "third.example", "promo0"),
        (302, Some("https://third.example/p".into()))
    );
    drop(s);

    // --unknown-host not-found: an undeclared host has no keyspace.
    let mut strict = flags.clone();
    strict.extend(["--unknown-host", "not-found"]);
    let s = start(&dir, &strict);
    let mut c = Client::new(&s);
    assert_eq!(visit(&mut c, "other.example", "promo1").0, 404);
    assert_eq!(
        visit(&mut c, "sho.rt", "promo1"),
        (302, Some("https://default.example/promo1".into()))
    );
}

/// Pipelines of GETs and HEADs naming the same keys on different hosts, in one write each (a
/// run parsed ahead and prefetched together, `net::conns::run`): every answer is its own
/// request's domain's link, whichever field order, case, port or target form names it.
fn pipelined_hosts_choose_each_requests_keyspace(addr: std::net::SocketAddr, keys: &[String]) {
    let mut rng = common::api::seed("pipelined_hosts");
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..4 {
        let mut r = common::Reader::connect(addr);
        let mut wire = String::new();
        let mut want = Vec::new();
        for _ in 0..40 {
            let k = &keys[(next() % keys.len() as u64) as usize];
            let method = if next() % 4 == 0 { "HEAD" } else { "GET" };
            let (head, brand) = match next() % 6 {
                0 => (format!("{method} /{k} HTTP/1.1\r\nHost: sho.rt\r\n"), false),
                1 => (
                    format!("{method} /{k} HTTP/1.1\r\nHost: GO.Brand.COM:8080\r\n"),
                    true,
                ),
                2 => (
                    format!("{method} /{k} HTTP/1.1\r\nUser-Agent: t\r\nhost: go.brand.com\r\n"),
                    true,
                ),
                3 => (
                    format!("{method} /{k} HTTP/1.1\r\nHost: other.example\r\n"),
                    false,
                ),
                4 => (
                    format!("{method} http://go.brand.com/{k} HTTP/1.1\r\nHost: sho.rt\r\n"),
                    true,
                ),
                _ => (
                    format!("{method} /{k}?utm=1 HTTP/1.1\r\nHost: SHO.RT\r\n"),
                    false,
                ),
            };
            wire.push_str(&head);
            wire.push_str("\r\n");
            let site = if brand { "brand" } else { "default" };
            want.push((
                method == "HEAD",
                format!("https://{site}.example/{k}"),
                head,
            ));
        }
        r.send(wire.as_bytes());
        for (head_only, location, request) in want {
            let resp = r.read_response(head_only);
            assert_eq!(resp.status, 302, "{request:?}");
            assert_eq!(
                resp.header("location"),
                Some(location.as_str()),
                "{request:?}"
            );
        }
    }
}

#[test]
fn a_damaged_domain_book_is_refused_at_start() {
    let (_t, dir) = data_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("domains.json"),
        b"{\"version\": 1, \"next_number\": ",
    )
    .unwrap();
    let e = common::api::try_start(&dir, &[]).map(|_| ()).unwrap_err();
    assert!(e.contains("domains.json"), "{e}");
}

/// Shlink's special redirects, per domain: `/` to its base URL, a key with no live link (never
/// created, deleted, expired) to its invalid-short-URL redirect, any other path to its regular
/// 404 redirect; a domain without them answers 404; only GET and HEAD are redirected.
#[test]
fn a_domain_sends_what_it_does_not_hold_to_its_not_found_redirects() {
    let (_t, dir) = data_dir();
    let (ok, text) = domains(
        &dir,
        &[
            "add",
            "go.brand.com",
            "--base-url",
            "https://brand.example/",
            "--regular-404",
            "https://brand.example/404",
            "--invalid-short-url",
            "https://brand.example/expired",
        ],
    );
    assert!(ok, "{text}");
    let (ok, text) = domains(&dir, &["add", "plain.example"]);
    assert!(ok, "{text}");
    let (ok, text) = domains(&dir, &["add", "x.example", "--base-url", "ftp://x"]);
    assert!(!ok && text.contains("--base-url"), "{text}");
    let s = start(&dir, &[]);
    let mut c = Client::new(&s);
    create(
        &mut c,
        json!({"long_url": "https://brand.example/live", "custom_alias": "live",
               "domain": "go.brand.com"}),
    );
    create(
        &mut c,
        json!({"long_url": "https://brand.example/gone", "custom_alias": "gone",
               "domain": "go.brand.com"}),
    );
    c.host = "t".into();
    assert_eq!(
        c.send(
            "DELETE",
            "/api/v1/urls/gone?domain=go.brand.com",
            true,
            &[],
            b""
        )
        .unwrap()
        .status,
        204
    );
    let brand = |path: &str| Some(format!("https://brand.example/{path}"));
    assert_eq!(visit(&mut c, "go.brand.com", "live"), (302, brand("live")));
    assert_eq!(visit(&mut c, "go.brand.com", ""), (302, brand("")));
    assert_eq!(
        visit(&mut c, "go.brand.com", "gone"),
        (302, brand("expired"))
    );
    assert_eq!(
        visit(&mut c, "go.brand.com", "never"),
        (302, brand("expired"))
    );
    assert_eq!(
        visit(&mut c, "Go.Brand.com:443", "a/b"),
        (302, brand("404"))
    );
    // Twice on one connection, the second after a forwarded lookup's: answers stay in order.
    assert_eq!(
        visit(&mut c, "go.brand.com", "never2"),
        (302, brand("expired"))
    );
    let r = c.send("HEAD", "/never", false, &[], b"").unwrap();
    assert_eq!(r.status, 302);
    assert!(r.body.is_empty());
    c.host = "go.brand.com".into();
    assert_eq!(c.send("POST", "/a/b", false, &[], b"").unwrap().status, 404);
    // Without redirects of its own, 404 as before domains.
    assert_eq!(visit(&mut c, "plain.example", "never").0, 404);
    assert_eq!(visit(&mut c, "plain.example", "a/b").0, 404);
    assert_eq!(visit(&mut c, "plain.example", "").0, 404);
    assert_eq!(visit(&mut c, "other.example", "never").0, 404);
}

/// Shlink's `PATCH /rest/v3/domains/redirects` (admin keys only): the book is written off the
/// cores, the change is in force on the core that answered before its 200 and on every core
/// (3 here, more than the CPUs) within about a second, and it survives a restart.
#[test]
fn an_admin_key_changes_a_domains_redirects_through_shlinks_api() {
    let (_t, dir) = data_dir();
    let (ok, text) = domains(
        &dir,
        &[
            "add",
            "go.brand.com",
            "--regular-404",
            "https://brand.example/404",
        ],
    );
    assert!(ok, "{text}");
    let reader = common::api::make_key(&dir, "reader", &["--read-only"]);
    let brand_key = common::api::make_key(&dir, "brand", &["--domain", "go.brand.com"]);
    let s = start(&dir, &["--cores", "3", "--test-oversubscribe"]);
    let mut c = Client::new(&s);
    let patch = |c: &mut Client, token: &str, body: &str| {
        c.host = "t".into();
        let headers = [("X-Api-Key", token), ("Content-Type", "application/json")];
        c.send(
            "PATCH",
            "/rest/v3/domains/redirects",
            false,
            &headers,
            body.as_bytes(),
        )
        .unwrap()
    };
    let body = r#"{"domain": "Go.Brand.com", "invalidShortUrlRedirect": "https://brand.example/gone",
                   "baseUrlRedirect": "https://brand.example/"}"#;
    let r = patch(&mut c, common::api::API_KEY, body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"baseUrlRedirect": "https://brand.example/",
               "regular404Redirect": "https://brand.example/404",
               "invalidShortUrlRedirect": "https://brand.example/gone"})
    );
    // Every core (keys land on all three) sends a miss to the new redirect.
    let deadline = Instant::now() + Duration::from_secs(5);
    for i in 0..48 {
        let key = format!("never{i}");
        loop {
            let got = visit(&mut c, "go.brand.com", &key);
            if got == (302, Some("https://brand.example/gone".into())) {
                break;
            }
            assert!(Instant::now() < deadline, "{key}: {got:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(
        visit(&mut c, "go.brand.com", ""),
        (302, Some("https://brand.example/".into()))
    );
    // null clears one; the others stay.
    let r = patch(
        &mut c,
        common::api::API_KEY,
        r#"{"domain": "go.brand.com", "baseUrlRedirect": null}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["baseUrlRedirect"], serde_json::Value::Null);
    assert_eq!(r.json()["regular404Redirect"], "https://brand.example/404");
    // Refused: other roles (403, nothing changed), bad input (400 naming it), other methods.
    for token in [&reader[..], &brand_key[..]] {
        let r = patch(
            &mut c,
            token,
            r#"{"domain": "go.brand.com", "regular404Redirect": null}"#,
        );
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.text().contains("admin-only"), "{}", r.text());
    }
    for (body, says) in [
        (r#"{"domain": "nope.example"}"#, "nope.example"),
        (
            r#"{"domain": "go.brand.com", "regular404Redirect": "ftp://x"}"#,
            "regular404Redirect",
        ),
        (
            r#"{"domain": "go.brand.com", "baseUrlRedirect": 7}"#,
            "baseUrlRedirect",
        ),
        (r#"{"baseUrlRedirect": null}"#, "domain"),
        ("[", "JSON"),
    ] {
        let r = patch(&mut c, common::api::API_KEY, body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(says), "{body}: {}", r.text());
    }
    c.host = "t".into();
    let headers = [("X-Api-Key", common::api::API_KEY)];
    let r = c
        .send("GET", "/rest/v3/domains/redirects", false, &headers, b"")
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("PATCH"));
    drop(s);
    // The book on disk holds it: a restarted server answers with it.
    let (ok, text) = domains(&dir, &["list"]);
    assert!(ok, "{text}");
    let book = std::fs::read_to_string(dir.join("domains.json")).unwrap();
    assert!(book.contains("https://brand.example/gone"), "{book}");
    assert!(!book.contains(r#""base_url""#), "{book}");
    let s = start(&dir, &[]);
    let mut c = Client::new(&s);
    assert_eq!(
        visit(&mut c, "go.brand.com", "never"),
        (302, Some("https://brand.example/gone".into()))
    );
    assert_eq!(
        visit(&mut c, "go.brand.com", "a/b"),
        (302, Some("https://brand.example/404".into()))
    );
}

/// `GET /api/v1/urls?domain=`: a walk over every core's shards that lists exactly one domain's
/// live links, each once; without it, every domain's, each with its `domain`.
#[test]
fn the_list_walks_one_domain_or_all() {
    let (_t, dir) = data_dir();
    assert!(domains(&dir, &["add", "go.brand.com"]).0);
    assert!(domains(&dir, &["add", "b.example"]).0);
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    let mut want: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> =
        Default::default();
    for i in 0..90 {
        let domain = ["", "go.brand.com", "b.example"][i % 3];
        let key = format!("k{}", i / 2);
        let mut body = json!({"long_url": format!("https://x.example/{i}"), "custom_alias": key});
        if !domain.is_empty() {
            body["domain"] = json!(domain);
        }
        create(&mut c, body);
        want.entry(domain).or_default().insert(key);
    }
    let walk = |c: &mut Client, domain: &str| {
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = "/api/v1/urls?limit=7".to_string();
            if !domain.is_empty() {
                path.push_str(&format!("&domain={domain}"));
            }
            if let Some(cur) = &cursor {
                path.push_str(&format!("&cursor={cur}"));
            }
            let r = c.send("GET", &path, true, &[], b"").unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            for item in v["items"].as_array().unwrap() {
                got.push((
                    item["domain"].as_str().unwrap_or("").to_owned(),
                    item["key"].as_str().unwrap().to_owned(),
                ));
            }
            match v["next_cursor"].as_str() {
                Some(n) => cursor = Some(n.to_owned()),
                None => return got,
            }
        }
    };
    for domain in ["go.brand.com", "b.example"] {
        let got = walk(&mut c, domain);
        assert!(got.iter().all(|(d, _)| d == domain), "{got:?}");
        let keys: std::collections::BTreeSet<String> = got.iter().map(|(_, k)| k.clone()).collect();
        assert_eq!(keys.len(), got.len(), "each once: {got:?}");
        assert_eq!(&keys, &want[domain]);
    }
    let all = walk(&mut c, "");
    assert_eq!(all.len(), 90);
    assert_eq!(
        all.iter().filter(|(d, _)| d.is_empty()).count(),
        want[""].len()
    );
    let r = c
        .send("GET", "/api/v1/urls?domain=nope.example", true, &[], b"")
        .unwrap();
    let p = r.assert_problem(422);
    assert!(
        p["detail"].as_str().unwrap().contains("nope.example"),
        "{p}"
    );
}

fn cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(common::server_bin())
        .args(args)
        .output()
        .expect("run ricochet");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// An export names each link's domain; an import into another data dir, whose same domains
/// have other numbers, puts every link back on its domain (NDJSON, TSV and CSV); a domain the
/// target has not declared is a bad line naming it; Shlink's CSV `Domain` column is imported.
#[test]
fn export_and_import_carry_domains_by_name() {
    let (_t, dir) = data_dir();
    assert!(domains(&dir, &["add", "sho.rt", "--default"]).0);
    assert!(domains(&dir, &["add", "go.brand.com"]).0);
    let s = start(&dir, &[]);
    let mut c = Client::new(&s);
    for (domain, url) in [
        ("", "https://d.example/"),
        ("go.brand.com", "https://b.example/"),
    ] {
        let mut body = json!({"long_url": url, "custom_alias": "same"});
        if !domain.is_empty() {
            body["domain"] = json!(domain);
        }
        create(&mut c, body);
    }
    drop(s);
    let tmp = tempfile::tempdir().unwrap();
    for format in ["ndjson", "tsv", "csv"] {
        let file = tmp.path().join(format!("links.{format}"));
        let d = dir.to_str().unwrap();
        let (ok, text) = cli(&[
            "export",
            "--data-dir",
            d,
            "--format",
            format,
            "--output",
            file.to_str().unwrap(),
        ]);
        assert!(ok, "{text}");
        let body = std::fs::read_to_string(&file).unwrap();
        assert!(
            body.contains("go.brand.com") && !body.contains("1.same"),
            "{format}: {body}"
        );

        // The target declares the domains in another order: go.brand.com is number 2 there.
        let target = tmp.path().join(format!("target-{format}"));
        assert!(domains(&target, &["add", "other.example"]).0);
        let (ok, text) = cli(&[
            "import",
            "--data-dir",
            target.to_str().unwrap(),
            "--strict",
            file.to_str().unwrap(),
        ]);
        assert!(
            !ok && text.contains("go.brand.com") && text.contains("not declared"),
            "{text}"
        );
        assert!(domains(&target, &["add", "GO.brand.com"]).0);
        let (ok, text) = cli(&[
            "import",
            "--data-dir",
            target.to_str().unwrap(),
            file.to_str().unwrap(),
        ]);
        assert!(ok, "{text}");
        let s = start(&target, &[]);
        let mut c = Client::new(&s);
        assert_eq!(
            visit(&mut c, "go.brand.com", "same"),
            (302, Some("https://b.example/".into()))
        );
        assert_eq!(
            visit(&mut c, "anything", "same"),
            (302, Some("https://d.example/".into()))
        );
    }

    // Shlink's CSV export: its `Domain` column picks the domain.
    let shlink = tmp.path().join("shlink.csv");
    std::fs::write(
        &shlink,
        "Long URL,Short code,Domain\nhttps://s.example/a,fromshlink,go.brand.com\nhttps://s.example/b,fromshlink,\n",
    )
    .unwrap();
    let d = dir.to_str().unwrap();
    let (ok, text) = cli(&[
        "import",
        "--data-dir",
        d,
        "--format",
        "shlink-csv",
        shlink.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let s = start(&dir, &[]);
    let mut c = Client::new(&s);
    assert_eq!(
        visit(&mut c, "go.brand.com", "fromshlink"),
        (302, Some("https://s.example/a".into()))
    );
    assert_eq!(
        visit(&mut c, "sho.rt", "fromshlink"),
        (302, Some("https://s.example/b".into()))
    );
    drop(s);

    // Bitly's bitlinks: a declared domain's go to it; Bitly's own (bit.ly) to the default one.
    let bitly = tmp.path().join("bitly.csv");
    std::fs::write(
        &bitly,
        "id,long_url,custom_bitlinks\nbit.ly/fromBitly,https://b.example/1,https://go.brand.com/fromBitly\n",
    )
    .unwrap();
    let (ok, text) = cli(&[
        "import",
        "--data-dir",
        d,
        "--format",
        "bitly-csv",
        bitly.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let s = start(&dir, &[]);
    let mut c = Client::new(&s);
    assert_eq!(
        visit(&mut c, "sho.rt", "fromBitly"),
        (302, Some("https://b.example/1".into()))
    );
    assert_eq!(
        visit(&mut c, "go.brand.com", "fromBitly"),
        (302, Some("https://b.example/1".into()))
    );
}
