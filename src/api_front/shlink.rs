//! Shlink's REST API v3 (`/rest/v3/...`, `X-Api-Key`), so Shlink's SDK, web client and
//! scripts work unchanged: a thin adapter onto the same code path as `/api/v1/urls`. Requests
//! are translated into the native ones here, run through the native parsing, validation and
//! owner messages, and the answers translated back; this file is the one place that maps
//! between the two shapes.
//!
//! Offered: create, read, edit, delete, the paged list (ordered, searched and filtered by
//! creation dates as a scan, `listing::Scan`), health, and domains (`domain` on a
//! create, `?domain=` on one short URL and on the list, `GET /rest/v3/domains`,
//! `PATCH /rest/v3/domains/redirects` through `node::keywatch`), `validSince`, `maxVisits`
//! and `forwardQuery` (the link's behaviour, `shards::behaviour`). Not offered,
//! and what the adapter answers (docs/shlink.md): tags, titles,
//! device URLs and `findIfExists: true` are refused with `invalid-data` naming the field;
//! `shortCodeLength` is ignored (generated keys are 7 characters). One short URL's
//! `visitsSummary` and the `/visits` overview come from the click aggregators
//! ([`ApiFront::shlink_stats_body`]), and so do a list page's, one link at a time
//! ([`ApiFront::on_list_visits`]); the `/visits`
//! endpoints that list individual visits come from the opt-in visit log (`visits.rs`) and
//! answer 501 `visit-log-off` without it; `mercure-info` answers 501 as an unconfigured
//! Shlink, and any other endpoint `not-found`.

use serde_json::{json, Map, Value};

use super::listing::{ListOrder, ListWalk, OrderField, Scan};
use super::stats_sum::StatsStep;
use super::{encode_json, ApiFront, ApiOp, Defer, ListVisits, MAX_CREATE_TRIES};
use crate::api::problem::Problem;
use crate::api::request::parse_create;
use crate::api::timefmt::format_rfc3339_utc;
use crate::base::key::InlineKey;
use crate::http::encode::{self, Conn as Persist, Framing, Response};
use crate::http::{Method, Request, Status};
use crate::mesh::{LinkInfo, Mesh, WriteOutcome};

pub use crate::route::SHLINK_PREFIX;
const SHORT_URLS: &[u8] = b"/rest/v3/short-urls";
/// After a short code: its redirect rules (`shards::rules`), read or replaced.
const REDIRECT_RULES: &[u8] = b"/redirect-rules";
const DOMAINS: &[u8] = b"/rest/v3/domains";
/// A domain's not-found redirects, changed by an admin key (`keywatch` writes the book).
const DOMAIN_REDIRECTS: &[u8] = b"/rest/v3/domains/redirects";
/// Every tag the key's links carry (`api_front::tags`), and the same with links and visits.
const TAGS: &[u8] = b"/rest/v3/tags";
const TAG_STATS: &[u8] = b"/rest/v3/tags/stats";
/// The visits overview: the server-wide figures of `GET /api/v1/stats`.
const VISITS: &[u8] = b"/rest/v3/visits";
const HEALTH: &[&[u8]] = &[b"/rest/v3/health", b"/rest/health"];
/// Shlink's real-time updates hub, which ricochet does not run (501, as an unconfigured
/// Shlink).
const MERCURE_INFO: &[u8] = b"/rest/v3/mercure-info";
/// After a short code, a tag or a domain: its individual visits (the visit log's).
const VISITS_SUFFIX: &[u8] = b"/visits";

/// The Shlink version whose API ricochet answers as (`/rest/health`'s `version`): Shlink's
/// web client turns features on by it, and 4.5 is the first with every redirect condition
/// ricochet takes (IP, country, query without a value, desktop device types).
pub const SHLINK_API_VERSION: &str = "4.5.0";

/// Shlink's default page size, and the deepest item a page may reach (`page * itemsPerPage`):
/// Shlink pages by number, so page N walks N pages' worth of links from the start.
pub const SHLINK_DEFAULT_PAGE_ITEMS: u32 = 10;
pub const MAX_SHLINK_WINDOW: u32 = 5_000;

pub use super::stats_sum::MAX_OVERVIEW_LINKS;
const _: () = assert!(
    MAX_OVERVIEW_LINKS == MAX_SHLINK_WINDOW,
    "the overview sums a window"
);

/// The page number that marks a list walk as a role's `/visits` overview rather than a page
/// (pages start at 1).
const OVERVIEW_PAGE: u32 = 0;

/// A role's overview that reaches more than [`MAX_OVERVIEW_LINKS`] links.
const TOO_MANY_LINKS: &str = "https://ricochet.dev/problems/too-many-links";

/// Shlink's error types.
const INVALID_DATA: &str = "https://shlink.io/api/error/invalid-data";
const NON_UNIQUE_SLUG: &str = "https://shlink.io/api/error/non-unique-slug";
const NOT_FOUND_SHORT_URL: &str = "https://shlink.io/api/error/short-url-not-found";
const INVALID_API_KEY: &str = "https://shlink.io/api/error/invalid-api-key";
const MISSING_AUTH: &str = "https://shlink.io/api/error/missing-authentication";
const NOT_FOUND: &str = "https://shlink.io/api/error/not-found";
const MERCURE_NOT_CONFIGURED: &str = "https://shlink.io/api/error/mercure-not-configured";
/// The endpoints that list individual visits, which ricochet does not keep.
const VISIT_LOG_OFF: &str = "https://ricochet.dev/problems/visit-log-off";
const TAG_NOT_FOUND: &str = "https://shlink.io/api/error/tag-not-found";
const TAG_CONFLICT: &str = "https://shlink.io/api/error/tag-conflict";
const FORBIDDEN_TAG_OPERATION: &str = "https://shlink.io/api/error/forbidden-tag-operation";

/// A Shlink-shaped answer to encode.
struct ShlinkError {
    status: u16,
    type_: &'static str,
    title: &'static str,
    detail: String,
    extra: Option<(&'static str, Value)>,
    /// Sent as `Retry-After` (a 503 or 429 taken from a native problem). `u16`: it fits
    /// beside `status`, keeping the error within clippy's `result_large_err` bound.
    retry_after_s: Option<u16>,
}

impl ShlinkError {
    fn invalid(detail: impl Into<String>, field: Option<&str>) -> ShlinkError {
        ShlinkError {
            status: 400,
            type_: INVALID_DATA,
            title: "Invalid data",
            detail: detail.into(),
            extra: field.map(|f| ("invalidElements", json!([f]))),
            retry_after_s: None,
        }
    }

    fn not_found(code: Option<&str>) -> ShlinkError {
        ShlinkError {
            status: 404,
            type_: NOT_FOUND_SHORT_URL,
            title: "Short URL not found",
            detail: match code {
                Some(c) => format!("No URL found with short code \"{c}\""),
                None => "No URL found with this short code".into(),
            },
            extra: code.map(|c| ("shortCode", json!(c))),
            retry_after_s: None,
        }
    }

    /// A tag edit refused: the old name on no link (404 `tag-not-found`), or the new name
    /// on one already (409 `tag-conflict`).
    fn tag(status: u16, type_: &'static str) -> ShlinkError {
        let (title, detail) = match status {
            404 => ("Tag not found", "No link carries the tag to rename"),
            _ => ("Tag conflict", "A link carries the new tag name already"),
        };
        ShlinkError {
            status,
            type_,
            title,
            detail: detail.into(),
            extra: None,
            retry_after_s: None,
        }
    }

    /// A tag rename or removal by a key that is not an admin's (Shlink's 403).
    fn forbidden_tag_operation() -> ShlinkError {
        ShlinkError {
            status: 403,
            type_: FORBIDDEN_TAG_OPERATION,
            title: "Forbidden tag operation",
            detail: "You are not allowed to rename or delete tags".into(),
            extra: None,
            retry_after_s: None,
        }
    }

    /// A tag list or edit over more tagged links than it walks.
    fn too_many_tagged() -> ShlinkError {
        ShlinkError {
            status: 422,
            type_: TOO_MANY_LINKS,
            title: "Too many links",
            detail: format!(
                "more than {} links carry these tags, more than a tag list or edit walks",
                super::tags::MAX_TAGGED_LINKS
            ),
            extra: None,
            retry_after_s: None,
        }
    }

    /// Shlink's generic `not-found`: no such endpoint.
    fn no_endpoint() -> ShlinkError {
        ShlinkError {
            status: 404,
            type_: NOT_FOUND,
            title: "Not found",
            detail: "this endpoint is not offered (see docs/shlink.md)".into(),
            extra: None,
            retry_after_s: None,
        }
    }

