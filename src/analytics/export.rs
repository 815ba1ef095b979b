//! `--click-export DIR`: every group commit's changed link-days (and purges) as NDJSON lines,
//! schema v1 (docs/analytics.md), for log shippers such as Vector or Fluent Bit.
//!
//! Each owner core's aggregator writes its own files, `clicks-<core>-<opened ms>.ndjson.part`
//! while open, renamed to `.ndjson` when closed: at the UTC day's end, past
//! [`EXPORT_FILE_MAX_BYTES`], or at shutdown (and at start for `.part` files a crash left).
//! At most [`EXPORT_MAX_FILES`] closed files per core are kept; older ones are deleted. A
//! line carries a link-day's totals, not a delta: consumers upsert by (`key`, `day`), so a
//! line repeated or lost after a crash is corrected by the link-day's next line.

use super::stats::{format_day, rfc3339_ms};
use shards::clicks::{Day, FacetKind, LinkDay};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Bytes after which an export file is closed and a new one opened.
pub const EXPORT_FILE_MAX_BYTES: u64 = 64 << 20;
/// Closed export files kept per core.
pub const EXPORT_MAX_FILES: usize = 200;
/// The line schema's version (`"v"`).
pub const EXPORT_SCHEMA_VERSION: u32 = 1;

/// One core's export stream.
pub struct Exporter {
    dir: PathBuf,
    core: usize,
    open: Option<Open>,
}

struct Open {
    file: File,
    part: PathBuf,
    opened_ms: u64,
    day: Day,
    bytes: u64,
    lines: u64,
}

impl Exporter {
    /// Exports into `dir` (created if missing); closes `.part` files of this core an earlier
    /// run left open.
    pub fn new(dir: &Path, core: usize) -> io::Result<Exporter> {
        std::fs::create_dir_all(dir)?;
        let prefix = format!("clicks-{core}-");
        for e in std::fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name.ends_with(".ndjson.part") {
                let done = dir.join(name.trim_end_matches(".part"));
                std::fs::rename(e.path(), done)?;
            }
        }
        let x = Exporter {
            dir: dir.to_path_buf(),
            core,
            open: None,
        };
        x.prune()?;
        Ok(x)
    }

    /// Appends `lines` (whole NDJSON lines) to the current file, first closing it if its day
    /// passed or it is full.
    pub fn write(&mut self, lines: &[u8], count: u64, now_ms: u64) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let day = shards::clicks::day_of(now_ms / 1000);
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.day != day || o.bytes >= EXPORT_FILE_MAX_BYTES)
        {
            self.close()?;
        }
        if self.open.is_none() {
            let part = self
                .dir
                .join(format!("clicks-{}-{now_ms}.ndjson.part", self.core));
            let file = OpenOptions::new().create(true).append(true).open(&part)?;
            self.open = Some(Open {
                file,
                part,
                opened_ms: now_ms,
                day,
                bytes: 0,
                lines: 0,
            });
        }
        let o = self.open.as_mut().expect("opened");
        o.file.write_all(lines)?;
        o.bytes += lines.len() as u64;
        o.lines += count;
        Ok(())
    }

    /// Line ids of the next lines: `<core>-<file opened ms>-<line>`.
    pub fn next_id(&self, offset: u64, now_ms: u64) -> String {
        match &self.open {
            Some(o) => format!("{}-{}-{}", self.core, o.opened_ms, o.lines + offset),
            None => format!("{}-{now_ms}-{offset}", self.core),
        }
    }

    /// Closes the current file (renamed from `.part`), and deletes the oldest past the limit.
    pub fn close(&mut self) -> io::Result<()> {
        if let Some(o) = self.open.take() {
            o.file.sync_data()?;
            std::fs::rename(&o.part, o.part.with_extension(""))?;
            self.prune()?;
        }
        Ok(())
    }

    fn prune(&self) -> io::Result<()> {
        let prefix = format!("clicks-{}-", self.core);
        let mut closed: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.dir)?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let ms = name
                    .strip_prefix(&prefix)?
                    .strip_suffix(".ndjson")?
                    .parse()
                    .ok()?;
                Some((ms, e.path()))
            })
            .collect();
        closed.sort();
        let extra = closed.len().saturating_sub(EXPORT_MAX_FILES);
        for (_, p) in closed.into_iter().take(extra) {
            std::fs::remove_file(p)?;
        }
        Ok(())
    }
}

