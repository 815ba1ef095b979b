//! Shlink's visit lists, from the opt-in visit log (`--visit-log-days`,
//! `analytics::visit_log`): a short URL's visits (`/short-urls/{code}/visits`), every
//! link's (`/visits/non-orphan`), a domain's (`/domains/{domain}/visits`), a tag's
//! (`/tags/{tag}/visits`: a walk for its links first) and the orphan visits, with Shlink's
//! `page`, `itemsPerPage`, `startDate`, `endDate` and `excludeBots`.
//!
//! Orphan visits (`/visits/orphan`, with `type` and `domain`) are GETs that reached no link
//! (Shlink's three kinds: `invalid_short_url`, `base_url`, `regular_404`), kept apart from
//! the links' visits in the same books; `DELETE /visits/orphan` resets every aggregator's
//! 404 counts and purges its logged orphans.
//!
//! A short URL's visits are its owner's aggregator's: the link is looked up first (404 and
//! the key's reach as for a read), then that aggregator answers the page. The other lists
//! ask every aggregator in turn for its newest `page * itemsPerPage` visits and merge them
//! here ([`VisitWalk`]); pages reach at most [`MAX_VISIT_WINDOW`] visits deep. A
//! `DELETE` of a short URL's visits counts them, then resets the link's figures at its
//! owner (the aggregates and the logged visits) and answers the count.

use super::visit_walk::{
    domain_number, domain_param, list_of, orphan_type, parse_params, percent_decoded, ListOf,
    VisitWalk,
};
use super::{ApiFront, ApiOp, Defer};
use crate::analytics::visit_log::{VisitKeys, VisitLogQuery};
use crate::api::problem::Problem;
use crate::api::roles::Reach;
use crate::base::key::InlineKey;
use crate::http::{Method, Request};
use crate::mesh::{Mesh, ReplyTo};
use serde_json::{json, Value};

impl ApiFront {
    /// Starts a visit list (the visit log is on; the key is admitted with `reach`).
    pub(super) fn start_visit_log(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        reach: &Reach,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let p = parse_params(req.query)?;
        let list = list_of(req.path).ok_or_else(Problem::not_found)?;
        let delete = req.method == Method::Delete;
        if delete && matches!(list, ListOf::Orphan) {
            return self.delete_orphans(out, defer, reach);
        }
        if delete && !matches!(list, ListOf::Link(_)) {
            return Err(Problem::method_not_allowed());
        }
        let keys = match list {
            ListOf::Link(code) => {
                shards::link::validate_key(code).map_err(|_| Problem::not_found())?;
                let ikey = self.item_key(req.query, code, reach)?;
                let mut walk = VisitWalk::new(VisitKeys::One(ikey), &p, vec![self.owner_of(&ikey)]);
                if delete {
                    walk.delete = Some(reach.author);
                    walk.per_page = 0;
                }
                let (_, ask) =
                    super::item_ask(Method::Get, (ikey, reach), &[], (0, &self.blocklist))?;
                let reply = defer(out, ApiOp::ShlinkVisitLog(Box::new(walk)));
                let owner = self.owner_of(&ikey);
                mesh.deliver(owner, ask.message(reply));
                return Ok(());
            }
            ListOf::Tag(tag) => {
                // The links carrying the tag first (a walk, as a tag list's), then their
                // visits from every aggregator.
                let tag = percent_decoded(tag);
                let tag = shards::labels::normalize_tag(&tag).map_err(|e| {
                    let mut p = Problem::not_found();
                    p.detail = format!("no link carries such a tag: {e}");
                    p
                })?;
                let mut walk = super::overview_walk(reach);
                std::sync::Arc::make_mut(&mut walk.filter).tags = Some(crate::mesh::TagFilter {
                    tags: vec![tag.into()],
                    all: false,
                });
                let first = walk.clone_empty();
                let cores = (0..self.router.cores()).collect();
                let mut visits = VisitWalk::new(VisitKeys::Set(Default::default()), &p, cores);
                visits.tagged = Some(walk);
                let reply = defer(out, ApiOp::ShlinkVisitLog(Box::new(visits)));
                self.ask_walk(reply, &first, mesh);
                return Ok(());
            }
            ListOf::NonOrphan | ListOf::Orphan => {
                self.reach_keys(reach, domain_param(req.query, &self.domains)?)?
            }
            ListOf::Domain(name) => {
                let name = std::str::from_utf8(name).unwrap_or_default();
                self.reach_keys(reach, Some(domain_number(name, &self.domains)?))?
            }
        };
        let cores = (0..self.router.cores()).collect();
        let mut walk = VisitWalk::new(keys, &p, cores);
        if matches!(list, ListOf::Orphan) {
            walk.query.orphans = true;
            walk.query.orphan_kind = orphan_type(req.query)?;
        }
        let (core, query) = (walk.next_core(), walk.ask());
        let reply = defer(out, ApiOp::ShlinkVisitLog(Box::new(walk)));
        self.send_visits(reply, core, query)
    }

