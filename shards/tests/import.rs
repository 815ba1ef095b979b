//! Import tests: each format, bad lines, duplicates, strict mode, merges, nothing written on error.

use shards::import::{run, Format, ImportError, ImportOptions, MAX_REPORTED_ERRORS};
use shards::link::RedirectStatus;
use shards::placement::shard_of;
use shards::DataDir;
use std::path::{Path, PathBuf};

fn write_input(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn opts(data: &Path, input: &Path) -> ImportOptions {
    let mut o = ImportOptions::new(data, input);
    o.shard_count_for_new_dir = 8;
    o
}

fn lookup(data: &Path, key: &str) -> Option<(String, RedirectStatus)> {
    let d = DataDir::open(data).unwrap();
    let t = d
        .open_table(shard_of(key.as_bytes(), d.shard_count()))
        .unwrap()?;
    t.get(key.as_bytes())
        .map(|l| (l.target.to_owned(), l.status))
}

fn bad_lines(e: ImportError) -> (Vec<(u64, String)>, u64) {
    match e {
        ImportError::BadLines { errors, total, .. } => (
            errors.into_iter().map(|e| (e.line, e.message)).collect(),
            total,
        ),
        other => panic!("expected bad lines, got {other}"),
    }
}

/// Every table file in the data dir, with its bytes (to prove nothing changed).
fn snapshot(data: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = match std::fs::read_dir(data.join("tables")) {
        Ok(rd) => rd
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

#[test]
fn tsv_import_with_comments_blanks_and_statuses() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let input = write_input(
        t.path(),
        "links.tsv",
        "key\tlong_url\tstatus\n# a comment\n\nabc\thttps://example.com/a\nAbc\thttps://example.com/B\t301\r\nx-1\thttp://h/x\t308\n",
    );
    let s = run(&opts(&data, &input)).unwrap();
    assert_eq!(s.links, 3);
    assert!(s.shards_written >= 1 && s.shards_written <= 3);
    let text = s.to_string();
    assert!(text.starts_with("imported 3 links into "), "{text}");
    assert_eq!(
        lookup(&data, "abc"),
        Some(("https://example.com/a".into(), RedirectStatus::Found))
    );
    assert_eq!(
        lookup(&data, "Abc"),
        Some((
            "https://example.com/B".into(),
            RedirectStatus::MovedPermanently
        ))
    );
    assert_eq!(
        lookup(&data, "x-1").unwrap().1,
        RedirectStatus::PermanentRedirect
    );
    assert_eq!(lookup(&data, "ABC"), None);
    assert_eq!(DataDir::open(&data).unwrap().shard_count(), 8);
    // No leftovers.
    assert!(!data.join("import.spill").exists());
    for (p, _) in snapshot(&data) {
        let p = p.to_string_lossy();
        assert!(
            p.ends_with(".tbl") || p.ends_with("tables/INVENTORY"),
            "{p}"
        );
    }
}

#[test]
fn csv_import_with_quotes_and_header() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let input = write_input(
        t.path(),
        "links.csv",
        "key,long_url,status\n\"q1\",\"https://e.com/?a=1,b=2\",307\n\nplain,https://e.com/p\n",
    );
    let s = run(&opts(&data, &input)).unwrap();
    assert_eq!(s.links, 2);
    assert_eq!(
        lookup(&data, "q1"),
        Some((
            "https://e.com/?a=1,b=2".into(),
            RedirectStatus::TemporaryRedirect
        ))
    );
    assert_eq!(lookup(&data, "plain").unwrap().0, "https://e.com/p");
}

#[test]
fn ndjson_import() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let input = write_input(
        t.path(),
        "links.jsonl",
        "{\"key\":\"j1\",\"long_url\":\"https://e.com/\\u0041\"}\n\n{\"key\":\"j2\",\"long_url\":\"https://e.com/2\",\"status\":301}\n",
    );
    run(&opts(&data, &input)).unwrap();
    assert_eq!(lookup(&data, "j1").unwrap().0, "https://e.com/A");
    assert_eq!(
        lookup(&data, "j2").unwrap().1,
        RedirectStatus::MovedPermanently
    );

    // Explicit format overrides the extension.
    let other = write_input(
        t.path(),
        "links.txt",
        "{\"key\":\"j3\",\"long_url\":\"https://e.com/3\"}\n",
    );
    let mut o = opts(&data, &other);
    assert!(matches!(run(&o), Err(ImportError::UnknownFormat { .. })));
    o.format = Some(Format::Ndjson);
    run(&o).unwrap();
    assert!(lookup(&data, "j3").is_some());
}

