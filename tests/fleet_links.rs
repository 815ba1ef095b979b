//! Fleet mode part 2 end to end, against a real PostgreSQL: nodes write every link change to
//! `ricochet_links` before they answer, and follow the change feed into their own shards.
//! Every redirect is still answered from the node's own memtable and tables.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{self, Client};
use common::pg::{fleet_node_args, prepare_fleet, Cluster, TestDb};
use common::Server;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest the tests wait for a change to reach another node. The feed polls every 20 ms;
/// the bound the issue sets for p99 is 250 ms, and this is only the give-up point.
const PROPAGATION_GIVE_UP: Duration = Duration::from_secs(5);
/// How long a tombstone removal may wait for other tests' transactions to end.
const GC_GIVE_UP: Duration = Duration::from_secs(60);

fn node(dir: &Path, url: &str, id: &str, cores: &str, extra: &[&str]) -> Server {
    let mut args = fleet_node_args(url, id, cores);
    args.extend(extra);
    api::start(dir, &args)
}

/// A psql session reading statements from its stdin, for a transaction a test holds open.
fn psql_session(url: &str) -> std::process::Child {
    std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql")
}

/// What `GET /{key}` answers on `s` now: the status and `Location`.
fn answer(s: &Server, key: &str) -> (u16, Option<String>) {
    let mut c = Client::new(s);
    let r = c.redirect(key);
    (r.status, r.location().map(str::to_owned))
}

