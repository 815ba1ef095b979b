//! One client connection's state, as the core loop's state machine sees it.
//!
//! An idle connection owns no buffers: `inbuf` and `out` are empty `Vec`s (no allocation) until
//! bytes arrive that cannot be answered at once, and go back to the pool when drained.

use super::answers::Answers;
use std::os::fd::RawFd;

/// Unparsed input above which a connection stops reading (its recv is cancelled) until the
/// input is answered: one largest request (head plus body). A client that pipelines far ahead
/// of what it reads is slowed by TCP flow control instead of being reset, so answers already
/// computed and writes already committed are still delivered.
pub const INBUF_PAUSE_BYTES: usize =
    crate::http::limits::MAX_HEADER_BYTES + crate::http::limits::MAX_BODY_BYTES;

/// Reading resumes once the unparsed input is below this (half the pause mark, so a client
/// that keeps sending ahead is not paused and resumed on every turn).
pub const INBUF_RESUME_BYTES: usize = INBUF_PAUSE_BYTES / 2;

/// Unparsed input a connection can reach at all: the pause mark plus what the kernel may still
/// deliver before the cancel takes effect (at most every provided receive buffer). Reaching it
/// means the pause did not work; the connection is closed rather than grow without bound.
pub const MAX_INBUF_BYTES: usize = INBUF_PAUSE_BYTES
    + crate::net::ring::bufring::RECV_BUF_COUNT as usize
        * crate::net::ring::bufring::RECV_BUF_BYTES;

const _: () =
    assert!(INBUF_RESUME_BYTES < INBUF_PAUSE_BYTES && INBUF_PAUSE_BYTES < MAX_INBUF_BYTES);

/// Where a connection's receive side stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recv {
    /// No recv armed: before the first, or between a multishot recv's end and its re-arm.
    Idle,
    /// A multishot recv is armed.
    Armed,
    /// The recv ran out of provided buffers; it is re-armed when buffers come back.
    Starved,
    /// Backpressure: a cancel of the armed recv was issued; its last completion is still due.
    Pausing,
    /// Backpressure: no recv armed until the buffered input has been answered.
    Paused,
    /// The peer shut its sending side (EOF) or the read failed: no more input will come.
    /// Everything already received is still answered before the connection closes.
    Done,
}

impl Recv {
    /// A recv operation may still complete (the fd must stay open).
    #[inline]
    pub fn in_flight(self) -> bool {
        matches!(self, Recv::Armed | Recv::Pausing)
    }
}

/// Where a connection slot stands in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// No connection (the slot is on the free list).
    Free,
    /// Serving requests.
    Open,
    /// Finish the batch being answered, then close (`Connection: close`, a parse error,
    /// draining).
    CloseAfterSend,
    /// A shutdown was issued; the slot is freed once the recv, the send and the shutdown
    /// itself have completed. With `linger`, only our side is shut after a final response and
    /// input is read and dropped until the peer closes (see `conns::LINGER_MS`).
    Closing {
        linger: bool,
        shutdown_pending: bool,
    },
}

/// A connection slot.
pub struct Conn {
    pub fd: RawFd,
    /// Bumped when the slot is reused, so late completions for the old connection are ignored.
    pub gen: u32,
    pub life: Life,
    pub recv: Recv,
    /// A send of `out[sent..]` is in flight: `out` must not move or change.
    pub send_inflight: bool,
    /// Bytes received but not yet parsed (a partial request, input that arrived while the
    /// previous batch was still being answered, or requests after an unsafe one).
    pub inbuf: Vec<u8>,
    /// Responses of the current batch, in request order.
    pub out: Vec<u8>,
    /// Bytes of `out` already accepted by the kernel.
    pub sent: usize,
    /// Requests of this batch whose answers come from other cores.
    pub answers: Answers,
    /// Monotonic ms at which the connection is closed if still idle, still incomplete, or
    /// still unable to send; 0 = no deadline (a batch is being computed).
    pub deadline_ms: u64,
    /// Queued in the core's flush list.
    pub dirty: bool,
    /// `100 Continue` was sent for the request whose body is arriving (sent once).
    pub continue_sent: bool,
    /// Input waits in `inbuf` because the mesh was congested; queued in `Conns::outbox_waiters`.
    pub outbox_wait: bool,
    /// The request-duration clock of the batch being answered: when its first request was
    /// received (µs on the core's clock; 0: none) and how many requests it holds.
    pub batch_started_us: u64,
    pub batch_requests: u32,
    /// The TCP peer's address (IPv6, or IPv4-mapped), read at accept when click analytics
    /// needs it; zero otherwise.
    pub peer: [u8; 16],
}

impl Conn {
    pub fn new() -> Conn {
        Conn {
            fd: -1,
            gen: 0,
            life: Life::Free,
            recv: Recv::Idle,
            send_inflight: false,
            inbuf: Vec::new(),
            out: Vec::new(),
            sent: 0,
            answers: Answers::new(),
            deadline_ms: 0,
            dirty: false,
            continue_sent: false,
            outbox_wait: false,
            batch_started_us: 0,
            batch_requests: 0,
            peer: [0; 16],
        }
    }

    /// A connection occupies the slot.
    #[inline]
    pub fn is_live(&self) -> bool {
        self.life != Life::Free
    }

    /// Shut down (or shutting down): nothing more is read or answered.
    #[inline]
    pub fn is_closing(&self) -> bool {
        matches!(self.life, Life::Closing { .. })
    }

    /// Half-closed after a final response, dropping input.
    #[inline]
    pub fn is_lingering(&self) -> bool {
        matches!(self.life, Life::Closing { linger: true, .. })
    }

    /// The batch being answered is the last.
    #[inline]
    pub fn closes_after_send(&self) -> bool {
        self.life == Life::CloseAfterSend
    }

    /// Makes the batch being answered the last one (no-op once closing).
    #[inline]
    pub fn close_after_send(&mut self) {
        if self.life == Life::Open {
            self.life = Life::CloseAfterSend;
        }
    }

    /// Answering a batch: new input must wait so that responses stay in order.
    #[inline]
    pub fn busy(&self) -> bool {
        self.send_inflight || !self.answers.is_empty()
    }
}

impl Default for Conn {
    fn default() -> Self {
        Conn::new()
    }
}
