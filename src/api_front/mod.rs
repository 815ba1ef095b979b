//! The API's requesting side, on the core that holds the HTTP connection: routing under
//! `/api/v1/urls`, authentication, rate limit, validation, key choice (`creates.rs`), sending
//! the request to its owner, and encoding the owner's answer.
//!
//! Every cross-core step is a mesh message, so nothing here takes a lock. This is not the
//! redirect hot path: allocation is fine here.

pub mod creates;
pub mod global_stats;
pub mod listing;
pub mod preflight;
pub mod robots;
pub mod shlink;
pub mod stats_sum;
pub mod tag_api;
pub mod tags;
pub mod visit_walk;
pub mod visits;

use crate::api::idempotency::{request_hash, scope_string, IdemScope};
use crate::api::problem::{Problem, PROBLEM_CONTENT_TYPE};
use crate::api::request::{link_json, parse_create, parse_patch, MAX_REQUEST_BODY_BYTES};
use crate::api::roles::Reach;
use crate::base::clock::Clock;
use crate::base::key::InlineKey;
use crate::http::encode::{self, Conn as Persist, Framing, Response};
use crate::http::parse::{Method, Request};
use crate::http::status::Status;
use crate::mesh::router::Router;
use crate::mesh::{
    ApiMsg, LinkInfo, ListFilter, Mesh, OwnerAsk, ReadReq, ReplyTo, WriteOutcome, WriteReq,
};
use creates::Creates;
use std::sync::Arc;
use std::time::Instant;

pub use crate::route::API_PREFIX;
pub(super) const URLS: &[u8] = b"/api/v1/urls";
/// The server-wide click stats.
pub(super) const GLOBAL_STATS: &[u8] = b"/api/v1/stats";
/// `/api/v1/urls/{key}` + this: the link's click stats.
pub(super) const STATS_SUFFIX: &[u8] = b"/stats";

/// Generated-key creates that hit an existing key (a custom alias took it) retry with the next
/// ID this many times before giving up with 503.
pub const MAX_CREATE_TRIES: u8 = 8;

/// `Retry-After` of a 503 for a token that matches no key while the fleet's keys are not read
/// yet (a fleet node started while its database did not answer; the keys are read about once
/// a second once it does).
pub const FLEET_KEYS_RETRY_AFTER_S: u64 = 1;

/// What an API request was, so its answer can be encoded (and a create retried).
#[derive(Debug)]
pub enum ApiOp {
    Create {
        req: Box<crate::api::request::CreateRequest>,
        created_at_s: u64,
        tries: u8,
    },
    Get,
    Patch,
    Delete,
    /// `GET /api/v1/urls`: the walk over the shards so far.
    List(listing::ListWalk),
    /// A request through Shlink's REST API (`shlink.rs`): the native operation, answered in
    /// Shlink's shape; for a list, the page and its size.
    Shlink(Box<ApiOp>, u32, u32),
    /// `GET /api/v1/urls/{key}/stats`: first the owner says the link exists, then its
    /// aggregator answers the query.
    Stats(Box<crate::analytics::stats::StatsQuery>),
    /// `DELETE /api/v1/urls/{key}/stats`.
    ResetStats,
    /// `GET /api/v1/stats`: answered by the aggregators only (`ApiFront::gather`).
    GlobalStats,
    /// A Shlink short URL read: the link, while its aggregator counts its visits over the
    /// whole click window (`shlink::shlink_stats_body`).
    ShlinkVisits(Box<LinkInfo>),
    /// Shlink's `PATCH /rest/v3/domains/redirects`, answered by `keywatch` (`EditDone`).
    DomainRedirects,
    /// A Shlink list page whose links' visit totals are asked of their aggregators, one link
    /// at a time (`shlink::ListVisits`).
    ShlinkListVisits(Box<ListVisits>),
    /// `GET /api/v1/stats` by a key with a role: its links walked, then their figures summed
    /// (`global_stats::ReachStats`).
    ReachStats(Box<stats_sum::ReachStats>),
    /// Shlink's `GET` or `POST /rest/v3/short-urls/{code}/redirect-rules`: the read or
    /// PATCH inside, answered with the link's rules in Shlink's shape.
    ShlinkRules(Box<ApiOp>),
    /// `GET /api/v1/tags`, Shlink's `GET /rest/v3/tags` or `/tags/stats`: the walk over the
    /// tagged links, then (stats) their totals (`tags::TagsWalk`).
    Tags(Box<tags::TagsWalk>),
    /// `PATCH` or `DELETE /api/v1/tags/{tag}`, Shlink's `PUT` or `DELETE /rest/v3/tags`: the
    /// walk over the links carrying the tags, then each one changed in turn
    /// (`tags::TagEdit`).
    TagEdit(Box<tags::TagEdit>),
    /// Shlink's visit lists from the visit log (`visit_walk::VisitWalk`): for one link, the
    /// link's lookup at its owner, then its aggregator's page; otherwise every aggregator's
    /// newest visits in turn, merged.
    ShlinkVisitLog(Box<visit_walk::VisitWalk>),
    /// `/robots.txt` of domain `domain`: the walk over its crawlable links (`robots.rs`).
    Robots {
        domain: u32,
        walk: listing::ListWalk,
    },
}

impl ApiOp {
    /// Whether it came through Shlink's API (its answers in Shlink's shape).
    pub fn is_shlink(&self) -> bool {
        matches!(self, ApiOp::Shlink(..) | ApiOp::ShlinkVisitLog(_))
            || matches!(self, ApiOp::Tags(t) if !t.native)
            || matches!(self, ApiOp::TagEdit(e) if !e.native)
    }

    /// The native operation (under a Shlink envelope, if any).
    pub fn core(&self) -> &ApiOp {
        match self {
            ApiOp::Shlink(inner, ..) | ApiOp::ShlinkRules(inner) => inner.core(),
            op => op,
        }
    }
}

