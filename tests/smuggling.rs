//! Request-smuggling and framing regression corpus (the HTTP Garden / request-smuggling
//! families). Each hostile request is sent with a valid request pipelined behind it, in one
//! write. The server must either refuse the hostile one (its status) and close, so the bytes
//! behind it are never read as a request, or frame it exactly as RFC 9112 says and answer the
//! valid one intact. Responses are read with httparse, strictly framed by Content-Length.

mod common;

use common::{dataset, import, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const VALID: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";

/// Every response on the connection until EOF: (status, body).
fn responses(server: &Server, bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    loop {
        match s.read(&mut tmp) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e}"),
        }
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let mut hs = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut hs);
        let n = match r.parse(&buf[at..]) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!(
                "not a response ({other:?}): {:?}",
                String::from_utf8_lossy(&buf[at..])
            ),
        };
        let len: usize = r
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
            .unwrap_or(0);
        out.push((r.code.unwrap(), buf[at + n..at + n + len].to_vec()));
        at += n + len;
    }
    out
}

fn served() -> (tempfile::TempDir, Server) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("data");
    import(&dir, &dataset(20, 4));
    let s = Server::start(&dir, &[]);
    (t, s)
}

/// Hostile heads that must be refused with `status`, and nothing after them answered.
const REFUSED: &[(&str, u16)] = &[
    // Transfer-Encoding: only `chunked` alone is taken, and its chunks are read strictly
    // (400); any other coding or list is not implemented (501); with a Content-Length the
    // framing is ambiguous (400).
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", 400),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTRANSFER-ENCODING: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: 1\r\n\r\n", 400),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    ("POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\n Transfer-Encoding: chunked\r\n\r\n", 400),
    // Content-Length that is not exactly 1*DIGIT, or said twice.
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: +4\r\n\r\nabcd", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0x4\r\n\r\nabcd", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4, 4\r\n\r\nabcd", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4,5\r\n\r\nabcd", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1e2\r\n\r\n", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4 4\r\n\r\nabcd", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd", 400),
    ("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\ncontent-length: 5\r\n\r\nabcd", 400),
    // Control bytes, bare CR/LF, field names that are not tokens, obs-fold.
    ("GET /healthz HTTP/1.1\r\nHost: t\r\nX: a\0b\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: t\r\nX: a\rb\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\nHost: t\n\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: t\nX: y\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: t\r\nBad\x01: x\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: t\r\n: empty-name\r\n\r\n", 400),
    // Request line oddities.
    ("GET  /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1 \r\nHost: t\r\n\r\n", 400),
    ("GET /he\x7fz HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n", 505),
    ("GET /healthz HTTP/1.1\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
];

#[test]
fn hostile_framing_is_refused_and_nothing_behind_it_is_read() {
    let (_t, s) = served();
    for (head, status) in REFUSED {
        let mut bytes = head.as_bytes().to_vec();
        bytes.extend_from_slice(VALID);
        let got = responses(&s, &bytes);
        let codes: Vec<u16> = got.iter().map(|r| r.0).collect();
        assert_eq!(codes, vec![*status], "{head:?} answered {codes:?}");
    }
}

/// Framings RFC 9112 allows: the request is taken as framed and the one behind it is answered
/// intact.
#[test]
fn lawful_framing_is_taken_exactly() {
    let (_t, s) = served();
    let cases: &[(&str, u16)] = &[
        // Leading zeros and whitespace around the value are allowed (OWS is not part of it).
        (
            "POST /nokey HTTP/1.1\r\nHost: t\r\nContent-Length: 004\r\n\r\nabcd",
            405,
        ),
        (
            "POST /nokey HTTP/1.1\r\nHost: t\r\nContent-Length:  4 \r\n\r\nabcd",
            405,
        ),
        (
            "POST /nokey HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
            405,
        ),
        // A chunked body, in any case of `chunked`, with a chunk extension: framed by its
        // last chunk, and what follows it is the next request.
        (
            "POST /nokey HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n4;ext=1\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n",
            405,
        ),
        (
            "POST /nokey HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            405,
        ),
        // Empty lines before a request line are ignored (RFC 9112 section 2.2).
        ("\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 200),
        (
            "GET /healthz?x=GET%20/evil%20HTTP/1.1 HTTP/1.1\r\nHost: t\r\n\r\n",
            200,
        ),
    ];
    for (req, status) in cases {
        let mut bytes = req.as_bytes().to_vec();
        bytes.extend_from_slice(VALID);
        let got = responses(&s, &bytes);
        let codes: Vec<u16> = got.iter().map(|r| r.0).collect();
        assert_eq!(codes, vec![*status, 200], "{req:?} answered {codes:?}");
        assert_eq!(
            got[1].1, b"ok\n",
            "{req:?}: the request behind it was not intact"
        );
    }
}

/// A pipeline of a body-carrying request and a GET, split at every byte: the same answers.
#[test]
fn a_pipeline_split_at_every_byte_answers_the_same() {
    let (_t, s) = served();
    let mut pipeline =
        b"POST /nokey HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nGET /".to_vec();
    pipeline.extend_from_slice(VALID);
    for k in 1..pipeline.len() {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.set_nodelay(true).unwrap();
        c.write_all(&pipeline[..k]).unwrap();
        std::thread::sleep(Duration::from_micros(300));
        c.write_all(&pipeline[k..]).unwrap();
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf);
        assert_eq!(text.matches("HTTP/1.1 ").count(), 2, "split at {k}: {text}");
        assert!(text.starts_with("HTTP/1.1 405"), "split at {k}: {text}");
        assert!(text.ends_with("ok\n"), "split at {k}: {text}");
    }
}
