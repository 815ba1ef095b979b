//! ricochet's HTTP/1.1 layer, kept pure: parsing and encoding work on caller-owned buffers and
//! never touch sockets, so the io_uring connection state machine drives them and tests can
//! exercise every rule without a network.
//!
//! - [`parse`]: one request head at a time from the front of a read buffer (`Ok(None)` while
//!   incomplete), with every framing ambiguity rejected.
//! - [`encode`]: response heads and small bodies appended to a reusable `Vec<u8>`.
//! - [`location`]: a redirect's `Location` reshaped by the visit (extra path, forwarded
//!   query).
//! - [`status`]: the status codes ricochet emits and their reason phrases.
//! - [`date`]: the cached `Date` header value.
//! - [`limits`]: every size and time limit of the layer.
//! - [`chunked`]: request bodies in the chunked transfer coding.

pub mod chunked;
pub mod date;
pub mod encode;
pub mod limits;
pub mod location;
pub mod parse;
pub mod status;

pub use date::DateCache;
pub use encode::{
    encode_error, encode_method_not_allowed, encode_not_found, encode_redirect, encode_response,
    Conn, Framing, Response,
};
pub use parse::{parse_request, BadRequest, Method, ParseError, Request};
pub use status::Status;
