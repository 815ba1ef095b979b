//! The write side of the system of record: a node's creates, changes and deletes, each one
//! statement on the primary, committed (with `synchronous_commit = on`) before the node logs
//! and answers it. The primary key decides whether an alias is free, across the whole fleet.
//!
//! [`spawn_writer`] runs them on [`WRITER_SESSIONS`] service threads
//! (`ricochet-fleet-links-<n>`), one session each: cores hand jobs over bounded lock-free
//! queues ([`WriterHandle::try_submit`], spread round-robin), each thread takes what is queued
//! for it (at most [`MAX_WRITES_PER_ROUND`]), runs those statements concurrently on its session
//! (tokio-postgres pipelines them), and hands each answer back through the caller's `deliver`.
//! One session commits its statements one after another, one WAL flush each; several sessions
//! let the server share a flush among them (group commit). Writes to one key are never in
//! flight twice (the owner core keeps them in order), so the spreading cannot reorder them. A round that fails as a whole (no session, a hung server
//! past [`crate::DB_CALL_TIMEOUT_MS`]) answers every job in it with the failure class: the
//! API then says 503 with `Retry-After`. A timed-out statement may still have committed; the
//! change feed then brings it to every node, as if another node had made it.

use std::sync::Arc;

use futures_util::future::join_all;
use tokio_postgres::Client;

use crate::db::{Db, FailureClass, FleetError};
use crate::stats::FleetStats;

/// Writes one round takes off the queue at most: bounds the statements pipelined on the
/// session at once and the answers held before they are delivered.
pub const MAX_WRITES_PER_ROUND: usize = 256;

/// Longest a round of link writes (connect included) may take before every write in it is
/// answered 503: an API client waits at most this long for a hung or unreachable database.
/// 1 s: a healthy commit takes about a millisecond, and a client retries after
/// `Retry-After: 1`.
pub const LINK_WRITE_TIMEOUT_MS: u64 = 1_000;

/// Jobs the queue into each writer thread holds; a core that finds it full answers 503.
pub const WRITE_QUEUE_CAPACITY: usize = 1024;

/// Writer threads (sessions) per node. 4: enough for the database to share WAL flushes among
/// a node's concurrent creates (measured in perf/fleet.sh), few enough that a fleet of 100
/// nodes stays within a pooled primary's connections.
pub const WRITER_SESSIONS: usize = 4;

/// How a PATCH changes the expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryChange {
    Keep,
    Clear,
    Set(u64),
}

/// One API write, as the database executes it. Expiry is judged as the node judges it (an
/// expired link is absent: a create may take its key, PATCH and DELETE find nothing), but by
/// the **database's** clock ([`db_now_s`]): every node's writes of a key then agree on whether
/// it has expired, however far a node's clock is off.
#[derive(Clone, Debug)]
pub enum LinkWrite {
    Create {
        key: String,
        target: String,
        status: u16,
        created_at_s: u64,
        expires_at_s: u64,
        /// Under an Idempotency-Key: its scope and the request's hash, claimed in the database
        /// together with the link.
        idem: Option<Box<(String, [u8; 32])>>,
        /// The API key that creates it (`ricochet_links.author`).
        author: String,
        /// Its behaviour as a JSON object (`ricochet_links.behaviour`, migration 0017);
        /// `None`: none.
        behaviour: Option<String>,
    },
    /// `author_only` (here and below): an author-only API key's id, the only author whose
    /// link the write may change (another's is `NotFound`); `""`: any link.
    Patch {
        key: String,
        target: Option<String>,
        status: Option<u16>,
        expiry: ExpiryChange,
        author_only: String,
        /// Behaviour members to set (a JSON object) and to remove, merged in SQL; `None`: no
        /// change. Boxed: rarely sent.
        behaviour: Option<Box<BehaviourPatch>>,
    },
    Delete {
        key: String,
        author_only: String,
    },
    /// One visit of a link with `max_visits` (a GET about to be redirected): counted in the
    /// row's behaviour only while the count is below the limit, so every node's visits
    /// together are exactly the limit. `Visited`, or `NotFound` when used up (or gone).
    Visit {
        key: String,
    },
    /// `DELETE /api/v1/urls/{key}/stats`: every node's click rows of the link go, and a
    /// reset row tells every node to purge its own (`migrations/0008_click_resets.sql`).
    /// Answered `Deleted { version: 0 }`, or `NotFound` without a link (an expired one counts:
    /// its stats stay readable, so resettable).
    ResetStats {
        key: String,
        author_only: String,
    },
}

/// A PATCH of a link's behaviour: members set (a JSON object; `None`: none) and members
/// removed, merged into the row's object in one statement (so two PATCHes of different
/// members both hold); an empty object becomes NULL. Then, if `retag_from` is not empty,
/// those tags are taken off the row's `tags` and `retag_to` put on in their place if any
/// was there (a tag rename or removal, applied to the tags the row has at that moment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BehaviourPatch {
    pub set: Option<String>,
    pub unset: Vec<String>,
    pub retag_from: Vec<String>,
    pub retag_to: Option<String>,
}

