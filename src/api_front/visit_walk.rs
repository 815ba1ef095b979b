//! A Shlink visit list in progress ([`VisitWalk`]) and its request's parts: which list a
//! path names, the paging and filters, how far a page may reach ([`MAX_VISIT_WINDOW`]). The
//! answers are built in `visits.rs`; this module imports nothing of the API front's own, so
//! the front's operation (`ApiOp`) can hold a walk without a circle.

use crate::analytics::visit_log::{VisitKeys, VisitLogQuery};
use crate::api::problem::Problem;
use serde_json::Value;
use shards::clicks::visits::Orphan;

/// The deepest visit a page reaches (`page * itemsPerPage`): each aggregator sends that many
/// for a merged list, so this bounds an answer's work and size (about 300 bytes a visit).
pub const MAX_VISIT_WINDOW: u64 = 50_000;

/// A visit list being gathered.
#[derive(Debug)]
pub struct VisitWalk {
    pub(super) query: VisitLogQuery,
    /// Visits skipped from the newest (page), by the one aggregator asked for a link, or
    /// here for a merged list.
    pub(super) skip: u64,
    pub(super) page: u32,
    pub(super) per_page: u32,
    /// The aggregators to ask, in order, and how many have answered.
    pub(super) cores: Vec<usize>,
    pub(super) answered: usize,
    pub(super) total: u64,
    pub(super) visits: Vec<Value>,
    /// Shlink's `DELETE /short-urls/{code}/visits`: the key's reach, for the stats reset
    /// that follows the count, and whether it was sent.
    pub(super) delete: Option<crate::api::roles::AuthorReach>,
    pub(super) reset_sent: bool,
    /// A tag's visits: the walk for the links carrying it, until it is over.
    pub(super) tagged: Option<super::listing::ListWalk>,
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
    pub(super) fn next_core(&self) -> usize {
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
    pub(super) fn page(&mut self) -> (u64, Vec<Value>) {
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
pub(super) enum ListOf<'a> {
    Link(&'a [u8]),
    NonOrphan,
    Orphan,
    Domain(&'a [u8]),
    Tag(&'a [u8]),
}

pub(super) fn list_of(path: &[u8]) -> Option<ListOf<'_>> {
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
pub(super) struct VisitParams {
    pub(super) page: u32,
    pub(super) per_page: u32,
    pub(super) from_ms: u64,
    pub(super) to_ms: u64,
    pub(super) exclude_bots: bool,
}

pub(super) fn parse_params(query: Option<&[u8]>) -> Result<VisitParams, Problem> {
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
pub(super) fn domain_param(
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
pub(super) fn domain_number(
    name: &str,
    domains: &crate::api::domains::Domains,
) -> Result<u32, Problem> {
    match name {
        "DEFAULT" => Ok(shards::link::DEFAULT_DOMAIN),
        _ => domains.by_name(name).map(|d| d.number).ok_or_else(|| {
            let mut e = Problem::not_found();
            e.detail = format!("no domain {name:?} is declared");
            e
        }),
    }
}

/// Shlink's orphan `type` filter: the kind it lists (`None`: every kind).
pub(super) fn orphan_type(query: Option<&[u8]>) -> Result<Option<Orphan>, Problem> {
    match url::form_urlencoded::parse(query.unwrap_or_default()).find(|(k, _)| k == "type") {
        None => Ok(None),
        Some((_, t)) => Orphan::parse(&t).map(Some).ok_or_else(|| {
            Problem::invalid_field(
                Some("type"),
                format!("type {t:?}: base_url, invalid_short_url or regular_404"),
            )
        }),
    }
}

/// A path segment with its `%XX` escapes decoded (a tag may hold any character; a `+`
/// reads as a space, which a tag turns into `-` anyway).
pub(super) fn percent_decoded(segment: &[u8]) -> String {
    let mut query = b"t=".to_vec();
    query.extend_from_slice(segment);
    url::form_urlencoded::parse(&query)
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// A date filter (RFC 3339, or a bare date's midnight UTC) in unix ms.
pub(super) fn date_ms(v: &str, field: &'static str) -> Result<u64, Problem> {
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
impl VisitWalk {
    /// A walk over `cores` for `keys` with the request's paging.
    pub(super) fn new(keys: VisitKeys, p: &VisitParams, cores: Vec<usize>) -> VisitWalk {
        let skip = u64::from(p.page - 1) * u64::from(p.per_page);
        VisitWalk {
            query: VisitLogQuery {
                keys,
                from_ms: p.from_ms,
                to_ms: p.to_ms,
                exclude_bots: p.exclude_bots,
                orphans: false,
                orphan_kind: None,
                delete_orphans: false,
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

    /// The query the next aggregator is sent: for one link (one aggregator) the page
    /// itself; for a merged list every visit down to the page's end.
    pub(super) fn ask(&self) -> VisitLogQuery {
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
