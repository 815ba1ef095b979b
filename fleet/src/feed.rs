//! The change feed's read side (issue #11, first step; not yet used by `serve`): one poll of
//! `ricochet_links` in commit-safe order (`migrations/0002_links.sql` says why the order is
//! `(changed_xid, key)` below the snapshot's xmin, and not `version`).

use crate::db::{Db, FleetError};
use crate::history::POSITION_SQL;

/// Rows one poll returns at most.
pub const MAX_FEED_ROWS: i64 = 10_000;

/// Where a poller is: the last `(changed_xid, key)` it applied. `Cursor::START` is before
/// every row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub xid: u64,
    pub key: String,
}

impl Cursor {
    pub const START: Cursor = Cursor {
        xid: 0,
        key: String::new(),
    };
}

/// One row of the feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedRow {
    pub key: String,
    pub target: String,
    pub status: i16,
    pub created_at: i64,
    pub expires_at: i64,
    pub deleted: bool,
    pub version: i64,
    pub xid: u64,
    /// The API key that created the link (`""`: unknown).
    pub author: String,
    /// Its behaviour (a JSON object, migration 0017), if any.
    pub behaviour: Option<String>,
}

/// The rows after `after` whose transactions are all finished (below the snapshot's xmin), in
/// `(changed_xid, key)` order, at most `limit` (1 to [`MAX_FEED_ROWS`]). Feeding the last
/// row's `(xid, key)` back as `after` resumes without gaps or repeats.
pub fn poll(db: &mut Db, after: &Cursor, limit: i64) -> Result<Vec<FeedRow>, FleetError> {
    poll_with_horizon(db, after, limit).map(|p| p.rows)
}

/// What one poll read, in one statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Polled {
    pub rows: Vec<FeedRow>,
    pub tombstones: Tombstones,
    /// Rows past the cursor exist but are at or above the snapshot's xmin: an open
    /// transaction holds the feed back, and the poller is not caught up (see [`xmin_holder`]).
    pub held_back: bool,
    /// The database's history and WAL position as of this poll: every row the poll shows
    /// committed before it (`history.rs`).
    pub at: crate::history::Where,
}

/// The backend whose open transaction holds the snapshot's xmin (the oldest assigned xid):
/// its pid and how long its transaction has been open, in seconds.
pub fn xmin_holder(db: &mut Db) -> Result<Option<(i32, i64)>, FleetError> {
    db.call("xmin holder", async |c| {
        let row = c
            .query_opt(
                "SELECT pid, coalesce(extract(epoch FROM now() - xact_start), 0)::bigint \
                   FROM pg_stat_activity WHERE backend_xid IS NOT NULL \
                  ORDER BY age(backend_xid) DESC LIMIT 1",
                &[],
            )
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    })
}

