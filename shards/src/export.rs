//! `ricochet export`: every live link of a data dir, as one consistent snapshot, in a format
//! `ricochet import` reads back. Safe beside a running server: nothing is written, logs are
//! read without the recovery's truncation (`log::read_records`), and the snapshot is
//! optimistic: the files that make up the state (manifest, every table, every log's identity)
//! are fingerprinted before and after reading, and the read is repeated if a compaction or a
//! core-count fold replaced any of them meanwhile. Appends to a log during the read are fine:
//! the snapshot then is "the tables, plus each log up to the instant it was read".

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::datadir::DataDir;
use crate::error::Error;
use crate::log::{LogOp, LOG_DIR_NAME};
use crate::table::OwnedLink;

/// Reads that may be repeated because a compaction replaced files meanwhile.
pub const EXPORT_MAX_TRIES: usize = 20;

/// Pause before the first repeated read; it doubles on each further one, up to
/// [`EXPORT_RETRY_MAX_PAUSE_MS`]. Without pauses, a server compacting every few dozen writes
/// under a burst of creates invalidated all 20 reads of a debug build within a second (seen in
/// `tests/export.rs`); with them an export waits out such a burst (about 12 s in all at most).
pub const EXPORT_RETRY_FIRST_PAUSE_MS: u64 = 10;
/// The longest pause between two reads.
pub const EXPORT_RETRY_MAX_PAUSE_MS: u64 = 1_000;

/// Output formats, each one `ricochet import` reads (`import::Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// `{"key","long_url","status","expires_at","created_at"}` per line.
    Ndjson,
    /// `key<TAB>long_url<TAB>status<TAB>expires_at`, with a header line.
    Tsv,
    /// `key,long_url,status,expires_at`, with a header line.
    Csv,
}

/// What an export wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    pub links: u64,
    /// Expired links left out.
    pub expired: u64,
    /// Reads repeated because files changed under them.
    pub retries: usize,
}

/// Writes every live link of `dir` (at `now_s`) to `out` in key order. `domains` names the
/// data dir's domains by number (`ricochet domains`): a link of a named domain is written as
/// its key and its domain's name (NDJSON's `domain`, a fifth TSV/CSV column, present only
/// when such a link is), which `ricochet import` reads back into the domain of that name; a
/// link of a number without a name keeps its stored key (`N.key`), which import reads back
/// into number N.
pub fn export(
    dir: &Path,
    format: ExportFormat,
    now_s: u64,
    domains: &BTreeMap<u32, String>,
    out: &mut dyn Write,
) -> Result<ExportSummary, Error> {
    let (State { links, .. }, retries) = consistent_state(dir)?;
    let mut summary = ExportSummary {
        retries,
        ..Default::default()
    };
    let io = |e: std::io::Error| Error::io(dir.to_path_buf(), "write the export", e);
    let named = |key: &str| named_key(key, domains).1.is_some();
    // TSV and CSV columns are positional: an author column needs the domain column before it.
    let with_authors = links.values().any(|l| l.author.is_some());
    let with_domains = with_authors || links.keys().any(|k| named(k));
    let domain_col = if with_domains { "\tdomain" } else { "" };
    if format != ExportFormat::Ndjson {
        if let Some(l) = links
            .values()
            .find(|l| !l.behaviour.is_none() || !l.rules.is_empty() || !l.labels.is_none())
        {
            return Err(Error::io(
                dir.to_path_buf(),
                "export as TSV or CSV",
                std::io::Error::other(format!(
                    "link {:?} has a behaviour (valid_since, forward_query, max_visits, disabled or \
                     redirect rules) or labels (title, tags) that TSV \
                     and CSV have no columns for; export with --format ndjson, which keeps them",
                    l.key
                )),
            ));
        }
    }
    let author_col = if with_authors { "\tauthor" } else { "" };
    match format {
        ExportFormat::Tsv => writeln!(
            out,
            "key\tlong_url\tstatus\texpires_at{domain_col}{author_col}"
        )
        .map_err(io)?,
        ExportFormat::Csv => writeln!(
            out,
            "key,long_url,status,expires_at{}",
            domain_col.replace('\t', ",") + &author_col.replace('\t', ",")
        )
        .map_err(io)?,
        ExportFormat::Ndjson => {}
    }
    for l in links.values() {
        if l.expires_at_s != 0 && now_s >= l.expires_at_s {
            summary.expired += 1;
            continue;
        }
        let (key, domain) = named_key(&l.key, domains);
        let domain = with_domains.then_some(domain.unwrap_or(""));
        let author = with_authors.then_some(l.author.as_str());
        write_line(out, format, l, key, domain, author).map_err(io)?;
        summary.links += 1;
    }
    out.flush().map_err(io)?;
    Ok(summary)
}

