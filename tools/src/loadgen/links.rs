//! The dataset the load generator asks for and checks against: a TSV of
//! `key<TAB>url[<TAB>status[<TAB>host]]` (the first three columns are the format `ricochet
//! import` reads; `host`, if given, is the `Host` a request for that link names, for servers
//! with several domains), held as one byte buffer plus a compact index.

use std::path::Path;

use shards::link::{validate_key, validate_url, RedirectStatus, MAX_KEY_BYTES};

/// Errors loading a links file.
#[derive(Debug, thiserror::Error)]
pub enum LinksError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("line {line}: expected key<TAB>url[<TAB>status[<TAB>host]]")]
    Columns { line: u64 },
    #[error("line {line}: bad host {text:?}: 1 to {MAX_HOST_BYTES} visible ASCII bytes")]
    Host { line: u64, text: String },
    #[error("line {line}: bad key: {err}")]
    Key {
        line: u64,
        err: shards::link::LinkError,
    },
    #[error("line {line}: bad url: {err}")]
    Url {
        line: u64,
        err: shards::link::LinkError,
    },
    #[error("line {line}: bad status {text:?}: must be 301, 302, 307 or 308")]
    Status { line: u64, text: String },
    #[error("line {line}: not UTF-8")]
    Utf8 { line: u64 },
    #[error("links file has no links")]
    Empty,
}

/// Longest `Host` a links file may give a link.
pub const MAX_HOST_BYTES: usize = 255;

/// A line's status column (none or empty: 302).
fn status_column(status: Option<&[u8]>, line: u64) -> Result<u16, LinksError> {
    let Some(s) = status.filter(|s| !s.is_empty()) else {
        return Ok(RedirectStatus::Found.code());
    };
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse::<u16>().ok())
        .and_then(RedirectStatus::from_code)
        .map(RedirectStatus::code)
        .ok_or_else(|| LinksError::Status {
            line,
            text: String::from_utf8_lossy(s).into_owned(),
        })
}