/// [`poll`], and the tombstone horizon and removal count read **in the same statement** (one
/// snapshot): if the horizon is not behind `after`, no tombstone this poll should have shown
/// was removed before it ran; a removal that commits later removed nothing it could see.
pub fn poll_with_horizon(db: &mut Db, after: &Cursor, limit: i64) -> Result<Polled, FleetError> {
    let limit = limit.clamp(1, MAX_FEED_ROWS);
    let xid = after.xid.to_string();
    let key = after.key.clone();
    let sql = format!(
        "SELECT m.horizon, m.removals, l.key, l.target, l.status, l.created_at, \
                        l.expires_at, l.deleted, l.version, l.changed_xid::text, m.held, \
                        m.tli, m.lsn, m.recovery, l.author, l.behaviour::text \
                   FROM (SELECT (SELECT value FROM ricochet_meta \
                                  WHERE key = 'tombstone_horizon') AS horizon, \
                                (SELECT value FROM ricochet_meta \
                                  WHERE key = 'tombstone_removals') AS removals, \
                                EXISTS (SELECT 1 FROM ricochet_links \
                                  WHERE (changed_xid, key) > ($1::text::xid8, $2::text) \
                                    AND changed_xid >= pg_snapshot_xmin(pg_current_snapshot())) \
                                  AS held, \
                                {POSITION_SQL}) m \
                   LEFT JOIN LATERAL ( \
                        SELECT key, target, status, created_at, expires_at, deleted, version, \
                               changed_xid, author, behaviour \
                          FROM ricochet_links \
                         WHERE (changed_xid, key) > ($1::text::xid8, $2::text) \
                           AND changed_xid < pg_snapshot_xmin(pg_current_snapshot()) \
                         ORDER BY changed_xid, key \
                         LIMIT $3) l ON true \
                  ORDER BY l.changed_xid, l.key"
    );
    db.call("feed poll", async |c| {
        let rows = c.query(sql.as_str(), &[&xid, &key, &limit]).await?;
        let number = |r: &tokio_postgres::Row, i: usize| {
            r.get::<_, Option<String>>(i)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let tombstones = Tombstones {
            horizon: rows.first().map_or(0, |r| number(r, 0)),
            removals: rows.first().map_or(0, |r| number(r, 1)),
        };
        let held_back = rows.first().is_some_and(|r| r.get::<_, bool>(10));
        let at = rows.first().map_or(crate::history::Where::Unknown, |r| {
            crate::history::Where::of_row(r, 11)
        });
        let feed = rows
            .iter()
            .filter(|r| r.get::<_, Option<String>>(2).is_some())
            .map(|r| FeedRow {
                key: r.get(2),
                target: r.get(3),
                status: r.get(4),
                created_at: r.get(5),
                expires_at: r.get(6),
                deleted: r.get(7),
                version: r.get(8),
                xid: r.get::<_, String>(9).parse().unwrap_or(0),
                author: r.get(14),
                behaviour: r.get(15),
            })
            .collect();
        Ok(Polled {
            rows: feed,
            tombstones,
            held_back,
            at,
        })
    })
}

impl FeedRow {
    /// Where a poller is after applying this row.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            xid: self.xid,
            key: self.key.clone(),
        }
    }
}

/// The next transaction id the server will assign (`pg_snapshot_xmax` of a fresh snapshot;
/// assigns none itself). A cursor above it came from a different history of this database:
/// a restore from backup, or a replica that was never in this primary's line.
pub fn next_xid(db: &mut Db) -> Result<u64, FleetError> {
    db.call("next xid", async |c| {
        let r = c
            .query_one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text", &[])
            .await?;
        Ok(r.get::<_, String>(0).parse().unwrap_or(0))
    })
}

/// Where a poller that starts now must begin so that it misses nothing committed from now on:
/// `(xmin, "")` of a fresh snapshot. Every transaction not finished now has an id at or above
/// xmin, so the feed from here shows all of them (and some rows committed just before,
/// harmlessly again). A live regeneration takes it before it rotates the cores' logs.
pub fn current_cursor(db: &mut Db) -> Result<Cursor, FleetError> {
    let xmin: String = db.call("current cursor", async |c| {
        let r = c
            .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
            .await?;
        Ok(r.get(0))
    })?;
    xmin_cursor(&xmin)
}

/// `(xmin, "")` from a snapshot's xmin as text: keys are never empty, so it sorts before
/// every row the feed has yet to show at or above xmin.
fn xmin_cursor(xmin: &str) -> Result<Cursor, FleetError> {
    let xid = xmin
        .parse::<u64>()
        .map_err(|_| FleetError::Refused(format!("snapshot xmin {xmin:?}")))?;
    Ok(Cursor {
        xid,
        key: String::new(),
    })
}

/// Which database this is, as `<system identifier>/<database oid>`: a new cluster (`initdb`,
/// then a dump restored into it) has another system identifier, another database of the same
/// cluster (`CREATE DATABASE .. TEMPLATE`, a rename) another oid. A streaming replica, a
/// promoted standby and a point-in-time restore keep both; the cursor check (`next_xid`)
/// covers the last. A node whose links came from another identity regenerates them.
pub fn database_identity(db: &mut Db) -> Result<String, FleetError> {
    db.call("database identity", async |c| {
        let r = c
            .query_one(
                "SELECT (SELECT system_identifier FROM pg_control_system())::text || '/' || \
                        (SELECT oid FROM pg_database WHERE datname = current_database())::text",
                &[],
            )
            .await?;
        Ok(r.get(0))
    })
}

