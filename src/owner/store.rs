//! A core's view of the links it owns: the shard tables of its shards.
//!
//! Tables are opened (and validated) once and leaked to `'static`: they are immutable, so an
//! answer can carry a `&'static str` into the mapping across cores without reference
//! counting. A table replaced by a compaction is unmapped only after every other core has
//! cleared its LRU (the only place such a reference outlives the message that carried it); see
//! `Owner::poll_compaction` and `CacheMsg::PurgeLru`.

use crate::mesh::{Answer, Target};
use shards::table::{SlotHint, Table};

/// The shards one core owns, indexed by virtual shard id (`None` for shards it does not own or
/// that have no table yet).
pub struct Store {
    tables: Vec<Option<&'static Table>>,
}

impl Store {
    /// `tables[s]` is shard `s`'s table if this core owns `s` and it has one.
    pub fn new(tables: Vec<Option<&'static Table>>) -> Store {
        Store { tables }
    }

    /// Replaces shard `shard`'s table (after a compaction) and returns the old one, which the
    /// caller retires (see `Owner::poll_compaction`): other cores may still hold
    /// answers pointing into it until they have purged their LRUs.
    pub fn set_table(&mut self, shard: u32, table: &'static Table) -> Option<&'static Table> {
        self.tables[shard as usize].replace(table)
    }

    /// Starts loading `key`'s index slot (see `Table::prefetch_slot`); returns the hint for
    /// [`Store::prefetch_record`].
    #[inline]
    pub fn prefetch_slot(&self, shard: u32, key: &[u8]) -> Option<SlotHint> {
        Some(
            self.tables
                .get(shard as usize)?
                .as_ref()?
                .prefetch_slot(key),
        )
    }

    /// Starts loading the record of the key `hint` came from (see `Table::prefetch_record`).
    #[inline]
    pub fn prefetch_record(&self, shard: u32, hint: SlotHint) {
        if let Some(Some(t)) = self.tables.get(shard as usize) {
            t.prefetch_record(hint);
        }
    }

    /// The table's record for `key` in `shard` (live or expired).
    #[inline]
    pub fn get_ref(&self, shard: u32, key: &[u8]) -> Option<shards::table::LinkRef<'static>> {
        self.tables.get(shard as usize)?.as_ref()?.get(key)
    }

    /// The live link for `key` in `shard`, if any. No allocation.
    #[inline]
    pub fn get(&self, shard: u32, key: &[u8], now_s: u64) -> Option<Answer> {
        let table = self.tables.get(shard as usize)?.as_ref()?;
        let link = table.get(key)?;
        let answer = Answer {
            target: Target::Static(link.target),
            status: link.status,
            expires_at_s: link.expires_at_s,
        };
        (!answer.expired(now_s)).then_some(answer)
    }
}