/// A link as the database holds it after a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    pub target: String,
    pub status: u16,
    pub created_at_s: u64,
    pub expires_at_s: u64,
    pub version: u64,
    /// The API key that created it (`""`: unknown).
    pub author: String,
    /// Its behaviour (a JSON object), if any.
    pub behaviour: Option<String>,
}

/// What the database decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkWritten {
    Created {
        version: u64,
    },
    /// Create: the key is live (on any node of the fleet).
    Exists,
    Updated(LinkState),
    Deleted {
        version: u64,
    },
    /// A visit counted: the row's new version and count.
    Visited {
        version: u64,
        visits: u64,
    },
    /// PATCH or DELETE: no live link under the key.
    NotFound,
    /// Create under an Idempotency-Key that a request (on any node) already claimed: its
    /// request hash, key and creation time, and the link under that key now, if live.
    IdemClaimed {
        request_hash: [u8; 32],
        key: String,
        created_at_s: u64,
        /// Whether the live `link` is the incarnation that claim's request created (its
        /// creating transaction); `None` when a row predates schema 11 or there is no link.
        same_creation: Option<bool>,
        link: Option<LinkState>,
    },
}

/// Seconds an idempotency record holds its scope (the API's `IDEMPOTENCY_RETENTION_S`).
pub const IDEMPOTENCY_RETENTION_S: u64 = 24 * 60 * 60;

/// The message `ricochet_abort` fails a claimed create with when its link was not inserted.
const ALIAS_TAKEN: &str = "ricochet: alias taken";

/// A job for the writer thread: `token` is the caller's, echoed in the answer.
#[derive(Debug)]
pub struct WriteJob {
    pub core: u16,
    pub token: u64,
    pub write: LinkWrite,
}

/// The answer to a [`WriteJob`].
#[derive(Debug)]
pub struct WriteAnswer {
    pub core: u16,
    pub token: u64,
    pub result: Result<LinkWritten, FailureClass>,
}

/// A core's end of the writers' queues (each core holds its own clone).
#[derive(Clone)]
pub struct WriterHandle {
    txs: Arc<[tokio::sync::mpsc::Sender<WriteJob>]>,
    next: std::cell::Cell<usize>,
}

impl WriterHandle {
    /// A handle whose writer is gone: every job is given back. For the owner's tests without
    /// a database (`src/owner/tests.rs`), where no write reaches the writer.
    pub fn closed() -> WriterHandle {
        let (tx, _) = tokio::sync::mpsc::channel(1);
        WriterHandle {
            txs: Arc::from([tx]),
            next: std::cell::Cell::new(0),
        }
    }

    /// A handle whose jobs land in the returned queue, for tests that play the writer and the
    /// database themselves (`src/owner/tests.rs`).
    pub fn capturing(capacity: usize) -> (WriterHandle, tokio::sync::mpsc::Receiver<WriteJob>) {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity);
        let handle = WriterHandle {
            txs: Arc::from([tx]),
            next: std::cell::Cell::new(0),
        };
        (handle, rx)
    }

    /// Queues `job` for the next writer, round-robin, without blocking (an atomic reservation
    /// and a lock-free push); gives it back (boxed: the rare path) when that queue is full
    /// or the writer is gone.
    pub fn try_submit(&self, job: WriteJob) -> Result<(), Box<WriteJob>> {
        let n = self.next.get();
        self.next.set(n.wrapping_add(1));
        self.txs[n % self.txs.len()]
            .try_send(job)
            .map_err(|e| match e {
                tokio::sync::mpsc::error::TrySendError::Full(j)
                | tokio::sync::mpsc::error::TrySendError::Closed(j) => Box::new(j),
            })
    }
}

/// Starts the writer thread on its own session to `url`. `deliver` runs on that thread, once
/// per job.
pub fn spawn_writer(
    url: &str,
    stats: Arc<FleetStats>,
    deliver: Arc<dyn Fn(WriteAnswer) + Send + Sync>,
) -> Result<WriterHandle, FleetError> {
    let mut txs = Vec::with_capacity(WRITER_SESSIONS);
    for n in 0..WRITER_SESSIONS {
        let (tx, rx) = tokio::sync::mpsc::channel::<WriteJob>(WRITE_QUEUE_CAPACITY);
        let db = Db::new(url)?.with_timeout(LINK_WRITE_TIMEOUT_MS);
        let probe = Db::new(url)?.with_timeout(ZOMBIE_PROBE_TIMEOUT_MS);
        spawn_one_writer(n, db, probe, rx, stats.clone(), deliver.clone())?;
        txs.push(tx);
    }
    Ok(WriterHandle {
        txs: txs.into(),
        next: std::cell::Cell::new(0),
    })
}

