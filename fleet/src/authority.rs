//! [`PgAuthority`]: the seed's allocation transaction on the primary, with uncertain commits
//! resolved from the audit and a rolled-back authority detected from the node's evidence.
//!
//! One allocation, on one session:
//!
//! 1. `BEGIN`; `SET LOCAL lock_timeout, statement_timeout`;
//!    `SELECT next_id, lo, hi ... FOR UPDATE` (the namespace row);
//! 2. the evidence check: the node's last confirmed interval ([`Evidence`]) must still be in
//!    the audit and `next_id` at or past its end, else the authority was rolled back (a
//!    lagging replica promoted): fenced for good;
//! 3. the ceiling (`crate::ceiling`): a raise under way is stamped seen or promoted; then
//!    `start = next_id`, `end = min(start + len, ceiling)` (`start >= hi`: exhausted; nothing
//!    below the ceiling: commit the stamp and try again once the raise is ripe), and a raise
//!    is started when less than half a step of headroom is left;
//!    `UPDATE ... SET next_id = end WHERE name = $ns AND next_id = start` must touch one row;
//!    `INSERT` the audit row `(request_id, namespace, start, end, node, instance)`;
//! 4. `COMMIT`. A server error before or at COMMIT means nothing was committed. No reply to
//!    COMMIT (timeout, broken connection) is uncertain: the old session is made to be gone
//!    (`pg_terminate_backend` if it lingers), then the audit row of `request_id` decides. Found:
//!    the range is confirmed, once a commit made after it returns (with a synchronous standby,
//!    that commit waits until all earlier WAL is replicated), and published. Absent: nothing
//!    was committed. Not provable within
//!    [`UNCERTAIN_RESOLVE_MS`]: the range, if it was committed, is wasted (it shows in the
//!    audit with no IDs used), and a later allocation asks afresh. Never published on a guess.
//! 5. Replicated: every standby a failover could promote has flushed the commit
//!    (`crate::replication`), waited for up to [`crate::replication::REPLICATION_WAIT_MS`];
//!    else the range waits, unpublished, and the next attempt on the same session checks it
//!    again (another session: wasted). An asynchronous standby promoted without it would
//!    hand the range out again.
//! 6. Publish: the evidence is fsynced first, then the range is returned.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shards::alloc::{Authority, AuthorityError, IdRange, MAX_SEGMENT_LEN, MIN_SEGMENT_LEN};

use crate::ceiling::{raise_for, Advanced, ADVANCE_SQL, RANGE_MATURITY_MS};
use crate::db::{Db, FailureClass, FleetError, SessionId};
use crate::evidence::Evidence;
use crate::replication;
use crate::stats::FleetStats;
use crate::{LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS, UNCERTAIN_RESOLVE_MS};

/// Test-only faults at the COMMIT (hidden `serve` flags), counted in allocations.
#[derive(Clone, Copy, Debug, Default)]
pub struct FleetFaults {
    /// From this allocation on (1-based), every other one commits and then acts as if the
    /// reply was lost: the uncertain path must find the audit row and publish it.
    pub lose_commit_reply_from: Option<u64>,
    /// From this allocation on, every other one rolls back instead of committing and acts as
    /// if the reply was lost: the uncertain path must find no row and publish nothing.
    pub rollback_as_uncertain_from: Option<u64>,
    /// From this allocation on, every other one freezes its own backend (SIGSTOP, needs the
    /// right to signal it: root, or the same user) for [`FROZEN_COMMIT_MS`] just before its
    /// COMMIT is sent: the reply does not come, and the old session is still alive, its
    /// COMMIT unread, while the uncertain path runs (issue #24, item 12's hard case).
    pub freeze_at_commit_from: Option<u64>,
}

/// How long `FleetFaults::freeze_at_commit_from` freezes the backend: past the call's
/// timeout, inside [`UNCERTAIN_RESOLVE_MS`].
pub const FROZEN_COMMIT_MS: u64 = 3_000;

