//! The connection role: connection slots, their pipelined answers, and the buffer pool.

pub mod answers;
pub mod conn;
pub mod pool;

pub use answers::{Answers, ApiOp, Pending, PendingKind};
pub use conn::{Conn, Recv, INBUF_PAUSE_BYTES, INBUF_RESUME_BYTES, MAX_INBUF_BYTES};
pub use pool::{
    BufPool, MAX_POOLED_BUFS, MAX_POOLED_BUF_BYTES, POOLED_BUF_BYTES, PREALLOCATED_BUFS,
};
