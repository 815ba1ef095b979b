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
        encode_not_found(&mut out, false, conn, &date());
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
        Status::Created,
        &[("X-Request-Id", b"r1"), ("Location", b"/api/links/k")],
        Some("application/json"),
        b"{\"key\":\"k\"}",
        false,
        Conn::KeepAlive,
        &date(),
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
    encode_not_found(&mut get, false, Conn::KeepAlive, &date());
    let mut head = Vec::new();
    encode_not_found(&mut head, true, Conn::KeepAlive, &date());
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
    encode_method_not_allowed(&mut out, "GET, HEAD", false, Conn::Close, &date());
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