#[test]
fn bad_lines_reported_with_numbers_and_nothing_written() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let good = write_input(t.path(), "good.tsv", "keep\thttps://e.com/keep\n");
    run(&opts(&data, &good)).unwrap();
    let before = snapshot(&data);

    let input = write_input(
        t.path(),
        "links.tsv",
        "ok1\thttps://e.com/1\nbad/key\thttps://e.com/2\nok3\tftp://e.com/3\nok4\thttps://e.com/4\t303\nonlyone\nok6\thttps://e.com/6\n",
    );
    let e = run(&opts(&data, &input)).unwrap_err();
    let shown = e.to_string();
    assert!(
        shown.contains("links.tsv:3: URL scheme must be http:// or https://"),
        "{shown}"
    );
    assert!(
        shown.contains("links.tsv:2: key may contain only"),
        "{shown}"
    );
    let (lines, total) = bad_lines(e);
    assert_eq!(total, 4);
    assert_eq!(
        lines.iter().map(|l| l.0).collect::<Vec<_>>(),
        vec![2, 3, 4, 5]
    );
    assert!(lines[2].1.contains("301, 302, 307 or 308"));
    assert_eq!(snapshot(&data), before, "tables untouched");
    assert!(lookup(&data, "ok1").is_none());
    assert!(!data.join("import.spill").exists());
}

#[test]
fn duplicate_key_names_both_lines() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let input = write_input(
        t.path(),
        "links.csv",
        "a,https://e.com/1\nb,https://e.com/2\nc,https://e.com/3\na,https://e.com/4\n",
    );
    let e = run(&opts(&data, &input)).unwrap_err();
    let shown = e.to_string();
    let (lines, total) = bad_lines(e);
    assert_eq!(total, 1);
    assert_eq!(lines[0].0, 4);
    assert!(lines[0].1.contains("line 1"), "{:?}", lines[0]);
    assert!(
        shown.contains("links.csv:4: duplicate key \"a\": also on line 1"),
        "{shown}"
    );
    assert!(
        !data.exists(),
        "a data dir created by a failed import is removed"
    );
}

#[test]
fn strict_stops_at_first_error() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let input = write_input(t.path(), "l.tsv", "a\tnope\nb\tnope\nc\tnope\n");
    let (lines, total) = bad_lines(run(&opts(&data, &input)).unwrap_err());
    assert_eq!((lines.len(), total), (3, 3));
    let mut o = opts(&data, &input);
    o.strict = true;
    let (lines, total) = bad_lines(run(&o).unwrap_err());
    assert_eq!((total, lines[0].0), (1, 1));

    // Duplicates (found in pass 2) also stop at the first in strict mode.
    let dups: String = (0..50)
        .map(|i| format!("d{i}\thttps://e.com/\nd{i}\thttps://e.com/\n"))
        .collect();
    let mut o = opts(&data, &write_input(t.path(), "d.tsv", &dups));
    let (_, total) = bad_lines(run(&o).unwrap_err());
    assert_eq!(total, 50);
    o.strict = true;
    let (_, total) = bad_lines(run(&o).unwrap_err());
    assert_eq!(total, 1);
}

