//! The PostgreSQL allocation authority against a real server (`RICOCHET_TEST_PG`): the
//! schema's guarantees, the allocation transaction under contention, lost COMMIT replies,
//! a held row lock, a hung server, exhaustion and a rolled-back authority. Results are read
//! from the audit table and from what each allocator returned, never only from a unique index.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::pg::{Cluster, TestDb};
use fleet::{Db, FleetFaults, FleetSetup, FleetStats, PgAuthority};
use shards::alloc::{Authority, AuthorityError, IdRange};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn init(db: &TestDb) {
    let mut d = Db::new(&db.url).unwrap();
    fleet::init(&mut d).unwrap();
}

fn authority(
    url: &str,
    ns: &str,
    node: &str,
    dir: &std::path::Path,
    faults: FleetFaults,
) -> PgAuthority {
    let setup = FleetSetup {
        url: url.to_owned(),
        namespace: ns.to_owned(),
        node_id: node.to_owned(),
        data_dir: dir.to_path_buf(),
        faults,
        ceiling_step: fleet::CEILING_STEP,
    };
    PgAuthority::new(
        Db::new(url).unwrap(),
        setup,
        Arc::new(FleetStats::default()),
    )
    .unwrap()
}

/// Every audited interval of `ns`, sorted.
fn audit(db: &TestDb, ns: &str) -> Vec<(IdRange, String)> {
    db.sql(&format!(
        "SELECT start_id, end_id, node_id FROM ricochet_alloc_audit WHERE namespace = '{ns}' \
         ORDER BY start_id"
    ))
    .lines()
    .filter(|l| !l.is_empty())
    .map(|l| {
        let f: Vec<&str> = l.split('|').collect();
        (
            IdRange {
                start: f[0].parse().unwrap(),
                end: f[1].parse().unwrap(),
            },
            f[2].to_owned(),
        )
    })
    .collect()
}

#[test]
fn init_is_idempotent_versioned_and_keeps_one_secret() {
    let Some(db) = TestDb::create("init") else {
        return;
    };
    let mut d = Db::new(&db.url).unwrap();
    assert_eq!(fleet::schema_version(&mut d).unwrap(), 0);
    let first = fleet::init(&mut d).unwrap();
    assert_eq!(
        (first.from_version, first.to_version, first.secret_created),
        (0, fleet::SCHEMA_VERSION, true)
    );
    let secret = fleet::load_secret(&mut d).unwrap();
    let again = fleet::init(&mut d).unwrap();
    assert_eq!(
        (again.from_version, again.secret_created),
        (fleet::SCHEMA_VERSION, false)
    );
    assert_eq!(fleet::load_secret(&mut d).unwrap(), secret);
    assert_eq!(
        db.sql("SELECT value FROM ricochet_meta WHERE key = 'schema_version'"),
        fleet::SCHEMA_VERSION.to_string()
    );
    // A newer schema is refused, not downgraded.
    db.sql("UPDATE ricochet_meta SET value = '99' WHERE key = 'schema_version'");
    let e = fleet::init(&mut d).unwrap_err().to_string();
    assert!(e.contains("schema version 99"), "{e}");
    // Key columns compare bytes: 'aB' and 'Ab' are two namespaces.
    db.sql(&format!(
        "UPDATE ricochet_meta SET value = '{}' WHERE key = 'schema_version'",
        fleet::SCHEMA_VERSION
    ));
    fleet::create_namespace(&mut d, "aB", 1, 10).unwrap();
    fleet::create_namespace(&mut d, "Ab", 10, 20).unwrap();
    assert_eq!(db.sql("SELECT count(*) FROM ricochet_namespace"), "2");
}

