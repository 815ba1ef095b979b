//! Shlink's own web UI against ricochet, in a real browser: `tests/webui/drive.mjs` bundles
//! `@shlinkio/shlink-web-component` with Shlink's JS SDK as its client (esbuild, styled by
//! Tailwind with Shlink's presets), serves it from an origin of its own (so every API call is
//! cross-origin, as from Shlink's hosted client) and drives it in Debian's chromium through
//! `playwright-core`: the overview, the list in its default order, sorted by every column and
//! searched, a create through the form with the component's defaults (and a title, tags and
//! maximum visits and an "enabled since" date-time), the tags page (rename, delete), an edit, a delete from a row's menu, a
//! row's QR code, the domains page (which checks each domain's `/rest/health`), a link's
//! redirect rules page (a rule added, saved, shown after a reload, and in force), its visits
//! from the visit log (the charts by context, the list) and the orphan visits (listed, then
//! deleted from their page's options).
//! This test then checks every effect through the native API. A second server, without the
//! visit log, shows its visits page's message (`visit-log-off`'s detail).
//!
//! Every API call the UI makes must succeed, except those of features ricochet does not
//! have yet, listed in [`NOT_YET_BUILT`] (each removed as it is built), and Mercure's
//! `501 mercure-not-configured`, which is Shlink's own answer without a Mercure hub.
//!
//! `.ci/run` installs chromium and `npm ci --prefix tests/webui` and sets
//! `RICOCHET_REQUIRE_BROWSER=1`, so there this test cannot skip; elsewhere it skips (with a
//! line saying so) when either is missing.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom"
)]

mod common;

use common::api::{data_dir, start, Client, API_KEY};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// API calls the UI makes that ricochet does not answer yet: (method, path prefix, status).
/// None on the pages this test walks (the visit pages, not walked, answer 501
/// `visit-log-off`).
const NOT_YET_BUILT: &[(&str, &str, u64)] = &[];

/// The short codes of a step's table rows, in their order.
fn codes(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap_or_else(|| panic!("rows: {rows}"))
        .iter()
        .map(|r| {
            let url = r["shortUrl"].as_str().unwrap();
            url.rsplit('/').next().unwrap().to_owned()
        })
        .collect()
}

/// Whether an API call the UI made is one it may make without success: Mercure's, and with
/// the visit log off a visit list's (`visit-log-off`, what the page then shows).
fn excused(call: &Value) -> bool {
    let (method, path, status) = (
        call["method"].as_str().unwrap(),
        call["path"].as_str().unwrap(),
        call["status"].as_u64().unwrap(),
    );
    let visit_log_off = path.starts_with("/rest/v3/short-urls/bravo/visits");
    (method == "GET" && status == 501 && (path == "/rest/v3/mercure-info" || visit_log_off))
        || NOT_YET_BUILT
            .iter()
            .any(|&(m, p, s)| m == method && path.starts_with(p) && s == status)
}

const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
const CRAWLER: &str = "Googlebot/2.1 (+http://www.google.com/bot.html)";

