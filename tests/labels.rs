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
    let shlink = [
        ("X-Api-Key", api::API_KEY),
        ("Content-Type", "application/json"),
    ];
    let body = json!({"longUrl": "https://labelled.example/shlink", "customSlug": "from-shlink",
                      "title": "Shlink Link 1", "tags": ["Imported", "odd"]});
    let r = c
        .send(
            "POST",
            "/rest/v3/short-urls",
            false,
            &shlink,
            body.to_string().as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tags"], json!(["imported", "odd"]));
    assert_eq!(r.json()["title"], "Shlink Link 1");
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
    let r = c
        .send(
            "PATCH",
            "/rest/v3/short-urls/from-shlink",
            false,
            &shlink,
            br#"{"tags": ["odd"]}"#,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    model.get_mut("from-shlink").unwrap().1 = vec!["odd".into()];

    let all: Vec<&String> = model.keys().collect();
    assert_eq!(labels_of(&mut c, &all), model);
    check_lists(&mut c, &model, 0);
    // Shlink's list: tags[] with tagsMode, and orderBy=title (links without one first).
    let r = c
        .send(
            "GET",
            "/rest/v3/short-urls?tags[]=odd&tags[]=new&tagsMode=any&itemsPerPage=500&orderBy=title-ASC",
            false,
            &shlink,
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let data = r.json()["shortUrls"]["data"].clone();
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
    let shlink = [
        ("X-Api-Key", api::API_KEY),
        ("Content-Type", "application/json"),
    ];
    let r = c
        .send(
            "POST",
            "/rest/v3/short-urls",
            false,
            &shlink,
            br#"{"longUrl": "https://e.example/", "tags": ["ok", ""]}"#,
        )
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["type"], "https://shlink.io/api/error/invalid-data");
    assert_eq!(r.json()["invalidElements"], json!(["tags"]), "{}", r.text());
    let r = c
        .send("GET", "/api/v1/urls?tags_mode=some", true, &[], b"")
        .unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    let v: Value = r.json();
    assert_eq!(v["field"], "tags_mode");
}
