//! `/metrics`: every series in the OpenMetrics text format through `prometheus-client`'s
//! encoder, from the atomics the cores and services publish. Cold path (one scrape): it
//! formats, allocates and reads `/proc/self` (procfs, no disk) on the answering core.
//!
//! Labels come from fixed vocabularies only: `core` (0..cores), `class` (failure and accept
//! error classes), `outcome`, `le`, and `version` on the build info. Never a key, a URL or an
//! API key (the seeds forbid it; `tests/metrics.rs` checks).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{
    Buckets, CoreCounters, ACCEPT_ERROR_CLASSES, BATCH_RECORDS_BUCKETS, FSYNC_US_BUCKETS,
    REQUEST_US_BUCKETS,
};
use crate::node::shared::Shared;

/// The body of `GET /metrics` (content type `application/openmetrics-text`).
pub fn render(shared: &Arc<Shared>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ServerCollector(shared.clone())));
    let mut out = String::with_capacity(16 * 1024);
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("String writes");
    out
}

#[derive(Debug)]
struct ServerCollector(Arc<Shared>);

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("cores", &self.cores)
            .finish_non_exhaustive()
    }
}

type Get = fn(&CoreCounters) -> &AtomicU64;

/// Per-core series: (name, help, type, counter field).
const PER_CORE: &[(&str, &str, MetricType, Get)] = &[
    (
        "ricochet_requests",
        "HTTP requests answered or routed",
        MetricType::Counter,
        |c| &c.requests,
    ),
    (
        "ricochet_redirects",
        "Redirects answered",
        MetricType::Counter,
        |c| &c.redirects,
    ),
    (
        "ricochet_not_found",
        "404 answers to key lookups",
        MetricType::Counter,
        |c| &c.not_found,
    ),
    (
        "ricochet_blocked",
        "451 answers: links whose target the abuse blocklist names",
        MetricType::Counter,
        |c| &c.blocked,
    ),
    (
        "ricochet_disabled",
        "410 and 451 answers: links an admin disabled (abuse, legal, owner)",
        MetricType::Counter,
        |c| &c.disabled,
    ),
    (
        "ricochet_rule_redirects",
        "Redirects that went to a redirect rule's target instead of the link's own",
        MetricType::Counter,
        |c| &c.rule_redirects,
    ),
    (
        "ricochet_forwarded",
        "Lookups forwarded to the owning core",
        MetricType::Counter,
        |c| &c.forwarded,
    ),
    (
        "ricochet_lru_hits",
        "Foreign keys answered from this core's LRU",
        MetricType::Counter,
        |c| &c.lru_hits,
    ),
    (
        "ricochet_api_requests",
        "API requests",
        MetricType::Counter,
        |c| &c.api_requests,
    ),
    (
        "ricochet_mesh_deferred_sends",
        "Cross-core messages that waited because the peer's queue was full",
        MetricType::Counter,
        |c| &c.mesh_deferred,
    ),
    (
        "ricochet_held_batches",
        "Connection inputs held back while the mesh outbox was congested",
        MetricType::Counter,
        |c| &c.held_batches,
    ),
    (
        "ricochet_connections",
        "Open client connections",
        MetricType::Gauge,
        |c| &c.connections,
    ),
    (
        "ricochet_core_heap_allocations",
        "Heap allocations on the core thread",
        MetricType::Counter,
        |c| &c.heap_allocations,
    ),
    (
        "ricochet_core_click_allocations",
        "Heap allocations of click work done on the core thread between requests (not in ricochet_core_heap_allocations_total)",
        MetricType::Counter,
        |c| &c.click_allocations,
    ),
    (
        "ricochet_ids_remaining",
        "IDs on hand in the core's current and standby ranges",
        MetricType::Gauge,
        |c| &c.ids_remaining,
    ),
    (
        "ricochet_id_rate_millis_per_second",
        "Generated-key creates per second on the core (estimate, x1000)",
        MetricType::Gauge,
        |c| &c.id_rate_milli,
    ),
    (
        "ricochet_id_backoff",
        "1 while the core's ID range loads back off after a failure",
        MetricType::Gauge,
        |c| &c.id_backoff,
    ),
    (
        "ricochet_ids_used",
        "Generated IDs the core took from its ranges",
        MetricType::Counter,
        |c| &c.ids_used,
    ),
    (
        "ricochet_id_seconds_left",
        "IDs on hand over the create rate: seconds until the core runs out without a new range",
        MetricType::Gauge,
        |c| &c.id_seconds_left,
    ),
    (
        "ricochet_log_records",
        "Records appended to the core's log and made durable",
        MetricType::Counter,
        |c| &c.log_records,
    ),
    (
        "ricochet_log_batches",
        "Log batches written and fdatasynced (group commits)",
        MetricType::Counter,
        |c| &c.log_batches,
    ),
    (
        "ricochet_compactions",
        "Compactions finished",
        MetricType::Counter,
        |c| &c.compactions,
    ),
    (
        "ricochet_compaction_milliseconds",
        "Time spent in finished compactions (fold thread)",
        MetricType::Counter,
        |c| &c.compaction_ms,
    ),
    (
        "ricochet_compacted_entries",
        "Memtable entries folded into tables",
        MetricType::Counter,
        |c| &c.compacted_entries,
    ),
    (
        "ricochet_memtable_entries",
        "Links written through the API not yet folded into tables",
        MetricType::Gauge,
        |c| &c.memtable_entries,
    ),
    (
        "ricochet_table_links",
        "Links in the core's shard tables",
        MetricType::Gauge,
        |c| &c.table_links,
    ),
    (
        "ricochet_table_bytes",
        "Bytes of the core's shard tables",
        MetricType::Gauge,
        |c| &c.table_bytes,
    ),
];

