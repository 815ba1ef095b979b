//! Which handler answers a request: one pure function of the method and the path, decided
//! once per request before anything is answered (`conns::requests` then calls that handler).
//!
//! On the redirect path: no allocation, no lock, a few comparisons of the path's first bytes.

use crate::http::location::Reshape;
use crate::http::{Method, Request};

/// Prefix of every native API path (`api_front`).
pub const API_PREFIX: &[u8] = b"/api/";
/// Where Shlink's REST API lives (`api_front::shlink`).
pub const SHLINK_PREFIX: &[u8] = b"/rest/";
/// Path prefix of the stats page and its assets (`analytics::page`).
pub const PAGE_PREFIX: &[u8] = b"/stats/";

/// What `OPTIONS *` allows: every method some path of the server takes.
pub const SERVER_METHODS: &[u8] = b"GET, HEAD, POST, PATCH, DELETE, OPTIONS";
/// What `OPTIONS /{key}` allows.
pub const KEY_METHODS: &[u8] = b"GET, HEAD, OPTIONS";
/// The methods of the read-only endpoints (probes, the stats page, keys).
pub const READ_METHODS: &str = "GET, HEAD";

/// The handler of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET` or `HEAD /{key}`: the redirect (the key is valid, not yet known to exist).
    Redirect(&'a [u8]),
    /// `GET` or `HEAD /{key}/...`: a redirect with an extra path (from its `/`), answered
    /// as [`VisitRules::extra`] says.
    RedirectExtra { key: &'a [u8], extra: &'a [u8] },
    /// `/healthz`, `/livez`, `/readyz` (`probes`).
    Probe,
    /// `/metrics` (OpenMetrics text).
    Metrics,
    /// The OpenAPI document.
    OpenApi,
    /// The stats page and its assets (`analytics::page`).
    StatsPage,
    /// `/robots.txt`: crawlers may follow only the domain's `crawlable` links
    /// (`api_front::robots`). `.` is not a key character, so no link is named `robots.txt`.
    Robots,
    /// The native link API under `/api/` (`api_front`).
    Api,
    /// Shlink's REST API under `/rest/` (`api_front::shlink`).
    ShlinkApi,
    /// `OPTIONS *` or `OPTIONS /{key}`: 204 with this `Allow` list.
    Options(&'static [u8]),
    /// `OPTIONS` of an API path: a browser's CORS preflight (`api::cors`), answered without
    /// a key.
    Preflight,
    /// A method the server does not recognize: 501 (RFC 9110 section 9.1).
    NotImplemented,
    /// A read-only path asked with another method: 405 with this `Allow` list.
    MethodNotAllowed(&'static str),
    /// No such path, or a path that cannot be a key: 404.
    NotFound,
}

/// The handler of `req`. The order matters where paths overlap: `/metrics` and the probes
/// would otherwise be keys, and the OpenAPI document lies under the API's prefix.
pub fn route<'a>(req: &Request<'a>) -> Route<'a> {
    let path = req.path;
    let read = matches!(req.method, Method::Get | Method::Head);
    let key = || {
        path.get(1..)
            .filter(|k| shards::link::validate_key(k).is_ok())
    };
    match req.method {
        Method::Other => return Route::NotImplemented,
        Method::Options if path == b"*" => return Route::Options(SERVER_METHODS),
        Method::Options if key().is_some() => return Route::Options(KEY_METHODS),
        Method::Options if path.starts_with(API_PREFIX) || path.starts_with(SHLINK_PREFIX) => {
            return Route::Preflight
        }
        _ => {}
    }
    if path == b"/metrics" && read {
        return Route::Metrics;
    }
    if matches!(path, b"/healthz" | b"/livez" | b"/readyz") {
        return if read {
            Route::Probe
        } else {
            Route::MethodNotAllowed(READ_METHODS)
        };
    }
    if path == crate::api::openapi::OPENAPI_PATH && read {
        return Route::OpenApi;
    }
    if path == b"/robots.txt" {
        return if read {
            Route::Robots
        } else {
            Route::MethodNotAllowed(READ_METHODS)
        };
    }
    if path.starts_with(PAGE_PREFIX) {
        return if read {
            Route::StatsPage
        } else {
            Route::MethodNotAllowed(READ_METHODS)
        };
    }
    if path.starts_with(SHLINK_PREFIX) {
        return Route::ShlinkApi;
    }
    if path.starts_with(API_PREFIX) {
        return Route::Api;
    }
    match key() {
        Some(_) if !read => Route::MethodNotAllowed(READ_METHODS),
        Some(k) => Route::Redirect(k),
        None if !read => Route::NotFound,
        None => match extra_path(path) {
            Some((key, extra)) => Route::RedirectExtra { key, extra },
            None => Route::NotFound,
        },
    }
}

