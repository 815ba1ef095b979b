//! Framing and parsing of HTTP/1.1 responses arriving in arbitrary pieces.
//!
//! Parsing is restartable: `parse_response` looks at everything buffered for the current
//! response and says either "need more bytes" or "complete, N bytes long". Redirect responses
//! are a few hundred bytes, so re-parsing from the response start on each read is cheap.

use std::ops::Range;

/// Most headers accepted in one response; ricochet sends fewer than 10.
pub const MAX_RESPONSE_HEADERS: usize = 32;

/// Largest response accepted, in bytes; guards memory against a misbehaving server.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// A response that cannot be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// httparse rejected the status line or headers.
    Syntax,
    /// Bad or conflicting Content-Length.
    ContentLength,
    /// Bad chunked encoding.
    Chunked,
    /// Response larger than [`MAX_RESPONSE_BYTES`] or with too many headers.
    TooLarge,
    /// Connection ended in the middle of a response.
    Truncated,
}

/// A complete response, located in the buffer it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Bytes the response occupies, from the start of the buffer.
    pub len: usize,
    /// Status code.
    pub status: u16,
    /// Byte range of the `Location` header value, if present.
    pub location: Option<Range<usize>>,
    /// The server will close the connection after this response.
    pub close: bool,
}

/// Outcome of one parse attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parse {
    /// More bytes are needed.
    Partial,
    /// A full response (interim 1xx responses before it are included in `len`).
    Complete(Response),
}

enum BodyLen {
    None,
    Fixed(usize),
    Chunked,
    UntilClose,
}

/// Parses the response at the start of `buf`. `eof` says the peer closed the connection,
/// which completes a close-delimited body and turns any other partial response into an error.
pub fn parse_response(buf: &[u8], eof: bool) -> Result<Parse, ProtoError> {
    let mut offset = 0;
    loop {
        let res = parse_one(&buf[offset..], eof)?;
        match res {
            Parse::Partial => {
                if buf.len() > MAX_RESPONSE_BYTES {
                    return Err(ProtoError::TooLarge);
                }
                return if eof {
                    Err(ProtoError::Truncated)
                } else {
                    Ok(Parse::Partial)
                };
            }
            Parse::Complete(mut r) => {
                // 1xx interim responses (except 101) precede the real one on the same request.
                if (100..200).contains(&r.status) && r.status != 101 {
                    offset += r.len;
                    continue;
                }
                r.len += offset;
                if let Some(loc) = r.location.as_mut() {
                    *loc = loc.start + offset..loc.end + offset;
                }
                return Ok(Parse::Complete(r));
            }
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one response's framing (status, each header, body length by RFC 9112 section 6.3's order of rules): the rules read in the RFC's order"
)]
fn parse_one(buf: &[u8], eof: bool) -> Result<Parse, ProtoError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(Parse::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(ProtoError::TooLarge),
        Err(_) => return Err(ProtoError::Syntax),
    };
    let status = resp.code.ok_or(ProtoError::Syntax)?;
    let http10 = resp.version == Some(0);
    let mut location = None;
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut close = http10;
    let base = buf.as_ptr() as usize;
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"location") {
            let start = h.value.as_ptr() as usize - base;
            location = Some(start..start + h.value.len());
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or(ProtoError::ContentLength)?;
            if content_length.is_some_and(|c| c != v) {
                return Err(ProtoError::ContentLength);
            }
            content_length = Some(v);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = h
                .value
                .split(|&b| b == b',')
                .next_back()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',') {
                let t = token.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if t.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        }
    }
    let body = if (100..200).contains(&status) || status == 204 || status == 304 {
        BodyLen::None
    } else if chunked {
        BodyLen::Chunked
    } else if let Some(n) = content_length {
        BodyLen::Fixed(n)
    } else {
        BodyLen::UntilClose
    };
    let len = match body {
        BodyLen::None => head_len,
        BodyLen::Fixed(n) => {
            if n > MAX_RESPONSE_BYTES {
                return Err(ProtoError::TooLarge);
            }
            if buf.len() - head_len < n {
                return Ok(Parse::Partial);
            }
            head_len + n
        }
        BodyLen::Chunked => match chunked_len(&buf[head_len..])? {
            Some(n) => head_len + n,
            None => return Ok(Parse::Partial),
        },
        BodyLen::UntilClose => {
            if !eof {
                return Ok(Parse::Partial);
            }
            close = true;
            buf.len()
        }
    };
    Ok(Parse::Complete(Response {
        len,
        status,
        location,
        close,
    }))
}

