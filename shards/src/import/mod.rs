//! Offline bulk import of a link list (TSV, CSV or NDJSON) into a data dir.
//!
//! Two passes with bounded memory:
//! 1. parse and validate every line, spilling valid records to per-bucket buffers that move
//!    to temp files under `<data dir>/import.spill/` once they outgrow
//!    [`SPILL_BUFFER_BYTES`] (bucket = shard % [`MAX_SPILL_FILES`]);
//! 2. for each bucket, load it (memory bounded by one bucket), find duplicate keys, check
//!    against the shard's existing table, and stage the merged table as
//!    `tables/NNNNN.tbl.import` (written, writeback started). Shards that receive no new
//!    links are not rewritten.
//!
//! Only if no line was bad are the staged tables fsynced (in parallel, see
//! [`MAX_PARALLEL_FSYNCS`]), renamed into place, and the tables directory
//! fsynced once; otherwise they are deleted and the data dir's tables are untouched.
//!
//! A key that already exists in the data dir with the same target and status is skipped
//! (counted as `unchanged`), so re-running an import is harmless, including after a crash
//! during the final renames (which can leave some shards published and others not). A key
//! that exists with a different target or status is an error.
//!
//! The import holds the data dir's exclusive lock, so it cannot run beside a server.

mod error;
mod parse;
mod record;
mod spill;
pub mod vendor;

pub use error::{ImportError, LineError};
pub use parse::{Format, MAX_LINE_BYTES};
pub use spill::{MAX_SPILL_FILES, SPILL_BUFFER_BYTES};

use crate::datadir::DataDir;
use crate::manifest::MANIFEST_FILE;
use crate::placement::{shard_of, DEFAULT_SHARD_COUNT};
use crate::table::{write_table_file, OwnedLink};
use spill::{read_bucket, SpillWriter};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

/// Most bad lines kept for the report; further errors are only counted. 100 is enough to
/// see a pattern without burying the terminal.
pub const MAX_REPORTED_ERRORS: usize = 100;

/// Most staged-table fsyncs in flight at once. An fsync mostly waits on the device, and ext4
/// and xfs commit concurrent fsyncs in one journal transaction, so 16 at once turn 256 serial
/// waits (4-12 ms each on the development VM) into a few; more gained nothing measurable.
pub const MAX_PARALLEL_FSYNCS: usize = 16;

/// Name of the spill directory inside the data dir.
pub const SPILL_DIR: &str = "import.spill";

/// Suffix of a staged (not yet published) table.
pub const STAGED_SUFFIX: &str = "import";

/// What to import, and how.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// The data dir; created if it has no manifest.
    pub data_dir: PathBuf,
    /// The link list.
    pub input: PathBuf,
    /// The input format; `None` = from the extension.
    pub format: Option<Format>,
    /// Stop at the first bad line instead of collecting up to [`MAX_REPORTED_ERRORS`].
    pub strict: bool,
    /// Shard count if the data dir is created; ignored for an existing dir.
    pub shard_count_for_new_dir: u32,
    /// The data dir's domains (removed ones too), by ASCII name, and their numbers:
    /// a record naming one is imported into it (its stored key, `link::stored_key`); a
    /// record naming another is a bad line. The default domain's name may be among them.
    pub domains: BTreeMap<String, u32>,
    /// Targets no link may have (the server's abuse blocklist): a record whose target it
    /// refuses (with the reason) is a bad line.
    pub refuse_target: Option<TargetCheck>,
}

/// A check of a link's target: `Some(reason)` refuses it.
pub type TargetCheckFn = dyn Fn(&str) -> Option<String> + Send + Sync;

/// A shared [`TargetCheckFn`].
#[derive(Clone)]
pub struct TargetCheck(pub std::sync::Arc<TargetCheckFn>);

impl std::fmt::Debug for TargetCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TargetCheck")
    }
}

impl ImportOptions {
    /// Options with the defaults: format from extension, not strict, [`DEFAULT_SHARD_COUNT`].
    pub fn new(data_dir: impl Into<PathBuf>, input: impl Into<PathBuf>) -> ImportOptions {
        ImportOptions {
            data_dir: data_dir.into(),
            input: input.into(),
            format: None,
            strict: false,
            shard_count_for_new_dir: DEFAULT_SHARD_COUNT,
            domains: BTreeMap::new(),
            refuse_target: None,
        }
    }
}

