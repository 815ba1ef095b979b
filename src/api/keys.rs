//! API keys: creation, hashed storage, revocation, and verification of bearer tokens.
//!
//! A key reads `rk_<id>_<secret>`: `<id>` is [`KEY_ID_BYTES`] random base62 characters, public
//! (it names the key in logs, rate limits and idempotency scopes, and finds the stored hash in
//! O(1)); `<secret>` is [`KEY_SECRET_BYTES`] random base62 characters (~190 bits) from the OS
//! RNG. Only SHA-256 of the whole key is stored: the secret is random and long, so a fast
//! unsalted hash is safe, and verifying every API request stays cheap. Hashes are compared in
//! constant time.
//!
//! The store is `<data_dir>/api_keys.json` (mode 0600), replaced atomically (temp file, fsync,
//! rename, fsync of the directory), so a crash leaves the old or the new file, never a torn one.
//! Every change re-reads the file under an exclusive `flock` on `<data_dir>/api_keys.lock`, so
//! concurrent `ricochet keys` commands and server bootstrap do not lose each other's changes.
//! A running server sees changes made by the CLI only after it reloads the store.
//!
//! An operator-chosen key can come from the environment ([`ENV_VAR`]); it is stored under the
//! fixed id [`ENV_KEY_ID`] and may have any format (see [`ApiKeyStore::bootstrap`]).

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ratelimit::RateLimitConfig;
use super::roles::{Role, RoleArgs};

use rand::distributions::Alphanumeric;
use rand::rngs::OsRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::timefmt::{format_rfc3339_utc, now_s, parse_rfc3339_s};

/// File name of the key store inside the data directory.
pub const API_KEYS_FILE: &str = "api_keys.json";

/// File name of the lock that serializes changes to the key store.
pub const API_KEYS_LOCK_FILE: &str = "api_keys.lock";

/// Prefix of every generated key; lets secret scanners and humans recognize a ricochet key.
pub const KEY_PREFIX: &str = "rk_";

/// Length of a generated key id: 8 base62 characters (~47 bits) make collisions among the few
/// keys an operator creates negligible (and they are checked) while staying short in logs.
pub const KEY_ID_BYTES: usize = 8;

/// Length of a generated key's secret part: 32 base62 characters, ~190 bits of entropy, far
/// beyond guessing, which is what lets the store use a fast hash.
pub const KEY_SECRET_BYTES: usize = 32;

/// Environment variable holding an operator-chosen API key (read by the server's `main`).
pub const ENV_VAR: &str = "RICOCHET_API_KEY";

/// Id under which the key from [`ENV_VAR`] is stored.
pub const ENV_KEY_ID: &str = "env";

/// Shortest key accepted from [`ENV_VAR`]: 16 characters. The env key is operator-chosen and
/// stored with a fast hash, so a floor keeps it out of reach of guessing (16 random base62
/// characters are ~95 bits).
pub const MIN_ENV_KEY_BYTES: usize = 16;

/// Longest key accepted from [`ENV_VAR`]: 256 bytes, well inside any HTTP header limit.
pub const MAX_ENV_KEY_BYTES: usize = 256;

/// Longest key name, in bytes: 64 is plenty for a label and keeps `keys list` readable.
pub const MAX_KEY_NAME_BYTES: usize = 64;

/// Version of the `api_keys.json` layout.
const FILE_VERSION: u32 = 1;

/// Name given to the entry for [`ENV_VAR`].
const ENV_KEY_NAME: &str = "from RICOCHET_API_KEY";

/// Name given to the key generated on first start.
const BOOTSTRAP_KEY_NAME: &str = "bootstrap";

/// Public identifier of an API key: up to [`KEY_ID_BYTES`] ASCII letters and digits. `Copy`
/// and allocation-free, so it can key rate limiters and idempotency scopes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId {
    len: u8,
    bytes: [u8; KEY_ID_BYTES],
}

impl KeyId {
    /// Parses 1..=[`KEY_ID_BYTES`] ASCII letters or digits.
    pub fn parse(id: &str) -> Option<KeyId> {
        KeyId::from_bytes(id.as_bytes())
    }

    fn from_bytes(id: &[u8]) -> Option<KeyId> {
        if id.is_empty() || id.len() > KEY_ID_BYTES || !id.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        let mut bytes = [0; KEY_ID_BYTES];
        bytes[..id.len()].copy_from_slice(id);
        Some(KeyId {
            len: id.len() as u8,
            bytes,
        })
    }

    /// The author a link created with this key records (the same 1 to 8 letters or digits).
    pub fn author(&self) -> shards::link::Author {
        shards::link::Author::from_id(self.as_str()).expect("a key id is a valid author")
    }

