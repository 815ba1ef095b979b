//! `ricochet serve`: opens the data dir, validates every shard table, binds one listener per
//! core, starts one pinned glommio executor per core and waits for them to drain.
//!
//! Everything that can fail for a reason the operator must fix (a corrupt table, a taken port,
//! too many cores) fails here, on the main thread, before any executor starts.

use crate::flights::Flights;
use crate::mesh::router::Router;
use crate::mesh::{Doorbells, Mesh, MeshQueues};
use crate::net::conns::visit::VisitorSource;
use crate::net::conns::Conns;
use crate::node::core_loop::{Core, CoreSetup, Parking, Timeouts};
use crate::node::shared::Shared;
use crate::owner::store::Store;
use crate::owner::Owner;
use anyhow::{bail, Context};
use glommio::{LocalExecutorBuilder, Placement};
use shards::datadir::DataDir;
use shards::table::Table;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Memory each glommio executor registers for its own I/O buffers. glommio's default is
/// 10 MiB; ricochet's sockets use their own ring, so 1 MiB is ample, and 8 executors fit the
/// common 8 MiB `RLIMIT_MEMLOCK` default. When more are needed, the limit is raised at start
/// (or the size shrunk to fit), and the server says which.
pub const GLOMMIO_IO_MEMORY_BYTES: usize = 1 << 20;

/// glommio's preempt timer: how often the socket loop yields to glommio's own reactor. No
/// glommio task serves requests (sockets, mesh, writes and timeouts are all in the loop), so
/// this is long: each glommio pass re-arms its timer and allocates (measured: with the 100 ms
/// default, ~10 allocations per core per second under load; tests/noalloc_server.rs).
pub const GLOMMIO_PREEMPT_MS: u64 = 60_000;

/// Smallest per-executor I/O memory we shrink to when the locked-memory limit is tight.
pub const MIN_GLOMMIO_IO_MEMORY_BYTES: usize = 128 << 10;

/// Longest the server waits for every core to report ready before giving up.
pub const STARTUP_TIMEOUT_MS: u64 = 30_000;

/// Entries in each core's LRU of answers from other cores.
pub const DEFAULT_LRU_CAPACITY: usize = crate::base::cache::DEFAULT_LRU_CAPACITY;

/// `ricochet serve` options.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `None`: every CPU this process may run on.
    pub cores: Option<usize>,
    pub public_url: Option<String>,
    /// What a `Host` naming no declared domain gets (`--unknown-host`).
    pub unknown_host: crate::api::domains::UnknownHost,
    /// Which origins' pages may call the APIs (`--cors-origins`).
    pub cors_origins: crate::api::cors::CorsOrigins,
    /// The abuse blocklist file (`--blocklist`), if any.
    pub blocklist: Option<PathBuf>,
    /// How visits shape redirects (`--extra-path`, `--forward-query`, `--trailing-slash`).
    pub visit_rules: crate::route::VisitRules,
    pub parking: Parking,
    pub lru_capacity: usize,
    pub timeouts: Timeouts,
    /// Start even if a log is corrupt in the middle, skipping the bad bytes.
    pub salvage: bool,
    /// IDs per range requested from the allocation authority.
    pub segment_len: u64,
    /// Creates per second per API key, across all cores.
    pub create_rate_per_s: u32,
    /// Burst of creates per API key.
    pub create_burst: u32,
    pub faults: crate::owner::writes::Faults,
    /// Memtable entries per core that trigger a compaction.
    pub compact_entries: usize,
    /// Test only (`--test-oversubscribe`): allow more cores than CPUs, several executors
    /// sharing a CPU, so paths that need 3+ cores are tested on small machines. Production
    /// refuses such a `--cores`: executors that share a CPU spin against each other.
    pub oversubscribe: bool,
    /// `--accept-data-loss`: start even though tables or logs the data dir recorded are gone,
    /// serving without the links they held (each missing file is reported).
    pub accept_data_loss: bool,
    /// Single node, or a fleet node (`--fleet-pg`: IDs, links and keys from PostgreSQL).
    pub mode: crate::node::mode::Mode,
    /// Test only (`--test-stall-core N --test-stall-after-ms T`): core N blocks once at T.
    pub test_stall: Option<(usize, u64)>,
    /// Click analytics (`--analytics`, `--client-ip`, `--click-retention-days`,
    /// `--bot-patterns`).
    pub analytics: crate::analytics::AnalyticsConfig,
}

