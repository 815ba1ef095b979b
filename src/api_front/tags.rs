//! Tag lists (`GET /api/v1/tags`; Shlink's `GET /rest/v3/tags` and `GET /rest/v3/tags/stats`):
//! every tag the key's links carry, and for each the links carrying it and their visits; and
//! tag edits (rename, removal) over every link carrying the tag. There is no tag
//! index: the answer is a walk of every shard for the tagged links the key reaches (bounded
//! by [`MAX_TAGGED_LINKS`]), then, for the stats, each link's visit totals asked of its
//! aggregator in turn (as the visits overview does), folded per tag.
//!
//! This module holds the request's state and builds its answer in the API's shape (native or
//! Shlink's); `shlink.rs` and `tag_api.rs` parse the requests and start the walks, `mod.rs`
//! carries them from reply to reply.

use super::listing::ListWalk;
use crate::api::problem::Problem;
use crate::http::parse::Method;
use crate::mesh::LinkInfo;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Most tagged links a tag list walks (a key reaching more is refused, 422
/// `too-many-links`): each is held while the walk goes on, and the stats ask each one's
/// totals in turn. As many as the visits overview sums (`MAX_OVERVIEW_LINKS`).
pub const MAX_TAGGED_LINKS: u32 = super::stats_sum::MAX_OVERVIEW_LINKS;

/// The native tag endpoints' root.
pub const TAGS: &[u8] = b"/api/v1/tags";

/// Which of the native tag endpoints a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagsPath<'r> {
    /// `/api/v1/tags`.
    List,
    /// `/api/v1/tags/{tag}`, the tag as sent (percent-encoded).
    One(&'r [u8]),
}

impl<'r> TagsPath<'r> {
    /// The endpoint `path` names, if it is one of these.
    pub fn of(path: &'r [u8]) -> Option<TagsPath<'r>> {
        if path == TAGS {
            return Some(TagsPath::List);
        }
        let one = path.strip_prefix(TAGS)?.strip_prefix(b"/")?;
        (!one.is_empty() && !one.contains(&b'/')).then_some(TagsPath::One(one))
    }

    /// Whether `method` is served here, and else the `Allow` value.
    pub fn allows(self, method: Method) -> Result<(), &'static [u8]> {
        match (self, method) {
            (TagsPath::List, Method::Get) => Ok(()),
            (TagsPath::One(_), Method::Patch | Method::Delete) => Ok(()),
            (TagsPath::List, _) => Err(b"GET"),
            (TagsPath::One(_), _) => Err(b"PATCH, DELETE"),
        }
    }
}

/// How the tags are ordered (Shlink's `orderBy`): by name, by links, by visits, by
/// non-bot visits; ties by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagOrder {
    Tag,
    Links,
    Visits,
    NonBotVisits,
}

/// A tag list's query: `page` and `itemsPerPage` (all tags on one page when absent),
/// `searchTerm` (tags containing it), `orderBy`.
#[derive(Clone, Debug)]
pub struct TagParams {
    page: u32,
    per_page: Option<u32>,
    search: Option<String>,
    order: TagOrder,
    descending: bool,
}

impl TagParams {
    /// Every tag on one page, by name: a list's parameters before its query is read.
    const ALL_BY_NAME: TagParams = TagParams {
        page: 1,
        per_page: None,
        search: None,
        order: TagOrder::Tag,
        descending: false,
    };

