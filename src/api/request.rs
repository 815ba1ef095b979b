//! Request bodies of the link API, parsed and validated, and the link response body.
//!
//! Strictness, so that a typo never silently changes what gets stored:
//! - A body that is not JSON, not a single object, or repeats a member is 400 `bad-json`
//!   (repeated members are refused because parsers disagree on which copy wins).
//! - An unknown member is 422 `invalid-field` with `field` absent (the name is client-chosen,
//!   not one of ours) and the detail naming it and listing the allowed members.
//! - A member of the wrong type or value is 422 `invalid-field` naming it in `field`.
//! - On create, `null` for an optional member means "absent"; on patch, `"expires_at": null`
//!   clears the expiry and `null` for any other member is refused.
//!
//! Expiry: a link with `expires_at_s = Some(t)` resolves while `now < t`. `ttl_days: n` means
//! `t = now_s + n * 86400`; `expires_at` is an RFC 3339 timestamp with an offset.

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::Serialize;
use serde_json::Value;
use shards::link::{validate_key, validate_url, RedirectStatus};

use super::problem::Problem;
use super::timefmt::{format_rfc3339_utc, parse_rfc3339_s};

/// Largest accepted request body, in bytes. 32 KiB holds a URL of
/// [`shards::link::MAX_URL_BYTES`] (8 KiB) even with every non-ASCII character written as a
/// six-character `\u` escape (which at most doubles it), plus the other members, with room
/// to spare.
pub const MAX_REQUEST_BODY_BYTES: usize = 32 * 1024;

/// Longest `ttl_days`, and the furthest ahead `expires_at` may be: 3650 days (about 10 years).
/// Links meant to outlive that should have no expiry; the bound keeps expiry arithmetic far
/// from overflow and from the year-9999 end of RFC 3339.
pub const MAX_TTL_DAYS: u32 = 3650;

/// Seconds in a day, for `ttl_days`.
const DAY_S: u64 = 86_400;

/// Custom aliases refused even though they are valid keys, compared ASCII case-insensitively:
/// names the server routes itself or may route later (`api`, `healthz`, `readyz`, `livez`,
/// `metrics`, `status`, `static`, `assets`, `robots`, `favicon`, `docs`), and names that make a
/// short link look like part of the service (`admin`, `login`, `logout`, `signup`, `account`,
/// `settings`, `www`), a phishing aid. Names with a `.` (`robots.txt`, `favicon.ico`) can never
/// be keys, so they need no entry.
pub const RESERVED_ALIASES: &[&str] = &[
    "api", "healthz", "readyz", "livez", "metrics", "status", "static", "assets", "robots",
    "favicon", "docs", "admin", "login", "logout", "signup", "account", "settings", "www",
];

/// Whether `alias` is in [`RESERVED_ALIASES`], ignoring ASCII case.
pub fn is_reserved_alias(alias: &str) -> bool {
    RESERVED_ALIASES
        .iter()
        .any(|r| r.eq_ignore_ascii_case(alias))
}

/// A validated `POST /api/v1/urls` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRequest {
    /// Target URL, as sent; passes `validate_url`.
    pub long_url: String,
    /// Requested key; passes `validate_key` and is not reserved. `None`: the server picks one.
    pub custom_alias: Option<String>,
    /// Unix second at which the link stops resolving; `None`: never.
    pub expires_at_s: Option<u64>,
    /// The `ttl_days` sent, if the expiry was given that way. Kept because the idempotency hash
    /// covers what the client sent (a retry a second later derives a different `expires_at_s`).
    pub ttl_days: Option<u32>,
    /// Redirect status; 302 when not given.
    pub redirect_status: RedirectStatus,
    /// The `domain` sent (`None`: the default domain), as sent.
    pub domain: Option<String>,
    /// The number of that domain (`api::domains`), resolved by the front against the domains
    /// in force; 0 (the default domain) until then.
    pub domain_number: u32,
    /// The API key that sends it (set by the front, never from the body): the link records
    /// it as its author.
    pub author: shards::link::Author,
    /// `valid_since` and `forward_query` (a create cannot disable).
    pub behaviour: shards::behaviour::Behaviour,
    /// `redirect_rules` (`shards::rules`).
    pub rules: shards::rules::Rules,
    /// `title` and `tags` (`shards::labels`), normalized.
    pub labels: shards::labels::Labels,
}

impl CreateRequest {
    /// The stored key of `key` on this request's domain (`shards::link::stored_key`).
    pub fn stored_key(&self, key: &[u8]) -> crate::base::key::InlineKey {
        let mut buf = [0u8; shards::link::MAX_STORED_KEY_BYTES];
        let n = shards::link::stored_key(self.domain_number, key, &mut buf);
        crate::base::key::InlineKey::new(&buf[..n]).expect("a stored key fits inline")
    }
}

/// What a patch does to a link's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryUpdate {
    /// Leave the expiry as it is.
    Keep,
    /// Remove the expiry: the link lives until deleted.
    Clear,
    /// Expire at this Unix second.
    Set(u64),
}