/// Links one bootstrap page hands on.
pub const BOOTSTRAP_PAGE_ROWS: i64 = 10_000;

/// Longest a bootstrap may take (one transaction over the whole table): 30 minutes.
pub const BOOTSTRAP_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// A live link as a bootstrap copies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveLink {
    pub key: String,
    pub target: String,
    pub status: i16,
    pub created_at: i64,
    pub expires_at: i64,
    /// The API key that created the link (`""`: unknown).
    pub author: String,
    /// Its behaviour (a JSON object), if any.
    pub behaviour: Option<String>,
}

/// A new or wiped node's start: one `REPEATABLE READ READ ONLY` transaction reads the snapshot's
/// xmin, then `COPY`s out every live link that does not expire within `min_life_s` of `now_s`
/// (text format, parsed by [`parse_copy_line`]), handing them to `page` in pages of
/// [`BOOTSTRAP_PAGE_ROWS`]. Returns the cursor the feed continues from: every change committed
/// below the xmin is in the copy; rows at or above it are polled again (applying them twice is
/// harmless, by version), and the database's position as of the snapshot (`history.rs`).
pub fn snapshot(
    url: &str,
    now_s: u64,
    min_life_s: u64,
    mut page: impl FnMut(&[LiveLink]) -> std::io::Result<()>,
) -> Result<(Cursor, Option<crate::history::Position>), FleetError> {
    use futures_util::StreamExt;
    let mut db = Db::new(url)?.with_timeout(BOOTSTRAP_TIMEOUT_MS);
    let mut failed: Option<std::io::Error> = None;
    let horizon = (now_s + min_life_s) as i64;
    let (xmin, at) = db.call("bootstrap snapshot", async |c| {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let first = c
            .query_one(
                &format!("SELECT pg_snapshot_xmin(pg_current_snapshot())::text, {POSITION_SQL}"),
                &[],
            )
            .await?;
        let xmin: String = first.get(0);
        let at = crate::history::Where::of_row(&first, 1).position();
        // COPY takes no parameters: the horizon is an integer formatted here.
        let copy = format!(
            "COPY (SELECT key, target, status, created_at, expires_at, author, behaviour::text \
                     FROM ricochet_links \
                    WHERE NOT deleted AND (expires_at = 0 OR expires_at > {horizon})) TO STDOUT"
        );
        let stream = c.copy_out(copy.as_str()).await?;
        let mut stream = std::pin::pin!(stream);
        let (mut buf, mut links) = (Vec::new(), Vec::with_capacity(BOOTSTRAP_PAGE_ROWS as usize));
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk?);
            let complete = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            for line in buf[..complete]
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
            {
                match parse_copy_line(line) {
                    Ok(l) => links.push(l),
                    Err(e) if failed.is_none() => failed = Some(e),
                    Err(_) => {}
                }
            }
            buf.drain(..complete);
            if failed.is_none() && links.len() >= BOOTSTRAP_PAGE_ROWS as usize {
                failed = page(&links).err();
                links.clear();
            }
        }
        if failed.is_none() && !buf.is_empty() {
            failed = Some(bad_copy("the copy ended inside a row"));
        }
        if failed.is_none() && !links.is_empty() {
            failed = page(&links).err();
        }
        c.batch_execute("COMMIT").await?;
        Ok((xmin, at))
    })?;
    if let Some(e) = failed {
        return Err(FleetError::Refused(format!(
            "bootstrap: writing the copy: {e}"
        )));
    }
    // Changes committed below xmin are all in the copy, and every change in it committed
    // before `at`.
    Ok((xmin_cursor(&xmin)?, at))
}