/// Creates per second per API key unless configured (`--create-rate`); with the burst, enough
/// for interactive and batch clients, low enough that one leaked key cannot fill the disk fast.
pub const DEFAULT_CREATE_RATE_PER_S: u32 = 1_000;

/// Creates a rested API key may make at once (`--create-burst`).
pub const DEFAULT_CREATE_BURST: u32 = 2_000;

/// Runs the server until SIGTERM/SIGINT has drained it.
pub fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let (cpus, cores) = plan_cpus(&opts)?;
    let mut links = open_links(&opts, cores)?;
    let io_memory = size_io_memory(cores);
    let crate::net::listener::Listeners {
        fds: listener_fds,
        bound,
        lock: port_lock,
    } = crate::net::listener::open(opts.listen, cores)?;
    let doorbells = Arc::new(Doorbells::new(cores).context("creating doorbell eventfds")?);
    let mut write = open_write_side(&opts, &links)?;
    let clicks = start_clicks(&opts, &links, cores, &doorbells)?;
    let draining = Arc::new(AtomicBool::new(false));
    install_signal_handlers(&draining, &doorbells)?;
    let shared = Arc::new(shared(&opts, cores, draining, &doorbells, &write, &clicks));

    // Fleet mode: the link writer and the change feed follower, each on its own thread.
    let router = links.router;
    let fleet_cores = opts.mode.start_services(
        &links.dir,
        router,
        &doorbells,
        &shared,
        &write.keygen,
        write.secret,
    )?;
    let keywatch_stop = Arc::new(AtomicBool::new(false));
    let key_updates = crate::node::keywatch::start(
        links.dir.path().to_path_buf(),
        doorbells.clone(),
        keywatch_stop.clone(),
        write.local_keys.clone(),
        write.fleet_keys.take(),
        write.books(&opts),
    )
    .context("starting the API key watcher")?;
    let parts = CoreParts {
        visitors: VisitorSource::new(opts.analytics.client_ip, clicks.geoip.clone()),
        opts: &opts,
        router,
        doorbells: &doorbells,
        shared: &shared,
        queues: Arc::new(MeshQueues::new(cores)),
        io_memory,
        now_s: links.now_s,
        listener_fds,
        public_url: public_url(&opts, bound),
    };
    // More cores than CPUs only with `oversubscribe` (checked above): they share CPUs in turn.
    let core_cpus: Vec<usize> = cpus.iter().copied().cycle().take(cores).collect();
    let handles = spawn_cores(
        &parts,
        &core_cpus,
        &write,
        &mut links,
        fleet_cores,
        clicks.per_core,
        key_updates,
    )?;
    let handles = wait_until_ready(&shared, cores, handles)?;
    println!(
        "ricochet listening on {bound} with {cores} cores, {} links in {} shards and {} keys \
         from the logs (tables opened in {:.1} ms)",
        links.links, links.shard_count, links.logged, links.open_ms
    );
    if let Some(url) = &opts.public_url {
        println!("public URL {url}");
    }
    stop(handles, clicks.aggregators, &keywatch_stop)?;
    drop(write.allocator);
    // Held to the end: a server started meanwhile would share the port with a draining one.
    drop(port_lock);
    say_dropped_clicks(&shared);
    eprintln!("ricochet drained and stopped");
    Ok(())
}

/// What `/metrics` can no longer be asked once the server stops: the clicks answered but not
/// counted over its life (no clean batch free on their core, `ricochet_clicks_dropped_total`).
fn say_dropped_clicks(shared: &Shared) {
    if let Some(c) = &shared.clicks {
        let dropped: u64 = c
            .per_core
            .iter()
            .map(|a| a.dropped.load(Ordering::Relaxed))
            .sum();
        eprintln!("clicks dropped since start: {dropped}");
    }
}

