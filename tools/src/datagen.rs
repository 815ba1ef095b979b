//! Synthetic link datasets for tests and benchmarks: unique keys that look like real short-link
//! keys and URLs whose length distribution looks like real redirect targets.
//!
//! Output is deterministic for a seed. Memory is one 64-bit hash per key (uniqueness set), so
//! 10M links fit in ~200 MB.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Write};
use std::str::FromStr;

use shards::link::{RedirectStatus, MAX_KEY_BYTES};

use crate::rng::Rng;

/// Share of keys drawn as custom aliases (`summer-sale-24`) instead of base62 ids. Real
/// shorteners are dominated by generated ids; a few percent of vanity aliases exercise longer keys.
pub const ALIAS_KEY_SHARE: f64 = 0.05;

/// Longest custom alias, in bytes (~20, like the vanity aliases shorteners allow in practice).
pub const MAX_ALIAS_BYTES: usize = 20;

/// Attempts at one key length before the generator lengthens keys for good. 32 consecutive
/// collisions means the keyspace at that length is nearly full (only for tiny keyspaces or huge N).
pub const MAX_KEY_ATTEMPTS: u32 = 32;

/// Shortest generated URL, in bytes (`https://ab.io/x` plus a little): real targets are rarely shorter.
pub const MIN_GEN_URL_BYTES: usize = 25;

/// Longest generated URL, in bytes: covers the long tracking-parameter tail of real targets
/// while keeping datasets compact.
pub const MAX_GEN_URL_BYTES: usize = 400;

/// Share of URLs drawn from the 150..250 byte band (campaign links with several parameters).
pub const MEDIUM_LONG_URL_SHARE: f64 = 0.04;

/// Share of URLs drawn from the 250..=MAX_GEN_URL_BYTES band (the long tail).
pub const LONG_URL_SHARE: f64 = 0.01;

/// Cannot-happen-in-practice guard against an endless key loop (e.g. key length already maxed).
pub const MAX_TOTAL_KEY_ATTEMPTS: u32 = 100_000;

/// Errors from parsing datagen options.
#[derive(Debug, thiserror::Error)]
pub enum DatagenError {
    #[error("bad --statuses entry {0:?}: expected CODE:WEIGHT, e.g. 302:90")]
    StatusSyntax(String),
    #[error("bad redirect status {0}: must be 301, 302, 307 or 308")]
    StatusCode(u16),
    #[error("--statuses weights must add up to more than 0")]
    StatusZeroWeight,
    #[error("unknown format {0:?}: expected tsv, csv or ndjson")]
    Format(String),
    #[error("could not generate a unique key after {0} attempts")]
    KeyspaceExhausted(u32),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Output file format. No format has a header line; fields never need quoting or escaping
/// because keys and generated URLs contain no tab, comma, quote, backslash or whitespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// `key<TAB>url<TAB>status`, the format `ricochet import` reads.
    #[default]
    Tsv,
    /// `key,url,status`.
    Csv,
    /// `{"key":"...","url":"...","status":302}` per line.
    Ndjson,
}

impl FromStr for OutputFormat {
    type Err = DatagenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tsv" => Ok(OutputFormat::Tsv),
            "csv" => Ok(OutputFormat::Csv),
            "ndjson" => Ok(OutputFormat::Ndjson),
            other => Err(DatagenError::Format(other.to_string())),
        }
    }
}

/// Weighted mix of redirect statuses, e.g. `302:90,301:10`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusMix {
    /// (status, cumulative weight) in input order.
    cumulative: Vec<(u16, u64)>,
    total: u64,
}

impl Default for StatusMix {
    /// All links 302.
    fn default() -> Self {
        StatusMix {
            cumulative: vec![(RedirectStatus::Found.code(), 1)],
            total: 1,
        }
    }
}

