//! Shlink's visit lists, from the opt-in visit log (`--visit-log-days`,
//! `analytics::visit_log`): a short URL's visits (`/short-urls/{code}/visits`), every
//! link's (`/visits/non-orphan`), a domain's (`/domains/{domain}/visits`), a tag's
//! (`/tags/{tag}/visits`: a walk for its links first) and the orphan visits, with Shlink's
//! `page`, `itemsPerPage`, `startDate`, `endDate` and `excludeBots`.
//!
//! Orphan visits (`/visits/orphan`, with `type` and `domain`) are GETs of short codes no
//! link has (Shlink's `invalid_short_url` kind; the log has no other), kept apart from the
//! links' visits in the same books.
//!
//! A short URL's visits are its owner's aggregator's: the link is looked up first (404 and
//! the key's reach as for a read), then that aggregator answers the page. The other lists
//! ask every aggregator in turn for its newest `page * itemsPerPage` visits and merge them
//! here ([`VisitWalk`]); pages reach at most [`MAX_VISIT_WINDOW`] visits deep. A
//! `DELETE` of a short URL's visits counts them, then resets the link's figures at its
//! owner (the aggregates and the logged visits) and answers the count.

use super::{ApiFront, ApiOp, Defer};
use crate::analytics::visit_log::{VisitKeys, VisitLogQuery};
use crate::api::problem::Problem;
use crate::api::roles::Reach;
use crate::base::key::InlineKey;
use crate::http::{Method, Request};
use crate::mesh::{Mesh, ReplyTo};
use serde_json::{json, Value};

/// The deepest visit a page reaches (`page * itemsPerPage`): each aggregator sends that many
/// for a merged list, so this bounds an answer's work and size (about 300 bytes a visit).
pub const MAX_VISIT_WINDOW: u64 = 50_000;

/// A visit list being gathered.
#[derive(Debug)]
pub struct VisitWalk {
    query: VisitLogQuery,
    /// Visits skipped from the newest (page), by the one aggregator asked for a link, or
    /// here for a merged list.
    skip: u64,
    page: u32,
    per_page: u32,
    /// The aggregators to ask, in order, and how many have answered.
    cores: Vec<usize>,
    answered: usize,
    total: u64,
    visits: Vec<Value>,
    /// Shlink's `DELETE /short-urls/{code}/visits`: the key's reach, for the stats reset
    /// that follows the count, and whether it was sent.
    delete: Option<crate::api::roles::AuthorReach>,
    reset_sent: bool,
    /// A tag's visits: the walk for the links carrying it, until it is over.
    tagged: Option<super::listing::ListWalk>,
}

impl VisitWalk {
    /// A delete's reset was answered: the visits it deleted (`None`: not a delete).
    pub fn deleted(&self) -> Option<u64> {
        (self.delete.is_some() && self.reset_sent).then_some(self.total)
    }

    /// The short code of a link's visits (`None`: a list over many links).
    pub fn code(&self) -> Option<String> {
        match &self.query.keys {
            VisitKeys::One(k) => {
                let (_, key) = shards::link::split_stored_key(k.as_bytes());
                Some(String::from_utf8_lossy(key).into_owned())
            }
            _ => None,
        }
    }

    /// A tag's walk found no link carrying it.
    pub fn no_tagged_links(&self) -> bool {
        matches!(&self.query.keys, VisitKeys::Set(keys) if keys.is_empty())
    }

    /// The aggregator to ask next.
    fn next_core(&self) -> usize {
        self.cores[self.answered]
    }

    /// One aggregator's answer folded in; `true` once every one has answered.
    pub fn fold(&mut self, body: &[u8]) -> bool {
        let mut v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        self.total += v["total"].as_u64().unwrap_or(0);
        if let Value::Array(list) = v["visits"].take() {
            self.visits.extend(list);
        }
        self.answered += 1;
        self.answered == self.cores.len()
    }

    /// The page, newest first: `(total, visits)`.
    fn page(&mut self) -> (u64, Vec<Value>) {
        let mut all = std::mem::take(&mut self.visits);
        if self.cores.len() > 1 {
            let at = |v: &Value| v["at_ms"].as_u64().unwrap_or(0);
            all.sort_by_key(|v| std::cmp::Reverse(at(v)));
            let skip = usize::try_from(self.skip).unwrap_or(usize::MAX);
            all = all.into_iter().skip(skip).collect();
        }
        all.truncate(self.per_page as usize);
        (self.total, all)
    }
}

