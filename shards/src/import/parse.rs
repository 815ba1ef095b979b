//! Reading TSV, CSV and NDJSON link lists into validated records, one at a time.

use super::error::LineError;
use super::record::{validated, Record};
use crate::link::{LinkError, RedirectStatus, MAX_KEY_BYTES, MAX_URL_BYTES};
use std::borrow::Cow;
use std::io::{BufRead, Read};
use std::ops::ControlFlow;
use std::path::Path;

/// Longest input line accepted (TSV, NDJSON), in bytes: a maximal key and URL with room for
/// JSON quoting and escapes. Longer lines are reported and skipped without being buffered.
pub const MAX_LINE_BYTES: usize = 4 * (MAX_URL_BYTES + MAX_KEY_BYTES) + 1024;

/// Input format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `key<TAB>long_url[<TAB>status]`; `#` comment lines and blank lines skipped.
    Tsv,
    /// `key,long_url[,status]`, RFC 4180 quoting.
    Csv,
    /// One JSON object per line: `{"key": .., "long_url": .., "status": ..}` (status optional).
    Ndjson,
    /// Another shortener's CSV export (`vendor.rs`); `drop_unsupported` imports rows whose
    /// unsupported columns hold values (counted in the summary) instead of refusing them.
    Vendor {
        vendor: super::vendor::Vendor,
        drop_unsupported: bool,
    },
}

impl Format {
    /// The format implied by a file extension (`.tsv`, `.csv`, `.ndjson`, `.jsonl`).
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "tsv" => Some(Format::Tsv),
            "csv" => Some(Format::Csv),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            _ => None,
        }
    }
}

/// Calls `each` with every record or bad line of `input`, in order, until it breaks.
pub(crate) fn for_each<R: Read>(
    input: R,
    format: Format,
    each: &mut dyn FnMut(Result<Record<'_>, LineError>) -> ControlFlow<()>,
) -> std::io::Result<()> {
    match format {
        Format::Tsv | Format::Ndjson => for_each_line(input, format, each),
        Format::Csv => for_each_csv(input, each),
        Format::Vendor {
            vendor,
            drop_unsupported,
        } => super::vendor::for_each_vendor(input, vendor, drop_unsupported, each),
    }
}

fn for_each_line<R: Read>(
    input: R,
    format: Format,
    each: &mut dyn FnMut(Result<Record<'_>, LineError>) -> ControlFlow<()>,
) -> std::io::Result<()> {
    let mut reader = std::io::BufReader::with_capacity(1 << 20, input);
    let mut buf = Vec::with_capacity(1024);
    let mut line_no = 0u64;
    let mut first_record = true;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        line_no += 1;
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            skip_rest_of_line(&mut reader)?;
            let msg = format!("line is longer than {MAX_LINE_BYTES} bytes");
            if each(Err(LineError {
                line: line_no,
                message: msg,
            }))
            .is_break()
            {
                return Ok(());
            }
            continue;
        }
        let mut line = buf.as_slice();
        while let Some((&last, rest)) = line.split_last() {
            if last == b'\n' || last == b'\r' {
                line = rest;
            } else {
                break;
            }
        }
        if line.iter().all(|b| *b == b' ' || *b == b'\t') {
            continue;
        }
        let flow = match format {
            Format::Tsv => {
                if line.starts_with(b"#") {
                    continue;
                }
                let fields: Vec<&[u8]> = line.split(|b| *b == b'\t').collect();
                if std::mem::take(&mut first_record) && is_header(&fields) {
                    continue;
                }
                each(fields_to_record(line_no, &fields, "tab-separated"))
            }
            _ => each(json_to_record(line_no, line)),
        };
        if flow.is_break() {
            return Ok(());
        }
    }
}

fn skip_rest_of_line<R: BufRead>(r: &mut R) -> std::io::Result<()> {
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        if let Some(i) = memchr::memchr(b'\n', chunk) {
            r.consume(i + 1);
            return Ok(());
        }
        let n = chunk.len();
        r.consume(n);
    }
}

