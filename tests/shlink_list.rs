//! Shlink's list as its web client asks for it (issue 28): `orderBy` (`dateCreated`,
//! `shortCode`, `longUrl`, `title`; `-ASC`/`-DESC`), `searchTerm`, `startDate`/`endDate`, with
//! exact `pagination` figures, on 3 cores (more than this machine's CPUs: the scan crosses
//! every owner). Every page is checked against an oracle built from what was created: the
//! pages of one order concatenate to exactly the admitted links, in order, each once. Filters
//! ricochet cannot apply yet are refused naming the parameter, never ignored.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{data_dir, make_key, start, Client, API_KEY, NO_RATE_LIMIT};
use serde_json::{json, Value};

/// Links created; pages of [`PER_PAGE`] make a short last page.
const LINKS: usize = 150;
const PER_PAGE: usize = 40;

struct Made {
    code: String,
    url: String,
}

fn shlink_get(c: &mut Client, key: &str, query: &str) -> (u16, Value) {
    let path = format!("/rest/v3/short-urls?{query}");
    let r = c
        .send("GET", &path, false, &[("X-Api-Key", key)], b"")
        .unwrap();
    (r.status, r.json())
}

/// Every page of `query` (with `itemsPerPage`), checking each page's pagination figures
/// against `total`; the items in page order.
fn all_pages(c: &mut Client, key: &str, query: &str, total: usize) -> Vec<Value> {
    let pages = total.div_ceil(PER_PAGE).max(1);
    let mut items = Vec::new();
    for page in 1..=pages {
        let q = format!("{query}&itemsPerPage={PER_PAGE}&page={page}");
        let (status, v) = shlink_get(c, key, &q);
        assert_eq!(status, 200, "{q}: {v}");
        let p = &v["shortUrls"]["pagination"];
        let data = v["shortUrls"]["data"].as_array().unwrap();
        let in_page = PER_PAGE.min(total - (page - 1) * PER_PAGE);
        assert_eq!(p["totalItems"], total, "{q}");
        assert_eq!(p["pagesCount"], pages, "{q}");
        assert_eq!(p["currentPage"], page, "{q}");
        assert_eq!(p["itemsInCurrentPage"], in_page, "{q}");
        assert_eq!(data.len(), in_page, "{q}");
        items.extend(data.iter().cloned());
    }
    items
}