    /// The id's bytes, zero-padded, as one word: never 0 (an id has at least one byte), so it
    /// can key a lock-free table (`ratelimit::RateLimiter`).
    pub fn to_u64(self) -> u64 {
        u64::from_le_bytes(self.bytes)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII alphanumerics are ever stored (see `from_bytes`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("key id is ASCII")
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({})", self.as_str())
    }
}

/// What `keys list` shows about a key (never the secret or its hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyInfo {
    /// Public id.
    pub id: KeyId,
    /// Operator-given label.
    pub name: String,
    /// Unix second of creation.
    pub created_at_s: u64,
    /// Unix second of revocation; `None` while the key is active.
    pub revoked_at_s: Option<u64>,
    /// What the key may do and reach.
    pub role: Role,
    /// Its own create limits (`None`: the server's).
    pub limits: Option<RateLimitConfig>,
}

/// An API request's verified key: its id and role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub id: KeyId,
    pub role: Arc<Role>,
    /// The key's own create limits (`None`: the server's).
    pub limits: Option<RateLimitConfig>,
}

impl Caller {
    /// The author the key's creates record.
    pub fn author(&self) -> shards::link::Author {
        self.id.author()
    }
}

/// Errors of the key store. The `Display` text is meant for the operator.
#[derive(Debug, thiserror::Error)]
pub enum KeyStoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: corrupt key store: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error("no API key with id {0:?}")]
    UnknownId(String),
    #[error("invalid key name: {0}")]
    BadName(String),
    #[error("invalid {ENV_VAR}: {0}")]
    BadEnvKey(String),
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    hash: [u8; 32],
    created_at_s: u64,
    revoked_at_s: Option<u64>,
    role: Arc<Role>,
    limits: Option<RateLimitConfig>,
}

type Entries = HashMap<KeyId, Entry>;

/// The API keys of one data directory, loaded in memory for verification.
#[derive(Clone, Debug)]
pub struct ApiKeyStore {
    dir: PathBuf,
    entries: Entries,
    /// Fleet mode with the fleet's keys not read yet (the database has not answered since
    /// start): a token that matches no key here may still be a fleet key.
    fleet_unread: bool,
}

impl ApiKeyStore {
    /// Loads `<dir>/api_keys.json`; a missing file is an empty store.
    pub fn load(dir: &Path) -> Result<ApiKeyStore, KeyStoreError> {
        Ok(ApiKeyStore {
            dir: dir.to_owned(),
            entries: read_entries(&dir.join(API_KEYS_FILE))?,
            fleet_unread: false,
        })
    }

    /// Creates a key labelled `name` and persists its hash. Returns its id and the plaintext
    /// key, which exists nowhere else: show it to the operator once.
    pub fn create(&mut self, name: &str, role: Role) -> Result<(KeyId, String), KeyStoreError> {
        self.create_limited(name, role, None)
    }

    /// [`Self::create`], with create limits of the key's own.
    pub fn create_limited(
        &mut self,
        name: &str,
        role: Role,
        limits: Option<RateLimitConfig>,
    ) -> Result<(KeyId, String), KeyStoreError> {
        validate_name(name)?;
        let role = Arc::new(role);
        let now = now_s();
        self.mutate(|entries| {
            let id = loop {
                let candidate: String = random_base62(KEY_ID_BYTES);
                let id = KeyId::parse(&candidate).expect("base62 id is valid");
                if !entries.contains_key(&id) {
                    break id;
                }
            };
            let plaintext = format!("{KEY_PREFIX}{id}_{}", random_base62(KEY_SECRET_BYTES));
            entries.insert(
                id,
                Entry {
                    name: name.to_owned(),
                    hash: sha256(plaintext.as_bytes()),
                    created_at_s: now,
                    revoked_at_s: None,
                    role: role.clone(),
                    limits,
                },
            );
            Ok((id, plaintext))
        })
    }

    /// All keys, oldest first.
    pub fn list(&self) -> Vec<ApiKeyInfo> {
        let mut out: Vec<ApiKeyInfo> = self
            .entries
            .iter()
            .map(|(id, e)| ApiKeyInfo {
                id: *id,
                name: e.name.clone(),
                created_at_s: e.created_at_s,
                revoked_at_s: e.revoked_at_s,
                role: (*e.role).clone(),
                limits: e.limits,
            })
            .collect();
        out.sort_by_key(|a| (a.created_at_s, a.id));
        out
    }

    /// Revokes key `id` for good. Returns `false` if it was already revoked.
    pub fn revoke(&mut self, id: &str) -> Result<bool, KeyStoreError> {
        let key_id = KeyId::parse(id).ok_or_else(|| KeyStoreError::UnknownId(id.to_owned()))?;
        let now = now_s();
        self.mutate(|entries| {
            let entry = entries
                .get_mut(&key_id)
                .ok_or_else(|| KeyStoreError::UnknownId(id.to_owned()))?;
            if entry.revoked_at_s.is_some() {
                return Ok(false);
            }
            entry.revoked_at_s = Some(now);
            Ok(true)
        })
    }

