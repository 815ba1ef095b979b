//! Picks up API keys created or revoked (`ricochet keys ...`) and domains declared or removed
//! (`ricochet domains ...`) while the server runs, and keeps the domain book for the API's
//! edits of it (Shlink's `PATCH /rest/v3/domains/redirects`: a file write or a database
//! transaction, never on a core).
//!
//! A background thread (not a core: it stats and reads files) checks `api_keys.json` and
//! `domains.json` every [`KEY_RELOAD_INTERVAL_MS`]; when a file's modification time or size
//! changed it loads it and offers both, as one `Arc<Reloaded>`, to every core through
//! `service::Outlets` (a queue of one per core, then the doorbell). Cores take it at their
//! next sweep (`try_recv`, no syscall), so a revoked key stops working, and a domain starts
//! or stops answering, within about a second. A file that cannot be read keeps what was in
//! force, and says so.

use crate::api::blocklist::{Blocklist, BlocklistFile};
use crate::api::domains::{
    BookStore, Domain, DomainBook, DomainBookError, Domains, RedirectsEdit, UnknownHost,
    DOMAINS_FILE,
};
use crate::api::keys::{ApiKeyStore, API_KEYS_FILE};
use crate::api::Reloaded;
use crate::mesh::service::{Inbox, Outlets};
use crate::mesh::Doorbells;
use crate::mesh::RequestPlace;
use crossbeam::channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Domain edits one node may have waiting for the book's keeper (`node::keywatch`) at once;
/// one more is answered 503.
pub const MAX_QUEUED_DOMAIN_EDITS: usize = 16;

/// A core's request to change the book, answered with [`EditDone`].
#[derive(Debug)]
pub struct EditRequest {
    pub core: usize,
    pub place: RequestPlace,
    pub edit: RedirectsEdit,
}

/// The book's keeper's answer to an [`EditRequest`]: the domain as changed, or why not (the
/// change is in force on the cores that take the reload offered before this answer).
#[derive(Debug)]
pub struct EditDone {
    pub place: RequestPlace,
    pub result: Result<Domain, EditRefused>,
}

/// A core's end of the book's keeper: where it sends edits (a queue shared by the cores),
/// where their answers come back, and how many of its own are out (at most
/// [`MAX_QUEUED_DOMAIN_EDITS`], so its answers always fit their queue).
pub struct BookEditor {
    pub tx: crossbeam::channel::Sender<EditRequest>,
    pub done: crossbeam::channel::Receiver<EditDone>,
    pub in_flight: usize,
    /// Edits the shared queue had no room for, answered 503 at the core's next sweep.
    pub refused: Vec<EditDone>,
}

/// Why an edit was not made.
#[derive(Debug)]
pub enum EditRefused {
    /// The request's fault (an unknown domain, a bad URL): 422 with this text.
    Invalid(String),
    /// The book could not be read or written (a disk or database failure): 503.
    Unavailable(String),
}

impl EditRefused {
    /// The refusal of `e`, an error of a book change.
    pub fn of(e: anyhow::Error) -> EditRefused {
        match e.downcast_ref::<DomainBookError>() {
            Some(
                DomainBookError::Io { .. }
                | DomainBookError::Corrupt { .. }
                | DomainBookError::NumbersExhausted,
            )
            | None => EditRefused::Unavailable(format!("{e:#}")),
            Some(_) => EditRefused::Invalid(e.to_string()),
        }
    }
}

/// Fleet mode's source of keys, domains and blocked targets: a database session, the fleet's
/// keys last read (`None`: not read yet), its domains and its blocklist.
pub struct FleetKeys {
    pub db: fleet::Db,
    pub keys: Option<Vec<fleet::keys::FleetKey>>,
    pub stats: Arc<fleet::FleetStats>,
    pub domains: crate::fleet_mode::domains::FleetDomains,
    pub blocklist: crate::fleet_mode::blocklist::FleetBlocklist,
}

/// How often the key file is checked for changes.
pub const KEY_RELOAD_INTERVAL_MS: u64 = 1_000;

/// The watcher's ends on the cores: reloads, where to send domain edits (one queue of
/// [`MAX_QUEUED_DOMAIN_EDITS`] for all), and the answers to each core's edits.
pub struct CoreEnds {
    pub reloads: Vec<Inbox<Arc<Reloaded>>>,
    pub edits: Sender<EditRequest>,
    pub edits_done: Vec<Inbox<EditDone>>,
}

