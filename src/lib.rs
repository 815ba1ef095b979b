//! ricochet: a thread-per-core URL shortener and redirect server.
//!
//! See ARCHITECTURE.md for the data path and the codemap.
pub mod api;
