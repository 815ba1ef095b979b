//! A core's view of the links it owns: the shard tables of its shards.
//!
//! Tables are opened (and validated) once. An answer built from a table carries a
//! [`TableText`] into the mapping, named by the table's shard and generation; a table replaced
//! by a compaction is returned by [`Store::set_table`] and kept until every core has retired
//! its generation (`Owner::poll_compaction`, `crate::base::target`).

use crate::base::target::{TableText, Target};
use crate::mesh::Answer;
use shards::table::{SlotHint, Table};

/// A shard's table and its generation (bumped by each replacement).
struct Slot {
    table: Table,
    gen: u32,
}

/// The shards one core owns, indexed by virtual shard id (`None` for shards it does not own or
/// that have no table yet).
pub struct Store {
    tables: Vec<Option<Slot>>,
}

impl Store {
    /// Links and bytes in this core's tables (for `/metrics`).
    pub fn totals(&self) -> (u64, u64) {
        self.tables.iter().flatten().fold((0, 0), |(n, b), s| {
            (n + s.table.len(), b + s.table.file_bytes())
        })
    }

    /// `tables[s]` is shard `s`'s table if this core owns `s` and it has one.
    pub fn new(tables: Vec<Option<Table>>) -> Store {
        let tables = tables
            .into_iter()
            .map(|t| t.map(|table| Slot { table, gen: 1 }))
            .collect();
        Store { tables }
    }

    /// Replaces shard `shard`'s table (after a compaction) and returns the old one with its
    /// generation, which the caller keeps until every core has retired that generation.
    pub fn set_table(&mut self, shard: u32, table: Table) -> Option<(Table, u32)> {
        let slot = &mut self.tables[shard as usize];
        let gen = slot.as_ref().map_or(1, |s| s.gen + 1);
        slot.replace(Slot { table, gen })
            .map(|old| (old.table, old.gen))
    }

    /// Shard `shard`'s table, if this core owns one.
    pub fn table_of(&self, shard: u32) -> Option<&Table> {
        self.table(shard).map(|s| &s.table)
    }

    #[inline]
    fn table(&self, shard: u32) -> Option<&Slot> {
        self.tables.get(shard as usize)?.as_ref()
    }

    /// Starts loading `key`'s index slot (see `Table::prefetch_slot`); returns the hint for
    /// [`Store::prefetch_record`].
    #[inline]
    pub fn prefetch_slot(&self, shard: u32, key: &[u8]) -> Option<SlotHint> {
        Some(self.table(shard)?.table.prefetch_slot(key))
    }

    /// Starts loading the record of the key `hint` came from (see `Table::prefetch_record`).
    #[inline]
    pub fn prefetch_record(&self, shard: u32, hint: SlotHint) {
        if let Some(s) = self.table(shard) {
            s.table.prefetch_record(hint);
        }
    }

    /// The table's record for `key` in `shard` (live or expired).
    #[inline]
    pub fn get_ref(&self, shard: u32, key: &[u8]) -> Option<shards::table::LinkRef<'_>> {
        self.table(shard)?.table.get(key)
    }

    /// The live link for `key` in `shard`, if any. No allocation.
    #[inline]
    pub fn get(&self, shard: u32, key: &[u8], now_s: u64) -> Option<Answer> {
        let s = self.table(shard)?;
        let link = s.table.get(key)?;
        let rules = match link.rules.is_empty() {
            true => None,
            false => {
                // The program lies a few bytes past the target, in the same record.
                let end = link.target.as_ptr() as usize + link.target.len();
                let at = link.rules.bytes().as_ptr() as usize - end;
                let at = u8::try_from(at).expect("author and behaviour blocks are short");
                Some(crate::base::target::RulesText::Table { at })
            }
        };
        let answer = Answer::new(
            Target::Table(TableText::new(&s.table, link.target, shard, s.gen)),
            link.status,
            link.expires_at_s,
            (&link.behaviour, rules),
        );
        (!answer.expired(now_s)).then_some(answer)
    }
}
