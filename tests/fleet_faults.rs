//! The fault harness of issue #24, in the style of Jepsen: three fleet nodes on a real
//! primary with a streaming standby, clients on every node creating (aliases and generated
//! keys), changing, deleting and reading links, every operation recorded with its invocation
//! and completion times and its answer, while a schedule injects faults: the primary stopped
//! and started, the primary frozen (SIGSTOP), a writer backend frozen, a row lock held, a long
//! open transaction, the standby stopped so it lags, a node killed (`kill -9`) and restarted
//! at once on its address, and at the end of each cycle the primary killed and the lagging
//! standby promoted. Run twice: with asynchronous replication (what the standby lacked is
//! lost, and must be in the nodes' `fleet-lost` files) and with a synchronous standby (nothing
//! acknowledged may be lost). After healing, a checker reads the history and the database and
//! prints its figures:
//!
//! - convergence: every node serves exactly the database's state of every key ever written;
//! - acknowledged writes: each key's final state is that of a write that no acknowledged
//!   write began after the end of (a lost one must be listed in a node's `fleet-lost` file);
//! - generated keys: none issued twice, each ID inside an audited range of its node;
//! - redirects of keys every node held never failed while their node was up.
//!
//! `cargo test` runs one short cycle (about a minute). `RICOCHET_FAULT_MINUTES=30` runs
//! cycles for that long (`perf/fault_harness.sh`), each ending in a failover after which a
//! new standby is made from the promoted one.
#![expect(
    clippy::too_many_lines,
    reason = "an end-to-end test is one scenario against real processes, read top to bottom: its steps share the servers, clients and recorded history its checks read"
)]

mod common;

use common::api::{self, Client};
use common::pg::{Cluster, TestDb};
use common::Server;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: usize = 3;
/// Client threads per node.
const CLIENTS: usize = 2;
/// Aliases every client writes (shared: nodes contend for them).
const ALIASES: usize = 12;
/// Aliases made before the faults and only read after: every node holds them.
const STABLE: usize = 4;

/// What a client did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Create,
    Generate,
    Patch,
    Delete,
}

/// One recorded write: its key (for a generated create, the key it was given), the target it
/// set (`None`: a delete), and its answer (0: no answer, the connection failed).
#[derive(Clone, Debug)]
struct Op {
    node: usize,
    kind: Kind,
    key: String,
    target: Option<String>,
    invoked: Instant,
    completed: Instant,
    status: u16,
}

