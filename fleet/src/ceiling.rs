//! Namespace ceilings: what lets a node answer 404 for a never-issued generated key without
//! asking the database (`migrations/0005_ceiling.sql`; docs/fleet.md, "Unknown-key floods").
//!
//! Every ID a namespace handed out is below its `ceiling`. A raise is made in two steps, so a
//! node that read the ceiling before the raise has read it again before anything above the
//! old ceiling is handed out:
//!
//! 1. an allocation transaction that finds less than half a [`CEILING_STEP`] of headroom
//!    writes `ceiling_next` (nodes count it as "may be issued" from their next read on);
//! 2. the next transaction that sees it committed stamps `ceiling_next_seen` with the
//!    database's clock: the raise was visible to every reader from before that instant;
//! 3. a transaction at least [`RANGE_MATURITY_MS`] after the stamp promotes it
//!    (`ceiling := ceiling_next`), and only then may IDs above the old ceiling be handed out.
//!
//! A node trusts a read for [`HIGH_WATER_FRESH_MS`] from the moment it sent it: a read older
//! than the raise's commit is at least `RANGE_MATURITY_MS` old by the time a client can hold a
//! 201 for an ID above the old ceiling, so it is no longer trusted. The margin between the two
//! constants covers the clocks' rates (the database's wall clock measures the maturity, the
//! node's monotonic clock the freshness).

use crate::db::{Db, FleetError};
use std::time::{Duration, Instant};

/// How far a raise lifts a namespace's ceiling (2^30 IDs). A random 7-character key decodes to
/// an ID below a ceiling with odds (ceiling - lo) / 62^7: about 1 in 3,000 per step, so
/// nearly every scanned key is answered without a query. Written into
/// `migrations/0005_ceiling.sql` too.
pub const CEILING_STEP: u64 = 1 << 30;

/// How long after a raise was first seen committed (database clock) it may be promoted and
/// IDs above the old ceiling handed out.
pub const RANGE_MATURITY_MS: u64 = 1_000;

/// How long a node trusts a ceiling read, from the moment it sent the query. Half the
/// maturity: margin for the two clocks' rates and for a database clock stepped forward.
pub const HIGH_WATER_FRESH_MS: u64 = 500;

/// How often a node reads the ceilings (on the change feed's session, between polls).
pub const HIGH_WATER_REFRESH_MS: u64 = 100;

const _: () = assert!(HIGH_WATER_FRESH_MS * 2 <= RANGE_MATURITY_MS);
const _: () = assert!(HIGH_WATER_REFRESH_MS * 4 <= HIGH_WATER_FRESH_MS);

/// Marks a raise seen, or promotes it once it is ripe, in the caller's transaction (after the
/// namespace row is locked) or on its own. Returns the row as it is now, with how long ago the
/// raise was seen (ms, NULL if not under way). Every `SET` reads the row before the update.
pub(crate) const ADVANCE_SQL: &str = "\
    UPDATE ricochet_namespace SET \
      ceiling = CASE WHEN ceiling_next_seen IS NOT NULL \
                      AND clock_timestamp() - ceiling_next_seen >= $2::int8 * interval '1 ms' \
                     THEN ceiling_next ELSE ceiling END, \
      ceiling_next = CASE WHEN ceiling_next_seen IS NOT NULL \
                      AND clock_timestamp() - ceiling_next_seen >= $2::int8 * interval '1 ms' \
                     THEN NULL ELSE ceiling_next END, \
      ceiling_next_seen = CASE WHEN ceiling_next_seen IS NULL THEN clock_timestamp() \
                     WHEN clock_timestamp() - ceiling_next_seen >= $2::int8 * interval '1 ms' \
                     THEN NULL ELSE ceiling_next_seen END \
    WHERE name = $1 AND ceiling_next IS NOT NULL \
    RETURNING ceiling, ceiling_next, \
      (extract(epoch FROM clock_timestamp() - ceiling_next_seen) * 1000)::int8";

/// Where a namespace's ceiling stands after [`ADVANCE_SQL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Advanced {
    pub ceiling: u64,
    /// Still under way: the raise, and how long ago it was seen (ms).
    pub pending: Option<(u64, u64)>,
}

impl Advanced {
    pub(crate) fn from_row(r: &tokio_postgres::Row) -> Advanced {
        let next: Option<i64> = r.get(1);
        let seen_ms: Option<i64> = r.get(2);
        Advanced {
            ceiling: r.get::<_, i64>(0) as u64,
            pending: next.map(|n| (n as u64, seen_ms.unwrap_or(0).max(0) as u64)),
        }
    }