    /// A native problem in Shlink's words (types Shlink has; the others keep ricochet's).
    fn from_native(p: &Problem) -> ShlinkError {
        let slug = p.type_.rsplit('/').next().unwrap_or("");
        let field = p.field.map(shlink_field);
        match slug {
            "invalid-field" | "bad-json" | "invalid-header" => {
                // The detail names native members; say Shlink's names instead.
                let detail = [
                    ("long_url", "longUrl"),
                    ("custom_alias", "customSlug"),
                    ("expires_at", "validUntil"),
                ]
                .iter()
                .fold(p.detail.clone(), |d, (from, to)| d.replace(from, to));
                ShlinkError::invalid(detail, field)
            }
            "alias-taken" => ShlinkError {
                status: 400,
                type_: NON_UNIQUE_SLUG,
                title: "Invalid custom slug",
                detail: p.detail.clone(),
                extra: None,
                retry_after_s: None,
            },
            "unauthorized" => ShlinkError {
                status: 401,
                type_: INVALID_API_KEY,
                title: "Invalid API key",
                detail: "Provided API key does not exist or is invalid.".into(),
                extra: None,
                retry_after_s: None,
            },
            _ => ShlinkError {
                status: p.status,
                type_: p.type_,
                title: p.title,
                detail: p.detail.clone(),
                extra: None,
                retry_after_s: p
                    .retry_after_s()
                    .map(|s| u16::try_from(s).unwrap_or(u16::MAX)),
            },
        }
    }

    fn encode(&self, out: &mut Vec<u8>, f: Framing<'_>) {
        let mut body = json!({"type": self.type_, "title": self.title, "detail": self.detail, "status": self.status});
        if let Some((k, v)) = &self.extra {
            body[*k] = v.clone();
        }
        let status = Status::from_code(self.status).unwrap_or(Status::InternalServerError);
        let bytes = serde_json::to_vec(&body).expect("json");
        let ct = Some(crate::api::problem::PROBLEM_CONTENT_TYPE);
        let retry = self.retry_after_s.map(|s| s.to_string());
        let headers: Vec<(&str, &[u8])> = retry
            .iter()
            .map(|r| ("Retry-After", r.as_bytes()))
            .collect();
        let r = Response {
            status,
            headers: &headers,
            content_type: ct,
            body: &bytes,
        };
        encode::encode_response(out, &r, f);
    }
}

/// 405 with the methods `allow`ed: the resource exists, the method is what is refused (RFC
/// 9110 section 15.5.6).
fn method_not_allowed(out: &mut Vec<u8>, allow: &[u8], f: Framing<'_>) {
    let r = Response {
        status: Status::MethodNotAllowed,
        headers: &[("Allow", allow)],
        content_type: Some("text/plain"),
        body: b"method not allowed\n",
    };
    encode::encode_response(out, &r, f);
}

/// Shlink's health answer: the Shlink API version ricochet implements (Shlink's web client
/// enables features by it), and ricochet's own under `ricochet`.
fn encode_health(out: &mut Vec<u8>, f: Framing<'_>) {
    let body = serde_json::to_vec(&json!({
        "status": "pass",
        "version": SHLINK_API_VERSION,
        "links": {
            "about": "https://shlink.io",
            "project": "https://github.com/shlinkio/shlink",
        },
        "ricochet": {"version": env!("CARGO_PKG_VERSION")},
    }))
    .expect("json");
    encode_json(out, &body, f);
}

/// A native body member's name in Shlink's API.
fn shlink_field(native: &str) -> &'static str {
    match native {
        "long_url" => "longUrl",
        "custom_alias" => "customSlug",
        "expires_at" | "ttl_days" => "validUntil",
        "title" => "title",
        "tags" => "tags",
        // A visit list's query parameters are Shlink's names already.
        "page" => "page",
        "itemsPerPage" => "itemsPerPage",
        "startDate" => "startDate",
        "endDate" => "endDate",
        _ => "body",
    }
}

/// Shlink create/edit members ricochet has no equivalent for: refused unless absent, null,
/// empty or the default.
fn refuse_unsupported(body: &Map<String, Value>) -> Result<(), ShlinkError> {
    for (k, v) in body {
        let defaultish = v.is_null()
            || v == &json!(false)
            || v.as_array().is_some_and(Vec::is_empty)
            || v.as_object()
                .is_some_and(|o| o.values().all(Value::is_null));
        let supported = matches!(
            k.as_str(),
            "longUrl"
                | "customSlug"
                | "validUntil"
                | "validSince"
                | "forwardQuery"
                | "maxVisits"
                | "crawlable"
                | "shortCodeLength"
                | "title"
                | "tags"
        );
        if !supported && !defaultish {
            let why = match k.as_str() {
                "domain" => "multiple domains are not supported by this server",
                "findIfExists" => {
                    "findIfExists is not supported: links are not searchable by long URL"
                }
                _ => "this field is not supported by this server",
            };
            return Err(ShlinkError::invalid(format!("{k}: {why}"), Some(k)));
        }
    }
    Ok(())
}

/// A Shlink body as the native create or patch body.
fn native_body(body: &[u8], create: bool) -> Result<Vec<u8>, ShlinkError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ShlinkError::invalid(format!("the body is not JSON: {e}"), None))?;
    let Value::Object(mut m) = v else {
        return Err(ShlinkError::invalid("the body is not a JSON object", None));
    };
    let mut native = Map::new();
    // A create names its domain in the body (an edit, in the query).
    if let Some(d) = m.remove("domain").filter(|d| create && !d.is_null()) {
        native.insert("domain".into(), d);
    }
    refuse_unsupported(&m)?;
    if let Some(u) = m.get("longUrl") {
        native.insert("long_url".into(), u.clone());
    }
    if let Some(slug) = m.get("customSlug").filter(|s| !s.is_null()) {
        if !create {
            return Err(ShlinkError::invalid(
                "customSlug cannot be changed",
                Some("customSlug"),
            ));
        }
        native.insert("custom_alias".into(), slug.clone());
    }
    // Shlink's name, the native one. A `null` means "as the server decides" on a create
    // (left out) and "remove it" on an edit (passed on).
    for (shlink, name) in [
        ("validUntil", "expires_at"),
        ("validSince", "valid_since"),
        ("maxVisits", "max_visits"),
        ("forwardQuery", "forward_query"),
        ("crawlable", "crawlable"),
        ("title", "title"),
        ("tags", "tags"),
    ] {
        if let Some(v) = m.get(shlink).filter(|v| !v.is_null() || !create) {
            native.insert(name.into(), v.clone());
        }
    }
    Ok(serde_json::to_vec(&Value::Object(native)).expect("json"))
}

/// The methods a Shlink path takes (a preflight's `Allow`); every method of the API for a
/// path it does not know (the request itself then gets `not-found`).
pub fn methods_of(path: &[u8]) -> &'static [u8] {
    let item = path
        .strip_prefix(SHORT_URLS)
        .and_then(|r| r.strip_prefix(b"/"));
    if path == SHORT_URLS || item.is_some_and(|c| c.ends_with(REDIRECT_RULES)) {
        b"GET, HEAD, POST, OPTIONS"
    } else if item.is_some() {
        b"GET, HEAD, PATCH, DELETE, OPTIONS"
    } else if path == DOMAIN_REDIRECTS {
        b"PATCH, OPTIONS"
    } else if path == TAGS {
        b"GET, HEAD, PUT, DELETE, OPTIONS"
    } else if path == DOMAINS || path == VISITS || path == TAG_STATS || HEALTH.contains(&path) {
        b"GET, HEAD, OPTIONS"
    } else {
        crate::api::cors::CORS_ALLOW_METHODS
    }
}

/// The `Allow` list when `method` is not offered on the collection (`one` false) or on one
/// short URL; `None` when it is.
fn shlink_methods_refused(one: bool, method: Method) -> Option<&'static [u8]> {
    let allowed = match one {
        false => matches!(method, Method::Get | Method::Post),
        true => matches!(method, Method::Get | Method::Patch | Method::Delete),
    };
    match (allowed, one) {
        (true, _) => None,
        (false, false) => Some(b"GET, POST"),
        (false, true) => Some(b"GET, PATCH, DELETE"),
    }
}