/// Where a node allocates from.
#[derive(Clone, Debug)]
pub struct FleetSetup {
    pub url: String,
    pub namespace: String,
    pub node_id: String,
    pub data_dir: PathBuf,
    pub faults: FleetFaults,
    /// How far a ceiling raise lifts the namespace's ceiling: [`crate::CEILING_STEP`]; tests
    /// make it small to reach raises and their maturity.
    pub ceiling_step: u64,
}

/// Phase 1's outcome: the transaction is open with the range written, or closed.
enum Prepared {
    Ready(IdRange),
    NoNamespace,
    Exhausted,
    RolledBack {
        next_id: u64,
        audited: i64,
    },
    Raced(u64),
    /// Every ID below the ceiling is issued and its raise is not ripe yet: committed (the
    /// raise's stamp), try again after this long.
    Maturing(Duration),
}

/// Tries an allocation makes while a ceiling raise matures (each waits out its remainder, so
/// two suffice; the third is margin for a stamp rolled back by a failed transaction).
const MATURING_TRIES: u32 = 3;

/// How COMMIT went.
enum Committed {
    Yes,
    No(FleetError),
    Uncertain(FleetError),
}

/// An `Authority` backed by a namespace row in PostgreSQL.
pub struct PgAuthority {
    db: Db,
    setup: FleetSetup,
    /// This process's allocator instance (random per start): the audit tells restarts apart.
    instance: String,
    evidence: Option<Evidence>,
    fenced: Option<String>,
    /// A committed allocation some standby has not flushed yet: published once it has
    /// (`crate::replication`), checked again at the next attempt while its session lives.
    unconfirmed: Option<Unconfirmed>,
    allocations: u64,
    stats: Arc<FleetStats>,
}

/// A committed range that waits for the standbys before it is published.
struct Unconfirmed {
    request_id: String,
    range: IdRange,
    needed: replication::Needed,
    /// The session whose position `needed` was read on: another session may be on another
    /// history, where that position means something else.
    session: Option<SessionId>,
}

impl PgAuthority {
    /// An authority for `setup` over `db`. Refuses evidence from another namespace. Does not
    /// contact the database: the evidence is checked at the first allocation (and each one).
    pub fn new(
        db: Db,
        setup: FleetSetup,
        stats: Arc<FleetStats>,
    ) -> Result<PgAuthority, FleetError> {
        if setup.ceiling_step < 2 {
            return Err(FleetError::Refused(format!(
                "ceiling step {} is below 2",
                setup.ceiling_step
            )));
        }
        let evidence = Evidence::load(&setup.data_dir)?;
        if let Some(e) = &evidence {
            if e.namespace != setup.namespace {
                return Err(FleetError::Refused(format!(
                    "{} says this data dir allocates from namespace {:?}, not --namespace {:?}; \
                     a data dir belongs to one namespace",
                    Evidence::path(&setup.data_dir).display(),
                    e.namespace,
                    setup.namespace
                )));
            }
        }
        Ok(PgAuthority {
            db,
            setup,
            instance: random_hex(8),
            evidence,
            fenced: None,
            unconfirmed: None,
            allocations: 0,
            stats,
        })
    }

    /// The counters this authority updates.
    pub fn stats(&self) -> Arc<FleetStats> {
        self.stats.clone()
    }

    fn try_allocate(&mut self, len: u64) -> Result<IdRange, (FailureClass, AuthorityError)> {
        if let Some(u) = self.unconfirmed.take() {
            if u.session.is_some() && self.db.session_id() == u.session {
                return self.await_standbys(u);
            }
            eprintln!(
                "fleet: allocation {} of [{}, {}) was never proven replicated and its session \
                 is gone: not published (wasted; the audit shows it)",
                u.request_id, u.range.start, u.range.end
            );
        }
        self.allocations += 1;
        let request_id = random_hex(16);
        let range = self.prepared_range(&request_id, len)?;
        self.commit_range(request_id, range)
    }

