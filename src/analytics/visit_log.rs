//! The opt-in visit log (`--visit-log-days`) as an aggregator runs it: as a source, a
//! classified click becomes a [`Visit`] (its user agent's text, its referrer host, country,
//! bot flag and the address's network) sent to the owner with the click's delta; as owner,
//! visits go into the core's `VisitBook` (`shards::clicks::visits`), made durable at each
//! click sync, purged with the link's stats, dropped past retention, and listed by
//! [`VisitLog::answer`].
//!
//! Nothing here runs on a core's redirect path: the combiner carries the same hashes with the
//! log on as off, and the aggregator keeps a user agent's text (once per distinct string)
//! only when the log is on.

use crate::base::key::InlineKey;
use shards::clicks::visits::{AnonIp, Visit, VisitBook, VisitQuery};
use shards::clicks::Day;
use std::sync::Arc;

/// `--visit-log-ip`: what the visit log keeps of a visitor's address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum VisitLogIp {
    /// Its network: IPv4 /24, IPv6 /48 (Shlink's anonymization).
    #[default]
    Network,
    /// Nothing.
    None,
}

/// `--visit-log-days` and what goes with it: the opt-in log of individual visits
/// (`shards::clicks::visits`).
#[derive(Clone, Copy, Debug)]
pub struct VisitLogConfig {
    pub days: u32,
    pub ip: VisitLogIp,
    /// Records one owner core keeps at most (the oldest go first).
    pub max_records_per_core: usize,
}

/// Which links a visit query lists.
#[derive(Clone, Debug)]
pub enum VisitKeys {
    /// One link (its stored key).
    One(InlineKey),
    /// Every link.
    All,
    /// Links of these domains (by number; the default domain's is 0).
    Domains(Arc<[u32]>),
    /// These links (a tag's), by stored key.
    Set(Arc<Vec<InlineKey>>),
}

impl VisitKeys {
    fn admits(&self, stored: &[u8]) -> bool {
        match self {
            VisitKeys::One(k) => k.as_bytes() == stored,
            VisitKeys::All => true,
            VisitKeys::Domains(d) => d.contains(&shards::link::split_stored_key(stored).0),
            VisitKeys::Set(keys) => keys.iter().any(|k| k.as_bytes() == stored),
        }
    }
}

/// A page of visits asked of one aggregator (of each, for more than one link).
#[derive(Clone, Debug)]
pub struct VisitLogQuery {
    pub keys: VisitKeys,
    pub from_ms: u64,
    pub to_ms: u64,
    pub exclude_bots: bool,
    /// Orphan visits (GETs that reached no link) only, or links' visits only.
    pub orphans: bool,
    /// Of orphan visits, only those of this kind (Shlink's `type`).
    pub orphan_kind: Option<shards::clicks::visits::Orphan>,
    /// Not a page: Shlink's delete of every orphan visit. The aggregator resets its 404
    /// counts and purges its logged orphan visits, durably, and answers the counts it reset
    /// as `total`.
    pub delete_orphans: bool,
    /// Visits skipped from the newest, then the most sent. A merged list asks each
    /// aggregator for every visit down to the page's end (`skip` 0): one cannot know the
    /// others' share of a page.
    pub skip: u64,
    pub take: usize,
}

/// One owner core's visit log and what its source side needs.
pub struct VisitLog {
    book: VisitBook,
    cfg: VisitLogConfig,
}

impl VisitLog {
    pub fn new(book: VisitBook, cfg: VisitLogConfig) -> VisitLog {
        VisitLog { book, cfg }
    }

    /// The visit of one combined click (source side).
    #[allow(clippy::too_many_arguments)]
    pub fn visit_of(
        &self,
        key: &[u8],
        at_ms: u64,
        count: u32,
        bot: bool,
        ip: &[u8; 16],
        (country, referrer, user_agent): (&str, Arc<str>, Arc<str>),
    ) -> Visit {
        let c = country.as_bytes();
        Visit {
            key: shards::clicks::ShortKey::new(key),
            at_ms,
            count,
            bot,
            orphan: None,
            country: [
                c.first().copied().unwrap_or(b'Z'),
                c.get(1).copied().unwrap_or(b'Z'),
            ],
            ip: AnonIp::of(ip, self.cfg.ip == VisitLogIp::Network),
            referrer,
            user_agent,
        }
    }

    /// A visit for this owner (not filtered by a purge), its link having `day_clicks` clicks
    /// that day in the click store once its message is merged (the per-link-day bound).
    pub fn add(&mut self, v: Visit, day_clicks: u64) {
        self.book.add(v, day_clicks);
    }

    /// Makes the visits added since the last sync durable (with the click sync).
    pub fn sync(&mut self, pause: &mut dyn FnMut()) -> std::io::Result<()> {
        self.book.sync(pause)
    }

    /// Records held, and visits counted but not logged (past a bound), so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.book.len() as u64, self.book.capped)
    }

    /// Every orphan visit goes, from memory and (durably, at once) disk.
    pub fn purge_orphans(&mut self, pause: &mut dyn FnMut()) -> std::io::Result<u64> {
        self.book.purge_orphans(pause)
    }

    /// The link's visits go, from memory and disk.
    pub fn purge(&mut self, key: &[u8], pause: &mut dyn FnMut()) -> std::io::Result<()> {
        self.book.purge(key, pause)
    }

    /// Visits of days before the log's window go (from the file at its next rewrite).
    pub fn retain(&mut self, today: Day) {
        self.book
            .retain_from(today.saturating_sub(self.cfg.days - 1));
    }

    /// The answer to `q`: `{"total": N, "complete_until": ..., "visits": [...]}`, the
    /// newest `q.take` visits, each with `at` (RFC 3339, ms), `referrer` (a host, `""` for
    /// none), `user_agent`, `bot`, `country`, `ip` (the network, or null) and `orphan` (null,
    /// or the orphan visit's kind: `invalid_short_url`, `base_url`, `regular_404`).
    pub fn answer(&self, q: &VisitLogQuery, complete_until_ms: u64) -> Vec<u8> {
        let keys = |k: &[u8]| q.keys.admits(k);
        let page = self.book.query(&VisitQuery {
            keys: &keys,
            from_ms: q.from_ms,
            to_ms: q.to_ms,
            exclude_bots: q.exclude_bots,
            orphans: q.orphans,
            orphan_kind: q.orphan_kind,
            skip: q.skip,
            take: q.take,
        });
        let visits: Vec<serde_json::Value> = page.visits.iter().map(visit_json).collect();
        serde_json::to_vec(&serde_json::json!({
            "total": page.total,
            "complete_until": super::stats::rfc3339_ms(complete_until_ms),
            "visits": visits,
        }))
        .expect("json")
    }
}

/// One visit as the aggregators answer it.
pub fn visit_json(v: &Visit) -> serde_json::Value {
    serde_json::json!({
        "key": String::from_utf8_lossy(v.key.as_bytes()),
        "at": super::stats::rfc3339_ms(v.at_ms),
        "at_ms": v.at_ms,
        "referrer": &*v.referrer,
        "user_agent": &*v.user_agent,
        "bot": v.bot,
        "orphan": v.orphan.map(shards::clicks::visits::Orphan::as_str),
        "country": String::from_utf8_lossy(&v.country),
        "ip": v.ip.text(),
    })
}