/// A Shlink list page (the walk's items `start..end`) waiting for its links' visit totals:
/// asked of each link's aggregator in turn (a page is at most `itemsPerPage` links).
#[derive(Debug)]
pub struct ListVisits {
    walk: listing::ListWalk,
    start: usize,
    end: usize,
    /// Clicks and bot clicks of the links asked so far, in page order.
    totals: Vec<(u64, u64)>,
}

impl ListVisits {
    /// If the list is ordered by visits: its links and their totals sorted by them (ties by
    /// stored key, ascending), then `true`. Called once every link's totals are in.
    pub fn sort_by_visits(&mut self) -> bool {
        let Some((non_bots, descending)) =
            self.walk.scan.as_ref().and_then(listing::Scan::by_visits)
        else {
            return false;
        };
        let figure = |(clicks, bots): (u64, u64)| match non_bots {
            true => clicks.saturating_sub(bots),
            false => clicks,
        };
        let mut pairs: Vec<(LinkInfo, (u64, u64))> = std::mem::take(&mut self.walk.items)
            .into_iter()
            .zip(self.totals.drain(..))
            .collect();
        pairs.sort_by(|a, b| {
            let o = figure(a.1).cmp(&figure(b.1));
            let o = if descending { o.reverse() } else { o };
            o.then_with(|| a.0.key.as_bytes().cmp(b.0.key.as_bytes()))
        });
        (self.walk.items, self.totals) = pairs.into_iter().unzip();
        true
    }

    /// The whole-window stats query of the next link without totals.
    pub fn next_query(&self) -> crate::analytics::stats::StatsQuery {
        let info = &self.walk.items[self.start + self.totals.len()];
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        crate::analytics::stats::StatsQuery::whole_window(info.key, today)
    }
}

/// Registers an API request as deferred on its connection (its answer goes where the output
/// ends now) and returns the address the owner answers to.
pub type Defer<'a> = dyn FnMut(&[u8], ApiOp) -> ReplyTo + 'a;

/// What became of a deferred API request after an owner's reply ([`ApiFront::on_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Its answer is encoded: the connection sends it.
    Answered,
    /// Its next step is under way: it stays deferred.
    Continues,
}

/// The requesting side of the API on one core.
pub struct ApiFront {
    router: Router,
    keys: Arc<crate::api::keys::ApiKeyStore>,
    /// The declared domains (`api::domains`).
    domains: Arc<crate::api::domains::Domains>,
    blocklist: Arc<crate::api::blocklist::Blocklist>,
    /// New key stores and domains from `keywatch`, taken at each sweep.
    key_updates: crossbeam::channel::Receiver<Arc<crate::api::Reloaded>>,
    /// Edits of the domain book go to `keywatch` (a file or database write), answers back.
    editor: crate::node::keywatch::BookEditor,
    /// The node's per-key create budgets, shared with every core.
    ratelimit: Arc<crate::api::ratelimit::RateLimiter>,
    public_url: String,
    /// Key choice for creates: this core's ID ranges and the key generator.
    pub creates: Creates,
    /// Every core's click aggregator (`None`: analytics off), and this core's stats queries
    /// in flight.
    clicks: Option<Vec<crate::analytics::ControlTx>>,
    /// `--forward-query`: what a link without its own `forward_query` does (Shlink's
    /// answers show the effective value).
    forward_query_default: bool,
    /// Fleet mode: stats are the fleet's, answered by the fleet stats thread.
    fleet_stats: Option<crate::analytics::ControlTx>,
    /// Fleet mode: server-wide stats requests whose query found the queue full; the core
    /// answers them 503 (`take_lost_stats`).
    lost_stats: Vec<ReplyTo>,
    stats_in_flight: usize,
    /// `GET /api/v1/stats` requests waiting for the aggregators' parts: range, parts so far.
    gathering: std::collections::HashMap<ReplyTo, stats_sum::Gathering>,
    /// Each domain's `robots.txt` text, kept for `robots::ROBOTS_TTL_S`.
    robots: robots::RobotsCache,
    /// Which origins' pages may read the answers (`--cors-origins`).
    cors: crate::api::cors::CorsOrigins,
    /// `--visit-log-days` is on: Shlink's visit lists are answered (`visits.rs`).
    visit_log: bool,
}

impl ApiFront {
    pub fn new(
        router: Router,
        reloaded: crate::api::Reloaded,
        key_updates: crossbeam::channel::Receiver<Arc<crate::api::Reloaded>>,
        editor: crate::node::keywatch::BookEditor,
        ratelimit: Arc<crate::api::ratelimit::RateLimiter>,
        public_url: String,
        creates: Creates,
    ) -> ApiFront {
        ApiFront {
            router,
            keys: reloaded.keys,
            domains: reloaded.domains,
            blocklist: reloaded.blocklist,
            key_updates,
            editor,
            ratelimit,
            public_url,
            creates,
            clicks: None,
            stats_in_flight: 0,
            fleet_stats: None,
            forward_query_default: false,
            lost_stats: Vec::new(),
            gathering: Default::default(),
            robots: Default::default(),
            cors: Default::default(),
            visit_log: false,
        }
    }

    /// `--visit-log-days` is on.
    pub fn set_visit_log(&mut self, on: bool) {
        self.visit_log = on;
    }

    /// `--cors-origins` (`api::cors`).
    pub fn set_cors(&mut self, origins: crate::api::cors::CorsOrigins) {
        self.cors = origins;
    }

