//! The key-owner role: the links of the shards this core owns and every change to them.
//!
//! [`Owner`] holds the shard tables ([`store::Store`]), the memtable and append log
//! ([`writes::Writes`]), the log batch in flight, compaction and the retirement of replaced
//! tables, and the LRU invalidations a PATCH or DELETE waits for. It answers lookups and API
//! requests that arrive as [`MeshMsg`]s (from other cores or from this one) and answers them
//! the same way, so its logic runs without sockets: messages in, log appends and messages out.
//!
//! - `write_path.rs`: conditional insert, patch, delete, read; durability; invalidation.
//! - `compaction.rs`: log rotation, the fold thread, table swap and retirement.
//! - `fold.rs`: the fold itself (runs on a compaction thread).
//! - `fleet.rs`: fleet mode: writes judged by the fleet database, change feed rows applied.
//! - `regen.rs`: fleet mode: a new table generation from a database snapshot, swapped in live.

pub mod compaction;
pub mod fleet;
pub mod fold;
pub mod listing;
mod purge;
pub mod regen;
pub mod store;
mod write_path;
pub mod writes;

#[cfg(test)]
mod tests;

use crate::key::InlineKey;
use crate::mesh::{Answer, Doorbells, LinkInfo, Mesh, RedirectMsg, ReplyTo, Target};
use crate::router::Router;
use shards::table::Table;
use std::collections::HashMap;
use std::sync::Arc;
use store::Store;
use writes::Writes;

pub use compaction::{CompactionSetup, COMPACTION_RETRY_MS};

/// One core's owned links and their write path.
pub struct Owner {
    me: usize,
    router: Router,
    pub(crate) store: Store,
    pub(crate) writes: Writes,
    compaction: CompactionSetup,
    /// The running compaction's result, when it finishes.
    compacting: Option<crossbeam::channel::Receiver<fold::Compacted>>,
    /// No compaction is started before this (after a failed one).
    next_compaction_ms: u64,
    /// Tables replaced by a compaction, with the acks still due, until every core has
    /// retired them (`CacheMsg::RetireAck`).
    retiring: HashMap<u64, (usize, Vec<Table>)>,
    /// Idempotency records re-logged at the last rotation must be durable before the folded
    /// log (their previous home) is deleted.
    relog_seq: u64,
    /// PATCH/DELETE answers waiting for every other core's LRU invalidation ack.
    invalidations: HashMap<u64, purge::Invalidation>,
    /// Click analytics: this core's aggregator, the deletes waiting for their stats purge, and
    /// purges its full queue could not take yet (`purge.rs`).
    clicks: Option<crossbeam::channel::Sender<crate::analytics::Control>>,
    purging: HashMap<u64, purge::Waiter>,
    unsent_purges: std::collections::VecDeque<crate::analytics::Control>,
    /// Fleet mode: the link writer, writes waiting for the database, the feed's batches.
    fleet: Option<fleet::FleetLinks>,
    /// Fleet mode: where this core is in a live regeneration of its links (`regen.rs`).
    regen: Option<regen::Regen>,
    next_token: u64,
    /// Tags this owner's creations within their second (`shards::link::CREATION_TAG_MASK`).
    creations: shards::link::CreationTag,
    /// Rung by the compaction thread when its fold is done.
    doorbells: Arc<Doorbells>,
    /// What `/metrics` reports of this role (log, compaction); gauges filled by `tally`.
    counts: crate::metrics::OwnerTally,
    /// When the batch in flight was submitted, and when the running compaction started.
    batch_started: Option<std::time::Instant>,
    compaction_started: Option<std::time::Instant>,
}

impl Owner {
    pub fn new(
        me: usize,
        router: Router,
        store: Store,
        writes: Writes,
        compaction: CompactionSetup,
        doorbells: Arc<Doorbells>,
    ) -> Owner {
        Owner {
            me,
            router,
            store,
            writes,
            compaction,
            compacting: None,
            next_compaction_ms: 0,
            retiring: HashMap::new(),
            relog_seq: 0,
            invalidations: HashMap::new(),
            clicks: None,
            purging: HashMap::new(),
            unsent_purges: Default::default(),
            fleet: None,
            regen: None,
            next_token: 0,
            creations: shards::link::CreationTag::default(),
            doorbells,
            counts: Default::default(),
            batch_started: None,
            compaction_started: None,
        }
    }

    /// This role's counters, with the gauges read now (for `/metrics`, at each sweep).
    pub fn tally(&self) -> crate::metrics::OwnerTally {
        let (links, bytes) = self.store.totals();
        crate::metrics::OwnerTally {
            memtable_entries: self.writes.memtable.len() as u64,
            table_links: links,
            table_bytes: bytes,
            ..self.counts
        }
    }

    /// Whether a due compaction holds new log appends back (`compaction.rs`).
    pub fn log_is_held(&self) -> bool {
        self.writes.held.is_some()
    }

    /// The shard tables (for the connection role's prefetch hints).
    #[inline]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The live link for a key this core owns, as a redirect needs it: the memtable overrides
    /// the table. No allocation.
    #[inline]
    pub fn local_answer(&self, shard: u32, key: &[u8], now_s: u64) -> Option<Answer> {
        match self.writes.get(key) {
            None => self.store.get(shard, key, now_s),
            Some(None) => None,
            Some(Some(info)) => {
                let a = Answer {
                    target: Target::Shared(info.target.clone()),
                    status: info.status,
                    expires_at_s: info.expires_at_s,
                };
                (!a.expired(now_s)).then_some(a)
            }
        }
    }

    /// Another core (or this one, for a local miss in fleet mode) asks where `key` redirects.
    pub fn on_lookup(&mut self, reply: ReplyTo, key: InlineKey, now_s: u64, mesh: &mut Mesh) {
        let owner = self.router.owner(key.as_bytes());
        debug_assert_eq!(owner.core, self.me, "lookups go to the owner");
        let answer = self.local_answer(owner.shard, key.as_bytes(), now_s);
        if answer.is_none() && self.reads_through() {
            return self.read_through(fleet::ReadWaiter::Redirect(reply), key, now_s, mesh);
        }
        mesh.deliver(
            reply.core as usize,
            RedirectMsg::Answer { reply, key, answer },
        );
    }

    /// The link `key` as the API sees it, if live.
    fn link_info(&self, shard: u32, key: &InlineKey, now_s: u64) -> Option<LinkInfo> {
        if let Some(m) = self.writes.get(key.as_bytes()) {
            return m
                .filter(|i| i.expires_at_s == 0 || now_s < i.expires_at_s)
                .cloned();
        }
        let l = self.store.get_ref(shard, key.as_bytes())?;
        if l.expires_at_s != 0 && now_s >= l.expires_at_s {
            return None;
        }
        Some(LinkInfo {
            key: *key,
            target: Arc::from(l.target),
            status: l.status,
            created_at_s: l.created_at_s,
            created_tag: shards::link::creation_tag(l.flags),
            expires_at_s: l.expires_at_s,
        })
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }
}
