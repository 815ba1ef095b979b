//! One PostgreSQL session with timeouts on both sides, and the classes its failures fall into.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls};

use crate::{CLIENT_CHECK_INTERVAL_MS, DB_CALL_TIMEOUT_MS, IDLE_IN_TRANSACTION_TIMEOUT_MS};

/// Why a database call failed: a bounded vocabulary, used as the `class` label in `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// The connection could not be opened (refused, DNS, authentication).
    Connect,
    /// Our client-side timeout fired (a hung or very slow server).
    Timeout,
    /// `lock_timeout`: the namespace row is held locked by another session.
    LockTimeout,
    /// `statement_timeout`.
    StatementTimeout,
    /// The server is a standby (read-only): allocation only happens on the primary.
    NotPrimary,
    /// The session broke (server restart, network, terminated backend).
    Connection,
    /// Any other error the server reported.
    Database,
    /// COMMIT was sent and its reply lost; see `authority.rs` for how it is resolved.
    Uncertain,
    /// The authority is behind this node's confirmed allocation (a rolled-back primary).
    RolledBack,
    /// The node's own evidence file could not be written (the range is then not published).
    Evidence,
    /// The server committed on the primary but stopped waiting for its synchronous standby
    /// (a WARNING, not an error: a cancel request hit the wait; `statement_timeout` does not
    /// cover it): the change is not known to be replicated and a failover may lose it, so it
    /// is not acknowledged.
    Unreplicated,
}

impl FailureClass {
    /// Every class, in label order (for exporting zero counters too).
    pub const ALL: [FailureClass; 11] = [
        FailureClass::Connect,
        FailureClass::Timeout,
        FailureClass::LockTimeout,
        FailureClass::StatementTimeout,
        FailureClass::NotPrimary,
        FailureClass::Connection,
        FailureClass::Database,
        FailureClass::Uncertain,
        FailureClass::RolledBack,
        FailureClass::Evidence,
        FailureClass::Unreplicated,
    ];

    /// The metric label value.
    pub fn label(self) -> &'static str {
        match self {
            FailureClass::Connect => "connect",
            FailureClass::Timeout => "timeout",
            FailureClass::LockTimeout => "lock_timeout",
            FailureClass::StatementTimeout => "statement_timeout",
            FailureClass::NotPrimary => "not_primary",
            FailureClass::Connection => "connection",
            FailureClass::Database => "database",
            FailureClass::Uncertain => "uncertain_commit",
            FailureClass::RolledBack => "rolled_back",
            FailureClass::Evidence => "evidence",
            FailureClass::Unreplicated => "unreplicated",
        }
    }

    /// Index into [`FailureClass::ALL`].
    pub fn index(self) -> usize {
        FailureClass::ALL
            .iter()
            .position(|c| *c == self)
            .expect("every class is in ALL")
    }

    pub(crate) fn of(e: &tokio_postgres::Error) -> FailureClass {
        let Some(code) = e.code() else {
            return FailureClass::Connection; // I/O, closed, protocol: the session is gone.
        };
        if *code == SqlState::LOCK_NOT_AVAILABLE {
            FailureClass::LockTimeout
        } else if *code == SqlState::QUERY_CANCELED {
            FailureClass::StatementTimeout
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            FailureClass::NotPrimary
        } else if code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
        {
            FailureClass::Connection
        } else {
            FailureClass::Database
        }
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// What went wrong talking to the fleet database. The text never carries the URL's password.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("--fleet-pg: not a usable PostgreSQL URL: {0}")]
    BadUrl(String),
    #[error("PostgreSQL {target}: {what}: {class}: {detail}")]
    Db {
        class: FailureClass,
        target: String,
        what: &'static str,
        detail: String,
    },
    #[error("fleet schema: {0}")]
    Schema(String),
    #[error("{0}")]
    Refused(String),
}

impl FleetError {
    /// The failure class, for database errors.
    pub fn class(&self) -> Option<FailureClass> {
        match self {
            FleetError::Db { class, .. } => Some(*class),
            _ => None,
        }
    }
}

/// Who the server says a session is: a backend pid can be reused, `(pid, backend_start)` not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionId {
    pub pid: i32,
    pub backend_start: String,
}

