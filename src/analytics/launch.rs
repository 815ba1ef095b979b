//! Starting click analytics: one aggregator per core, run by the core itself between requests
//! with a service thread for its slow chores (`on_core`), or with `--service-cpus` by a
//! thread of its own on those CPUs (and in fleet mode the flusher and the stats thread),
//! wired to the cores by bounded queues; what each core keeps of it ([`CoreClicks`]) and the
//! handles to stop the threads ([`Aggregators`]).

use super::fleet::{FleetClicks, FleetClicksSetup};
use super::{aggregator, classify, combiner, export, on_core, salts};
use super::{
    AnalyticsConfig, ClickStats, ClientIp, ControlTx, Mode, ToCore, CONTROL_QUEUE_CAPACITY,
    PEER_QUEUE_CAPACITY, REPLY_QUEUE_CAPACITY,
};
use crate::mesh::router::Router;
use crate::mesh::service::{Inbox, Outlets};
use crate::mesh::Doorbells;
use crossbeam::channel::{bounded, Receiver, Sender};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// What one core holds of analytics.
pub struct CoreClicks {
    pub combiner: combiner::Combiner,
    /// Every core's aggregator, by core.
    pub control: Vec<ControlTx>,
    pub inbox: Inbox<ToCore>,
    pub client_ip: ClientIp,
    /// Fleet mode: stats queries go to the fleet stats thread instead of the aggregators.
    pub fleet_queries: Option<ControlTx>,
    /// This core's aggregator, when the core runs it (no `--service-cpus`).
    pub slices: Option<on_core::ClickSlices>,
}

/// The running aggregator threads.
pub struct Aggregators {
    handles: Vec<std::thread::JoinHandle<()>>,
    fleet: Option<FleetClicks>,
}

impl Aggregators {
    /// Waits for every aggregator to finish (after every core closed its combiner).
    pub fn join(self) {
        for h in self.handles {
            if h.join().is_err() {
                eprintln!("a click aggregator panicked; clicks since its last sync are lost");
            }
        }
        if let Some(f) = self.fleet {
            f.join();
        }
    }
}

/// Recovers the click store and starts one aggregator per core. `None` with `Mode::Off`.
pub fn start(
    cfg: &AnalyticsConfig,
    data_dir: &Path,
    router: Router,
    bells: Arc<Doorbells>,
    stats: Arc<ClickStats>,
    (fleet, geoip): (Option<FleetClicksSetup>, Option<GeoIp>),
) -> anyhow::Result<Option<(Vec<CoreClicks>, Aggregators)>> {
    use anyhow::Context;
    forget_visit_log(cfg, data_dir)?;
    if cfg.mode == Mode::Off {
        return Ok(None);
    }
    let cores = router.cores();
    let (dir, rec) = recover(data_dir, &router)?;
    let mut visit_logs = open_visit_logs(cfg, data_dir, &router)?.into_iter();
    let (classifier, salts) = open_common(cfg, data_dir)?;
    let (outlets, inboxes) = Outlets::new(cores, REPLY_QUEUE_CAPACITY, bells.clone());
    let replies = Arc::new(outlets);
    let fleet = fleet
        .map(|f| FleetClicks::start(f, replies.clone(), salts.clone()))
        .transpose()?;
    let on_cores = cfg.on_cores();
    let (control_tx, mut control_rx) = queues(cores, CONTROL_QUEUE_CAPACITY);
    let control_tx = control_senders(control_tx, on_cores, &bells);
    let (peers_tx, mut peers_rx) = queues(cores, PEER_QUEUE_CAPACITY);
    let mut per_core = Vec::with_capacity(cores);
    let mut handles = Vec::with_capacity(cores);
    let mut inboxes = inboxes.into_iter();
    for (core, store) in rec.stores.into_iter().enumerate() {
        let (clean_tx, clean_rx) = clean_batches();
        let (to_agg, from_core) = bounded(2 * combiner::BATCHES_PER_CORE);
        let epoch = Arc::new(AtomicU64::new(0));
        let log = dir
            .open_log(core, rec.next_log[core])
            .with_context(|| format!("opening core {core}'s click log"))?;
        let setup = aggregator::AggregatorSetup {
            me: core,
            router,
            full: cfg.mode == Mode::Full,
            retention_days: cfg.retention_days,
            from_core,
            clean: clean_tx,
            peers_rx: peers_rx.next().expect("one per core"),
            peers_tx: peers_tx.clone(),
            control: control_rx.next().expect("one per core"),
            replies: replies.clone(),
            store,
            log,
            salts: salts.clone(),
            classifier: classifier.clone(),
            epoch: epoch.clone(),
            stats: stats.clone(),
            geoip: geoip.clone(),
            fail_sync: cfg.fail_sync,
            fleet: fleet.as_ref().map(|f| f.parts.clone()),
            bells: bells.clone(),
            cpus: cfg.service_cpus.clone(),
            on_cores,
            snapshot_bytes: cfg.snapshot_bytes,
            visits: visit_logs.next(),
        };
        let agg = aggregator::Aggregator::new(setup, exporter(cfg, core)?);
        let (slices, handle) = spawn(agg, core, on_cores, &bells)?;
        handles.push(handle);
        per_core.push(CoreClicks {
            combiner: combiner_for(cfg, clean_rx, to_agg, epoch),
            control: control_tx.clone(),
            inbox: inboxes.next().expect("one per core"),
            client_ip: cfg.client_ip,
            fleet_queries: fleet
                .as_ref()
                .map(|f| ControlTx::to_thread(f.queries.clone())),
            slices,
        });
    }
    Ok(Some((per_core, Aggregators { handles, fleet })))
}

