//! Fleet mode's link services on this node, and what they deliver to the cores: the link
//! writer's answers (`fleet::links`, for the owner that asked) and the change feed (the
//! follower thread here), which brings every node's committed changes to their owner cores.
//!
//! The follower (`ricochet-fleet-feed`) polls `fleet::feed::poll` every
//! [`FEED_POLL_INTERVAL_MS`] (at once again while a poll comes back full), splits the rows by
//! owner core (`Router::owner`), hands each core its part through the fleet outlet (bounded
//! queue and doorbell), and waits until every core acknowledged its part as durable and
//! invalidated (`owner/fleet.rs`). Only then does it save the cursor, atomically
//! ([`CURSOR_FILE`]): a restart resumes at the first row not yet durable everywhere on this
//! node, so a row is applied at least once, and applying is idempotent by version.
//!
//! A poll or an apply that fails is retried after [`FEED_RETRY_MS`] from the same cursor;
//! redirects never wait for any of this.

use crate::fleet_regen::RegenCause;
use crate::key::InlineKey;
use crate::router::Router;
use crate::service::Outlets;
use fleet::history::Position;
use shards::link::RedirectStatus;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause between feed polls that find nothing new: the floor of propagation delay between
/// nodes, and one indexed query per node per interval on the database.
pub const FEED_POLL_INTERVAL_MS: u64 = 20;

/// Rows one poll asks for at most; a full poll is followed at once by the next.
pub const FEED_BATCH_ROWS: i64 = 2_000;

/// Longest the follower waits for the cores to make a batch durable before it gives up on
/// the batch and sends it again (a poisoned or stalled core).
pub const FEED_APPLY_TIMEOUT_MS: u64 = 10_000;

/// Pause after a failed poll or apply before the next try.
pub const FEED_RETRY_MS: u64 = 500;

/// How often a node whose feed is held back by an open transaction looks up which backend
/// holds it (`pg_stat_activity`).
pub const XMIN_HOLDER_CHECK_MS: u64 = 1_000;

/// How often a database that failed the start's checks (another schema version, another
/// fleet's secret, no namespace) is checked again while the node serves what it holds.
pub const DB_REFUSED_RECHECK_MS: u64 = 1_000;

/// Items the fleet outlet queues per core: one feed batch part and the writer's answers; a
/// full queue makes the sender wait (service threads only).
pub const FLEET_OUTLET_CAPACITY: usize = 4096;

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

/// How often the follower looks for stats resets.
pub const RESETS_POLL_INTERVAL_MS: u64 = 100;

/// How often the follower checks that its cursor can be continued ([`unfollowable`]).
pub const HORIZON_CHECK_INTERVAL_S: u64 = 60;

/// Tombstone removal batches one run takes at most.
pub const TOMBSTONE_GC_BATCHES_PER_RUN: usize = 10;

/// Written before a data dir's links are wiped for a new bootstrap, removed once the
/// bootstrap saved its cursor: found at start, the wipe and bootstrap are done again.
pub const REBOOTSTRAP_MARKER: &str = "fleet-rebootstrap";

/// Whether a node at `cursor` may have missed a tombstone removed up to `horizon`.
pub fn cursor_behind(cursor: &fleet::feed::Cursor, horizon: u64) -> bool {
    horizon > 0 && cursor.xid <= horizon
}

/// Why a node at `cursor`, whose links came from database `held` ([`IDENTITY_FILE`]), must
/// not follow the feed on, and what that calls for: another database (a dump restored into a
/// new one: its transaction ids need not be behind the cursor), a cursor ahead of the
/// database (a restore, or a promoted standby that lagged), or a cursor not past the
/// tombstone horizon (deletes it had not applied may be gone), or another history of the
/// database that lacks changes the node followed ([`history_diverged`]). The one check for a
/// start (`rebootstrap_if_behind`) and a running follower; `followed` moves to the database's
/// new timeline when the node's history is still the database's.
pub fn unfollowable(
    db: &mut fleet::Db,
    cursor: &fleet::feed::Cursor,
    held: &Held,
    followed: &mut Followed,
    writes_now: u64,
) -> Result<Option<(RegenCause, String)>, fleet::FleetError> {
    let identity = fleet::feed::database_identity(db)?;
    if identity != held.identity {
        let held = &held.identity;
        return Ok(Some((
            RegenCause::Rollback,
            format!(
                "this node's links came from database {held}, but the fleet database is \
                 {identity} (a dump restored into a new cluster, or another database)"
            ),
        )));
    }
    if let Some(why) = history_diverged(db, followed, writes_now)? {
        return Ok(Some((RegenCause::Rollback, why)));
    }
    let next = fleet::feed::next_xid(db)?;
    if cursor.xid > next {
        return Ok(Some((
            RegenCause::Rollback,
            format!(
                "the feed cursor (transaction {}) is ahead of the database's next transaction \
                 ({next}): the database went back in time (a restore from an older backup, a \
                 promoted standby that lagged), and links this node holds may be gone from it",
                cursor.xid
            ),
        )));
    }
    let fleet::feed::Tombstones { horizon, removals } = fleet::feed::tombstones(db)?;
    // Nothing removed since the snapshot the links came from: it reflected every earlier
    // removal, even with a cursor (its xmin, held down by an open transaction) below the
    // horizon.
    if held.removals != Some(removals) && cursor_behind(cursor, horizon) {
        return Ok(Some((
            RegenCause::Horizon,
            format!(
                "the feed cursor (transaction {}) is not past the tombstone horizon \
                 ({horizon}): deletes this node has not applied may be gone from the database",
                cursor.xid
            ),
        )));
    }
    Ok(None)
}

