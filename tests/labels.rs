//! A link's title and tags (issue 28, single node): set on create (native and Shlink API),
//! changed by PATCH one at a time, filtered (`?tag=`, any or all) and searched (`?search=`)
//! in lists exactly as a model of the links says, on 3 cores (more than this machine's CPUs:
//! owners, forwards and scans across cores), kept across compactions, `kill -9` and an
//! NDJSON export and import; bad values refused naming the field. (Fleet mode:
//! `tests/fleet_links.rs`, `link_behaviours_are_the_fleets_on_every_node`, carries them in
//! the same column.)
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{self, data_dir, start, Client, NO_RATE_LIMIT};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn flags() -> Vec<&'static str> {
    let mut f = vec![
        "--cores",
        "3",
        "--test-oversubscribe",
        "--compact-entries",
        "64",
    ];
    f.extend(NO_RATE_LIMIT);
    f
}

/// A link's labels as the model keeps them: (title, tags).
type Model = BTreeMap<String, (Option<String>, Vec<String>)>;

/// Every link's labels as the API shows them.
fn labels_of(c: &mut Client, keys: &[&String]) -> Model {
    keys.iter()
        .map(|k| {
            let r = c.get_link(k);
            assert_eq!(r.status, 200, "{k}: {}", r.text());
            let v = r.json();
            let title = v["title"].as_str().map(str::to_owned);
            let tags = v["tags"]
                .as_array()
                .unwrap_or_else(|| panic!("{k}: {v}"))
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            ((*k).clone(), (title, tags))
        })
        .collect()
}

/// The keys a native list with `query` holds, every page walked.
fn listed(c: &mut Client, query: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/urls?limit=100&{query}");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let r = c.send("GET", &path, true, &[], b"").unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let v = r.json();
        keys.extend(
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["key"].as_str().unwrap().to_owned()),
        );
        match v["next_cursor"].as_str() {
            Some(n) => cursor = Some(n.to_owned()),
            None => break,
        }
    }
    keys.sort();
    keys
}

