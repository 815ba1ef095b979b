//! ricochet: a thread-per-core URL shortener and redirect server.
//!
//! See ARCHITECTURE.md for the data path and the codemap.

pub mod analytics;
pub mod api;
pub mod cache;
pub mod client;
pub mod clock;
pub mod conns;
pub mod core_loop;
pub mod cpus;
pub mod damped;
pub mod fleet_mode;
pub mod flights;
pub mod http;
pub mod idle;
pub mod key;
pub mod keywatch;
pub mod listener;
pub mod mesh;
pub mod metrics;
pub mod owner;
pub mod probes;
pub mod recovery;
pub mod ring;
pub mod route;
pub mod router;
pub mod server;
pub mod service;
pub mod shared;
pub mod target;
pub mod test_faults;