/// What this node has followed of the database's history (`fleet::history`): the position
/// of its last poll (every change it applied committed before it) and how many link writes
/// the node had had answered when that poll began (`None`: unknown, as after a restart; an
/// answer counted later may have committed after the position).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    pub at: Option<Position>,
    pub writes_before: Option<u64>,
}

impl Followed {
    /// A poll read at `at`, begun when `writes` link writes had been answered.
    fn polled(&mut self, at: Position, writes: u64) {
        self.at = Some(at);
        self.writes_before = Some(writes);
    }
}

/// Whether the database's history lacks something this node followed (issue #24, hole 1): on
/// another timeline (a promoted standby, a point-in-time restore), the node's history is
/// still the database's only if its timeline is an ancestor that forked at or after its
/// position, and no link write was answered since its last poll there (`writes_now` is the
/// count now). `Some`: why not. A history kept moves `followed` to the new timeline.
fn history_diverged(
    db: &mut fleet::Db,
    followed: &mut Followed,
    writes_now: u64,
) -> Result<Option<String>, fleet::FleetError> {
    use fleet::history::{format_lsn, Fork};
    let Some(at) = followed.at else {
        // Nothing recorded (a cursor file of version 1): the next poll records it.
        return Ok(None);
    };
    let unanswered = followed.writes_before != Some(writes_now);
    let why = match fleet::history::fork_of(db, at.timeline)? {
        Fork::Same => return Ok(None),
        Fork::At(fork) if at.lsn <= fork && !unanswered => {
            let now = fleet::history::position(db)?;
            eprintln!(
                "fleet: the database moved from timeline {} to {} (a failover or a restore), \
                 which forked at {} after everything this node followed ({at}); following it",
                at.timeline,
                now.map_or("?".to_owned(), |p| p.timeline.to_string()),
                format_lsn(fork)
            );
            followed.at = now;
            followed.writes_before = Some(writes_now);
            return Ok(None);
        }
        Fork::At(fork) if at.lsn <= fork => format!(
            "the database moved from timeline {} to another one (a failover or a restore) that \
             forked at {}, after this node's last poll ({at}), but this node had link writes \
             answered since that poll, which may have committed after the fork",
            at.timeline,
            format_lsn(fork)
        ),
        Fork::At(fork) => format!(
            "the database moved from timeline {} to another one (a failover to a standby that \
             lagged, or a restore) that forked at {}, before this node's position ({at}): \
             changes this node holds may be gone from the database",
            at.timeline,
            format_lsn(fork)
        ),
        Fork::Unrelated => format!(
            "the database's timeline does not descend from this node's ({at}): it is another \
             branch of a restore"
        ),
        Fork::Unknown(e) => format!(
            "the database is on another timeline than this node's ({at}) and its history \
             cannot be read ({e}; grant pg_read_server_files to let nodes check it), so \
             nothing proves this node's changes are still the database's"
        ),
    };
    Ok(Some(why))
}

