//! `GET /api/v1/urls?limit=N&cursor=C`: a paged list of live links gathered from every owner
//! core, shard by shard (`owner::listing` answers one shard's page). The cursor names the
//! last link returned, `SHARD.KEY`; the walk's order (shard, then key bytes) is fixed for a
//! link's whole life, so a link that exists for the whole walk appears exactly once, whatever
//! is created, changed or deleted meanwhile. Clients treat the cursor as opaque.

use crate::api::problem::Problem;
use crate::base::key::InlineKey;
use crate::mesh::LinkInfo;

/// Links per page unless `limit` says otherwise.
pub const DEFAULT_LIST_LIMIT: u16 = 100;

/// Most links one page may hold: with 8 KiB targets a page stays under about 4 MiB.
pub const MAX_LIST_LIMIT: u16 = 500;

/// Links an owner core examines for one step of a scan (an ordered or searched list, which
/// must see every link) before it answers and the walk asks again: one step is a bounded
/// stretch of the owner's loop (a fraction of a millisecond), never a whole shard, and the
/// next step is taken at the owner's next loop turn at the earliest (`Mesh::begin_turn`),
/// after the redirects that arrived meanwhile. 4,096 held redirects about 2 ms behind a
/// scan on one core, 256 about 1.3 ms, at the same scan time
/// (perf/reports/2026-12-07-session20-scan-p99.md).
pub const SCAN_STEP_LINKS: u32 = 256;

/// What an ordered list is sorted by (Shlink's `orderBy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderField {
    /// Creation time, then the creation tag.
    Created,
    /// The short code (its bytes).
    Key,
    /// The target.
    Target,
    /// The title; links without one first.
    Title,
    /// Visits over the click window, bots included (`non_bots`: without them). Not known
    /// while the walk goes on: the walk keeps every match in key order, and the page is
    /// sorted once each link's totals are in (`shlink::on_list_visits`).
    Visits { non_bots: bool },
}

/// An order: a field and a direction. Ties are broken by the stored key, ascending, so an
/// order is total and pages do not overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListOrder {
    pub field: OrderField,
    pub descending: bool,
}

impl ListOrder {
    fn cmp(&self, a: &LinkInfo, b: &LinkInfo) -> std::cmp::Ordering {
        let primary = match self.field {
            OrderField::Created => {
                (a.created_at_s, a.created_tag).cmp(&(b.created_at_s, b.created_tag))
            }
            OrderField::Key => short_code(a).cmp(short_code(b)),
            OrderField::Target => a.target.cmp(&b.target),
            OrderField::Title => a.labels.title().cmp(&b.labels.title()),
            OrderField::Visits { .. } => std::cmp::Ordering::Equal,
        };
        let primary = if self.descending {
            primary.reverse()
        } else {
            primary
        };
        primary.then_with(|| a.key.as_bytes().cmp(b.key.as_bytes()))
    }
}

/// A link's short code: its stored key without the domain's number.
fn short_code(i: &LinkInfo) -> &[u8] {
    shards::link::split_stored_key(i.key.as_bytes()).1
}

/// A walk that sees every link the filter admits (`ListWalk::scan`): what it matched so far
/// and in which order it keeps them. The walk holds at most its window's best links (plus a
/// step's), so a scan of 10M links needs no more memory than a page's window.
#[derive(Clone, Debug)]
pub struct Scan {
    /// `None`: walk order (shard, key), for a search without an order.
    pub order: Option<ListOrder>,
    /// Links the filter admitted in all: a page's exact `totalItems`.
    pub matched: u64,
}

impl Scan {
    /// Whether (and how: without bots, descending) the walk is ordered by visits.
    pub fn by_visits(&self) -> Option<(bool, bool)> {
        match self.order {
            Some(ListOrder {
                field: OrderField::Visits { non_bots },
                descending,
            }) => Some((non_bots, descending)),
            _ => None,
        }
    }
}

