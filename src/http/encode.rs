//! Response encoding into a caller-owned, reused `Vec<u8>`.
//!
//! Every function appends; none allocates beyond growing `out` when its spare capacity is too
//! small, so a connection that keeps its write buffer allocates nothing once warm. Numbers are
//! formatted with `itoa` on the stack.

use shards::link::RedirectStatus;

use super::date::DateCache;
use super::limits::PERMANENT_REDIRECT_MAX_AGE_S;
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
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in target {
        if b.is_ascii() {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Appends a complete response: status line, `headers` (name, value; values must not contain
/// CR/LF), `Content-Type` when given, `Content-Length: body.len()`, `Date`, `Server`,
/// `Connection` as `conn` requires, then `body` unless `head_only` (a HEAD request gets the
/// same head, including the `Content-Length` the GET would have had, and no body).
// The arguments are the response's independent parts; bundling them in a struct would only move
// the same list to every call site.
#[allow(clippy::too_many_arguments)]
pub fn encode_response(
    out: &mut Vec<u8>,
    status: Status,
    headers: &[(&str, &[u8])],
    content_type: Option<&str>,
    body: &[u8],
    head_only: bool,
    conn: Conn,
    date: &DateCache,
) {
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
    common_tail(out, conn, date);
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// Content type of the plain-text bodies below.
const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// Appends `404 Not Found` with a short text body.
pub fn encode_not_found(out: &mut Vec<u8>, head_only: bool, conn: Conn, date: &DateCache) {
    encode_response(
        out,
        Status::NotFound,
        &[],
        Some(TEXT_PLAIN),
        b"Not Found\n",
        head_only,
        conn,
        date,
    );
}

/// Appends `405 Method Not Allowed` with `Allow: {allow}` (e.g. `"GET, HEAD"`) and a short text
/// body.
pub fn encode_method_not_allowed(
    out: &mut Vec<u8>,
    allow: &str,
    head_only: bool,
    conn: Conn,
    date: &DateCache,
) {
    encode_response(
        out,
        Status::MethodNotAllowed,
        &[("Allow", allow.as_bytes())],
        Some(TEXT_PLAIN),
        b"Method Not Allowed\n",
        head_only,
        conn,
        date,
    );
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
#[path = "encode_tests.rs"]
mod tests;