/// What an import did.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportSummary {
    /// Links added.
    pub links: u64,
    /// Input links already present with the same target and status (skipped).
    pub unchanged: u64,
    /// Shard tables written.
    pub shards_written: u32,
    /// Total size of the tables written, in bytes.
    pub table_bytes: u64,
    /// Wall-clock time of the import.
    pub seconds: f64,
    /// Values of another shortener's columns ricochet has no place for, left out under
    /// `--drop-unsupported`, by column.
    pub dropped: std::collections::BTreeMap<&'static str, u64>,
}

impl fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "imported {} links into {} shards ({:.1} MiB) in {:.2} s",
            self.links,
            self.shards_written,
            self.table_bytes as f64 / (1024.0 * 1024.0),
            self.seconds
        )?;
        if !self.dropped.is_empty() {
            let list: Vec<String> = self
                .dropped
                .iter()
                .map(|(c, n)| format!("{c} x{n}"))
                .collect();
            write!(f, "; left out (--drop-unsupported): {}", list.join(", "))?;
        }
        if self.unchanged > 0 {
            write!(f, "; {} already present", self.unchanged)?;
        }
        Ok(())
    }
}

/// Collected line errors.
struct Errors {
    list: Vec<LineError>,
    total: u64,
    strict: bool,
}

