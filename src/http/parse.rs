//! Request-head parsing: one request at a time from the front of a read buffer.
//!
//! `parse_request` is pure: it borrows the buffer, allocates nothing (httparse's header array is
//! on the stack) and returns `Ok(None)` until a whole head is present. The caller answers the
//! request, skips `head_len + content_length` bytes and calls it again for the next pipelined
//! request.
//!
//! Policy (stricter than httparse, which is lenient in places; every rule is tested):
//! - Every framing ambiguity is a 400 and the connection is closed, because two parties reading
//!   the same bytes differently is how request smuggling starts: `Content-Length` together with
//!   `Transfer-Encoding`, two `Content-Length` fields (even equal ones — RFC 9112 §6.3 lets a
//!   recipient accept identical duplicates, we do not), a `Content-Length` that is not plain
//!   digits or overflows, obs-fold continuation lines, whitespace between a field name and its
//!   colon.
//! - A bare LF as line terminator is rejected (400). httparse accepts it (RFC 9112 §2.2 says a
//!   recipient MAY); no client we serve sends it, and a proxy in front of us that terminates
//!   lines differently would again be a smuggling vector.
//! - `Transfer-Encoding` alone gets 501 Not Implemented and close: we never accept chunked
//!   bodies (API bodies are small and clients send `Content-Length`), and RFC 9112 §6.1 says a
//!   server receiving a transfer coding it does not implement answers 501. 411 would wrongly
//!   tell the client a `Content-Length` alone would do for a request that already framed itself.
//! - HTTP/1.1 requests need exactly one `Host` (RFC 9112 §3.2, 400 otherwise); more than one
//!   `Host`, `Authorization` or `Idempotency-Key` is ambiguous and rejected (400) in any version.
//! - The target is origin-form (`/path`), absolute-form (`http://host/path`, RFC 9112 §3.2.2:
//!   the path is used, as a proxy-aware server must accept it), or `*` for `OPTIONS` only;
//!   anything else (authority-form, `*` with another method) gets 400.
//! - A `Host` value must be a valid `uri-host [":" port]` (RFC 9112 §3.2: 400 otherwise).
//! - A version other than HTTP/1.0 or HTTP/1.1 that is still shaped `HTTP/x.y` gets 505;
//!   anything else in the version position is 400.

use std::mem::MaybeUninit;

use super::limits::{MAX_BODY_BYTES, MAX_HEADERS, MAX_HEADER_BYTES, MAX_REQUEST_LINE_BYTES};
use super::status::Status;

/// Request method. Anything ricochet never routes is `Other` (answered 405 or 404 by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `PATCH`
    Patch,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// `TRACE`: a method of RFC 9110 the server knows and allows nowhere (405, with `Allow`).
    Trace,
    /// `CONNECT`: likewise (405).
    Connect,
    /// `QUERY` (the IETF's safe method with a body): likewise (405).
    Query,
    /// Any other (syntactically valid) method token: not recognized, 501.
    Other,
}

impl Method {
    /// Safe methods (RFC 9110 section 9.2.1) do not change the server's state, so a run of
    /// them may be processed in parallel; anything else is a barrier on its connection.
    pub fn is_safe(self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace | Method::Query
        )
    }

    /// Methods are case-sensitive (RFC 9110 §9.1): `get` is `Other`.
    fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            "QUERY" => Method::Query,
            _ => Method::Other,
        }
    }
}

/// The `Expect` field (RFC 9110 section 10.1.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expect {
    /// No `Expect`.
    #[default]
    None,
    /// `Expect: 100-continue`: the client waits for `100 Continue` (or a final answer)
    /// before it sends the body.
    Continue,
    /// Any other expectation: answered 417.
    Unsupported,
}