/// The database this node's links came from: [`IDENTITY_FILE`], or for a dir without one
/// (written before identities were recorded, or tables whose bootstrap was cut short before
/// it saved its files) `db`'s, which it followed, saved now.
fn held_identity(data_dir: &Path, db: &mut fleet::Db) -> anyhow::Result<Held> {
    if let Some(held) = load_identity(data_dir)? {
        return Ok(held);
    }
    let held = Held {
        identity: fleet::feed::database_identity(db)?,
        removals: None,
    };
    save_identity(data_dir, &held)?;
    Ok(held)
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
        let held = held_identity(path, &mut db)?;
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
            crate::fleet_regen::export_held(dir, &held_path)
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
        crate::fleet_regen::REGEN_DIR,
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

/// The re-bootstrap is complete (its cursor saved): the marker goes.
pub fn rebootstrap_done(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(data_dir.join(REBOOTSTRAP_MARKER)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => shards::durable::sync_dir(data_dir),
    }
}

/// The links a node held when a start found the database rolled back (a failover to a
/// standby that lagged, a restore), relative to the data dir: written before they are wiped,
/// compared with the bootstrap's snapshot into a `fleet-lost-*` file, then deleted.
pub const HELD_BEFORE_REBOOTSTRAP_FILE: &str = "fleet-rebootstrap-held.ndjson";

/// The snapshot copy a bootstrap imports, relative to the data dir (deleted afterwards).
pub const BOOTSTRAP_FILE: &str = "fleet-bootstrap.ndjson";

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
    let held = Held::now(&mut fleet::Db::new(url)?)?;
    let (cursor, at, links) = import_snapshot(dir, url)?;
    let held_before = dir.path().join(HELD_BEFORE_REBOOTSTRAP_FILE);
    if held_before.exists() {
        crate::fleet_regen::write_lost(&held_before, dir.path(), dir)?;
        std::fs::remove_file(&held_before)?;
    }
    if !dir.path().join(RESETS_CURSOR_FILE).exists() {
        save_cursor_file(dir.path(), RESETS_CURSOR_FILE, &cursor, None)?;
    }
    save_identity(dir.path(), &held)?;
    save_cursor(dir.path(), &cursor, at.as_ref())?;
    Ok(links)
}

/// Where this node's links came from: the database ([`IDENTITY_FILE`]) and how many tombstone
/// removals it had made before the snapshot they were taken from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub identity: String,
    /// `None`: unknown (a file written before schema 10, or links followed from the start),
    /// so the cursor must be past the horizon.
    pub removals: Option<u64>,
}

impl Held {
    /// The database's identity and removal count now; taken before a snapshot, it describes
    /// the links that snapshot gives.
    pub fn now(db: &mut fleet::Db) -> Result<Held, fleet::FleetError> {
        Ok(Held {
            identity: fleet::feed::database_identity(db)?,
            removals: Some(fleet::feed::tombstones(db)?.removals),
        })
    }
}

/// The identity file's bytes: `ricochet-fleet-db 2 <identity> <removals or -> <crc32c hex>\n`
/// (version 1, still read, had no removal count).
fn encode_identity(held: &Held) -> String {
    let removals = held.removals.map_or("-".to_owned(), |n| n.to_string());
    let body = format!("ricochet-fleet-db 2 {} {removals}", held.identity);
    let crc = crc32c::crc32c(body.as_bytes());
    format!("{body} {crc:08x}\n")
}