    /// Phase 1 ([`Self::prepare`]), waiting for a ceiling raise to mature at most
    /// `MATURING_TRIES` times: the range to commit, or why there is none.
    fn prepared_range(
        &mut self,
        request_id: &str,
        len: u64,
    ) -> Result<IdRange, (FailureClass, AuthorityError)> {
        let mut tries = 0;
        let prepared = loop {
            match self.prepare(request_id, len) {
                Ok(Prepared::Maturing(wait)) if tries < MATURING_TRIES => {
                    tries += 1;
                    self.stats.ceiling_wait();
                    std::thread::sleep(wait + Duration::from_millis(5));
                }
                other => break other,
            }
        };
        match prepared {
            Ok(Prepared::Ready(range)) => Ok(range),
            Ok(Prepared::Maturing(_)) => {
                let reason = format!(
                    "namespace {:?}: every ID below its ceiling is issued and the raise did not \
                     mature within {MATURING_TRIES} tries",
                    self.setup.namespace
                );
                Err((FailureClass::Database, AuthorityError::Unavailable(reason)))
            }
            Ok(Prepared::Exhausted) => Err((FailureClass::Database, AuthorityError::Exhausted)),
            Ok(Prepared::NoNamespace) => {
                let reason = format!(
                    "namespace {:?} does not exist in {}; create it with `ricochet fleet \
                     namespace create`",
                    self.setup.namespace,
                    self.db.target()
                );
                Err((FailureClass::Database, AuthorityError::Unavailable(reason)))
            }
            Ok(Prepared::RolledBack { next_id, audited }) => {
                let e = self.evidence.as_ref().expect("checked against evidence");
                let reason = format!(
                    "the database's next_id for namespace {:?} is {next_id} and it holds {audited} \
                     audit rows for request {}, but this node confirmed [{}, {}) by that \
                     request (evidence in {}): the authority lost confirmed allocations (a \
                     lagging replica promoted, or a restore) and would issue IDs again",
                    self.setup.namespace,
                    e.request_id,
                    e.start,
                    e.end,
                    Evidence::path(&self.setup.data_dir).display()
                );
                eprintln!("fleet: FENCED: {reason}");
                self.fenced = Some(reason.clone());
                self.stats.fence();
                Err((FailureClass::RolledBack, AuthorityError::Fenced { reason }))
            }
            Ok(Prepared::Raced(n)) => {
                let reason = format!("guarded UPDATE of next_id touched {n} rows, not 1");
                Err((FailureClass::Database, AuthorityError::Unavailable(reason)))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Phase 2: COMMIT, and when its reply is lost, the outcome resolved from the audit.
    fn commit_range(
        &mut self,
        request_id: String,
        range: IdRange,
    ) -> Result<IdRange, (FailureClass, AuthorityError)> {
        let old_session = self.db.session_id();
        match self.commit() {
            Committed::Yes => self.confirm(request_id, range),
            Committed::No(e) => Err(unavailable(e)),
            Committed::Uncertain(e) => {
                eprintln!("fleet: allocation {request_id}: {e}; resolving from the audit");
                match self.resolve(&request_id, old_session) {
                    Some(Some(found)) => self.confirm(request_id, found),
                    Some(None) => Err((
                        FailureClass::Uncertain,
                        AuthorityError::Unavailable(format!(
                            "allocation {request_id} lost its COMMIT reply and was not \
                             committed; nothing published"
                        )),
                    )),
                    None => {
                        self.stats.unknown_outcome();
                        Err((
                            FailureClass::Uncertain,
                            AuthorityError::Unavailable(format!(
                                "allocation {request_id} lost its COMMIT reply and its outcome \
                                 could not be proven within {UNCERTAIN_RESOLVE_MS} ms; if it \
                                 committed, [{}, {}) is wasted (see the audit)",
                                range.start, range.end
                            )),
                        ))
                    }
                }
            }
        }
    }

    /// Phase 1: everything up to COMMIT, in one open transaction.
    fn prepare(&mut self, request_id: &str, len: u64) -> Result<Prepared, FleetError> {
        let ns = self.setup.namespace.clone();
        let node = self.setup.node_id.clone();
        let instance = self.instance.clone();
        let evidence = self.evidence.clone();
        let len = len as i64;
        let stats = self.stats.clone();
        let step = self.setup.ceiling_step;
        self.db.call("allocation", async |c| {
            c.batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'; \
                 SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT_MS}ms'"
            ))
            .await?;
            let Some(row) = c
                .query_opt(
                    "SELECT next_id, hi, ceiling, ceiling_next IS NOT NULL \
                     FROM ricochet_namespace WHERE name = $1 FOR UPDATE",
                    &[&ns],
                )
                .await?
            else {
                c.batch_execute("ROLLBACK").await?;
                return Ok(Prepared::NoNamespace);
            };
            let (next_id, hi): (i64, i64) = (row.get(0), row.get(1));
            let mut ceiling = Advanced {
                ceiling: row.get::<_, i64>(2) as u64,
                pending: None,
            };
            if row.get::<_, bool>(3) {
                let maturity = RANGE_MATURITY_MS as i64;
                if let Some(r) = c.query_opt(ADVANCE_SQL, &[&ns, &maturity]).await? {
                    ceiling = Advanced::from_row(&r);
                }
            }
            stats.saw(next_id as u64, hi as u64);
            if let Some(e) = &evidence {
                if let Some(lost) = lost_confirmed(c, &ns, e, next_id).await? {
                    c.batch_execute("ROLLBACK").await?;
                    return Ok(lost);
                }
            }
            if next_id >= hi {
                c.batch_execute("ROLLBACK").await?;
                return Ok(Prepared::Exhausted);
            }
            let end = next_id.saturating_add(len).min(ceiling.ceiling as i64);
            let raise = match ceiling.pending {
                Some(_) => None,
                None => raise_for(end as u64, ceiling.ceiling, hi as u64, step),
            };
            if let Some(to) = raise {
                c.execute(
                    "UPDATE ricochet_namespace SET ceiling_next = $2 WHERE name = $1",
                    &[&ns, &(to as i64)],
                )
                .await?;
                stats.ceiling_raise();
            }
            if end <= next_id {
                // Nothing issuable below the ceiling: keep the stamp (or the new raise) and
                // come back once the raise is ripe.
                c.batch_execute("COMMIT").await?;
                // A raise made just now is stamped by the next try; one under way is ripe after
                // the rest of its maturity.
                let wait = match raise {
                    Some(_) => Duration::ZERO,
                    None => ceiling.wait(),
                };
                return Ok(Prepared::Maturing(wait));
            }
            let by = (request_id, node.as_str(), instance.as_str());
            issue(c, &ns, next_id, end, by).await
        })
    }

    /// Phase 2: COMMIT, or a test fault standing in for a lost reply.
    fn commit(&mut self) -> Committed {
        let n = self.allocations;
        let faulted = |from: Option<u64>| from.is_some_and(|f| n >= f && (n - f) % 2 == 0);
        if faulted(self.setup.faults.freeze_at_commit_from) {
            if let Some(id) = self.db.session_id() {
                freeze_backend(id.pid, Duration::from_millis(FROZEN_COMMIT_MS));
            }
        }
        let (sql, lost) = if faulted(self.setup.faults.lose_commit_reply_from) {
            ("COMMIT", true)
        } else if faulted(self.setup.faults.rollback_as_uncertain_from) {
            ("ROLLBACK", true)
        } else {
            ("COMMIT", false)
        };
        match self.db.call("commit", async |c| c.batch_execute(sql).await) {
            Ok(()) if !lost => Committed::Yes,
            Ok(()) => {
                self.db.disconnect();
                Committed::Uncertain(FleetError::Refused(format!(
                    "test fault: the reply to {sql} is dropped"
                )))
            }
            Err(e) => match e.class() {
                // The server answered: it did not commit.
                Some(FailureClass::Database | FailureClass::StatementTimeout) => Committed::No(e),
                _ => Committed::Uncertain(e),
            },
        }
    }

    /// After a lost COMMIT reply: `Some(Some(range))` committed, `Some(None)` not committed,
    /// `None` unknown. Proof needs the old session gone first: while it lives, its commit
    /// could still be on its way. A commit found must also be replicated ([`Self::barrier`]).
    fn resolve(&mut self, request_id: &str, old: Option<SessionId>) -> Option<Option<IdRange>> {
        self.db.disconnect();
        let deadline = Instant::now() + Duration::from_millis(UNCERTAIN_RESOLVE_MS);
        let mut old = old;
        loop {
            let gone = old.clone();
            let r = self.db.call("resolve uncertain commit", async |c| {
                if let Some(old) = &gone {
                    let alive: i64 = c
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 \
                             AND backend_start::text = $2",
                            &[&old.pid, &old.backend_start],
                        )
                        .await?
                        .get(0);
                    if alive > 0 {
                        c.execute("SELECT pg_terminate_backend($1)", &[&old.pid])
                            .await?;
                        return Ok(None);
                    }
                }
                let row = c
                    .query_opt(
                        "SELECT start_id, end_id FROM ricochet_alloc_audit WHERE request_id = $1",
                        &[&request_id],
                    )
                    .await?;
                Ok(Some(row.map(|r| IdRange {
                    start: r.get::<_, i64>(0) as u64,
                    end: r.get::<_, i64>(1) as u64,
                })))
            });
            match r {
                Ok(Some(None)) => return Some(None),
                Ok(Some(Some(range))) => match self.barrier(request_id) {
                    Ok(()) => return Some(Some(range)),
                    // Its backend may wait on: ended before the next try, like the first.
                    Err(session) => old = session,
                },
                Ok(None) | Err(_) => {}
            }
            if Instant::now() >= deadline {
                return None;
            }
            self.db.sleep(Duration::from_millis(50));
        }
    }