/// A parsed request head, borrowing from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'b> {
    /// The method.
    pub method: Method,
    /// The host the request is for: an absolute-form target's authority, else the `Host`
    /// field's value (port included, as sent; checked as `uri-host [":" port]`). `None` only
    /// for HTTP/1.0 without `Host`.
    pub host: Option<&'b [u8]>,
    /// The target up to but excluding the first `?`. Always starts with `/`.
    pub path: &'b [u8],
    /// The query after the first `?` (without it), if the target had a `?`.
    pub query: Option<&'b [u8]>,
    /// `0` for HTTP/1.0, `1` for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the connection persists after this request: HTTP/1.1 unless `Connection: close`;
    /// HTTP/1.0 only with `Connection: keep-alive` (and no `close`). Connection options are
    /// comma-separated tokens matched case-insensitively, across all `Connection` fields.
    pub keep_alive: bool,
    /// Bytes of the head, including leading empty lines and the final CRLFCRLF. The body (if any)
    /// starts here.
    pub head_len: usize,
    /// The body length from `Content-Length`, `0` without one. At most [`MAX_BODY_BYTES`].
    pub content_length: usize,
    /// The body is in the chunked transfer coding (`Transfer-Encoding: chunked`, the only
    /// coding taken); `content_length` is then 0 and `http::chunked::decode` frames it.
    pub chunked: bool,
    /// The `Authorization` field value, if present.
    pub authorization: Option<&'b [u8]>,
    /// The `X-Api-Key` field value, if present (Shlink's REST API authenticates by it).
    pub x_api_key: Option<&'b [u8]>,
    /// The `Idempotency-Key` field value, if present.
    pub idempotency_key: Option<&'b [u8]>,
    /// What the `Expect` field asks for.
    pub expect: Expect,
    /// The `Content-Type` field value, if present (the last one if repeated; the API rejects
    /// types it does not accept, so repetition is not a framing or auth ambiguity).
    pub content_type: Option<&'b [u8]>,
    /// `User-Agent`, `Referer` and the last `X-Forwarded-For` field, for click analytics
    /// (the last one if repeated; nothing but counting depends on them).
    pub user_agent: Option<&'b [u8]>,
    pub referer: Option<&'b [u8]>,
    pub forwarded_for: Option<&'b [u8]>,
    /// `Accept-Language`, for redirect rules' language conditions (the last one if repeated).
    pub accept_language: Option<&'b [u8]>,
    /// `Origin`, for the APIs' CORS answers (`api::cors`; the last one if repeated).
    pub origin: Option<&'b [u8]>,
}

/// Why a request is malformed (all answered 400 Bad Request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BadRequest {
    /// httparse rejected the syntax (method token, target characters, field syntax, CR usage).
    Syntax,
    /// A line ended in a bare LF instead of CRLF.
    BareLf,
    /// A header line started with whitespace (obs-fold) or had whitespace before its colon.
    HeaderWhitespace,
    /// The target is not origin-form, absolute-form, or `*` with `OPTIONS`.
    Target,
    /// A `Host` value that is not `uri-host [":" port]`.
    BadHost,
    /// The version field is not `HTTP/x.y`.
    Version,
    /// Both `Content-Length` and `Transfer-Encoding`.
    ContentLengthWithTransferEncoding,
    /// More than one `Content-Length` field.
    DuplicateContentLength,
    /// `Content-Length` is not a plain decimal number or overflows.
    InvalidContentLength,
    /// An HTTP/1.1 request without `Host`.
    MissingHost,
    /// More than one `Host`, `Authorization` or `Idempotency-Key` field.
    DuplicateHeader,
    /// A chunked body that breaks the strict rules of `http::chunked`.
    Chunked,
}

/// Why a request head cannot be served. [`ParseError::status`] is the one place mapping parse
/// failures to response statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// Malformed or ambiguous: 400.
    BadRequest(BadRequest),
    /// Request line longer than [`MAX_REQUEST_LINE_BYTES`]: 414.
    UriTooLong,
    /// Head longer than [`MAX_HEADER_BYTES`]: 431.
    HeadersTooLarge,
    /// More than [`MAX_HEADERS`] fields: 431.
    TooManyHeaders,
    /// `Content-Length` above [`MAX_BODY_BYTES`]: 413.
    PayloadTooLarge,
    /// `Transfer-Encoding` without `Content-Length` (we take no chunked bodies): 501.
    TransferEncodingNotImplemented,
    /// `HTTP/x.y` other than 1.0 and 1.1: 505.
    VersionNotSupported,
}

