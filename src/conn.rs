//! One client connection's state, as the core loop's state machine sees it, and the pool its
//! buffers come from.
//!
//! An idle connection owns no buffers: `inbuf` and `out` are empty `Vec`s (no allocation) until
//! bytes arrive that cannot be answered at once, and go back to the pool when drained.

use std::os::fd::RawFd;

/// Largest number of bytes a connection may have buffered but not yet parsed: a full head plus
/// the largest body plus one receive buffer. More means the client pipelines far beyond what we
/// answer per batch; the connection is closed.
pub const MAX_INBUF_BYTES: usize = crate::http::limits::MAX_HEADER_BYTES
    + crate::http::limits::MAX_BODY_BYTES
    + crate::ring::bufring::RECV_BUF_BYTES;

/// Capacity of a pooled buffer: a 16-deep pipeline of redirects with ~100-byte targets fits.
pub const POOLED_BUF_BYTES: usize = 8192;

/// Buffers larger than this are freed rather than pooled (a rare huge response must not pin
/// memory forever).
pub const MAX_POOLED_BUF_BYTES: usize = 64 * 1024;

/// Buffers a core's pool starts with: 64 connections can each hold an output and an input
/// buffer at once before the pool grows (512 KiB of address space per core; pages are touched
/// only when used).
pub const PREALLOCATED_BUFS: usize = 128;

/// Buffers kept in a core's pool. Beyond this, returned buffers are freed.
pub const MAX_POOLED_BUFS: usize = 4096;

/// What an API request was, so its answer can be encoded (and a create retried).
#[derive(Debug)]
pub enum ApiOp {
    Create {
        req: Box<crate::api::request::CreateRequest>,
        created_at_s: u64,
        tries: u8,
    },
    Get,
    Patch,
    Delete,
}

/// An API request waiting for its owner.
#[derive(Debug)]
pub struct ApiCtx {
    pub op: ApiOp,
}

/// What kind of answer a pending request waits for.
#[derive(Debug)]
pub enum PendingKind {
    /// A redirect lookup forwarded to the key's owner.
    Redirect,
    Api(Box<ApiCtx>),
}

/// A forwarded request waiting for its owner's answer.
#[derive(Debug)]
pub struct Pending {
    /// The request's sequence number on this connection (echoed by the owner).
    pub seq: u32,
    /// Where in `out` its response goes: responses after it were already encoded.
    pub offset: usize,
    /// A HEAD request: a 404 goes without its body.
    pub head: bool,
    pub persist: crate::http::encode::Conn,
    pub kind: PendingKind,
}

/// A connection slot.
pub struct Conn {
    pub fd: RawFd,
    /// Bumped when the slot is reused, so late completions for the old connection are ignored.
    pub gen: u32,
    pub live: bool,
    /// A multishot recv is armed.
    pub recv_armed: bool,
    /// The recv ran out of pool buffers and must be re-armed when some come back.
    pub recv_starved: bool,
    /// A send of `out[sent..]` is in flight: `out` must not move or change.
    pub send_inflight: bool,
    /// A shutdown was issued; the slot is freed once the recv and send have completed.
    pub closing: bool,
    /// A shutdown SQE is in flight; the fd must not be closed before it completes.
    pub shutdown_pending: bool,
    /// Half-closed after a final response, reading and dropping input until the peer closes.
    pub lingering: bool,
    /// Close once `out` is sent (a `Connection: close` request, an error, EOF, draining).
    pub close_after_send: bool,
    /// Bytes received but not yet parsed (a partial request, or input that arrived while the
    /// previous batch was still being answered).
    pub inbuf: Vec<u8>,
    /// Responses of the current batch, in request order.
    pub out: Vec<u8>,
    /// Bytes of `out` already accepted by the kernel.
    pub sent: usize,
    /// Forwarded requests of this batch, ordered by `offset`.
    pub pending: Vec<Pending>,
    /// Sequence number for the next forwarded request.
    pub next_seq: u32,
    /// Monotonic ms at which the connection is closed if still idle or still incomplete;
    /// 0 = no deadline (a batch is being answered).
    pub deadline_ms: u64,
    /// Queued in the core's flush list.
    pub dirty: bool,
}

impl Conn {
    pub fn new() -> Conn {
        Conn {
            fd: -1,
            gen: 0,
            live: false,
            recv_armed: false,
            recv_starved: false,
            send_inflight: false,
            closing: false,
            lingering: false,
            shutdown_pending: false,
            close_after_send: false,
            inbuf: Vec::new(),
            out: Vec::new(),
            sent: 0,
            pending: Vec::new(),
            next_seq: 0,
            deadline_ms: 0,
            dirty: false,
        }
    }

    /// Answering a batch: new input must wait so that responses stay in order.
    #[inline]
    pub fn busy(&self) -> bool {
        self.send_inflight || !self.pending.is_empty()
    }
}

/// Recycled byte buffers, so steady-state requests allocate nothing.
pub struct BufPool {
    free: Vec<Vec<u8>>,
}

impl BufPool {
    /// A pool holding [`PREALLOCATED_BUFS`] buffers, so the first busy moments after start do
    /// not allocate (the allocation-free test counts from a warm state).
    pub fn new() -> BufPool {
        let mut free = Vec::with_capacity(MAX_POOLED_BUFS);
        free.extend((0..PREALLOCATED_BUFS).map(|_| Vec::with_capacity(POOLED_BUF_BYTES)));
        BufPool { free }
    }

    /// An empty buffer with at least [`POOLED_BUF_BYTES`] capacity.
    #[inline]
    pub fn get(&mut self) -> Vec<u8> {
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(POOLED_BUF_BYTES))
    }

    /// Returns a buffer; `v` is left empty without capacity.
    #[inline]
    pub fn put(&mut self, v: &mut Vec<u8>) {
        if v.capacity() == 0 {
            return;
        }
        let mut b = std::mem::take(v);
        if b.capacity() <= MAX_POOLED_BUF_BYTES && self.free.len() < MAX_POOLED_BUFS {
            b.clear();
            self.free.push(b);
        }
    }
}

impl Default for BufPool {
    fn default() -> Self {
        BufPool::new()
    }
}

impl Default for Conn {
    fn default() -> Self {
        Conn::new()
    }
}
