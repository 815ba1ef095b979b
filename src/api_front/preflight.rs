//! A browser's CORS preflight of an API path (`route::Route::Preflight`, `api::cors`): 204
//! with the methods the path takes (`Allow` and `Access-Control-Allow-Methods`), and the
//! other CORS fields if the page's origin may call. No key is asked: browsers send none with
//! a preflight.

use super::{ApiFront, GLOBAL_STATS, STATS_SUFFIX, URLS};
use crate::http::encode::Framing;
use crate::http::Request;

impl ApiFront {
    /// Answers the preflight `req` into `out`.
    pub fn preflight(&self, out: &mut Vec<u8>, req: &Request<'_>, f: Framing<'_>) {
        let methods = if req.path.starts_with(super::shlink::SHLINK_PREFIX) {
            super::shlink::methods_of(req.path)
        } else {
            native_methods_of(req.path)
        };
        let f = Framing {
            cors: self.cors_for(req),
            ..f
        };
        crate::api::cors::encode_preflight(out, methods, f);
    }
}

/// The methods a native API path takes; every method of the API for a path it does not
/// know (the request itself then gets its 404).
fn native_methods_of(path: &[u8]) -> &'static [u8] {
    let item = path.strip_prefix(URLS).and_then(|r| r.strip_prefix(b"/"));
    if path == URLS {
        b"GET, HEAD, POST, OPTIONS"
    } else if path == GLOBAL_STATS || path == crate::api::openapi::OPENAPI_PATH {
        b"GET, HEAD, OPTIONS"
    } else if item.is_some_and(|k| k.ends_with(STATS_SUFFIX)) {
        b"GET, HEAD, DELETE, OPTIONS"
    } else if item.is_some() {
        b"GET, HEAD, PATCH, DELETE, OPTIONS"
    } else if let Some(tags) = super::tags::TagsPath::of(path) {
        match tags {
            super::tags::TagsPath::List => b"GET, OPTIONS",
            super::tags::TagsPath::One(_) => b"PATCH, DELETE, OPTIONS",
        }
    } else {
        crate::api::cors::CORS_ALLOW_METHODS
    }
}