impl ParseError {
    /// The response status for this error.
    pub fn status(self) -> Status {
        match self {
            ParseError::BadRequest(_) => Status::BadRequest,
            ParseError::UriTooLong => Status::UriTooLong,
            ParseError::HeadersTooLarge | ParseError::TooManyHeaders => {
                Status::RequestHeaderFieldsTooLarge
            }
            ParseError::PayloadTooLarge => Status::PayloadTooLarge,
            ParseError::TransferEncodingNotImplemented => Status::NotImplemented,
            ParseError::VersionNotSupported => Status::HttpVersionNotSupported,
        }
    }

    /// Whether the connection must be closed after answering. Always true today: after any of
    /// these the request's framing is unknown or unread (an oversized head has no known end, a
    /// refused body was never consumed), so the next request cannot be found reliably. Kept as a
    /// method so the policy lives here, beside the status mapping.
    pub fn must_close(self) -> bool {
        match self {
            ParseError::BadRequest(_)
            | ParseError::UriTooLong
            | ParseError::HeadersTooLarge
            | ParseError::TooManyHeaders
            | ParseError::PayloadTooLarge
            | ParseError::TransferEncodingNotImplemented
            | ParseError::VersionNotSupported => true,
        }
    }

    /// A short human-readable explanation, used as the error response body.
    pub fn reason(self) -> &'static str {
        match self {
            ParseError::BadRequest(b) => match b {
                BadRequest::Syntax => "malformed request",
                BadRequest::BareLf => "lines must end in CRLF",
                BadRequest::HeaderWhitespace => {
                    "whitespace at the start of a header line or before its colon"
                }
                BadRequest::Target => {
                    "request target must be a path, an http(s) URL, or * with OPTIONS"
                }
                BadRequest::BadHost => "invalid Host",
                BadRequest::Version => "malformed HTTP version",
                BadRequest::ContentLengthWithTransferEncoding => {
                    "both Content-Length and Transfer-Encoding"
                }
                BadRequest::DuplicateContentLength => "more than one Content-Length",
                BadRequest::InvalidContentLength => "invalid Content-Length",
                BadRequest::MissingHost => "HTTP/1.1 request without Host",
                BadRequest::DuplicateHeader => {
                    "more than one Host, Authorization or Idempotency-Key"
                }
                BadRequest::Chunked => "malformed chunked body",
            },
            ParseError::UriTooLong => "request line too long",
            ParseError::HeadersTooLarge => "request head too large",
            ParseError::TooManyHeaders => "too many header fields",
            ParseError::PayloadTooLarge => "request body too large",
            ParseError::TransferEncodingNotImplemented => {
                "only Transfer-Encoding: chunked is supported"
            }
            ParseError::VersionNotSupported => "only HTTP/1.0 and HTTP/1.1 are supported",
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.reason(), self.status().code())
    }
}

impl std::error::Error for ParseError {}

