//! Fleet services: PostgreSQL as the ID allocation authority many ricochet nodes share.
//!
//! This crate holds the only PostgreSQL client of the project. Nothing here runs on a core
//! thread: [`PgAuthority`] implements `shards::alloc::Authority`, so it runs on the
//! allocator's service thread, which cores reach through its bounded queue and doorbell. Each
//! authority owns one connection and a single-threaded tokio runtime driven only while a call
//! is in flight; every call has a client-side timeout ([`DB_CALL_TIMEOUT_MS`]) on top of the
//! server-side `lock_timeout` and `statement_timeout`, so a hung server (SIGSTOP) costs one
//! bounded, classified failure, never a stuck thread.
//!
//! - `db.rs`: [`Db`], a session with timeouts, error classes ([`FailureClass`]).
//! - `schema.rs`: versioned migrations (`migrations/*.sql`), [`init`].
//! - `admin.rs`: namespaces and the runbook's `raise-next-id`.
//! - `authority.rs`: [`PgAuthority`], the seed's allocation transaction, uncertain commits,
//!   rollback detection.
//! - `ceiling.rs`: namespace ceilings, their two-step raise, and the reads that let a node
//!   answer 404 for a never-issued generated key without a query.
//! - `clicks.rs`: every node's per-link-day click states, flushed once each, and the
//!   fleet-wide sums the stats API answers from.
//! - `evidence.rs`: the node's fsynced record of its last confirmed allocation.
//! - `stats.rs`: counters and latency histogram for `/metrics` and `/readyz`.
//! - `feed.rs`: the change feed's commit-safe poll of `ricochet_links`.
//! - `history.rs`: which history (timeline, WAL position) of the database a node followed.
//! - `blocklist.rs`: the fleet's abuse blocklist (`ricochet fleet blocklist`, read by every
//!   node).
//! - `domains.rs`: the fleet's domain book (`ricochet fleet domains`, read by every node).
//! - `keys.rs`: API keys shared by the fleet (`ricochet fleet keys`, read by every node).
//! - `replication.rs`: whether the standbys a failover could promote hold a commit (an
//!   allocation is published only then).
//! - `links.rs`: the link writer: creates, changes and deletes committed on the primary
//!   before a node answers them, on their own service thread.

mod admin;
mod authority;
pub mod blocklist;
pub mod ceiling;
pub mod clicks;
mod db;
pub mod domains;
mod evidence;
pub mod feed;
pub mod history;
pub mod keys;
pub mod links;
pub mod replication;
mod schema;
mod stats;

pub use admin::{create_namespace, raise_next_id, show_namespace, NamespaceRow};
pub use authority::{evidence_lost, FleetFaults, FleetSetup, PgAuthority};
pub use ceiling::{CEILING_STEP, RANGE_MATURITY_MS};
pub use db::{check_url, Db, FailureClass, FleetError};
pub use evidence::{Evidence, EVIDENCE_FILE_NAME};
pub use schema::{init, load_secret, schema_version, InitReport, MIGRATIONS, SCHEMA_VERSION};
pub use stats::{DbRefusal, FleetStats, FleetStatsSnapshot, DB_REFUSED_RECHECK_MS};

/// Longest any single database call may take, measured on our side (connect, each statement,
/// the allocation transaction as a whole). Past it the session is dropped and the call fails
/// as [`FailureClass::Timeout`]. 2 s: far above a healthy allocation (~1 ms), well below
/// `NEXT_ID_DEADLINE_MS` x the prefetch lead, so a buffered range still covers the wait.
pub const DB_CALL_TIMEOUT_MS: u64 = 2_000;

/// Server-side `lock_timeout` of the allocation transaction: a namespace row held locked by
/// someone else (a stuck session, an operator) becomes a `lock_timeout` failure, backed off.
pub const LOCK_TIMEOUT_MS: u64 = 500;

/// Server-side `statement_timeout` of every statement of the allocation transaction.
pub const STATEMENT_TIMEOUT_MS: u64 = 1_000;

/// Server-side `idle_in_transaction_session_timeout`: a session we abandoned mid-transaction
/// (client timeout, network partition) releases its row lock after this long at most.
pub const IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 5_000;

/// `client_connection_check_interval` of every session (PostgreSQL 14+): a backend whose
/// client went away (we dropped a timed-out session) notices within this long while it runs a
/// statement, and stops it, instead of running on.
pub const CLIENT_CHECK_INTERVAL_MS: u64 = 500;

/// Longest `ricochet fleet init` (the migrations, one transaction) may take on our side: a
/// migration on a big table takes longer than any call the nodes make, and runs with no
/// `statement_timeout`.
pub const MIGRATION_TIMEOUT_MS: u64 = 60 * 60 * 1000;

/// `lock_timeout` of the migrations: a table lock they cannot get at once (a long query of
/// another application) fails the init (nothing changed; run it again) instead of queueing
/// every node's writes behind the waiting lock.
pub const MIGRATION_LOCK_TIMEOUT_MS: u64 = 5_000;

/// After a lost COMMIT reply: how long to wait for the old session to be gone (terminating it
/// if it lingers) before the audit row is trusted either way. Past it the outcome stays
/// unknown and the range is wasted.
pub const UNCERTAIN_RESOLVE_MS: u64 = 5_000;
