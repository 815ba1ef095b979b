//! The state of a server-wide stats answer in progress (`global_stats.rs` drives it): an
//! admin's parts gathered from every aggregator, or a role's sum over its links.

use super::listing::ListWalk;
use crate::analytics::stats::{self, GlobalPart, StatsQuery};
use crate::api::problem::Problem;
use serde_json::Value;
use shards::clicks::Day;

/// Most links a key with a role may reach for its server-wide figures (`GET /api/v1/stats`,
/// Shlink's `GET /rest/v3/visits`): each link's figures are asked of its aggregator in turn,
/// so past this many the answer is refused (each link's own stats stay available). As many
/// as Shlink's deepest list page (`shlink::MAX_SHLINK_WINDOW`).
pub const MAX_OVERVIEW_LINKS: u32 = 5_000;

/// The parts of one server-wide stats answer collected so far.
pub struct Gathering {
    pub from: Day,
    pub to: Day,
    pub parts: Vec<crate::analytics::stats::GlobalPart>,
}

/// A role's `GET /api/v1/stats` in progress: the walk over its links, then the sum of their
/// figures so far.
#[derive(Debug)]
pub struct ReachStats {
    pub walk: ListWalk,
    from: Day,
    to: Day,
    /// `None` while the walk goes on.
    sum: Option<ReachSum>,
}

/// The figures of the links asked so far.
#[derive(Debug)]
struct ReachSum {
    /// Per day of the range: clicks (bots included), bot clicks.
    days: Vec<[u64; 2]>,
    /// Each link's clicks over the range, cut to the top links as they come.
    top: Vec<(String, u64)>,
    /// Links whose figures are in.
    done: usize,
    /// The earliest `complete_until` of the answers (RFC 3339 in one format: orders as text).
    complete_until: Option<String>,
    dropped: u64,
}

impl ReachStats {
    /// A role's stats over `from..=to`, its links to be walked by `walk`.
    pub fn new(walk: ListWalk, from: Day, to: Day) -> ReachStats {
        ReachStats {
            walk,
            from,
            to,
            sum: None,
        }
    }

    /// Whether its walk goes on (no link's figures asked yet).
    pub fn is_walking(&self) -> bool {
        self.sum.is_none()
    }

    /// The walk is over: each link's figures are asked next.
    pub fn start_sum(&mut self) {
        self.sum = Some(ReachSum {
            days: vec![[0; 2]; (self.to - self.from + 1) as usize],
            top: Vec::new(),
            done: 0,
            complete_until: None,
            dropped: 0,
        });
    }

    /// The range's query of the next link without figures.
    pub fn next_query(&self) -> StatsQuery {
        let sum = self.sum.as_ref().expect("asked once the walk is over");
        StatsQuery {
            key: self.walk.items[sum.done].key,
            from: self.from,
            to: self.to,
            bots: stats::Bots::Include,
        }
    }

    /// Adds one link's stats answer (the native JSON, bots included); `true` once every
    /// link's is in.
    pub fn fold(&mut self, answer: &[u8]) -> bool {
        let v: Value = serde_json::from_slice(answer).unwrap_or(Value::Null);
        let sum = self.sum.as_mut().expect("asked once the walk is over");
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
        if let Some(days) = v["days"].as_array() {
            for (row, d) in sum.days.iter_mut().zip(days) {
                row[0] += n(d, "clicks");
                row[1] += n(d, "bot_clicks");
            }
        }
        let link = &self.walk.items[sum.done];
        let clicks = n(&v["summary"], "clicks");
        if clicks > 0 {
            sum.top.push((link.key.as_str().to_owned(), clicks));
            if sum.top.len() >= 4 * stats::TOP_LINKS {
                stats::keep_top(&mut sum.top);
            }
        }
        if let Some(c) = v["complete_until"].as_str() {
            if sum.complete_until.as_deref().is_none_or(|m| c < m) {
                sum.complete_until = Some(c.to_owned());
            }
        }
        sum.dropped = sum.dropped.max(n(&v, "dropped_clicks"));
        sum.done += 1;
        sum.done == self.walk.items.len()
    }

    /// The answer: [`stats::global_value`]'s shape over the links summed (no 404s).
    pub fn value(&self) -> Value {
        let (days, mut top, complete, dropped) = match &self.sum {
            Some(s) => (
                s.days.clone(),
                s.top.clone(),
                s.complete_until.clone(),
                s.dropped,
            ),
            None => (
                vec![[0; 2]; (self.to - self.from + 1) as usize],
                Vec::new(),
                None,
                0,
            ),
        };
        stats::keep_top(&mut top);
        let part = GlobalPart {
            days: days.iter().map(|d| [d[0], d[1], 0]).collect(),
            top,
            complete_until_ms: 0,
        };
        let mut v = stats::global_value(self.from, self.to, &[part], dropped);
        v["complete_until"] = match complete {
            Some(c) => c.into(),
            // No link to ask: nothing is incomplete.
            None => stats::rfc3339_ms(shards::timefmt::now_s() * 1000).into(),
        };
        v["links"] = self.walk.items.len().into();
        v
    }
}

/// What became of a stats answer for a deferred request ([`ApiFront::on_stats_body`]).
pub enum StatsStep {
    /// The answer to send (JSON).
    Done(Vec<u8>),
    /// The next link's figures were asked: still deferred.
    Asked,
    /// The next link could not be asked: this answer instead.
    Failed(Problem),
}
