//! A redirect's `Location` reshaped by the visit (issue 27): the request's extra path
//! appended to the target's path (`--extra-path append`), and the visitor's query forwarded
//! into the target's (`--forward-query`). Pure and allocation-free: it writes into the
//! caller's buffer.
//!
//! ```text
//! target   https://dest.example/p/?a=1&b=2#top
//! request  /{key}/x/y?b=9&c=3
//! Location https://dest.example/p/x/y?a=1&b=9&c=3#top
//!          └ base ─────────────┘└extra┘└ query ───┘└frag┘
//! ```
//!
//! - The extra path goes at the end of the target's path, one trailing `/` of which is
//!   dropped first (`/p/` + `/x` is `/p/x`, never `/p//x`), before its query and fragment.
//! - A forwarded query is appended to the target's; a parameter the visitor names (by its raw
//!   name, up to `=`) replaces the target's of that name, as Shlink does: the target's others
//!   keep their order, the visitor's follow in theirs. The fragment stays last.
//! - Request bytes are printable ASCII (the parser's rule); any that a URI may not hold in a
//!   path or query (`"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`, and a `%` not starting an
//!   escape) are percent-encoded, so the `Location` is always a valid URI reference.

/// What of a request reshapes its redirect's target: nothing for almost every redirect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reshape<'a> {
    /// Path after the key to append, from its `/` (empty: none).
    pub extra: &'a [u8],
    /// The visitor's query to forward, without its `?` (empty: none).
    pub query: &'a [u8],
}

impl Reshape<'_> {
    /// No reshaping: the target is the `Location` as it is.
    pub const NONE: Reshape<'static> = Reshape {
        extra: b"",
        query: b"",
    };

    /// Whether the target goes out unchanged.
    #[inline]
    pub fn is_none(&self) -> bool {
        self.extra.is_empty() && self.query.is_empty()
    }
}

/// Appends `target` reshaped by `r` (see the module doc); non-ASCII target bytes are
/// percent-encoded as `encode::put_location` does.
pub fn put_reshaped(out: &mut Vec<u8>, target: &[u8], r: Reshape<'_>) {
    let frag_at = memchr::memchr(b'#', target).unwrap_or(target.len());
    let (before_frag, frag) = target.split_at(frag_at);
    let query_at = memchr::memchr(b'?', before_frag).unwrap_or(before_frag.len());
    let (base, query_part) = before_frag.split_at(query_at);
    if r.extra.is_empty() {
        put_location(out, base);
    } else {
        // `https://h` has no path: the extra path is its path. Else drop one trailing `/`.
        let authority_only = base
            .iter()
            .position(|&b| b == b':')
            .and_then(|c| base.get(c + 3..))
            .is_some_and(|rest| !rest.contains(&b'/'));
        let base = match authority_only {
            true => base,
            false => base.strip_suffix(b"/").unwrap_or(base),
        };
        put_location(out, base);
        put_escaped(out, r.extra, is_path_byte);
    }
    match r.query.is_empty() {
        // The target's query (with its `?`) as it is.
        true => put_location(out, query_part),
        false => put_merged_query(out, query_part.get(1..).unwrap_or(b""), r.query),
    }
    put_location(out, frag);
}

/// Appends a stored target as a URI: byte-exact when ASCII (nearly every link; a validated
/// ASCII target is a URI already, `shards::link::validate_url`), else with every non-ASCII
/// byte percent-encoded, the IRI-to-URI mapping of RFC 3987 section 3.1 (`bücher.de/ü` ->
/// `b%C3%BCcher.de/%C3%BC`; browsers and curl turn such a host into its IDNA form). Writes into
/// `out` directly: no allocation beyond `out`'s growth.
#[inline]
pub fn put_location(out: &mut Vec<u8>, target: &[u8]) {
    if shards::link::every_target_byte(target, |b| b.is_ascii()) {
        out.extend_from_slice(target);
    } else {
        put_percent_encoded_non_ascii(out, target);
    }
}

#[cold]
fn put_percent_encoded_non_ascii(out: &mut Vec<u8>, target: &[u8]) {
    // ASCII bytes (`%` among them) pass as they are: only the non-ASCII ones are escaped.
    put_escaped(out, target, |b| b.is_ascii());
}

/// `?` and the target's parameters the visitor does not name, then the visitor's.
fn put_merged_query(out: &mut Vec<u8>, target_query: &[u8], visitor: &[u8]) {
    let mut sep = b'?';
    for param in target_query.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        if names_in(visitor).any(|n| n == name_of(param)) {
            continue;
        }
        out.push(sep);
        sep = b'&';
        put_location(out, param);
    }
    for param in visitor.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        out.push(sep);
        sep = b'&';
        put_escaped(out, param, is_query_byte);
    }
}

