//! What a link is, and the rules every link obeys wherever it enters (import, API).

/// Longest key, in bytes. Keys are `[A-Za-z0-9_-]{1,64}`: short enough to travel inline in
/// cross-core messages and LRU slots without a heap allocation.
pub const MAX_KEY_BYTES: usize = 64;

/// Longest target URL, in bytes. 8 KiB matches the request-line limit common HTTP stacks
/// (nginx's `large_client_header_buffers`, browsers) accept, so any stored target can be followed.
pub const MAX_URL_BYTES: usize = 8192;

/// The bits of a link's `flags` (tables and logs) that say which creation of its key it is
/// within its creation second: 1 + the microseconds into that second when its owner made it,
/// raised so it strictly increases per owner within one second ([`CreationTag`]). With
/// `created_at_s` it tells two incarnations of one key apart, which the second alone cannot
/// when a key is deleted and created again within it (an idempotent retry must not be told
/// it created the other one). 0: unknown (a link written before tags, imported, or in fleet
/// mode, where the database's creating transaction decides). Bit 24 is [`AUTHOR_FLAG`]; the
/// others are reserved, 0.
pub const CREATION_TAG_MASK: u32 = 0x00FF_FFFF;

/// The creation tag a link's stored `flags` hold (see [`CREATION_TAG_MASK`]).
pub fn creation_tag(flags: u32) -> u32 {
    flags & CREATION_TAG_MASK
}

/// The `flags` bit (tables and logs) saying that the link records its author: the 8 bytes
/// of an [`Author`] follow its target. Set and cleared by the encoders from the link's
/// `author` field; never set in memory. Data written before authors never has it.
pub const AUTHOR_FLAG: u32 = 1 << 24;

/// Bytes of an [`Author`] in a record.
pub const AUTHOR_BYTES: usize = 8;

/// Who created a link (issue 26): the id of the API key that sent the create, 1 to
/// [`AUTHOR_BYTES`] ASCII letters or digits, padded with zero bytes; all zeros is
/// [`Author::NONE`] (imported, created before authors were recorded, or by an operator's
/// tool). Author-only API keys see only the links they authored. `Copy` and 8 bytes, so a
/// memtable entry grows by one word and a table record by 8 bytes only when it has one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Author([u8; AUTHOR_BYTES]);

impl Author {
    /// No recorded author.
    pub const NONE: Author = Author([0; AUTHOR_BYTES]);

    /// The author named `id`: 1..=[`AUTHOR_BYTES`] ASCII letters or digits.
    pub fn from_id(id: &str) -> Option<Author> {
        let b = id.as_bytes();
        if b.is_empty() || b.len() > AUTHOR_BYTES || !b.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        let mut out = [0; AUTHOR_BYTES];
        out[..b.len()].copy_from_slice(b);
        Some(Author(out))
    }

    /// The author from its record bytes: [`Author::NONE`] for all zeros, else a valid id
    /// followed only by zero padding; `None` for anything else (a damaged record).
    pub fn from_bytes(b: [u8; AUTHOR_BYTES]) -> Option<Author> {
        let len = b.iter().position(|&c| c == 0).unwrap_or(AUTHOR_BYTES);
        if len == 0 {
            return b.iter().all(|&c| c == 0).then_some(Author::NONE);
        }
        let padded = b[len..].iter().all(|&c| c == 0);
        let text = std::str::from_utf8(&b[..len]).ok()?;
        Author::from_id(text).filter(|_| padded)
    }

    /// The record bytes.
    pub fn bytes(&self) -> [u8; AUTHOR_BYTES] {
        self.0
    }

    /// Whether a link has a recorded author.
    pub fn is_some(&self) -> bool {
        *self != Author::NONE
    }

    /// The id as text; `""` for [`Author::NONE`].
    pub fn as_str(&self) -> &str {
        let len = self.0.iter().position(|&c| c == 0).unwrap_or(AUTHOR_BYTES);
        // Only ASCII alphanumerics are ever stored (see `from_id`, `from_bytes`).
        std::str::from_utf8(&self.0[..len]).unwrap_or("")
    }

    /// The flags bit a record of this author carries ([`AUTHOR_FLAG`] or 0).
    pub fn flag(&self) -> u32 {
        if self.is_some() {
            AUTHOR_FLAG
        } else {
            0
        }
    }
}

impl std::fmt::Debug for Author {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Author({})", self.as_str())
    }
}