impl Collector for ServerCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let shared = &self.0;
        let cores = &shared.counters;
        for &(name, help, kind, get) in PER_CORE {
            let mut m = enc.encode_descriptor(name, help, None, kind)?;
            for (i, c) in cores.iter().enumerate() {
                let v = get(c).load(Ordering::Relaxed);
                value(m.encode_family(&[("core", i)])?, kind, v)?;
            }
        }
        let total_links: u64 = cores
            .iter()
            .map(|c| {
                c.table_links.load(Ordering::Relaxed) + c.memtable_entries.load(Ordering::Relaxed)
            })
            .sum();
        let m = enc.encode_descriptor(
            "ricochet_links",
            "Links in the tables plus memtable entries (an upper bound: a memtable entry may replace or delete a table link)",
            None,
            MetricType::Gauge,
        )?;
        value(m, MetricType::Gauge, total_links)?;
        self.outcomes(&mut enc)?;
        self.histograms(&mut enc)?;
        let mut m = enc.encode_descriptor(
            "ricochet_accept_errors",
            "Failed accepts by class (descriptors: EMFILE/ENFILE; memory: ENOBUFS/ENOMEM)",
            None,
            MetricType::Counter,
        )?;
        for (i, c) in cores.iter().enumerate() {
            for (k, class) in ACCEPT_ERROR_CLASSES.iter().enumerate() {
                let v = c.accept_errors[k].load(Ordering::Relaxed);
                value(
                    m.encode_family(&[("core", i.to_string()), ("class", class.to_string())])?,
                    MetricType::Counter,
                    v,
                )?;
            }
        }
        let mut m = enc.encode_descriptor(
            "ricochet_build",
            "Build information",
            None,
            MetricType::Info,
        )?;
        m.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        if let Some(f) = &shared.fleet {
            encode_fleet(&mut enc, &f.snapshot())?;
        }
        if let Some(c) = &shared.clicks {
            encode_clicks(&mut enc, c)?;
        }
        if let Some(c) = &shared.fleet_clicks {
            encode_fleet_clicks(&mut enc, c)?;
        }
        encode_process(&mut enc)
    }
}

impl ServerCollector {
    /// `ricochet_responses_total{core, outcome}`: every request is one outcome.
    fn outcomes(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let mut m = enc.encode_descriptor(
            "ricochet_responses",
            "Requests by outcome: redirect, not_found (key lookups), blocked (451), disabled (410, 451), api, other (probes, metrics, errors)",
            None,
            MetricType::Counter,
        )?;
        for (i, c) in self.0.counters.iter().enumerate() {
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let (all, r, n, b, a) = (
                load(&c.requests),
                load(&c.redirects),
                load(&c.not_found),
                load(&c.blocked),
                load(&c.api_requests),
            );
            let d = load(&c.disabled);
            let other = all.saturating_sub(r + n + b + d + a);
            for (outcome, v) in [
                ("redirect", r),
                ("not_found", n),
                ("blocked", b),
                ("disabled", d),
                ("api", a),
                ("other", other),
            ] {
                value(
                    m.encode_family(&[("core", i.to_string()), ("outcome", outcome.to_string())])?,
                    MetricType::Counter,
                    v,
                )?;
            }
        }
        Ok(())
    }

