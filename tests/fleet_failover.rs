//! Fleet mode through failovers (issue #24): a real primary, a `pg_basebackup -R` streaming
//! standby promoted after it lagged, and several writing nodes. What a node followed on the
//! old primary's timeline after the standby's fork is not the new primary's history; the
//! nodes must notice (the timeline, not the transaction ids, says so), save what they held
//! that the database lost, and serve exactly the database's state.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{self, Client, NO_RATE_LIMIT};
use common::pg::{Cluster, TestDb};
use common::Server;
use std::path::Path;
use std::time::{Duration, Instant};

use common::pg::prepare_fleet as prepare;

fn node(dir: &Path, url: &str, id: &str) -> Server {
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
    ]);
    api::start(dir, &args)
}

/// A primary with one streaming standby (through a replication slot with `slot`), the fleet
/// prepared on a database of the primary, and the URLs the tests use: the standby's own, and
/// both hosts with the writable one chosen (a failover needs no change on the nodes).
struct Ha {
    primary: Cluster,
    db: TestDb,
    standby: Cluster,
    standby_db: String,
    both: String,
}

fn ha(name: &str, slot: bool) -> Option<Ha> {
    let primary = Cluster::start(name)?;
    let db = TestDb::on(&primary.url, name);
    prepare(&db.url);
    let standby = if slot {
        primary.standby_with_slot()
    } else {
        primary.standby()
    };
    let db_name = db.url.rsplit('/').next().unwrap().to_owned();
    let standby_db = format!("postgres://postgres@127.0.0.1:{}/{db_name}", standby.port());
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db_name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    Some(Ha {
        primary,
        db,
        standby,
        standby_db,
        both,
    })
}

/// Waits until `ok` holds, up to `limit`, or panics with `what`.
fn wait_for(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what} (after {limit:?})");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where `key` sends a visitor now on `c`: the target, or `None` for 404. A key the node does
/// not hold is looked up in the database, which may not answer yet (503): `Some("503")`, never
/// a state of the database.
fn served(c: &mut Client, key: &str) -> Option<String> {
    let r = c.redirect(key);
    match r.status {
        404 => None,
        503 => Some("503".into()),
        s if (300..400).contains(&s) => r.location().map(str::to_owned),
        s => panic!("GET /{key}: {s} {}", r.text()),
    }
}

/// The database's state of `keys`: the target of each live one.
fn db_state(url: &str, keys: &[String]) -> Vec<(String, Option<String>)> {
    keys.iter()
        .map(|k| {
            let t = common::pg::psql(
                url,
                &format!("SELECT target FROM ricochet_links WHERE key = '{k}' AND NOT deleted"),
            );
            (k.clone(), (!t.is_empty()).then_some(t))
        })
        .collect()
}

/// The links in a node's `fleet-lost-*` files, by key.
fn lost_links(dir: &Path) -> std::collections::HashMap<String, String> {
    let mut lost = std::collections::HashMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(ricochet::fleet_mode::lost::LOST_FILE_PREFIX) {
            continue;
        }
        for l in std::fs::read_to_string(e.path()).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            lost.insert(
                v["key"].as_str().unwrap().to_owned(),
                v["long_url"].as_str().unwrap().to_owned(),
            );
        }
    }
    lost
}

/// The keys a node's `fleet-undone-deletes-*` files list.
fn undone_deletes(dir: &Path) -> std::collections::HashSet<String> {
    let mut undone = std::collections::HashSet::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(ricochet::fleet_mode::lost::UNDONE_DELETES_FILE_PREFIX) {
            continue;
        }
        for l in std::fs::read_to_string(e.path()).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            undone.insert(v["key"].as_str().unwrap().to_owned());
        }
    }
    undone
}