    /// Reads a tag list's query (`stats`: `/tags/stats`, which may order by visits).
    pub fn parse(query: Option<&[u8]>, stats: bool) -> Result<TagParams, Problem> {
        let mut p = TagParams::ALL_BY_NAME;
        let number = |v: &str, field: &'static str| {
            v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                Problem::invalid_field(
                    Some(field),
                    format!("{field} must be a whole number from 1"),
                )
            })
        };
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default()) {
            match &*k {
                "page" => p.page = number(&v, "page")?,
                "itemsPerPage" => p.per_page = Some(number(&v, "itemsPerPage")?),
                "searchTerm" => {
                    p.search = (!v.trim().is_empty()).then(|| v.trim().to_lowercase());
                }
                "orderBy" => (p.order, p.descending) = parse_order(&v, stats)?,
                _ => {}
            }
        }
        Ok(p)
    }

    /// The native list's query: `search` (tags containing it, case ignored); every tag on
    /// one page, by name. Another parameter is refused (a typo is not another list).
    pub fn native(query: Option<&[u8]>) -> Result<TagParams, Problem> {
        let mut p = TagParams::ALL_BY_NAME;
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default()) {
            match &*k {
                "search" if v.len() > super::listing::MAX_SEARCH_TERM_BYTES => {
                    let why = format!(
                        "search is longer than {} bytes",
                        super::listing::MAX_SEARCH_TERM_BYTES
                    );
                    return Err(Problem::invalid_field(Some("search"), why));
                }
                "search" => p.search = (!v.trim().is_empty()).then(|| v.trim().to_lowercase()),
                other => {
                    return Err(Problem::invalid_field(
                        None,
                        format!("unknown query parameter {other:?} (search)"),
                    ))
                }
            }
        }
        Ok(p)
    }
}

/// `field-ASC` or `field-DESC` (a bare field is ascending).
fn parse_order(v: &str, stats: bool) -> Result<(TagOrder, bool), Problem> {
    let (field, descending) = match v.rsplit_once('-') {
        Some((f, "ASC")) => (f, false),
        Some((f, "DESC")) => (f, true),
        _ => (v, false),
    };
    let order = match field {
        "tag" => TagOrder::Tag,
        "shortUrlsCount" if stats => TagOrder::Links,
        "visits" if stats => TagOrder::Visits,
        "nonBotVisits" if stats => TagOrder::NonBotVisits,
        _ => {
            let fields = match stats {
                true => "tag, shortUrlsCount, visits or nonBotVisits",
                false => "tag",
            };
            return Err(Problem::invalid_field(
                Some("orderBy"),
                format!("orderBy {v:?}: expected {fields}, then -ASC or -DESC"),
            ));
        }
    };
    Ok((order, descending))
}

/// A tag list in progress: the walk over the tagged links, then (stats) their totals.
#[derive(Debug)]
pub struct TagsWalk {
    pub walk: ListWalk,
    /// `/tags/stats` or the native list: links and visits per tag.
    pub stats: bool,
    /// The native API's list (its shape, its problems), not Shlink's.
    pub native: bool,
    params: TagParams,
    /// `Some` once the walk is over and totals are wanted: each walked link's clicks and bot
    /// clicks so far, in walk order.
    totals: Option<Vec<(u64, u64)>>,
}

/// One tag's figures: links, clicks, bot clicks.
type TagFigures = (u64, u64, u64);

impl TagsWalk {
    pub fn new(walk: ListWalk, stats: bool, params: TagParams) -> TagsWalk {
        TagsWalk {
            walk,
            stats,
            native: false,
            params,
            totals: None,
        }
    }

    /// Whether the walk over the links goes on.
    pub fn is_walking(&self) -> bool {
        self.totals.is_none()
    }

    /// The walk is over: with `counting` (stats, analytics on, some links), the links'
    /// totals are asked next (`true`); else the answer is ready (`false`).
    pub fn walked(&mut self, counting: bool) -> bool {
        let ask = counting && self.stats && !self.walk.items.is_empty();
        if ask {
            self.totals = Some(Vec::with_capacity(self.walk.items.len()));
        }
        ask
    }

    /// The whole-window stats query of the next link without totals.
    pub fn next_query(&self) -> crate::analytics::stats::StatsQuery {
        let done = self.totals.as_ref().map_or(0, Vec::len);
        let info = &self.walk.items[done];
        let today = shards::clicks::day_of(shards::timefmt::now_s());
        crate::analytics::stats::StatsQuery::whole_window(info.key, today)
    }

    /// Folds a link's stats answer in; `true` once every link's totals are in.
    pub fn fold(&mut self, native: &[u8]) -> bool {
        let v: Value = serde_json::from_slice(native).unwrap_or(Value::Null);
        let n = |k: &str| v["summary"][k].as_u64().unwrap_or(0);
        let totals = self.totals.get_or_insert_with(Vec::new);
        totals.push((n("clicks"), n("bot_clicks")));
        totals.len() == self.walk.items.len()
    }

