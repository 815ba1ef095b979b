//! ricochet: a thread-per-core URL shortener and redirect server.
//!
//! See ARCHITECTURE.md for the data path and the codemap.

// The modules in layers, lowest first (`tests/import_graph.rs` names them and fails when a
// lower one imports a higher one). Within a layer, in the order a request meets them:
// accept -> parse -> route -> owner -> table/log -> answer; click -> aggregator -> stats;
// fleet write -> database -> feed -> other nodes.

// Vocabulary and pure codecs: no role, no socket.
pub mod http; // HTTP/1.1 parse and encode, pure
pub mod key; // a key inline, no allocation
pub mod target; // a link's target, read from the tables
pub mod cache; // the fixed-size LRU of foreign keys' answers
pub mod clock; // the core's clock and Date header
pub mod idle; // a core's idle share per sweep
pub mod damped; // readiness verdicts with hysteresis
pub mod cpus; // CPU sets and pinning
pub mod test_faults; // test-only fault switches

// The API's pure half and the routing that owns the server's paths.
pub mod route; // a request's handler, from its method and path
pub mod api; // API requests, problems, keys, idempotency records, rate limits, OpenAPI

// The cores' machinery: which core owns a key, the messages between cores, counters.
pub mod router; // the one function that decides a key's core
pub mod mesh; // bounded queues between cores and the messages on them
pub mod service; // service threads' bounded outlets into the cores
pub mod metrics; // per-core counters; `metrics::encode` renders /metrics (a role's layer)

// The roles, in data-path order.
pub mod listener; // SO_REUSEPORT listeners
pub mod ring; // the io_uring ring and its provided buffers
pub mod conns; // connections: bytes in, parse, answer or defer, bytes out
pub mod api_front; // the API's front end on the connection's core
pub mod flights; // idempotent creates on their scope's owner
pub mod owner; // a key's owner: tables, memtable, log, compaction, invalidation
pub mod recovery; // start-up log replay
pub mod analytics; // clicks: combiner -> aggregator -> click store -> stats
pub mod fleet_mode; // fleet mode's node side: bootstrap, feed follower, regeneration
pub mod probes; // /livez, /healthz, /readyz
pub mod keywatch; // the API key file watcher
pub mod shared; // what every core reads: readiness, draining, counters

// The loop, then start-up.
pub mod core_loop; // one core's loop: completions and messages dispatched to the roles
pub mod mode; // single node or fleet node: the one seam, chosen once at start
pub mod server; // start-up in order, executors, signals, join