fn spawn_one_writer(
    n: usize,
    mut db: Db,
    mut probe: Db,
    mut rx: tokio::sync::mpsc::Receiver<WriteJob>,
    stats: Arc<FleetStats>,
    deliver: Arc<dyn Fn(WriteAnswer) + Send + Sync>,
) -> Result<(), FleetError> {
    std::thread::Builder::new()
        .name(format!("ricochet-fleet-links-{n}"))
        .spawn(move || {
            while let Some(first) = db.block_on(rx.recv()) {
                let mut jobs = vec![first];
                while jobs.len() < MAX_WRITES_PER_ROUND {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                let (answers, uncertain) = run_round(&mut db, &stats, jobs);
                if let Some(old) = uncertain {
                    // Its writes may still commit: their keys stay in flight (unanswered)
                    // until the old backend is gone, so no later write of theirs can be
                    // overtaken by one of them.
                    db.disconnect();
                    resolve_zombie(&mut probe, &old, &mut rx, &*deliver);
                }
                for a in answers {
                    deliver(a);
                }
            }
        })
        .map_err(|e| FleetError::Refused(format!("cannot start the fleet link writer: {e}")))?;
    Ok(())
}

/// How often `resolve_zombie` looks for the old backend again.
pub const ZOMBIE_POLL_MS: u64 = 50;

/// The call timeout of `resolve_zombie`'s own session: a database that does not answer this
/// fast is treated as down or hung as a whole (nothing waited for), so an outage is still
/// answered within about [`LINK_WRITE_TIMEOUT_MS`] plus this.
pub const ZOMBIE_PROBE_TIMEOUT_MS: u64 = 300;

/// Longest `resolve_zombie` holds a timed-out round's answers once the old backend has been
/// sent its termination: by then the server's own `statement_timeout` (3/4 of
/// [`LINK_WRITE_TIMEOUT_MS`]) has ended any statement it was running, and a backend frozen
/// with statements still unread dies of the pending termination when it resumes, before
/// reading them. A database that does not answer the check is not waited for.
pub const ZOMBIE_HOLD_MS: u64 = 2_000;

/// Waits until backend `old` (a session whose round of writes timed out or broke, so its
/// statements may still be running or queued in its socket) is gone, terminating it while it
/// lingers. A backend that was sent its statements and then stopped (SIGSTOP, a frozen VM)
/// would otherwise run them whenever it resumes, after later writes of the same keys were
/// answered. Meanwhile new jobs on this writer are answered unavailable without being sent
/// (their keys are free: nothing of theirs reached the database).
fn resolve_zombie(
    db: &mut Db,
    old: &crate::db::SessionId,
    rx: &mut tokio::sync::mpsc::Receiver<WriteJob>,
    deliver: &(dyn Fn(WriteAnswer) + Send + Sync),
) {
    let mut said = false;
    let started = std::time::Instant::now();
    loop {
        let gone = db.call("resolve a timed-out write session", async |c| {
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
            }
            Ok(alive == 0)
        });
        match gone {
            Ok(true) => {
                if said {
                    eprintln!(
                        "fleet: link write session (backend {}) gone; its keys are free",
                        old.pid
                    );
                }
                return;
            }
            Ok(false) => {} // Alive: its termination was sent.
            // The database does not answer (down, or the whole server frozen): no later write
            // can overtake the old backend's through it, and one that is merely cut off from
            // us runs or cancels its statement at once (`statement_timeout`). Answer now, as
            // an outage must be answered: fast.
            Err(_) => return,
        }
        if started.elapsed() >= std::time::Duration::from_millis(ZOMBIE_HOLD_MS) {
            eprintln!(
                "fleet: link write session (backend {}) terminated but not gone after \
                 {ZOMBIE_HOLD_MS} ms (frozen?); its keys are free",
                old.pid
            );
            return;
        }
        if !said {
            said = true;
            eprintln!(
                "fleet: a round of link writes timed out on backend {}; its keys wait until that \
                 backend is gone (terminated)",
                old.pid
            );
        }
        while let Ok(j) = rx.try_recv() {
            deliver(WriteAnswer {
                core: j.core,
                token: j.token,
                result: Err(FailureClass::Timeout),
            });
        }
        db.sleep(std::time::Duration::from_millis(ZOMBIE_POLL_MS));
    }
}