    fn histograms(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let cores = &self.0.counters;
        let mut m = enc.encode_descriptor(
            "ricochet_request_duration_seconds",
            "Receive completion to send queued, per request (one reading per batch sent)",
            None,
            MetricType::Histogram,
        )?;
        for (i, c) in cores.iter().enumerate() {
            histogram(
                m.encode_family(&[("core", i)])?,
                &c.request_us.load(),
                &REQUEST_US_BUCKETS,
                1e6,
            )?;
        }
        let mut m = enc.encode_descriptor(
            "ricochet_log_fdatasync_seconds",
            "Log batch write+fdatasync time, submit to completion",
            None,
            MetricType::Histogram,
        )?;
        for (i, c) in cores.iter().enumerate() {
            histogram(
                m.encode_family(&[("core", i)])?,
                &c.fsync_us.load(),
                &FSYNC_US_BUCKETS,
                1e6,
            )?;
        }
        let mut m = enc.encode_descriptor(
            "ricochet_log_batch_records",
            "Records per log batch (group commit size)",
            None,
            MetricType::Histogram,
        )?;
        for (i, c) in cores.iter().enumerate() {
            histogram(
                m.encode_family(&[("core", i)])?,
                &c.batch_records.load(),
                &BATCH_RECORDS_BUCKETS,
                1.0,
            )?;
        }
        Ok(())
    }
}

type ClickGet = fn(&crate::analytics::AggCounters) -> &AtomicU64;

/// Click analytics series, label `core` only.
const CLICK_SERIES: &[(&str, &str, MetricType, ClickGet)] = &[
    (
        "ricochet_clicks",
        "Clicks counted on the core (GETs answered with a redirect)",
        MetricType::Counter,
        |c| &c.clicks,
    ),
    (
        "ricochet_clicks_dropped",
        "Clicks not counted: no clean batch was free on the core",
        MetricType::Counter,
        |c| &c.dropped,
    ),
    (
        "ricochet_click_batches",
        "Click batches the core's aggregator classified",
        MetricType::Counter,
        |c| &c.batches,
    ),
    (
        "ricochet_click_records",
        "Link-day deltas merged by the owner's aggregator",
        MetricType::Counter,
        |c| &c.records,
    ),
    (
        "ricochet_clicks_merged",
        "Clicks merged into the owner's per-link-day stats",
        MetricType::Counter,
        |c| &c.merged_clicks,
    ),
    (
        "ricochet_clicks_purged_late",
        "Clicks of deleted links that arrived after the delete and were dropped",
        MetricType::Counter,
        |c| &c.filtered,
    ),
    (
        "ricochet_click_log_syncs",
        "Click log group commits (write + fdatasync)",
        MetricType::Counter,
        |c| &c.syncs,
    ),
    (
        "ricochet_click_log_sync_failures",
        "Click log writes or fdatasyncs that failed (redirects are unaffected)",
        MetricType::Counter,
        |c| &c.sync_failures,
    ),
    (
        "ricochet_click_aggregator_lag_milliseconds",
        "Hand-off to classification of the last click batch",
        MetricType::Gauge,
        |c| &c.lag_ms,
    ),
    (
        "ricochet_visit_log_records",
        "Records in the core's visit log (--visit-log-days; 0 when off), at its last sync",
        MetricType::Gauge,
        |c| &c.visit_records,
    ),
    (
        "ricochet_visits_not_logged",
        "Visits counted but not logged: past a link's daily or the core's visit log bound",
        MetricType::Counter,
        |c| &c.visits_not_logged,
    ),
];

fn encode_clicks(enc: &mut DescriptorEncoder, c: &crate::analytics::ClickStats) -> fmt::Result {
    for &(name, help, kind, get) in CLICK_SERIES {
        let mut m = enc.encode_descriptor(name, help, None, kind)?;
        for (i, core) in c.per_core.iter().enumerate() {
            value(
                m.encode_family(&[("core", i)])?,
                kind,
                get(core).load(Ordering::Relaxed),
            )?;
        }
    }
    Ok(())
}