    /// This store with the fleet's keys added (fleet mode: `ricochet_api_keys`, read by the
    /// key watcher; `None`: not read yet). A fleet key replaces a local key of the same id.
    /// The result is for verification only: fleet keys are never written to `api_keys.json`.
    pub fn with_fleet_keys(mut self, keys: Option<&[fleet::keys::FleetKey]>) -> ApiKeyStore {
        self.fleet_unread = keys.is_none();
        for k in keys.unwrap_or_default() {
            let Some(id) = KeyId::parse(&k.id) else {
                continue;
            };
            // A role that does not read is never taken for admin: the key is left out.
            let role = serde_json::from_str::<Role>(&k.role);
            let limits = k
                .create_limit
                .as_deref()
                .map(serde_json::from_str::<RateLimitConfig>)
                .transpose();
            let (Ok(role), Ok(limits)) = (role, limits) else {
                eprintln!(
                    "fleet API key {} has a role or create limit this node cannot read; \
                     it is not accepted here",
                    k.id
                );
                continue;
            };
            let entry = Entry {
                name: k.name.clone(),
                hash: k.hash,
                created_at_s: k.created_at_s,
                revoked_at_s: k.revoked_at_s,
                role: Arc::new(role),
                limits,
            };
            self.entries.insert(id, entry);
        }
        self
    }

    /// Whether a token [`Self::verify`] refused may still be valid: the fleet's keys were not
    /// read yet (the caller answers 503, not 401).
    pub fn fleet_keys_unread(&self) -> bool {
        self.fleet_unread
    }

    /// Number of keys that are not revoked.
    pub fn active_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.revoked_at_s.is_none())
            .count()
    }

    /// The id of the active key `bearer` (the token after `Bearer `), or `None`. A token of
    /// the form `rk_<id>_...` is checked against key `<id>`; every token is also checked
    /// against the [`ENV_KEY_ID`] key, whose format is the operator's choice. At most two
    /// constant-time hash comparisons; whether an id exists may show in timing, but ids are
    /// not secret.
    pub fn verify(&self, bearer: &[u8]) -> Option<Caller> {
        let hash = sha256(bearer);
        let by_id = bearer
            .strip_prefix(KEY_PREFIX.as_bytes())
            .and_then(|rest| rest.split(|&b| b == b'_').next())
            .and_then(KeyId::from_bytes)
            .and_then(|id| self.entries.get_key_value(&id));
        let env = KeyId::parse(ENV_KEY_ID).and_then(|id| self.entries.get_key_value(&id));
        [by_id, env]
            .into_iter()
            .flatten()
            .find(|(_, e)| e.revoked_at_s.is_none() && bool::from(e.hash.ct_eq(&hash)))
            .map(|(id, e)| Caller {
                id: *id,
                role: e.role.clone(),
                limits: e.limits,
            })
    }

    /// Prepares the key store of `dir` at server start. `env_key` is the value of
    /// [`ENV_VAR`], if set.
    ///
    /// - `Some(key)`: `key` is accepted from now on, stored (hashed) under id [`ENV_KEY_ID`],
    ///   replacing and un-revoking an earlier env key: the variable is authoritative.
    /// - `None`: an active [`ENV_KEY_ID`] key is revoked (the operator removed the variable).
    ///   Then, if no key is active, a new key named `bootstrap` is generated and its plaintext
    ///   returned so the caller prints it once; the server is never left with no usable key.
    pub fn bootstrap(dir: &Path, env_key: Option<String>) -> Result<Option<String>, KeyStoreError> {
        let mut store = ApiKeyStore::load(dir)?;
        let env_id = KeyId::parse(ENV_KEY_ID).expect("ENV_KEY_ID is a valid id");
        match env_key {
            Some(key) => {
                validate_env_key(&key)?;
                let hash = sha256(key.as_bytes());
                let current = store.entries.get(&env_id);
                if current.is_some_and(|e| e.revoked_at_s.is_none() && e.hash == hash) {
                    return Ok(None);
                }
                let now = now_s();
                store.mutate(|entries| {
                    entries.insert(
                        env_id,
                        Entry {
                            name: ENV_KEY_NAME.to_owned(),
                            hash,
                            created_at_s: now,
                            revoked_at_s: None,
                            role: Arc::default(),
                            limits: None,
                        },
                    );
                    Ok(())
                })?;
                Ok(None)
            }
            None => {
                if store
                    .entries
                    .get(&env_id)
                    .is_some_and(|e| e.revoked_at_s.is_none())
                {
                    store.revoke(ENV_KEY_ID)?;
                }
                if store.active_count() > 0 {
                    return Ok(None);
                }
                let (_, plaintext) = store.create(BOOTSTRAP_KEY_NAME, Role::default())?;
                Ok(Some(plaintext))
            }
        }
    }

    /// Applies `change` to the on-disk state under the store lock, persists it, and adopts it.
    fn mutate<T>(
        &mut self,
        change: impl FnOnce(&mut Entries) -> Result<T, KeyStoreError>,
    ) -> Result<T, KeyStoreError> {
        fs::create_dir_all(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        let lock_path = self.dir.join(API_KEYS_LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| io_err(&lock_path, e))?;
        shards::durable::lock_exclusive(&lock).map_err(|e| io_err(&lock_path, e))?;
        let path = self.dir.join(API_KEYS_FILE);
        let mut entries = read_entries(&path)?;
        let out = change(&mut entries)?;
        write_entries(&self.dir, &entries)?;
        self.entries = entries;
        // Dropping `lock` closes it, which releases the flock.
        drop(lock);
        Ok(out)
    }
}

