//! Which history of the database a node followed (issue #24, hole 1). A promoted standby or a
//! point-in-time restore keeps the database's identity (`feed::database_identity`) but starts
//! a new **timeline** at a fork point: WAL up to the fork is shared with the old timeline,
//! whatever the old primary committed after it is gone, and transaction ids after it are
//! handed out again. A transaction id therefore says nothing across a failover; a WAL
//! position on a timeline does.
//!
//! A node records a [`Position`] (timeline, WAL insert position) with every poll: every change
//! the poll could show committed before it. When the database's timeline is another one, the
//! node's history is still the database's exactly when the node's timeline is an ancestor of
//! the new one and forked at or after the node's position ([`fork_of`]).
//!
//! The timeline is read from the name of the current WAL segment (its first 8 hex digits),
//! which changes the moment a standby is promoted; `pg_control_checkpoint()` would lag until
//! the next checkpoint.

use crate::db::{Db, FleetError};

/// The current insert timeline and WAL insert position, as columns `tli` (int) and `lsn`
/// (text), and whether the server is in recovery (`recovery`), to put in a select list; it
/// calls `ricochet_wal_position()` (migration 0011), which gives NULLs on a server in recovery
/// and a timeline of -1 where the server cannot say (some managed services).
pub const POSITION_SQL: &str = "(SELECT tli FROM ricochet_wal_position()) AS tli, \
     (SELECT lsn FROM ricochet_wal_position()) AS lsn, pg_is_in_recovery() AS recovery";

/// A point in one history of the database: a WAL position on a timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub timeline: u32,
    pub lsn: u64,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "timeline {} at {}", self.timeline, format_lsn(self.lsn))
    }
}

impl Position {
    /// From the `tli` and `lsn` columns of [`POSITION_SQL`]; `None` on a server in recovery
    /// or one that cannot say.
    pub fn from_columns(timeline: Option<i32>, lsn: Option<&str>) -> Option<Position> {
        Some(Position {
            timeline: u32::try_from(timeline?).ok()?,
            lsn: parse_lsn(lsn?)?,
        })
    }
}

/// What the database says of its history now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    At(Position),
    /// A standby: no history a node can follow writes on.
    InRecovery,
    /// The server has no timeline functions (some managed services).
    Unknown,
}

impl Where {
    /// From the three columns of [`POSITION_SQL`], starting at `first`.
    pub fn of_row(r: &tokio_postgres::Row, first: usize) -> Where {
        if r.get::<_, Option<bool>>(first + 2).unwrap_or(false) {
            return Where::InRecovery;
        }
        match Position::from_columns(r.get(first), r.get::<_, Option<&str>>(first + 1)) {
            Some(p) => Where::At(p),
            None => Where::Unknown,
        }
    }

    pub fn position(self) -> Option<Position> {
        match self {
            Where::At(p) => Some(p),
            _ => None,
        }
    }
}

/// The database's position now (`None` if it is in recovery or cannot say).
pub fn position(db: &mut Db) -> Result<Option<Position>, FleetError> {
    db.call("wal position", async |c| {
        let r = c.query_one(&format!("SELECT {POSITION_SQL}"), &[]).await?;
        Ok(Where::of_row(&r, 0).position())
    })
}

/// Where the database's history stands relative to a node's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fork {
    /// The database is on that timeline.
    Same,
    /// The database's timeline descends from it, which ended at this WAL position: changes
    /// committed on it before the position are the database's, later ones are not.
    At(u64),
    /// The node's timeline is not an ancestor of the database's (another branch of a restore).
    Unrelated,
    /// The database's timeline history could not be read (the role may not read server files,
    /// as on managed services); nothing can be proven.
    Unknown(String),
}

/// How the database's current history relates to `timeline`: reads the current timeline and,
/// if it is another one, its history file (`pg_wal/<tli>.history`, through `pg_read_file`).
pub fn fork_of(db: &mut Db, timeline: u32) -> Result<Fork, FleetError> {
    let now = position(db)?;
    let Some(now) = now else {
        return Ok(Fork::Unknown(
            "the database is in recovery, or cannot say its timeline".into(),
        ));
    };
    if now.timeline == timeline {
        return Ok(Fork::Same);
    }
    let file = format!("pg_wal/{:08X}.history", now.timeline);
    let text = db.call("timeline history", async |c| {
        Ok(c.query_one("SELECT pg_read_file($1)", &[&file])
            .await
            .map(|r| r.get::<_, String>(0)))
    })?;
    Ok(match text {
        Ok(text) => match switch_point(&text, timeline) {
            Some(lsn) => Fork::At(lsn),
            None => Fork::Unrelated,
        },
        Err(e) => Fork::Unknown(format!("reading {file}: {e}")),
    })
}

/// In a timeline history file (`<parent tli>\t<switch point>\t<reason>` per ancestor), the
/// position where `timeline` ended; `None` if it is not an ancestor.
pub fn switch_point(history: &str, timeline: u32) -> Option<u64> {
    history.lines().find_map(|l| {
        let mut cols = l.split_whitespace();
        let tli: u32 = cols.next()?.parse().ok()?;
        (tli == timeline).then(|| parse_lsn(cols.next()?))?
    })
}

/// `X/Y` (hex halves) as a 64-bit position.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some((u64::from(hi) << 32) | u64::from(lo))
}

/// A position as PostgreSQL writes it.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_round_trip_and_bad_ones_are_refused() {
        for lsn in [0, 1, 0x1_6B37_4D48, u64::MAX] {
            assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
        }
        assert_eq!(parse_lsn("0/16B374D8"), Some(0x16B3_74D8));
        for bad in ["", "16B374D8", "0/", "/1", "G/1", "0/1/2"] {
            assert_eq!(parse_lsn(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_switch_point_is_the_one_of_the_asked_ancestor() {
        let history = "1\t0/3000000\tno recovery target specified\n\
                       \n\
                       2\t0/5000158\tbefore 2026-12-04 10:00:00+00\n";
        assert_eq!(switch_point(history, 1), Some(0x300_0000));
        assert_eq!(switch_point(history, 2), Some(0x500_0158));
        assert_eq!(switch_point(history, 3), None);
        assert_eq!(switch_point("", 1), None);
    }
}