/// Makes creation tags (see [`CREATION_TAG_MASK`]) for one owner.
#[derive(Debug, Default)]
pub struct CreationTag {
    second: u64,
    last: u32,
}

impl CreationTag {
    /// The tag of a creation at `now_s` (the owner's clock) made `micros` into the current
    /// second by the system clock: the two may disagree at a second's edge, which only the
    /// raise to `last + 1` has to absorb.
    pub fn next(&mut self, now_s: u64, micros: u32) -> u32 {
        let mut tag = (micros.min(999_999) + 1) & CREATION_TAG_MASK;
        if now_s == self.second && tag <= self.last {
            tag = (self.last + 1).min(CREATION_TAG_MASK);
        }
        self.second = now_s;
        self.last = tag;
        tag
    }
}

/// Whether two creation records (second, tag) may be the same creation: the same second,
/// and the same tag unless either is unknown (0).
pub fn same_creation(a: (u64, u32), b: (u64, u32)) -> bool {
    a.0 == b.0 && (a.1 == 0 || b.1 == 0 || a.1 == b.1)
}

/// The redirect status a link answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u16)]
pub enum RedirectStatus {
    /// 301 Moved Permanently: cacheable by clients.
    MovedPermanently = 301,
    /// 302 Found: the default; not cacheable, so a link can be changed or revoked.
    #[default]
    Found = 302,
    /// 307 Temporary Redirect: like 302 but the method is kept.
    TemporaryRedirect = 307,
    /// 308 Permanent Redirect: like 301 but the method is kept.
    PermanentRedirect = 308,
}

impl RedirectStatus {
    /// The numeric status code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Parses 301, 302, 307 or 308.
    pub fn from_code(code: u16) -> Option<RedirectStatus> {
        match code {
            301 => Some(RedirectStatus::MovedPermanently),
            302 => Some(RedirectStatus::Found),
            307 => Some(RedirectStatus::TemporaryRedirect),
            308 => Some(RedirectStatus::PermanentRedirect),
            _ => None,
        }
    }

    /// Whether clients and intermediaries may cache the redirect (301 and 308).
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            RedirectStatus::MovedPermanently | RedirectStatus::PermanentRedirect
        )
    }
}

/// Why a key or URL was rejected. The `Display` text is meant for the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("key is empty")]
    KeyEmpty,
    #[error("key is longer than {MAX_KEY_BYTES} bytes")]
    KeyTooLong,
    #[error("key may contain only A-Z, a-z, 0-9, '_' and '-'")]
    KeyCharset,
    #[error("URL is empty")]
    UrlEmpty,
    #[error(
        "URL is longer than {MAX_URL_BYTES} bytes (counting each non-ASCII byte as the 3 of its \
         percent-encoding, as it is sent)"
    )]
    UrlTooLong,
    #[error("URL contains whitespace or a control character")]
    UrlControl,
    #[error(
        "URL contains the invisible or text-direction character U+{0:04X}, which can disguise \
         where a link goes"
    )]
    UrlInvisible(u32),
    #[error("URL scheme must be http:// or https://")]
    UrlScheme,
    #[error("URL has no host")]
    UrlNoHost,
    #[error(
        "URL is not a valid URI (RFC 3986/3987): {ch:?} at byte {at} must be percent-encoded \
         or is out of place"
    )]
    UrlSyntax { at: usize, ch: char },
    #[error("URL is not valid: {0}")]
    UrlInvalid(url::ParseError),
    #[error("redirect status must be 301, 302, 307 or 308")]
    BadStatus,
}

