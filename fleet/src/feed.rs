//! The change feed's read side (issue #11, first step; not yet used by `serve`): one poll of
//! `ricochet_links` in commit-safe order (`migrations/0002_links.sql` says why the order is
//! `(changed_xid, key)` below the snapshot's xmin, and not `version`).

use crate::db::{Db, FleetError};

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
}

/// The rows after `after` whose transactions are all finished (below the snapshot's xmin), in
/// `(changed_xid, key)` order, at most `limit` (1 to [`MAX_FEED_ROWS`]). Feeding the last
/// row's `(xid, key)` back as `after` resumes without gaps or repeats.
pub fn poll(db: &mut Db, after: &Cursor, limit: i64) -> Result<Vec<FeedRow>, FleetError> {
    let limit = limit.clamp(1, MAX_FEED_ROWS);
    let xid = after.xid.to_string();
    let key = after.key.clone();
    db.call("feed poll", async |c| {
        let rows = c
            .query(
                "SELECT key, target, status, created_at, expires_at, deleted, version, \
                        changed_xid::text \
                   FROM ricochet_links \
                  WHERE (changed_xid, key) > ($1::text::xid8, $2::text) \
                    AND changed_xid < pg_snapshot_xmin(pg_current_snapshot()) \
                  ORDER BY changed_xid, key \
                  LIMIT $3",
                &[&xid, &key, &limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| FeedRow {
                key: r.get(0),
                target: r.get(1),
                status: r.get(2),
                created_at: r.get(3),
                expires_at: r.get(4),
                deleted: r.get(5),
                version: r.get(6),
                xid: r.get::<_, String>(7).parse().unwrap_or(0),
            })
            .collect())
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