/// The keys whose newest record in `dir`'s logs is a delete (a tombstone not yet folded into
/// a table by a compaction), read as one consistent snapshot like [`export`]. A fleet node
/// compares them with the database it regenerates from: a key deleted here and live there is
/// a delete the database lost (`fleet_mode::lost`).
pub fn held_deletes(dir: &Path) -> Result<BTreeSet<String>, Error> {
    Ok(consistent_state(dir)?.0.deleted)
}

/// A data dir's state as read: its links, and the keys its logs delete.
struct State {
    links: BTreeMap<String, OwnedLink>,
    /// Keys whose newest record is a delete.
    deleted: BTreeSet<String>,
}

/// Reads the state until it was not replaced while being read (a compaction or rotation
/// under way): the state and the reads repeated. Gives up after `EXPORT_MAX_TRIES`.
fn consistent_state(dir: &Path) -> Result<(State, usize), Error> {
    let dd = DataDir::open(dir)?;
    let mut retries = 0;
    loop {
        let before = fingerprint(dir)?;
        if let Some(links) = read_state(&dd)? {
            if fingerprint(dir)? == before {
                return Ok((links, retries));
            }
        }
        retries += 1;
        if retries >= EXPORT_MAX_TRIES {
            return Err(Error::io(
                dir.to_path_buf(),
                "export a consistent snapshot",
                std::io::Error::other(format!(
                    "tables or logs were replaced during each of {EXPORT_MAX_TRIES} reads (compacting without pause?)"
                )),
            ));
        }
        let pause =
            (EXPORT_RETRY_FIRST_PAUSE_MS << (retries - 1).min(16)).min(EXPORT_RETRY_MAX_PAUSE_MS);
        std::thread::sleep(std::time::Duration::from_millis(pause));
    }
}

/// A stored key as its key and its domain's name, if `domains` names its number (the default
/// domain's keys are written as they are).
fn named_key<'k, 'd>(
    key: &'k str,
    domains: &'d BTreeMap<u32, String>,
) -> (&'k str, Option<&'d str>) {
    let (number, bare) = crate::link::split_stored_key(key.as_bytes());
    match domains.get(&number) {
        Some(name) if number != crate::link::DEFAULT_DOMAIN => (
            std::str::from_utf8(bare).unwrap_or(key),
            Some(name.as_str()),
        ),
        _ => (key, None),
    }
}

/// One link's line in `format`, as `key` (on `domain`, when the export has that column:
/// `Some("")` for the default domain).
fn write_line(
    out: &mut dyn Write,
    format: ExportFormat,
    l: &OwnedLink,
    key: &str,
    domain: Option<&str>,
    author: Option<&str>,
) -> std::io::Result<()> {
    let expires = (l.expires_at_s != 0).then(|| crate::timefmt::format_rfc3339_utc(l.expires_at_s));
    match format {
        ExportFormat::Ndjson => {
            let mut line = serde_json::json!({
                "key": key,
                "long_url": l.target,
                "status": l.status.code(),
                "expires_at": expires,
                "created_at": crate::timefmt::format_rfc3339_utc(l.created_at_s),
            });
            if let Some(d) = domain.filter(|d| !d.is_empty()) {
                line["domain"] = serde_json::Value::from(d);
            }
            if l.author.is_some() {
                line["author"] = serde_json::Value::from(l.author.as_str());
            }
            if let Some(obj) = line.as_object_mut() {
                crate::behaviour::put_link_members(&l.behaviour, &l.rules, &l.labels, obj);
            }
            writeln!(out, "{line}")?;
        }
        ExportFormat::Tsv => writeln!(
            out,
            "{}\t{}\t{}\t{}{}{}{}{}",
            key,
            l.target,
            l.status.code(),
            expires.unwrap_or_default(),
            if domain.is_some() { "\t" } else { "" },
            domain.unwrap_or_default(),
            if author.is_some() { "\t" } else { "" },
            author.unwrap_or_default()
        )?,
        ExportFormat::Csv => {
            let mut w = csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(Vec::new());
            let status = l.status.code().to_string();
            let expires = expires.unwrap_or_default();
            let mut fields = vec![key, l.target.as_str(), &status, &expires];
            fields.extend(domain);
            fields.extend(author);
            w.write_record(fields).map_err(std::io::Error::other)?;
            out.write_all(
                &w.into_inner()
                    .map_err(|e| std::io::Error::other(e.to_string()))?,
            )?;
        }
    }
    Ok(())
}