/// What every core and the service threads read: counters, readiness, the drain flag.
fn shared(
    opts: &ServeOptions,
    cores: usize,
    draining: Arc<AtomicBool>,
    doorbells: &Arc<Doorbells>,
    write: &WriteSide,
    clicks: &Clicks,
) -> Shared {
    Shared {
        cores,
        ready_cores: AtomicUsize::new(0),
        counters: (0..cores).map(|_| Default::default()).collect(),
        failed_cores: AtomicUsize::new(0),
        drained_cores: AtomicUsize::new(0),
        draining,
        doorbells: doorbells.clone(),
        fleet: write.fleet_stats.clone(),
        started: Instant::now(),
        ready: Default::default(),
        ready_for_creates: Default::default(),
        openapi_json: crate::api::openapi::to_json(),
        clicks: clicks.aggregators.as_ref().map(|_| clicks.stats.clone()),
        fleet_clicks: clicks.fleet_stats.clone(),
        test_stall: opts
            .test_stall
            .map(|(core, after_ms)| crate::base::test_faults::TestStall::new(core, after_ms)),
    }
}

/// The CPUs the cores run on and how many cores: `--cores` checked against the CPUs this
/// process may use (less `--service-cpus`).
fn plan_cpus(opts: &ServeOptions) -> anyhow::Result<(Vec<usize>, usize)> {
    let allowed = crate::base::cpus::allowed().context("reading the CPU affinity mask")?;
    // `--service-cpus`: the aggregators' own CPUs are not the cores'.
    let cpus = crate::base::cpus::split(&allowed, opts.analytics.service_cpus.as_deref())
        .map_err(|e| anyhow::anyhow!(e))?;
    let cores = opts.cores.unwrap_or(cpus.len());
    if cores == 0 {
        bail!("--cores must be at least 1");
    }
    if cores > cpus.len() && opts.oversubscribe {
        eprintln!(
            "warning: --test-oversubscribe: {cores} cores on {} CPUs (for tests only)",
            cpus.len()
        );
    } else if cores > cpus.len() {
        let besides = match &opts.analytics.service_cpus {
            Some(s) => format!(" besides --service-cpus {s:?}"),
            None => String::new(),
        };
        bail!(
            "--cores {cores} is more than the {} CPUs this process may use{besides} ({:?})",
            cpus.len(),
            cpus
        );
    }
    Ok((cpus, cores))
}

/// The data dir opened and locked, its logs recovered and its tables opened: what the cores
/// will serve.
struct Links {
    dir: DataDir,
    _lock: shards::datadir::DirLock,
    /// Fleet mode: whether the database answered at start.
    fleet_db: Option<crate::fleet_mode::node::DbAtStart>,
    router: Router,
    shard_count: u32,
    now_s: u64,
    logs: Vec<crate::node::recovery::CoreLog>,
    max_logged_id: u64,
    /// By shard; each core takes its own.
    tables: Vec<Option<Table>>,
    links: u64,
    logged: usize,
    open_ms: f64,
}

impl Links {
    fn fleet_db_answers(&self) -> bool {
        self.fleet_db.as_ref().is_some_and(|d| d.answers())
    }
}

/// Opens the data dir: lock, fleet mode's start checks (a re-bootstrap, a first bootstrap),
/// missing files, log recovery, tables.
fn open_links(opts: &ServeOptions, cores: usize) -> anyhow::Result<Links> {
    opts.mode.check_flags()?;
    let dir = DataDir::open_or_create(&opts.data_dir)
        .with_context(|| format!("opening data dir {}", opts.data_dir.display()))?;
    let lock = dir.lock_exclusive()?;
    let fleet_db = opts.mode.before_recovery(&dir)?;
    let shard_count = dir.manifest().shard_count;
    if cores > shard_count as usize {
        bail!("--cores {cores} is more than the data dir's {shard_count} shards");
    }
    let router = Router::new(shard_count, cores);
    let now_s = crate::api::timefmt::now_s();

    refuse_missing_tables(opts, &dir)?;
    // Logged writes first: a core-count change folds them into the tables we open next.
    let (logs, max_logged_id) = crate::node::recovery::recover_logs(
        &dir,
        &router,
        opts.salvage,
        opts.accept_data_loss,
        now_s,
        opts.faults,
    )?;

    let started = Instant::now();
    let mut tables = crate::node::recovery::open_tables(&dir, &router)?;
    let links: u64 = tables.iter().flatten().map(|t| t.len()).sum();
    // A fleet node's links come from the fleet database; a single node's do not: never mix.
    let logged: usize = logs.iter().map(|l| l.memtable.len()).sum();
    opts.mode.check_marker(&dir, links + logged as u64)?;
    let links = opts
        .mode
        .bootstrap_if_empty(&dir, &router, &mut tables, (links, logged))?;
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Links {
        dir,
        _lock: lock,
        fleet_db,
        router,
        shard_count,
        now_s,
        logs,
        max_logged_id,
        tables,
        links,
        logged,
        open_ms,
    })
}

