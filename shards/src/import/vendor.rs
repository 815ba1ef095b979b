//! Other shorteners' CSV exports (`import --format shlink-csv|yourls-csv|bitly-csv`). Columns
//! are found by their header (case-insensitive; docs/import-export.md, "Input formats", lists
//! the names accepted). Titles and Shlink's tags (`|`-separated, as Shlink's web client
//! exports them) become the link's labels. A column ricochet has no place for (Bitly's tags,
//! visit counts, IPs) is never
//! silently dropped: a row with a value there is an error naming the column, unless
//! `--drop-unsupported` is given, and then the import's summary counts what was dropped.

use std::borrow::Cow;
use std::io::Read;
use std::ops::ControlFlow;

use super::error::LineError;
use super::record::{validated, Record};
use crate::link::RedirectStatus;

/// Whose export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// Shlink's CSV import format: `Long URL`, `Short code`, optional `Domain`, `Title`,
    /// `Tags`; `,` or `;` as the separator.
    Shlink,
    /// YOURLS' link table (`keyword, url, title, timestamp, ip, clicks`), as its export
    /// plugins and database dumps write it; `timestamp` is `YYYY-MM-DD HH:MM:SS`, taken as UTC.
    Yourls,
    /// Bitly's link fields (`id` or `link` holding `bit.ly/KEY`, `long_url`, `created_at`,
    /// `title`, `tags`, `custom_bitlinks`, `archived`). Every custom back-half is imported as
    /// a key of its own for the same long URL.
    Bitly,
}

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Key,
    Url,
    Created,
    /// Bitly's `custom_bitlinks`: more keys for the same link.
    MoreKeys,
    /// Bitly's `archived`: `true` rows are left out (an archived Bitlink no longer redirects).
    Archived,
    /// Shlink's `Domain`: the link's domain (declared in the data dir), empty for the default.
    Domain,
    /// The link's title.
    Title,
    /// Shlink's `Tags`: the link's tags, separated by `|`.
    Tags,
    Unsupported(&'static str),
    /// Known and of no meaning here (ignored, documented).
    Ignored,
}

fn column(vendor: Vendor, header: &str) -> Option<Col> {
    let h = header.trim().to_ascii_lowercase().replace(['_', '-'], " ");
    Some(match (vendor, h.as_str()) {
        (Vendor::Shlink, "long url" | "longurl") => Col::Url,
        (Vendor::Shlink, "short code" | "shortcode") => Col::Key,
        (Vendor::Shlink, "domain") => Col::Domain,
        (Vendor::Shlink | Vendor::Yourls | Vendor::Bitly, "title") => Col::Title,
        (Vendor::Shlink, "tags") => Col::Tags,
        (Vendor::Yourls, "keyword") => Col::Key,
        (Vendor::Yourls, "url") => Col::Url,
        (Vendor::Yourls, "timestamp") => Col::Created,
        (Vendor::Yourls, "ip") => Col::Unsupported("ip"),
        (Vendor::Yourls, "clicks") => Col::Unsupported("clicks"),
        (Vendor::Bitly, "id" | "link" | "bitlink") => Col::Key,
        (Vendor::Bitly, "long url") => Col::Url,
        (Vendor::Bitly, "created at" | "created") => Col::Created,
        (Vendor::Bitly, "custom bitlinks") => Col::MoreKeys,
        (Vendor::Bitly, "archived") => Col::Archived,
        (Vendor::Bitly, "tags") => Col::Unsupported("tags"),
        (Vendor::Bitly, "group guid" | "references" | "deeplinks") => Col::Ignored,
        _ => return None,
    })
}

/// The columns a vendor CSV's header names, or why it is not one: a column the format does
/// not have, or no key or long URL column.
fn header_columns(vendor: Vendor, header: &csv::StringRecord) -> Result<Vec<Col>, String> {
    let mut cols = Vec::new();
    for (i, name) in header.iter().enumerate() {
        match column(vendor, name.trim_start_matches('\u{feff}')) {
            Some(c) => cols.push(c),
            None => {
                return Err(format!(
                    "column {} {name:?} is not one this format has (docs/import-export.md, \"Input formats\")",
                    i + 1
                ))
            }
        }
    }
    for (needed, name) in [(Col::Key, "key"), (Col::Url, "long URL")] {
        if !cols.contains(&needed) {
            return Err(format!("the header has no {name} column"));
        }
    }
    Ok(cols)
}

