//! Request bodies in the chunked transfer coding (RFC 9112 section 7.1), which a recipient
//! must be able to parse. Pure: `decode` looks at the bytes after the head and answers
//! `Ok(None)` until the whole body is there, like the head parser.
//!
//! Strict on purpose (request smuggling lives in lenient chunk parsers): chunk sizes are 1 to
//! [`MAX_CHUNK_SIZE_DIGITS`] hex digits, every line ends in CRLF (no bare LF), chunk
//! extensions are skipped only if they are `;token[=token|quoted]` without CR/LF, and the
//! trailer section must be empty. The whole encoded body is at most [`MAX_BODY_BYTES`] on the
//! wire, so it always fits the connection's input buffer.

use super::limits::MAX_BODY_BYTES;

/// Hex digits a chunk size may have: 8 is far above any size under [`MAX_BODY_BYTES`], and
/// bounds the parse.
pub const MAX_CHUNK_SIZE_DIGITS: usize = 8;

/// Why a chunked body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedError {
    /// Malformed: 400.
    Syntax,
    /// More than [`MAX_BODY_BYTES`] on the wire: 413.
    TooLarge,
}

/// The body at the start of `buf`: `Ok(Some((bytes consumed, decoded body)))` once complete,
/// `Ok(None)` while more input is needed.
pub fn decode(buf: &[u8]) -> Result<Option<(usize, Vec<u8>)>, ChunkedError> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = find_crlf(buf, at)? else {
            return incomplete(buf);
        };
        let size = chunk_size(&buf[at..line_end])?;
        at = line_end + 2;
        if size == 0 {
            // Last chunk: the (empty) trailer section ends with CRLF.
            return match buf.get(at..at + 2) {
                Some(b"\r\n") => Ok(Some((at + 2, body))),
                Some(_) => Err(ChunkedError::Syntax),
                None if buf.len() == at + 1 && buf[at] != b'\r' => Err(ChunkedError::Syntax),
                None => incomplete(buf),
            };
        }
        let end = at.checked_add(size).ok_or(ChunkedError::TooLarge)?;
        if end + 2 > MAX_BODY_BYTES {
            return Err(ChunkedError::TooLarge);
        }
        let Some(data) = buf.get(at..end) else {
            return incomplete(buf);
        };
        match buf.get(end..end + 2) {
            Some(b"\r\n") => {}
            Some(_) => return Err(ChunkedError::Syntax),
            None => return incomplete(buf),
        }
        body.extend_from_slice(data);
        at = end + 2;
    }
}

fn incomplete(buf: &[u8]) -> Result<Option<(usize, Vec<u8>)>, ChunkedError> {
    if buf.len() >= MAX_BODY_BYTES {
        return Err(ChunkedError::TooLarge);
    }
    Ok(None)
}

/// The index of the CRLF ending the line that starts at `from`, or `None` if it has not
/// arrived. A bare CR or LF inside the line is an error.
fn find_crlf(buf: &[u8], from: usize) -> Result<Option<usize>, ChunkedError> {
    let rest = &buf[from.min(buf.len())..];
    // A size line is short: digits plus a bounded extension.
    let window = &rest[..rest.len().min(256)];
    match memchr::memchr2(b'\r', b'\n', window) {
        Some(i) if window[i] == b'\n' => Err(ChunkedError::Syntax),
        Some(i) => match window.get(i + 1) {
            Some(b'\n') => Ok(Some(from + i)),
            Some(_) => Err(ChunkedError::Syntax),
            None => Ok(None),
        },
        None if window.len() == 256 => Err(ChunkedError::Syntax),
        None => Ok(None),
    }
}

/// `chunk-size [ chunk-ext ]`: hex digits, then optionally `;name[=value]` extensions.
fn chunk_size(line: &[u8]) -> Result<usize, ChunkedError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > MAX_CHUNK_SIZE_DIGITS {
        return Err(ChunkedError::Syntax);
    }
    let ext = &line[digits..];
    if !ext.is_empty() && !valid_extensions(ext) {
        return Err(ChunkedError::Syntax);
    }
    let text = std::str::from_utf8(&line[..digits]).map_err(|_| ChunkedError::Syntax)?;
    usize::from_str_radix(text, 16).map_err(|_| ChunkedError::Syntax)
}

/// `*( ";" token [ "=" ( token / quoted-string ) ] )`, no whitespace (BWS is not accepted:
/// parsers that disagree on it are how bodies get smuggled).
fn valid_extensions(ext: &[u8]) -> bool {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let mut i = 0;
    while i < ext.len() {
        if ext[i] != b';' {
            return false;
        }
        i += 1;
        let start = i;
        while i < ext.len() && token(ext[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i < ext.len() && ext[i] == b'=' {
            i += 1;
            if i < ext.len() && ext[i] == b'"' {
                i += 1;
                while i < ext.len() && ext[i] != b'"' {
                    if ext[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= ext.len() {
                    return false;
                }
                i += 1;
            } else {
                let v = i;
                while i < ext.len() && token(ext[i]) {
                    i += 1;
                }
                if i == v {
                    return false;
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    #[test]
    fn decodes_and_waits_for_the_rest() {
        let wire = encode(&[b"{\"long_url\":", b"\"https://e.com/\"}"]);
        let mut next = wire.clone();
        next.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            decode(&next),
            Ok(Some((
                wire.len(),
                b"{\"long_url\":\"https://e.com/\"}".to_vec()
            )))
        );
        for cut in 0..wire.len() {
            assert_eq!(decode(&wire[..cut]), Ok(None), "cut at {cut}");
        }
        let ext = b"5;name=val;q=\"x y\"\r\nhello\r\n0\r\n\r\n";
        assert_eq!(decode(ext), Ok(Some((ext.len(), b"hello".to_vec()))));
    }

    #[test]
    fn refuses_what_smuggling_needs() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"5;\r\nhello\r\n0\r\n\r\n",
            b"5 ;a\r\nhello\r\n0\r\n\r\n",
            b"0\r\nTrailer: x\r\n\r\n",
            b"000000000\r\n\r\n",
            b"\r\n",
        ] {
            assert_eq!(
                decode(bad),
                Err(ChunkedError::Syntax),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(decode(b"ffffff\r\n"), Err(ChunkedError::TooLarge));
        let many = "1\r\nx\r\n".repeat(MAX_BODY_BYTES / 6 + 1);
        assert_eq!(decode(many.as_bytes()), Err(ChunkedError::TooLarge));
    }

    proptest::proptest! {
        #[test]
        fn round_trips_any_split(chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 1..40), 0..8)) {
            let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let wire = encode(&refs);
            let want: Vec<u8> = chunks.concat();
            proptest::prop_assert_eq!(decode(&wire), Ok(Some((wire.len(), want))));
        }
    }
}