    /// Shlink's `DELETE /visits/orphan` (admin keys): every aggregator in turn resets its
    /// 404 counts and purges its logged orphan visits; the answer is how many they counted.
    fn delete_orphans(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        reach: &Reach,
    ) -> Result<(), Problem> {
        if !reach.admin {
            let mut p = Problem::admin_only();
            p.detail = "orphan visits are deleted by admin keys only".into();
            return Err(p);
        }
        let cores = (0..self.router.cores()).collect();
        let p = parse_params(None)?;
        let mut walk = VisitWalk::new(VisitKeys::All, &p, cores);
        walk.query.orphans = true;
        walk.query.delete_orphans = true;
        let (core, query) = (walk.next_core(), walk.ask());
        let reply = defer(out, ApiOp::ShlinkVisitLog(Box::new(walk)));
        self.send_visits(reply, core, query)
    }

    fn owner_of(&self, key: &InlineKey) -> usize {
        self.router.owner(key.as_bytes()).core
    }

    /// The links a list over many reaches: every link's, or (a domain-only key, or `domain`
    /// asked) its domains'. An author-only key's links cannot be told from visits (they
    /// carry no author): refused.
    fn reach_keys(&self, reach: &Reach, domain: Option<u32>) -> Result<VisitKeys, Problem> {
        if reach.author.author_only() != "" {
            let mut p = Problem::admin_only();
            p.detail = "an author-only key lists the visits of one short URL at a time".into();
            return Err(p);
        }
        match (domain, &reach.domains) {
            (Some(d), _) if !reach.domain_ok(d) => {
                let name = self
                    .domains
                    .get(d)
                    .map(|d| d.name.clone())
                    .unwrap_or_default();
                Err(Problem::domain_not_allowed(&name))
            }
            (Some(d), _) => Ok(VisitKeys::Domains(vec![d].into())),
            (None, Some(list)) => Ok(VisitKeys::Domains(list.clone())),
            (None, None) => Ok(VisitKeys::All),
        }
    }

    /// The walk's next step after an owner's reply or an aggregator's answer: a tag's walk
    /// goes on, or the next aggregator is asked.
    pub(super) fn query_visits(
        &mut self,
        reply: ReplyTo,
        w: &VisitWalk,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        if let Some(walk) = &w.tagged {
            self.ask_walk(reply, walk, mesh);
            return Ok(());
        }
        self.send_visits(reply, w.next_core(), w.ask())
    }

    /// A tag walk's page (`Listed`): `Ok(true)` once the walk is over (its links' visits
    /// are asked next), `Ok(false)` while it goes on; past [`super::tags::MAX_TAGGED_LINKS`]
    /// links refused.
    pub(super) fn visit_tag_walked(
        &self,
        w: &mut VisitWalk,
        page: crate::mesh::ListedShard,
    ) -> Result<bool, Problem> {
        let Some(walk) = &mut w.tagged else {
            return Err(Problem::unavailable(1));
        };
        match super::tags::take_tagged(walk, page, self.router.shard_count()) {
            None => Err(Problem::too_many_links(super::tags::MAX_TAGGED_LINKS)),
            Some(false) => Ok(false),
            Some(true) => {
                let keys: Vec<InlineKey> = walk.items.iter().map(|i| i.key).collect();
                w.query.keys = VisitKeys::Set(std::sync::Arc::new(keys));
                w.tagged = None;
                Ok(true)
            }
        }
    }