/// Files the dir recorded must all be there: a missing table or log is silent loss, refused
/// unless `--accept-data-loss`.
fn refuse_missing_tables(opts: &ServeOptions, dir: &DataDir) -> anyhow::Result<()> {
    let missing = dir.missing_tables()?;
    if missing.is_empty() {
        return Ok(());
    }
    if !opts.accept_data_loss {
        return Err(shards::Error::MissingTables {
            dir: dir.path().to_path_buf(),
            missing,
        }
        .into());
    }
    eprintln!(
        "--accept-data-loss: serving without {} (the links in them answer 404)",
        missing.join(", ")
    );
    Ok(())
}

/// The write path's shared parts: the allocation authority, the key-permutation secret, the
/// API keys (the fleet's too), and the per-core limits.
struct WriteSide {
    allocator: shards::alloc::AllocatorService,
    secret: [u8; 32],
    fleet_stats: Option<Arc<fleet::FleetStats>>,
    keygen: Arc<shards::keygen::KeyGen>,
    local_keys: crate::api::keys::ApiKeyStore,
    /// Fleet mode: the fleet's keys and where to read them again; the key watcher takes them.
    fleet_keys: Option<crate::node::keywatch::FleetKeys>,
    api_keys: Arc<crate::api::keys::ApiKeyStore>,
    /// The declared domains at start; the key watcher offers later ones.
    domains: Arc<crate::api::domains::Domains>,
    /// The abuse blocklist at start (`--blocklist` and the fleet's table); the key watcher
    /// offers later ones.
    blocklist: Arc<crate::api::blocklist::Blocklist>,
    /// `--blocklist`'s file as read at start, for the key watcher.
    blocklist_file: Option<crate::api::blocklist::BlocklistFile>,
    seg_cfg: shards::alloc::SegmentConfig,
    /// Every core's creates draw from it (per API key, whole node).
    ratelimit: Arc<crate::api::ratelimit::RateLimiter>,
}