/// Whether `b` may appear in a key.
#[inline]
pub fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Checks a key against `[A-Za-z0-9_-]{1,64}`. Keys are case-sensitive.
pub fn validate_key(key: &[u8]) -> Result<(), LinkError> {
    if key.is_empty() {
        return Err(LinkError::KeyEmpty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(LinkError::KeyTooLong);
    }
    if !key.iter().all(|&b| is_key_byte(b)) {
        return Err(LinkError::KeyCharset);
    }
    Ok(())
}

/// A domain's number in stored keys (issue 26): each declared domain is its own keyspace, and
/// a link's identity everywhere below the API (tables, logs, memtables, the LRU, the mesh's
/// messages, idempotency records, the click store) is its *stored key*: the key itself on the
/// default domain (number 0, so a data dir written before domains reads unchanged), or
/// `<number>.<key>` on any other, e.g. `17.x7Kp2`. A key never holds `.`, so the split is
/// unambiguous; numbers are decimal without leading zeros, from 1 to [`MAX_DOMAIN_NUMBER`].
pub const DEFAULT_DOMAIN: u32 = 0;

/// The highest domain number a stored key may carry. Numbers are never reused (a removed
/// domain keeps its number, so adding it again brings its links back).
pub const MAX_DOMAIN_NUMBER: u32 = 999_999;

/// Bytes a domain's prefix adds to a key at most: six digits and the `.`.
pub const MAX_DOMAIN_PREFIX_BYTES: usize = 7;

/// Longest stored key: a key with its domain's prefix.
pub const MAX_STORED_KEY_BYTES: usize = MAX_KEY_BYTES + MAX_DOMAIN_PREFIX_BYTES;

/// The stored key of `key` on domain `domain`, written into `buf`; no allocation (the
/// redirect path builds one per request on a non-default domain). `key` is a valid key and
/// `domain` at most [`MAX_DOMAIN_NUMBER`].
#[inline]
pub fn stored_key(domain: u32, key: &[u8], buf: &mut [u8; MAX_STORED_KEY_BYTES]) -> usize {
    debug_assert!(key.len() <= MAX_KEY_BYTES && domain <= MAX_DOMAIN_NUMBER);
    if domain == DEFAULT_DOMAIN {
        buf[..key.len()].copy_from_slice(key);
        return key.len();
    }
    let mut digits = [0u8; 6];
    let mut n = domain;
    let mut d = digits.len();
    while n > 0 {
        d -= 1;
        digits[d] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let p = digits.len() - d;
    buf[..p].copy_from_slice(&digits[d..]);
    buf[p] = b'.';
    buf[p + 1..p + 1 + key.len()].copy_from_slice(key);
    p + 1 + key.len()
}

/// The stored key of `key` on `domain`: `key` itself on the default domain (no copy), else
/// built into `buf` ([`stored_key`]).
#[inline]
pub fn stored_key_in<'a>(
    domain: u32,
    key: &'a [u8],
    buf: &'a mut [u8; MAX_STORED_KEY_BYTES],
) -> &'a [u8] {
    if domain == DEFAULT_DOMAIN {
        return key;
    }
    let n = stored_key(domain, key, buf);
    &buf[..n]
}

/// The stored key of `key` on `domain`, as a `String` (the API's and the tools' side).
pub fn stored_key_string(domain: u32, key: &str) -> String {
    let mut buf = [0u8; MAX_STORED_KEY_BYTES];
    let n = stored_key(domain, key.as_bytes(), &mut buf);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A stored key's domain number and key. A malformed prefix (a stored key that did not come
/// from [`stored_key`]) is returned whole as the key of the default domain, which
/// [`validate_key`] then refuses: [`validate_stored_key`] is the check.
#[inline]
pub fn split_stored_key(stored: &[u8]) -> (u32, &[u8]) {
    let Some(dot) = memchr::memchr(b'.', stored) else {
        return (DEFAULT_DOMAIN, stored);
    };
    let digits = &stored[..dot];
    if digits.is_empty()
        || digits.len() > MAX_DOMAIN_PREFIX_BYTES - 1
        || digits[0] == b'0'
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return (DEFAULT_DOMAIN, stored);
    }
    let n = digits
        .iter()
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    (n, &stored[dot + 1..])
}

/// Checks a stored key: an optional domain prefix (see [`DEFAULT_DOMAIN`]) and a valid key.
pub fn validate_stored_key(stored: &[u8]) -> Result<(), LinkError> {
    let (domain, key) = split_stored_key(stored);
    if domain > MAX_DOMAIN_NUMBER {
        return Err(LinkError::KeyCharset);
    }
    validate_key(key)
}

/// Characters refused in a URL although they are valid in an IRI: invisible or
/// text-direction controls that make the link read as going somewhere else (a phishing aid,
/// "Trojan Source"). Zero-width space/joiners and directional marks (U+200B..=U+200F), the
/// bidi embeddings and overrides (U+202A..=U+202E), word joiner and invisible operators
/// (U+2060..=U+2064), the bidi isolates (U+2066..=U+2069), and the byte order mark (U+FEFF).
pub const INVISIBLE_URL_CHARS: &[std::ops::RangeInclusive<char>] = &[
    '\u{200B}'..='\u{200F}',
    '\u{202A}'..='\u{202E}',
    '\u{2060}'..='\u{2064}',
    '\u{2066}'..='\u{2069}',
    '\u{FEFF}'..='\u{FEFF}',
];

