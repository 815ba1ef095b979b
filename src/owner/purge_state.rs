//! What an invalidation on an owner core waits with ([`Invalidation`], [`Waiter`]); the
//! owner's methods that run it are in `purge.rs`.

use crate::base::key::InlineKey;
use crate::mesh::{ReplyTo, WriteOutcome};

/// Who waits for an invalidation (and its purge): an API answer, or a change feed row.
pub enum Waiter {
    Api(ReplyTo, WriteOutcome),
    /// Fleet mode: a row of feed batch `batch` (`fleet.rs`).
    Feed(u64),
}

/// An answer waiting for invalidation acks.
pub struct Invalidation {
    pub(super) left: usize,
    pub(super) waiter: Waiter,
    /// For a purge: the key and each core's last click message before it.
    pub(super) purge: Option<(InlineKey, Vec<u64>)>,
}
