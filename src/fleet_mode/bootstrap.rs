//! A node's links from a database snapshot: the first start of an empty data dir
//! (`bootstrap`), a start after a crash mid-regeneration (`rebootstrap_if_behind`), and the
//! snapshot a regeneration imports (`import_snapshot`).

use super::continuity::links_origin;
use super::continuity::unfollowable;
use super::continuity::Followed;
use super::continuity::RegenCause;
use super::files::load_cursor_at;
use super::files::save_cursor;
use super::files::save_cursor_file;
use super::files::save_identity;
use super::files::LinksOrigin;
use super::files::BOOTSTRAP_FILE;
use super::files::CURSOR_FILE;
use super::files::HELD_BEFORE_REBOOTSTRAP_FILE;
use super::files::REBOOTSTRAP_MARKER;
use super::files::RESETS_CURSOR_FILE;
use fleet::history::Position;
use shards::link::RedirectStatus;

/// A bootstrap leaves out links that expire within this many seconds: the importer refuses
/// expiries in the past, and such a link is still read through while it lives.
pub const BOOTSTRAP_MIN_LIFE_S: u64 = 60;

/// A new fleet node's first start: the live links of one database snapshot go through the
/// importer into the (empty) data dir's tables, and the feed cursor is set to the snapshot, so
/// the follower only replays what changed from there. Returns the links imported. A crash
/// midway leaves either no tables (bootstrapped again) or tables without a cursor (the feed
/// replays from the start, idempotently).
pub fn bootstrap(dir: &shards::datadir::DataDir, url: &str) -> anyhow::Result<u64> {
    // Read before the snapshot: every removal counted here is reflected in it.
    let held = LinksOrigin::now(&mut fleet::Db::new(url)?)?;
    let (cursor, at, links) = import_snapshot(dir, url)?;
    let held_before = dir.path().join(HELD_BEFORE_REBOOTSTRAP_FILE);
    if held_before.exists() {
        super::lost::write_lost(&held_before, dir.path(), dir)?;
        std::fs::remove_file(&held_before)?;
    }
    if !dir.path().join(RESETS_CURSOR_FILE).exists() {
        save_cursor_file(dir.path(), RESETS_CURSOR_FILE, &cursor, None)?;
    }
    save_identity(dir.path(), &held)?;
    save_cursor(dir.path(), &cursor, at.as_ref())?;
    Ok(links)
}

/// At start, before the logs are read: whether this fleet node's links must be bootstrapped
/// again (its cursor cannot be continued, [`unfollowable`]; or a bootstrap or regeneration
/// was cut short), and if so wipes them: the tables, the logs, a regeneration's staging dir
/// and the cursor go; the fleet marker, the key secret, the allocation evidence and the
/// clicks stay. The caller then finds an empty dir and
/// bootstraps it. The database is the system of record, so redoing this is always safe.
pub fn rebootstrap_if_behind(dir: &shards::datadir::DataDir, url: &str) -> anyhow::Result<bool> {
    use anyhow::Context;
    let path = dir.path();
    let cut_short = path.join(REBOOTSTRAP_MARKER).exists();
    if !cut_short {
        if !path.join(CURSOR_FILE).exists() {
            return Ok(false);
        }
        let (cursor, at) = load_cursor_at(path)?;
        let mut db = fleet::Db::new(url)?;
        let held = links_origin(path, &mut db)?;
        let mut followed = Followed {
            at,
            writes_before: None,
        };
        let Some((cause, why)) = unfollowable(&mut db, &cursor, &held, &mut followed, 0)? else {
            return Ok(false);
        };
        eprintln!("fleet: {why}. Bootstrapping its links again from a snapshot");
        let held_path = path.join(HELD_BEFORE_REBOOTSTRAP_FILE);
        if cause == RegenCause::Rollback && !held_path.exists() {
            // Links the database lost may be here: kept until the bootstrap lists them.
            super::lost::export_held(dir, &held_path)
                .context("saving the links held before the re-bootstrap")?;
        }
    } else {
        eprintln!("fleet: a bootstrap of this node's links was cut short; doing it again");
    }
    shards::durable::write_atomic(path, REBOOTSTRAP_MARKER, b"rebootstrap\n", 0o644)
        .context("writing the re-bootstrap marker")?;
    let subs = [
        shards::datadir::TABLES_DIR,
        shards::log::LOG_DIR_NAME,
        super::files::REGEN_DIR,
    ];
    for sub in subs {
        let d = path.join(sub);
        match std::fs::remove_dir_all(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", d.display())),
        }
    }
    std::fs::create_dir_all(dir.tables_dir())
        .with_context(|| format!("creating {}", dir.tables_dir().display()))?;
    let _ = std::fs::remove_file(path.join(CURSOR_FILE));
    shards::durable::sync_dir(path).context("syncing the data dir")?;
    Ok(true)
}