/// One row of the snapshot's `COPY ... TO STDOUT` (text format): key, target, status,
/// created_at, expires_at, author, behaviour (`\N`: NULL), tab-separated, backslash escapes in
/// text columns.
pub fn parse_copy_line(line: &[u8]) -> std::io::Result<LiveLink> {
    let mut cols = line.split(|&b| b == b'\t');
    let mut next = || {
        cols.next()
            .ok_or_else(|| bad_copy("a row with fewer than 7 columns"))
    };
    let (key, target) = (unescape_copy(next()?)?, unescape_copy(next()?)?);
    let int = |b: &[u8]| -> std::io::Result<i64> {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_copy("a non-integer status or time"))
    };
    let status = i16::try_from(int(next()?)?).map_err(|_| bad_copy("a status out of range"))?;
    let (created_at, expires_at) = (int(next()?)?, int(next()?)?);
    let author = unescape_copy(next()?)?;
    let behaviour = match next()? {
        b"\\N" => None,
        col => Some(unescape_copy(col)?),
    };
    if cols.next().is_some() {
        return Err(bad_copy("a row with more than 7 columns"));
    }
    Ok(LiveLink {
        key,
        target,
        status,
        created_at,
        expires_at,
        author,
        behaviour,
    })
}

/// A text column of `COPY` text format: `\\`, `\t`, `\n`, `\r`, `\b`, `\f`, `\v` and octal
/// `\NNN` decoded (PostgreSQL writes only these); anything else is refused.
fn unescape_copy(col: &[u8]) -> std::io::Result<String> {
    if !col.contains(&b'\\') {
        return String::from_utf8(col.to_vec()).map_err(|_| bad_copy("a column that is not UTF-8"));
    }
    let mut out = Vec::with_capacity(col.len());
    let mut i = 0;
    while i < col.len() {
        if col[i] != b'\\' {
            out.push(col[i]);
            i += 1;
            continue;
        }
        let c = *col
            .get(i + 1)
            .ok_or_else(|| bad_copy("a column ending in a backslash"))?;
        let (byte, used) = match c {
            b'\\' => (b'\\', 2),
            b't' => (b'\t', 2),
            b'n' => (b'\n', 2),
            b'r' => (b'\r', 2),
            b'b' => (8, 2),
            b'f' => (12, 2),
            b'v' => (11, 2),
            b'0'..=b'7' => {
                let digits = col[i + 1..]
                    .iter()
                    .take(3)
                    .take_while(|d| (b'0'..=b'7').contains(d));
                let n = digits.clone().count();
                let v = digits.fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                (
                    u8::try_from(v).map_err(|_| bad_copy("an octal escape above 255"))?,
                    1 + n,
                )
            }
            _ => return Err(bad_copy("an unknown backslash escape")),
        };
        out.push(byte);
        i += used;
    }
    String::from_utf8(out).map_err(|_| bad_copy("a column that is not UTF-8"))
}

fn bad_copy(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("the snapshot's COPY has {what}"),
    )
}

/// Tombstones older than this are removed (`purge_tombstones`, run by every node about once an
/// hour, [`TOMBSTONE_GC_INTERVAL_S`]): a node away longer than this bootstraps again.
pub const TOMBSTONE_RETENTION_DAYS: u64 = 7;

/// How often a node's follower removes expired tombstones.
pub const TOMBSTONE_GC_INTERVAL_S: u64 = 3_600;

/// Tombstones one removal transaction takes at most (a bigger backlog takes several).
pub const TOMBSTONE_GC_BATCH: i64 = 10_000;

/// What tombstone removal has done so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tombstones {
    /// The highest `changed_xid` of a tombstone ever removed (0: none). A cursor whose xid is
    /// not above it may have missed a removed tombstone.
    pub horizon: u64,
    /// How many removal transactions removed any (schema 10). Unchanged since a node's
    /// snapshot: nothing was removed since, whatever the horizon says of its cursor.
    pub removals: u64,
}

