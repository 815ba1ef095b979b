//! Open-loop, constant-rate HTTP/1.1 load generator that measures latency from each request's
//! scheduled send time (no coordinated omission) and checks every response.

pub mod check;
pub mod clock;
pub mod links;
pub mod pacing;
pub mod request;
pub mod response;
pub mod stats;
pub mod zipf;