    /// The native list: every tag, walked as Shlink's `/tags/stats`.
    pub fn native(walk: ListWalk, params: TagParams) -> TagsWalk {
        TagsWalk {
            native: true,
            ..TagsWalk::new(walk, true, params)
        }
    }

    /// The answer: natively `{"items": [{"tag", "links", "clicks", "human_clicks",
    /// "bot_clicks"}, ...]}` by name; for Shlink `{"tags": {"data": [...], "pagination":
    /// {...}}}`, names for `/tags`, `{"tag", "shortUrlsCount", "visitsSummary"}` objects for
    /// `/tags/stats`.
    pub fn body(&self) -> Value {
        let figures = self.figures();
        if self.native {
            let items: Vec<Value> = figures
                .iter()
                .filter(|(t, _)| self.params.search.as_deref().is_none_or(|s| t.contains(s)))
                .map(|(t, (links, clicks, bots))| {
                    json!({"tag": t, "links": links, "clicks": clicks,
                           "human_clicks": clicks.saturating_sub(*bots), "bot_clicks": bots})
                })
                .collect();
            return json!({ "items": items });
        }
        let mut tags: Vec<(&str, TagFigures)> = figures
            .iter()
            .map(|(t, f)| (t.as_str(), *f))
            .filter(|(t, _)| self.params.search.as_deref().is_none_or(|s| t.contains(s)))
            .collect();
        let figure = |f: &TagFigures| match self.params.order {
            TagOrder::Tag => 0,
            TagOrder::Links => f.0,
            TagOrder::Visits => f.1,
            TagOrder::NonBotVisits => f.1.saturating_sub(f.2),
        };
        let by_name = self.params.order == TagOrder::Tag;
        tags.sort_by(|a, b| {
            let primary = match by_name {
                true => a.0.cmp(b.0),
                false => figure(&a.1).cmp(&figure(&b.1)),
            };
            let primary = match self.params.descending {
                true => primary.reverse(),
                false => primary,
            };
            // Ties by name, ascending either way.
            primary.then_with(|| a.0.cmp(b.0))
        });
        let total = tags.len();
        let per_page = self.params.per_page.map_or(total.max(1), |n| n as usize);
        let start = (self.params.page as usize - 1)
            .saturating_mul(per_page)
            .min(total);
        let end = start.saturating_add(per_page).min(total);
        let data: Vec<Value> = tags[start..end]
            .iter()
            .map(|(t, (links, clicks, bots))| match self.stats {
                false => json!(t),
                true => json!({"tag": t, "shortUrlsCount": links,
                               "visitsSummary": {"total": clicks,
                                                 "nonBots": clicks.saturating_sub(*bots),
                                                 "bots": bots}}),
            })
            .collect();
        json!({"tags": {"data": data, "pagination": {
            "currentPage": self.params.page,
            "pagesCount": total.div_ceil(per_page),
            "itemsPerPage": per_page,
            "itemsInCurrentPage": end - start,
            "totalItems": total,
        }}})
    }

    /// Per tag: the links carrying it and their clicks and bot clicks (zeros without totals).
    fn figures(&self) -> BTreeMap<String, TagFigures> {
        let mut out: BTreeMap<String, TagFigures> = BTreeMap::new();
        for (i, info) in self.walk.items.iter().enumerate() {
            let (clicks, bots) = self
                .totals
                .as_ref()
                .and_then(|t| t.get(i).copied())
                .unwrap_or((0, 0));
            for tag in info.labels.tags() {
                let f = out.entry(tag.to_owned()).or_default();
                *f = (f.0 + 1, f.1 + clicks, f.2 + bots);
            }
        }
        out
    }
}

/// A tag walk's owner reply taken in: `Some(true)` once the walk is over, `Some(false)`
/// while it goes on, `None` once it holds more than [`MAX_TAGGED_LINKS`] links (refused).
pub fn take_tagged(
    walk: &mut ListWalk,
    page: crate::mesh::ListedShard,
    shards: u32,
) -> Option<bool> {
    let done = walk.take(page.items, (page.complete, page.resume), shards);
    (walk.items.len() <= MAX_TAGGED_LINKS as usize).then_some(done.is_some())
}

