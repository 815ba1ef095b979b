//! Real PostgreSQL for the fleet tests, through `psql` (no mock, no second client library).
//!
//! `RICOCHET_TEST_PG` names a server the tests may create databases on (`.ci/pg-cluster.sh`
//! starts one; `.ci/run` sets it). Without it the fleet tests print SKIPPED and pass, unless
//! `RICOCHET_REQUIRE_PG` is set (CI sets it): then a missing server fails them.

use std::cell::Cell;
use std::process::Command;
use std::sync::{Condvar, Mutex};

/// The tests of one binary share one PostgreSQL cluster, and a snapshot's xmin is
/// cluster-wide: any test's transaction with an xid (a bulk import, a regeneration, a row lock
/// held on purpose) holds back the change feed of every other test's nodes, whatever their
/// database. A test that bounds propagation time therefore runs alone: it takes [`timed`],
/// which waits until no other test holds a database of the shared cluster and keeps new ones
/// out; every [`TestDb::create`] holds a shared turn for the test's life.
static TURNS: Mutex<Turns> = Mutex::new(Turns {
    shared: 0,
    alone: false,
});
static TURN_CHANGED: Condvar = Condvar::new();

struct Turns {
    shared: usize,
    alone: bool,
}

thread_local! {
    /// This test holds the cluster alone: its own databases take no shared turn.
    static ALONE_HERE: Cell<bool> = const { Cell::new(false) };
}

/// A test's turn on the shared cluster, given back when dropped.
pub struct Turn {
    alone: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut t = TURNS.lock().unwrap_or_else(|e| e.into_inner());
        if self.alone {
            t.alone = false;
            ALONE_HERE.with(|a| a.set(false));
        } else {
            t.shared -= 1;
        }
        TURN_CHANGED.notify_all();
    }
}

/// LinksOrigin by a test that bounds how fast changes propagate (see [`TURNS`]). A shared turn never
/// waits for a test waiting to run alone, only for one running alone, so a test holding two
/// databases cannot deadlock against it; the alone test gets in between two other tests.
pub fn timed() -> Turn {
    let mut t = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    while t.alone || t.shared > 0 {
        t = TURN_CHANGED.wait(t).unwrap_or_else(|e| e.into_inner());
    }
    t.alone = true;
    ALONE_HERE.with(|a| a.set(true));
    Turn { alone: true }
}

/// A shared turn, or none when this test runs alone.
fn shared_turn() -> Option<Turn> {
    if ALONE_HERE.with(Cell::get) {
        return None;
    }
    let mut t = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    while t.alone {
        t = TURN_CHANGED.wait(t).unwrap_or_else(|e| e.into_inner());
    }
    t.shared += 1;
    Some(Turn { alone: false })
}

/// One database of its own per test, dropped at the end.
pub struct TestDb {
    /// URL of the test's database.
    pub url: String,
    admin: String,
    name: String,
    /// The test's turn on the shared cluster (none for a database on a cluster of its own).
    _turn: Option<Turn>,
}

/// The server URL, or `None` (and a SKIPPED line) when there is none and none is required.
pub fn server(test: &str) -> Option<String> {
    match std::env::var("RICOCHET_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("RICOCHET_REQUIRE_PG").is_some() => {
            panic!("RICOCHET_REQUIRE_PG is set but RICOCHET_TEST_PG is not: no PostgreSQL")
        }
        _ => {
            eprintln!(
                "SKIPPED {test}: no PostgreSQL. Run `eval \"$(.ci/pg-cluster.sh start)\"` and \
                 set RICOCHET_TEST_PG (CI sets RICOCHET_REQUIRE_PG so this cannot skip there)"
            );
            None
        }
    }
}

impl TestDb {
    /// A fresh database on the `RICOCHET_TEST_PG` server, or `None` to skip.
    pub fn create(test: &str) -> Option<TestDb> {
        let admin = server(test)?;
        let turn = shared_turn();
        let mut db = TestDb::on(&admin, test);
        db._turn = turn;
        Some(db)
    }

    /// A fresh database on the server at `admin` (a URL ending in `/postgres`).
    pub fn on(admin: &str, test: &str) -> TestDb {
        let suffix = format!("{:012x}", rand::random::<u64>() >> 16);
        let name = format!(
            "t_{}_{suffix}",
            test.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        psql(admin, &format!("CREATE DATABASE {name}"));
        let base = admin.rsplit_once('/').expect("URL with a database").0;
        TestDb {
            url: format!("{base}/{name}"),
            admin: admin.to_owned(),
            name,
            _turn: None,
        }
    }

    /// Runs `sql` in the test's database; the rows as `|`-separated lines.
    pub fn sql(&self, sql: &str) -> String {
        psql(&self.url, sql)
    }

    /// Like [`TestDb::sql`], but returns psql's stderr when the statement fails.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        try_psql(&self.url, sql)
    }

