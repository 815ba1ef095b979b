//! ricochet: a thread-per-core URL shortener and redirect server.
//!
//! See ARCHITECTURE.md for the data path and the codemap.

// The modules in layers, lowest first (`tests/import_graph.rs` names them and fails when a
// lower one imports a higher one), and in the order a request meets them: accept -> parse ->
// route -> owner -> table/log -> answer; click -> aggregator -> stats; fleet write ->
// database -> feed -> other nodes.

pub mod base; // vocabulary: keys, targets, the LRU, clocks, CPU sets
pub mod http; // HTTP/1.1 parse and encode, pure
pub mod route; // a request's handler, from its method and path
pub mod api; // the API's pure half: requests, problems, keys, idempotency records, limits
pub mod mesh; // which core owns a key, the messages between cores, service outlets
pub mod metrics; // per-core counters; `metrics::encode` renders /metrics
pub mod net; // bytes in and out: listeners, the ring, connections
pub mod api_front; // the API's front end on the connection's core
pub mod flights; // idempotent creates on their scope's owner
pub mod owner; // a key's owner: tables, memtable, log, compaction, invalidation
pub mod analytics; // clicks: combiner -> aggregator -> click store -> stats
pub mod fleet_mode; // fleet mode's node side: bootstrap, feed follower, regeneration
pub mod node; // start-up, the single-or-fleet seam, recovery, probes, each core's loop