impl Op {
    /// Answered 2xx: the write took effect.
    fn acked(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// No answer, or 5xx: it may or may not have taken effect.
    fn indeterminate(&self) -> bool {
        self.status == 0 || self.status >= 500
    }
}

/// A small deterministic generator (xorshift), seeded per client.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The nodes: their data dirs and addresses, whether each is up, and the servers.
struct Fleet {
    dirs: Vec<(tempfile::TempDir, PathBuf)>,
    addrs: Vec<SocketAddr>,
    up: Vec<Arc<AtomicBool>>,
    servers: Vec<Option<Server>>,
    url: String,
}

impl Fleet {
    fn args(&self, i: usize) -> Vec<String> {
        common::pg::fleet_node_args(&self.url, &format!("n{i}"), "1")
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    fn start(url: &str) -> Fleet {
        let dirs: Vec<_> = (0..NODES).map(|_| api::data_dir()).collect();
        let mut f = Fleet {
            dirs,
            addrs: Vec::new(),
            up: (0..NODES)
                .map(|_| Arc::new(AtomicBool::new(true)))
                .collect(),
            servers: Vec::new(),
            url: url.to_owned(),
        };
        for i in 0..NODES {
            let args = f.args(i);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let s = api::start(&f.dirs[i].1, &args);
            f.addrs.push(s.addr);
            f.servers.push(Some(s));
        }
        f
    }

    /// `kill -9`, then at once a new server on the same address and data dir.
    fn kill_and_restart(&mut self, i: usize) {
        self.up[i].store(false, Ordering::SeqCst);
        if let Some(s) = self.servers[i].take() {
            s.kill9();
        }
        let args = self.args(i);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = std::process::Command::new(common::server_bin());
        cmd.env("RICOCHET_API_KEY", api::API_KEY);
        let listen = self.addrs[i].to_string();
        let s = Server::try_start_at(cmd, &listen, &self.dirs[i].1, &args)
            .unwrap_or_else(|e| panic!("node {i} did not restart at once: {e}"));
        self.servers[i] = Some(s);
        self.up[i].store(true, Ordering::SeqCst);
    }
}

/// Everything the clients recorded.
#[derive(Default)]
struct History {
    writes: Vec<Op>,
    /// Reads of stable keys that failed while their node was up: (node, key, answer).
    stable_failures: Vec<(usize, String, String)>,
    reads: u64,
}

/// One client on node `node`: random writes to the shared aliases, generated creates, and a
/// read of a stable key between writes.
fn client(
    node: usize,
    n: usize,
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    serial: Arc<AtomicU64>,
) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((node * 16 + n) as u64 + 1));
    let mut conn: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Client::connect(addr) {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        let k = rng.below(ALIASES as u64);
        let key = format!("fault-{k}");
        let tag = serial.fetch_add(1, Ordering::Relaxed);
        let target = format!("https://example.com/{key}/{tag}");
        let kind = match rng.below(10) {
            0..=2 => Kind::Create,
            3 => Kind::Generate,
            4..=7 => Kind::Patch,
            _ => Kind::Delete,
        };
        let invoked = Instant::now();
        let result = match kind {
            Kind::Create => {
                let body = serde_json::json!({"long_url": target, "custom_alias": key});
                c.try_create(&body)
            }
            Kind::Generate => c.try_create(&serde_json::json!({ "long_url": target })),
            Kind::Patch => c.send(
                "PATCH",
                &format!("/api/v1/urls/{key}"),
                true,
                &[],
                serde_json::json!({ "long_url": target })
                    .to_string()
                    .as_bytes(),
            ),
            Kind::Delete => c.send("DELETE", &format!("/api/v1/urls/{key}"), true, &[], b""),
        };
        let completed = Instant::now();
        let (status, made) = match &result {
            Ok(r) if kind == Kind::Generate && r.status == 201 => (r.status, r.key()),
            Ok(r) => (r.status, key.clone()),
            Err(_) => (0, key.clone()),
        };
        if kind == Kind::Generate && status != 201 {
            // A generated create that failed names no key: nothing to check it against.
            if result.is_err() {
                conn = None;
            }
            continue;
        }
        if result.is_err() {
            conn = None;
        }
        let op = Op {
            node,
            kind,
            key: made,
            target: (kind != Kind::Delete).then_some(target),
            invoked,
            completed,
            status,
        };
        let mut h = history.lock().unwrap();
        h.writes.push(op);
        drop(h);
        // A stable key: every node holds it; its redirect must never fail while the node is
        // up (a database fault is no reason).
        let s = rng.below(STABLE as u64);
        let stable = format!("stable-{s}");
        if let Some(c) = conn.as_mut() {
            let was_up = up.load(Ordering::SeqCst);
            let r = c.try_redirect(&stable);
            let still_up = up.load(Ordering::SeqCst);
            let want = format!("https://example.com/stable/{s}");
            let ok = matches!(&r, Ok(r) if r.status == 302 && r.location() == Some(&want));
            let mut h = history.lock().unwrap();
            h.reads += 1;
            if !ok && was_up && still_up {
                let answer = match &r {
                    Ok(r) => format!("{} {:?}", r.status, r.location()),
                    Err(e) => e.to_string(),
                };
                h.stable_failures.push((node, stable, answer));
            }
            if r.is_err() {
                conn = None;
            }
        }
    }
}

/// The faults, by name, in the order one cycle injects them.
const FAULTS: [&str; 7] = [
    "primary-sigstop",
    "writer-backend-sigstop",
    "row-lock-held",
    "long-transaction",
    "standby-stopped",
    "primary-restart",
    "node-kill-9",
];

