//! A link's target as answers carry it, and the check that makes reading one safe.
//!
//! An answer built from a shard table points into that table's mapping ([`TableText`]): no
//! copy, no reference count, so a forwarded lookup allocates nothing. Tables are replaced by
//! compaction and their mappings freed, while answers pointing into them may still sit in other
//! cores' LRUs or in mesh queues. So a [`TableText`] names its table (shard and generation) and
//! can only be read through [`Target::resolve`], which checks the reading core's
//! [`TableView`]: the oldest generation of each shard this core may still read.
//!
//! The protocol that makes the check sufficient (`owner/compaction.rs`): after a swap, the
//! owner sends `CacheMsg::RetireTables` to every core, itself included; each core raises its
//! view past the retired generations, then acknowledges; the owner frees the old tables only
//! after the last ack. `resolve` borrows the view, and the view changes only through `&mut`
//! on its own core, so while a resolved `&[u8]` lives, this core has not acknowledged, and the
//! table is mapped. A stale answer resolves to `None` and is treated as a cache miss.

use shards::table::Table;
use std::sync::Arc;

/// Bytes inside a shard table's mapping, with the table's identity. 16 bytes, as the
/// `&'static str` it replaced: a target is at most `MAX_URL_BYTES` and a shard id below
/// `MAX_SHARD_COUNT`, both `u16`s, so mesh messages keep their size.
#[derive(Clone, Copy)]
pub struct TableText {
    ptr: *const u8,
    len: u16,
    shard: u16,
    gen: u32,
}

const _: () = assert!(shards::link::MAX_URL_BYTES <= u16::MAX as usize);
const _: () = assert!(shards::placement::MAX_SHARD_COUNT <= u16::MAX as u32 + 1);
const _: () = assert!(std::mem::size_of::<TableText>() == 16);

// SAFETY: a `TableText` is an address and identity, read only through `Target::resolve`,
// whose check (see the module doc) holds on whichever core reads it: the table's bytes are
// immutable and shared by every core.
unsafe impl Send for TableText {}
// SAFETY: as above; `&TableText` gives no access beyond `resolve`.
unsafe impl Sync for TableText {}

impl TableText {
    /// Text of `table`, which the store holds as generation `gen` of `shard`. `text` must lie
    /// inside `table`'s mapping (checked in debug builds).
    pub fn new(table: &Table, text: &str, shard: u32, gen: u32) -> TableText {
        debug_assert!(table.contains(text.as_bytes()), "text outside the table");
        TableText {
            ptr: text.as_ptr(),
            len: u16::try_from(text.len()).expect("tables hold targets of at most MAX_URL_BYTES"),
            shard: shard as u16,
            gen,
        }
    }

    /// Its bytes, or `None` if its table is retired in `view`.
    #[inline]
    fn resolve<'a>(&'a self, view: &'a TableView) -> Option<&'a [u8]> {
        if self.gen < view.min_live(u32::from(self.shard)) {
            return None;
        }
        // SAFETY: `self` was made by `TableText::new` from text inside generation
        // `self.gen` of shard `self.shard`'s table. That table is freed only after this core
        // raised its view past `self.gen` (module doc), which it has not: the check above
        // passed, and `view` stays borrowed (unchangeable) for as long as the slice lives.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len as usize) })
    }

    /// The rules program of this target's record, which starts `at` bytes past the target's
    /// end (after the author and behaviour blocks), its length in the two bytes before it; or
    /// `None` if the table is retired in `view`.
    #[inline]
    pub fn rules_after<'a>(&'a self, view: &'a TableView, at: u8) -> Option<&'a [u8]> {
        self.resolve(view)?;
        let start = self.len as usize + at as usize;
        debug_assert!(at >= 2, "a rules program follows its length");
        // SAFETY: the table is mapped (checked above, as in `resolve`), and `at` was taken
        // by `Store::get` from the record's own parse (`shards::table` checked the block lies
        // inside the records: two length bytes, then the program) in this same mapping.
        unsafe {
            let p = self.ptr.add(start);
            let len = u16::from_le_bytes([*p.sub(2), *p.sub(1)]);
            Some(std::slice::from_raw_parts(p, len as usize))
        }
    }
}