/// What a patch does to a link's behaviour (`shards::behaviour`), redirect rules and labels
/// (`shards::labels`): each `None` leaves that part as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BehaviourUpdate {
    /// New `valid_since` (0: always valid, from `null`).
    pub valid_since_s: Option<u64>,
    /// New `forward_query` (`Some(None)`: the server's, from `null`).
    pub forward_query: Option<Option<bool>>,
    /// New `max_visits` (`Some(0)`: no limit, from `null`); the visits counted stay.
    pub max_visits: Option<u64>,
    /// New disabling (`Some(None)`: enabled again, from `null`); its time and author are
    /// the front's to fill in.
    pub disabled: Option<Option<shards::behaviour::Disabled>>,
    /// New redirect rules (`Some(Rules::NONE)`: none, from `null` or `[]`).
    pub rules: Option<shards::rules::Rules>,
    /// New `crawlable` (`Some(false)` from `null`).
    pub crawlable: Option<bool>,
    /// New title, normalized (`Some(None)`: none, from `null` or `""`).
    pub title: Option<Option<String>>,
    /// New tags, normalized, sorted, deduplicated (`Some(vec![])`: none, from `null` or `[]`).
    pub tags: Option<Vec<String>>,
    /// A rename or removal of tags on whatever tags the link has when it is applied (Shlink's
    /// `PUT` and `DELETE /rest/v3/tags`), never from the API's PATCH body.
    pub retag: Option<Retag>,
}

/// Tags `from` taken off a link, and `to` put on in their place if it carried any of them
/// (`None`: removed). Normalized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retag {
    pub from: Vec<String>,
    pub to: Option<String>,
}

impl Retag {
    /// `labels` retagged, or `None` if it carries none of `from`.
    pub fn apply(&self, labels: &shards::labels::Labels) -> Option<shards::labels::Labels> {
        labels.retagged(&self.from, self.to.as_deref())
    }
}

impl BehaviourUpdate {
    /// A patch's `null` for `field`: that part removed (or back to the server's default).
    fn set_null(&mut self, field: &'static str) -> Result<(), Problem> {
        match field {
            "valid_since" => self.valid_since_s = Some(0),
            "forward_query" => self.forward_query = Some(None),
            "max_visits" => self.max_visits = Some(0),
            "disabled" => self.disabled = Some(None),
            "redirect_rules" => self.rules = Some(shards::rules::Rules::NONE),
            "crawlable" => self.crawlable = Some(false),
            "title" => self.title = Some(None),
            "tags" => self.tags = Some(Vec::new()),
            _ => {
                return Err(Problem::invalid_field(
                    Some(field),
                    format!("{field} cannot be null"),
                ))
            }
        }
        Ok(())
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == BehaviourUpdate::default()
    }

    /// Applies it to `b`, `rules` and `labels`.
    pub fn apply(
        &self,
        b: &mut shards::behaviour::Behaviour,
        rules: &mut shards::rules::Rules,
        labels: &mut shards::labels::Labels,
    ) {
        if let Some(r) = &self.rules {
            *rules = r.clone();
        }
        if let Some(t) = &self.title {
            *labels = labels
                .with_title(t.as_deref())
                .expect("a normalized title over kept tags");
        }
        if let Some(t) = &self.tags {
            *labels = labels.with_tags(t).expect("normalized tags, counted");
        }
        if let Some(next) = self.retag.as_ref().and_then(|r| r.apply(labels)) {
            *labels = next;
        }
        if let Some(v) = self.valid_since_s {
            b.valid_since_s = v;
        }
        if let Some(f) = self.forward_query {
            b.forward_query = f;
        }
        if let Some(m) = self.max_visits {
            b.max_visits = m;
            if m == 0 {
                // Visits are counted only under a limit.
                b.visits = 0;
            }
        }
        if let Some(d) = self.disabled {
            b.disabled = d;
        }
        if let Some(c) = self.crawlable {
            b.crawlable = c;
        }
    }
}

/// A validated `PATCH /api/v1/urls/{key}` body; at least one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchRequest {
    /// New target URL.
    pub long_url: Option<String>,
    /// Expiry change, from `expires_at` (a timestamp, or `null` to clear) or `ttl_days`.
    pub expiry: ExpiryUpdate,
    /// New redirect status.
    pub redirect_status: Option<RedirectStatus>,
    /// Behaviour changes (`valid_since`, `forward_query`, `disabled`).
    pub behaviour: BehaviourUpdate,
}

const CREATE_MEMBERS: &[&str] = &[
    "long_url",
    "custom_alias",
    "ttl_days",
    "expires_at",
    "redirect_status",
    "domain",
    "valid_since",
    "forward_query",
    "max_visits",
    "redirect_rules",
    "crawlable",
    "title",
    "tags",
];
const PATCH_MEMBERS: &[&str] = &[
    "long_url",
    "ttl_days",
    "expires_at",
    "redirect_status",
    "valid_since",
    "forward_query",
    "max_visits",
    "disabled",
    "redirect_rules",
    "crawlable",
    "title",
    "tags",
];