/// `alpha`, `bravo` and `charlie`, created in that order a second apart (the list's default
/// order is by creation time, to the second), and three clicks on `bravo`, counted.
fn three_links(c: &mut Client) {
    // Created a second apart: the list's default order is by creation time, to the second.
    for (i, slug) in ["alpha", "bravo", "charlie"].iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(1100));
        }
        let tags: &[&str] = match *slug {
            "bravo" => &["launch"],
            _ => &[],
        };
        let r = c.create(
            &serde_json::json!({"long_url": format!("https://example.com/{slug}"),
                                             "custom_alias": slug, "tags": tags}),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    // Two visits by a person from a news site, one by a crawler: the visit pages' charts
    // have browsers, systems and referrers to show.
    for (ua, referer) in [
        (FIREFOX, Some("https://news.example/story")),
        (FIREFOX, Some("https://news.example/story")),
        (CRAWLER, None),
    ] {
        let mut h = vec![("User-Agent", ua)];
        h.extend(referer.map(|r| ("Referer", r)));
        let r = c.send("GET", "/bravo", false, &h, b"").unwrap();
        assert_eq!(r.status, 302);
    }
    // A visit to a short code no link has: an orphan visit.
    let r = c
        .send("GET", "/nope", false, &[("User-Agent", FIREFOX)], b"")
        .unwrap();
    assert_eq!(r.status, 404);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .send(
            "GET",
            "/api/v1/urls/bravo/stats?bots=include",
            true,
            &[],
            b"",
        )
        .unwrap()
        .json()["summary"]["clicks"]
        != 3
    {
        assert!(Instant::now() < deadline, "the clicks never showed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What `drive.mjs` saw, after checking that no step failed, no page error or failed request
/// happened, and every API call succeeded or is excused ([`excused`]).
fn drive(base: &str, mode: &[&str]) -> Value {
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/webui/drive.mjs"
        ))
        .args([base, API_KEY])
        .arg(shots)
        .args(mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(
        v["error"].is_null(),
        "a step failed (screenshots in {shots:?}): {v:#}"
    );
    assert_eq!(v["pageErrors"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["failedRequests"], serde_json::json!([]), "{v:#}");
    let failed: Vec<&Value> = v["api"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !(200..300).contains(&c["status"].as_u64().unwrap()) && !excused(c))
        .collect();
    assert!(failed.is_empty(), "API calls that failed: {failed:#?}");

    v
}

/// The tags page: each tag's links and visits (bravo's 3); then `launch` renamed from its
/// menu, on both links that carry it.
fn check_tags(v: &Value, c: &mut Client) {
    let rows = |k: &str| -> Vec<Vec<String>> { serde_json::from_value(v[k].clone()).unwrap() };
    let row = |t: &str, l: &str, vis: &str| vec![t.to_owned(), l.to_owned(), vis.to_owned()];
    assert_eq!(
        rows("tags"),
        [row("launch", "2", "3"), row("web-ui", "1", "0")]
    );
    assert_eq!(v["renameTag"]["status"], 204);
    assert_eq!(
        rows("tagsAfterRename"),
        [row("go-live", "2", "3"), row("web-ui", "1", "0")]
    );
    // `web-ui` deleted from its menu: off the link that carried it.
    assert_eq!(v["deleteTag"]["status"], 204);
    assert_eq!(rows("tagsAfterDelete"), [row("go-live", "2", "3")]);
    assert_eq!(
        c.get_link("from-ui").json()["tags"],
        serde_json::json!(["go-live"])
    );
    assert_eq!(
        c.get_link("bravo").json()["tags"],
        serde_json::json!(["go-live"])
    );
}

/// bravo's visits from the visit log: charts drawn, and the list's rows are the visits the
/// native stats count (3, one of them a bot), with their referrer's host.
fn check_visits(v: &Value, c: &mut Client) {
    assert_eq!(v["visits"]["status"], 200, "{v:#}");
    assert!(v["visits"]["charts"].as_u64().unwrap() > 0, "{v:#}");
    let by_context = v["visits"]["byContext"].as_str().unwrap();
    for part in ["Firefox", "Linux", "news.example"] {
        assert!(by_context.contains(part), "{part}: {by_context}");
    }
    let list: Vec<String> = serde_json::from_value(v["visits"]["list"].clone()).unwrap();
    let stats = c
        .send(
            "GET",
            "/api/v1/urls/bravo/stats?bots=include",
            true,
            &[],
            b"",
        )
        .unwrap()
        .json();
    assert_eq!(
        list.len() as u64,
        stats["summary"]["clicks"].as_u64().unwrap(),
        "{list:?}"
    );
    let orphans: Vec<String> = serde_json::from_value(v["orphans"]["list"].clone()).unwrap();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert!(
        orphans[0].contains("/nope") && orphans[0].contains("Firefox"),
        "{orphans:?}"
    );
    // Deleted from the orphan page's options: the list is empty, and so is the server's
    // 404 count.
    assert_eq!(v["orphans"]["deleted"]["status"], 200, "{v:#}");
    let after = v["orphans"]["after"].as_str().unwrap();
    assert!(
        after.contains("There are no visits") && !after.contains("/nope"),
        "{after}"
    );
    let overall = c
        .send("GET", "/api/v1/stats", true, &[], b"")
        .unwrap()
        .json();
    assert_eq!(overall["summary"]["not_found"], 0, "{overall}");
    assert_eq!(
        list.iter().filter(|r| r.contains("news.example")).count(),
        2,
        "{list:?}"
    );
}

#[test]
fn shlinks_web_ui_manages_links_on_ricochet_from_another_origin() {
    if !common::browser_ready(
        "webui",
        &["@shlinkio/shlink-web-component", "playwright-core"],
    ) {
        return;
    }
    let (_t, dir) = data_dir();
    let s = start(
        &dir,
        &[
            "--cores",
            "3",
            "--test-oversubscribe",
            "--visit-log-days",
            "30",
        ],
    );
    let base = format!("http://{}", s.addr);
    let mut c = Client::new(&s);
    three_links(&mut c);
    let v = drive(&base, &[]);

    // The overview's cards: 3 visits, 1 orphan visit, 3 short URLs.
    let overview = v["overview"]["text"].as_str().unwrap().to_lowercase();
    for card in ["visits 3", "orphan visits 1", "short urls 3"] {
        assert!(overview.contains(card), "{card}: {overview}");
    }
    assert_eq!(codes(&v["overview"]["rows"]), ["charlie", "bravo", "alpha"]);

    // The list: newest first, each row's visits; sorted by short code; searched.
    assert_eq!(codes(&v["list"]), ["charlie", "bravo", "alpha"]);
    let visits: Vec<&str> = v["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["visits"].as_str().unwrap())
        .collect();
    assert_eq!(visits, ["0", "3", "0"]);
    assert_eq!(codes(&v["sorted"]), ["alpha", "bravo", "charlie"]);
    // By visits, most first (bravo's 3), ties by short code.
    assert_eq!(codes(&v["byVisits"]), ["bravo", "alpha", "charlie"]);
    assert_eq!(codes(&v["searched"]), ["bravo"]);
    // The other columns: created (oldest first), long URL; by title (none has one yet).
    assert_eq!(codes(&v["byCreated"]), ["alpha", "bravo", "charlie"]);
    assert_eq!(codes(&v["byLongUrl"]), ["alpha", "bravo", "charlie"]);
    assert_eq!(codes(&v["byTitle"]).len(), 3, "{v:#}");

    // Created through the form, with the component's defaults (forwardQuery on).
    assert_eq!(v["create"]["status"], 200, "{v:#}");
    assert_eq!(
        v["create"]["result"],
        format!("Great! The short URL is {base}/from-ui")
    );
    let link = c.get_link("from-ui").json();
    assert_eq!(link["long_url"], "https://example.org/from-ui");
    assert_eq!(link["forward_query"], true, "{link}");
    assert_eq!(link["max_visits"], 5, "the form's maximum visits: {link}");
    assert_eq!(
        link["valid_since"], "2025-01-02T03:04:00Z",
        "the form's enabled-since: {link}"
    );

    // Its title and tags typed in the form (the tag box sends them as Shlink normalizes
    // them), shown in its list row.
    assert_eq!(link["title"], "Made in the UI", "{link}");
    for part in ["Made in the UI", "launch", "web-ui"] {
        assert!(
            v["madeRow"].as_str().unwrap().contains(part),
            "{part}: {v:#}"
        );
    }
    check_tags(&v, &mut c);

    // Edited: the form showed the old long URL, the link has the new one.
    assert_eq!(v["edit"]["before"], "https://example.com/alpha");
    assert_eq!(v["edit"]["status"], 200);
    common::api::assert_redirects(
        &mut c,
        "alpha",
        "https://example.com/alpha-edited",
        Some(302),
    );

    // Deleted from its row's menu: gone from the list and from the server.
    assert_eq!(v["delete"]["status"], 204);
    assert_eq!(codes(&v["afterDelete"]), ["from-ui", "bravo", "alpha"]);
    c.get_link("charlie").assert_problem(404);

    // The domains page lists the default domain by the authority short URLs carry, and its
    // check of that domain's `/rest/v3/health` (cross-origin too) passed; the redirect
    // rules page loads the link's rules.
    let domains = serde_json::json!([{"domain": s.addr.to_string(), "status": "check"}]);
    // A rule added in the rules page, saved, shown again after a reload, and in force.
    assert_eq!(v["rules"]["saved"], 200, "{v:#}");
    let rules = c.get_link("bravo").json()["redirect_rules"].clone();
    assert_eq!(
        rules[0]["target"], "https://example.com/bravo-android",
        "{rules}"
    );
    let android = [(
        "User-Agent",
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile",
    )];
    let r = c.send("GET", "/bravo", false, &android, b"").unwrap();
    assert_eq!(r.location(), Some("https://example.com/bravo-android"));
    // The QR code dialog of bravo's row.
    assert!(
        v["qr"]["dialog"].as_str().unwrap().contains("/bravo"),
        "{v:#}"
    );
    assert_eq!(
        (&v["domains"], &v["rules"]["status"]),
        (&domains, &serde_json::json!(200)),
        "{v:#}"
    );

    check_visits(&v, &mut c);
}

/// Without the visit log, a link's visits page shows why there is no list: the problem's
/// detail, as Shlink's web client shows an error.
#[test]
fn shlinks_visits_page_says_the_visit_log_is_off() {
    if !common::browser_ready(
        "webui",
        &["@shlinkio/shlink-web-component", "playwright-core"],
    ) {
        return;
    }
    let (_t, dir) = data_dir();
    let s = start(&dir, &["--cores", "2", "--test-oversubscribe"]);
    let mut c = Client::new(&s);
    let r = c.create(
        &serde_json::json!({"long_url": "https://example.com/bravo", "custom_alias": "bravo"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let v = drive(&format!("http://{}", s.addr), &["visits-off"]);
    assert_eq!(v["visitsOff"]["status"], 501, "{v:#}");
    let text = v["visitsOff"]["text"].as_str().unwrap();
    assert!(
        text.contains("This server's visit log is off") && text.contains("--visit-log-days"),
        "{text}"
    );
}