/// Where an answer's redirect rules (`shards::rules`) are: after its target in the same table
/// record (`at` bytes past the target's end), or in a shared buffer (a thin pointer, so an
/// answer stays small).
#[derive(Clone, Debug)]
pub enum RulesText {
    Table { at: u8 },
    Shared(Arc<Vec<u8>>),
}

impl RulesText {
    /// The rules of a link in memory (`None`: it has none).
    pub fn of(rules: &shards::rules::Rules) -> Option<RulesText> {
        rules.shared().map(|p| RulesText::Shared(p.clone()))
    }
}

impl std::fmt::Debug for TableText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TableText(shard {} gen {}, {} bytes)",
            self.shard, self.gen, self.len
        )
    }
}

/// A link's target as an answer carries it.
#[derive(Clone, Debug)]
pub enum Target {
    /// Inside an immutable shard table (links from import or compaction).
    Table(TableText),
    /// A shared string (links written through the API since the last compaction).
    Shared(Arc<str>),
}

impl Target {
    /// The target's bytes, or `None` if it points into a table this core may no longer read
    /// (replaced by a compaction): the answer is stale, ask the owner again.
    #[inline]
    pub fn resolve<'a>(&'a self, view: &'a TableView) -> Option<&'a [u8]> {
        match self {
            Target::Shared(s) => Some(s.as_bytes()),
            Target::Table(t) => t.resolve(view),
        }
    }
}

/// Which table generations one core may still read: per shard, the oldest live one.
#[derive(Debug)]
pub struct TableView {
    min_live: Vec<u32>,
}

impl TableView {
    /// A view of `shards` shards where every generation is live.
    pub fn new(shards: u32) -> TableView {
        TableView {
            min_live: vec![0; shards as usize],
        }
    }

    /// The oldest generation of `shard` still readable.
    #[inline]
    pub fn min_live(&self, shard: u32) -> u32 {
        self.min_live
            .get(shard as usize)
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// Generations of `shard` up to and including `gen` are retired: nothing here reads them
    /// again.
    pub fn retire(&mut self, shard: u32, gen: u32) {
        if let Some(m) = self.min_live.get_mut(shard as usize) {
            *m = (*m).max(gen.saturating_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shards::link::RedirectStatus;
    use shards::table::{write_table, OwnedLink};

    #[test]
    fn table_text_resolves_until_its_generation_is_retired() {
        let dir = tempfile::tempdir().unwrap();
        let shard = shards::placement::shard_of(b"k", 8);
        let path = dir.path().join("t.tbl");
        let link = OwnedLink {
            key: "k".into(),
            target: "https://example.com/t".into(),
            status: RedirectStatus::Found,
            expires_at_s: 0,
            created_at_s: 1,
            flags: 0,
            author: shards::link::Author::NONE,
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
        };
        write_table(&path, shard, 8, 0, [link]).unwrap();
        let table = Table::open(&path).unwrap();
        let text = table.get(b"k").unwrap().target;
        let t = Target::Table(TableText::new(&table, text, shard, 5));
        let mut view = TableView::new(8);
        assert_eq!(t.resolve(&view), Some(&b"https://example.com/t"[..]));
        view.retire(shard, 4); // an older generation: still readable
        assert!(t.resolve(&view).is_some());
        view.retire((shard + 1) % 8, 9); // another shard
        assert!(t.resolve(&view).is_some());
        view.retire(shard, 5);
        assert_eq!(t.resolve(&view), None, "retired: never read again");
        view.retire(shard, 1); // retirement never goes back
        assert_eq!(t.resolve(&view), None);
        let shared = Target::Shared(Arc::from("https://s.example/"));
        assert_eq!(shared.resolve(&view), Some(&b"https://s.example/"[..]));
    }
}