    /// Replaces the test's database, under the same name and URL, by a copy of itself: another
    /// database (another oid), as a dump restored into a new one would be. Its sessions are
    /// ended and new ones refused while the copy is made.
    pub fn replace_with_copy(&self) {
        let (admin, name) = (&self.admin, &self.name);
        let _ = try_psql(
            admin,
            &format!("DROP DATABASE IF EXISTS {name}_old WITH (FORCE)"),
        );
        psql(
            admin,
            &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"),
        );
        let mut tries = 0;
        loop {
            psql(
                admin,
                &format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                      WHERE datname = '{name}'"
                ),
            );
            match try_psql(
                admin,
                &format!("CREATE DATABASE {name}_new TEMPLATE {name}"),
            ) {
                Ok(_) => break,
                Err(e) if tries < 50 => {
                    tries += 1;
                    assert!(e.contains("being accessed"), "{e}");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("copying {name}: {e}"),
            }
        }
        psql(
            admin,
            &format!("ALTER DATABASE {name} RENAME TO {name}_old"),
        );
        psql(
            admin,
            &format!("ALTER DATABASE {name}_new RENAME TO {name}"),
        );
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Bounded: a test that failed with its server still SIGSTOPped (its `Cluster`, dropped
        // after this, resumes it) must fail, not hang the whole run on this connect.
        for name in [self.name.clone(), format!("{}_old", self.name)] {
            let _ = Command::new("psql")
                .env("PGCONNECT_TIMEOUT", "5")
                .args(["-X", "-At", "-d", &self.admin, "-c"])
                .arg(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .output();
        }
    }
}

/// `psql -At` of `sql` on `url`; panics with psql's message on failure.
pub fn psql(url: &str, sql: &str) -> String {
    try_psql(url, sql).unwrap_or_else(|e| panic!("psql {sql:?}: {e}"))
}

/// `psql -At` of `sql` on `url`.
pub fn try_psql(url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .output()
        .expect("psql runs (apt install postgresql-client)");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// A PostgreSQL cluster of the test's own (`.ci/pg-cluster.sh`), for faults that would hurt
/// other tests sharing a server: stopping it, SIGSTOP, replicas. Needs the server binaries.
pub struct Cluster {
    pub url: String,
    pub dir: String,
    pub bin: String,
}

impl Cluster {
    /// Starts one, or `None` to skip (same rules as [`server`]).
    pub fn start(test: &str) -> Option<Cluster> {
        server(test)?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/pg-cluster.sh");
        let out = Command::new("bash")
            .args([script, "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-cluster.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let var = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}='")))
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_owned()
        };
        Some(Cluster {
            url: var("RICOCHET_TEST_PG"),
            dir: var("RICOCHET_PG_DIR"),
            bin: var("RICOCHET_PG_BIN"),
        })
    }

    /// The postmaster and every backend, for SIGSTOP/SIGCONT.
    pub fn pids(&self) -> Vec<i32> {
        let Ok(pidfile) = std::fs::read_to_string(format!("{}/data/postmaster.pid", self.dir))
        else {
            return Vec::new(); // stopped
        };
        let main: i32 = pidfile.lines().next().unwrap().trim().parse().unwrap();
        let out = Command::new("pgrep")
            .args(["-P", &main.to_string()])
            .output()
            .unwrap();
        let mut pids = vec![main];
        pids.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok()),
        );
        pids
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, `TERM`) to the postmaster and every backend,
    /// each only while it still is one ([`signal_postgres`]).
    pub fn signal(&self, signal: &str) {
        let pids = self.pids();
        if let Some((&main, children)) = pids.split_first() {
            signal_postgres(main, signal, None);
            for &pid in children {
                signal_postgres(pid, signal, Some(main));
            }
        }
    }

    /// Sends `signal` to backend `pid` if it is still a child of this cluster's postmaster.
    pub fn signal_backend(&self, pid: i32, signal: &str) -> bool {
        match self.pids().first() {
            Some(&main) => signal_postgres(pid, signal, Some(main)),
            None => false,
        }
    }

    /// `pg_ctl stop` (fast), `start` or `promote`, as the cluster's owner.
    pub fn pg_ctl(&self, action: &str) {
        let data = format!("{}/data", self.dir);
        let log = format!("{}/server.log", self.dir);
        let mut args: Vec<&str> = vec![action, "-D", &data, "-w"];
        match action {
            "stop" => args.extend(["-m", "fast"]),
            "start" => args.extend(["-l", &log]),
            _ => {}
        }
        let st = as_postgres(&format!("{}/pg_ctl", self.bin), &args)
            .status()
            .unwrap();
        assert!(st.success(), "pg_ctl {action}");
    }

    /// The TCP port it listens on.
    pub fn port(&self) -> u16 {
        let rest = self.url.rsplit_once(':').unwrap().1;
        rest.split('/').next().unwrap().parse().unwrap()
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`), started, on its own port.
    pub fn standby(&self) -> Cluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        self.standby_on(port)
    }

    /// [`Cluster::standby`] on a given port (a failed primary's, so a URL listing both
    /// hosts stays right).
    pub fn standby_on(&self, port: u16) -> Cluster {
        self.standby_made(port, false)
    }

    /// [`Cluster::standby`] streaming through a physical replication slot on this cluster
    /// (`pg_basebackup -C -S`), as HA managers set them up: the slot keeps the standby's
    /// flushed position while it is stopped.
    pub fn standby_with_slot(&self) -> Cluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        self.standby_made(port, true)
    }

    /// [`Cluster::standby_with_slot`] on a given port.
    pub fn standby_with_slot_on(&self, port: u16) -> Cluster {
        self.standby_made(port, true)
    }

    fn standby_made(&self, port: u16, slot: bool) -> Cluster {
        let out = Command::new("mktemp")
            .args(["-d", "/tmp/ricochet-pg.XXXXXX"])
            .output()
            .unwrap();
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if is_root() {
            Command::new("chown")
                .args(["postgres:", &dir])
                .status()
                .unwrap();
        }
        let data = format!("{dir}/data");
        let primary_port = self.port().to_string();
        let slot_name = format!("standby_{port}");
        let slot_args: &[&str] = if slot { &["-C", "-S", &slot_name] } else { &[] };
        let st = as_postgres(
            &format!("{}/pg_basebackup", self.bin),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary_port,
                "-U",
                "postgres",
                "-D",
                &data,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ]
            .into_iter()
            .chain(slot_args.iter().copied())
            .collect::<Vec<_>>(),
        )
        .status()
        .unwrap();
        assert!(st.success(), "pg_basebackup");
        let conf = format!("{data}/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "port = {port}\nunix_socket_directories = '{dir}'\n"
        ));
        std::fs::write(&conf, text).unwrap();
        let standby = Cluster {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            dir,
            bin: self.bin.clone(),
        };
        standby.pg_ctl("start");
        standby
    }
}

/// Sends `signal` to `pid` only if it is still a `postgres` process (a child of `parent`,
/// when given), through a pidfd: a pid listed earlier may have been reused since (a long fault
/// run wraps the pid space, 32,768 here), and its next owner may be a node or a thread of the
/// test itself, which a SIGSTOP would freeze. The pidfd pins the process checked, so the
/// signal reaches that one or none. Returns whether it was sent.
pub fn signal_postgres(pid: i32, signal: &str, parent: Option<i32>) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let signo = match signal {
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        other => panic!("signal_postgres: unknown signal {other}"),
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses: split at the last ')'.
    let Some((head, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let comm = head.split_once('(').map_or("", |(_, c)| c);
    let ppid: Option<i32> = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
    if comm != "postgres" || parent.is_some_and(|p| ppid != Some(p)) {
        return false;
    }
    // SAFETY: a pidfd we own, a valid signal number, no siginfo, no flags.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signo,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        ) == 0
    }
}

/// `program args` as the `postgres` user when we are root (the server refuses root).
fn as_postgres(program: &str, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", program]).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.signal("CONT");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/pg-cluster.sh");
        let _ = Command::new("bash")
            .args([script, "stop", &self.dir])
            .status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `fleet init` and a namespace `eu` = [1, 1e9) through the CLI, as an operator would.
#[allow(dead_code)]
pub fn prepare_fleet(url: &str) {
    for args in [
        vec!["fleet", "init", "--pg", url],
        vec![
            "fleet",
            "namespace",
            "create",
            "--pg",
            url,
            "eu",
            "--lo",
            "1",
            "--hi",
            "1000000000",
        ],
    ] {
        let out = Command::new(super::BIN).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `serve` flags of a fleet node `id` in namespace `eu` (what `prepare_fleet` makes).
#[allow(dead_code)]
pub fn fleet_node_args<'a>(url: &'a str, id: &'a str, cores: &'a str) -> Vec<&'a str> {
    let mut args = super::api::NO_RATE_LIMIT.to_vec();
    args.extend([
        "--cores",
        cores,
        "--fleet-pg",
        url,
        "--namespace",
        "eu",
        "--node-id",
        id,
    ]);
    args
}

/// A fleet API key made with `ricochet fleet keys create --pg URL NAME FLAGS...`: its token.
#[allow(dead_code)]
pub fn fleet_key(url: &str, name: &str, flags: &[&str]) -> String {
    let mut args = vec!["fleet", "keys", "create", "--pg", url, name];
    args.extend(flags);
    let out = std::process::Command::new(super::BIN)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