impl ApiFront {
    /// Answers a request under `/rest/`.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_shlink(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        body: &[u8],
        persist: Persist,
        clock: &crate::base::clock::Clock,
        mesh: &mut Mesh,
    ) {
        let f = self.framing(req, persist, clock);
        let fail = |out: &mut Vec<u8>, e: ShlinkError| e.encode(out, f);
        let path = req.path;
        if HEALTH.contains(&path) {
            return encode_health(out, f);
        }
        if path == DOMAIN_REDIRECTS {
            return self.shlink_domain_redirects(out, defer, req, body, f);
        }
        if path == VISITS || path == DOMAINS {
            return self.shlink_overview(out, defer, req, (persist, clock), mesh);
        }
        if path == TAGS && matches!(req.method, Method::Put | Method::Delete) {
            return self.shlink_tag_edit(out, defer, (req, body), f, mesh);
        }
        if path == TAGS || path == TAG_STATS {
            return self.shlink_tags(out, defer, req, f, mesh);
        }
        if self.visit_log && super::visit_walk::is_visit_list(path) {
            return self.shlink_visit_list(out, defer, req, f, mesh);
        }
        if let Some(e) = self.shlink_side_path(req) {
            return fail(out, e);
        }
        if let Some(code) = path
            .strip_prefix(SHORT_URLS)
            .and_then(|r| r.strip_prefix(b"/"))
            .and_then(|r| r.strip_suffix(REDIRECT_RULES))
        {
            return self.shlink_rules(out, defer, (code, req, body), (f, clock.now_s), mesh);
        }
        let key = if path == SHORT_URLS {
            None
        } else if let Some(k) = path
            .strip_prefix(SHORT_URLS)
            .and_then(|r| r.strip_prefix(b"/"))
        {
            Some(k)
        } else {
            return fail(out, ShlinkError::no_endpoint());
        };
        if let Some(allow) = shlink_methods_refused(key.is_some(), req.method) {
            return method_not_allowed(out, allow, f);
        }
        let caller = match self.shlink_admit(req) {
            Ok(c) => c,
            Err(e) => return fail(out, e),
        };
        let reach = caller.role.reach(caller.author(), &self.domains);
        if reach.read_only && req.method != Method::Get && req.method != Method::Head {
            return fail(out, ShlinkError::from_native(&Problem::read_only_key()));
        }
        let now_s = clock.now_s;
        let started = match (key, req.method) {
            (None, Method::Get) => self.shlink_list(out, defer, req.query, &reach, mesh),
            (None, _) => self.shlink_create(out, defer, (&caller, &reach), body, now_s, mesh),
            (Some(code), method) => {
                let item = (code, req.query, &reach);
                self.shlink_one(out, defer, item, method, body, now_s, mesh)
            }
        };
        if let Err(e) = started {
            fail(out, e);
        }
    }

    /// The answer to a path Shlink has and ricochet answers with a problem: the mercure hub
    /// (501, as an unconfigured Shlink), the lists of individual visits (501
    /// `visit-log-off`: ricochet keeps counts, not visits), and a short code's sub-path it
    /// does not know (`not-found`, not a short code with a slash in it). `None`: another path.
    fn shlink_side_path(&self, req: &Request<'_>) -> Option<ShlinkError> {
        let path = req.path;
        let code_sub = path
            .strip_prefix(SHORT_URLS)
            .and_then(|r| r.strip_prefix(b"/"))
            .and_then(|r| memchr::memchr(b'/', r).map(|i| &r[i..]));
        let visit_list = path.starts_with(b"/rest/v3/visits/")
            || code_sub == Some(VISITS_SUFFIX)
            || (path.ends_with(VISITS_SUFFIX)
                && (path.starts_with(b"/rest/v3/tags/") || path.starts_with(b"/rest/v3/domains/")));
        if path != MERCURE_INFO && !visit_list {
            return code_sub
                .filter(|sub| *sub != REDIRECT_RULES)
                .map(|_| ShlinkError::no_endpoint());
        }
        if let Err(e) = self.shlink_admit(req) {
            return Some(e);
        }
        Some(if path == MERCURE_INFO {
            ShlinkError {
                status: 501,
                type_: MERCURE_NOT_CONFIGURED,
                title: "Mercure integration not configured",
                detail: "This server is not integrated with a Mercure hub.".into(),
                extra: None,
                retry_after_s: None,
            }
        } else {
            ShlinkError {
                status: 501,
                type_: VISIT_LOG_OFF,
                title: "Visit log is off",
                detail: "This server's visit log is off: it keeps visit counts, not individual \
                         visits (each short URL's visitsSummary, /rest/v3/visits). Its operator \
                         turns the log on with --visit-log-days."
                    .into(),
                extra: None,
                retry_after_s: None,
            }
        })
    }

    /// One of Shlink's visit lists, from the visit log (`visits.rs`).
    fn shlink_visit_list(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        f: Framing<'_>,
        mesh: &mut Mesh,
    ) {
        if !matches!(req.method, Method::Get | Method::Head | Method::Delete) {
            return method_not_allowed(out, b"GET, DELETE", f);
        }
        let caller = match self.shlink_admit(req) {
            Ok(c) => c,
            Err(e) => return e.encode(out, f),
        };
        let reach = caller.role.reach(caller.author(), &self.domains);
        if reach.read_only && req.method == Method::Delete {
            return ShlinkError::from_native(&Problem::read_only_key()).encode(out, f);
        }
        let code = req
            .path
            .strip_prefix(SHORT_URLS)
            .and_then(|r| r.strip_prefix(b"/"))
            .and_then(|r| r.strip_suffix(VISITS_SUFFIX));
        if let Err(p) = self.start_visit_log(out, defer, req, &reach, mesh) {
            let e = match code {
                Some(c) if p.status == 404 => {
                    ShlinkError::not_found(Some(&String::from_utf8_lossy(c)))
                }
                _ => ShlinkError::from_native(&p),
            };
            e.encode(out, f);
        }
    }

    /// The owner's answer to a link's lookup before its visits: found (its aggregator is
    /// asked next, `None`), or the problem.
    pub(super) fn visit_lookup_replied(
        &self,
        w: &mut super::visit_walk::VisitWalk,
        outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        let e = match outcome {
            // A tag's walk: its next shard, or its links' visits (`on_reply` asks).
            WriteOutcome::Listed(page) => match self.visit_tag_walked(w, *page) {
                Ok(true) if w.no_tagged_links() => ShlinkError {
                    status: 404,
                    type_: TAG_NOT_FOUND,
                    title: "Tag not found",
                    detail: "No link the key reaches carries this tag".into(),
                    extra: None,
                    retry_after_s: None,
                },
                Ok(_) => return None,
                Err(p) => ShlinkError::from_native(&p),
            },
            WriteOutcome::Deleted if w.deleted().is_some() => {
                let body = json!({"deletedVisits": w.deleted()});
                encode_json(out, &serde_json::to_vec(&body).expect("json"), f);
                return Some(());
            }
            WriteOutcome::Found(_) => return None,
            WriteOutcome::NotFound => ShlinkError::not_found(w.code().as_deref()),
            other => ShlinkError::from_native(&self.problem_of(other)),
        };
        e.encode(out, f);
        Some(())
    }

    /// `GET /rest/v3/visits` (server-wide for admin keys, the reached links' for others) or
    /// `GET /rest/v3/domains` (the domains the key reaches).
    fn shlink_overview(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        (persist, clock): (Persist, &crate::base::clock::Clock),
        mesh: &mut Mesh,
    ) {
        let f = Framing {
            head_only: false,
            ..self.framing(req, persist, clock)
        };
        if req.method != Method::Get {
            return method_not_allowed(out, b"GET", f);
        }
        match self.shlink_admit(req) {
            Ok(caller) if req.path == DOMAINS => {
                let reach = caller.role.reach(caller.author(), &self.domains);
                self.shlink_domains(out, &reach, f)
            }
            Ok(caller) if caller.role.is_admin() => {
                self.query_global(out, defer, req, persist, clock, true)
            }
            Ok(caller) => {
                let reach = caller.role.reach(caller.author(), &self.domains);
                self.shlink_reach_overview(out, defer, &reach, mesh)
            }
            Err(e) => e.encode(out, f),
        }
    }

    /// `GET /rest/v3/tags` and `/tags/stats`: a walk of every shard for the tagged links the
    /// key reaches, answered by `tags_replied` (and, for the stats, the links' totals).
    fn shlink_tags(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        f: Framing<'_>,
        mesh: &mut Mesh,
    ) {
        if !matches!(req.method, Method::Get | Method::Head) {
            return method_not_allowed(out, b"GET, HEAD", f);
        }
        let stats = req.path == TAG_STATS;
        let started = self.shlink_admit(req).and_then(|caller| {
            let params = super::tags::TagParams::parse(req.query, stats)
                .map_err(|p| ShlinkError::from_native(&p))?;
            Ok((caller, params))
        });
        let (caller, params) = match started {
            Ok(s) => s,
            Err(e) => return e.encode(out, f),
        };
        let reach = caller.role.reach(caller.author(), &self.domains);
        let walk = super::overview_walk(&reach);
        let list = super::tags::TagsWalk::new(walk, stats, params);
        self.start_tag_list(out, defer, list, mesh);
    }

    /// `PUT /rest/v3/tags` (`{"oldName", "newName"}`: a rename) or `DELETE /rest/v3/tags`
    /// (`?tags[]=...`: removal), admin keys only (Shlink's `forbidden-tag-operation`
    /// otherwise): a walk for the links carrying the tags, then each one changed in turn.
    fn shlink_tag_edit(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        (req, body): (&Request<'_>, &[u8]),
        f: Framing<'_>,
        mesh: &mut Mesh,
    ) {
        let started = self.shlink_admit(req).and_then(|caller| {
            if !caller.role.is_admin() {
                return Err(ShlinkError::forbidden_tag_operation());
            }
            let retag = match req.method {
                Method::Put => rename_of(body)?,
                _ => removal_of(req.query)?,
            };
            Ok((caller, retag))
        });
        let (caller, retag) = match started {
            Ok(r) => r,
            Err(e) => return e.encode(out, f),
        };
        if retag.from.is_empty() {
            return encode_no_content(out, f);
        }
        let reach = caller.role.reach(caller.author(), &self.domains);
        let walk = super::overview_walk(&reach);
        let edit = super::tags::TagEdit::new(walk, retag);
        self.start_tag_edit(out, defer, edit, mesh);
    }

    /// The next step of a tag list or edit after a reply that did not answer it: the walk's
    /// next shard, the next link's totals, or the next link's change.
    pub(super) fn continue_tags(
        &mut self,
        reply: crate::mesh::ReplyTo,
        op: &ApiOp,
        mesh: &mut Mesh,
    ) -> Result<(), Problem> {
        match op {
            ApiOp::Tags(t) if t.is_walking() => self.ask_walk(reply, &t.walk, mesh),
            ApiOp::Tags(t) => self.query_stats(reply, t.next_query())?,
            ApiOp::TagEdit(e) if e.is_walking() => self.ask_walk(reply, &e.walk, mesh),
            ApiOp::TagEdit(e) => {
                let req = e.next_change();
                let owner = self.router.owner(req.key().as_bytes()).core;
                mesh.deliver(owner, crate::mesh::ApiMsg::Write { reply, req });
            }
            _ => unreachable!("called for a tag list or edit"),
        }
        Ok(())
    }

    /// A tag edit's owner reply: the walk's next shard or the next link's change (`None`),
    /// or the answer (204, or why not).
    pub(super) fn tag_edit_replied(
        &self,
        e: &mut super::tags::TagEdit,
        outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        use super::tags::EditRefusal;
        let walking = e.is_walking();
        let native = e.native;
        let refuse = |r, out: &mut Vec<u8>| encode_tag_refusal(native, r, out, f);
        match outcome {
            WriteOutcome::Listed(page) if walking => {
                let shards = self.router.shard_count();
                match super::tags::take_tagged(&mut e.walk, *page, shards) {
                    None => refuse(TagRefusal::TooMany, out),
                    Some(false) => return None,
                    Some(true) => match e.walked() {
                        Ok(true) => return None,
                        Ok(false) => encode_no_content(out, f),
                        Err(EditRefusal::NotFound) => refuse(TagRefusal::NotFound, out),
                        Err(EditRefusal::Conflict) => refuse(TagRefusal::Conflict, out),
                    },
                }
            }
            // A link deleted meanwhile has no tags to change.
            WriteOutcome::Updated(_) | WriteOutcome::NotFound if !walking => {
                if !e.changed() {
                    return None;
                }
                encode_no_content(out, f);
            }
            failed => refuse(TagRefusal::Problem(self.problem_of(failed)), out),
        }
        Some(())
    }

    /// A tag list's owner reply: the walk's next shard (`None`), the links' totals asked next
    /// (`None`, stats with analytics on), or the answer.
    pub(super) fn tags_replied(
        &self,
        t: &mut super::tags::TagsWalk,
        outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        let WriteOutcome::Listed(page) = outcome else {
            let p = TagRefusal::Problem(Problem::unavailable(1));
            encode_tag_refusal(t.native, p, out, f);
            return Some(());
        };
        let shards = self.router.shard_count();
        match super::tags::take_tagged(&mut t.walk, *page, shards) {
            None => {
                encode_tag_refusal(t.native, TagRefusal::TooMany, out, f);
                return Some(());
            }
            Some(false) => return None,
            Some(true) => {}
        }
        if t.walked(self.clicks.is_some()) {
            return None;
        }
        encode_json(out, &serde_json::to_vec(&t.body()).expect("json"), f);
        Some(())
    }

    /// `GET /rest/v3/visits` for a key with a role: the visits of the links it reaches, summed
    /// (a walk of every shard filtered by its reach, then each link's totals), and no orphan
    /// visits, which belong to no link (Shlink shows them to admin keys only).
    fn shlink_reach_overview(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        reach: &crate::api::roles::Reach,
        mesh: &mut Mesh,
    ) {
        let walk = super::overview_walk(reach);
        let (limit, filter) = (walk.limit, walk.filter.clone());
        let op = ApiOp::Shlink(Box::new(ApiOp::List(walk)), OVERVIEW_PAGE, 0);
        let reply = defer(out, op);
        self.list_shard(reply, 0, None, limit, filter, mesh);
    }

    /// A role's overview: `totals` (clicks, bot clicks) of the links it reaches, summed.
    fn reach_overview_json(totals: &[(u64, u64)]) -> Value {
        let (clicks, bots) = totals
            .iter()
            .fold((0, 0), |(c, b), &(tc, tb)| (c + tc, b + tb));
        json!({"visits": {"nonOrphanVisits": visits_summary(clicks, bots),
                          "orphanVisits": visits_summary(0, 0)}})
    }

    /// `PATCH /rest/v3/domains/redirects` (admin keys only): `domain` and any of Shlink's three
    /// redirects (a URL, or `null` to clear it; one left out stays). The book is written by
    /// `keywatch`, off the core; the answer (`Conns::on_domain_edited`) comes when it is.
    fn shlink_domain_redirects(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        req: &Request<'_>,
        body: &[u8],
        f: Framing<'_>,
    ) {
        if req.method != Method::Patch {
            return method_not_allowed(out, b"PATCH", f);
        }
        let edit = match self.shlink_admit(req) {
            Ok(caller) if caller.role.is_admin() => parse_redirects_edit(body),
            Ok(_) => Err(ShlinkError::from_native(&Problem::admin_only())),
            Err(e) => Err(e),
        };
        let edit = match edit {
            Ok(edit) => edit,
            Err(e) => return e.encode(out, f),
        };
        if self.editor.in_flight >= crate::node::keywatch::MAX_QUEUED_DOMAIN_EDITS {
            return ShlinkError::from_native(&Problem::unavailable(1)).encode(out, f);
        }
        let reply = defer(out, ApiOp::DomainRedirects);
        let (crate::mesh::ReplyTo::Request { core, place }, _) = (reply, ()) else {
            unreachable!("an API request is deferred on its connection");
        };
        self.editor.in_flight += 1;
        let req = crate::node::keywatch::EditRequest {
            core: usize::from(core),
            place,
            edit,
        };
        if let Err(e) = self.editor.tx.try_send(req) {
            // Another core filled the queue meanwhile: answered 503 at the next sweep.
            let place = e.into_inner().place;
            let why = "the domain book has too many edits waiting; retry".to_owned();
            self.editor.refused.push(crate::node::keywatch::EditDone {
                place,
                result: Err(crate::node::keywatch::EditRefused::Unavailable(why)),
            });
        }
    }

    /// The answer to a domain edit: Shlink's redirects object, or the refusal.
    pub fn encode_domain_edited(
        &self,
        out: &mut Vec<u8>,
        result: &Result<crate::api::domains::Domain, crate::node::keywatch::EditRefused>,
        f: Framing<'_>,
    ) {
        use crate::node::keywatch::EditRefused;
        let e = match result {
            Ok(d) => {
                let r = &d.redirects;
                let body = json!({"baseUrlRedirect": r.base_url,
                    "regular404Redirect": r.regular_404,
                    "invalidShortUrlRedirect": r.invalid_short_url});
                let bytes = serde_json::to_vec(&body).expect("json");
                return encode_json(out, &bytes, f);
            }
            Err(EditRefused::Invalid(why)) => {
                let detail = [
                    ("--base-url", "baseUrlRedirect"),
                    ("--regular-404", "regular404Redirect"),
                    ("--invalid-short-url", "invalidShortUrlRedirect"),
                ]
                .iter()
                .fold(why.clone(), |d, (from, to)| d.replace(from, to));
                ShlinkError::invalid(detail, None)
            }
            Err(EditRefused::Unavailable(why)) => {
                let mut p = Problem::unavailable(1);
                p.detail = format!("the domain book could not be written: {why}");
                ShlinkError::from_native(&p)
            }
        };
        e.encode(out, f);
    }

    /// The API key and the body's size of a Shlink request: the key's id, or the refusal.
    fn shlink_admit(&self, req: &Request<'_>) -> Result<crate::api::keys::Caller, ShlinkError> {
        let Some(api_key) = req.x_api_key else {
            return Err(ShlinkError { status: 401, type_: MISSING_AUTH, title: "Invalid authorization", detail: "Expected one of the following authentication headers, [\"X-Api-Key\"], but none were provided".into(), extra: None, retry_after_s: None });
        };
        let Some(caller) = self.keys.verify(api_key.trim_ascii()) else {
            let p = match self.keys.fleet_keys_unread() {
                true => Problem::unavailable(super::FLEET_KEYS_RETRY_AFTER_S),
                false => Problem::unauthorized(),
            };
            return Err(ShlinkError::from_native(&p));
        };
        if req.content_length > crate::api::request::MAX_REQUEST_BODY_BYTES {
            let p = Problem::payload_too_large(crate::api::request::MAX_REQUEST_BODY_BYTES);
            return Err(ShlinkError::from_native(&p));
        }
        Ok(caller)
    }

    /// `GET /rest/v3/short-urls`: the list walk over every shard, up to the page asked for.
    fn shlink_list(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        query: Option<&[u8]>,
        reach: &crate::api::roles::Reach,
        mesh: &mut Mesh,
    ) -> Result<(), ShlinkError> {
        let params = shlink_page(query)?;
        let (page, per_page) = (params.page, params.per_page);
        let window = page * per_page;
        let domain = match shlink_domain_param(query) {
            // Shlink's keyword for the default domain (SDK `ShlinkShortUrlsListParams`).
            Some(name) if name == "DEFAULT" => Some(shards::link::DEFAULT_DOMAIN),
            Some(name) => Some(
                self.domain_number(Some(&name))
                    .map_err(|p| ShlinkError::from_native(&p))?,
            ),
            None => None,
        };
        let mut filter = super::list_filter(domain.as_ref().map(std::slice::from_ref), reach);
        let scan = params.scans().then(|| {
            let f = std::sync::Arc::make_mut(&mut filter);
            (f.search, f.created) = (params.search.map(String::into_boxed_str), params.created);
            (f.tags, f.exclude_tags) = (params.tags, params.exclude_tags);
            f.exclude_used_up = params.exclude_used_up;
            Scan {
                order: params.order,
                matched: 0,
            }
        });
        // By visits every match is kept (and counted, at most MAX_OVERVIEW_LINKS): the order
        // is known only once their totals are in.
        let by_visits = scan.as_ref().is_some_and(|s| s.by_visits().is_some());
        let walk = ListWalk {
            shard: 0,
            after: None,
            // A scan keeps the window and counts every match; a walk takes one more than the
            // window: whether another page follows.
            limit: match (by_visits, scan.is_some()) {
                (true, _) => MAX_OVERVIEW_LINKS + 1,
                (false, true) => window,
                (false, false) => window + 1,
            },
            items: Vec::new(),
            filter,
            scan,
        };
        // The first step's message, made before the walk moves into the deferred request.
        let first = walk.clone_empty();
        let reply = defer(
            out,
            ApiOp::Shlink(Box::new(ApiOp::List(walk)), page, per_page),
        );
        self.ask_walk(reply, &first, mesh);
        Ok(())
    }

    /// `POST /rest/v3/short-urls`: a create, as the native API makes it.
    fn shlink_create(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        (caller, reach): (&crate::api::keys::Caller, &crate::api::roles::Reach),
        body: &[u8],
        now_s: u64,
        mesh: &mut Mesh,
    ) -> Result<(), ShlinkError> {
        if let Err(ra) =
            self.ratelimit
                .check(caller.id.to_u64(), caller.limits, std::time::Instant::now())
        {
            return Err(ShlinkError::from_native(&ra.into()));
        }
        let cr = native_body(body, true)?;
        let mut cr = parse_create(&cr, now_s).map_err(|p| ShlinkError::from_native(&p))?;
        self.check_target(&cr.long_url)
            .map_err(|p| ShlinkError::from_native(&p))?;
        cr.domain_number = self
            .domain_number(cr.domain.as_deref())
            .map_err(|p| ShlinkError::from_native(&p))?;
        self.check_create_domain(&cr, reach)
            .map_err(|p| ShlinkError::from_native(&p))?;
        cr.author = caller.author();
        self.creates
            .check_alias(&cr)
            .map_err(|p| ShlinkError::from_native(&p))?;
        let op = ApiOp::Create {
            req: Box::new(cr.clone()),
            created_at_s: now_s,
            tries: 0,
        };
        let reply = defer(out, ApiOp::Shlink(Box::new(op), 0, 0));
        self.creates
            .start(reply, Box::new(cr), now_s, 0, None, mesh);
        Ok(())
    }

    /// `GET`, `PATCH` or `DELETE /rest/v3/short-urls/{code}`: sent to the key's owner.
    #[allow(clippy::too_many_arguments)]
    fn shlink_one(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        (code, query, reach): (&[u8], Option<&[u8]>, &crate::api::roles::Reach),
        method: Method,
        body: &[u8],
        now_s: u64,
        mesh: &mut Mesh,
    ) -> Result<(), ShlinkError> {
        if shards::link::validate_key(code).is_err() {
            return Err(ShlinkError::not_found(Some(&String::from_utf8_lossy(code))));
        }
        // `?domain=`: the short code on that domain.
        let ikey: InlineKey = self
            .item_key(query, code, reach)
            .map_err(|p| match p.status {
                404 => ShlinkError::not_found(Some(&String::from_utf8_lossy(code))),
                _ => ShlinkError::from_native(&p),
            })?;
        // Only a PATCH has a body: Shlink's fields, in the native API's names.
        let native = match method {
            Method::Get | Method::Delete => Vec::new(),
            _ => native_body(body, false)?,
        };
        let (op, ask) = super::item_ask(method, (ikey, reach), &native, (now_s, &self.blocklist))
            .map_err(|p| ShlinkError::from_native(&p))?;
        let reply = defer(out, ApiOp::Shlink(Box::new(op), 0, 0));
        let owner = self.router.owner(ikey.as_bytes()).core;
        mesh.deliver(owner, ask.message(reply));
        Ok(())
    }

    /// `GET` or `POST /rest/v3/short-urls/{code}/redirect-rules`: the link's rules, read or
    /// replaced (a PATCH of `redirect_rules` at the key's owner).
    fn shlink_rules(
        &mut self,
        out: &mut Vec<u8>,
        defer: &mut Defer<'_>,
        (code, req, body): (&[u8], &Request<'_>, &[u8]),
        (f, now_s): (Framing<'_>, u64),
        mesh: &mut Mesh,
    ) {
        let started = match req.method {
            Method::Get | Method::Head | Method::Post => {
                self.start_shlink_rules(out, defer, (code, req.query, req), body, now_s, mesh)
            }
            _ => return method_not_allowed(out, b"GET, POST", f),
        };
        if let Err(e) = started {
            e.encode(out, f);
        }
    }

    fn start_shlink_rules(
        &mut self,
        out: &[u8],
        defer: &mut Defer<'_>,
        (code, query, req): (&[u8], Option<&[u8]>, &Request<'_>),
        body: &[u8],
        now_s: u64,
        mesh: &mut Mesh,
    ) -> Result<(), ShlinkError> {
        let caller = self.shlink_admit(req)?;
        let reach = caller.role.reach(caller.author(), &self.domains);
        let post = req.method == Method::Post;
        if reach.read_only && post {
            return Err(ShlinkError::from_native(&Problem::read_only_key()));
        }
        let not_found = || ShlinkError::not_found(Some(&String::from_utf8_lossy(code)));
        if shards::link::validate_key(code).is_err() {
            return Err(not_found());
        }
        let ikey = self
            .item_key(query, code, &reach)
            .map_err(|p| match p.status {
                404 => not_found(),
                _ => ShlinkError::from_native(&p),
            })?;
        let (method, native) = match post {
            true => (Method::Patch, native_rules_body(body)?),
            false => (Method::Get, Vec::new()),
        };
        let (op, ask) = super::item_ask(method, (ikey, &reach), &native, (now_s, &self.blocklist))
            .map_err(|p| ShlinkError::from_native(&p))?;
        let op = ApiOp::ShlinkRules(Box::new(op));
        let reply = defer(out, ApiOp::Shlink(Box::new(op), 0, 0));
        let owner = self.router.owner(ikey.as_bytes()).core;
        mesh.deliver(owner, ask.message(reply));
        Ok(())
    }

    /// `GET /rest/v3/domains`: the live domains with their special redirects, the default one
    /// first (named by `--public-url`'s authority while it has no name of its own: its host,
    /// and its port unless the scheme's default, as Shlink's `DEFAULT_DOMAIN` is written; the
    /// web client checks each domain at `http://{domain}/rest/health`).
    fn shlink_domains(&self, out: &mut Vec<u8>, reach: &crate::api::roles::Reach, f: Framing<'_>) {
        let redirects = |r: &crate::api::domains::NotFoundRedirects| {
            json!({"baseUrlRedirect": r.base_url, "regular404Redirect": r.regular_404,
                   "invalidShortUrlRedirect": r.invalid_short_url})
        };
        let none = crate::api::domains::NotFoundRedirects::default();
        let default = self.domains.get(shards::link::DEFAULT_DOMAIN);
        let default_name = default.map(|d| d.name.clone()).unwrap_or_else(|| {
            url::Url::parse(&self.public_url)
                .ok()
                .and_then(|u| {
                    let host = u.host_str()?;
                    Some(match u.port() {
                        Some(port) => format!("{host}:{port}"),
                        None => host.to_owned(),
                    })
                })
                .unwrap_or_default()
        });
        // A domain-only key sees its domains only (as Shlink's DOMAIN_SPECIFIC keys do).
        let mut data = Vec::new();
        if reach.domain_ok(shards::link::DEFAULT_DOMAIN) {
            data.push(json!({"domain": default_name, "isDefault": true,
                "redirects": redirects(default.map_or(&none, |d| &d.redirects))}));
        }
        data.extend(
            self.domains
                .live()
                .iter()
                .filter(|d| !d.is_default() && reach.domain_ok(d.number))
                .map(|d| json!({"domain": d.name, "isDefault": false, "redirects": redirects(&d.redirects)})),
        );
        let body = json!({"domains": {"data": data, "defaultRedirects": redirects(&none)}});
        encode_json(out, &serde_json::to_vec(&body).expect("json"), f);
    }

    /// A stats answer in Shlink's shape, if `op` is a Shlink request that waited for one: the
    /// visits overview (`GET /rest/v3/visits`: clicks as non-orphan visits, 404s as orphan
    /// ones), or a short URL with its `visitsSummary`. `None`: a native answer, sent as is.
    pub fn shlink_stats_body(&self, op: &ApiOp, native: &[u8]) -> Option<Vec<u8>> {
        let ApiOp::Shlink(inner, ..) = op else {
            return None;
        };
        let v: Value = serde_json::from_slice(native).ok()?;
        let n = |k: &str| v["summary"][k].as_u64().unwrap_or(0);
        let summary = visits_summary;
        let body = match &**inner {
            ApiOp::GlobalStats => json!({"visits": {
                "nonOrphanVisits": summary(n("clicks"), n("bot_clicks")),
                "orphanVisits": summary(n("not_found"), 0),
            }}),
            ApiOp::ShlinkVisits(info) => {
                let mut url = self.short_url_json(info);
                url["visitsSummary"] = summary(n("clicks"), n("bot_clicks"));
                url
            }
            _ => return None,
        };
        Some(serde_json::to_vec(&body).expect("json"))
    }

    /// A list walk that is over: its page answered (`Some`), or with analytics on turned
    /// into the wait for its links' visit totals (`None`: `on_reply` asks the first).
    fn list_walked(
        &self,
        op: &mut ApiOp,
        page: u32,
        per_page: u32,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        let ApiOp::List(walk) = op else {
            unreachable!("called for a list walk");
        };
        let by_visits = walk.scan.as_ref().and_then(Scan::by_visits).is_some();
        let (start, end) = match page {
            _ if by_visits
                && walk
                    .scan
                    .as_ref()
                    .is_some_and(|s| s.matched > u64::from(MAX_OVERVIEW_LINKS)) =>
            {
                let e = ShlinkError {
                    status: 422,
                    type_: TOO_MANY_LINKS,
                    title: "Too many links",
                    detail: format!(
                        "more than {MAX_OVERVIEW_LINKS} links match: a list ordered by visits \
                         asks each one's totals; narrow it (domain, tags, dates, searchTerm) \
                         or order by another field"
                    ),
                    extra: None,
                    retry_after_s: None,
                };
                e.encode(out, f);
                return Some(());
            }
            _ if by_visits => (0, walk.items.len()),
            OVERVIEW_PAGE if walk.items.len() > MAX_OVERVIEW_LINKS as usize => {
                let e = ShlinkError {
                    status: 422,
                    type_: TOO_MANY_LINKS,
                    title: "Too many links",
                    detail: format!(
                        "this key reaches more than {MAX_OVERVIEW_LINKS} links, more than the \
                         visits overview sums; read each link's visitsSummary instead"
                    ),
                    extra: None,
                    retry_after_s: None,
                };
                e.encode(out, f);
                return Some(());
            }
            OVERVIEW_PAGE => (0, walk.items.len()),
            _ => {
                let (start, end, _) = page_bounds(walk, page, per_page);
                (start, end)
            }
        };
        if self.clicks.is_none() || start == end {
            let body = match page {
                OVERVIEW_PAGE => Self::reach_overview_json(&[]),
                _ => self.list_json(walk, page, per_page, &[]),
            };
            encode_json(out, &serde_json::to_vec(&body).expect("json"), f);
            return Some(());
        }
        let ApiOp::List(walk) = std::mem::replace(op, ApiOp::Get) else {
            unreachable!("matched a list above");
        };
        *op = ApiOp::ShlinkListVisits(Box::new(ListVisits {
            walk,
            start,
            end,
            totals: Vec::with_capacity(end - start),
        }));
        None
    }

    /// A link's stats answer for a list page waiting for its visit totals: the next link
    /// asked (through `reply`), or the page's answer once every link's totals are in.
    /// `None` for any other request.
    pub(super) fn on_list_visits(
        &mut self,
        op: &mut ApiOp,
        native: &[u8],
        reply: crate::mesh::ReplyTo,
    ) -> Option<StatsStep> {
        let ApiOp::Shlink(inner, page, per_page) = op else {
            return None;
        };
        let ApiOp::ShlinkListVisits(lv) = &mut **inner else {
            return None;
        };
        let v: Value = serde_json::from_slice(native).unwrap_or(Value::Null);
        let n = |k: &str| v["summary"][k].as_u64().unwrap_or(0);
        lv.totals.push((n("clicks"), n("bot_clicks")));
        if lv.start + lv.totals.len() < lv.end {
            return Some(match self.query_stats(reply, lv.next_query()) {
                Ok(()) => StatsStep::Asked,
                Err(p) => StatsStep::Failed(p),
            });
        }
        let body = match *page {
            OVERVIEW_PAGE => Self::reach_overview_json(&lv.totals),
            _ if lv.sort_by_visits() => {
                let (start, _, _) = page_bounds(&lv.walk, *page, *per_page);
                self.list_json(&lv.walk, *page, *per_page, &lv.totals[start..])
            }
            _ => self.list_json(&lv.walk, *page, *per_page, &lv.totals),
        };
        Some(StatsStep::Done(serde_json::to_vec(&body).expect("json")))
    }

    /// A native problem answered in Shlink's envelope.
    pub fn encode_shlink_problem(&self, out: &mut Vec<u8>, p: &Problem, f: Framing<'_>) {
        ShlinkError::from_native(p).encode(out, f);
    }

    /// A Shlink short URL object.
    fn short_url_json(&self, info: &LinkInfo) -> Value {
        let (domain, base, key) = self.short_url_parts(info);
        let expires = (info.expires_at_s != 0).then(|| format_rfc3339_utc(info.expires_at_s));
        let b = &info.behaviour;
        let since = (b.valid_since_s != 0).then(|| format_rfc3339_utc(b.valid_since_s));
        json!({
            "shortCode": key,
            "shortUrl": format!("{}/{key}", base.trim_end_matches('/')),
            "longUrl": &*info.target,
            "dateCreated": format_rfc3339_utc(info.created_at_s),
            "visitsSummary": {"total": 0, "nonBots": 0, "bots": 0},
            "tags": info.labels.tags().collect::<Vec<_>>(),
            "meta": {"validSince": since, "validUntil": expires,
                     "maxVisits": (b.max_visits != 0).then_some(b.max_visits)},
            "domain": domain,
            "title": info.labels.title(),
            "crawlable": b.crawlable,
            "forwardQuery": self.forwards_query(info),
            "hasRedirectRules": !info.rules.is_empty(),
        })
    }

    /// A list page in Shlink's envelope: page `page` of `per_page` items out of the walk's
    /// window, with pagination figures exact up to this page, and each item's visit totals
    /// (`totals`, in page order: clicks, bot clicks; zeros when empty).
    fn list_json(&self, walk: &ListWalk, page: u32, per_page: u32, totals: &[(u64, u64)]) -> Value {
        let (start, end, more) = page_bounds(walk, page, per_page);
        let data: Vec<Value> = walk.items[start..end]
            .iter()
            .enumerate()
            .map(|(n, i)| {
                let mut v = self.short_url_json(i);
                if let Some(&(clicks, bots)) = totals.get(n) {
                    v["visitsSummary"] = visits_summary(clicks, bots);
                }
                v
            })
            .collect();
        let (total, pages) = match &walk.scan {
            // A scan saw every link: exact.
            Some(scan) => {
                let total = usize::try_from(scan.matched).unwrap_or(usize::MAX);
                (total, total.div_ceil(per_page as usize).max(1))
            }
            // Exact up to this page; past it, "at least one more" when more follow.
            None => {
                let pages = if more { page + 1 } else { page.max(1) };
                (start + data.len() + usize::from(more), pages as usize)
            }
        };
        json!({"shortUrls": {"data": data, "pagination": {
        "currentPage": page, "pagesCount": pages, "itemsPerPage": per_page,
        "itemsInCurrentPage": data.len(), "totalItems": total}}})
    }

    /// The answer to a Shlink-shaped request; `None` while it is not one yet (a generated
    /// key collided, or the list walk goes on), as for native requests.
    // The page fields of the envelope ride along with `answer`'s own arguments.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn answer_shlink(
        &self,
        op: &mut ApiOp,
        page: u32,
        per_page: u32,
        outcome: WriteOutcome,
        out: &mut Vec<u8>,
        f: Framing<'_>,
    ) -> Option<()> {
        let ok = |out: &mut Vec<u8>, status: Status, v: &Value| {
            let body = serde_json::to_vec(v).expect("json");
            let r = Response {
                status,
                headers: &[],
                content_type: Some("application/json"),
                body: &body,
            };
            encode::encode_response(out, &r, f);
        };
        let fail = |out: &mut Vec<u8>, e: ShlinkError| e.encode(out, f);
        match (&mut *op, outcome) {
            (ApiOp::ShlinkRules(_), WriteOutcome::Found(i) | WriteOutcome::Updated(i)) => {
                ok(out, Status::Ok, &rules_json(&i));
            }
            (ApiOp::List(walk), WriteOutcome::Listed(l)) => {
                walk.take(l.items, (l.complete, l.resume), self.router.shard_count())?;
                return self.list_walked(op, page, per_page, out, f);
            }
            (ApiOp::Create { req, tries, .. }, WriteOutcome::Exists) => {
                if let Some(slug) = &req.custom_alias {
                    let e = ShlinkError {
                        status: 400,
                        type_: NON_UNIQUE_SLUG,
                        title: "Invalid custom slug",
                        detail: format!("Provided slug \"{slug}\" is already in use."),
                        extra: Some(("customSlug", json!(slug))),
                        retry_after_s: None,
                    };
                    fail(out, e);
                } else if *tries + 1 < MAX_CREATE_TRIES {
                    *tries += 1;
                    return None;
                } else {
                    fail(out, ShlinkError::from_native(&Problem::unavailable(1)));
                }
            }
            // A short URL read: its visit totals come from its aggregator next
            // (`shlink_stats_body`); with analytics off it has none.
            (op @ ApiOp::Get, WriteOutcome::Found(i)) if self.clicks.is_some() => {
                *op = ApiOp::ShlinkVisits(i);
                return None;
            }
            (_, WriteOutcome::Created(i) | WriteOutcome::Found(i) | WriteOutcome::Updated(i)) => {
                ok(out, Status::Ok, &self.short_url_json(&i));
            }
            (_, WriteOutcome::Deleted) => {
                let r = Response {
                    status: Status::NoContent,
                    headers: &[],
                    content_type: None,
                    body: b"",
                };
                encode::encode_response(out, &r, f);
            }
            (_, WriteOutcome::NotFound | WriteOutcome::Exists) => {
                fail(out, ShlinkError::not_found(None));
            }
            (op, other) => {
                // Every other outcome answers as the native API would, in Shlink's envelope.
                let mut native = Vec::new();
                let mut op2 = std::mem::replace(op, ApiOp::Get);
                let answered = self.answer(&mut op2, other, &mut native, f);
                *op = op2;
                answered?;
                out.extend_from_slice(&native);
            }
        }
        Some(())
    }
}

/// A link's redirect rules as Shlink answers them: its own target, then each rule with its
/// priority (from 1) and conditions (`matchKey` the query parameter's name, else `null`).
fn rules_json(info: &LinkInfo) -> Value {
    let rules = info.rules.set().decode().unwrap_or_default();
    let native = shards::rules::to_json(&rules);
    let shlink: Vec<Value> = native
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let conditions: Vec<Value> = r["conditions"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    json!({"type": c["type"], "matchKey": c.get("key").cloned().unwrap_or(Value::Null),
                           "matchValue": c["value"]})
                })
                .collect();
            json!({"longUrl": r["target"], "priority": i + 1, "conditions": conditions})
        })
        .collect();
    json!({"defaultLongUrl": &*info.target, "redirectRules": shlink})
}