/// `/{key}/rest`: the key and `/rest`.
fn extra_path(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let slash = 1 + memchr::memchr(b'/', path.get(1..)?)?;
    let key = &path[1..slash];
    shards::link::validate_key(key).ok()?;
    Some((key, &path[slash..]))
}

/// What a path after a link's key does (`serve --extra-path`; Shlink's
/// `REDIRECT_EXTRA_PATH_MODE`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ExtraPath {
    /// `/{key}/more` is 404, as any unknown path.
    #[default]
    NotFound,
    /// Appended to the target's path: `/{key}/more` goes to `<target path>/more`.
    Append,
    /// Dropped: `/{key}/more` goes where `/{key}` does.
    Ignore,
}

/// How a visit shapes its redirect, for every link of the server (`serve --extra-path`,
/// `--forward-query`, `--trailing-slash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VisitRules {
    pub extra_path: ExtraPath,
    /// The visitor's query is forwarded into the target's (`http::location`).
    pub forward_query: bool,
    /// `/{key}/` is `/{key}`, whatever `extra_path` says.
    pub trailing_slash: bool,
}

impl ExtraPath {
    /// Its name on the command line and in the domain book.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtraPath::NotFound => "not-found",
            ExtraPath::Append => "append",
            ExtraPath::Ignore => "ignore",
        }
    }

    /// From [`Self::as_str`].
    pub fn parse(s: &str) -> Option<ExtraPath> {
        [ExtraPath::NotFound, ExtraPath::Append, ExtraPath::Ignore]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

impl VisitRules {
    /// The extra path a redirect of `/{key}{extra}` appends (empty: none), or `None`: the
    /// request is answered 404.
    pub fn extra<'a>(&self, extra: &'a [u8]) -> Option<&'a [u8]> {
        if extra == b"/" && self.trailing_slash {
            return Some(b"");
        }
        match self.extra_path {
            ExtraPath::NotFound => None,
            ExtraPath::Append => Some(extra),
            ExtraPath::Ignore => Some(b""),
        }
    }

    /// The reshaping of a redirect with (judged) extra path `extra` and request query
    /// `query`. The query is carried whatever `forward_query` says: a link's own
    /// `forward_query` overrides it once the link is found (`Counted::answer`).
    #[inline]
    pub fn reshape<'a>(&self, extra: &'a [u8], query: Option<&'a [u8]>) -> Reshape<'a> {
        Reshape {
            extra,
            query: query.unwrap_or(b""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::parse_request;

    fn route_of(head: &str) -> Route<'static> {
        let bytes: &'static [u8] = format!("{head}\r\nHost: x\r\n\r\n").into_bytes().leak();
        let req = parse_request(bytes).expect("parses").expect("complete");
        route(&req)
    }

    #[test]
    fn each_path_has_its_handler() {
        assert_eq!(route_of("GET /abc HTTP/1.1"), Route::Redirect(b"abc"));
        assert_eq!(route_of("HEAD /abc?x=1 HTTP/1.1"), Route::Redirect(b"abc"));
        assert_eq!(route_of("GET /metrics HTTP/1.1"), Route::Metrics);
        assert_eq!(route_of("GET /robots.txt HTTP/1.1"), Route::Robots);
        assert_eq!(route_of("HEAD /robots.txt?x HTTP/1.1"), Route::Robots);
        assert_eq!(
            route_of("POST /robots.txt HTTP/1.1"),
            Route::MethodNotAllowed(READ_METHODS)
        );
        assert_eq!(route_of("GET /readyz HTTP/1.1"), Route::Probe);
        assert_eq!(route_of("HEAD /livez HTTP/1.1"), Route::Probe);
        assert_eq!(
            route_of("GET /api/v1/openapi.json HTTP/1.1"),
            Route::OpenApi
        );
        assert_eq!(route_of("POST /api/v1/openapi.json HTTP/1.1"), Route::Api);
        assert_eq!(route_of("GET /stats/abc HTTP/1.1"), Route::StatsPage);
        assert_eq!(route_of("POST /api/v1/urls HTTP/1.1"), Route::Api);
        assert_eq!(
            route_of("GET /rest/v3/short-urls HTTP/1.1"),
            Route::ShlinkApi
        );
    }

    #[test]
    fn methods_and_paths_outside_the_routes_are_refused_as_rfc_9110_says() {
        assert_eq!(route_of("BREW /abc HTTP/1.1"), Route::NotImplemented);
        assert_eq!(
            route_of("OPTIONS * HTTP/1.1"),
            Route::Options(SERVER_METHODS)
        );
        assert_eq!(
            route_of("OPTIONS /abc HTTP/1.1"),
            Route::Options(KEY_METHODS)
        );
        assert_eq!(
            route_of("POST /abc HTTP/1.1"),
            Route::MethodNotAllowed(READ_METHODS)
        );
        assert_eq!(
            route_of("DELETE /healthz HTTP/1.1"),
            Route::MethodNotAllowed(READ_METHODS)
        );
        assert_eq!(
            route_of("PUT /stats/x HTTP/1.1"),
            Route::MethodNotAllowed(READ_METHODS)
        );
        // `/metrics` asked with another method is the key `metrics`.
        assert_eq!(
            route_of("POST /metrics HTTP/1.1"),
            Route::MethodNotAllowed(READ_METHODS)
        );
        assert_eq!(
            route_of("GET /a/b/c?d HTTP/1.1"),
            Route::RedirectExtra {
                key: b"a",
                extra: b"/b/c"
            }
        );
        assert_eq!(
            route_of("HEAD /a/ HTTP/1.1"),
            Route::RedirectExtra {
                key: b"a",
                extra: b"/"
            }
        );
        assert_eq!(route_of("POST /a/b HTTP/1.1"), Route::NotFound);
        assert_eq!(route_of("GET /a.b/c HTTP/1.1"), Route::NotFound);
        assert_eq!(route_of("GET //c HTTP/1.1"), Route::NotFound);
        assert_eq!(route_of("GET / HTTP/1.1"), Route::NotFound);
    }

    #[test]
    fn visit_rules_judge_extra_paths_and_forward_queries() {
        let mut v = VisitRules::default();
        assert_eq!(v.extra(b"/x"), None);
        assert_eq!(v.extra(b"/"), None);
        assert_eq!(v.reshape(b"", None), Reshape::NONE);
        v.trailing_slash = true;
        assert_eq!(v.extra(b"/"), Some(&b""[..]));
        assert_eq!(v.extra(b"/x"), None);
        v.extra_path = ExtraPath::Append;
        assert_eq!(v.extra(b"/x/y"), Some(&b"/x/y"[..]));
        v.extra_path = ExtraPath::Ignore;
        assert_eq!(v.extra(b"/x/y"), Some(&b""[..]));
        v.forward_query = true;
        let r = v.reshape(b"", Some(b"a=1"));
        assert_eq!((r.extra, r.query), (&b""[..], &b"a=1"[..]));
    }
}
