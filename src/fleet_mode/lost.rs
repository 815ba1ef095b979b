//! The `fleet-lost-*` files: the links a node held that the database it regenerates or
//! re-bootstraps from lacks, saved for the operator before they are replaced; and the
//! `fleet-undone-deletes-*` files: the keys a node held deleted that the database holds live
//! (a delete the rollback lost, so the link is served again).

use shards::datadir::DataDir;
use shards::table::Table;

/// Prefix of the file (in the data dir, `<prefix><unix s>.ndjson`, the importer's and the
/// API's format) that lists the links a regeneration after a rollback found here and not in
/// the database.
pub const LOST_FILE_PREFIX: &str = "fleet-lost-";

/// Prefix of the file (`<prefix><unix s>.ndjson`, one `{"key": ...}` per line) that lists the
/// keys a regeneration after a rollback found deleted here and live in the database: deletes
/// the database lost, which the operator repeats. Only a delete whose tombstone the node still
/// held is found (one a compaction already folded away is not: the docs say so).
pub const UNDONE_DELETES_FILE_PREFIX: &str = "fleet-undone-deletes-";

/// The links `dir` holds (its tables and logs, `shards::export`), to `to` (NDJSON), followed
/// by one `{"key": ..., "deleted": true}` line per key its logs hold deleted.
pub(crate) fn export_held(dir: &DataDir, to: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let mut held = std::io::BufWriter::new(std::fs::File::create(to)?);
    shards::export::export(
        dir.path(),
        shards::export::ExportFormat::Ndjson,
        shards::timefmt::now_s(),
        &Default::default(),
        &mut held,
    )?;
    for key in shards::export::held_deletes(dir.path())? {
        serde_json::to_writer(&mut held, &serde_json::json!({"key": key, "deleted": true}))?;
        held.write_all(b"\n")?;
    }
    held.flush()?;
    held.get_ref().sync_all()?;
    Ok(())
}

/// The links of `held_path` (an [`export_held`] file) that `generation`'s tables lack or hold
/// with another target or status, as they were held, to a [`LOST_FILE_PREFIX`] file in
/// `data_dir`; its deleted keys that `generation` holds live, to an
/// [`UNDONE_DELETES_FILE_PREFIX`] file; each reported in the log. Nothing is written for
/// none.
pub(crate) fn write_lost(
    held_path: &std::path::Path,
    data_dir: &std::path::Path,
    generation: &DataDir,
) -> anyhow::Result<()> {
    use std::io::BufRead;
    let now_s = shards::timefmt::now_s();
    let main_shards = generation.shard_count();
    let mut tables: std::collections::HashMap<u32, Option<Table>> = Default::default();
    let mut lost = Vec::new();
    let mut undone = Vec::new();
    for line in std::io::BufReader::new(std::fs::File::open(held_path)?).lines() {
        let line = line?;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let Some(key) = v["key"].as_str() else {
            continue;
        };
        let shard = shards::placement::shard_of(key.as_bytes(), main_shards);
        let table = match tables.entry(shard) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(generation.open_table(shard)?),
        };
        // Lost: gone from the database, or there with another target or status (a change
        // the database lost; the node served this one).
        let kept = table.as_ref().and_then(|t| t.get(key.as_bytes()));
        if v["deleted"].as_bool() == Some(true) {
            if kept.is_some() {
                serde_json::to_writer(&mut undone, &serde_json::json!({"key": key}))?;
                undone.push(b'\n');
            }
            continue;
        }
        let same = kept.is_some_and(|l| {
            v["long_url"].as_str() == Some(l.target)
                && v["status"].as_u64() == Some(u64::from(l.status.code()))
        });
        if !same {
            lost.extend_from_slice(line.as_bytes());
            lost.push(b'\n');
        }
    }
    if let Some((n, path)) = save_new(data_dir, LOST_FILE_PREFIX, now_s, &lost)? {
        eprintln!(
            "fleet: {n} links this node held are not in the database it regenerates from, or \
             are there with another target or status (lost there by the rollback, or changed \
             or deleted since): saved to {}, as this node held them. Re-create or change the \
             ones that should be so through the API (`ricochet import` reads the file's format \
             into a single-node dir)",
            path.display()
        );
    }
    if let Some((n, path)) = save_new(data_dir, UNDONE_DELETES_FILE_PREFIX, now_s, &undone)? {
        eprintln!(
            "fleet: {n} keys this node held deleted are live in the database it regenerates \
             from (a delete lost there by the rollback, or a re-creation since): listed in {}. \
             Delete again through the API the ones that should be gone",
            path.display()
        );
    }
    Ok(())
}

/// `lines` to a new `<prefix><now_s>[-n].ndjson` in `data_dir`, durably: the lines written
/// and the file, or `None` for no lines. Never over another file: two regenerations in one
/// second each keep their own.
fn save_new(
    data_dir: &std::path::Path,
    prefix: &str,
    now_s: u64,
    lines: &[u8],
) -> anyhow::Result<Option<(usize, std::path::PathBuf)>> {
    if lines.is_empty() {
        return Ok(None);
    }
    let name = (0u32..)
        .map(|i| match i {
            0 => format!("{prefix}{now_s}.ndjson"),
            i => format!("{prefix}{now_s}-{i}.ndjson"),
        })
        .find(|name| !data_dir.join(name).exists())
        .expect("some suffix is free");
    shards::durable::write_atomic(data_dir, &name, lines, 0o600)?;
    let n = lines.iter().filter(|&&b| b == b'\n').count();
    Ok(Some((n, data_dir.join(name))))
}
