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
//! - `purge.rs`: the invalidations (and click purges) a PATCH or DELETE waits for.
//! - `fleet_state.rs`, `purge_state.rs`, `regen_state.rs`: the state `Owner` holds for those
//!   roles, in files of their own so that nothing the owner holds imports the owner back.

pub mod compaction;
pub mod fleet;
pub mod fleet_state;
pub mod fold;
pub mod listing;
mod purge;
mod purge_state;
pub mod regen;
mod regen_state;
pub mod store;
mod visits;
mod write_path;
pub mod writes;

use crate::base::key::InlineKey;
use crate::base::target::RulesText;
use crate::mesh::router::Router;
use crate::mesh::{Answer, Doorbells, LinkInfo, Mesh, RedirectMsg, ReplyTo, Target};
use shards::table::Table;
use std::collections::HashMap;
use std::sync::Arc;
use store::Store;
use writes::Writes;

pub use compaction::{CompactionSetup, COMPACTION_RETRY_MS};
pub use listing::Page;

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
    invalidations: HashMap<u64, purge_state::Invalidation>,
    /// Click analytics: this core's aggregator, the deletes waiting for their stats purge, and
    /// purges its full queue could not take yet (`purge.rs`).
    clicks: Option<crate::analytics::ControlTx>,
    purging: HashMap<u64, purge_state::Waiter>,
    unsent_purges: std::collections::VecDeque<crate::analytics::Control>,
    /// Fleet mode: the link writer, writes waiting for the database, the feed's batches.
    judge: fleet_state::Judge,
    /// Fleet mode: where this core is in a live regeneration of its links (`regen.rs`).
    regen: Option<regen_state::Regen>,
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
            judge: fleet_state::Judge::Local,
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
        self.writes.awaiting_rotation.is_some()
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
                let a = Answer::new(
                    Target::Shared(info.target.clone()),
                    info.status,
                    info.expires_at_s,
                    (&info.behaviour, RulesText::of(&info.rules)),
                );
                (!a.expired(now_s)).then_some(a)
            }
        }
    }

    /// Another core (or this one, for a local miss in fleet mode) asks where `key` redirects.
    pub fn on_lookup(
        &mut self,
        reply: ReplyTo,
        (key, visit): (InlineKey, bool),
        now_s: u64,
        mesh: &mut Mesh,
    ) {
        let owner = self.router.owner(key.as_bytes());
        debug_assert_eq!(owner.core, self.me, "lookups go to the owner");
        let answer = self.local_answer(owner.shard, key.as_bytes(), now_s);
        if answer.as_ref().is_some_and(Answer::limited) {
            return self.on_limited_lookup(reply, (owner.shard, key, visit), now_s, mesh);
        }
        if answer.is_none() && self.reads_through() {
            let waiter = fleet_state::ReadWaiter::Redirect(reply, visit);
            return self.read_through(waiter, key, now_s, mesh);
        }
        mesh.deliver(reply.core(), RedirectMsg::Answer { reply, key, answer });
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
        Some(LinkInfo::from_table(*key, &l))
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }
}

#[cfg(test)]
mod tests {
    //! The owner without sockets: random writes and reads in as messages, against a `HashMap`
    //! model; answers and invalidations out as messages, and the log's bytes recovered at the end
    //! to the same state. The test plays the ring (it completes each log batch) and a second core
    //! (it asks, and acknowledges invalidations).

    use super::*;
    use crate::api::request::ExpiryUpdate;
    use crate::mesh::WriteOutcome;
    use crate::mesh::{
        ApiMsg, CacheMsg, Doorbells, MeshMsg, MeshQueues, OwnerAsk, ReadReq, WriteReq,
    };
    use crate::owner::writes::{Faults, Writes};
    use ::fleet::links as fleet_links;
    use proptest::prelude::*;
    use shards::link::RedirectStatus;
    use shards::log::{LogOp, LogWriter};
    use std::collections::HashMap as Model;

    const OWNER: usize = 0;
    const ASKER: usize = 1;
    const SHARDS: u32 = 16;

    #[derive(Clone, Debug)]
    /// Each API step is sent by one of three keys (`Who`): 0 is admin, 1 and 2 are
    /// author-only (`api::roles`), so a step may meet another author's link.
    enum Step {
        Create(usize, u32, Who),
        Patch(usize, u32, Who),
        Delete(usize, Who),
        Get(usize, Who),
        /// Write and sync the pending batch (what the ring does), if none is in flight.
        Sync,
    }

    type Who = u8;

    /// A model link: its target and who made it.
    type Linked = (String, Who);

    /// An admin's new link to `url(v)`.
    fn new_link(v: u32) -> Box<crate::mesh::NewLink> {
        Box::new(crate::mesh::NewLink {
            target: Arc::from(url(v).as_str()),
            status: RedirectStatus::Found,
            expires_at_s: 0,
            created_at_s: 1,
            id: 0,
            idem: None,
            author: author(0),
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
        })
    }

    /// The author key `who`'s creates record.
    fn author(who: Who) -> shards::link::Author {
        shards::link::Author::from_id(&format!("a{who}")).unwrap()
    }