#[test]
fn the_database_keeps_namespaces_and_intervals_disjoint() {
    let Some(db) = TestDb::create("disjoint") else {
        return;
    };
    init(&db);
    let mut d = Db::new(&db.url).unwrap();
    fleet::create_namespace(&mut d, "eu", 1, 1000).unwrap();
    fleet::create_namespace(&mut d, "us", 1000, 2000).unwrap();
    fleet::create_namespace(&mut d, "eu", 1, 1000).unwrap(); // same again: no-op
    let e = fleet::create_namespace(&mut d, "ap", 1500, 2500)
        .unwrap_err()
        .to_string();
    assert!(e.contains("refused by the database"), "{e}");
    let e = fleet::create_namespace(&mut d, "eu", 1, 999)
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    // Bypassing ricochet: the constraints and triggers themselves refuse.
    let e = db
        .try_sql(
            "INSERT INTO ricochet_namespace (name, lo, hi, next_id, ceiling) \
             VALUES ('x', 1999, 3000, 1999, 1999)",
        )
        .unwrap_err();
    assert!(e.contains("namespace_ranges_disjoint"), "{e}");
    db.sql("UPDATE ricochet_namespace SET next_id = 100 WHERE name = 'eu'");
    db.sql(
        "INSERT INTO ricochet_alloc_audit (request_id, namespace, start_id, end_id, node_id, instance) \
         VALUES ('r1', 'eu', 1, 50, 'n', 'i')",
    );
    let e = db
        .try_sql(
            "INSERT INTO ricochet_alloc_audit (request_id, namespace, start_id, end_id, node_id, instance) \
             VALUES ('r2', 'eu', 49, 60, 'n', 'i')",
        )
        .unwrap_err();
    assert!(e.contains("audit_intervals_disjoint"), "{e}");
    let e = db
        .try_sql(
            "INSERT INTO ricochet_alloc_audit (request_id, namespace, start_id, end_id, node_id, instance) \
             VALUES ('r3', 'eu', 60, 200, 'n', 'i')",
        )
        .unwrap_err();
    assert!(
        e.contains("outside namespace eu or above its next_id"),
        "{e}"
    );
    let e = db
        .try_sql("UPDATE ricochet_namespace SET next_id = 10 WHERE name = 'eu'")
        .unwrap_err();
    assert!(e.contains("may not go down"), "{e}");
    // Ceilings: never below next_id, never lowered, a raise is above the ceiling.
    db.sql(
        "INSERT INTO ricochet_namespace (name, lo, hi, next_id, ceiling) \
         VALUES ('y', 5000, 6000, 5000, 5000)",
    );
    let e = db
        .try_sql("UPDATE ricochet_namespace SET next_id = 5001 WHERE name = 'y'")
        .unwrap_err();
    assert!(e.contains("namespace_ceiling_valid"), "{e}");
    let e = db
        .try_sql("UPDATE ricochet_namespace SET ceiling = 200 WHERE name = 'eu'")
        .unwrap_err();
    assert!(e.contains("ceiling of namespace eu may not go down"), "{e}");
    let e = db
        .try_sql("UPDATE ricochet_namespace SET ceiling_next = 900 WHERE name = 'eu'")
        .unwrap_err();
    assert!(e.contains("namespace_ceiling_valid"), "{e}");
    // The runbook's raise refuses to lower too.
    let e = fleet::raise_next_id(&mut d, "eu", 50)
        .unwrap_err()
        .to_string();
    assert!(e.contains("refusing to lower"), "{e}");
    assert_eq!(
        fleet::raise_next_id(&mut d, "eu", 500).unwrap().next_id,
        500
    );
}

/// Three allocators, tiny segments (1 to 3 IDs), all at once: every range each one got is in
/// the audit under its node, the audit is exactly the union of what they got, and no two
/// intervals share an ID.
#[test]
fn tiny_segments_from_three_allocators_never_overlap() {
    let Some(db) = TestDb::create("tiny") else {
        return;
    };
    init(&db);
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 1, 1_000_000).unwrap();
    let handles: Vec<_> = (0..3)
        .map(|n| {
            let url = db.url.clone();
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let mut a = authority(
                    &url,
                    "eu",
                    &format!("node{n}"),
                    dir.path(),
                    FleetFaults::default(),
                );
                (0..120u64)
                    .map(|i| a.allocate(1 + (i + n) % 3).expect("allocation"))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let got: Vec<Vec<IdRange>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let rows = audit(&db, "eu");
    let mut all: Vec<(IdRange, String)> = got
        .iter()
        .enumerate()
        .flat_map(|(n, rs)| rs.iter().map(move |r| (*r, format!("node{n}"))))
        .collect();
    all.sort_by_key(|(r, _)| r.start);
    assert_eq!(all, rows, "what the allocators got is exactly the audit");
    for w in all.windows(2) {
        assert!(w[0].0.end <= w[1].0.start, "{:?} overlaps {:?}", w[0], w[1]);
    }
    let next: u64 = db
        .sql("SELECT next_id FROM ricochet_namespace")
        .parse()
        .unwrap();
    assert_eq!(next, all.last().unwrap().0.end);
}

#[test]
fn exhaustion_hands_out_the_last_id_then_says_so() {
    let Some(db) = TestDb::create("exhaust") else {
        return;
    };
    init(&db);
    let hi = shards::keygen::KEY_SPACE;
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "last", hi - 3, hi).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = authority(&db.url, "last", "n", dir.path(), FleetFaults::default());
    assert_eq!(
        a.allocate(2).unwrap(),
        IdRange {
            start: hi - 3,
            end: hi - 1
        }
    );
    assert_eq!(
        a.allocate(2).unwrap(),
        IdRange {
            start: hi - 1,
            end: hi
        }
    );
    assert!(matches!(a.allocate(2), Err(AuthorityError::Exhausted)));
    assert_eq!(audit(&db, "last").len(), 2);
}