/// A list request in progress: the shard being asked, where the walk stands, what was found.
#[derive(Debug)]
pub struct ListWalk {
    pub shard: u32,
    pub after: Option<InlineKey>,
    /// Links the walk wants in all (a native page, or a Shlink page's whole window).
    pub limit: u32,
    pub items: Vec<LinkInfo>,
    /// Which links the walk lists: parsed from `?domain=`, then narrowed to the caller's reach
    /// (`api_front::list_filter`).
    pub filter: std::sync::Arc<crate::mesh::ListFilter>,
    /// `Some`: the walk sees every admitted link (an order or a content filter) in steps of
    /// [`SCAN_STEP_LINKS`], keeping the best `limit`; `None`: it stops once `limit` are found.
    pub scan: Option<Scan>,
}

impl ListWalk {
    /// Takes a shard's page. `Some(next_cursor)` once the page is full or every shard was
    /// asked (`None` inside: the walk is over); `None` while the next shard must be asked.
    pub fn take(
        &mut self,
        items: Vec<LinkInfo>,
        (complete, resume): (bool, Option<InlineKey>),
        shards: u32,
    ) -> Option<Option<String>> {
        if self.scan.is_some() {
            return self.take_scanned(items, (complete, resume), shards);
        }
        self.items.extend(items);
        if !complete && self.items.len() < self.limit as usize {
            // A content filter's step stopped at its budget: the same shard again.
            debug_assert!(resume.is_some(), "a step cut short says where to go on");
            self.after = resume;
            return None;
        }
        if self.items.len() >= self.limit as usize {
            let last = self.items.last().expect("a full page").key;
            // A full page ends at its last item; the next page starts after it (an empty page
            // is possible when the full page was the shard's and the walk's last).
            return Some(Some(cursor(self.shard, &last)));
        }
        debug_assert!(
            complete,
            "an owner returns a short page only when the shard is done"
        );
        if self.shard + 1 >= shards {
            return Some(None);
        }
        self.shard += 1;
        self.after = None;
        None
    }

    /// A scan's step: its links kept (the best `limit` of all so far), then the same shard
    /// again after `resume`, the next shard, or the end (`Some(None)`, the links in order).
    fn take_scanned(
        &mut self,
        items: Vec<LinkInfo>,
        (complete, resume): (bool, Option<InlineKey>),
        shards: u32,
    ) -> Option<Option<String>> {
        let scan = self.scan.as_mut().expect("a scan");
        scan.matched += items.len() as u64;
        self.items.extend(items);
        let keep = self.limit as usize;
        match scan.order {
            // Sorted once in a while, not per step: a step adds up to SCAN_STEP_LINKS.
            Some(order) if self.items.len() > 2 * keep => {
                self.items.sort_unstable_by(|a, b| order.cmp(a, b));
                self.items.truncate(keep);
            }
            Some(_) => {}
            // Walk order: the first ones found are the page's.
            None => self.items.truncate(keep),
        }
        if !complete {
            // Only a budget stops a scan's step short of its shard's end.
            debug_assert!(resume.is_some(), "a scan's step ends at its budget");
            self.after = resume;
            return None;
        }
        if self.shard + 1 < shards {
            self.shard += 1;
            self.after = None;
            return None;
        }
        if let Some(order) = scan.order {
            self.items.sort_unstable_by(|a, b| order.cmp(a, b));
        }
        self.items.truncate(keep);
        Some(None)
    }

    /// The walk where it stands, without its links: enough to ask its next step.
    pub fn clone_empty(&self) -> ListWalk {
        ListWalk {
            shard: self.shard,
            after: self.after,
            limit: self.limit,
            items: Vec::new(),
            filter: self.filter.clone(),
            scan: self.scan.clone(),
        }
    }

    /// Links still wanted from the next shard.
    pub fn wanted(&self) -> u32 {
        match self.scan {
            // A scan takes whatever a step admits.
            Some(_) => SCAN_STEP_LINKS,
            None => self.limit - self.items.len() as u32,
        }
    }