/// The body of an identity file (without its checksum) as a [`Held`].
fn decode_identity(body: &str) -> Option<Held> {
    let held = if let Some(identity) = body.strip_prefix("ricochet-fleet-db 1 ") {
        Held {
            identity: identity.to_owned(),
            removals: None,
        }
    } else {
        let (identity, removals) = body
            .strip_prefix("ricochet-fleet-db 2 ")?
            .rsplit_once(' ')?;
        Held {
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
pub fn load_identity(data_dir: &Path) -> anyhow::Result<Option<Held>> {
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
pub(crate) fn save_identity(data_dir: &Path, held: &Held) -> std::io::Result<()> {
    shards::durable::write_atomic(
        data_dir,
        IDENTITY_FILE,
        encode_identity(held).as_bytes(),
        0o644,
    )
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
            if l.expires_at > 0 {
                line["expires_at"] =
                    shards::timefmt::format_rfc3339_utc(l.expires_at as u64).into();
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
    shards::link::validate_key(l.key.as_bytes()).map_err(|e| e.to_string())?;
    shards::link::validate_url(&l.target).map_err(|e| e.to_string())?;
    u16::try_from(l.status)
        .ok()
        .and_then(RedirectStatus::from_code)
        .ok_or_else(|| format!("status {}", l.status))?;
    if l.created_at < 0 || l.expires_at < 0 {
        return Err("a negative time".into());
    }
    Ok(())
}

/// What the fleet services hand a core.
#[derive(Debug)]
pub enum FleetToCore {
    /// The link writer's answer to one of this core's writes.
    Written(fleet::links::WriteAnswer),
    /// This core's rows of feed batch `batch`.
    Feed { batch: u64, rows: Vec<FeedLink> },
    /// The reader's answer to one of this core's read-through lookups.
    Read(fleet::links::ReadAnswer),
    /// The namespaces' ceilings as just read, for shedding never-issued generated keys.
    Ceilings(Arc<fleet::ceiling::Ceilings>),
    /// Stats resets of keys this core owns (`ricochet_click_resets`): purge each, then ack
    /// `batch` like a feed batch.
    Resets { batch: u64, keys: Vec<InlineKey> },
    /// A step of a live regeneration (`fleet_regen`, `owner/regen.rs`), acked like a batch.
    Regen {
        batch: u64,
        step: crate::owner::regen::RegenStep,
    },
}

/// One feed row, checked and in the node's own types.
#[derive(Clone, Debug)]
pub struct FeedLink {
    pub key: InlineKey,
    pub target: Arc<str>,
    pub status: RedirectStatus,
    pub created_at_s: u64,
    pub expires_at_s: u64,
    pub deleted: bool,
    pub version: u64,
}

/// A core applied its rows of a batch (`ok`), or could not (its log is poisoned).
#[derive(Debug)]
pub struct FeedAck {
    pub batch: u64,
    pub core: u16,
    pub ok: bool,
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
fn load_cursor_file(
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

fn save_cursor_file(
    data_dir: &Path,
    name: &str,
    c: &fleet::feed::Cursor,
    at: Option<&Position>,
) -> std::io::Result<()> {
    shards::durable::write_atomic(data_dir, name, encode_cursor(c, at).as_bytes(), 0o644)
}

/// What the follower thread needs.
pub struct Follower {
    pub db: fleet::Db,
    /// The database's URL, for the snapshot of a regeneration (its own connection).
    pub url: String,
    pub data_dir: PathBuf,
    pub router: Router,
    pub outlets: Arc<Outlets<FleetToCore>>,
    pub acks: crossbeam::channel::Receiver<FeedAck>,
    pub stats: Arc<fleet::FleetStats>,
    pub stop: Arc<AtomicBool>,
    /// Test-only (`--fault-pause-feed`): poll nothing while this file exists.
    pub pause_file: Option<PathBuf>,
    pub secret: [u8; 32],
    pub namespace: String,
}

impl Follower {
    /// Starts the follower thread from the saved cursor. Nothing here waits for the database
    /// (a node may start while it is down and serve the links it holds): the thread checks the
    /// cursor (`unfollowable`) before its first poll, and regenerates the links first if the
    /// database cannot continue it. Only a dir written before identities were recorded needs
    /// the database here, to learn which one its links came from.
    pub fn spawn(mut self) -> anyhow::Result<()> {
        let (cursor, at) = load_cursor_at(&self.data_dir)?;
        let identity = held_identity(&self.data_dir, &mut self.db)?;
        // Link writes answered before this start are not counted: unknown until a poll.
        let followed = Followed {
            at,
            writes_before: None,
        };
        std::thread::Builder::new()
            .name("ricochet-fleet-feed".into())
            .spawn(move || self.run(cursor, identity, followed))?;
        Ok(())
    }

    /// The feed from `cursor` (of the database `identity`). It polls only once the cursor was
    /// checked against the database since the database last failed to answer: a database that
    /// comes back may be another one or may have gone back in time (a restore, a failover).
    /// `followed` is where in the database's history the node is (`fleet::history`).
    fn run(mut self, mut cursor: fleet::feed::Cursor, mut identity: Held, mut followed: Followed) {
        let mut batch = 0u64;
        let mut chores = Chores::new(&self.data_dir);
        let mut regenerate: Option<RegenCause> = None;
        let mut checked = false;
        let retry = Duration::from_millis(FEED_RETRY_MS);
        while !self.stop.load(Ordering::Relaxed) {
            if self.pause_file.as_ref().is_some_and(|p| p.exists()) {
                std::thread::sleep(Duration::from_millis(FEED_POLL_INTERVAL_MS));
                // A resumed feed checks the cursor at once, as after an outage.
                checked = false;
                continue;
            }
            // Only against a database checked since it last failed (one the node refuses is
            // not this fleet's to judge by): the IDs stay on hold until then.
            if self.stats.ids_unproven()
                && checked
                && self.stats.refused().is_none()
                && due(&mut chores.ids, retry)
            {
                self.prove_ids();
            }
            if let Some(cause) = regenerate.take() {
                match self.regenerate(&mut batch, cause, &mut identity) {
                    Ok((resume, now_followed)) => {
                        followed = now_followed;
                        if chores.resets_cursor > resume {
                            // Ahead of a restored database: follow its resets from here.
                            chores.resets_cursor = resume.clone();
                        }
                        cursor = resume;
                        checked = true; // A fresh snapshot's cursor.
                    }
                    Err(e) => {
                        eprintln!(
                            "fleet: regenerating this node's links failed: {e:#}; retrying in \
                             {} ms",
                            crate::fleet_regen::REGEN_RETRY_MS
                        );
                        self.stats.feed_failed();
                        regenerate = Some(cause);
                        std::thread::sleep(Duration::from_millis(
                            crate::fleet_regen::REGEN_RETRY_MS,
                        ));
                        continue;
                    }
                }
            }
            if !checked {
                match self.check_database() {
                    Ok(None) => self.accept_database(),
                    Ok(Some((refusal, why))) => {
                        self.refuse_database(refusal, &why);
                        std::thread::sleep(Duration::from_millis(DB_REFUSED_RECHECK_MS));
                        continue;
                    }
                    Err(e) => {
                        eprintln!("fleet: checking the database failed: {e}; retrying");
                        self.stats.feed_failed();
                        std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                        continue;
                    }
                }
                match self.check_cursor(&cursor, &identity, &mut followed) {
                    Ok(None) => checked = true,
                    Ok(Some(cause)) => regenerate = Some(cause),
                    Err(e) => {
                        eprintln!("fleet: checking the feed cursor failed: {e}; retrying");
                        self.stats.feed_failed();
                        std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                    }
                }
                continue;
            }
            regenerate =
                self.run_chores(&mut chores, &cursor, &identity, &mut followed, &mut batch);
            if regenerate.is_some() {
                continue;
            }
            // Read before the poll: answers counted here committed before it (`Followed`).
            let writes = self.stats.link_writes_done();
            let polled = fleet::feed::poll_with_horizon(&mut self.db, &cursor, FEED_BATCH_ROWS);
            let (rows, held_back) = match polled {
                Ok(fleet::feed::Polled {
                    at: fleet::history::Where::InRecovery,
                    ..
                }) => {
                    eprintln!(
                        "fleet: the database is in recovery (a standby): no history to follow \
                         writes on; retrying"
                    );
                    self.stats.feed_failed();
                    std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                    checked = false;
                    continue;
                }
                Ok(fleet::feed::Polled {
                    at: fleet::history::Where::At(at),
                    ..
                }) if followed.at.is_some_and(|f| f.timeline != at.timeline) => {
                    // Another history under the same connection (a pooler that followed a
                    // failover): nothing of this poll is applied before the check.
                    checked = false;
                    continue;
                }
                Ok(fleet::feed::Polled {
                    rows,
                    tombstones,
                    held_back,
                    at,
                }) => {
                    // A server that cannot say (`Where::Unknown`) leaves the identity and
                    // transaction-id checks alone to catch a rollback.
                    if let Some(at) = at.position() {
                        followed.polled(at, writes);
                    }
                    // Read with the rows: a removal since the last poll may have taken a
                    // delete this node had not applied.
                    if identity.removals != Some(tombstones.removals)
                        && cursor_behind(&cursor, tombstones.horizon)
                    {
                        eprintln!(
                            "fleet: the feed cursor (transaction {}) is not past the tombstone \
                             horizon ({}) read with this poll: deletes this node has not \
                             applied may be gone; regenerating this node's links",
                            cursor.xid, tombstones.horizon
                        );
                        regenerate = Some(RegenCause::Horizon);
                        continue;
                    }
                    (rows, held_back)
                }
                Err(e) => {
                    eprintln!("fleet: change feed poll failed: {e}; retrying");
                    use fleet::FailureClass::{Connect, Connection};
                    if matches!(e.class(), Some(Connect | Connection)) {
                        // What answers next may be a promoted standby: the writer may reach it
                        // before this thread does, so the IDs on hand wait until it is checked.
                        self.stats.suspect_ids();
                    }
                    self.stats.feed_failed();
                    std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                    checked = false;
                    continue;
                }
            };
            let Some(last) = rows.last().map(|r| r.cursor()) else {
                match held_back {
                    true => self.note_held_back(&mut chores),
                    false => {
                        chores.caught_up_once = true;
                        self.stats.feed_caught_up(unix_ms());
                    }
                }
                std::thread::sleep(Duration::from_millis(FEED_POLL_INTERVAL_MS));
                continue;
            };
            let full = rows.len() as i64 == FEED_BATCH_ROWS;
            let n = rows.len() as u64;
            batch += 1;
            if !self.apply(batch, rows) {
                self.stats.feed_failed();
                std::thread::sleep(Duration::from_millis(FEED_RETRY_MS));
                continue;
            }
            if let Err(e) = save_cursor(&self.data_dir, &last, followed.at.as_ref()) {
                // The rows are durable; only the resume point is not. Keep going from memory:
                // a restart re-applies from the older cursor, which is harmless.
                eprintln!("fleet: cannot save the feed cursor: {e}");
            }
            cursor = last;
            self.stats.feed_applied(n);
            if !full && !held_back {
                chores.caught_up_once = true;
                self.stats.feed_caught_up(unix_ms());
            } else if held_back {
                self.note_held_back(&mut chores);
            }
        }
    }

    /// Rows wait behind an open transaction: the node is not caught up (its lag grows), and
    /// the backend holding it is looked up (at most every [`XMIN_HOLDER_CHECK_MS`]) for
    /// `/readyz?verbose` and `/metrics`.
    fn note_held_back(&mut self, chores: &mut Chores) {
        let refresh = Duration::from_millis(XMIN_HOLDER_CHECK_MS);
        if !due(&mut chores.holder, refresh) {
            return;
        }
        match fleet::feed::xmin_holder(&mut self.db) {
            Ok(Some((pid, age_s))) => self
                .stats
                .feed_held_back(pid.max(0) as u64, age_s.max(0) as u64),
            Ok(None) => {}
            Err(e) => eprintln!("fleet: looking up the transaction that holds the feed back: {e}"),
        }
    }

    /// The follower's periodic work besides the feed, each when due: tombstone removal and
    /// the cursor check (`unfollowable`), stats resets, ceilings. `Some`: the cursor cannot
    /// be continued and the links must be regenerated first.
    fn run_chores(
        &mut self,
        c: &mut Chores,
        cursor: &fleet::feed::Cursor,
        identity: &Held,
        followed: &mut Followed,
        batch: &mut u64,
    ) -> Option<RegenCause> {
        if due(
            &mut c.horizon,
            Duration::from_secs(HORIZON_CHECK_INTERVAL_S),
        ) {
            let gc_every = Duration::from_secs(fleet::feed::TOMBSTONE_GC_INTERVAL_S);
            if due(&mut c.gc, gc_every) {
                self.remove_old_tombstones();
            }
            // A database that does not answer is no finding here: the poll fails too, and
            // the cursor is checked again before the next one.
            if let Ok(Some(cause)) = self.check_cursor(cursor, identity, followed) {
                return Some(cause);
            }
        }
        if due(
            &mut c.resets,
            Duration::from_millis(RESETS_POLL_INTERVAL_MS),
        ) {
            self.follow_resets(batch, &mut c.resets_cursor);
        }
        let refresh = Duration::from_millis(fleet::ceiling::HIGH_WATER_REFRESH_MS);
        if c.caught_up_once && due(&mut c.ceilings, refresh) {
            match self.send_ceilings() {
                Ok(()) => c.ceilings_failing = false,
                Err(e) if !c.ceilings_failing => {
                    c.ceilings_failing = true;
                    eprintln!("fleet: reading the namespaces' ceilings failed: {e}");
                }
                Err(_) => {}
            }
        }
        None
    }

    /// What a start checks before it serves with the database (`fleet_node::requirements`:
    /// the schema version, the fleet's key-space secret, the namespace), checked again each time
    /// the database answers after not answering: the node may have started while it was down
    /// (`DbAtStart::Down`), and what answers now may be an older restore or another fleet's
    /// database. `Some`: why this node must not use it (new keys under another secret could
    /// collide with keys other nodes issue; its rows are not this fleet's links).
    fn check_database(&mut self) -> Result<Option<(fleet::DbRefusal, String)>, fleet::FleetError> {
        let target = self.db.target().to_owned();
        Ok(
            match crate::fleet_node::requirements(&mut self.db, &self.namespace)? {
                Err(refusal) => Some(refusal),
                Ok(r) if r.secret != self.secret => Some((
                    fleet::DbRefusal::Secret,
                    format!(
                        "the key-space secret in {target} is not the one data dir {} adopted: \
                         it is another fleet's database; point --fleet-pg at this fleet's, or \
                         start the node on an empty data dir",
                        self.data_dir.display()
                    ),
                )),
                Ok(_) => None,
            },
        )
    }

    /// The database failed the check: nothing it says is used (no feed, no IDs, no writes,
    /// no read-through, no API keys) until it passes; the node serves what it holds. Never a
    /// stop: only a start may refuse to run.
    fn refuse_database(&mut self, refusal: fleet::DbRefusal, why: &str) {
        let was = self.stats.refused();
        // Set before it is said: whoever reads the log line finds the node refusing.
        self.stats.set_refused(Some(refusal));
        if was != Some(refusal) {
            eprintln!(
                "fleet: {why}; serving the links this node holds, refusing creates, edits and \
                 lookups of others until the database is put right (checked again every \
                 {DB_REFUSED_RECHECK_MS} ms)"
            );
        }
    }

    /// The database passed the check.
    fn accept_database(&mut self) {
        if let Some(was) = self.stats.refused() {
            if was != fleet::DbRefusal::Unchecked {
                eprintln!("fleet: the database passes its check again; using it");
            }
            self.stats.set_refused(None);
        }
    }

    /// [`unfollowable`] for the running feed, reporting what it found.
    fn check_cursor(
        &mut self,
        cursor: &fleet::feed::Cursor,
        identity: &Held,
        followed: &mut Followed,
    ) -> Result<Option<RegenCause>, fleet::FleetError> {
        let writes = self.stats.link_writes_done();
        let timeline = followed.at.map(|a| a.timeline);
        let found = unfollowable(&mut self.db, cursor, identity, followed, writes)?;
        let moved = followed.at.map(|a| a.timeline) != timeline;
        if moved || matches!(found, Some((RegenCause::Rollback, _))) {
            // Another history: the IDs on hand may be ones it hands out again. None is used
            // until the allocation they came from is proven there (issue #24, hole 2).
            self.stats.suspect_ids();
            self.prove_ids();
        }
        let Some((cause, why)) = found else {
            if self.stats.ids_unproven() {
                self.prove_ids();
            }
            return Ok(None);
        };
        eprintln!("fleet: {why}; regenerating this node's links");
        Ok(Some(cause))
    }

    /// Proves that the database holds this node's last confirmed allocation, so the IDs on
    /// hand are still good, or fences the node (`fleet::evidence_lost`). A database that does
    /// not answer leaves them on hold; the run loop asks again.
    fn prove_ids(&mut self) {
        match fleet::evidence_lost(&mut self.db, &self.data_dir, &self.namespace) {
            Ok(None) => self.stats.ids_proven(),
            Ok(Some(reason)) => {
                eprintln!("fleet: FENCED: {reason}");
                self.stats.fence();
                self.stats.ids_proven();
            }
            Err(e) => eprintln!(
                "fleet: checking this node's allocation evidence failed: {e}; generated-key \
                 creates wait"
            ),
        }
    }

    /// Reads the namespaces' ceilings and offers them to every core. Called only once the feed
    /// has caught up since start: a custom alias of the generated shape written before fleet
    /// nodes refused them (schema 5) is then held here, never shed. A failed read (the caller
    /// logs the first of a run) or a core's full queue only lets that core's last read go
    /// stale, and a stale read sheds nothing.
    fn send_ceilings(&mut self) -> Result<(), fleet::FleetError> {
        let c = Arc::new(fleet::ceiling::read(&mut self.db)?);
        for core in 0..self.outlets.cores() {
            let _ = self.outlets.offer(core, FleetToCore::Ceilings(c.clone()));
        }
        Ok(())
    }

    /// Retention: removes tombstones older than `TOMBSTONE_RETENTION_DAYS`, a few batches at
    /// most per run (the next run goes on).
    fn remove_old_tombstones(&mut self) {
        let age = fleet::feed::TOMBSTONE_RETENTION_DAYS * 86_400;
        for _ in 0..TOMBSTONE_GC_BATCHES_PER_RUN {
            match fleet::feed::purge_tombstones(&mut self.db, age) {
                Ok((n, _)) => {
                    self.stats.tombstones_removed(n);
                    if n < fleet::feed::TOMBSTONE_GC_BATCH as u64 {
                        return;
                    }
                }
                Err(e) => {
                    eprintln!("fleet: removing old tombstones failed: {e}; retrying in an hour");
                    return;
                }
            }
        }
    }

    /// Hands each owner core its rows of `batch` and waits until all are durable there.
    fn apply(&mut self, batch: u64, rows: Vec<fleet::feed::FeedRow>) -> bool {
        let mut parts: Vec<Vec<FeedLink>> = vec![Vec::new(); self.outlets.cores()];
        for r in rows {
            let Some(link) = feed_link(&r) else {
                // Not silent: counted (`/metrics`, `/readyz?verbose`) and logged. It comes again
                // once the row is changed (a new xid).
                self.stats.feed_row_unusable();
                eprintln!(
                    "fleet: feed row for {:?} (version {}) is not a link this node can hold \
                     (status {}, created_at {}, expires_at {}); not applied, counted in \
                     ricochet_fleet_feed_rows_unusable_total; fix the row in ricochet_links",
                    r.key, r.version, r.status, r.created_at, r.expires_at
                );
                continue;
            };
            parts[self.router.owner(link.key.as_bytes()).core].push(link);
        }
        let items = parts
            .into_iter()
            .enumerate()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(core, rows)| (core, FleetToCore::Feed { batch, rows }))
            .collect();
        self.deliver_and_wait(batch, items)
    }

    /// Hands each owner core its keys of a batch of stats resets and waits until each core
    /// purged them durably.
    fn apply_resets(&mut self, batch: u64, keys: Vec<String>) -> bool {
        let mut parts: Vec<Vec<InlineKey>> = vec![Vec::new(); self.outlets.cores()];
        for k in keys {
            if let Some(key) = InlineKey::new(k.as_bytes()) {
                parts[self.router.owner(key.as_bytes()).core].push(key);
            }
        }
        let items = parts
            .into_iter()
            .enumerate()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(core, keys)| (core, FleetToCore::Resets { batch, keys }))
            .collect();
        self.deliver_and_wait(batch, items)
    }

    /// Offers each core its item of `batch` and waits for every one's ack (`FeedAck`).
    pub(crate) fn deliver_and_wait(
        &mut self,
        batch: u64,
        items: Vec<(usize, FleetToCore)>,
    ) -> bool {
        while self.acks.try_recv().is_ok() {} // Acks of a batch given up on.
        let mut waiting = 0;
        for (core, mut item) in items {
            let deadline = Instant::now() + Duration::from_millis(FEED_APPLY_TIMEOUT_MS);
            loop {
                match self.outlets.offer(core, item) {
                    Ok(()) => break,
                    Err(back) if Instant::now() < deadline => {
                        item = back;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return false,
                }
            }
            waiting += 1;
        }
        let deadline = Instant::now() + Duration::from_millis(FEED_APPLY_TIMEOUT_MS);
        let mut ok = true;
        while waiting > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.acks.recv_timeout(left) {
                Ok(a) if a.batch == batch => {
                    waiting -= 1;
                    ok &= a.ok;
                }
                Ok(_) => {}
                Err(_) => {
                    eprintln!("fleet: feed batch {batch} not applied within {FEED_APPLY_TIMEOUT_MS} ms; sending it again");
                    return false;
                }
            }
        }
        ok
    }

    /// Follows the stats resets (`ricochet_click_resets`) from `cursor`: each batch is purged
    /// on its owner cores, then the cursor is saved ([`RESETS_CURSOR_FILE`]). `false` if a
    /// batch failed (tried again next time from the same cursor).
    fn follow_resets(&mut self, batch: &mut u64, cursor: &mut fleet::feed::Cursor) -> bool {
        loop {
            let rows = match fleet::feed::poll_resets(&mut self.db, cursor, FEED_BATCH_ROWS) {
                Ok(r) => r,
                Err(_) => return false, // The links poll reports the database.
            };
            let Some(last) = rows.last().map(|r| r.1.clone()) else {
                return true;
            };
            let full = rows.len() as i64 == FEED_BATCH_ROWS;
            *batch += 1;
            if !self.apply_resets(*batch, rows.into_iter().map(|r| r.0).collect()) {
                return false;
            }
            if let Err(e) = save_cursor_file(&self.data_dir, RESETS_CURSOR_FILE, &last, None) {
                eprintln!("fleet: cannot save the stats resets cursor: {e}");
            }
            *cursor = last;
            if !full {
                return true;
            }
        }
    }
}

/// When the follower last did each of its periodic chores (`Follower::run_chores`).
struct Chores {
    /// The feed has found the node caught up since start (ceilings are read from then on).
    caught_up_once: bool,
    horizon: Option<Instant>,
    /// The last lookup of the backend holding the feed back (`note_held_back`).
    holder: Option<Instant>,
    gc: Option<Instant>,
    resets: Option<Instant>,
    resets_cursor: fleet::feed::Cursor,
    ceilings: Option<Instant>,
    ceilings_failing: bool,
    /// Last try to prove the IDs on hand (`Follower::prove_ids`).
    ids: Option<Instant>,
}

impl Chores {
    fn new(data_dir: &Path) -> Chores {
        let resets_cursor = load_cursor_file(data_dir, RESETS_CURSOR_FILE)
            .map(|(c, _)| c)
            .unwrap_or_else(|e| {
                eprintln!("fleet: {e}; stats resets are not followed");
                fleet::feed::Cursor {
                    xid: u64::MAX,
                    key: String::new(),
                }
            });
        Chores {
            caught_up_once: false,
            horizon: None,
            holder: None,
            gc: None,
            resets: None,
            resets_cursor,
            ceilings: None,
            ceilings_failing: false,
            ids: None,
        }
    }
}

/// Whether a chore last done at `last` is due again after `every`; if so, it counts as done now.
fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    if last.is_some_and(|t| t.elapsed() < every) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

/// A feed row in the node's types, if it is a valid link.
/// A feed row as a link, if it is one this node can hold. A tombstone needs only a valid key
/// and version (its other fields are not served): a delete is never skipped for a field it
/// does not use.
fn feed_link(r: &fleet::feed::FeedRow) -> Option<FeedLink> {
    let full = feed_link_fields(r);
    if full.is_some() || !r.deleted {
        return full;
    }
    Some(FeedLink {
        key: InlineKey::new(r.key.as_bytes())?,
        target: Arc::from(""),
        status: RedirectStatus::default(),
        created_at_s: 0,
        expires_at_s: 0,
        deleted: true,
        version: u64::try_from(r.version).ok()?,
    })
}

fn feed_link_fields(r: &fleet::feed::FeedRow) -> Option<FeedLink> {
    Some(FeedLink {
        key: InlineKey::new(r.key.as_bytes())?,
        target: Arc::from(r.target.as_str()),
        status: RedirectStatus::from_code(u16::try_from(r.status).ok()?)?,
        created_at_s: u64::try_from(r.created_at).ok()?,
        expires_at_s: u64::try_from(r.expires_at).ok()?,
        deleted: r.deleted,
        version: u64::try_from(r.version).ok()?,
    })
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
            let held = Held {
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
            &Held {
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
