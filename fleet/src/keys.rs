//! API keys shared by the fleet (`ricochet_api_keys`, migration 0004): created and revoked by
//! `ricochet fleet keys`, read by every node's key watcher. The node keeps no copy on disk: a
//! node that cannot reach the database keeps the keys it last read.

use crate::db::{Db, FleetError};

/// One key as stored: never its plaintext.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetKey {
    pub id: String,
    pub name: String,
    pub hash: [u8; 32],
    pub created_at_s: u64,
    pub revoked_at_s: Option<u64>,
    /// The key's role as JSON (`api::roles::Role`; `{}`: admin).
    pub role: String,
    /// Its own create limit as JSON (`{"per_second", "burst"}`), or `None`: the node's.
    pub create_limit: Option<String>,
}

/// Every key, oldest first.
pub fn list_keys(db: &mut Db) -> Result<Vec<FleetKey>, FleetError> {
    db.call("list API keys", async |c| {
        let rows = c
            .query(
                "SELECT id, name, hash, created_at, revoked_at, role::text, create_limit::text \
                   FROM ricochet_api_keys ORDER BY created_at, id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(FleetKey {
                    id: r.get(0),
                    name: r.get(1),
                    hash: r.get::<_, Vec<u8>>(2).try_into().ok()?,
                    created_at_s: r.get::<_, i64>(3) as u64,
                    revoked_at_s: r.get::<_, Option<i64>>(4).map(|t| t as u64),
                    role: r.get(5),
                    create_limit: r.get(6),
                })
            })
            .collect())
    })
}

/// Stores a new key (its id must be unused).
pub fn insert_key(db: &mut Db, key: &FleetKey) -> Result<(), FleetError> {
    let k = key.clone();
    db.call("create an API key", async |c| {
        c.execute(
            "INSERT INTO ricochet_api_keys (id, name, hash, created_at, role, create_limit) \
             VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb)",
            &[
                &k.id,
                &k.name,
                &&k.hash[..],
                &(k.created_at_s as i64),
                &k.role,
                &k.create_limit,
            ],
        )
        .await
    })?;
    Ok(())
}

/// Revokes key `id` at `now_s`. `Ok(None)`: no such key; `Ok(Some(false))`: already revoked.
pub fn revoke_key(db: &mut Db, id: &str, now_s: u64) -> Result<Option<bool>, FleetError> {
    let id = id.to_owned();
    db.call("revoke an API key", async |c| {
        let row = c
            .query_opt(
                "WITH r AS (UPDATE ricochet_api_keys SET revoked_at = $2 \
                             WHERE id = $1 AND revoked_at IS NULL RETURNING 1) \
                 SELECT EXISTS (SELECT 1 FROM r), \
                        EXISTS (SELECT 1 FROM ricochet_api_keys WHERE id = $1)",
                &[&id, &(now_s as i64)],
            )
            .await?;
        Ok(row.and_then(|r| {
            let (revoked, exists): (bool, bool) = (r.get(0), r.get(1));
            exists.then_some(revoked)
        }))
    })
}