/// Which `ricochet keys` subcommand to run.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
pub enum KeysCommand {
    /// Create an API key and print it (once: only its hash is stored).
    Create {
        /// A label for the key, e.g. who or what uses it.
        name: String,
        #[command(flatten)]
        role: RoleArgs,
    },
    /// List API keys (ids, names, dates; never secrets).
    List,
    /// Revoke an API key for good.
    Revoke {
        /// The key's id (the part between `rk_` and the next `_`).
        id: String,
    },
}

/// Runs a `ricochet keys` subcommand against the store in `data_dir`, printing to stdout.
pub fn run_keys_command(data_dir: &Path, cmd: KeysCommand) -> anyhow::Result<()> {
    let stdout = io::stdout();
    run_keys_command_to(data_dir, cmd, &mut stdout.lock())
}

fn run_keys_command_to(
    data_dir: &Path,
    cmd: KeysCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut store = ApiKeyStore::load(data_dir)?;
    match cmd {
        KeysCommand::Create { name, role } => {
            let (role, limits) = role.parse()?;
            create_key(&mut store, data_dir, &name, (role, limits), out)?;
        }
        KeysCommand::List => {
            let keys = store.list();
            if keys.is_empty() {
                writeln!(out, "No API keys.")?;
                return Ok(());
            }
            let name_w = keys
                .iter()
                .map(|k| k.name.chars().count())
                .max()
                .unwrap_or(0)
                .max("NAME".len());
            writeln!(
                out,
                "{:<id_w$}  {:<name_w$}  {:<20}  {:<22}  ROLE",
                "ID",
                "NAME",
                "CREATED",
                "STATUS",
                id_w = KEY_ID_BYTES
            )?;
            for k in keys {
                let status = match k.revoked_at_s {
                    Some(t) => format!("revoked {}", format_rfc3339_utc(t)),
                    None => "active".to_owned(),
                };
                writeln!(
                    out,
                    "{:<id_w$}  {:<name_w$}  {:<20}  {status:<22}  {}",
                    k.id.as_str(),
                    k.name,
                    format_rfc3339_utc(k.created_at_s),
                    k.role.describe(),
                    id_w = KEY_ID_BYTES
                )?;
            }
        }
        KeysCommand::Revoke { id } => {
            if store.revoke(&id)? {
                writeln!(out, "Revoked API key {id}.")?;
            } else {
                writeln!(out, "API key {id} was already revoked.")?;
            }
        }
    }
    Ok(())
}

/// `ricochet keys create`: makes the key and shows its plaintext, once.
fn create_key(
    store: &mut ApiKeyStore,
    data_dir: &Path,
    name: &str,
    (role, limits): (Role, Option<RateLimitConfig>),
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    // Keys made before the first `serve` are a data dir's first data: make the dir (as
    // `serve` would) so its start does not take the key file for a dir that lost its manifest.
    shards::datadir::DataDir::open_or_create(data_dir)?;
    let described = role.describe();
    let (id, plaintext) = store.create_limited(name, role, limits)?;
    let limited = limits.map_or(String::new(), |l| {
        format!(", {} creates/s, burst {}", l.per_second, l.burst)
    });
    writeln!(
        out,
        "Created API key {id} ({name}), role {described}{limited}:"
    )?;
    writeln!(out)?;
    writeln!(out, "    {plaintext}")?;
    writeln!(out)?;
    writeln!(
        out,
        "Store it now: it will not be shown again (only its hash is kept)."
    )?;
    writeln!(
        out,
        "A running server picks up the change within about a second."
    )?;
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct FileV1 {
    version: u32,
    keys: Vec<FileEntry>,
}

#[derive(Serialize, Deserialize)]
struct FileEntry {
    id: String,
    name: String,
    /// SHA-256 of the whole key, lowercase hex.
    hash: String,
    created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revoked_at: Option<String>,
    /// Absent for an admin key (every key written before roles).
    #[serde(default, skip_serializing_if = "Role::is_admin")]
    role: Role,
    /// The key's own create limits; absent: the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    create_limit: Option<RateLimitConfig>,
}

fn read_entries(path: &Path) -> Result<Entries, KeyStoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Entries::new()),
        Err(e) => return Err(io_err(path, e)),
    };
    let corrupt = |detail: String| KeyStoreError::Corrupt {
        path: path.to_owned(),
        detail,
    };
    let file: FileV1 = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if file.version != FILE_VERSION {
        return Err(corrupt(format!("unsupported version {}", file.version)));
    }
    let mut entries = Entries::with_capacity(file.keys.len());
    for k in file.keys {
        let id = KeyId::parse(&k.id).ok_or_else(|| corrupt(format!("bad id {:?}", k.id)))?;
        let hash = decode_hex32(&k.hash)
            .ok_or_else(|| corrupt(format!("key {id}: hash is not 64 hex digits")))?;
        let created_at_s = parse_rfc3339_s(&k.created_at)
            .map_err(|e| corrupt(format!("key {id}: created_at: {e}")))?;
        let revoked_at_s = k
            .revoked_at
            .as_deref()
            .map(parse_rfc3339_s)
            .transpose()
            .map_err(|e| corrupt(format!("key {id}: revoked_at: {e}")))?;
        let entry = Entry {
            name: k.name,
            hash,
            created_at_s,
            revoked_at_s,
            role: Arc::new(k.role),
            limits: k
                .create_limit
                .map(RateLimitConfig::validate)
                .transpose()
                .map_err(|e| corrupt(format!("key {id}: create_limit: {e}")))?,
        };
        if entries.insert(id, entry).is_some() {
            return Err(corrupt(format!("key id {id} appears twice")));
        }
    }
    Ok(entries)
}