/// A line's host column: 1 to [`MAX_HOST_BYTES`] visible ASCII bytes.
fn check_host(h: &[u8], line: u64) -> Result<(), LinksError> {
    let visible = h.iter().all(u8::is_ascii_graphic);
    if h.is_empty() || h.len() > MAX_HOST_BYTES || !visible {
        return Err(LinksError::Host {
            line,
            text: String::from_utf8_lossy(h).into_owned(),
        });
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key_off: u64,
    key_len: u8,
    url_len: u32,
    status: u16,
}

/// Links loaded from a file; index `i` addresses the i-th link.
#[derive(Debug)]
pub struct Dataset {
    buf: Vec<u8>,
    entries: Vec<Entry>,
    max_key_len: usize,
    /// Per link, where its `Host` starts in `buf` and its length (0: none); empty when no
    /// line gives one, so a file without hosts costs nothing more.
    hosts: Vec<(u64, u8)>,
}

impl Dataset {
    /// Reads and validates a TSV links file.
    pub fn load(path: &Path) -> Result<Dataset, LinksError> {
        let buf = std::fs::read(path).map_err(|source| LinksError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Dataset::parse(buf)
    }

    /// Parses TSV text. Blank lines, `#` comments and a `key<TAB>url...` header are skipped;
    /// a missing status means 302.
    pub fn parse(buf: Vec<u8>) -> Result<Dataset, LinksError> {
        let mut entries = Vec::new();
        let mut hosts: Vec<(u64, u8)> = Vec::new();
        let mut max_key_len = 0;
        let mut pos = 0usize;
        let mut line_no = 0u64;
        while pos < buf.len() {
            line_no += 1;
            let end = memchr::memchr(b'\n', &buf[pos..]).map_or(buf.len(), |i| pos + i);
            let mut line = &buf[pos..end];
            let line_start = pos;
            pos = end + 1;
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let mut cols = line.split(|&b| b == b'\t');
            let key = cols.next().unwrap_or_default();
            let url = cols.next().ok_or(LinksError::Columns { line: line_no })?;
            let status = cols.next();
            let host = cols.next();
            if cols.next().is_some() {
                return Err(LinksError::Columns { line: line_no });
            }
            if entries.is_empty() && key == b"key" && url == b"url" {
                continue;
            }
            validate_key(key).map_err(|err| LinksError::Key { line: line_no, err })?;
            let url_str =
                std::str::from_utf8(url).map_err(|_| LinksError::Utf8 { line: line_no })?;
            validate_url(url_str).map_err(|err| LinksError::Url { line: line_no, err })?;
            let status = status_column(status, line_no)?;
            if let Some(h) = host {
                check_host(h, line_no)?;
                hosts.resize(entries.len(), (0, 0));
                let at = h.as_ptr() as usize - buf.as_ptr() as usize;
                hosts.push((at as u64, h.len() as u8));
            }
            debug_assert!(key.len() <= MAX_KEY_BYTES);
            max_key_len = max_key_len.max(key.len());
            entries.push(Entry {
                key_off: line_start as u64,
                key_len: key.len() as u8,
                url_len: url.len() as u32,
                status,
            });
        }
        if entries.is_empty() {
            return Err(LinksError::Empty);
        }
        if !hosts.is_empty() {
            hosts.resize(entries.len(), (0, 0));
        }
        Ok(Dataset {
            buf,
            entries,
            max_key_len,
            hosts,
        })
    }

    /// Number of links.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: a dataset has at least one link.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Key of link `i`.
    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        &self.buf[e.key_off as usize..e.key_off as usize + e.key_len as usize]
    }

    /// Target URL of link `i`.
    #[inline]
    pub fn url(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        let start = e.key_off as usize + e.key_len as usize + 1;
        &self.buf[start..start + e.url_len as usize]
    }

    /// Redirect status of link `i`.
    #[inline]
    pub fn status(&self, i: usize) -> u16 {
        self.entries[i].status
    }

    /// The `Host` a request for link `i` names, if its line gives one.
    #[inline]
    pub fn host(&self, i: usize) -> Option<&[u8]> {
        let &(at, len) = self.hosts.get(i)?;
        (len > 0).then(|| &self.buf[at as usize..at as usize + usize::from(len)])
    }

    /// Length of the longest key: keys longer than this cannot be in the dataset.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tsv() {
        let d = Dataset::parse(
            b"key\turl\tstatus\nabc\thttps://a.com/x\t301\r\n\n# note\nxyz123\thttp://b.org\n"
                .to_vec(),
        )
        .unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d.key(0), b"abc");
        assert_eq!(d.url(0), b"https://a.com/x");
        assert_eq!(d.status(0), 301);
        assert_eq!(d.key(1), b"xyz123");
        assert_eq!(d.url(1), b"http://b.org");
        assert_eq!(d.status(1), 302);
        assert_eq!(d.max_key_len(), 6);
        assert_eq!(d.host(0), None);
    }

    #[test]
    fn a_fourth_column_is_the_links_host() {
        let d = Dataset::parse(
            b"a\thttps://a.com/\t\nb\thttps://b.com/\t301\tGo.Brand.com:443\nc\thttps://c.com/\t\tsho.rt\n"
                .to_vec(),
        )
        .unwrap();
        assert_eq!(d.host(0), None);
        assert_eq!(d.host(1), Some(&b"Go.Brand.com:443"[..]));
        assert_eq!(d.status(1), 301);
        assert_eq!(d.host(2), Some(&b"sho.rt"[..]));
        assert_eq!(d.url(2), b"https://c.com/");
    }

    #[test]
    fn rejects_bad_lines() {
        let bad: &[(&[u8], &str)] = &[
            (b"abc\n", "line 1: expected"),
            (b"a/b\thttps://a.com\n", "line 1: bad key"),
            (b"ok\thttps://a.com\nok2\tftp://x\n", "line 2: bad url"),
            (b"ok\thttps://a.com\t303\n", "line 1: bad status"),
            (b"ok\thttps://a.com\t302\th\textra\n", "line 1: expected"),
            (b"ok\thttps://a.com\t302\ta b\n", "line 1: bad host"),
            (b"ok\thttps://a.com\t302\t\n", "line 1: bad host"),
            (b"\n# only comments\n", "no links"),
        ];
        for (text, want) in bad {
            let e = Dataset::parse(text.to_vec()).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
    }
}
