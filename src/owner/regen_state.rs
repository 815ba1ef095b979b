//! Where an owner core is in a live regeneration ([`Regen`]); the owner's methods that step
//! through it are in `regen.rs`.

use super::writes::MemEntry;
use crate::base::key::InlineKey;
use shards::table::Table;
use std::collections::HashMap;

/// Where this core is in a regeneration.
pub enum Regen {
    /// Asked to rotate (feed batch `batch` is acknowledged once it has).
    Rotating { batch: u64 },
    /// Rotated: the memtable as it was then. No compaction starts until the swap.
    Rotated {
        snapshot: HashMap<InlineKey, MemEntry, ahash::RandomState>,
    },
    /// The new tables arrived; swapped in once the idempotency records re-logged at the
    /// rotation are durable (their previous home, `.folding`, goes at the swap).
    Swapping {
        batch: u64,
        snapshot: HashMap<InlineKey, MemEntry, ahash::RandomState>,
        tables: Vec<(u32, Table)>,
    },
}
