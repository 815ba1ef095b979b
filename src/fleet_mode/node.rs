//! Fleet mode on this node: start-up (the fleet's secret, the PostgreSQL authority) and the
//! `ricochet fleet` operator commands. The PostgreSQL client itself lives in the `fleet`
//! crate; this module only wires it in, on the main thread before the cores start, or hands
//! the authority to the allocator's service thread. No core thread calls into it.

use anyhow::{bail, Context};
use std::path::Path;
use std::sync::Arc;

/// `serve --fleet-pg`: where this node allocates from.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub url: String,
    pub namespace: String,
    pub node_id: String,
    /// `--fleet-click-flush-ms`.
    pub click_flush_ms: u64,
    pub faults: fleet::FleetFaults,
    /// Test only (`--test-fleet-pause-feed FILE`): the change feed polls nothing while FILE
    /// exists (read-through and creates go on).
    pub pause_feed_file: Option<std::path::PathBuf>,
}

/// What `serve` needs from fleet mode.
pub struct FleetNode {
    pub authority: fleet::PgAuthority,
    pub secret: [u8; 32],
    pub stats: Arc<fleet::FleetStats>,
}

/// The data dir's identity in the fleet's click tables (`ricochet_click_nodes`), relative to
/// the data dir: a wiped dir counts under a new one, and the old rows stay.
pub const CLICK_IDENTITY_FILE: &str = "fleet-clicks.id";

/// This data dir's click identity (32 hex digits), made at its first fleet start. A damaged
/// file is refused: another identity would leave this node's rows in the database counted
/// next to the new ones.
pub fn click_identity(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(CLICK_IDENTITY_FILE);
    const PREFIX: &str = "ricochet-click-node 1 ";
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text
                .strip_prefix(PREFIX)
                .and_then(|t| t.strip_suffix('\n'))
                .filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                .filter(|id| id.bytes().all(|b| !b.is_ascii_uppercase()));
            match id {
                Some(id) => Ok(id.to_owned()),
                None => bail!(
                    "{} is damaged (expected `{PREFIX}<32 hex digits>`); restore it, or this \
                     node's clicks already in the fleet database would be counted twice",
                    path.display()
                ),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut b = [0u8; 16];
            getrandom::getrandom(&mut b).context("no randomness for the click identity")?;
            let id: String = b.iter().map(|x| format!("{x:02x}")).collect();
            shards::durable::write_atomic(
                data_dir,
                CLICK_IDENTITY_FILE,
                format!("{PREFIX}{id}\n").as_bytes(),
                0o644,
            )
            .with_context(|| format!("writing {}", path.display()))?;
            Ok(id)
        }
        Err(e) => bail!("reading {}: {e}", path.display()),
    }
}

/// The file that marks a data dir as a fleet node's.
pub const MARKER_FILE: &str = "fleet-node";

const MARKER: &[u8] = b"ricochet fleet node data dir, format 1\n";

