//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`): the per-core pool receives land in.
//!
//! Why: with a multishot recv that selects its buffer from this ring, an idle connection holds
//! no read buffer at all; the kernel picks one only when bytes arrive, and we hand it back as
//! soon as the bytes are parsed (or copied into the connection's small spill buffer when a
//! request is incomplete). Memory for reads is therefore `RECV_BUF_COUNT * RECV_BUF_BYTES` per
//! core, whatever the number of connections.

use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// Buffers in each core's receive pool. 1024 x 4 KiB = 4 MiB per core: enough for every
/// connection of a busy core to have a read in flight between two loop turns.
pub const RECV_BUF_COUNT: u16 = 1024;

/// Size of one receive buffer. A typical request is under 200 bytes and a 16-deep pipeline of
/// them under 4 KiB; larger requests continue across buffers via the connection's spill buffer.
pub const RECV_BUF_BYTES: usize = 4096;

/// The buffer group id our recvs select from.
pub const RECV_BUF_GROUP: u16 = 0;

/// The ring of buffer descriptors plus the buffers themselves, both in anonymous mappings so
/// they never move.
pub struct BufRing {
    entries: *mut BufRingEntry,
    entries_bytes: usize,
    bufs: *mut u8,
    bufs_bytes: usize,
    mask: u16,
    /// Our private copy of the tail; published to the kernel with a release store.
    tail: u16,
}

impl BufRing {
    /// Maps the ring and the buffers, offers every buffer to the kernel and registers the
    /// ring with `uring`.
    pub fn new(uring: &IoUring) -> io::Result<BufRing> {
        let count = RECV_BUF_COUNT;
        assert!(count.is_power_of_two());
        let entries_bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        let bufs_bytes = usize::from(count) * RECV_BUF_BYTES;
        let entries = map_anon(entries_bytes)? as *mut BufRingEntry;
        let bufs = match map_anon(bufs_bytes) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `entries` was mapped above with exactly `entries_bytes`.
                unsafe { libc::munmap(entries.cast(), entries_bytes) };
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries,
            entries_bytes,
            bufs,
            bufs_bytes,
            mask: count - 1,
            tail: 0,
        };
        for bid in 0..count {
            ring.push(bid);
        }
        ring.publish();
        // SAFETY: the entry array is page-aligned (mmap), holds `count` entries and lives as
        // long as `self`; `Drop` unmaps only after the ring (and so the registration) is gone,
        // because `Ring` drops its `IoUring` before its `BufRing` (field order).
        unsafe {
            uring.submitter().register_buf_ring_with_flags(
                entries as u64,
                count,
                RECV_BUF_GROUP,
                0,
            )?;
        }
        Ok(ring)
    }

    /// The bytes the kernel wrote into buffer `bid`.
    #[inline]
    pub fn slice(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid <= self.mask && len <= RECV_BUF_BYTES);
        // SAFETY: `bid` is in range, so the buffer lies inside the mapping; the kernel
        // finished writing `len` bytes into it before posting the completion that gave us
        // `bid`, and it will not touch it again until we recycle it.
        unsafe { std::slice::from_raw_parts(self.bufs.add(usize::from(bid) * RECV_BUF_BYTES), len) }
    }

    /// Gives buffer `bid` back to the kernel. Takes effect at the next `publish`.
    #[inline]
    pub fn push(&mut self, bid: u16) {
        let idx = usize::from(self.tail & self.mask);
        // SAFETY: `idx` < count, so the entry is inside the mapping; the kernel reads entries
        // only between its head and the published tail, and this one is past the tail.
        let entry = unsafe { &mut *self.entries.add(idx) };
        // SAFETY: `bid` < count, so the address is inside the buffer mapping.
        let addr = unsafe { self.bufs.add(usize::from(bid) * RECV_BUF_BYTES) };
        entry.set_addr(addr as u64);
        entry.set_len(RECV_BUF_BYTES as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes every pushed buffer visible to the kernel.
    #[inline]
    pub fn publish(&mut self) {
        // SAFETY: the tail field overlays the first entry's reserved field, as the kernel ABI
        // defines; the entry array is page-aligned and initialized.
        let tail = unsafe { BufRingEntry::tail(self.entries) } as *const AtomicU16;
        // SAFETY: the address is valid and aligned for u16; the kernel reads it concurrently,
        // hence the atomic release store.
        unsafe { (*tail).store(self.tail, Ordering::Release) };
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both regions were mapped in `new` with these sizes and are unmapped once.
        unsafe {
            libc::munmap(self.entries.cast(), self.entries_bytes);
            libc::munmap(self.bufs.cast(), self.bufs_bytes);
        }
    }
}

fn map_anon(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}
