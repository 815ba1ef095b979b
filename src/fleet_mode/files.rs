//! Fleet mode's files in the data dir: the feed cursor and the resets cursor (where in the
//! database's history the node is), the database identity it follows, and the re-bootstrap
//! marker. Each is written atomically and checked by a CRC when read; damage is refused.

use fleet::history::Position;
use std::path::Path;

/// The staging data dir a regeneration builds its table generation in, relative to the data
/// dir. Removed when the regeneration is done, and at the start of the next one.
pub const REGEN_DIR: &str = "fleet-regen";

/// The follower's cursor, relative to the data dir.
pub const CURSOR_FILE: &str = "fleet-feed.cursor";

/// Where the follower is in the stats resets (`ricochet_click_resets`), relative to the data
/// dir. Same format as [`CURSOR_FILE`]. A bootstrap sets it to the snapshot, like the feed's
/// (a new node has no stats to purge); a re-bootstrap keeps it (the node's stats stay).
pub const RESETS_CURSOR_FILE: &str = "fleet-resets.cursor";

/// Which database this node's links came from (`fleet::feed::database_identity`), relative to
/// the data dir: `ricochet-fleet-db 1 <identity> <crc32c hex>`. Written with the cursor by a
/// bootstrap or a regeneration; a node started on, or reconnected to, another identity (a
/// dump restored into a new cluster, another database) takes its links from there again.
pub const IDENTITY_FILE: &str = "fleet-db.identity";

/// Written before a data dir's links are wiped for a new bootstrap, removed once the
/// bootstrap saved its cursor: found at start, the wipe and bootstrap are done again.
pub const REBOOTSTRAP_MARKER: &str = "fleet-rebootstrap";

/// The links a node held when a start found the database rolled back (a failover to a
/// standby that lagged, a restore), relative to the data dir: written before they are wiped,
/// compared with the bootstrap's snapshot into a `fleet-lost-*` file, then deleted.
pub const HELD_BEFORE_REBOOTSTRAP_FILE: &str = "fleet-rebootstrap-held.ndjson";

/// The snapshot copy a bootstrap imports, relative to the data dir (deleted afterwards).
pub const BOOTSTRAP_FILE: &str = "fleet-bootstrap.ndjson";

/// The re-bootstrap is complete (its cursor saved): the marker goes.
pub fn rebootstrap_done(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(data_dir.join(REBOOTSTRAP_MARKER)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => shards::durable::sync_dir(data_dir),
    }
}

/// Where this node's links came from: the database ([`IDENTITY_FILE`]) and how many tombstone
/// removals it had made before the snapshot they were taken from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinksOrigin {
    pub identity: String,
    /// `None`: unknown (a file written before schema 10, or links followed from the start),
    /// so the cursor must be past the horizon.
    pub removals: Option<u64>,
}

impl LinksOrigin {
    /// The database's identity and removal count now; taken before a snapshot, it describes
    /// the links that snapshot gives.
    pub fn now(db: &mut fleet::Db) -> Result<LinksOrigin, fleet::FleetError> {
        Ok(LinksOrigin {
            identity: fleet::feed::database_identity(db)?,
            removals: Some(fleet::feed::tombstones(db)?.removals),
        })
    }
}

/// The identity file's bytes: `ricochet-fleet-db 2 <identity> <removals or -> <crc32c hex>\n`
/// (version 1, still read, had no removal count).
fn encode_identity(held: &LinksOrigin) -> String {
    let removals = held.removals.map_or("-".to_owned(), |n| n.to_string());
    let body = format!("ricochet-fleet-db 2 {} {removals}", held.identity);
    let crc = crc32c::crc32c(body.as_bytes());
    format!("{body} {crc:08x}\n")
}

/// The body of an identity file (without its checksum) as a [`LinksOrigin`].
fn decode_identity(body: &str) -> Option<LinksOrigin> {
    let held = if let Some(identity) = body.strip_prefix("ricochet-fleet-db 1 ") {
        LinksOrigin {
            identity: identity.to_owned(),
            removals: None,
        }
    } else {
        let (identity, removals) = body
            .strip_prefix("ricochet-fleet-db 2 ")?
            .rsplit_once(' ')?;
        LinksOrigin {
            identity: identity.to_owned(),
            removals: match removals {
                "-" => None,
                n => Some(n.parse().ok()?),
            },
        }
    };
    (!held.identity.is_empty() && !held.identity.contains(' ')).then_some(held)
}

