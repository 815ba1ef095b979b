//! Classification, on the aggregator threads only: a user agent to browser, OS, device class
//! and bot flag (woothee, plus the `isbot` pattern list and an operator's extra patterns), and
//! a referrer host to its normalised facet value. Results are cached per distinct string.

use shards::clicks::{DIRECT_REFERRER, MAX_FACET_VALUE_BYTES};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Distinct user agents and referrers an aggregator remembers; past it the table is cleared
/// and the cores are told to send strings again (`Combiner::sweep`).
pub const MAX_CACHED_STRINGS: usize = 100_000;
/// Longest operator bot-pattern file taken.
pub const MAX_BOT_PATTERN_FILE_BYTES: u64 = 1 << 20;

/// What a user agent says about its client. Values are shared (`Arc`): facet counts of
/// millions of link-days point at the few distinct ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UaClass {
    pub browser: Arc<str>,
    pub os: Arc<str>,
    pub device: Arc<str>,
    pub bot: bool,
}

impl UaClass {
    /// The class of a click without a `User-Agent`: a bot (browsers always send one).
    pub fn no_ua() -> UaClass {
        UaClass {
            browser: "(none)".into(),
            os: "(none)".into(),
            device: "bot".into(),
            bot: true,
        }
    }

    /// The class of a user agent the aggregator has not been sent (rare: see `Combiner`).
    pub fn unknown() -> UaClass {
        UaClass {
            browser: "(unknown)".into(),
            os: "(unknown)".into(),
            device: "(unknown)".into(),
            bot: false,
        }
    }
}

/// User agents classified at start (`Classifier::warm_up`): the common browsers, systems and
/// devices, crawlers and tools, so the parsers' lazily built expressions are built then.
const WARM_UP_AGENTS: [&str; 16] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.0.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 OPR/105.0.0.0",
    "Mozilla/5.0 (Windows NT 6.1; Trident/7.0; rv:11.0) like Gecko",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "DoCoMo/2.0 P903i(c100;TB;W24H12)",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "curl/8.5.0",
    "python-requests/2.31.0",
];

/// Turns user agents into classes.
pub struct Classifier {
    woothee: woothee::parser::Parser,
    bots: isbot::Bots,
}

