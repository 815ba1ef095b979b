//! Cross-origin calls to the APIs (CORS, issue 28): Shlink's hosted web client and every app
//! that embeds its web component run on another origin than the server, so a browser asks
//! first (a preflight `OPTIONS`) and then reads an answer only if it names the page's origin.
//!
//! `--cors-origins` says which origins may call: `*` (the default, as Shlink's) lets any page
//! call with a key it holds, a comma-separated list only those origins, `none` no other
//! origin. The APIs authenticate by a header (`X-Api-Key`, `Authorization`), never by a
//! cookie, so no answer allows credentials: a page learns nothing its caller's key would not
//! tell it anyway.
//!
//! What goes out:
//! - A preflight of any path under `/api/` or `/rest/` (`route::Route::Preflight`): 204 with
//!   `Allow`, and for an allowed origin `Access-Control-Allow-Origin`, `-Allow-Methods`,
//!   `-Allow-Headers` ([`CORS_ALLOW_HEADERS`]) and `-Max-Age` ([`CORS_MAX_AGE_S`]). No key is
//!   asked: a browser sends none with a preflight.
//! - Every API answer, immediate or deferred to an owner core, error or not:
//!   `Access-Control-Allow-Origin` and `Access-Control-Expose-Headers`
//!   ([`CORS_EXPOSE_HEADERS`]), written by `http::encode::encode_response` from
//!   `Framing::cors`; with a list, the origin echoed and `Vary: Origin`.
//! - Redirects, probes, metrics, the stats page, `robots.txt`: nothing. The redirect path
//!   neither reads the `Origin` field's value nor writes a byte more.

/// How long a browser may reuse a preflight's answer, in seconds (Shlink sends 3600).
pub const CORS_MAX_AGE_S: u32 = 3600;
/// Origins `--cors-origins` may list.
pub const MAX_CORS_ORIGINS: usize = 64;
/// Request fields a cross-origin page may send (`Access-Control-Allow-Headers`).
pub const CORS_ALLOW_HEADERS: &[u8] =
    b"Accept, Authorization, Content-Type, Idempotency-Key, X-Api-Key, X-Request-Id";
/// Every method of the APIs: a preflight's `Allow` for an API path that is not known.
pub const CORS_ALLOW_METHODS: &[u8] = b"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
pub use crate::http::encode::CORS_EXPOSE_HEADERS;

/// Which origins may call the APIs (`--cors-origins`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CorsOrigins {
    /// Any origin: answers say `Access-Control-Allow-Origin: *`.
    #[default]
    Any,
    /// No other origin: answers carry no CORS field.
    Off,
    /// Only these (ASCII-serialized origins, `scheme://host[:port]`), kept for the process's
    /// life: a deferred answer names its origin long after its request's bytes are gone.
    Listed(&'static [&'static str]),
}

impl CorsOrigins {
    /// `*`, `none`, or a comma-separated list of origins (`https://app.example`); a readable
    /// error naming the entry otherwise.
    pub fn parse(s: &str) -> Result<CorsOrigins, String> {
        match s.trim() {
            "*" => return Ok(CorsOrigins::Any),
            "none" => return Ok(CorsOrigins::Off),
            _ => {}
        }
        let mut listed: Vec<&'static str> = Vec::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let origin = parse_origin(entry)?;
            if !listed.contains(&origin.as_str()) {
                listed.push(Box::leak(origin.into_boxed_str()));
            }
        }
        if listed.is_empty() {
            return Err("expected `*`, `none` or a comma-separated list of origins".into());
        }
        if listed.len() > MAX_CORS_ORIGINS {
            return Err(format!(
                "{} origins listed; at most {MAX_CORS_ORIGINS}",
                listed.len()
            ));
        }
        Ok(CorsOrigins::Listed(Box::leak(listed.into_boxed_slice())))
    }

    /// The `Access-Control-Allow-Origin` value for a request with this `Origin` field, if
    /// it may read the answer.
    #[inline]
    pub fn allow(&self, origin: Option<&[u8]>) -> Option<&'static str> {
        match self {
            CorsOrigins::Any => Some("*"),
            CorsOrigins::Off => None,
            CorsOrigins::Listed(list) => {
                let origin = origin?.trim_ascii();
                list.iter()
                    .find(|o| o.as_bytes().eq_ignore_ascii_case(origin))
                    .copied()
            }
        }
    }
}

