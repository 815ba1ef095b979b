//! Response encoding into a caller-owned, reused `Vec<u8>`.
//!
//! Every function appends; none allocates beyond growing `out` when its spare capacity is too
//! small, so a connection that keeps its write buffer allocates nothing once warm. Numbers are
//! formatted with `itoa` on the stack.

use shards::link::RedirectStatus;

use super::date::DateCache;
use super::limits::PERMANENT_REDIRECT_MAX_AGE_S;
use super::location::put_location;
use super::parse::{ParseError, Request};
use super::status::Status;

/// What a response says about the connection, derived from the request.
///
/// HTTP/1.1 persists by default, so a keep-alive HTTP/1.1 response sends no `Connection` field;
/// an HTTP/1.0 client needs `Connection: keep-alive` to know the connection persists; any
/// closing response sends `Connection: close`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conn {
    /// Persist; no `Connection` field (HTTP/1.1).
    KeepAlive,
    /// Persist and say so: `Connection: keep-alive` (HTTP/1.0 keep-alive).
    KeepAliveExplicit,
    /// Close after this response: `Connection: close`.
    Close,
}

impl Conn {
    /// From a request's `keep_alive` and `minor_version`.
    pub fn new(keep_alive: bool, minor_version: u8) -> Conn {
        match (keep_alive, minor_version) {
            (false, _) => Conn::Close,
            (true, 0) => Conn::KeepAliveExplicit,
            (true, _) => Conn::KeepAlive,
        }
    }

    /// For answering `req`.
    pub fn for_request(req: &Request<'_>) -> Conn {
        Conn::new(req.keep_alive, req.minor_version)
    }

    /// Whether the connection stays open after the response.
    pub fn keep_alive(self) -> bool {
        !matches!(self, Conn::Close)
    }
}

/// `Cache-Control` for temporary redirects: the link may be changed or revoked at any time, so
/// neither browsers nor shared caches may store the answer.
const CACHE_CONTROL_TEMPORARY: &[u8] = b"private, no-store";

/// Appends a redirect with an empty body. The same bytes answer GET and HEAD (the body is empty
/// either way). `location` must be a stored link target (no CR/LF); it is sent as a URI
/// ([`put_location`]).
pub fn encode_redirect(
    out: &mut Vec<u8>,
    status: RedirectStatus,
    location: &[u8],
    conn: Conn,
    date: &DateCache,
) {
    debug_assert!(
        memchr::memchr2(b'\r', b'\n', location).is_none(),
        "Location must not contain CR/LF"
    );
    out.extend_from_slice(Status::from(status).status_line());
    out.extend_from_slice(b"Location: ");
    put_location(out, location);
    redirect_tail(out, status, conn, date);
}

/// [`encode_redirect`] of `target` reshaped by the visit (`location::put_reshaped`: an extra
/// path, a forwarded query). Returns where the `Location` value is in `out`, for the
/// blocklist's look at where the visitor is really sent.
pub fn encode_redirect_reshaped(
    out: &mut Vec<u8>,
    status: RedirectStatus,
    target: &[u8],
    reshape: super::location::Reshape<'_>,
    conn: Conn,
    date: &DateCache,
) -> std::ops::Range<usize> {
    out.extend_from_slice(Status::from(status).status_line());
    out.extend_from_slice(b"Location: ");
    let start = out.len();
    super::location::put_reshaped(out, target, reshape);
    let location = start..out.len();
    redirect_tail(out, status, conn, date);
    location
}

/// A redirect's fields after `Location`, and the end of its head.
fn redirect_tail(out: &mut Vec<u8>, status: RedirectStatus, conn: Conn, date: &DateCache) {
    out.extend_from_slice(b"\r\nContent-Length: 0\r\nCache-Control: ");
    if status.is_permanent() {
        out.extend_from_slice(b"public, max-age=");
        out.extend_from_slice(
            itoa::Buffer::new()
                .format(PERMANENT_REDIRECT_MAX_AGE_S)
                .as_bytes(),
        );
    } else {
        out.extend_from_slice(CACHE_CONTROL_TEMPORARY);
    }
    out.extend_from_slice(b"\r\n");
    common_tail(out, conn, date);
    out.extend_from_slice(b"\r\n");
}

