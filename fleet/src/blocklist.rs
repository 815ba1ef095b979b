//! The fleet's abuse blocklist (`ricochet_blocklist`, migration 0015): changed by
//! `ricochet fleet blocklist`, read by every node's key watcher. The rows are entries in the
//! node's canonical line form; this module stores and reads them and never parses one (the
//! node's `api::blocklist` does, before writing and after reading).

use crate::db::{Db, FleetError};

/// Entries one statement of [`add_entries`] or [`remove_entries`] carries: a million-line
/// import is a hundred statements of one transaction, each well inside the call timeout.
pub const BLOCKLIST_WRITE_BATCH: usize = 10_000;

/// One entry as stored, with its audit fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRow {
    pub entry: String,
    /// Unix seconds.
    pub added_at_s: u64,
    pub added_by: String,
    pub note: Option<String>,
}

/// The table's change number: raised by every statement that changes the table.
pub fn blocklist_version(db: &mut Db) -> Result<u64, FleetError> {
    db.call("read the blocklist's version", async |c| {
        let row = c
            .query_one("SELECT version FROM ricochet_blocklist_version", &[])
            .await?;
        Ok(row.get::<_, i64>(0) as u64)
    })
}

/// The change number and every entry, one per line, from one snapshot (so the text is the
/// table at that number).
pub fn read_blocklist(db: &mut Db) -> Result<(u64, String), FleetError> {
    db.call("read the blocklist", async |c| {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let version: i64 = c
            .query_one("SELECT version FROM ricochet_blocklist_version", &[])
            .await?
            .get(0);
        let text: Option<String> = c
            .query_one(
                "SELECT string_agg(entry, E'\\n' ORDER BY entry) FROM ricochet_blocklist",
                &[],
            )
            .await?
            .get(0);
        c.batch_execute("COMMIT").await?;
        Ok((version as u64, text.unwrap_or_default()))
    })
}

/// Every entry with its audit fields, in entry order.
pub fn list_blocklist(db: &mut Db) -> Result<Vec<BlockRow>, FleetError> {
    db.call("list the blocklist", async |c| {
        let rows = c
            .query(
                "SELECT entry, extract(epoch FROM added_at)::bigint, added_by, note \
                   FROM ricochet_blocklist ORDER BY entry",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| BlockRow {
                entry: r.get(0),
                added_at_s: r.get::<_, i64>(1) as u64,
                added_by: r.get(2),
                note: r.get(3),
            })
            .collect())
    })
}

/// Adds `entries` (canonical, each at most once) in one transaction; an entry already listed
/// keeps its row. Returns how many were new.
pub fn add_entries(
    db: &mut Db,
    entries: &[String],
    by: &str,
    note: Option<&str>,
) -> Result<u64, FleetError> {
    db.call("add to the blocklist", async |c| {
        c.batch_execute("BEGIN").await?;
        let mut added = 0;
        for chunk in entries.chunks(BLOCKLIST_WRITE_BATCH) {
            added += c
                .execute(
                    "INSERT INTO ricochet_blocklist (entry, added_by, note) \
                     SELECT e, $2, $3 FROM unnest($1::text[]) AS e \
                     ON CONFLICT (entry) DO NOTHING",
                    &[&chunk, &by, &note],
                )
                .await?;
        }
        c.batch_execute("COMMIT").await?;
        Ok(added)
    })
}

/// Removes `entries` in one transaction; returns those that were listed.
pub fn remove_entries(db: &mut Db, entries: &[String]) -> Result<Vec<String>, FleetError> {
    db.call("remove from the blocklist", async |c| {
        c.batch_execute("BEGIN").await?;
        let mut removed = Vec::new();
        for chunk in entries.chunks(BLOCKLIST_WRITE_BATCH) {
            let rows = c
                .query(
                    "DELETE FROM ricochet_blocklist WHERE entry = ANY($1::text[]) \
                     RETURNING entry",
                    &[&chunk],
                )
                .await?;
            removed.extend(rows.iter().map(|r| r.get::<_, String>(0)));
        }
        c.batch_execute("COMMIT").await?;
        Ok(removed)
    })
}
