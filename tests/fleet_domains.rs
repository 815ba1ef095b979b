//! Domains in fleet mode (issue 26): the fleet's domain book is a PostgreSQL table
//! (`ricochet fleet domains add|list|remove`) that every node follows within about a second;
//! each domain is its own keyspace on every node (2 cores, 3 cores oversubscribed, and one
//! bootstrapped afterwards): the same key on two domains is two rows of `ricochet_links`, made,
//! changed and deleted on either node and seen by the other through the feed and read-through.
//! A node restarted while the database is down serves its links on the domains it last read.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{self, Client};
use common::pg::{fleet_node_args, prepare_fleet, Cluster, TestDb};
use common::Server;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn node(dir: &Path, url: &str, id: &str, cores: &str) -> Server {
    let mut args = fleet_node_args(url, id, cores);
    args.push("--test-oversubscribe");
    api::start(dir, &args)
}

/// `ricochet fleet domains --pg URL ARGS...`: (success, stdout and stderr).
fn fleet_domains(url: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(common::BIN)
        .args(["fleet", "domains", "--pg", url])
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `GET /{key}` on `s` with `Host: host`: (status, Location).
fn visit(s: &Server, host: &str, key: &str) -> (u16, Option<String>) {
    let mut c = Client::new(s);
    c.host = host.to_owned();
    let r = c.redirect(key);
    (r.status, r.location().map(str::to_owned))
}

/// Waits until `check` holds (the feed and the key watcher take about a second).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn created(s: &Server, body: serde_json::Value) -> serde_json::Value {
    let r = Client::new(s).create(&body);
    assert_eq!(r.status, 201, "{body}: {}", r.text());
    r.json()
}