/// Runs one fault against the current primary; returns when it is healed.
fn inject(fault: &str, primary: &Cluster, standby: &Cluster, db: &str, fleet: &mut Fleet, i: u64) {
    let hold = Duration::from_secs(3);
    match fault {
        "primary-sigstop" => {
            primary.signal("STOP");
            std::thread::sleep(hold);
            primary.signal("CONT");
        }
        "writer-backend-sigstop" => {
            let pids = common::pg::psql(
                db,
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'ricochet' \
                  AND datname = current_database()",
            );
            let pids: Vec<&str> = pids.lines().filter(|l| !l.is_empty()).collect();
            if let Some(pid) = pids.get(i as usize % pids.len().max(1)) {
                // Only while it is still that cluster's backend: the pid may be reused.
                let pid: i32 = pid.trim().parse().unwrap();
                primary.signal_backend(pid, "STOP");
                std::thread::sleep(hold);
                primary.signal_backend(pid, "CONT");
            }
        }
        "row-lock-held" => {
            let key = format!("fault-{}", i % ALIASES as u64);
            let _ = common::pg::try_psql(
                db,
                &format!(
                    "BEGIN; SELECT 1 FROM ricochet_links WHERE key = '{key}' FOR UPDATE; \
                     SELECT pg_sleep(3); COMMIT;"
                ),
            );
        }
        "long-transaction" => {
            let _ = common::pg::try_psql(
                db,
                "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep(4); COMMIT;",
            );
        }
        "standby-stopped" => {
            standby.pg_ctl("stop");
            std::thread::sleep(hold);
            standby.pg_ctl("start");
        }
        "primary-restart" => {
            primary.pg_ctl("stop");
            std::thread::sleep(Duration::from_secs(1));
            primary.pg_ctl("start");
        }
        "node-kill-9" => fleet.kill_and_restart(i as usize % NODES),
        other => panic!("unknown fault {other}"),
    }
}

/// The checker's figures.
#[derive(Debug, Default)]
struct Figures {
    writes: usize,
    acked: usize,
    indeterminate: usize,
    reads: u64,
    keys: usize,
    /// Answers by status (0: no answer).
    statuses: BTreeMap<u16, u64>,
    faults: BTreeMap<&'static str, u32>,
    not_converged: Vec<String>,
    lost_listed: usize,
    lost_deletes: usize,
    anomalies: Vec<String>,
}

/// Whether the final state `now` of a key could have been left by `w`: the same target (or
/// both deleted), and no acknowledged write of the key began after `w` ended (`latest`: when
/// the key's last acknowledged write began).
fn explains(w: &Op, now: &Option<String>, latest: Option<Instant>) -> bool {
    if w.target != *now || !(w.acked() || w.indeterminate()) {
        return false;
    }
    latest.is_none_or(|l| l <= w.completed)
}