fn open_write_side(opts: &ServeOptions, links: &Links) -> anyhow::Result<WriteSide> {
    let dir = &links.dir;
    let (allocator, secret, fleet_stats) =
        opts.mode
            .id_authority(dir, links.max_logged_id, links.fleet_db.as_ref())?;
    let keygen = Arc::new(shards::keygen::KeyGen::new(&secret));
    if let Some(generated) = crate::api::keys::ApiKeyStore::bootstrap(
        dir.path(),
        std::env::var(crate::api::keys::ENV_VAR).ok(),
    )
    .context("preparing API keys")?
    {
        println!("generated API key (shown once, store it now): {generated}");
    }
    let local_keys = crate::api::keys::ApiKeyStore::load(dir.path()).context("loading API keys")?;
    let book = opts.mode.domain_book(dir, links.fleet_db_answers())?;
    let fleet_keys =
        opts.mode
            .fleet_keys(dir, links.fleet_db_answers(), fleet_stats.as_ref(), &book)?;
    let api_keys = Arc::new(match &fleet_keys {
        Some(f) => local_keys.clone().with_fleet_keys(f.keys.as_deref()),
        None => local_keys.clone(),
    });
    let domains = Arc::new(book.view(opts.unknown_host));
    let blocklist_file = match &opts.blocklist {
        Some(path) => Some(
            crate::api::blocklist::BlocklistFile::open(path.clone())
                .with_context(|| format!("--blocklist {}", path.display()))?,
        ),
        None => None,
    };
    let blocklist = Arc::new(
        crate::node::keywatch::build_blocklist(blocklist_file.as_ref(), fleet_keys.as_ref(), 1)
            .context("--blocklist")?,
    );
    let seg_cfg = shards::alloc::SegmentConfig {
        segment_len: opts.segment_len,
        ..Default::default()
    };
    seg_cfg
        .validate()
        .map_err(|e| anyhow::anyhow!("--segment-len: {e}"))?;
    let rate_cfg = crate::api::ratelimit::RateLimitConfig {
        per_second: opts.create_rate_per_s,
        burst: opts.create_burst,
    };
    let ratelimit = Arc::new(
        crate::api::ratelimit::RateLimiter::new(rate_cfg)
            .map_err(|e| anyhow::anyhow!("--create-rate/--create-burst: {e}"))?,
    );
    Ok(WriteSide {
        allocator,
        secret,
        fleet_stats,
        keygen,
        local_keys,
        fleet_keys,
        api_keys,
        domains,
        blocklist,
        blocklist_file,
        seg_cfg,
        ratelimit,
    })
}

impl WriteSide {
    /// What the key watcher starts from: the domains and the blocklist in force.
    fn books(&mut self, opts: &ServeOptions) -> crate::node::keywatch::Books {
        crate::node::keywatch::Books {
            domains: self.domains.clone(),
            unknown: opts.unknown_host,
            blocklist: self.blocklist.clone(),
            blocklist_file: self.blocklist_file.take(),
        }
    }

    /// Core `core`'s API side: the keys, its share of the rate limit, its ID segments.
    fn api_client(
        &self,
        core: usize,
        router: Router,
        doorbells: &Arc<Doorbells>,
        key_updates: crate::mesh::service::Inbox<Arc<crate::api::Reloaded>>,
        editor: crate::node::keywatch::BookEditor,
        public_url: String,
    ) -> anyhow::Result<crate::api_front::ApiFront> {
        Ok(crate::api_front::ApiFront::new(
            router,
            crate::api::Reloaded {
                keys: self.api_keys.clone(),
                domains: self.domains.clone(),
                blocklist: self.blocklist.clone(),
            },
            key_updates,
            editor,
            self.ratelimit.clone(),
            public_url,
            crate::api_front::creates::Creates::new(
                core,
                router,
                shards::alloc::SegmentBuffer::new(self.seg_cfg),
                self.allocator
                    .client(core, crate::mesh::service::waker(doorbells, core)),
                self.keygen.clone(),
                self.fleet_stats.clone(),
            ),
        ))
    }
}

/// Without --public-url, short URLs use the address actually bound (a wildcard address is
/// not reachable as such, so it becomes localhost): set --public-url in production.
fn public_url(opts: &ServeOptions, bound: SocketAddr) -> String {
    opts.public_url.clone().unwrap_or_else(|| {
        if bound.ip().is_unspecified() {
            format!("http://localhost:{}", bound.port())
        } else {
            format!("http://{bound}")
        }
    })
}

/// Click analytics once started: each core's part, the aggregator threads, their counters.
struct Clicks {
    per_core: Vec<Option<crate::analytics::CoreClicks>>,
    aggregators: Option<crate::analytics::Aggregators>,
    stats: Arc<crate::analytics::ClickStats>,
    /// Fleet mode with analytics on: the click flusher's counters.
    fleet_stats: Option<Arc<crate::analytics::fleet::FleetClickStats>>,
    /// `--geoip`, shared with the redirect rules' country conditions.
    geoip: Option<crate::analytics::GeoIp>,
}

