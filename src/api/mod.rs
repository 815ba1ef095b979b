//! The management API's pure parts: request parsing and validation, problem responses, API keys,
//! per-key rate limits and idempotent creates. No sockets and no storage here: the server's
//! handlers call these and do the I/O.
//!
//! A `POST /api/v1/urls` handler, in order:
//! 1. [`keys::ApiKeyStore::verify`] the bearer token, else [`problem::Problem::unauthorized`].
//! 2. [`ratelimit::RateLimiter::check`] the key id (one budget per key for the whole node), else 429 (`Problem::from(RetryAfter)`).
//! 3. [`request::parse_create`] the body at the current wall-clock second.
//! 4. With an `Idempotency-Key` header: [`idempotency::IdemScope::new`], then on the owner core
//!    [`idempotency::IdemTable::begin`] with [`idempotency::request_hash`]; create only on
//!    `Proceed`, then [`idempotency::IdemTable::finish`] and answer the returned waiters too.
//! 5. Answer 201 with [`request::link_json`], or a [`problem::Problem`] as
//!    [`problem::PROBLEM_CONTENT_TYPE`].

pub mod blocklist;
pub mod cors;
pub mod domains;
pub mod idempotency;
pub mod keys;
pub mod openapi;
pub mod problem;
pub mod ratelimit;
pub mod request;
pub mod roles;
pub mod timefmt;

/// What `node::keywatch` reloads while the server runs, offered whole to every core whenever
/// either part changed: the API keys and the declared domains.
#[derive(Clone, Debug)]
pub struct Reloaded {
    pub keys: std::sync::Arc<keys::ApiKeyStore>,
    pub domains: std::sync::Arc<domains::Domains>,
    /// The abuse blocklist (`--blocklist`; empty without one).
    pub blocklist: std::sync::Arc<blocklist::Blocklist>,
}
