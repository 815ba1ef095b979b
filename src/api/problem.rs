//! Error answers as RFC 9457 problem details (`application/problem+json`).
//!
//! Every problem carries a specific `type` URI under [`PROBLEM_TYPE_BASE`] rather than
//! `about:blank`, so a client can branch on `type` alone: several causes share a status (400 for
//! bad JSON and for a bad header, 422 for a bad field and for a reused idempotency key).
//! The URIs are identifiers; nothing has to be served at them.
//!
//! Serialized as `{"type","title","status","detail","field"?}`. `field` names the offending
//! JSON member when there is exactly one. `Retry-After` is not in the body: handlers read
//! [`Problem::retry_after_s`] and send the header.

use serde::Serialize;

/// The `Content-Type` of every problem response.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Prefix of every problem `type` URI.
pub const PROBLEM_TYPE_BASE: &str = "https://ricochet.dev/problems/";

/// An error answer: status, machine-readable type, human-readable title and detail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// URI identifying the kind of problem, e.g. `https://ricochet.dev/problems/invalid-field`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// Short summary of the kind of problem; the same for every instance of a `type`.
    pub title: &'static str,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong with this request, for a human.
    pub detail: String,
    /// The request body member at fault, when there is exactly one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'static str>,
    /// Seconds the client should wait before retrying (sent as `Retry-After`, not in the body).
    #[serde(skip)]
    retry_after_s: Option<u64>,
}

macro_rules! problem_type {
    ($slug:literal) => {
        concat!("https://ricochet.dev/problems/", $slug)
    };
}

impl Problem {
    fn new(status: u16, type_: &'static str, title: &'static str, detail: String) -> Problem {
        debug_assert!(type_.starts_with(PROBLEM_TYPE_BASE));
        Problem {
            status,
            type_,
            title,
            detail,
            field: None,
            retry_after_s: None,
        }
    }

    /// 400: the body is not valid JSON, not an object, or repeats a member.
    pub fn bad_json(detail: impl Into<String>) -> Problem {
        Problem::new(
            400,
            problem_type!("bad-json"),
            "Malformed JSON body",
            detail.into(),
        )
    }

    /// 400: a request header (e.g. `Idempotency-Key`) is malformed.
    pub fn invalid_header(header: &'static str, detail: impl Into<String>) -> Problem {
        Problem::new(
            400,
            problem_type!("invalid-header"),
            "Invalid request header",
            format!("{header}: {}", detail.into()),
        )
    }

    /// 422: the JSON is well formed but a member is missing, of the wrong type, or not allowed.
    /// `field` is `None` when the fault is not one member (an unknown member, an empty patch).
    pub fn invalid_field(field: Option<&'static str>, detail: impl Into<String>) -> Problem {
        let mut p = Problem::new(
            422,
            problem_type!("invalid-field"),
            "Invalid request field",
            detail.into(),
        );
        p.field = field;
        p
    }

    /// 401: no API key, or one that is unknown or revoked. Handlers also send
    /// `WWW-Authenticate: Bearer`.
    pub fn unauthorized() -> Problem {
        Problem::new(
            401,
            problem_type!("unauthorized"),
            "Unauthorized",
            "send a valid API key as 'Authorization: Bearer <key>'".to_owned(),
        )
    }

    /// 403: the key's role is read-only and the request would change something
    /// (`api::roles`).
    pub fn read_only_key() -> Problem {
        Problem::new(
            403,
            problem_type!("read-only-key"),
            "Read-only API key",
            "this API key may only read links and stats".to_owned(),
        )
    }

    /// 403: a create on a domain the key's role does not reach (`api::roles`). Only a create
    /// hears this: for an existing link, a domain out of reach is 404, so nothing leaks.
    pub fn domain_not_allowed(domain: &str) -> Problem {
        let mut p = Problem::new(
            403,
            problem_type!("domain-not-allowed"),
            "Domain not allowed",
            format!("this API key may not create links on {domain}"),
        );
        p.field = Some("domain");
        p
    }

    /// 403: an endpoint for admin keys only (Shlink's domain redirects edit), asked by a key
    /// with a role.
    pub fn admin_only() -> Problem {
        Problem::new(
            403,
            problem_type!("admin-only"),
            "Admin keys only",
            "this endpoint is for API keys without a role (admin)".to_owned(),
        )
    }

