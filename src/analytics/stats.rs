//! `GET /api/v1/urls/{key}/stats`: the query (parsed on the core that holds the request) and
//! the answer (built on the owner's aggregator thread from its `ClickStore`).
//!
//! Counting rules, also in docs/analytics.md: `bots=exclude` (the default) counts human
//! clicks in `clicks`, the days' `clicks`, the uniques and every facet; `include` counts all;
//! `only` counts bots. `summary.human_clicks` and `bot_clicks`, and each day's `bot_clicks`,
//! are always the raw split. A period's `unique_visitors` is the sum of the days' (a visitor
//! seen on two days counts twice: daily salts cannot link days).

use crate::api::problem::Problem;
use crate::base::key::InlineKey;
use shards::clicks::{ClickStore, Day, FacetKind, Hll, LinkDay};
use std::collections::HashMap;

/// Days a stats query covers without `from`.
pub const DEFAULT_STATS_DAYS: u32 = 30;
/// Most days one stats query may cover.
pub const MAX_STATS_DAYS: u32 = 400;
/// Rows per facet in an answer (the rest are summed into `(rest)`).
pub const MAX_FACET_ROWS: usize = 50;

/// Which clicks a query counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bots {
    Exclude,
    Include,
    Only,
}

/// One stats query.
#[derive(Clone, Debug)]
pub struct StatsQuery {
    pub key: InlineKey,
    pub from: Day,
    pub to: Day,
    pub bots: Bots,
}

/// Links `GET /api/v1/stats` lists.
pub const TOP_LINKS: usize = 10;

/// One aggregator's share of `GET /api/v1/stats`: per day of the range (clicks, bot clicks,
/// 404s), its own top links, and how far its clicks are complete.
#[derive(Clone, Debug, Default)]
pub struct GlobalPart {
    pub days: Vec<[u64; 3]>,
    pub top: Vec<(String, u64)>,
    pub complete_until_ms: u64,
}

/// What one aggregator holds for the server-wide stats of `from..=to` (a walk over every
/// link-day it owns, frozen ones included: an operator's query, not a per-click one).
pub fn global_part(store: &ClickStore, from: Day, to: Day, complete_until_ms: u64) -> GlobalPart {
    let mut days = vec![[0u64; 3]; (to - from + 1) as usize];
    let mut totals: HashMap<Vec<u8>, u64> = HashMap::new();
    store.for_each_link_day(from, to, |key, d, l| {
        let row = &mut days[(d - from) as usize];
        row[0] += l.clicks;
        row[1] += l.bot_clicks;
        if l.clicks > 0 {
            *totals.entry(key.to_vec()).or_default() += l.clicks;
        }
    });
    let mut top: Vec<(String, u64)> = totals
        .into_iter()
        .map(|(k, n)| (String::from_utf8_lossy(&k).into_owned(), n))
        .collect();
    keep_top(&mut top);
    for (i, row) in days.iter_mut().enumerate() {
        row[2] = store.not_found(from + i as Day);
    }
    GlobalPart {
        days,
        top,
        complete_until_ms,
    }
}

/// The [`TOP_LINKS`] links with the most clicks, most first (ties by key).
pub fn keep_top(top: &mut Vec<(String, u64)>) {
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(TOP_LINKS);
}

/// The JSON of `GET /api/v1/stats` from every aggregator's part.
pub fn global_json(from: Day, to: Day, parts: &[GlobalPart], dropped: u64) -> Vec<u8> {
    serde_json::to_vec(&global_value(from, to, parts, dropped)).expect("stats serialize")
}