    /// The `Access-Control-Allow-Origin` of an answer to `req`, if its origin may read it.
    pub fn cors_for(&self, req: &Request<'_>) -> Option<&'static str> {
        self.cors.allow(req.origin)
    }

    /// How an answer to `req` goes out at once (a HEAD's without its body).
    pub(crate) fn framing<'c>(
        &self,
        req: &Request<'_>,
        persist: Persist,
        clock: &'c Clock,
    ) -> Framing<'c> {
        Framing {
            head_only: req.method == Method::Head,
            conn: persist,
            date: &clock.date,
            cors: self.cors_for(req),
        }
    }

    /// `--forward-query`, for answers that show a link's effective `forwardQuery`.
    pub fn set_forward_query_default(&mut self, on: bool) {
        self.forward_query_default = on;
    }

    /// Whether visits of `info` forward their query: its own `forward_query`, else its
    /// domain's, else `--forward-query` (what Shlink's `forwardQuery` shows).
    pub fn forwards_query(&self, info: &LinkInfo) -> bool {
        let domain = shards::link::split_stored_key(info.key.as_bytes()).0;
        info.behaviour
            .forward_query
            .or(self.domains.visits(domain).forward_query)
            .unwrap_or(self.forward_query_default)
    }

    /// Stats queries go to the aggregators through `control` (by core).
    pub fn set_clicks(
        &mut self,
        control: Vec<crate::analytics::ControlTx>,
        fleet: Option<crate::analytics::ControlTx>,
    ) {
        self.clicks = Some(control);
        self.fleet_stats = fleet;
    }

    /// Sends a stats query to the aggregator of its key's owner. `Err`: the answer to give
    /// now instead (too many queries in flight, or the aggregator's queue is full).
    pub fn query_stats(
        &mut self,
        reply: ReplyTo,
        query: crate::analytics::stats::StatsQuery,
    ) -> Result<(), Problem> {
        let owner = self.router.owner(query.key.as_bytes()).core;
        let msg = crate::analytics::Control::Stats { reply, query };
        self.ask_aggregator(owner, msg, true)
    }

    /// Sends `msg` to core `core`'s aggregator (or, `fleet` and in fleet mode, to the fleet
    /// stats thread), counted among the core's queries in flight. `Err`: the answer to give
    /// now instead (analytics off, too many in flight, a full queue).
    pub(crate) fn ask_aggregator(
        &mut self,
        core: usize,
        msg: crate::analytics::Control,
        fleet: bool,
    ) -> Result<(), Problem> {
        let Some(control) = &self.clicks else {
            return Err(Problem::not_found());
        };
        if self.stats_in_flight >= crate::analytics::MAX_STATS_IN_FLIGHT_PER_CORE {
            return Err(Problem::unavailable(1));
        }
        let to = match (&self.fleet_stats, fleet) {
            (Some(stats), true) => stats,
            _ => &control[core],
        };
        to.try_send(msg).map_err(|_| Problem::unavailable(1))?;
        self.stats_in_flight += 1;
        Ok(())
    }

    fn fleet_stats_lost(&mut self, reply: ReplyTo) {
        self.lost_stats.push(reply);
    }

    /// Stats requests to answer 503 now (fleet mode: the stats thread's queue was full).
    pub fn take_lost_stats(&mut self) -> Vec<ReplyTo> {
        std::mem::take(&mut self.lost_stats)
    }

    /// A stats answer arrived.
    pub fn stats_done(&mut self) {
        self.stats_in_flight = self.stats_in_flight.saturating_sub(1);
    }

    /// Takes reloaded API keys, domains and blocklist, if `keywatch` offered them; returns
    /// them for the core's connections.
    pub fn take_reloads(&mut self) -> Option<Arc<crate::api::Reloaded>> {
        let r = self.key_updates.try_recv().ok()?;
        self.keys = r.keys.clone();
        self.domains = r.domains.clone();
        self.blocklist = r.blocklist.clone();
        Some(r)
    }

    /// 422 `blocked-target` if the blocklist names `url` (a create's or a PATCH's target).
    pub(crate) fn check_target(&self, url: &str) -> Result<(), Problem> {
        match self.blocklist.blocking_url(url) {
            Some(entry) => Err(Problem::blocked_target(&entry)),
            None => Ok(()),
        }
    }

    /// [`ApiFront::check_target`] of every rule's target.
    pub(crate) fn check_rule_targets(&self, rules: &shards::rules::Rules) -> Result<(), Problem> {
        check_rule_targets(&self.blocklist, rules)
    }

    /// The abuse blocklist in force here.
    pub fn blocklist(&self) -> &Arc<crate::api::blocklist::Blocklist> {
        &self.blocklist
    }

    /// Answers of `keywatch` to this core's domain edits.
    pub fn take_edits_done(&mut self) -> Option<crate::node::keywatch::EditDone> {
        let d = self
            .editor
            .refused
            .pop()
            .or_else(|| self.editor.done.try_recv().ok())?;
        self.editor.in_flight -= 1;
        Some(d)
    }

    /// A link's domain name (`None` on an unnamed default domain), the base of its short URL
    /// and its key. A named domain's links are at its own name; the default domain's (named
    /// or not) at --public-url, as before domains; a removed domain's links keep the public
    /// URL's (they have no other to give).
    fn short_url_parts<'a>(&'a self, info: &'a LinkInfo) -> (Option<&'a str>, String, &'a str) {
        self.stored_key_parts(info.key.as_bytes())
    }

    /// [`ApiFront::short_url_parts`] of a stored key.
    fn stored_key_parts<'a>(&'a self, stored: &'a [u8]) -> (Option<&'a str>, String, &'a str) {
        let (number, key) = shards::link::split_stored_key(stored);
        let key = std::str::from_utf8(key).unwrap_or("");
        let named = self.domains.get(number);
        let base = match named {
            Some(d) if number != shards::link::DEFAULT_DOMAIN => {
                format!("{}://{}", d.scheme.as_str(), d.name)
            }
            _ => self.public_url.clone(),
        };
        (named.map(|d| d.name.as_str()), base, key)
    }

    /// The declared domains in force.
    pub fn domains(&self) -> &Arc<crate::api::domains::Domains> {
        &self.domains
    }

    /// The number of the live domain `name` (`None`: the default domain); 422 naming it if
    /// no live domain has that name.
    fn domain_number(&self, name: Option<&str>) -> Result<u32, Problem> {
        let Some(name) = name else {
            return Ok(shards::link::DEFAULT_DOMAIN);
        };
        self.domains.by_name(name).map(|d| d.number).ok_or_else(|| {
            Problem::invalid_field(
                Some("domain"),
                format!("{name:?} is not a domain this server answers for"),
            )
        })
    }

    /// The stored key of an item path's `key` on the domain its query's `domain` names; 404
    /// when that domain is out of the caller's reach (as if the link did not exist).
    fn item_key(
        &self,
        query: Option<&[u8]>,
        key: &[u8],
        reach: &Reach,
    ) -> Result<InlineKey, Problem> {
        let ikey = valid_key(key)?;
        let mut domain = None;
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default()) {
            if name == "domain" {
                domain = Some(value.into_owned());
            }
        }
        let number = self.domain_number(domain.as_deref())?;
        if !reach.domain_ok(number) {
            return Err(Problem::not_found());
        }
        if number == shards::link::DEFAULT_DOMAIN {
            return Ok(ikey);
        }
        let mut buf = [0u8; shards::link::MAX_STORED_KEY_BYTES];
        let n = shards::link::stored_key(number, key, &mut buf);
        Ok(InlineKey::new(&buf[..n]).expect("a stored key fits inline"))
    }

    /// Answers an API request into `out`, or routes it to its owner after registering it
    /// with `defer`. `body` is the complete body.
    #[allow(clippy::too_many_arguments)]
    pub fn handle(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        body: &[u8],
        persist: Persist,
        clock: &Clock,
        mesh: &mut Mesh,
    ) {
        let f = self.framing(req, persist, clock);
        let Admitted {
            collection,
            key,
            caller,
            stats,
            tags,
        } = match self.check_head(req) {
            Ok(ok) => ok,
            Err(refusal) => return refusal.encode(out, f),
        };
        let reach = caller.role.reach(caller.author(), &self.domains);
        if req.path == GLOBAL_STATS {
            if reach.admin {
                return self.query_global(out, defer, req, persist, clock, false);
            }
            if let Err(p) = self.start_reach_stats(out, defer, req, &reach, clock, mesh) {
                encode_problem(out, &p, &[], f);
            }
            return;
        }
        let writes = req.method != Method::Get && req.method != Method::Head;
        if reach.read_only && writes {
            return encode_problem(out, &Problem::read_only_key(), &[], f);
        }
        // `check_head` refused a declared body over the limit; `body` is exactly that long.
        debug_assert!(body.len() <= MAX_REQUEST_BODY_BYTES);
        let now_s = clock.now_s;
        if let Some(path) = tags {
            let admitted = (path, reach.admin, &reach);
            if let Err(p) = self.start_tags(out, defer, (req, body), admitted, mesh) {
                encode_problem(out, &p, &[], f);
            }
            return;
        }
        let started = match (collection, key) {
            (true, _) if req.method == Method::Get => {
                self.start_list(out, defer, req, &reach, mesh)
            }
            (true, _) => self.start_create(out, defer, req, &caller, &reach, body, now_s, mesh),
            (false, Some(key)) if stats => {
                self.start_stats(out, defer, req, (key, &reach), now_s, mesh)
            }
            (false, Some(key)) => {
                self.start_item(out, defer, req, (key, &reach), body, now_s, mesh)
            }
            (false, None) => unreachable!("check_head admits an item path with its key"),
        };
        if let Err(p) = started {
            encode_problem(out, &p, &[], f);
        }
    }

    /// `/robots.txt` of domain `domain` (`robots.rs`): the kept text, or a walk of the
    /// domain's crawlable links deferred with `defer`.
    pub fn robots(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        domain: u32,
        (f, now_s): (Framing<'_>, u64),
        mesh: &mut Mesh,
    ) {
        match self.robots.lookup(domain, now_s) {
            robots::Lookup::Serve(body) => robots::answer(out, &body, f),
            robots::Lookup::Walk(walk) => {
                let (limit, filter) = (walk.limit, walk.filter.clone());
                let reply = defer(out, ApiOp::Robots { domain, walk });
                self.list_shard(reply, 0, None, limit, filter, mesh);
            }
        }
    }

    /// `GET /api/v1/urls`: the list's walk, from the shard its cursor names.
    fn start_list(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        reach: &Reach,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let mut walk = listing::parse_query(req.query, self.router.shard_count(), &self.domains)?;
        let asked = walk.filter.clone();
        let mut filter = list_filter(asked.domains.as_deref(), reach);
        let f = Arc::make_mut(&mut filter);
        f.take_content(&asked);
        walk.filter = filter;
        let first = walk.clone_empty();
        let reply = defer(out, ApiOp::List(walk));
        self.ask_walk(reply, &first, mesh);
        Ok(())
    }

    /// Refuses a create the caller's role does not allow on domain `number` (403
    /// `domain-not-allowed`: the request names the domain, so nothing leaks).
    fn check_create_domain(
        &self,
        cr: &crate::api::request::CreateRequest,
        reach: &Reach,
    ) -> Result<(), Problem> {
        if reach.domain_ok(cr.domain_number) {
            return Ok(());
        }
        let name = cr.domain.as_deref().unwrap_or("the default domain");
        Err(Problem::domain_not_allowed(name))
    }

    /// `POST /api/v1/urls`: a create, sent to its idempotency scope's owner under an
    /// Idempotency-Key, else started here (`Creates`).
    #[allow(clippy::too_many_arguments)]
    fn start_create(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        caller: &crate::api::keys::Caller,
        reach: &Reach,
        body: &[u8],
        now_s: u64,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let key_id = caller.id;
        self.ratelimit
            .check(key_id.to_u64(), caller.limits, Instant::now())?;
        let mut cr = parse_create(body, now_s)?;
        self.check_target(&cr.long_url)?;
        self.check_rule_targets(&cr.rules)?;
        cr.domain_number = self.domain_number(cr.domain.as_deref())?;
        self.check_create_domain(&cr, reach)?;
        cr.author = caller.author();
        self.creates.check_alias(&cr)?;
        let idem = match req.idempotency_key {
            Some(h) => Some(IdemScope::new(key_id, h)?),
            None => None,
        };
        let op = ApiOp::Create {
            req: Box::new(cr.clone()),
            created_at_s: now_s,
            tries: 0,
        };
        let reply = defer(out, op);
        match idem {
            Some(scope) => {
                let hash = request_hash(&cr);
                let owner = self.router.owner(scope_string(&scope).as_bytes()).core;
                let req = Box::new(cr);
                let msg = ApiMsg::IdemCreate {
                    reply,
                    scope,
                    hash,
                    req,
                    created_at_s: now_s,
                };
                mesh.deliver(owner, msg);
            }
            None => self
                .creates
                .start(reply, Box::new(cr), now_s, 0, None, mesh),
        }
        Ok(())
    }

    /// `GET` or `DELETE /api/v1/urls/{key}/stats`: sent to the key's owner, which asks its
    /// aggregator (a read) or purges (a reset).
    fn start_stats(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        (key, reach): (&[u8], &Reach),
        now_s: u64,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let ikey = self.item_key(req.query, key, reach)?;
        if self.clicks.is_none() {
            let mut p = Problem::not_found();
            p.detail = "click analytics is off on this server (--analytics off)".into();
            return Err(p);
        }
        let (op, ask) = if req.method == Method::Delete {
            let reset = WriteReq::ResetStats {
                key: ikey,
                reach: reach.author,
            };
            (ApiOp::ResetStats, OwnerAsk::Write(reset))
        } else {
            let today = shards::clicks::day_of(now_s);
            let q = crate::analytics::stats::parse_query(req.query, ikey, today)?;
            let exists = ReadReq::StatsOf {
                key: ikey,
                reach: reach.author,
            };
            (ApiOp::Stats(Box::new(q)), OwnerAsk::Read(exists))
        };
        let reply = defer(out, op);
        let owner = self.router.owner(ikey.as_bytes()).core;
        mesh.deliver(owner, ask.message(reply));
        Ok(())
    }

    /// `GET`, `PATCH` or `DELETE /api/v1/urls/{key}`: sent to the key's owner.
    #[allow(clippy::too_many_arguments)]
    fn start_item(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        (key, reach): (&[u8], &Reach),
        body: &[u8],
        now_s: u64,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        let ikey = self.item_key(req.query, key, reach)?;
        let (op, ask) = item_ask(req.method, (ikey, reach), body, (now_s, &self.blocklist))?;
        let reply = defer(out, op);
        let owner = self.router.owner(ikey.as_bytes()).core;
        mesh.deliver(owner, ask.message(reply));
        Ok(())
    }

    /// Asks shard `shard`'s owner for up to `limit` of its links after `after` (the one step
    /// of every list walk: its first page, and each next shard).
    pub fn list_shard(
        &self,
        reply: ReplyTo,
        shard: u32,
        after: Option<InlineKey>,
        limit: u32,
        filter: Arc<ListFilter>,
        mesh: &mut Mesh,
    ) {
        let owner = self.router.core_of_shard(shard);
        mesh.deliver(
            owner,
            ApiMsg::List {
                reply,
                shard,
                after,
                limit,
                filter,
                budget: None,
            },
        );
    }

    /// Asks the owner of `walk`'s shard for its next step (a page, or a scan's bounded step).
    pub(crate) fn ask_walk(&self, reply: ReplyTo, walk: &listing::ListWalk, mesh: &mut Mesh) {
        mesh.deliver(
            self.router.core_of_shard(walk.shard),
            ApiMsg::List {
                reply,
                shard: walk.shard,
                after: walk.after,
                limit: walk.wanted(),
                filter: walk.filter.clone(),
                budget: walk.budget(),
            },
        );
    }

    /// What the request head alone decides: the route (collection or item key) and the API key,
    /// or the refusal (404 path, 405 method, 401 key, 413 declared body). Used before a body
    /// is read, so an `Expect: 100-continue` client hears the refusal without sending it.
    pub fn check_head<'r>(&self, req: &Request<'r>) -> Result<Admitted<'r>, Box<Refusal>> {
        let path = req.path;
        if path == GLOBAL_STATS && req.method != Method::Get {
            return Err(Box::new(Refusal {
                problem: Problem::method_not_allowed(),
                header: Some(("Allow", b"GET")),
            }));
        }
        let tags = tags::TagsPath::of(path);
        if let Some(Err(allow)) = tags.map(|t| t.allows(req.method)) {
            return Err(Box::new(Refusal {
                problem: Problem::method_not_allowed(),
                header: Some(("Allow", allow)),
            }));
        }
        let (collection, mut key) = if path == URLS || path == GLOBAL_STATS {
            (true, None)
        } else if let Some(k) = path.strip_prefix(URLS).and_then(|r| r.strip_prefix(b"/")) {
            (false, Some(k))
        } else if tags.is_some() {
            (false, None)
        } else {
            return Err(Refusal::plain(Problem::not_found()));
        };
        let stats = match key.and_then(|k| k.strip_suffix(STATS_SUFFIX)) {
            Some(k) => {
                key = Some(k);
                true
            }
            None => false,
        };
        let method_ok = match req.method {
            _ if tags.is_some() => true,
            Method::Post => collection,
            Method::Get => true,
            Method::Patch => !collection && !stats,
            Method::Delete => !collection,
            _ => false,
        };
        if !method_ok {
            let allow: &'static [u8] = if collection {
                b"GET, POST"
            } else if stats {
                b"GET, DELETE"
            } else {
                b"GET, PATCH, DELETE"
            };
            return Err(Box::new(Refusal {
                problem: Problem::method_not_allowed(),
                header: Some(("Allow", allow)),
            }));
        }
        let caller = self.bearer(req)?;
        if req.content_length > MAX_REQUEST_BODY_BYTES {
            let p = Problem::payload_too_large(MAX_REQUEST_BODY_BYTES);
            return Err(Refusal::plain(p));
        }
        Ok(Admitted {
            collection,
            key,
            caller,
            stats,
            tags,
        })
    }

    /// The caller its `Authorization: Bearer` key names.
    fn bearer(&self, req: &Request<'_>) -> Result<crate::api::keys::Caller, Box<Refusal>> {
        // The auth scheme is case-insensitive (RFC 9110 section 11.1).
        let caller = req
            .authorization
            .filter(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case(b"bearer "))
            .and_then(|a| self.keys.verify(a[7..].trim_ascii()));
        match caller {
            Some(c) => Ok(c),
            // It may be a fleet key: "try again", never a wrong "not allowed".
            None if self.keys.fleet_keys_unread() => Err(Refusal::plain(Problem::unavailable(
                FLEET_KEYS_RETRY_AFTER_S,
            ))),
            None => Err(Box::new(Refusal {
                problem: Problem::unauthorized(),
                header: Some(("WWW-Authenticate", b"Bearer")),
            })),
        }
    }

    /// An owner replied to a deferred API request: its answer encoded into `out`, or its next
    /// step started (a generated-key create retries with the next ID, a list asks the next
    /// shard, a stats read asks the link's aggregator) with the request still deferred.
    #[allow(clippy::too_many_arguments)]
    pub fn on_reply(
        &mut self,
        reply: ReplyTo,
        op: &mut ApiOp,
        mut outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
        mesh: &mut Mesh,
    ) -> Step {
        if let (ApiOp::Robots { domain, walk }, WriteOutcome::Listed(page)) =
            (&mut *op, &mut outcome)
        {
            let shards = self.router.shard_count();
            let items = std::mem::take(&mut page.items);
            if walk
                .take(items, (page.complete, page.resume.take()), shards)
                .is_some()
            {
                let now_s = shards::timefmt::now_s();
                let body = self.robots.walked(*domain, &walk.items, now_s);
                robots::answer(out, &body, f);
                return Step::Answered;
            }
        } else if self.answer(op, outcome, out, f).is_some() {
            return Step::Answered;
        }
        match op.core() {
            ApiOp::Create {
                req,
                created_at_s,
                tries,
            } => {
                let (req, created_at_s, tries) = (req.clone(), *created_at_s, *tries);
                self.creates
                    .start(reply, req, created_at_s, tries, None, mesh);
            }
            ApiOp::List(walk) | ApiOp::Robots { walk, .. } => self.ask_walk(reply, walk, mesh),
            ApiOp::Stats(q) => {
                if let Err(p) = self.query_stats(reply, (**q).clone()) {
                    encode_problem(out, &p, &[], f);
                    return Step::Answered;
                }
            }
            op @ (ApiOp::ShlinkVisits(_) | ApiOp::ShlinkListVisits(_)) => {
                if let Err(p) = self.query_shlink_totals(reply, op) {
                    self.encode_shlink_problem(out, &p, f);
                    return Step::Answered;
                }
            }
            ApiOp::ReachStats(rs) => {
                if let Err(p) = self.continue_reach_stats(reply, rs, mesh) {
                    encode_problem(out, &p, &[], f);
                    return Step::Answered;
                }
            }
            more @ (ApiOp::Tags(_) | ApiOp::TagEdit(_) | ApiOp::ShlinkVisitLog(_)) => {
                let shlink = more.is_shlink();
                let next = match more {
                    ApiOp::ShlinkVisitLog(w) => self.query_visits(reply, w, mesh),
                    tags => self.continue_tags(reply, tags, mesh),
                };
                match next {
                    Err(p) if shlink => self.encode_shlink_problem(out, &p, f),
                    Err(p) => encode_problem(out, &p, &[], f),
                    Ok(()) => return Step::Continues,
                }
                return Step::Answered;
            }
            _ => {
                debug_assert!(false, "only creates, lists and stats continue");
                encode_problem(out, &Problem::unavailable(1), &[], f);
                return Step::Answered;
            }
        }
        Step::Continues
    }

    /// A Shlink short URL's visit totals (its read), or a list page's next link's.
    fn query_shlink_totals(&mut self, reply: ReplyTo, op: &ApiOp) -> Result<(), Problem> {
        let q = match op {
            ApiOp::ShlinkListVisits(lv) => lv.next_query(),
            ApiOp::ShlinkVisits(info) => {
                let today = shards::clicks::day_of(shards::timefmt::now_s());
                crate::analytics::stats::StatsQuery::whole_window(info.key, today)
            }
            _ => unreachable!("called for a Shlink read or list page"),
        };
        self.query_stats(reply, q)
    }

    /// The problem answering a write that failed (or a create that found no free key).
    fn problem_of(&self, failed: WriteOutcome) -> Problem {
        match failed {
            WriteOutcome::WriteInProgress => {
                let mut p = Problem::unavailable(1);
                p.detail = "another change to this link is being made durable; retry".into();
                p
            }
            WriteOutcome::StorageFailed => {
                let mut p = Problem::insufficient_storage();
                p.detail = "the write could not be made durable (log write or fsync failed); nothing was saved. Redirects keep working; creates resume after a restart.".into();
                p
            }
            WriteOutcome::DatabaseUnavailable => {
                let mut p = Problem::unavailable(1);
                p.detail = "the fleet database did not confirm the write in time (unreachable, hung or overloaded); it may or may not have been committed. Retry, with an Idempotency-Key to be safe. Redirects keep working.".into();
                p
            }
            WriteOutcome::DatabaseRefused(r) => Problem::database_refused(r),
            WriteOutcome::IdemMismatch => Problem::idempotency_mismatch(),
            WriteOutcome::Busy if self.creates.is_fenced() => Problem::allocation_fenced(),
            WriteOutcome::Busy => {
                let mut p = Problem::unavailable(1);
                p.detail = if self.creates.is_exhausted() {
                    "the key space is exhausted: no more generated keys can be allocated".into()
                } else {
                    "no key could be allocated in time (allocation authority unavailable or too many requests in flight); retry".into()
                };
                p
            }
            WriteOutcome::Created(_)
            | WriteOutcome::Found(_)
            | WriteOutcome::Updated(_)
            | WriteOutcome::Deleted
            | WriteOutcome::NotFound
            | WriteOutcome::Exists
            | WriteOutcome::Listed(_) => {
                debug_assert!(false, "not a failure: {failed:?}");
                Problem::unavailable(1)
            }
        }
    }

    /// A link's JSON, as every answer shows it.
    fn link_json(&self, info: &LinkInfo) -> Vec<u8> {
        let (domain, base, key) = self.short_url_parts(info);
        link_json(
            (key, domain),
            &base,
            &info.target,
            (
                info.created_at_s,
                (info.expires_at_s != 0).then_some(info.expires_at_s),
            ),
            info.status,
            (&info.behaviour, &info.rules, &info.labels),
        )
    }

    /// Encodes the answer to an API request whose owner replied; `None` means "not an answer
    /// yet" ([`ApiFront::on_reply`] starts its next step).
    fn answer(
        &self,
        op: &mut ApiOp,
        outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        match op {
            ApiOp::Shlink(inner, page, per_page) => {
                let (page, per_page) = (*page, *per_page);
                self.answer_shlink(inner, page, per_page, outcome, out, f)
            }
            ApiOp::Tags(t) => self.tags_replied(t, outcome, out, f),
            ApiOp::TagEdit(e) => self.tag_edit_replied(e, outcome, out, f),
            ApiOp::ShlinkVisitLog(w) => self.visit_lookup_replied(w, outcome, out, f),
            op => self.answer_native(op, outcome, out, f),
        }
    }

    /// [`ApiFront::answer`] of a native request.
    fn answer_native(
        &self,
        op: &mut ApiOp,
        outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        let json = |info: &LinkInfo| self.link_json(info);
        let problem = |out: &mut Vec<u8>, p: Problem| encode_problem(out, &p, &[], f);
        let json_answer = |out: &mut Vec<u8>, status, body: &[u8]| {
            let r = Response {
                status,
                headers: &[],
                content_type: Some("application/json"),
                body,
            };
            encode::encode_response(out, &r, f)
        };
        let link =
            |out: &mut Vec<u8>, status, info: &LinkInfo| json_answer(out, status, &json(info));
        match (op, outcome) {
            // The link exists: its aggregator answers next (`Conns::on_api_answer`).
            (ApiOp::Stats(_), WriteOutcome::Found(_)) => return None,
            (ApiOp::ReachStats(rs), WriteOutcome::Listed(page)) => {
                return self.reach_walked(rs, page.items, page.complete, out, f);
            }
            (ApiOp::List(walk), WriteOutcome::Listed(page)) => {
                let shards = self.router.shard_count();
                let next = walk.take(page.items, (page.complete, page.resume), shards)?;
                let links: Vec<Vec<u8>> = walk.items.iter().map(json).collect();
                let body = listing::page_json(&links, next.as_deref());
                json_answer(out, Status::Ok, &body);
            }
            (_, WriteOutcome::Listed(_)) => {
                debug_assert!(false, "a list page for another request");
                problem(out, Problem::unavailable(1));
            }
            (_, WriteOutcome::Created(info))
            | (ApiOp::Create { .. }, WriteOutcome::Found(info)) => {
                link(out, Status::Created, &info)
            }
            (ApiOp::Create { req, tries, .. }, WriteOutcome::Exists) => {
                if req.custom_alias.is_some() {
                    problem(out, Problem::alias_taken());
                } else if *tries + 1 < MAX_CREATE_TRIES {
                    // A custom alias holds this generated key: take the next ID.
                    *tries += 1;
                    return None;
                } else {
                    problem(out, Problem::unavailable(1));
                }
            }
            (_, WriteOutcome::Found(info) | WriteOutcome::Updated(info)) => {
                link(out, Status::Ok, &info)
            }
            (_, WriteOutcome::Deleted) => {
                let r = Response {
                    status: Status::NoContent,
                    headers: &[],
                    content_type: None,
                    body: b"",
                };
                encode::encode_response(out, &r, f)
            }
            (_, WriteOutcome::NotFound | WriteOutcome::Exists) => {
                problem(out, Problem::not_found())
            }
            (_, failed) => problem(out, self.problem_of(failed)),
        }
        Some(())
    }
}

