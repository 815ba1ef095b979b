//! `ricochet fleet ...`: the operator commands (schema, namespaces, API keys, domains,
//! tombstones).

use anyhow::bail;

/// `ricochet fleet ...`.
#[derive(clap::Subcommand)]
pub enum FleetCommand {
    /// Create or upgrade the fleet schema and the fleet's key-space secret (idempotent).
    Init {
        /// PostgreSQL URL of the primary, e.g. postgres://ricochet@db:5432/ricochet
        #[arg(long)]
        pg: String,
    },
    /// Manage namespaces: disjoint ID ranges, one per region or fleet.
    Namespace {
        #[command(subcommand)]
        cmd: NamespaceCommand,
    },
    /// API keys shared by every node of the fleet (each node reads them about once a second).
    Keys {
        #[command(subcommand)]
        cmd: FleetKeysCommand,
    },
    /// The fleet's domains, each its own keyspace chosen by `Host` (every node follows the
    /// table within about a second; the same rules as `ricochet domains`).
    Domains {
        #[arg(long)]
        pg: String,
        #[command(subcommand)]
        cmd: crate::api::domains::DomainsCommand,
    },
    /// The fleet's abuse blocklist: hosts, host/path prefixes and exact URLs no link may
    /// redirect to (every node follows the table within about a second, with its own
    /// `--blocklist` file if it has one).
    Blocklist {
        #[arg(long)]
        pg: String,
        #[command(subcommand)]
        cmd: super::blocklist::BlocklistCommand,
    },
    /// Remove tombstones (deleted links) last changed more than --older-than-s seconds ago,
    /// raising the tombstone horizon past them; nodes do this on their own for tombstones
    /// older than 7 days. A node whose feed is not past the horizon bootstraps again.
    GcTombstones {
        #[arg(long)]
        pg: String,
        /// Age in seconds (default: 7 days).
        #[arg(long, default_value_t = fleet::feed::TOMBSTONE_RETENTION_DAYS * 86_400)]
        older_than_s: u64,
    },
    /// Runbook: raise a namespace's next_id past every ID any node may hold (never lowers).
    RaiseNextId {
        #[arg(long)]
        pg: String,
        /// Namespace name.
        name: String,
        /// New next_id.
        #[arg(long)]
        to: u64,
    },
}

#[derive(clap::Subcommand)]
pub enum FleetKeysCommand {
    /// Create a key; its plaintext is printed once and stored nowhere (only its SHA-256).
    Create {
        #[arg(long)]
        pg: String,
        /// A label for the key (1 to 64 visible ASCII characters).
        name: String,
        #[command(flatten)]
        role: crate::api::roles::RoleArgs,
    },
    /// List the keys (ids, names, times; never secrets).
    List {
        #[arg(long)]
        pg: String,
    },
    /// Revoke a key on every node (within about a second).
    Revoke {
        #[arg(long)]
        pg: String,
        id: String,
    },
}

#[derive(clap::Subcommand)]
pub enum NamespaceCommand {
    /// Create a namespace owning IDs [lo, hi) (again with the same range: no-op).
    Create {
        #[arg(long)]
        pg: String,
        name: String,
        #[arg(long)]
        lo: u64,
        #[arg(long)]
        hi: u64,
    },
    /// Show a namespace: range, next_id and what its audit says.
    Show {
        #[arg(long)]
        pg: String,
        name: String,
    },
}

