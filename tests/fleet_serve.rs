//! Fleet mode end to end: `ricochet serve --fleet-pg` nodes sharing one PostgreSQL namespace.
//! Every created key is decoded back to its ID and checked against the audit rows and each
//! node's evidence; the database's constraints are not what these tests rely on.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{self, concurrently, Client, NO_RATE_LIMIT};
use common::pg::{Cluster, TestDb};
use common::Server;
use serde_json::json;
use shards::alloc::IdRange;
use std::path::Path;
use std::time::{Duration, Instant};

use common::pg::prepare_fleet as prepare;

fn node(dir: &Path, url: &str, id: &str, segment_len: &str) -> Server {
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend([
        "--cores",
        "1",
        "--fleet-pg",
        url,
        "--namespace",
        "eu",
        "--node-id",
        id,
        "--segment-len",
        segment_len,
    ]);
    api::start(dir, &args)
}

/// Audited intervals by node.
fn audit(db_url: &str) -> Vec<(IdRange, String)> {
    common::pg::psql(
        db_url,
        "SELECT start_id, end_id, node_id FROM ricochet_alloc_audit ORDER BY start_id",
    )
    .lines()
    .filter(|l| !l.is_empty())
    .map(|l| {
        let f: Vec<&str> = l.split('|').collect();
        let range = IdRange {
            start: f[0].parse().unwrap(),
            end: f[1].parse().unwrap(),
        };
        (range, f[2].to_owned())
    })
    .collect()
}

fn create(c: &mut Client, url: &str) -> api::Resp {
    c.create(&json!({ "long_url": url }))
}

/// Three nodes, tiny segments (2 IDs), 4 concurrent creators each: one key space (one secret),
/// every ID unique, inside an audited interval of the node that made it, intervals disjoint,
/// and each node's evidence is its last audited interval.
#[test]
fn three_nodes_share_one_key_space_with_disjoint_ranges() {
    let Some(db) = TestDb::create("three_nodes") else {
        return;
    };
    prepare(&db.url);
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let nodes: Vec<Server> = dirs
        .iter()
        .enumerate()
        .map(|(i, (_, d))| node(d, &db.url, &format!("n{i}"), "2"))
        .collect();
    let mut created = Vec::new();
    let runs: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            concurrently(s, 4, move |t, c| {
                let mut keys = Vec::new();
                for n in 0..15 {
                    let url = format!("https://example.com/{i}/{t}/{n}");
                    let r = c.try_create(&json!({ "long_url": url }))?;
                    assert_eq!(r.status, 201, "{}", r.text());
                    keys.push((r.key(), url));
                }
                Ok(keys)
            })
        })
        .collect();
    for (i, r) in runs.into_iter().enumerate() {
        created.extend(r.into_iter().flatten().map(|(k, u)| (i, k, u)));
    }
    let secret = std::fs::read(dirs[0].1.join(shards::keygen::SECRET_FILE_NAME)).unwrap();
    for (_, d) in &dirs[1..] {
        assert_eq!(
            std::fs::read(d.join(shards::keygen::SECRET_FILE_NAME)).unwrap(),
            secret
        );
    }
    let keygen = api::keygen(&dirs[0].1);
    let rows = audit(&db.url);
    for w in rows.windows(2) {
        assert!(w[0].0.end <= w[1].0.start, "{:?} overlaps {:?}", w[0], w[1]);
    }
    let mut ids = std::collections::HashSet::new();
    for (node_i, key, url) in &created {
        let id = api::id_of(&keygen, key);
        assert!(ids.insert(id), "ID {id} issued twice");
        let (range, owner) = rows
            .iter()
            .find(|(r, _)| r.contains(id))
            .unwrap_or_else(|| panic!("ID {id} of {key} is in no audited interval"));
        assert_eq!(owner, &format!("n{node_i}"), "ID {id} in {range:?}");
        let mut c = Client::new(&nodes[*node_i]);
        api::assert_redirects(&mut c, key, url, None);
    }
    assert_eq!(ids.len(), 180);
    for (i, (_, d)) in dirs.iter().enumerate() {
        let e = fleet::Evidence::load(d).unwrap().expect("evidence written");
        let row = rows
            .iter()
            .find(|(r, _)| r.start == e.start)
            .expect("evidence audited");
        assert_eq!(
            (row.0.end, row.1.as_str()),
            (e.end, format!("n{i}").as_str())
        );
    }
}

/// kill -9 after two segments: the restarted node never reuses an ID; what it held and did
/// not use shows as waste in the audit.
#[test]
fn a_hard_killed_node_reuses_nothing_and_its_waste_is_audited() {
    let Some(db) = TestDb::create("hard_kill") else {
        return;
    };
    prepare(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "n0", "3");
    let mut c = Client::new(&s);
    let mut before = Vec::new();
    for i in 0..4 {
        let r = create(&mut c, &format!("https://example.com/a/{i}"));
        assert_eq!(r.status, 201);
        before.push(r.key());
    }
    s.kill9();
    let audited_before = audit(&db.url);
    let high = audited_before.iter().map(|(r, _)| r.end).max().unwrap();
    let s = node(&dir, &db.url, "n0", "3");
    let mut c = Client::new(&s);
    let keygen = api::keygen(&dir);
    for i in 0..4 {
        let r = create(&mut c, &format!("https://example.com/b/{i}"));
        assert_eq!(r.status, 201);
        let id = api::id_of(&keygen, &r.key());
        assert!(
            id >= high,
            "ID {id} reused after restart (high-water was {high})"
        );
    }
    for k in &before {
        assert_eq!(c.redirect(k).status, 302);
    }
    let audited: u64 = audit(&db.url).iter().map(|(r, _)| r.len()).sum();
    assert!(
        audited > 8,
        "the unused rest of the killed node's ranges is audited waste"
    );
    let instances = common::pg::psql(
        &db.url,
        "SELECT count(DISTINCT instance) FROM ricochet_alloc_audit",
    );
    assert_eq!(instances, "2", "the audit tells the two runs apart");
}

