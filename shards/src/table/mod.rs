//! Immutable shard table files: a 64-byte header followed by an rkyv payload holding an
//! open-addressed hash index and the link records. Written once (crash-safely), then mmapped
//! and read zero-copy. Layout: `header.rs`, `layout.rs`, and `docs/storage.md`.

mod header;
mod layout;
mod reader;
mod writer;

pub use header::{HEADER_BYTES, TABLE_FORMAT_VERSION, TABLE_MAGIC};
pub use layout::INDEX_LOAD_PERCENT;
pub use reader::{
    prefetch, Iter, LinkRef, SlotHint, Table, HUGE_PAGE_MIN_TABLE_BYTES, PREFETCH_PROBE_SLOTS,
};
pub use writer::{write_table, OwnedLink, TableStats, TABLE_WRITE_BUFFER_BYTES};

pub(crate) use writer::write_table_file;

impl From<(&str, LinkRef<'_>)> for OwnedLink {
    fn from((key, l): (&str, LinkRef<'_>)) -> OwnedLink {
        OwnedLink {
            key: key.to_owned(),
            target: l.target.to_owned(),
            status: l.status,
            expires_at_s: l.expires_at_s,
            created_at_s: l.created_at_s,
            flags: l.flags,
            author: l.author,
            behaviour: l.behaviour,
            rules: crate::rules::Rules::current(l.rules),
            labels: crate::labels::Labels::from_body(l.labels),
        }
    }
}
