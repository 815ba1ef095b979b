//! Errors from an import: bad input lines (with line numbers) or a storage failure.

use std::fmt;
use std::path::PathBuf;

/// One rejected input line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number in the input (for CSV, the line the record starts on).
    pub line: u64,
    /// What is wrong, for the user.
    pub message: String,
}

/// Why an import failed. Whatever the variant, no table in the data dir was changed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The input file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Input {
        /// The input file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// No format was given and the input's extension is not one of .tsv/.csv/.ndjson/.jsonl.
    #[error("{}: cannot tell the format from the file name; use .tsv, .csv, .ndjson or .jsonl, or name the format", path.display())]
    UnknownFormat {
        /// The input file.
        path: PathBuf,
    },
    /// Some input lines were invalid; nothing was imported.
    #[error("{}", BadLinesDisplay(self))]
    BadLines {
        /// The input file as the user named it.
        input: PathBuf,
        /// The first [`super::MAX_REPORTED_ERRORS`] errors, by line number.
        errors: Vec<LineError>,
        /// How many errors were found in all (stopped at the first in strict mode).
        total: u64,
    },
    /// The data dir could not be opened, locked, read or written.
    #[error(transparent)]
    Storage(#[from] crate::error::Error),
}

struct BadLinesDisplay<'a>(&'a ImportError);

impl fmt::Display for BadLinesDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ImportError::BadLines {
            input,
            errors,
            total,
        } = self.0
        else {
            return Ok(());
        };
        let name = input.display();
        let plural = if *total == 1 { "" } else { "s" };
        write!(
            f,
            "{total} bad line{plural} in {name}; nothing was imported"
        )?;
        for e in errors {
            write!(f, "\n{name}:{}: {}", e.line, e.message)?;
        }
        let shown = errors.len() as u64;
        if *total > shown {
            write!(f, "\n... and {} more", total - shown)?;
        }
        Ok(())
    }
}