/// Which visit list a path names.
enum ListOf<'a> {
    Link(&'a [u8]),
    NonOrphan,
    Orphan,
    Domain(&'a [u8]),
    Tag(&'a [u8]),
}

fn list_of(path: &[u8]) -> Option<ListOf<'_>> {
    const SUFFIX: &[u8] = b"/visits";
    if path == b"/rest/v3/visits/non-orphan" {
        return Some(ListOf::NonOrphan);
    }
    if path == b"/rest/v3/visits/orphan" {
        return Some(ListOf::Orphan);
    }
    let inner = path.strip_suffix(SUFFIX)?;
    if let Some(code) = inner.strip_prefix(b"/rest/v3/short-urls/") {
        return Some(ListOf::Link(code));
    }
    if let Some(d) = inner.strip_prefix(b"/rest/v3/domains/") {
        return Some(ListOf::Domain(d));
    }
    inner.strip_prefix(b"/rest/v3/tags/").map(ListOf::Tag)
}

/// The query's paging and filters: page, items per page, the window and bots.
struct VisitParams {
    page: u32,
    per_page: u32,
    from_ms: u64,
    to_ms: u64,
    exclude_bots: bool,
}

fn parse_params(query: Option<&[u8]>) -> Result<VisitParams, Problem> {
    let mut p = VisitParams {
        page: 1,
        per_page: MAX_VISIT_WINDOW as u32,
        from_ms: 0,
        to_ms: u64::MAX,
        exclude_bots: false,
    };
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default()) {
        match &*k {
            "page" => {
                p.page = v.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    Problem::invalid_field(Some("page"), format!("page {v:?}: a number from 1"))
                })?;
            }
            "itemsPerPage" => {
                p.per_page = match v.parse::<i64>() {
                    Ok(-1) => MAX_VISIT_WINDOW as u32,
                    Ok(n) if n >= 1 => n.min(MAX_VISIT_WINDOW as i64) as u32,
                    _ => {
                        let why = format!("itemsPerPage {v:?}: a number from 1, or -1 for all");
                        return Err(Problem::invalid_field(Some("itemsPerPage"), why));
                    }
                };
            }
            "startDate" => p.from_ms = date_ms(&v, "startDate")?,
            "endDate" => p.to_ms = date_ms(&v, "endDate")?.saturating_add(999),
            "excludeBots" => p.exclude_bots = v == "true" || v == "1",
            _ => {}
        }
    }
    let deepest = u64::from(p.page) * u64::from(p.per_page);
    if deepest > MAX_VISIT_WINDOW {
        let why = format!(
            "page {} of {} visits reaches past the newest {MAX_VISIT_WINDOW}: narrow the dates",
            p.page, p.per_page
        );
        return Err(Problem::invalid_field(Some("page"), why));
    }
    Ok(p)
}

/// `?domain=` of a list over many links: `DEFAULT` or a declared domain's name (404 for
/// another).
fn domain_param(
    query: Option<&[u8]>,
    domains: &crate::api::domains::Domains,
) -> Result<Option<u32>, Problem> {
    let Some((_, name)) =
        url::form_urlencoded::parse(query.unwrap_or_default()).find(|(k, _)| k == "domain")
    else {
        return Ok(None);
    };
    domain_number(&name, domains).map(Some)
}

/// The number of the domain `name` names (`DEFAULT`: the default domain's).
fn domain_number(name: &str, domains: &crate::api::domains::Domains) -> Result<u32, Problem> {
    match name {
        "DEFAULT" => Ok(shards::link::DEFAULT_DOMAIN),
        _ => domains.by_name(name).map(|d| d.number).ok_or_else(|| {
            let mut e = Problem::not_found();
            e.detail = format!("no domain {name:?} is declared");
            e
        }),
    }
}

/// Shlink's orphan `type` filter: whether it admits the log's kind (`invalid_short_url`);
/// another of Shlink's kinds (`base_url`, `regular_404`) lists nothing.
fn orphan_type(query: Option<&[u8]>) -> Result<bool, Problem> {
    match url::form_urlencoded::parse(query.unwrap_or_default()).find(|(k, _)| k == "type") {
        None => Ok(true),
        Some((_, t)) => match &*t {
            "invalid_short_url" => Ok(true),
            "base_url" | "regular_404" => Ok(false),
            other => Err(Problem::invalid_field(
                Some("type"),
                format!("type {other:?}: base_url, invalid_short_url or regular_404"),
            )),
        },
    }
}