impl FromStr for StatusMix {
    type Err = DatagenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut cumulative = Vec::new();
        let mut total = 0u64;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (code, weight) = part
                .split_once(':')
                .ok_or_else(|| DatagenError::StatusSyntax(part.to_string()))?;
            let code: u16 = code
                .trim()
                .parse()
                .map_err(|_| DatagenError::StatusSyntax(part.to_string()))?;
            let weight: u64 = weight
                .trim()
                .parse()
                .map_err(|_| DatagenError::StatusSyntax(part.to_string()))?;
            if RedirectStatus::from_code(code).is_none() {
                return Err(DatagenError::StatusCode(code));
            }
            total += weight;
            cumulative.push((code, total));
        }
        if total == 0 {
            return Err(DatagenError::StatusZeroWeight);
        }
        Ok(StatusMix { cumulative, total })
    }
}

impl StatusMix {
    /// Draws one status according to the weights.
    pub fn pick(&self, rng: &mut Rng) -> u16 {
        let x = rng.below(self.total);
        self.cumulative
            .iter()
            .find(|&&(_, c)| x < c)
            .map(|&(code, _)| code)
            .expect("x < total = last cumulative weight")
    }
}

/// Generator settings.
#[derive(Clone, Debug, Default)]
pub struct DatagenConfig {
    /// Seed; the same seed and settings give the same dataset.
    pub seed: u64,
    /// Keys must also be unique ignoring ASCII case (nginx `map` keys are case-insensitive).
    pub unique_ignore_case: bool,
    /// Redirect status mix.
    pub statuses: StatusMix,
}

/// One generated link, borrowed from the generator's buffers.
#[derive(Clone, Copy, Debug)]
pub struct Link<'a> {
    /// `[A-Za-z0-9_-]+`, unique within the generator's output.
    pub key: &'a str,
    /// An http(s) URL valid for ricochet.
    pub url: &'a str,
    /// 301, 302, 307 or 308.
    pub status: u16,
}

/// Identity hasher: the set stores xxh3 hashes already, hashing them again would waste time.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64s are hashed; this path is a fallback that folds bytes in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type HashOnlySet = HashSet<u64, BuildHasherDefault<IdentityHasher>>;

/// Streams unique links. Uniqueness is tracked as 64-bit key hashes: a hash collision can only
/// reject a key that was in fact new (then another is drawn), never let a duplicate through.
pub struct LinkGenerator {
    rng: Rng,
    seen: HashOnlySet,
    unique_ignore_case: bool,
    statuses: StatusMix,
    /// Added to every key length once a length's keyspace filled up.
    extra_key_len: usize,
    key: String,
    url: String,
}

impl LinkGenerator {
    /// A generator; `expected_count` pre-sizes the uniqueness set so it never rehashes.
    pub fn new(cfg: &DatagenConfig, expected_count: usize) -> LinkGenerator {
        let mut seen = HashOnlySet::default();
        seen.reserve(expected_count);
        LinkGenerator {
            rng: Rng::new(cfg.seed),
            seen,
            unique_ignore_case: cfg.unique_ignore_case,
            statuses: cfg.statuses.clone(),
            extra_key_len: 0,
            key: String::with_capacity(MAX_KEY_BYTES),
            url: String::with_capacity(MAX_GEN_URL_BYTES),
        }
    }

    /// The next link.
    pub fn next_link(&mut self) -> Result<Link<'_>, DatagenError> {
        let mut attempts = 0u32;
        let mut total = 0u32;
        loop {
            gen_key(&mut self.rng, &mut self.key, self.extra_key_len);
            let h = key_hash(self.key.as_bytes(), self.unique_ignore_case);
            if self.seen.insert(h) {
                break;
            }
            attempts += 1;
            total += 1;
            if total >= MAX_TOTAL_KEY_ATTEMPTS {
                return Err(DatagenError::KeyspaceExhausted(total));
            }
            if attempts >= MAX_KEY_ATTEMPTS && self.extra_key_len + 8 < MAX_KEY_BYTES {
                self.extra_key_len += 1;
                attempts = 0;
            }
        }
        gen_url(&mut self.rng, &mut self.url);
        let status = self.statuses.pick(&mut self.rng);
        Ok(Link {
            key: &self.key,
            url: &self.url,
            status,
        })
    }
}

