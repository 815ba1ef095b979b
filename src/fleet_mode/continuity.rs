//! Whether this node can go on following the database from where it is: its cursor against
//! the tombstone horizon, the database's identity and transaction ids, and its history
//! (`fleet::history`: timeline and WAL position). When it cannot, the cause says how its links
//! are rebuilt (`regen`), and whether what it held is saved first (`lost`).

use super::files::load_identity;
use super::files::save_identity;
use super::files::LinksOrigin;
use fleet::history::Position;
use std::path::Path;

/// Why a node regenerates its links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegenCause {
    /// The cursor is not past the tombstone horizon: what the node holds and the database
    /// does not are links deleted elsewhere.
    Horizon,
    /// The database went back in time (a restore, a promoted standby that lagged) or is
    /// another one: links the node holds and the database lacks may be acknowledged links it
    /// lost. They are saved to a [`LOST_FILE_PREFIX`](super::lost::LOST_FILE_PREFIX) file first, for the operator.
    Rollback,
}

/// Whether a node at `cursor` may have missed a tombstone removed up to `horizon`.
pub fn cursor_behind(cursor: &fleet::feed::Cursor, horizon: u64) -> bool {
    horizon > 0 && cursor.xid <= horizon
}

/// Why a node at `cursor`, whose links came from database `held` ([`IDENTITY_FILE`](super::files::IDENTITY_FILE)), must
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
    held: &LinksOrigin,
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
    pub(crate) fn polled(&mut self, at: Position, writes: u64) {
        self.at = Some(at);
        self.writes_before = Some(writes);
    }
}

/// Whether the database's history lacks something this node followed (issue #24, hole 1): on
/// another timeline (a promoted standby, a point-in-time restore), the node's history is
/// still the database's only if its timeline is an ancestor that forked at or after its
/// position, and no link write was answered since its last poll there (`writes_now` is the
/// count now). `Some`: why not. A history kept moves `followed` to the new timeline.
pub(crate) fn history_diverged(
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
pub(crate) fn links_origin(data_dir: &Path, db: &mut fleet::Db) -> anyhow::Result<LinksOrigin> {
    if let Some(held) = load_identity(data_dir)? {
        return Ok(held);
    }
    let held = LinksOrigin {
        identity: fleet::feed::database_identity(db)?,
        removals: None,
    };
    save_identity(data_dir, &held)?;
    Ok(held)
}