/// One round's writes on one session, concurrently: the plain creates in one multi-row
/// statement when `batched`, every other write alone. One result per write, in order, and
/// whether the connection broke (the round's outcome is then uncertain).
async fn write_round(
    c: &Client,
    writes: &[&LinkWrite],
    plain: &[usize],
    batched: bool,
) -> Result<(Vec<Result<LinkWritten, FailureClass>>, bool), tokio_postgres::Error> {
    let singles = (0..writes.len())
        .filter(|i| !batched || !plain.contains(i))
        .map(|i| {
            let w = writes[i];
            async move { (i, execute(c, w).await) }
        });
    let batch = async {
        if batched {
            let creates: Vec<&LinkWrite> = plain.iter().map(|&i| writes[i]).collect();
            Some(create_batch(c, &creates).await)
        } else {
            None
        }
    };
    let (singles, batch) = futures_util::future::join(join_all(singles), batch).await;
    let mut out: Vec<Option<Result<LinkWritten, FailureClass>>> = vec![None; writes.len()];
    let mut broken = false;
    let mut class_of = |e: &tokio_postgres::Error| {
        let class = FailureClass::of(e);
        broken |= class == FailureClass::Connection;
        class
    };
    for (i, r) in singles {
        out[i] = Some(r.map_err(|e| class_of(&e)));
    }
    match batch {
        Some(Ok(each)) => {
            for (&i, r) in plain.iter().zip(each) {
                out[i] = Some(Ok(r));
            }
        }
        Some(Err(e)) => {
            let class = class_of(&e);
            for &i in plain {
                out[i] = Some(Err(class));
            }
        }
        None => {}
    }
    let out: Vec<Result<LinkWritten, FailureClass>> = out
        .into_iter()
        .map(|r| r.unwrap_or(Err(FailureClass::Database)))
        .collect();
    Ok((out, broken))
}

/// Runs `jobs` concurrently on the session; one answer per job, in order, and the session
/// whose writes may still commit if the round timed out or broke mid-way.
fn run_round(
    db: &mut Db,
    stats: &FleetStats,
    jobs: Vec<WriteJob>,
) -> (Vec<WriteAnswer>, Option<crate::db::SessionId>) {
    let started = std::time::Instant::now();
    let session = match db.ensure_session() {
        Ok(id) => Some(id),
        // Not connected: nothing of this round can reach the database.
        Err(e) => {
            eprintln!("fleet: {} link writes failed: {e}", jobs.len());
            let class = e.class().unwrap_or(FailureClass::Database);
            let results = vec![Err(class); jobs.len()];
            stats.record_link_writes(&results, started.elapsed());
            return (answers_of(jobs, results), None);
        }
    };
    let writes: Vec<&LinkWrite> = jobs.iter().map(|j| &j.write).collect();
    // Plain creates (no Idempotency-Key) go in one multi-row statement: one commit, one WAL
    // flush for all of them. A key is never in two writes of a round (its owner keeps one in
    // flight), which a multi-row upsert needs; `create_batch` checks it anyway.
    let plain: Vec<usize> = (0..writes.len())
        .filter(|&i| matches!(writes[i], LinkWrite::Create { idem: None, .. }))
        .collect();
    let batched = plain.len() >= 2;
    if batched {
        stats.batched(plain.len());
    }
    let results = db.call("link write", async |c| {
        write_round(c, &writes, &plain, batched).await
    });
    let mut uncertain = None;
    let results: Vec<Result<LinkWritten, FailureClass>> = match results {
        Ok((rs, broken)) => {
            if broken {
                db.disconnect();
                uncertain = session;
            }
            rs
        }
        Err(e) => {
            let class = e.class().unwrap_or(FailureClass::Database);
            eprintln!("fleet: {} link writes failed: {e}", jobs.len());
            uncertain = session;
            vec![Err(class); jobs.len()]
        }
    };
    stats.record_link_writes(&results, started.elapsed());
    (answers_of(jobs, results), uncertain)
}

fn answers_of(
    jobs: Vec<WriteJob>,
    results: Vec<Result<LinkWritten, FailureClass>>,
) -> Vec<WriteAnswer> {
    jobs.into_iter()
        .zip(results)
        .map(|(j, result)| WriteAnswer {
            core: j.core,
            token: j.token,
            result,
        })
        .collect()
}