    /// Proves an allocation found committed is replicated: a terminated backend stops waiting
    /// for the synchronous standby and its commit stays local, yet reads as committed. A
    /// commit made now (a no-op update of the allocation's own audit row: it must write WAL
    /// and take an xid to wait) cannot return before all earlier WAL is on the synchronous
    /// standby; without one configured it returns at once. `Err`: not proven, with the
    /// session that may still be waiting.
    fn barrier(&mut self, request_id: &str) -> Result<(), Option<SessionId>> {
        let session = self.db.ensure_session().ok();
        self.db
            .call("replication barrier", async |c| {
                c.execute(
                    "UPDATE ricochet_alloc_audit SET node_id = node_id WHERE request_id = $1",
                    &[&request_id],
                )
                .await
            })
            .map(drop)
            .map_err(|_| session)
    }

    /// A committed range, published once every standby a failover could promote holds it
    /// (`crate::replication`): else another node could be handed it again by that standby.
    fn confirm(
        &mut self,
        request_id: String,
        range: IdRange,
    ) -> Result<IdRange, (FailureClass, AuthorityError)> {
        let session = self.db.session_id();
        match replication::after_commit(&mut self.db) {
            Ok(needed) => self.await_standbys(Unconfirmed {
                request_id,
                range,
                needed,
                session,
            }),
            Err(e) => Err(not_proven(&request_id, range, e)),
        }
    }