    /// 422: a key with a role asked for figures summed over its links (`GET /api/v1/stats`),
    /// and it reaches more than `limit` of them.
    pub fn too_many_links(limit: u32) -> Problem {
        Problem::new(
            422,
            problem_type!("too-many-links"),
            "Too many links",
            format!("this API key reaches more than {limit} links, more than the server-wide stats sum for a key with a role; read each link's stats instead"),
        )
    }

    /// 422: the target is on the abuse blocklist (`--blocklist`); `entry` is the matching
    /// line's entry.
    pub fn blocked_target(entry: &crate::api::blocklist::Entry) -> Problem {
        let mut p = Problem::new(
            422,
            problem_type!("blocked-target"),
            "Blocked target",
            format!("the target is on this server's blocklist (entry {entry})"),
        );
        p.field = Some("long_url");
        p
    }

    /// 404: no live link has this key.
    pub fn not_found() -> Problem {
        Problem::new(
            404,
            problem_type!("not-found"),
            "Not found",
            "no link with this key".to_owned(),
        )
    }

    /// 405: the path exists but not for this method. Handlers also send `Allow`.
    pub fn method_not_allowed() -> Problem {
        Problem::new(
            405,
            problem_type!("method-not-allowed"),
            "Method not allowed",
            "this resource does not support the request method".to_owned(),
        )
    }

    /// 409: the requested custom alias is already a key.
    pub fn alias_taken() -> Problem {
        let mut p = Problem::new(
            409,
            problem_type!("alias-taken"),
            "Alias already taken",
            "a link with this custom_alias already exists".to_owned(),
        );
        p.field = Some("custom_alias");
        p
    }

    /// 409: a tag rename's new name is on a link already (merging two tags is not a rename).
    pub fn tag_conflict() -> Problem {
        let mut p = Problem::new(
            409,
            problem_type!("tag-conflict"),
            "Tag already exists",
            "a link already carries the new tag name".to_owned(),
        );
        p.field = Some("name");
        p
    }

    /// 413: the body is larger than `limit_bytes`.
    pub fn payload_too_large(limit_bytes: usize) -> Problem {
        Problem::new(
            413,
            problem_type!("payload-too-large"),
            "Payload too large",
            format!("request body is larger than {limit_bytes} bytes"),
        )
    }

    /// 415: the body is not `application/json`.
    pub fn unsupported_media_type() -> Problem {
        Problem::new(
            415,
            problem_type!("unsupported-media-type"),
            "Unsupported media type",
            "send the body as 'Content-Type: application/json'".to_owned(),
        )
    }

    /// 422: this `Idempotency-Key` was already used with a different request body.
    pub fn idempotency_mismatch() -> Problem {
        Problem::new(
            422,
            problem_type!("idempotency-mismatch"),
            "Idempotency key reused",
            "this Idempotency-Key was used with a different request; use a new key".to_owned(),
        )
    }

    /// 429: this API key is over its rate limit; retry after `retry_after_s` seconds.
    pub fn rate_limited(retry_after_s: u64) -> Problem {
        let mut p = Problem::new(
            429,
            problem_type!("rate-limited"),
            "Too many requests",
            format!("rate limit exceeded; retry after {retry_after_s} s"),
        );
        p.retry_after_s = Some(retry_after_s);
        p
    }

    /// 503: the server cannot take this request now (overload, recovery); retry after
    /// `retry_after_s` seconds.
    pub fn unavailable(retry_after_s: u64) -> Problem {
        let mut p = Problem::new(
            503,
            problem_type!("unavailable"),
            "Service unavailable",
            format!("the server is temporarily unable to handle this request; retry after {retry_after_s} s"),
        );
        p.retry_after_s = Some(retry_after_s);
        p
    }

    /// 503 without `Retry-After`: the fleet's allocation authority lost allocations this node
    /// had confirmed, so generated keys could repeat; an operator must intervene.
    pub fn allocation_fenced() -> Problem {
        Problem::new(
            503,
            problem_type!("allocation-fenced"),
            "ID allocation fenced",
            "the fleet's allocation authority no longer holds allocations this node confirmed \
             (a rolled-back or restored database); creates with generated keys are refused until \
             an operator follows the rollback runbook (docs/fleet.md) and restarts this node. \
             Redirects and creates with a custom_alias keep working."
                .to_string(),
        )
    }