/// Runs a `ricochet fleet` command, printing what it did.
pub fn run_command(cmd: FleetCommand) -> anyhow::Result<()> {
    match cmd {
        FleetCommand::Init { pg } => {
            // Reached within the usual bound first: the long one is for the migrations only.
            fleet::schema_version(&mut fleet::Db::new(&pg)?)?;
            let mut db = fleet::Db::new(&pg)?.with_timeout(fleet::MIGRATION_TIMEOUT_MS);
            let r = fleet::init(&mut db)?;
            println!(
                "fleet schema at {}: version {} -> {}; key-space secret {}",
                db.target(),
                r.from_version,
                r.to_version,
                if r.secret_created { "created" } else { "kept" }
            );
        }
        FleetCommand::Namespace {
            cmd: NamespaceCommand::Create { pg, name, lo, hi },
        } => {
            let mut db = fleet::Db::new(&pg)?;
            print_namespace(&fleet::create_namespace(&mut db, &name, lo, hi)?);
        }
        FleetCommand::Namespace {
            cmd: NamespaceCommand::Show { pg, name },
        } => {
            let mut db = fleet::Db::new(&pg)?;
            match fleet::show_namespace(&mut db, &name)? {
                Some(ns) => print_namespace(&ns),
                None => bail!("no namespace {name:?} in {}", db.target()),
            }
        }
        FleetCommand::Keys { cmd } => run_keys(cmd)?,
        FleetCommand::Domains { pg, cmd } => crate::api::domains::run_book_command(
            &mut super::domains::FleetBook(&mut fleet::Db::new(&pg)?),
            cmd,
        )?,
        FleetCommand::Blocklist { pg, cmd } => super::blocklist::run_command(&pg, cmd)?,
        FleetCommand::GcTombstones { pg, older_than_s } => {
            let mut db = fleet::Db::new(&pg)?;
            let mut total = 0;
            let horizon = loop {
                let (n, h) = fleet::feed::purge_tombstones(&mut db, older_than_s)?;
                total += n;
                if n < fleet::feed::TOMBSTONE_GC_BATCH as u64 {
                    break h;
                }
            };
            println!("removed {total} tombstones; tombstone horizon: transaction {horizon}");
        }
        FleetCommand::RaiseNextId { pg, name, to } => {
            let mut db = fleet::Db::new(&pg)?;
            print_namespace(&fleet::raise_next_id(&mut db, &name, to)?);
        }
    }
    Ok(())
}

fn print_namespace(ns: &fleet::NamespaceRow) {
    println!(
        "namespace {}: [{}, {}) next_id {} ({} IDs left); audit: {} intervals, {} IDs, highest end {}",
        ns.name,
        ns.lo,
        ns.hi,
        ns.next_id,
        ns.hi - ns.next_id,
        ns.audited_intervals,
        ns.audited_ids,
        ns.audited_max_end
    );
}

fn run_keys(cmd: FleetKeysCommand) -> anyhow::Result<()> {
    match cmd {
        FleetKeysCommand::Create { pg, name, role } => {
            let mut db = fleet::Db::new(&pg)?;
            let (role, limits) = role.parse()?;
            let described = role.describe();
            let (key, plaintext) = crate::api::keys::new_fleet_key(&name, (role, limits))?;
            fleet::keys::insert_key(&mut db, &key)?;
            eprintln!(
                "created fleet API key {} ({name}), role {described}; every node accepts it \
                 within about a second. The key (shown once, store it now):",
                key.id
            );
            println!("{plaintext}");
        }
        FleetKeysCommand::List { pg } => {
            let mut db = fleet::Db::new(&pg)?;
            for k in fleet::keys::list_keys(&mut db)? {
                let state = match k.revoked_at_s {
                    Some(t) => format!("revoked at {t}"),
                    None => "active".to_owned(),
                };
                let role = serde_json::from_str::<crate::api::roles::Role>(&k.role)
                    .map_or_else(|e| format!("unreadable role: {e}"), |r| r.describe());
                println!(
                    "{}\t{}\tcreated at {}\t{state}\t{role}",
                    k.id, k.name, k.created_at_s
                );
            }
        }
        FleetKeysCommand::Revoke { pg, id } => {
            let mut db = fleet::Db::new(&pg)?;
            match fleet::keys::revoke_key(&mut db, &id, crate::api::timefmt::now_s())? {
                Some(true) => println!(
                    "revoked fleet API key {id}; every node refuses it within about a second"
                ),
                Some(false) => println!("fleet API key {id} was already revoked"),
                None => bail!("no fleet API key {id:?} in {}", db.target()),
            }
        }
    }
    Ok(())
}
