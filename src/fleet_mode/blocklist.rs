//! The fleet's abuse blocklist (issue 27): entries kept in PostgreSQL (`ricochet_blocklist`,
//! `fleet::blocklist`), changed by `ricochet fleet blocklist add|remove|import|list`, and
//! followed by every node: its key watcher (`node::keywatch`) reads the table's change number
//! about once a second and the whole table only when that moved, then offers every core a list
//! built from the table and the node's own `--blocklist` file, if it has one.
//!
//! A node keeps the table as last read in its data dir ([`FLEET_BLOCKLIST_CACHE_FILE`], one
//! entry per line): one that starts while the database does not answer still refuses and
//! stops redirecting to what the fleet had blocked.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::api::blocklist::{entries_of_line, Entry, Source, FLEET_TABLE_SOURCE};

/// A fleet node's copy of the fleet's blocklist, in its data dir.
pub const FLEET_BLOCKLIST_CACHE_FILE: &str = "fleet-blocklist.txt";

/// The fleet's table as the node last read it.
pub struct FleetBlocklist {
    /// The table's change number when read; `None`: not read from the database yet (the
    /// text is the node's copy, or empty).
    version: Option<u64>,
    text: String,
    dir: PathBuf,
}

impl FleetBlocklist {
    /// The table at start: the database's (kept as the node's copy) when `db` is given and
    /// answers, else the copy last kept, else empty (said on stderr).
    pub fn at_start(dir: &Path, db: Option<&mut fleet::Db>) -> FleetBlocklist {
        let mut b = FleetBlocklist {
            version: None,
            text: String::new(),
            dir: dir.to_owned(),
        };
        if let Some(db) = db {
            if b.poll(db) {
                return b;
            }
        }
        let path = dir.join(FLEET_BLOCKLIST_CACHE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                eprintln!(
                    "refusing the fleet's blocklist as last read ({} lines, from {}) until the \
                     database answers",
                    text.lines().count(),
                    path.display()
                );
                b.text = text;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("cannot read {}: {e}", path.display()),
        }
        b
    }

    /// Reads the table again if its change number moved; whether the text changed. A failed
    /// read keeps the list in force, and says so.
    pub fn poll(&mut self, db: &mut fleet::Db) -> bool {
        let result = fleet::blocklist::blocklist_version(db).and_then(|v| {
            if Some(v) == self.version {
                return Ok(None);
            }
            fleet::blocklist::read_blocklist(db).map(Some)
        });
        match result {
            Ok(None) => false,
            Ok(Some((version, text))) => {
                self.version = Some(version);
                if text == self.text {
                    return false;
                }
                self.text = text;
                self.keep_copy();
                true
            }
            Err(e) => {
                eprintln!("cannot read the fleet's blocklist: {e}; keeping the list in force");
                false
            }
        }
    }

    fn keep_copy(&self) {
        let mut bytes = self.text.clone().into_bytes();
        bytes.push(b'\n');
        if let Err(e) =
            shards::durable::write_atomic(&self.dir, FLEET_BLOCKLIST_CACHE_FILE, &bytes, 0o644)
        {
            eprintln!("cannot keep a copy of the fleet's blocklist: {e}");
        }
    }

    /// The table's text, one entry per line.
    pub fn source(&self) -> Source<'_> {
        Source {
            name: FLEET_TABLE_SOURCE,
            text: &self.text,
        }
    }
}

/// The canonical entries `lines` name (each an argument or a file's line, named by `what`
/// in errors), each once, in order; every bad line is an error, and none is written then.
pub fn canonical_entries<'a>(
    lines: impl Iterator<Item = (String, &'a str)>,
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut bad = Vec::new();
    for (what, line) in lines {
        match entries_of_line(line) {
            Ok(entries) => {
                for e in entries.iter().map(Entry::line) {
                    if seen.insert(e.clone()) {
                        out.push(e);
                    }
                }
            }
            Err(reason) => bad.push(format!("{what}: {reason}")),
        }
    }
    if !bad.is_empty() {
        let shown = bad.len().min(crate::api::blocklist::MAX_REPORTED_BAD_LINES);
        anyhow::bail!(
            "{} bad entries, nothing written:\n  {}{}",
            bad.len(),
            bad[..shown].join("\n  "),
            if bad.len() > shown { "\n  ..." } else { "" }
        );
    }
    Ok(out)
}

