//! The management API's pure parts: request parsing and validation, problem responses, API keys,
//! per-key rate limits and idempotent creates. No sockets and no storage here: the server's
//! handlers call these and do the I/O.

pub mod idempotency;
pub mod keys;
pub mod problem;
pub mod ratelimit;
pub mod request;
pub mod timefmt;