/// A request its head admits: to the collection (`POST`) or an item `key`, by `caller`.
pub struct Admitted<'r> {
    pub collection: bool,
    pub key: Option<&'r [u8]>,
    pub caller: crate::api::keys::Caller,
    /// `/api/v1/urls/{key}/stats`.
    pub stats: bool,
    /// `/api/v1/tags` or `/api/v1/tags/{tag}` (`tag_api.rs`).
    pub tags: Option<tags::TagsPath<'r>>,
}

/// A request refused from its head: the problem and the one header it needs, if any.
pub struct Refusal {
    pub problem: Problem,
    pub header: Option<(&'static str, &'static [u8])>,
}

impl Refusal {
    fn plain(problem: Problem) -> Box<Refusal> {
        Box::new(Refusal {
            problem,
            header: None,
        })
    }

    /// Appends the refusal (without its body for a HEAD request).
    pub fn encode(&self, out: &mut Vec<u8>, f: Framing<'_>) {
        let extra: Vec<(&str, &[u8])> = self.header.into_iter().collect();
        encode_problem(out, &self.problem, &extra, f);
    }
}

/// Appends `p` as an `application/problem+json` response (with `Retry-After` when it has one,
/// plus `extra` headers; without the body for a HEAD request). The one place API errors
/// become bytes.
pub(crate) fn encode_problem(
    out: &mut Vec<u8>,
    p: &Problem,
    extra: &[(&str, &[u8])],
    f: Framing<'_>,
) {
    let status = Status::from_code(p.status).unwrap_or(Status::InternalServerError);
    let retry = p.retry_after_s().map(|s| s.to_string());
    let mut headers: Vec<(&str, &[u8])> = extra.to_vec();
    if let Some(r) = &retry {
        headers.push(("Retry-After", r.as_bytes()));
    }
    let body = p.to_json();
    let r = Response {
        status,
        headers: &headers,
        content_type: Some(PROBLEM_CONTENT_TYPE),
        body: &body,
    };
    encode::encode_response(out, &r, f);
}