/// Parses and validates a create body at wall-clock second `now_s`.
pub fn parse_create(body: &[u8], now_s: u64) -> Result<CreateRequest, Problem> {
    let members = parse_members(body, CREATE_MEMBERS)?;
    let mut long_url = None;
    let mut custom_alias = None;
    let mut ttl_days = None;
    let mut expires_at = None;
    let mut redirect_status = RedirectStatus::default();
    let mut domain = None;
    let mut behaviour = shards::behaviour::Behaviour::NONE;
    let mut rules = shards::rules::Rules::NONE;
    let (mut title, mut tags) = (None, Vec::new());
    for (name, value) in &members {
        if value.is_null() && name != "long_url" {
            continue;
        }
        match name.as_str() {
            "long_url" => long_url = Some(parse_url(value)?),
            "custom_alias" => custom_alias = Some(parse_alias(value)?),
            "ttl_days" => ttl_days = Some(parse_ttl_days(value)?),
            "expires_at" => expires_at = Some(parse_expires_at(value, now_s)?),
            "redirect_status" => redirect_status = parse_status(value)?,
            "domain" => {
                let d = value.as_str().ok_or_else(|| {
                    Problem::invalid_field(Some("domain"), "domain must be a string")
                })?;
                domain = Some(d.to_owned());
            }
            "valid_since" => behaviour.valid_since_s = parse_time(value, "valid_since")?,
            "forward_query" => behaviour.forward_query = Some(parse_bool(value, "forward_query")?),
            "max_visits" => behaviour.max_visits = parse_max_visits(value)?,
            "redirect_rules" => rules = parse_rules(value.clone())?,
            "crawlable" => behaviour.crawlable = parse_bool(value, "crawlable")?,
            "title" => title = parse_title(value)?,
            "tags" => tags = parse_tags(value)?,
            _ => unreachable!("parse_members admits only CREATE_MEMBERS"),
        }
    }
    let labels = shards::labels::Labels::new(title.as_deref(), &tags)
        .expect("a normalized title and counted tags");
    let long_url =
        long_url.ok_or_else(|| Problem::invalid_field(Some("long_url"), "long_url is required"))?;
    let expires_at_s = expiry_from(ttl_days, expires_at, now_s)?;
    Ok(CreateRequest {
        author: shards::link::Author::NONE,
        behaviour,
        rules,
        labels,
        long_url,
        custom_alias,
        expires_at_s,
        ttl_days,
        redirect_status,
        domain,
        domain_number: shards::link::DEFAULT_DOMAIN,
    })
}

/// Parses and validates a patch body at wall-clock second `now_s`.
pub fn parse_patch(body: &[u8], now_s: u64) -> Result<PatchRequest, Problem> {
    let members = parse_members(body, PATCH_MEMBERS)?;
    let mut long_url = None;
    let mut ttl_days = None;
    let mut expires_at = None;
    let mut clear_expiry = false;
    let mut redirect_status = None;
    let mut behaviour = BehaviourUpdate::default();
    for (name, value) in &members {
        let field = member_field(name, PATCH_MEMBERS);
        if value.is_null() {
            match field {
                "expires_at" => clear_expiry = true,
                _ => behaviour.set_null(field)?,
            }
            continue;
        }
        match field {
            "long_url" => long_url = Some(parse_url(value)?),
            "ttl_days" => ttl_days = Some(parse_ttl_days(value)?),
            "expires_at" => expires_at = Some(parse_expires_at(value, now_s)?),
            "redirect_status" => redirect_status = Some(parse_status(value)?),
            "valid_since" => behaviour.valid_since_s = Some(parse_time(value, "valid_since")?),
            "forward_query" => {
                behaviour.forward_query = Some(Some(parse_bool(value, "forward_query")?));
            }
            "disabled" => behaviour.disabled = Some(Some(parse_disabled(value)?)),
            "max_visits" => behaviour.max_visits = Some(parse_max_visits(value)?),
            "redirect_rules" => behaviour.rules = Some(parse_rules(value.clone())?),
            "crawlable" => behaviour.crawlable = Some(parse_bool(value, "crawlable")?),
            "title" => behaviour.title = Some(parse_title(value)?),
            "tags" => behaviour.tags = Some(parse_tags(value)?),
            _ => unreachable!("parse_members admits only PATCH_MEMBERS"),
        }
    }
    if clear_expiry && ttl_days.is_some() {
        return Err(both_expiries());
    }
    let expiry = match expiry_from(ttl_days, expires_at, now_s)? {
        Some(t) => ExpiryUpdate::Set(t),
        None if clear_expiry => ExpiryUpdate::Clear,
        None => ExpiryUpdate::Keep,
    };
    if long_url.is_none()
        && expiry == ExpiryUpdate::Keep
        && redirect_status.is_none()
        && behaviour.is_empty()
    {
        return Err(Problem::invalid_field(
            None,
            "a patch must change at least one of long_url, expires_at, ttl_days, \
             redirect_status, valid_since, forward_query, max_visits, disabled, redirect_rules, \
             crawlable, title, tags",
        ));
    }
    Ok(PatchRequest {
        long_url,
        expiry,
        redirect_status,
        behaviour,
    })
}

/// `title`: a string, normalized (`shards::labels::normalize_title`; `None` when empty).
pub fn parse_title(value: &Value) -> Result<Option<String>, Problem> {
    let t = value
        .as_str()
        .ok_or_else(|| Problem::invalid_field(Some("title"), "title must be a string"))?;
    shards::labels::normalize_title(t).map_err(|e| Problem::invalid_field(Some("title"), e.0))
}

