//! Operator commands on namespaces: create one, show one, and the runbook's raise of
//! `next_id` (which refuses to lower it; the database's trigger refuses too).

use crate::ceiling::CEILING_STEP;
use crate::db::{Db, FleetError};
use std::time::Duration;
use tokio_postgres::error::SqlState;

/// Longest `create_namespace` waits for the new namespace's first ceiling to mature (it takes
/// `RANGE_MATURITY_MS` and three statements).
pub const NAMESPACE_MATURE_DEADLINE_MS: u64 = 10_000;

/// A namespace as the database holds it, with what its audit says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceRow {
    pub name: String,
    pub lo: u64,
    pub hi: u64,
    pub next_id: u64,
    /// Confirmed intervals in the audit, and the IDs they cover.
    pub audited_intervals: u64,
    pub audited_ids: u64,
    /// Highest audited end (0 if none): `next_id` below it means a rolled-back authority.
    pub audited_max_end: u64,
}

/// Creates namespace `name` owning `[lo, hi)`, and returns once its first ceiling matured
/// (about `RANGE_MATURITY_MS`). Creating it again with the same range is a no-op; a different
/// range, or one that overlaps another namespace, is refused.
pub fn create_namespace(
    db: &mut Db,
    name: &str,
    lo: u64,
    hi: u64,
) -> Result<NamespaceRow, FleetError> {
    if lo < shards::alloc::FIRST_ID || lo >= hi || hi > shards::keygen::KEY_SPACE {
        return Err(FleetError::Refused(format!(
            "namespace range [{lo}, {hi}) must satisfy {} <= lo < hi <= {} (62^7)",
            shards::alloc::FIRST_ID,
            shards::keygen::KEY_SPACE
        )));
    }
    let (lo_i, hi_i) = (lo as i64, hi as i64);
    let inserted = db.call("create namespace", async |c| {
        let r = c
            .execute(
                "INSERT INTO ricochet_namespace (name, lo, hi, next_id, ceiling, ceiling_next) \
                 VALUES ($1, $2::int8, $3::int8, $2::int8, $2::int8, least($3::int8, $2::int8 + $4::int8)) \
                 ON CONFLICT (name) DO NOTHING",
                &[&name, &lo_i, &hi_i, &(CEILING_STEP as i64)],
            )
            .await;
        match r {
            Ok(n) => Ok(Ok(n)),
            Err(e) if e.code() == Some(&SqlState::EXCLUSION_VIOLATION) => Ok(Err(e
                .as_db_error()
                .and_then(|d| d.detail().map(str::to_owned))
                .unwrap_or_default())),
            Err(e) if e.code() == Some(&SqlState::CHECK_VIOLATION) => Ok(Err(e
                .as_db_error()
                .map(|d| d.message().to_owned())
                .unwrap_or_default())),
            Err(e) => Err(e),
        }
    })?;
    if let Err(detail) = inserted {
        return Err(FleetError::Refused(format!(
            "namespace {name} [{lo}, {hi}) refused by the database: {detail}"
        )));
    }
    // A new namespace is a raise from nothing: nodes that read the ceilings before it existed
    // must have read them again before its first ID is handed out.
    crate::ceiling::mature(
        db,
        name,
        Duration::from_millis(NAMESPACE_MATURE_DEADLINE_MS),
    )?;
    let row = show_namespace(db, name)?
        .ok_or_else(|| FleetError::Refused(format!("namespace {name} vanished")))?;
    if row.lo != lo || row.hi != hi {
        return Err(FleetError::Refused(format!(
            "namespace {name} already exists with range [{}, {})",
            row.lo, row.hi
        )));
    }
    Ok(row)
}

/// The namespace and its audit summary, if it exists.
pub fn show_namespace(db: &mut Db, name: &str) -> Result<Option<NamespaceRow>, FleetError> {
    db.call("show namespace", async |c| {
        let Some(r) = c
            .query_opt(
                "SELECT n.lo, n.hi, n.next_id, count(a.request_id), \
                        coalesce(sum(a.end_id - a.start_id), 0)::int8, \
                        coalesce(max(a.end_id), 0) \
                 FROM ricochet_namespace n \
                 LEFT JOIN ricochet_alloc_audit a ON a.namespace = n.name \
                 WHERE n.name = $1 GROUP BY n.lo, n.hi, n.next_id",
                &[&name],
            )
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(NamespaceRow {
            name: name.to_owned(),
            lo: r.get::<_, i64>(0) as u64,
            hi: r.get::<_, i64>(1) as u64,
            next_id: r.get::<_, i64>(2) as u64,
            audited_intervals: r.get::<_, i64>(3) as u64,
            audited_ids: r.get::<_, i64>(4) as u64,
            audited_max_end: r.get::<_, i64>(5) as u64,
        }))
    })
}

/// The runbook's step after a failover: raises `next_id` of `name` to `to`, past every ID any
/// node may hold. Refuses to lower it, and to go past the namespace's end.
pub fn raise_next_id(db: &mut Db, name: &str, to: u64) -> Result<NamespaceRow, FleetError> {
    let before = show_namespace(db, name)?
        .ok_or_else(|| FleetError::Refused(format!("no namespace {name}")))?;
    if to < before.next_id {
        return Err(FleetError::Refused(format!(
            "refusing to lower next_id of {name} from {} to {to}: IDs below it may be in use",
            before.next_id
        )));
    }
    if to > before.hi {
        return Err(FleetError::Refused(format!(
            "next_id {to} is past the end of namespace {name} [{}, {})",
            before.lo, before.hi
        )));
    }
    let to_i = to as i64;
    let n = db.call("raise next_id", async |c| {
        c.execute(
            // IDs below `to` count as issued at once (they may have been, by the lost
            // primary), which only makes a node shed less; a raise under way that `to`
            // passes is done with.
            "UPDATE ricochet_namespace SET next_id = $2, ceiling = greatest(ceiling, $2), \
                 ceiling_next = CASE WHEN ceiling_next > $2 THEN ceiling_next END, \
                 ceiling_next_seen = CASE WHEN ceiling_next > $2 THEN ceiling_next_seen END \
             WHERE name = $1 AND next_id <= $2",
            &[&name, &to_i],
        )
        .await
    })?;
    if n != 1 {
        return Err(FleetError::Refused(format!(
            "next_id of {name} moved past {to} meanwhile; nothing changed"
        )));
    }
    show_namespace(db, name)?.ok_or_else(|| FleetError::Refused(format!("no namespace {name}")))
}