/// Checks a target URL as it enters (API, import): everything [`check_storable_url`] asks, and
///
/// - it is a valid IRI (RFC 3987; an ASCII one is a URI, RFC 3986), checked by `fluent-uri`:
///   no `"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`, no `%` without two hex digits, no
///   `[`/`]` outside an IP literal, one `#` at most. So the `Location` it is sent as
///   ([`location_len`], `http::encode`) is a valid URI-reference;
/// - the WHATWG URL parser (the `url` crate, what browsers run) accepts it with a host: no
///   `http://[zzz]/`, ports up to 65535, valid international domain names;
/// - none of [`INVISIBLE_URL_CHARS`];
/// - its `Location` form is at most [`MAX_URL_BYTES`].
///
/// The URL is stored and returned byte-exact as given: validation never rewrites it.
pub fn validate_url(url: &str) -> Result<(), LinkError> {
    check_storable_url(url)?;
    if location_len(url) > MAX_URL_BYTES {
        return Err(LinkError::UrlTooLong);
    }
    if let Some(c) = url
        .chars()
        .find(|c| INVISIBLE_URL_CHARS.iter().any(|r| r.contains(c)))
    {
        return Err(LinkError::UrlInvisible(c as u32));
    }
    if let Err(e) = fluent_uri::Iri::parse(url) {
        // The error's Display names the byte index; recover it to name the character.
        let at = e
            .to_string()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        let ch = url.get(at..).and_then(|r| r.chars().next()).unwrap_or('?');
        return Err(LinkError::UrlSyntax { at, ch });
    }
    let parsed = url::Url::parse(url).map_err(LinkError::UrlInvalid)?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(LinkError::UrlNoHost);
    }
    Ok(())
}

/// Bytes of `url` as a `Location` header carries it: each non-ASCII byte is sent as its
/// 3-byte percent-encoding (the IRI-to-URI mapping of RFC 3987 section 3.1).
pub fn location_len(url: &str) -> usize {
    url.len() + 2 * url.bytes().filter(|b| !b.is_ascii()).count()
}

/// Whether `pred` holds for every byte of a target `t`, without a data-dependent branch for
/// the lengths nearly all URLs have.
///
/// Shaped for lookups, not for throughput: a loop over the target whose trip count depends on
/// its length ends in a mispredicted branch on nearly every hit, and that flush throws away the
/// memory loads the CPU had already started for the next lookups (measured on 1M links: hit
/// ~250 -> ~1000 ns back to back). So lengths 8..=128 are checked as four fixed-size windows
/// with no data-dependent branch; only other lengths loop.
#[inline(always)]
pub fn every_target_byte(t: &[u8], pred: impl Fn(u8) -> bool + Copy) -> bool {
    match t.len() {
        32..=128 => four_windows::<32>(t, pred),
        8..=31 => four_windows::<8>(t, pred),
        _ => t.iter().fold(true, |ok, &b| ok & pred(b)),
    }
}

/// Checks `t` (`W <= t.len() <= 4 * W`) as four `W`-byte windows starting at 0, `s`, `2s` and
/// `len - W` (clamped), with `s = ceil((len - W) / 3) <= W`: consecutive windows overlap or
/// touch, and the last ends at `len`, so together they cover every byte.
#[inline(always)]
fn four_windows<const W: usize>(t: &[u8], pred: impl Fn(u8) -> bool + Copy) -> bool {
    let last = t.len().saturating_sub(W);
    let step = last.div_ceil(3);
    [0, step.min(last), (2 * step).min(last), last]
        .iter()
        .fold(true, |ok, &at| {
            let window: Option<&[u8; W]> = t.get(at..at + W).and_then(|w| w.try_into().ok());
            ok & window.is_some_and(|w| w.iter().fold(true, |ok, &b| ok & pred(b)))
        })
}