/// COMMIT whose reply is lost: a committed one is found in the audit and published; a rolled
/// back one is not published. Either way, what was published is exactly the audit.
#[test]
fn lost_commit_replies_publish_only_what_the_audit_proves() {
    let Some(db) = TestDb::create("uncertain") else {
        return;
    };
    init(&db);
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 1, 1_000_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let faults = FleetFaults {
        lose_commit_reply_from: Some(1),
        rollback_as_uncertain_from: Some(2),
        freeze_at_commit_from: None,
    };
    let mut a = authority(&db.url, "eu", "n", dir.path(), faults);
    let mut published = Vec::new();
    let mut refused = 0;
    for _ in 0..20 {
        match a.allocate(10) {
            Ok(r) => published.push(r),
            Err(AuthorityError::Unavailable(m)) => {
                assert!(m.contains("was not committed"), "{m}");
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((published.len(), refused), (10, 10));
    let rows: Vec<IdRange> = audit(&db, "eu").into_iter().map(|(r, _)| r).collect();
    assert_eq!(published, rows);
    let s = a.stats().snapshot();
    assert_eq!(
        s.failures
            .iter()
            .find(|(c, _)| *c == "uncertain_commit")
            .unwrap()
            .1,
        10
    );
    assert_eq!(s.unknown_outcomes, 0);
}

/// The hard case of a lost COMMIT reply: the old session is still alive, its COMMIT sent but
/// not yet read (its backend frozen just before), while the allocator resolves. Reading the
/// audit then would find nothing although the COMMIT may still run; the allocator must end
/// that backend and wait until it is gone first. Every frozen allocation is then judged not
/// committed, never published, and what was published is exactly the audit.
#[test]
fn a_commit_still_in_flight_is_resolved_only_once_its_backend_is_gone() {
    let Some(db) = TestDb::create("frozen_commit") else {
        return;
    };
    init(&db);
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 1, 1_000_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let faults = FleetFaults {
        freeze_at_commit_from: Some(1),
        ..FleetFaults::default()
    };
    let mut a = authority(&db.url, "eu", "n", dir.path(), faults);
    let mut published = Vec::new();
    for n in 1..=4 {
        let t = Instant::now();
        match a.allocate(10) {
            Ok(r) => {
                assert_eq!(n % 2, 0, "allocation {n} was frozen and published");
                published.push(r);
            }
            Err(AuthorityError::Unavailable(m)) => {
                assert_eq!(n % 2, 1, "allocation {n}: {m}");
                assert!(m.contains("was not committed"), "{m}");
                // Judged only after the frozen backend was gone.
                assert!(
                    t.elapsed() >= Duration::from_millis(fleet::DB_CALL_TIMEOUT_MS),
                    "{:?}",
                    t.elapsed()
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
    let rows: Vec<IdRange> = audit(&db, "eu").into_iter().map(|(r, _)| r).collect();
    assert_eq!(published, rows);
    assert_eq!(published.len(), 2);
}

/// Someone holds the namespace row: the allocation fails as `lock_timeout` in about
/// `LOCK_TIMEOUT_MS`, and succeeds once the lock is gone.
#[test]
fn a_held_row_lock_is_a_bounded_classified_failure() {
    let Some(db) = TestDb::create("lock") else {
        return;
    };
    init(&db);
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 1, 1_000_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = authority(&db.url, "eu", "n", dir.path(), FleetFaults::default());
    a.allocate(5).unwrap();
    let url = db.url.clone();
    let holder = std::thread::spawn(move || {
        common::pg::psql(
            &url,
            "BEGIN; SELECT next_id FROM ricochet_namespace WHERE name = 'eu' FOR UPDATE; \
             SELECT pg_sleep(3); COMMIT;",
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let e = a.allocate(5).unwrap_err().to_string();
    let took = t.elapsed();
    assert!(e.contains("lock_timeout"), "{e}");
    assert!(
        took < Duration::from_millis(fleet::DB_CALL_TIMEOUT_MS),
        "took {took:?}"
    );
    holder.join().unwrap();
    a.allocate(5).unwrap();
    let s = a.stats().snapshot();
    assert_eq!(
        s.failures
            .iter()
            .find(|(c, _)| *c == "lock_timeout")
            .unwrap()
            .1,
        1
    );
    assert_eq!(s.allocations, 2);
}

/// A SIGSTOPped server: the call fails within the client-side timeout instead of hanging the
/// thread; after SIGCONT allocation resumes. Stopping it, then starting it again: the same.
#[test]
fn a_hung_or_stopped_server_fails_in_bounded_time_and_recovers() {
    let Some(cluster) = Cluster::start("hung") else {
        return;
    };
    let db = TestDb::on(&cluster.url, "hung");
    init(&db);
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 1, 1_000_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = authority(&db.url, "eu", "n", dir.path(), FleetFaults::default());
    a.allocate(5).unwrap();
    let bound = Duration::from_millis(fleet::DB_CALL_TIMEOUT_MS + 1000);
    cluster.signal("STOP");
    for _ in 0..2 {
        let t = Instant::now();
        let e = a.allocate(5).unwrap_err().to_string();
        assert!(t.elapsed() < bound, "took {:?}: {e}", t.elapsed());
        assert!(e.contains("timeout"), "{e}");
    }
    cluster.signal("CONT");
    let t = Instant::now();
    while a.allocate(5).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no recovery after SIGCONT"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.pg_ctl("stop");
    let t = Instant::now();
    assert!(a.allocate(5).is_err());
    assert!(t.elapsed() < bound);
    cluster.pg_ctl("start");
    let t = Instant::now();
    while a.allocate(5).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no recovery after restart"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let rows = audit(&db, "eu");
    for w in rows.windows(2) {
        assert!(w[0].0.end <= w[1].0.start);
    }
}

/// The authority loses this node's last confirmed allocation (what a lagging replica promoted
/// to primary looks like): the next allocation is fenced, and stays fenced, also for a new
/// authority on the same data dir.
#[test]
fn a_rolled_back_authority_is_fenced() {
    let Some(db) = TestDb::create("rollback") else {
        return;
    };
    init(&db);
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 1, 1_000_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = authority(&db.url, "eu", "n", dir.path(), FleetFaults::default());
    a.allocate(100).unwrap();
    let last = a.allocate(100).unwrap();
    // The rollback: the last audit row and the advance of next_id are gone.
    db.sql(&format!(
        "ALTER TABLE ricochet_namespace DISABLE TRIGGER next_id_never_lowers; \
         DELETE FROM ricochet_alloc_audit WHERE start_id = {}; \
         UPDATE ricochet_namespace SET next_id = {}",
        last.start, last.start
    ));
    let e = a.allocate(100).unwrap_err();
    assert!(matches!(e, AuthorityError::Fenced { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("[{}, {})", last.start, last.end)),
        "{e}"
    );
    assert!(a.stats().snapshot().fenced);
    assert!(matches!(
        a.allocate(100),
        Err(AuthorityError::Fenced { .. })
    ));
    let mut b = authority(&db.url, "eu", "n", dir.path(), FleetFaults::default());
    assert!(matches!(
        b.allocate(100),
        Err(AuthorityError::Fenced { .. })
    ));
    // Nothing was allocated past the rollback.
    assert_eq!(
        db.sql("SELECT next_id FROM ricochet_namespace"),
        last.start.to_string()
    );
    // A data dir belongs to one namespace.
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "us", 2_000_000, 3_000_000).unwrap();
    let setup = FleetSetup {
        url: db.url.clone(),
        namespace: "us".into(),
        node_id: "n".into(),
        data_dir: dir.path().to_path_buf(),
        faults: FleetFaults::default(),
        ceiling_step: fleet::CEILING_STEP,
    };
    let e = PgAuthority::new(Db::new(&db.url).unwrap(), setup, Arc::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("not --namespace \"us\""), "{e}");
}

/// A new namespace is a raise from nothing: `create_namespace` returns once it matured, with
/// the first step of IDs below its ceiling.
#[test]
fn a_new_namespace_is_ready_after_its_ceiling_matured() {
    let Some(db) = TestDb::create("newns") else {
        return;
    };
    init(&db);
    let t = Instant::now();
    fleet::create_namespace(&mut Db::new(&db.url).unwrap(), "eu", 5, 1 << 40).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(fleet::RANGE_MATURITY_MS));
    assert_eq!(
        db.sql("SELECT ceiling, ceiling_next IS NULL FROM ricochet_namespace"),
        format!("{}|t", 5 + fleet::CEILING_STEP)
    );
}

/// The ceiling's guarantee, checked against readers: a ceilings read is trusted for
/// `HIGH_WATER_FRESH_MS` from when it was sent, so every range an allocator hands out while a
/// read is still fresh must lie below that read's ceiling (or raise under way). Two
/// allocators, 3-ID segments, a 10-ID step: raises start, are stamped, mature and are promoted
/// several times while a reader reads every 10 ms. Promoting a raise without its maturity
/// fails this test.
#[test]
fn no_range_is_handed_out_above_a_fresh_ceiling_read() {
    let Some(db) = TestDb::create("ceiling") else {
        return;
    };
    init(&db);
    // Bypassing `create_namespace`: a namespace whose ceiling is its start, so the first
    // allocation must raise it.
    db.sql(
        "INSERT INTO ricochet_namespace (name, lo, hi, next_id, ceiling) \
         VALUES ('eu', 1, 1000000, 1, 1)",
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (url, stop) = (db.url.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut d = Db::new(&url).unwrap();
            let mut reads = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                reads.push(fleet::ceiling::read(&mut d).unwrap());
                std::thread::sleep(Duration::from_millis(10));
            }
            reads
        })
    };
    let stats = Arc::new(FleetStats::default());
    let allocators: Vec<_> = (0..2)
        .map(|n| {
            let (url, stats) = (db.url.clone(), stats.clone());
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let setup = FleetSetup {
                    url: url.clone(),
                    namespace: "eu".into(),
                    node_id: format!("n{n}"),
                    data_dir: dir.path().to_path_buf(),
                    faults: FleetFaults::default(),
                    ceiling_step: 10,
                };
                let mut a = PgAuthority::new(Db::new(&url).unwrap(), setup, stats).unwrap();
                (0..8)
                    .map(|_| {
                        let r = a.allocate(3).unwrap();
                        (Instant::now(), r)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let handed: Vec<(Instant, IdRange)> = allocators
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().unwrap();
    let mut checked = 0;
    for r in &reads {
        for (at, range) in &handed {
            if r.is_fresh(*at) {
                checked += 1;
                assert!(
                    r.may_be_issued(range.start) && r.may_be_issued(range.end - 1),
                    "{range:?} handed out while a read sent {:?} earlier, with ranges {:?}, was \
                     still trusted",
                    at.saturating_duration_since(r.sent),
                    r.ranges
                );
            }
        }
    }
    let s = stats.snapshot();
    assert!(s.ceiling_raises >= 3, "{s:?}");
    assert!(s.ceiling_waits >= 2, "{s:?}");
    assert!(
        checked > 100,
        "only {checked} (read, range) pairs were checked"
    );
    let ids: u64 = handed.iter().map(|(_, r)| r.len()).sum();
    assert!(ids >= 16, "{ids} IDs");
}

/// Hole 9: migrations do not run under the nodes' 2 s call timeout. An upgrade whose lock
/// waits 3 s behind another session's open transaction still completes, through the CLI as an
/// operator runs it. The other session holds `ricochet_meta`, which every upgrade writes (its
/// schema version), so the wait does not depend on the tables the newest migration touches.
#[test]
fn fleet_init_waits_out_a_table_lock_held_for_longer_than_a_node_call() {
    let Some(db) = TestDb::create("slow_migration") else {
        return;
    };
    init(&db);
    let from = fleet::SCHEMA_VERSION - 1;
    db.sql(&format!(
        "UPDATE ricochet_meta SET value = '{from}' WHERE key = 'schema_version'"
    ));
    let url = db.url.clone();
    let holder = std::thread::spawn(move || {
        common::pg::psql(
            &url,
            "BEGIN; LOCK TABLE ricochet_meta IN SHARE MODE; SELECT pg_sleep(3); COMMIT;",
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let out = std::process::Command::new(common::server_bin())
        .args(["fleet", "init", "--pg", &db.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    holder.join().unwrap();
    assert_eq!(
        db.sql("SELECT value FROM ricochet_meta WHERE key = 'schema_version'"),
        fleet::SCHEMA_VERSION.to_string()
    );
}