/// Reads [`IDENTITY_FILE`]: `None` if there is none yet; a damaged one is refused.
pub fn load_identity(data_dir: &Path) -> anyhow::Result<Option<LinksOrigin>> {
    let path = data_dir.join(IDENTITY_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
    };
    let parsed = text
        .strip_suffix('\n')
        .and_then(|l| l.rsplit_once(' '))
        .filter(|(body, crc)| {
            u32::from_str_radix(crc, 16).ok() == Some(crc32c::crc32c(body.as_bytes()))
        })
        .and_then(|(body, _)| decode_identity(body));
    match parsed {
        Some(held) => Ok(Some(held)),
        None => anyhow::bail!(
            "{} is damaged (expected `ricochet-fleet-db 2 <identity> <removals> <crc>`); refusing to guess \
             which database this node's links came from. Remove it and the feed cursor (the \
             node then bootstraps its links again), or restore it",
            path.display()
        ),
    }
}

/// Writes [`IDENTITY_FILE`] atomically.
pub(crate) fn save_identity(data_dir: &Path, held: &LinksOrigin) -> std::io::Result<()> {
    shards::durable::write_atomic(
        data_dir,
        IDENTITY_FILE,
        encode_identity(held).as_bytes(),
        0o644,
    )
}

/// The cursor file's bytes: `ricochet-feed-cursor 2 <xid> <timeline> <lsn> <key> <crc32c
/// hex>\n`, the timeline and WAL position ([`Followed`]) `- -` when unknown. Version 1 (still
/// read) had no position.
fn encode_cursor(c: &fleet::feed::Cursor, at: Option<&Position>) -> String {
    let at = at.map_or("- -".to_owned(), |p| {
        format!("{} {}", p.timeline, fleet::history::format_lsn(p.lsn))
    });
    let body = format!("ricochet-feed-cursor 2 {} {at} {}", c.xid, c.key);
    let crc = crc32c::crc32c(body.as_bytes());
    format!("{body} {crc:08x}\n")
}

/// Reads the cursor file: none yet means the start of the feed; a damaged one is refused.
pub fn load_cursor(data_dir: &Path) -> anyhow::Result<fleet::feed::Cursor> {
    load_cursor_file(data_dir, CURSOR_FILE).map(|(c, _)| c)
}

/// The cursor file and the position saved with it (`None`: unknown).
pub fn load_cursor_at(data_dir: &Path) -> anyhow::Result<(fleet::feed::Cursor, Option<Position>)> {
    load_cursor_file(data_dir, CURSOR_FILE)
}

/// Reads a cursor file `name` of the data dir (the links feed's, or the stats resets').
pub(crate) fn load_cursor_file(
    data_dir: &Path,
    name: &str,
) -> anyhow::Result<(fleet::feed::Cursor, Option<Position>)> {
    let path = data_dir.join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((fleet::feed::Cursor::START, None))
        }
        Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
    };
    let bad = || {
        anyhow::anyhow!(
            "{} is damaged (expected `ricochet-feed-cursor 2 <xid> <timeline> <lsn> <key> \
             <crc>`); refusing to guess where the change feed stopped. Restore it, or wipe the \
             data dir and let the node catch up from the start",
            path.display()
        )
    };
    let line = text.strip_suffix('\n').ok_or_else(bad)?;
    let (body, crc) = line.rsplit_once(' ').ok_or_else(bad)?;
    if u32::from_str_radix(crc, 16).ok() != Some(crc32c::crc32c(body.as_bytes())) {
        return Err(bad());
    }
    decode_cursor(body).ok_or_else(bad)
}