/// Plain creates (no Idempotency-Key, distinct keys) as one autocommit statement: each comes
/// back `Created` with its version, or `Exists`. Duplicate keys (never sent by a node) are
/// refused as a statement error rather than half-applied.
pub async fn create_batch(
    c: &Client,
    creates: &[&LinkWrite],
) -> Result<Vec<LinkWritten>, tokio_postgres::Error> {
    let (mut keys, mut targets, mut statuses, mut created, mut expires) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut authors, mut behaviours) = (Vec::new(), Vec::new());
    for w in creates {
        let LinkWrite::Create {
            key,
            target,
            status,
            created_at_s,
            expires_at_s,
            idem: None,
            author,
            behaviour,
        } = w
        else {
            unreachable!("only plain creates are batched");
        };
        authors.push(author.as_str());
        behaviours.push(behaviour.as_deref());
        keys.push(key.as_str());
        targets.push(target.as_str());
        statuses.push(*status as i16);
        created.push(*created_at_s as i64);
        expires.push(*expires_at_s as i64);
    }
    let rows = c
        .query(
            concat!(
                "INSERT INTO ricochet_links (key, target, status, created_at, expires_at, author, \
                                            behaviour) \
                 SELECT k, t, s, c, e, a, b::jsonb \
                   FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], \
                               $5::bigint[], $6::text[], $7::text[]) AS u(k, t, s, c, e, a, b) ",
                revive_dead_key!(),
                "RETURNING key, version"
            ),
            &[
                &keys,
                &targets,
                &statuses,
                &created,
                &expires,
                &authors,
                &behaviours,
            ],
        )
        .await?;
    let made: std::collections::HashMap<String, i64> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(keys
        .iter()
        .map(|k| match made.get(*k) {
            Some(&v) => LinkWritten::Created { version: v as u64 },
            None => LinkWritten::Exists,
        })
        .collect())
}

/// The database's clock in Unix seconds, in SQL: what every statement judges expiry by.
macro_rules! db_now_s {
    () => {
        "floor(extract(epoch FROM now()))::bigint"
    };
}
use db_now_s;

/// The upsert clause every create uses: a tombstone or an expired link (by the database's
/// clock) gives its key up, as on a single node; a live one keeps it (no row back). The update
/// restamps version and xid (trigger), so the feed carries the key again.
macro_rules! revive_dead_key {
    () => {
        concat!(
            "ON CONFLICT (key) DO UPDATE SET target = EXCLUDED.target, \
                 status = EXCLUDED.status, created_at = EXCLUDED.created_at, \
                 expires_at = EXCLUDED.expires_at, deleted = false, \
                 author = EXCLUDED.author, behaviour = EXCLUDED.behaviour, \
                 created_xid = pg_current_xact_id() \
               WHERE ricochet_links.deleted \
                  OR (ricochet_links.expires_at <> 0 AND ricochet_links.expires_at <= ",
            db_now_s!(),
            ") "
        )
    };
}
use revive_dead_key;

/// Executes one write as one autocommit statement.
pub async fn execute(c: &Client, w: &LinkWrite) -> Result<LinkWritten, tokio_postgres::Error> {
    match w {
        LinkWrite::Create {
            key,
            target,
            status,
            created_at_s,
            expires_at_s,
            idem,
            author,
            behaviour,
        } => {
            let fields = (
                key,
                target,
                status,
                created_at_s,
                expires_at_s,
                author,
                behaviour,
            );
            match idem {
                Some(idem) => create_claiming(c, fields, idem).await,
                None => create(c, fields).await,
            }
        }
        LinkWrite::Patch {
            key,
            target,
            status,
            expiry,
            author_only,
            behaviour,
        } => patch(c, key, (target, status, expiry, behaviour), author_only).await,
        LinkWrite::ResetStats { key, author_only } => reset_stats(c, key, author_only).await,
        LinkWrite::Visit { key } => visit(c, key).await,
        LinkWrite::Delete { key, author_only } => delete(c, key, author_only).await,
    }
}

/// A create under an Idempotency-Key: the key and the claim in one statement; a claim made
/// before (a replay, or another request with the same key) answers what it made.
async fn create_claiming(
    c: &Client,
    (key, target, status, created_at_s, expires_at_s, author, behaviour): NewRow<'_>,
    idem: &(String, [u8; 32]),
) -> Result<LinkWritten, tokio_postgres::Error> {
    let (scope, hash) = idem;
    let retention = IDEMPOTENCY_RETENTION_S as i64;
    let result = c
        .query_one(
            concat!(
                "WITH claim AS ( \
                 INSERT INTO ricochet_idempotency (scope, request_hash, key, created_at) \
                 VALUES ($6, $7, $1, $4) \
                 ON CONFLICT (scope) DO UPDATE SET request_hash = EXCLUDED.request_hash, \
                     key = EXCLUDED.key, created_at = EXCLUDED.created_at, \
                     created_xid = pg_current_xact_id() \
                   WHERE ricochet_idempotency.created_at < ",
                db_now_s!(),
                " - $8 \
                 RETURNING 1), \
             link AS ( \
                 INSERT INTO ricochet_links (key, target, status, created_at, expires_at, author, \
                                             behaviour) \
                 SELECT $1, $2, $3, $4, $5, $10, $11::text::jsonb FROM claim ",
                revive_dead_key!(),
                "RETURNING version) \
             SELECT (SELECT version FROM link), EXISTS (SELECT 1 FROM claim), \
                    CASE WHEN EXISTS (SELECT 1 FROM claim) \
                          AND NOT EXISTS (SELECT 1 FROM link) \
                         THEN ricochet_abort($9) END"
            ),
            &[
                key,
                target,
                &(*status as i16),
                &(*created_at_s as i64),
                &(*expires_at_s as i64),
                scope,
                &&hash[..],
                &retention,
                &ALIAS_TAKEN,
                author,
                behaviour,
            ],
        )
        .await;
    let row = match result {
        Ok(row) => row,
        Err(e) if e.as_db_error().is_some_and(|d| d.message() == ALIAS_TAKEN) => {
            return Ok(LinkWritten::Exists);
        }
        Err(e) => return Err(e),
    };
    if let Some(version) = row.get::<_, Option<i64>>(0) {
        return Ok(LinkWritten::Created {
            version: version as u64,
        });
    }
    // Claimed before, by this request or another: what it made, and that link now.
    claimed_before(c, scope).await
}

