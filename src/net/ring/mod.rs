//! The per-core io_uring ring that drives every socket of its core.
//!
//! glommio's `TcpStream` reads with plain syscalls and re-arms a poll per read; this ring instead
//! keeps one multishot accept and one multishot recv per connection armed, selects receive
//! buffers from a provided-buffer ring, and submits all sends of a loop turn with a single
//! `io_uring_enter`. Completions are routed by their `user_data` token (see [`Token`]).

pub mod bufring;

use io_uring::{cqueue, squeue, IoUring};
use std::io;

/// Submission queue entries per core. Each loop turn submits at most one send per connection
/// plus re-arms; when the queue fills we submit early, so this only bounds batch size.
pub const RING_ENTRIES: u32 = 4096;

/// Completion queue entries: twice the submission queue, as multishot ops post many
/// completions per submission.
pub const RING_CQ_ENTRIES: u32 = 2 * RING_ENTRIES;

/// What a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Accept = 1,
    Recv = 2,
    Send = 3,
    Close = 4,
    Doorbell = 5,
    Cancel = 6,
    Timeout = 7,
    LogWrite = 8,
    LogSync = 9,
    Shutdown = 10,
}

/// A completion's `user_data`: the op in the top byte, the connection's generation in the next
/// 24 bits (so a completion for a closed-and-reused slot is recognized as stale) and the
/// connection slot in the low 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub op: Op,
    pub gen: u32,
    pub slot: u32,
}

/// Generations wrap at 24 bits.
pub const GEN_MASK: u32 = (1 << 24) - 1;

impl Token {
    pub fn new(op: Op, slot: u32, gen: u32) -> Token {
        Token {
            op,
            gen: gen & GEN_MASK,
            slot,
        }
    }

    pub fn encode(self) -> u64 {
        (u64::from(self.op as u8) << 56)
            | (u64::from(self.gen & GEN_MASK) << 32)
            | u64::from(self.slot)
    }

    pub fn decode(v: u64) -> Option<Token> {
        let op = match (v >> 56) as u8 {
            1 => Op::Accept,
            2 => Op::Recv,
            3 => Op::Send,
            4 => Op::Close,
            5 => Op::Doorbell,
            6 => Op::Cancel,
            7 => Op::Timeout,
            8 => Op::LogWrite,
            9 => Op::LogSync,
            10 => Op::Shutdown,
            _ => return None,
        };
        Some(Token {
            op,
            gen: ((v >> 32) as u32) & GEN_MASK,
            slot: v as u32,
        })
    }
}

/// The ring plus its receive buffers. Field order matters: the `IoUring` must drop (and so
/// unregister the buffer ring) before the buffers are unmapped.
pub struct Ring {
    pub uring: IoUring,
    pub bufs: bufring::BufRing,
}

impl Ring {
    /// Builds a ring for the calling thread (single issuer: only this thread submits).
    ///
    /// `DEFER_TASKRUN`: completions are posted only when this thread enters the kernel to
    /// reap them (once per loop turn), instead of interrupting it with task work. Measured on
    /// the 2-core machine, 1M links, wrk -c64 with pre-generated random keys: 177k -> 190k
    /// req/s non-pipelined, 930k -> 1.06M pipelined.
    pub fn new() -> io::Result<Ring> {
        let uring = IoUring::builder()
            .setup_cqsize(RING_CQ_ENTRIES)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(RING_ENTRIES)?;
        let bufs = bufring::BufRing::new(&uring)?;
        Ok(Ring { uring, bufs })
    }

    /// Queues `sqe`, submitting first if the submission queue is full.
    #[inline]
    pub fn push(&mut self, sqe: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every buffer or fd an SQE built by this crate points to is owned by the
            // connection table or the buffer ring and outlives the operation: buffers in
            // flight are parked in the connection until their completion arrives.
            if unsafe { self.uring.submission().push(&sqe) }.is_ok() {
                return Ok(());
            }
            self.uring.submit()?;
        }
    }

    /// Takes the completions currently posted, into `out` (reused, so no allocation once warm).
    #[inline]
    pub fn drain_completions(&mut self, out: &mut Vec<cqueue::Entry>) {
        out.clear();
        out.extend(self.uring.completion());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_roundtrip() {
        for op in [
            Op::Accept,
            Op::Recv,
            Op::Send,
            Op::Close,
            Op::Doorbell,
            Op::Cancel,
            Op::Timeout,
        ] {
            for (slot, gen) in [(0, 0), (7, 1), (u32::MAX, GEN_MASK), (12345, 1 << 24 | 5)] {
                let t = Token::new(op, slot, gen);
                assert_eq!(Token::decode(t.encode()), Some(t));
                assert_eq!(t.gen, gen & GEN_MASK);
            }
        }
        assert_eq!(Token::decode(0), None);
    }
}