/// The body of a cursor file (without its checksum).
fn decode_cursor(body: &str) -> Option<(fleet::feed::Cursor, Option<Position>)> {
    let (version, rest) = body
        .strip_prefix("ricochet-feed-cursor ")?
        .split_once(' ')?;
    let (xid, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let (at, key) = match version {
        "1" => (None, rest),
        "2" => {
            let mut parts = rest.splitn(3, ' ');
            let (tli, lsn) = (parts.next()?, parts.next()?);
            let at = match (tli, lsn) {
                ("-", "-") => None,
                _ => Some(Position {
                    timeline: tli.parse().ok()?,
                    lsn: fleet::history::parse_lsn(lsn)?,
                }),
            };
            (at, parts.next().unwrap_or(""))
        }
        _ => return None,
    };
    let cursor = fleet::feed::Cursor {
        xid: xid.parse().ok()?,
        key: key.to_owned(),
    };
    Some((cursor, at))
}

/// Saves the feed's cursor and the position it was read at.
pub(crate) fn save_cursor(
    data_dir: &Path,
    c: &fleet::feed::Cursor,
    at: Option<&Position>,
) -> std::io::Result<()> {
    save_cursor_file(data_dir, CURSOR_FILE, c, at)
}

pub(crate) fn save_cursor_file(
    data_dir: &Path,
    name: &str,
    c: &fleet::feed::Cursor,
    at: Option<&Position>,
) -> std::io::Result<()> {
    shards::durable::write_atomic(data_dir, name, encode_cursor(c, at).as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_file_round_trips_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_cursor(dir.path()).unwrap(), fleet::feed::Cursor::START);
        let c = fleet::feed::Cursor {
            xid: 12345,
            key: "aB-_9".into(),
        };
        let at = Position {
            timeline: 3,
            lsn: 0x1_6B37_4D48,
        };
        let empty = fleet::feed::Cursor {
            xid: 7,
            key: String::new(),
        };
        for (c, at) in [
            (&c, None),
            (&c, Some(at)),
            (&empty, Some(at)),
            (&empty, None),
        ] {
            save_cursor(dir.path(), c, at.as_ref()).unwrap();
            assert_eq!(load_cursor_at(dir.path()).unwrap(), (c.clone(), at));
        }
        // Version 1, written before positions were recorded, is still read.
        let body = "ricochet-feed-cursor 1 12345 aB-_9";
        let v1 = format!("{body} {:08x}\n", crc32c::crc32c(body.as_bytes()));
        std::fs::write(dir.path().join(CURSOR_FILE), v1).unwrap();
        assert_eq!(load_cursor_at(dir.path()).unwrap(), (c.clone(), None));
        save_cursor(dir.path(), &c, Some(&at)).unwrap();
        let path = dir.path().join(CURSOR_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("12345", "12346")).unwrap();
        let e = load_cursor(dir.path()).unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains(CURSOR_FILE), "{e}");
        std::fs::write(&path, "").unwrap();
        assert!(load_cursor(dir.path()).is_err());
    }

    #[test]
    fn the_identity_file_round_trips_reads_version_1_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_identity(dir.path()).unwrap(), None);
        for removals in [Some(7), None] {
            let held = LinksOrigin {
                identity: "7311234567890123456/16384".into(),
                removals,
            };
            save_identity(dir.path(), &held).unwrap();
            assert_eq!(load_identity(dir.path()).unwrap(), Some(held));
        }
        // Written before schema 10: no removal count, so the horizon rule applies in full.
        let path = dir.path().join(IDENTITY_FILE);
        let body = "ricochet-fleet-db 1 7311234567890123456/16384";
        let crc = crc32c::crc32c(body.as_bytes());
        std::fs::write(&path, format!("{body} {crc:08x}\n")).unwrap();
        let held = load_identity(dir.path()).unwrap().unwrap();
        assert_eq!(
            (held.identity.as_str(), held.removals),
            ("7311234567890123456/16384", None)
        );
        save_identity(
            dir.path(),
            &LinksOrigin {
                identity: "1/2".into(),
                removals: Some(3),
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(" 3 ", " 4 ")).unwrap();
        let e = load_identity(dir.path()).unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains(IDENTITY_FILE), "{e}");
    }
}
