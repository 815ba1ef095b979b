//! The fleet's domain book (`ricochet_domains`, migration 0014): changed by
//! `ricochet fleet domains`, read by every node's key watcher about once a second. The rows
//! are the node's `api::domains::Domain`s; the rules of a change (normalization, numbers never
//! reused, the default domain) are the node's, applied to the whole book under a table lock so
//! two operators' changes serialize exactly as two `ricochet domains` runs on one data dir do.

use crate::db::{Db, FleetError};

/// One domain as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainRow {
    pub number: u32,
    pub name: String,
    /// `http` or `https`.
    pub scheme: String,
    pub base_url: Option<String>,
    pub regular_404: Option<String>,
    pub invalid_short_url: Option<String>,
    /// `not-found`, `append` or `ignore`; `None`: the node's `--extra-path` (migration 0016).
    pub extra_path: Option<String>,
    /// `None`: the node's `--forward-query`.
    pub forward_query: Option<bool>,
    /// Unix seconds; `None`: live.
    pub removed_at_s: Option<u64>,
}

const SELECT: &str = "SELECT number, name, scheme, base_url, regular_404, invalid_short_url, \
                             extract(epoch FROM removed_at)::bigint, extra_path, forward_query \
                        FROM ricochet_domains ORDER BY number";

fn row_of(r: &tokio_postgres::Row) -> DomainRow {
    DomainRow {
        number: r.get::<_, i32>(0) as u32,
        name: r.get(1),
        scheme: r.get(2),
        base_url: r.get(3),
        regular_404: r.get(4),
        invalid_short_url: r.get(5),
        removed_at_s: r.get::<_, Option<i64>>(6).map(|t| t as u64),
        extra_path: r.get(7),
        forward_query: r.get(8),
    }
}

/// Every domain, removed ones included, by number.
pub fn list_domains(db: &mut Db) -> Result<Vec<DomainRow>, FleetError> {
    db.call("list domains", async |c| {
        Ok(c.query(SELECT, &[]).await?.iter().map(row_of).collect())
    })
}

/// Applies `change` to the book in one transaction holding `ricochet_domains` locked against
/// other changes (reads go on), and writes back every row it changed or added. `change`'s
/// error rolls the transaction back and is returned as `Ok(Err(..))`.
pub fn change_domains<T, E>(
    db: &mut Db,
    change: impl FnOnce(&mut Vec<DomainRow>) -> Result<T, E>,
) -> Result<Result<T, E>, FleetError> {
    db.call("change domains", async |c| {
        c.batch_execute("BEGIN; LOCK TABLE ricochet_domains IN EXCLUSIVE MODE")
            .await?;
        let before: Vec<DomainRow> = c.query(SELECT, &[]).await?.iter().map(row_of).collect();
        let mut rows = before.clone();
        let out = match change(&mut rows) {
            Ok(v) => v,
            Err(e) => {
                c.batch_execute("ROLLBACK").await?;
                return Ok(Err(e));
            }
        };
        for r in rows.iter().filter(|r| !before.contains(r)) {
            c.execute(
                "INSERT INTO ricochet_domains (number, name, scheme, base_url, regular_404, \
                                               invalid_short_url, removed_at, extra_path, \
                                               forward_query) \
                 VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7::bigint), $8, $9) \
                 ON CONFLICT (number) DO UPDATE SET name = EXCLUDED.name, \
                    scheme = EXCLUDED.scheme, base_url = EXCLUDED.base_url, \
                    regular_404 = EXCLUDED.regular_404, \
                    invalid_short_url = EXCLUDED.invalid_short_url, \
                    removed_at = EXCLUDED.removed_at, extra_path = EXCLUDED.extra_path, \
                    forward_query = EXCLUDED.forward_query",
                &[
                    &(r.number as i32),
                    &r.name,
                    &r.scheme,
                    &r.base_url,
                    &r.regular_404,
                    &r.invalid_short_url,
                    &r.removed_at_s.map(|t| t as i64),
                    &r.extra_path,
                    &r.forward_query,
                ],
            )
            .await?;
        }
        c.batch_execute("COMMIT").await?;
        Ok(Ok(out))
    })
}
