//! Clicks in the fleet database (`migrations/0006_clicks.sql`, `0009_shared_uniques.sql`):
//! each node flushes its per-link-day states, and the stats API sums them over nodes; unique
//! visitors are counted by merging the nodes' HyperLogLog sketches, made under one daily salt
//! for the whole fleet ([`salt_for`]), so a visitor served by two nodes counts once.
//!
//! A flush is one transaction: the node's row in `ricochet_click_nodes` moves to the flush's
//! number only if that is higher than the one there (else the flush, or a later one, was
//! already applied: a retry after a lost COMMIT reply, skipped whole); then the node's rows of
//! purged keys are deleted and its changed link-day states upserted. A state replaces the
//! node's earlier state of that link-day, so nothing is counted twice whatever is repeated.

use crate::db::{Db, FleetError};

/// Link-day rows one flush writes at most; more wait for the next flush.
pub const MAX_FLUSH_ROWS: usize = 10_000;

/// A node counts in the fleet's `complete_until` while its last flush is at most this old;
/// a node gone longer (stopped, retired) no longer holds the figure back.
pub const CLICK_NODE_STALE_S: u64 = 600;

/// One node's totals of one link-day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClickRow {
    pub key: String,
    pub day: u32,
    pub clicks: u64,
    pub bot_clicks: u64,
    pub unique_humans: u64,
    pub unique_bots: u64,
    /// Humans and bots together (their sketches merged).
    pub unique_all: u64,
    pub facets: Vec<Facet>,
    /// The sketches ([`encode_sketch`]): what the stats API merges across nodes.
    pub humans: Vec<u8>,
    pub bots: Vec<u8>,
}

/// A sketch as the database keeps it: `(index u16le, rank u8)` per set register, by index.
pub fn encode_sketch(h: &shards::clicks::Hll) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 * h.set_registers());
    h.for_each_update(|i, r| {
        out.extend_from_slice(&i.to_le_bytes());
        out.push(r);
    });
    out
}

/// Merges a sketch from the database into `into`; `false` if the bytes are not one (left
/// out: the row's own estimate is used instead).
pub fn merge_sketch(into: &mut shards::clicks::Hll, bytes: &[u8]) -> bool {
    let valid = bytes.len() % 3 == 0
        && bytes.chunks_exact(3).all(|c| {
            let idx = u16::from_le_bytes([c[0], c[1]]) as usize;
            idx < shards::clicks::hll::HLL_M && c[2] > 0 && c[2] <= 64
        });
    if valid {
        for c in bytes.chunks_exact(3) {
            into.apply((u16::from_le_bytes([c[0], c[1]]), c[2]));
        }
    }
    valid
}

/// Days a salt is kept after its own (deleted once `today > day + SALT_KEEP_DAYS`: 48 hours
/// after its day ended).
pub const SALT_KEEP_DAYS: u32 = 2;

/// The fleet's salt of `day`: `candidate` if no node made one before, else the one that did.
pub fn salt_for(db: &mut Db, day: u32, candidate: [u8; 16]) -> Result<[u8; 16], FleetError> {
    let d = day as i32;
    let bytes: Vec<u8> = db.call("click salt", async |c| {
        c.execute(
            "INSERT INTO ricochet_click_salts (day, salt) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
            &[&d, &&candidate[..]],
        )
        .await?;
        let r = c
            .query_one("SELECT salt FROM ricochet_click_salts WHERE day = $1", &[&d])
            .await?;
        Ok(r.get(0))
    })?;
    bytes
        .try_into()
        .map_err(|_| FleetError::Refused(format!("the salt of day {day} is not 16 bytes")))
}

/// Deletes the salts of days that ended more than 48 hours before `today` began.
pub fn forget_salts_before(db: &mut Db, today: u32) -> Result<u64, FleetError> {
    let d = today as i32 - SALT_KEEP_DAYS as i32;
    db.call("click salt retention", async |c| {
        c.execute("DELETE FROM ricochet_click_salts WHERE day < $1", &[&d])
            .await
    })
}

