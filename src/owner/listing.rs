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
    /// unless the shard is done or `budget` links were examined (then `resume` says where
    /// to go on).
    pub fn list_shard(&self, p: Page, now_s: u64) -> ListedShard {
        let (shard, limit) = (p.shard, p.limit as usize);
        let after = p.after.as_ref().map(|k| k.as_bytes());
        let past = |k: &[u8]| after.is_none_or(|a| k > a);
        let budget = p.budget.map_or(usize::MAX, |b| b as usize);
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
            .flat_map(|t| match after {
                Some(a) => t.iter_after(a),
                None => t.iter(),
            })
            .filter(|(k, _)| past(k.as_bytes()))
            .peekable();
        let (mut items, mut examined) = (Vec::new(), 0);
        // One more than asked: whether anything follows the page.
        while items.len() <= limit {
            let Some(entry) = next_merged(&mut mem, &mut table) else {
                break;
            };
            examined += 1;
            if entry.admitted(&p.filter, now_s) {
                items.push(entry.info());
            }
            if examined == budget && items.len() <= limit {
                let resume = Some(InlineKey::new(entry.key()).expect("a stored key"));
                return ListedShard {
                    items,
                    complete: false,
                    resume,
                };
            }
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

/// One key of a shard as a list sees it: the memtable's state of it, else the table's.
enum Entry<'a> {
    Mem(&'a InlineKey, &'a MemEntry),
    Table(&'a str, shards::table::LinkRef<'a>),
}

type MemIter<'a> = std::iter::Peekable<std::vec::IntoIter<(&'a InlineKey, &'a MemEntry)>>;

/// The next key of the memtable's and the table's, both in key order (the memtable's state
/// overrides the table's).
fn next_merged<'a>(
    mem: &mut MemIter<'a>,
    table: &mut std::iter::Peekable<impl Iterator<Item = (&'a str, shards::table::LinkRef<'a>)>>,
) -> Option<Entry<'a>> {
    let next_mem = mem.peek().map(|(k, _)| k.as_bytes());
    let next_table = table.peek().map(|(k, _)| k.as_bytes());
    let from_mem = match (next_mem, next_table) {
        (None, None) => return None,
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
    Some(match from_mem {
        true => {
            let (k, e) = mem.next().expect("peeked");
            Entry::Mem(k, e)
        }
        false => {
            let (k, l) = table.next().expect("peeked");
            Entry::Table(k, l)
        }
    })
}

impl Entry<'_> {
    fn key(&self) -> &[u8] {
        match self {
            Entry::Mem(k, _) => k.as_bytes(),
            Entry::Table(k, _) => k.as_bytes(),
        }
    }

    /// A live link `filter` admits (a deleted one never is).
    fn admitted(&self, filter: &crate::mesh::ListFilter, now_s: u64) -> bool {
        let live = |exp: u64| exp == 0 || now_s < exp;
        match self {
            Entry::Mem(_, MemEntry::Live { info, .. }) => {
                let k = info.key.as_bytes();
                live(info.expires_at_s)
                    && filter.admits(k, info.author, &info.behaviour)
                    && filter.admits_content(
                        k,
                        (&info.target, info.created_at_s),
                        info.labels.as_ref(),
                    )
            }
            Entry::Mem(..) => false,
            Entry::Table(k, l) => {
                live(l.expires_at_s)
                    && filter.admits(k.as_bytes(), l.author, &l.behaviour)
                    && filter.admits_content(
                        k.as_bytes(),
                        (l.target, l.created_at_s),
                        shards::labels::LabelsRef::from_table(l.labels),
                    )
            }
        }
    }

    /// The link, as a page carries it (only for an admitted entry).
    fn info(&self) -> LinkInfo {
        match self {
            Entry::Mem(_, MemEntry::Live { info, .. }) => info.clone(),
            Entry::Mem(..) => unreachable!("only live entries are admitted"),
            Entry::Table(k, l) => {
                let key = InlineKey::new(k.as_bytes()).expect("table keys are valid keys");
                LinkInfo::from_table(key, l)
            }
        }
    }
}