    /// Publishes `u` once the standbys have it; else keeps it for the next attempt.
    fn await_standbys(
        &mut self,
        u: Unconfirmed,
    ) -> Result<IdRange, (FailureClass, AuthorityError)> {
        match replication::wait_for(&mut self.db, &u.needed) {
            Ok(Ok(())) => self.publish(u.request_id, u.range),
            Ok(Err(behind)) => {
                let reason = format!(
                    "allocation {} of [{}, {}) is committed but not yet flushed by {} (a \
                     failover to one of them would hand its IDs out again); it is published \
                     once they have it",
                    u.request_id,
                    u.range.start,
                    u.range.end,
                    behind.join(", ")
                );
                self.unconfirmed = Some(u);
                Err((
                    FailureClass::Unreplicated,
                    AuthorityError::Unavailable(reason),
                ))
            }
            Err(e) => Err(not_proven(&u.request_id, u.range, e)),
        }
    }

    /// Fsyncs the evidence, then hands the range out. If the evidence cannot be written, the
    /// range is not published (wasted, visible in the audit).
    fn publish(
        &mut self,
        request_id: String,
        range: IdRange,
    ) -> Result<IdRange, (FailureClass, AuthorityError)> {
        let e = Evidence {
            namespace: self.setup.namespace.clone(),
            request_id,
            start: range.start,
            end: range.end,
        };
        if let Err(source) = e.store(&self.setup.data_dir) {
            return Err((
                FailureClass::Evidence,
                AuthorityError::Io {
                    op: "fsync the allocation evidence",
                    path: Evidence::path(&self.setup.data_dir),
                    source,
                },
            ));
        }
        self.evidence = Some(e);
        Ok(range)
    }
}