/// Hash of a key for the uniqueness set, optionally of its ASCII-lowercased form.
fn key_hash(key: &[u8], ignore_case: bool) -> u64 {
    if ignore_case {
        let mut buf = [0u8; MAX_KEY_BYTES];
        let n = key.len().min(MAX_KEY_BYTES);
        for (d, s) in buf.iter_mut().zip(&key[..n]) {
            *d = s.to_ascii_lowercase();
        }
        xxhash_rust::xxh3::xxh3_64(&buf[..n])
    } else {
        xxhash_rust::xxh3::xxh3_64(key)
    }
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const ALNUM_LOWER: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
const HEX: &[u8; 16] = b"0123456789abcdef";

const ALIAS_WORDS: &[&str] = &[
    "sale", "promo", "launch", "summer", "winter", "spring", "fall", "deal", "offer", "blog",
    "news", "event", "webinar", "docs", "guide", "intro", "beta", "app", "shop", "store", "jobs",
    "career", "team", "press", "report", "survey", "signup", "login", "free", "trial", "gift",
    "black", "friday", "cyber", "monday", "conf", "talk", "demo", "video", "live", "podcast", "ep",
    "recap", "q1", "q2", "q3", "q4", "rsvp", "meetup", "book", "menu", "hiring", "kit",
];

/// Writes a random key into `out`: mostly 6-8 char base62 ids, sometimes a custom alias.
/// `extra_len` lengthens keys when shorter keyspaces are used up.
pub fn gen_key(rng: &mut Rng, out: &mut String, extra_len: usize) {
    out.clear();
    if rng.chance(ALIAS_KEY_SHARE) {
        gen_alias(rng, out, extra_len);
        return;
    }
    let len = match rng.below(100) {
        0..=34 => 6,
        35..=79 => 7,
        _ => 8,
    } + extra_len;
    for _ in 0..len {
        out.push(BASE62[rng.below(62) as usize] as char);
    }
}

fn gen_alias(rng: &mut Rng, out: &mut String, extra_len: usize) {
    let sep = if rng.chance(0.7) { '-' } else { '_' };
    let words = rng.range(1, 3);
    for i in 0..words {
        if i > 0 {
            out.push(sep);
        }
        out.push_str(rng.pick(ALIAS_WORDS));
    }
    // A numeric or random suffix keeps the alias space large enough for millions of keys.
    if rng.chance(0.5) {
        out.push(sep);
        push_number(out, rng.range(1, 9999));
    } else {
        out.push(sep);
        for _ in 0..rng.range(2, 4) {
            out.push(ALNUM_LOWER[rng.below(36) as usize] as char);
        }
    }
    if out.len() > MAX_ALIAS_BYTES {
        // Cut at a byte boundary (all ASCII) and never end on a separator.
        out.truncate(MAX_ALIAS_BYTES);
        while out.ends_with(['-', '_']) {
            out.pop();
        }
    }
    for _ in 0..extra_len {
        out.push(BASE62[rng.below(62) as usize] as char);
    }
}

fn push_number(out: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        out.push(b as char);
    }
}