/// Reads a vendor CSV and calls `each` with every record or bad line.
pub(crate) fn for_each_vendor<R: Read>(
    mut input: R,
    vendor: Vendor,
    drop_unsupported: bool,
    each: &mut dyn FnMut(Result<Record<'_>, LineError>) -> ControlFlow<()>,
) -> std::io::Result<()> {
    let mut text = Vec::new();
    input.read_to_end(&mut text)?;
    let first_line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let sep =
        if vendor == Vendor::Shlink && first_line.contains(&b';') && !first_line.contains(&b',') {
            b';'
        } else {
            b','
        };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(sep)
        .from_reader(text.as_slice());
    let mut records = reader.records();
    let header = match records.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => {
            let _ = each(Err(LineError {
                line: 1,
                message: e.to_string(),
            }));
            return Ok(());
        }
        None => return Ok(()),
    };
    let cols = match header_columns(vendor, &header) {
        Ok(cols) => cols,
        Err(message) => {
            let _ = each(Err(LineError { line: 1, message }));
            return Ok(());
        }
    };
    for row in records {
        let row = match row {
            Ok(r) => r,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                if each(Err(LineError {
                    line,
                    message: e.to_string(),
                }))
                .is_break()
                {
                    return Ok(());
                }
                continue;
            }
        };
        let line = row.position().map_or(0, |p| p.line());
        if row.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        match rows_of(vendor, &cols, &row, line, drop_unsupported) {
            Ok(recs) => {
                for r in recs {
                    if each(r).is_break() {
                        return Ok(());
                    }
                }
            }
            Err(e) => {
                if each(Err(e)).is_break() {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// The records one row makes (Bitly: one per key).
fn rows_of(
    vendor: Vendor,
    cols: &[Col],
    row: &csv::StringRecord,
    line: u64,
    drop_unsupported: bool,
) -> Result<Vec<Result<Record<'static>, LineError>>, LineError> {
    let err = |message: String| LineError { line, message };
    let (mut keys, mut url, mut created, mut dropped) = (Vec::new(), None, None, Vec::new());
    let mut domain = None;
    let (mut title, mut tags) = (None, Vec::new());
    for (c, v) in cols.iter().zip(row.iter()) {
        let v = v.trim();
        match c {
            Col::Key => keys.insert(0, (bare_key(vendor, v), bitlink_host(vendor, v))),
            Col::MoreKeys => keys.extend(
                v.split([',', ' ', '|'])
                    .filter(|s| !s.is_empty())
                    .map(|k| (bare_key(vendor, k), bitlink_host(vendor, k))),
            ),
            Col::Url => url = Some(v.to_owned()),
            Col::Domain if !v.is_empty() => domain = Some(v.to_owned()),
            Col::Title if !v.is_empty() => title = Some(v.to_owned()),
            Col::Tags => tags.extend(v.split('|').map(str::trim).filter(|t| !t.is_empty())),
            Col::Created if !v.is_empty() => {
                created = Some(
                    parse_time(vendor, v)
                        .ok_or_else(|| err(format!("cannot read the creation time {v:?}")))?,
                )
            }
            Col::Archived if matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes") => {
                return Ok(Vec::new())
            }
            Col::Unsupported(name) if !v.is_empty() => {
                if !drop_unsupported {
                    return Err(err(format!("{name} is not supported by ricochet (value {v:?}); pass --drop-unsupported to import without it")));
                }
                dropped.push(*name);
            }
            _ => {}
        }
    }
    let url = url.unwrap_or_default();
    let labels = crate::labels::Labels::new(title.as_deref(), &tags).map_err(|e| err(e.0))?;
    keys.dedup();
    Ok(keys
        .into_iter()
        .map(|(k, bitlink_domain)| {
            let mut r = validated(
                line,
                Cow::Owned(k),
                Cow::Owned(url.clone()),
                RedirectStatus::default(),
            )?;
            r.created_at_s = created;
            r.dropped = dropped.clone();
            r.labels = labels.clone();
            r.domain = domain.clone().map(Cow::Owned);
            if let (None, Some(host)) = (&r.domain, &bitlink_domain) {
                r.domain = Some(Cow::Owned(host.clone()));
                r.domain_if_declared = true;
            }
            Ok(r)
        })
        .collect())
}

/// The host of a bitlink (`bit.ly/3xyz`, `https://go.brand.com/abc`), if it has one.
fn bitlink_host(vendor: Vendor, v: &str) -> Option<String> {
    if vendor != Vendor::Bitly {
        return None;
    }
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .unwrap_or(v);
    let (host, _) = rest.rsplit_once('/')?;
    let host = host.split('/').next().unwrap_or(host);
    (!host.is_empty()).then(|| host.to_owned())
}

/// A key from a column that may hold a short URL (`bit.ly/3xyz`, `https://s.test/abc`).
fn bare_key(vendor: Vendor, v: &str) -> String {
    match vendor {
        Vendor::Bitly => v.rsplit('/').next().unwrap_or(v).to_owned(),
        _ => v.to_owned(),
    }
}

/// A vendor's timestamp as Unix seconds.
fn parse_time(vendor: Vendor, v: &str) -> Option<u64> {
    let rfc = match vendor {
        // `2024-01-02 03:04:05`, the server's time; taken as UTC.
        Vendor::Yourls => format!("{}Z", v.replacen(' ', "T", 1)),
        // `2021-05-06T07:08:09+0000`: add the colon RFC 3339 wants.
        Vendor::Bitly | Vendor::Shlink => match v.len() {
            n if n > 5
                && (v.as_bytes()[n - 5] == b'+' || v.as_bytes()[n - 5] == b'-')
                && !v[n - 5..].contains(':') =>
            {
                format!("{}:{}", &v[..n - 2], &v[n - 2..])
            }
            _ => v.to_owned(),
        },
    };
    crate::timefmt::parse_rfc3339_s(&rfc).ok()
}
