//! A validated import record: what every input format (`parse`, `vendor`) yields per line.

use super::error::LineError;
use crate::link::{validate_stored_key, validate_url, LinkError, RedirectStatus};
use std::borrow::Cow;

/// A valid input record.
pub(crate) struct Record<'a> {
    pub line: u64,
    pub key: Cow<'a, str>,
    pub url: Cow<'a, str>,
    pub status: RedirectStatus,
    /// 0 = never (`expires_at`, RFC 3339; refused if not in the future).
    pub expires_at_s: u64,
    /// `created_at` (NDJSON), or `None`: the import's own time.
    pub created_at_s: Option<u64>,
    /// Columns of another shortener's export whose values were left out
    /// (`--drop-unsupported`), for the summary.
    pub dropped: Vec<&'static str>,
    /// The link's domain by name (`None` or empty: the default domain); the import resolves
    /// it to the data dir's number (`ImportOptions::domains`).
    pub domain: Option<Cow<'a, str>>,
    /// The domain came with the key (a Bitly bitlink, `bit.ly/KEY`): if the data dir has not
    /// declared it, the link goes to the default domain rather than being a bad line (Bitly's
    /// own shared domains are no one else's to serve).
    pub domain_if_declared: bool,
    /// The id of the API key that created the link (`author`, as `export` writes it);
    /// `Author::NONE` when the input has none.
    pub author: crate::link::Author,
    /// `valid_since`, `forward_query`, `disabled` (NDJSON, as `export` writes them).
    pub behaviour: crate::behaviour::Behaviour,
    /// `redirect_rules` (NDJSON, as `export` writes them).
    pub rules: crate::rules::Rules,
    /// `title` and `tags` (NDJSON as `export` writes them; Shlink's CSV `Title` and `Tags`).
    pub labels: crate::labels::Labels,
}

/// A record of `key` and `url` after the link rules (`link::validate_key`, `validate_url`);
/// expiry, creation time and dropped columns are the caller's to fill in.
pub(crate) fn validated<'a>(
    line: u64,
    key: Cow<'a, str>,
    url: Cow<'a, str>,
    status: RedirectStatus,
) -> Result<Record<'a>, LineError> {
    let err = |e: LinkError| LineError {
        line,
        message: e.to_string(),
    };
    // A stored key (`N.key`, a declared domain's link as `export` writes it) reads back into
    // its domain.
    validate_stored_key(key.as_bytes()).map_err(err)?;
    validate_url(&url).map_err(err)?;
    Ok(Record {
        line,
        key,
        url,
        status,
        expires_at_s: 0,
        created_at_s: None,
        dropped: Vec::new(),
        domain: None,
        domain_if_declared: false,
        author: crate::link::Author::NONE,
        behaviour: crate::behaviour::Behaviour::NONE,
        rules: crate::rules::Rules::NONE,
        labels: crate::labels::Labels::NONE,
    })
}
