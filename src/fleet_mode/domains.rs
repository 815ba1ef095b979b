//! The fleet's domains (issue 26): the domain book kept in PostgreSQL (`ricochet_domains`,
//! `fleet::domains`) instead of a data dir's `domains.json`, with the same rules and the same
//! commands (`ricochet fleet domains add|list|remove`).
//!
//! Every node reads the table at start and its key watcher reads it again about once a second
//! (`node::keywatch`), so a domain added or removed on one node's side answers on every node
//! within about a second. A node keeps the book it last read in its data dir
//! ([`FLEET_DOMAINS_CACHE_FILE`]): one that starts while the database does not answer serves
//! the links it holds on the domains it last knew, never all of them on the default domain.
//!
//! Links need nothing of their own: a link's identity is its stored key (the domain's number
//! and the key, `shards::link::stored_key`), which is what the fleet's tables, feed,
//! read-through and bootstrap already carry.

use std::path::Path;

use anyhow::Context;
use fleet::domains::DomainRow;

use crate::api::domains::{
    BookStore, Domain, DomainBook, DomainBookError, DomainVisits, NotFoundRedirects, Scheme,
};
use crate::api::timefmt::{format_rfc3339_utc, parse_rfc3339_s};

/// A fleet node's copy of the fleet's domain book, in its data dir (`domains.json`'s layout):
/// what it serves by until the database answers.
pub const FLEET_DOMAINS_CACHE_FILE: &str = "fleet-domains.json";

/// The book the fleet's rows make. Numbers are never reused: rows are never deleted, so the
/// next number is past the highest ever given.
pub fn book_of_rows(rows: &[DomainRow]) -> Result<DomainBook, String> {
    let mut domains = Vec::with_capacity(rows.len());
    for r in rows {
        let scheme = match r.scheme.as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => return Err(format!("domain {:?}: scheme {other:?}", r.name)),
        };
        domains.push(Domain {
            number: r.number,
            name: r.name.clone(),
            scheme,
            redirects: NotFoundRedirects {
                base_url: r.base_url.clone(),
                regular_404: r.regular_404.clone(),
                invalid_short_url: r.invalid_short_url.clone(),
            },
            visits: DomainVisits {
                extra_path: match r.extra_path.as_deref() {
                    None => None,
                    Some(m) => Some(
                        crate::route::ExtraPath::parse(m)
                            .ok_or_else(|| format!("domain {:?}: extra path {m:?}", r.name))?,
                    ),
                },
                forward_query: r.forward_query,
            },
            removed_at: r.removed_at_s.map(format_rfc3339_utc),
        });
    }
    let next = rows.iter().map(|r| r.number + 1).max().unwrap_or(1).max(1);
    DomainBook::from_parts(next, domains)
}

/// The rows of `book`, by number.
pub fn rows_of_book(book: &DomainBook) -> Vec<DomainRow> {
    book.all()
        .iter()
        .map(|d| DomainRow {
            number: d.number,
            name: d.name.clone(),
            scheme: d.scheme.as_str().to_owned(),
            base_url: d.redirects.base_url.clone(),
            regular_404: d.redirects.regular_404.clone(),
            invalid_short_url: d.redirects.invalid_short_url.clone(),
            extra_path: d.visits.extra_path.map(|m| m.as_str().to_owned()),
            forward_query: d.visits.forward_query,
            removed_at_s: d
                .removed_at
                .as_deref()
                .and_then(|t| parse_rfc3339_s(t).ok()),
        })
        .collect()
}

/// The fleet's table as a [`BookStore`]: `ricochet fleet domains`, and the API's edits.
pub struct FleetBook<'a>(pub &'a mut fleet::Db);

impl BookStore for FleetBook<'_> {
    fn load(&mut self) -> anyhow::Result<DomainBook> {
        let rows = fleet::domains::list_domains(self.0)?;
        book_of_rows(&rows).map_err(|e| anyhow::anyhow!("the fleet's domains: {e}"))
    }

    fn change(
        &mut self,
        change: &mut dyn FnMut(&mut DomainBook) -> Result<Domain, DomainBookError>,
    ) -> anyhow::Result<Domain> {
        fleet::domains::change_domains(self.0, |rows| {
            let mut book = book_of_rows(rows).map_err(anyhow::Error::msg)?;
            let d = change(&mut book)?;
            *rows = rows_of_book(&book);
            anyhow::Ok(d)
        })?
    }

    fn command(&self) -> &'static str {
        "ricochet fleet domains"
    }
}