#[allow(clippy::too_many_arguments)]
fn check(
    history: &History,
    fleet: &Fleet,
    db: &str,
    faults: BTreeMap<&'static str, u32>,
) -> Figures {
    let mut f = Figures {
        writes: history.writes.len(),
        acked: history.writes.iter().filter(|o| o.acked()).count(),
        indeterminate: history.writes.iter().filter(|o| o.indeterminate()).count(),
        reads: history.reads,
        faults,
        statuses: history.writes.iter().fold(BTreeMap::new(), |mut m, o| {
            *m.entry(o.status).or_default() += 1;
            m
        }),
        ..Figures::default()
    };
    let rows = common::pg::psql(
        db,
        "SELECT key, CASE WHEN deleted THEN '' ELSE target END FROM ricochet_links",
    );
    let state: HashMap<String, Option<String>> = rows
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(k, t)| (k.to_owned(), (!t.is_empty()).then(|| t.to_owned())))
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for o in &history.writes {
        by_key.entry(&o.key).or_default().push(o);
    }
    f.keys = by_key.len();
    let lost: Vec<HashMap<String, HashSet<String>>> =
        fleet.dirs.iter().map(|(_, d)| lost_links(d)).collect();
    let undone: HashSet<String> = fleet
        .dirs
        .iter()
        .flat_map(|(_, d)| undone_deletes(d))
        .collect();
    // Convergence: every node serves the database's state of every key written.
    for (i, addr) in fleet.addrs.iter().enumerate() {
        let mut c = Client::connect(*addr).unwrap();
        for key in by_key.keys() {
            let want = state.get(*key).cloned().flatten();
            let r = c.redirect(key);
            let got = match r.status {
                404 => None,
                s if (300..400).contains(&s) => r.location().map(str::to_owned),
                s => Some(format!("status {s}")),
            };
            if got != want {
                f.not_converged.push(format!(
                    "node {i}: {key} serves {got:?}, the database {want:?}"
                ));
            }
        }
    }
    // Acknowledged writes: the final state is explained by a write no acknowledged write
    // followed; else each acknowledged write that followed it must be listed as lost.
    for (key, ops) in &by_key {
        let now = state.get(*key).cloned().flatten();
        let never_made = !ops
            .iter()
            .any(|o| o.kind != Kind::Delete && !o.indeterminate())
            && now.is_none();
        // Linear in the key's writes: a long run records millions.
        let latest = ops.iter().filter(|a| a.acked()).map(|a| a.invoked).max();
        if never_made || ops.iter().any(|w| explains(w, &now, latest)) {
            continue;
        }
        // The writes that may have been the key's last (no acknowledged write began after
        // one ended): the database lost all of them, so the promotion lost the key's last
        // word. A node that held it lists it in its `fleet-lost` file, or a lost delete in
        // its `fleet-undone-deletes` file.
        let last: Vec<&&Op> = ops
            .iter()
            .filter(|w| w.acked() || w.indeterminate())
            .filter(|w| latest.is_none_or(|l| l <= w.completed))
            .collect();
        let listed = last.iter().any(|w| {
            w.target.as_ref().is_some_and(|t| {
                lost.iter()
                    .any(|l| l.get(*key).is_some_and(|held| held.contains(t)))
            })
        });
        let delete_listed =
            undone.contains(*key) && last.iter().any(|w| w.target.is_none() && w.acked());
        if listed {
            f.lost_listed += 1;
        } else if delete_listed {
            f.lost_deletes += 1;
        } else {
            let acked: Vec<String> = last
                .iter()
                .filter(|w| w.acked())
                .map(|w| format!("{:?} by node {}", w.target, w.node))
                .collect();
            f.anomalies.push(format!(
                "{key}: the database holds {now:?}; the key's last acknowledged writes {acked:?} \
                 are in no fleet-lost file ({} writes of the key)",
                ops.len()
            ));
        }
    }
    // Generated keys: none issued twice; each inside an audited range of its node.
    let mut made: HashMap<&str, usize> = HashMap::new();
    for o in history.writes.iter().filter(|o| o.kind == Kind::Generate) {
        if let Some(other) = made.insert(&o.key, o.node) {
            f.anomalies.push(format!(
                "generated key {} issued twice (nodes {other}, {})",
                o.key, o.node
            ));
        }
    }
    let audit = common::pg::psql(
        db,
        "SELECT start_id, end_id, node_id FROM ricochet_alloc_audit",
    );
    let ranges: Vec<(u64, u64, String)> = audit
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split('|').collect();
            Some((
                c.first()?.parse().ok()?,
                c.get(1)?.parse().ok()?,
                c.get(2)?.to_string(),
            ))
        })
        .collect();
    let keygen = api::keygen(&fleet.dirs[0].1);
    for (key, node) in &made {
        let id = api::id_of(&keygen, key);
        let node_id = format!("n{node}");
        if !ranges
            .iter()
            .any(|(a, b, n)| (*a..*b).contains(&id) && *n == node_id)
        {
            // A range lost by the promotion is not audited there: only a lost key may be so.
            let listed = lost.iter().any(|l| l.contains_key(*key));
            if !listed {
                f.anomalies.push(format!(
                    "generated key {key} (ID {id}) of node {node} is in none of its audited ranges"
                ));
            }
        }
    }
    for (node, key, answer) in &history.stable_failures {
        f.anomalies.push(format!(
            "node {node} failed a redirect of {key} while up: {answer}"
        ));
    }
    f
}