/// A facet count: kind (1 referrer, 2 country, 3 browser, 4 OS, 5 device), bot flag, value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facet {
    pub kind: u8,
    pub bot: bool,
    pub value: String,
    pub count: u64,
}

/// What one flush carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flush {
    /// Higher than every earlier flush of this node.
    pub id: u64,
    pub complete_until_ms: u64,
    pub dropped: u64,
    /// Keys whose stats this node purged since its last flush: its rows of them go first.
    pub purged: Vec<String>,
    pub rows: Vec<ClickRow>,
    /// GETs answered 404, per day: this node's totals.
    pub not_found: Vec<(u32, u64)>,
}

/// Whether a flush was applied now or had been before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flushed {
    Applied,
    AlreadyApplied,
}

/// The number of the last flush of `node` the database holds (0: none).
pub fn last_flush(db: &mut Db, node: &str) -> Result<u64, FleetError> {
    let r = db.call("click flush number", async |c| {
        c.query_opt(
            "SELECT last_flush FROM ricochet_click_nodes WHERE node = $1",
            &[&node],
        )
        .await
    })?;
    Ok(r.map_or(0, |r| r.get::<_, i64>(0) as u64))
}

fn facets_json(f: &[Facet]) -> String {
    let v: Vec<serde_json::Value> = f
        .iter()
        .map(|x| serde_json::json!([x.kind, x.bot, x.value, x.count]))
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// Reads back `jsonb_agg` of [`facets_json`] arrays: `[[[kind, bot, value, count], ...], ...]`.
/// Anything else (not written by this module) is skipped.
fn parse_facet_lists(text: &str) -> Vec<Facet> {
    let Ok(serde_json::Value::Array(lists)) = serde_json::from_str::<serde_json::Value>(text)
    else {
        return Vec::new();
    };
    let one = |f: &serde_json::Value| -> Option<Facet> {
        let a = f.as_array()?;
        Some(Facet {
            kind: u8::try_from(a.first()?.as_u64()?).ok()?,
            bot: a.get(1)?.as_bool()?,
            value: a.get(2)?.as_str()?.to_owned(),
            count: a.get(3)?.as_u64()?,
        })
    };
    lists
        .iter()
        .filter_map(|l| l.as_array())
        .flatten()
        .filter_map(one)
        .collect()
}

/// Applies `f` for `node` (named `node_id` for operators), once.
pub fn flush(db: &mut Db, node: &str, node_id: &str, f: &Flush) -> Result<Flushed, FleetError> {
    assert!(f.rows.len() <= MAX_FLUSH_ROWS, "flush too large");
    let (id, until, dropped) = (f.id as i64, f.complete_until_ms as i64, f.dropped as i64);
    let nf_days: Vec<i32> = f.not_found.iter().map(|n| n.0 as i32).collect();
    let nf_counts: Vec<i64> = f.not_found.iter().map(|n| n.1 as i64).collect();
    db.call("click flush", async |c| {
        c.batch_execute("BEGIN").await?;
        let claimed = c
            .query_opt(
                "INSERT INTO ricochet_click_nodes (node, node_id, last_flush, complete_until, dropped) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (node) DO UPDATE SET node_id = EXCLUDED.node_id, \
                     last_flush = EXCLUDED.last_flush, \
                     complete_until = greatest(ricochet_click_nodes.complete_until, EXCLUDED.complete_until), \
                     dropped = EXCLUDED.dropped, flushed_at = now() \
                 WHERE ricochet_click_nodes.last_flush < EXCLUDED.last_flush \
                 RETURNING 1",
                &[&node, &node_id, &id, &until, &dropped],
            )
            .await?;
        if claimed.is_none() {
            c.batch_execute("ROLLBACK").await?;
            return Ok(Flushed::AlreadyApplied);
        }
        if !f.purged.is_empty() {
            c.execute(
                "DELETE FROM ricochet_click_days WHERE node = $1 AND key = ANY($2)",
                &[&node, &f.purged],
            )
            .await?;
        }
        if !f.rows.is_empty() {
            upsert_days(c, node, id, &f.rows).await?;
        }
        if !f.not_found.is_empty() {
            c.execute(
                "INSERT INTO ricochet_click_not_found (day, node, count) \
                 SELECT d, $1, n FROM unnest($2::int4[], $3::int8[]) AS u(d, n) \
                 ON CONFLICT (day, node) DO UPDATE SET count = EXCLUDED.count",
                &[&node, &nf_days, &nf_counts],
            )
            .await?;
        }
        c.batch_execute("COMMIT").await?;
        Ok(Flushed::Applied)
    })
}

/// Writes a flush's link-day rows for `node` (flush `id`): each replaces that node's row of
/// its link-day.
async fn upsert_days(
    c: &tokio_postgres::Client,
    node: &str,
    id: i64,
    rows: &[ClickRow],
) -> Result<(), tokio_postgres::Error> {
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let days: Vec<i32> = rows.iter().map(|r| r.day as i32).collect();
    let num = |g: fn(&ClickRow) -> u64| -> Vec<i64> { rows.iter().map(|r| g(r) as i64).collect() };
    let (clicks, bots) = (num(|r| r.clicks), num(|r| r.bot_clicks));
    let (uh, ub, ua) = (
        num(|r| r.unique_humans),
        num(|r| r.unique_bots),
        num(|r| r.unique_all),
    );
    let facets: Vec<String> = rows.iter().map(|r| facets_json(&r.facets)).collect();
    let humans: Vec<&[u8]> = rows.iter().map(|r| &r.humans[..]).collect();
    let bots_hll: Vec<&[u8]> = rows.iter().map(|r| &r.bots[..]).collect();
    c.execute(
        "INSERT INTO ricochet_click_days \
           (key, day, node, clicks, bot_clicks, unique_humans, unique_bots, unique_all, facets, flush, humans, bots) \
         SELECT u.key, u.day, $1, u.clicks, u.bots, u.uh, u.ub, u.ua, u.facets::jsonb, $2, u.hh, u.bh \
           FROM unnest($3::text[], $4::int4[], $5::int8[], $6::int8[], $7::int8[], \
                       $8::int8[], $9::int8[], $10::text[], $11::bytea[], $12::bytea[]) \
                AS u(key, day, clicks, bots, uh, ub, ua, facets, hh, bh) \
         ON CONFLICT (key, day, node) DO UPDATE SET clicks = EXCLUDED.clicks, \
             bot_clicks = EXCLUDED.bot_clicks, unique_humans = EXCLUDED.unique_humans, \
             unique_bots = EXCLUDED.unique_bots, unique_all = EXCLUDED.unique_all, \
             facets = EXCLUDED.facets, flush = EXCLUDED.flush, \
             humans = EXCLUDED.humans, bots = EXCLUDED.bots",
        &[&node, &id, &keys, &days, &clicks, &bots, &uh, &ub, &ua, &facets, &humans, &bots_hll],
    )
    .await?;
    Ok(())
}

/// Rows one retention delete removes at most: each batch is its own transaction, which holds
/// every node's change feed back while it runs (its xid keeps the snapshot's xmin down), so it
/// stays small (a tombstone removal batch of the same size took ~60 ms, docs/fleet.md).
pub const CLICK_FORGET_BATCH: i64 = 10_000;

/// Deletes `node`'s rows of days before `first_kept` (its retention), in batches of
/// [`CLICK_FORGET_BATCH`], each its own call and transaction. Returns the rows removed.
pub fn forget_before(db: &mut Db, node: &str, first_kept: u32) -> Result<u64, FleetError> {
    let d = first_kept as i32;
    let mut removed = 0;
    for table in ["ricochet_click_days", "ricochet_click_not_found"] {
        let sql = format!(
            "DELETE FROM {table} WHERE ctid IN \
               (SELECT ctid FROM {table} WHERE node = $1 AND day < $2 LIMIT $3)"
        );
        loop {
            let n = db.call("click retention", async |c| {
                c.execute(sql.as_str(), &[&node, &d, &CLICK_FORGET_BATCH])
                    .await
            })?;
            removed += n;
            if n < CLICK_FORGET_BATCH as u64 {
                break;
            }
        }
    }
    Ok(removed)
}

/// Where the fleet's click figures stand: the oldest `complete_until` of the nodes that
/// flushed within [`CLICK_NODE_STALE_S`] (0 if none), and the clicks every node dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completeness {
    pub complete_until_ms: u64,
    pub dropped: u64,
    pub nodes: u64,
}