/// Keeps fleet and single-node data dirs apart. A fleet node's dir holds links that came from
/// the fleet database (versioned log records, a feed cursor); a single node's links were
/// never in that database. Started in fleet mode, a dir without the marker is refused if it
/// holds links (`holds`: table links and logged changes) and marked if it is empty; started
/// without `--fleet-pg`, a marked dir is refused.
pub fn check_marker(data_dir: &Path, fleet_mode: bool, holds: u64) -> anyhow::Result<()> {
    let path = data_dir.join(MARKER_FILE);
    let marked = match std::fs::read(&path) {
        Ok(bytes) if bytes == MARKER => true,
        Ok(_) => bail!(
            "{} is not a ricochet fleet marker (damaged or foreign); refusing to guess whether \
             this data dir belongs to a fleet",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => bail!("reading {}: {e}", path.display()),
    };
    match (fleet_mode, marked) {
        (true, true) | (false, false) => Ok(()),
        (false, true) => bail!(
            "data dir {} belongs to a fleet node ({} is there): start it with --fleet-pg, or \
             `ricochet export` its links and import them into a single-node data dir",
            data_dir.display(),
            MARKER_FILE
        ),
        (true, false) if holds > 0 => bail!(
            "data dir {} holds {holds} single-node links and changes; a fleet node's links come \
             from the fleet database. Start the node on an empty data dir (it catches up from \
             the database), and bring these links into the fleet through the API",
            data_dir.display()
        ),
        (true, false) => shards::durable::write_atomic(data_dir, MARKER_FILE, MARKER, 0o644)
            .with_context(|| format!("writing {}", path.display())),
    }
}

/// Whether the fleet database answered at start, and if not, why this node may start without
/// it ([`database_at_start`]).
#[derive(Clone, Debug)]
pub enum DbAtStart {
    Answers,
    /// It did not answer (the error): the node serves the links it holds, and everything
    /// that needs the database (the change feed, the fleet's API keys, click flushes,
    /// allocation, read-through) waits for it on its own thread.
    Down(String),
}

impl DbAtStart {
    pub fn answers(&self) -> bool {
        matches!(self, DbAtStart::Answers)
    }
}

/// Asks the fleet database one cheap question (bounded by `fleet::DB_CALL_TIMEOUT_MS`). A
/// database that does not answer is fine for a node whose data dir can serve on its own (it
/// was bootstrapped: the fleet marker, a feed cursor and the adopted secret are there, and no
/// re-bootstrap is pending); such a node starts and serves what it holds, which is what fleet
/// mode promises during an outage (a restart included). A node with nothing to serve yet is
/// refused: it must bootstrap from the database first.
pub fn database_at_start(data_dir: &Path, url: &str) -> anyhow::Result<DbAtStart> {
    let mut db = fleet::Db::new(url)?;
    use fleet::FailureClass::{Connect, Connection, Timeout};
    let e = match fleet::schema_version(&mut db) {
        Err(e) if matches!(e.class(), Some(Connect | Connection | Timeout)) => e,
        // An answer, even an error: the steps after this one report it.
        _ => return Ok(DbAtStart::Answers),
    };
    let has = |f: &str| data_dir.join(f).exists();
    let serves_alone = has(MARKER_FILE)
        && has(super::files::CURSOR_FILE)
        && has(shards::keygen::SECRET_FILE_NAME)
        && !has(super::files::REBOOTSTRAP_MARKER);
    if !serves_alone {
        bail!(
            "the fleet database does not answer ({e}), and data dir {} holds no bootstrapped \
             links to serve without it: a new or re-bootstrapping node needs the database to \
             start",
            data_dir.display()
        );
    }
    eprintln!(
        "fleet: the database does not answer ({e}); serving the links this node holds. \
         Creates, edits and misses answer 503 until it does; the change feed, the fleet's API \
         keys and click flushes start by themselves once it answers"
    );
    Ok(DbAtStart::Down(e.to_string()))
}

/// What a node requires of the fleet database ([`requirements`]).
pub struct Required {
    pub secret: [u8; 32],
    pub namespace: fleet::NamespaceRow,
}

/// Checks what a node requires of the fleet database: this build's schema version, the
/// fleet's key-space secret, and the node's namespace. `Ok(Err(why))`: the database answered
/// and refuses this node; `Err`: it did not answer. Used at start ([`open`]) and by the feed
/// whenever the database answers again (`follower::Follower::check_database`), where a
/// refusal does not stop the node: it serves what it holds and refuses what needs the
/// database until the check passes.
pub fn requirements(
    db: &mut fleet::Db,
    namespace: &str,
) -> Result<Result<Required, (fleet::DbRefusal, String)>, fleet::FleetError> {
    let target = db.target().to_owned();
    let secret = match fleet::load_secret(db) {
        Ok(s) => s,
        Err(fleet::FleetError::Schema(why)) => return Ok(Err((fleet::DbRefusal::Schema, why))),
        Err(e) => return Err(e),
    };
    Ok(match fleet::show_namespace(db, namespace)? {
        Some(namespace) => Ok(Required { secret, namespace }),
        None => Err((
            fleet::DbRefusal::Namespace,
            format!(
                "namespace {namespace:?} does not exist in {target}; create it with `ricochet \
                 fleet namespace create --pg URL {namespace} --lo N --hi M`"
            ),
        )),
    })
}

/// Adopts the fleet's key-space secret into `data_dir` (refusing a dir that holds another),
/// checks the schema and the namespace, and builds the authority. With the database down at
/// start ([`DbAtStart::Down`]) the secret adopted at an earlier start is used; the feed checks
/// the schema, the secret and the namespace once the database answers. The authority
/// connects when a create first needs an ID.
pub fn open(
    data_dir: &Path,
    opts: &FleetOptions,
    at_start: &DbAtStart,
) -> anyhow::Result<FleetNode> {
    let mut db = fleet::Db::new(&opts.url)?;
    let target = db.target().to_owned();
    let secret = match at_start {
        DbAtStart::Answers => {
            let Required {
                secret,
                namespace: ns,
            } = requirements(&mut db, &opts.namespace)
                .with_context(|| format!("checking the fleet database at {target}"))?
                .map_err(|(_, why)| anyhow::anyhow!(why))?;
            shards::keygen::adopt_secret(data_dir, &secret)
                .context("adopting the fleet's secret")?;
            eprintln!(
                "fleet: node {} allocates from namespace {} [{}, {}) at {target} (next_id {})",
                opts.node_id, ns.name, ns.lo, ns.hi, ns.next_id
            );
            secret
        }
        DbAtStart::Down(_) => shards::keygen::read_secret(data_dir)
            .context("reading the fleet's secret adopted at an earlier start")?
            .context("this data dir holds no fleet secret yet; it needs the database to start")?,
    };
    let stats = Arc::new(fleet::FleetStats::default());
    if matches!(at_start, DbAtStart::Down(_)) {
        // Nothing the database says is used before the feed has checked it (`follower`).
        stats.set_refused(Some(fleet::DbRefusal::Unchecked));
    }
    let setup = fleet::FleetSetup {
        url: opts.url.clone(),
        namespace: opts.namespace.clone(),
        node_id: opts.node_id.clone(),
        data_dir: data_dir.to_path_buf(),
        faults: opts.faults,
        ceiling_step: fleet::CEILING_STEP,
    };
    let authority = fleet::PgAuthority::new(db, setup, stats.clone())?;
    Ok(FleetNode {
        authority,
        secret,
        stats,
    })
}