/// The horizon and the removal count, read together.
pub fn tombstones(db: &mut Db) -> Result<Tombstones, FleetError> {
    db.call("tombstone horizon", async |c| {
        let rows = c
            .query(
                "SELECT key, value FROM ricochet_meta \
                  WHERE key IN ('tombstone_horizon', 'tombstone_removals')",
                &[],
            )
            .await?;
        let value = |name: &str| {
            rows.iter()
                .find(|r| r.get::<_, &str>(0) == name)
                .and_then(|r| r.get::<_, &str>(1).parse().ok())
                .unwrap_or(0)
        };
        Ok(Tombstones {
            horizon: value("tombstone_horizon"),
            removals: value("tombstone_removals"),
        })
    })
}

/// Removes up to [`TOMBSTONE_GC_BATCH`] tombstones last changed more than `older_than_s`
/// seconds ago and below the snapshot's xmin (every feed can have seen them: a tombstone of a
/// transaction at or above xmin is not yet shown by any poll, whatever its age), raising the
/// horizon past them in the same transaction. Returns how many went
/// and the horizon now.
pub fn purge_tombstones(db: &mut Db, older_than_s: u64) -> Result<(u64, u64), FleetError> {
    let age = older_than_s as i64;
    db.call("tombstone removal", async |c| {
        c.batch_execute("BEGIN").await?;
        // The horizon's row, locked: removals by several nodes take turns.
        let before: String = c
            .query_one(
                "SELECT value FROM ricochet_meta WHERE key = 'tombstone_horizon' FOR UPDATE",
                &[],
            )
            .await?
            .get(0);
        let r = c
            .query_one(
                "WITH gone AS ( \
                   DELETE FROM ricochet_links WHERE key IN ( \
                     SELECT key FROM ricochet_links \
                      WHERE deleted AND changed_at < now() - $1::int8 * interval '1 s' \
                        AND changed_xid < pg_snapshot_xmin(pg_current_snapshot()) \
                      ORDER BY changed_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
                   AND deleted RETURNING changed_xid) \
                 SELECT count(*), coalesce(max(changed_xid::text::numeric), 0)::text FROM gone",
                &[&age, &TOMBSTONE_GC_BATCH],
            )
            .await?;
        let (n, max): (i64, String) = (r.get(0), r.get(1));
        let horizon = before
            .parse::<u64>()
            .unwrap_or(0)
            .max(max.parse().unwrap_or(0));
        c.execute(
            "UPDATE ricochet_meta SET value = $1 WHERE key = 'tombstone_horizon'",
            &[&horizon.to_string()],
        )
        .await?;
        if n > 0 {
            c.batch_execute(
                "UPDATE ricochet_meta SET value = (value::int8 + 1)::text \
                  WHERE key = 'tombstone_removals'",
            )
            .await?;
        }
        c.batch_execute("COMMIT").await?;
        Ok((n as u64, horizon))
    })
}

/// The stats resets after `after` whose transactions are all finished, in `(reset_xid, key)`
/// order, at most `limit`: `(key, cursor after it)`. The same commit-safe rule as [`poll`].
pub fn poll_resets(
    db: &mut Db,
    after: &Cursor,
    limit: i64,
) -> Result<Vec<(String, Cursor)>, FleetError> {
    let limit = limit.clamp(1, MAX_FEED_ROWS);
    let xid = after.xid.to_string();
    let key = after.key.clone();
    db.call("stats reset poll", async |c| {
        let rows = c
            .query(
                "SELECT key, reset_xid::text FROM ricochet_click_resets \
                  WHERE (reset_xid, key) > ($1::text::xid8, $2::text) \
                    AND reset_xid < pg_snapshot_xmin(pg_current_snapshot()) \
                  ORDER BY reset_xid, key LIMIT $3",
                &[&xid, &key, &limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let key: String = r.get(0);
                let xid = r.get::<_, String>(1).parse().unwrap_or(0);
                let cursor = Cursor {
                    xid,
                    key: key.clone(),
                };
                (key, cursor)
            })
            .collect())
    })
}