fn value(mut m: MetricEncoder<'_>, kind: MetricType, v: u64) -> fmt::Result {
    match kind {
        MetricType::Counter => m.encode_counter::<NoLabelSet, u64, f64>(&v, None),
        _ => m.encode_gauge(&v),
    }
}

/// A fixed-bucket histogram; its values divided by `per_unit` give the exported unit (1e6:
/// µs to seconds; a division keeps bounds such as 5 µs exact as `0.000005`).
fn histogram<const N: usize>(
    mut m: MetricEncoder<'_>,
    b: &Buckets<N>,
    bounds: &[u64],
    per_unit: f64,
) -> fmt::Result {
    let buckets: Vec<(f64, u64)> = (0..N)
        .map(|i| {
            (
                bounds.get(i).map_or(f64::MAX, |&u| u as f64 / per_unit),
                b.counts[i],
            )
        })
        .collect();
    let count = b.counts.iter().sum();
    m.encode_histogram::<NoLabelSet>(b.sum as f64 / per_unit, count, &buckets, None)
}

/// A plain value with no labels.
struct Plain(MetricType, u64);

impl EncodeMetric for Plain {
    fn encode(&self, m: MetricEncoder<'_>) -> fmt::Result {
        value(m, self.0, self.1)
    }
    fn metric_type(&self) -> MetricType {
        self.0
    }
}

fn plain(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    v: u64,
) -> fmt::Result {
    let p = Plain(kind, v);
    p.encode(enc.encode_descriptor(name, help, None, p.metric_type())?)
}

type FleetClickGet = fn(&crate::analytics::fleet::FleetClickStats) -> &AtomicU64;

/// Fleet mode's click flusher series (`analytics::fleet`), no labels.
const FLEET_CLICK_SERIES: &[(&str, &str, MetricType, FleetClickGet)] = &[
    (
        "ricochet_fleet_click_flushes",
        "Click flushes the fleet database applied (or had applied: a retried one)",
        MetricType::Counter,
        |c| &c.flushes,
    ),
    (
        "ricochet_fleet_click_flush_failures",
        "Click flushes that failed (each is retried as it was)",
        MetricType::Counter,
        |c| &c.flush_failures,
    ),
    (
        "ricochet_fleet_click_rows_flushed",
        "Link-day click states written to the fleet database",
        MetricType::Counter,
        |c| &c.rows_flushed,
    ),
    (
        "ricochet_fleet_click_rows_dropped",
        "Link-day click states not kept for the fleet database (too many waiting during an outage); each is sent again at its next change",
        MetricType::Counter,
        |c| &c.rows_dropped,
    ),
    (
        "ricochet_fleet_click_complete_until_unix_ms",
        "Every click this node answered before this instant is in the fleet database",
        MetricType::Gauge,
        |c| &c.complete_until_ms,
    ),
];

/// Fleet mode's click flusher (`analytics::fleet`).
fn encode_fleet_clicks(
    enc: &mut DescriptorEncoder,
    c: &crate::analytics::fleet::FleetClickStats,
) -> fmt::Result {
    for &(name, help, kind, get) in FLEET_CLICK_SERIES {
        plain(enc, name, help, kind, get(c).load(Ordering::Relaxed))?;
    }
    Ok(())
}

type FleetGet = fn(&fleet::FleetStatsSnapshot) -> u64;

