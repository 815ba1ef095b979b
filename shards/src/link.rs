//! What a link is, and the rules every link obeys wherever it enters (import, API).

/// Longest key, in bytes. Keys are `[A-Za-z0-9_-]{1,64}`: short enough to travel inline in
/// cross-core messages and LRU slots without a heap allocation.
pub const MAX_KEY_BYTES: usize = 64;

/// Longest target URL, in bytes. 8 KiB matches the request-line limit common HTTP stacks
/// (nginx's `large_client_header_buffers`, browsers) accept, so any stored target can be followed.
pub const MAX_URL_BYTES: usize = 8192;

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
    #[error("URL is longer than {MAX_URL_BYTES} bytes")]
    UrlTooLong,
    #[error("URL contains whitespace or a control character")]
    UrlControl,
    #[error("URL scheme must be http:// or https://")]
    UrlScheme,
    #[error("URL has no host")]
    UrlNoHost,
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

/// Checks a target URL: http or https (scheme case-insensitive), a non-empty host, no
/// whitespace or control characters (they would split or smuggle the `Location` header),
/// at most [`MAX_URL_BYTES`].
pub fn validate_url(url: &str) -> Result<(), LinkError> {
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
