//! The one seam between a single node and a fleet node, chosen once at start (`--fleet-pg`):
//! every start-up step that differs asks [`Mode`], so `server::serve` has no fleet branch.
//! On the cores the same choice is the owner's `Judge` (`owner::fleet_state`), set here.
//!
//! A single node is its own authority: the data dir's ID allocator and secret, its own API
//! keys, no service thread. A fleet node's links, IDs and keys come from PostgreSQL
//! (`fleet_mode`), and its start checks the database first.

use crate::fleet_mode::node::{DbAtStart, FleetOptions};
use crate::mesh::router::Router;
use crate::mesh::Doorbells;
use crate::node::shared::Shared;
use anyhow::Context;
use shards::datadir::DataDir;
use shards::table::Table;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A node's mode.
#[derive(Clone, Debug)]
pub enum Mode {
    /// One server: the data dir is the system of record.
    Single,
    /// A fleet node: PostgreSQL is the system of record (`docs/fleet.md`).
    Fleet(FleetOptions),
}

/// The ID authority a node allocates from, its key-permutation secret, and the fleet's
/// counters (fleet mode).
pub type IdAuthority = (
    shards::alloc::AllocatorService,
    [u8; 32],
    Option<Arc<fleet::FleetStats>>,
);

/// Each core's end of fleet mode's service threads (empty for a single node).
pub type FleetCores = Vec<(
    crate::owner::fleet_state::FleetLinks,
    crate::mesh::service::Inbox<crate::fleet_mode::messages::FleetToCore>,
)>;

impl Mode {
    /// Whether this is fleet mode.
    pub fn is_fleet(&self) -> bool {
        matches!(self, Mode::Fleet(_))
    }

    /// Flags checked before the data dir is touched (a bad database URL is a flag error).
    pub fn check_flags(&self) -> anyhow::Result<()> {
        match self {
            Mode::Single => Ok(()),
            Mode::Fleet(f) => Ok(fleet::check_url(&f.url)?),
        }
    }

    /// Fleet mode, before the logs are read: whether the database answers (a bootstrapped
    /// node starts without it and serves what it holds), and, when it does, a node whose feed
    /// cursor it can no longer continue starts over from a snapshot (its links wiped here,
    /// bootstrapped by [`Mode::bootstrap_if_empty`]; with the database down, the follower makes
    /// the same check once it answers and regenerates the links while serving).
    pub fn before_recovery(&self, dir: &DataDir) -> anyhow::Result<Option<DbAtStart>> {
        let Mode::Fleet(f) = self else {
            return Ok(None);
        };
        let at_start = crate::fleet_mode::node::database_at_start(dir.path(), &f.url)?;
        let marked = dir
            .path()
            .join(crate::fleet_mode::node::MARKER_FILE)
            .exists();
        if at_start.answers() && marked {
            crate::fleet_mode::bootstrap::rebootstrap_if_behind(dir, &f.url)
                .context("checking the feed cursor against the database")?;
        }
        Ok(Some(at_start))
    }

    /// A fleet node's links come from the fleet database, a single node's do not: a data dir
    /// holding `holds` links of the other kind is refused.
    pub fn check_marker(&self, dir: &DataDir, holds: u64) -> anyhow::Result<()> {
        let fleet = matches!(self, Mode::Fleet(_));
        crate::fleet_mode::node::check_marker(dir.path(), fleet, holds)
    }

