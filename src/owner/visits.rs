//! Visit limits (issue 27, `max_visits`): a link that allows N redirects gives exactly N, on
//! any number of cores and connections, and never more after a crash.
//!
//! Only the link's owner answers its visits. Other cores never cache its answer
//! (`Answer::limited`), so each visit, forwarded or local, reaches `Owner::on_lookup`, which
//! counts it here: the count after this visit is written into a log record of the link (its
//! `behaviour.visits`) and the redirect is sent only once that record is durable, with the
//! batch's other writes (group commit). Visits in flight are counted from the newest record
//! of the key, durable or not ([`Owner::newest_visits`]), so concurrent visits take
//! consecutive counts and the (N+1)th is refused at once, before anything is logged. A crash
//! loses only visits that were not answered: after recovery the count is at least the
//! number of redirects sent, so the limit is exact, never exceeded. A HEAD is no visit: it
//! is answered from the same state without counting.
//!
//! In fleet mode the count is the fleet's: instead of a log record, each visit is one
//! conditional increment on the primary (`Owner::submit_fleet_visit`), and the redirect waits
//! for its commit; the feed brings the new count to every node. A visit the database cannot
//! count is answered 503.

use super::writes::{Durable, MemEntry, Then};
use super::Owner;
use crate::base::key::InlineKey;
use crate::base::target::Target;
use crate::mesh::{Answer, Fetched, LinkInfo, Mesh, RedirectMsg, ReplyTo};
use shards::log::LogOpRef;

impl Owner {
    /// A lookup of a link with a visit limit (`visit`: a GET, counted).
    pub(super) fn on_limited_lookup(
        &mut self,
        reply: ReplyTo,
        (shard, key, visit): (u32, InlineKey, bool),
        now_s: u64,
        mesh: &mut Mesh,
    ) {
        let Some(info) = self.newest_info(shard, &key, now_s) else {
            let answer = None;
            return mesh.deliver(reply.core(), RedirectMsg::Answer { reply, key, answer });
        };
        let b = info.behaviour;
        if b.max_visits != 0 && b.visits >= b.max_visits {
            // Used up: answered as an expired link is.
            let answer = None;
            return mesh.deliver(reply.core(), RedirectMsg::Answer { reply, key, answer });
        }
        let answer = Answer::new(
            Target::Shared(info.target.clone()),
            info.status,
            info.expires_at_s,
            (&b, crate::base::target::RulesText::of(&info.rules)),
        );
        if !visit || b.max_visits == 0 {
            let answer = Some(answer);
            return mesh.deliver(reply.core(), RedirectMsg::Answer { reply, key, answer });
        }
        if self.judge.fleet().is_some() {
            // The fleet's count, in the database: every node's visits against one limit.
            return self.submit_fleet_visit(reply, key, answer, mesh);
        }
        self.log_visit(reply, shard, info, answer, mesh);
    }

    /// Logs the link with one more visit; the redirect waits for the record to be durable.
    fn log_visit(
        &mut self,
        reply: ReplyTo,
        shard: u32,
        mut info: LinkInfo,
        answer: Answer,
        mesh: &mut Mesh,
    ) {
        let key = info.key;
        info.behaviour.visits += 1;
        let id = self.writes.id_of(&key);
        let link = info.log_fields(id);
        let Ok(seq) = self.writes.log.append_ref(shard, LogOpRef::Put(link)) else {
            return unavailable(reply, key, mesh);
        };
        self.writes.waiting.push_back(Durable {
            seq,
            apply: Some((
                key,
                MemEntry::Live {
                    info,
                    id,
                    version: 0,
                },
            )),
            then: Then::Visit { reply, key, answer },
        });
    }

    /// The link as its newest record has it, durable or not (a write or a visit still
    /// waiting for its batch), if live.
    fn newest_info(&self, shard: u32, key: &InlineKey, now_s: u64) -> Option<LinkInfo> {
        let pending = self
            .writes
            .waiting
            .iter()
            .rev()
            .find_map(|d| match &d.apply {
                Some((k, entry)) if k == key => Some(entry),
                _ => None,
            });
        match pending {
            Some(MemEntry::Live { info, .. }) => {
                let live = info.expires_at_s == 0 || now_s < info.expires_at_s;
                live.then(|| info.clone())
            }
            Some(MemEntry::Deleted { .. }) => None,
            None => self.link_info(shard, key, now_s),
        }
    }

    /// The visit count of `key`'s newest record still waiting for its batch, if any: a write
    /// planned meanwhile must carry it, or its record would undo those visits.
    pub(super) fn newest_visits(&self, key: &InlineKey) -> Option<u64> {
        self.writes
            .waiting
            .iter()
            .rev()
            .find_map(|d| match &d.apply {
                Some((k, MemEntry::Live { info, .. })) if k == key => Some(info.behaviour.visits),
                _ => None,
            })
    }
}

/// A visit that could not be counted (the log failed): 503, never a redirect.
pub(super) fn unavailable(reply: ReplyTo, key: InlineKey, mesh: &mut Mesh) {
    let fetched = Fetched::Unavailable;
    mesh.deliver(
        reply.core(),
        RedirectMsg::Fetched {
            reply,
            key,
            fetched,
        },
    );
}