/// Hole 1. Three nodes write through a primary whose standby was stopped (so it lags); every
/// node follows every change. The primary stops, the standby is promoted, and before any node
/// reaches it, more transactions run there than the lost stretch had: the new primary's
/// transaction ids are past every node's cursor, so no cursor looks ahead of it. The nodes
/// must still serve exactly the new primary's state, list what they held that it lost
/// (changed targets and new links) in their `fleet-lost` files, and follow what is written
/// after the failover.
#[test]
fn a_promoted_standby_is_a_new_history_even_when_its_xids_are_past_the_cursors() {
    // Link writes of the lost stretch need no allocation: aliases only.
    let Some(Ha {
        primary,
        db,
        standby,
        standby_db,
        both,
    }) = ha("timeline", false)
    else {
        return;
    };
    let dirs: Vec<_> = (0..3).map(|_| api::data_dir()).collect();
    let nodes: Vec<Server> = dirs
        .iter()
        .enumerate()
        .map(|(i, (_, d))| node(d, &both, &format!("n{i}")))
        .collect();
    let mut clients: Vec<Client> = nodes.iter().map(Client::new).collect();
    let mut keys = Vec::new();
    for (n, c) in clients.iter_mut().enumerate() {
        for i in 0..4 {
            let key = format!("tl-{n}x{i}");
            c.create_ok(&format!("https://example.com/{key}/v1"), Some(&key));
            keys.push(key);
        }
    }
    let count = |url: &str| common::pg::psql(url, "SELECT count(*) FROM ricochet_links");
    wait_for(Duration::from_secs(10), "the standby replays", || {
        count(&standby_db) == count(&db.url)
    });
    standby.pg_ctl("stop");
    // The stretch the failover loses: each node changes its keys, deletes one and creates
    // new ones, all acknowledged by the primary alone.
    for (n, c) in clients.iter_mut().enumerate() {
        for i in 0..3 {
            let key = format!("tl-{n}x{i}");
            let r = c.patch(
                &key,
                &serde_json::json!({"long_url": format!("https://example.com/{key}/lost")}),
            );
            assert_eq!(r.status, 200, "{}", r.text());
        }
        assert_eq!(c.delete(&format!("tl-{n}x3")).status, 204);
        for i in 0..2 {
            let key = format!("tl-{n}new{i}");
            c.create_ok(&format!("https://example.com/{key}/lost"), Some(&key));
            keys.push(key);
        }
    }
    let before = db_state(&db.url, &keys);
    // Every node followed every change of the stretch (its feed applied them).
    for c in clients.iter_mut() {
        wait_for(
            Duration::from_secs(10),
            "the nodes follow the stretch",
            || before.iter().all(|(k, t)| served(c, k) == *t),
        );
    }
    let next_xid = |url: &str| -> u64 {
        common::pg::psql(url, "SELECT pg_snapshot_xmax(pg_current_snapshot())")
            .parse()
            .unwrap()
    };
    let primary_next = next_xid(&primary.url);
    primary.pg_ctl("stop");
    // No node may reach the promoted standby before its transaction ids are past theirs.
    let db_name = db.url.rsplit('/').next().unwrap();
    let hba = format!("{}/data/pg_hba.conf", standby.dir);
    let allowed = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("host {db_name} all 127.0.0.1/32 reject\n{allowed}"),
    )
    .unwrap();
    standby.pg_ctl("start");
    standby.pg_ctl("promote");
    common::pg::psql(
        &standby.url,
        "CREATE PROCEDURE burn(n int) LANGUAGE plpgsql AS $$ BEGIN \
           FOR i IN 1..n LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$",
    );
    while next_xid(&standby.url) <= primary_next + 100 {
        common::pg::psql(&standby.url, "CALL burn(500)");
    }
    std::fs::write(&hba, allowed).unwrap();
    standby.pg_ctl("reload");
    // Nothing writes through the nodes from here until the check below.
    let after = db_state(&standby_db, &keys);
    assert_ne!(before, after, "the promoted standby lacks the stretch");

    // Every node serves exactly the new primary's state.
    for (n, c) in clients.iter_mut().enumerate() {
        wait_for(
            Duration::from_secs(30),
            &format!("node {n} serves the promoted standby's state"),
            || after.iter().all(|(k, t)| served(c, k) == *t),
        );
    }
    // What each node held that the database lost is listed for the operator: the links it
    // created and the targets it changed in the stretch, each with what the node served, and
    // the keys it deleted there, which the database holds live again.
    for (n, (_, dir)) in dirs.iter().enumerate() {
        let lost = lost_links(dir);
        let undone = undone_deletes(dir);
        let undone_want: std::collections::HashSet<String> = before
            .iter()
            .zip(&after)
            .filter(|((_, had), (_, kept))| had.is_none() && kept.is_some())
            .map(|((k, _), _)| k.clone())
            .collect();
        assert_eq!(undone_want.len(), 3, "one lost delete per node's stretch");
        assert_eq!(
            undone, undone_want,
            "node {n}: the deletes the database lost"
        );
        for (k, t) in &before {
            let had = t.as_deref();
            let kept = after.iter().find(|(a, _)| a == k).unwrap().1.as_deref();
            match (had, kept) {
                (Some(had), kept) if Some(had) != kept => {
                    assert_eq!(lost.get(k).map(String::as_str), Some(had), "node {n}: {k}")
                }
                _ => assert!(!lost.contains_key(k), "node {n}: {k} was not lost"),
            }
        }
    }
    // The feed goes on from the new history: a change made now reaches every node.
    let key = "tl-0x0";
    let url = "https://example.com/tl-0x0/after";
    wait_for(
        Duration::from_secs(10),
        "a write after the failover",
        || {
            clients[1]
                .patch(key, &serde_json::json!({ "long_url": url }))
                .status
                == 200
        },
    );
    for c in clients.iter_mut() {
        wait_for(Duration::from_secs(10), "every node follows it", || {
            served(c, key).as_deref() == Some(url)
        });
    }
}