/// A core's combiner: `full` context kept or not, orphan visits carried with the visit log.
fn combiner_for(
    cfg: &AnalyticsConfig,
    clean: Receiver<Box<combiner::Batch>>,
    to_agg: Sender<combiner::CoreMsg>,
    epoch: Arc<AtomicU64>,
) -> combiner::Combiner {
    let mut c = combiner::Combiner::new(cfg.mode == Mode::Full, clean, to_agg, epoch);
    c.log_orphans(cfg.visit_log.is_some());
    c
}

/// One bounded queue per core: the senders, and the receivers in core order.
fn queues<T>(cores: usize, capacity: usize) -> (Vec<Sender<T>>, std::vec::IntoIter<Receiver<T>>) {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..cores).map(|_| bounded(capacity)).unzip();
    (tx, rx.into_iter())
}

/// The control queues' senders, ringing the owner core when it runs its aggregator.
fn control_senders(
    txs: Vec<Sender<super::Control>>,
    on_cores: bool,
    bells: &Arc<Doorbells>,
) -> Vec<ControlTx> {
    txs.into_iter()
        .enumerate()
        .map(|(core, tx)| match on_cores {
            true => ControlTx::to_core(tx, bells.clone(), core),
            false => ControlTx::to_thread(tx),
        })
        .collect()
}

/// Starts core `core`'s aggregator: its service thread, with the aggregator handed to the
/// core (`on_cores`), or its own thread.
fn spawn(
    agg: aggregator::Aggregator,
    core: usize,
    on_cores: bool,
    bells: &Arc<Doorbells>,
) -> anyhow::Result<(Option<on_core::ClickSlices>, std::thread::JoinHandle<()>)> {
    use anyhow::Context;
    if on_cores {
        let (s, h) = on_core::ClickSlices::start(agg, core, bells.clone())
            .context("starting a click aggregator's service thread")?;
        return Ok((Some(s), h));
    }
    let h = std::thread::Builder::new()
        .name(format!("ricochet-clicks-{core}"))
        .spawn(move || agg.run())
        .context("starting a click aggregator")?;
    Ok((None, h))
}

/// The click directory recovered for the router's cores (folded if their count changed).
fn recover(
    data_dir: &Path,
    router: &Router,
) -> anyhow::Result<(
    shards::clicks::files::ClickDir,
    shards::clicks::files::Recovered,
)> {
    use anyhow::Context;
    let cores = router.cores();
    let (dir, rec) =
        shards::clicks::files::ClickDir::open(data_dir, cores, |k| router.owner(k).core)
            .context("recovering click analytics")?;
    if rec.torn_bytes > 0 {
        eprintln!(
            "clicks: cut {} bytes of torn click-log tail (clicks of the last moments before a crash)",
            rec.torn_bytes
        );
    }
    Ok((dir, rec))
}

