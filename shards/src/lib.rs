//! ricochet's storage engine: what a link is, where it lives (virtual shards), shard tables,
//! append logs, recovery and compaction. No networking and no glommio types in this API.

pub mod alloc;
pub mod keygen;
pub mod link;
pub mod log;
pub mod placement;
