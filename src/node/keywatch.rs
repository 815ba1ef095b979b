//! Picks up API keys created or revoked (`ricochet keys ...`) while the server runs.
//!
//! A background thread (not a core: it stats and reads a file) checks `api_keys.json` every
//! [`KEY_RELOAD_INTERVAL_MS`]; when its modification time or size changed it loads the store
//! and offers the new `Arc` to every core through `service::Outlets` (a queue of one per core,
//! then the doorbell). Cores take it at their next sweep (`try_recv`, no syscall), so a
//! revoked key stops working within about a second.

use crate::api::keys::{ApiKeyStore, API_KEYS_FILE};
use crate::mesh::service::{Inbox, Outlets};
use crate::mesh::Doorbells;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Fleet mode's key source: a database session and the fleet's keys last read (`None`: not
/// read yet).
pub type FleetKeys = (
    fleet::Db,
    Option<Vec<fleet::keys::FleetKey>>,
    Arc<fleet::FleetStats>,
);

/// How often the key file is checked for changes.
pub const KEY_RELOAD_INTERVAL_MS: u64 = 1_000;

/// Starts the watcher; returns one receiver per core. The thread ends when `stop` is set.
/// In fleet mode (`fleet`: a session and the keys read at start, `None` if the database did
/// not answer then) it also reads the fleet's keys from the database at every tick and offers
/// the local keys with them whenever either changed; while the database cannot be read, the
/// keys it last gave stay.
pub fn start(
    data_dir: PathBuf,
    bells: Arc<Doorbells>,
    stop: Arc<AtomicBool>,
    mut local: ApiKeyStore,
    mut fleet: Option<FleetKeys>,
) -> std::io::Result<Vec<Inbox<Arc<ApiKeyStore>>>> {
    let (outlets, rxs) = Outlets::new(bells.0.len(), 1, bells);
    let path = data_dir.join(API_KEYS_FILE);
    let stamp = |p: &PathBuf| -> Option<(SystemTime, u64)> {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len()))
    };
    let mut last = stamp(&path);
    std::thread::Builder::new()
        .name("ricochet-keywatch".into())
        .spawn(move || {
            // Cores whose queue was full when the latest store was offered: offered again each
            // tick, so none keeps an older key set (a revoked key) for more than a tick longer.
            let mut latest: Option<Arc<ApiKeyStore>> = None;
            let mut behind = vec![false; outlets.cores()];
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(KEY_RELOAD_INTERVAL_MS));
                let mut changed = false;
                // A database that failed the node's checks may be another fleet's: its keys
                // are not read (the last good ones stay).
                if let Some((db, keys, _)) = fleet
                    .as_mut()
                    .filter(|(_, _, stats)| stats.refused().is_none())
                {
                    match fleet::keys::list_keys(db) {
                        Ok(now) if keys.as_ref() != Some(&now) => {
                            *keys = Some(now);
                            changed = true;
                        }
                        Ok(_) => {}
                        Err(e) => eprintln!(
                            "cannot read the fleet's API keys: {e}; keeping the current keys"
                        ),
                    }
                }
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
                if changed {
                    let store = match &fleet {
                        Some((_, keys, _)) => local.clone().with_fleet_keys(keys.as_deref()),
                        None => local.clone(),
                    };
                    latest = Some(Arc::new(store));
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