/// A Shlink `{"redirectRules": [{"longUrl", "conditions": [{"type", "matchKey",
/// "matchValue"}]}]}` body as the native PATCH's `redirect_rules`, in the order given
/// (Shlink's `priority`, if sent, must agree with it).
fn native_rules_body(body: &[u8]) -> Result<Vec<u8>, ShlinkError> {
    let field = Some("redirectRules");
    let bad = |d: String| ShlinkError::invalid(d, field);
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ShlinkError::invalid(format!("the body is not JSON: {e}"), None))?;
    let rules = v
        .get("redirectRules")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("redirectRules must be an array of rules".into()))?;
    let mut native = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let conditions = r
            .get("conditions")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("redirectRules[{i}].conditions must be an array")))?;
        let conditions: Vec<Value> = conditions
            .iter()
            .map(|c| {
                let mut n = json!({"type": c.get("type").cloned().unwrap_or(Value::Null),
                                   "value": c.get("matchValue").cloned().unwrap_or(json!(""))});
                if let Some(k) = c.get("matchKey").filter(|k| !k.is_null()) {
                    n["key"] = k.clone();
                }
                n
            })
            .collect();
        let target = r.get("longUrl").cloned().unwrap_or(Value::Null);
        native.push(json!({"target": target, "conditions": conditions}));
    }
    Ok(serde_json::to_vec(&json!({"redirect_rules": native})).expect("json"))
}

