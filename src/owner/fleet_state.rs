//! Fleet mode's state on an owner core ([`FleetLinks`]): writes at the database, reads through
//! to it, feed batches being applied, versions not yet confirmed by the feed. The owner's
//! methods that use it are in `fleet.rs`.

use crate::base::key::InlineKey;
use crate::fleet_mode::messages::FeedAck;
use crate::mesh::{ReplyTo, WriteReq};
use fleet::ceiling::Ceilings;
use fleet::links::{ReaderHandle, WriterHandle};
use shards::keygen::KeyGen;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// The floor of a key whose write was at the database when a regeneration swapped the node's
/// tables: the new generation holds the key as a snapshot saw it, at a version the node does
/// not know. The answer is then not applied; the feed, which resumes from before the
/// snapshot, brings the key's newest state.
pub const SUPERSEDED_BY_REGENERATION: u64 = u64::MAX;

/// Lookups one key may have waiting for the database; more answer 503 at once.
pub const MAX_READ_WAITERS_PER_KEY: usize = 1024;

/// Keys one core may have waiting for the database at once; more answer 503 at once.
pub const MAX_READS_IN_FLIGHT: usize = 8192;

/// Who waits for a read-through: a redirect lookup, or an API read of the link (`GET
/// /api/v1/urls/{key}`, or the stats API's existence check, for which an expired link still
/// exists).
#[derive(Clone, Copy, Debug)]
pub enum ReadWaiter {
    /// A redirect lookup; `true`: a GET (a visit, counted if the link has a limit).
    Redirect(ReplyTo, bool),
    /// An API read, within an API key's reach (`api::roles`).
    Get(ReplyTo, crate::api::roles::AuthorReach),
    StatsOf(ReplyTo, crate::api::roles::AuthorReach),
}

/// Lookups of one key waiting for the database (single-flight). `asked` were waiting when its
/// query was queued; `later` came after, and a "not found" from that query is not theirs to
/// share: the link may have been created in between (a 201 they saw).
pub(super) struct ReadFlight {
    pub(super) asked: Vec<ReadWaiter>,
    pub(super) later: Vec<ReadWaiter>,
}

/// A row the database gave a read-through, or that it could not answer.
pub(super) type ReadRow = Result<Option<(fleet::links::LinkState, bool)>, ()>;

/// One core's fleet state.
pub struct FleetLinks {
    pub(super) writer: WriterHandle,
    pub(super) reader: ReaderHandle,
    pub(super) reads: HashMap<InlineKey, ReadFlight, ahash::RandomState>,
    /// Writes sent to the database, by token.
    pub(super) pending: HashMap<u64, (ReplyTo, WriteReq)>,
    /// Visits of limited links sent to the database to be counted, by token: the lookup to
    /// answer with the redirect once counted (`owner/visits.rs`).
    pub(super) visits: HashMap<u64, (ReplyTo, InlineKey, crate::mesh::Answer)>,
    pub(super) next_token: u64,
    pub(super) acks: crossbeam::channel::Sender<FeedAck>,
    /// Feed batches being applied: rows left, and whether one failed.
    pub(super) batches: HashMap<u64, (usize, bool)>,
    /// Keys whose API write this node committed at the version given and the feed has not
    /// delivered yet: their memtable entry is not folded away (see the module doc).
    pub unconfirmed: HashMap<InlineKey, u64, ahash::RandomState>,
    /// Keys with a write at the database: the newest version this core applied for each since
    /// it was sent ([`SUPERSEDED_BY_REGENERATION`] after a regeneration's swap). An answer
    /// not above it is older than what the node already holds, whether or not that state is
    /// still in the memtable (a compaction or a swap may have folded a tombstone away), and is
    /// not applied (issue #24, hole 3).
    pub(super) floors: HashMap<InlineKey, u64, ahash::RandomState>,
    /// The namespaces' ceilings as last read (`fleet_mode::follower`), and what decodes a generated
    /// key to its ID: a miss whose ID is above every ceiling of a fresh read is answered 404
    /// without a query ([`Owner::read_through`]).
    pub(super) ceilings: Option<Arc<Ceilings>>,
    pub(super) keygen: Arc<KeyGen>,
    pub(super) stats: Arc<fleet::FleetStats>,
}

impl FleetLinks {
    pub fn new(
        writer: WriterHandle,
        reader: ReaderHandle,
        acks: crossbeam::channel::Sender<FeedAck>,
        keygen: Arc<KeyGen>,
        stats: Arc<fleet::FleetStats>,
    ) -> FleetLinks {
        FleetLinks {
            writer,
            reader,
            reads: HashMap::default(),
            pending: HashMap::new(),
            visits: HashMap::new(),
            next_token: 0,
            acks,
            batches: HashMap::new(),
            unconfirmed: HashMap::default(),
            floors: HashMap::default(),
            ceilings: None,
            keygen,
            stats,
        }
    }

    /// A new read of the namespaces' ceilings.
    pub fn on_ceilings(&mut self, c: Arc<Ceilings>) {
        self.ceilings = Some(c);
    }

    /// Whether `key` is a generated key that cannot have been issued yet: its ID is above
    /// every namespace's ceiling in a read sent less than `HIGH_WATER_FRESH_MS` ago. Fleet
    /// nodes refuse custom aliases of the generated shape, so such a key has no link. IDs are
    /// the fleet's whatever the domain: a stored key's domain prefix does not count.
    pub(super) fn never_issued(&self, key: &InlineKey, now: Instant) -> bool {
        let Some(c) = self.ceilings.as_deref().filter(|c| c.is_fresh(now)) else {
            return false;
        };
        self.keygen
            .id_for(shards::link::split_stored_key(key.as_bytes()).1)
            .is_some_and(|id| !c.may_be_issued(id))
    }
}

/// Where an owner's changes are judged, and what a key it does not hold means: the one thing
/// fleet mode changes on a core, chosen once at start (`Owner::set_fleet`).
pub enum Judge {
    /// A single node: this core judges every change (its tables and memtable are the truth),
    /// and a key it does not hold does not exist.
    Local,
    /// A fleet node: the fleet database judges every change, and a key this node does not hold
    /// (yet) is asked of it.
    Fleet(Box<FleetLinks>),
}

impl Judge {
    /// Fleet mode's state, if this is a fleet node.
    pub fn fleet(&self) -> Option<&FleetLinks> {
        match self {
            Judge::Local => None,
            Judge::Fleet(f) => Some(f),
        }
    }

    /// Fleet mode's state, if this is a fleet node.
    pub fn fleet_mut(&mut self) -> Option<&mut FleetLinks> {
        match self {
            Judge::Local => None,
            Judge::Fleet(f) => Some(f),
        }
    }

    /// Whether a key this core does not hold is asked of the database (else it is a 404).
    #[inline]
    pub fn reads_through(&self) -> bool {
        matches!(self, Judge::Fleet(_))
    }
}