/// A path segment with its `%XX` escapes decoded (a tag may hold any character; a `+`
/// reads as a space, which a tag turns into `-` anyway).
fn percent_decoded(segment: &[u8]) -> String {
    let mut query = b"t=".to_vec();
    query.extend_from_slice(segment);
    url::form_urlencoded::parse(&query)
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// A date filter (RFC 3339, or a bare date's midnight UTC) in unix ms.
fn date_ms(v: &str, field: &'static str) -> Result<u64, Problem> {
    let full = match v.len() {
        10 => format!("{v}T00:00:00Z"),
        _ => v.to_string(),
    };
    crate::api::timefmt::parse_rfc3339_s(&full)
        .map(|s| s * 1000)
        .map_err(|e| {
            Problem::invalid_field(Some(field), format!("{field} {v:?} is not a date: {e}"))
        })
}

/// Whether `path` is one of Shlink's visit lists.
pub fn is_visit_list(path: &[u8]) -> bool {
    list_of(path).is_some()
}

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
        if delete && !matches!(list, ListOf::Link(_)) {
            return Err(Problem::method_not_allowed());
        }
        let keys = match list {
            ListOf::Link(code) => {
                shards::link::validate_key(code).map_err(|_| Problem::not_found())?;
                let ikey = self.item_key(req.query, code, reach)?;
                let mut walk = self.walk(VisitKeys::One(ikey), &p, vec![self.owner_of(&ikey)]);
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
                let mut visits = self.walk(VisitKeys::Set(Default::default()), &p, cores);
                visits.tagged = Some(walk);
                let reply = defer(out, ApiOp::ShlinkVisitLog(Box::new(visits)));
                self.ask_walk(reply, &first, mesh);
                return Ok(());
            }
            ListOf::NonOrphan => self.reach_keys(reach, domain_param(req.query, &self.domains)?)?,
            ListOf::Orphan => {
                let keys = self.reach_keys(reach, domain_param(req.query, &self.domains)?)?;
                // The log's orphans are Shlink's `invalid_short_url` kind only.
                match orphan_type(req.query)? {
                    true => keys,
                    false => VisitKeys::Set(Default::default()),
                }
            }
            ListOf::Domain(name) => {
                let name = std::str::from_utf8(name).unwrap_or_default();
                self.reach_keys(reach, Some(domain_number(name, &self.domains)?))?
            }
        };
        let cores = (0..self.router.cores()).collect();
        let orphans = matches!(list, ListOf::Orphan);
        let mut walk = self.walk(keys, &p, cores);
        walk.query.orphans = orphans;
        let (core, query) = (walk.next_core(), walk.ask());
        let reply = defer(out, ApiOp::ShlinkVisitLog(Box::new(walk)));
        self.send_visits(reply, core, query)
    }

    /// A walk over `cores` for `keys` with the request's paging.
    fn walk(&self, keys: VisitKeys, p: &VisitParams, cores: Vec<usize>) -> VisitWalk {
        let skip = u64::from(p.page - 1) * u64::from(p.per_page);
        VisitWalk {
            query: VisitLogQuery {
                keys,
                from_ms: p.from_ms,
                to_ms: p.to_ms,
                exclude_bots: p.exclude_bots,
                orphans: false,
                skip: 0,
                take: 0,
            },
            skip,
            page: p.page,
            per_page: p.per_page,
            cores,
            answered: 0,
            total: 0,
            visits: Vec::new(),
            delete: None,
            reset_sent: false,
            tagged: None,
        }
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
        let Some(control) = &self.clicks else {
            return Err(Problem::not_found());
        };
        if self.stats_in_flight >= crate::analytics::MAX_STATS_IN_FLIGHT_PER_CORE {
            return Err(Problem::unavailable(1));
        }
        let msg = crate::analytics::Control::Visits {
            reply,
            query: Box::new(q),
        };
        control[core]
            .try_send(msg)
            .map_err(|_| Problem::unavailable(1))?;
        self.stats_in_flight += 1;
        Ok(())
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
        if v["orphan"] == true {
            visit["type"] = "invalid_short_url".into();
        }
        visit
    }
}

impl VisitWalk {
    /// The query the next aggregator is sent: for one link (one aggregator) the page
    /// itself; for a merged list every visit down to the page's end.
    fn ask(&self) -> VisitLogQuery {
        let mut q = self.query.clone();
        match self.cores.len() {
            1 => {
                q.skip = self.skip;
                q.take = self.per_page as usize;
            }
            _ => q.take = (self.skip + u64::from(self.per_page)) as usize,
        }
        q
    }
}