/// `ricochet fleet blocklist ...`.
#[derive(clap::Subcommand, Debug)]
pub enum BlocklistCommand {
    /// Add entries: hosts (blocking their subdomains), `host/path*` prefixes, exact URLs, or
    /// hosts-file lines; every node refuses and stops redirecting to them within about a
    /// second.
    Add {
        #[arg(required = true)]
        entries: Vec<String>,
        /// Why (kept with each entry, shown by `list`).
        #[arg(long)]
        note: Option<String>,
    },
    /// Add every entry of a file in the formats `--blocklist` reads; a bad line refuses the
    /// whole file (named by line), so nothing is half-imported.
    Import {
        file: PathBuf,
        #[arg(long)]
        note: Option<String>,
    },
    /// Remove entries (written in any form `add` takes).
    Remove {
        #[arg(required = true)]
        entries: Vec<String>,
    },
    /// Every entry, with when, by whom and why it was added.
    List,
}

/// Runs `cmd` against the fleet's table at `pg`, printing what it did.
pub fn run_command(pg: &str, cmd: BlocklistCommand) -> anyhow::Result<()> {
    let mut db = fleet::Db::new(pg)?;
    match cmd {
        BlocklistCommand::Add { entries, note } => {
            let lines = entries.iter().map(|e| (format!("{e:?}"), e.as_str()));
            add(&mut db, &canonical_entries(lines)?, note.as_deref())
        }
        BlocklistCommand::Import { file, note } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = file.display().to_string();
            let lines = text
                .lines()
                .enumerate()
                .map(|(i, l)| (format!("{name}:{}", i + 1), l));
            add(&mut db, &canonical_entries(lines)?, note.as_deref())
        }
        BlocklistCommand::Remove { entries } => {
            let lines = entries.iter().map(|e| (format!("{e:?}"), e.as_str()));
            let wanted = canonical_entries(lines)?;
            let removed = fleet::blocklist::remove_entries(&mut db, &wanted)?;
            println!("removed {} entries", removed.len());
            for w in wanted.iter().filter(|w| !removed.contains(w)) {
                println!("not listed: {w}");
            }
            Ok(())
        }
        BlocklistCommand::List => {
            let rows = fleet::blocklist::list_blocklist(&mut db)?;
            for r in &rows {
                println!(
                    "{}\tadded {} by {}\t{}",
                    r.entry,
                    crate::api::timefmt::format_rfc3339_utc(r.added_at_s),
                    r.added_by,
                    r.note.as_deref().unwrap_or("")
                );
            }
            eprintln!("{} entries", rows.len());
            Ok(())
        }
    }
}

fn add(db: &mut fleet::Db, entries: &[String], note: Option<&str>) -> anyhow::Result<()> {
    anyhow::ensure!(!entries.is_empty(), "no entries to add");
    let by = std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned());
    let added = fleet::blocklist::add_entries(db, entries, &by, note)?;
    println!(
        "added {added} entries ({} already listed); every node follows within about a second",
        entries.len() as u64 - added
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_canonical_once_each_and_a_bad_one_writes_nothing() {
        let lines = [
            "EVIL.example.",
            "0.0.0.0 evil.example sink.example",
            "phish.example/login",
            "HTTPS://Exact.example/a?b=1#frag",
            "# a comment",
        ];
        let got = canonical_entries(lines.iter().map(|l| (l.to_string(), *l))).unwrap();
        assert_eq!(
            got,
            [
                "evil.example",
                "sink.example",
                "phish.example/login*",
                "http://exact.example/a?b=1"
            ]
        );
        let bad = ["evil.example", "not a line", "http://"];
        let e = canonical_entries(
            bad.iter()
                .enumerate()
                .map(|(i, l)| (format!("f:{}", i + 1), *l)),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("2 bad entries") && e.contains("f:2") && e.contains("f:3"),
            "{e}"
        );
    }
}