/// `page` (from 1) and `itemsPerPage` (1 to 500; -1, "all", is refused: use the cursor API).
/// The `domain` query parameter, if given and not empty.
fn shlink_domain_param(query: Option<&[u8]>) -> Option<String> {
    url::form_urlencoded::parse(query.unwrap_or_default())
        .find(|(k, _)| k == "domain")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

/// A Shlink list request's parameters.
struct ListParams {
    page: u32,
    per_page: u32,
    order: Option<ListOrder>,
    /// `searchTerm`, lowercase.
    search: Option<String>,
    /// `startDate`, `endDate`: creation seconds, both included.
    created: Option<(u64, u64)>,
    /// `tags[]` with `tagsMode` (`any`, the default, or `all`).
    tags: Option<crate::mesh::TagFilter>,
    /// `excludeTags[]` with `excludeTagsMode`.
    exclude_tags: Option<crate::mesh::TagFilter>,
    /// `excludeMaxVisitsReached=true`.
    exclude_used_up: bool,
}

impl ListParams {
    /// Whether the list must see every link (an order or a content filter).
    fn scans(&self) -> bool {
        self.order.is_some()
            || self.search.is_some()
            || self.created.is_some()
            || self.tags.is_some()
            || self.exclude_tags.is_some()
            || self.exclude_used_up
    }
}

fn shlink_page(query: Option<&[u8]>) -> Result<ListParams, ShlinkError> {
    let mut p = ListParams {
        page: 1,
        per_page: SHLINK_DEFAULT_PAGE_ITEMS,
        order: None,
        search: None,
        created: None,
        tags: None,
        exclude_tags: None,
        exclude_used_up: false,
    };
    let (mut from, mut to) = (None, None);
    let (mut tags, mut excluded) = Default::default();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default()) {
        match &*k {
            "page" => {
                p.page = v.parse().ok().filter(|p| *p >= 1).ok_or_else(|| {
                    ShlinkError::invalid("page must be a whole number from 1", Some("page"))
                })?
            }
            "itemsPerPage" => p.per_page = items_per_page(&v)?,
            "orderBy" => p.order = parse_order(&v)?,
            "searchTerm" if v.trim().is_empty() => {}
            "searchTerm" if v.len() > MAX_SEARCH_TERM_BYTES => {
                return Err(ShlinkError::invalid(
                    format!("searchTerm is longer than {MAX_SEARCH_TERM_BYTES} bytes"),
                    Some("searchTerm"),
                ))
            }
            "searchTerm" => p.search = Some(v.trim().to_ascii_lowercase()),
            "startDate" => from = Some(shlink_date(&v, "startDate")?),
            "endDate" => to = Some(shlink_date(&v, "endDate")?),
            // Expired links are never listed (docs/shlink.md), so both values list the same.
            "excludePastValidUntil" if matches!(&*v, "true" | "false") => {}
            "tags[]" | "tagsMode" => tag_param(&k, &v, &mut tags)?,
            "excludeTags[]" | "excludeTagsMode" => tag_param(&k, &v, &mut excluded)?,
            "excludeMaxVisitsReached" => p.exclude_used_up = shlink_bool(&v, &k)?,
            // Filters Shlink offers that need what ricochet does not keep yet are refused,
            // never silently ignored.
            "excludePastValidUntil" | "apiKeyName" => {
                return Err(ShlinkError::invalid(
                    format!("{k}: this filter is not supported by this server"),
                    Some(&k),
                ))
            }
            _ => {}
        }
    }
    if from.is_some() || to.is_some() {
        p.created = Some((from.unwrap_or(0), to.unwrap_or(u64::MAX)));
    }
    let some = |t: crate::mesh::TagFilter| (!t.tags.is_empty()).then_some(t);
    (p.tags, p.exclude_tags) = (some(tags), some(excluded));
    if p.page.saturating_mul(p.per_page) > MAX_SHLINK_WINDOW {
        return Err(ShlinkError::invalid(
            format!("page * itemsPerPage may reach item {MAX_SHLINK_WINDOW} at most; walk further with GET /api/v1/urls?cursor="),
            Some("page"),
        ));
    }
    Ok(p)
}