/// The state: every table, then every log replayed over it (`.folding` before `.log`).
/// `None` if a log vanished while being read (a rotation): read again.
fn read_state(dd: &DataDir) -> Result<Option<State>, Error> {
    let mut links = BTreeMap::new();
    let mut deleted = BTreeSet::new();
    for shard in 0..dd.shard_count() {
        if let Some(t) = dd.open_table(shard)? {
            links.extend(
                t.iter()
                    .map(|(k, l)| (k.to_owned(), OwnedLink::from((k, l)))),
            );
        }
    }
    let logs_dir = dd.path().join(LOG_DIR_NAME);
    let logs = logs_in_replay_order(&logs_dir);
    let mut newest = crate::log::NewestWins::default();
    for (_, _, path) in logs {
        let records = match crate::log::read_records(&path) {
            Ok(r) => r,
            Err(crate::log::LogError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None); // Rotated away while we read: read again.
            }
            Err(e) => {
                let detail = std::io::Error::other(e.to_string());
                return Err(Error::io(path.clone(), "read the log", detail));
            }
        };
        for rec in records {
            if !newest.admits(&rec.op) {
                continue;
            }
            match rec.op {
                LogOp::Put(l)
                | LogOp::PutWithIdem { link: l, .. }
                | LogOp::FleetPut { link: l, .. } => {
                    deleted.remove(&l.key);
                    links.insert(
                        l.key.clone(),
                        OwnedLink {
                            key: l.key,
                            target: l.target,
                            status: l.status,
                            expires_at_s: l.expires_at_s,
                            created_at_s: l.created_at_s,
                            flags: l.flags,
                            author: l.author,
                            behaviour: l.behaviour,
                            rules: l.rules,
                            labels: l.labels,
                        },
                    );
                }
                LogOp::Delete { key } | LogOp::FleetDelete { key, .. } => {
                    links.remove(&key);
                    deleted.insert(key);
                }
                LogOp::IdemRecord { .. } => {}
            }
        }
    }
    Ok(Some(State { links, deleted }))
}

/// The logs of `logs_dir` in replay order: by writer core, a `.folding` log before its `.log`.
fn logs_in_replay_order(logs_dir: &Path) -> Vec<(u32, u8, std::path::PathBuf)> {
    let mut logs: Vec<(u32, u8, std::path::PathBuf)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(logs_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("wal-") else {
                continue;
            };
            let (n, order) = if let Some(n) = rest.strip_suffix(".folding") {
                (n, 0)
            } else if let Some(n) = rest.strip_suffix(".log") {
                (n, 1)
            } else {
                continue;
            };
            if let Ok(n) = n.parse::<u32>() {
                logs.push((n, order, e.path()));
            }
        }
    }
    logs.sort();
    logs
}

/// Identity of every file the state is read from: the manifest, each table (inode, size,
/// mtime) and each log (inode: a rotation replaces it; appends do not count).
fn fingerprint(dir: &Path) -> Result<Vec<(String, u64, u64, i64)>, Error> {
    let mut out = Vec::new();
    let mut add = |sub: &str, whole: bool| -> Result<(), Error> {
        let d = dir.join(sub);
        let Ok(entries) = std::fs::read_dir(&d) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            // Temp files of a table being written are not part of the state (their rename
            // is, and changes the table's identity).
            if file.ends_with(".tmp") || file.ends_with(".import") || file.ends_with(".staged") {
                continue;
            }
            let m = match e.metadata() {
                Ok(m) => m,
                // Gone between the listing and the stat: something changed; the comparison
                // of the two fingerprints sees it through the files that replaced it.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(Error::io(e.path(), "stat", err)),
            };
            let name = format!("{sub}/{file}");
            if whole {
                out.push((
                    name,
                    m.ino(),
                    m.len(),
                    m.mtime_nsec() + m.mtime() * 1_000_000_000,
                ));
            } else {
                out.push((name, m.ino(), 0, 0));
            }
        }
        Ok(())
    };
    add("tables", true)?;
    add(LOG_DIR_NAME, false)?;
    let m = std::fs::metadata(dir.join(crate::manifest::MANIFEST_FILE))
        .map_err(|e| Error::io(dir.to_path_buf(), "stat the manifest", e))?;
    out.push(("MANIFEST".into(), m.ino(), m.len(), m.mtime()));
    out.sort();
    Ok(out)
}