/// `tags`: an array of strings, normalized, sorted and deduplicated
/// (`shards::labels::normalize_tag`), at most `MAX_TAGS_PER_LINK`.
pub fn parse_tags(value: &Value) -> Result<Vec<String>, Problem> {
    let bad = || Problem::invalid_field(Some("tags"), "tags must be an array of strings");
    let raw = value
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| v.as_str().ok_or_else(bad))
        .collect::<Result<Vec<&str>, _>>()?;
    // Counted as sent: duplicates are not a way past the limit.
    if raw.len() > shards::labels::MAX_TAGS_PER_LINK {
        return Err(Problem::invalid_field(
            Some("tags"),
            format!(
                "{} tags; a link carries at most {}",
                raw.len(),
                shards::labels::MAX_TAGS_PER_LINK
            ),
        ));
    }
    let labels = shards::labels::Labels::new(None, &raw)
        .map_err(|e| Problem::invalid_field(Some("tags"), e.0))?;
    Ok(labels.tags().map(str::to_owned).collect())
}

/// The response body describing one link:
/// `{"key","short_url","long_url","created_at","expires_at","redirect_status"}`, times in RFC
/// 3339 UTC, `expires_at` `null` when the link never expires, and its behaviour's
/// `valid_since`, `forward_query` and `disabled` (`{"reason","at","by"}`) when set, and
/// always its `title` (`null`: none) and `tags` (`[]`: none).
/// `short_url` is `short_url_base` (trailing `/` ignored) + `/` + `key`.
pub fn link_json(
    (key, domain): (&str, Option<&str>),
    short_url_base: &str,
    long_url: &str,
    (created_at_s, expires_at_s): (u64, Option<u64>),
    status: RedirectStatus,
    (behaviour, rules, labels): (
        &shards::behaviour::Behaviour,
        &shards::rules::Rules,
        &shards::labels::Labels,
    ),
) -> Vec<u8> {
    #[derive(Serialize)]
    struct LinkBody<'a> {
        key: &'a str,
        /// The link's domain's name; `null` on an unnamed default domain.
        domain: Option<&'a str>,
        short_url: String,
        long_url: &'a str,
        created_at: String,
        expires_at: Option<String>,
        redirect_status: u16,
    }
    let body = LinkBody {
        key,
        domain,
        short_url: format!("{}/{key}", short_url_base.trim_end_matches('/')),
        long_url,
        created_at: format_rfc3339_utc(created_at_s),
        expires_at: expires_at_s.map(format_rfc3339_utc),
        redirect_status: status.code(),
    };
    // Serializing strings and integers into a Vec cannot fail.
    let mut out = serde_json::to_vec(&body).expect("link body serializes");
    let mut members = serde_json::Map::new();
    behaviour.put_json(&mut members);
    if !rules.is_empty() {
        let list = rules.set().decode().unwrap_or_default();
        members.insert("redirect_rules".into(), shards::rules::to_json(&list));
    }
    labels.json_members(&mut members);
    if !members.is_empty() {
        // The behaviour's members after the others: `{...}` + `{"valid_since":...}` joined.
        let more = serde_json::to_vec(&members).expect("members serialize");
        out.pop();
        out.push(b',');
        out.extend_from_slice(&more[1..]);
    }
    out
}

/// The top-level members of a JSON object, in order, refusing repeats.
struct Members(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Members, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members: Vec<(String, Value)> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if members.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format_args!(
                            "member \"{name}\" appears more than once"
                        )));
                    }
                    let value = map.next_value::<Value>()?;
                    members.push((name, value));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// Size check, JSON parse, and unknown-member check.