    fn send_visits(
        &mut self,
        reply: ReplyTo,
        core: usize,
        q: VisitLogQuery,
    ) -> Result<(), Problem> {
        let msg = crate::analytics::Control::Visits {
            reply,
            query: Box::new(q),
        };
        self.ask_aggregator(core, msg, false)
    }

    /// An aggregator's answer: the next one asked, or the page in Shlink's shape.
    pub(super) fn on_visits_body(
        &mut self,
        w: &mut VisitWalk,
        body: &[u8],
        again: ReplyTo,
        mesh: &mut Mesh,
    ) -> super::stats_sum::StatsStep {
        use super::stats_sum::StatsStep;
        if !w.fold(body) {
            return match self.query_visits(again, w, mesh) {
                Ok(()) => StatsStep::Asked,
                Err(p) => StatsStep::Failed(p),
            };
        }
        if let (Some(reach), VisitKeys::One(key)) = (w.delete, &w.query.keys) {
            // Counted: now the link's figures and logged visits are reset at its owner
            // (`visit_lookup_replied` answers once it is done).
            let reset = crate::mesh::WriteReq::ResetStats { key: *key, reach };
            w.reset_sent = true;
            mesh.deliver(
                self.owner_of(key),
                crate::mesh::OwnerAsk::Write(reset).message(again),
            );
            return StatsStep::Asked;
        }
        if w.query.delete_orphans {
            let body = json!({ "deletedVisits": w.total });
            return StatsStep::Done(serde_json::to_vec(&body).expect("json"));
        }
        let (page, per_page) = (w.page, w.per_page);
        let (total, visits) = w.page();
        let data: Vec<Value> = visits.iter().map(|v| self.shlink_visit(v)).collect();
        let pages = total.div_ceil(u64::from(per_page).max(1));
        let body = json!({"visits": {
            "data": data,
            "pagination": {
                "currentPage": page,
                "pagesCount": pages,
                "itemsPerPage": per_page,
                "itemsInCurrentPage": data.len(),
                "totalItems": total,
            },
        }});
        StatsStep::Done(serde_json::to_vec(&body).expect("json"))
    }

    /// One visit as Shlink lists it. Only the country is located (its code, as its name
    /// too: ricochet's GeoIP lookups keep no names, regions or cities).
    fn shlink_visit(&self, v: &Value) -> Value {
        let stored = v["key"].as_str().unwrap_or_default();
        let (_, base, key) = self.stored_key_parts(stored.as_bytes());
        let country = v["country"].as_str().unwrap_or("ZZ");
        let location = (country != crate::analytics::NO_COUNTRY).then(|| {
            json!({"countryCode": country, "countryName": country, "regionName": null,
                   "cityName": null, "latitude": null, "longitude": null, "timezone": null,
                   "isEmpty": false})
        });
        let at_s = v["at_ms"].as_u64().unwrap_or(0) / 1000;
        let mut visit = json!({
            "referer": v["referrer"],
            "date": crate::api::timefmt::format_rfc3339_utc(at_s),
            "userAgent": v["user_agent"],
            "visitLocation": location,
            "potentialBot": v["bot"],
            "visitedUrl": format!("{}/{key}", base.trim_end_matches('/')),
            "redirectUrl": null,
        });
        if let Some(kind) = v["orphan"].as_str() {
            visit["type"] = kind.into();
            // The URL asked for: the code's, the base URL, or the path (its key).
            let url = match kind {
                "base_url" => Some(format!("{}/", base.trim_end_matches('/'))),
                "regular_404" => Some(format!("{}{key}", base.trim_end_matches('/'))),
                _ => None,
            };
            if let Some(url) = url {
                visit["visitedUrl"] = url.into();
            }
        }
        visit
    }
}
