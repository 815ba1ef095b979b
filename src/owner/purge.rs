//! What a PATCH or DELETE waits for before its answer: every other core dropped the key from
//! its LRU; and for a DELETE (or a stats reset) with click analytics on, the key's stats
//! purged and the purge durable.
//!
//! The purge is exact without a lock: each core, when it drops the key, hands off the clicks
//! it counted so far and acks with the number of its last click message
//! (`Combiner::cut`). Every click of the old link on that core is in a message up to that
//! number; every later message can only hold clicks of a link created again. The owner's
//! aggregator drops the old link's clicks that arrive late by those numbers
//! (`analytics::aggregator`).

use super::purge_state::{Invalidation, Waiter};
use super::Owner;
use crate::analytics::Control;
use crate::base::key::InlineKey;
use crate::mesh::{ApiMsg, CacheMsg, Mesh, ReplyTo, WriteOutcome};

impl Owner {
    /// Clicks of this core's keys are purged through `control` (its aggregator).
    pub fn set_clicks(&mut self, control: crate::analytics::ControlTx) {
        self.clicks = Some(control);
    }

    /// Holds the answer to a write of `key` until every other core dropped it from its LRU
    /// (and, with `purge`, every core cut its clicks and the stats are purged).
    pub(super) fn broadcast_invalidate(
        &mut self,
        key: InlineKey,
        reply: ReplyTo,
        outcome: WriteOutcome,
        purge: bool,
        mesh: &mut Mesh,
    ) {
        self.invalidate_then(key, Waiter::Api(reply, outcome), purge, mesh)
    }

    /// Has every other core drop `key` (and with `purge`, every core cut its clicks and the
    /// aggregator purge them durably), then releases `waiter`.
    pub(super) fn invalidate_then(
        &mut self,
        key: InlineKey,
        waiter: Waiter,
        purge: bool,
        mesh: &mut Mesh,
    ) {
        let purge = purge && self.clicks.is_some();
        let cores = self.router.cores();
        // A purge asks this core too: its own clicks are cut like everyone's.
        let targets: Vec<usize> = (0..cores).filter(|&c| purge || c != self.me).collect();
        if targets.is_empty() {
            return self.release(waiter, mesh);
        }
        let token = self.token();
        let inv = Invalidation {
            left: targets.len(),
            waiter,
            purge: purge.then(|| (key, vec![0; cores])),
        };
        self.invalidations.insert(token, inv);
        let from = self.me as u16;
        for core in targets {
            mesh.deliver(
                core,
                CacheMsg::Invalidate {
                    from,
                    token,
                    key,
                    purge,
                },
            );
        }
    }

    /// A core dropped the key of invalidation `token`; the last ack releases the answer (or
    /// starts the purge).
    pub fn on_invalidate_ack(&mut self, token: u64, from: u16, clicks_seq: u64, mesh: &mut Mesh) {
        let Some(inv) = self.invalidations.get_mut(&token) else {
            return;
        };
        inv.left -= 1;
        if let Some((_, cutoffs)) = &mut inv.purge {
            cutoffs[from as usize] = clicks_seq;
        }
        if inv.left > 0 {
            return;
        }
        let inv = self.invalidations.remove(&token).expect("present");
        let Some((key, cutoffs)) = inv.purge else {
            return self.release(inv.waiter, mesh);
        };
        self.purging.insert(token, inv.waiter);
        self.unsent_purges.push_back(Control::Purge {
            key,
            cutoffs: cutoffs.into(),
            token,
            reply_core: self.me as u16,
        });
        self.send_purges();
    }

    /// Offers waiting purges to the aggregator (again at each sweep while its queue is full).
    pub fn send_purges(&mut self) {
        let Some(tx) = &self.clicks else {
            return;
        };
        while let Some(p) = self.unsent_purges.pop_front() {
            if let Err(e) = tx.try_send(p) {
                let p = match e {
                    crossbeam::channel::TrySendError::Full(p) => p,
                    crossbeam::channel::TrySendError::Disconnected(p) => p,
                };
                self.unsent_purges.push_front(p);
                return;
            }
        }
    }

    /// The aggregator made purge `token` durable: the DELETE is answered.
    pub fn on_clicks_purged(&mut self, token: u64, mesh: &mut Mesh) {
        if let Some(waiter) = self.purging.remove(&token) {
            self.release(waiter, mesh);
        }
    }

    /// Everything `waiter` waited for is done.
    fn release(&mut self, waiter: Waiter, mesh: &mut Mesh) {
        match waiter {
            Waiter::Api(reply, outcome) => {
                mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome })
            }
            Waiter::Feed(batch) => self.feed_row_done(batch, true),
        }
    }
}