    /// 503 without `Retry-After`: the fleet database that answers failed this node's checks
    /// (`why`); the type names the reason (`database-refused-schema`, `-secret`, `-namespace`).
    pub fn database_refused(why: fleet::DbRefusal) -> Problem {
        Problem::new(
            503,
            match why {
                fleet::DbRefusal::Unchecked => problem_type!("database-refused-unchecked"),
                fleet::DbRefusal::Schema => problem_type!("database-refused-schema"),
                fleet::DbRefusal::Secret => problem_type!("database-refused-secret"),
                fleet::DbRefusal::Namespace => problem_type!("database-refused-namespace"),
            },
            "Fleet database refused",
            format!(
                "{}. Nothing was written. Redirects of the links this node holds keep working; \
                 creates and edits resume once the database passes the check (every {} ms).",
                why.explain(),
                fleet::DB_REFUSED_RECHECK_MS
            ),
        )
    }

    /// 507: storage is full; no new links can be stored.
    pub fn insufficient_storage() -> Problem {
        Problem::new(
            507,
            problem_type!("insufficient-storage"),
            "Insufficient storage",
            "the server has no room for new links".to_owned(),
        )
    }

    /// 500: an unexpected server-side failure. `detail` must not leak internals.
    pub fn internal() -> Problem {
        Problem::new(
            500,
            problem_type!("internal"),
            "Internal server error",
            "the server failed to handle this request".to_owned(),
        )
    }

    /// Seconds to send as `Retry-After`, for 429 and 503.
    pub fn retry_after_s(&self) -> Option<u64> {
        self.retry_after_s
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing strings and integers into a Vec cannot fail.
        serde_json::to_vec(self).expect("problem serializes")
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.title, self.detail)
    }
}

impl std::error::Error for Problem {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn body(p: &Problem) -> Value {
        serde_json::from_slice(&p.to_json()).unwrap()
    }

    #[test]
    fn serializes_members_in_order() {
        let p = Problem::invalid_field(Some("long_url"), "URL has no host");
        let text = String::from_utf8(p.to_json()).unwrap();
        assert_eq!(
            text,
            r#"{"type":"https://ricochet.dev/problems/invalid-field","title":"Invalid request field","status":422,"detail":"URL has no host","field":"long_url"}"#
        );
    }

    #[test]
    fn omits_absent_field_and_retry_after() {
        let v = body(&Problem::rate_limited(7));
        assert_eq!(
            v,
            json!({
                "type": "https://ricochet.dev/problems/rate-limited",
                "title": "Too many requests",
                "status": 429,
                "detail": "rate limit exceeded; retry after 7 s",
            })
        );
        assert_eq!(Problem::rate_limited(7).retry_after_s(), Some(7));
        assert_eq!(Problem::unavailable(3).retry_after_s(), Some(3));
        assert_eq!(Problem::not_found().retry_after_s(), None);
    }

    #[test]
    fn statuses_and_types_are_distinct() {
        let all = [
            Problem::bad_json("x"),
            Problem::invalid_header("Idempotency-Key", "x"),
            Problem::invalid_field(None, "x"),
            Problem::unauthorized(),
            Problem::not_found(),
            Problem::method_not_allowed(),
            Problem::alias_taken(),
            Problem::payload_too_large(10),
            Problem::unsupported_media_type(),
            Problem::idempotency_mismatch(),
            Problem::rate_limited(1),
            Problem::unavailable(1),
            Problem::insufficient_storage(),
            Problem::internal(),
        ];
        let statuses: Vec<u16> = all.iter().map(|p| p.status).collect();
        assert_eq!(
            statuses,
            [400, 400, 422, 401, 404, 405, 409, 413, 415, 422, 429, 503, 507, 500]
        );
        let mut types: Vec<&str> = all.iter().map(|p| p.type_).collect();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), all.len());
        for p in &all {
            assert!(p.type_.starts_with(PROBLEM_TYPE_BASE));
            let v = body(p);
            assert_eq!(v["status"], p.status);
            assert_eq!(v["type"], p.type_);
        }
    }

    #[test]
    fn alias_taken_names_field_and_header_detail_names_header() {
        assert_eq!(body(&Problem::alias_taken())["field"], "custom_alias");
        let p = Problem::invalid_header("Idempotency-Key", "too long");
        assert_eq!(p.detail, "Idempotency-Key: too long");
        assert!(Problem::payload_too_large(32768)
            .detail
            .contains("32768 bytes"));
    }
}