struct Session {
    client: Client,
    task: JoinHandle<()>,
    id: SessionId,
    /// Commits on this session whose wait for the synchronous standby was cancelled
    /// ([`is_unreplicated_commit`]), counted by the connection task as the notice arrives,
    /// before the reply it precedes.
    unreplicated: Arc<AtomicU64>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The connection task would end once the client is gone, but not while a hung server
        // keeps its socket open: abort it so nothing waits on it.
        self.task.abort();
    }
}

/// A lazily (re)connected session on a private single-threaded runtime. Any failure drops
/// the session; the next call connects again.
pub struct Db {
    rt: Runtime,
    config: Config,
    target: String,
    session: Option<Session>,
    timeout: Duration,
}

impl Db {
    /// A handle for `url` (`postgres://user@host:port/db` or a key=value string). Does not
    /// connect yet.
    pub fn new(url: &str) -> Result<Db, FleetError> {
        let mut config = parse_url(url)?;
        config.connect_timeout(Duration::from_millis(DB_CALL_TIMEOUT_MS));
        config.application_name("ricochet");
        let target = describe(&config);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| FleetError::Refused(format!("cannot start the fleet runtime: {e}")))?;
        Ok(Db {
            rt,
            config,
            target,
            session: None,
            timeout: Duration::from_millis(DB_CALL_TIMEOUT_MS),
        })
    }

    /// The same, with every call (connect included) bounded by `ms` instead of
    /// [`DB_CALL_TIMEOUT_MS`].
    pub fn with_timeout(mut self, ms: u64) -> Db {
        self.timeout = Duration::from_millis(ms);
        self.config.connect_timeout(self.timeout);
        self
    }

    /// `host:port/db` of the server, without credentials (for messages).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The current session's identity, if connected.
    pub fn session_id(&self) -> Option<SessionId> {
        self.session.as_ref().map(|s| s.id.clone())
    }

    /// Connects if not connected; the session's identity.
    pub fn ensure_session(&mut self) -> Result<SessionId, FleetError> {
        if self.session.is_none() {
            self.session = Some(self.connect()?);
        }
        Ok(self.session.as_ref().expect("just connected").id.clone())
    }

    /// Drops the session (the server rolls back whatever it had open).
    pub fn disconnect(&mut self) {
        self.session = None;
    }

    /// Runs `f` on the session (connecting first if needed) within [`DB_CALL_TIMEOUT_MS`].
    /// Any failure drops the session.
    pub fn call<T>(
        &mut self,
        what: &'static str,
        f: impl AsyncFnOnce(&Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, FleetError> {
        if self.session.is_none() {
            self.session = Some(self.connect()?);
        }
        let session = self.session.as_ref().expect("just connected");
        let timeout = self.timeout;
        let unreplicated = session.unreplicated.load(Ordering::SeqCst);
        let result = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, f(&session.client)).await });
        match result {
            Ok(Ok(_)) if session.unreplicated.load(Ordering::SeqCst) != unreplicated => {
                self.session = None;
                Err(self.error(
                    FailureClass::Unreplicated,
                    what,
                    "committed on the primary, but the wait for the synchronous standby was \
                     cancelled: not known to be replicated"
                        .into(),
                ))
            }
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.session = None;
                Err(self.error(FailureClass::of(&e), what, describe_error(&e)))
            }
            Err(_) => {
                self.session = None;
                Err(self.error(
                    FailureClass::Timeout,
                    what,
                    format!("no answer within {} ms", timeout.as_millis()),
                ))
            }
        }
    }

    /// Runs `f` to completion on this session's runtime (a service thread waiting for work).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Sleeps on the runtime (between resolution polls).
    pub fn sleep(&self, d: Duration) {
        // Made inside the runtime: a `Sleep` built outside it finds no timer and panics.
        self.rt.block_on(async move { tokio::time::sleep(d).await });
    }

    fn connect(&self) -> Result<Session, FleetError> {
        let config = self.config.clone();
        let timeout = self.timeout;
        // The server gives up before we do: a statement we stopped waiting for cannot commit
        // long after its caller was told it failed (a zombie write), barring a backend that
        // is frozen (the writer's `resolve_zombie` covers that one).
        let statement_ms = (timeout.as_millis() as u64 * 3 / 4).max(1);
        let lock_ms = (timeout.as_millis() as u64 / 2).max(1);
        let setup = format!(
            "SET synchronous_commit = on; \
             SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_TIMEOUT_MS}ms'; \
             SET statement_timeout = '{statement_ms}ms'; \
             SET lock_timeout = '{lock_ms}ms'; \
             SELECT set_config('client_connection_check_interval', \
                               '{CLIENT_CHECK_INTERVAL_MS}ms', false) \
              WHERE current_setting('server_version_num')::int >= 140000"
        );
        let result = self.rt.block_on(async {
            tokio::time::timeout(timeout, async {
                let (client, connection) = config.connect(NoTls).await?;
                let unreplicated = Arc::new(AtomicU64::new(0));
                let task = tokio::spawn(drive(connection, unreplicated.clone()));
                let session = async {
                    client.batch_execute(&setup).await?;
                    let row = client
                        .query_one(
                            "SELECT pg_backend_pid(), \
                             (SELECT backend_start::text FROM pg_stat_activity \
                              WHERE pid = pg_backend_pid())",
                            &[],
                        )
                        .await?;
                    Ok::<_, tokio_postgres::Error>(SessionId {
                        pid: row.get(0),
                        backend_start: row.get::<_, Option<String>>(1).unwrap_or_default(),
                    })
                }
                .await;
                match session {
                    Ok(id) => Ok(Session {
                        client,
                        task,
                        id,
                        unreplicated,
                    }),
                    Err(e) => {
                        task.abort();
                        Err(e)
                    }
                }
            })
            .await
        });
        match result {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => {
                let class = if e.code().is_some() {
                    FailureClass::of(&e)
                } else {
                    FailureClass::Connect
                };
                Err(self.error(class, "connect", describe_error(&e)))
            }
            Err(_) => Err(self.error(
                FailureClass::Timeout,
                "connect",
                format!("no answer within {} ms", timeout.as_millis()),
            )),
        }
    }

    fn error(&self, class: FailureClass, what: &'static str, detail: String) -> FleetError {
        FleetError::Db {
            class,
            target: self.target.clone(),
            what,
            detail,
        }
    }
}