fn write_entries(dir: &Path, entries: &Entries) -> Result<(), KeyStoreError> {
    let mut keys: Vec<(&KeyId, &Entry)> = entries.iter().collect();
    keys.sort_by_key(|(id, e)| (e.created_at_s, **id));
    let file = FileV1 {
        version: FILE_VERSION,
        keys: keys
            .into_iter()
            .map(|(id, e)| FileEntry {
                id: id.as_str().to_owned(),
                name: e.name.clone(),
                hash: encode_hex(&e.hash),
                created_at: format_rfc3339_utc(e.created_at_s),
                revoked_at: e.revoked_at_s.map(format_rfc3339_utc),
                role: (*e.role).clone(),
                create_limit: e.limits,
            })
            .collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file).expect("key file serializes");
    bytes.push(b'\n');
    write_atomically(dir, API_KEYS_FILE, &bytes)
}

/// Replaces `dir/name` with `bytes` (mode 0600) so that a crash leaves either the old or the
/// new file: temp file, fsync, rename, directory fsync (`shards::durable::write_atomic`).
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), KeyStoreError> {
    shards::durable::write_atomic(dir, name, bytes, 0o600).map_err(|e| io_err(&dir.join(name), e))
}

fn validate_name(name: &str) -> Result<(), KeyStoreError> {
    if name.trim().is_empty() {
        return Err(KeyStoreError::BadName("name is empty".into()));
    }
    if name.len() > MAX_KEY_NAME_BYTES {
        return Err(KeyStoreError::BadName(format!(
            "name is longer than {MAX_KEY_NAME_BYTES} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(KeyStoreError::BadName(
            "name contains a control character".into(),
        ));
    }
    Ok(())
}

fn validate_env_key(key: &str) -> Result<(), KeyStoreError> {
    if key.len() < MIN_ENV_KEY_BYTES {
        return Err(KeyStoreError::BadEnvKey(format!(
            "shorter than {MIN_ENV_KEY_BYTES} characters"
        )));
    }
    if key.len() > MAX_ENV_KEY_BYTES {
        return Err(KeyStoreError::BadEnvKey(format!(
            "longer than {MAX_ENV_KEY_BYTES} bytes"
        )));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(KeyStoreError::BadEnvKey(
            "may contain only visible ASCII characters (no spaces)".into(),
        ));
    }
    Ok(())
}

/// A new fleet key (`ricochet fleet keys create`): its id, its plaintext (shown once) and the
/// SHA-256 the database stores, in the format `verify` checks.
pub fn new_fleet_key(
    name: &str,
    (role, limits): (Role, Option<RateLimitConfig>),
) -> Result<(fleet::keys::FleetKey, String), KeyStoreError> {
    validate_name(name)?;
    let id = random_base62(KEY_ID_BYTES);
    let plaintext = format!("{KEY_PREFIX}{id}_{}", random_base62(KEY_SECRET_BYTES));
    let key = fleet::keys::FleetKey {
        id,
        name: name.to_owned(),
        hash: sha256(plaintext.as_bytes()),
        created_at_s: now_s(),
        revoked_at_s: None,
        role: serde_json::to_string(&role).expect("a role serializes"),
        create_limit: limits.map(|l| serde_json::to_string(&l).expect("limits serialize")),
    };
    Ok((key, plaintext))
}

fn random_base62(len: usize) -> String {
    OsRng
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

fn decode_hex32(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let nibble = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

fn io_err(path: &Path, source: io::Error) -> KeyStoreError {
    KeyStoreError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn key_id_parsing() {
        assert_eq!(KeyId::parse("aB3xZ9k0").unwrap().as_str(), "aB3xZ9k0");
        assert_eq!(KeyId::parse("env").unwrap().to_string(), "env");
        assert!(KeyId::parse("").is_none());
        assert!(KeyId::parse("123456789").is_none());
        assert!(KeyId::parse("a_b").is_none());
        assert!(KeyId::parse("a-b").is_none());
    }

    #[test]
    fn created_key_verifies_and_persists_only_a_hash() {
        let dir = tmp();
        let mut store = ApiKeyStore::load(dir.path()).unwrap();
        let (id, key) = store.create("ci", Role::default()).unwrap();
        assert!(key.starts_with(&format!("rk_{id}_")));
        assert_eq!(key.len(), 3 + KEY_ID_BYTES + 1 + KEY_SECRET_BYTES);
        assert!(key[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        assert_eq!(store.verify(key.as_bytes()).map(|c| c.id), Some(id));

        let text = fs::read_to_string(dir.path().join(API_KEYS_FILE)).unwrap();
        let secret = &key[key.len() - KEY_SECRET_BYTES..];
        assert!(!text.contains(secret));
        assert!(text.contains(&encode_hex(&sha256(key.as_bytes()))));
        let mode = fs::metadata(dir.path().join(API_KEYS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!dir.path().join("api_keys.json.tmp").exists());

        let reloaded = ApiKeyStore::load(dir.path()).unwrap();
        assert_eq!(reloaded.verify(key.as_bytes()).map(|c| c.id), Some(id));
        assert_eq!(reloaded.list(), store.list());
        assert_eq!(reloaded.list()[0].name, "ci");
    }

    #[test]
    fn wrong_keys_are_refused() {
        let dir = tmp();
        let mut store = ApiKeyStore::load(dir.path()).unwrap();
        let (id_a, key_a) = store.create("a", Role::default()).unwrap();
        let (_, key_b) = store.create("b", Role::default()).unwrap();
        let mut flipped = key_a.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'x' { b'y' } else { b'x' };
        assert_eq!(store.verify(&flipped).map(|c| c.id), None);
        // Key a's id with key b's secret.
        let spliced = format!("rk_{id_a}_{}", &key_b[key_b.len() - KEY_SECRET_BYTES..]);
        assert_eq!(store.verify(spliced.as_bytes()).map(|c| c.id), None);
        assert_eq!(
            store
                .verify(&key_a.as_bytes()[..key_a.len() - 1])
                .map(|c| c.id),
            None
        );
        for junk in [&b""[..], b"rk_", b"rk__", b"Bearer x", b"rk_zzzzzzzz_abc"] {
            assert_eq!(store.verify(junk).map(|c| c.id), None);
        }
        assert!(store.verify(key_b.as_bytes()).is_some());
    }

    #[test]
    fn revoke_disables_and_persists() {
        let dir = tmp();
        let mut store = ApiKeyStore::load(dir.path()).unwrap();
        let (id, key) = store.create("gone", Role::default()).unwrap();
        let (_, other) = store.create("kept", Role::default()).unwrap();
        assert!(store.revoke(id.as_str()).unwrap());
        assert_eq!(store.verify(key.as_bytes()).map(|c| c.id), None);
        assert!(store.verify(other.as_bytes()).is_some());
        assert!(!store.revoke(id.as_str()).unwrap());
        assert!(matches!(
            store.revoke("nope1234"),
            Err(KeyStoreError::UnknownId(_))
        ));
        assert!(matches!(
            store.revoke("n/a"),
            Err(KeyStoreError::UnknownId(_))
        ));

        let reloaded = ApiKeyStore::load(dir.path()).unwrap();
        assert_eq!(reloaded.verify(key.as_bytes()).map(|c| c.id), None);
        let info = reloaded.list().into_iter().find(|k| k.id == id).unwrap();
        assert!(info.revoked_at_s.is_some());
        assert_eq!(reloaded.active_count(), 1);
    }

    #[test]
    fn bad_names_are_refused() {
        let dir = tmp();
        let mut store = ApiKeyStore::load(dir.path()).unwrap();
        for bad in ["", "  ", "a\nb", &"n".repeat(MAX_KEY_NAME_BYTES + 1)] {
            assert!(matches!(
                store.create(bad, Role::default()),
                Err(KeyStoreError::BadName(_))
            ));
        }
        assert!(store
            .create(&"n".repeat(MAX_KEY_NAME_BYTES), Role::default())
            .is_ok());
    }

    #[test]
    fn changes_from_two_handles_are_both_kept() {
        // Two processes (server bootstrap and the CLI, say) each loaded the store earlier.
        let dir = tmp();
        let mut a = ApiKeyStore::load(dir.path()).unwrap();
        let mut b = ApiKeyStore::load(dir.path()).unwrap();
        let (_, key_a) = a.create("a", Role::default()).unwrap();
        let (_, key_b) = b.create("b", Role::default()).unwrap();
        let fresh = ApiKeyStore::load(dir.path()).unwrap();
        assert_eq!(fresh.list().len(), 2);
        assert!(fresh.verify(key_a.as_bytes()).is_some());
        assert!(fresh.verify(key_b.as_bytes()).is_some());
        assert!(b.verify(key_a.as_bytes()).is_some());
    }

    #[test]
    fn bootstrap_generates_once() {
        let dir = tmp();
        let key = ApiKeyStore::bootstrap(dir.path(), None).unwrap().unwrap();
        let store = ApiKeyStore::load(dir.path()).unwrap();
        let id = store.verify(key.as_bytes()).unwrap().id;
        assert_eq!(store.list()[0].name, BOOTSTRAP_KEY_NAME);
        assert_eq!(ApiKeyStore::bootstrap(dir.path(), None).unwrap(), None);

        // All keys revoked: the next start mints a fresh one.
        let mut store = ApiKeyStore::load(dir.path()).unwrap();
        store.revoke(id.as_str()).unwrap();
        let again = ApiKeyStore::bootstrap(dir.path(), None).unwrap().unwrap();
        assert_ne!(again, key);
        let store = ApiKeyStore::load(dir.path()).unwrap();
        assert!(store.verify(again.as_bytes()).is_some());
        assert_eq!(store.verify(key.as_bytes()).map(|c| c.id), None);
    }

    #[test]
    fn bootstrap_with_env_key() {
        let dir = tmp();
        let env1 = "operator-chosen-secret-1".to_owned();
        let env2 = "rk_env_operator-chosen-2".to_owned();
        assert_eq!(
            ApiKeyStore::bootstrap(dir.path(), Some(env1.clone())).unwrap(),
            None
        );
        let store = ApiKeyStore::load(dir.path()).unwrap();
        assert_eq!(
            store.verify(env1.as_bytes()).map(|c| c.id.to_string()),
            Some(ENV_KEY_ID.to_owned())
        );
        assert_eq!(store.list().len(), 1);

        // Same key again: nothing changes on disk.
        let before = fs::read(dir.path().join(API_KEYS_FILE)).unwrap();
        ApiKeyStore::bootstrap(dir.path(), Some(env1.clone())).unwrap();
        assert_eq!(fs::read(dir.path().join(API_KEYS_FILE)).unwrap(), before);

        // A new value replaces the old one.
        ApiKeyStore::bootstrap(dir.path(), Some(env2.clone())).unwrap();
        let store = ApiKeyStore::load(dir.path()).unwrap();
        assert_eq!(store.verify(env1.as_bytes()).map(|c| c.id), None);
        assert!(store.verify(env2.as_bytes()).is_some());

        // Variable removed: the env key is revoked and, with nothing else active, a key is
        // generated.
        let generated = ApiKeyStore::bootstrap(dir.path(), None).unwrap().unwrap();
        let store = ApiKeyStore::load(dir.path()).unwrap();
        assert_eq!(store.verify(env2.as_bytes()).map(|c| c.id), None);
        assert!(store.verify(generated.as_bytes()).is_some());

        // Variable set again: accepted again (un-revoked), the generated key still works.
        ApiKeyStore::bootstrap(dir.path(), Some(env2.clone())).unwrap();
        let store = ApiKeyStore::load(dir.path()).unwrap();
        assert!(store.verify(env2.as_bytes()).is_some());
        assert!(store.verify(generated.as_bytes()).is_some());
    }

    #[test]
    fn bootstrap_refuses_weak_env_keys() {
        let dir = tmp();
        for bad in [
            "short".to_owned(),
            "has a space in the middle".to_owned(),
            "x".repeat(MAX_ENV_KEY_BYTES + 1),
            "tab\tseparated-secret-value".to_owned(),
        ] {
            assert!(matches!(
                ApiKeyStore::bootstrap(dir.path(), Some(bad)),
                Err(KeyStoreError::BadEnvKey(_))
            ));
        }
        assert!(!dir.path().join(API_KEYS_FILE).exists());
    }

    #[test]
    fn corrupt_files_are_errors() {
        let good_hash = "ab".repeat(32);
        let cases = [
            "not json".to_owned(),
            r#"{"version":2,"keys":[]}"#.to_owned(),
            format!(r#"{{"version":1,"keys":[{{"id":"a_b","name":"n","hash":"{good_hash}","created_at":"2030-01-01T00:00:00Z"}}]}}"#),
            r#"{"version":1,"keys":[{"id":"ab","name":"n","hash":"zz","created_at":"2030-01-01T00:00:00Z"}]}"#.to_owned(),
            format!(r#"{{"version":1,"keys":[{{"id":"ab","name":"n","hash":"{good_hash}","created_at":"yesterday"}}]}}"#),
            format!(r#"{{"version":1,"keys":[{{"id":"ab","name":"n","hash":"{good_hash}","created_at":"2030-01-01T00:00:00Z"}},{{"id":"ab","name":"m","hash":"{good_hash}","created_at":"2030-01-01T00:00:00Z"}}]}}"#),
        ];
        for text in cases {
            let dir = tmp();
            fs::write(dir.path().join(API_KEYS_FILE), &text).unwrap();
            let err = ApiKeyStore::load(dir.path()).unwrap_err();
            assert!(
                matches!(err, KeyStoreError::Corrupt { .. }),
                "{text}: {err}"
            );
            // A mutation must not overwrite a file it cannot read.
            assert!(ApiKeyStore::bootstrap(dir.path(), None).is_err());
            assert_eq!(
                fs::read_to_string(dir.path().join(API_KEYS_FILE)).unwrap(),
                text
            );
        }
    }

    #[test]
    fn hex_round_trip() {
        let h = sha256(b"abc");
        assert_eq!(
            encode_hex(&h),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(decode_hex32(&encode_hex(&h)), Some(h));
        assert_eq!(decode_hex32(&encode_hex(&h).to_uppercase()), Some(h));
        assert_eq!(decode_hex32("00"), None);
    }

    #[test]
    fn cli_keys_with_roles() {
        let dir = tmp();
        let run = |cmd: KeysCommand| {
            let mut out = Vec::new();
            run_keys_command_to(dir.path(), cmd, &mut out).map(|()| String::from_utf8(out).unwrap())
        };
        let made = run(KeysCommand::Create {
            name: "team a".into(),
            role: RoleArgs {
                author_only: true,
                domains: vec!["Go.Brand.com".into()],
                read_only: true,
                create_rate: Some(5),
                create_burst: Some(7),
            },
        })
        .unwrap();
        assert!(
            made.contains(
                "role author-only, domain-only (go.brand.com), read-only, 5 creates/s, burst 7"
            ),
            "{made}"
        );
        let listed = run(KeysCommand::List).unwrap();
        assert!(
            listed
                .lines()
                .find(|l| l.contains("team a"))
                .unwrap()
                .ends_with("author-only, domain-only (go.brand.com), read-only"),
            "{listed}"
        );
        // The role is kept in the file and comes back with the key.
        let store = ApiKeyStore::load(dir.path()).unwrap();
        let team = store
            .list()
            .into_iter()
            .find(|k| k.name == "team a")
            .unwrap();
        assert_eq!(
            team.role,
            Role::new(true, true, &["go.brand.com".into()]).unwrap()
        );
        let limits = RateLimitConfig {
            per_second: 5,
            burst: 7,
        };
        assert_eq!(team.limits, Some(limits));
        let bad = run(KeysCommand::Create {
            name: "bad".into(),
            role: RoleArgs {
                author_only: false,
                domains: vec!["not a host".into()],
                read_only: false,
                create_rate: None,
                create_burst: None,
            },
        })
        .unwrap_err()
        .to_string();
        assert!(bad.contains("--domain \"not a host\""), "{bad}");
    }

    #[test]
    fn cli_create_list_revoke() {
        let dir = tmp();
        let run = |cmd: KeysCommand| {
            let mut out = Vec::new();
            run_keys_command_to(dir.path(), cmd, &mut out).map(|()| String::from_utf8(out).unwrap())
        };
        let created = run(KeysCommand::Create {
            name: "deploy bot".into(),
            role: RoleArgs {
                author_only: false,
                domains: Vec::new(),
                read_only: false,
                create_rate: None,
                create_burst: None,
            },
        })
        .unwrap();
        let key = created
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(KEY_PREFIX))
            .unwrap()
            .to_owned();
        assert!(created.contains("not be shown again"));
        let store = ApiKeyStore::load(dir.path()).unwrap();
        let id = store.verify(key.as_bytes()).unwrap().id;

        let listed = run(KeysCommand::List).unwrap();
        assert!(listed.starts_with("ID"), "{listed}");
        let row = listed.lines().nth(1).unwrap();
        assert!(
            row.starts_with(id.as_str()) && row.contains("deploy bot"),
            "{listed}"
        );
        assert!(row.contains("active") && row.ends_with("admin"), "{listed}");

        assert!(!listed.contains(&key[key.len() - KEY_SECRET_BYTES..]));

        let revoked = run(KeysCommand::Revoke { id: id.to_string() }).unwrap();
        assert_eq!(revoked, format!("Revoked API key {id}.\n"));
        assert!(run(KeysCommand::List).unwrap().contains("revoked 2"));
        let again = run(KeysCommand::Revoke { id: id.to_string() }).unwrap();
        assert!(again.contains("already revoked"));
        let err = run(KeysCommand::Revoke {
            id: "missing1".into(),
        })
        .unwrap_err();
        assert!(err.to_string().contains("missing1"));

        let empty = tmp();
        let mut out = Vec::new();
        run_keys_command_to(empty.path(), KeysCommand::List, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "No API keys.\n");
    }
}