fn start_clicks(
    opts: &ServeOptions,
    links: &Links,
    cores: usize,
    doorbells: &Arc<Doorbells>,
) -> anyhow::Result<Clicks> {
    // One `--geoip` database for the aggregators' countries and the redirect rules'.
    let geoip = crate::analytics::open_geoip(&opts.analytics)?;
    let click_stats = Arc::new(crate::analytics::ClickStats::new(cores));
    let fleet_clicks = opts.mode.fleet_clicks(
        &opts.analytics,
        &links.dir,
        links.fleet_db_answers(),
        cores,
        click_stats.clone(),
    )?;
    let fleet_stats = fleet_clicks.as_ref().map(|f| f.stats.clone());
    let analytics = crate::analytics::start(
        &opts.analytics,
        links.dir.path(),
        links.router,
        doorbells.clone(),
        click_stats.clone(),
        (fleet_clicks, geoip.clone()),
    )?;
    let (per_core, aggregators) = match analytics {
        Some((c, a)) => (c.into_iter().map(Some).collect(), Some(a)),
        None => ((0..cores).map(|_| None).collect::<Vec<_>>(), None),
    };
    Ok(Clicks {
        geoip,
        per_core,
        aggregators,
        stats: click_stats,
        fleet_stats,
    })
}

/// A core's executor thread; it returns once the core drained (or failed).
type CoreHandle = glommio::ExecutorJoinHandle<std::io::Result<()>>;

/// What every core's setup shares.
struct CoreParts<'a> {
    opts: &'a ServeOptions,
    router: Router,
    doorbells: &'a Arc<Doorbells>,
    shared: &'a Arc<Shared>,
    queues: Arc<MeshQueues>,
    io_memory: usize,
    now_s: u64,
    /// One listening socket per core.
    listener_fds: Vec<std::os::fd::RawFd>,
    public_url: String,
    /// Where redirect rules find a visitor's address and country.
    visitors: VisitorSource,
}

impl CoreParts<'_> {
    /// Core `core`'s roles: its owner (its shards' tables, its log, its memtable), its
    /// connections, its API side and flights, and its fleet and click parts if any.
    #[expect(
        clippy::too_many_arguments,
        reason = "one core's parts, each drawn from its own per-core list in `serve`"
    )]
    fn setup(
        &self,
        core: usize,
        listener_fd: std::os::fd::RawFd,
        dir: &DataDir,
        tables: &mut [Option<Table>],
        log: crate::node::recovery::CoreLog,
        mut api: crate::api_front::ApiFront,
        fleet: Option<(
            crate::owner::fleet_state::FleetLinks,
            crate::mesh::service::Inbox<crate::fleet_mode::messages::FleetToCore>,
        )>,
        clicks: Option<crate::analytics::CoreClicks>,
    ) -> CoreSetup {
        let (opts, router) = (self.opts, self.router);
        let mut idem = crate::api::idempotency::IdemTable::default();
        for (scope, rec) in log.idem {
            idem.insert(scope, rec, self.now_s);
        }
        let writes =
            crate::owner::writes::Writes::new(log.writer, log.fd, log.memtable, opts.faults);
        let store = Store::new(
            (0..router.shard_count())
                .map(|s| match router.core_of_shard(s) == core {
                    true => tables[s as usize].take(),
                    false => None,
                })
                .collect(),
        );
        let compaction = crate::owner::CompactionSetup {
            data_dir: dir.path().to_path_buf(),
            entries: opts.compact_entries,
            folding: log.folding,
        };
        let mut owner = Owner::new(
            core,
            router,
            store,
            writes,
            compaction,
            self.doorbells.clone(),
        );
        let mut conns = Conns::new(
            core,
            router,
            opts.lru_capacity,
            opts.timeouts,
            self.shared.clone(),
        );
        conns.set_domains(api.domains().clone());
        conns.set_blocklist(api.blocklist().clone());
        conns.set_visit_rules(opts.visit_rules);
        conns.set_visitor_source(self.visitors.clone());
        api.set_forward_query_default(opts.visit_rules.forward_query);
        api.set_cors(opts.cors_origins);
        api.set_visit_log(opts.analytics.visit_log.is_some());
        let mut fleet_inbox = None;
        if let Some((links, inbox)) = fleet {
            owner.set_fleet(links);
            fleet_inbox = Some(inbox);
        }
        let mut clicks_inbox = None;
        let mut click_slices = None;
        if let Some(cc) = clicks {
            click_slices = cc.slices;
            conns.set_clicks(cc.combiner, cc.client_ip);
            owner.set_clicks(cc.control[core].clone());
            api.set_clicks(cc.control, cc.fleet_queries);
            clicks_inbox = Some(cc.inbox);
        }
        CoreSetup {
            parking: opts.parking,
            listener_fd,
            conns,
            owner,
            api,
            flights: Flights::new(core, router, idem),
            shared: self.shared.clone(),
            clicks_inbox,
            click_slices,
            fleet_inbox,
        }
    }

    /// Core `core`'s executor, pinned to `cpu`, running its loop until the server drains.
    fn spawn(&self, core: usize, cpu: usize, setup: CoreSetup) -> anyhow::Result<CoreHandle> {
        let queues = self.queues.clone();
        let doorbells = self.doorbells.clone();
        let shared_c = self.shared.clone();
        LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("ricochet-core-{core}"))
            .io_memory(self.io_memory)
            .preempt_timer(Duration::from_millis(GLOMMIO_PREEMPT_MS))
            .spawn(move || async move {
                // A core that panics counts as failed at once, so start-up (and a running
                // server) stops instead of waiting out a timeout with a dead core.
                let _failed_on_panic = FailOnPanic(shared_c.clone());
                // glommio's first timer costs ~11 ms; pay it before taking traffic.
                glommio::timer::sleep(Duration::from_micros(10)).await;
                let mesh = Mesh::new(core, queues, doorbells);
                let parking = setup.parking;
                let result = match Core::new(setup, mesh) {
                    Ok(core) => core.run(parking).await,
                    Err(e) => Err(e),
                };
                if result.is_err() {
                    shared_c.failed_cores.fetch_add(1, Ordering::AcqRel);
                }
                result
            })
            .map_err(|e| anyhow::anyhow!("starting the executor for core {core} on CPU {cpu}: {e}"))
    }
}

