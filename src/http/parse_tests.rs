use super::*;

const WRK_GET: &[u8] = b"GET /abc123 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";

fn ok(buf: &[u8]) -> Request<'_> {
    match parse_request(buf) {
        Ok(Some(r)) => r,
        other => panic!("{:?} => {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn err(buf: &[u8]) -> ParseError {
    match parse_request(buf) {
        Err(e) => e,
        other => panic!("{:?} => {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn bad(buf: &[u8], why: BadRequest) {
    let e = err(buf);
    assert_eq!(
        e,
        ParseError::BadRequest(why),
        "{:?}",
        String::from_utf8_lossy(buf)
    );
    assert_eq!(e.status(), Status::BadRequest);
    assert!(e.must_close());
}

#[test]
fn parses_typical_get() {
    let r = ok(WRK_GET);
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.path, b"/abc123");
    assert_eq!(r.query, None);
    assert_eq!(r.minor_version, 1);
    assert!(r.keep_alive);
    assert_eq!(r.head_len, WRK_GET.len());
    assert_eq!(r.content_length, 0);
    assert_eq!(r.authorization, None);
    assert_eq!(r.idempotency_key, None);
    assert_eq!(r.content_type, None);
}

#[test]
fn every_proper_prefix_is_incomplete() {
    let full: &[u8] = b"POST /api/links?x=1 HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nAuthorization: Bearer t\r\nIdempotency-Key: k1\r\nContent-Length: 2\r\n\r\n{}";
    let head_len = full.len() - 2;
    for n in 0..head_len {
        assert_eq!(parse_request(&full[..n]), Ok(None), "prefix {n}");
    }
    let r = ok(full);
    assert_eq!(r.head_len, head_len);
    assert_eq!(r.method, Method::Post);
    assert_eq!(r.path, b"/api/links");
    assert_eq!(r.query, Some(&b"x=1"[..]));
    assert_eq!(r.content_length, 2);
    assert_eq!(r.content_type, Some(&b"application/json"[..]));
    assert_eq!(r.authorization, Some(&b"Bearer t"[..]));
    assert_eq!(r.idempotency_key, Some(&b"k1"[..]));
    assert_eq!(&full[r.head_len..r.head_len + r.content_length], b"{}");
}

#[test]
fn pipelined_requests_parse_one_at_a_time() {
    let mut buf = Vec::new();
    for i in 0..16 {
        buf.extend_from_slice(format!("GET /k{i} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes());
    }
    buf.extend_from_slice(b"HEAD /last HTTP/1.1\r\nHo"); // partial tail
    let mut at = 0;
    for i in 0..16 {
        let r = ok(&buf[at..]);
        assert_eq!(r.path, format!("/k{i}").as_bytes());
        at += r.head_len + r.content_length;
    }
    assert_eq!(parse_request(&buf[at..]), Ok(None));
    buf.extend_from_slice(b"st: h\r\n\r\n");
    let r = ok(&buf[at..]);
    assert_eq!(r.method, Method::Head);
    assert_eq!(at + r.head_len, buf.len());
}

#[test]
fn pipelined_request_after_body() {
    let buf = b"PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyzGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
    let r = ok(buf);
    let next = r.head_len + r.content_length;
    assert_eq!(r.method, Method::Put);
    assert_eq!(ok(&buf[next..]).path, b"/b");
}

#[test]
fn methods() {
    for (m, want) in [
        ("GET", Method::Get),
        ("HEAD", Method::Head),
        ("POST", Method::Post),
        ("PUT", Method::Put),
        ("PATCH", Method::Patch),
        ("DELETE", Method::Delete),
        ("OPTIONS", Method::Options),
        ("TRACE", Method::Trace),
        ("CONNECT", Method::Connect),
        ("QUERY", Method::Query),
        ("BREW", Method::Other),
        ("get", Method::Other),
    ] {
        let req = format!("{m} / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(ok(req.as_bytes()).method, want, "{m}");
    }
}

#[test]
fn query_split_on_first_question_mark() {
    let r = ok(b"GET /a?b?c HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(r.path, b"/a");
    assert_eq!(r.query, Some(&b"b?c"[..]));
    let r = ok(b"GET /a? HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(r.query, Some(&b""[..]));
}

#[test]
fn keep_alive_rules() {
    let cases: &[(&[u8], bool)] = &[
        (b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: CLOSE\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n",
            true,
        ),
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\n\r\n",
            true,
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: Upgrade ,\tKEEP-ALIVE\r\n\r\n",
            true,
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive-ish\r\n\r\n",
            false,
        ),
    ];
    for (buf, want) in cases {
        assert_eq!(
            ok(buf).keep_alive,
            *want,
            "{:?}",
            String::from_utf8_lossy(buf)
        );
    }
    assert_eq!(ok(b"GET / HTTP/1.0\r\n\r\n").minor_version, 0);
}

#[test]
fn leading_empty_lines_are_skipped_and_counted() {
    let buf = b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
    assert_eq!(ok(buf).head_len, buf.len());
}

#[test]
fn request_line_limit_complete() {
    let mut at_limit = b"GET /".to_vec();
    at_limit.resize(MAX_REQUEST_LINE_BYTES - " HTTP/1.1".len(), b'a');
    at_limit.extend_from_slice(b" HTTP/1.1");
    assert_eq!(at_limit.len(), MAX_REQUEST_LINE_BYTES);
    let mut buf = at_limit.clone();
    buf.extend_from_slice(b"\r\nHost: h\r\n\r\n");
    assert_eq!(ok(&buf).path.len(), MAX_REQUEST_LINE_BYTES - 13);

    let mut over = b"GET /".to_vec();
    over.resize(MAX_REQUEST_LINE_BYTES + 1 - " HTTP/1.1".len(), b'a');
    over.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
    let e = err(&over);
    assert_eq!(e, ParseError::UriTooLong);
    assert_eq!(e.status(), Status::UriTooLong);
}

#[test]
fn request_line_limit_while_incomplete() {
    let mut line = b"GET /".to_vec();
    line.resize(MAX_REQUEST_LINE_BYTES - " HTTP/1.1".len(), b'a');
    line.extend_from_slice(b" HTTP/1.1");
    assert_eq!(parse_request(&line), Ok(None));
    line.push(b'\r'); // may be the start of the CRLF: still fine
    assert_eq!(parse_request(&line), Ok(None));

    let mut buf = b"GET /".to_vec();
    buf.resize(MAX_REQUEST_LINE_BYTES, b'a');
    assert_eq!(parse_request(&buf), Ok(None));
    buf.push(b'a'); // MAX + 1 bytes of line content, no newline yet
    assert_eq!(err(&buf), ParseError::UriTooLong);
    buf.extend_from_slice(&[b'a'; 10_000]);
    assert_eq!(err(&buf), ParseError::UriTooLong);
    // Leading empty lines do not hide a long request line.
    let mut led = b"\r\n\r\n".to_vec();
    led.extend_from_slice(&buf);
    assert_eq!(err(&led), ParseError::UriTooLong);
    let mut led = b"\r\n".to_vec();
    led.extend_from_slice(&line);
    assert_eq!(parse_request(&led), Ok(None));
}

#[test]
fn head_size_limit() {
    // Many medium headers: incomplete below the limit, 431 at it.
    let mut buf = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
    let line = format!("X-Pad: {}\r\n", "p".repeat(500));
    while buf.len() + line.len() < MAX_HEADER_BYTES {
        buf.extend_from_slice(line.as_bytes());
    }
    assert_eq!(parse_request(&buf), Ok(None));
    let mut over = buf.clone();
    over.resize(MAX_HEADER_BYTES, b'x');
    let e = err(&over);
    assert_eq!(e, ParseError::HeadersTooLarge);
    assert_eq!(e.status(), Status::RequestHeaderFieldsTooLarge);

    // A complete head of exactly MAX_HEADER_BYTES is accepted; one byte more is not.
    let mut exact = b"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ".to_vec();
    exact.resize(MAX_HEADER_BYTES - 4, b'p');
    exact.extend_from_slice(b"\r\n\r\n");
    assert_eq!(ok(&exact).head_len, MAX_HEADER_BYTES);
    let mut too_big = b"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ".to_vec();
    too_big.resize(MAX_HEADER_BYTES - 3, b'p');
    too_big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(err(&too_big), ParseError::HeadersTooLarge);
}

#[test]
fn header_count_limit() {
    let build = |n: usize, complete: bool| {
        let mut b = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 1..n {
            b.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        if complete {
            b.extend_from_slice(b"\r\n");
        }
        b
    };
    assert!(ok(&build(MAX_HEADERS, true)).keep_alive);
    let e = err(&build(MAX_HEADERS + 1, true));
    assert_eq!(e, ParseError::TooManyHeaders);
    assert_eq!(e.status(), Status::RequestHeaderFieldsTooLarge);
    // httparse reports it as soon as the extra field line is complete, before the head ends.
    assert_eq!(
        err(&build(MAX_HEADERS + 1, false)),
        ParseError::TooManyHeaders
    );
}

#[test]
fn malformed_syntax_is_400() {
    for buf in [
        &b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n"[..],
        b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\rHost: h\r\n\r\n",
        b"G\x01T / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /\xff HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
        b"GET / HTTP/1.1\r\n: empty-name\r\n\r\n",
        b"GET / HTTP/1.1\r\nNo-Colon\r\n\r\n",
    ] {
        bad(buf, BadRequest::Syntax);
    }
}

#[test]
fn bare_lf_is_rejected() {
    // httparse itself accepts these; we do not.
    for buf in [
        &b"GET / HTTP/1.1\nHost: h\n\n"[..],
        b"GET / HTTP/1.1\r\nHost: h\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\n\n",
        b"\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
    ] {
        let mut h = [httparse::EMPTY_HEADER; 4];
        assert!(httparse::Request::new(&mut h)
            .parse(buf)
            .unwrap()
            .is_complete());
        bad(buf, BadRequest::BareLf);
    }
}

#[test]
fn obs_fold_and_space_before_colon_are_rejected() {
    bad(
        b"GET / HTTP/1.1\r\nHost: h\r\nX-A: b\r\n  c\r\n\r\n",
        BadRequest::HeaderWhitespace,
    );
    bad(
        b"GET / HTTP/1.1\r\nHost: h\r\nX-A: b\r\n\tc\r\n\r\n",
        BadRequest::HeaderWhitespace,
    );
    bad(
        b"GET / HTTP/1.1\r\nHost : h\r\n\r\n",
        BadRequest::HeaderWhitespace,
    );
    bad(
        b"GET / HTTP/1.1\r\nContent-Length\t: 1\r\n\r\n",
        BadRequest::HeaderWhitespace,
    );
    bad(
        b"GET / HTTP/1.1\r\n Host: h\r\n\r\n",
        BadRequest::HeaderWhitespace,
    );
}

#[test]
fn content_length_rules() {
    let with = |cl: &str| format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {cl}\r\n\r\n");
    assert_eq!(ok(with("0").as_bytes()).content_length, 0);
    assert_eq!(ok(with("17").as_bytes()).content_length, 17);
    assert_eq!(ok(with("007").as_bytes()).content_length, 7);
    assert_eq!(ok(with(" 5 ").as_bytes()).content_length, 5); // OWS is not part of the value
    let max = MAX_BODY_BYTES.to_string();
    assert_eq!(ok(with(&max).as_bytes()).content_length, MAX_BODY_BYTES);
    for v in [
        "",
        "-1",
        "+1",
        "1a",
        "0x10",
        "1 2",
        "5, 5",
        "1.0",
        "99999999999999999999999999",
    ] {
        bad(with(v).as_bytes(), BadRequest::InvalidContentLength);
    }
    let e = err(with(&(MAX_BODY_BYTES + 1).to_string()).as_bytes());
    assert_eq!(e, ParseError::PayloadTooLarge);
    assert_eq!(e.status(), Status::PayloadTooLarge);
    assert!(e.must_close());
    // A huge but representable length is 413, not 400.
    assert_eq!(
        err(with(&u64::MAX.to_string()).as_bytes()),
        ParseError::PayloadTooLarge
    );
}

#[test]
fn duplicate_content_length_is_rejected_even_if_equal() {
    bad(
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n",
        BadRequest::DuplicateContentLength,
    );
    bad(
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        BadRequest::DuplicateContentLength,
    );
}

#[test]
fn transfer_encoding_rules() {
    bad(
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        BadRequest::ContentLengthWithTransferEncoding,
    );
    bad(
        b"POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        BadRequest::ContentLengthWithTransferEncoding,
    );
    // `chunked` alone, in any case, is taken; the body is framed by `http::chunked`.
    for te in ["chunked", "Chunked", "CHUNKED", " chunked "] {
        let req = format!("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: {te}\r\n\r\n");
        let r = ok(req.as_bytes());
        assert!(r.chunked && r.content_length == 0, "{te:?}");
    }
    for te in [
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked, identity\r\n",
        "Transfer-Encoding: xchunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    ] {
        let req = format!("POST / HTTP/1.1\r\nHost: h\r\n{te}\r\n");
        let e = err(req.as_bytes());
        assert_eq!(e, ParseError::TransferEncodingNotImplemented, "{te:?}");
        assert_eq!(e.status(), Status::NotImplemented);
        assert!(e.must_close());
    }
}

#[test]
fn versions() {
    assert_eq!(ok(b"GET / HTTP/1.0\r\n\r\n").minor_version, 0);
    for buf in [
        &b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"[..],
        b"GET / HTTP/1.2\r\nHost: h\r\n\r\n",
        b"GET / HTTP/0.9\r\nHost: h\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let e = err(buf);
        assert_eq!(
            e,
            ParseError::VersionNotSupported,
            "{:?}",
            String::from_utf8_lossy(buf)
        );
        assert_eq!(e.status(), Status::HttpVersionNotSupported);
    }
    bad(b"GET / FOO/1.1\r\nHost: h\r\n\r\n", BadRequest::Version);
    bad(b"GET / HTTP/11\r\nHost: h\r\n\r\n", BadRequest::Version);
    // A space in the target makes httparse read the next word as the version: 400, never 505.
    bad(b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest::Version);
}

#[test]
fn target_forms() {
    bad(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", BadRequest::Target);
    assert_eq!(ok(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").path, b"*");
    // Absolute-form: the path (and query) of the URL.
    let r = ok(b"GET http://h/aB3?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((r.path, r.query), (&b"/aB3"[..], Some(&b"x=1"[..])));
    assert_eq!(
        ok(b"GET HTTPS://h:8443/k HTTP/1.1\r\nHost: h\r\n\r\n").path,
        b"/k"
    );
    assert_eq!(ok(b"GET http://h HTTP/1.1\r\nHost: h\r\n\r\n").path, b"/");
    bad(
        b"GET http:///k HTTP/1.1\r\nHost: h\r\n\r\n",
        BadRequest::Target,
    );
    bad(
        b"GET ftp://h/k HTTP/1.1\r\nHost: h\r\n\r\n",
        BadRequest::Target,
    );
    bad(
        b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n",
        BadRequest::Target,
    );
}

#[test]
fn host_values_are_checked() {
    for good in [
        &b"h"[..],
        b"sho.rt:8080",
        b"[::1]:80",
        b"127.0.0.1",
        b"",
        b"a-b_c~d",
    ] {
        let req = [&b"GET / HTTP/1.1\r\nHost: "[..], good, b"\r\n\r\n"].concat();
        assert!(
            parse_request(&req).unwrap().is_some(),
            "{:?}",
            String::from_utf8_lossy(good)
        );
    }
    for evil in [
        &b"h h"[..],
        b"h:99999999",
        b"[zzz]",
        b"[",
        b"h:80:81",
        b"h/x",
        b"a@b",
    ] {
        let req = [&b"GET / HTTP/1.1\r\nHost: "[..], evil, b"\r\n\r\n"].concat();
        assert_eq!(
            parse_request(&req),
            Err(ParseError::BadRequest(BadRequest::BadHost)),
            "{:?}",
            String::from_utf8_lossy(evil)
        );
    }
}

#[test]
fn host_rules() {
    bad(b"GET / HTTP/1.1\r\n\r\n", BadRequest::MissingHost);
    bad(
        b"GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n",
        BadRequest::DuplicateHeader,
    );
    assert!(!ok(b"GET / HTTP/1.0\r\n\r\n").keep_alive); // Host optional in 1.0
}

#[test]
fn duplicate_auth_headers_are_rejected() {
    bad(
        b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: a\r\nauthorization: b\r\n\r\n",
        BadRequest::DuplicateHeader,
    );
    bad(
        b"GET / HTTP/1.1\r\nHost: h\r\nIdempotency-Key: a\r\nIdempotency-Key: a\r\n\r\n",
        BadRequest::DuplicateHeader,
    );
}

#[test]
fn header_names_match_case_insensitively() {
    let r = ok(b"POST / HTTP/1.1\r\nhOsT: h\r\nCONTENT-LENGTH: 4\r\ncontent-TYPE: text/plain\r\nAUTHORIZATION: x\r\nidempotency-KEY: y\r\n\r\n");
    assert_eq!(r.content_length, 4);
    assert_eq!(r.content_type, Some(&b"text/plain"[..]));
    assert_eq!(r.authorization, Some(&b"x"[..]));
    assert_eq!(r.idempotency_key, Some(&b"y"[..]));
}

#[test]
fn every_error_maps_to_a_status_and_reason() {
    let all = [
        ParseError::BadRequest(BadRequest::Syntax),
        ParseError::UriTooLong,
        ParseError::HeadersTooLarge,
        ParseError::TooManyHeaders,
        ParseError::PayloadTooLarge,
        ParseError::TransferEncodingNotImplemented,
        ParseError::VersionNotSupported,
    ];
    let codes: Vec<u16> = all.iter().map(|e| e.status().code()).collect();
    assert_eq!(codes, [400, 414, 431, 431, 413, 501, 505]);
    for e in all {
        assert!(!e.reason().is_empty());
        assert!(e.must_close());
        assert!(!e.reason().contains(['\r', '\n']));
    }
}