const SUBDOMAINS: &[&str] = &[
    "www.", "www.", "www.", "blog.", "shop.", "m.", "docs.", "news.", "app.", "store.", "en.",
    "support.", "go.", "info.",
];
const HOST_WORDS: &[&str] = &[
    "example",
    "acme",
    "globex",
    "initech",
    "umbrella",
    "stark",
    "wayne",
    "hooli",
    "piedpiper",
    "vandelay",
    "contoso",
    "fabrikam",
    "northwind",
    "tailspin",
    "wingtip",
    "adventure",
    "litware",
    "proseware",
    "lucerne",
    "margie",
    "fourth",
    "coffee",
    "travel",
    "daily",
    "tech",
    "cloud",
    "media",
    "market",
    "health",
    "sports",
    "music",
    "photo",
    "games",
    "learn",
    "city",
    "green",
];
const TLDS: &[&str] = &[
    ".com", ".com", ".com", ".com", ".org", ".net", ".io", ".co.uk", ".de", ".dev", ".app", ".fr",
    ".jp", ".info", ".co", ".ru", ".com.br", ".nl",
];
const PATH_WORDS: &[&str] = &[
    "products", "blog", "news", "article", "articles", "category", "items", "item", "users", "u",
    "p", "posts", "2023", "2024", "2025", "en", "us", "search", "watch", "docs", "guide", "help",
    "support", "download", "releases", "events", "store", "shop", "deals", "cart", "checkout",
    "account", "profile", "settings", "video", "images", "media", "tag", "topics", "how", "to",
    "the", "best", "new", "top", "ten", "ways", "build", "fast", "simple", "rust", "guide",
    "review", "vs", "tips", "free", "update", "release", "notes", "summer", "winter",
];
const FILE_EXTS: &[&str] = &[".html", ".htm", ".php", ".aspx", ".pdf", ".jpg"];
const QUERY_KEYS: &[&str] = &[
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "utm_term",
    "id",
    "ref",
    "q",
    "page",
    "lang",
    "sort",
    "session",
    "sid",
    "v",
    "tab",
    "source",
    "fbclid",
    "gclid",
    "cid",
    "variant",
    "color",
    "size",
    "s",
    "t",
];
const QUERY_WORDS: &[&str] = &[
    "newsletter",
    "email",
    "twitter",
    "facebook",
    "linkedin",
    "google",
    "cpc",
    "social",
    "spring_sale",
    "launch",
    "organic",
    "partner",
    "banner",
    "footer",
    "header",
    "en",
    "de",
    "price_asc",
    "newest",
    "blue",
    "red",
    "xl",
    "m",
    "true",
    "false",
    "summary",
    "details",
];

/// Draws a target URL length: ~95% near 90 bytes, a thinner band of 150..250, a 1% long tail.
fn sample_url_len(rng: &mut Rng) -> usize {
    let x = rng.unit_f64();
    if x < LONG_URL_SHARE {
        rng.range(250, MAX_GEN_URL_BYTES as u64) as usize
    } else if x < LONG_URL_SHARE + MEDIUM_LONG_URL_SHARE {
        rng.range(150, 249) as usize
    } else {
        // Sum of three uniforms: a bell over 25..=151 with mean ~88.
        MIN_GEN_URL_BYTES + (0..3).map(|_| rng.range(0, 42) as usize).sum::<usize>()
    }
}

/// Writes a random http(s) URL into `out`. Only unreserved characters and `/ ? & = # . : ~`
/// appear: no whitespace, controls, commas, quotes or percent-escapes.
#[expect(
    clippy::too_many_lines,
    reason = "the URL's parts in their order (scheme, host, path, query, fragment) against one length budget; the random draws' order is what makes a seed reproduce a dataset, so it stays one sequence"
)]
pub fn gen_url(rng: &mut Rng, out: &mut String) {
    out.clear();
    let target = sample_url_len(rng);
    out.push_str(if rng.chance(0.85) {
        "https://"
    } else {
        "http://"
    });
    if rng.chance(0.6) {
        out.push_str(rng.pick(SUBDOMAINS));
    }
    out.push_str(rng.pick(HOST_WORDS));
    if rng.chance(0.25) {
        out.push(if rng.chance(0.5) { '-' } else { '.' });
        out.push_str(rng.pick(HOST_WORDS));
    }
    out.push_str(rng.pick(TLDS));
    out.push('/');

    // Path: segments while they fit in ~70% of the target, leaving room for a query string.
    let path_budget = target * 7 / 10;
    let mut segments = 0;
    loop {
        let seg_start = out.len();
        if segments > 0 {
            out.push('/');
        }
        push_path_segment(rng, out);
        if out.len() > path_budget {
            if segments > 0 || out.len() > target {
                out.truncate(seg_start);
            }
            break;
        }
        segments += 1;
        if segments >= 6 {
            break;
        }
    }
    if out.ends_with('/') && segments > 0 && rng.chance(0.3) {
        out.pop();
    }

    // Query string fills up to the target length; the last value is padded to hit it exactly.
    let mut remaining = target.saturating_sub(out.len());
    // `?` plus at least `x=ab`; less room than that goes into the path instead.
    if remaining >= 5 {
        out.push('?');
        remaining -= 1;
        let mut first = true;
        while remaining >= 4 {
            if !first {
                out.push('&');
                remaining -= 1;
            }
            first = false;
            let k = rng.pick(QUERY_KEYS);
            if k.len() + 2 > remaining {
                // Too little room for a named parameter: `x=` and a filler token.
                out.push_str("x=");
                push_token(rng, out, remaining - 2, ALNUM_LOWER);
                break;
            }
            out.push_str(k);
            out.push('=');
            remaining -= k.len() + 1;
            let before = out.len();
            match rng.below(4) {
                0 => push_number(out, rng.range(1, 99_999_999)),
                1 => {
                    let n = rng.range(8, 32) as usize;
                    push_token(rng, out, n, HEX)
                }
                _ => out.push_str(rng.pick(QUERY_WORDS)),
            }
            let used = out.len() - before;
            if used >= remaining {
                out.truncate(before + remaining.max(1));
                break;
            }
            remaining -= used;
            if remaining < 4 {
                push_token(rng, out, remaining, ALNUM_LOWER);
                break;
            }
        }
    } else {
        push_token(rng, out, remaining, ALNUM_LOWER);
    }
    if out.len() > MAX_GEN_URL_BYTES {
        out.truncate(MAX_GEN_URL_BYTES);
    }
}

