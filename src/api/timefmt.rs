//! RFC 3339 times: the one implementation lives in the storage engine (`shards::timefmt`),
//! which import and export need too.

pub use shards::timefmt::*;