    /// Links an owner may examine for the next step: a scan's, or a content filter's (which
    /// can pass over long stretches), step; else no bound.
    pub fn budget(&self) -> Option<u32> {
        (self.scan.is_some() || self.filter.scans()).then_some(SCAN_STEP_LINKS)
    }
}

fn cursor(shard: u32, key: &InlineKey) -> String {
    format!("{shard}.{}", key.as_str())
}

/// Parses `limit` and `cursor` from the query. Unknown parameters are refused, so a typo is
/// not silently a different page.
pub fn parse_query(
    query: Option<&[u8]>,
    shards: u32,
    domains: &crate::api::domains::Domains,
) -> Result<ListWalk, Problem> {
    let mut walk = ListWalk {
        shard: 0,
        after: None,
        limit: u32::from(DEFAULT_LIST_LIMIT),
        items: Vec::new(),
        filter: Default::default(),
        scan: None,
    };
    let text = std::str::from_utf8(query.unwrap_or_default())
        .map_err(|_| Problem::invalid_field(None, "the query is not UTF-8"))?;
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "limit" => walk.limit = parse_limit(value)?,
            "cursor" => {
                let bad =
                    || Problem::invalid_field(Some("cursor"), "not a cursor this server issued");
                let (shard, key) = value.split_once('.').ok_or_else(bad)?;
                let shard = shard
                    .parse::<u32>()
                    .ok()
                    .filter(|s| *s < shards)
                    .ok_or_else(bad)?;
                shards::link::validate_stored_key(key.as_bytes()).map_err(|_| bad())?;
                walk.shard = shard;
                walk.after = Some(InlineKey::new(key.as_bytes()).ok_or_else(bad)?);
            }
            "search"
            | "created_from"
            | "created_to"
            | "tag"
            | "tags_mode"
            | "exclude_tag"
            | "exclude_tags_mode"
            | "exclude_max_visits_reached" => {
                content_filter(&mut walk, pair)?;
            }
            "domain" => {
                let name = url::form_urlencoded::parse(pair.as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                let d = domains.by_name(&name).ok_or_else(|| {
                    Problem::invalid_field(
                        Some("domain"),
                        format!("{name:?} is not a domain this server answers for"),
                    )
                })?;
                std::sync::Arc::make_mut(&mut walk.filter).domains = Some(vec![d.number]);
            }
            other => {
                return Err(Problem::invalid_field(
                    None,
                    format!(
                        "unknown query parameter {other:?} (limit, cursor, domain, search, \
                         created_from, created_to, tag, tags_mode, exclude_tag, \
                         exclude_tags_mode, exclude_max_visits_reached)"
                    ),
                ))
            }
        }
    }
    drop_lone_modes(&mut walk);
    Ok(walk)
}

/// `limit`: 1 to [`MAX_LIST_LIMIT`].
fn parse_limit(value: &str) -> Result<u32, Problem> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=u32::from(MAX_LIST_LIMIT)).contains(n))
        .ok_or_else(|| {
            Problem::invalid_field(
                Some("limit"),
                format!("limit must be a whole number from 1 to {MAX_LIST_LIMIT}"),
            )
        })
}

/// A tags mode without tags filters nothing: no filter.
fn drop_lone_modes(walk: &mut ListWalk) {
    let f = std::sync::Arc::make_mut(&mut walk.filter);
    for t in [&mut f.tags, &mut f.exclude_tags] {
        if t.as_ref().is_some_and(|t| t.tags.is_empty()) {
            *t = None;
        }
    }
}

/// Bytes of a list's search term (`?search=`, Shlink's `searchTerm`).
pub const MAX_SEARCH_TERM_BYTES: usize = 256;