impl Errors {
    fn push(&mut self, e: LineError) -> ControlFlow<()> {
        self.total += 1;
        if self.list.len() < MAX_REPORTED_ERRORS {
            self.list.push(e);
        }
        if self.strict {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn stop(&self) -> bool {
        self.strict && self.total > 0
    }
}

/// Imports `opts.input` into `opts.data_dir`. On any error nothing is imported.
pub fn run(opts: &ImportOptions) -> Result<ImportSummary, ImportError> {
    let started = Instant::now();
    let format = match opts.format {
        Some(f) => f,
        None => Format::from_path(&opts.input).ok_or_else(|| ImportError::UnknownFormat {
            path: opts.input.clone(),
        })?,
    };
    let input = std::fs::File::open(&opts.input).map_err(|source| ImportError::Input {
        path: opts.input.clone(),
        source,
    })?;
    let dir_existed = opts.data_dir.exists();
    let has_manifest = opts.data_dir.join(MANIFEST_FILE).exists();
    let dir = if !has_manifest {
        DataDir::create(&opts.data_dir, opts.shard_count_for_new_dir)?
    } else {
        DataDir::open(&opts.data_dir)?
    };
    let lock = dir.lock_exclusive()?;
    let result = import_locked(&dir, opts, format, input, started);
    if result.is_err() && !dir_existed {
        // The dir exists only because of this failed import; leave nothing behind (while
        // still holding the lock, so nobody starts using it meanwhile).
        let _ = std::fs::remove_dir_all(&opts.data_dir);
    }
    drop(lock);
    result
}

/// [`run`] into `dir`, whose exclusive lock the caller already holds (a fleet node's
/// bootstrap, at start, before it serves).
pub fn run_locked(dir: &DataDir, opts: &ImportOptions) -> Result<ImportSummary, ImportError> {
    let format = opts.format.unwrap_or(Format::Ndjson);
    let input = std::fs::File::open(&opts.input).map_err(|source| ImportError::Input {
        path: opts.input.clone(),
        source,
    })?;
    import_locked(dir, opts, format, input, Instant::now())
}

fn import_locked(
    dir: &DataDir,
    opts: &ImportOptions,
    format: Format,
    input: std::fs::File,
    started: Instant,
) -> Result<ImportSummary, ImportError> {
    let spill_dir = dir.path().join(SPILL_DIR);
    remove_stale_staged(dir)?;
    let mut errors = Errors {
        list: Vec::new(),
        total: 0,
        strict: opts.strict,
    };
    let mut staged: Vec<(u32, PathBuf)> = Vec::new();
    let outcome = (|| -> Result<ImportSummary, ImportError> {
        let (buckets, dropped) = spill_input(dir, opts, format, input, &mut errors)?;
        // Pass 2: per bucket, check and stage.
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut summary = ImportSummary {
            links: 0,
            unchanged: 0,
            shards_written: 0,
            table_bytes: 0,
            seconds: 0.0,
            dropped,
        };
        for bucket in buckets {
            if errors.stop() {
                break;
            }
            let mut recs = read_bucket(bucket)?;
            recs.sort_unstable_by(|a, b| {
                (a.shard, a.key.as_bytes(), a.line).cmp(&(b.shard, b.key.as_bytes(), b.line))
            });
            for group in recs.chunk_by(|a, b| a.shard == b.shard) {
                if errors.stop() {
                    break;
                }
                stage_shard(dir, group, now_s, &mut errors, &mut summary, &mut staged)?;
            }
        }
        if errors.total > 0 {
            let mut list = std::mem::take(&mut errors.list);
            list.sort_by_key(|e| e.line);
            return Err(ImportError::BadLines {
                input: opts.input.clone(),
                errors: list,
                total: errors.total,
            });
        }
        publish(dir, &mut staged)?;
        summary.seconds = started.elapsed().as_secs_f64();
        Ok(summary)
    })();
    for (_, path) in &staged {
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_dir_all(&spill_dir);
    outcome
}

/// Pass 1: parses and validates every line, spilling each record to its shard's bucket;
/// returns the buckets and how many of each unsupported column were dropped.
fn spill_input(
    dir: &DataDir,
    opts: &ImportOptions,
    format: Format,
    input: std::fs::File,
    errors: &mut Errors,
) -> Result<(Vec<spill::SpilledBucket>, BTreeMap<&'static str, u64>), ImportError> {
    let shard_count = dir.shard_count();
    let spill_dir = dir.path().join(SPILL_DIR);
    let mut spill = SpillWriter::create(&spill_dir, shard_count.min(MAX_SPILL_FILES))?;
    let mut storage_err = None;
    let mut dropped = BTreeMap::new();
    parse::for_each(input, format, &mut |item| match item
        .and_then(|r| in_domain(r, &opts.domains))
        .and_then(|r| allowed_target(r, opts.refuse_target.as_ref()))
    {
        Ok(rec) => {
            for c in &rec.dropped {
                *dropped.entry(*c).or_insert(0) += 1;
            }
            let shard = shard_of(rec.key.as_bytes(), shard_count);
            let created = rec.created_at_s.unwrap_or(0);
            match spill.push(
                rec.line,
                shard,
                rec.status,
                &rec.key,
                &rec.url,
                rec.expires_at_s,
                created,
                (rec.author, rec.behaviour, &rec.rules, &rec.labels),
            ) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    storage_err = Some(e);
                    ControlFlow::Break(())
                }
            }
        }
        Err(e) => errors.push(e),
    })
    .map_err(|source| ImportError::Input {
        path: opts.input.clone(),
        source,
    })?;
    if let Some(e) = storage_err {
        return Err(e.into());
    }
    Ok((spill.finish()?, dropped))
}

/// Checks one shard's records (sorted by key, then line) against each other and the shard's
/// table, and stages the shard's new table with the new links, unless any line so far was bad.
/// Links without a creation time get `now_s`, the import's.
fn stage_shard(
    dir: &DataDir,
    group: &[spill::Spilled],
    now_s: u64,
    errors: &mut Errors,
    summary: &mut ImportSummary,
    staged: &mut Vec<(u32, PathBuf)>,
) -> Result<(), ImportError> {
    let shard = group[0].shard;
    let existing = dir.open_table(shard)?;
    let mut new_links = Vec::with_capacity(group.len());
    let mut first_line = 0;
    for (i, r) in group.iter().enumerate() {
        let problem = if i > 0 && group[i - 1].key == r.key {
            format!("duplicate key {:?}: also on line {first_line}", r.key)
        } else if let Some(old) = existing.as_ref().and_then(|t| t.get(r.key.as_bytes())) {
            first_line = r.line;
            if old.target == r.url && old.status == r.status && old.expires_at_s == r.expires_at_s {
                summary.unchanged += 1;
                continue;
            }
            format!(
                "key {:?} already exists in the data dir with a different target or status",
                r.key
            )
        } else {
            first_line = r.line;
            new_links.push(r);
            continue;
        };
        let line = r.line;
        if errors
            .push(LineError {
                line,
                message: problem,
            })
            .is_break()
        {
            break;
        }
    }
    if errors.total > 0 || new_links.is_empty() {
        // Keep checking the rest of the input, but write nothing.
        return Ok(());
    }
    let merged = existing
        .iter()
        .flat_map(|t| t.iter().map(OwnedLink::from))
        .chain(new_links.iter().map(|r| OwnedLink {
            key: r.key.clone(),
            target: r.url.clone(),
            status: r.status,
            expires_at_s: r.expires_at_s,
            created_at_s: if r.created_at_s != 0 {
                r.created_at_s
            } else {
                now_s
            },
            flags: 0,
            author: r.author,
            behaviour: r.behaviour,
            rules: r.rules.clone(),
            labels: r.labels.clone(),
        }));
    let max_log_seq = existing.as_ref().map_or(0, |t| t.max_log_seq());
    let staged_path = staged_path(dir, shard);
    staged.push((shard, staged_path.clone()));
    let (stats, file) =
        write_table_file(&staged_path, shard, dir.shard_count(), max_log_seq, merged)?;
    // Writeback overlaps with building the next tables; the fsyncs below wait.
    crate::durable::start_writeback(&file);
    summary.links += new_links.len() as u64;
    summary.shards_written += 1;
    summary.table_bytes += stats.file_bytes;
    Ok(())
}

/// Makes every staged table durable, all at once (one by one cost 4-12 ms per shard), then
/// publishes them: each renamed into place, the directory synced, the manifest updated.
fn publish(dir: &DataDir, staged: &mut Vec<(u32, PathBuf)>) -> Result<(), ImportError> {
    let staged_paths: Vec<PathBuf> = staged.iter().map(|(_, p)| p.clone()).collect();
    crate::durable::fsync_all_parallel(&staged_paths, MAX_PARALLEL_FSYNCS)?;
    let published: Vec<u32> = staged.iter().map(|(s, _)| *s).collect();
    for (shard, path) in staged.drain(..) {
        std::fs::rename(&path, dir.table_path(shard))
            .map_err(|e| crate::Error::io(dir.table_path(shard), "rename into place", e))?;
    }
    crate::durable::fsync_dir(&dir.tables_dir())?;
    dir.record_tables(published)?;
    Ok(())
}

/// `rec` with its key made its domain's stored key; a domain not declared is a bad line.
/// `rec`, unless `check` refuses its target.
fn allowed_target<'a>(
    rec: record::Record<'a>,
    check: Option<&TargetCheck>,
) -> Result<record::Record<'a>, LineError> {
    // A rule's target is a target too (the blocklist applies to it).
    let rule_targets = rec.rules.set().decode().unwrap_or_default();
    let refused = check.and_then(|c| {
        std::iter::once(rec.url.as_ref())
            .chain(rule_targets.iter().map(|r| r.target.as_str()))
            .find_map(|t| (c.0)(t))
    });
    match refused {
        Some(reason) => Err(LineError {
            line: rec.line,
            message: reason,
        }),
        None => Ok(rec),
    }
}