fn completeness(rows: &[tokio_postgres::Row]) -> Completeness {
    let r = &rows[0];
    Completeness {
        complete_until_ms: r.get::<_, Option<i64>>(0).unwrap_or(0).max(0) as u64,
        dropped: r.get::<_, Option<i64>>(1).unwrap_or(0).max(0) as u64,
        nodes: r.get::<_, i64>(2) as u64,
    }
}

const COMPLETENESS_SQL: &str = "SELECT min(complete_until) FILTER (WHERE flushed_at > now() - $1::int8 * interval '1 s'), \
            sum(dropped)::int8, count(*) FILTER (WHERE flushed_at > now() - $1::int8 * interval '1 s') \
       FROM ricochet_click_nodes";

/// Every node's rows of `key` for days `from..=to`, summed per day (the facets of every
/// node's row listed, not yet merged), unique visitors from the nodes' sketches merged (a
/// day with a row that has none, flushed before schema 9, sums the rows' estimates).
pub fn link_days(
    db: &mut Db,
    key: &str,
    from: u32,
    to: u32,
) -> Result<(Vec<ClickRow>, Completeness), FleetError> {
    let (f, t) = (from as i32, to as i32);
    let stale = CLICK_NODE_STALE_S as i64;
    let (rows, done) = db.call("click stats", async |c| {
        let rows = c
            .query(
                "SELECT day, sum(clicks)::int8, sum(bot_clicks)::int8, sum(unique_humans)::int8, \
                        sum(unique_bots)::int8, sum(unique_all)::int8, \
                        jsonb_agg(facets)::text, array_agg(humans), array_agg(bots) \
                   FROM ricochet_click_days WHERE key = $1 AND day BETWEEN $2 AND $3 \
                  GROUP BY day ORDER BY day",
                &[&key, &f, &t],
            )
            .await?;
        let done = c.query(COMPLETENESS_SQL, &[&stale]).await?;
        Ok((rows, done))
    })?;
    let days = rows
        .iter()
        .map(|r| {
            let mut row = ClickRow {
                key: key.to_owned(),
                day: r.get::<_, i32>(0) as u32,
                clicks: r.get::<_, i64>(1) as u64,
                bot_clicks: r.get::<_, i64>(2) as u64,
                unique_humans: r.get::<_, i64>(3) as u64,
                unique_bots: r.get::<_, i64>(4) as u64,
                unique_all: r.get::<_, i64>(5) as u64,
                facets: parse_facet_lists(&r.get::<_, String>(6)),
                humans: Vec::new(),
                bots: Vec::new(),
            };
            let humans: Vec<Option<Vec<u8>>> = r.get(7);
            let bots: Vec<Option<Vec<u8>>> = r.get(8);
            merged_uniques(&mut row, &humans, &bots);
            row
        })
        .collect();
    Ok((days, completeness(&done)))
}

