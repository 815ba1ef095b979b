//! An in-memory authority: for tests and tools whose IDs need not survive the process.

use super::{carve, Authority, AuthorityError, IdRange, FIRST_ID};

/// Allocates from a counter in memory. Not durable: never use it for a real data dir.
#[derive(Debug, Clone)]
pub struct MemoryAuthority {
    high_water: u64,
}

impl MemoryAuthority {
    /// Starts allocating at `high_water` (raised to [`FIRST_ID`] if lower).
    pub fn new(high_water: u64) -> MemoryAuthority {
        MemoryAuthority {
            high_water: high_water.max(FIRST_ID),
        }
    }
}

impl Authority for MemoryAuthority {
    fn allocate(&mut self, len: u64) -> Result<IdRange, AuthorityError> {
        let r = carve(self.high_water, len)?;
        self.high_water = r.end;
        Ok(r)
    }

    fn high_water(&self) -> u64 {
        self.high_water
    }
}