/// `itemsPerPage`: 1 to the native list's `MAX_LIST_LIMIT`.
fn items_per_page(v: &str) -> Result<u32, ShlinkError> {
    let max = super::listing::MAX_LIST_LIMIT;
    v.parse()
        .ok()
        .filter(|n| (1..=u32::from(max)).contains(n))
        .ok_or_else(|| {
            ShlinkError::invalid(
                format!("itemsPerPage must be from 1 to {max}"),
                Some("itemsPerPage"),
            )
        })
}

/// `PUT /rest/v3/tags`'s body, `{"oldName", "newName"}`, as a retag.
fn rename_of(body: &[u8]) -> Result<crate::api::request::Retag, ShlinkError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ShlinkError::invalid(format!("the body is not JSON: {e}"), None))?;
    let name = |field: &str| {
        let raw = v[field].as_str().ok_or_else(|| {
            ShlinkError::invalid(format!("{field} must be a string"), Some(field))
        })?;
        shards::labels::normalize_tag(raw).map_err(|e| ShlinkError::invalid(e.0, Some(field)))
    };
    Ok(crate::api::request::Retag {
        from: vec![name("oldName")?],
        to: Some(name("newName")?),
    })
}

/// `DELETE /rest/v3/tags`'s `tags[]` parameters, as a retag that removes them.
fn removal_of(query: Option<&[u8]>) -> Result<crate::api::request::Retag, ShlinkError> {
    let mut from = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default()) {
        if k == "tags[]" {
            let tag = shards::labels::normalize_tag(&v)
                .map_err(|e| ShlinkError::invalid(e.0, Some("tags")))?;
            from.push(tag);
        }
    }
    from.sort();
    from.dedup();
    Ok(crate::api::request::Retag { from, to: None })
}