/// Runs a session's connection until it ends, counting in `unreplicated` the notices that say
/// a commit stopped waiting for the synchronous standby.
async fn drive(
    mut connection: tokio_postgres::Connection<
        tokio_postgres::Socket,
        tokio_postgres::tls::NoTlsStream,
    >,
    unreplicated: Arc<AtomicU64>,
) {
    use futures_util::StreamExt;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(m) = messages.next().await {
        match m {
            Ok(tokio_postgres::AsyncMessage::Notice(n)) if is_unreplicated_commit(&n) => {
                unreplicated.fetch_add(1, Ordering::SeqCst);
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// PostgreSQL's WARNING when a commit's wait for the synchronous standby is cancelled
/// (a cancel request, a termination; "The transaction has already committed locally, but might
/// not have been replicated to the standby"). Matched on its SQLSTATE (01000, a plain
/// warning) and English text: a server with translated messages (`lc_messages`) is not
/// recognized, which docs/fleet.md says.
pub fn is_unreplicated_commit(n: &tokio_postgres::error::DbError) -> bool {
    n.code() == &SqlState::WARNING && n.message().contains("wait for synchronous replication")
}

/// Checks `url` as [`Db::new`] would, without starting anything (a flag check).
pub fn check_url(url: &str) -> Result<(), FleetError> {
    parse_url(url).map(drop)
}

fn parse_url(url: &str) -> Result<Config, FleetError> {
    let config = Config::from_str(url).map_err(|e| FleetError::BadUrl(e.to_string()))?;
    if config.get_hosts().is_empty() {
        return Err(FleetError::BadUrl("no host".into()));
    }
    Ok(config)
}

/// `host:port/db`, no user or password.
fn describe(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{host}:{port}/{}",
        config.get_dbname().unwrap_or("postgres")
    )
}

/// The server's message (with its SQLSTATE) or the client-side cause.
fn describe_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