/// The NDJSON line of one link-day's totals.
pub fn state_line(id: &str, now_ms: u64, key: &[u8], day: Day, l: &LinkDay, out: &mut Vec<u8>) {
    let facet = |kind: FacetKind| -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for f in l.facets.iter().filter(|f| f.kind == kind) {
            let e = m.entry(f.value.to_string()).or_insert(serde_json::json!(0));
            *e = serde_json::json!(e.as_u64().unwrap_or(0) + f.count);
        }
        serde_json::Value::Object(m)
    };
    let v = serde_json::json!({
        "v": EXPORT_SCHEMA_VERSION,
        "id": id,
        "type": "link_day",
        "at": rfc3339_ms(now_ms),
        "key": String::from_utf8_lossy(key),
        "day": format_day(day),
        "clicks": l.clicks,
        "bot_clicks": l.bot_clicks,
        "unique_visitors": l.humans.estimate(),
        "unique_bots": l.bots.estimate(),
        "referrers": facet(FacetKind::Referrer),
        "countries": facet(FacetKind::Country),
        "browsers": facet(FacetKind::Browser),
        "os": facet(FacetKind::Os),
        "devices": facet(FacetKind::Device),
        "rules": facet(FacetKind::Rule),
    });
    serde_json::to_writer(&mut *out, &v).expect("a Vec takes JSON");
    out.push(b'\n');
}

/// The NDJSON line of a purge (a deleted link, or a reset).
pub fn purge_line(id: &str, now_ms: u64, key: &[u8], out: &mut Vec<u8>) {
    let v = serde_json::json!({
        "v": EXPORT_SCHEMA_VERSION, "id": id, "type": "purge", "at": rfc3339_ms(now_ms),
        "key": String::from_utf8_lossy(key),
    });
    serde_json::to_writer(&mut *out, &v).expect("a Vec takes JSON");
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_parts_until_closed_and_a_bounded_number_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut x = Exporter::new(tmp.path(), 3).unwrap();
        let l = LinkDay {
            clicks: 5,
            ..LinkDay::default()
        };
        let mut line = Vec::new();
        state_line("3-1-0", 1_000, b"abc", 20_000, &l, &mut line);
        x.write(&line, 1, 1_000).unwrap();
        let names = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(tmp.path()), vec!["clicks-3-1000.ndjson.part"]);
        // The next UTC day closes it.
        x.write(&line, 1, 86_400_000 + 5).unwrap();
        assert_eq!(
            names(tmp.path()),
            vec!["clicks-3-1000.ndjson", "clicks-3-86400005.ndjson.part"]
        );
        let text = std::fs::read_to_string(tmp.path().join("clicks-3-1000.ndjson")).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["v"], serde_json::json!(1));
        assert_eq!(v["clicks"], serde_json::json!(5));
        assert_eq!(v["day"], serde_json::json!(format_day(20_000)));
        // A restart closes what a crash left open.
        drop(x);
        let _x = Exporter::new(tmp.path(), 3).unwrap();
        assert_eq!(
            names(tmp.path()),
            vec!["clicks-3-1000.ndjson", "clicks-3-86400005.ndjson"]
        );
        for i in 0..EXPORT_MAX_FILES + 3 {
            std::fs::write(
                tmp.path()
                    .join(format!("clicks-3-{}.ndjson", 10_000_000 + i)),
                "",
            )
            .unwrap();
        }
        let _x = Exporter::new(tmp.path(), 3).unwrap();
        assert_eq!(names(tmp.path()).len(), EXPORT_MAX_FILES);
    }
}
