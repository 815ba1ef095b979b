//! Vocabulary and small machines every layer uses: no role, no socket, no service thread.

pub mod key; // a key inline, no allocation
pub mod hosts; // the declared domains, looked up by Host (issue 26: not on the data path yet)
pub mod target; // a link's target, read from the tables
pub mod cache; // the fixed-size LRU of foreign keys' answers
pub mod clock; // the core's clock and Date header
pub mod idle; // a core's idle share per sweep
pub mod damped; // readiness verdicts with hysteresis
pub mod cpus; // CPU sets and pinning
pub mod test_faults; // test-only fault switches