impl Authority for PgAuthority {
    fn allocate(&mut self, len: u64) -> Result<IdRange, AuthorityError> {
        if !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&len) {
            return Err(AuthorityError::BadLength(len));
        }
        if self.fenced.is_none() && self.stats.is_fenced() {
            // The follower proved it first (`evidence_lost`), on finding another history.
            self.fenced = Some("the database lost this node's confirmed allocation".into());
        }
        if let Some(reason) = &self.fenced {
            return Err(AuthorityError::Fenced {
                reason: reason.clone(),
            });
        }
        // A database the node does not use (another fleet's, an older schema, unchecked
        // since a start without it) must not hand it IDs.
        if let Some(r) = self.stats.refused() {
            return Err(AuthorityError::Unavailable(r.explain().to_owned()));
        }
        let started = Instant::now();
        let result = self.try_allocate(len);
        match &result {
            Ok(r) => self.stats.allocation(started.elapsed(), r.len()),
            Err((class, _)) => self.stats.failure(*class, started.elapsed()),
        }
        result.map_err(|(_, e)| e)
    }

    /// The end of this node's last confirmed range (every ID below it may have been issued
    /// by this node or another).
    fn high_water(&self) -> u64 {
        self.evidence
            .as_ref()
            .map_or(shards::alloc::FIRST_ID, |e| e.end)
    }
}

/// Whether the database lost this node's last confirmed allocation (the evidence in
/// `data_dir`): its audit row gone, or `next_id` below its end. Checked at once when the node
/// finds the database on another history (issue #24, hole 2): the IDs on hand came from that
/// allocation or an earlier one, and none is used until this answers. `Ok(None)`: it holds
/// (or the node never confirmed one); `Some`: why the node is fenced.
pub fn evidence_lost(
    db: &mut Db,
    data_dir: &std::path::Path,
    namespace: &str,
) -> Result<Option<String>, FleetError> {
    let Some(e) = Evidence::load(data_dir)? else {
        return Ok(None);
    };
    let ns = namespace.to_owned();
    let (next_id, audited) = db.call("allocation evidence", async |c| {
        let r = c
            .query_one(
                "SELECT (SELECT next_id FROM ricochet_namespace WHERE name = $2), \
                        (SELECT count(*) FROM ricochet_alloc_audit WHERE request_id = $1 \
                          AND namespace = $2 AND start_id = $3 AND end_id = $4)",
                &[&e.request_id, &ns, &(e.start as i64), &(e.end as i64)],
            )
            .await?;
        Ok((r.get::<_, Option<i64>>(0), r.get::<_, i64>(1)))
    })?;
    let Some(next_id) = next_id else {
        // No namespace: a database the node refuses, not proof of a lost allocation.
        return Err(FleetError::Refused(format!(
            "namespace {namespace:?} does not exist in {}",
            db.target()
        )));
    };
    let next_id = next_id.max(0) as u64;
    if next_id >= e.end && audited == 1 {
        return Ok(None);
    }
    Ok(Some(format!(
        "the database's next_id for namespace {namespace:?} is {next_id} and it holds {audited} \
         audit rows for request {}, but this node confirmed [{}, {}) by that request (evidence \
         in {}): the authority lost confirmed allocations (a lagging replica promoted, or a \
         restore) and would issue IDs again",
        e.request_id,
        e.start,
        e.end,
        Evidence::path(data_dir).display()
    )))
}