/// The book a fleet node starts with: the database's (kept as its copy) when `db` answers,
/// else the copy it last kept, else none declared (said on stderr). A data dir with a
/// `domains.json` of its own is refused: in fleet mode the fleet's table is the book.
pub fn book_at_start(dir: &Path, db: Option<&mut fleet::Db>) -> anyhow::Result<DomainBook> {
    let own = DomainBook::load(dir).context("loading domains")?;
    if !own.is_empty() {
        anyhow::bail!(
            "{} declares domains of this node alone; in fleet mode the fleet's domains are \
             declared with `ricochet fleet domains add` (move them there and remove the file)",
            dir.join(crate::api::domains::DOMAINS_FILE).display()
        );
    }
    let Some(db) = db else {
        return cached(dir);
    };
    match fleet::domains::list_domains(db) {
        Ok(rows) => {
            let book = book_of_rows(&rows).map_err(|e| anyhow::anyhow!("fleet domains: {e}"))?;
            book.save_as(dir, FLEET_DOMAINS_CACHE_FILE)?;
            Ok(book)
        }
        Err(e) => {
            eprintln!("cannot read the fleet's domains: {e}");
            cached(dir)
        }
    }
}

/// The domain book that names a data dir's domain numbers (for `ricochet export`): its own
/// `domains.json`, or a fleet node's copy of the fleet's book.
pub fn book_of_data_dir(dir: &Path) -> Result<DomainBook, DomainBookError> {
    let own = DomainBook::load(dir)?;
    match own.is_empty() {
        true => DomainBook::load_file(dir, FLEET_DOMAINS_CACHE_FILE),
        false => Ok(own),
    }
}

fn cached(dir: &Path) -> anyhow::Result<DomainBook> {
    let book = DomainBook::load_file(dir, FLEET_DOMAINS_CACHE_FILE)?;
    eprintln!(
        "serving on the fleet's domains as last read ({} declared, from {}) until the \
         database answers",
        book.live().count(),
        dir.join(FLEET_DOMAINS_CACHE_FILE).display()
    );
    Ok(book)
}

/// The fleet's domains as the key watcher last read them.
pub struct FleetDomains {
    rows: Option<Vec<DomainRow>>,
    dir: std::path::PathBuf,
}

impl FleetDomains {
    /// `at_start`: the book the node started with (its rows are what changes are told from).
    pub fn new(dir: &Path, at_start: &DomainBook) -> FleetDomains {
        FleetDomains {
            rows: Some(rows_of_book(at_start)),
            dir: dir.to_owned(),
        }
    }

    /// Reads the table again; the new book if it changed (kept as the node's copy first). A
    /// failed read or an unusable book keeps the domains in force, and says so.
    pub fn poll(&mut self, db: &mut fleet::Db) -> Option<DomainBook> {
        let rows = match fleet::domains::list_domains(db) {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("cannot read the fleet's domains: {e}; keeping the current domains");
                return None;
            }
        };
        if self.rows.as_ref() == Some(&rows) {
            return None;
        }
        let book = match book_of_rows(&rows) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("the fleet's domains are not usable: {e}; keeping the current domains");
                self.rows = Some(rows);
                return None;
            }
        };
        if let Err(e) = book.save_as(&self.dir, FLEET_DOMAINS_CACHE_FILE) {
            eprintln!("cannot keep a copy of the fleet's domains: {e}");
        }
        self.rows = Some(rows);
        eprintln!(
            "reloaded the fleet's domains ({} live)",
            book.live().count()
        );
        Some(book)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::domains::NewDomain;

    #[test]
    fn a_book_and_its_rows_are_the_same_book() {
        let mut book = DomainBook::default();
        for name in ["go.brand.com", "old.example", "third.example"] {
            book.add(&NewDomain {
                name: name.into(),
                ..NewDomain::default()
            })
            .unwrap();
        }
        book.add(&NewDomain {
            name: "sho.rt".into(),
            default: true,
            scheme: Scheme::Http,
            redirects: NotFoundRedirects {
                invalid_short_url: Some("https://sho.rt/gone".into()),
                ..NotFoundRedirects::default()
            },
            visits: DomainVisits {
                extra_path: Some(crate::route::ExtraPath::Append),
                forward_query: Some(false),
            },
        })
        .unwrap();
        book.set_visits("go.brand.com", None, Some(Some(true)))
            .unwrap();
        book.remove("old.example").unwrap();
        let again = book_of_rows(&rows_of_book(&book)).unwrap();
        assert_eq!(again.all(), book.all());
        assert_eq!(again.next_number(), book.next_number());
        // The next number is past every number given, removed domains' included.
        book.remove("third.example").unwrap();
        let mut again = book_of_rows(&rows_of_book(&book)).unwrap();
        let d = again
            .add(&NewDomain {
                name: "new.example".into(),
                ..NewDomain::default()
            })
            .unwrap();
        assert_eq!(d.number, 4);
        // A row the node's rules refuse is refused whole.
        let mut rows = rows_of_book(&book);
        rows[1].name = "Not Normalized".into();
        assert!(book_of_rows(&rows).is_err());
        rows[1].name = "go.brand.com".into();
        rows[1].scheme = "ftp".into();
        assert!(book_of_rows(&rows).is_err());
    }
}
