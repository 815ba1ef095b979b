//! The node side of fleet mode, in the order a node meets it: start and its checks (`node`),
//! fleet mode's files in the data dir (`files`), whether it can go on from where it is
//! (`continuity`), links from a database snapshot
//! (`bootstrap`), the change feed's follower thread (`follower`) and its live regeneration
//! (`regen`, with the `fleet-lost-*` files of `lost`), what the service threads hand the cores
//! (`messages`), the fleet's domain book (`domains`), its abuse blocklist (`blocklist`), and the operator commands (`cli`). The PostgreSQL client is the `fleet`
//! crate; a core's side of fleet mode is `owner/fleet.rs` and `owner/regen.rs`.

pub mod blocklist;
pub mod bootstrap;
pub mod cli;
pub mod continuity;
pub mod domains;
pub mod files;
pub mod follower;
pub mod lost;
pub mod messages;
pub mod node;
pub mod regen;
