//! `GET /api/v1/stats`, the server-wide click figures, and Shlink's `GET /rest/v3/visits`
//! built on them.
//!
//! - An admin key's answer is every aggregator's [`GlobalPart`] (days, 404s, its top links)
//!   gathered on the asking core ([`ApiFront::gather`]), or in fleet mode the fleet stats
//!   thread's, whole, from the database.
//! - A key with a role (issue 26) sees the same shape over only the links it reaches: a list
//!   walk of every shard filtered by its reach ([`ReachStats`]), then each link's figures over
//!   the range asked of its aggregator (or the fleet stats thread) in turn and summed here. 404s
//!   belong to no link, so its `not_found` figures are 0; past [`MAX_OVERVIEW_LINKS`] links it
//!   is refused (422 `too-many-links`: the walk and the per-link queries grow with the links).
//!
//! Top links name their domain (`top_links[].domain`, `null` on an unnamed default domain).

use super::stats_sum::{Gathering, ReachStats, StatsStep, MAX_OVERVIEW_LINKS};
use super::{encode_json, encode_problem, ApiFront, ApiOp, Defer};
use crate::analytics::stats;
use crate::api::problem::Problem;
use crate::api::roles::Reach;
use crate::base::clock::Clock;
use crate::http::encode::{Conn as Persist, Framing};
use crate::http::parse::Request;
use crate::mesh::{LinkInfo, Mesh, ReplyTo};
use serde_json::Value;
use shards::clicks::Day;

impl ApiFront {
    /// One aggregator's part of a server-wide stats answer; the JSON once every part is in.
    pub fn gather(
        &mut self,
        reply: ReplyTo,
        part: crate::analytics::stats::GlobalPart,
        dropped: u64,
    ) -> Option<Vec<u8>> {
        let id = reply;
        let g = self.gathering.get_mut(&id)?;
        g.parts.push(part);
        if g.parts.len() < self.router.cores() {
            return None;
        }
        let g = self.gathering.remove(&id).expect("present");
        self.stats_done();
        Some(crate::analytics::stats::global_json(
            g.from, g.to, &g.parts, dropped,
        ))
    }

    /// `GET /api/v1/stats` (or, `shlink`, Shlink's `GET /rest/v3/visits` over the whole
    /// click window): asks every aggregator for its part.
    pub(crate) fn query_global(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        persist: Persist,
        clock: &Clock,
        shlink: bool,
    ) {
        let f = Framing {
            head_only: false,
            ..self.framing(req, persist, clock)
        };
        let problem = |out: &mut Vec<u8>, p: Problem| encode_problem(out, &p, &[], f);
        let range = match shlink {
            true => Ok(stats::whole_window(shards::clicks::day_of(clock.now_s))),
            false => self.global_range(req, clock),
        };
        let (from, to) = match range {
            Ok(r) => r,
            Err(p) => return problem(out, p),
        };
        let Some(control) = self.clicks.clone() else {
            return problem(out, analytics_off());
        };
        let op = move || match shlink {
            true => ApiOp::Shlink(Box::new(ApiOp::GlobalStats), 0, 0),
            false => ApiOp::GlobalStats,
        };
        if self.stats_in_flight >= crate::analytics::MAX_STATS_IN_FLIGHT_PER_CORE {
            return problem(out, Problem::unavailable(1));
        }
        if let Some(fleet) = &self.fleet_stats {
            // The fleet's figures, whole, from the database: no parts to gather.
            let msg = crate::analytics::Control::Global {
                reply: defer(out, op()),
                from,
                to,
            };
            if let Err(e) = fleet.try_send(msg) {
                let crate::analytics::Control::Global { reply, .. } = e.into_inner() else {
                    unreachable!("sent a Global");
                };
                self.stats_in_flight += 1;
                return self.fleet_stats_lost(reply);
            }
            self.stats_in_flight += 1;
            return;
        }
        let reply = defer(out, op());
        self.stats_in_flight += 1;
        let id = reply;
        self.gathering.insert(
            id,
            Gathering {
                from,
                to,
                parts: Vec::new(),
            },
        );
        for tx in &control {
            // A full queue: that aggregator's part is empty rather than the answer lost.
            if tx
                .try_send(crate::analytics::Control::Global { reply, from, to })
                .is_err()
            {
                let g = self.gathering.get_mut(&id).expect("inserted");
                g.parts.push(crate::analytics::stats::GlobalPart {
                    days: vec![[0; 3]; (to - from + 1) as usize],
                    ..Default::default()
                });
            }
        }
    }

    /// `GET /api/v1/stats` for a key with a role: the walk over the links it reaches first.
    pub(super) fn start_reach_stats(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        reach: &Reach,
        clock: &Clock,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let (from, to) = self.global_range(req, clock)?;
        let walk = super::overview_walk(reach);
        let (limit, filter) = (walk.limit, walk.filter.clone());
        let op = ApiOp::ReachStats(Box::new(ReachStats::new(walk, from, to)));
        let reply = defer(out, op);
        self.list_shard(reply, 0, None, limit, filter, mesh);
        Ok(())
    }

