//! The change feed's order against a real PostgreSQL (`RICOCHET_TEST_PG`), issue #11's first
//! step: a cursor over the version sequence skips a row whose transaction took its version
//! first and committed last (reproduced here), and the `(changed_xid, key)` poll below the
//! snapshot's xmin (`fleet::feed`) returns it, in order, without repeats.

mod common;

use common::pg::TestDb;
use fleet::feed::{poll, Cursor};
use fleet::Db;

fn db(url: &str) -> Db {
    Db::new(url).unwrap()
}

fn exec(d: &mut Db, sql: &'static str) {
    d.call("test sql", async |c| c.batch_execute(sql).await)
        .unwrap();
}

/// The naive poller: rows with a version above `after`, in version order.
fn by_version(d: &mut Db, after: i64) -> Vec<(String, i64)> {
    d.call("naive poll", async |c| {
        let rows = c
            .query(
                "SELECT key, version FROM ricochet_links WHERE version > $1 ORDER BY version",
                &[&after],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    })
    .unwrap()
}

fn keys(rows: &[fleet::feed::FeedRow]) -> Vec<&str> {
    rows.iter().map(|r| r.key.as_str()).collect()
}

#[test]
fn the_xid_poll_never_skips_a_late_committer_that_a_version_cursor_skips() {
    let Some(t) = TestDb::create("feed_order") else {
        return;
    };
    fleet::init(&mut db(&t.url)).unwrap();
    let (mut early, mut late, mut poller) = (db(&t.url), db(&t.url), db(&t.url));
    // `early` takes its version (and xid) first but commits last.
    exec(
        &mut early,
        "BEGIN; INSERT INTO ricochet_links (key, target, status, created_at) \
         VALUES ('a_early', 'https://example.com/a', 302, 1)",
    );
    exec(
        &mut late,
        "BEGIN; INSERT INTO ricochet_links (key, target, status, created_at) \
         VALUES ('b_late', 'https://example.com/b', 302, 1); COMMIT",
    );
    // The version cursor sees b (version 2) and moves past version 1.
    let seen = by_version(&mut poller, 0);
    assert_eq!(
        seen.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        vec!["b_late"]
    );
    let version_cursor = seen[0].1;
    // The xid poll shows nothing yet: `early` may still commit below `b_late`.
    assert!(poll(&mut poller, &Cursor::START, 100).unwrap().is_empty());
    exec(&mut early, "COMMIT");
    // Reproduced: a is never seen by the version cursor.
    assert!(
        by_version(&mut poller, version_cursor).is_empty(),
        "the version cursor skipped a_early"
    );
    // The xid poll returns both, in commit-safe order, and then nothing again.
    let rows = poll_settled(&mut poller, &Cursor::START, 100, 2);
    assert_eq!(keys(&rows), vec!["a_early", "b_late"]);
    assert!(rows[0].version < rows[1].version);
    let cursor = rows.last().unwrap().cursor();
    assert!(poll(&mut poller, &cursor, 100).unwrap().is_empty());
    // An update restamps the row (new version, new xid): it comes again, newer; a delete is a
    // tombstone that comes the same way.
    exec(
        &mut early,
        "UPDATE ricochet_links SET target = 'https://example.org/a2' WHERE key = 'a_early'",
    );
    exec(
        &mut early,
        "UPDATE ricochet_links SET deleted = true WHERE key = 'b_late'",
    );
    let rows = poll_settled(&mut poller, &cursor, 100, 2);
    assert_eq!(keys(&rows), vec!["a_early", "b_late"]);
    assert_eq!(rows[0].target, "https://example.org/a2");
    assert!(rows[0].version > 2 && rows[1].deleted);
    // Paging by `limit` resumes where it stopped.
    let first = poll_settled(&mut poller, &cursor, 1, 1);
    assert_eq!(keys(&first), vec!["a_early"]);
    assert_eq!(
        keys(&poll_settled(&mut poller, &first[0].cursor(), 1, 1)),
        vec!["b_late"]
    );
}

#[test]
fn the_links_table_refuses_bad_rows() {
    let Some(t) = TestDb::create("feed_checks") else {
        return;
    };
    fleet::init(&mut db(&t.url)).unwrap();
    for bad in [
        "INSERT INTO ricochet_links (key, target, status, created_at) VALUES ('bad key', 'https://e.com', 302, 1)",
        "INSERT INTO ricochet_links (key, target, status, created_at) VALUES ('k', 'https://e.com', 200, 1)",
    ] {
        assert!(t.try_sql(bad).is_err(), "{bad}");
    }
    assert_eq!(
        fleet::schema_version(&mut db(&t.url)).unwrap(),
        fleet::SCHEMA_VERSION
    );
}

/// The first poll that returns at least `want` rows, retried for up to 5 s: the snapshot's
/// xmin is server-wide, so a transaction of any other test on the server can hold some rows
/// back for a moment (correctly: it might still commit below them).
fn poll_settled(db: &mut Db, after: &Cursor, limit: i64, want: usize) -> Vec<fleet::feed::FeedRow> {
    let t = std::time::Instant::now();
    loop {
        let rows = poll(db, after, limit).unwrap();
        if rows.len() >= want || t.elapsed() > std::time::Duration::from_secs(5) {
            return rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The bootstrap snapshot's `COPY` read back exactly as PostgreSQL wrote it: every live link,
/// in pages, none deleted or about to expire, and text columns with every character COPY
/// escapes (backslash, tab, newline, carriage return, and other control bytes) decoded to
/// what the database holds. The API never stores such targets; the parser must not depend on it.
#[test]
fn the_bootstrap_copy_reads_back_every_live_link_exactly() {
    let Some(t) = TestDb::create("feed_copy") else {
        return;
    };
    fleet::init(&mut db(&t.url)).unwrap();
    let pages = fleet::feed::BOOTSTRAP_PAGE_ROWS * 2 + 7;
    t.sql(&format!(
        "INSERT INTO ricochet_links (key, target, status, created_at, expires_at) \
         SELECT 'k' || g, 'https://e.com/' || g, 302, g, 0 FROM generate_series(1, {pages}) g"
    ));
    // Written as a row from before schema 12's check may be (the check is NOT VALID: such
    // rows stay): the constraint is set aside for the insert and put back as it was.
    t.sql("ALTER TABLE ricochet_links DROP CONSTRAINT ricochet_links_target_storable");
    let odd = "https://e.com/a\\b\tc\nd\re\u{1}f\u{7f}g/é";
    let literal = odd.replace('\\', "\\\\").replace('\'', "''");
    t.sql(&format!(
        "INSERT INTO ricochet_links (key, target, status, created_at, expires_at) VALUES \
         ('odd', E'{}', 308, 5, 4000000000), ('gone', 'https://e.com/x', 302, 1, 0), \
         ('soon', 'https://e.com/y', 302, 1, 1000)",
        literal
            .replace('\t', "\\t")
            .replace('\n', "\\n")
            .replace('\r', "\\r")
            .replace('\u{1}', "\\001")
            .replace('\u{7f}', "\\177")
    ));
    let check = fleet::MIGRATIONS
        .iter()
        .find(|(v, _)| *v == 12)
        .map(|(_, sql)| *sql)
        .expect("migration 12");
    t.sql(check);
    t.sql("UPDATE ricochet_links SET deleted = true WHERE key = 'gone'");
    t.sql(
        "UPDATE ricochet_links SET author = 'ab12', \
                behaviour = '{\"crawlable\": true, \"valid_since\": \"a\\tb\\\\c\"}' \
          WHERE key = 'k9'",
    );
    let (mut got, mut calls) = (Vec::new(), 0);
    fleet::feed::snapshot(&t.url, 990, 60, |page| {
        calls += 1;
        got.extend_from_slice(page);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        got.len() as i64,
        pages + 1,
        "every live link once, none deleted or expiring"
    );
    assert!(calls >= 3, "{calls} pages");
    let odd_row = got.iter().find(|l| l.key == "odd").expect("the odd row");
    assert_eq!(odd_row.target, odd);
    assert_eq!(
        (odd_row.status, odd_row.created_at, odd_row.expires_at),
        (308, 5, 4000000000)
    );
    let k9 = got.iter().find(|l| l.key == "k9").unwrap();
    assert_eq!((k9.target.as_str(), k9.created_at), ("https://e.com/9", 9));
    assert_eq!((k9.author.as_str(), odd_row.author.as_str()), ("ab12", ""));
    // The behaviour column: NULL as none, JSON text with its escapes read back.
    assert_eq!(odd_row.behaviour, None);
    let b: serde_json::Value = serde_json::from_str(k9.behaviour.as_deref().unwrap()).unwrap();
    assert_eq!(
        b,
        serde_json::json!({"crawlable": true, "valid_since": "a\tb\\c"})
    );
    assert!(!got.iter().any(|l| l.key == "gone" || l.key == "soon"));
}

/// A copy line with a column too few or too many, or a bad escape, is refused.
#[test]
fn malformed_copy_lines_are_refused() {
    for bad in [
        &b"k\thttps://e\t302\t1\t0"[..],
        b"k\thttps://e\t302\t1\t0\tab",
        b"k\thttps://e\t302\t1\t0\tab\t\\N\t9",
        b"k\\q\tu\t302\t1\t0\t\t\\N",
    ] {
        assert!(fleet::feed::parse_copy_line(bad).is_err(), "{bad:?}");
    }
    let ok = fleet::feed::parse_copy_line(b"k\thttps://e\t302\t1\t0\tab\t\\N").unwrap();
    assert_eq!((ok.author.as_str(), ok.behaviour), ("ab", None));
}

/// A poll reads the tombstone horizon and the removal count in its own statement, with rows
/// and without; a removal takes only tombstones below the snapshot's xmin and raises both.
#[test]
fn a_poll_reads_the_tombstone_horizon_with_its_rows() {
    use fleet::feed::{poll_with_horizon, purge_tombstones, Tombstones};
    let Some(t) = TestDb::create("feed_horizon") else {
        return;
    };
    fleet::init(&mut db(&t.url)).unwrap();
    let mut d = db(&t.url);
    let p = poll_with_horizon(&mut d, &Cursor::START, 100).unwrap();
    assert!(p.rows.is_empty() && !p.held_back);
    let none = Tombstones {
        horizon: 0,
        removals: 0,
    };
    assert_eq!(p.tombstones, none);
    // An open transaction with an xid, older than the tombstone, holds xmin below it.
    let mut stall = db(&t.url);
    exec(&mut stall, "BEGIN; SELECT pg_current_xact_id()");
    exec(
        &mut d,
        "INSERT INTO ricochet_links (key, target, status, created_at) \
         VALUES ('gone', 'https://example.com/g', 302, 1), \
                ('kept', 'https://example.com/k', 302, 1); \
         UPDATE ricochet_links SET deleted = true WHERE key = 'gone'",
    );
    let p = poll_with_horizon(&mut d, &Cursor::START, 100).unwrap();
    assert!(
        p.rows.is_empty() && p.held_back,
        "rows wait behind the open transaction"
    );
    let n = purge_tombstones(&mut d, 0).unwrap().0;
    assert_eq!(n, 0, "a tombstone no poll shows yet was removed");
    exec(&mut stall, "COMMIT");
    // The horizon is the whole cluster's: another test of this file may hold a snapshot for
    // a moment (the bootstrap copy's), so the removal is waited for, briefly.
    let t0 = std::time::Instant::now();
    let (n, horizon) = loop {
        let (n, horizon) = purge_tombstones(&mut d, 0).unwrap();
        if n == 1 || t0.elapsed() > std::time::Duration::from_secs(10) {
            break (n, horizon);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(n, 1);
    let p = poll_with_horizon(&mut d, &Cursor::START, 100).unwrap();
    assert_eq!(keys(&p.rows), vec!["kept"]);
    let seen = Tombstones {
        horizon,
        removals: 1,
    };
    assert_eq!(p.tombstones, seen);
    let after = p.rows[0].cursor();
    let p = poll_with_horizon(&mut d, &after, 100).unwrap();
    assert!(p.rows.is_empty() && !p.held_back);
    assert_eq!(p.tombstones.horizon, horizon, "read without rows too");
}