/// Parses the request head at the front of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete and within limits; `Ok(Some(req))` once it is
/// complete (the body, if any, starts at `req.head_len`; later pipelined requests follow it);
/// `Err` when the head cannot be served (see [`ParseError::status`]). Limits are enforced while
/// the head is still arriving, so a client cannot make us buffer past them.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request<'_>>, ParseError> {
    check_request_line_len(buf)?;

    // Parse at most MAX_HEADER_BYTES: a head that has not ended by then is too large, and this
    // bounds the work of re-parsing a partial head on every read.
    let window = &buf[..buf.len().min(MAX_HEADER_BYTES)];
    // Uninitialized: initializing 64 headers would cost a 2 KiB memset per request.
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(window, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEADER_BYTES => {
            return Err(ParseError::HeadersTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(map_httparse_error(e, window)),
    };
    let head = &buf[..head_len];
    if has_bare_lf(head) {
        return Err(ParseError::BadRequest(BadRequest::BareLf));
    }

    // httparse guarantees these are set on Complete.
    let (Some(method), Some(target), Some(minor_version)) = (req.method, req.path, req.version)
    else {
        return Err(ParseError::BadRequest(BadRequest::Syntax));
    };
    let (authority, target) = request_path(method, target.as_bytes())?;
    let (path, query) = match memchr::memchr(b'?', target) {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    };

    let fields = scan_fields(req.headers)?;
    let chunked = match fields.transfer_encoding {
        None => false,
        Some(_) if fields.content_length.is_some() => {
            return Err(ParseError::BadRequest(
                BadRequest::ContentLengthWithTransferEncoding,
            ))
        }
        // Only `chunked` alone (case-insensitive, RFC 9112 section 7): any other coding or
        // list is not implemented.
        Some(v) if v.trim_ascii().eq_ignore_ascii_case(b"chunked") => true,
        Some(_) => return Err(ParseError::TransferEncodingNotImplemented),
    };
    let content_length = match fields.content_length {
        Some(v) => parse_content_length(v)?,
        None => 0,
    };
    if minor_version == 1 && fields.hosts == 0 {
        return Err(ParseError::BadRequest(BadRequest::MissingHost));
    }
    let keep_alive = if minor_version == 1 {
        !fields.conn_close
    } else {
        fields.conn_keep_alive && !fields.conn_close
    };

    Ok(Some(Request {
        method: Method::from_token(method),
        host: authority.or(fields.host),
        path,
        query,
        minor_version,
        keep_alive,
        head_len,
        content_length,
        chunked,
        authorization: fields.authorization,
        x_api_key: fields.x_api_key,
        idempotency_key: fields.idempotency_key,
        content_type: fields.content_type,
        user_agent: fields.user_agent,
        referer: fields.referer,
        forwarded_for: fields.forwarded_for,
        accept_language: fields.accept_language,
        origin: fields.origin,
        expect: fields.expect,
    }))
}

/// The path and query part of a request target: origin-form as is, absolute-form
/// (`http://host/p?q`) from its path (`/` when it has none), `*` for `OPTIONS`.
/// With the authority of an absolute-form target, which stands for `Host` (RFC 9112 §3.2.2).
fn request_path<'b>(
    method: &str,
    target: &'b [u8],
) -> Result<(Option<&'b [u8]>, &'b [u8]), ParseError> {
    if target.first() == Some(&b'/') {
        return Ok((None, target));
    }
    if target == b"*" && method == "OPTIONS" {
        return Ok((None, target));
    }
    // The scheme compared without case and without a copy (no allocation on this path).
    let scheme = |s: &[u8]| {
        target
            .get(..s.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(s))
    };
    let rest = if scheme(b"http://") {
        &target[7..]
    } else if scheme(b"https://") {
        &target[8..]
    } else {
        return Err(ParseError::BadRequest(BadRequest::Target));
    };
    let end = memchr::memchr2(b'/', b'?', rest).unwrap_or(rest.len());
    if end == 0 || !valid_host(&rest[..end]) {
        return Err(ParseError::BadRequest(BadRequest::Target));
    }
    let authority = Some(&rest[..end]);
    match rest[end..].first() {
        Some(b'/') => Ok((authority, &rest[end..])),
        // `http://host` or `http://host?q`: the path is `/` (RFC 9110 §4.2.3); a query
        // on the root is not a key, so it is dropped with it.
        _ => Ok((authority, b"/")),
    }
}

/// The bytes a reg-name holds (RFC 3986 §3.2.2: unreserved, `%` of a pct-encoding, and
/// sub-delims), by value: one load a byte of every request's `Host` (a search of the
/// punctuation list cost a call per `.` and `-`).
const REG_NAME_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let punct = b"-._~%!$&'()*+,;=";
    let mut i = 0;
    while i < punct.len() {
        t[punct[i] as usize] = true;
        i += 1;
    }
    t
};

/// `uri-host [":" port]` (RFC 3986 §3.2.2): an IP-literal in brackets, or a reg-name /
/// IPv4 address of unreserved, percent-encoded or sub-delim characters; then up to 5 port
/// digits. Empty is allowed (a target URI without authority).
fn valid_host(v: &[u8]) -> bool {
    let (host, port) = if v.first() == Some(&b'[') {
        let Some(close) = memchr::memchr(b']', v) else {
            return false;
        };
        let inside = &v[1..close];
        if inside.is_empty()
            || !inside
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return false;
        }
        (&v[..0], &v[close + 1..])
    } else {
        match memchr::memchr(b':', v) {
            Some(i) => (&v[..i], &v[i..]),
            None => (v, &v[v.len()..]),
        }
    };
    let reg_name = host.iter().all(|&b| REG_NAME_BYTE[usize::from(b)]);
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    reg_name && port_ok
}