fn push_path_segment(rng: &mut Rng, out: &mut String) {
    match rng.below(10) {
        0..=3 => out.push_str(rng.pick(PATH_WORDS)),
        4..=6 => {
            // Slug: how-to-build-fast-things
            let n = rng.range(2, 6);
            for i in 0..n {
                if i > 0 {
                    out.push('-');
                }
                out.push_str(rng.pick(PATH_WORDS));
            }
        }
        7 => push_number(out, rng.range(1, 9_999_999)),
        8 => {
            let n = rng.range(6, 16) as usize;
            push_token(rng, out, n, BASE62)
        }
        _ => {
            out.push_str(rng.pick(PATH_WORDS));
            out.push_str(rng.pick(FILE_EXTS));
        }
    }
}

fn push_token(rng: &mut Rng, out: &mut String, len: usize, alphabet: &[u8]) {
    for _ in 0..len {
        out.push(alphabet[rng.below(alphabet.len() as u64) as usize] as char);
    }
}

/// Appends one formatted line for `link` to `line`.
pub fn format_link(line: &mut Vec<u8>, format: OutputFormat, link: &Link<'_>) {
    let status = [
        b'0' + (link.status / 100 % 10) as u8,
        b'0' + (link.status / 10 % 10) as u8,
        b'0' + (link.status % 10) as u8,
    ];
    debug_assert!((100..1000).contains(&link.status));
    match format {
        OutputFormat::Tsv | OutputFormat::Csv => {
            let sep = if format == OutputFormat::Tsv {
                b'\t'
            } else {
                b','
            };
            line.extend_from_slice(link.key.as_bytes());
            line.push(sep);
            line.extend_from_slice(link.url.as_bytes());
            line.push(sep);
            line.extend_from_slice(&status);
        }
        OutputFormat::Ndjson => {
            // Keys and generated URLs contain nothing JSON must escape.
            debug_assert!(!link.url.contains(['"', '\\']));
            line.extend_from_slice(b"{\"key\":\"");
            line.extend_from_slice(link.key.as_bytes());
            line.extend_from_slice(b"\",\"url\":\"");
            line.extend_from_slice(link.url.as_bytes());
            line.extend_from_slice(b"\",\"status\":");
            line.extend_from_slice(&status);
            line.push(b'}');
        }
    }
    line.push(b'\n');
}