/// Fleet mode's allocation, link and feed series with no labels (`--fleet-pg`).
const FLEET_SERIES: &[(&str, &str, MetricType, FleetGet)] = &[
    (
        "ricochet_fleet_allocations",
        "ID ranges confirmed by the PostgreSQL authority",
        MetricType::Counter,
        |f| f.allocations,
    ),
    (
        "ricochet_fleet_confirmed_ids",
        "IDs in ranges confirmed for this node (waste = confirmed - used - on hand)",
        MetricType::Counter,
        |f| f.confirmed_ids,
    ),
    (
        "ricochet_fleet_unknown_commit_outcomes",
        "Allocations whose COMMIT reply was lost and whose outcome could not be proven",
        MetricType::Counter,
        |f| f.unknown_outcomes,
    ),
    (
        "ricochet_fleet_fenced",
        "1 once the authority lost allocations this node confirmed (generated-key creates refused)",
        MetricType::Gauge,
        |f| u64::from(f.fenced),
    ),
    (
        "ricochet_fleet_ids_unproven",
        "1 while the database is on another history and this node's last confirmed allocation is not yet proven there (generated-key creates wait)",
        MetricType::Gauge,
        |f| u64::from(f.ids_unproven),
    ),
    (
        "ricochet_fleet_namespace_next_id",
        "The namespace's next_id as last seen by this node",
        MetricType::Gauge,
        |f| f.next_id_seen,
    ),
    (
        "ricochet_fleet_namespace_remaining_ids",
        "IDs the namespace has not handed out yet, as last seen",
        MetricType::Gauge,
        |f| f.namespace_hi.saturating_sub(f.next_id_seen),
    ),
    (
        "ricochet_fleet_link_writes",
        "Link creates, changes and deletes the fleet database committed or judged (409/404)",
        MetricType::Counter,
        |f| f.link_writes,
    ),
    (
        "ricochet_fleet_link_write_failures",
        "Link writes the fleet database did not answer in time (answered 503)",
        MetricType::Counter,
        |f| f.link_write_failures,
    ),
    (
        "ricochet_fleet_batched_creates",
        "Creates committed in a multi-row statement shared with others of their writer round",
        MetricType::Counter,
        |f| f.batched_creates,
    ),
    (
        "ricochet_fleet_read_queries",
        "Read-through queries sent to the fleet database (one per batch of local misses)",
        MetricType::Counter,
        |f| f.read_queries,
    ),
    (
        "ricochet_fleet_read_keys",
        "Distinct keys asked for in read-through queries",
        MetricType::Counter,
        |f| f.read_keys,
    ),
    (
        "ricochet_fleet_shed_lookups",
        "Local misses answered 404 without a query: a generated key whose ID is above every namespace's freshly read ceiling",
        MetricType::Counter,
        |f| f.shed_lookups,
    ),
    (
        "ricochet_fleet_ceiling_raises",
        "Namespace ceiling raises this node's allocations started",
        MetricType::Counter,
        |f| f.ceiling_raises,
    ),
    (
        "ricochet_fleet_ceiling_waits",
        "Allocations that waited for a ceiling raise to mature",
        MetricType::Counter,
        |f| f.ceiling_waits,
    ),
    (
        "ricochet_fleet_feed_rows",
        "Change feed rows made durable on their owner cores",
        MetricType::Counter,
        |f| f.feed_rows,
    ),
    (
        "ricochet_fleet_feed_failures",
        "Change feed polls or applies that failed (retried)",
        MetricType::Counter,
        |f| f.feed_failures,
    ),
    (
        "ricochet_fleet_feed_rows_unusable",
        "Change feed rows that are not links this node can hold (not applied, each logged)",
        MetricType::Counter,
        |f| f.feed_rows_unusable,
    ),
    (
        "ricochet_fleet_feed_held_back_by_pid",
        "The database backend whose open transaction holds this node's feed back (rows committed after it wait), 0 if none",
        MetricType::Gauge,
        |f| f.feed_held_by_pid,
    ),
    (
        "ricochet_fleet_feed_held_back_seconds",
        "How long that transaction had been open when last looked up",
        MetricType::Gauge,
        |f| f.feed_held_for_s,
    ),
    (
        "ricochet_fleet_feed_caught_up_unix_ms",
        "When a change feed poll last found this node caught up (Unix ms; lag = now - this)",
        MetricType::Gauge,
        |f| f.feed_caught_up_ms,
    ),
    (
        "ricochet_fleet_regenerations",
        "Live regenerations of this node's links from a database snapshot (its feed cursor could not be continued)",
        MetricType::Counter,
        |f| f.regenerations,
    ),
    (
        "ricochet_fleet_regenerating",
        "1 while this node regenerates its links from a database snapshot (not ready meanwhile)",
        MetricType::Gauge,
        |f| u64::from(f.regenerating),
    ),
];

