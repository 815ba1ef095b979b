//! Recycled byte buffers, so steady-state requests allocate nothing.

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
