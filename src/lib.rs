//! ricochet: a thread-per-core URL shortener and redirect server.
//!
//! See ARCHITECTURE.md for the data path and the codemap.

pub mod api;
pub mod api_flow;
pub mod cache;
pub mod compaction;
pub mod conns;
pub mod core;
pub mod http;
pub mod keywatch;
pub mod listener;
pub mod mesh;
pub mod metrics;
pub mod recovery;
pub mod ring;
pub mod router;
pub mod server;
pub mod store;
pub mod writes;