    /// The range of a server-wide stats query: 404 with analytics off, 422 for a bad range or
    /// a `domain` (these figures cover every domain the key reaches).
    fn global_range(&self, req: &Request<'_>, clock: &Clock) -> Result<(Day, Day), Problem> {
        if self.clicks.is_none() {
            return Err(analytics_off());
        }
        if url::form_urlencoded::parse(req.query.unwrap_or_default()).any(|(k, _)| k == "domain") {
            let why = "the server-wide stats cover every domain; domain is taken on a link's stats";
            return Err(Problem::invalid_field(Some("domain"), why));
        }
        let today = shards::clicks::day_of(clock.now_s);
        stats::parse_range(req.query, today).map(|(f, t, _)| (f, t))
    }

    /// A role's walk took a shard's page: `None` while the walk goes on or once its links'
    /// figures are to be asked (`on_reply` asks the first); `Some` once answered here (no
    /// link, or too many).
    pub(super) fn reach_walked(
        &self,
        rs: &mut ReachStats,
        items: Vec<LinkInfo>,
        complete: bool,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        rs.walk
            .take(items, (complete, None), self.router.shard_count())?;
        let links = rs.walk.items.len();
        if links > MAX_OVERVIEW_LINKS as usize {
            encode_problem(out, &Problem::too_many_links(MAX_OVERVIEW_LINKS), &[], f);
            return Some(());
        }
        if links == 0 {
            let body = self.name_top_links(rs.value());
            encode_json(out, &body, f);
            return Some(());
        }
        rs.start_sum();
        None
    }

    /// A role's stats after an owner's reply: the walk's next shard, or the first link's
    /// figures.
    pub(super) fn continue_reach_stats(
        &mut self,
        reply: ReplyTo,
        rs: &ReachStats,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        if rs.is_walking() {
            let (shard, limit, filter) = (rs.walk.shard, rs.walk.wanted(), rs.walk.filter.clone());
            self.list_shard(reply, shard, None, limit, filter, mesh);
            return Ok(());
        }
        self.query_stats(reply, rs.next_query())
    }

    /// A stats answer for a deferred request: a role's sum asks its next link (through
    /// `again`) or is done; a Shlink list page likewise (`shlink::on_list_visits`); any other
    /// answer is sent as it is, in Shlink's shape for a Shlink request.
    pub fn on_stats_body(
        &mut self,
        op: &mut ApiOp,
        body: &[u8],
        again: ReplyTo,
        mesh: &mut Mesh,
    ) -> StatsStep {
        match op {
            ApiOp::ReachStats(rs) => {
                if !rs.fold(body) {
                    return match self.query_stats(again, rs.next_query()) {
                        Ok(()) => StatsStep::Asked,
                        Err(p) => StatsStep::Failed(p),
                    };
                }
                let v = rs.value();
                StatsStep::Done(self.name_top_links(v))
            }
            ApiOp::GlobalStats => {
                let v = serde_json::from_slice(body).unwrap_or(Value::Null);
                StatsStep::Done(self.name_top_links(v))
            }
            ApiOp::Tags(t) => {
                if t.fold(body) {
                    return StatsStep::Done(serde_json::to_vec(&t.body()).expect("json"));
                }
                match self.query_stats(again, t.next_query()) {
                    Ok(()) => StatsStep::Asked,
                    Err(p) => StatsStep::Failed(p),
                }
            }
            ApiOp::ShlinkVisitLog(w) => self.on_visits_body(w, body, again, mesh),
            ApiOp::Shlink(..) => match self.on_list_visits(op, body, again) {
                Some(step) => step,
                None => StatsStep::Done(
                    self.shlink_stats_body(op, body)
                        .unwrap_or_else(|| body.to_vec()),
                ),
            },
            _ => StatsStep::Done(body.to_vec()),
        }
    }

    /// The JSON of server-wide figures, each top link named by its key and its domain.
    fn name_top_links(&self, mut v: Value) -> Vec<u8> {
        if let Some(top) = v["top_links"].as_array_mut() {
            for t in top {
                let stored = t["key"].as_str().unwrap_or_default().to_owned();
                let (number, key) = shards::link::split_stored_key(stored.as_bytes());
                t["key"] = String::from_utf8_lossy(key).into_owned().into();
                t["domain"] = match self.domains.get(number) {
                    Some(d) => d.name.clone().into(),
                    None => Value::Null,
                };
            }
        }
        serde_json::to_vec(&v).expect("stats serialize")
    }
}

/// 404: the server keeps no click figures (`--analytics off`).
fn analytics_off() -> Problem {
    let mut p = Problem::not_found();
    p.detail = "click analytics is off on this server (--analytics off)".into();
    p
}