    /// How long until the raise under way may be promoted (zero if none is).
    pub(crate) fn wait(&self) -> Duration {
        let seen = self.pending.map_or(RANGE_MATURITY_MS, |(_, seen)| seen);
        Duration::from_millis(RANGE_MATURITY_MS.saturating_sub(seen))
    }
}

/// The raise an allocation ending at `end` should start, if none is under way: a step above
/// the ceiling once less than half a step of headroom is left (capped at the namespace's end).
pub(crate) fn raise_for(end: u64, ceiling: u64, hi: u64, step: u64) -> Option<u64> {
    let headroom = ceiling.saturating_sub(end);
    (ceiling < hi && headroom < step / 2).then(|| ceiling.saturating_add(step).min(hi))
}

/// Brings namespace `name`'s raise under way (if any) to promotion: stamps it seen, waits out
/// the maturity, promotes it. Used right after a namespace is created, so its first IDs are
/// ready when the command returns. Gives up after `deadline`.
pub(crate) fn mature(db: &mut Db, name: &str, deadline: Duration) -> Result<u64, FleetError> {
    let until = Instant::now() + deadline;
    loop {
        let row = db.call("ceiling", async |c| {
            c.query_opt(ADVANCE_SQL, &[&name, &(RANGE_MATURITY_MS as i64)])
                .await
        })?;
        let Some(row) = row else {
            return ceiling_of(db, name);
        };
        let a = Advanced::from_row(&row);
        if a.pending.is_none() {
            return Ok(a.ceiling);
        }
        if Instant::now() >= until {
            return Err(FleetError::Refused(format!(
                "the ceiling raise of namespace {name} did not mature within {deadline:?}"
            )));
        }
        // A few ms past the stamp's age: the next ADVANCE then finds it ripe.
        std::thread::sleep(a.wait() + Duration::from_millis(5));
    }
}

fn ceiling_of(db: &mut Db, name: &str) -> Result<u64, FleetError> {
    let r = db.call("ceiling", async |c| {
        c.query_opt(
            "SELECT ceiling FROM ricochet_namespace WHERE name = $1",
            &[&name],
        )
        .await
    })?;
    r.map(|r| r.get::<_, i64>(0) as u64)
        .ok_or_else(|| FleetError::Refused(format!("no namespace {name}")))
}

/// Every namespace's IDs that may have been issued, `[lo, bound)`, as read at `sent`: `bound`
/// is the raise under way if there is one, else the ceiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ceilings {
    pub sent: Instant,
    pub ranges: Vec<(u64, u64)>,
}

impl Ceilings {
    /// Whether `id` may have been issued by some namespace.
    pub fn may_be_issued(&self, id: u64) -> bool {
        self.ranges
            .iter()
            .any(|&(lo, bound)| lo <= id && id < bound)
    }

    /// Whether this read may still be trusted at `now` ([`HIGH_WATER_FRESH_MS`]).
    pub fn is_fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.sent) < Duration::from_millis(HIGH_WATER_FRESH_MS)
    }
}

/// Reads every namespace's ceiling. `sent` is taken before the query goes out.
pub fn read(db: &mut Db) -> Result<Ceilings, FleetError> {
    let sent = Instant::now();
    let rows = db.call("ceilings", async |c| {
        c.query(
            "SELECT lo, greatest(ceiling, coalesce(ceiling_next, ceiling)) FROM ricochet_namespace",
            &[],
        )
        .await
    })?;
    let ranges = rows
        .iter()
        .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
        .collect();
    Ok(Ceilings { sent, ranges })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raise_starts_below_half_a_step_of_headroom_and_stops_at_the_end() {
        assert_eq!(raise_for(10, 100, 1000, 100), None);
        assert_eq!(raise_for(49, 100, 1000, 100), None);
        assert_eq!(raise_for(51, 100, 1000, 100), Some(200));
        assert_eq!(raise_for(99, 100, 150, 100), Some(150));
        assert_eq!(raise_for(100, 150, 150, 100), None);
    }

    #[test]
    fn a_read_covers_only_its_ranges_and_only_while_fresh() {
        let t = Instant::now();
        let c = Ceilings {
            sent: t,
            ranges: vec![(1, 100), (1000, 1001)],
        };
        assert!(c.may_be_issued(1) && c.may_be_issued(99) && c.may_be_issued(1000));
        assert!(!c.may_be_issued(0) && !c.may_be_issued(100) && !c.may_be_issued(1001));
        assert!(c.is_fresh(t + Duration::from_millis(HIGH_WATER_FRESH_MS - 1)));
        assert!(!c.is_fresh(t + Duration::from_millis(HIGH_WATER_FRESH_MS)));
    }
}