#[test]
fn every_fleet_node_follows_the_fleets_domains() {
    let Some(cluster) = Cluster::start("fleet_domains") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "fleet_domains");
    prepare_fleet(&db.url);
    let url = db.url.clone();
    let (ok, text) = fleet_domains(&url, &["list"]);
    assert!(ok && text.contains("No domains declared"), "{text}");
    let (ok, text) = fleet_domains(&url, &["add", "Sho.RT", "--default"]);
    assert!(
        ok && text.contains("sho.rt as the default domain"),
        "{text}"
    );
    let (ok, text) = fleet_domains(
        &url,
        &[
            "add",
            "go.brand.com",
            "--scheme",
            "http",
            "--invalid-short-url",
            "https://brand.example/gone",
        ],
    );
    assert!(ok && text.contains("domain number 1"), "{text}");
    let (ok, text) = fleet_domains(&url, &["add", "GO.brand.com"]);
    assert!(!ok && text.contains("already declared"), "{text}");
    let (ok, text) = fleet_domains(&url, &["add", "127.0.0.1"]);
    assert!(!ok && text.contains("not a domain name"), "{text}");

    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &url, "a", "2");
    let mut b = node(&dir_b, &url, "b", "3");

    // The same keys on both domains, made on both nodes.
    let keys: Vec<String> = (0..12).map(|i| format!("promo-{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let (on_default, on_brand) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let v = created(
            on_default,
            json!({"long_url": format!("https://default.example/{k}"), "custom_alias": k}),
        );
        assert_eq!(v["domain"], "sho.rt", "{v}");
        let v = created(
            on_brand,
            json!({"long_url": format!("https://brand.example/{k}"), "custom_alias": k,
                   "domain": "go.brand.com"}),
        );
        assert_eq!(v["short_url"], format!("http://go.brand.com/{k}"), "{v}");
    }
    let v = created(
        &a,
        json!({"long_url": "https://brand.example/gen", "domain": "go.brand.com"}),
    );
    let generated = v["key"].as_str().unwrap().to_owned();
    // The database holds one row per (domain, key): the stored key.
    let rows = db.sql("SELECT count(*) FROM ricochet_links WHERE key LIKE '1.%'");
    assert_eq!(rows.trim(), "13", "{rows}");
    let rows = db.sql("SELECT count(*) FROM ricochet_links WHERE key LIKE 'promo-%'");
    assert_eq!(rows.trim(), "12", "{rows}");

    // Every node answers each domain's own link by Host.
    let check = |s: &Server, keys: &[String]| {
        for k in keys {
            assert_eq!(
                visit(s, "sho.rt", k),
                (302, Some(format!("https://default.example/{k}")))
            );
            assert_eq!(
                visit(s, "GO.BRAND.COM:8080", k),
                (302, Some(format!("https://brand.example/{k}")))
            );
        }
        assert_eq!(
            visit(s, "go.brand.com", &generated),
            (302, Some("https://brand.example/gen".into()))
        );
        // Unknown on the default domain (no redirect there), the brand's redirect there.
        assert_eq!(visit(s, "sho.rt", &generated).0, 404);
        assert_eq!(
            visit(s, "go.brand.com", "nosuchkey"),
            (302, Some("https://brand.example/gone".into())),
            "a key with no link on the brand's domain, on {}",
            s.addr
        );
    };
    for s in [&a, &b] {
        eventually("every link reached both nodes", || {
            keys.iter()
                .all(|k| visit(s, "go.brand.com", k).0 == 302 && visit(s, "sho.rt", k).0 == 302)
        });
        check(s, &keys);
    }
    // The API reads, changes and deletes one domain's link, on either node.
    let mut ca = Client::new(&a);
    let r = ca.get_link("promo-3?domain=go.brand.com");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["long_url"], "https://brand.example/promo-3");
    let r = Client::new(&b)
        .send(
            "PATCH",
            "/api/v1/urls/promo-0?domain=go.brand.com",
            true,
            &[("Content-Type", "application/json")],
            br#"{"long_url": "https://brand.example/changed"}"#,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = ca
        .send("DELETE", "/api/v1/urls/promo-1", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    for s in [&a, &b] {
        eventually("the change and the delete reached both nodes", || {
            visit(s, "go.brand.com", "promo-0").1.as_deref()
                == Some("https://brand.example/changed")
                && visit(s, "sho.rt", "promo-1").0 == 404
        });
        assert_eq!(
            visit(s, "go.brand.com", "promo-1"),
            (302, Some("https://brand.example/promo-1".into())),
            "the other domain's promo-1 is another link"
        );
        assert_eq!(
            visit(s, "sho.rt", "promo-0"),
            (302, Some("https://default.example/promo-0".into()))
        );
    }

    // A domain added on the database is in force on every node within about a second.
    let (ok, text) = fleet_domains(&url, &["add", "third.example"]);
    assert!(ok && text.contains("domain number 2"), "{text}");
    eventually("node b takes creates on the new domain", || {
        Client::new(&b)
            .create(
                &json!({"long_url": "https://third.example/x", "custom_alias": "promo-2",
                            "domain": "third.example"}),
            )
            .status
            == 201
    });
    eventually("node a answers the new domain", || {
        visit(&a, "third.example", "promo-2").1.as_deref() == Some("https://third.example/x")
    });
    // Its own extra-path mode, set on the database, is every node's within about a second.
    let (ok, text) = fleet_domains(&url, &["set", "third.example", "--extra-path", "append"]);
    assert!(ok && text.contains("extra path append"), "{text}");
    for s in [&a, &b] {
        eventually("a domain's extra-path mode reaches every node", || {
            visit(s, "third.example", "promo-2/more").1.as_deref()
                == Some("https://third.example/x/more")
        });
    }
    let (ok, text) = fleet_domains(&url, &["list"]);
    assert!(
        ok && text.contains("(extra path append, forward query the server's)"),
        "{text}"
    );
    // Removed: its links stop redirecting on every node (and are kept); added back: they
    // come back.
    let (ok, text) = fleet_domains(&url, &["remove", "go.brand.com"]);
    assert!(ok && text.contains("ricochet fleet domains add"), "{text}");
    for s in [&a, &b] {
        eventually("a removed domain stops answering", || {
            visit(s, "go.brand.com", "promo-5")
                == (302, Some("https://default.example/promo-5".into()))
        });
    }
    let (ok, text) = fleet_domains(&url, &["list"]);
    assert!(
        ok && text.contains("removed") && text.contains("third.example"),
        "{text}"
    );
    let (ok, text) = fleet_domains(
        &url,
        &[
            "add",
            "go.brand.com",
            "--scheme",
            "http",
            "--invalid-short-url",
            "https://brand.example/gone",
        ],
    );
    assert!(ok && text.contains("domain number 1"), "{text}");
    for s in [&a, &b] {
        eventually("a domain added back answers with its links", || {
            visit(s, "go.brand.com", "promo-5").1.as_deref()
                == Some("https://brand.example/promo-5")
        });
    }

    // A fleet node's data dir exports each link with its domain's name.
    let (ok, text) = common::api::cli(&dir_a, "export", &[]);
    assert!(ok, "{text}");
    let brand = text
        .lines()
        .filter(|l| l.contains(r#""domain":"go.brand.com""#))
        .count();
    assert_eq!(brand, 13, "{text}");

    // A node bootstrapped now holds every domain's links.
    let (_tc, dir_c) = api::data_dir();
    let c = node(&dir_c, &url, "c", "2");
    eventually("node c answers both domains", || {
        visit(&c, "go.brand.com", "promo-7").1.as_deref() == Some("https://brand.example/promo-7")
    });
    check(&c, &keys[2..]);
    drop(c);

    // Shlink's PATCH /rest/v3/domains/redirects on one node writes the fleet's table; every
    // node follows.
    let mut cb = Client::new(&b);
    let headers = [
        ("X-Api-Key", common::api::API_KEY),
        ("Content-Type", "application/json"),
    ];
    let body =
        br#"{"domain": "go.brand.com", "invalidShortUrlRedirect": "https://brand.example/moved"}"#;
    let r = cb
        .send("PATCH", "/rest/v3/domains/redirects", false, &headers, body)
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["invalidShortUrlRedirect"],
        "https://brand.example/moved"
    );
    let row = db.sql("SELECT invalid_short_url FROM ricochet_domains WHERE name = 'go.brand.com'");
    assert_eq!(row.trim(), "https://brand.example/moved");
    for s in [&a, &b] {
        eventually("the edited redirect reached every node", || {
            visit(s, "go.brand.com", "nosuchkey").1.as_deref()
                == Some("https://brand.example/moved")
        });
    }

    // The database down: a node restarted then serves its links on the domains it last read.
    eventually("node b holds every brand link", || {
        keys.iter().all(|k| visit(&b, "go.brand.com", k).0 == 302)
    });
    b.terminate();
    cluster.pg_ctl("stop");
    b = node(&dir_b, &url, "b", "3");
    assert!(
        b.wait_stderr("as last read", Duration::from_secs(5))
            .is_some(),
        "node b started on its copy of the fleet's domains: {:?}",
        b.stderr_lines()
    );
    for k in &keys[2..] {
        assert_eq!(
            visit(&b, "go.brand.com", k),
            (302, Some(format!("https://brand.example/{k}"))),
            "{k} on a node restarted with the database down"
        );
        assert_eq!(
            visit(&b, "sho.rt", k),
            (302, Some(format!("https://default.example/{k}")))
        );
    }
    cluster.pg_ctl("start");
    drop(b);

    // A data dir with a domain book of its own is refused in fleet mode.
    let (_td, dir_d) = api::data_dir();
    let (ok, text) = common::api::cli(&dir_d, "domains", &["add", "own.example"]);
    assert!(ok, "{text}");
    let e = api::try_start(&dir_d, &fleet_node_args(&url, "d", "1"))
        .err()
        .expect("refused");
    assert!(
        e.contains("domains.json") && e.contains("ricochet fleet domains add"),
        "{e}"
    );
}