/// [`global_json`], as a value. Its `top_links` name each link by its stored key (a named
/// domain's link as `<number>.<key>`); the API front names the domain (`global_stats.rs`).
pub fn global_value(from: Day, to: Day, parts: &[GlobalPart], dropped: u64) -> serde_json::Value {
    let mut days = vec![[0u64; 3]; (to - from + 1) as usize];
    let mut top = Vec::new();
    for p in parts {
        for (a, b) in days.iter_mut().zip(&p.days) {
            for i in 0..3 {
                a[i] += b[i];
            }
        }
        top.extend(p.top.iter().cloned());
    }
    keep_top(&mut top);
    let (clicks, bots, nf) = days
        .iter()
        .fold((0, 0, 0), |t, r| (t.0 + r[0], t.1 + r[1], t.2 + r[2]));
    let complete = parts.iter().map(|p| p.complete_until_ms).min().unwrap_or(0);
    let day_rows: Vec<serde_json::Value> = days
        .iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::json!({"day": format_day(from + i as Day), "clicks": r[0], "bot_clicks": r[1], "not_found": r[2]})
        })
        .collect();
    let top_rows: Vec<serde_json::Value> = top
        .iter()
        .map(|(k, n)| serde_json::json!({"key": k, "clicks": n}))
        .collect();
    serde_json::json!({
        "from": format_day(from),
        "to": format_day(to),
        "timezone": "UTC",
        "summary": {"clicks": clicks, "human_clicks": clicks - bots, "bot_clicks": bots, "not_found": nf},
        "days": day_rows,
        "top_links": top_rows,
        "complete_until": rfc3339_ms(complete),
        "dropped_clicks": dropped,
    })
}

/// Parses a link's stats query: [`parse_range`] for `key`.
pub fn parse_query(
    query: Option<&[u8]>,
    key: InlineKey,
    today: Day,
) -> Result<StatsQuery, Problem> {
    let (from, to, bots) = parse_range(query, today)?;
    Ok(StatsQuery {
        key,
        from,
        to,
        bots,
    })
}

/// Parses `from`, `to` and `bots` (422 `invalid-field` naming the parameter).
pub fn parse_range(query: Option<&[u8]>, today: Day) -> Result<(Day, Day, Bots), Problem> {
    let text = std::str::from_utf8(query.unwrap_or_default())
        .map_err(|_| Problem::invalid_field(None, "the query is not UTF-8"))?;
    let (mut from, mut to, mut bots) = (None, None, Bots::Exclude);
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "from" => from = Some(parse_day(value).ok_or_else(|| bad_day("from"))?),
            "to" => to = Some(parse_day(value).ok_or_else(|| bad_day("to"))?),
            "bots" => {
                bots = match value {
                    "exclude" => Bots::Exclude,
                    "include" => Bots::Include,
                    "only" => Bots::Only,
                    _ => {
                        return Err(Problem::invalid_field(
                            Some("bots"),
                            "bots must be exclude, include or only",
                        ))
                    }
                }
            }
            // The link's domain: the API front has read it into the key.
            "domain" => {}
            _ => {
                return Err(Problem::invalid_field(
                    None,
                    format!(
                        "unknown query parameter {name:?} (from, to, bots and domain are taken)"
                    ),
                ))
            }
        }
    }
    let to = to.unwrap_or(today);
    let from = from.unwrap_or(to.saturating_sub(DEFAULT_STATS_DAYS - 1));
    if from > to {
        return Err(Problem::invalid_field(Some("from"), "from is after to"));
    }
    if to - from + 1 > MAX_STATS_DAYS {
        return Err(Problem::invalid_field(
            Some("from"),
            format!("at most {MAX_STATS_DAYS} days per query"),
        ));
    }
    Ok((from, to, bots))
}

fn bad_day(field: &'static str) -> Problem {
    Problem::invalid_field(
        Some(field),
        format!("{field} must be a date as YYYY-MM-DD (UTC)"),
    )
}

/// The widest range a query may ask for, ending `today`: what Shlink's totals cover (the
/// default click retention is as long, `DEFAULT_RETENTION_DAYS`).
pub fn whole_window(today: Day) -> (Day, Day) {
    (today.saturating_sub(MAX_STATS_DAYS - 1), today)
}

impl StatsQuery {
    /// Every click of `key` over [`whole_window`], bots included (Shlink's `visitsSummary`
    /// splits them).
    pub fn whole_window(key: InlineKey, today: Day) -> StatsQuery {
        let (from, to) = whole_window(today);
        StatsQuery {
            key,
            from,
            to,
            bots: Bots::Include,
        }
    }
}