/// A response with a body (redirects have their own encoder): its status, extra header
/// fields, content type and body. Built where the answer is decided, encoded by
/// [`encode_response`].
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    pub status: Status,
    /// Extra fields, each `(name, value)`; values never hold CR or LF.
    pub headers: &'a [(&'a str, &'a [u8])],
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

/// How an answer goes out on its connection, whatever it says: without a body for a HEAD
/// request, with the `Connection` field its request calls for, and today's `Date`.
#[derive(Clone, Copy, Debug)]
pub struct Framing<'d> {
    pub head_only: bool,
    pub conn: Conn,
    pub date: &'d DateCache,
    /// An API answer's `Access-Control-Allow-Origin` (`api::cors`): `None` for every other
    /// answer and for an origin not allowed.
    pub cors: Option<&'static str>,
}

impl<'d> Framing<'d> {
    /// An answer that is not the APIs' (no CORS field).
    #[inline]
    pub fn plain(head_only: bool, conn: Conn, date: &'d DateCache) -> Framing<'d> {
        Framing {
            head_only,
            conn,
            date,
            cors: None,
        }
    }
}

/// Answer fields a cross-origin page's script may read besides the CORS-safelisted ones
/// (`api::cors`).
pub const CORS_EXPOSE_HEADERS: &[u8] = b"Location, Retry-After";

/// An API answer's CORS fields (`api::cors`): the origin allowed (echoed ones vary by the
/// request's `Origin`) and the answer fields its script may read.
fn put_cors(out: &mut Vec<u8>, origin: &str) {
    out.extend_from_slice(b"Access-Control-Allow-Origin: ");
    out.extend_from_slice(origin.as_bytes());
    out.extend_from_slice(b"\r\nAccess-Control-Expose-Headers: ");
    out.extend_from_slice(CORS_EXPOSE_HEADERS);
    out.extend_from_slice(b"\r\n");
    if origin != "*" {
        out.extend_from_slice(b"Vary: Origin\r\n");
    }
}

/// Appends `r`: status line, its header fields, `Content-Type`, `Content-Length` (none in a
/// 204), `Date`, `Server` and `Connection` as `f.conn` requires, then the body unless `f.head_only` (a
/// HEAD request gets the same head, including the `Content-Length` the GET would have had,
/// and no body).
pub fn encode_response(out: &mut Vec<u8>, r: &Response<'_>, f: Framing<'_>) {
    let Response {
        status,
        headers,
        content_type,
        body,
    } = *r;
    out.extend_from_slice(status.status_line());
    for (name, value) in headers {
        debug_assert!(
            memchr::memchr2(b'\r', b'\n', value).is_none(),
            "header value must not contain CR/LF"
        );
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(origin) = f.cors {
        put_cors(out, origin);
    }
    if let Some(ct) = content_type {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(ct.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // RFC 9110 section 8.6: no Content-Length in a 204 (it has no content by definition).
    if status != Status::NoContent {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    debug_assert!(status != Status::NoContent || body.is_empty());
    common_tail(out, f.conn, f.date);
    out.extend_from_slice(b"\r\n");
    if !f.head_only {
        out.extend_from_slice(body);
    }
}

/// Content type of the plain-text bodies below.
const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// Appends `404 Not Found` with a short text body.
/// The answer to a link whose target the abuse blocklist names (`api::blocklist`): 451 with a
/// short page saying why, and no `Location`.
pub fn encode_blocked(out: &mut Vec<u8>, f: Framing<'_>) {
    let r = Response {
        status: Status::UnavailableForLegalReasons,
        headers: &[],
        content_type: Some("text/html; charset=utf-8"),
        body: BLOCKED_PAGE,
    };
    encode_response(out, &r, f);
}

/// The page of [`encode_blocked`].
pub const BLOCKED_PAGE: &[u8] =
    b"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>Link blocked</title></head><body><h1>Link blocked</h1>\
<p>This short link points to an address on this service's blocklist (phishing, malware \
or other abuse), so it does not redirect.</p></body></html>\n";

/// Appends the answer to a visit of a link an admin disabled (`shards::behaviour`): 410 Gone
/// (abuse, owner) or 451 (legal), with a short page saying so.
pub fn encode_disabled(
    out: &mut Vec<u8>,
    reason: shards::behaviour::DisabledReason,
    f: Framing<'_>,
) {
    let (status, body) = match reason {
        shards::behaviour::DisabledReason::Legal => {
            (Status::UnavailableForLegalReasons, LEGAL_PAGE)
        }
        _ => (Status::Gone, DISABLED_PAGE),
    };
    let r = Response {
        status,
        headers: &[],
        content_type: Some("text/html; charset=utf-8"),
        body,
    };
    encode_response(out, &r, f);
}

/// The page of a link disabled for abuse or by its owner ([`encode_disabled`]).
pub const DISABLED_PAGE: &[u8] =
    b"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>Link disabled</title></head><body><h1>Link disabled</h1>\
<p>This short link has been disabled and no longer redirects.</p></body></html>\n";

/// The page of a link disabled on a legal demand ([`encode_disabled`]).
pub const LEGAL_PAGE: &[u8] = b"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>Link unavailable for legal reasons</title></head><body>\
<h1>Link unavailable for legal reasons</h1>\
<p>This short link has been disabled on a legal demand and does not redirect.</p>\
</body></html>\n";

pub fn encode_not_found(out: &mut Vec<u8>, f: Framing<'_>) {
    let r = Response {
        status: Status::NotFound,
        headers: &[],
        content_type: Some(TEXT_PLAIN),
        body: b"Not Found\n",
    };
    encode_response(out, &r, f);
}

/// Appends `405 Method Not Allowed` with `Allow: {allow}` (e.g. `"GET, HEAD"`) and a short text
/// body.
pub fn encode_method_not_allowed(out: &mut Vec<u8>, allow: &str, f: Framing<'_>) {
    let r = Response {
        status: Status::MethodNotAllowed,
        headers: &[("Allow", allow.as_bytes())],
        content_type: Some(TEXT_PLAIN),
        body: b"Method Not Allowed\n",
    };
    encode_response(out, &r, f);
}

/// Appends the response to a request that failed to parse: `err.status()`, the reason as a
/// text body (omitted when the request line says `HEAD`: `head_only`), and
/// `Connection: close` when `err.must_close()` (always, today).
pub fn encode_error(out: &mut Vec<u8>, err: ParseError, head_only: bool, date: &DateCache) {
    let conn = if err.must_close() {
        Conn::Close
    } else {
        Conn::KeepAlive
    };
    out.extend_from_slice(err.status().status_line());
    out.extend_from_slice(b"Content-Type: ");
    out.extend_from_slice(TEXT_PLAIN.as_bytes());
    out.extend_from_slice(b"\r\nContent-Length: ");
    // reason + '\n'
    out.extend_from_slice(
        itoa::Buffer::new()
            .format(err.reason().len() + 1)
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    common_tail(out, conn, date);
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(err.reason().as_bytes());
        out.push(b'\n');
    }
}

/// `Date`, `Server` and `Connection` lines, shared by every response.
fn common_tail(out: &mut Vec<u8>, conn: Conn, date: &DateCache) {
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(date.get());
    out.extend_from_slice(b"\r\nServer: ricochet\r\n");
    match conn {
        Conn::KeepAlive => {}
        Conn::KeepAliveExplicit => out.extend_from_slice(b"Connection: keep-alive\r\n"),
        Conn::Close => out.extend_from_slice(b"Connection: close\r\n"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::http::parse::BadRequest;

    fn date() -> DateCache {
        DateCache::new(UNIX_EPOCH + Duration::from_secs(784_111_777))
    }

    /// Parses `out` with httparse as a client would: (status code, headers, body).
    fn parse_response(out: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut h = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Response::new(&mut h);
        let n = match r.parse(out).expect("valid response") {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("incomplete response"),
        };
        assert_eq!(r.version, Some(1));
        let headers = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8(h.value.to_vec()).unwrap(),
                )
            })
            .collect();
        (r.code.unwrap(), headers, out[n..].to_vec())
    }

    fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
        let mut found = hs.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = found.next().map(|(_, v)| v.as_str());
        assert!(found.next().is_none(), "duplicate {name}");
        first
    }

    #[test]
    fn redirect_302_exact_bytes() {
        let mut out = Vec::new();
        encode_redirect(
            &mut out,
            RedirectStatus::Found,
            b"https://example.com/x?y=1",
            Conn::KeepAlive,
            &date(),
        );
        assert_eq!(
        out,
        b"HTTP/1.1 302 Found\r\nLocation: https://example.com/x?y=1\r\nContent-Length: 0\r\nCache-Control: private, no-store\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: ricochet\r\n\r\n"
    );
    }

    #[test]
    fn redirect_cache_control_by_status() {
        for (status, cc) in [
            (RedirectStatus::MovedPermanently, "public, max-age=86400"),
            (RedirectStatus::PermanentRedirect, "public, max-age=86400"),
            (RedirectStatus::Found, "private, no-store"),
            (RedirectStatus::TemporaryRedirect, "private, no-store"),
        ] {
            let mut out = Vec::new();
            encode_redirect(
                &mut out,
                status,
                b"https://e.com/",
                Conn::KeepAlive,
                &date(),
            );
            let (code, hs, body) = parse_response(&out);
            assert_eq!(code, status.code());
            assert_eq!(header(&hs, "Cache-Control"), Some(cc));
            assert_eq!(header(&hs, "Location"), Some("https://e.com/"));
            assert_eq!(header(&hs, "Content-Length"), Some("0"));
            assert_eq!(header(&hs, "Connection"), None);
            assert!(body.is_empty());
        }
        assert_eq!(PERMANENT_REDIRECT_MAX_AGE_S, 86_400);
    }

    #[test]
    fn connection_header_follows_conn() {
        for (conn, want) in [
            (Conn::KeepAlive, None),
            (Conn::KeepAliveExplicit, Some("keep-alive")),
            (Conn::Close, Some("close")),
        ] {
            let mut out = Vec::new();
            encode_redirect(&mut out, RedirectStatus::Found, b"/x", conn, &date());
            assert_eq!(header(&parse_response(&out).1, "Connection"), want);
            out.clear();
            encode_not_found(
                &mut out,
                Framing {
                    head_only: false,
                    conn,
                    date: &date(),
                    cors: None,
                },
            );
            assert_eq!(header(&parse_response(&out).1, "Connection"), want);
        }
        assert_eq!(Conn::new(true, 1), Conn::KeepAlive);
        assert_eq!(Conn::new(true, 0), Conn::KeepAliveExplicit);
        assert_eq!(Conn::new(false, 1), Conn::Close);
        assert_eq!(Conn::new(false, 0), Conn::Close);
        assert!(!Conn::Close.keep_alive() && Conn::KeepAliveExplicit.keep_alive());
        let req = crate::http::parse_request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(Conn::for_request(&req), Conn::KeepAliveExplicit);
    }

    #[test]
    fn response_with_headers_and_body() {
        let mut out = Vec::new();
        encode_response(
            &mut out,
            &Response {
                status: Status::Created,
                headers: &[("X-Request-Id", b"r1"), ("Location", b"/api/links/k")],
                content_type: Some("application/json"),
                body: b"{\"key\":\"k\"}",
            },
            Framing {
                head_only: false,
                conn: Conn::KeepAlive,
                date: &date(),
                cors: None,
            },
        );
        let (code, hs, body) = parse_response(&out);
        assert_eq!(code, 201);
        assert_eq!(header(&hs, "X-Request-Id"), Some("r1"));
        assert_eq!(header(&hs, "Location"), Some("/api/links/k"));
        assert_eq!(header(&hs, "Content-Type"), Some("application/json"));
        assert_eq!(header(&hs, "Content-Length"), Some("11"));
        assert_eq!(header(&hs, "Date"), Some("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert_eq!(header(&hs, "Server"), Some("ricochet"));
        assert_eq!(body, b"{\"key\":\"k\"}");
    }

    #[test]
    fn head_only_keeps_length_and_drops_body() {
        let mut get = Vec::new();
        encode_not_found(
            &mut get,
            Framing {
                head_only: false,
                conn: Conn::KeepAlive,
                date: &date(),
                cors: None,
            },
        );
        let mut head = Vec::new();
        encode_not_found(
            &mut head,
            Framing {
                head_only: true,
                conn: Conn::KeepAlive,
                date: &date(),
                cors: None,
            },
        );
        let (code, hs, body) = parse_response(&head);
        assert_eq!(code, 404);
        assert!(body.is_empty());
        let (_, get_hs, get_body) = parse_response(&get);
        assert_eq!(hs, get_hs);
        assert_eq!(
            header(&hs, "Content-Length"),
            Some(get_body.len().to_string().as_str())
        );
        assert!(get.starts_with(&head));
    }

    #[test]
    fn method_not_allowed_has_allow() {
        let mut out = Vec::new();
        encode_method_not_allowed(
            &mut out,
            "GET, HEAD",
            Framing {
                head_only: false,
                conn: Conn::Close,
                date: &date(),
                cors: None,
            },
        );
        let (code, hs, body) = parse_response(&out);
        assert_eq!(code, 405);
        assert_eq!(header(&hs, "Allow"), Some("GET, HEAD"));
        assert_eq!(header(&hs, "Connection"), Some("close"));
        assert_eq!(body, b"Method Not Allowed\n");
    }

    #[test]
    fn error_responses_close_and_explain() {
        for e in [
            ParseError::BadRequest(BadRequest::BareLf),
            ParseError::UriTooLong,
            ParseError::TooManyHeaders,
            ParseError::PayloadTooLarge,
            ParseError::TransferEncodingNotImplemented,
            ParseError::VersionNotSupported,
        ] {
            let mut out = Vec::new();
            encode_error(&mut out, e, false, &date());
            let (code, hs, body) = parse_response(&out);
            assert_eq!(code, e.status().code());
            assert_eq!(header(&hs, "Connection"), Some("close"));
            assert_eq!(
                header(&hs, "Content-Length"),
                Some(body.len().to_string().as_str())
            );
            assert_eq!(body, format!("{}\n", e.reason()).as_bytes());
        }
    }

    #[test]
    fn encoding_appends() {
        let mut out = b"prefix".to_vec();
        encode_redirect(
            &mut out,
            RedirectStatus::Found,
            b"/a",
            Conn::KeepAlive,
            &date(),
        );
        let first = out.len();
        encode_redirect(
            &mut out,
            RedirectStatus::Found,
            b"/b",
            Conn::KeepAlive,
            &date(),
        );
        assert!(out.starts_with(b"prefixHTTP/1.1 302"));
        assert_eq!(parse_response(&out[first..]).0, 302);
        assert_eq!(out.len() - first, first - 6);
    }

    #[test]
    fn error_responses_to_head_have_no_body() {
        for e in [ParseError::UriTooLong, ParseError::TooManyHeaders] {
            let mut out = Vec::new();
            encode_error(&mut out, e, true, &date());
            let text = String::from_utf8(out).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(
                body.is_empty(),
                "HEAD error answer carried a body: {body:?}"
            );
            // Content-Length still says what a GET would have got (RFC 9110 section 9.3.2).
            assert!(head.contains(&format!("Content-Length: {}", e.reason().len() + 1)));
        }
    }

    proptest::proptest! {
        /// `put_location` is the RFC 3987 IRI-to-URI mapping: it agrees with `fluent-uri`'s
        /// `Iri::to_uri` on every valid IRI, and what it writes is a strict RFC 3986 URI.
        #[test]
        fn location_is_the_iri_to_uri_mapping(
            path in proptest::collection::vec(
                proptest::sample::select(vec!["a", "/", "?", "#", "%41", "é", "日", "ü", "-", "=", "&", "😀"]),
                0..24,
            )
        ) {
            let iri = format!("https://bücher.example/{}", path.concat());
            if let Ok(parsed) = fluent_uri::Iri::parse(iri.as_str()) {
                let mut out = Vec::new();
                put_location(&mut out, iri.as_bytes());
                let got = std::str::from_utf8(&out).unwrap();
                let want = parsed.to_uri();
                proptest::prop_assert_eq!(got, want.as_str());
                proptest::prop_assert!(fluent_uri::Uri::parse(got).is_ok(), "{}", got);
            }
        }
    }

    #[test]
    fn ascii_location_is_byte_exact() {
        let long = format!("https://e.com/{}", "a".repeat(500));
        for t in ["https://E.com/a%20b?x#y", "http://h/", &long] {
            let mut out = Vec::new();
            put_location(&mut out, t.as_bytes());
            assert_eq!(out, t.as_bytes());
        }
    }
}