/// Why a tag list or edit is refused, answered in the shape of the API it came through.
pub(super) enum TagRefusal {
    /// More links carry the tags than a walk holds ([`super::tags::MAX_TAGGED_LINKS`]).
    TooMany,
    /// A rename's old tag is on no link the key reaches.
    NotFound,
    /// A rename's new tag is on a link already.
    Conflict,
    Problem(Problem),
}

pub(super) fn encode_tag_refusal(native: bool, r: TagRefusal, out: &mut Vec<u8>, f: Framing<'_>) {
    if !native {
        let e = match r {
            TagRefusal::TooMany => ShlinkError::too_many_tagged(),
            TagRefusal::NotFound => ShlinkError::tag(404, TAG_NOT_FOUND),
            TagRefusal::Conflict => ShlinkError::tag(409, TAG_CONFLICT),
            TagRefusal::Problem(p) => ShlinkError::from_native(&p),
        };
        return e.encode(out, f);
    }
    let p = match r {
        TagRefusal::TooMany => {
            let mut p = Problem::too_many_links(super::tags::MAX_TAGGED_LINKS);
            p.detail = format!(
                "more than {} links carry these tags, more than a tag list or edit walks",
                super::tags::MAX_TAGGED_LINKS
            );
            p
        }
        TagRefusal::NotFound => {
            let mut p = Problem::not_found();
            p.detail = "no link this key reaches carries the tag".into();
            p
        }
        TagRefusal::Conflict => Problem::tag_conflict(),
        TagRefusal::Problem(p) => p,
    };
    super::encode_problem(out, &p, &[], f);
}

