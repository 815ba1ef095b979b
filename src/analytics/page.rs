//! `GET /stats/{key}`: one static page (the same bytes for every key, so it leaks nothing) and
//! its script and stylesheet, compiled into the binary. The script reads the key from the
//! path, asks for an API key (kept in `sessionStorage`), and calls the JSON stats API. The
//! Content-Security-Policy allows only this origin's script, style and fetches: no inline
//! code, no CDN, no frames.

pub use crate::route::PAGE_PREFIX;

/// The policy every answer under [`PAGE_PREFIX`] carries.
pub const CONTENT_SECURITY_POLICY: &[u8] = b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &[u8] = include_bytes!("page/stats.html");
const JS: &[u8] = include_bytes!("page/stats.js");
const CSS: &[u8] = include_bytes!("page/stats.css");
const ICON: &[u8] = include_bytes!("page/icon.svg");

/// The content type and body for `path` (under [`PAGE_PREFIX`]), or `None` (404).
pub fn asset(path: &[u8]) -> Option<(&'static str, &'static [u8])> {
    let rest = path.strip_prefix(PAGE_PREFIX)?;
    match rest {
        b"assets/stats.js" => Some(("text/javascript; charset=utf-8", JS)),
        b"assets/stats.css" => Some(("text/css; charset=utf-8", CSS)),
        b"assets/icon.svg" => Some(("image/svg+xml", ICON)),
        key if shards::link::validate_key(key).is_ok() => Some(("text/html; charset=utf-8", HTML)),
        _ => None,
    }
}

/// The headers every page answer carries.
pub fn headers() -> [(&'static str, &'static [u8]); 4] {
    [
        ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
        ("X-Content-Type-Options", b"nosniff"),
        ("Referrer-Policy", b"no-referrer"),
        ("Cache-Control", b"no-cache"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_the_same_for_every_key_and_has_no_inline_code() {
        assert_eq!(
            asset(b"/stats/abc").unwrap().1,
            asset(b"/stats/zzz_9").unwrap().1
        );
        assert!(asset(b"/stats/a/b").is_none());
        assert!(asset(b"/stats/").is_none());
        let html = std::str::from_utf8(HTML).unwrap();
        assert!(
            !html.contains("<script>") && !html.contains(" on"),
            "no inline script or handlers"
        );
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "nothing from elsewhere"
        );
    }
}