/// What the request that claimed `scope` made, and that link now.
async fn claimed_before(c: &Client, scope: &String) -> Result<LinkWritten, tokio_postgres::Error> {
    let r = c
        .query_one(
            "SELECT i.request_hash, i.key, i.created_at, l.target, l.status, \
                    l.created_at, l.expires_at, l.version, \
                    i.created_xid = l.created_xid, l.author, l.behaviour::text \
               FROM ricochet_idempotency i \
               LEFT JOIN ricochet_links l ON l.key = i.key AND NOT l.deleted \
              WHERE i.scope = $1",
            &[scope],
        )
        .await?;
    let request_hash: Vec<u8> = r.get(0);
    let link = r.get::<_, Option<String>>(3).map(|target| LinkState {
        target,
        status: r.get::<_, i16>(4) as u16,
        created_at_s: r.get::<_, i64>(5) as u64,
        expires_at_s: r.get::<_, i64>(6) as u64,
        version: r.get::<_, i64>(7) as u64,
        author: r.get(9),
        behaviour: r.get(10),
    });
    Ok(LinkWritten::IdemClaimed {
        request_hash: request_hash.try_into().unwrap_or([0; 32]),
        key: r.get(1),
        created_at_s: r.get::<_, i64>(2) as u64,
        same_creation: r.get(8),
        link,
    })
}

/// A new link's columns: key, target, status, created_at, expires_at, author, behaviour.
type NewRow<'a> = (
    &'a String,
    &'a String,
    &'a u16,
    &'a u64,
    &'a u64,
    &'a String,
    &'a Option<String>,
);

/// A create: the key, unless a live link holds it.
async fn create(
    c: &Client,
    (key, target, status, created_at_s, expires_at_s, author, behaviour): NewRow<'_>,
) -> Result<LinkWritten, tokio_postgres::Error> {
    let row = c
        .query_opt(
            concat!(
                "INSERT INTO ricochet_links (key, target, status, created_at, expires_at, author, \
                                            behaviour) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb) ",
                revive_dead_key!(),
                "RETURNING version"
            ),
            &[
                key,
                target,
                &(*status as i16),
                &(*created_at_s as i64),
                &(*expires_at_s as i64),
                author,
                behaviour,
            ],
        )
        .await?;
    Ok(match row {
        Some(r) => LinkWritten::Created {
            version: r.get::<_, i64>(0) as u64,
        },
        None => LinkWritten::Exists,
    })
}