/// What the watcher starts from besides the keys: the domains in force (rebuilt with
/// `unknown` on a change) and the blocklist (rebuilt when its file, `--blocklist`, or in
/// fleet mode the fleet's table changes).
pub struct Books {
    pub domains: Arc<Domains>,
    pub unknown: UnknownHost,
    pub blocklist: Arc<Blocklist>,
    pub blocklist_file: Option<BlocklistFile>,
}

/// The blocklist of the node's file and, in fleet mode, the fleet's table as last read
/// (`generation`: tells this list's verdicts from the last one's).
pub fn build_blocklist(
    file: Option<&BlocklistFile>,
    fleet: Option<&FleetKeys>,
    generation: u64,
) -> Result<Blocklist, crate::api::blocklist::BlocklistError> {
    let sources: Vec<_> = file
        .map(BlocklistFile::source)
        .into_iter()
        .chain(fleet.map(|f| f.blocklist.source()))
        .collect();
    let b = Blocklist::build(&sources, generation)?;
    if !sources.is_empty() {
        crate::api::blocklist::report_loaded(&b);
    }
    Ok(b)
}

/// Starts the watcher (`books`: the domains and blocklist in force at start); returns each
/// core's ends. The thread ends when `stop` is set.
/// In fleet mode (`fleet`: a session and the keys read at start, `None` if the database did
/// not answer then) it also reads the fleet's keys from the database at every tick and offers
/// the local keys with them whenever either changed; while the database cannot be read, the
/// keys it last gave stay. There the fleet's domain table, not `domains.json`, is the book
/// (`fleet_mode::domains`). It also keeps the book: `edits` (Shlink's
/// `PATCH /rest/v3/domains/redirects`, sent by the cores) are applied to the book at once,
/// offered to every core as a reload, then answered to the core that asked.
pub fn start(
    data_dir: PathBuf,
    bells: Arc<Doorbells>,
    stop: Arc<AtomicBool>,
    local: ApiKeyStore,
    fleet: Option<FleetKeys>,
    books: Books,
) -> std::io::Result<CoreEnds> {
    let Books {
        domains,
        unknown,
        blocklist,
        blocklist_file,
    } = books;
    let cores = bells.0.len();
    let (edit_tx, edits) = bounded(MAX_QUEUED_DOMAIN_EDITS);
    let (outlets, reloads) = Outlets::new(cores, 1, bells.clone());
    let (done, edits_done) = Outlets::new(cores, MAX_QUEUED_DOMAIN_EDITS, bells);
    let path = data_dir.join(API_KEYS_FILE);
    let domains_path = data_dir.join(DOMAINS_FILE);
    let w = Watcher {
        last: stamp(&path),
        path,
        domain_file: DomainFile {
            stamp: stamp(&domains_path),
            path: domains_path,
            data_dir: data_dir.clone(),
            unknown,
        },
        data_dir,
        local,
        fleet,
        domains,
        blocklist,
        blocklist_file,
        retired: Vec::new(),
        outlets,
        latest: None,
        behind: vec![false; cores],
        edits,
        done,
    };
    std::thread::Builder::new()
        .name("ricochet-keywatch".into())
        .spawn(move || w.run(&stop))?;
    Ok(CoreEnds {
        reloads,
        edits: edit_tx,
        edits_done,
    })
}

/// The watcher thread's state.
struct Watcher {
    data_dir: PathBuf,
    path: PathBuf,
    /// `api_keys.json`'s stamp when last read.
    last: Option<(SystemTime, u64)>,
    local: ApiKeyStore,
    fleet: Option<FleetKeys>,
    domain_file: DomainFile,
    domains: Arc<Domains>,
    blocklist: Arc<Blocklist>,
    blocklist_file: Option<BlocklistFile>,
    /// Lists replaced while a core may still hold them: each is dropped here once no core
    /// does (a million-entry list is tens of megabytes, whose free would stall a core).
    retired: Vec<Arc<Blocklist>>,
    outlets: Outlets<Arc<Reloaded>>,
    latest: Option<Arc<Reloaded>>,
    /// Cores whose queue was full when the latest store was offered: offered again each
    /// tick, so none keeps an older key set (a revoked key) for more than a tick longer.
    behind: Vec<bool>,
    edits: Receiver<EditRequest>,
    done: Outlets<EditDone>,
}

