//! The node around the roles: start-up in order (`server`), the single-or-fleet seam
//! (`mode`), recovery of the data dir, what every core shares, the probes, the key watcher,
//! and each core's loop.

pub mod mode; // single node or fleet node: the one seam, chosen once at start
pub mod recovery; // start-up log replay and table opening
pub mod shared; // what every core reads: readiness, draining, counters
pub mod probes; // /livez, /healthz, /readyz
pub mod keywatch; // the API key file watcher
pub mod core_loop; // one core's loop: completions and messages dispatched to the roles
pub mod server; // start-up in order, executors, signals, join