/// Polls `s` until `key` answers `want` (a target, or `None` for 404); how long it took.
fn wait_for(s: &Server, key: &str, want: Option<&str>) -> Duration {
    let t = Instant::now();
    loop {
        let (status, location) = answer(s, key);
        let ok = match want {
            Some(url) => status == 302 && location.as_deref() == Some(url),
            None => status == 404,
        };
        if ok {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < PROPAGATION_GIVE_UP,
            "{key} on {}: still {status} {location:?}, want {want:?}",
            s.addr
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `ricochet fleet gc-tombstones --older-than-s 0`: removes every tombstone now (raising the
/// horizon past them), and checks it removed `want`. The removal takes only tombstones below
/// every open transaction's xmin, and the cluster is shared with the tests running beside this
/// one: one of theirs may hold xmin back for a while, so the removal is run again until
/// `want` are gone (never more), for up to [`GC_GIVE_UP`].
fn gc_tombstones_now(url: &str, want: u64) {
    let t = Instant::now();
    let mut removed = gc_tombstones_count(url);
    while removed < want && t.elapsed() < GC_GIVE_UP {
        std::thread::sleep(Duration::from_millis(100));
        removed += gc_tombstones_count(url);
    }
    assert_eq!(removed, want, "tombstones removed");
}

/// Runs `ricochet fleet gc-tombstones --older-than-s 0`; how many it removed.
fn gc_tombstones_count(url: &str) -> u64 {
    let out = std::process::Command::new(common::BIN)
        .args(["fleet", "gc-tombstones", "--pg", url, "--older-than-s", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split("removed ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {text}"))
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Three nodes: a create, a PATCH and a DELETE made on any node are served by every other
/// node; an alias taken on one node is refused (409) on another, since the database's primary
/// key decides; the database holds every change.
#[test]
fn changes_on_any_node_are_served_by_every_node() {
    let _timed = common::pg::timed();
    let Some(db) = TestDb::create("fleet_links") else {
        return;
    };
    prepare_fleet(&db.url);
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let nodes: Vec<Server> = dirs
        .iter()
        .enumerate()
        .map(|(i, (_, d))| node(d, &db.url, &format!("n{i}"), "1", &[]))
        .collect();
    let mut clients: Vec<Client> = nodes.iter().map(Client::new).collect();

    let (mut created, mut patched, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..30 {
        let (a, b, c) = (i % 3, (i + 1) % 3, (i + 2) % 3);
        let url = format!("https://example.com/v1/{i}");
        let key = if i % 2 == 0 {
            clients[a].create_ok(&url, Some(&format!("alias-{i}")))
        } else {
            clients[a].create_ok(&url, None)
        };
        for other in [b, c] {
            created.push(wait_for(&nodes[other], &key, Some(&url)));
        }
        // The alias is taken fleet-wide.
        if i % 2 == 0 {
            let r = clients[b]
                .create(&json!({"long_url": "https://example.com/x", "custom_alias": key}));
            assert_eq!(
                r.status,
                409,
                "{key} created again on another node: {}",
                r.text()
            );
        }
        let url2 = format!("https://example.com/v2/{i}");
        let r = clients[b].patch(&key, &json!({"long_url": url2}));
        assert_eq!(r.status, 200, "{}", r.text());
        for other in [a, c] {
            patched.push(wait_for(&nodes[other], &key, Some(&url2)));
        }
        let r = clients[c].delete(&key);
        assert_eq!(r.status, 204, "{}", r.text());
        for other in [a, b] {
            deleted.push(wait_for(&nodes[other], &key, None));
        }
        // PATCH and DELETE of a link deleted elsewhere: 404 on every node.
        assert_eq!(
            clients[a].patch(&key, &json!({"long_url": url})).status,
            404
        );
        assert_eq!(clients[b].delete(&key).status, 404);
    }
    for (what, v) in [
        ("create", &mut created),
        ("patch", &mut patched),
        ("delete", &mut deleted),
    ] {
        eprintln!(
            "propagation of a {what} to another node: p50 {:?} p99 {:?} max {:?} (n={})",
            percentile(v, 0.5),
            percentile(v, 0.99),
            percentile(v, 1.0),
            v.len()
        );
        assert!(
            percentile(v, 0.99) < Duration::from_millis(250),
            "{what}: p99 over the 250 ms bound"
        );
    }
    let rows = db.sql("SELECT count(*), count(*) FILTER (WHERE deleted) FROM ricochet_links");
    assert_eq!(
        rows.trim(),
        "30|30",
        "every link is in the database, tombstoned"
    );
    // The operator sees the feed in /readyz?verbose (reported, not gating).
    let r = clients[0]
        .send("GET", "/readyz?verbose", false, &[], b"")
        .unwrap();
    assert_eq!(r.status, 200);
    let feed = r.json()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "feed")
        .cloned()
        .expect("a feed check");
    let detail = feed["detail"].as_str().unwrap();
    assert!(
        detail.contains("caught up") && detail.contains("rows applied"),
        "{detail}"
    );
}

/// A node that was down catches up from its saved cursor; a node with an empty data dir
/// bootstraps from a database snapshot (the importer) and follows the feed from there; both
/// then serve every live link and no deleted one. A 2-core node drops changed keys from its
/// other core's LRU too.
#[test]
fn a_restarted_node_and_a_new_node_catch_up_from_the_feed() {
    let Some(db) = TestDb::create("fleet_catch_up") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(&dir_b, &db.url, "b", "2", &[]);
    let mut ca = Client::new(&a);
    let mut links: Vec<(String, String)> = (0..20)
        .map(|i| {
            let url = format!("https://example.com/first/{i}");
            (ca.create_ok(&url, None), url)
        })
        .collect();
    for (k, u) in &links {
        wait_for(&b, k, Some(u));
    }
    // Every connection to b, whichever core takes it, has each link cached or owned.
    for _ in 0..8 {
        for (k, u) in &links {
            assert_eq!(answer(&b, k), (302, Some(u.clone())));
        }
    }
    // A PATCH must reach every core of b, LRU included.
    let (k0, _) = links[0].clone();
    let u0 = "https://example.com/patched/0".to_owned();
    assert_eq!(ca.patch(&k0, &json!({"long_url": u0})).status, 200);
    wait_for(&b, &k0, Some(&u0));
    for _ in 0..16 {
        assert_eq!(
            answer(&b, &k0),
            (302, Some(u0.clone())),
            "a stale LRU entry"
        );
    }
    links[0].1 = u0;

    b.kill9();
    for i in 0..20 {
        let url = format!("https://example.com/second/{i}");
        links.push((ca.create_ok(&url, None), url));
    }
    let mut gone = Vec::new();
    for (k, _) in links.drain(1..6) {
        assert_eq!(ca.delete(&k).status, 204);
        gone.push(k);
    }
    for (k, u) in links.iter_mut().skip(5).take(5) {
        *u = format!("{u}/patched");
        assert_eq!(ca.patch(k, &json!({"long_url": u})).status, 200);
    }

    let b = node(&dir_b, &db.url, "b", "2", &[]);
    // a keeps writing while d joins: nothing committed around d's snapshot may be lost.
    let a_addr = a.addr;
    let writer = std::thread::spawn(move || {
        let mut c = Client::connect(a_addr).unwrap();
        (0..800)
            .map(|i| {
                let url = format!("https://example.com/during/{i}");
                (c.create_ok(&url, None), url)
            })
            .collect::<Vec<_>>()
    });
    std::thread::sleep(Duration::from_millis(20));
    let (_td, dir_d) = api::data_dir();
    let d = node(&dir_d, &db.url, "d", "1", &[]);
    // d starts from a snapshot of the live links, not the feed's history; b resumes from its
    // cursor.
    let line = d
        .wait_stderr("fleet: bootstrapped", Duration::from_secs(5))
        .expect("d bootstraps");
    let copied: u64 = line
        .split("bootstrapped ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // 35 live before the writer started, 835 after it: strictly between, d's snapshot was
    // taken while a was writing.
    eprintln!("d's snapshot copied {copied} links");
    assert!(copied >= 35, "{line}");
    assert!(b.stderr_lines().iter().all(|l| !l.contains("bootstrapped")));
    links.extend(writer.join().unwrap());
    for s in [&b, &d] {
        for (k, u) in &links {
            wait_for(s, k, Some(u));
        }
        for k in &gone {
            assert_eq!(answer(s, k).0, 404, "{k} was deleted");
        }
    }
}

/// A transaction that wrote a link and stays open holds the feed back (its row could commit
/// below rows already visible); once it commits, every node's feed gets both its row and the
/// rows committed after it: nothing is skipped. Meanwhile read-through serves the new link.
#[test]
fn an_open_transaction_holds_the_feed_back_and_nothing_is_skipped() {
    let Some(db) = TestDb::create("fleet_open_tx") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(&dir_b, &db.url, "b", "1", &[]);
    let mut ca = Client::new(&a);
    // An external writer takes its xid first and commits last.
    let mut held = psql_session(&db.url);
    use std::io::Write;
    let stdin = held.stdin.as_mut().unwrap();
    writeln!(
        stdin,
        "BEGIN; INSERT INTO ricochet_links (key, target, status, created_at) \
         VALUES ('slowwriter', 'https://example.com/slow', 302, 1);"
    )
    .unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let url = "https://example.com/after-the-slow-one";
    let k = ca.create_ok(url, Some("fastwriter"));
    assert_eq!(
        answer(&a, &k),
        (302, Some(url.to_owned())),
        "served where it was made"
    );
    std::thread::sleep(Duration::from_millis(300));
    // b serves the new link by reading it through, but its feed must not deliver it while
    // the slow transaction is open (its cursor would pass the slow row).
    assert_eq!(answer(&b, &k), (302, Some(url.to_owned())), "read through");
    assert_eq!(answer(&b, "slowwriter").0, 404, "not committed yet");
    assert_eq!(
        feed_rows(&b),
        0,
        "b's feed delivered a row above an open transaction"
    );
    // An honest lag: b is not caught up meanwhile, and names the backend that holds it.
    // (This test's database only: other tests' `psql` sessions share the cluster.)
    let holder = common::pg::psql(
        &db.url,
        "SELECT pid FROM pg_stat_activity WHERE backend_xid IS NOT NULL \
           AND application_name = 'psql' AND datname = current_database() \
           AND pid <> pg_backend_pid()",
    );
    let holder = holder.trim();
    let caught_up = metric(&b, "ricochet_fleet_feed_caught_up_unix_ms");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        metric(&b, "ricochet_fleet_feed_caught_up_unix_ms"),
        caught_up,
        "b counted itself caught up with rows waiting"
    );
    assert_eq!(
        metric(&b, "ricochet_fleet_feed_held_back_by_pid").to_string(),
        holder
    );
    let ready = Client::new(&b)
        .send("GET", "/readyz?verbose", false, &[], b"")
        .unwrap();
    assert_eq!(ready.status, 200, "reported, not gating: {}", ready.text());
    assert!(
        ready.text().contains(&format!("backend pid {holder}")),
        "{}",
        ready.text()
    );
    writeln!(stdin, "COMMIT;").unwrap();
    stdin.flush().unwrap();
    drop(held.stdin.take());
    assert!(held.wait().unwrap().success());
    let t = Instant::now();
    while feed_rows(&b) < 2 {
        assert!(t.elapsed() < PROPAGATION_GIVE_UP, "the feed did not resume");
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!(
        "both rows reached b's feed {:?} after the slow transaction committed",
        t.elapsed()
    );
    wait_for(&b, "slowwriter", Some("https://example.com/slow"));
    wait_for(&b, &k, Some(url));
    let t = Instant::now();
    while metric(&b, "ricochet_fleet_feed_held_back_by_pid") != 0 {
        assert!(
            t.elapsed() < PROPAGATION_GIVE_UP,
            "still held back after the commit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(metric(&b, "ricochet_fleet_feed_caught_up_unix_ms") > caught_up);
}

/// `ricochet_fleet_feed_rows_total` of `s`.
fn feed_rows(s: &Server) -> u64 {
    metric(s, "ricochet_fleet_feed_rows_total")
}

/// A counter of `s`'s `/metrics`.
fn metric(s: &Server, name: &str) -> u64 {
    let text = Client::new(s)
        .send("GET", "/metrics", false, &[], b"")
        .unwrap()
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Creation readability with read-through alone: node b's change feed is paused (test flag),
/// so b can only serve what it reads through on a miss. 1,000 creates on a (4 concurrent
/// creators), each followed at once by a GET on b and on c: never a 404 after a 201. Then the
/// negative pre-seed: keys asked for on b before they exist (aliases, and the generated keys of
/// the IDs a will hand out next) are served at once after their 201 (no negative cache).
#[test]
fn read_through_serves_every_link_after_its_201_without_the_feed() {
    let Some(db) = TestDb::create("fleet_read_through") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (tb, dir_b) = api::data_dir();
    let (_tc, dir_c) = api::data_dir();
    let pause = tb.path().join("pause-feed");
    std::fs::write(&pause, b"").unwrap();
    let pause_arg = pause.to_str().unwrap().to_owned();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(
        &dir_b,
        &db.url,
        "b",
        "2",
        &["--test-fleet-pause-feed", &pause_arg],
    );
    let c = node(&dir_c, &db.url, "c", "1", &[]);
    let creators: Vec<_> = (0..4)
        .map(|t| {
            let addrs = (a.addr, b.addr, c.addr);
            std::thread::spawn(move || {
                let connect = |addr| Client::connect(addr).unwrap();
                let (mut ca, mut cb, mut cc) =
                    (connect(addrs.0), connect(addrs.1), connect(addrs.2));
                for i in 0..250 {
                    let url = format!("https://example.com/rt/{t}/{i}");
                    let alias = (i % 5 == 0).then(|| format!("rt-{t}-{i}"));
                    let key = ca.create_ok(&url, alias.as_deref());
                    for (name, cl) in [("b", &mut cb), ("c", &mut cc)] {
                        let r = cl.redirect(&key);
                        assert_eq!(
                            (r.status, r.location()),
                            (302, Some(url.as_str())),
                            "GET /{key} on {name} right after its 201"
                        );
                    }
                    // The API reads through too (every 10th, to keep the test short).
                    if i % 10 == 3 {
                        let r = cb.get_link(&key);
                        assert_eq!(r.status, 200, "GET /api/v1/urls/{key} on b: {}", r.text());
                        assert_eq!(r.json()["long_url"], url.as_str());
                    }
                }
            })
        })
        .collect();
    for t in creators {
        t.join().unwrap();
    }
    // A DELETE on a: b (no feed) reads the tombstone through.
    let mut ca = Client::new(&a);
    let k = ca.create_ok("https://example.com/rt/gone", Some("rt-gone"));
    assert_eq!(answer(&b, &k).0, 302);
    assert_eq!(ca.delete(&k).status, 204);
    assert_eq!(answer(&b, &k).0, 404, "a deleted link read through");
    assert_eq!(
        Client::new(&b).get_link(&k).status,
        404,
        "the API reads the tombstone"
    );
    // The stats API's existence check reads through as well (b's feed is paused).
    let k2 = ca.create_ok("https://example.com/rt/stats", Some("rt-stats"));
    let r = Client::new(&b)
        .send("GET", &format!("/api/v1/urls/{k2}/stats"), true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // Negative pre-seed, aliases.
    let aliases: Vec<String> = (0..20).map(|i| format!("future-{i}")).collect();
    for k in &aliases {
        assert_eq!(answer(&b, k).0, 404, "{k} does not exist yet");
    }
    for k in &aliases {
        ca.create_ok(&format!("https://example.com/{k}"), Some(k));
        let url = format!("https://example.com/{k}");
        assert_eq!(answer(&b, k), (302, Some(url)), "{k} after its 201");
    }
    // Negative pre-seed, generated keys: the IDs a hands out next, decoded to keys.
    let keygen = api::keygen(&dir_a);
    let last = ca.create_ok("https://example.com/rt/probe", None);
    let next_id = api::id_of(&keygen, &last) + 1;
    let future: Vec<String> = (next_id..next_id + 10)
        .map(|id| String::from_utf8(keygen.key_for(id).to_vec()).unwrap())
        .collect();
    for k in &future {
        assert_eq!(answer(&b, k).0, 404, "{k}'s ID is not issued yet");
    }
    for (i, k) in future.iter().enumerate() {
        let url = format!("https://example.com/rt/future/{i}");
        let made = ca.create_ok(&url, None);
        assert_eq!(&made, k, "a hands out its IDs in order within its segment");
        assert_eq!(answer(&b, k), (302, Some(url)), "{k} after its 201");
    }
    eprintln!(
        "b read through with {} queries for {} keys",
        metric(&b, "ricochet_fleet_read_queries_total"),
        metric(&b, "ricochet_fleet_read_keys_total")
    );
    assert_eq!(feed_rows(&b), 0, "b's feed was paused");
    // The feed resumes: b catches up and keeps serving.
    std::fs::remove_file(&pause).unwrap();
    wait_for(&b, "future-0", Some("https://example.com/future-0"));
}

/// kill -9 of a node in the middle of creates: every link it acknowledged (201) is in the
/// database and redirects on every other node, and on the node itself after its restart.
#[test]
fn a_node_killed_mid_creates_lost_no_acknowledged_link() {
    let Some(db) = TestDb::create("fleet_kill_mid_creates") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let (_tc, dir_c) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "2", &[]);
    let b = node(&dir_b, &db.url, "b", "1", &[]);
    let c = node(&dir_c, &db.url, "c", "1", &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creators: Vec<_> = (0..8)
        .map(|t| {
            let (addr, stop) = (a.addr, stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut cl) = Client::connect(addr) else {
                    return acked;
                };
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let url = format!("https://example.com/kill/{t}/{i}");
                    match cl.try_create(&json!({ "long_url": url })) {
                        Ok(r) if r.status == 201 => acked.push((r.key(), url)),
                        Ok(r) => panic!("create answered {}: {}", r.status, r.text()),
                        Err(_) => break, // the node is gone
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    a.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<(String, String)> = creators
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(
        acked.len() > 100,
        "only {} creates before the kill",
        acked.len()
    );
    let in_db: std::collections::HashMap<String, String> = db
        .sql("SELECT key, target FROM ricochet_links WHERE NOT deleted")
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(k, t)| (k.to_owned(), t.to_owned()))
        .collect();
    for (k, u) in &acked {
        assert_eq!(
            in_db.get(k),
            Some(u),
            "{k} was acknowledged but is not in the database"
        );
    }
    let a = node(&dir_a, &db.url, "a", "2", &[]);
    for s in [&a, &b, &c] {
        for (k, u) in &acked {
            wait_for(s, k, Some(u));
        }
    }
    eprintln!(
        "{} acknowledged creates before kill -9, {} rows in the database; all served by 3 nodes",
        acked.len(),
        in_db.len()
    );
}

/// An Idempotency-Key retried on another node replays the first node's link (the claim lives
/// in the database with the link); the same key with another request is a 422 on any node;
/// the same request sent to two nodes at once makes one link; and an alias conflict under an
/// Idempotency-Key leaves no claim behind.
/// Hole 11: a retried create whose link was deleted and created again by someone else within
/// the same second is not told it created the other link. The database says which
/// transaction created each incarnation, not only its second. Tried until the three writes
/// fall in one database second (checked from the rows), on two nodes.
#[test]
fn an_idempotent_retry_after_a_same_second_re_creation_is_not_the_other_link() {
    let Some(db) = TestDb::create("fleet_idem_same_second") else {
        return;
    };
    prepare_fleet(&db.url);
    let dirs: Vec<_> = (0..2).map(|_| api::data_dir()).collect();
    let nodes: Vec<Server> = dirs
        .iter()
        .enumerate()
        .map(|(i, (_, d))| node(d, &db.url, &format!("s{i}"), "1", &[]))
        .collect();
    let mut cl: Vec<Client> = nodes.iter().map(Client::new).collect();
    for round in 0..20 {
        let alias = format!("same-second-{round}");
        let mine = json!({"long_url": "https://mine.example/", "custom_alias": alias});
        let r = cl[0].try_create_idem(&mine, &alias).unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(cl[1].delete(&alias).status, 204);
        cl[1].create_ok("https://theirs.example/", Some(&alias));
        let seconds = db.sql(&format!(
            "SELECT (SELECT created_at FROM ricochet_idempotency WHERE key = '{alias}') = \
                    (SELECT created_at FROM ricochet_links WHERE key = '{alias}')"
        ));
        if seconds != "t" {
            continue; // A second boundary fell between: not the case under test.
        }
        for c in cl.iter_mut() {
            let r = c.try_create_idem(&mine, &alias).unwrap();
            assert_eq!(
                r.status,
                404,
                "the replay answered with another request's link: {}",
                r.text()
            );
        }
        return;
    }
    panic!("no round fell within one second");
}

#[test]
fn an_idempotency_key_retried_on_another_node_replays_the_same_link() {
    let Some(db) = TestDb::create("fleet_idem") else {
        return;
    };
    prepare_fleet(&db.url);
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let nodes: Vec<Server> = dirs
        .iter()
        .enumerate()
        .map(|(i, (_, d))| node(d, &db.url, &format!("i{i}"), "1", &[]))
        .collect();
    let mut cl: Vec<Client> = nodes.iter().map(Client::new).collect();
    let body = json!({"long_url": "https://example.com/idem"});
    let first = cl[0].try_create_idem(&body, "retry-1").unwrap();
    assert_eq!(first.status, 201, "{}", first.text());
    let key = first.key();
    for c in cl.iter_mut().skip(1) {
        let r = c.try_create_idem(&body, "retry-1").unwrap();
        assert_eq!(
            (r.status, r.key()),
            (201, key.clone()),
            "a retry on another node"
        );
    }
    for c in cl.iter_mut() {
        let r = c
            .try_create_idem(&json!({"long_url": "https://example.com/other"}), "retry-1")
            .unwrap();
        assert_eq!(r.status, 422, "another request under the key: {}", r.text());
    }
    // The same new request to two nodes at once: one link.
    for round in 0..20 {
        let idem = format!("race-{round}");
        let body = json!({"long_url": format!("https://example.com/race/{round}")});
        let runs: Vec<_> = [nodes[1].addr, nodes[2].addr]
            .into_iter()
            .map(|addr| {
                let (body, idem) = (body.clone(), idem.clone());
                std::thread::spawn(move || {
                    let r = Client::connect(addr)
                        .unwrap()
                        .try_create_idem(&body, &idem)
                        .unwrap();
                    assert_eq!(r.status, 201, "{}", r.text());
                    r.key()
                })
            })
            .collect();
        let keys: Vec<String> = runs.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            keys[0], keys[1],
            "round {round}: two links for one Idempotency-Key"
        );
    }
    let links = db.sql("SELECT count(*) FROM ricochet_links WHERE target LIKE '%/race/%'");
    assert_eq!(links.trim(), "20", "one link per raced request");
    // An alias taken: 409, and the key is not burnt (the claim was rolled back with it).
    cl[0].create_ok("https://example.com/taken", Some("taken-alias"));
    let alias = json!({"long_url": "https://example.com/t2", "custom_alias": "taken-alias"});
    let r = cl[1].try_create_idem(&alias, "alias-1").unwrap();
    assert_eq!(r.status, 409, "{}", r.text());
    let claims = db.sql("SELECT count(*) FROM ricochet_idempotency WHERE key = 'taken-alias'");
    assert_eq!(claims.trim(), "0", "a claim without its link");
}

/// API keys in the database: a key made with `ricochet fleet keys create` while two nodes run
/// is accepted by both within about a second; revoked with `fleet keys revoke`, it is refused
/// by both within about a second (measured).
#[test]
fn a_fleet_api_key_works_on_every_node_and_its_revocation_too() {
    let Some(db) = TestDb::create("fleet_keys") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let nodes = [
        node(&dir_a, &db.url, "a", "1", &[]),
        node(&dir_b, &db.url, "b", "2", &[]),
    ];
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(common::BIN)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let secret = cli(&["fleet", "keys", "create", "--pg", &db.url, "shared"]);
    let secret = secret.trim().to_owned();
    assert!(secret.starts_with("rk_"), "{secret}");
    let id = secret.split('_').nth(1).unwrap().to_owned();
    assert!(cli(&["fleet", "keys", "list", "--pg", &db.url]).contains(&id));
    // `status` of a GET of the link list with `secret`, on `s`.
    let status = |s: &Server| {
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        use std::io::{Read, Write};
        write!(
            c,
            "GET /api/v1/urls?limit=1 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {secret}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out[9..12].parse::<u16>().unwrap()
    };
    let until = |want: u16| {
        let t = Instant::now();
        for s in &nodes {
            while status(s) != want {
                assert!(t.elapsed() < Duration::from_secs(5), "still not {want}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        t.elapsed()
    };
    let took = until(200);
    eprintln!("a new fleet key was accepted by both nodes after {took:?}");
    cli(&["fleet", "keys", "revoke", "--pg", &db.url, &id]);
    let took = until(401);
    eprintln!("a revoked fleet key was refused by both nodes after {took:?}");
    assert!(
        took < Duration::from_millis(1500),
        "revocation took {took:?}"
    );
    let e = std::process::Command::new(common::BIN)
        .args(["fleet", "keys", "revoke", "--pg", &db.url, "nosuchkey"])
        .output()
        .unwrap();
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("no fleet API key"));
}

/// A feed cursor ahead of the database (the database was restored from an older backup, so
/// rows up to the cursor are gone there, and following on would skip every row until its
/// transaction ids pass the cursor) is not followed: at start the node bootstraps its links
/// again from the database as it is, so a link the restore lost is gone here too.
#[test]
fn a_cursor_ahead_of_the_database_bootstraps_again() {
    let Some(db) = TestDb::create("fleet_cursor_ahead") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "a", "1", &[]);
    let mut c = Client::new(&s);
    c.create_ok("https://example.com/x", Some("before-restore"));
    c.create_ok("https://example.com/y", Some("lost-in-restore"));
    let t = Instant::now();
    while !dir.join("fleet-feed.cursor").exists() {
        assert!(t.elapsed() < PROPAGATION_GIVE_UP, "no cursor saved");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.terminate();
    // The "restore": one row is gone, and the database's transaction ids are behind the cursor.
    db.sql("DELETE FROM ricochet_links WHERE key = 'lost-in-restore'");
    let body = "ricochet-feed-cursor 1 999999999999 zzz";
    let text = format!("{body} {:08x}\n", crc32c::crc32c(body.as_bytes()));
    std::fs::write(dir.join("fleet-feed.cursor"), text).unwrap();
    let s = node(&dir, &db.url, "a", "1", &[]);
    assert!(
        s.wait_stderr("Bootstrapping its links again", Duration::from_secs(1))
            .is_some(),
        "{:?}",
        s.stderr_lines()
    );
    assert_eq!(answer(&s, "before-restore").0, 302);
    assert_eq!(answer(&s, "lost-in-restore").0, 404);
    let cursor = std::fs::read_to_string(dir.join("fleet-feed.cursor")).unwrap();
    assert!(!cursor.contains("999999999999"), "{cursor}");
    // What the node held and the restored database lacks is listed for the operator, as a
    // running node's regeneration lists it; the copy it was taken from is gone.
    let lost: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(ricochet::fleet_mode::lost::LOST_FILE_PREFIX)
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].contains("\"lost-in-restore\"") && !lost[0].contains("before-restore"),
        "{lost:?}"
    );
    assert!(!dir
        .join(ricochet::fleet_mode::files::HELD_BEFORE_REBOOTSTRAP_FILE)
        .exists());
}

/// Concurrent plain creates on one node share one statement per writer round: each still gets
/// its own verdict (201, or 409 for an alias taken, here by another node) and its own row.
#[test]
fn concurrent_creates_are_each_judged_in_a_shared_statement() {
    let Some(db) = TestDb::create("fleet_batched_creates") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "2", &[]);
    let b = node(&dir_b, &db.url, "b", "1", &[]);
    let mut cb = Client::new(&b);
    for i in (0..64).filter(|i| i % 2 == 0) {
        cb.create_ok(
            &format!("https://example.com/b/{i}"),
            Some(&format!("batch-{i}")),
        );
    }
    for round in 0..3 {
        let runs: Vec<_> = (0..32)
            .map(|t| {
                let addr = a.addr;
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr).unwrap();
                    let mut got = Vec::new();
                    for i in (t * 2)..(t * 2 + 2) {
                        let alias = format!("batch-{i}");
                        let body = json!({"long_url": format!("https://example.com/a/{round}/{i}"),
                                          "custom_alias": alias});
                        got.push((i, c.create(&body).status));
                    }
                    got
                })
            })
            .collect();
        for (i, status) in runs.into_iter().flat_map(|t| t.join().unwrap()) {
            let want = match (round, i % 2) {
                (_, 0) => 409, // b made it
                (0, _) => 201,
                _ => 409, // a made it in round 0
            };
            assert_eq!(status, want, "round {round}, batch-{i}");
        }
    }
    let rows = db.sql(
        "SELECT count(*) FILTER (WHERE target LIKE '%/b/%'), \
                count(*) FILTER (WHERE target LIKE '%/a/0/%') \
           FROM ricochet_links WHERE key LIKE 'batch-%'",
    );
    assert_eq!(rows.trim(), "32|32");
    let batched = metric(&a, "ricochet_fleet_batched_creates_total");
    eprintln!("{batched} of a's creates shared a statement");
    assert!(batched > 0, "no round batched its creates");
}

/// `n` pseudo-random 7-character base62 keys (a scanner's guesses), distinct per `seed`.
fn random_keys(seed: u64, n: usize) -> Vec<String> {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            (0..7)
                .map(|_| {
                    // xorshift64
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ALPHABET[(x % 62) as usize] as char
                })
                .collect()
        })
        .collect()
}

/// Unknown-key floods: random 7-character keys on a 2-core node are answered 404 from a fresh
/// read of the namespaces' ceilings, with no read-through query (the IDs they decode to are
/// above every ceiling); a key whose ID is below it is still asked for. Once the ceilings
/// read is stale (the feed paused: no reads), the same keys are read through again, never
/// guessed. Fleet mode refuses custom aliases of the generated shape, which would defeat it.
#[test]
fn never_issued_generated_keys_are_answered_without_a_query() {
    let Some(db) = TestDb::create("fleet_floods") else {
        return;
    };
    prepare_fleet(&db.url);
    let dir = tempfile::tempdir().unwrap();
    let pause = dir.path().join("pause-feed");
    let pause_arg = pause.to_str().unwrap().to_owned();
    let s = node(
        &dir.path().join("a"),
        &db.url,
        "a",
        "2",
        &["--test-fleet-pause-feed", &pause_arg],
    );
    let made = Client::new(&s).create_ok("https://example.com/real", None);
    // Ceilings are read once the feed caught up, then every 100 ms.
    let t = Instant::now();
    while metric(&s, "ricochet_fleet_shed_lookups_total") == 0 {
        assert!(t.elapsed() < PROPAGATION_GIVE_UP, "nothing is ever shed");
        let _ = answer(&s, &random_keys(t.elapsed().as_nanos() as u64, 1)[0]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (q0, shed0) = (
        metric(&s, "ricochet_fleet_read_queries_total"),
        metric(&s, "ricochet_fleet_shed_lookups_total"),
    );
    let keys = random_keys(1, 2000);
    let mut c = Client::new(&s);
    for k in &keys {
        assert_eq!(c.redirect(k).status, 404, "{k}");
    }
    let (q1, shed1) = (
        metric(&s, "ricochet_fleet_read_queries_total"),
        metric(&s, "ricochet_fleet_shed_lookups_total"),
    );
    // The namespace [1, 1e9) covers 1e9 / 62^7 of the ID space: ~0.6 of 2,000 keys.
    assert!(q1 - q0 <= 10, "{} queries for 2,000 random keys", q1 - q0);
    assert!(shed1 - shed0 >= 1990, "{} shed of 2,000", shed1 - shed0);
    // A real key is still served, and a miss below the ceiling is still asked for (the key
    // of an ID far ahead of a's segment, never issued).
    assert_eq!(answer(&s, &made).0, 302);
    let keygen = api::keygen(dir.path().join("a").as_path());
    let below = String::from_utf8(keygen.key_for(500_000_000).to_vec()).unwrap();
    let q = metric(&s, "ricochet_fleet_read_keys_total");
    assert_eq!(answer(&s, &below).0, 404);
    assert_eq!(metric(&s, "ricochet_fleet_read_keys_total"), q + 1);
    // A custom alias of the generated shape is refused; others are fine.
    let r = c.create(&json!({"long_url": "https://example.com/a", "custom_alias": "Abc1234"}));
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(
        r.text().contains("shape of a generated key"),
        "{}",
        r.text()
    );
    c.create_ok("https://example.com/a", Some("Abc-1234"));
    c.create_ok("https://example.com/a", Some("Abc12345"));
    // A stale read sheds nothing: every key is read through (and still 404).
    std::fs::write(&pause, b"").unwrap();
    std::thread::sleep(Duration::from_millis(
        fleet::ceiling::HIGH_WATER_FRESH_MS + 300,
    ));
    let (q0, shed0) = (
        metric(&s, "ricochet_fleet_read_keys_total"),
        metric(&s, "ricochet_fleet_shed_lookups_total"),
    );
    for k in &keys[..100] {
        assert_eq!(c.redirect(k).status, 404, "{k}");
    }
    assert_eq!(metric(&s, "ricochet_fleet_shed_lookups_total"), shed0);
    assert_eq!(metric(&s, "ricochet_fleet_read_keys_total") - q0, 100);
    // Fresh again: shed again.
    std::fs::remove_file(&pause).unwrap();
    let t = Instant::now();
    while metric(&s, "ricochet_fleet_shed_lookups_total") == shed0 {
        assert!(t.elapsed() < PROPAGATION_GIVE_UP, "shedding never resumed");
        let _ = answer(&s, &keys[100]);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Tombstone retention: a node stopped while links are deleted and their tombstones then
/// removed (`ricochet fleet gc-tombstones`) could never learn of those deletes from the feed.
/// At its next start its cursor is not past the tombstone horizon, so it wipes its links and
/// bootstraps them again from a snapshot: it serves every live link at its newest target and
/// none of the deleted ones (without the re-bootstrap they would still redirect there).
#[test]
fn a_node_behind_the_tombstone_horizon_bootstraps_again() {
    let Some(db) = TestDb::create("fleet_tombstones") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(&dir_b, &db.url, "b", "2", &[]);
    let mut ca = Client::new(&a);
    let mut links: Vec<(String, String)> = (0..20)
        .map(|i| {
            let url = format!("https://example.com/t/{i}");
            (ca.create_ok(&url, None), url)
        })
        .collect();
    for (k, u) in &links {
        wait_for(&b, k, Some(u));
    }
    b.kill9();
    let gone: Vec<String> = links.drain(..5).map(|(k, _)| k).collect();
    for k in &gone {
        assert_eq!(ca.delete(k).status, 204);
    }
    for (k, u) in links.iter_mut().take(2) {
        *u = format!("{u}/patched");
        assert_eq!(ca.patch(k, &json!({"long_url": u})).status, 200);
    }
    for i in 0..5 {
        let url = format!("https://example.com/t/new/{i}");
        links.push((ca.create_ok(&url, None), url));
    }
    // A transaction opened after the deletes stays open throughout: every snapshot's xmin (so
    // b's new cursor) stays at it. The removal takes only tombstones below xmin, so that
    // cursor is past the horizon it sets; b must neither regenerate right after its bootstrap
    // nor bootstrap again at its next start. (Before removals kept below xmin, a transaction
    // older than the deletes held the cursor below the horizon: the removal count, schema
    // 10, covered that case.)
    let mut old_tx = psql_session(&db.url);
    {
        use std::io::Write;
        let stdin = old_tx.stdin.as_mut().unwrap();
        writeln!(stdin, "BEGIN; SELECT pg_current_xact_id();").unwrap();
        stdin.flush().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    gc_tombstones_now(&db.url, 5);
    assert_eq!(
        db.sql("SELECT count(*) FROM ricochet_links WHERE deleted"),
        "0"
    );

    let b = node(&dir_b, &db.url, "b", "2", &[]);
    assert!(
        b.wait_stderr("Bootstrapping its links again", Duration::from_secs(1))
            .is_some(),
        "{:?}",
        b.stderr_lines()
    );
    assert!(
        b.wait_stderr("regenerating this node's links", Duration::from_millis(500))
            .is_none(),
        "a fresh bootstrap regenerated: {:?}",
        b.stderr_lines()
    );
    assert!(!dir_b
        .join(ricochet::fleet_mode::files::REBOOTSTRAP_MARKER)
        .exists());
    let held = ricochet::fleet_mode::files::load_identity(&dir_b)
        .unwrap()
        .unwrap();
    assert_eq!(held.removals, Some(1), "{held:?}");
    for (k, u) in &links {
        assert_eq!(answer(&b, k), (302, Some(u.clone())), "{k} on b");
    }
    for k in &gone {
        assert_eq!(answer(&b, k).0, 404, "{k} was deleted while b was away");
    }
    // Started again, b is past the horizon: no second bootstrap.
    let t = b.terminate();
    assert!(t.success());
    let b = node(&dir_b, &db.url, "b", "2", &[]);
    assert!(b
        .wait_stderr("Bootstrapping its links again", Duration::from_millis(300))
        .is_none());
    assert_eq!(answer(&b, &links[0].0), (302, Some(links[0].1.clone())));
    drop(old_tx.stdin.take()); // psql ends; its transaction rolls back
    assert!(old_tx.wait().unwrap().success());
}

/// A running node whose cursor falls behind the tombstone horizon (its feed paused while
/// deletes are made elsewhere and their tombstones removed) regenerates its links from a
/// database snapshot while it serves: a fresh table generation swapped in on every core (3
/// here, more than the machine's CPUs), not ready meanwhile, 0 errors on a known key under
/// load throughout. Afterwards it serves every live link at its current target and no
/// deleted one, keeps the writes it made itself while paused, compacts again, and a restart
/// changes nothing (the superseded log is gone; no bootstrap).
#[test]
fn a_running_node_behind_the_horizon_regenerates_while_serving() {
    let Some(db) = TestDb::create("fleet_regen") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (tb, dir_b) = api::data_dir();
    let pause = tb.path().join("pause-feed");
    let pause_arg = pause.to_str().unwrap().to_owned();
    let b_flags = [
        "--test-fleet-pause-feed",
        &pause_arg,
        "--test-oversubscribe",
        "--compact-entries",
        "8",
    ];
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(&dir_b, &db.url, "b", "3", &b_flags);
    let (mut ca, mut cb) = (Client::new(&a), Client::new(&b));
    let mut links: Vec<(String, String)> = (0..40)
        .map(|i| {
            let url = format!("https://example.com/r/{i}");
            (ca.create_ok(&url, None), url)
        })
        .collect();
    for (k, u) in &links {
        wait_for(&b, k, Some(u));
    }
    // A known key under load on b from here to the end of the regeneration.
    let known = links.pop().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, addr_b) = (stop.clone(), b.addr);
        let (key, url) = known.clone();
        std::thread::spawn(move || {
            let (mut answered, mut wrong) = (0u64, Vec::new());
            let mut c = Client::connect(addr_b).expect("connect");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = c.redirect(&key);
                answered += 1;
                if r.status != 302 || r.location() != Some(url.as_str()) {
                    wrong.push(r.status);
                }
            }
            (answered, wrong)
        })
    };

    std::fs::write(&pause, b"").unwrap();
    std::thread::sleep(Duration::from_millis(200)); // b's follower sees the pause
    let gone: Vec<String> = links.drain(..5).map(|(k, _)| k).collect();
    for k in &gone {
        assert_eq!(ca.delete(k).status, 204);
    }
    for (k, u) in links.iter_mut().take(3) {
        *u = format!("{u}/patched-on-a");
        assert_eq!(ca.patch(k, &json!({"long_url": u})).status, 200);
    }
    for i in 0..3 {
        let url = format!("https://example.com/r/a-new/{i}");
        links.push((ca.create_ok(&url, None), url));
    }
    // b's own writes while its feed is paused: committed, applied on b.
    {
        let (k, u) = &mut links[5];
        *u = format!("{u}/patched-on-b");
        assert_eq!(cb.patch(k, &json!({"long_url": u})).status, 200);
    }
    for i in 0..3 {
        let url = format!("https://example.com/r/b-new/{i}");
        links.push((cb.create_ok(&url, None), url));
    }
    gc_tombstones_now(&db.url, 5);
    // The hazard is real: b still redirects links deleted elsewhere.
    assert_eq!(answer(&b, &gone[0]).0, 302, "b has not seen the delete");

    // Creates on b while it regenerates: each must redirect on b after its 201.
    let writer = {
        let (stop, addr_b) = (stop.clone(), b.addr);
        std::thread::spawn(move || {
            let mut c = Client::connect(addr_b).expect("connect");
            let mut made = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let url = format!("https://example.com/r/during/{}", made.len());
                let key = c.create_ok(&url, None);
                let r = c.redirect(&key);
                assert_eq!(
                    r.location(),
                    Some(url.as_str()),
                    "{key} right after its 201"
                );
                made.push((key, url));
            }
            made
        })
    };
    std::fs::remove_file(&pause).unwrap();
    let t = Instant::now();
    // Readiness meanwhile: whenever `/readyz?verbose` reports the regeneration, it is 503 (it
    // may serve links deleted elsewhere until the swap), and it is seen at least once.
    let mut probe = Client::new(&b);
    let mut not_ready_while_regenerating = 0;
    while metric(&b, "ricochet_fleet_regenerations_total") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no regeneration: {:?}",
            b.stderr_lines()
        );
        let r = probe
            .send("GET", "/readyz?verbose", false, &[], b"")
            .unwrap();
        if r.text().contains("REGENERATING") {
            assert_eq!(r.status, 503, "ready while regenerating: {}", r.text());
            not_ready_while_regenerating += 1;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        not_ready_while_regenerating > 0,
        "/readyz never seen during the regeneration"
    );
    let took = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (answered, wrong) = load.join().unwrap();
    let made = writer.join().unwrap();
    assert!(!made.is_empty());
    links.extend(made);
    assert!(answered > 100, "only {answered} lookups");
    assert!(
        wrong.is_empty(),
        "{} of {answered} wrong: {wrong:?}",
        wrong.len()
    );
    std::thread::sleep(Duration::from_millis(50)); // the log line follows the counter
    let all_said = b.stderr_lines();
    // A compaction logged after the swap, before this read, counts for the check below.
    let compacted_since_swap = all_said
        .iter()
        .skip_while(|l| !l.contains("regenerated this node's links"))
        .any(|l| l.contains("compacted"));
    let said: Vec<String> = all_said
        .into_iter()
        .filter(|l| l.contains("regenerat") || l.contains("tombstone horizon"))
        .collect();
    assert!(
        said.iter()
            .any(|l| l.contains("regenerated this node's links")),
        "{said:?}"
    );
    eprintln!("regenerated in {took:?}, {answered} lookups of a known key meanwhile");
    for l in &said {
        eprintln!("b: {l}");
    }
    // Ready again once the checks have passed for the rise delay.
    let t = Instant::now();
    while cb.send("GET", "/readyz", false, &[], b"").unwrap().status != 200 {
        let rise = Duration::from_millis(ricochet::node::probes::READY_RISE_MS);
        assert!(t.elapsed() < rise * 5, "not ready again after the swap");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!dir_b
        .join(ricochet::fleet_mode::files::REBOOTSTRAP_MARKER)
        .exists());
    assert!(!dir_b.join(ricochet::fleet_mode::files::REGEN_DIR).exists());
    let check = |b: &Server, links: &[(String, String)]| {
        for (k, u) in links {
            assert_eq!(answer(b, k), (302, Some(u.clone())), "{k} on b");
        }
        for k in &gone {
            assert_eq!(answer(b, k).0, 404, "{k} was deleted elsewhere");
        }
    };
    check(&b, &links);
    // The feed goes on from the resume cursor; b writes and compacts again.
    let (k, u) = &mut links[6];
    *u = format!("{u}/after");
    assert_eq!(ca.patch(k, &json!({"long_url": u})).status, 200);
    wait_for(&b, k, Some(u));
    for i in 0..20 {
        let url = format!("https://example.com/r/b-after/{i}");
        links.push((cb.create_ok(&url, None), url));
    }
    assert!(
        compacted_since_swap
            || b.wait_stderr("compacted", Duration::from_secs(10))
                .is_some(),
        "no compaction after the regeneration"
    );
    check(&b, &links);
    // Restarted (SIGTERM, then kill -9): the same answers, and no bootstrap at start.
    assert!(b.terminate().success());
    let b = node(&dir_b, &db.url, "b", "3", &b_flags);
    assert!(b
        .wait_stderr("Bootstrapping its links again", Duration::from_millis(300))
        .is_none());
    check(&b, &links);
    b.kill9();
    let b = node(&dir_b, &db.url, "b", "3", &b_flags);
    check(&b, &links);
}

/// The fleet database replaced under a running node by another database of the same name (a
/// dump restored into a new one: here a copy that lacks one link): the node notices when it
/// reconnects, serves what it holds meanwhile, and regenerates its links from the new
/// database; restarted on it, it does not bootstrap again; started on yet another copy, it
/// bootstraps at start. The cursor alone could not tell: the copy's transaction ids go on
/// from the same cluster's.
#[test]
fn a_node_whose_database_is_replaced_takes_its_links_from_the_new_one() {
    let Some(db) = TestDb::create("fleet_identity") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "a", "2", &[]);
    let mut c = Client::new(&s);
    let kept: Vec<String> = (0..10)
        .map(|i| {
            c.create_ok(
                &format!("https://example.com/i/{i}"),
                Some(&format!("kept-{i}")),
            )
        })
        .collect();
    c.create_ok("https://example.com/lost", Some("lost"));
    let t = Instant::now();
    while feed_rows(&s) < 11 {
        assert!(
            t.elapsed() < PROPAGATION_GIVE_UP,
            "the feed did not catch up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let first = ricochet::fleet_mode::files::load_identity(&dir)
        .unwrap()
        .expect("an identity");

    db.replace_with_copy();
    db.sql("DELETE FROM ricochet_links WHERE key = 'lost'");
    let t = Instant::now();
    while metric(&s, "ricochet_fleet_regenerations_total") == 0 {
        assert_eq!(
            answer(&s, &kept[0]).0,
            302,
            "a held link while the database changed"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no regeneration: {:?}",
            s.stderr_lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        answer(&s, "lost").0,
        404,
        "gone from the new database, gone here"
    );
    for k in &kept {
        assert_eq!(answer(&s, k).0, 302, "{k}");
    }
    let second = ricochet::fleet_mode::files::load_identity(&dir)
        .unwrap()
        .unwrap();
    assert_ne!(first, second);
    // A writer session ended with the old database may answer its first write 503 (outcome
    // unknown); the client retries with an Idempotency-Key, as that answer asks.
    let mut c = Client::new(&s);
    let body = json!({"long_url": "https://example.com/after"});
    let t = Instant::now();
    let after = loop {
        let r = c.try_create_idem(&body, "after-1").unwrap();
        if r.status == 201 || r.status == 200 {
            break r.key();
        }
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(t.elapsed() < PROPAGATION_GIVE_UP, "writes do not resume");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        db.sql(&format!(
            "SELECT count(*) FROM ricochet_links WHERE key = '{after}'"
        )),
        "1"
    );
    assert!(s.terminate().success());
    let s = node(&dir, &db.url, "a", "2", &[]);
    assert!(s
        .wait_stderr("Bootstrapping its links again", Duration::from_millis(300))
        .is_none());
    assert_eq!(answer(&s, &after).0, 302);
    assert!(s.terminate().success());

    db.replace_with_copy();
    db.sql("DELETE FROM ricochet_links WHERE key = 'kept-1'");
    let s = node(&dir, &db.url, "a", "2", &[]);
    let said = s.wait_stderr("Bootstrapping its links again", Duration::from_secs(1));
    assert!(
        said.as_deref()
            .is_some_and(|l| l.contains(&second.identity)),
        "{said:?}"
    );
    assert_eq!(answer(&s, "kept-1").0, 404);
    assert_eq!(answer(&s, "kept-2").0, 302);
    assert_eq!(answer(&s, &after).0, 302);
}

/// The database's clock decides expiry in the SQL that revives, edits and deletes, not the
/// node's: a node whose clock runs 10 minutes ahead (Debian's `faketime`) neither takes over
/// the key of a link that has 5 minutes left by the database's clock (its create is told the
/// alias is taken) nor is told such a link is gone when it edits or deletes it; every node
/// ends at what the database holds.
#[test]
fn a_node_whose_clock_runs_ahead_judges_expiry_by_the_databases_clock() {
    let Some(db) = TestDb::create("fleet_clock_ahead") else {
        return;
    };
    // libfaketime preloaded into the server itself (the `faketime` wrapper forks, so killing
    // it would leave the server running).
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libfaketime is needed (apt install faketime)");
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let mut cmd = std::process::Command::new(common::server_bin());
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME", "+10m")
        // Only the wall clock: io_uring timeouts are the kernel's monotonic clock.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("RICOCHET_API_KEY", api::API_KEY);
    let args = fleet_node_args(&db.url, "b", "1");
    let b = Server::try_start_command(cmd, &dir_b, &args).expect("node b under faketime");
    let now = ricochet::api::timefmt::now_s();
    let mut ca = Client::new(&a);
    let mut cb = Client::new(&b);
    // B's clock really runs ahead (its Date header), or this test could not fail.
    let date = cb.redirect("no-such-link");
    let b_now = httpdate::parse_http_date(date.header("date").expect("a Date header"))
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        (now + 540..now + 660).contains(&b_now),
        "b's clock is not 10 minutes ahead: {b_now} vs {now}"
    );
    let r = ca.create(&json!({
        "long_url": "https://example.com/five-minutes-left",
        "custom_alias": "clock-ahead",
        "expires_at": ricochet::api::timefmt::format_rfc3339_utc(now + 300),
    }));
    assert_eq!(r.status, 201, "{}", r.text());
    // B's clock says it expired 5 minutes ago; the database's says it has 5 minutes left.
    let r = cb.create(&json!({
        "long_url": "https://example.com/taken-over",
        "custom_alias": "clock-ahead",
    }));
    assert_eq!(
        r.status,
        409,
        "B must not take over a live key: {}",
        r.text()
    );
    wait_for(
        &a,
        "clock-ahead",
        Some("https://example.com/five-minutes-left"),
    );
    let r = cb.patch(
        "clock-ahead",
        &json!({"long_url": "https://example.com/edited"}),
    );
    assert_eq!(
        r.status,
        200,
        "the database finds the link live: {}",
        r.text()
    );
    wait_for(&a, "clock-ahead", Some("https://example.com/edited"));
    let r = cb.delete("clock-ahead");
    assert_eq!(
        r.status,
        204,
        "the database finds the link live: {}",
        r.text()
    );
    wait_for(&a, "clock-ahead", None);
    let held = common::pg::psql(
        &db.url,
        "SELECT deleted, target FROM ricochet_links WHERE key = 'clock-ahead'",
    );
    assert_eq!(held.trim(), "t|https://example.com/edited");
}

/// Tombstones go only once every feed can have seen them (below the snapshot's xmin): a
/// delete committed while an open transaction holds xmin below it is not removed by a purge
/// meanwhile, however old, so once the stall ends every node applies it. (Were one removed, a
/// poll reads the horizon with its rows and regenerates rather than skip it.)
#[test]
fn a_purge_during_an_xmin_stall_never_makes_a_node_skip_a_delete() {
    let Some(db) = TestDb::create("fleet_purge_stall") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(&dir_b, &db.url, "b", "1", &[]);
    let mut ca = Client::new(&a);
    let url = "https://example.com/deleted-during-a-stall";
    let k = ca.create_ok(url, Some("stalled-delete"));
    wait_for(&b, &k, Some(url));
    // An open transaction with an xid: xmin stays below everything committed after it.
    let mut held = psql_session(&db.url);
    use std::io::Write;
    let stdin = held.stdin.as_mut().unwrap();
    writeln!(stdin, "BEGIN; SELECT pg_current_xact_id();").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ca.delete(&k).status, 204);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        answer(&b, &k).0,
        302,
        "b's feed is held back by the open transaction"
    );
    assert_eq!(
        gc_tombstones_count(&db.url),
        0,
        "a tombstone no feed has shown yet was removed"
    );
    writeln!(stdin, "COMMIT;").unwrap();
    stdin.flush().unwrap();
    drop(held.stdin.take());
    assert!(held.wait().unwrap().success());
    wait_for(&b, &k, None);
    wait_for(&a, &k, None);
}

/// The TCP ports `pid`'s sockets are bound to locally (from `/proc/<pid>/fd` and
/// `/proc/net/tcp{,6}`): for a node, the client ports of its database sessions.
fn local_ports_of(pid: u32) -> Vec<u16> {
    let mut inodes = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(l) = std::fs::read_link(fd.path()) {
            let l = l.to_string_lossy().into_owned();
            if let Some(i) = l.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                inodes.push(i.to_owned());
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// No zombie writes: a node's writer backends are frozen (SIGSTOP) with PATCH X sent to one
/// of them; X is answered 503; PATCH Y of the same link through another node is answered 200;
/// the backends resume (SIGCONT). X, still unread in a frozen backend's socket, must never
/// run after Y: every node and the database end at Y.
#[test]
fn a_write_sent_to_a_frozen_backend_never_lands_after_a_later_acknowledged_one() {
    let Some(db) = TestDb::create("fleet_zombie") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let b = node(&dir_b, &db.url, "b", "1", &[]);
    let mut ca = Client::new(&a);
    let k = ca.create_ok("https://example.com/zombie/0", Some("zombie-target"));
    // Every writer session of a connects and leaves a PATCH as its last statement.
    for i in 0..2 * fleet::links::WRITER_SESSIONS {
        let url = format!("https://example.com/zombie/warm/{i}");
        assert_eq!(ca.patch(&k, &json!({ "long_url": url })).status, 200);
    }
    wait_for(&b, &k, Some("https://example.com/zombie/warm/7"));
    let ports: Vec<String> = local_ports_of(a.child.id())
        .iter()
        .map(|p| p.to_string())
        .collect();
    let writers = common::pg::psql(
        &db.url,
        &format!(
            "SELECT pid FROM pg_stat_activity WHERE client_port IN ({}) \
               AND query LIKE 'UPDATE ricochet_links SET target%'",
            ports.join(",")
        ),
    );
    let writers: Vec<&str> = writers.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        writers.len(),
        fleet::links::WRITER_SESSIONS,
        "a's writer backends"
    );
    let signal = |sig: &str| {
        for pid in &writers {
            let ok = std::process::Command::new("kill")
                .args([sig, pid])
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill {sig} {pid}");
        }
    };
    /// Resumes the frozen backends however the test ends (a stopped backend would hang the
    /// database's removal, and the server's shutdown, for ever).
    struct Resume(Vec<String>);
    impl Drop for Resume {
        fn drop(&mut self) {
            for pid in &self.0 {
                let _ = std::process::Command::new("kill")
                    .args(["-CONT", pid])
                    .status();
            }
        }
    }
    let _resume = Resume(writers.iter().map(|p| p.to_string()).collect());
    signal("-STOP");
    let x = {
        let (addr, k) = (a.addr, k.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(addr).unwrap();
            let r = c.patch(&k, &json!({ "long_url": "https://example.com/zombie/X" }));
            (r.status, r.text())
        })
    };
    std::thread::sleep(Duration::from_millis(300)); // X is in a frozen backend's socket.
    let mut cb = Client::new(&b);
    let y = cb.patch(&k, &json!({ "long_url": "https://example.com/zombie/Y" }));
    assert_eq!(y.status, 200, "Y through b: {}", y.text());
    let (x_status, x_text) = x.join().unwrap();
    assert_eq!(x_status, 503, "X on a: {x_text}");
    signal("-CONT");
    std::thread::sleep(Duration::from_millis(1000));
    let held = common::pg::psql(
        &db.url,
        "SELECT target FROM ricochet_links WHERE key = 'zombie-target'",
    );
    assert_eq!(
        held.trim(),
        "https://example.com/zombie/Y",
        "X landed after Y"
    );
    wait_for(&a, &k, Some("https://example.com/zombie/Y"));
    wait_for(&b, &k, Some("https://example.com/zombie/Y"));
}

/// A row lock held elsewhere (an operator's open transaction) costs a node no connections:
/// each write of the locked link fails on the server's `lock_timeout` (503) on its own
/// session, instead of leaving a backend waiting on the lock for every client retry.
#[test]
fn retries_against_a_held_row_lock_keep_the_connection_count_bounded() {
    let Some(db) = TestDb::create("fleet_row_lock") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    let mut ca = Client::new(&a);
    let k = ca.create_ok("https://example.com/locked/0", Some("locked-link"));
    for i in 0..2 * fleet::links::WRITER_SESSIONS {
        let url = format!("https://example.com/locked/warm/{i}");
        assert_eq!(ca.patch(&k, &json!({ "long_url": url })).status, 200);
    }
    let count = || -> usize {
        common::pg::psql(
            &db.url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
               AND pid <> pg_backend_pid()",
        )
        .trim()
        .parse()
        .unwrap()
    };
    let mut held = psql_session(&db.url);
    use std::io::Write;
    let stdin = held.stdin.as_mut().unwrap();
    writeln!(
        stdin,
        "BEGIN; SELECT 1 FROM ricochet_links WHERE key = 'locked-link' FOR UPDATE;"
    )
    .unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = count();
    for i in 0..10 {
        let url = format!("https://example.com/locked/retry/{i}");
        let r = ca.patch(&k, &json!({ "long_url": url }));
        assert_eq!(r.status, 503, "retry {i}: {}", r.text());
    }
    let after = count();
    assert!(
        after <= before + 1,
        "{before} sessions before 10 retries against the lock, {after} after"
    );
    writeln!(stdin, "COMMIT;").unwrap();
    stdin.flush().unwrap();
    drop(held.stdin.take());
    assert!(held.wait().unwrap().success());
    let url = "https://example.com/locked/after";
    assert_eq!(ca.patch(&k, &json!({ "long_url": url })).status, 200);
    wait_for(&a, &k, Some(url));
}

/// A feed row a node cannot hold (here a negative `created_at`, which the table's CHECKs let
/// through) is never skipped silently: counted in `/metrics`, named in `/readyz?verbose`
/// (reported, not gating) and logged; the rows after it apply; and its tombstone, which
/// needs only its key, applies.
#[test]
fn a_feed_row_a_node_cannot_hold_is_counted_and_reported() {
    let Some(db) = TestDb::create("fleet_bad_row") else {
        return;
    };
    prepare_fleet(&db.url);
    let (_ta, dir_a) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "1", &[]);
    common::pg::psql(
        &db.url,
        "INSERT INTO ricochet_links (key, target, status, created_at) \
         VALUES ('bad-row', 'https://example.com/bad', 302, -5)",
    );
    let url = "https://example.com/after-the-bad-row";
    let k = Client::new(&a).create_ok(url, Some("after-bad"));
    wait_for(&a, &k, Some(url));
    let t = Instant::now();
    while metric(&a, "ricochet_fleet_feed_rows_unusable_total") == 0 {
        assert!(
            t.elapsed() < PROPAGATION_GIVE_UP,
            "the bad row was not counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ready = Client::new(&a)
        .send("GET", "/readyz?verbose", false, &[], b"")
        .unwrap();
    assert_eq!(ready.status, 200, "reported, not gating");
    assert!(
        ready.text().contains("1 feed rows NOT APPLIED"),
        "{}",
        ready.text()
    );
    assert!(a
        .wait_stderr("\"bad-row\"", Duration::from_secs(1))
        .is_some());
    let rows = metric(&a, "ricochet_fleet_feed_rows_total");
    common::pg::psql(
        &db.url,
        "UPDATE ricochet_links SET deleted = true WHERE key = 'bad-row'",
    );
    let t = Instant::now();
    while metric(&a, "ricochet_fleet_feed_rows_total") == rows {
        assert!(
            t.elapsed() < PROPAGATION_GIVE_UP,
            "the tombstone was not applied"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(&a, "ricochet_fleet_feed_rows_unusable_total"), 1);
}

/// Hole 9: a row written around the API that the importer would refuse (a target that is not
/// a URL) must not make every new node's bootstrap fail: it is left out and said, and the
/// node starts and serves the rest.
#[test]
fn a_bad_row_in_the_database_does_not_stop_a_bootstrap() {
    let Some(db) = TestDb::create("fleet_bad_bootstrap") else {
        return;
    };
    prepare_fleet(&db.url);
    // Schema 12 refuses a target no node could store, written around the API.
    let refused = db.try_sql(
        "INSERT INTO ricochet_links (key, target, status, created_at) VALUES \
         ('spaced-target', 'https://exa mple.com/x', 302, 1)",
    );
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("ricochet_links_target_storable")),
        "{refused:?}"
    );
    // A storable target the importer still refuses (not a URL a browser parses), as rows
    // from before the check may be too: left out of the bootstrap, logged.
    common::pg::psql(
        &db.url,
        "INSERT INTO ricochet_links (key, target, status, created_at) VALUES \
         ('good-row', 'https://example.com/good', 302, 1), \
         ('bad-target', 'http://[zzz]/x', 302, 1)",
    );
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "b", "1", &[]);
    assert_eq!(
        answer(&s, "good-row"),
        (302, Some("https://example.com/good".into()))
    );
    assert!(s
        .wait_stderr("\"bad-target\" is not a link", Duration::from_secs(1))
        .is_some());
    // A bad row can still be deleted through the API (tombstones are exempt from the check).
    assert_eq!(Client::new(&s).delete("bad-target").status, 204);
}

/// Hole 9: the database's check on `ricochet_links.target` (migration 12) states exactly
/// `shards::link::check_storable_url`: 3,000 strings built from URL fragments, separators,
/// whitespace and control characters (ASCII and not), each judged by both. The constraint's
/// own text is read back from the catalog and evaluated, so the test checks what the
/// database enforces, not a copy.
#[test]
fn the_databases_target_check_is_the_storable_url_rule() {
    let Some(db) = TestDb::create("fleet_target_check") else {
        return;
    };
    prepare_fleet(&db.url);
    let def = db.sql(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE conname = 'ricochet_links_target_storable'",
    );
    let expr = def
        .strip_prefix("CHECK ")
        .and_then(|d| d.strip_suffix(" NOT VALID"))
        .unwrap_or_else(|| panic!("unexpected constraint text: {def}"));
    const PIECES: [&str; 30] = [
        "http://", "https://", "HTTPS://", "hTtP://", "ftp://", "http:/", "a", "b.c", "é", "@",
        ":", "80", "[", "]", "::1", "/", "?", "#", " ", "\u{2028}", "\u{85}", "\t", "\u{a0}",
        "\u{3000}", "\u{7f}", "%20", "x", "\u{200b}", "\u{1}", "-",
    ];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut cases: Vec<String> = Vec::new();
    for _ in 0..3_000 {
        let mut s = String::from(PIECES[next(6)]);
        for _ in 0..next(7) {
            s.push_str(PIECES[next(PIECES.len())]);
        }
        cases.push(s);
    }
    cases.push("https://".to_string() + &"a".repeat(8_184));
    cases.push("https://".to_string() + &"a".repeat(8_185));
    cases.push(String::new());
    let rows: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let hex: String = c.bytes().map(|b| format!("{b:02x}")).collect();
            format!("({i}, false, convert_from(decode('{hex}', 'hex'), 'UTF8'))")
        })
        .collect();
    // In chunks: one psql argument is at most 128 KiB.
    let got: String = rows
        .chunks(300)
        .map(|chunk| {
            db.sql(&format!(
                "SELECT string_agg(CASE WHEN {expr} THEN '1' ELSE '0' END, '' ORDER BY i) \
                 FROM (VALUES {}) v(i, deleted, target)",
                chunk.join(", ")
            ))
        })
        .collect();
    let want: String = cases
        .iter()
        .map(|c| {
            if shards::link::check_storable_url(c).is_ok() {
                '1'
            } else {
                '0'
            }
        })
        .collect();
    let differ: Vec<(&String, char)> = cases
        .iter()
        .zip(got.chars())
        .zip(want.chars())
        .filter(|((_, g), w)| g != w)
        .map(|((c, g), _)| (c, g))
        .collect();
    assert!(
        differ.is_empty(),
        "the database judged differently (its verdict): {differ:?}"
    );
    assert!(
        want.contains('1') && want.contains('0'),
        "both verdicts drawn"
    );
}

/// A server without the timeline functions (some managed services: `ricochet_wal_position`
/// gives a timeline of -1 there) still has a working fleet: the nodes follow the feed on the
/// identity and transaction-id checks alone.
#[test]
fn a_server_that_cannot_say_its_timeline_still_has_a_working_feed() {
    let Some(db) = TestDb::create("fleet_no_timeline") else {
        return;
    };
    prepare_fleet(&db.url);
    db.sql(
        "CREATE OR REPLACE FUNCTION ricochet_wal_position(OUT tli integer, OUT lsn text) \
         LANGUAGE plpgsql AS $$ BEGIN tli := -1; lsn := NULL; END $$",
    );
    let dirs: Vec<_> = (0..2).map(|_| api::data_dir()).collect();
    let a = node(&dirs[0].1, &db.url, "a", "1", &[]);
    let b = node(&dirs[1].1, &db.url, "b", "1", &[]);
    Client::new(&a).create_ok("https://example.com/v1", Some("no-timeline"));
    wait_for(&b, "no-timeline", Some("https://example.com/v1"));
    let r = Client::new(&a).patch(
        "no-timeline",
        &json!({"long_url": "https://example.com/v2"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(&b, "no-timeline", Some("https://example.com/v2"));
    let cursor = std::fs::read_to_string(dirs[1].1.join("fleet-feed.cursor")).unwrap();
    assert!(cursor.contains(" - - "), "no position recorded: {cursor}");
}

/// `GET path` on `s` with `headers`: (status, Location).
fn visit_with(s: &Server, path: &str, headers: &[(&str, &str)]) -> (u16, Option<String>) {
    let r = Client::new(s)
        .send("GET", path, false, headers, b"")
        .unwrap();
    (r.status, r.location().map(str::to_owned))
}

/// Polls until `check` holds (a change made on another node arrives by the feed).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let t = Instant::now();
    while !check() {
        assert!(t.elapsed() < PROPAGATION_GIVE_UP, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Link behaviours (`valid_since`, `forward_query`, `disabled`, `crawlable`, redirect rules)
/// are the fleet's (`ricochet_links.behaviour`): set on one node, they are served by every
/// node, through the feed, read-through and a new node's bootstrap; PATCHes of different
/// members on two nodes both hold (merged in SQL).
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]
fn link_behaviours_are_the_fleets_on_every_node() {
    let Some(db) = TestDb::create("fleet_behaviour") else {
        return;
    };
    prepare_fleet(&db.url);
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let a = node(&dirs[0].1, &db.url, "a", "2", &[]);
    let b = node(&dirs[1].1, &db.url, "b", "2", &[]);
    let mut ca = Client::new(&a);
    let android = [(
        "User-Agent",
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile Safari",
    )];
    let r = ca.create(&json!({
        "long_url": "https://own.example/", "custom_alias": "ruled", "forward_query": true,
        "crawlable": true, "title": "Ruled", "tags": ["first"],
        "redirect_rules": [{"target": "https://android.example/",
                            "conditions": [{"type": "device", "value": "android"}]}]}));
    assert_eq!(r.status, 201, "{}", r.text());
    let r = ca.create(
        &json!({"long_url": "https://later.example/", "custom_alias": "later",
                              "valid_since": "2099-01-01T00:00:00Z"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    // Right after the 201, b reads it through (or from the feed): behaviour included.
    let v = Client::new(&b).get_link("ruled").json();
    assert_eq!(v["forward_query"], true, "{v}");
    assert_eq!(v["crawlable"], true, "{v}");
    assert_eq!(
        (&v["title"], &v["tags"]),
        (&json!("Ruled"), &json!(["first"])),
        "{v}"
    );
    assert_eq!(
        v["redirect_rules"][0]["target"], "https://android.example/",
        "{v}"
    );
    eventually("b serves the rule", || {
        visit_with(&b, "/ruled", &android).1.as_deref() == Some("https://android.example/")
    });
    assert_eq!(
        visit_with(&b, "/ruled?x=1", &[]),
        (302, Some("https://own.example/?x=1".into()))
    );
    assert_eq!(answer(&b, "later").0, 404, "not valid yet on b");

    // PATCHes of different members on two nodes both hold.
    let r = Client::new(&b).patch(
        "ruled",
        &json!({"disabled": {"reason": "legal"}, "title": "Fleet title"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = ca.patch(
        "ruled",
        &json!({"forward_query": false, "crawlable": null, "tags": ["Fleet Tag", "x"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["disabled"]["reason"], "legal", "b's PATCH kept: {v}");
    assert_eq!(v["forward_query"], false, "{v}");
    assert!(v.get("crawlable").is_none(), "{v}");
    // The title of b's PATCH and the tags of a's, both kept.
    assert_eq!(v["title"], "Fleet title", "{v}");
    assert_eq!(v["tags"], json!(["fleet-tag", "x"]), "{v}");
    for s in [&a, &b] {
        eventually("a legal disabling answers 451 on every node", || {
            answer(s, "ruled").0 == 451
        });
    }
    // Enabled again, with its rules replaced: every node redirects by the new ones.
    let r = Client::new(&b).patch(
        "ruled",
        &json!({"disabled": null, "redirect_rules": [
            {"target": "https://mail.example/",
             "conditions": [{"type": "query-param", "key": "src", "value": "mail"}]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for s in [&a, &b] {
        eventually("new rules on every node", || {
            visit_with(s, "/ruled?src=mail", &[]).1.as_deref() == Some("https://mail.example/")
        });
        assert_eq!(
            visit_with(s, "/ruled", &android),
            (302, Some("https://own.example/".into())),
            "the old rule is gone; the query stays behind (forward_query false)"
        );
    }

    // A new node bootstraps the behaviours with the links.
    let c = node(&dirs[2].1, &db.url, "c", "1", &[]);
    assert_eq!(
        visit_with(&c, "/ruled?src=mail", &[]).1.as_deref(),
        Some("https://mail.example/")
    );
    assert_eq!(answer(&c, "later").0, 404);
    let v = Client::new(&c).get_link("later").json();
    assert_eq!(v["valid_since"], "2099-01-01T00:00:00Z", "{v}");
    let v = Client::new(&c).get_link("ruled").json();
    assert_eq!(
        (&v["title"], &v["tags"]),
        (&json!("Fleet title"), &json!(["fleet-tag", "x"]))
    );
    let r = Client::new(&c)
        .send("GET", "/api/v1/urls?tag=fleet-tag", true, &[], b"")
        .unwrap();
    assert_eq!(r.json()["items"][0]["key"], "ruled", "{}", r.text());
    // A tag renamed through Shlink's API on one node, in the database's row: every node
    // reads the new name, the title kept.
    let h = [
        ("X-Api-Key", api::API_KEY),
        ("Content-Type", "application/json"),
    ];
    let r = Client::new(&c)
        .send(
            "PUT",
            "/rest/v3/tags",
            false,
            &h,
            br#"{"oldName": "fleet-tag", "newName": "renamed"}"#,
        )
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    let v = Client::new(&c).get_link("ruled").json();
    assert_eq!(
        (&v["title"], &v["tags"]),
        (&json!("Fleet title"), &json!(["renamed", "x"]))
    );
    eventually("every node reads the renamed tag", || {
        Client::new(&b).get_link("ruled").json()["tags"] == json!(["renamed", "x"])
    });

    // Shlink's forwardQuery is taken now.
    let headers = [
        ("X-Api-Key", api::API_KEY),
        ("Content-Type", "application/json"),
    ];
    let body = json!({"longUrl": "https://a.example/s", "forwardQuery": true, "customSlug": "sh"});
    let r = ca
        .send(
            "POST",
            "/rest/v3/short-urls",
            false,
            &headers,
            body.to_string().as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    eventually("c serves the Shlink link with its query", || {
        visit_with(&c, "/sh?q=1", &[]).1.as_deref() == Some("https://a.example/s?q=1")
    });
}

/// `HEAD /{key}` on `s`: its status (a HEAD is no visit).
fn head_status(s: &Server, key: &str) -> u16 {
    Client::new(s)
        .send("HEAD", &format!("/{key}"), false, &[], b"")
        .unwrap()
        .status
}

/// `max_visits` is exact across nodes: every node's visits are counted against one count in
/// the database before their redirects, so 120 concurrent GETs on three nodes (2, 2 and 1
/// cores) of a link allowing 25 give exactly 25 redirects, whatever node or core each hit; a
/// PATCH that raises the limit keeps the count; removing the limit removes it.
#[test]
fn a_visit_limit_is_exact_across_nodes() {
    let Some(db) = TestDb::create("fleet_visit_limit") else {
        return;
    };
    prepare_fleet(&db.url);
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let nodes = [
        node(&dirs[0].1, &db.url, "a", "2", &[]),
        node(&dirs[1].1, &db.url, "b", "2", &[]),
        node(&dirs[2].1, &db.url, "c", "1", &[]),
    ];
    let r = Client::new(&nodes[0]).create(
        &json!({"long_url": "https://limited.example/", "custom_alias": "lim", "max_visits": 25}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    for s in &nodes {
        eventually("every node holds the limited link", || {
            head_status(s, "lim") == 302
        });
    }
    let redirects = |per_thread: usize| -> Vec<u16> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..12)
                .map(|t| {
                    let addr = nodes[t % 3].addr;
                    scope.spawn(move || {
                        (0..per_thread)
                            .map(|_| Client::connect(addr).unwrap().redirect("lim").status)
                            .collect::<Vec<u16>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        })
    };
    let got = redirects(10);
    let count = |code: u16| got.iter().filter(|s| **s == code).count();
    assert_eq!(
        (count(302), count(404), got.len()),
        (25, 95, 120),
        "{got:?}"
    );
    eventually("the fleet's count reaches every node", || {
        Client::new(&nodes[2]).get_link("lim").json()["visits"] == 25
    });
    // Raised to 30 on another node: the count stays, 5 more go.
    let r = Client::new(&nodes[1]).patch("lim", &json!({"max_visits": 30}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["visits"], 25, "{}", r.text());
    for s in &nodes {
        eventually("the raised limit reaches every node", || {
            Client::new(s).get_link("lim").json()["max_visits"] == 30
        });
    }
    let got = redirects(2);
    assert_eq!(got.iter().filter(|s| **s == 302).count(), 5, "{got:?}");
    // No limit: no count either, and every visit redirects.
    let r = Client::new(&nodes[2]).patch("lim", &json!({"max_visits": null}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json().get("visits").is_none(), "{}", r.text());
    for s in &nodes {
        eventually("the limit's removal reaches every node", || {
            answer(s, "lim").0 == 302
        });
    }
}

/// With the database down a limited link's GET is answered 503, never an uncounted redirect,
/// while the node goes on serving its other links (and a HEAD of the limited one, which is
/// no visit); once the database is back, the fleet's count goes on where it was: exactly the
/// limit's redirects in all.
#[test]
fn a_limited_link_is_never_redirected_uncounted_while_the_database_is_down() {
    let Some(cluster) = Cluster::start("fleet_visit_limit_down") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "fleet_visit_limit_down");
    prepare_fleet(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "a", "2", &[]);
    let mut c = Client::new(&s);
    let r = c.create(
        &json!({"long_url": "https://limited.example/", "custom_alias": "lim",
                             "max_visits": 5}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    c.create_ok("https://free.example/", Some("free"));
    let mut redirects = 0;
    for _ in 0..2 {
        assert_eq!(answer(&s, "lim").0, 302);
        redirects += 1;
    }
    cluster.pg_ctl("stop");
    for _ in 0..5 {
        assert_eq!(answer(&s, "lim").0, 503, "no redirect without its count");
        assert_eq!(head_status(&s, "lim"), 302, "a HEAD is no visit");
        assert_eq!(
            answer(&s, "free"),
            (302, Some("https://free.example/".into()))
        );
    }
    cluster.pg_ctl("start");
    let t = Instant::now();
    let mut statuses = Vec::new();
    while statuses.len() < 10 {
        let st = answer(&s, "lim").0;
        match st {
            503 => {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "the database never came back"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => statuses.push(st),
        }
    }
    redirects += statuses.iter().filter(|s| **s == 302).count();
    assert_eq!(redirects, 5, "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 404), "{statuses:?}");
}