fn for_each_csv<R: Read>(
    input: R,
    each: &mut dyn FnMut(Result<Record<'_>, LineError>) -> ControlFlow<()>,
) -> std::io::Result<()> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .buffer_capacity(1 << 20)
        .from_reader(input);
    let mut rec = csv::ByteRecord::new();
    let mut first_record = true;
    loop {
        let more = match reader.read_byte_record(&mut rec) {
            Ok(more) => more,
            Err(e) => {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                if let csv::ErrorKind::Io(_) = e.kind() {
                    return Err(std::io::Error::other(e.to_string()));
                }
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
        if !more {
            return Ok(());
        }
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        let fields: Vec<&[u8]> = rec.iter().collect();
        if fields
            .iter()
            .all(|f| f.iter().all(|b| *b == b' ' || *b == b'\t'))
        {
            continue;
        }
        if std::mem::take(&mut first_record) && is_header(&fields) {
            continue;
        }
        if each(fields_to_record(line, &fields, "comma-separated")).is_break() {
            return Ok(());
        }
    }
}

/// A first line `key<sep>long_url[<sep>status]` is a header, not a link ("long_url" is not a
/// valid URL, so no real link is mistaken for one).
fn is_header(fields: &[&[u8]]) -> bool {
    fields.len() >= 2 && fields[0] == b"key" && fields[1] == b"long_url"
}

fn fields_to_record<'a>(
    line: u64,
    fields: &[&'a [u8]],
    kind: &str,
) -> Result<Record<'a>, LineError> {
    let err = |message: String| LineError { line, message };
    if !(2..=6).contains(&fields.len()) {
        return Err(err(format!(
            "expected 2 to 6 {kind} fields (key, long_url[, status[, expires_at[, domain[, author]]]]), \
             found {}",
            fields.len()
        )));
    }
    let key = std::str::from_utf8(fields[0]).map_err(|_| err(LinkError::KeyCharset.to_string()))?;
    let url = std::str::from_utf8(fields[1]).map_err(|_| err("URL is not valid UTF-8".into()))?;
    let status = match fields.get(2) {
        None => RedirectStatus::default(),
        Some([]) => RedirectStatus::default(),
        Some(s) => std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse::<u16>().ok())
            .and_then(RedirectStatus::from_code)
            .ok_or_else(|| err(LinkError::BadStatus.to_string()))?,
    };
    let expires = match fields.get(3) {
        None | Some([]) => None,
        Some(s) => Some(std::str::from_utf8(s).map_err(|_| err("expires_at is not UTF-8".into()))?),
    };
    let domain = match fields.get(4) {
        None | Some([]) => None,
        Some(s) => Some(std::str::from_utf8(s).map_err(|_| err("domain is not UTF-8".into()))?),
    };
    let author = match fields.get(5) {
        None | Some([]) => None,
        Some(s) => Some(std::str::from_utf8(s).map_err(|_| err("author is not UTF-8".into()))?),
    };
    let mut r = validated(line, Cow::Borrowed(key), Cow::Borrowed(url), status)?;
    r.expires_at_s = expiry(line, expires)?;
    r.domain = domain.map(Cow::Borrowed);
    r.author = author_of(line, author)?;
    Ok(r)
}

/// `author` (an API key's id, 1 to 8 ASCII letters or digits) or none.
fn author_of(line: u64, text: Option<&str>) -> Result<crate::link::Author, LineError> {
    match text {
        None | Some("") => Ok(crate::link::Author::NONE),
        Some(t) => crate::link::Author::from_id(t).ok_or_else(|| LineError {
            line,
            message: format!(
                "author {t:?} is not an API key id (1 to {} ASCII letters or digits)",
                crate::link::AUTHOR_BYTES
            ),
        }),
    }
}

/// `expires_at` as Unix seconds (0: never); it must be RFC 3339 and in the future.
fn expiry(line: u64, text: Option<&str>) -> Result<u64, LineError> {
    let Some(text) = text else { return Ok(0) };
    let err = |message: String| LineError { line, message };
    let t = crate::timefmt::parse_rfc3339_s(text).map_err(|e| err(format!("expires_at: {e}")))?;
    if t <= crate::timefmt::now_s() {
        return Err(err(format!("expires_at {text} is in the past")));
    }
    Ok(t)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLine<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow)]
    long_url: Cow<'a, str>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default, borrow)]
    expires_at: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    created_at: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    domain: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    author: Option<Cow<'a, str>>,
    #[serde(flatten)]
    behaviour: crate::behaviour::BehaviourJson,
}

fn json_to_record(line: u64, text: &[u8]) -> Result<Record<'_>, LineError> {
    let err = |message: String| LineError { line, message };
    let j: JsonLine<'_> =
        serde_json::from_slice(text).map_err(|e| err(format!("invalid JSON: {e}")))?;
    let status = match j.status {
        None => RedirectStatus::default(),
        Some(c) => {
            RedirectStatus::from_code(c).ok_or_else(|| err(LinkError::BadStatus.to_string()))?
        }
    };
    let expires_at_s = expiry(line, j.expires_at.as_deref())?;
    let created_at_s = match j.created_at.as_deref() {
        None => None,
        Some(t) => {
            Some(crate::timefmt::parse_rfc3339_s(t).map_err(|e| err(format!("created_at: {e}")))?)
        }
    };
    let mut r = validated(line, j.key, j.long_url, status)?;
    r.expires_at_s = expires_at_s;
    r.created_at_s = created_at_s;
    r.domain = j.domain;
    r.author = author_of(line, j.author.as_deref())?;
    (r.behaviour, r.rules, r.labels) = j.behaviour.parse().map_err(err)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndjson_lines_take_behaviour_members_and_refuse_unknown_ones() {
        let r = json_to_record(
            1,
            br#"{"key":"a","long_url":"https://x.example/","crawlable":true,"valid_since":"2030-01-01T00:00:00Z","redirect_rules":[{"target":"https://y.example/","conditions":[{"type":"device","value":"ios"}]}]}"#,
        )
        .unwrap();
        assert!(r.behaviour.crawlable);
        assert_eq!(r.behaviour.valid_since_s, 1_893_456_000);
        assert!(!r.rules.is_empty());
        for bad in [
            &br#"{"key":"a","long_url":"https://x.example/","bogus":1}"#[..],
            br#"{"key":"a","long_url":"https://x.example/","visits":3}"#,
            br#"{"key":"a","long_url":"https://x.example/","crawlable":"yes"}"#,
        ] {
            assert!(
                json_to_record(1, bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
