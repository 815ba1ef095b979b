//! Picks up API keys created or revoked (`ricochet keys ...`) and domains declared or removed
//! (`ricochet domains ...`) while the server runs.
//!
//! A background thread (not a core: it stats and reads files) checks `api_keys.json` and
//! `domains.json` every [`KEY_RELOAD_INTERVAL_MS`]; when a file's modification time or size
//! changed it loads it and offers both, as one `Arc<Reloaded>`, to every core through
//! `service::Outlets` (a queue of one per core, then the doorbell). Cores take it at their
//! next sweep (`try_recv`, no syscall), so a revoked key stops working, and a domain starts
//! or stops answering, within about a second. A file that cannot be read keeps what was in
//! force, and says so.

use crate::api::domains::{DomainBook, Domains, UnknownHost, DOMAINS_FILE};
use crate::api::keys::{ApiKeyStore, API_KEYS_FILE};
use crate::api::Reloaded;
use crate::mesh::service::{Inbox, Outlets};
use crate::mesh::Doorbells;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Fleet mode's source of keys and domains: a database session, the fleet's keys last read
/// (`None`: not read yet) and its domains.
pub struct FleetKeys {
    pub db: fleet::Db,
    pub keys: Option<Vec<fleet::keys::FleetKey>>,
    pub stats: Arc<fleet::FleetStats>,
    pub domains: crate::fleet_mode::domains::FleetDomains,
}

/// How often the key file is checked for changes.
pub const KEY_RELOAD_INTERVAL_MS: u64 = 1_000;

/// Starts the watcher (`domains`: the view in force at start, rebuilt with `unknown` on a
/// change); returns one receiver per core. The thread ends when `stop` is set.
/// In fleet mode (`fleet`: a session and the keys read at start, `None` if the database did
/// not answer then) it also reads the fleet's keys from the database at every tick and offers
/// the local keys with them whenever either changed; while the database cannot be read, the
/// keys it last gave stay. There the fleet's domain table, not `domains.json`, is the book
/// (`fleet_mode::domains`).
pub fn start(
    data_dir: PathBuf,
    bells: Arc<Doorbells>,
    stop: Arc<AtomicBool>,
    mut local: ApiKeyStore,
    mut fleet: Option<FleetKeys>,
    mut domains: Arc<Domains>,
    unknown: UnknownHost,
) -> std::io::Result<Vec<Inbox<Arc<Reloaded>>>> {
    let (outlets, rxs) = Outlets::new(bells.0.len(), 1, bells);
    let path = data_dir.join(API_KEYS_FILE);
    let domains_path = data_dir.join(DOMAINS_FILE);
    let mut last = stamp(&path);
    let mut domain_file = DomainFile {
        stamp: stamp(&domains_path),
        path: domains_path,
        data_dir: data_dir.clone(),
        unknown,
    };
    std::thread::Builder::new()
        .name("ricochet-keywatch".into())
        .spawn(move || {
            // Cores whose queue was full when the latest store was offered: offered again each
            // tick, so none keeps an older key set (a revoked key) for more than a tick longer.
            let mut latest: Option<Arc<Reloaded>> = None;
            let mut behind = vec![false; outlets.cores()];
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(KEY_RELOAD_INTERVAL_MS));
                let mut changed = fleet.as_mut().is_some_and(read_fleet_keys);
                let now = stamp(&path);
                if now.is_none() && last.is_some() {
                    // Deleted (or unreadable): like a corrupt file, keep the keys we have,
                    // `RICOCHET_API_KEY`'s included, rather than lock every client out.
                    eprintln!(
                        "API key file {} is gone; keeping the current keys (restore it, or run \
                         `ricochet keys` to write a new one)",
                        path.display()
                    );
                    last = None;
                } else if now.is_some() && now != last {
                    match ApiKeyStore::load(&data_dir) {
                        Ok(store) => {
                            last = now;
                            eprintln!("reloaded API keys from {}", path.display());
                            local = store;
                            changed = true;
                        }
                        // A corrupt file: keep the keys we have and say so; try again next time.
                        Err(e) => eprintln!(
                            "cannot reload API keys from {}: {e}; keeping the current keys",
                            path.display()
                        ),
                    }
                }
                if let Some(d) = domain_file.poll(fleet.as_mut()) {
                    domains = d;
                    changed = true;
                }
                if changed {
                    let store = match &fleet {
                        Some(f) => local.clone().with_fleet_keys(f.keys.as_deref()),
                        None => local.clone(),
                    };
                    latest = Some(Arc::new(Reloaded {
                        keys: Arc::new(store),
                        domains: domains.clone(),
                    }));
                    behind.iter_mut().for_each(|b| *b = true);
                }
                if let Some(store) = &latest {
                    for (core, b) in behind.iter_mut().enumerate().filter(|(_, b)| **b) {
                        *b = outlets.offer(core, store.clone()).is_err();
                    }
                }
            }
        })?;
    Ok(rxs)
}

/// The modification time and size of `p`, if it can be read.
fn stamp(p: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The domain book as the watcher last read it: `domains.json`, or in fleet mode the fleet's
/// table.
struct DomainFile {
    path: PathBuf,
    data_dir: PathBuf,
    stamp: Option<(SystemTime, u64)>,
    unknown: UnknownHost,
}

impl DomainFile {
    /// The new view if the book changed: the fleet's table in fleet mode, else the file.
    fn poll(&mut self, fleet: Option<&mut FleetKeys>) -> Option<Arc<Domains>> {
        match fleet {
            Some(f) => read_fleet_domains(f).map(|book| Arc::new(book.view(self.unknown))),
            None => self.reload(stamp(&self.path)),
        }
    }

    /// The new view if the file changed (`now`: its stamp) and reads well. A deleted book
    /// reads as no domains (the server as before them), like a fresh data dir; a damaged one
    /// keeps the domains in force, and is read again at the next change.
    fn reload(&mut self, now: Option<(SystemTime, u64)>) -> Option<Arc<Domains>> {
        if now == self.stamp {
            return None;
        }
        match DomainBook::load(&self.data_dir) {
            Ok(book) => {
                self.stamp = now;
                eprintln!("reloaded domains from {}", self.path.display());
                Some(Arc::new(book.view(self.unknown)))
            }
            Err(e) => {
                self.stamp = now;
                eprintln!("cannot reload domains: {e}; keeping the current domains");
                None
            }
        }
    }
}

/// Reads the fleet's keys again; whether they changed. A database that failed the node's
/// checks may be another fleet's: its keys are not read (the last good ones stay).
fn read_fleet_keys(f: &mut FleetKeys) -> bool {
    if f.stats.refused().is_some() {
        return false;
    }
    match fleet::keys::list_keys(&mut f.db) {
        Ok(now) if f.keys.as_ref() != Some(&now) => {
            f.keys = Some(now);
            true
        }
        Ok(_) => false,
        Err(e) => {
            eprintln!("cannot read the fleet's API keys: {e}; keeping the current keys");
            false
        }
    }
}

/// Reads the fleet's domains again; the new book if they changed. Like the keys, not from a
/// database that failed the node's checks.
fn read_fleet_domains(f: &mut FleetKeys) -> Option<DomainBook> {
    if f.stats.refused().is_some() {
        return None;
    }
    f.domains.poll(&mut f.db)
}