/// What every stored target obeys, checked again where tables are written: http or https
/// (scheme case-insensitive), a non-empty host, no whitespace or control characters (they
/// would split or smuggle the `Location` header), at most [`MAX_URL_BYTES`]. Weaker than
/// [`validate_url`] on purpose: links stored by an older version under these rules must stay
/// compactable.
pub fn check_storable_url(url: &str) -> Result<(), LinkError> {
    if url.is_empty() {
        return Err(LinkError::UrlEmpty);
    }
    if url.len() > MAX_URL_BYTES {
        return Err(LinkError::UrlTooLong);
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(LinkError::UrlControl);
    }
    let lower_prefix: Vec<u8> = url
        .bytes()
        .take(8)
        .map(|b| b.to_ascii_lowercase())
        .collect();
    let rest = if lower_prefix.starts_with(b"https://") {
        &url[8..]
    } else if lower_prefix.starts_with(b"http://") {
        &url[7..]
    } else {
        return Err(LinkError::UrlScheme);
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..host_end];
    // Strip userinfo and port to see whether a host is left.
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = if host.starts_with('[') {
        host
    } else {
        host.split(':').next().unwrap_or("")
    };
    if host.is_empty() {
        return Err(LinkError::UrlNoHost);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn stored_keys_split_back_into_their_domain_and_key() {
        let mut buf = [0u8; MAX_STORED_KEY_BYTES];
        for (d, k) in [
            (0, "aB3"),
            (1, "x"),
            (17, "x7Kp2"),
            (MAX_DOMAIN_NUMBER, "k-_9"),
        ] {
            let n = stored_key(d, k.as_bytes(), &mut buf);
            assert_eq!(split_stored_key(&buf[..n]), (d, k.as_bytes()));
            assert!(validate_stored_key(&buf[..n]).is_ok());
            assert_eq!(stored_key_string(d, k).as_bytes(), &buf[..n]);
        }
        let long = [b'a'; MAX_KEY_BYTES];
        let n = stored_key(MAX_DOMAIN_NUMBER, &long, &mut buf);
        assert_eq!(n, MAX_STORED_KEY_BYTES);
        assert_eq!(
            stored_key(0, b"abc", &mut buf),
            3,
            "the default domain has no prefix"
        );
        for bad in [
            &b"0.abc"[..],
            b"01.abc",
            b".abc",
            b"1234567.abc",
            b"1.",
            b"a.b",
            b"1.a.b",
        ] {
            assert!(
                validate_stored_key(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn any_domain_and_key_round_trip_through_a_stored_key(
            d in 0..=MAX_DOMAIN_NUMBER,
            k in "[A-Za-z0-9_-]{1,64}",
        ) {
            let s = stored_key_string(d, &k);
            proptest::prop_assert!(s.len() <= MAX_STORED_KEY_BYTES);
            proptest::prop_assert_eq!(split_stored_key(s.as_bytes()), (d, k.as_bytes()));
            proptest::prop_assert!(validate_stored_key(s.as_bytes()).is_ok());
        }
    }

    #[test]
    fn creation_tags_strictly_increase_within_a_second_and_restart_with_the_next() {
        let mut t = CreationTag::default();
        assert_eq!(t.next(10, 500), 501);
        // The system clock's micros went back (a second's edge between the two clocks).
        assert_eq!(t.next(10, 3), 502);
        assert_eq!(t.next(10, 900), 901);
        assert_eq!(t.next(11, 3), 4);
        assert_eq!(
            t.next(11, 2_000_000),
            1_000_000,
            "micros past a second are clamped"
        );
        let tags: Vec<u32> = (0..5).map(|_| t.next(11, 0)).collect();
        assert_eq!(
            tags,
            [1_000_001, 1_000_002, 1_000_003, 1_000_004, 1_000_005]
        );
        let mut full = CreationTag::default();
        full.next(1, 999_999);
        full.last = CREATION_TAG_MASK;
        assert_eq!(
            full.next(1, 0),
            CREATION_TAG_MASK,
            "saturates within the mask"
        );
    }

    #[test]
    fn same_creation_needs_the_same_second_and_tag_unless_one_is_unknown() {
        assert!(same_creation((5, 7), (5, 7)));
        assert!(!same_creation((5, 7), (5, 8)));
        assert!(!same_creation((5, 7), (6, 7)));
        assert!(same_creation((5, 0), (5, 8)));
        assert!(same_creation((5, 7), (5, 0)));
        assert!(!same_creation((5, 0), (6, 0)));
    }

    use super::*;

    #[test]
    fn keys() {
        assert!(validate_key(b"aB3xZ9").is_ok());
        assert!(validate_key(b"a_b-C").is_ok());
        assert_eq!(validate_key(b""), Err(LinkError::KeyEmpty));
        assert_eq!(validate_key(&[b'a'; 65]), Err(LinkError::KeyTooLong));
        assert!(validate_key(&[b'a'; 64]).is_ok());
        assert_eq!(validate_key(b"a/b"), Err(LinkError::KeyCharset));
        assert_eq!(validate_key("é".as_bytes()), Err(LinkError::KeyCharset));
    }

    #[test]
    fn urls() {
        assert!(validate_url("https://example.com/x?y=1").is_ok());
        assert!(validate_url("HTTP://example.com").is_ok());
        assert!(validate_url("http://[::1]:8080/").is_ok());
        assert_eq!(validate_url("ftp://x"), Err(LinkError::UrlScheme));
        assert_eq!(
            validate_url("javascript:alert(1)"),
            Err(LinkError::UrlScheme)
        );
        assert_eq!(validate_url("https://"), Err(LinkError::UrlNoHost));
        assert_eq!(validate_url("https://:80/"), Err(LinkError::UrlNoHost));
        assert_eq!(validate_url("https://a b"), Err(LinkError::UrlControl));
        assert_eq!(
            validate_url("https://a\r\nSet-Cookie: x"),
            Err(LinkError::UrlControl)
        );
        let long = format!("https://e.com/{}", "a".repeat(MAX_URL_BYTES));
        assert_eq!(validate_url(&long), Err(LinkError::UrlTooLong));
    }

    /// The cases of issue #12 item 10, and the RFC 3986 characters WHATWG would quietly fix.
    #[test]
    fn urls_are_valid_uris_with_real_hosts() {
        for ok in [
            "https://bücher.de/straße?q=ü#teil",
            "https://xn--bcher-kva.de/",
            "http://[2001:db8::1]:8080/a",
            "http://127.0.0.1:65535/",
            "https://user:pw@e.com/%7Ex",
            "https://e.com/a?b=c&d=%20#frag",
            "HTTPS://E.COM",
        ] {
            assert_eq!(validate_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("http://[/", "syntax"),
            ("http://[zzz]/", "syntax"),
            ("http://host:99999999/", "invalid"),
            ("http://host:65536/", "invalid"),
            ("https://e.com/a\u{200b}b", "invisible"),
            ("https://e.com/\u{202e}fdp.exe", "invisible"),
            ("https://\u{feff}e.com/", "invisible"),
            ("https://e.com/\u{2066}x", "invisible"),
            ("https://e.com/a\\b", "syntax"),
            ("https://evil.com\\@good.com/", "syntax"),
            ("https://e.com/<script>", "syntax"),
            ("https://e.com/{x}", "syntax"),
            ("https://e.com/a|b", "syntax"),
            ("https://e.com/%zz", "syntax"),
            ("https://e.com/%4", "syntax"),
            ("https://e.com/a#b#c", "syntax"),
            ("https://e.com/[x]", "syntax"),
            ("https://a@b@e.com/", "syntax"),
            ("https://exa%mple.com/", "syntax"),
            ("https://xn--/", "invalid"),
        ] {
            let got = validate_url(bad);
            let kind = match got {
                Err(LinkError::UrlSyntax { .. }) => "syntax",
                Err(LinkError::UrlInvalid(_)) => "invalid",
                Err(LinkError::UrlInvisible(_)) => "invisible",
                other => panic!("{bad:?}: {other:?}"),
            };
            assert_eq!(kind, why, "{bad:?}: {got:?}");
        }
        let e = validate_url("https://e.com/{x}").unwrap_err().to_string();
        assert!(e.contains("'{'") && e.contains("byte 14"), "{e}");
        // Limits count what is sent: 'é' is 2 bytes stored, 6 sent.
        assert_eq!(location_len("https://e.com/é"), 14 + 6);
        let near = format!("https://e.com/{}", "é".repeat(MAX_URL_BYTES / 6));
        assert!(near.len() <= MAX_URL_BYTES);
        assert_eq!(validate_url(&near), Err(LinkError::UrlTooLong));
    }

    #[test]
    fn statuses() {
        for c in [301, 302, 307, 308] {
            assert_eq!(RedirectStatus::from_code(c).unwrap().code(), c);
        }
        assert!(RedirectStatus::from_code(303).is_none());
        assert!(RedirectStatus::from_code(308).unwrap().is_permanent());
        assert!(!RedirectStatus::Found.is_permanent());
    }
}