/// The database stopped: creates, and GETs of keys the node does not hold, answer 503 with
/// Retry-After fast (since fleet mode part 2 a
/// create is committed in the database before its 201, so buffered IDs no longer let creates
/// go on without it); every link keeps redirecting; creates resume once it is back. Then the
/// same with the server SIGSTOPped (hung, not refusing).
#[test]
fn database_outage_answers_503_fast_keeps_redirecting_then_recovers() {
    let Some(cluster) = Cluster::start("outage") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "outage");
    prepare(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "n0", "5");
    let mut c = Client::new(&s);
    let mut links = Vec::new();
    let make = |c: &mut Client, links: &mut Vec<(String, String)>, tag: &str| {
        let url = format!("https://example.com/{tag}/{}", links.len());
        let t = Instant::now();
        let r = create(c, &url);
        let took = t.elapsed();
        if r.status == 201 {
            links.push((r.key(), url));
        }
        (r, took)
    };
    for _ in 0..3 {
        assert_eq!(make(&mut c, &mut links, "up").0.status, 201);
    }
    std::thread::sleep(Duration::from_millis(300)); // the standby range is prefetched
    for (signal, label) in [("stop", "stopped"), ("STOP", "hung")] {
        if signal == "stop" {
            cluster.pg_ctl("stop");
        } else {
            cluster.signal("STOP");
        }
        let mut served = 0;
        let mut refused = 0;
        for _ in 0..20 {
            let (r, took) = make(&mut c, &mut links, label);
            match r.status {
                201 => served += 1,
                503 => {
                    assert!(r.header("retry-after").is_some(), "503 without Retry-After");
                    assert!(
                        took < Duration::from_millis(1500),
                        "{label}: 503 took {took:?}"
                    );
                    refused += 1;
                }
                other => panic!("{label}: {other} {}", r.text()),
            }
        }
        assert_eq!(
            served, 0,
            "{label}: a create was acknowledged without the database"
        );
        eprintln!("{label}: {refused} x 503");
        for (k, u) in &links {
            api::assert_redirects(&mut c, k, u, None);
        }
        // A key this node does not hold cannot be read through: 503, never a guessed 404.
        for _ in 0..3 {
            let t = Instant::now();
            let r = c.redirect("neverwritten");
            assert_eq!(r.status, 503, "{label}: a miss answered {}", r.status);
            assert!(r.header("retry-after").is_some(), "503 without Retry-After");
            assert!(
                t.elapsed() < Duration::from_millis(1500),
                "{label}: miss took {:?}",
                t.elapsed()
            );
        }
        if signal == "stop" {
            cluster.pg_ctl("start");
        } else {
            cluster.signal("CONT");
        }
        let t = Instant::now();
        while make(&mut c, &mut links, "back").0.status != 201 {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "{label}: creates did not resume"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "{label}: creates resumed {:?} after the database came back",
            t.elapsed()
        );
        assert_eq!(
            c.redirect("neverwritten").status,
            404,
            "{label}: misses read through again"
        );
    }
}