impl Classifier {
    /// The built-in lists plus the patterns in `extra` (one regular expression per line, `#`
    /// comments), if given.
    pub fn new(extra: Option<&Path>) -> Result<Classifier, String> {
        let mut bots = isbot::Bots::default();
        if let Some(path) = extra {
            let meta = std::fs::metadata(path)
                .map_err(|e| format!("--bot-patterns {}: {e}", path.display()))?;
            if meta.len() > MAX_BOT_PATTERN_FILE_BYTES {
                return Err(format!(
                    "--bot-patterns {}: {} bytes, more than the {MAX_BOT_PATTERN_FILE_BYTES} taken",
                    path.display(),
                    meta.len()
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--bot-patterns {}: {e}", path.display()))?;
            let mut lines = Vec::new();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                if let Err(e) = regex_check(line) {
                    return Err(format!(
                        "--bot-patterns {} line {}: not a regular expression: {e}",
                        path.display(),
                        n + 1
                    ));
                }
                lines.push(line);
            }
            bots.append(&lines);
        }
        let c = Classifier {
            woothee: woothee::parser::Parser::new(),
            bots,
        };
        c.warm_up();
        Ok(c)
    }

    /// Classifies a spread of user agents once, at start: the parsers compile their regular
    /// expressions lazily, on the first string that needs each one, and a compile runs for
    /// milliseconds without a yield point (perf/reports/2026-12-04-issue23-profile.md: 4 ms
    /// of a running core's CPU taken at a tick, on the aggregator's first batch).
    fn warm_up(&self) {
        let mut values = Vocabulary::default();
        for ua in WARM_UP_AGENTS {
            self.classify(ua.as_bytes(), &mut values);
        }
    }

    /// The class of `ua` (the bytes a request sent, cut at `MAX_UA_BYTES`).
    pub fn classify(&self, ua: &[u8], values: &mut Vocabulary) -> UaClass {
        let ua = String::from_utf8_lossy(ua);
        let parsed = self.woothee.parse(&ua);
        let (browser, os, category) = match &parsed {
            Some(r) => (vocab(r.name), vocab(r.os), r.category),
            None => ("Other", "Other", "UNKNOWN"),
        };
        let device = match category {
            "pc" => "desktop",
            "smartphone" => "mobile",
            "mobilephone" => "feature phone",
            "appliance" => "appliance",
            "crawler" => "bot",
            _ => "other",
        };
        let bot = category == "crawler" || self.bots.is_bot(&ua);
        UaClass {
            browser: values.get(browser),
            os: values.get(os),
            device: values.get(if bot { "bot" } else { device }),
            bot,
        }
    }
}

fn regex_check(p: &str) -> Result<(), String> {
    // isbot compiles patterns with `regex`; check each one first so a bad line is named.
    regex::Regex::new(&p.to_ascii_lowercase())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Woothee's names come from its fixed dataset (a low-cardinality vocabulary); its
/// "UNKNOWN" is spelled like ours.
fn vocab(s: &str) -> &str {
    if s == woothee::woothee::VALUE_UNKNOWN {
        "Other"
    } else {
        s
    }
}

/// The facet values an aggregator has handed out, shared.
#[derive(Default)]
pub struct Vocabulary(std::collections::HashSet<Arc<str>>);

impl Vocabulary {
    /// The shared copy of `v`.
    pub fn get(&mut self, v: &str) -> Arc<str> {
        if let Some(a) = self.0.get(v) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(v);
        self.0.insert(a.clone());
        a
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The facet value of a referrer host as the core extracted it (the authority of the
/// `Referer` URL): lowercased, without userinfo, port, trailing dot or a leading `www.`.
/// Anything that is not a plausible host name becomes `(other)`.
pub fn normalize_referrer(raw: &[u8]) -> String {
    let mut host = raw;
    if let Some(at) = memchr::memrchr(b'@', host) {
        host = &host[at + 1..];
    }
    if host.first() == Some(&b'[') {
        // An IPv6 literal: kept whole, brackets included.
        if let Some(end) = memchr::memchr(b']', host) {
            host = &host[..=end];
        }
    } else if let Some(colon) = memchr::memchr(b':', host) {
        host = &host[..colon];
    }
    let mut s = String::from_utf8_lossy(host).to_lowercase();
    while s.ends_with('.') {
        s.pop();
    }
    if let Some(rest) = s.strip_prefix("www.") {
        s = rest.to_string();
    }
    let plausible = !s.is_empty()
        && s.len() <= MAX_FACET_VALUE_BYTES
        && s.chars()
            .all(|c| c.is_alphanumeric() || "-._[]:".contains(c));
    if plausible {
        s
    } else {
        shards::clicks::OTHER_REFERRER.to_string()
    }
}

/// A referrer's facet value (`(direct)` without one).
pub fn referrer_value(raw: Option<&[u8]>) -> String {
    raw.map_or_else(|| DIRECT_REFERRER.to_string(), normalize_referrer)
}

/// The per-aggregator cache of classified strings.
#[derive(Default)]
pub struct StringCache {
    pub uas: HashMap<u64, UaClass>,
    pub referrers: HashMap<u64, Arc<str>>,
    /// With the visit log on: each user agent's text (the log lists it).
    pub ua_texts: HashMap<u64, Arc<str>>,
}

impl StringCache {
    pub fn len(&self) -> usize {
        self.uas.len() + self.referrers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytics::combiner::referrer_host;

    #[test]
    fn referrers_are_normalised() {
        for (raw, want) in [
            (&b"WWW.Example.COM"[..], "example.com"),
            (b"user:pw@news.ycombinator.com:443", "news.ycombinator.com"),
            (b"example.org.", "example.org"),
            (b"[2001:db8::1]:8080", "[2001:db8::1]"),
            (b"bad host\"<>", "(other)"),
            (b"", "(other)"),
        ] {
            assert_eq!(normalize_referrer(raw), want, "{raw:?}");
        }
        assert_eq!(referrer_value(None), "(direct)");
        assert_eq!(
            referrer_host(b"https://www.Example.com/a/b?q=secret#x"),
            Some(&b"www.Example.com"[..])
        );
        assert_eq!(referrer_host(b"https://t.co?x"), Some(&b"t.co"[..]));
        assert_eq!(referrer_host(b"/relative/only"), None);
        assert_eq!(
            referrer_host(b"android-app://com.slack"),
            Some(&b"com.slack"[..])
        );
    }

    #[test]
    fn user_agents_are_classified_and_bots_flagged() {
        let c = Classifier::new(None).unwrap();
        let v = &mut Vocabulary::default();
        let chrome = c.classify(b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36", v);
        assert_eq!(
            (&*chrome.browser, &*chrome.os, &*chrome.device, chrome.bot),
            ("Chrome", "Windows 10", "desktop", false)
        );
        let iphone = c.classify(b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1", v);
        assert_eq!(
            (&*iphone.browser, &*iphone.os, &*iphone.device),
            ("Safari", "iPhone", "mobile")
        );
        assert!(
            c.classify(b"Googlebot/2.1 (+http://www.google.com/bot.html)", v)
                .bot
        );
        assert!(c.classify(b"curl/8.4.0", v).bot, "isbot lists curl");
        assert!(c.classify(b"python-requests/2.31", v).bot);
        assert!(!c.classify(b"MyInternalTool/1.0", v).bot);
    }

    #[test]
    fn operator_patterns_extend_the_list_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bots.txt");
        std::fs::write(&p, "# ours\nMyInternalTool/\n").unwrap();
        let c = Classifier::new(Some(&p)).unwrap();
        assert!(
            c.classify(b"MyInternalTool/1.0", &mut Vocabulary::default())
                .bot
        );
        std::fs::write(&p, "ok\n(unclosed\n").unwrap();
        let e = Classifier::new(Some(&p)).err().unwrap();
        assert!(e.contains("bots.txt line 2"), "{e}");
    }
}