/// Shlink's `PUT /rest/v3/tags` (rename) or `DELETE /rest/v3/tags` (removal) in progress:
/// the walk over the links carrying the tags (bounded as a tag list's), then one change per
/// link, in turn, each applied by the link's owner to the tags it has then
/// (`api::request::Retag`), so a concurrent change of a link's tags is never undone.
#[derive(Debug)]
pub struct TagEdit {
    pub walk: ListWalk,
    /// The native API's edit (its problems), not Shlink's.
    pub native: bool,
    retag: crate::api::request::Retag,
    /// `None` while the walk goes on; then the next walked link to change.
    next: Option<usize>,
}

/// Why a rename is refused once the links are walked (Shlink's answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditRefusal {
    /// No link the key reaches carries the old name: 404 `tag-not-found`.
    NotFound,
    /// A link carries the new name already: 409 `tag-conflict`.
    Conflict,
}

impl TagEdit {
    pub fn new(walk: ListWalk, retag: crate::api::request::Retag) -> TagEdit {
        TagEdit {
            walk,
            native: false,
            retag,
            next: None,
        }
    }

    /// Whether the walk over the links goes on.
    pub fn is_walking(&self) -> bool {
        self.next.is_none()
    }

    /// The change it makes to each link.
    pub fn retag(&self) -> &crate::api::request::Retag {
        &self.retag
    }

    /// The walk is over: the links carrying the old tags are changed next (`Ok(true)`),
    /// there are none (`Ok(false)`: done), or a rename is refused.
    pub fn walked(&mut self) -> Result<bool, EditRefusal> {
        let from = &self.retag.from;
        let carries = |i: &LinkInfo, t: &str| i.labels.has_tag(t);
        if let Some(to) = self.retag.to.as_deref() {
            if !self.walk.items.iter().any(|i| carries(i, &from[0])) {
                return Err(EditRefusal::NotFound);
            }
            if from[0] == to {
                return Ok(false);
            }
            if self.walk.items.iter().any(|i| carries(i, to)) {
                return Err(EditRefusal::Conflict);
            }
        }
        self.walk
            .items
            .retain(|i| from.iter().any(|t| carries(i, t)));
        self.next = Some(0);
        Ok(!self.walk.items.is_empty())
    }

    /// The change of the next link.
    pub fn next_change(&self) -> crate::mesh::WriteReq {
        let info = &self.walk.items[self.next.expect("walked")];
        crate::mesh::WriteReq::Patch {
            key: info.key,
            target: None,
            expiry: crate::api::request::ExpiryUpdate::Keep,
            status: None,
            reach: crate::api::roles::AuthorReach::ANY,
            behaviour: Some(Box::new(crate::api::request::BehaviourUpdate {
                retag: Some(self.retag.clone()),
                ..Default::default()
            })),
        }
    }

    /// A link is changed (or gone meanwhile); `true` once every one is.
    pub fn changed(&mut self) -> bool {
        let next = self.next.map_or(0, |n| n + 1);
        self.next = Some(next);
        next >= self.walk.items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods() {
        assert_eq!(TagsPath::of(b"/api/v1/tags"), Some(TagsPath::List));
        assert_eq!(
            TagsPath::of(b"/api/v1/tags/summer-sale"),
            Some(TagsPath::One(b"summer-sale"))
        );
        for other in [&b"/api/v1/tags/"[..], b"/api/v1/tags/a/b", b"/api/v1/tagsx"] {
            assert_eq!(TagsPath::of(other), None);
        }
        assert!(TagsPath::List.allows(Method::Get).is_ok());
        assert_eq!(TagsPath::List.allows(Method::Post), Err(&b"GET"[..]));
        assert!(TagsPath::One(b"t").allows(Method::Delete).is_ok());
        assert_eq!(
            TagsPath::One(b"t").allows(Method::Get),
            Err(&b"PATCH, DELETE"[..])
        );
    }
}