#[test]
fn error_report_is_capped() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let n = MAX_REPORTED_ERRORS + 50;
    let text: String = (0..n).map(|i| format!("k{i}\tbad-url\n")).collect();
    let input = write_input(t.path(), "l.tsv", &text);
    let e = run(&opts(&data, &input)).unwrap_err();
    assert!(e.to_string().ends_with("... and 50 more"), "{e}");
    let (lines, total) = bad_lines(e);
    assert_eq!((lines.len(), total), (MAX_REPORTED_ERRORS, n as u64));
}

#[test]
fn merge_with_existing_tables() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let first: String = (0..200)
        .map(|i| format!("a{i}\thttps://e.com/a{i}\n"))
        .collect();
    run(&opts(&data, &write_input(t.path(), "1.tsv", &first))).unwrap();

    // Same key and target again: skipped. New keys: added beside the old ones.
    let second: String = "a5\thttps://e.com/a5\n".to_string()
        + &(0..200)
            .map(|i| format!("b{i}\thttps://e.com/b{i}\n"))
            .collect::<String>();
    let s = run(&opts(&data, &write_input(t.path(), "2.tsv", &second))).unwrap();
    assert_eq!((s.links, s.unchanged), (200, 1));
    assert!(s.to_string().contains("1 already present"));
    for i in 0..200 {
        assert_eq!(
            lookup(&data, &format!("a{i}")).unwrap().0,
            format!("https://e.com/a{i}")
        );
        assert_eq!(
            lookup(&data, &format!("b{i}")).unwrap().0,
            format!("https://e.com/b{i}")
        );
    }

    // Existing key with a different target: error naming the line; nothing changes.
    let before = snapshot(&data);
    let third = "c1\thttps://e.com/c1\na7\thttps://other.example/\n";
    let (lines, _) =
        bad_lines(run(&opts(&data, &write_input(t.path(), "3.tsv", third))).unwrap_err());
    assert_eq!(lines[0].0, 2);
    assert!(lines[0].1.contains("already exists"), "{:?}", lines[0]);
    assert_eq!(snapshot(&data), before);
    assert!(lookup(&data, "c1").is_none());
}

#[test]
fn import_places_each_key_in_its_shard() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let text: String = (0..2000)
        .map(|i| format!("key{i}\thttps://e.com/{i}\n"))
        .collect();
    run(&opts(&data, &write_input(t.path(), "l.tsv", &text))).unwrap();
    let d = DataDir::open(&data).unwrap();
    let mut total = 0;
    for shard in 0..d.shard_count() {
        if let Some(table) = d.open_table(shard).unwrap() {
            for (key, _) in table.iter() {
                assert_eq!(shard_of(key.as_bytes(), d.shard_count()), shard, "{key}");
                total += 1;
            }
        }
    }
    assert_eq!(total, 2000);
}

#[test]
fn import_refuses_a_locked_dir() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let d = DataDir::create(&data, 4).unwrap();
    let _held = d.lock_exclusive().unwrap();
    let input = write_input(t.path(), "l.tsv", "a\thttps://e.com/\n");
    let e = run(&opts(&data, &input)).unwrap_err();
    assert!(
        matches!(e, ImportError::Storage(shards::Error::Locked { .. })),
        "{e}"
    );
}

#[test]
fn long_line_is_reported_not_buffered() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let long = format!(
        "big\thttps://e.com/{}\n",
        "x".repeat(shards::import::MAX_LINE_BYTES)
    );
    let input = write_input(
        t.path(),
        "l.tsv",
        &format!("a\thttps://e.com/\n{long}b\thttps://e.com/\n"),
    );
    let (lines, total) = bad_lines(run(&opts(&data, &input)).unwrap_err());
    assert_eq!((total, lines[0].0), (1, 2));
}

#[test]
fn missing_input_is_a_clear_error() {
    let t = tempfile::tempdir().unwrap();
    let e = run(&opts(&t.path().join("d"), &t.path().join("absent.tsv"))).unwrap_err();
    assert!(e.to_string().contains("absent.tsv"), "{e}");
}