impl Watcher {
    fn run(mut self, stop: &AtomicBool) {
        let tick = Duration::from_millis(KEY_RELOAD_INTERVAL_MS);
        let mut next = Instant::now() + tick;
        while !stop.load(Ordering::Relaxed) {
            match self
                .edits
                .recv_timeout(next.saturating_duration_since(Instant::now()))
            {
                Ok(req) => self.edit(req),
                Err(RecvTimeoutError::Timeout) => {
                    self.tick();
                    next = Instant::now() + tick;
                }
                // No core can send any more (they stopped): ticks only.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            }
        }
    }

    /// Every [`KEY_RELOAD_INTERVAL_MS`]: the keys, the domains and the blocklist read again if
    /// they changed.
    fn tick(&mut self) {
        let mut changed = self.fleet.as_mut().is_some_and(read_fleet_keys);
        changed |= self.reload_local_keys();
        if let Some(d) = self.domain_file.poll(self.fleet.as_mut()) {
            self.domains = d;
            changed = true;
        }
        changed |= self.reload_blocklist();
        self.retired.retain(|b| Arc::strong_count(b) > 1);
        if changed {
            self.publish();
        }
        self.offer_behind();
    }

    /// The blocklist built again if its file or the fleet's table changed; whether it did.
    /// One that cannot be built (past its limit) keeps the list in force.
    fn reload_blocklist(&mut self) -> bool {
        let mut changed = self
            .blocklist_file
            .as_mut()
            .is_some_and(BlocklistFile::poll);
        if let Some(f) = self.fleet.as_mut() {
            changed |= f.stats.refused().is_none() && f.blocklist.poll(&mut f.db);
        }
        if !changed {
            return false;
        }
        let generation = self.blocklist.generation + 1;
        match build_blocklist(
            self.blocklist_file.as_ref(),
            self.fleet.as_ref(),
            generation,
        ) {
            Ok(b) => {
                let old = std::mem::replace(&mut self.blocklist, Arc::new(b));
                self.retired.push(old);
                true
            }
            Err(e) => {
                eprintln!("{e}; keeping the blocklist in force");
                false
            }
        }
    }

    /// `api_keys.json` read again if it changed; whether the keys did.
    fn reload_local_keys(&mut self) -> bool {
        let now = stamp(&self.path);
        if now.is_none() && self.last.is_some() {
            // Deleted (or unreadable): like a corrupt file, keep the keys we have,
            // `RICOCHET_API_KEY`'s included, rather than lock every client out.
            eprintln!(
                "API key file {} is gone; keeping the current keys (restore it, or run \
                 `ricochet keys` to write a new one)",
                self.path.display()
            );
            self.last = None;
        } else if now.is_some() && now != self.last {
            match ApiKeyStore::load(&self.data_dir) {
                Ok(store) => {
                    self.last = now;
                    eprintln!("reloaded API keys from {}", self.path.display());
                    self.local = store;
                    return true;
                }
                // A corrupt file: keep the keys we have and say so; try again next time.
                Err(e) => eprintln!(
                    "cannot reload API keys from {}: {e}; keeping the current keys",
                    self.path.display()
                ),
            }
        }
        false
    }

    /// The keys and domains in force, offered to every core.
    fn publish(&mut self) {
        let store = match &self.fleet {
            Some(f) => self.local.clone().with_fleet_keys(f.keys.as_deref()),
            None => self.local.clone(),
        };
        self.latest = Some(Arc::new(Reloaded {
            keys: Arc::new(store),
            domains: self.domains.clone(),
            blocklist: self.blocklist.clone(),
        }));
        self.behind.iter_mut().for_each(|b| *b = true);
        self.offer_behind();
    }

    fn offer_behind(&mut self) {
        if let Some(store) = &self.latest {
            for (core, b) in self.behind.iter_mut().enumerate().filter(|(_, b)| **b) {
                *b = self.outlets.offer(core, store.clone()).is_err();
            }
        }
    }

    /// Applies a core's edit to the book (the file, or the fleet's table), offers the new
    /// domains to every core, then answers the core that asked.
    fn edit(&mut self, req: EditRequest) {
        let result = match self.fleet.as_mut() {
            Some(f) => crate::fleet_mode::domains::FleetBook(&mut f.db)
                .change(&mut |b| b.set_redirects(&req.edit).cloned()),
            None => crate::api::domains::DirBook(&self.data_dir)
                .change(&mut |b| b.set_redirects(&req.edit).cloned()),
        };
        if result.is_ok() {
            if let Some(d) = self.domain_file.poll(self.fleet.as_mut()) {
                self.domains = d;
                self.publish();
            }
        }
        let done = EditDone {
            place: req.place,
            result: result.map_err(EditRefused::of),
        };
        // A core has at most MAX_QUEUED_DOMAIN_EDITS edits waiting (the queue's bound), so its
        // answers fit; one that does not is dropped only if that core is gone.
        let _ = self.done.offer(req.core, done);
    }
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