/// A change of a live link.
async fn patch(
    c: &Client,
    key: &String,
    (target, status, expiry, behaviour): (
        &Option<String>,
        &Option<u16>,
        &ExpiryChange,
        &Option<Box<BehaviourPatch>>,
    ),
    author_only: &String,
) -> Result<LinkWritten, tokio_postgres::Error> {
    let unchanged = BehaviourPatch::default();
    let behaviour = behaviour.as_deref().unwrap_or(&unchanged);
    let (kind, at): (i16, i64) = match expiry {
        ExpiryChange::Keep => (0, 0),
        ExpiryChange::Clear => (1, 0),
        ExpiryChange::Set(t) => (2, *t as i64),
    };
    let row = c
        .query_opt(
            concat!(
                "UPDATE ricochet_links SET target = COALESCE($2, target), \
                     status = COALESCE($3, status), \
                     expires_at = CASE $4::smallint WHEN 0 THEN expires_at \
                                                    WHEN 1 THEN 0 ELSE $5 END, \
                     behaviour = CASE WHEN $7::text IS NULL AND cardinality($8::text[]) = 0 \
                                           AND cardinality($9::text[]) = 0 \
                                      THEN behaviour \
                                      ELSE nullif((SELECT CASE \
                                          WHEN cardinality($9::text[]) = 0 \
                                               OR NOT coalesce(m->'tags' ?| $9::text[], false) \
                                          THEN m \
                                          ELSE (m - 'tags') || coalesce((\
                                              SELECT jsonb_build_object('tags', \
                                                         jsonb_agg(DISTINCT t)) \
                                              FROM (SELECT CASE WHEN x = ANY($9::text[]) \
                                                                THEN $10::text ELSE x END AS t \
                                                    FROM jsonb_array_elements_text(m->'tags') x) s \
                                              WHERE t IS NOT NULL HAVING count(*) > 0), \
                                              '{}'::jsonb) END \
                                          FROM (SELECT (coalesce(behaviour, '{}'::jsonb) \
                                                        - $8::text[]) \
                                                       || coalesce($7::text::jsonb, '{}'::jsonb) \
                                                       AS m) merged), \
                                          '{}'::jsonb) END \
                  WHERE key = $1 AND NOT deleted AND ($6 = '' OR author = $6) \
                    AND (expires_at = 0 OR expires_at > ",
                db_now_s!(),
                ") RETURNING target, status, created_at, expires_at, version, author, \
                             behaviour::text"
            ),
            &[
                key,
                target,
                &status.map(|s| s as i16),
                &kind,
                &at,
                author_only,
                &behaviour.set,
                &behaviour.unset,
                &behaviour.retag_from,
                &behaviour.retag_to,
            ],
        )
        .await?;
    Ok(match row {
        Some(r) => LinkWritten::Updated(LinkState {
            target: r.get(0),
            status: r.get::<_, i16>(1) as u16,
            created_at_s: r.get::<_, i64>(2) as u64,
            expires_at_s: r.get::<_, i64>(3) as u64,
            version: r.get::<_, i64>(4) as u64,
            author: r.get(5),
            behaviour: r.get(6),
        }),
        None => LinkWritten::NotFound,
    })
}

/// One visit of a limited link: the count goes up by one unless it has reached the limit
/// (the row lock serializes every node's visits of the link).
async fn visit(c: &Client, key: &String) -> Result<LinkWritten, tokio_postgres::Error> {
    let row = c
        .query_opt(
            concat!(
                "UPDATE ricochet_links SET behaviour = jsonb_set(behaviour, '{visits}', \
                     to_jsonb(coalesce((behaviour->>'visits')::bigint, 0) + 1)) \
                  WHERE key = $1 AND NOT deleted \
                    AND (behaviour->>'max_visits')::bigint \
                        > coalesce((behaviour->>'visits')::bigint, 0) \
                    AND (expires_at = 0 OR expires_at > ",
                db_now_s!(),
                ") RETURNING version, (behaviour->>'visits')::bigint"
            ),
            &[key],
        )
        .await?;
    Ok(match row {
        Some(r) => LinkWritten::Visited {
            version: r.get::<_, i64>(0) as u64,
            visits: r.get::<_, i64>(1) as u64,
        },
        None => LinkWritten::NotFound,
    })
}

/// A stats reset of a link that exists.
async fn reset_stats(
    c: &Client,
    key: &String,
    author_only: &String,
) -> Result<LinkWritten, tokio_postgres::Error> {
    let row = c
        .query_one(
            "WITH l AS (SELECT key FROM ricochet_links WHERE key = $1 AND NOT deleted \
                           AND ($2 = '' OR author = $2)), \
                  r AS (INSERT INTO ricochet_click_resets (key) SELECT key FROM l \
                        RETURNING key), \
                  d AS (DELETE FROM ricochet_click_days \
                         WHERE key IN (SELECT key FROM r)) \
             SELECT count(*) FROM r",
            &[key, author_only],
        )
        .await?;
    Ok(if row.get::<_, i64>(0) == 1 {
        LinkWritten::Deleted { version: 0 }
    } else {
        LinkWritten::NotFound
    })
}

/// A delete of a live link, with every node's clicks of it.
async fn delete(
    c: &Client,
    key: &String,
    author_only: &String,
) -> Result<LinkWritten, tokio_postgres::Error> {
    let row = c
        .query_opt(
            // Every node's clicks of the link go in the same statement; each node
            // also drops its own rows when the tombstone reaches it (a flush it made
            // before then may have written some back).
            concat!(
                "WITH d AS (UPDATE ricochet_links SET deleted = true \
                             WHERE key = $1 AND NOT deleted AND ($2 = '' OR author = $2) \
                               AND (expires_at = 0 OR expires_at > ",
                db_now_s!(),
                ") RETURNING key, version), \
                      c AS (DELETE FROM ricochet_click_days \
                             WHERE key IN (SELECT key FROM d)) \
                 SELECT version FROM d"
            ),
            &[key, author_only],
        )
        .await?;
    Ok(match row {
        Some(r) => LinkWritten::Deleted {
            version: r.get::<_, i64>(0) as u64,
        },
        None => LinkWritten::NotFound,
    })
}

/// Keys one read-through query asks for at most (`key = ANY($1)`).
pub const MAX_READ_KEYS_PER_QUERY: usize = 512;