/// The live links of one database snapshot, through the importer into `dir`'s tables (a
/// fresh dir: a new node's, or a regeneration's staging dir). Returns the snapshot's cursor,
/// the database's position as of it and the links imported; the copy ([`BOOTSTRAP_FILE`] in
/// `dir`) is deleted afterwards.
pub fn import_snapshot(
    dir: &shards::datadir::DataDir,
    url: &str,
) -> anyhow::Result<(fleet::feed::Cursor, Option<Position>, u64)> {
    use std::io::Write;
    let path = dir.path().join(BOOTSTRAP_FILE);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let now_s = shards::timefmt::now_s();
    let mut unusable = 0u64;
    let (cursor, at) = fleet::feed::snapshot(url, now_s, BOOTSTRAP_MIN_LIFE_S, |links| {
        for l in links {
            if let Err(why) = snapshot_link_usable(l) {
                // Not a link the importer takes (a row written around the API): left out and
                // said, never a bootstrap that fails for every node on one row.
                unusable += 1;
                eprintln!(
                    "fleet: snapshot row for {:?} is not a link this node can hold ({why}); \
                     left out; fix the row in ricochet_links",
                    l.key
                );
                continue;
            }
            let mut line = serde_json::json!({
                "key": l.key,
                "long_url": l.target,
                "status": l.status,
                "created_at": shards::timefmt::format_rfc3339_utc(l.created_at.max(0) as u64),
            });
            if !l.author.is_empty() {
                line["author"] = l.author.as_str().into();
            }
            if l.expires_at > 0 {
                line["expires_at"] =
                    shards::timefmt::format_rfc3339_utc(l.expires_at as u64).into();
            }
            // Its behaviour's members, as the importer reads them (checked usable above).
            if let (Some(b), Some(obj)) = (&l.behaviour, line.as_object_mut()) {
                if let Ok(serde_json::Value::Object(members)) = serde_json::from_str(b) {
                    obj.extend(members);
                }
            }
            writeln!(out, "{line}")?;
        }
        Ok(())
    })?;
    out.flush()?;
    drop(out);
    let mut opts = shards::import::ImportOptions::new(dir.path(), &path);
    opts.format = Some(shards::import::Format::Ndjson);
    opts.strict = true;
    let summary = shards::import::run_locked(dir, &opts)
        .map_err(|e| anyhow::anyhow!("bootstrap: importing the snapshot: {e}"))?;
    let _ = std::fs::remove_file(&path);
    Ok((cursor, at, summary.links))
}

/// Whether a snapshot row passes the importer's checks (key, target, status).
fn snapshot_link_usable(l: &fleet::feed::LiveLink) -> Result<(), String> {
    shards::link::validate_stored_key(l.key.as_bytes()).map_err(|e| e.to_string())?;
    shards::link::validate_url(&l.target).map_err(|e| e.to_string())?;
    u16::try_from(l.status)
        .ok()
        .and_then(RedirectStatus::from_code)
        .ok_or_else(|| format!("status {}", l.status))?;
    if l.created_at < 0 || l.expires_at < 0 {
        return Err("a negative time".into());
    }
    if !l.author.is_empty() && shards::link::Author::from_id(&l.author).is_none() {
        return Err(format!("author {:?}", l.author));
    }
    super::messages::behaviour_of(l.behaviour.as_deref())?;
    Ok(())
}