/// A 204 with no body.
pub(super) fn encode_no_content(out: &mut Vec<u8>, f: Framing<'_>) {
    let r = Response {
        status: Status::NoContent,
        headers: &[],
        content_type: None,
        body: b"",
    };
    encode::encode_response(out, &r, f);
}

/// `tags[]` (one more tag, normalized) or `tagsMode` (`any` or `all`) into `tags`.
/// (`excludeTags[]` and `excludeTagsMode` likewise.)
fn tag_param(k: &str, v: &str, tags: &mut crate::mesh::TagFilter) -> Result<(), ShlinkError> {
    if k.ends_with("[]") {
        let tag =
            shards::labels::normalize_tag(v).map_err(|e| ShlinkError::invalid(e.0, Some(k)))?;
        tags.tags.push(tag.into());
        return Ok(());
    }
    tags.all = match v {
        "any" => false,
        "all" => true,
        _ => {
            return Err(ShlinkError::invalid(
                format!("{k} must be any or all"),
                Some(k),
            ))
        }
    };
    Ok(())
}

/// A Shlink boolean parameter: `true` or `false`.
fn shlink_bool(v: &str, k: &str) -> Result<bool, ShlinkError> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ShlinkError::invalid(
            format!("{k} must be true or false"),
            Some(k),
        )),
    }
}

pub use super::listing::MAX_SEARCH_TERM_BYTES;

/// Shlink's `orderBy`: `field-ASC` or `field-DESC` (a bare field is ascending); by `title`,
/// links without one come first ascending.
fn parse_order(v: &str) -> Result<Option<ListOrder>, ShlinkError> {
    let (field, dir) = v.rsplit_once('-').unwrap_or((v, "ASC"));
    let bad = || {
        ShlinkError::invalid(
            format!("orderBy {v:?}: expected dateCreated, shortCode, longUrl, title, visits or nonBotVisits, then -ASC or -DESC"),
            Some("orderBy"),
        )
    };
    let descending = match dir {
        "ASC" => false,
        "DESC" => true,
        _ => return Err(bad()),
    };
    let field = match field {
        "dateCreated" => OrderField::Created,
        "shortCode" => OrderField::Key,
        "title" => OrderField::Title,
        "longUrl" => OrderField::Target,
        "visits" => OrderField::Visits { non_bots: false },
        "nonBotVisits" => OrderField::Visits { non_bots: true },
        _ => return Err(bad()),
    };
    Ok(Some(ListOrder { field, descending }))
}

/// A date of a list filter: RFC 3339 (Shlink's ATOM), or a bare date (its midnight, UTC).
fn shlink_date(v: &str, field: &str) -> Result<u64, ShlinkError> {
    let full = if v.len() == 10 {
        format!("{v}T00:00:00Z")
    } else {
        v.to_string()
    };
    crate::api::timefmt::parse_rfc3339_s(&full)
        .map_err(|e| ShlinkError::invalid(format!("{field} {v:?} is not a date: {e}"), Some(field)))
}

/// The body of `PATCH /rest/v3/domains/redirects`: `domain` (required) and Shlink's three
/// redirect members, each a string, `null` (cleared) or absent (kept).
fn parse_redirects_edit(body: &[u8]) -> Result<crate::api::domains::RedirectsEdit, ShlinkError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ShlinkError::invalid(format!("the body is not JSON: {e}"), None))?;
    let Value::Object(o) = v else {
        return Err(ShlinkError::invalid("the body is not a JSON object", None));
    };
    let domain = match o.get("domain") {
        Some(Value::String(d)) => d.clone(),
        _ => {
            return Err(ShlinkError::invalid(
                "domain: the name of a declared domain is required",
                Some("domain"),
            ))
        }
    };
    let member = |name: &'static str| match o.get(name) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(u)) => Ok(Some(Some(u.clone()))),
        Some(_) => Err(ShlinkError::invalid(
            format!("{name}: a URL or null"),
            Some(name),
        )),
    };
    Ok(crate::api::domains::RedirectsEdit {
        domain,
        base_url: member("baseUrlRedirect")?,
        regular_404: member("regular404Redirect")?,
        invalid_short_url: member("invalidShortUrlRedirect")?,
    })
}

/// Shlink's `visitsSummary` of `clicks` of which `bots` were bots'.
fn visits_summary(clicks: u64, bots: u64) -> Value {
    json!({"total": clicks, "nonBots": clicks.saturating_sub(bots), "bots": bots})
}

/// The walk's items on page `page` of `per_page` (`start..end`), and whether more follow.
fn page_bounds(walk: &ListWalk, page: u32, per_page: u32) -> (usize, usize, bool) {
    let window = (page * per_page) as usize;
    let len = walk.items.len();
    let start = window.saturating_sub(per_page as usize).min(len);
    (start, len.min(window), len > window)
}
