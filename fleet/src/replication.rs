//! Whether the standbys a failover could promote hold a commit (issue #24: no generated key
//! issued twice across an asynchronous failover).
//!
//! The seed's rule: a confirmed allocation must pass a replication check consistent with the
//! recovery target before it is used. With asynchronous standbys, COMMIT returns once the
//! primary alone has the WAL; a standby promoted before it streamed the allocation hands the
//! same range to another node, and both issue the same keys (the audit shows it, too late).
//! So an allocation is published only once every standby that could be promoted has flushed
//! it:
//!
//! - every **physical replication slot** with a reserved position (`restart_lsn`, which a
//!   streaming standby advances to what it has flushed). A slot outlives its standby's
//!   disconnection, so a stopped or lagging standby holds allocations back, which is the
//!   point. A slot that never reserved WAL stands for no standby yet (one made from a base
//!   backup later starts past this commit).
//! - every **connected walsender without a slot** whose flush position the session may read
//!   (`pg_stat_replication`; its LSN columns need `pg_read_all_stats`). A standby without a
//!   slot that is disconnected is invisible: HA setups use slots (Patroni does by default),
//!   and `docs/fleet.md` says so.
//!
//! Under synchronous replication (`synchronous_standby_names` set and `synchronous_commit`
//! `on` or `remote_apply` for the session) the COMMIT's own return is the proof: it waited
//! for the synchronous standbys, the ones an HA manager promotes. Logical walsenders are
//! never waited for (they cannot be promoted).

use crate::db::{Db, FleetError};

/// Longest an allocation waits for the standbys to flush it before the attempt gives up
/// (the range stays pending and is checked again at the next attempt on the same session).
/// A streaming standby flushes within milliseconds; past this one is stopped or far behind.
pub const REPLICATION_WAIT_MS: u64 = 3_000;

/// Pause between two reads of the standbys' positions while waiting.
pub const REPLICATION_POLL_MS: u64 = 5;

/// What proves a commit made on this session is on every standby a failover could promote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needed {
    /// Synchronous replication: the COMMIT returned, so it is proven.
    Nothing,
    /// Every standby must have flushed WAL up to this position (text, `pg_lsn` form).
    FlushedTo(String),
}

/// Read right after a COMMIT returned, on its session: the WAL insert position now is at or
/// past the commit record's end.
pub fn after_commit(db: &mut Db) -> Result<Needed, FleetError> {
    db.call("replication position", async |c| {
        let r = c
            .query_one(
                "SELECT pg_current_wal_insert_lsn()::text, \
                        current_setting('synchronous_standby_names') <> '' \
                        AND current_setting('synchronous_commit') IN ('on', 'remote_apply')",
                &[],
            )
            .await?;
        Ok(if r.get::<_, bool>(1) {
            Needed::Nothing
        } else {
            Needed::FlushedTo(r.get(0))
        })
    })
}

/// The standbys (slots and slot-less walsenders, named) that have not flushed up to `lsn`.
/// Empty: every standby a failover could promote holds it.
pub fn lagging(db: &mut Db, lsn: &str) -> Result<Vec<String>, FleetError> {
    let lsn = lsn.to_owned();
    db.call("standby positions", async |c| {
        let r = c
            .query_one(
                "SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM ( \
                   SELECT 'slot ' || slot_name AS name FROM pg_replication_slots \
                    WHERE slot_type = 'physical' AND restart_lsn IS NOT NULL \
                      AND restart_lsn < $1::text::pg_lsn \
                   UNION ALL \
                   SELECT 'standby ' || coalesce(nullif(r.application_name, ''), \
                                                  r.client_addr::text, r.pid::text) \
                     FROM pg_stat_replication r \
                    WHERE r.flush_lsn IS NOT NULL AND r.flush_lsn < $1::text::pg_lsn \
                      AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s \
                                       WHERE s.active_pid = r.pid)) lag",
                &[&lsn],
            )
            .await?;
        Ok(r.get::<_, Vec<String>>(0))
    })
}

/// Waits up to [`REPLICATION_WAIT_MS`] for `needed`. `Ok(Ok(()))`: proven; `Ok(Err(names))`:
/// these standbys still lack it.
pub fn wait_for(db: &mut Db, needed: &Needed) -> Result<Result<(), Vec<String>>, FleetError> {
    let Needed::FlushedTo(lsn) = needed else {
        return Ok(Ok(()));
    };
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(REPLICATION_WAIT_MS);
    loop {
        let behind = lagging(db, lsn)?;
        if behind.is_empty() {
            return Ok(Ok(()));
        }
        if std::time::Instant::now() >= deadline {
            return Ok(Err(behind));
        }
        db.sleep(std::time::Duration::from_millis(REPLICATION_POLL_MS));
    }
}