fn parse_members(body: &[u8], allowed: &[&'static str]) -> Result<Vec<(String, Value)>, Problem> {
    if body.len() > MAX_REQUEST_BODY_BYTES {
        return Err(Problem::payload_too_large(MAX_REQUEST_BODY_BYTES));
    }
    let Members(members) =
        serde_json::from_slice(body).map_err(|e| Problem::bad_json(e.to_string()))?;
    if let Some((name, _)) = members.iter().find(|(n, _)| !allowed.contains(&n.as_str())) {
        let hint = match name.as_str() {
            "custom_alias" | "key" => "; the key of a link cannot be changed",
            _ => "",
        };
        return Err(Problem::invalid_field(
            None,
            format!(
                "unknown member {}{hint}; allowed: {}",
                serde_json::Value::String(name.clone()),
                allowed.join(", ")
            ),
        ));
    }
    Ok(members)
}

/// The `'static` name of an allowed member (for `Problem::field`).
fn member_field(name: &str, allowed: &[&'static str]) -> &'static str {
    allowed
        .iter()
        .copied()
        .find(|a| *a == name)
        .expect("parse_members admits only allowed members")
}

fn parse_url(value: &Value) -> Result<String, Problem> {
    let url = value
        .as_str()
        .ok_or_else(|| Problem::invalid_field(Some("long_url"), "long_url must be a string"))?;
    validate_url(url).map_err(|e| Problem::invalid_field(Some("long_url"), e.to_string()))?;
    Ok(url.to_owned())
}

/// `redirect_rules`: `[{"target", "conditions": [{"type", "key"?, "value"}]}]`, each
/// target a valid link target, within `shards::rules`' limits. `[]`: none.
pub fn parse_rules(value: Value) -> Result<shards::rules::Rules, Problem> {
    let field = Some("redirect_rules");
    let json: Vec<shards::rules::JsonRule> = serde_json::from_value(value).map_err(|e| {
        Problem::invalid_field(
            field,
            format!(
                "redirect_rules must be an array of {{\"target\", \"conditions\":                  [{{\"type\", \"key\", \"value\"}}]}}: {e}"
            ),
        )
    })?;
    let rules = shards::rules::from_json(&json).map_err(|e| Problem::invalid_field(field, e.0))?;
    shards::rules::Rules::from_rules(&rules).map_err(|e| Problem::invalid_field(field, e.0))
}

fn parse_alias(value: &Value) -> Result<String, Problem> {
    let field = Some("custom_alias");
    let alias = value
        .as_str()
        .ok_or_else(|| Problem::invalid_field(field, "custom_alias must be a string"))?;
    validate_key(alias.as_bytes()).map_err(|e| Problem::invalid_field(field, e.to_string()))?;
    if is_reserved_alias(alias) {
        return Err(Problem::invalid_field(
            field,
            format!("custom_alias \"{alias}\" is reserved"),
        ));
    }
    Ok(alias.to_owned())
}

fn parse_ttl_days(value: &Value) -> Result<u32, Problem> {
    value
        .as_u64()
        .filter(|d| (1..=u64::from(MAX_TTL_DAYS)).contains(d))
        .map(|d| d as u32)
        .ok_or_else(|| {
            Problem::invalid_field(
                Some("ttl_days"),
                format!("ttl_days must be a whole number from 1 to {MAX_TTL_DAYS}"),
            )
        })
}

fn parse_expires_at(value: &Value, now_s: u64) -> Result<u64, Problem> {
    let field = Some("expires_at");
    let text = value.as_str().ok_or_else(|| {
        Problem::invalid_field(field, "expires_at must be an RFC 3339 timestamp string")
    })?;
    let t = parse_rfc3339_s(text)
        .map_err(|e| Problem::invalid_field(field, format!("expires_at: {e}")))?;
    if t <= now_s {
        return Err(Problem::invalid_field(field, "expires_at is in the past"));
    }
    if t - now_s > u64::from(MAX_TTL_DAYS) * DAY_S {
        return Err(Problem::invalid_field(
            field,
            format!("expires_at is more than {MAX_TTL_DAYS} days ahead"),
        ));
    }
    Ok(t)
}

/// An RFC 3339 time as Unix seconds (any time: a `valid_since` in the past is allowed).
fn parse_time(value: &Value, field: &'static str) -> Result<u64, Problem> {
    let text = value.as_str().ok_or_else(|| {
        Problem::invalid_field(Some(field), format!("{field} must be an RFC 3339 string"))
    })?;
    crate::api::timefmt::parse_rfc3339_s(text)
        .map_err(|e| Problem::invalid_field(Some(field), format!("{field}: {e}")))
}

/// The largest `max_visits`: JSON's largest exact integer, 2^53 - 1.
pub const MAX_VISIT_LIMIT: u64 = (1 << 53) - 1;

fn parse_max_visits(value: &Value) -> Result<u64, Problem> {
    value
        .as_u64()
        .filter(|n| (1..=MAX_VISIT_LIMIT).contains(n))
        .ok_or_else(|| {
            Problem::invalid_field(
                Some("max_visits"),
                format!("max_visits must be an integer from 1 to {MAX_VISIT_LIMIT}, or null"),
            )
        })
}

fn parse_bool(value: &Value, field: &'static str) -> Result<bool, Problem> {
    value.as_bool().ok_or_else(|| {
        Problem::invalid_field(Some(field), format!("{field} must be true, false or null"))
    })
}

/// `{"reason": "abuse" | "legal" | "owner"}`: when and by whom are the front's to fill in.
fn parse_disabled(value: &Value) -> Result<shards::behaviour::Disabled, Problem> {
    let bad = || {
        Problem::invalid_field(
            Some("disabled"),
            "disabled must be null or {\"reason\": \"abuse\" | \"legal\" | \"owner\"}",
        )
    };
    let obj = value.as_object().filter(|o| o.len() == 1).ok_or_else(bad)?;
    let reason = obj
        .get("reason")
        .and_then(Value::as_str)
        .and_then(shards::behaviour::DisabledReason::parse)
        .ok_or_else(bad)?;
    Ok(shards::behaviour::Disabled {
        reason,
        at_s: 0,
        by: shards::link::Author::NONE,
    })
}

fn parse_status(value: &Value) -> Result<RedirectStatus, Problem> {
    value
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .and_then(RedirectStatus::from_code)
        .ok_or_else(|| {
            Problem::invalid_field(
                Some("redirect_status"),
                "redirect_status must be 301, 302, 307 or 308",
            )
        })
}

fn both_expiries() -> Problem {
    Problem::invalid_field(
        Some("ttl_days"),
        "give either ttl_days or expires_at, not both",
    )
}

fn expiry_from(
    ttl_days: Option<u32>,
    expires_at: Option<u64>,
    now_s: u64,
) -> Result<Option<u64>, Problem> {
    match (ttl_days, expires_at) {
        (Some(_), Some(_)) => Err(both_expiries()),
        (Some(d), None) => Ok(Some(now_s.saturating_add(u64::from(d) * DAY_S))),
        (None, t) => Ok(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// 2030-03-17T17:46:40Z.
    const NOW: u64 = 1_900_000_000;

    fn create(v: Value) -> Result<CreateRequest, Problem> {
        parse_create(v.to_string().as_bytes(), NOW)
    }

    fn patch(v: Value) -> Result<PatchRequest, Problem> {
        parse_patch(v.to_string().as_bytes(), NOW)
    }

    #[track_caller]
    fn assert_field_err(r: Result<impl std::fmt::Debug, Problem>, field: &str, detail_has: &str) {
        let p = r.expect_err("expected a problem");
        assert_eq!(p.status, 422, "{p}");
        assert_eq!(p.field, Some(field).filter(|f| !f.is_empty()), "{p}");
        assert!(p.detail.contains(detail_has), "{p}");
    }

    #[test]
    fn minimal_create_gets_defaults() {
        let r = create(json!({"long_url": "https://example.com/a"})).unwrap();
        assert_eq!(
            r,
            CreateRequest {
                author: shards::link::Author::NONE,
                behaviour: shards::behaviour::Behaviour::NONE,
                rules: shards::rules::Rules::NONE,
                labels: shards::labels::Labels::NONE,
                long_url: "https://example.com/a".into(),
                custom_alias: None,
                expires_at_s: None,
                ttl_days: None,
                redirect_status: RedirectStatus::Found,
                domain: None,
                domain_number: 0,
            }
        );
    }

    #[test]
    fn full_create_with_ttl() {
        let r = create(json!({
            "long_url": "https://example.com/a",
            "custom_alias": "promo-2030",
            "ttl_days": 30,
            "redirect_status": 308,
        }))
        .unwrap();
        assert_eq!(r.custom_alias.as_deref(), Some("promo-2030"));
        assert_eq!(r.expires_at_s, Some(NOW + 30 * 86_400));
        assert_eq!(r.ttl_days, Some(30));
        assert_eq!(r.redirect_status, RedirectStatus::PermanentRedirect);
    }

    #[test]
    fn create_with_expires_at_and_nulls() {
        let r = create(json!({
            "long_url": "https://example.com/a",
            "custom_alias": null,
            "ttl_days": null,
            "expires_at": "2030-03-18T19:46:40+02:00",
            "redirect_status": null,
        }))
        .unwrap();
        assert_eq!(r.expires_at_s, Some(NOW + 86_400));
        assert_eq!(r.ttl_days, None);
        assert_eq!(r.custom_alias, None);
        assert_eq!(r.redirect_status, RedirectStatus::Found);
    }

    #[test]
    fn bad_json_is_400() {
        for body in [
            &b"{"[..],
            b"",
            b"[1]",
            b"\"x\"",
            b"{\"long_url\": \"https://a.b\"} x",
            b"{\"long_url\": \"https://a.b\", \"long_url\": \"https://c.d\"}",
        ] {
            let p = parse_create(body, NOW).unwrap_err();
            assert_eq!(p.status, 400, "{}", String::from_utf8_lossy(body));
            assert!(p.type_.ends_with("/bad-json"));
        }
        let p = parse_create(br#"{"a":1,"a":2}"#, NOW).unwrap_err();
        assert!(p.detail.contains("more than once"), "{p}");
    }

    #[test]
    fn oversized_body_is_413() {
        let body = vec![b' '; MAX_REQUEST_BODY_BYTES + 1];
        assert_eq!(parse_create(&body, NOW).unwrap_err().status, 413);
        assert_eq!(parse_patch(&body, NOW).unwrap_err().status, 413);
    }

    #[test]
    fn unknown_member_is_named_in_detail() {
        let p = create(json!({"long_url": "https://a.b", "ttl_day": 3})).unwrap_err();
        assert_eq!(p.status, 422);
        assert_eq!(p.field, None);
        assert!(p.detail.contains("\"ttl_day\""), "{p}");
        assert!(p.detail.contains("allowed: long_url"), "{p}");
    }

    #[test]
    fn long_url_rules() {
        assert_field_err(create(json!({})), "long_url", "required");
        assert_field_err(create(json!({"long_url": null})), "long_url", "string");
        assert_field_err(create(json!({"long_url": 5})), "long_url", "string");
        assert_field_err(create(json!({"long_url": "ftp://x"})), "long_url", "scheme");
        assert_field_err(
            create(json!({"long_url": "https://a\r\nX: y"})),
            "long_url",
            "control",
        );
    }

    #[test]
    fn alias_rules() {
        let url = "https://a.b";
        assert_field_err(
            create(json!({"long_url": url, "custom_alias": 7})),
            "custom_alias",
            "string",
        );
        assert_field_err(
            create(json!({"long_url": url, "custom_alias": ""})),
            "custom_alias",
            "empty",
        );
        assert_field_err(
            create(json!({"long_url": url, "custom_alias": "a/b"})),
            "custom_alias",
            "only",
        );
        assert_field_err(
            create(json!({"long_url": url, "custom_alias": "x".repeat(65)})),
            "custom_alias",
            "longer",
        );
        for reserved in ["api", "API", "Healthz", "metrics", "admin", "LOGIN"] {
            assert_field_err(
                create(json!({"long_url": url, "custom_alias": reserved})),
                "custom_alias",
                "reserved",
            );
        }
        assert!(create(json!({"long_url": url, "custom_alias": "apix"})).is_ok());
        assert!(RESERVED_ALIASES
            .iter()
            .all(|r| validate_key(r.as_bytes()).is_ok()));
    }

    #[test]
    fn expiry_rules() {
        let url = "https://a.b";
        assert_field_err(
            create(json!({"long_url": url, "ttl_days": 1, "expires_at": "2031-01-01T00:00:00Z"})),
            "ttl_days",
            "not both",
        );
        for bad in [json!(0), json!(-1), json!(1.5), json!("3"), json!(3651)] {
            assert_field_err(
                create(json!({"long_url": url, "ttl_days": bad})),
                "ttl_days",
                "1 to 3650",
            );
        }
        let max = create(json!({"long_url": url, "ttl_days": MAX_TTL_DAYS})).unwrap();
        assert_eq!(
            max.expires_at_s,
            Some(NOW + u64::from(MAX_TTL_DAYS) * 86_400)
        );
        assert_field_err(
            create(json!({"long_url": url, "expires_at": "2030-03-17T17:46:40Z"})),
            "expires_at",
            "past",
        );
        assert_field_err(
            create(json!({"long_url": url, "expires_at": "2001-01-01T00:00:00Z"})),
            "expires_at",
            "past",
        );
        assert_field_err(
            create(json!({"long_url": url, "expires_at": "2050-01-01T00:00:00Z"})),
            "expires_at",
            "days ahead",
        );
        assert_field_err(
            create(json!({"long_url": url, "expires_at": "next week"})),
            "expires_at",
            "RFC 3339",
        );
        assert_field_err(
            create(json!({"long_url": url, "expires_at": 1_900_000_100})),
            "expires_at",
            "string",
        );
        let soon = create(json!({"long_url": url, "expires_at": "2030-03-17T17:46:41Z"})).unwrap();
        assert_eq!(soon.expires_at_s, Some(NOW + 1));
    }

    #[test]
    fn status_rules() {
        let url = "https://a.b";
        for bad in [
            json!(303),
            json!(200),
            json!("302"),
            json!(302.0),
            json!(65_838),
        ] {
            assert_field_err(
                create(json!({"long_url": url, "redirect_status": bad})),
                "redirect_status",
                "301, 302",
            );
        }
        for (code, want) in [
            (301, RedirectStatus::MovedPermanently),
            (307, RedirectStatus::TemporaryRedirect),
        ] {
            let r = create(json!({"long_url": url, "redirect_status": code})).unwrap();
            assert_eq!(r.redirect_status, want);
        }
    }

    #[test]
    fn patch_changes() {
        let p = patch(json!({"long_url": "https://n.ew/"})).unwrap();
        assert_eq!(p.long_url.as_deref(), Some("https://n.ew/"));
        assert_eq!(p.expiry, ExpiryUpdate::Keep);
        assert_eq!(p.redirect_status, None);

        let p = patch(json!({"expires_at": null})).unwrap();
        assert_eq!(p.expiry, ExpiryUpdate::Clear);

        let p =
            patch(json!({"expires_at": "2030-03-18T17:46:40Z", "redirect_status": 301})).unwrap();
        assert_eq!(p.expiry, ExpiryUpdate::Set(NOW + 86_400));
        assert_eq!(p.redirect_status, Some(RedirectStatus::MovedPermanently));

        let p = patch(json!({"ttl_days": 2})).unwrap();
        assert_eq!(p.expiry, ExpiryUpdate::Set(NOW + 2 * 86_400));
    }

    #[test]
    fn patch_rejections() {
        let empty = patch(json!({})).unwrap_err();
        assert_eq!((empty.status, empty.field), (422, None));
        assert!(empty.detail.contains("at least one"));
        assert_field_err(patch(json!({"long_url": null})), "long_url", "null");
        assert_field_err(
            patch(json!({"redirect_status": null})),
            "redirect_status",
            "null",
        );
        assert_field_err(patch(json!({"ttl_days": null})), "ttl_days", "null");
        assert_field_err(
            patch(json!({"expires_at": null, "ttl_days": 3})),
            "ttl_days",
            "not both",
        );
        assert_field_err(
            patch(json!({"expires_at": "2030-03-18T17:46:40Z", "ttl_days": 3})),
            "ttl_days",
            "not both",
        );
        assert_field_err(patch(json!({"long_url": "nope"})), "long_url", "scheme");
        let p = patch(json!({"custom_alias": "x"})).unwrap_err();
        assert_eq!((p.status, p.field), (422, None));
        assert!(p.detail.contains("cannot be changed"), "{p}");
        assert_eq!(parse_patch(b"nope", NOW).unwrap_err().status, 400);
    }

    #[test]
    fn crawlable_is_a_boolean_and_null_clears_it() {
        let r = create(json!({"long_url": "https://a.b", "crawlable": true})).unwrap();
        assert!(r.behaviour.crawlable);
        assert_eq!(
            patch(json!({"crawlable": null}))
                .unwrap()
                .behaviour
                .crawlable,
            Some(false)
        );
        assert_eq!(
            patch(json!({"crawlable": true}))
                .unwrap()
                .behaviour
                .crawlable,
            Some(true)
        );
        assert_field_err(
            patch(json!({"crawlable": 1})),
            "crawlable",
            "true, false or null",
        );
    }

    #[test]
    fn behaviour_members_are_parsed_and_checked() {
        let r = create(
            json!({"long_url": "https://a.b", "valid_since": "2030-03-17T17:46:40Z",
                              "forward_query": true}),
        )
        .unwrap();
        assert_eq!(r.behaviour.valid_since_s, NOW);
        assert_eq!(r.behaviour.forward_query, Some(true));
        assert_field_err(
            create(json!({"long_url": "https://a.b", "forward_query": "yes"})),
            "forward_query",
            "true, false or null",
        );
        assert_field_err(
            create(json!({"long_url": "https://a.b", "valid_since": 5})),
            "valid_since",
            "RFC 3339",
        );
        // A create cannot disable.
        let p = create(json!({"long_url": "https://a.b", "disabled": {"reason": "abuse"}}))
            .unwrap_err();
        assert!(p.detail.contains("disabled"), "{p}");
        let p = patch(json!({"disabled": {"reason": "legal"}, "forward_query": null})).unwrap();
        let d = p.behaviour.disabled.unwrap().unwrap();
        assert_eq!(d.reason, shards::behaviour::DisabledReason::Legal);
        assert_eq!(p.behaviour.forward_query, Some(None));
        assert_eq!(p.behaviour.valid_since_s, None);
        let p = patch(json!({"disabled": null, "valid_since": null})).unwrap();
        assert_eq!(p.behaviour.disabled, Some(None));
        assert_eq!(p.behaviour.valid_since_s, Some(0));
        for bad in [
            json!({"reason": "spam"}),
            json!({"reason": "abuse", "at": "2030-03-17T17:46:40Z"}),
            json!("abuse"),
            json!({}),
        ] {
            assert_field_err(patch(json!({"disabled": bad})), "disabled", "reason");
        }
        let r = create(json!({"long_url": "https://a.b", "max_visits": 100})).unwrap();
        assert_eq!(r.behaviour.max_visits, 100);
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("3"),
            json!(1u64 << 53),
        ] {
            assert_field_err(
                create(json!({"long_url": "https://a.b", "max_visits": bad})),
                "max_visits",
                "integer from 1",
            );
        }
        assert_eq!(
            patch(json!({"max_visits": null}))
                .unwrap()
                .behaviour
                .max_visits,
            Some(0)
        );
        let mut b = shards::behaviour::Behaviour::NONE;
        patch(json!({"forward_query": false, "valid_since": "2030-03-17T17:46:40Z"}))
            .unwrap()
            .behaviour
            .apply(
                &mut b,
                &mut shards::rules::Rules::default(),
                &mut shards::labels::Labels::default(),
            );
        assert_eq!((b.forward_query, b.valid_since_s), (Some(false), NOW));
    }

    #[test]
    fn link_json_shape() {
        let body = link_json(
            ("aB3", None),
            "https://sho.rt/",
            "https://example.com/?q=\"x\"",
            (NOW, Some(NOW + 86_400)),
            RedirectStatus::TemporaryRedirect,
            (
                &shards::behaviour::Behaviour::NONE,
                &shards::rules::Rules::NONE,
                &shards::labels::Labels::NONE,
            ),
        );
        let text = String::from_utf8(body).unwrap();
        assert_eq!(
            text,
            r#"{"key":"aB3","domain":null,"short_url":"https://sho.rt/aB3","long_url":"https://example.com/?q=\"x\"","created_at":"2030-03-17T17:46:40Z","expires_at":"2030-03-18T17:46:40Z","redirect_status":307,"tags":[],"title":null}"#
        );
        let disabled = shards::behaviour::Disabled {
            reason: shards::behaviour::DisabledReason::Abuse,
            at_s: NOW,
            by: shards::link::Author::from_id("adm1").unwrap(),
        };
        let b = shards::behaviour::Behaviour {
            valid_since_s: NOW,
            forward_query: Some(true),
            disabled: Some(disabled),
            max_visits: 10,
            visits: 4,
            crawlable: true,
        };
        let v: Value = serde_json::from_slice(&link_json(
            ("k", Some("go.brand.com")),
            "http://h",
            "http://t",
            (0, None),
            RedirectStatus::Found,
            (
                &b,
                &shards::rules::Rules::NONE,
                &shards::labels::Labels::new(Some("A title"), &["b", "a"]).unwrap(),
            ),
        ))
        .unwrap();
        assert_eq!(v["valid_since"], "2030-03-17T17:46:40Z");
        assert_eq!(v["title"], "A title");
        assert_eq!(v["tags"], json!(["a", "b"]));
        assert_eq!(v["forward_query"], true);
        assert_eq!(v["crawlable"], true);
        assert_eq!(
            (v["max_visits"].as_u64(), v["visits"].as_u64()),
            (Some(10), Some(4))
        );
        assert_eq!(
            v["disabled"],
            json!({"reason": "abuse", "at": "2030-03-17T17:46:40Z", "by": "adm1"})
        );
        assert_eq!(v["expires_at"], Value::Null);
        assert_eq!(v["short_url"], "http://h/k");
        assert_eq!(v["domain"], "go.brand.com");
        assert_eq!(v["created_at"], "1970-01-01T00:00:00Z");
        assert_eq!(v["redirect_status"], 302);
    }
}
