//! The abuse blocklist in fleet mode (issue 27): the fleet's table (`ricochet fleet blocklist
//! add|import|remove|list`) is followed by every node within about a second, together with a
//! node's own `--blocklist` file: a create to a listed target is refused on every node (422
//! `blocked-target`), a link whose target becomes listed answers 451 on every node and
//! redirects again once the entry is removed. A node restarted while the database is down
//! still refuses what the fleet had listed (its copy in the data dir). Bad entries write
//! nothing.
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

fn node(dir: &Path, url: &str, id: &str, cores: &str, extra: &[&str]) -> Server {
    let mut args = fleet_node_args(url, id, cores);
    args.push("--test-oversubscribe");
    args.extend_from_slice(extra);
    api::start(dir, &args)
}

/// `ricochet fleet blocklist --pg URL ARGS...`: (success, stdout and stderr).
fn blocklist(url: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(common::BIN)
        .args(["fleet", "blocklist", "--pg", url])
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

/// Waits until `check` holds (the key watcher reads the table about once a second).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn status_of(s: &Server, key: &str) -> u16 {
    Client::new(s).redirect(key).status
}

fn refused_naming(s: &Server, url: &str, entry: &str) {
    let r = Client::new(s).create(&json!({ "long_url": url }));
    let p = r.assert_problem(422);
    assert_eq!(
        p["type"], "https://ricochet.dev/problems/blocked-target",
        "{p}"
    );
    assert!(p["detail"].as_str().unwrap().contains(entry), "{url}: {p}");
}

#[test]
fn every_fleet_node_follows_the_fleets_blocklist() {
    let Some(cluster) = Cluster::start("fleet_blocklist") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "fleet_blocklist");
    prepare_fleet(&db.url);
    let url = db.url.clone();

    // Bad entries write nothing, named by argument or by file and line.
    let (ok, text) = blocklist(&url, &["add", "evil.example", "not an entry"]);
    assert!(!ok && text.contains("\"not an entry\""), "{text}");
    let list_dir = tempfile::tempdir().unwrap();
    let bad_file = list_dir.path().join("bad.txt");
    std::fs::write(&bad_file, "evil.example\nhttp://\n").unwrap();
    let (ok, text) = blocklist(&url, &["import", bad_file.to_str().unwrap()]);
    assert!(!ok && text.contains("bad.txt:2"), "{text}");
    assert_eq!(
        db.sql("SELECT count(*) FROM ricochet_blocklist").trim(),
        "0"
    );

    // Entries are stored canonical, once each, with who added them and why.
    let (ok, text) = blocklist(
        &url,
        &[
            "add",
            "EVIL.example.",
            "||evil.example^",
            "--note",
            "phishing",
        ],
    );
    assert!(ok && text.contains("added 1 entries"), "{text}");
    let file = list_dir.path().join("feed.txt");
    std::fs::write(
        &file,
        "# a feed\n0.0.0.0 sink.example other.example\nphish.example/login\n",
    )
    .unwrap();
    let (ok, text) = blocklist(&url, &["import", file.to_str().unwrap()]);
    assert!(ok && text.contains("added 3 entries"), "{text}");
    let (ok, text) = blocklist(&url, &["list"]);
    assert!(ok, "{text}");
    for e in [
        "evil.example",
        "sink.example",
        "other.example",
        "phish.example/login*",
    ] {
        assert!(text.contains(e), "{e}: {text}");
    }
    assert!(text.contains("phishing"), "{text}");

    // Node a has a file of its own besides the table; node b (3 cores oversubscribed) not.
    let own = list_dir.path().join("own.txt");
    std::fs::write(&own, "own-list.example\n").unwrap();
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(
        &dir_a,
        &url,
        "a",
        "2",
        &["--blocklist", own.to_str().unwrap()],
    );
    let mut b = node(&dir_b, &url, "b", "3", &[]);
    for s in [&a, &b] {
        refused_naming(s, "https://x.evil.example/p", "evil.example");
        refused_naming(s, "https://phish.example/login?x", "phish.example/login*");
    }
    refused_naming(&a, "https://own-list.example/", "own-list.example");
    let mut keys = Vec::new();
    for i in 0..12 {
        let target = match i % 3 {
            0 => format!("https://later.example/{i}"),
            1 => format!("https://deep.later.example/{i}"),
            _ => format!("https://fine.example/{i}"),
        };
        let body =
            Client::new(if i % 2 == 0 { &a } else { &b }).create(&json!({ "long_url": target }));
        assert_eq!(body.status, 201, "{}", body.text());
        keys.push((body.json()["key"].as_str().unwrap().to_owned(), i % 3 != 2));
    }
    for s in [&a, &b] {
        eventually("every link reached every node", || {
            keys.iter().all(|(k, _)| status_of(s, k) == 302)
        });
    }

    // Listed on the fleet: every node stops redirecting those links, and only those.
    let (ok, text) = blocklist(&url, &["add", "later.example"]);
    assert!(ok, "{text}");
    for s in [&a, &b] {
        eventually("a listed target stops redirecting on every node", || {
            keys.iter()
                .all(|(k, listed)| status_of(s, k) == if *listed { 451 } else { 302 })
        });
        refused_naming(s, "https://later.example/new", "later.example");
    }
    let r = Client::new(&b)
        .send("GET", "/readyz?verbose", false, &[], b"")
        .unwrap();
    let detail = r.json()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "blocklist")
        .map(|c| c["detail"].as_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(
        detail.starts_with("5 entries from the fleet's table"),
        "{detail}"
    );

    // A node restarted while the database is down refuses what the fleet had listed.
    b.terminate();
    cluster.pg_ctl("stop");
    b = node(&dir_b, &url, "b", "3", &[]);
    assert!(
        b.wait_stderr("blocklist as last read", Duration::from_secs(5))
            .is_some(),
        "{:?}",
        b.stderr_lines()
    );
    for (k, listed) in &keys {
        assert_eq!(status_of(&b, k), if *listed { 451 } else { 302 }, "/{k}");
    }
    cluster.pg_ctl("start");

    // Removed: every node redirects them again.
    let (ok, text) = blocklist(&url, &["remove", "LATER.example", "never.example"]);
    assert!(
        ok && text.contains("removed 1 entries") && text.contains("not listed: never.example"),
        "{text}"
    );
    for s in [&a, &b] {
        eventually("an unlisted target redirects again on every node", || {
            keys.iter().all(|(k, _)| status_of(s, k) == 302)
        });
    }
    // Node a's own file is still in force beside the table.
    refused_naming(&a, "https://own-list.example/", "own-list.example");
}