fn in_domain<'a>(
    mut rec: record::Record<'a>,
    domains: &BTreeMap<String, u32>,
) -> Result<record::Record<'a>, LineError> {
    let Some(name) = rec.domain.take().filter(|d| !d.is_empty()) else {
        return Ok(rec);
    };
    let ascii = name.trim_end_matches('.').to_ascii_lowercase();
    let ascii = match url::Host::parse(&ascii) {
        Ok(url::Host::Domain(d)) => d,
        _ => ascii,
    };
    let Some(&number) = domains.get(&ascii) else {
        if rec.domain_if_declared {
            return Ok(rec);
        }
        return Err(LineError {
            line: rec.line,
            message: format!(
                "domain {name:?} is not declared in this data dir (`ricochet domains add {ascii}`)"
            ),
        });
    };
    if crate::link::split_stored_key(rec.key.as_bytes()).0 != crate::link::DEFAULT_DOMAIN {
        return Err(LineError {
            line: rec.line,
            message: format!("key {:?} already names a domain number", rec.key),
        });
    }
    rec.key = Cow::Owned(crate::link::stored_key_string(number, &rec.key));
    Ok(rec)
}

/// Parses and validates every line of `input` as `format` without importing anything; returns
/// (valid records, bad lines). The line readers' entry point for fuzzing and checks.
pub fn check_input(input: &[u8], format: Format) -> std::io::Result<(u64, u64)> {
    let (mut good, mut bad) = (0, 0);
    parse::for_each(input, format, &mut |r| {
        match r {
            Ok(_) => good += 1,
            Err(_) => bad += 1,
        }
        std::ops::ControlFlow::Continue(())
    })?;
    Ok((good, bad))
}

fn staged_path(dir: &DataDir, shard: u32) -> PathBuf {
    let mut name = dir.table_path(shard).into_os_string();
    name.push(".");
    name.push(STAGED_SUFFIX);
    PathBuf::from(name)
}

/// Removes staged tables left by an import that crashed before publishing.
fn remove_stale_staged(dir: &DataDir) -> Result<(), crate::Error> {
    let tables = dir.tables_dir();
    let entries =
        std::fs::read_dir(&tables).map_err(|e| crate::Error::io(&tables, "read directory", e))?;
    let suffix = format!(".tbl.{STAGED_SUFFIX}");
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(&suffix) {
            let p = entry.path();
            std::fs::remove_file(&p)
                .map_err(|e| crate::Error::io(&p, "remove stale staged table", e))?;
        }
    }
    Ok(())
}
