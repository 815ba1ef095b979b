//! Picks up API keys created or revoked (`ricochet keys ...`) while the server runs.
//!
//! A background thread (not a core: it stats and reads a file) checks `api_keys.json` every
//! [`KEY_RELOAD_INTERVAL_MS`]; when its modification time or size changed it loads the store
//! and offers the new `Arc` to every core on a bounded channel. Cores take it at their next
//! sweep (`try_recv`, no syscall), so a revoked key stops working within about a second.

use crate::api::keys::{ApiKeyStore, API_KEYS_FILE};
use crossbeam::channel::{bounded, Receiver, Sender};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the key file is checked for changes.
pub const KEY_RELOAD_INTERVAL_MS: u64 = 1_000;

/// Starts the watcher; returns one receiver per core. The thread ends when `stop` is set.
pub fn start(
    data_dir: PathBuf,
    cores: usize,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Vec<Receiver<Arc<ApiKeyStore>>>> {
    let (txs, rxs): (Vec<Sender<Arc<ApiKeyStore>>>, Vec<_>) =
        (0..cores).map(|_| bounded(1)).unzip();
    let path = data_dir.join(API_KEYS_FILE);
    let stamp = |p: &PathBuf| -> Option<(SystemTime, u64)> {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len()))
    };
    let mut last = stamp(&path);
    std::thread::Builder::new()
        .name("ricochet-keywatch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(KEY_RELOAD_INTERVAL_MS));
                let now = stamp(&path);
                if now == last {
                    continue;
                }
                match ApiKeyStore::load(&data_dir) {
                    Ok(store) => {
                        last = now;
                        let store = Arc::new(store);
                        eprintln!("reloaded API keys from {}", path.display());
                        for tx in &txs {
                            // A core that has not taken the previous store yet gets this one next.
                            let _ = tx.try_send(store.clone());
                        }
                    }
                    // A half-written file (never: writes are atomic renames) or a corrupt one: keep
                    // the keys we have and say so; try again next time.
                    Err(e) => eprintln!(
                        "cannot reload API keys from {}: {e}; keeping the current keys",
                        path.display()
                    ),
                }
            }
        })?;
    Ok(rxs)
}
