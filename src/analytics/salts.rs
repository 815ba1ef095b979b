//! The daily salts of visitor hashes: 16 random bytes per UTC day, created when the day's
//! first click is classified, kept in `<data>/clicks/salts.json` (mode 0600) so a restart the
//! same day hashes visitors the same way, and deleted 48 hours after their day ends, after
//! which no one, the operator included, can link a hash back to a visitor.
//!
//! Shared by the aggregator threads behind a `Mutex` (never touched by a core thread).

use shards::clicks::Day;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Days a salt outlives its own (it is deleted once `today > day + SALT_KEEP_DAYS`).
pub const SALT_KEEP_DAYS: Day = 2;
const SALT_FILE: &str = "salts.json";

/// The salts of the recent days.
pub struct SaltBook {
    dir: PathBuf,
    salts: BTreeMap<Day, [u8; 16]>,
}

impl SaltBook {
    /// Reads `dir/salts.json` (a missing file is an empty book).
    pub fn open(dir: &Path) -> Result<SaltBook, String> {
        let path = dir.join(SALT_FILE);
        let salts = match std::fs::read(&path) {
            Ok(b) => {
                let m: BTreeMap<Day, String> = serde_json::from_slice(&b)
                    .map_err(|e| format!("{}: not a salt file: {e}", path.display()))?;
                let mut out = BTreeMap::new();
                for (d, hex) in m {
                    out.insert(
                        d,
                        parse_hex(&hex)
                            .ok_or_else(|| format!("{}: day {d}: bad salt", path.display()))?,
                    );
                }
                out
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        Ok(SaltBook {
            dir: dir.to_path_buf(),
            salts,
        })
    }

    /// The salt of `day`, created (and made durable) if new. A salt that cannot be saved is
    /// still used: uniques of that day may then be counted again after a restart.
    pub fn salt(&mut self, day: Day) -> [u8; 16] {
        if let Some(s) = self.salts.get(&day) {
            return *s;
        }
        let mut s = [0u8; 16];
        getrandom::getrandom(&mut s).expect("the OS gives random bytes");
        self.salts.insert(day, s);
        if let Err(e) = self.save() {
            eprintln!("clicks: cannot save the day's salt ({e}); unique visitors may be counted twice after a restart today");
        }
        s
    }

    /// The salt of `day`, if there is one already.
    pub fn peek(&self, day: Day) -> Option<[u8; 16]> {
        self.salts.get(&day).copied()
    }

    /// Fleet mode: takes the fleet's salt of `day` (`fleet::clicks::salt_for`) unless this
    /// book made its own for the day already (the database was out of reach when the day's
    /// first click came): `false` then, and the node's uniques of that day cannot be merged
    /// with the other nodes' (they add up instead, at worst).
    pub fn adopt(&mut self, day: Day, salt: [u8; 16]) -> bool {
        match self.salts.get(&day) {
            Some(s) => *s == salt,
            None => {
                self.salts.insert(day, salt);
                if let Err(e) = self.save() {
                    eprintln!("clicks: cannot save the fleet's salt of day {day} ({e})");
                }
                true
            }
        }
    }

    /// Deletes the salts of days that ended more than 48 hours before `today` began.
    pub fn forget_before(&mut self, today: Day) {
        let before = self.salts.len();
        self.salts.retain(|&d, _| d + SALT_KEEP_DAYS >= today);
        if self.salts.len() != before {
            if let Err(e) = self.save() {
                eprintln!("clicks: cannot rewrite {SALT_FILE} without old salts: {e}");
            }
        }
    }

    /// The days a salt is held for.
    pub fn days(&self) -> Vec<Day> {
        self.salts.keys().copied().collect()
    }

    fn save(&self) -> io::Result<()> {
        let m: BTreeMap<Day, String> = self
            .salts
            .iter()
            .map(|(d, s)| (*d, s.iter().map(|b| format!("{b:02x}")).collect()))
            .collect();
        let bytes = serde_json::to_vec(&m).expect("salts serialize");
        shards::durable::write_atomic(&self.dir, SALT_FILE, &bytes, 0o600)
    }
}

fn parse_hex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_the_same_day_keeps_the_salt_and_old_ones_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = SaltBook::open(dir.path()).unwrap();
        let s10 = b.salt(10);
        let s11 = b.salt(11);
        assert_ne!(s10, s11, "each day has its own salt");
        let mut again = SaltBook::open(dir.path()).unwrap();
        assert_eq!(
            again.salt(10),
            s10,
            "the same day after a restart: the same salt"
        );
        again.forget_before(12);
        assert_eq!(
            again.days(),
            vec![10, 11],
            "day 10's salt lives until 48 h after day 10"
        );
        again.forget_before(13);
        assert_eq!(again.days(), vec![11]);
        let text = std::fs::read_to_string(dir.path().join("salts.json")).unwrap();
        assert!(!text.contains(&s10.iter().map(|b| format!("{b:02x}")).collect::<String>()));
        let reopened = SaltBook::open(dir.path()).unwrap();
        assert_eq!(reopened.days(), vec![11], "deleted from the file too");
    }
}