/// Appends a 200 with a JSON body.
pub(crate) fn encode_json(out: &mut Vec<u8>, body: &[u8], f: Framing<'_>) {
    let r = Response {
        status: Status::Ok,
        headers: &[],
        content_type: Some("application/json"),
        body,
    };
    encode::encode_response(out, &r, f);
}

/// What `GET`, `DELETE` or `PATCH` of one link asks of its owner (a PATCH's body parsed), with
/// the operation that answers it; shared by the native and the Shlink API.
pub(crate) fn item_ask(
    method: Method,
    (key, who): (InlineKey, &Reach),
    body: &[u8],
    (now_s, blocklist): (u64, &crate::api::blocklist::Blocklist),
) -> Result<(ApiOp, OwnerAsk), Problem> {
    let reach = who.author;
    Ok(match method {
        Method::Get => (ApiOp::Get, OwnerAsk::Read(ReadReq::Get { key, reach })),
        Method::Delete => (
            ApiOp::Delete,
            OwnerAsk::Write(WriteReq::Delete { key, reach }),
        ),
        _ => {
            let p = parse_patch(body, now_s)?;
            if let Some(entry) = p
                .long_url
                .as_deref()
                .and_then(|u| blocklist.blocking_url(u))
            {
                return Err(Problem::blocked_target(&entry));
            }
            if let Some(rules) = &p.behaviour.rules {
                check_rule_targets(blocklist, rules)?;
            }
            let behaviour = behaviour_change(p.behaviour, who, now_s)?;
            let patch = WriteReq::Patch {
                key,
                target: p.long_url.map(Arc::from),
                expiry: p.expiry,
                status: p.redirect_status,
                reach,
                behaviour: (!behaviour.is_empty()).then(|| Box::new(behaviour)),
            };
            (ApiOp::Patch, OwnerAsk::Write(patch))
        }
    })
}