/// A committed range whose replication could not be read: never published (wasted).
fn not_proven(request_id: &str, range: IdRange, e: FleetError) -> (FailureClass, AuthorityError) {
    let class = e.class().unwrap_or(FailureClass::Database);
    (
        class,
        AuthorityError::Unavailable(format!(
            "allocation {request_id} of [{}, {}) is committed, but whether the standbys hold \
             it could not be read ({e}): not published (wasted; the audit shows it)",
            range.start, range.end
        )),
    )
}

fn unavailable(e: FleetError) -> (FailureClass, AuthorityError) {
    let class = e.class().unwrap_or(FailureClass::Database);
    (class, AuthorityError::Unavailable(e.to_string()))
}

/// Test fault: stops backend `pid` now and continues it after `for_`, from a thread.
fn freeze_backend(pid: i32, for_: Duration) {
    let signal = move |s: &str| {
        let _ = std::process::Command::new("kill")
            .args([s, &pid.to_string()])
            .status();
    };
    signal("-STOP");
    std::thread::spawn(move || {
        std::thread::sleep(for_);
        signal("-CONT");
    });
}

/// `bytes` random bytes as lowercase hex.
fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::getrandom(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Whether the database lost the allocation this node last confirmed (`e`): its `next_id` is
/// below the range's end, or its audit row is gone. `Some` is the verdict to answer with.
async fn lost_confirmed(
    c: &tokio_postgres::Client,
    ns: &str,
    e: &Evidence,
    next_id: i64,
) -> Result<Option<Prepared>, tokio_postgres::Error> {
    let audited: i64 = c
        .query_one(
            "SELECT count(*) FROM ricochet_alloc_audit WHERE request_id = $1 \
             AND namespace = $2 AND start_id = $3 AND end_id = $4",
            &[&e.request_id, &ns, &(e.start as i64), &(e.end as i64)],
        )
        .await?
        .get(0);
    Ok(
        ((next_id as u64) < e.end || audited != 1).then_some(Prepared::RolledBack {
            next_id: next_id as u64,
            audited,
        }),
    )
}

/// Issues [`next_id`, `end`) in the open transaction: `next_id` moved (guarded by its value
/// read under the row lock) and the audit row written, naming the request, node and instance.
async fn issue(
    c: &tokio_postgres::Client,
    ns: &str,
    next_id: i64,
    end: i64,
    (request_id, node, instance): (&str, &str, &str),
) -> Result<Prepared, tokio_postgres::Error> {
    let n = c
        .execute(
            "UPDATE ricochet_namespace SET next_id = $1 WHERE name = $2 AND next_id = $3",
            &[&end, &ns, &next_id],
        )
        .await?;
    if n != 1 {
        c.batch_execute("ROLLBACK").await?;
        return Ok(Prepared::Raced(n));
    }
    c.execute(
        "INSERT INTO ricochet_alloc_audit \
         (request_id, namespace, start_id, end_id, node_id, instance) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&request_id, &ns, &next_id, &end, &node, &instance],
    )
    .await?;
    Ok(Prepared::Ready(IdRange {
        start: next_id as u64,
        end: end as u64,
    }))
}