    /// What key `who` reaches: admin (0) any link, the others only their own.
    fn reach(who: Who) -> crate::api::roles::AuthorReach {
        match who {
            0 => crate::api::roles::AuthorReach::ANY,
            w => crate::api::roles::AuthorReach::only(author(w)),
        }
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..5usize, any::<u32>(), 0..3u8).prop_map(|(k, v, w)| Step::Create(k, v, w)),
            (0..5usize, any::<u32>(), 0..3u8).prop_map(|(k, v, w)| Step::Patch(k, v, w)),
            (0..5usize, 0..3u8).prop_map(|(k, w)| Step::Delete(k, w)),
            (0..5usize, 0..3u8).prop_map(|(k, w)| Step::Get(k, w)),
            Just(Step::Sync),
            Just(Step::Sync),
        ]
    }

    /// Keys the owner core owns, one per model slot.
    fn keys(router: &Router) -> Vec<InlineKey> {
        (0..)
            .map(|i| format!("key{i}"))
            .filter(|k| router.owner(k.as_bytes()).core == OWNER)
            .take(5)
            .map(|k| InlineKey::new(k.as_bytes()).unwrap())
            .collect()
    }

    fn url(v: u32) -> String {
        format!("https://m.example/{v}")
    }

    /// What the asker expects for one request.
    #[derive(Debug, PartialEq)]
    enum Want {
        Link(&'static str, String),
        Deleted,
        NotFound,
        Exists,
        /// Whatever the owner answers (a test that judges the end state instead).
        Any,
    }

    struct Rig {
        owner: Owner,
        mesh: Mesh,
        asker: Mesh,
        /// The log file's bytes, as the ring would have written them.
        file: Vec<u8>,
        /// Answers still due, by request seq, with the key they are about.
        due: HashMap<u32, (InlineKey, Want)>,
        /// Keys whose invalidation the asker has seen and not yet matched to an answer.
        invalidated: Vec<InlineKey>,
        /// The asker was told to drop every cached answer (a regeneration's swap).
        forgot_all: bool,
        _dir: tempfile::TempDir,
    }

    impl Rig {
        fn new() -> Rig {
            Rig::compacting_at(usize::MAX)
        }

        /// A rig whose owner compacts at `entries`, with a real log file to rotate.
        fn compacting_at(entries: usize) -> Rig {
            Rig::in_dir(tempfile::tempdir().unwrap(), entries)
        }

        /// A rig on a real data dir (a manifest, so compactions can fold into its tables).
        fn in_data_dir() -> Rig {
            let dir = tempfile::tempdir().unwrap();
            shards::datadir::DataDir::create(dir.path(), SHARDS).unwrap();
            Rig::in_dir(dir, usize::MAX)
        }

        fn in_dir(dir: tempfile::TempDir, entries: usize) -> Rig {
            let router = Router::new(SHARDS, 2);
            let store = Store::new((0..SHARDS).map(|_| None).collect());
            let log_dir = dir.path().join(shards::log::LOG_DIR_NAME);
            std::fs::create_dir_all(&log_dir).unwrap();
            let file = std::fs::File::create(shards::log::wal_path(dir.path(), 0)).unwrap();
            let writes = Writes::new(
                LogWriter::new(0, 0, 1),
                std::os::fd::IntoRawFd::into_raw_fd(file),
                Default::default(),
                Faults::default(),
            );
            let compaction = CompactionSetup {
                data_dir: dir.path().to_path_buf(),
                entries,
                folding: false,
            };
            let bells = Arc::new(Doorbells::new(2).unwrap());
            let queues = Arc::new(MeshQueues::new(2));
            let owner = Owner::new(OWNER, router, store, writes, compaction, bells.clone());
            Rig {
                owner,
                mesh: Mesh::new(OWNER, queues.clone(), bells.clone()),
                asker: Mesh::new(ASKER, queues, bells),
                file: Vec::new(),
                due: HashMap::new(),
                invalidated: Vec::new(),
                forgot_all: false,
                _dir: dir,
            }
        }

        fn ask(&mut self, seq: u32, req: WriteReq, want: Want) {
            self.ask_owner(seq, req.key(), OwnerAsk::Write(req), want);
        }

        fn ask_owner(&mut self, seq: u32, key: InlineKey, ask: OwnerAsk, want: Want) {
            let reply = ReplyTo::request(ASKER as u16, 0, 0, seq);
            self.due.insert(seq, (key, want));
            self.asker.send(OWNER, ask.message(reply));
            self.pump();
        }

        /// Delivers messages both ways until both cores are quiet, checking every answer.
        fn pump(&mut self) {
            loop {
                let mut moved = false;
                self.mesh.begin_turn();
                while let Some(m) = self.mesh.pop() {
                    moved = true;
                    match m {
                        MeshMsg::Api(ApiMsg::Write { reply, req }) => {
                            self.owner.on_write(reply, req, 100, &mut self.mesh)
                        }
                        MeshMsg::Api(ApiMsg::Read { reply, req }) => {
                            self.owner.on_api_read(reply, req, 100, &mut self.mesh)
                        }
                        MeshMsg::Cache(CacheMsg::InvalidateAck {
                            token,
                            from,
                            clicks_seq,
                        }) => self
                            .owner
                            .on_invalidate_ack(token, from, clicks_seq, &mut self.mesh),
                        MeshMsg::Cache(CacheMsg::RetireTables { from, token, .. }) => self
                            .mesh
                            .deliver(from as usize, CacheMsg::RetireAck { token }),
                        MeshMsg::Cache(CacheMsg::RetireAck { token }) => {
                            self.owner.on_retire_ack(token)
                        }
                        other => panic!("the owner got {other:?}"),
                    }
                }
                self.asker.begin_turn();
                while let Some(m) = self.asker.pop() {
                    moved = true;
                    match m {
                        MeshMsg::Cache(CacheMsg::Invalidate { token, key, .. }) => {
                            self.invalidated.push(key);
                            let ack = CacheMsg::InvalidateAck {
                                token,
                                from: 1,
                                clicks_seq: 0,
                            };
                            self.asker.send(OWNER, ack);
                        }
                        MeshMsg::Api(ApiMsg::WriteDone { reply, outcome }) => {
                            self.check(reply.place().expect("a request").seq, outcome)
                        }
                        MeshMsg::Cache(CacheMsg::RetireTables {
                            from,
                            token,
                            forget_all,
                            ..
                        }) => {
                            self.forgot_all |= forget_all;
                            self.asker
                                .send(from as usize, CacheMsg::RetireAck { token });
                        }
                        other => panic!("the asker got {other:?}"),
                    }
                }
                if !moved {
                    return;
                }
            }
        }

        fn check(&mut self, seq: u32, outcome: WriteOutcome) {
            let (key, want) = self.due.remove(&seq).expect("one answer per request");
            if want == Want::Any {
                return;
            }
            let got = match outcome {
                WriteOutcome::Created(i) => Want::Link("created", i.target.to_string()),
                WriteOutcome::Updated(i) => Want::Link("updated", i.target.to_string()),
                WriteOutcome::Found(i) => Want::Link("found", i.target.to_string()),
                WriteOutcome::Deleted => Want::Deleted,
                WriteOutcome::NotFound => Want::NotFound,
                WriteOutcome::Exists => Want::Exists,
                other => panic!("request {seq}: unexpected {other:?}"),
            };
            let changed = matches!(got, Want::Link("updated", _) | Want::Deleted);
            assert_eq!(got, want, "request {seq} ({key:?})");
            if changed {
                // The asker's LRU was told to drop the key before it got this answer.
                let i = self.invalidated.iter().position(|k| *k == key);
                assert!(
                    i.is_some(),
                    "answer to {seq} before the invalidation of {key:?}"
                );
                self.invalidated.remove(i.unwrap());
            }
        }

        /// What the ring does with a batch: write it at its offset, then report write and sync.
        fn sync(&mut self) {
            if let Some(len) = self.start_batch() {
                self.complete_batch(len);
            }
        }

        /// Takes the pending batch and "writes" it; `None` if there was nothing to take.
        fn start_batch(&mut self) -> Option<usize> {
            let (_, batch) = self.owner.start_log_batch()?;
            let (at, len) = (batch.offset as usize, batch.bytes.len());
            if self.file.len() < at + len {
                self.file.resize(at + len, 0);
            }
            self.file[at..at + len].copy_from_slice(&batch.bytes);
            Some(len)
        }

        /// The batch's write and sync complete.
        fn complete_batch(&mut self, len: usize) {
            self.owner.on_log_write(len as i32);
            self.owner.on_log_sync(0, 100, &mut self.mesh);
            self.pump();
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "the model test's interpreter: one arm per step kind, each beside the oracle's own update, so a step and its model read together"
    )]
    fn run(steps: &[Step]) {
        let mut rig = Rig::new();
        let keys = keys(&Router::new(SHARDS, 2));
        // `logical`: the state every write is judged against (writes to one key apply in arrival
        // order); `applied`: what reads see (writes whose batch is durable).
        // Values: the link's target and its author.
        let mut logical: Model<usize, Linked> = Model::new();
        let mut applied: Model<usize, Linked> = Model::new();
        let mut pending: Vec<(u32, usize, Option<Linked>)> = Vec::new();
        let sees = |who: Who, link: Option<&Linked>| link.is_some_and(|l| who == 0 || l.1 == who);
        for (seq, s) in steps.iter().enumerate() {
            let seq = seq as u32;
            match s {
                Step::Sync => {
                    rig.sync();
                    // Answered writes are applied: fold them into what reads see.
                    pending.retain(|(seq, k, v)| {
                        if rig.due.contains_key(seq) {
                            return true;
                        }
                        match v {
                            Some(v) => applied.insert(*k, v.clone()),
                            None => applied.remove(k),
                        };
                        false
                    });
                    continue;
                }
                Step::Get(k, who) => {
                    let want = match applied.get(k).filter(|l| sees(*who, Some(l))) {
                        Some(u) => Want::Link("found", u.0.clone()),
                        None => Want::NotFound,
                    };
                    let get = OwnerAsk::Read(ReadReq::Get {
                        key: keys[*k],
                        reach: reach(*who),
                    });
                    rig.ask_owner(seq, keys[*k], get, want);
                    assert!(!rig.due.contains_key(&seq), "a read is answered at once");
                    continue;
                }
                Step::Create(k, v, who) => {
                    let new = crate::mesh::NewLink {
                        target: Arc::from(url(*v).as_str()),
                        status: RedirectStatus::Found,
                        expires_at_s: 0,
                        created_at_s: 1,
                        id: 0,
                        idem: None,
                        author: author(*who),
                        behaviour: shards::behaviour::Behaviour::NONE,
                        rules: shards::rules::Rules::NONE,
                        labels: shards::labels::Labels::NONE,
                    };
                    let req = WriteReq::Create {
                        key: keys[*k],
                        new: Box::new(new),
                    };
                    // The key space is shared: a key taken by another author is taken.
                    let want = if logical.contains_key(k) {
                        Want::Exists
                    } else {
                        logical.insert(*k, (url(*v), *who));
                        pending.push((seq, *k, Some((url(*v), *who))));
                        Want::Link("created", url(*v))
                    };
                    rig.ask(seq, req, want);
                }
                Step::Patch(k, v, who) => {
                    let req = WriteReq::Patch {
                        key: keys[*k],
                        target: Some(Arc::from(url(*v).as_str())),
                        expiry: ExpiryUpdate::Keep,
                        status: None,
                        reach: reach(*who),
                        behaviour: None,
                    };
                    let want = match logical.get(k).cloned() {
                        Some(l) if sees(*who, Some(&l)) => {
                            logical.insert(*k, (url(*v), l.1));
                            pending.push((seq, *k, Some((url(*v), l.1))));
                            Want::Link("updated", url(*v))
                        }
                        _ => Want::NotFound,
                    };
                    rig.ask(seq, req, want);
                }
                Step::Delete(k, who) => {
                    let want = if sees(*who, logical.get(k)) {
                        logical.remove(k);
                        pending.push((seq, *k, None));
                        Want::Deleted
                    } else {
                        Want::NotFound
                    };
                    let req = WriteReq::Delete {
                        key: keys[*k],
                        reach: reach(*who),
                    };
                    rig.ask(seq, req, want);
                }
            }
        }
        // Drain: every write becomes durable and is answered exactly once.
        for _ in 0..steps.len() + 1 {
            rig.sync();
        }
        assert!(rig.due.is_empty(), "unanswered: {:?}", rig.due.keys());
        assert!(
            rig.invalidated.is_empty(),
            "invalidations without an answer"
        );
        // The log holds exactly the model's final state.
        let path = rig._dir.path().join("wal-0.log");
        std::fs::write(&path, &rig.file).unwrap();
        let rec = shards::log::recover(&path, false).unwrap();
        let mut replayed: Model<String, (String, shards::link::Author)> = Model::new();
        for r in rec.records {
            match r.op {
                LogOp::Put(l) => drop(replayed.insert(l.key, (l.target, l.author))),
                LogOp::Delete { key } => drop(replayed.remove(&key)),
                other => panic!("unexpected record {other:?}"),
            }
        }
        let want: Model<String, (String, shards::link::Author)> = logical
            .into_iter()
            .map(|(k, (v, who))| (keys[k].as_str().to_string(), (v, author(who))))
            .collect();
        assert_eq!(replayed, want);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn owner_matches_a_hashmap_model(steps in prop::collection::vec(step(), 1..60)) {
            // At most MAX_QUEUED_WRITES_PER_KEY writes can queue behind one key between syncs;
            // 60 steps over 5 keys with syncs in between stay far below, except by chance.
            let mut since_sync = 0;
            let mut ok = true;
            for s in &steps {
                if matches!(s, Step::Sync) { since_sync = 0 } else { since_sync += 1 }
                ok &= since_sync <= crate::owner::writes::MAX_QUEUED_WRITES_PER_KEY;
            }
            prop_assume!(ok);
            run(&steps);
        }
    }

    #[test]
    fn writes_to_one_key_wait_for_the_one_in_flight_and_are_judged_after_it() {
        run(&[
            Step::Create(0, 1, 0),
            Step::Delete(0, 0),
            Step::Patch(0, 2, 0),
            Step::Create(0, 3, 0),
            Step::Get(0, 0),
            Step::Sync,
            Step::Get(0, 0),
        ]);
    }

    /// Under sustained writes the log is never quiet (a write arrives during every sync). The
    /// compaction must still start close to its trigger: writes are held while the log drains,
    /// then run after the rotation. Before the hold, it waited for a quiet log that never came.
    #[test]
    fn compaction_starts_at_its_trigger_under_sustained_writes() {
        const ENTRIES: usize = 40;
        let mut rig = Rig::compacting_at(ENTRIES);
        let idem = crate::api::idempotency::IdemTable::new(16, 3600);
        let router = Router::new(SHARDS, 2);
        let mut owned = (0..)
            .map(|i| format!("k{i}"))
            .filter(|k| router.owner(k.as_bytes()).core == OWNER);
        let mut create = |rig: &mut Rig, seq: u32| {
            let key = InlineKey::new(owned.next().unwrap().as_bytes()).unwrap();
            let v = seq;
            let req = WriteReq::Create {
                key,
                new: new_link(v),
            };
            rig.ask(seq, req, Want::Link("created", url(v)));
        };
        let mut started_with = None;
        create(&mut rig, 0);
        for seq in 1..10 * ENTRIES as u32 {
            let len = rig.start_batch().expect("a write is always pending");
            create(&mut rig, seq); // arrives while the batch syncs
            rig.complete_batch(len);
            // What the core does after a sync and at each sweep.
            rig.owner.maybe_compact(1, 100, &idem, &mut rig.mesh);
            rig.pump();
            if rig.owner.compacting.is_some() {
                started_with = Some(rig.owner.writes.memtable.len());
                break;
            }
        }
        let started_with = started_with.expect("no compaction under sustained writes");
        assert!(
            (ENTRIES..=ENTRIES + 2).contains(&started_with),
            "compaction started with {started_with} entries, trigger {ENTRIES}"
        );
        // Every write, held ones included, is answered exactly once.
        for _ in 0..4 {
            rig.sync();
        }
        assert!(rig.due.is_empty(), "unanswered: {:?}", rig.due.keys());
    }

    /// A scan's steps (`listing::SCAN_STEP_LINKS` on the real path; 3 here) examine at most
    /// their budget and say where to go on: walked to each shard's end by `resume`, they list
    /// every link the content filter admits exactly once, whatever the budget.
    #[test]
    fn a_budgeted_scan_lists_every_admitted_link_once() {
        let mut rig = Rig::new();
        let router = Router::new(SHARDS, 2);
        let keys: Vec<InlineKey> = (0..)
            .map(|i| format!("k{i}"))
            .filter(|k| router.owner(k.as_bytes()).core == OWNER)
            .take(40)
            .map(|k| InlineKey::new(k.as_bytes()).unwrap())
            .collect();
        for (seq, key) in keys.iter().enumerate() {
            let v = seq as u32;
            let req = WriteReq::Create {
                key: *key,
                new: new_link(v),
            };
            rig.ask(v, req, Want::Link("created", url(v)));
        }
        rig.sync();
        // Targets ending in 1, 3, 5, 7 or 9 contain none of "0", "2", "4", "6", "8" at the end:
        // the search "/1" admits https://m.example/1, /10..19 and nothing else.
        let filter = Arc::new(crate::mesh::ListFilter {
            search: Some("/1".into()),
            ..Default::default()
        });
        let want: std::collections::BTreeSet<String> =
            (0..40).map(url).filter(|u| u.contains("/1")).collect();
        for budget in [1, 3, 1000] {
            let mut seen = Vec::new();
            for shard in (0..SHARDS).filter(|s| router.core_of_shard(*s) == OWNER) {
                let mut after = None;
                loop {
                    let p = Page {
                        shard,
                        after,
                        limit: 1000,
                        filter: filter.clone(),
                        budget: Some(budget),
                    };
                    let page = rig.owner.list_shard(p, 2);
                    seen.extend(page.items.iter().map(|i| i.target.to_string()));
                    if page.complete {
                        break;
                    }
                    after = Some(page.resume.expect("a step cut short says where to go on"));
                }
            }
            let set: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
            assert_eq!(
                set.len(),
                seen.len(),
                "budget {budget}: a link listed twice"
            );
            assert_eq!(set, want, "budget {budget}");
        }
    }

    /// A live regeneration on one core (`regen.rs`): the rotation waits for a quiet log, the swap
    /// replaces every state the memtable held at the rotation with the new tables' (a link
    /// deleted elsewhere whose tombstone this node never saw goes), keeps what changed after it,
    /// removes the folded log, and makes every core forget its cached answers.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one regeneration walked through step by step on one owner, each step's effect checked where it happens"
    )]
    fn a_regeneration_swaps_a_new_generation_in_and_keeps_later_writes() {
        use crate::fleet_mode::messages::FeedLink;
        use crate::fleet_mode::messages::RegenStep;
        let mut rig = Rig::compacting_at(usize::MAX);
        let (ack_tx, acks) = crossbeam::channel::bounded(16);
        let secret = [7u8; 32];
        rig.owner.set_fleet(fleet_state::FleetLinks::new(
            fleet_links::WriterHandle::closed(),
            fleet_links::ReaderHandle::closed(),
            ack_tx,
            Arc::new(shards::keygen::KeyGen::new(&secret)),
            Arc::new(::fleet::FleetStats::default()),
        ));
        let idem = crate::api::idempotency::IdemTable::new(16, 3600);
        let router = Router::new(SHARDS, 2);
        let keys = keys(&router);
        let row = |k: usize, target: &str, version: u64| FeedLink {
            key: keys[k],
            target: Arc::from(target),
            status: RedirectStatus::Found,
            created_at_s: 1,
            expires_at_s: 0,
            deleted: false,
            version,
            author: shards::link::Author::NONE,
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
        };
        let ack = |acks: &crossbeam::channel::Receiver<crate::fleet_mode::messages::FeedAck>| {
            let a = acks.try_recv().expect("an ack");
            assert!(a.ok, "{a:?}");
            a.batch
        };
        // Before: k0 changed elsewhere since, k1 deleted elsewhere (its tombstone purged), k2 as
        // the database still has it.
        rig.owner.on_feed_batch(
            1,
            vec![
                row(0, "https://old/0", 1),
                row(1, "https://gone/1", 2),
                row(2, "https://same/2", 3),
            ],
        );
        rig.sync();
        assert_eq!(ack(&acks), 1);
        rig.owner.on_feed_batch(2, vec![row(3, "https://x/3", 4)]); // in flight when asked
                                                                    // Step 1 waits for the batch being written, holding new writes meanwhile.
        let len = rig.start_batch().expect("batch 2 pending");
        rig.owner.on_regen(10, RegenStep::Rotate);
        rig.owner.maybe_compact(1, 100, &idem, &mut rig.mesh);
        assert!(acks.try_recv().is_err(), "rotated with a batch in flight");
        assert!(rig.owner.log_is_held());
        rig.complete_batch(len);
        assert_eq!(ack(&acks), 2);
        rig.owner.maybe_compact(1, 100, &idem, &mut rig.mesh);
        assert_eq!(ack(&acks), 10);
        assert!(!rig.owner.log_is_held());
        let folding = fold::folding_path(rig._dir.path(), OWNER as u32);
        assert!(folding.exists());
        // No compaction starts while rotated for the regeneration.
        assert!(!rig.owner.compaction_due(u64::MAX));
        // After the rotation: k4 arrives (newer than any snapshot taken after).
        rig.owner.on_feed_batch(3, vec![row(4, "https://new/4", 9)]);
        rig.sync();
        assert_eq!(ack(&acks), 3);
        // Step 2: the generation, as the database snapshot has it.
        let dir = shards::datadir::DataDir::create(&rig._dir.path().join("d"), SHARDS).unwrap();
        let mut by_shard: std::collections::BTreeMap<u32, Vec<shards::table::OwnedLink>> =
            Default::default();
        for (k, target) in [
            (0, "https://changed/0"),
            (2, "https://same/2"),
            (3, "https://x/3"),
        ] {
            let key = keys[k].as_str().to_owned();
            by_shard
                .entry(router.owner(key.as_bytes()).shard)
                .or_default()
                .push(shards::table::OwnedLink {
                    key,
                    target: target.into(),
                    status: RedirectStatus::Found,
                    expires_at_s: 0,
                    created_at_s: 1,
                    flags: 0,
                    author: shards::link::Author::NONE,
                    behaviour: shards::behaviour::Behaviour::NONE,
                    rules: shards::rules::Rules::NONE,
                    labels: shards::labels::Labels::NONE,
                });
        }
        for shard in router.shards_of_core(OWNER) {
            by_shard.entry(shard).or_default();
        }
        let tables = by_shard
            .into_iter()
            .map(|(shard, links)| {
                let path = dir.table_path(shard);
                shards::table::write_table(&path, shard, SHARDS, 0, links).unwrap();
                (shard, shards::table::Table::open(&path).unwrap())
            })
            .collect();
        rig.owner.on_regen(11, RegenStep::Swap(tables));
        rig.owner.poll_compaction(1, &mut rig.mesh);
        rig.pump();
        assert_eq!(ack(&acks), 11);
        let target = |rig: &Rig, k: usize| {
            let key = keys[k];
            let shard = router.owner(key.as_bytes()).shard;
            rig.owner
                .local_answer(shard, key.as_bytes(), 100)
                .map(|a| match a.target {
                    crate::mesh::Target::Shared(t) => t.to_string(),
                    t @ crate::mesh::Target::Table(_) => {
                        let view = crate::base::target::TableView::new(SHARDS);
                        String::from_utf8(t.resolve(&view).unwrap().to_vec()).unwrap()
                    }
                })
        };
        assert_eq!(target(&rig, 0).as_deref(), Some("https://changed/0"));
        assert_eq!(target(&rig, 1), None, "deleted elsewhere, gone here");
        assert_eq!(target(&rig, 2).as_deref(), Some("https://same/2"));
        assert_eq!(target(&rig, 3).as_deref(), Some("https://x/3"));
        assert_eq!(
            target(&rig, 4).as_deref(),
            Some("https://new/4"),
            "written after"
        );
        assert_eq!(
            rig.owner.writes.memtable.len(),
            1,
            "only the later entry is kept"
        );
        assert!(!folding.exists(), "the superseded log is gone");
        assert!(rig.forgot_all, "every core forgets its cached answers");
        // Compactions run again.
        assert!(!rig.owner.regen_holds_compaction());
        // A step out of order is refused, not applied.
        rig.owner.on_regen(12, RegenStep::Swap(Vec::new()));
        assert!(!acks.try_recv().unwrap().ok);
    }

    /// One step of the fleet model test: what the node's API, the database, the other nodes, the
    /// feed and the owner's housekeeping do, in any interleaving.
    #[derive(Clone, Debug)]
    enum FleetStep {
        /// An API write on this node: create (target v), patch (target v) or delete of key k.
        Api(usize, u8, u32),
        /// The database commits the oldest write this node sent and has not committed yet (its
        /// answer is held back: answers come late).
        Commit,
        /// The oldest committed answer reaches the owner.
        Answer,
        /// Another node changes key k (kind, target v) at the database.
        Other(usize, u8, u32),
        /// The feed delivers up to n committed rows.
        Feed(usize),
        /// A compaction folds the memtable into tables.
        Compact,
        /// A live regeneration: a snapshot of the database replaces the tables.
        Regen,
    }

    fn fleet_step() -> impl Strategy<Value = FleetStep> {
        prop_oneof![
            3 => (0..3usize, 0..3u8, any::<u32>()).prop_map(|(k, o, v)| FleetStep::Api(k, o, v)),
            3 => Just(FleetStep::Commit),
            3 => Just(FleetStep::Answer),
            2 => (0..3usize, 0..3u8, any::<u32>()).prop_map(|(k, o, v)| FleetStep::Other(k, o, v)),
            3 => (1..4usize).prop_map(FleetStep::Feed),
            1 => Just(FleetStep::Compact),
            1 => Just(FleetStep::Regen),
        ]
    }

    /// The fleet database of the model: one version sequence, each key's newest state, and the
    /// feed's rows in commit order.
    #[derive(Default)]
    struct ModelDb {
        version: u64,
        rows: Model<usize, (u64, Option<String>)>,
        feed: Vec<(usize, u64, Option<String>)>,
    }

    impl ModelDb {
        fn live(&self, k: usize) -> bool {
            self.rows.get(&k).is_some_and(|(_, t)| t.is_some())
        }

        /// Applies op `o` (0 create, 1 patch, 2 delete) with target `t` as the writer's SQL
        /// would; the answer, and a feed row if it changed anything.
        fn write(&mut self, k: usize, o: u8, t: String) -> fleet_links::LinkWritten {
            use fleet_links::{LinkState, LinkWritten};
            let change = match (o, self.live(k)) {
                (0, true) => return LinkWritten::Exists,
                (1 | 2, false) => return LinkWritten::NotFound,
                (2, true) => None,
                _ => Some(t),
            };
            self.version += 1;
            let v = self.version;
            self.rows.insert(k, (v, change.clone()));
            self.feed.push((k, v, change.clone()));
            let state = |target: String| LinkState {
                target,
                status: 302,
                created_at_s: 1,
                expires_at_s: 0,
                version: v,
                author: String::new(),
                behaviour: None,
            };
            match (o, change) {
                (0, Some(_)) => LinkWritten::Created { version: v },
                (_, Some(t)) => LinkWritten::Updated(state(t)),
                (_, None) => LinkWritten::Deleted { version: v },
            }
        }
    }

    /// Hole 3 of issue #24, as a property: a fleet owner whose API answers come back late while
    /// the feed brings other nodes' changes, compactions fold tombstones away and regenerations
    /// swap snapshots in ends, once everything is delivered, holding exactly the database's
    /// state of every key. A late answer older than a delete the node applied meanwhile must
    /// not bring the link back.
    #[expect(
        clippy::too_many_lines,
        reason = "the fleet model test's interpreter: one arm per step kind (API, database, feed, compaction, regeneration), each beside the database model's own update"
    )]
    fn run_fleet(steps: &[FleetStep]) {
        use crate::fleet_mode::messages::FeedLink;
        use crate::fleet_mode::messages::RegenStep;
        let mut rig = Rig::in_data_dir();
        let (ack_tx, acks) = crossbeam::channel::bounded(1024);
        let (writer, mut jobs) = fleet_links::WriterHandle::capturing(1024);
        rig.owner.set_fleet(fleet_state::FleetLinks::new(
            writer,
            fleet_links::ReaderHandle::closed(),
            ack_tx,
            Arc::new(shards::keygen::KeyGen::new(&[7u8; 32])),
            Arc::new(::fleet::FleetStats::default()),
        ));
        let idem = crate::api::idempotency::IdemTable::new(16, 3600);
        let router = Router::new(SHARDS, 2);
        let keys = keys(&router);
        let mut db = ModelDb::default();
        let mut sent: std::collections::VecDeque<fleet_links::WriteJob> = Default::default();
        let mut answers: std::collections::VecDeque<fleet_links::WriteAnswer> = Default::default();
        let (mut delivered, mut batch, mut seq) = (0usize, 0u64, 0u32);
        let op_of = |w: &fleet_links::LinkWrite| match w {
            fleet_links::LinkWrite::Create { key, target, .. } => (key.clone(), 0, target.clone()),
            fleet_links::LinkWrite::Patch { key, target, .. } => {
                (key.clone(), 1, target.clone().unwrap_or_default())
            }
            fleet_links::LinkWrite::Delete { key, .. } => (key.clone(), 2, String::new()),
            other => panic!("unexpected write {other:?}"),
        };
        let slot = |key: &str| keys.iter().position(|k| k.as_str() == key).unwrap();
        // A feed row of the model's feed, as the follower hands it over.
        let feed_link = |(k, v, t): &(usize, u64, Option<String>)| FeedLink {
            key: keys[*k],
            target: Arc::from(t.as_deref().unwrap_or("")),
            status: RedirectStatus::Found,
            created_at_s: 1,
            expires_at_s: 0,
            deleted: t.is_none(),
            version: *v,
            author: shards::link::Author::NONE,
            behaviour: shards::behaviour::Behaviour::NONE,
            rules: shards::rules::Rules::NONE,
            labels: shards::labels::Labels::NONE,
        };
        let drain_acks =
            |acks: &crossbeam::channel::Receiver<crate::fleet_mode::messages::FeedAck>| {
                while let Ok(a) = acks.try_recv() {
                    assert!(a.ok, "{a:?}");
                }
            };
        let settle = |rig: &mut Rig| {
            rig.pump();
            for _ in 0..3 {
                rig.sync();
            }
        };
        for step in steps.iter().cloned().chain([FleetStep::Commit]) {
            while let Ok(j) = jobs.try_recv() {
                sent.push_back(j);
            }
            match step {
                FleetStep::Api(k, o, v) => {
                    let key = keys[k];
                    let req = match o {
                        0 => WriteReq::Create {
                            key,
                            new: new_link(v),
                        },
                        1 => WriteReq::Patch {
                            key,
                            target: Some(Arc::from(url(v).as_str())),
                            expiry: ExpiryUpdate::Keep,
                            status: None,
                            reach: crate::api::roles::AuthorReach::ANY,
                            behaviour: None,
                        },
                        _ => WriteReq::Delete {
                            key,
                            reach: crate::api::roles::AuthorReach::ANY,
                        },
                    };
                    seq += 1;
                    rig.ask(seq, req, Want::Any);
                }
                FleetStep::Commit => {
                    if let Some(j) = sent.pop_front() {
                        let (key, o, t) = op_of(&j.write);
                        let result = Ok(db.write(slot(&key), o, t));
                        answers.push_back(fleet_links::WriteAnswer {
                            core: j.core,
                            token: j.token,
                            result,
                        });
                    }
                }
                FleetStep::Answer => {
                    if let Some(a) = answers.pop_front() {
                        rig.owner.on_fleet_written(a, 100, &mut rig.mesh);
                        settle(&mut rig);
                    }
                }
                FleetStep::Other(k, o, v) => {
                    db.write(k, o, url(v));
                }
                FleetStep::Feed(n) => {
                    let rows: Vec<FeedLink> =
                        db.feed[delivered..].iter().take(n).map(feed_link).collect();
                    delivered += rows.len();
                    batch += 1;
                    rig.owner.on_feed_batch(batch, rows);
                    settle(&mut rig);
                    drain_acks(&acks);
                }
                FleetStep::Compact => {
                    settle(&mut rig);
                    rig.owner.compaction.entries = 0;
                    rig.owner.maybe_compact(1, 100, &idem, &mut rig.mesh);
                    let t = std::time::Instant::now();
                    while rig.owner.compacting.is_some() {
                        assert!(t.elapsed() < std::time::Duration::from_secs(10));
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        rig.owner.poll_compaction(1, &mut rig.mesh);
                        rig.pump();
                    }
                    rig.owner.compaction.entries = usize::MAX;
                    settle(&mut rig);
                }
                FleetStep::Regen => {
                    settle(&mut rig);
                    batch += 1;
                    rig.owner.on_regen(batch, RegenStep::Rotate);
                    let rotated = batch;
                    let mut acked = false;
                    for _ in 0..8 {
                        settle(&mut rig);
                        rig.owner.maybe_compact(1, 100, &idem, &mut rig.mesh);
                        while let Ok(a) = acks.try_recv() {
                            assert!(a.ok, "{a:?}");
                            acked |= a.batch == rotated;
                        }
                        if acked {
                            break;
                        }
                    }
                    assert!(acked, "the rotation was not acknowledged");
                    // The snapshot, taken after the rotation: the database as it is now. The feed
                    // resumes from there (rows before it are in the snapshot).
                    delivered = db.feed.len();
                    let dir = rig._dir.path().join(format!("gen{batch}"));
                    let gen = shards::datadir::DataDir::create(&dir, SHARDS).unwrap();
                    let mut by_shard: std::collections::BTreeMap<
                        u32,
                        Vec<shards::table::OwnedLink>,
                    > = router
                        .shards_of_core(OWNER)
                        .map(|s| (s, Vec::new()))
                        .collect();
                    for (k, (_, t)) in &db.rows {
                        let Some(t) = t else { continue };
                        let key = keys[*k].as_str().to_owned();
                        by_shard
                            .entry(router.owner(key.as_bytes()).shard)
                            .or_default()
                            .push(shards::table::OwnedLink {
                                key,
                                target: t.clone(),
                                status: RedirectStatus::Found,
                                expires_at_s: 0,
                                created_at_s: 1,
                                flags: 0,
                                author: shards::link::Author::NONE,
                                behaviour: shards::behaviour::Behaviour::NONE,
                                rules: shards::rules::Rules::NONE,
                                labels: shards::labels::Labels::NONE,
                            });
                    }
                    let tables = by_shard
                        .into_iter()
                        .map(|(shard, links)| {
                            let path = gen.table_path(shard);
                            shards::table::write_table(&path, shard, SHARDS, 0, links).unwrap();
                            (shard, shards::table::Table::open(&path).unwrap())
                        })
                        .collect();
                    batch += 1;
                    rig.owner.on_regen(batch, RegenStep::Swap(tables));
                    rig.owner.poll_compaction(1, &mut rig.mesh);
                    rig.pump();
                    settle(&mut rig);
                    drain_acks(&acks);
                }
            }
        }
        // Everything delivered: every write committed and answered (queued ones are sent as
        // their key frees up), every feed row applied.
        for _ in 0..64 {
            while let Ok(j) = jobs.try_recv() {
                sent.push_back(j);
            }
            while let Some(j) = sent.pop_front() {
                let (key, o, t) = op_of(&j.write);
                let result = Ok(db.write(slot(&key), o, t));
                answers.push_back(fleet_links::WriteAnswer {
                    core: j.core,
                    token: j.token,
                    result,
                });
            }
            while let Some(a) = answers.pop_front() {
                rig.owner.on_fleet_written(a, 100, &mut rig.mesh);
                settle(&mut rig);
            }
            if jobs.is_empty() && sent.is_empty() {
                break;
            }
        }
        let rows: Vec<FeedLink> = db.feed[delivered..].iter().map(feed_link).collect();
        batch += 1;
        rig.owner.on_feed_batch(batch, rows);
        settle(&mut rig);
        drain_acks(&acks);
        assert!(rig.due.is_empty(), "unanswered: {:?}", rig.due.keys());
        for (k, key) in keys.iter().enumerate() {
            let shard = router.owner(key.as_bytes()).shard;
            let held = rig
                .owner
                .local_answer(shard, key.as_bytes(), 100)
                .map(|a| match a.target {
                    crate::mesh::Target::Shared(t) => t.to_string(),
                    t @ crate::mesh::Target::Table(_) => {
                        let view = crate::base::target::TableView::new(SHARDS);
                        String::from_utf8(t.resolve(&view).unwrap().to_vec()).unwrap()
                    }
                });
            let want = db.rows.get(&k).and_then(|(_, t)| t.clone());
            assert_eq!(held, want, "key {k} ({key:?}) after {steps:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn a_fleet_owner_converges_to_the_database_whatever_comes_late(
            steps in prop::collection::vec(fleet_step(), 1..40)
        ) {
            run_fleet(&steps);
        }
    }

    /// Found by the model: another node creates and deletes a key this node never held, and
    /// both rows come in one feed batch. The create waits for durability before it reaches the
    /// memtable; the tombstone must not be skipped as one of a key never held.
    #[test]
    fn a_create_and_its_delete_in_one_feed_batch_leave_the_key_deleted() {
        use FleetStep::*;
        run_fleet(&[Other(2, 0, 0), Other(2, 2, 0)]);
    }

    /// The case hole 3 names, spelled out: a PATCH answered after another node's DELETE was
    /// applied and compacted away must not bring the link back.
    #[test]
    fn a_late_answer_does_not_resurrect_a_link_deleted_and_compacted_meanwhile() {
        use FleetStep::*;
        run_fleet(&[
            Other(0, 0, 1),
            Feed(1),
            Api(0, 1, 2),
            Commit,
            Other(0, 2, 0),
            Feed(2),
            Compact,
            Answer,
        ]);
    }

    /// The same with a regeneration's swap in place of the compaction.
    #[test]
    fn a_late_answer_does_not_resurrect_a_link_a_regeneration_dropped() {
        use FleetStep::*;
        run_fleet(&[
            Other(0, 0, 1),
            Feed(1),
            Api(0, 1, 2),
            Commit,
            Other(0, 2, 0),
            Regen,
            Answer,
        ]);
    }
}
