//! The owner side of writes: each core's memtable (links created, changed or deleted through
//! the API since the tables were built), its append log driven through the core's ring, and the
//! queue of operations waiting for their batch to become durable.
//!
//! Order of a write on its owner: conditional check against the memtable and table (the final
//! judge of key uniqueness) -> append a CRC-framed record to the log -> the batch is written
//! and fdatasynced by the ring (group commit: every write of a loop turn, plus those that
//! arrive while a sync is in flight, share one fsync) -> only then is the memtable changed and
//! the API answered (after every other core dropped the key from its LRU, for PATCH/DELETE).
//! A failed write or fsync poisons the log: nothing after it is acknowledged until restart.

use crate::base::key::InlineKey;
use crate::mesh::{LinkInfo, ReplyTo, WriteOutcome, WriteReq};
use shards::log::{Batch, LogWriter};
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::RawFd;

/// A key's state in the memtable: it overrides the shard table.
#[derive(Clone, Debug)]
pub enum MemEntry {
    /// `version`: the fleet database's version of this state (0 in single-node mode).
    Live {
        info: LinkInfo,
        id: u64,
        version: u64,
    },
    Deleted {
        version: u64,
    },
}

impl MemEntry {
    /// The fleet version of this state (0 in single-node mode).
    pub fn version(&self) -> u64 {
        match self {
            MemEntry::Live { version, .. } | MemEntry::Deleted { version } => *version,
        }
    }
}

/// What to do once a record is durable.
#[derive(Debug)]
pub enum Then {
    /// Answer `reply`; first make every other core drop `invalidate` from its LRU.
    Reply {
        reply: ReplyTo,
        outcome: WriteOutcome,
        invalidate: Option<InlineKey>,
    },
    /// A change feed row (fleet mode): every other core drops the key from its LRU (and, for a
    /// tombstone, purges its clicks), then the row counts as applied in feed batch `batch`.
    /// Feed rows never hold `Writes::in_flight_keys`: API writes to the key go on meanwhile,
    /// and the memtable keeps whichever state has the higher version.
    Feed {
        batch: u64,
        key: InlineKey,
        purge: bool,
    },
    /// A visit of a link with a visit limit, counted in the record: redirect `reply` with
    /// `answer` (`owner/visits.rs`).
    /// Not boxed: a visit is a redirect, which allocates nothing once warm.
    Visit {
        reply: ReplyTo,
        key: InlineKey,
        answer: crate::mesh::Answer,
    },
}

/// An operation waiting for its log record to be durable.
#[derive(Debug)]
pub struct Durable {
    pub seq: u64,
    /// The memtable change to make visible (none for idempotency records).
    pub apply: Option<(InlineKey, MemEntry)>,
    pub then: Then,
}

/// Operations the queue of writes waiting for their batch holds without growing: counted
/// visits (`owner/visits.rs`) are redirects, which allocate nothing once warm.
pub const WAITING_RESERVE: usize = 1024;

/// Writes to one key that may wait behind the one being made durable; a write beyond them is
/// answered 503 with `Retry-After: 1`. 16: a burst of concurrent edits to one link is queued
/// and applied in order, while a client hammering one key cannot grow a core's memory.
pub const MAX_QUEUED_WRITES_PER_KEY: usize = 16;

/// Writes that may wait while a due compaction drains the log so it can rotate it; a write
/// beyond them is answered 503 with `Retry-After: 1`. The wait lasts at most two batch syncs
/// (the one in flight and the one already pending), so 1024 covers every API connection a
/// core accepts writing at once, while bounding the memory held (each carries its target).
pub const MAX_WRITES_AWAITING_ROTATION: usize = 1024;

/// Test-only fault injection at the storage seam (hidden CLI flags).
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Fail the fsync after this many successful ones (as EIO).
    pub fail_fsync_after: Option<u64>,
    /// Abort the process in the start-up fold of a core-count change, after the carried
    /// idempotency logs are in place and before the old logs are removed (the crash window
    /// `recovery::carry_idempotency` must survive).
    pub abort_after_carry: bool,
}

/// One core's write state.
pub struct Writes {
    pub memtable: HashMap<InlineKey, MemEntry, ahash::RandomState>,
    /// Keys with a record appended but not yet durable: a second write waits its turn.
    pub in_flight_keys: HashSet<InlineKey, ahash::RandomState>,
    /// Writes to an in-flight key, in arrival order, run when its record is durable (at most
    /// [`MAX_QUEUED_WRITES_PER_KEY`] per key).
    pub queued: HashMap<InlineKey, VecDeque<(ReplyTo, WriteReq)>, ahash::RandomState>,
    pub log: LogWriter,
    pub log_fd: RawFd,
    /// The batch being written and synced; its bytes must not move until the sync completes.
    pub batch: Option<Batch>,
    /// The write of `batch` failed (the linked fsync is then cancelled).
    pub batch_error: Option<std::io::Error>,
    pub waiting: VecDeque<Durable>,
    /// While a compaction is due and waits for the log to drain: the writes that arrived
    /// meanwhile, in arrival order, run once the log is rotated (at most [`MAX_WRITES_AWAITING_ROTATION`]).
    /// Appending them would keep the log from ever draining under sustained writes.
    pub awaiting_rotation: Option<VecDeque<(ReplyTo, WriteReq)>>,
    pub faults: Faults,
    pub fsyncs_ok: u64,
}

impl Writes {
    pub fn new(
        log: LogWriter,
        log_fd: RawFd,
        memtable: HashMap<InlineKey, MemEntry, ahash::RandomState>,
        faults: Faults,
    ) -> Writes {
        Writes {
            memtable,
            in_flight_keys: HashSet::default(),
            queued: HashMap::default(),
            log,
            log_fd,
            batch: None,
            batch_error: None,
            waiting: VecDeque::with_capacity(WAITING_RESERVE),
            awaiting_rotation: None,
            faults,
            fsyncs_ok: 0,
        }
    }

    /// The generated ID behind `key`'s memtable entry (0: an alias, or not in the memtable).
    pub fn id_of(&self, key: &InlineKey) -> u64 {
        match self.memtable.get(key) {
            Some(MemEntry::Live { id, .. }) => *id,
            _ => 0,
        }
    }

    /// Makes `entry` the key's state unless the memtable holds a newer fleet version (a feed
    /// row and an API write of one key can become durable in either order). Single-node
    /// entries (version 0) always apply.
    pub fn apply_newest(&mut self, key: InlineKey, entry: MemEntry) {
        let v = entry.version();
        if v != 0 && self.memtable.get(&key).is_some_and(|e| e.version() >= v) {
            return;
        }
        self.memtable.insert(key, entry);
    }

    /// Whether nothing is appended, in flight or waiting: the log can be rotated.
    pub fn log_is_quiet(&self) -> bool {
        self.batch.is_none() && self.log.pending_bytes() == 0 && self.waiting.is_empty()
    }

    /// The live link for `key` in the memtable: `Some(Some)` live, `Some(None)` deleted,
    /// `None` not in the memtable (ask the table).
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<Option<&LinkInfo>> {
        if self.memtable.is_empty() {
            return None;
        }
        let k = InlineKey::new(key)?;
        self.memtable.get(&k).map(|e| match e {
            MemEntry::Live { info, .. } => Some(info),
            MemEntry::Deleted { .. } => None,
        })
    }
}
