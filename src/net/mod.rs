//! Bytes in and out, first on the data path: listeners accept, the ring receives and sends,
//! connections parse requests and answer or defer them.

pub mod listener; // SO_REUSEPORT listeners
pub mod ring; // the io_uring ring and its provided buffers
pub mod conns; // connections: bytes in, parse, answer or defer, bytes out
