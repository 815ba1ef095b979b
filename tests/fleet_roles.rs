//! API key roles in fleet mode (issue 26): keys with roles live in PostgreSQL
//! (`ricochet fleet keys create --author-only | --read-only`), links record their author in
//! `ricochet_links.author`, and every node (2 cores, 3 cores oversubscribed, and one
//! bootstrapped afterwards) answers each key only with the links within its reach: through
//! its own writes, the change feed, read-through and the bootstrap copy. Writes out of reach
//! are refused by the database's own `WHERE author = ...`, whichever node sends them.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{self, Client, API_KEY};
use common::pg::{fleet_key, fleet_node_args, prepare_fleet, TestDb};
use common::Server;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

fn node(dir: &Path, url: &str, id: &str, cores: &str) -> Server {
    let mut args = fleet_node_args(url, id, cores);
    args.push("--test-oversubscribe");
    api::start(dir, &args)
}

fn client(s: &Server, token: &str) -> Client {
    let mut c = Client::new(s);
    c.token = token.to_owned();
    c
}

/// The keys of a key's native list on `s`.
fn listed(s: &Server, token: &str) -> BTreeSet<String> {
    let r = client(s, token)
        .send("GET", "/api/v1/urls?limit=500", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

/// Waits until `check` holds (the feed and the key watcher take about a second).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_fleet_node_answers_each_role_with_its_reach_only() {
    let Some(db) = TestDb::create("fleet_roles") else {
        return;
    };
    prepare_fleet(&db.url);
    let alice = fleet_key(&db.url, "alice", &["--author-only"]);
    let bob = fleet_key(&db.url, "bob", &["--author-only"]);
    let reader = fleet_key(&db.url, "reader", &["--read-only"]);
    let id = |k: &str| k.split('_').nth(1).unwrap().to_owned();
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "2");
    let b = node(&dir_b, &db.url, "b", "3");
    for s in [&a, &b] {
        for k in [&alice, &bob, &reader] {
            eventually("the fleet keys are read", || {
                let r = client(s, k).send("GET", "/api/v1/urls?limit=1", true, &[], b"");
                r.is_ok_and(|r| r.status == 200)
            });
        }
    }
    // Links by three authors, on two nodes.
    let made = [
        (&a, API_KEY, "adm"),
        (&a, &alice[..], "ali"),
        (&b, &bob[..], "bob"),
    ];
    for (s, token, key) in made {
        let r = client(s, token).create(&json!({
            "long_url": format!("https://example.com/{key}"), "custom_alias": key}));
        assert_eq!(r.status, 201, "{key}: {}", r.text());
    }
    // The database holds each link's author.
    let authors = db.sql("SELECT key || '=' || author FROM ricochet_links ORDER BY key");
    assert_eq!(
        authors.split_whitespace().collect::<Vec<_>>(),
        [
            "adm=env",
            &format!("ali={}", id(&alice)),
            &format!("bob={}", id(&bob))
        ],
        "{authors}"
    );
    // Reads right after the 201s (the other node reads through to the database), then lists
    // once the feed has brought every link to every node.
    for s in [&a, &b] {
        for (token, key, visible) in [
            (&alice, "ali", true),
            (&alice, "bob", false),
            (&alice, "adm", false),
            (&bob, "bob", true),
            (&bob, "ali", false),
            (&reader, "ali", true),
            (&reader, "bob", true),
        ] {
            let r = client(s, token).get_link(key);
            assert_eq!(
                r.status,
                if visible { 200 } else { 404 },
                "{key}: {}",
                r.text()
            );
        }
        eventually("every link reaches every node", || {
            listed(s, API_KEY) == set(&["adm", "ali", "bob"])
        });
        assert_eq!(listed(s, &alice), set(&["ali"]));
        assert_eq!(listed(s, &bob), set(&["bob"]));
        // Shlink's view: the fleet's visit totals (no clicks yet), and another's link absent.
        let sh = |token: &str, code: &str| {
            Client::new(s)
                .send(
                    "GET",
                    &format!("/rest/v3/short-urls/{code}"),
                    false,
                    &[("X-Api-Key", token)],
                    b"",
                )
                .unwrap()
        };
        let r = sh(&alice, "ali");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["visitsSummary"]["total"], 0, "{}", r.text());
        assert_eq!(sh(&alice, "bob").status, 404);
        assert_eq!(listed(s, &reader), set(&["adm", "ali", "bob"]));
        // The server-wide stats of each role: the links it reaches, summed from the fleet's
        // database (no clicks yet), counted.
        for (token, links) in [(&alice, 1), (&bob, 1), (&reader, 3)] {
            let r = client(s, token)
                .send("GET", "/api/v1/stats", true, &[], b"")
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            assert_eq!(
                (v["links"].clone(), v["summary"]["clicks"].clone()),
                (json!(links), json!(0)),
                "{v}"
            );
        }
    }
    // Writes out of reach change nothing, from either node; a read-only key writes nothing.
    for s in [&a, &b] {
        let mut c = client(s, &bob);
        assert_eq!(c.patch("ali", &json!({"redirect_status": 301})).status, 404);
        assert_eq!(c.delete("ali").status, 404);
        let r = c
            .send("DELETE", "/api/v1/urls/ali/stats", true, &[], b"")
            .unwrap();
        assert_eq!(r.status, 404, "{}", r.text());
        let mut c = client(s, &reader);
        c.patch("ali", &json!({"redirect_status": 301}))
            .assert_problem(403);
        c.delete("bob").assert_problem(403);
        c.create(&json!({"long_url": "https://example.com/r"}))
            .assert_problem(403);
    }
    // Within reach they work, on the node that does not hold the author's write.
    let r = client(&b, &alice).patch("ali", &json!({"redirect_status": 308}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(client(&a, &bob).delete("bob").status, 204);
    for s in [&a, &b] {
        eventually("the changes reach every node", || {
            client(s, API_KEY).get_link("ali").json()["redirect_status"] == 308
                && client(s, API_KEY).get_link("bob").status == 404
        });
    }
    // A node bootstrapped now takes the authors from the snapshot.
    let (_tc, dir_c) = api::data_dir();
    let c = node(&dir_c, &db.url, "c", "2");
    eventually("node c reads the fleet keys", || {
        let r = client(&c, &alice).send("GET", "/api/v1/urls?limit=1", true, &[], b"");
        r.is_ok_and(|r| r.status == 200)
    });
    assert_eq!(listed(&c, &alice), set(&["ali"]));
    assert_eq!(listed(&c, &bob), set(&[]));
    assert_eq!(client(&c, &bob).get_link("ali").status, 404);
    // And a node restarted keeps them (its log and tables).
    drop(b);
    let b = node(&dir_b, &db.url, "b", "3");
    eventually("node b reads the fleet keys again", || {
        let r = client(&b, &alice).send("GET", "/api/v1/urls?limit=1", true, &[], b"");
        r.is_ok_and(|r| r.status == 200)
    });
    assert_eq!(listed(&b, &alice), set(&["ali"]));
}