/// Lookups the queue into the reader thread holds; a core that finds it full answers 503.
pub const READ_QUEUE_CAPACITY: usize = 8192;

/// Longest a read-through query (connect included) may take before its lookups are answered
/// 503: a GET for a link this node does not hold waits at most this long for the database.
pub const LINK_READ_TIMEOUT_MS: u64 = 1_000;

/// A key an owner core did not find locally, to look up in the database.
#[derive(Debug)]
pub struct ReadJob {
    pub core: u16,
    pub key: String,
}

/// What the database holds under a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// The row (a tombstone has `deleted`).
    Row { state: LinkState, deleted: bool },
    /// No row: the key was never written.
    Absent,
}

/// The answer to a [`ReadJob`].
#[derive(Debug)]
pub struct ReadAnswer {
    pub core: u16,
    pub key: String,
    pub result: Result<Stored, FailureClass>,
}

/// The cores' end of the reader's queue.
#[derive(Clone)]
pub struct ReaderHandle {
    tx: tokio::sync::mpsc::Sender<ReadJob>,
}

impl ReaderHandle {
    /// A handle whose reader is gone: every job is given back (see [`WriterHandle::closed`]).
    pub fn closed() -> ReaderHandle {
        let (tx, _) = tokio::sync::mpsc::channel(1);
        ReaderHandle { tx }
    }

    /// Queues `job` without blocking; gives it back when the queue is full.
    pub fn try_submit(&self, job: ReadJob) -> Result<(), ReadJob> {
        self.tx.try_send(job).map_err(|e| match e {
            tokio::sync::mpsc::error::TrySendError::Full(j)
            | tokio::sync::mpsc::error::TrySendError::Closed(j) => j,
        })
    }
}

/// Starts the read-through thread (`ricochet-fleet-reads`) on its own session. Each round
/// takes what is queued, at most [`MAX_READ_KEYS_PER_QUERY`] distinct keys, and asks for them
/// in one query; one query is in flight at a time. No batching window is added: under load
/// the queue fills while a query runs, which is the batch.
pub fn spawn_reader(
    url: &str,
    stats: Arc<FleetStats>,
    mut deliver: Box<dyn FnMut(ReadAnswer) + Send>,
) -> Result<ReaderHandle, FleetError> {
    let mut db = Db::new(url)?.with_timeout(LINK_READ_TIMEOUT_MS);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<ReadJob>(READ_QUEUE_CAPACITY);
    std::thread::Builder::new()
        .name("ricochet-fleet-reads".into())
        .spawn(move || {
            while let Some(first) = db.block_on(rx.recv()) {
                let mut jobs = vec![first];
                let mut keys: Vec<String> = vec![jobs[0].key.clone()];
                while keys.len() < MAX_READ_KEYS_PER_QUERY {
                    match rx.try_recv() {
                        Ok(j) => {
                            if !keys.contains(&j.key) {
                                keys.push(j.key.clone());
                            }
                            jobs.push(j);
                        }
                        Err(_) => break,
                    }
                }
                stats.read_query(keys.len());
                let found = db.call("read-through", async |c| lookup(c, &keys).await);
                let found = match found {
                    Ok(rows) => Ok(rows),
                    Err(e) => {
                        eprintln!("fleet: read-through of {} keys failed: {e}", keys.len());
                        Err(e.class().unwrap_or(FailureClass::Database))
                    }
                };
                for j in jobs {
                    let result = match &found {
                        Ok(rows) => Ok(rows
                            .iter()
                            .find(|(k, _)| *k == j.key)
                            .map_or(Stored::Absent, |(_, s)| s.clone())),
                        Err(class) => Err(*class),
                    };
                    deliver(ReadAnswer {
                        core: j.core,
                        key: j.key,
                        result,
                    });
                }
            }
        })
        .map_err(|e| FleetError::Refused(format!("cannot start the fleet reader: {e}")))?;
    Ok(ReaderHandle { tx })
}

/// The rows of `keys` (tombstones included), by key.
pub async fn lookup(
    c: &Client,
    keys: &[String],
) -> Result<Vec<(String, Stored)>, tokio_postgres::Error> {
    let rows = c
        .query(
            "SELECT key, target, status, created_at, expires_at, deleted, version, author, \
                    behaviour::text \
               FROM ricochet_links WHERE key = ANY($1)",
            &[&keys],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let state = LinkState {
                target: r.get(1),
                status: r.get::<_, i16>(2) as u16,
                created_at_s: r.get::<_, i64>(3) as u64,
                expires_at_s: r.get::<_, i64>(4) as u64,
                version: r.get::<_, i64>(6) as u64,
                author: r.get(7),
                behaviour: r.get(8),
            };
            (
                r.get(0),
                Stored::Row {
                    state,
                    deleted: r.get(5),
                },
            )
        })
        .collect())
}