/// 414 as soon as the first line provably exceeds the limit, complete or not.
fn check_request_line_len(buf: &[u8]) -> Result<(), ParseError> {
    // httparse skips empty lines before the request line (RFC 9112 §2.2); so do we. Their
    // total is bounded by MAX_HEADER_BYTES like the rest of the head.
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let buf = &buf[start..];
    // The line may be MAX bytes plus CRLF, so its LF is at index MAX + 1 at the latest.
    let search = &buf[..buf.len().min(MAX_REQUEST_LINE_BYTES + 2)];
    let line_len = match memchr::memchr(b'\n', search) {
        Some(i) => i,
        None => search.len(),
    };
    // A trailing CR belongs to the terminator (or may, if the LF has not arrived yet).
    let line = &search[..line_len];
    let content_len = line.strip_suffix(b"\r").unwrap_or(line).len();
    if content_len > MAX_REQUEST_LINE_BYTES {
        return Err(ParseError::UriTooLong);
    }
    Ok(())
}

fn map_httparse_error(e: httparse::Error, window: &[u8]) -> ParseError {
    match e {
        httparse::Error::TooManyHeaders => ParseError::TooManyHeaders,
        httparse::Error::Version => {
            if version_is_http_shaped(window) {
                ParseError::VersionNotSupported
            } else {
                ParseError::BadRequest(BadRequest::Version)
            }
        }
        httparse::Error::HeaderName if header_line_has_whitespace(window) => {
            ParseError::BadRequest(BadRequest::HeaderWhitespace)
        }
        _ => ParseError::BadRequest(BadRequest::Syntax),
    }
}

/// Whether the request line's last word looks like `HTTP/<digit>.<digit>` (an unsupported
/// version rather than garbage). Only called on the error path.
fn version_is_http_shaped(window: &[u8]) -> bool {
    let start = window
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(window.len());
    let rest = &window[start..];
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    let line = &rest[..end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // Exactly `method SP target SP version`; more words (a space in the target) is malformed.
    let mut words = line.split(|&b| b == b' ');
    let (Some(_), Some(_), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    matches!(version, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
        if major.is_ascii_digit() && minor.is_ascii_digit())
}

/// Whether some header line starts with whitespace (obs-fold) or has whitespace right before its
/// colon: the two header-name errors worth naming. Only called on the error path.
fn header_line_has_whitespace(window: &[u8]) -> bool {
    let mut lines = window
        .split(|&b| b == b'\n')
        .skip_while(|l| l.is_empty() || *l == b"\r");
    lines.next(); // request line
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        if matches!(line[0], b' ' | b'\t') {
            return true;
        }
        if let Some(colon) = memchr::memchr(b':', line) {
            if colon > 0 && matches!(line[colon - 1], b' ' | b'\t') {
                return true;
            }
        }
    }
    false
}

fn has_bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

/// The header fields the server acts on, gathered in one pass.
#[derive(Default)]
struct Fields<'b> {
    content_length: Option<&'b [u8]>,
    /// `Transfer-Encoding`, if present once (twice is not implemented: 501).
    transfer_encoding: Option<&'b [u8]>,
    hosts: u32,
    host: Option<&'b [u8]>,
    conn_close: bool,
    conn_keep_alive: bool,
    authorization: Option<&'b [u8]>,
    x_api_key: Option<&'b [u8]>,
    idempotency_key: Option<&'b [u8]>,
    content_type: Option<&'b [u8]>,
    user_agent: Option<&'b [u8]>,
    referer: Option<&'b [u8]>,
    forwarded_for: Option<&'b [u8]>,
    accept_language: Option<&'b [u8]>,
    origin: Option<&'b [u8]>,
    expect: Expect,
}