/// Length of a complete chunked body (chunks, last chunk, trailers), or None if incomplete.
fn chunked_len(buf: &[u8]) -> Result<Option<usize>, ProtoError> {
    let mut pos = 0;
    loop {
        let (consumed, size) = match httparse::parse_chunk_size(&buf[pos..]) {
            Ok(httparse::Status::Complete(x)) => x,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(ProtoError::Chunked),
        };
        pos += consumed;
        if size == 0 {
            break;
        }
        let size = usize::try_from(size).map_err(|_| ProtoError::TooLarge)?;
        if size > MAX_RESPONSE_BYTES {
            return Err(ProtoError::TooLarge);
        }
        if buf.len() < pos + size + 2 {
            return Ok(None);
        }
        if &buf[pos + size..pos + size + 2] != b"\r\n" {
            return Err(ProtoError::Chunked);
        }
        pos += size + 2;
    }
    // Trailer section: header lines until an empty line.
    loop {
        let Some(nl) = memchr::memchr(b'\n', &buf[pos..]) else {
            return Ok(None);
        };
        let line = &buf[pos..pos + nl];
        pos += nl + 1;
        if line.is_empty() || line == b"\r" {
            return Ok(Some(pos));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> Response {
        match parse_response(buf, false).unwrap() {
            Parse::Complete(r) => r,
            Parse::Partial => panic!("partial"),
        }
    }

    #[test]
    fn redirect_with_content_length() {
        let buf = b"HTTP/1.1 302 Found\r\nLocation: https://a.com/x\r\nContent-Length: 0\r\n\r\nHTTP/1.1 404";
        let r = complete(buf);
        assert_eq!(r.status, 302);
        assert_eq!(&buf[r.location.clone().unwrap()], b"https://a.com/x");
        assert_eq!(&buf[r.len..], b"HTTP/1.1 404");
        assert!(!r.close);
    }

    #[test]
    fn every_split_point_is_partial_until_complete() {
        let full = b"HTTP/1.1 301 Moved Permanently\r\nlocation: http://b.org/?q=1\r\ncontent-length: 5\r\n\r\nhello";
        for cut in 0..full.len() {
            assert_eq!(
                parse_response(&full[..cut], false),
                Ok(Parse::Partial),
                "cut {cut}"
            );
            assert!(parse_response(&full[..cut], true).is_err(), "eof cut {cut}");
        }
        let r = complete(full);
        assert_eq!(r.len, full.len());
        assert_eq!(&full[r.location.unwrap()], b"http://b.org/?q=1");
    }

    #[test]
    fn chunked_body_across_reads() {
        let full = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let end = full.len() - 4;
        for cut in 0..end {
            assert_eq!(
                parse_response(&full[..cut], false),
                Ok(Parse::Partial),
                "cut {cut}"
            );
        }
        let r = complete(full);
        assert_eq!(r.status, 201);
        assert_eq!(r.len, end);
        assert_eq!(
            parse_response(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcdXX",
                false
            ),
            Err(ProtoError::Chunked)
        );
    }

    #[test]
    fn close_delimited_and_connection_close() {
        let buf = b"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\nnot found";
        assert_eq!(parse_response(buf, false), Ok(Parse::Partial));
        let Parse::Complete(r) = parse_response(buf, true).unwrap() else {
            panic!()
        };
        assert_eq!((r.status, r.len, r.close), (404, buf.len(), true));
        let r =
            complete(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assert!(r.close);
        let r = complete(b"HTTP/1.0 302 Found\r\nContent-Length: 0\r\n\r\n");
        assert!(r.close);
    }

    #[test]
    fn interim_and_bodyless() {
        let buf = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nLocation: /x\r\nContent-Length: 2\r\n\r\n{}";
        let r = complete(buf);
        assert_eq!(r.status, 201);
        assert_eq!(r.len, buf.len());
        assert_eq!(&buf[r.location.unwrap()], b"/x");
        let r = complete(b"HTTP/1.1 304 Not Modified\r\n\r\n");
        assert_eq!(r.status, 304);
    }

    #[test]
    fn garbage_and_bad_lengths() {
        assert_eq!(
            parse_response(b"HTXP/1.1 200\r\n\r\n", false),
            Err(ProtoError::Syntax)
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false),
            Err(ProtoError::ContentLength)
        );
        assert_eq!(
            parse_response(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                false
            ),
            Err(ProtoError::ContentLength)
        );
    }
}