/// The keys a node's `fleet-undone-deletes` files list.
fn undone_deletes(dir: &std::path::Path) -> HashSet<String> {
    let mut undone = HashSet::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(ricochet::fleet_mode::lost::UNDONE_DELETES_FILE_PREFIX) {
            continue;
        }
        for l in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
                if let Some(k) = v["key"].as_str() {
                    undone.insert(k.to_owned());
                }
            }
        }
    }
    undone
}

/// Every target a node's `fleet-lost` files list for each key: a node that regenerated after
/// several failovers has several files, each listing the key with what it held then.
fn lost_links(dir: &std::path::Path) -> HashMap<String, HashSet<String>> {
    let mut lost: HashMap<String, HashSet<String>> = HashMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(ricochet::fleet_mode::lost::LOST_FILE_PREFIX) {
            continue;
        }
        for l in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
                if let (Some(k), Some(u)) = (v["key"].as_str(), v["long_url"].as_str()) {
                    lost.entry(k.to_owned()).or_default().insert(u.to_owned());
                }
            }
        }
    }
    lost
}

/// Asynchronous replication: what the promotion loses must be in the `fleet-lost` files.
#[test]
fn a_fleet_under_faults_converges_and_loses_no_acknowledged_write() {
    run_harness("faults", false);
}

/// A synchronous standby: the promotion may lose no acknowledged write at all.
#[test]
fn a_fleet_under_faults_with_a_synchronous_standby_loses_nothing_acknowledged() {
    run_harness("faults_sync", true);
}