fn scan_fields<'b>(headers: &[httparse::Header<'b>]) -> Result<Fields<'b>, ParseError> {
    let mut f = Fields::default();
    for h in headers {
        let name = h.name.as_bytes();
        let value = h.value;
        // Dispatch on length first: most fields (User-Agent, Accept...) fail this cheaply.
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                f.hosts += 1;
                if f.hosts > 1 {
                    return Err(ParseError::BadRequest(BadRequest::DuplicateHeader));
                }
                if !valid_host(value) {
                    return Err(ParseError::BadRequest(BadRequest::BadHost));
                }
                f.host = Some(value);
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        f.conn_close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        f.conn_keep_alive = true;
                    }
                }
            }
            10 if name.eq_ignore_ascii_case(b"user-agent") => f.user_agent = Some(value),
            7 if name.eq_ignore_ascii_case(b"referer") => f.referer = Some(value),
            15 if name.eq_ignore_ascii_case(b"x-forwarded-for") => f.forwarded_for = Some(value),
            15 if name.eq_ignore_ascii_case(b"accept-language") => f.accept_language = Some(value),
            12 if name.eq_ignore_ascii_case(b"content-type") => f.content_type = Some(value),
            6 if name.eq_ignore_ascii_case(b"origin") => f.origin = Some(value),
            6 if name.eq_ignore_ascii_case(b"expect") => {
                f.expect = if value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                    Expect::Continue
                } else {
                    Expect::Unsupported
                }
            }
            13 if name.eq_ignore_ascii_case(b"authorization") => {
                set_once(&mut f.authorization, value)?
            }
            9 if name.eq_ignore_ascii_case(b"x-api-key") => set_once(&mut f.x_api_key, value)?,
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                if f.content_length.is_some() {
                    return Err(ParseError::BadRequest(BadRequest::DuplicateContentLength));
                }
                f.content_length = Some(value);
            }
            15 if name.eq_ignore_ascii_case(b"idempotency-key") => {
                set_once(&mut f.idempotency_key, value)?
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                if f.transfer_encoding.is_some() {
                    // Two fields are a list: never just `chunked`.
                    f.transfer_encoding = Some(b"(list)");
                } else {
                    f.transfer_encoding = Some(value);
                }
            }
            _ => {}
        }
    }
    Ok(f)
}

fn set_once<'b>(slot: &mut Option<&'b [u8]>, value: &'b [u8]) -> Result<(), ParseError> {
    if slot.is_some() {
        return Err(ParseError::BadRequest(BadRequest::DuplicateHeader));
    }
    *slot = Some(value);
    Ok(())
}

/// `Content-Length = 1*DIGIT` (httparse already trimmed surrounding whitespace).
fn parse_content_length(v: &[u8]) -> Result<usize, ParseError> {
    if v.is_empty() {
        return Err(ParseError::BadRequest(BadRequest::InvalidContentLength));
    }
    let mut n: usize = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return Err(ParseError::BadRequest(BadRequest::InvalidContentLength));
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(usize::from(b - b'0')))
            .ok_or(ParseError::BadRequest(BadRequest::InvalidContentLength))?;
    }
    if n > MAX_BODY_BYTES {
        return Err(ParseError::PayloadTooLarge);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
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
    fn reg_name_bytes_are_rfc_3986s() {
        for b in 0..=255u8 {
            let rfc = b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b);
            assert_eq!(REG_NAME_BYTE[usize::from(b)], rfc, "byte {b:#04x}");
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
    fn the_host_is_the_absolute_forms_authority_else_the_host_field() {
        assert_eq!(
            ok(b"GET /k HTTP/1.1\r\nHost: Sho.rt:8080\r\n\r\n").host,
            Some(&b"Sho.rt:8080"[..])
        );
        let abs = ok(b"GET http://go.brand.com/k?x HTTP/1.1\r\nHost: other\r\n\r\n");
        assert_eq!(
            (abs.host, abs.path),
            (Some(&b"go.brand.com"[..]), &b"/k"[..])
        );
        assert_eq!(
            ok(b"GET https://b.example HTTP/1.1\r\nHost: b\r\n\r\n").host,
            Some(&b"b.example"[..])
        );
        assert_eq!(ok(b"GET /k HTTP/1.0\r\n\r\n").host, None);
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
}
