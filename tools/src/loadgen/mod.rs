//! Open-loop, constant-rate HTTP/1.1 load generator that measures latency from each request's
//! scheduled send time (no coordinated omission) and checks every response.

pub mod check;
pub mod cli;
pub mod clock;
pub mod engine;
pub mod links;
pub mod pacing;
pub mod request;
pub mod response;
pub mod search;
pub mod stats;
pub mod zipf;

pub use engine::{run, LoadConfig, LoadError};