/// Makes `primary`'s standbys synchronous and waits until `standby` is.
fn make_synchronous(primary: &Cluster) {
    common::pg::psql(
        &primary.url,
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
    );
    common::pg::psql(&primary.url, "SELECT pg_reload_conf()");
    let t = Instant::now();
    while common::pg::psql(&primary.url, "SELECT sync_state FROM pg_stat_replication") != "sync" {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the standby is not synchronous"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The two runs take turns: each loads both CPUs of a small machine on its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run_harness(name: &str, synchronous: bool) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(first) = Cluster::start(name) else {
        return;
    };
    let minutes: u64 = std::env::var("RICOCHET_FAULT_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let db = TestDb::on(&first.url, name);
    common::pg::prepare_fleet(&db.url);
    let db_name = db.url.rsplit('/').next().unwrap().to_owned();
    let mut primary = first;
    // Through a replication slot, as HA managers stream: an allocation is published only once
    // the standby has flushed it, even while the standby is stopped (`fleet::replication`).
    let mut standby = primary.standby_with_slot();
    if synchronous {
        make_synchronous(&primary);
    }
    // Both hosts, the writable one chosen: a failover needs no change on the nodes.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db_name}?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let db_on = |c: &Cluster| format!("postgres://postgres@127.0.0.1:{}/{db_name}", c.port());
    let mut fleet = Fleet::start(&url);
    {
        let mut c = Client::connect(fleet.addrs[0]).unwrap();
        for s in 0..STABLE {
            c.create_ok(
                &format!("https://example.com/stable/{s}"),
                Some(&format!("stable-{s}")),
            );
        }
    }
    // Every node must *hold* the stable keys (the feed brought them) before the faults begin:
    // a redirect alone would pass by reading through to the database, and a node that had
    // not yet taken a key from the feed would then fail it during the first database fault
    // (seen: stable-3, the last created, on 2 of about 13 runs). A node's list shows only
    // what it holds.
    for addr in &fleet.addrs {
        let mut c = Client::connect(*addr).unwrap();
        let t = Instant::now();
        loop {
            let r = c
                .send("GET", "/api/v1/urls?limit=500", true, &[], b"")
                .unwrap();
            let held: HashSet<String> = r.json()["items"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|l| l["key"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if (0..STABLE).all(|s| held.contains(&format!("stable-{s}"))) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "stable keys reach every node by the feed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        for s in 0..STABLE {
            assert_eq!(c.redirect(&format!("stable-{s}")).status, 302);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(History::default()));
    let serial = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for node in 0..NODES {
        for n in 0..CLIENTS {
            let (addr, up) = (fleet.addrs[node], fleet.up[node].clone());
            let (stop, history, serial) = (stop.clone(), history.clone(), serial.clone());
            clients.push(std::thread::spawn(move || {
                client(node, n, addr, up, stop, history, serial)
            }));
        }
    }
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let started = Instant::now();
    let mut i = 0u64;
    loop {
        for fault in FAULTS {
            inject(fault, &primary, &standby, &db_on(&primary), &mut fleet, i);
            *faults.entry(fault).or_default() += 1;
            i += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
        // The cycle ends in an asynchronous failover: the standby stops (it lags), writes go
        // on, the primary is killed and the standby promoted. The last time, the clients stop
        // first: what the promotion loses is then the keys' last word, and the checker must
        // find each such acknowledged write in a node's `fleet-lost` file.
        let last = started.elapsed() >= Duration::from_secs(minutes * 60);
        standby.pg_ctl("stop");
        std::thread::sleep(Duration::from_secs(2));
        if last {
            stop.store(true, Ordering::SeqCst);
            for c in clients.drain(..) {
                c.join().unwrap();
            }
        }
        primary.signal("KILL");
        std::thread::sleep(Duration::from_millis(300));
        standby.pg_ctl("start");
        standby.pg_ctl("promote");
        *faults.entry("failover").or_default() += 1;
        std::thread::sleep(Duration::from_secs(3));
        if last {
            break;
        }
        // A new standby of the promoted primary, on the old primary's port.
        let port = primary.port();
        drop(primary);
        primary = standby;
        standby = primary.standby_with_slot_on(port);
        if synchronous {
            make_synchronous(&primary);
        }
    }
    // Healed: the nodes catch up (regenerations included) before the check.
    let final_db = db_on(&standby);
    std::thread::sleep(Duration::from_secs(5));
    let history = history.lock().unwrap();
    let mut figures = check(&history, &fleet, &final_db, faults.clone());
    let t = Instant::now();
    while !figures.not_converged.is_empty() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_secs(1));
        figures = check(&history, &fleet, &final_db, faults.clone());
    }
    eprintln!(
        "fault harness ({}): {} s, {} writes ({} acknowledged, {} indeterminate) on {} keys, {} \
         stable-key reads; answers by status {:?}; faults {:?}; lost and listed {}, \
         acknowledged deletes undone by the promotion and listed {}; not converged {}; anomalies {}",
        if synchronous {
            "synchronous standby"
        } else {
            "asynchronous standby"
        },
        started.elapsed().as_secs(),
        figures.writes,
        figures.acked,
        figures.indeterminate,
        figures.keys,
        figures.reads,
        figures.statuses,
        figures.faults,
        figures.lost_listed,
        figures.lost_deletes,
        figures.not_converged.len(),
        figures.anomalies.len()
    );
    if synchronous {
        // Nothing acknowledged may be lost: every final state is explained by the history.
        assert_eq!(
            (figures.lost_listed, figures.lost_deletes),
            (0, 0),
            "acknowledged writes lost with a synchronous standby"
        );
    }
    // The harness's own sanity: every client was let in (a node restarted without its key
    // would answer 401 to everything, and the history would say nothing).
    assert_eq!(figures.statuses.get(&401), None, "unauthorized writes");
    let problems: Vec<&String> = figures
        .not_converged
        .iter()
        .chain(&figures.anomalies)
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}