/// With the visit log off, a log kept when it was on is deleted: visitors' user agents and
/// networks are kept only while the operator asks for them.
fn forget_visit_log(cfg: &AnalyticsConfig, data_dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    if cfg.visit_log.is_none()
        && shards::clicks::visits::remove_all(data_dir).context("removing the visit log")?
    {
        eprintln!("clicks: the visit log is off (no --visit-log-days): deleted the one kept when it was on");
    }
    Ok(())
}

/// Every core's visit log when `--visit-log-days` is on (none otherwise): recovered, sorted
/// to the router's owners, days past the window dropped.
fn open_visit_logs(
    cfg: &AnalyticsConfig,
    data_dir: &Path,
    router: &Router,
) -> anyhow::Result<Vec<super::visit_log::VisitLog>> {
    use anyhow::Context;
    let Some(v) = cfg.visit_log else {
        return Ok(Vec::new());
    };
    anyhow::ensure!(
        cfg.mode == Mode::Full,
        "--visit-log-days needs --analytics full (a visit's user agent, referrer and address)"
    );
    let today = shards::clicks::day_of(shards::timefmt::now_s());
    let first_day = today.saturating_sub(v.days - 1);
    let owner = |k: &[u8]| router.owner(k).core;
    let books = shards::clicks::visits::open_all(
        data_dir,
        router.cores(),
        owner,
        first_day,
        v.max_records_per_core,
    )
    .context("recovering the visit log")?;
    Ok(books
        .into_iter()
        .map(|b| super::visit_log::VisitLog::new(b, v))
        .collect())
}

/// A `--geoip` database, shared by every thread that reads it.
pub type GeoIp = Arc<maxminddb::Reader<Vec<u8>>>;

/// What every aggregator shares besides the GeoIP database ([`open_geoip`]): the user agent
/// classifier and the daily visitor salts.
type Common = (Arc<classify::Classifier>, Arc<Mutex<salts::SaltBook>>);

/// Opens what every aggregator shares ([`Common`]); a bad `--bot-patterns` file is refused
/// by name.
fn open_common(cfg: &AnalyticsConfig, data_dir: &Path) -> anyhow::Result<Common> {
    let classifier = Arc::new(
        classify::Classifier::new(cfg.bot_patterns.as_deref()).map_err(|e| anyhow::anyhow!(e))?,
    );
    let salts = Arc::new(Mutex::new(
        salts::SaltBook::open(&data_dir.join("clicks")).map_err(|e| anyhow::anyhow!(e))?,
    ));
    Ok((classifier, salts))
}

/// The `--geoip` database, if named: the aggregators' countries and the redirect rules'
/// country conditions read the one copy. A bad file refuses the start, naming it.
pub fn open_geoip(cfg: &AnalyticsConfig) -> anyhow::Result<Option<GeoIp>> {
    match &cfg.geoip {
        Some(p) => Ok(Some(Arc::new(
            maxminddb::Reader::open_readfile(p).map_err(|e| {
                anyhow::anyhow!("--geoip {}: not a MaxMind database: {e}", p.display())
            })?,
        ))),
        None => Ok(None),
    }
}

/// A core's clean click batches: all of them allocated now, none on the redirect path.
fn clean_batches() -> (Sender<Box<combiner::Batch>>, Receiver<Box<combiner::Batch>>) {
    let (clean_tx, clean_rx) = bounded(combiner::BATCHES_PER_CORE);
    for _ in 0..combiner::BATCHES_PER_CORE {
        clean_tx
            .send(combiner::Batch::new())
            .expect("room for every batch");
    }
    (clean_tx, clean_rx)
}

/// Core `core`'s `--click-export` writer, if asked for.
fn exporter(cfg: &AnalyticsConfig, core: usize) -> anyhow::Result<Option<export::Exporter>> {
    use anyhow::Context;
    match &cfg.export_dir {
        Some(d) => {
            Ok(Some(export::Exporter::new(d, core).with_context(|| {
                format!("--click-export {}", d.display())
            })?))
        }
        None => Ok(None),
    }
}