/// Generates `count` links into `out` (and their keys into `keys_out`, one per line).
pub fn generate(
    cfg: &DatagenConfig,
    count: u64,
    format: OutputFormat,
    out: &mut dyn Write,
    mut keys_out: Option<&mut dyn Write>,
) -> Result<(), DatagenError> {
    let mut gen = LinkGenerator::new(cfg, count.min(usize::MAX as u64) as usize);
    let mut line = Vec::with_capacity(MAX_GEN_URL_BYTES + 2 * MAX_KEY_BYTES);
    for _ in 0..count {
        let link = gen.next_link()?;
        line.clear();
        format_link(&mut line, format, &link);
        out.write_all(&line)?;
        if let Some(k) = keys_out.as_deref_mut() {
            k.write_all(link.key.as_bytes())?;
            k.write_all(b"\n")?;
        }
    }
    out.flush()?;
    if let Some(k) = keys_out {
        k.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shards::link::{validate_key, validate_url};

    fn collect(cfg: &DatagenConfig, n: usize) -> Vec<(String, String, u16)> {
        let mut g = LinkGenerator::new(cfg, n);
        (0..n)
            .map(|_| {
                let l = g.next_link().unwrap();
                (l.key.to_string(), l.url.to_string(), l.status)
            })
            .collect()
    }

    #[test]
    fn deterministic_for_a_seed() {
        let cfg = DatagenConfig {
            seed: 42,
            ..Default::default()
        };
        let a = collect(&cfg, 2000);
        let b = collect(&cfg, 2000);
        assert_eq!(a, b);
        let c = collect(
            &DatagenConfig {
                seed: 43,
                ..Default::default()
            },
            2000,
        );
        assert_ne!(a, c);
    }

    #[test]
    fn keys_unique_and_valid() {
        let links = collect(&DatagenConfig::default(), 100_000);
        let mut keys: HashSet<&str> = HashSet::new();
        let mut short_base62 = 0;
        let mut aliases = 0;
        for (k, _, _) in &links {
            validate_key(k.as_bytes()).unwrap();
            assert!(keys.insert(k), "duplicate key {k}");
            if (6..=8).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_alphanumeric()) {
                short_base62 += 1;
            }
            if k.contains(['-', '_']) {
                aliases += 1;
                assert!(k.len() <= MAX_ALIAS_BYTES, "{k}");
            }
        }
        // "mostly" 6-8 char base62, "a few" aliases.
        assert!(short_base62 > 90_000, "{short_base62}");
        assert!((2_000..10_000).contains(&aliases), "{aliases}");
    }

    #[test]
    fn keys_unique_ignoring_case() {
        assert_eq!(key_hash(b"AbC-1", true), key_hash(b"aBc-1", true));
        assert_ne!(key_hash(b"AbC-1", false), key_hash(b"aBc-1", false));

        // Take the upper-case twin of the generator's next key: with --unique-ignore-case the
        // key itself must then be refused; without it, it is still fine.
        for ignore_case in [true, false] {
            let cfg = DatagenConfig {
                seed: 3,
                unique_ignore_case: ignore_case,
                ..Default::default()
            };
            let mut g = LinkGenerator::new(&cfg, 16);
            let mut k = String::new();
            gen_key(&mut g.rng.clone(), &mut k, 0);
            let twin = k.to_ascii_uppercase();
            assert_ne!(twin, k, "key {k} has no letters");
            g.seen.insert(key_hash(twin.as_bytes(), ignore_case));
            let got = g.next_link().unwrap().key.to_string();
            assert_eq!(
                got == k,
                !ignore_case,
                "ignore_case={ignore_case} key {k} got {got}"
            );
        }

        let cfg = DatagenConfig {
            seed: 3,
            unique_ignore_case: true,
            ..Default::default()
        };
        let links = collect(&cfg, 50_000);
        let mut lower: HashSet<String> = HashSet::new();
        for (k, _, _) in &links {
            assert!(lower.insert(k.to_ascii_lowercase()), "case-duplicate {k}");
        }
    }

    #[test]
    fn key_length_grows_when_keyspace_fills() {
        // Pre-fill the set with the next MAX_KEY_ATTEMPTS keys the generator will draw (a clone
        // of its rng draws the same sequence): every attempt collides, so it must lengthen keys.
        let mut g = LinkGenerator::new(&DatagenConfig::default(), 64);
        let mut r = g.rng.clone();
        let mut taken = HashSet::new();
        let mut k = String::new();
        for _ in 0..MAX_KEY_ATTEMPTS {
            gen_key(&mut r, &mut k, 0);
            g.seen.insert(key_hash(k.as_bytes(), false));
            taken.insert(k.clone());
        }
        let link = g.next_link().unwrap();
        assert!(!taken.contains(link.key), "duplicate {}", link.key);
        assert_eq!(g.extra_key_len, 1);
    }

    #[test]
    fn urls_valid_and_charset_clean() {
        let links = collect(&DatagenConfig::default(), 50_000);
        for (_, u, _) in &links {
            validate_url(u).unwrap_or_else(|e| panic!("{u}: {e}"));
            assert!(
                u.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~/?&=#:".contains(&b)),
                "unexpected char in {u}"
            );
            assert!(u.starts_with("https://") || u.starts_with("http://"));
            assert!(!u.ends_with(['?', '&', '=']), "dangling query in {u}");
        }
    }

    #[test]
    fn url_length_distribution() {
        let links = collect(&DatagenConfig::default(), 50_000);
        let mut lens: Vec<usize> = links.iter().map(|(_, u, _)| u.len()).collect();
        lens.sort_unstable();
        let n = lens.len();
        let mean = lens.iter().sum::<usize>() as f64 / n as f64;
        let median = lens[n / 2];
        assert!((80.0..110.0).contains(&mean), "mean {mean}");
        assert!((75..105).contains(&median), "median {median}");
        assert!(lens[0] >= MIN_GEN_URL_BYTES, "min {}", lens[0]);
        assert!(lens[n - 1] <= MAX_GEN_URL_BYTES, "max {}", lens[n - 1]);
        assert!(lens[n - 1] >= 300, "no long tail: max {}", lens[n - 1]);
        let long = lens.iter().filter(|&&l| l > 200).count() as f64 / n as f64;
        assert!((0.005..0.05).contains(&long), "share > 200 bytes: {long}");
    }

    #[test]
    fn status_mix() {
        let mix: StatusMix = "302:90,301:10".parse().unwrap();
        let mut rng = Rng::new(5);
        let n301 = (0..10_000).filter(|_| mix.pick(&mut rng) == 301).count();
        assert!((800..1200).contains(&n301), "{n301}");
        assert!("303:1".parse::<StatusMix>().is_err());
        assert!("302".parse::<StatusMix>().is_err());
        assert!("302:0".parse::<StatusMix>().is_err());
        assert!("302:x".parse::<StatusMix>().is_err());
        let d = StatusMix::default();
        assert_eq!(d.pick(&mut rng), 302);
    }

    #[test]
    fn formats() {
        let link = Link {
            key: "abc123",
            url: "https://e.com/x?y=1",
            status: 301,
        };
        let mut l = Vec::new();
        format_link(&mut l, OutputFormat::Tsv, &link);
        assert_eq!(l, b"abc123\thttps://e.com/x?y=1\t301\n");
        l.clear();
        format_link(&mut l, OutputFormat::Csv, &link);
        assert_eq!(l, b"abc123,https://e.com/x?y=1,301\n");
        l.clear();
        format_link(&mut l, OutputFormat::Ndjson, &link);
        let v: serde_json::Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["key"], "abc123");
        assert_eq!(v["url"], "https://e.com/x?y=1");
        assert_eq!(v["status"], 301);
    }

    #[test]
    fn generate_writes_links_and_keys() {
        let mut out = Vec::new();
        let mut keys = Vec::new();
        generate(
            &DatagenConfig::default(),
            100,
            OutputFormat::Tsv,
            &mut out,
            Some(&mut keys),
        )
        .unwrap();
        let lines: Vec<&str> = std::str::from_utf8(&out).unwrap().lines().collect();
        let klines: Vec<&str> = std::str::from_utf8(&keys).unwrap().lines().collect();
        assert_eq!(lines.len(), 100);
        assert_eq!(klines.len(), 100);
        for (l, k) in lines.iter().zip(&klines) {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 3);
            assert_eq!(cols[0], *k);
            assert_eq!(cols[2], "302");
        }
    }
}