/// A parameter's name: up to its `=`.
fn name_of(param: &[u8]) -> &[u8] {
    let end = memchr::memchr(b'=', param).unwrap_or(param.len());
    &param[..end]
}

fn names_in(query: &[u8]) -> impl Iterator<Item = &[u8]> {
    query
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(name_of)
}

/// RFC 3986 `pchar` and `/`: what a path may hold as it is.
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b)
}

/// What a query may hold as it is: `pchar`, `/` and `?`.
fn is_query_byte(b: u8) -> bool {
    is_path_byte(b) || b == b'?'
}

/// Appends `bytes`, percent-encoding any byte `ok` refuses, and a `%` that does not start a
/// `%XX` escape; escapes pass as they are.
fn put_escaped(out: &mut Vec<u8>, bytes: &[u8], ok: fn(u8) -> bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for (i, &b) in bytes.iter().enumerate() {
        let escape = b == b'%'
            && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if ok(b) || escape {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(target: &str, extra: &str, query: &str) -> String {
        let mut out = Vec::new();
        let r = Reshape {
            extra: extra.as_bytes(),
            query: query.as_bytes(),
        };
        put_reshaped(&mut out, target.as_bytes(), r);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn extra_paths_and_queries_land_where_they_belong() {
        let t = "https://dest.example/p/?a=1&b=2#top";
        assert_eq!(
            shaped(t, "/x/y", "b=9&c=3"),
            "https://dest.example/p/x/y?a=1&b=9&c=3#top"
        );
        assert_eq!(shaped(t, "", ""), t);
        assert_eq!(shaped(t, "", "c"), "https://dest.example/p/?a=1&b=2&c#top");
        assert_eq!(shaped("https://h.example", "/x", ""), "https://h.example/x");
        assert_eq!(
            shaped("https://h.example/", "/x", ""),
            "https://h.example/x"
        );
        assert_eq!(
            shaped("https://h.example/p", "/", ""),
            "https://h.example/p/"
        );
        assert_eq!(
            shaped("https://h.example/p", "", "q=1"),
            "https://h.example/p?q=1"
        );
        assert_eq!(
            shaped("https://h.example/p?", "", "q=1"),
            "https://h.example/p?q=1"
        );
        assert_eq!(
            shaped("https://h.example/p?a&a=2", "", "a=3"),
            "https://h.example/p?a=3"
        );
        assert_eq!(
            shaped("https://h.example/p?x=1", "", "&&y=2&"),
            "https://h.example/p?x=1&y=2"
        );
        assert_eq!(
            shaped("https://bücher.example/ü", "/ä", "q=ö"),
            "https://b%C3%BCcher.example/%C3%BC/%C3%A4?q=%C3%B6"
        );
    }

    #[test]
    fn bytes_a_uri_may_not_hold_are_escaped_and_escapes_kept() {
        assert_eq!(
            shaped("https://h.example/p", "/a\"b<c>|%zz%2F", "q={x}&r=%41^"),
            "https://h.example/p/a%22b%3Cc%3E%7C%25zz%2F?q=%7Bx%7D&r=%41%5E"
        );
    }

    proptest::proptest! {
        /// Whatever printable request bytes come, the `Location` parses as a URL with the
        /// target's host, and every visitor parameter is in its query.
        #[test]
        fn the_location_is_always_a_valid_url(
            path in "[a-z/]{0,6}",
            tquery in "([a-z]{1,3}=[a-z0-9]{0,3}&?){0,4}",
            extra in "(/[!-~]{0,8}){0,3}",
            visitor in "([a-z]{1,3}=[!-~&&[^&#]]{0,4}&?){0,4}",
        ) {
            let target = format!("https://dest.example/{path}?{tquery}#f");
            let got = shaped(&target, &extra, &visitor);
            proptest::prop_assert!(got.bytes().all(|b| b.is_ascii_graphic()), "{}", got);
            let url = url::Url::parse(&got).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{got}: {e}")))?;
            proptest::prop_assert_eq!(url.host_str(), Some("dest.example"));
            proptest::prop_assert_eq!(url.fragment(), Some("f"));
            // Our own bytes (the parser re-encodes some, e.g. `'` in a query).
            let query = got.split_once('?').map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
            for p in visitor.split('&').filter(|p| !p.is_empty()) {
                let mut esc = Vec::new();
                put_escaped(&mut esc, p.as_bytes(), is_query_byte);
                let esc = String::from_utf8(esc).unwrap();
                proptest::prop_assert!(query.split('&').any(|q| q == esc), "{} not in {}", esc, got);
            }
        }
    }
}
