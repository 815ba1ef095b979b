//! ricochet's storage engine: what a link is, where it lives (virtual shards), shard tables,
//! append logs, recovery and compaction. No networking and no glommio types in this API.

pub mod alloc;
pub mod behaviour;
pub mod clicks;
pub mod compact;
pub mod datadir;
pub mod durable;
pub mod error;
pub mod export;
pub mod import;
pub mod keygen;
pub mod labels;
pub mod link;
pub mod log;
pub mod manifest;
pub mod placement;
pub mod rules;
pub mod table;
pub mod timefmt;

pub use datadir::{DataDir, DirLock};
pub use error::Error;