/// `YYYY-MM-DD` to a day number.
pub fn parse_day(s: &str) -> Option<Day> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let t = &s[r];
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let month = time::Month::try_from(num(5..7)? as u8).ok()?;
    let d = time::Date::from_calendar_date(num(0..4)? as i32, month, num(8..10)? as u8).ok()?;
    let days = d.to_julian_day()
        - time::Date::from_calendar_date(1970, time::Month::January, 1)
            .ok()?
            .to_julian_day();
    u32::try_from(days).ok()
}

/// A day number as `YYYY-MM-DD`.
pub fn format_day(d: Day) -> String {
    let date = time::Date::from_julian_day(2_440_588 + d as i32).expect("a day in range");
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        date.month() as u8,
        date.day()
    )
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds (`2026-12-01T14:15:21.123Z`).
pub fn rfc3339_ms(ms: u64) -> String {
    let s = shards::timefmt::format_rfc3339_utc(ms / 1000);
    format!("{}.{:03}Z", s.trim_end_matches('Z'), ms % 1000)
}

/// One day of one link's figures: from a node's own store (a [`LinkDay`]) or summed over a
/// fleet's nodes (`analytics::fleet`).
#[derive(Clone, Debug, Default)]
pub struct DayFigures {
    pub clicks: u64,
    pub bot_clicks: u64,
    pub unique_humans: u64,
    pub unique_bots: u64,
    /// Humans and bots together (one node: their sketches merged).
    pub unique_all: u64,
    pub facets: Vec<(FacetKind, bool, std::sync::Arc<str>, u64)>,
}

impl DayFigures {
    /// One node's link-day, its uniques estimated (humans, bots, and both merged).
    pub fn of(l: &LinkDay) -> DayFigures {
        let mut all: Hll = l.humans.clone();
        all.merge(&l.bots);
        DayFigures {
            clicks: l.clicks,
            bot_clicks: l.bot_clicks,
            unique_humans: l.humans.estimate(),
            unique_bots: l.bots.estimate(),
            unique_all: all.estimate(),
            facets: l
                .facets
                .iter()
                .map(|f| (f.kind, f.bot, f.value.clone(), f.count))
                .collect(),
        }
    }

    fn counted(&self, bots: Bots) -> u64 {
        match bots {
            Bots::Exclude => self.clicks - self.bot_clicks,
            Bots::Include => self.clicks,
            Bots::Only => self.bot_clicks,
        }
    }

    fn uniques(&self, bots: Bots) -> u64 {
        match bots {
            Bots::Exclude => self.unique_humans,
            Bots::Only => self.unique_bots,
            Bots::Include => self.unique_all,
        }
    }
}

/// The JSON answer for one link from this node's store.
pub fn link_json(
    store: &ClickStore,
    q: &StatsQuery,
    complete_until_ms: u64,
    dropped: u64,
) -> Vec<u8> {
    let held = store
        .days(q.key.as_bytes(), q.from, q.to)
        .map(|(d, l)| (d, DayFigures::of(&l)))
        .collect();
    link_json_from(q, held, complete_until_ms, dropped, None)
}

/// One facet's rows, most clicks first, at most `MAX_FACET_ROWS` and a `(rest)` row.
fn facet_json(facets: &HashMap<(FacetKind, &str), u64>, kind: FacetKind) -> serde_json::Value {
    let mut rows: Vec<(&str, u64)> = facets
        .iter()
        .filter(|((k, _), _)| *k == kind)
        .map(|((_, v), n)| (*v, *n))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let rest: u64 = rows.iter().skip(MAX_FACET_ROWS).map(|r| r.1).sum();
    rows.truncate(MAX_FACET_ROWS);
    let mut out: Vec<serde_json::Value> = rows
        .into_iter()
        .map(|(v, n)| serde_json::json!({"value": v, "clicks": n}))
        .collect();
    if rest > 0 {
        out.push(serde_json::json!({"value": "(rest)", "clicks": rest}));
    }
    serde_json::Value::Array(out)
}