/// Starts every core's executor on its CPU (`cpus`: one per core, in core order) with its
/// roles: its log, its tables, its API side, and its fleet and click parts if any.
fn spawn_cores(
    parts: &CoreParts,
    cpus: &[usize],
    write: &WriteSide,
    links: &mut Links,
    fleet_cores: Vec<(
        crate::owner::fleet_state::FleetLinks,
        crate::mesh::service::Inbox<crate::fleet_mode::messages::FleetToCore>,
    )>,
    per_core: Vec<Option<crate::analytics::CoreClicks>>,
    books: crate::node::keywatch::CoreEnds,
) -> anyhow::Result<Vec<CoreHandle>> {
    let mut handles = Vec::with_capacity(cpus.len());
    let mut logs = std::mem::take(&mut links.logs).into_iter();
    let mut fleet_cores = fleet_cores.into_iter();
    let mut core_clicks = per_core.into_iter();
    let mut key_updates = books.reloads.into_iter();
    let mut edits_done = books.edits_done.into_iter();
    for (core, &cpu) in cpus.iter().enumerate() {
        let api = write.api_client(
            core,
            parts.router,
            parts.doorbells,
            key_updates.next().expect("one receiver per core"),
            crate::node::keywatch::BookEditor {
                tx: books.edits.clone(),
                done: edits_done.next().expect("one receiver per core"),
                in_flight: 0,
                refused: Vec::new(),
            },
            parts.public_url.clone(),
        )?;
        let setup = parts.setup(
            core,
            parts.listener_fds[core],
            &links.dir,
            &mut links.tables,
            logs.next().expect("one log per core"),
            api,
            fleet_cores.next(),
            core_clicks.next().expect("one per core"),
        );
        handles.push(parts.spawn(core, cpu, setup)?);
    }
    Ok(handles)
}