/// Replaces the summed estimates of `row` by those of the nodes' merged sketches, if every
/// node's row of the day has valid ones.
fn merged_uniques(row: &mut ClickRow, humans: &[Option<Vec<u8>>], bots: &[Option<Vec<u8>>]) {
    use shards::clicks::Hll;
    let (mut h, mut b) = (Hll::default(), Hll::default());
    for (hs, bs) in humans.iter().zip(bots) {
        let (Some(hs), Some(bs)) = (hs, bs) else {
            return;
        };
        if !merge_sketch(&mut h, hs) || !merge_sketch(&mut b, bs) {
            return;
        }
    }
    let mut all = h.clone();
    all.merge(&b);
    row.unique_humans = h.estimate();
    row.unique_bots = b.estimate();
    row.unique_all = all.estimate();
}

/// The fleet's server-wide figures for `from..=to`: per day (clicks, bot clicks, 404s), the
/// top `top` links by clicks, and completeness.
pub type GlobalDays = (Vec<(u32, u64, u64, u64)>, Vec<(String, u64)>, Completeness);

/// Server-wide stats summed over every node.
pub fn global(db: &mut Db, from: u32, to: u32, top: usize) -> Result<GlobalDays, FleetError> {
    let (f, t, n) = (from as i32, to as i32, top as i64);
    let stale = CLICK_NODE_STALE_S as i64;
    db.call("click global stats", async |c| {
        let days = c
            .query(
                "SELECT d.day, coalesce(c.clicks, 0)::int8, coalesce(c.bots, 0)::int8, \
                        coalesce(nf.n, 0)::int8 \
                   FROM generate_series($1::int4, $2::int4) AS d(day) \
                   LEFT JOIN (SELECT day, sum(clicks) AS clicks, sum(bot_clicks) AS bots \
                                FROM ricochet_click_days WHERE day BETWEEN $1 AND $2 GROUP BY day) c \
                          ON c.day = d.day \
                   LEFT JOIN (SELECT day, sum(count) AS n FROM ricochet_click_not_found \
                               WHERE day BETWEEN $1 AND $2 GROUP BY day) nf ON nf.day = d.day \
                  ORDER BY d.day",
                &[&f, &t],
            )
            .await?;
        let top = c
            .query(
                "SELECT key, sum(clicks)::int8 AS total \
                   FROM ricochet_click_days WHERE day BETWEEN $1 AND $2 \
                  GROUP BY key ORDER BY total DESC, key LIMIT $3",
                &[&f, &t, &n],
            )
            .await?;
        let done = c.query(COMPLETENESS_SQL, &[&stale]).await?;
        Ok((
            days.iter()
                .map(|r| {
                    (
                        r.get::<_, i32>(0) as u32,
                        r.get::<_, i64>(1) as u64,
                        r.get::<_, i64>(2) as u64,
                        r.get::<_, i64>(3) as u64,
                    )
                })
                .collect(),
            top.iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
                .collect(),
            completeness(&done),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facets_round_trip_through_their_json_and_junk_is_skipped() {
        let f = vec![
            Facet {
                kind: 1,
                bot: false,
                value: "t.co \"x\" \\ \u{1}".into(),
                count: 3,
            },
            Facet {
                kind: 5,
                bot: true,
                value: "bot".into(),
                count: 1,
            },
        ];
        let one = facets_json(&f);
        // jsonb_agg wraps each row's array in one more array.
        let agg = format!("[{one}, [[9,true]], {one}]");
        let back = parse_facet_lists(&agg);
        assert_eq!(back.len(), 4);
        assert_eq!(back[0], f[0]);
        assert_eq!(back[1], f[1]);
        assert!(parse_facet_lists("not json").is_empty());
    }

    #[test]
    fn sketches_round_trip_merge_as_a_union_and_junk_is_refused() {
        use shards::clicks::Hll;
        // splitmix64: well-mixed hashes, as SipHash gives the real visitors.
        let mix = |v: u64| {
            let mut z = v.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let (mut a, mut b) = (Hll::default(), Hll::default());
        for v in 0..300u64 {
            a.insert_hash(mix(v));
        }
        for v in 200..400u64 {
            b.insert_hash(mix(v));
        }
        let mut union = Hll::default();
        assert!(merge_sketch(&mut union, &encode_sketch(&a)));
        assert!(merge_sketch(&mut union, &encode_sketch(&b)));
        let mut want = a.clone();
        want.merge(&b);
        assert_eq!(union.estimate(), want.estimate());
        let est = union.estimate() as f64;
        assert!(
            (est - 400.0).abs() < 400.0 * 0.1,
            "{est}: 400 distinct, not 500"
        );
        let mut x = Hll::default();
        assert!(merge_sketch(&mut x, &[]));
        assert!(!merge_sketch(&mut x, &[1, 2]), "not whole registers");
        assert!(
            !merge_sketch(&mut x, &[0xff, 0xff, 1]),
            "index past the registers"
        );
        assert!(!merge_sketch(&mut x, &[1, 0, 0]), "rank 0");
        assert_eq!(x, Hll::default(), "nothing merged from junk");
    }
}