/// 422 `blocked-target` if the blocklist names one of `rules`' targets.
fn check_rule_targets(
    blocklist: &crate::api::blocklist::Blocklist,
    rules: &shards::rules::Rules,
) -> Result<(), Problem> {
    for r in rules.set().decode().unwrap_or_default() {
        if let Some(entry) = blocklist.blocking_url(&r.target) {
            return Err(Problem::blocked_target(&entry));
        }
    }
    Ok(())
}

/// A PATCH's behaviour change as the owner applies it: disabling and enabling are an
/// admin's (a disabling records when and by whom).
fn behaviour_change(
    mut b: crate::api::request::BehaviourUpdate,
    who: &Reach,
    now_s: u64,
) -> Result<crate::api::request::BehaviourUpdate, Problem> {
    if b.disabled.is_some() && !who.admin {
        return Err(Problem::admin_only());
    }
    if let Some(Some(d)) = &mut b.disabled {
        d.at_s = now_s;
        d.by = who.caller;
    }
    Ok(b)
}

/// The list filter of a walk asked for `domains` (`?domain=`; `None`: all) by a caller of
/// `reach`: the domains asked for that the role reaches, and the role's author.
pub(crate) fn list_filter(domains: Option<&[u32]>, reach: &Reach) -> Arc<ListFilter> {
    let domains = match (domains, &reach.domains) {
        (Some(asked), Some(reached)) => Some(
            asked
                .iter()
                .copied()
                .filter(|d| reached.binary_search(d).is_ok())
                .collect(),
        ),
        (Some(asked), None) => Some(asked.to_vec()),
        (None, Some(reached)) => Some(reached.to_vec()),
        (None, None) => None,
    };
    Arc::new(ListFilter {
        domains,
        author: reach.author,
        ..Default::default()
    })
}

/// The walk over every link a key of `reach` reaches, for figures summed over them (a role's
/// server-wide stats, Shlink's `/visits`): one link past `MAX_OVERVIEW_LINKS`, to tell "too
/// many".
pub(crate) fn overview_walk(reach: &Reach) -> listing::ListWalk {
    listing::ListWalk {
        shard: 0,
        after: None,
        limit: stats_sum::MAX_OVERVIEW_LINKS + 1,
        items: Vec::new(),
        filter: list_filter(None, reach),
        scan: None,
    }
}

/// A key of the item path: 404 when it cannot be one.
fn valid_key(key: &[u8]) -> Result<InlineKey, Problem> {
    shards::link::validate_key(key)
        .ok()
        .and_then(|()| InlineKey::new(key))
        .ok_or_else(Problem::not_found)
}