/// `search` (the key, target, title or a tag contains it, ASCII case ignored), `tag`
/// (repeated: links with any of them, or with all under `tags_mode=all`), `created_from` or
/// `created_to` (RFC 3339, both included) into the walk's filter.
fn content_filter(walk: &mut ListWalk, pair: &str) -> Result<(), Problem> {
    let (name, v) = url::form_urlencoded::parse(pair.as_bytes())
        .next()
        .unwrap_or_default();
    let name = match &*name {
        "search" => "search",
        "created_from" => "created_from",
        "tag" => "tag",
        "tags_mode" => "tags_mode",
        "exclude_tag" => "exclude_tag",
        "exclude_tags_mode" => "exclude_tags_mode",
        "exclude_max_visits_reached" => "exclude_max_visits_reached",
        _ => "created_to",
    };
    let f = std::sync::Arc::make_mut(&mut walk.filter);
    if name == "exclude_max_visits_reached" {
        f.exclude_used_up = match &*v {
            "true" => true,
            "false" => false,
            _ => return Err(Problem::invalid_field(Some(name), "true or false")),
        };
        return Ok(());
    }
    if name.contains("tag") {
        let t = match name.starts_with("exclude") {
            true => f.exclude_tags.get_or_insert_with(Default::default),
            false => f.tags.get_or_insert_with(Default::default),
        };
        match name {
            "tag" | "exclude_tag" => t.tags.push(
                shards::labels::normalize_tag(&v)
                    .map_err(|e| Problem::invalid_field(Some(name), e.0))?
                    .into(),
            ),
            _ => {
                t.all = match &*v {
                    "any" => false,
                    "all" => true,
                    _ => {
                        return Err(Problem::invalid_field(
                            Some(name),
                            "tags_mode is any or all",
                        ))
                    }
                }
            }
        }
        return Ok(());
    }
    if name == "search" {
        if v.len() > MAX_SEARCH_TERM_BYTES {
            let why = format!("search is longer than {MAX_SEARCH_TERM_BYTES} bytes");
            return Err(Problem::invalid_field(Some("search"), why));
        }
        f.search = (!v.trim().is_empty()).then(|| v.trim().to_ascii_lowercase().into());
        return Ok(());
    }
    let s = crate::api::timefmt::parse_rfc3339_s(&v).map_err(|e| {
        Problem::invalid_field(Some(name), format!("{v:?} is not an RFC 3339 time: {e}"))
    })?;
    let (from, to) = f.created.unwrap_or((0, u64::MAX));
    f.created = Some(match name {
        "created_from" => (s, to),
        _ => (from, s),
    });
    Ok(())
}

/// The page body: `{"items": [link, ...], "next_cursor": "..." | null}`.
pub fn page_json(links: &[Vec<u8>], next: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(links.iter().map(Vec::len).sum::<usize>() + 64);
    out.extend_from_slice(b"{\"items\":[");
    for (i, l) in links.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(l);
    }
    out.extend_from_slice(b"],\"next_cursor\":");
    match next {
        Some(c) => out.extend_from_slice(&serde_json::to_vec(c).expect("a string")),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_and_refuse_clearly() {
        let w = parse_query(None, 256, &Default::default()).unwrap();
        assert_eq!(
            (w.shard, w.after, w.limit),
            (0, None, u32::from(DEFAULT_LIST_LIMIT))
        );
        let w = parse_query(Some(b"limit=7&cursor=12.abc_D"), 256, &Default::default()).unwrap();
        assert_eq!(
            (w.shard, w.after.unwrap().as_str(), w.limit),
            (12, "abc_D", 7)
        );
        for bad in [
            "limit=0",
            "limit=501",
            "limit=x",
            "cursor=300.a",
            "cursor=1",
            "cursor=1.a/b",
            "page=2",
        ] {
            assert_eq!(
                parse_query(Some(bad.as_bytes()), 256, &Default::default())
                    .unwrap_err()
                    .status,
                422,
                "{bad}"
            );
        }
    }
}