/// Fleet mode's allocation counters (`--fleet-pg`).
fn encode_fleet(enc: &mut DescriptorEncoder, f: &fleet::FleetStatsSnapshot) -> fmt::Result {
    use MetricType::{Counter, Gauge};
    for &(name, help, kind, get) in FLEET_SERIES {
        plain(enc, name, help, kind, get(f))?;
    }
    let mut m = enc.encode_descriptor(
        "ricochet_fleet_database_refused",
        "1 for the reason the fleet database that answers is not used (schema, secret, namespace, unchecked since a start without it): the node serves what it holds and refuses creates, edits and lookups of others",
        None,
        Gauge,
    )?;
    for r in fleet::DbRefusal::ALL {
        let on = u64::from(f.refused == Some(r));
        value(m.encode_family(&[("reason", r.slug())])?, Gauge, on)?;
    }
    let mut m = enc.encode_descriptor(
        "ricochet_fleet_allocation_failures",
        "Failed allocation attempts by class",
        None,
        Counter,
    )?;
    for (class, n) in &f.failures {
        value(m.encode_family(&[("class", *class)])?, Counter, *n)?;
    }
    let m = enc.encode_descriptor(
        "ricochet_fleet_allocation_seconds",
        "Allocation transaction latency, measured by the node",
        None,
        MetricType::Histogram,
    )?;
    let mut per_bucket = Vec::with_capacity(f.latency_buckets.len());
    let mut prev = 0;
    for &(le, cumulative) in &f.latency_buckets {
        per_bucket.push((
            if le.is_infinite() { f64::MAX } else { le },
            cumulative - prev,
        ));
        prev = cumulative;
    }
    let mut m = m;
    m.encode_histogram::<NoLabelSet>(f.latency_sum_s, f.latency_count, &per_bucket, None)
}

/// The standard process series, from `/proc/self`.
fn encode_process(enc: &mut DescriptorEncoder) -> fmt::Result {
    let p = ProcessStats::read();
    let m = enc.encode_descriptor(
        "process_cpu_seconds",
        "User and system CPU time",
        None,
        MetricType::Counter,
    )?;
    {
        let mut m = m;
        m.encode_counter::<NoLabelSet, f64, f64>(&p.cpu_seconds, None)?;
    }
    plain(
        enc,
        "process_resident_memory_bytes",
        "Resident memory",
        MetricType::Gauge,
        p.rss_bytes,
    )?;
    plain(
        enc,
        "process_virtual_memory_bytes",
        "Virtual memory",
        MetricType::Gauge,
        p.vm_bytes,
    )?;
    plain(
        enc,
        "process_open_fds",
        "Open file descriptors",
        MetricType::Gauge,
        p.open_fds,
    )?;
    plain(
        enc,
        "process_max_fds",
        "Descriptor limit (RLIMIT_NOFILE soft)",
        MetricType::Gauge,
        p.max_fds,
    )?;
    plain(
        enc,
        "process_start_time_seconds",
        "Start time, Unix seconds",
        MetricType::Gauge,
        p.start_time_s,
    )?;
    plain(
        enc,
        "process_threads",
        "Threads",
        MetricType::Gauge,
        p.threads,
    )
}

#[derive(Default)]
struct ProcessStats {
    cpu_seconds: f64,
    rss_bytes: u64,
    vm_bytes: u64,
    open_fds: u64,
    max_fds: u64,
    start_time_s: u64,
    threads: u64,
}

impl ProcessStats {
    fn read() -> ProcessStats {
        let mut p = ProcessStats::default();
        // SAFETY: sysconf and getrlimit take no pointers we do not own; `lim` is a valid out
        // parameter on the stack.
        let (ticks, page, max_fds) = unsafe {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur
            } else {
                0
            };
            (
                libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
                libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
                max,
            )
        };
        p.max_fds = max_fds;
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the `(comm)`, which may hold spaces: state is field 3.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                // rest[0] is field 3 (state): field N is rest[N - 3].
                p.cpu_seconds = (num(14 - 3) + num(15 - 3)) as f64 / ticks;
                p.threads = num(20 - 3);
                p.vm_bytes = num(23 - 3);
                p.rss_bytes = num(24 - 3) * page;
                let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
                    s.lines().find_map(|l| {
                        l.strip_prefix("btime ")
                            .and_then(|v| v.trim().parse::<u64>().ok())
                    })
                });
                p.start_time_s = boot.unwrap_or(0) + (num(22 - 3) as f64 / ticks) as u64;
            }
        }
        p.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        p
    }
}