/// Hole 2, and the fault harness's synchronous case: the primary has a synchronous standby,
/// which stops. Commits on the primary are then local only and wait for it (past any
/// `statement_timeout`); a backend terminated while waiting (the allocator's resolution of a
/// lost COMMIT reply does that) ends the wait with a WARNING and its commit stands locally.
/// None of those may be acknowledged or published: after the primary stops and the standby is
/// promoted, every create (alias or generated) and change the node answered 2xx is there,
/// every generated key lies in a range it audited, and the node is not fenced (it never
/// published a range the standby lacks), so it goes on making generated keys.
#[test]
fn with_a_synchronous_standby_no_acknowledged_write_is_lost_by_a_failover() {
    let Some(Ha {
        primary,
        db: _db,
        standby,
        standby_db,
        both,
    }) = ha("sync_standby", false)
    else {
        return;
    };
    common::pg::psql(
        &primary.url,
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
    );
    common::pg::psql(&primary.url, "SELECT pg_reload_conf()");
    wait_for(
        Duration::from_secs(10),
        "the standby is synchronous",
        || common::pg::psql(&primary.url, "SELECT sync_state FROM pg_stat_replication") == "sync",
    );
    let (_t, dir) = api::data_dir();
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend([
        "--cores",
        "1",
        "--fleet-pg",
        &both,
        "--namespace",
        "eu",
        "--node-id",
        "n0",
        "--segment-len",
        "2",
    ]);
    let s = api::start(&dir, &args);
    let mut c = Client::new(&s);
    // Acknowledged writes: key -> target.
    let mut acked: Vec<(String, String)> = Vec::new();
    let mut generated = Vec::new();
    for i in 0..2 {
        let url = format!("https://example.com/sync/before/{i}");
        let r = c.create(&serde_json::json!({ "long_url": url }));
        assert_eq!(r.status, 201, "{}", r.text());
        generated.push(r.key());
        acked.push((r.key(), url));
    }
    standby.pg_ctl("stop");
    let mut answered = std::collections::BTreeMap::<u16, u32>::new();
    for i in 0..4 {
        let url = format!("https://example.com/sync/during/{i}");
        let r = c.create(&serde_json::json!({ "long_url": url }));
        *answered.entry(r.status).or_default() += 1;
        if r.status == 201 {
            generated.push(r.key());
            acked.push((r.key(), url.clone()));
        }
        let alias = format!("sync-alias-{i}");
        let r = c.create(&serde_json::json!({ "long_url": url, "custom_alias": alias }));
        *answered.entry(r.status).or_default() += 1;
        if r.status == 201 {
            acked.push((alias, url));
        }
    }
    let (key, _) = acked[0].clone();
    let url = "https://example.com/sync/changed".to_owned();
    let r = c.patch(&key, &serde_json::json!({ "long_url": url }));
    *answered.entry(r.status).or_default() += 1;
    if r.status == 200 {
        acked[0].1 = url;
    }
    eprintln!("answers while the synchronous standby was down: {answered:?}");
    primary.pg_ctl("stop");
    standby.pg_ctl("start");
    standby.pg_ctl("promote");
    // The node goes on making generated keys on the promoted standby. A range whose commit
    // was never replicated was never published, so the node is not fenced by its loss.
    let t = Instant::now();
    let mut after = 0;
    while after < 3 {
        let url = format!("https://example.com/sync/after/{after}");
        let r = c.create(&serde_json::json!({ "long_url": url }));
        match r.status {
            201 => {
                generated.push(r.key());
                acked.push((r.key(), url));
                after += 1;
            }
            503 => {
                assert!(
                    !r.text().contains("allocation-fenced"),
                    "fenced: a range was published that the standby never had"
                );
                assert!(t.elapsed() < Duration::from_secs(30), "{}", r.text());
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("{other} {}", r.text()),
        }
    }
    for (k, u) in &acked {
        let t = common::pg::psql(
            &standby_db,
            &format!("SELECT target FROM ricochet_links WHERE key = '{k}' AND NOT deleted"),
        );
        assert_eq!(
            &t, u,
            "{k} was acknowledged, and the promoted standby lacks it"
        );
    }
    let keygen = api::keygen(&dir);
    let ranges = common::pg::psql(
        &standby_db,
        "SELECT start_id, end_id FROM ricochet_alloc_audit",
    );
    for k in &generated {
        let id = api::id_of(&keygen, k);
        let audited = ranges.lines().any(|l| {
            let (a, b) = l.split_once('|').unwrap();
            (a.parse::<u64>().unwrap()..b.parse::<u64>().unwrap()).contains(&id)
        });
        assert!(
            audited,
            "{k} (ID {id}) is outside every range the standby audited"
        );
    }
}

/// Hole 2 with an asynchronous standby, and the harness's "no generated key issued twice": a
/// range the primary committed is published only once every standby a failover could promote
/// has flushed it (its replication slot says so). Here the standby stops, so new ranges wait
/// and creates past the IDs in hand answer 503; then the primary stops and the standby is
/// promoted. Another node then allocates from the promoted standby: before the fix it was
/// handed the ranges the first node had published while the standby was down, and issued the
/// same keys again.
#[test]
fn a_range_is_published_only_once_the_standbys_slot_has_it_so_a_promotion_reissues_no_key() {
    let Some(Ha {
        primary,
        db: _db,
        standby,
        standby_db,
        both,
    }) = ha("slot_standby", true)
    else {
        return;
    };
    let start = |id: &str| {
        let (t, dir) = api::data_dir();
        let mut args = NO_RATE_LIMIT.to_vec();
        args.extend([
            "--cores",
            "1",
            "--fleet-pg",
            &both,
            "--namespace",
            "eu",
            "--node-id",
            id,
            "--segment-len",
            "2",
        ]);
        let s = api::start(&dir, &args);
        (t, dir, s)
    };
    let (_t0, dir0, n0) = start("n0");
    let (_t1, _dir1, n1) = start("n1");
    let mut c0 = Client::new(&n0);
    let mut c1 = Client::new(&n1);
    // Generated keys by node, as answered 201.
    let mut issued: Vec<(String, &str)> = Vec::new();
    let mut create = |c: &mut Client, node: &'static str, what: &str| -> u16 {
        let r = c.create(&serde_json::json!({ "long_url": format!("https://example.com/{what}") }));
        if r.status == 201 {
            issued.push((r.key(), node));
        }
        r.status
    };
    for i in 0..4 {
        assert_eq!(create(&mut c0, "n0", &format!("before/{i}")), 201);
    }
    standby.pg_ctl("stop");
    let mut answered = std::collections::BTreeMap::<u16, u32>::new();
    for i in 0..10 {
        *answered
            .entry(create(&mut c0, "n0", &format!("during/{i}")))
            .or_default() += 1;
    }
    eprintln!("n0's generated creates while the standby was down: {answered:?}");
    primary.pg_ctl("stop");
    standby.pg_ctl("start");
    standby.pg_ctl("promote");
    let t = Instant::now();
    let mut made = 0;
    while made < 14 {
        match create(&mut c1, "n1", &format!("after/{made}")) {
            201 => made += 1,
            503 => {
                assert!(t.elapsed() < Duration::from_secs(60), "n1 makes no keys");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("n1's create: {other}"),
        }
    }
    let mut seen = std::collections::HashMap::new();
    for (k, node) in &issued {
        if let Some(other) = seen.insert(k.clone(), *node) {
            panic!("{k} was issued by {other} and again by {node} (answers while the standby was down: {answered:?})");
        }
    }
    let keygen = api::keygen(&dir0);
    let audit = common::pg::psql(
        &standby_db,
        "SELECT start_id, end_id, node_id FROM ricochet_alloc_audit",
    );
    for (k, node) in &issued {
        let id = api::id_of(&keygen, k);
        let audited = audit.lines().any(|l| {
            let c: Vec<&str> = l.split('|').collect();
            (c[0].parse::<u64>().unwrap()..c[1].parse::<u64>().unwrap()).contains(&id)
                && c[2] == *node
        });
        assert!(
            audited,
            "{k} (ID {id}) of {node} is in none of its ranges the promoted standby holds"
        );
    }
}