/// Waits until every core reports ready; if one fails or [`STARTUP_TIMEOUT_MS`] pass, drains
/// the others and fails.
fn wait_until_ready(
    shared: &Shared,
    cores: usize,
    handles: Vec<CoreHandle>,
) -> anyhow::Result<Vec<CoreHandle>> {
    let deadline = Instant::now() + Duration::from_millis(STARTUP_TIMEOUT_MS);
    while shared.ready_cores.load(Ordering::Acquire) < cores {
        if Instant::now() > deadline || shared.failed_cores.load(Ordering::Acquire) > 0 {
            shared.draining.store(true, Ordering::SeqCst);
            for (i, h) in handles.into_iter().enumerate() {
                if let Ok(Err(e)) = h.join() {
                    eprintln!("core {i}: {e}");
                }
            }
            bail!("not every core became ready");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(handles)
}

/// Joins every core (they return once drained), then the aggregators, which make the last
/// clicks durable; stops the key watcher. Fails if a core failed.
fn stop(
    handles: Vec<CoreHandle>,
    aggregators: Option<crate::analytics::Aggregators>,
    keywatch_stop: &AtomicBool,
) -> anyhow::Result<()> {
    let failed = join_cores(handles);
    // Every core handed its last clicks off; the aggregators make them durable and stop.
    if let Some(a) = aggregators {
        a.join();
    }
    if failed {
        bail!("a core failed");
    }
    keywatch_stop.store(true, Ordering::Relaxed);
    Ok(())
}

/// Joins every core (they return once drained); whether one failed or panicked.
fn join_cores(handles: Vec<CoreHandle>) -> bool {
    let mut failed = false;
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("core {i} failed: {e}");
                failed = true;
            }
            Err(_) => {
                eprintln!("core {i} panicked");
                failed = true;
            }
        }
    }
    failed
}

/// Counts its core in `Shared::failed_cores` if dropped while the thread unwinds from a panic.
struct FailOnPanic(Arc<Shared>);

impl Drop for FailOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed_cores.fetch_add(1, Ordering::AcqRel);
            // Every other core drains and exits rather than serve beside a dead one.
            self.0.draining.store(true, Ordering::SeqCst);
            for core in 0..self.0.cores {
                self.0.doorbells.ring(core);
            }
        }
    }
}

/// Makes `cores` executors fit the locked-memory limit: raise the limit if we may, else
/// shrink each executor's I/O memory. Says what it did when it had to.
fn size_io_memory(cores: usize) -> usize {
    // Room for glommio's three rings per executor besides its buffers.
    let per_core = GLOMMIO_IO_MEMORY_BYTES + (256 << 10);
    let needed = (cores * per_core) as u64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 || lim.rlim_cur >= needed {
        return GLOMMIO_IO_MEMORY_BYTES;
    }
    let raised = libc::rlimit {
        rlim_cur: needed.max(lim.rlim_cur),
        rlim_max: needed.max(lim.rlim_max),
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
        eprintln!(
            "raised RLIMIT_MEMLOCK from {} to {} bytes for {cores} executors",
            lim.rlim_cur, raised.rlim_cur
        );
        return GLOMMIO_IO_MEMORY_BYTES;
    }
    let fit = (lim.rlim_cur as usize / cores).saturating_sub(256 << 10);
    let size = fit.max(MIN_GLOMMIO_IO_MEMORY_BYTES);
    eprintln!(
        "RLIMIT_MEMLOCK is {} bytes and cannot be raised: giving each of {cores} executors {size} bytes of I/O memory",
        lim.rlim_cur
    );
    size
}

/// SIGTERM/SIGINT: set the draining flag and ring every core's doorbell (both are
/// async-signal-safe: an atomic store and `write(2)`).
fn install_signal_handlers(
    draining: &Arc<AtomicBool>,
    doorbells: &Arc<Doorbells>,
) -> anyhow::Result<()> {
    let fds: Vec<i32> = doorbells.0.iter().map(|d| d.fd).collect();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let draining = draining.clone();
        let fds = fds.clone();
        // SAFETY: the handler only does an atomic store and write(2) on eventfds, which are
        // async-signal-safe; it allocates nothing and takes no locks.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                draining.store(true, Ordering::SeqCst);
                let one: u64 = 1;
                for &fd in &fds {
                    libc::write(fd, (&one as *const u64).cast(), 8);
                }
            })
        }
        .context("installing signal handlers")?;
    }
    Ok(())
}