    /// A fleet node with nothing yet (no link in its tables, `links`, or its logs, `logged`,
    /// and no feed cursor) starts from a snapshot of the database, not the feed's whole
    /// history; then `tables` are opened again. The links the tables hold after.
    pub fn bootstrap_if_empty(
        &self,
        dir: &DataDir,
        router: &Router,
        tables: &mut Vec<Option<Table>>,
        (links, logged): (u64, usize),
    ) -> anyhow::Result<u64> {
        let cursor = dir.path().join(crate::fleet_mode::files::CURSOR_FILE);
        let Mode::Fleet(f) = self else {
            return Ok(links);
        };
        if links > 0 || logged > 0 || cursor.exists() {
            return Ok(links);
        }
        let t = Instant::now();
        let n = crate::fleet_mode::bootstrap::bootstrap(dir, &f.url).context("fleet bootstrap")?;
        // A re-bootstrap (its marker) is complete once the cursor is saved.
        crate::fleet_mode::files::rebootstrap_done(dir.path())
            .context("removing the re-bootstrap marker")?;
        eprintln!(
            "fleet: bootstrapped {n} links from a database snapshot in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        *tables = crate::node::recovery::open_tables(dir, router)?;
        Ok(tables.iter().flatten().map(|t| t.len()).sum())
    }

    /// The authority IDs are allocated from: the data dir's own (`max_logged_id`: the highest
    /// the logs mention), or the fleet's namespace in PostgreSQL.
    pub fn id_authority(
        &self,
        dir: &DataDir,
        max_logged_id: u64,
        at_start: Option<&DbAtStart>,
    ) -> anyhow::Result<IdAuthority> {
        match self {
            Mode::Single => {
                let (allocator, secret) = open_local_authority(dir, max_logged_id)?;
                Ok((allocator, secret, None))
            }
            Mode::Fleet(f) => {
                let at_start = at_start.expect("fleet mode checks the database first");
                let node = crate::fleet_mode::node::open(dir.path(), f, at_start)?;
                let allocator =
                    shards::alloc::AllocatorService::start(Box::new(node.authority), false)
                        .context("starting the allocator thread")?;
                Ok((allocator, node.secret, Some(node.stats)))
            }
        }
    }

    /// The domain book at start: the data dir's `domains.json` on a single node; the fleet's
    /// table (or the node's copy of it while the database does not answer) on a fleet node.
    pub fn domain_book(
        &self,
        dir: &DataDir,
        db_answers: bool,
    ) -> anyhow::Result<crate::api::domains::DomainBook> {
        match self {
            Mode::Single => {
                crate::api::domains::DomainBook::load(dir.path()).context("loading domains")
            }
            Mode::Fleet(f) => {
                let mut db = fleet::Db::new(&f.url)?;
                crate::fleet_mode::domains::book_at_start(dir.path(), db_answers.then_some(&mut db))
            }
        }
    }

    /// Fleet mode: the fleet's API keys and domains and where to read them again (the key
    /// watcher reads them about once a second; `book`: the domains the node starts with).
    /// With the database down the keys are unread until it answers: a token that is not a
    /// local key is then answered 503, not 401 (it may be a fleet key).
    pub fn fleet_keys(
        &self,
        dir: &DataDir,
        db_answers: bool,
        stats: Option<&Arc<fleet::FleetStats>>,
        book: &crate::api::domains::DomainBook,
    ) -> anyhow::Result<Option<crate::node::keywatch::FleetKeys>> {
        let Mode::Fleet(f) = self else {
            return Ok(None);
        };
        let mut db = fleet::Db::new(&f.url)?;
        let keys = match db_answers {
            true => Some(fleet::keys::list_keys(&mut db).context("reading the fleet's API keys")?),
            false => None,
        };
        let blocklist = crate::fleet_mode::blocklist::FleetBlocklist::at_start(
            dir.path(),
            db_answers.then_some(&mut db),
        );
        Ok(Some(crate::node::keywatch::FleetKeys {
            db,
            keys,
            stats: stats.expect("fleet mode has fleet stats").clone(),
            domains: crate::fleet_mode::domains::FleetDomains::new(dir.path(), book),
            blocklist,
        }))
    }

    /// Fleet mode with analytics on: the click flusher's setup (each node's clicks go to the
    /// database too).
    pub fn fleet_clicks(
        &self,
        analytics: &crate::analytics::AnalyticsConfig,
        dir: &DataDir,
        db_answers: bool,
        cores: usize,
        totals: Arc<crate::analytics::ClickStats>,
    ) -> anyhow::Result<Option<crate::analytics::fleet::FleetClicksSetup>> {
        let Mode::Fleet(f) = self else {
            return Ok(None);
        };
        if analytics.mode == crate::analytics::Mode::Off {
            return Ok(None);
        }
        Ok(Some(crate::analytics::fleet::FleetClicksSetup {
            url: f.url.clone(),
            node: crate::fleet_mode::node::click_identity(dir.path())?,
            node_id: f.node_id.clone(),
            retention_days: analytics.retention_days,
            flush_interval_ms: f.click_flush_ms,
            cores,
            stats: Arc::new(crate::analytics::fleet::FleetClickStats::default()),
            dropped: Arc::new(move || totals.dropped_total()),
            db_answers_at_start: db_answers,
        }))
    }

    /// Fleet mode: starts the link writer, the read-through reader and the change feed
    /// follower, each on its own thread, and gives each core its end of them (the owner's
    /// `Judge::Fleet`). Empty for a single node.
    pub fn start_services(
        &self,
        dir: &DataDir,
        router: Router,
        doorbells: &Arc<Doorbells>,
        shared: &Arc<Shared>,
        keygen: &Arc<shards::keygen::KeyGen>,
        secret: [u8; 32],
    ) -> anyhow::Result<FleetCores> {
        let (Mode::Fleet(f), Some(stats)) = (self, &shared.fleet) else {
            return Ok(Vec::new());
        };
        let (outlets, inboxes) = crate::mesh::service::Outlets::new(
            router.cores(),
            crate::fleet_mode::messages::FLEET_OUTLET_CAPACITY,
            doorbells.clone(),
        );
        let outlets = Arc::new(outlets);
        let (writer, reader) = spawn_link_threads(f, stats, &outlets)?;
        // At most one ack per core per batch is outstanding; room for a batch given up on too.
        let (ack_tx, ack_rx) = crossbeam::channel::bounded(router.cores() * 4);
        crate::fleet_mode::follower::Follower {
            db: fleet::Db::new(&f.url)?,
            url: f.url.clone(),
            data_dir: dir.path().to_path_buf(),
            router,
            outlets,
            acks: ack_rx,
            stats: stats.clone(),
            stop: shared.draining.clone(),
            pause_file: f.pause_feed_file.clone(),
            secret,
            namespace: f.namespace.clone(),
        }
        .spawn()
        .context("starting the change feed follower")?;
        Ok(inboxes
            .into_iter()
            .map(|inbox| {
                let links = crate::owner::fleet_state::FleetLinks::new(
                    writer.clone(),
                    reader.clone(),
                    ack_tx.clone(),
                    keygen.clone(),
                    stats.clone(),
                );
                (links, inbox)
            })
            .collect())
    }
}

/// The link writer and the read-through reader, each answering the cores through `outlets`.
fn spawn_link_threads(
    f: &FleetOptions,
    stats: &Arc<fleet::FleetStats>,
    outlets: &Arc<crate::mesh::service::Outlets<crate::fleet_mode::messages::FleetToCore>>,
) -> anyhow::Result<(fleet::links::WriterHandle, fleet::links::ReaderHandle)> {
    use crate::fleet_mode::messages::FleetToCore;
    let to_cores = outlets.clone();
    let writer = fleet::links::spawn_writer(
        &f.url,
        stats.clone(),
        Arc::new(move |answer| {
            let core = answer.core as usize;
            let mut item = FleetToCore::Written(answer);
            // The core drains its queue every loop turn: wait for room rather than lose an
            // answer its API request waits for.
            while let Err(back) = to_cores.offer(core, item) {
                item = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }),
    )?;
    let to_cores = outlets.clone();
    let reader = fleet::links::spawn_reader(
        &f.url,
        stats.clone(),
        Box::new(move |answer| {
            let core = answer.core as usize;
            let mut item = FleetToCore::Read(answer);
            while let Err(back) = to_cores.offer(core, item) {
                item = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }),
    )?;
    Ok((writer, reader))
}

/// The data dir's own allocation authority and key-permutation secret (not fleet mode).
fn open_local_authority(
    dir: &DataDir,
    max_logged_id: u64,
) -> anyhow::Result<(shards::alloc::AllocatorService, [u8; 32])> {
    let authority = shards::alloc::FileAuthority::open(dir.path(), max_logged_id)
        .context("opening the ID allocation authority")?;
    let allocator = shards::alloc::AllocatorService::start(Box::new(authority), false)
        .context("starting the allocator thread")?;
    // A new secret maps new IDs onto keys already issued under the lost one: with IDs handed
    // out (the authority's high-water, or IDs in the logs), a missing secret is refused.
    let secret_path = dir.path().join(shards::keygen::SECRET_FILE_NAME);
    if !secret_path.exists()
        && (allocator.high_water() > shards::alloc::FIRST_ID || max_logged_id > 0)
    {
        anyhow::bail!(
            "{} is missing but {} generated IDs were already handed out; a new secret would map new IDs onto keys already issued. Restore it from a backup",
            secret_path.display(),
            allocator.high_water().saturating_sub(shards::alloc::FIRST_ID)
        );
    }
    let secret = shards::keygen::load_or_create_secret(dir.path())
        .context("loading the key-permutation secret")?;
    Ok((allocator, secret))
}