/// The model's keys whose labels pass `keep`, sorted.
fn expected(model: &Model, keep: impl Fn(&Option<String>, &[String]) -> bool) -> Vec<String> {
    model
        .iter()
        .filter(|(_, (t, tags))| keep(t, tags))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Every filter the test asks, against the model.
fn check_lists(c: &mut Client, model: &Model, fillers: usize) {
    let has = |tags: &[String], t: &str| tags.iter().any(|x| x == t);
    assert_eq!(
        listed(c, "tag=even"),
        expected(model, |_, t| has(t, "even"))
    );
    assert_eq!(
        listed(c, "tag=group-1&tag=odd"),
        expected(model, |_, t| has(t, "group-1") || has(t, "odd"))
    );
    assert_eq!(
        listed(c, "tag=even&tag=group-2&tags_mode=all"),
        expected(model, |_, t| has(t, "even") && has(t, "group-2"))
    );
    // Exclusions (the fillers carry no tag, so they stay).
    let mut not_even = expected(model, |_, t| !has(t, "even"));
    not_even.extend(listed(c, "search=filler.example"));
    not_even.sort();
    assert_eq!(listed(c, "exclude_tag=even"), not_even);
    let mut not_both = expected(model, |_, t| !(has(t, "odd") && has(t, "imported")));
    not_both.extend(listed(c, "search=filler.example"));
    not_both.sort();
    assert_eq!(
        listed(
            c,
            "exclude_tag=odd&exclude_tag=imported&exclude_tags_mode=all"
        ),
        not_both
    );
    // The search reaches titles and tags, ASCII case ignored (and keys and targets: the
    // labelled links' targets and keys hold neither word).
    assert_eq!(
        listed(c, "search=LINK%201"),
        expected(model, |t, _| t
            .as_deref()
            .is_some_and(|t| t.to_lowercase().contains("link 1")))
    );
    assert_eq!(
        listed(c, "search=roup-3"),
        expected(model, |_, t| t.iter().any(|x| x.contains("roup-3")))
    );
    // No filter: every link, fillers too.
    assert_eq!(listed(c, "").len(), model.len() + fillers);
}

#[test]
fn titles_and_tags_are_kept_filtered_and_searched_on_every_core() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags());
    let mut c = Client::new(&s);
    let mut model = Model::new();
    for i in 0..40 {
        let title = (i % 3 == 0).then(|| format!("  Link {i}  "));
        let tags: Vec<String> = match i % 4 {
            0 => vec!["Even".into(), format!("Group {}", i % 5), "even".into()],
            1 => vec!["odd".into()],
            2 => vec![format!("group {}", i % 5), "EVEN".into()],
            _ => vec![],
        };
        let r = c.create(&json!({
            "long_url": format!("https://labelled.example/{i}"),
            "title": title,
            "tags": tags,
        }));
        assert_eq!(r.status, 201, "{}", r.text());
        // Kept normalized: trimmed title; lowercase tags, whitespace as `-`, sorted, once.
        let mut want: Vec<String> = tags
            .iter()
            .map(|t| t.to_lowercase().replace(' ', "-"))
            .collect();
        want.sort();
        want.dedup();
        let v = r.json();
        assert_eq!(v["title"], json!(title.as_deref().map(str::trim)));
        assert_eq!(v["tags"], json!(want));
        model.insert(r.key(), (title.map(|t| t.trim().to_owned()), want));
    }
    // Through Shlink's API too.
    let admin = api::API_KEY;
    let body = json!({"longUrl": "https://labelled.example/shlink", "customSlug": "from-shlink",
                      "title": "Shlink Link 1", "tags": ["Imported", "odd"]});
    let path = "/rest/v3/short-urls";
    let (st, v) = shlink(&mut c, admin, "POST", path, body.to_string().as_bytes());
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tags"], json!(["imported", "odd"]));
    assert_eq!(v["title"], "Shlink Link 1");
    model.insert(
        "from-shlink".into(),
        (
            Some("Shlink Link 1".into()),
            vec!["imported".into(), "odd".into()],
        ),
    );

    // A PATCH of one keeps the other; null and [] remove.
    let keys: Vec<String> = model.keys().cloned().collect();
    let (a, b, d) = (&keys[0], &keys[1], &keys[2]);
    let r = c.patch(a, &json!({"title": "Renamed"}));
    assert_eq!(r.status, 200, "{}", r.text());
    model.get_mut(a).unwrap().0 = Some("Renamed".into());
    let r = c.patch(b, &json!({"tags": ["Group 3", "new"]}));
    assert_eq!(r.status, 200, "{}", r.text());
    model.get_mut(b).unwrap().1 = vec!["group-3".into(), "new".into()];
    let r = c.patch(d, &json!({"title": null, "tags": []}));
    assert_eq!(r.status, 200, "{}", r.text());
    *model.get_mut(d).unwrap() = (None, vec![]);
    let path = "/rest/v3/short-urls/from-shlink";
    let (st, v) = shlink(&mut c, admin, "PATCH", path, br#"{"tags": ["odd"]}"#);
    assert_eq!(st, 200, "{v}");
    model.get_mut("from-shlink").unwrap().1 = vec!["odd".into()];

    let all: Vec<&String> = model.keys().collect();
    assert_eq!(labels_of(&mut c, &all), model);
    check_lists(&mut c, &model, 0);
    // Shlink's list: tags[] with tagsMode, and orderBy=title (links without one first).
    let q = "tags[]=odd&tags[]=new&tagsMode=any&itemsPerPage=500&orderBy=title-ASC";
    let (st, v) = shlink(
        &mut c,
        admin,
        "GET",
        &format!("/rest/v3/short-urls?{q}"),
        b"",
    );
    assert_eq!(st, 200, "{v}");
    let data = v["shortUrls"]["data"].clone();
    let got: Vec<String> = data
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["shortCode"].as_str().unwrap().to_owned())
        .collect();
    let mut want: Vec<(Option<String>, String)> = model
        .iter()
        .filter(|(_, (_, t))| t.iter().any(|x| x == "odd" || x == "new"))
        .map(|(k, (title, _))| (title.clone(), k.clone()))
        .collect();
    want.sort();
    assert_eq!(got, want.into_iter().map(|(_, k)| k).collect::<Vec<_>>());

    // Enough writes for compactions (--compact-entries 64) to fold them into tables, then
    // kill -9 and restart: the same labels, the same lists.
    for i in 0..300 {
        c.create_ok(&format!("https://filler.example/{i}"), None);
    }
    s.kill9();
    let s = start(&dir, &flags());
    let mut c = Client::new(&s);
    assert_eq!(labels_of(&mut c, &all), model);
    check_lists(&mut c, &model, 300);

    // NDJSON export and import into a fresh dir: the same labels; TSV refuses to drop them.
    let out = dir.join("..").join("export.ndjson");
    let (ok, text) = api::cli(
        &dir,
        "export",
        &["--format", "ndjson", "--output", out.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    let (ok, text) = api::cli(&dir, "export", &["--format", "tsv"]);
    assert!(!ok && text.contains("--format ndjson"), "{text}");
    drop(s);
    let (_t2, dir2) = data_dir();
    let (ok, text) = api::cli(&dir2, "import", &[out.to_str().unwrap()]);
    assert!(ok, "{text}");
    let s2 = start(&dir2, &flags());
    let mut c2 = Client::new(&s2);
    assert_eq!(labels_of(&mut c2, &all), model);
    check_lists(&mut c2, &model, 300);
}

#[test]
fn bad_titles_and_tags_are_refused_naming_the_field() {
    let (_t, dir) = data_dir();
    let s = start(&dir, &flags());
    let mut c = Client::new(&s);
    let many: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
    for (body, field) in [
        (json!({"tags": many}), "tags"),
        (json!({"tags": vec!["a"; 17]}), "tags"),
        (json!({"tags": ["x".repeat(65)]}), "tags"),
        (json!({"tags": ["  "]}), "tags"),
        (json!({"tags": "a,b"}), "tags"),
        (json!({"tags": [1]}), "tags"),
        (json!({"title": "x".repeat(513)}), "title"),
        (json!({"title": "a\u{7}b"}), "title"),
        (json!({"title": 5}), "title"),
    ] {
        let mut create = body.clone();
        create["long_url"] = json!("https://e.example/");
        let r = c.create(&create);
        assert_eq!(r.status, 422, "{create}: {}", r.text());
        assert_eq!(r.json()["field"], field, "{create}");
        let k = c.create_ok("https://e.example/ok", None);
        let r = c.patch(&k, &body);
        assert_eq!(r.status, 422, "{body}: {}", r.text());
        // Nothing changed.
        let v = c.get_link(&k).json();
        assert_eq!(
            (v["title"].clone(), v["tags"].clone()),
            (json!(null), json!([]))
        );
    }
    // At the limits exactly: kept.
    let sixteen: Vec<String> = (0..16).map(|i| format!("t{i}")).collect();
    let r = c.create(
        &json!({"long_url": "https://e.example/", "title": "é".repeat(256),
                             "tags": sixteen}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = c.create(&json!({"long_url": "https://e.example/", "tags": ["x".repeat(64)]}));
    assert_eq!(r.status, 201, "{}", r.text());
    // Shlink's API: invalid-data naming the field.
    let body = br#"{"longUrl": "https://e.example/", "tags": ["ok", ""]}"#;
    let (st, v) = shlink(&mut c, api::API_KEY, "POST", "/rest/v3/short-urls", body);
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["type"], "https://shlink.io/api/error/invalid-data");
    assert_eq!(v["invalidElements"], json!(["tags"]), "{v}");
    let r = c
        .send("GET", "/api/v1/urls?tags_mode=some", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    let v: Value = r.json();
    assert_eq!(v["field"], "tags_mode");
}

/// `method path` through Shlink's API with key `key`: (status, JSON body or null).
fn shlink(c: &mut Client, key: &str, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    call(c, ("X-Api-Key", key), method, path, body)
}

/// A JSON call with one authentication header: the status and the body (null when empty).
fn call(c: &mut Client, auth: (&str, &str), method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let h = [auth, ("Content-Type", "application/json")];
    let r = c.send(method, path, false, &h, body).unwrap();
    let v = match r.text().is_empty() {
        true => Value::Null,
        false => r.json(),
    };
    (r.status, v)
}

/// Shlink's tag endpoints on 3 cores: the tags the key's links carry, with links and
/// visits per tag (as the links' own figures say), ordered, searched and paged; renamed and
/// deleted on every link (admin keys only); an author-only key sees its own links' tags.
#[test]
fn shlinks_tag_endpoints_list_count_rename_and_delete_tags() {
    let (_t, dir) = data_dir();
    let writer = api::make_key(&dir, "writer", &["--author-only"]);
    let s = start(&dir, &flags());
    let mut c = Client::new(&s);
    let admin = api::API_KEY;
    // (key, tags, clicks)
    let links: &[(&str, &[&str], usize)] = &[
        ("t-a", &["alpha", "beta"], 3),
        ("t-b", &["beta"], 1),
        ("t-c", &["beta", "gamma"], 0),
        ("t-d", &[], 2),
    ];
    for (key, tags, clicks) in links {
        let r = c.create(
            &json!({"long_url": "https://tags.example/", "custom_alias": key,
                                 "tags": tags}),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        for _ in 0..*clicks {
            assert_eq!(
                c.send("GET", &format!("/{key}"), false, &[], b"")
                    .unwrap()
                    .status,
                302
            );
        }
    }
    let body = br#"{"longUrl": "https://tags.example/w", "customSlug": "t-w", "tags": ["delta"]}"#;
    assert_eq!(
        shlink(&mut c, &writer, "POST", "/rest/v3/short-urls", body).0,
        200
    );
    // Every click counted before the figures are read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for (key, _, clicks) in links {
        loop {
            let path = format!("/api/v1/urls/{key}/stats?bots=include");
            let v = c.send("GET", &path, true, &[], b"").unwrap().json();
            if v["summary"]["clicks"] == *clicks {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{key}: {v}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    let (st, v) = shlink(&mut c, admin, "GET", "/rest/v3/tags", b"");
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["tags"]["data"],
        json!(["alpha", "beta", "delta", "gamma"])
    );
    assert_eq!(v["tags"]["pagination"]["totalItems"], 4);
    let (st, v) = shlink(
        &mut c,
        admin,
        "GET",
        "/rest/v3/tags/stats?orderBy=visits-DESC",
        b"",
    );
    assert_eq!(st, 200, "{v}");
    let stats: Vec<(String, u64, u64)> = v["tags"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tag"].as_str().unwrap().to_owned(),
                t["shortUrlsCount"].as_u64().unwrap(),
                t["visitsSummary"]["total"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("beta", 3, 4),
        ("alpha", 1, 3),
        ("delta", 1, 0),
        ("gamma", 1, 0),
    ];
    let want: Vec<(String, u64, u64)> = want
        .iter()
        .map(|(t, l, v)| ((*t).to_owned(), *l, *v))
        .collect();
    assert_eq!(stats, want, "{v}");
    let (_, v) = shlink(
        &mut c,
        admin,
        "GET",
        "/rest/v3/tags?searchTerm=A&itemsPerPage=2&page=2&orderBy=tag-DESC",
        b"",
    );
    // Tags containing "a", newest name first: gamma, delta, beta, alpha; page 2 of 2.
    assert_eq!(v["tags"]["data"], json!(["beta", "alpha"]), "{v}");
    assert_eq!(v["tags"]["pagination"]["pagesCount"], 2, "{v}");
    // An author-only key: its own links' tags only, and no edits.
    let (_, v) = shlink(&mut c, &writer, "GET", "/rest/v3/tags", b"");
    assert_eq!(v["tags"]["data"], json!(["delta"]), "{v}");
    let (st, v) = shlink(&mut c, &writer, "DELETE", "/rest/v3/tags?tags[]=delta", b"");
    assert_eq!(st, 403, "{v}");
    assert_eq!(
        v["type"],
        "https://shlink.io/api/error/forbidden-tag-operation"
    );

    // Shlink's list ordered by visits (bots included) and by non-bot visits: each link's
    // totals asked, then sorted; ties by key.
    let order = |c: &mut Client, by: &str| -> Vec<String> {
        let q = format!("/rest/v3/short-urls?orderBy={by}&itemsPerPage=3&page=1");
        let (st, v) = shlink(c, admin, "GET", &q, b"");
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["shortUrls"]["pagination"]["totalItems"], 5, "{v}");
        v["shortUrls"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["shortCode"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(order(&mut c, "visits-DESC"), ["t-a", "t-d", "t-b"]);
    assert_eq!(order(&mut c, "visits-ASC"), ["t-c", "t-w", "t-b"]);
    // The test client sends no User-Agent: every click is a bot's, so no non-bot visits.
    assert_eq!(order(&mut c, "nonBotVisits-DESC"), ["t-a", "t-b", "t-c"]);

    // Renamed on every link that carries it; Shlink's refusals.
    let rename = |c: &mut Client, old: &str, new: &str| {
        let body = json!({"oldName": old, "newName": new}).to_string();
        shlink(c, admin, "PUT", "/rest/v3/tags", body.as_bytes())
    };
    assert_eq!(rename(&mut c, "beta", "Bravo Two").0, 204);
    assert_eq!(
        rename(&mut c, "nope", "x").1["type"],
        "https://shlink.io/api/error/tag-not-found"
    );
    let (st, v) = rename(&mut c, "alpha", "gamma");
    assert_eq!(
        (st, &v["type"]),
        (409, &json!("https://shlink.io/api/error/tag-conflict"))
    );
    let tags_of = |c: &mut Client, key: &str| c.get_link(key).json()["tags"].clone();
    assert_eq!(tags_of(&mut c, "t-a"), json!(["alpha", "bravo-two"]));
    assert_eq!(tags_of(&mut c, "t-b"), json!(["bravo-two"]));
    assert_eq!(tags_of(&mut c, "t-c"), json!(["bravo-two", "gamma"]));
    // Deleted from every link; a tag no link has is no error.
    let (st, _) = shlink(
        &mut c,
        admin,
        "DELETE",
        "/rest/v3/tags?tags[]=bravo-two&tags[]=gamma&tags[]=never",
        b"",
    );
    assert_eq!(st, 204);
    assert_eq!(tags_of(&mut c, "t-a"), json!(["alpha"]));
    assert_eq!(tags_of(&mut c, "t-b"), json!([]));
    assert_eq!(tags_of(&mut c, "t-c"), json!([]));
    let (_, v) = shlink(&mut c, admin, "GET", "/rest/v3/tags", b"");
    assert_eq!(v["tags"]["data"], json!(["alpha", "delta"]));
    // Shlink's exclusions on its list: excludeTags[], and excludeMaxVisitsReached (a link
    // whose one visit is used).
    let r = c.create(
        &json!({"long_url": "https://tags.example/", "custom_alias": "t-once",
                             "max_visits": 1, "tags": ["alpha"]}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        c.send("GET", "/t-once", false, &[], b"").unwrap().status,
        302
    );
    let codes = |c: &mut Client, q: &str| -> Vec<String> {
        let (st, v) = shlink(c, admin, "GET", &format!("/rest/v3/short-urls?{q}"), b"");
        assert_eq!(st, 200, "{v}");
        let mut k: Vec<String> = v["shortUrls"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["shortCode"].as_str().unwrap().to_owned())
            .collect();
        k.sort();
        k
    };
    assert_eq!(codes(&mut c, "tags[]=alpha"), ["t-a", "t-once"]);
    assert_eq!(
        codes(&mut c, "tags[]=alpha&excludeMaxVisitsReached=true"),
        ["t-a"]
    );
    assert_eq!(
        codes(&mut c, "excludeTags[]=alpha&excludeTags[]=delta"),
        ["t-b", "t-c", "t-d"]
    );
    let r = c.send(
        "GET",
        "/api/v1/urls?exclude_max_visits_reached=true&tag=alpha",
        true,
        &[],
        b"",
    );
    assert_eq!(r.unwrap().json()["items"][0]["key"], "t-a");
    // Kept across kill -9.
    s.kill9();
    let s = start(&dir, &flags());
    let mut c = Client::new(&s);
    assert_eq!(tags_of(&mut c, "t-a"), json!(["alpha"]));
    let (_, v) = shlink(&mut c, admin, "GET", "/rest/v3/tags", b"");
    assert_eq!(v["tags"]["data"], json!(["alpha", "delta"]));
}

/// A native API call with `key`'s bearer token.
fn native(c: &mut Client, key: &str, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    call(c, ("Authorization", &auth), method, path, body)
}

/// The native tag endpoints on 3 cores: every tag the key's links carry with their links and
/// clicks, searched; renamed and removed on every link (admin keys only), with the native
/// API's problems; an author-only key sees its own links' tags.
#[test]
fn native_tag_endpoints_list_rename_and_delete_tags() {
    let (_t, dir) = data_dir();
    let writer = api::make_key(&dir, "writer", &["--author-only"]);
    let s = start(&dir, &flags());
    let mut c = Client::new(&s);
    let admin = api::API_KEY;
    let links: &[(&str, &[&str], usize)] = &[
        ("n-a", &["alpha", "beta"], 2),
        ("n-b", &["beta"], 1),
        ("n-c", &[], 1),
    ];
    for (key, tags, clicks) in links {
        let r = c.create(
            &json!({"long_url": "https://tags.example/", "custom_alias": key,
                                 "tags": tags}),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        for _ in 0..*clicks {
            let r = c.send("GET", &format!("/{key}"), false, &[], b"").unwrap();
            assert_eq!(r.status, 302);
        }
    }
    let body =
        br#"{"long_url": "https://tags.example/w", "custom_alias": "n-w", "tags": ["delta"]}"#;
    assert_eq!(native(&mut c, &writer, "POST", "/api/v1/urls", body).0, 201);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for (key, _, clicks) in links {
        loop {
            let path = format!("/api/v1/urls/{key}/stats?bots=include");
            let v = c.send("GET", &path, true, &[], b"").unwrap().json();
            if v["summary"]["clicks"] == *clicks {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{key}: {v}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    // Every tag by name; the test client sends no User-Agent, so every click is a bot's.
    let tag = |t: &str, links: u64, clicks: u64| {
        json!({"tag": t, "links": links, "clicks": clicks, "human_clicks": 0,
               "bot_clicks": clicks})
    };
    let (st, v) = native(&mut c, admin, "GET", "/api/v1/tags", b"");
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["items"],
        json!([tag("alpha", 1, 2), tag("beta", 2, 3), tag("delta", 1, 0)])
    );
    let (_, v) = native(&mut c, admin, "GET", "/api/v1/tags?search=ET", b"");
    assert_eq!(v["items"], json!([tag("beta", 2, 3)]), "{v}");
    let (st, v) = native(&mut c, admin, "GET", "/api/v1/tags?searchTerm=x", b"");
    assert_eq!(st, 422, "a parameter of another API: {v}");
    let (st, v) = native(&mut c, admin, "POST", "/api/v1/tags", b"{}");
    assert_eq!(st, 405, "{v}");
    // An author-only key: its own links' tags, and no edits.
    let (_, v) = native(&mut c, &writer, "GET", "/api/v1/tags", b"");
    assert_eq!(v["items"], json!([tag("delta", 1, 0)]), "{v}");
    let (st, v) = native(&mut c, &writer, "DELETE", "/api/v1/tags/delta", b"");
    assert_eq!(
        (st, &v["type"]),
        (403, &json!("https://ricochet.dev/problems/admin-only"))
    );

    // Renamed on every link carrying it (the new name normalized); the refusals.
    let rename = |c: &mut Client, old: &str, new: &str| {
        let body = json!({ "name": new }).to_string();
        native(
            c,
            admin,
            "PATCH",
            &format!("/api/v1/tags/{old}"),
            body.as_bytes(),
        )
    };
    assert_eq!(rename(&mut c, "beta", "Bravo Two").0, 204);
    let tags_of = |c: &mut Client, key: &str| c.get_link(key).json()["tags"].clone();
    assert_eq!(tags_of(&mut c, "n-a"), json!(["alpha", "bravo-two"]));
    assert_eq!(tags_of(&mut c, "n-b"), json!(["bravo-two"]));
    let (st, v) = rename(&mut c, "nope", "x");
    assert_eq!(
        (st, &v["type"]),
        (404, &json!("https://ricochet.dev/problems/not-found"))
    );
    let (st, v) = rename(&mut c, "alpha", "bravo-two");
    assert_eq!(
        (st, &v["type"]),
        (409, &json!("https://ricochet.dev/problems/tag-conflict"))
    );
    let (st, v) = native(
        &mut c,
        admin,
        "PATCH",
        "/api/v1/tags/alpha",
        b"{\"name\": 7}",
    );
    assert_eq!((st, &v["field"]), (422, &json!("name")));
    let (st, _) = native(&mut c, admin, "PATCH", "/api/v1/tags/alpha", b"not json");
    assert_eq!(st, 400);
    // A tag in the path is percent-decoded and normalized.
    assert_eq!(rename(&mut c, "Bravo%20Two", "beta").0, 204);
    assert_eq!(tags_of(&mut c, "n-b"), json!(["beta"]));

    // Removed from every link; removing a tag no link has is done already.
    let (st, _) = native(&mut c, admin, "DELETE", "/api/v1/tags/beta", b"");
    assert_eq!(st, 204);
    assert_eq!(tags_of(&mut c, "n-a"), json!(["alpha"]));
    assert_eq!(tags_of(&mut c, "n-b"), json!([]));
    let (st, _) = native(&mut c, admin, "DELETE", "/api/v1/tags/beta", b"");
    assert_eq!(st, 204);
    let (_, v) = native(&mut c, admin, "GET", "/api/v1/tags", b"");
    assert_eq!(v["items"], json!([tag("alpha", 1, 2), tag("delta", 1, 0)]));
}
