//! The stats page in a real browser: Debian's chromium driven by the npm package
//! `playwright-core` (`tests/browser/stats_page.mjs`). A link gets a known mix of clicks; the
//! page, given the API key, must show the cards, the referrer and browser rows and the day's
//! bar, with no console error, page error or failed request (a Content-Security-Policy
//! violation is a console error), and a screenshot is saved.
//!
//! `.ci/run` installs chromium and `npm ci --prefix tests/browser` and sets
//! `RICOCHET_REQUIRE_BROWSER=1`, so there this test cannot skip; elsewhere it skips (with a
//! line saying so) when either is missing.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{data_dir, start, Client, API_KEY, NO_RATE_LIMIT};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";

#[test]
fn the_stats_page_shows_a_links_clicks_in_chromium() {
    if !common::browser_ready("browser", &["playwright-core"]) {
        return;
    }
    let (_t, dir) = data_dir();
    let s = start(&dir, &NO_RATE_LIMIT);
    let mut c = Client::new(&s);
    let k = c.create_ok("https://example.com/page", Some("paged"));
    let mix: &[(&[(&str, &str)], usize)] = &[
        (
            &[
                ("User-Agent", CHROME),
                ("Referer", "https://www.news.example.com/a?b=c"),
            ],
            6,
        ),
        (&[("User-Agent", FIREFOX)], 2),
        (
            &[(
                "User-Agent",
                "Googlebot/2.1 (+http://www.google.com/bot.html)",
            )],
            3,
        ),
    ];
    for (headers, n) in mix {
        for _ in 0..*n {
            let r = c
                .send("GET", &format!("/{k}"), false, headers, b"")
                .unwrap();
            assert_eq!(r.status, 302);
        }
    }
    // Wait until the API has every click (complete_until passes the last one).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = c
            .send(
                "GET",
                &format!("/api/v1/urls/{k}/stats?bots=include"),
                true,
                &[],
                b"",
            )
            .unwrap()
            .json();
        if v["summary"]["clicks"] == json!(11) {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let shot = shots.join("stats-page.png");
    let out = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/browser/stats_page.mjs"
        ))
        .arg(format!("http://{}", s.addr))
        .arg(&k)
        .arg(API_KEY)
        .arg(&shot)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        v["errors"],
        json!([]),
        "no console error, page error or failed request: {v}"
    );
    assert!(
        v["csp"].as_str().unwrap().contains("default-src 'none'"),
        "{v}"
    );
    assert_eq!(v["key"], json!("paged"));
    let mut cards = v["cards"].clone();
    let uniques = cards["uniques"].take();
    assert_eq!(
        cards,
        json!({"clicks": "11", "humans": "8", "bots": "3", "uniques": null}),
        "{v}"
    );
    // Bots included: three visitors (one address, three user agents). HyperLogLog counts a
    // handful by the registers they set; two of the three share one of the 1,024 under the
    // day's random salt in about 3 runs in 1,000, and then the page shows 2.
    assert!(
        uniques == json!("3") || uniques == json!("2"),
        "three visitors: {v}"
    );
    let refs = v["referrers"].as_array().unwrap();
    assert!(refs.contains(&json!(["news.example.com", "6"])), "{v}");
    assert!(refs.contains(&json!(["(direct)", "5"])), "{v}");
    assert!(
        v["browsers"]
            .as_array()
            .unwrap()
            .contains(&json!(["Chrome", "6"])),
        "{v}"
    );
    assert!(
        v["countries"]
            .as_array()
            .unwrap()
            .contains(&json!(["ZZ", "11"])),
        "{v}"
    );
    let bars = v["bars"].as_array().unwrap();
    assert_eq!(
        bars.len(),
        30,
        "a bar for each day of the default range: {v}"
    );
    let recent = common::api::last_two_days(bars, |b| b[1].as_u64().unwrap());
    assert_eq!(
        recent, 11,
        "today's bar (and yesterday's, past UTC midnight): {v}"
    );
    assert_eq!(
        v["stored"],
        json!(true),
        "the API key is kept in sessionStorage"
    );
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "a screenshot was saved"
    );
    eprintln!("screenshot: {}", shot.display());
    // The page and its assets carry the policy; a bad path is a 404.
    for path in [
        "/stats/paged",
        "/stats/assets/stats.js",
        "/stats/assets/stats.css",
    ] {
        let r = c.send("GET", path, false, &[], b"").unwrap();
        assert_eq!(r.status, 200, "{path}");
        assert!(r.header("content-security-policy").is_some(), "{path}");
    }
    assert_eq!(
        c.send("GET", "/stats/a/b", false, &[], b"").unwrap().status,
        404
    );
}