/// The JSON answer for one link from its days' figures (days outside the query, or missing,
/// count as zero). `nodes`: fleet mode, the figures are sums over that many nodes' rows.
pub fn link_json_from(
    q: &StatsQuery,
    days_held: Vec<(Day, DayFigures)>,
    complete_until_ms: u64,
    dropped: u64,
    nodes: Option<u64>,
) -> Vec<u8> {
    let held: HashMap<Day, DayFigures> = days_held.into_iter().collect();
    let (mut clicks, mut humans, mut bots_n, mut uniq) = (0u64, 0u64, 0u64, 0u64);
    let mut days = Vec::with_capacity((q.to - q.from + 1) as usize);
    let mut facets: HashMap<(FacetKind, &str), u64> = HashMap::new();
    for d in q.from..=q.to {
        let (c, b, u) = match held.get(&d) {
            Some(l) => {
                humans += l.clicks - l.bot_clicks;
                bots_n += l.bot_clicks;
                for (kind, bot, value, count) in &l.facets {
                    let take = match q.bots {
                        Bots::Exclude => !bot,
                        Bots::Include => true,
                        Bots::Only => *bot,
                    };
                    if take {
                        *facets.entry((*kind, value)).or_default() += count;
                    }
                }
                (l.counted(q.bots), l.bot_clicks, l.uniques(q.bots))
            }
            None => (0, 0, 0),
        };
        clicks += c;
        uniq += u;
        days.push(serde_json::json!({
            "day": format_day(d), "clicks": c, "bot_clicks": b, "unique_visitors": u,
        }));
    }
    let facet = |kind: FacetKind| facet_json(&facets, kind);
    let method = match nodes {
        None => "sum of daily unique visitors",
        Some(_) => "sum of daily unique visitors, each day's merged over nodes",
    };
    let mut v = serde_json::json!({
        "key": std::str::from_utf8(shards::link::split_stored_key(q.key.as_bytes()).1).unwrap_or(""),
        "from": format_day(q.from),
        "to": format_day(q.to),
        "timezone": "UTC",
        "bots": match q.bots { Bots::Exclude => "exclude", Bots::Include => "include", Bots::Only => "only" },
        "summary": {
            "clicks": clicks, "human_clicks": humans, "bot_clicks": bots_n,
            "unique_visitors": uniq, "unique_visitors_method": method,
        },
        "days": days,
        "referrers": facet(FacetKind::Referrer),
        "countries": facet(FacetKind::Country),
        "browsers": facet(FacetKind::Browser),
        "os": facet(FacetKind::Os),
        "devices": facet(FacetKind::Device),
        "rules": facet(FacetKind::Rule),
        "complete_until": rfc3339_ms(complete_until_ms),
        "dropped_clicks": dropped,
    });
    if let Some(n) = nodes {
        v["nodes"] = n.into();
    }
    serde_json::to_vec(&v).expect("stats serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_trip_and_queries_are_checked() {
        assert_eq!(parse_day("1970-01-01"), Some(0));
        assert_eq!(parse_day("2026-12-01"), Some(20_788));
        assert_eq!(format_day(20_788), "2026-12-01");
        assert_eq!(parse_day("2026-02-30"), None);
        let k = InlineKey::new(b"abc").unwrap();
        let q = parse_query(None, k, 100).unwrap();
        assert_eq!((q.from, q.to, q.bots), (71, 100, Bots::Exclude));
        let q = parse_query(Some(b"from=1970-01-02&to=1970-01-03&bots=only"), k, 100).unwrap();
        assert_eq!((q.from, q.to, q.bots), (1, 2, Bots::Only));
        for bad in [
            &b"from=yesterday"[..],
            b"bots=all",
            b"from=1970-01-05&to=1970-01-02",
            b"from=1970-01-01&to=1972-01-01",
            b"x=1",
        ] {
            let p = parse_query(Some(bad), k, 100).unwrap_err();
            assert_eq!(p.status, 422, "{bad:?}");
        }
    }
}