/// `entry` as the origin a browser sends: `scheme://host[:port]`, the port only if not the
/// scheme's default, and nothing after it.
fn parse_origin(entry: &str) -> Result<String, String> {
    let url = url::Url::parse(entry).map_err(|e| format!("origin `{entry}`: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "origin `{entry}`: the scheme must be http or https"
        ));
    }
    let bare = url.path() == "/" && url.query().is_none() && url.fragment().is_none();
    if !bare || !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "origin `{entry}`: an origin is scheme://host[:port], with no path, query or user"
        ));
    }
    Ok(url.origin().ascii_serialization())
}

/// The answer to a preflight (`OPTIONS` under the APIs): 204 with the path's `methods`,
/// and the CORS fields if `f.cors` allows the page's origin.
pub fn encode_preflight(out: &mut Vec<u8>, methods: &[u8], f: crate::http::encode::Framing<'_>) {
    let max_age = itoa::Buffer::new().format(CORS_MAX_AGE_S).to_owned();
    let allowed: &[(&str, &[u8])] = &[
        ("Allow", methods),
        ("Access-Control-Allow-Methods", methods),
        ("Access-Control-Allow-Headers", CORS_ALLOW_HEADERS),
        ("Access-Control-Max-Age", max_age.as_bytes()),
    ];
    let r = crate::http::encode::Response {
        status: crate::http::Status::NoContent,
        headers: if f.cors.is_some() {
            allowed
        } else {
            &allowed[..1]
        },
        content_type: None,
        body: b"",
    };
    crate::http::encode::encode_response(out, &r, f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_as_browsers_send_them() {
        assert_eq!(CorsOrigins::parse("*"), Ok(CorsOrigins::Any));
        assert_eq!(CorsOrigins::parse("none"), Ok(CorsOrigins::Off));
        let CorsOrigins::Listed(l) = CorsOrigins::parse(
            "https://App.example:443, http://localhost:8080/,https://app.example",
        )
        .unwrap() else {
            panic!("a list");
        };
        assert_eq!(l, &["https://app.example", "http://localhost:8080"]);
        for bad in [
            "",
            "ftp://x.example",
            "https://x.example/path",
            "nope",
            "https://u@x.example",
        ] {
            let e = CorsOrigins::parse(bad).unwrap_err();
            assert!(e.contains("origin") || e.contains("expected"), "{bad}: {e}");
        }
        let many: Vec<String> = (0..=MAX_CORS_ORIGINS)
            .map(|i| format!("https://o{i}.example"))
            .collect();
        assert!(CorsOrigins::parse(&many.join(","))
            .unwrap_err()
            .contains("at most"));
    }

    #[test]
    fn a_listed_origin_is_echoed_and_others_get_nothing() {
        let list = CorsOrigins::parse("https://app.example,http://localhost:3000").unwrap();
        assert_eq!(
            list.allow(Some(b"https://app.example")),
            Some("https://app.example")
        );
        assert_eq!(
            list.allow(Some(b"HTTP://LOCALHOST:3000")),
            Some("http://localhost:3000")
        );
        assert_eq!(list.allow(Some(b"https://evil.example")), None);
        assert_eq!(list.allow(None), None);
        assert_eq!(CorsOrigins::Any.allow(None), Some("*"));
        assert_eq!(CorsOrigins::Off.allow(Some(b"https://app.example")), None);
    }
}
