//! One page of one shard's live links, for `GET /api/v1/urls` (`api_front::listing` walks the
//! shards). Order is the shard, then the key's bytes: fixed for a link's whole life (the
//! placement hash never changes, compaction keeps keys), so a walk by cursor sees every link
//! that exists throughout exactly once, whatever is written meanwhile.
//!
//! Cost on the owner core: the shard's table is read in key order (it is stored sorted) up to
//! the page, and the memtable is scanned once for the shard's entries. Not the redirect path:
//! allocation is fine here; the page size bounds the work.

use super::writes::MemEntry;
use super::Owner;
use crate::base::key::InlineKey;
use crate::mesh::LinkInfo;
use crate::mesh::ListedShard;
use std::cmp::Ordering;
use std::sync::Arc;

/// A page asked of a shard's owner.
#[derive(Clone, Debug)]
pub struct Page {
    pub shard: u32,
    /// Keys after this one (the cursor's).
    pub after: Option<InlineKey>,
    pub limit: u32,
    /// Which links belong on it (by stored key and author).
    pub filter: Arc<crate::mesh::ListFilter>,
    /// At most this many links examined before the page is answered, full or not (then
    /// with where to go on); `None`: no bound but the page's.
    pub budget: Option<u32>,
}

impl Owner {
    /// Another core (or this one) asks for a page of a shard.
    pub fn on_list(
        &self,
        reply: crate::mesh::ReplyTo,
        p: Page,
        now_s: u64,
        mesh: &mut crate::mesh::Mesh,
    ) {
        debug_assert_eq!(
            self.router.core_of_shard(p.shard),
            self.me,
            "pages come from the owner"
        );
        let page = self.list_shard(p, now_s);
        let outcome = crate::mesh::WriteOutcome::Listed(Box::new(page));
        mesh.deliver(
            reply.core(),
            crate::mesh::ApiMsg::WriteDone { reply, outcome },
        );
    }

    /// Up to `limit` live links of `shard` that the page's filter admits, with keys after
    /// `after`, in key order. The filter is applied as the walk goes, so a page is full
    /// unless the shard is done.
    pub fn list_shard(&self, p: Page, now_s: u64) -> ListedShard {
        let (shard, limit) = (p.shard, p.limit as usize);
        let after = p.after.as_ref().map(|k| k.as_bytes());
        let past = |k: &[u8]| after.is_none_or(|a| k > a);
        let admits = |k: &[u8], author, b: &_, target: &str, created| {
            p.filter.admits(k, author, b) && p.filter.admits_content(k, target, created)
        };
        let budget = p.budget.map_or(usize::MAX, |b| b as usize);
        let (mut examined, mut last) = (0usize, None);
        let live = |exp: u64| exp == 0 || now_s < exp;
        let mut mem: Vec<(&InlineKey, &MemEntry)> = self
            .writes
            .memtable
            .iter()
            .filter(|(k, _)| self.router.owner(k.as_bytes()).shard == shard && past(k.as_bytes()))
            .collect();
        mem.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut mem = mem.into_iter().peekable();
        let mut table = self
            .store
            .table_of(shard)
            .into_iter()
            .flat_map(|t| t.iter())
            .filter(|(k, _)| past(k.as_bytes()))
            .peekable();
        let mut items = Vec::new();
        // One more than asked: whether anything follows the page.
        while items.len() <= limit {
            if examined == budget {
                let resume = last.map(|k: &[u8]| InlineKey::new(k).expect("a stored key"));
                return ListedShard {
                    items,
                    complete: false,
                    resume,
                };
            }
            examined += 1;
            let next_mem = mem.peek().map(|(k, _)| k.as_bytes());
            let next_table = table.peek().map(|(k, _)| k.as_bytes());
            let from_mem = match (next_mem, next_table) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(m), Some(t)) => match m.cmp(t) {
                    Ordering::Less => true,
                    Ordering::Greater => false,
                    Ordering::Equal => {
                        table.next(); // The memtable overrides the table.
                        true
                    }
                },
            };
            let item = if from_mem {
                let (k, entry) = mem.next().expect("peeked");
                last = Some(k.as_bytes());
                match entry {
                    MemEntry::Live { info, .. }
                        if live(info.expires_at_s)
                            && admits(
                                info.key.as_bytes(),
                                info.author,
                                &info.behaviour,
                                &info.target,
                                info.created_at_s,
                            ) =>
                    {
                        Some(info.clone())
                    }
                    _ => None,
                }
            } else {
                let (k, l) = table.next().expect("peeked");
                last = Some(k.as_bytes());
                let ok = live(l.expires_at_s)
                    && admits(k.as_bytes(), l.author, &l.behaviour, l.target, l.created_at_s);
                ok.then(|| LinkInfo {
                    key: InlineKey::new(k.as_bytes()).expect("table keys are valid keys"),
                    target: Arc::from(l.target),
                    status: l.status,
                    created_at_s: l.created_at_s,
                    created_tag: shards::link::creation_tag(l.flags),
                    expires_at_s: l.expires_at_s,
                    author: l.author,
                    behaviour: l.behaviour,
                    rules: shards::rules::Rules::new(l.rules),
                })
            };
            items.extend(item);
        }
        let complete = items.len() <= limit;
        items.truncate(limit);
        ListedShard {
            items,
            complete,
            resume: None,
        }
    }
}