/// A data dir that holds single-node links cannot join a fleet (whether it generated keys
/// under its own secret or holds aliases only), and a fleet node's dir is not served as a
/// single node's (`fleet-node` marker).
#[test]
fn a_standalone_data_dir_cannot_join_a_fleet() {
    let Some(db) = TestDb::create("standalone") else {
        return;
    };
    prepare(&db.url);
    let (_t, dir) = api::data_dir();
    let s = api::start(&dir, &["--cores", "1"]);
    let mut c = Client::new(&s);
    assert_eq!(create(&mut c, "https://example.com/solo").status, 201);
    s.terminate();
    let e = api::try_start(
        &dir,
        &[
            "--cores",
            "1",
            "--fleet-pg",
            &db.url,
            "--namespace",
            "eu",
            "--node-id",
            "n",
        ],
    )
    .err()
    .expect("refused");
    assert!(e.contains("single-node links"), "{e}");
    // One with an alias only (no secret was needed for it) too.
    let (_t2, dir2) = api::data_dir();
    let s = api::start(&dir2, &["--cores", "1"]);
    Client::new(&s).create_ok("https://example.com/solo", Some("solo-alias"));
    s.terminate();
    let fleet_args = [
        "--cores",
        "1",
        "--fleet-pg",
        &db.url,
        "--namespace",
        "eu",
        "--node-id",
        "n",
    ];
    let e = api::try_start(&dir2, &fleet_args).err().expect("refused");
    assert!(e.contains("single-node links"), "{e}");
    // A fleet node's dir is not served as a single node's.
    let (_t3, dir3) = api::data_dir();
    let s = api::start(&dir3, &fleet_args);
    Client::new(&s).create_ok("https://example.com/fleet", Some("fleet-alias"));
    s.terminate();
    let e = api::try_start(&dir3, &["--cores", "1"])
        .err()
        .expect("refused");
    assert!(e.contains("belongs to a fleet node"), "{e}");
    assert!(
        api::try_start(&dir3, &fleet_args).is_ok(),
        "the fleet node restarts"
    );
    // A fleet's domains are the database's (`ricochet fleet domains`, tests/fleet_domains.rs):
    // a fleet node refuses a domain book of its own data dir.
    let out = std::process::Command::new(common::server_bin())
        .args(["domains", "--data-dir"])
        .arg(&dir3)
        .args(["add", "go.brand.com"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let e = api::try_start(&dir3, &fleet_args).err().expect("refused");
    assert!(
        e.contains("domains.json") && e.contains("fleet mode"),
        "{e}"
    );
    std::fs::remove_file(dir3.join("domains.json")).unwrap();
    // Flags are checked before anything starts.
    let e = api::try_start(&dir, &["--fleet-pg", &db.url])
        .err()
        .unwrap();
    assert!(e.contains("--namespace") && e.contains("--node-id"), "{e}");
    let e = api::try_start(
        &dir,
        &[
            "--fleet-pg",
            "not a url",
            "--namespace",
            "eu",
            "--node-id",
            "n",
        ],
    )
    .err()
    .unwrap();
    assert!(e.contains("not a usable PostgreSQL URL"), "{e}");
}

/// The authority loses this node's confirmed allocation: generated-key creates are refused
/// with `allocation-fenced`, aliased creates and every redirect keep working, and `/readyz`
/// and `/metrics` say so.
#[test]
fn a_rolled_back_authority_fences_creates_but_not_redirects() {
    let Some(db) = TestDb::create("fenced") else {
        return;
    };
    prepare(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "n0", "2");
    let mut c = Client::new(&s);
    let mut links = Vec::new();
    for i in 0..3 {
        let url = format!("https://example.com/f/{i}");
        let r = create(&mut c, &url);
        assert_eq!(r.status, 201);
        links.push((r.key(), url));
    }
    let e = fleet::Evidence::load(&dir).unwrap().unwrap();
    common::pg::psql(
        &db.url,
        &format!(
            "ALTER TABLE ricochet_namespace DISABLE TRIGGER next_id_never_lowers; \
             DELETE FROM ricochet_alloc_audit WHERE request_id = '{}'; \
             UPDATE ricochet_namespace SET next_id = {}",
            e.request_id, e.start
        ),
    );
    let t = Instant::now();
    let problem = loop {
        let r = create(&mut c, "https://example.com/f/more");
        if r.status == 503 && r.text().contains("allocation-fenced") {
            break r.json();
        }
        assert!(
            r.status == 201 || r.status == 503,
            "{} {}",
            r.status,
            r.text()
        );
        assert!(t.elapsed() < Duration::from_secs(10), "never fenced");
    };
    assert!(
        problem["detail"].as_str().unwrap().contains("runbook"),
        "{problem}"
    );
    let r = c.create(&json!({"long_url": "https://example.com/alias", "custom_alias": "still-ok"}));
    assert_eq!(r.status, 201, "aliased creates need no ID");
    for (k, u) in &links {
        api::assert_redirects(&mut c, k, u, None);
    }
    let mut raw = common::Reader::new(s.connect());
    raw.send(b"GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n");
    let ready = raw.read_response(false);
    assert_eq!(ready.status, 200);
    assert!(String::from_utf8_lossy(&ready.body).contains("fenced"));
    raw.send(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    let metrics = String::from_utf8(raw.read_response(false).body).unwrap();
    assert!(metrics.contains("\nricochet_fleet_fenced 1\n"), "{metrics}");
    assert!(metrics.contains("ricochet_fleet_allocation_failures_total{class=\"rolled_back\"} 1"));
}

/// The seed's failover: a real primary and a `pg_basebackup -R` standby; the standby is
/// stopped so it lags; an allocation is confirmed on the primary only; the primary stops and
/// the standby is promoted. The node (given both hosts, `target_session_attrs=read-write`)
/// reaches the promoted standby, which lacks its confirmed allocation: creates with generated
/// keys are refused, every redirect is served, and the evidence is reported.
#[test]
fn a_promoted_lagging_standby_fences_the_node() {
    let Some(primary) = Cluster::start("failover") else {
        return;
    };
    let db = TestDb::on(&primary.url, "failover");
    prepare(&db.url);
    let standby = primary.standby();
    let db_name = db.url.rsplit('/').next().unwrap().to_owned();
    let standby_db = format!("postgres://postgres@127.0.0.1:{}/{db_name}", standby.port());
    let audited_on = |url: &str| common::pg::psql(url, "SELECT count(*) FROM ricochet_alloc_audit");
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db_name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &both, "n0", "3");
    let mut c = Client::new(&s);
    let mut links = Vec::new();
    let make = |c: &mut Client, links: &mut Vec<(String, String)>| {
        let url = format!("https://example.com/failover/{}", links.len());
        let r = create(c, &url);
        if r.status == 201 {
            links.push((r.key(), url));
        }
        r
    };
    for _ in 0..3 {
        assert_eq!(make(&mut c, &mut links).status, 201);
    }
    let t = Instant::now();
    while audited_on(&standby_db) != audited_on(&db.url) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the standby does not replay"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let replicated = audited_on(&standby_db);
    standby.pg_ctl("stop");
    // More creates: new ranges confirmed on the primary alone.
    for _ in 0..9 {
        assert_eq!(make(&mut c, &mut links).status, 201);
    }
    let on_primary = audited_on(&db.url);
    assert!(on_primary.parse::<u64>().unwrap() > replicated.parse::<u64>().unwrap());
    primary.pg_ctl("stop");
    standby.pg_ctl("start");
    standby.pg_ctl("promote");
    // Up to two ranges were on hand when the standby stopped; 9 creates of 3-ID ranges needed
    // at least one more, confirmed on the primary alone.
    let promoted: u64 = audited_on(&standby_db).parse().unwrap();
    assert!(
        promoted >= replicated.parse().unwrap() && promoted < on_primary.parse().unwrap(),
        "the promoted standby lags: {promoted} audit rows, the primary had {on_primary}"
    );
    // From the moment the node meets the promoted standby, no ID on hand is used: they came
    // from ranges it may lack, which it would hand out again (hole 2). Every generated key
    // made after the failover must lie in a range the promoted standby audited.
    let keygen = api::keygen(&dir);
    let t = Instant::now();
    let fenced = loop {
        let r = make(&mut c, &mut links);
        if r.status == 201 {
            let id = api::id_of(&keygen, &r.key());
            assert!(
                audit(&standby_db)
                    .iter()
                    .any(|(range, _)| range.contains(id)),
                "{} (ID {id}) was made after the failover from a range the promoted standby \
                 lacks",
                r.key()
            );
        }
        if r.status == 503 && r.text().contains("allocation-fenced") {
            break r;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "not fenced: {} {}",
            r.status,
            r.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        fenced.header("retry-after").is_none(),
        "fenced is not a retry-later condition"
    );
    // The node's feed cursor is ahead of the promoted standby (a rollback): it regenerates its
    // links from it, saving first the ones it held that the database lost. No acknowledged
    // link is silently gone: each redirects, or is in that file.
    let t = Instant::now();
    loop {
        let m = c.send("GET", "/metrics", false, &[], b"").unwrap().text();
        if m.lines()
            .any(|l| l == "ricochet_fleet_regenerations_total 1")
        {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no regeneration");
        std::thread::sleep(Duration::from_millis(50));
    }
    let lost_file = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(ricochet::fleet_mode::lost::LOST_FILE_PREFIX)
        })
        .expect("a file of the links the rollback lost")
        .path();
    let lost: std::collections::HashMap<String, String> = std::fs::read_to_string(&lost_file)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().to_owned(),
                v["long_url"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        !lost.is_empty(),
        "creates confirmed on the old primary alone are lost"
    );
    for (k, u) in &links {
        let in_db = common::pg::psql(
            &standby_db,
            &format!("SELECT count(*) FROM ricochet_links WHERE key = '{k}'"),
        ) == "1";
        if in_db {
            api::assert_redirects(&mut c, k, u, None);
            assert!(!lost.contains_key(k), "{k} is in the database, not lost");
        } else {
            assert_eq!(lost.get(k), Some(u), "{k}: lost, and not in {lost_file:?}");
            assert_eq!(c.redirect(k).status, 404, "{k} is gone from the database");
        }
    }
    // The promoted standby handed out nothing: next_id stays where it was.
    let ns = common::pg::psql(&standby_db, "SELECT next_id FROM ricochet_namespace");
    let evidence = fleet::Evidence::load(&dir).unwrap().unwrap();
    assert!(
        ns.parse::<u64>().unwrap() < evidence.end,
        "next_id {ns}, evidence {evidence:?}"
    );
    let line = s
        .wait_stderr("FENCED", Duration::from_secs(1))
        .expect("the node reports the evidence");
    assert!(line.contains(&evidence.request_id), "{line}");
}

/// Prefetch failure: the namespace row is held locked for 3 s. Creates use the IDs on hand,
/// then answer 503 within the deadline; after the release they resume within the backoff
/// bound, and `/metrics` counts the `lock_timeout` failures.
#[test]
fn a_held_row_lock_serves_buffered_ids_then_503_then_recovers() {
    let Some(db) = TestDb::create("held_lock") else {
        return;
    };
    prepare(&db.url);
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "n0", "4");
    let mut c = Client::new(&s);
    assert_eq!(create(&mut c, "https://example.com/l/0").status, 201);
    std::thread::sleep(Duration::from_millis(300)); // standby range prefetched
    let url = db.url.clone();
    let holder = std::thread::spawn(move || {
        common::pg::psql(
            &url,
            "BEGIN; SELECT next_id FROM ricochet_namespace FOR UPDATE; SELECT pg_sleep(3); COMMIT;",
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let (mut served, mut refused) = (0, 0);
    while refused < 3 {
        let t = Instant::now();
        let r = create(&mut c, "https://example.com/l/held");
        match r.status {
            201 => served += 1,
            503 => {
                assert!(
                    t.elapsed() < Duration::from_millis(1500),
                    "503 took {:?}",
                    t.elapsed()
                );
                refused += 1;
            }
            other => panic!("{other} {}", r.text()),
        }
        assert!(served < 20, "the lock never ran the node out of IDs");
    }
    assert!(served >= 1, "IDs on hand are served while the lock is held");
    holder.join().unwrap();
    let released = Instant::now();
    while create(&mut c, "https://example.com/l/after").status != 201 {
        let bound =
            Duration::from_millis(shards::alloc::BACKOFF_MAX_MS + fleet::DB_CALL_TIMEOUT_MS);
        assert!(
            released.elapsed() < bound,
            "no recovery within {bound:?} of the release"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut raw = common::Reader::new(s.connect());
    raw.send(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    let metrics = String::from_utf8(raw.read_response(false).body).unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("ricochet_fleet_allocation_failures_total{class=\"lock_timeout\"}"))
        .unwrap();
    assert_ne!(line.rsplit(' ').next(), Some("0"), "{line}");
}

/// A namespace of the key space's last 3 IDs: three creates get them (the last, 62^7 - 1,
/// included), the fourth says the key space is exhausted.
#[test]
fn the_last_id_is_usable_then_creates_say_exhausted() {
    let Some(db) = TestDb::create("exhausted") else {
        return;
    };
    let hi = shards::keygen::KEY_SPACE;
    for args in [
        vec![
            "fleet".to_owned(),
            "init".into(),
            "--pg".into(),
            db.url.clone(),
        ],
        vec![
            "fleet".into(),
            "namespace".into(),
            "create".into(),
            "--pg".into(),
            db.url.clone(),
            "eu".into(),
            "--lo".into(),
            (hi - 3).to_string(),
            "--hi".into(),
            hi.to_string(),
        ],
    ] {
        let out = std::process::Command::new(common::BIN)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (_t, dir) = api::data_dir();
    let s = node(&dir, &db.url, "n0", "2");
    let mut c = Client::new(&s);
    let keygen_ready = |c: &mut Client, i: usize| create(c, &format!("https://example.com/x/{i}"));
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = keygen_ready(&mut c, i);
        assert_eq!(r.status, 201, "{}", r.text());
        ids.push(api::id_of(&api::keygen(&dir), &r.key()));
    }
    ids.sort();
    assert_eq!(ids, vec![hi - 3, hi - 2, hi - 1]);
    let t = Instant::now();
    loop {
        let r = keygen_ready(&mut c, 9);
        assert_eq!(r.status, 503);
        if r.text().contains("exhausted") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "never said exhausted: {}",
            r.text()
        );
    }
}

/// The commit-acknowledgement-lost fault on a serving node (hidden flags): every other COMMIT
/// reply is dropped, committed or rolled back. Creates go on; every ID handed out is inside
/// an audited interval of this node, no unconfirmed interval is used, none overlap.
#[test]
fn lost_commit_acks_on_a_serving_node_publish_only_audited_ranges() {
    let Some(db) = TestDb::create("lost_ack") else {
        return;
    };
    prepare(&db.url);
    for (flag, tag) in [
        ("--test-fleet-lose-commit-reply-from", "lost"),
        ("--test-fleet-rollback-as-uncertain-from", "rolled"),
    ] {
        let (_t, dir) = api::data_dir();
        let mut args = NO_RATE_LIMIT.to_vec();
        let node_id = format!("n-{tag}");
        args.extend([
            "--cores",
            "1",
            "--fleet-pg",
            &db.url,
            "--namespace",
            "eu",
            "--node-id",
            &node_id,
            "--segment-len",
            "2",
            flag,
            "1",
        ]);
        let s = api::start(&dir, &args);
        let mut c = Client::new(&s);
        let keygen = api::keygen(&dir);
        let mut ids = Vec::new();
        for i in 0..20 {
            let t = Instant::now();
            let r = loop {
                let r = create(&mut c, &format!("https://example.com/{tag}/{i}"));
                if r.status == 201 || t.elapsed() > Duration::from_secs(10) {
                    break r;
                }
            };
            assert_eq!(r.status, 201, "{}", r.text());
            ids.push(api::id_of(&keygen, &r.key()));
        }
        let rows = audit(&db.url);
        for w in rows.windows(2) {
            assert!(w[0].0.end <= w[1].0.start, "{:?} overlaps {:?}", w[0], w[1]);
        }
        for id in ids {
            let (_, owner) = rows
                .iter()
                .find(|(r, _)| r.contains(id))
                .unwrap_or_else(|| panic!("{tag}: ID {id} is in no audited interval"));
            assert_eq!(owner, &node_id);
        }
        assert!(
            s.wait_stderr("resolving from the audit", Duration::from_secs(1))
                .is_some(),
            "{tag}: the fault never fired"
        );
    }
}

/// `GET /api/v1/urls?limit=1` on `s` with bearer `token`: the status and `Retry-After`.
fn list_with(s: &Server, token: &str) -> (u16, Option<String>) {
    let auth = format!("Authorization: Bearer {token}");
    get_with(s, "/api/v1/urls?limit=1", &auth)
}

/// `GET path` on `s` with the header line `auth`: the status and `Retry-After`.
fn get_with(s: &Server, path: &str, auth: &str) -> (u16, Option<String>) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: t\r\n{auth}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let retry = out
        .lines()
        .find_map(|l| l.strip_prefix("Retry-After: "))
        .map(str::to_owned);
    (out[9..12].parse().unwrap(), retry)
}

/// A bootstrapped node restarted while the database is stopped, then while it hangs, starts
/// within a bound and serves every link it holds; a miss, a create and a token that may be a
/// fleet API key answer 503 with `Retry-After` (never 404 or 401). Once the database answers,
/// the node catches up by itself: a PATCH and a create made on another node while it was away
/// reach it, the fleet key works, creates resume. A node with nothing to serve yet refuses to
/// start without the database, saying why.
#[test]
fn a_node_restarted_during_an_outage_serves_what_it_holds_then_catches_up() {
    let Some(cluster) = Cluster::start("outage_restart") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "outage_restart");
    prepare(&db.url);
    let out = std::process::Command::new(common::BIN)
        .args(["fleet", "keys", "create", "--pg", &db.url, "shared"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let fleet_key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let (_ta, dir_a) = api::data_dir();
    let (_tb, dir_b) = api::data_dir();
    let a = node(&dir_a, &db.url, "a", "5");
    let mut ca = Client::new(&a);
    let mut links: Vec<(String, String)> = (0..10)
        .map(|i| {
            let url = format!("https://example.com/held/{i}");
            (ca.create_ok(&url, None), url)
        })
        .collect();
    let b = node(&dir_b, &db.url, "b", "5");
    b.wait_stderr("fleet: bootstrapped 10 links", Duration::from_secs(5))
        .expect("b bootstraps the 10 links");
    assert_eq!(b.terminate().code(), Some(0));
    // While b is away: a PATCH and a create it has not seen.
    let patched = "https://example.com/held/0/patched".to_owned();
    assert_eq!(
        ca.patch(&links[0].0, &json!({ "long_url": patched }))
            .status,
        200
    );
    let late = (
        ca.create_ok("https://example.com/late", None),
        "https://example.com/late".to_owned(),
    );

    for (signal, label) in [("stop", "stopped"), ("STOP", "hung")] {
        if signal == "stop" {
            cluster.pg_ctl("stop");
        } else {
            cluster.signal("STOP");
        }
        let t = Instant::now();
        let b = node(&dir_b, &db.url, "b", "5");
        let took = t.elapsed();
        eprintln!("{label}: b started in {took:?} without the database");
        assert!(
            took < Duration::from_secs(10),
            "{label}: start took {took:?}"
        );
        assert!(b
            .wait_stderr("the database does not answer", Duration::ZERO)
            .is_some());
        let mut cb = Client::new(&b);
        for (k, u) in links.iter().skip(1) {
            api::assert_redirects(&mut cb, k, u, None);
        }
        // `late` was written while b was away: b learns of it once the database answers.
        let misses = match signal {
            "stop" => vec![late.0.as_str(), "neverwritten"],
            _ => vec!["neverwritten"],
        };
        for key in misses {
            let t = Instant::now();
            let r = cb.redirect(key);
            assert_eq!(r.status, 503, "{label}: a miss answered {}", r.status);
            assert!(r.header("retry-after").is_some(), "503 without Retry-After");
            assert!(
                t.elapsed() < Duration::from_millis(1500),
                "{label}: slow miss"
            );
        }
        let t = Instant::now();
        let r = create(&mut cb, "https://example.com/offline");
        assert_eq!(r.status, 503, "{label}: create answered {}", r.status);
        assert!(r.header("retry-after").is_some());
        assert!(
            t.elapsed() < Duration::from_millis(3000),
            "{label}: slow create"
        );
        let (status, retry) = list_with(&b, &fleet_key);
        assert_eq!(
            status, 503,
            "{label}: an unread fleet key answered {status}"
        );
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(list_with(&b, "rk_nosuchkey_x").0, 503);
        // Shlink's API too, with its header.
        let shlink = get_with(
            &b,
            "/rest/v3/short-urls",
            &format!("X-Api-Key: {fleet_key}"),
        );
        assert_eq!(shlink, (503, Some("1".to_owned())), "{label}: Shlink API");
        // The node's own key works without the database.
        assert_eq!(list_with(&b, api::API_KEY).0, 200);

        if signal == "stop" {
            cluster.pg_ctl("start");
        } else {
            cluster.signal("CONT");
        }
        let t = Instant::now();
        for (k, u) in [&links[0].0, &late.0].into_iter().zip([&patched, &late.1]) {
            loop {
                let r = cb.redirect(k);
                if r.status == 302 && r.location() == Some(u.as_str()) {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(15),
                    "{label}: {k} still answers {} {:?}",
                    r.status,
                    r.location()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        eprintln!(
            "{label}: b caught up {:?} after the database came back",
            t.elapsed()
        );
        while list_with(&b, &fleet_key).0 != 200 {
            assert!(t.elapsed() < Duration::from_secs(15), "{label}: fleet key");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(list_with(&b, "rk_nosuchkey_x").0, 401);
        while create(&mut cb, "https://example.com/back").status != 201 {
            assert!(t.elapsed() < Duration::from_secs(15), "{label}: creates");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(b.terminate().code(), Some(0));
    }
    links[0].1 = patched;
    links.push(late);

    // A node with no links yet cannot start without the database, and says why.
    cluster.pg_ctl("stop");
    let (_tc, dir_c) = api::data_dir();
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend([
        "--cores",
        "1",
        "--fleet-pg",
        &db.url,
        "--namespace",
        "eu",
        "--node-id",
        "c",
    ]);
    let e = api::try_start(&dir_c, &args)
        .err()
        .expect("c must not start");
    assert!(e.contains("holds no bootstrapped links"), "{e}");
    cluster.pg_ctl("start");
}

/// A database that fails the checks a start makes (another schema version, another fleet's
/// key-space secret, no namespace) when it answers again never stops a node: after a start
/// without the database, and after an outage of a running node (its sessions cut), the node
/// serves every link it holds, answers creates and edits 503 with a problem type naming the
/// reason, says so in `/readyz?verbose` (gating only `?creates`) and `/metrics`, and uses the
/// database again without a restart once it is put right.
#[test]
fn a_database_that_fails_the_nodes_checks_stops_writes_never_redirects() {
    let Some(cluster) = Cluster::start("offline_refuse") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "offline_refuse");
    prepare(&db.url);
    let (_t, dir) = api::data_dir();
    let a = node(&dir, &db.url, "a", "5");
    let kept = "https://example.com/kept";
    let key = Client::new(&a).create_ok(kept, None);
    assert_eq!(a.terminate().code(), Some(0));
    let psql = |sql: &str| common::pg::psql(&db.url, sql);
    let version = psql("SELECT value FROM ricochet_meta WHERE key = 'schema_version'");
    let secret = psql("SELECT encode(secret, 'hex') FROM ricochet_keyspace WHERE id = 1");
    let cases = [
        (
            "schema",
            "UPDATE ricochet_meta SET value = '9' WHERE key = 'schema_version'".to_owned(),
            format!("UPDATE ricochet_meta SET value = '{version}' WHERE key = 'schema_version'"),
            "has schema version 9",
        ),
        (
            "secret",
            "UPDATE ricochet_keyspace SET secret = decode(repeat('ab', 32), 'hex')".to_owned(),
            format!("UPDATE ricochet_keyspace SET secret = decode('{secret}', 'hex')"),
            "is not the one data dir",
        ),
        (
            "namespace",
            // The audit rows reference the name: renamed with their check off (superuser).
            "SET session_replication_role = replica; \
             UPDATE ricochet_namespace SET name = 'eu-moved' WHERE name = 'eu'"
                .to_owned(),
            "SET session_replication_role = replica; \
             UPDATE ricochet_namespace SET name = 'eu' WHERE name = 'eu-moved'"
                .to_owned(),
            "does not exist",
        ),
    ];
    // Cut every session of the node (an outage as the node sees it): its feed must check the
    // database again before it polls.
    let cut = || {
        psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        );
    };
    for offline in [true, false] {
        for (label, break_it, restore, needle) in &cases {
            let label = format!(
                "{label}, {}",
                if offline {
                    "started offline"
                } else {
                    "running"
                }
            );
            let a = match offline {
                true => {
                    psql(break_it);
                    cluster.pg_ctl("stop");
                    let a = node(&dir, &db.url, "a", "5");
                    assert!(
                        a.wait_stderr("the database does not answer", Duration::ZERO)
                            .is_some(),
                        "{label}: started offline"
                    );
                    cluster.pg_ctl("start");
                    a
                }
                false => {
                    let a = node(&dir, &db.url, "a", "5");
                    psql(break_it);
                    a
                }
            };
            // Cut until the node has seen it: a session opened after a cut is checked only
            // at its next failure.
            let t = Instant::now();
            loop {
                if !offline {
                    cut();
                }
                if a.wait_stderr(needle, Duration::from_secs(1)).is_some() {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "{label}: the refusal is never logged: {}",
                    a.stderr_lines().join("\n")
                );
            }
            let mut c = Client::new(&a);
            api::assert_redirects(&mut c, &key, kept, None);
            let r = create(&mut c, "https://example.com/refused");
            let p = r.assert_problem(503);
            let slug = label.split(',').next().unwrap();
            assert_eq!(
                p["type"],
                format!("https://ricochet.dev/problems/database-refused-{slug}"),
                "{label}"
            );
            let r = c.patch(&key, &json!({"long_url": "https://example.com/moved"}));
            r.assert_problem(503);
            let r = c.send("GET", "/readyz?verbose", false, &[], b"").unwrap();
            assert_eq!(r.status, 200, "{label}: redirects are ready: {}", r.text());
            assert!(r.text().contains("fleet database refused"), "{}", r.text());
            let r = c.send("GET", "/readyz?creates", false, &[], b"").unwrap();
            assert_eq!(r.status, 503, "{label}: creates are not ready");
            let r = c.send("GET", "/metrics", false, &[], b"").unwrap();
            let want = format!("ricochet_fleet_database_refused{{reason=\"{slug}\"}} 1");
            assert!(r.text().contains(&want), "{label}: {want}");
            assert!(
                a.child.id() > 0 && std::fs::metadata(format!("/proc/{}", a.child.id())).is_ok()
            );
            psql(restore);
            let t = Instant::now();
            loop {
                let r = create(&mut c, "https://example.com/after");
                if r.status == 201 {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "{label}: creates never resumed: {} {}",
                    r.status,
                    r.text()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            api::assert_redirects(&mut c, &key, kept, None);
            assert_eq!(a.terminate().code(), Some(0), "{label}");
        }
    }
}

/// What an open-loop load of known keys saw on one node.
#[derive(Debug, Default)]
struct LoadSeen {
    answered: u64,
    /// Anything but the link's redirect: a status, a wrong target, an I/O error.
    errors: Vec<String>,
    /// From each request's scheduled send time to its answer: includes any wait behind an
    /// earlier slow answer (no coordinated omission).
    latencies_us: Vec<u64>,
}

/// Requests per second each load connection sends.
const OUTAGE_LOAD_RATE_PER_CONN: u64 = 400;

/// An open loop of GETs of `links` on `addr` over `conns` connections, each at
/// [`OUTAGE_LOAD_RATE_PER_CONN`] on a fixed schedule, until `stop`.
fn known_key_load(
    addr: std::net::SocketAddr,
    links: std::sync::Arc<Vec<(String, String)>>,
    conns: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<LoadSeen>> {
    (0..conns)
        .map(|t| {
            let (links, stop) = (links.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = LoadSeen::default();
                let mut c = Client::connect(addr).expect("connect");
                let every = Duration::from_micros(1_000_000 / OUTAGE_LOAD_RATE_PER_CONN);
                let start = Instant::now();
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let due = start + every * n;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let (k, u) = &links[(n as usize * 7 + t) % links.len()];
                    match c.try_redirect(k) {
                        Ok(r) if r.status == 302 && r.location() == Some(u.as_str()) => {}
                        Ok(r) => seen
                            .errors
                            .push(format!("{k}: {} {:?}", r.status, r.location())),
                        Err(e) => {
                            seen.errors.push(format!("{k}: {e}"));
                            c = Client::connect(addr).expect("reconnect");
                        }
                    }
                    seen.answered += 1;
                    seen.latencies_us.push(due.elapsed().as_micros() as u64);
                    n += 1;
                }
                seen
            })
        })
        .collect()
}

/// Three nodes under an open-loop load of known keys while the database is stopped, then
/// hung (SIGSTOP): not one known-key GET fails on any node; on every node creates and misses
/// answer 503 with `Retry-After` within their timeouts; every node recovers by itself after
/// the restart and after SIGCONT.
#[test]
fn three_nodes_under_load_serve_every_known_key_through_an_outage() {
    let Some(cluster) = Cluster::start("outage_load") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "outage_load");
    prepare(&db.url);
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let nodes: Vec<Server> = dirs
        .iter()
        .enumerate()
        .map(|(i, (_, d))| node(d, &db.url, &format!("n{i}"), "5"))
        .collect();
    let mut c0 = Client::new(&nodes[0]);
    let links: Vec<(String, String)> = (0..60)
        .map(|i| {
            let url = format!("https://example.com/known/{i}");
            (c0.create_ok(&url, None), url)
        })
        .collect();
    // Every node holds every link (from the feed, not read-through) before the outage.
    let t = Instant::now();
    for s in &nodes[1..] {
        let mut c = Client::new(s);
        for (k, u) in &links {
            let held = |c: &mut Client| {
                let r = c.send("GET", &format!("/api/v1/urls/{k}"), true, &[], b"");
                r.is_ok_and(|r| r.status == 200 && r.text().contains(u.as_str()))
            };
            while !held(&mut c) {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{k} never reached {}",
                    s.addr
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let links = std::sync::Arc::new(links);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loads: Vec<_> = nodes
        .iter()
        .map(|s| known_key_load(s.addr, links.clone(), 2, stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(500));

    for (signal, label) in [("stop", "stopped"), ("STOP", "hung")] {
        if signal == "stop" {
            cluster.pg_ctl("stop");
        } else {
            cluster.signal("STOP");
        }
        for s in &nodes {
            let mut c = Client::new(s);
            let t = Instant::now();
            let r = create(&mut c, &format!("https://example.com/{label}"));
            assert_eq!(r.status, 503, "{label} on {}: create {}", s.addr, r.text());
            assert!(r.header("retry-after").is_some(), "503 without Retry-After");
            assert!(
                t.elapsed() < Duration::from_millis(3000),
                "{label}: create took {:?}",
                t.elapsed()
            );
            let t = Instant::now();
            let r = c.redirect("neverwritten");
            assert_eq!(r.status, 503, "{label} on {}: miss {}", s.addr, r.status);
            assert!(r.header("retry-after").is_some(), "503 without Retry-After");
            assert!(
                t.elapsed() < Duration::from_millis(1500),
                "{label}: miss took {:?}",
                t.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(1500));
        if signal == "stop" {
            cluster.pg_ctl("start");
        } else {
            cluster.signal("CONT");
        }
        let t = Instant::now();
        for s in &nodes {
            let mut c = Client::new(s);
            while create(&mut c, "https://example.com/back").status != 201 {
                assert!(
                    t.elapsed() < Duration::from_secs(15),
                    "{label}: {} did not recover",
                    s.addr
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            assert_eq!(
                c.redirect("neverwritten").status,
                404,
                "{label}: misses read through again"
            );
        }
        eprintln!(
            "{label}: every node creates again {:?} after the database came back",
            t.elapsed()
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for (i, load) in loads.into_iter().enumerate() {
        let mut all = LoadSeen::default();
        for h in load {
            let seen = h.join().expect("a load thread panicked");
            all.answered += seen.answered;
            all.errors.extend(seen.errors);
            all.latencies_us.extend(seen.latencies_us);
        }
        all.latencies_us.sort_unstable();
        let pct = |p: f64| all.latencies_us[((all.latencies_us.len() - 1) as f64 * p) as usize];
        eprintln!(
            "n{i}: {} known-key GETs, {} errors, latency from schedule p50 {} us p99 {} us max {} us",
            all.answered,
            all.errors.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0)
        );
        assert!(
            all.errors.is_empty(),
            "n{i}: {:?}",
            &all.errors[..all.errors.len().min(5)]
        );
        assert!(
            all.answered > 2_000,
            "n{i}: the load ran ({})",
            all.answered
        );
    }
}