fn codes(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["shortCode"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_list_orders_searches_and_pages_exactly_across_cores() {
    let (_tmp, dir) = data_dir();
    let author = make_key(&dir, "author", &["--author-only"]);
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);

    let mut made = Vec::new();
    for i in 0..LINKS {
        // Mixed case in codes and targets; a tenth say "Promo" in one or the other.
        let code = format!("{}{i:03}", ["ab", "Ab", "zz", "Mq", "k"][i % 5]);
        let url = match i % 10 {
            0 => format!("https://shop.example/PROMO/{i}"),
            5 => format!("https://news.example/{i}"),
            _ => format!("https://example.com/{}/{i}", ["x", "y", "a"][i % 3]),
        };
        let code = if i % 10 == 5 {
            format!("promo{i}")
        } else {
            code
        };
        let r = c.create(&json!({"long_url": url, "custom_alias": code}));
        assert_eq!(r.status, 201, "{}", r.text());
        made.push(Made { code, url });
    }
    // The author-only key's own links: it lists only these.
    let mut a = Client::new(&s);
    a.token = author.clone();
    for i in 0..7 {
        let r = a.create(&json!({"long_url": format!("https://author.example/promo/{i}")}));
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let everyone = LINKS + 7;

    // The web client's defaults: newest first.
    let items = all_pages(&mut c, API_KEY, "orderBy=dateCreated-DESC", everyone);
    let dates: Vec<&str> = items
        .iter()
        .map(|i| i["dateCreated"].as_str().unwrap())
        .collect();
    assert!(
        dates.windows(2).all(|w| w[0] >= w[1]),
        "not newest first: {dates:?}"
    );
    let mut seen = codes(&items);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), everyone, "each link exactly once");
    let items = all_pages(&mut c, API_KEY, "orderBy=dateCreated-ASC", everyone);
    assert!(items
        .windows(2)
        .all(|w| w[0]["dateCreated"].as_str() <= w[1]["dateCreated"].as_str()));

    // Short codes and long URLs: exactly the oracle's order (bytes; the key breaks no tie,
    // as codes and URLs are unique).
    let mut oracle: Vec<(String, String)> = made
        .iter()
        .map(|m| (m.code.clone(), m.url.clone()))
        .collect();
    let theirs = codes(&all_pages(&mut a, &author, "orderBy=shortCode-ASC", 7));
    oracle.extend(
        theirs
            .iter()
            .enumerate()
            .map(|(i, code)| (code.clone(), format!("https://author.example/promo/{i}"))),
    );
    let mut by_code: Vec<String> = oracle.iter().map(|(c, _)| c.clone()).collect();
    by_code.sort();
    let got = codes(&all_pages(
        &mut c,
        API_KEY,
        "orderBy=shortCode-ASC",
        everyone,
    ));
    assert_eq!(got, by_code);
    by_code.reverse();
    let got = codes(&all_pages(
        &mut c,
        API_KEY,
        "orderBy=shortCode-DESC",
        everyone,
    ));
    assert_eq!(got, by_code);
    let items = all_pages(&mut c, API_KEY, "orderBy=longUrl-ASC", everyone);
    let urls: Vec<&str> = items
        .iter()
        .map(|i| i["longUrl"].as_str().unwrap())
        .collect();
    let mut sorted = urls.clone();
    sorted.sort_unstable();
    assert_eq!(urls, sorted);
    // No titles yet: every link ties, and the short code decides.
    let got = codes(&all_pages(&mut c, API_KEY, "orderBy=title-DESC", everyone));
    by_code.reverse();
    assert_eq!(got, by_code);

    // Search: the short code or the long URL contains the term, case ignored; with an order
    // and without one (then in walk order, still each once and exactly counted).
    let promo: Vec<&Made> = made
        .iter()
        .filter(|m| {
            m.code.to_lowercase().contains("promo") || m.url.to_lowercase().contains("promo")
        })
        .collect();
    assert_eq!(promo.len(), 30);
    let mut want: Vec<String> = promo.iter().map(|m| m.code.clone()).collect();
    want.extend(theirs.iter().cloned());
    want.sort();
    let got = codes(&all_pages(
        &mut c,
        API_KEY,
        "searchTerm=PrOmO&orderBy=shortCode-ASC",
        want.len(),
    ));
    assert_eq!(got, want);
    let mut got = codes(&all_pages(&mut c, API_KEY, "searchTerm=promo", want.len()));
    got.sort();
    assert_eq!(got, want);
    // The author-only key's search holds only its own links.
    let got = codes(&all_pages(
        &mut a,
        &author,
        "searchTerm=promo&orderBy=shortCode-ASC",
        7,
    ));
    assert_eq!(got, theirs);
    // A term nobody has: an empty, exact page.
    let (status, v) = shlink_get(&mut c, API_KEY, "searchTerm=nothing-like-this");
    assert_eq!(status, 200);
    assert_eq!(v["shortUrls"]["pagination"]["totalItems"], 0);
    assert_eq!(v["shortUrls"]["data"], json!([]));

    // Creation dates, both ends included; a bare date is its midnight UTC.
    let all = all_pages(
        &mut c,
        API_KEY,
        "startDate=2000-01-01&orderBy=shortCode-ASC",
        everyone,
    );
    assert_eq!(all.len(), everyone);
    let (_, v) = shlink_get(&mut c, API_KEY, "startDate=2999-01-01T00:00:00Z");
    assert_eq!(v["shortUrls"]["pagination"]["totalItems"], 0);
    let (_, v) = shlink_get(&mut c, API_KEY, "endDate=2000-01-01");
    assert_eq!(v["shortUrls"]["pagination"]["totalItems"], 0);

    // Refused, naming the parameter: what ricochet cannot apply yet, and nonsense.
    for (query, field) in [
        ("orderBy=dateCreated-UP", "orderBy"),
        ("orderBy=color", "orderBy"),
        ("tagsMode=some", "tagsMode"),
        ("excludeMaxVisitsReached=yes", "excludeMaxVisitsReached"),
        ("apiKeyName=x", "apiKeyName"),
        ("startDate=yesterday", "startDate"),
        (&format!("searchTerm={}", "x".repeat(300)), "searchTerm"),
    ] {
        let (status, v) = shlink_get(&mut c, API_KEY, query);
        assert_eq!(status, 400, "{query}: {v}");
        assert_eq!(
            v["type"], "https://shlink.io/api/error/invalid-data",
            "{query}"
        );
        assert_eq!(v["invalidElements"], json!([field]), "{query}");
    }
    // Accepted: expired links are never listed, so both values list the same links.
    for v in ["true", "false"] {
        let q = format!("excludePastValidUntil={v}&orderBy=shortCode-ASC");
        assert_eq!(all_pages(&mut c, API_KEY, &q, everyone).len(), everyone);
    }
}

/// The native list's filters: `search` and the creation dates, walked by cursor on 3 cores
/// with small pages: every match exactly once, nothing else.
#[test]
fn the_native_list_searches_by_cursor_across_cores() {
    let (_tmp, dir) = data_dir();
    let mut flags = vec!["--cores", "3", "--test-oversubscribe"];
    flags.extend(NO_RATE_LIMIT);
    let s = start(&dir, &flags);
    let mut c = Client::new(&s);
    let mut want = std::collections::BTreeSet::new();
    for i in 0..200 {
        let url = match i % 7 {
            0 => format!("https://shop.example/Sale/{i}"),
            _ => format!("https://example.com/{i}"),
        };
        let code = format!("n{i}");
        let r = c.create(&json!({"long_url": url, "custom_alias": code}));
        assert_eq!(r.status, 201, "{}", r.text());
        if url.to_lowercase().contains("sale") {
            want.insert(code);
        }
    }
    let walk = |c: &mut Client, query: &str| -> Vec<String> {
        let mut keys = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(k) => format!("/api/v1/urls?{query}&limit=7&cursor={k}"),
                None => format!("/api/v1/urls?{query}&limit=7"),
            };
            let r = c.send("GET", &path, true, &[], b"").unwrap();
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            let v = r.json();
            for item in v["items"].as_array().unwrap() {
                keys.push(item["key"].as_str().unwrap().to_owned());
            }
            match v["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return keys,
            }
        }
    };
    let got = walk(&mut c, "search=SALE");
    let set: std::collections::BTreeSet<String> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "a link listed twice");
    assert_eq!(set, want);
    assert_eq!(
        walk(&mut c, "created_from=2999-01-01T00:00:00Z"),
        Vec::<String>::new()
    );
    assert_eq!(walk(&mut c, "created_from=2000-01-01T00:00:00Z").len(), 200);
    for bad in [
        "created_to=yesterday",
        &format!("search={}", "y".repeat(300)),
    ] {
        let r = c
            .send("GET", &format!("/api/v1/urls?{bad}"), true, &[], b"")
            .unwrap();
        r.assert_problem(422);
    }
}
