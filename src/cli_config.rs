//! Where `serve`'s settings come from: command-line flags, then `RICOCHET_<KEY>` environment
//! variables, then a TOML file (`serve --config FILE`), then the built-in defaults, first
//! found wins.
//!
//! Every serve flag (except `--config` and the hidden test-only ones) has a key: its name in
//! snake_case (`--lru-capacity` is `lru_capacity`, env `RICOCHET_LRU_CAPACITY`). The file is
//! parsed by the `toml` crate; an unknown key, a value of the wrong kind or a value the flag
//! refuses is an error naming the file, the line and the key. File values become flags placed
//! before the real ones (`serve` takes a flag's last value), and a key whose environment
//! variable is set is skipped, so the order above holds, and every value passes through the
//! one validation each flag has.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgAction, Command};

/// Prefix of the environment variable of each key.
pub const ENV_PREFIX: &str = "RICOCHET_";

/// Largest config file read (a settings file, not data).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The serve arguments a file or the environment may set.
fn settable(serve: &Command) -> Vec<&clap::Arg> {
    serve
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_long().is_some() && a.get_id() != "config")
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect()
}

/// One warning per hidden test-only or fault flag `serve` was given (on its command line: a
/// file or the environment cannot set them, [`settable`]), naming the flag and what it does.
pub fn test_flag_warnings(serve_matches: &clap::ArgMatches, cli: &Command) -> Vec<String> {
    let serve = cli.find_subcommand("serve").expect("serve subcommand");
    serve
        .get_arguments()
        .filter(|a| a.is_hide_set() && a.get_long().is_some())
        .filter(|a| {
            serve_matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine)
        })
        .map(|a| {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            format!(
                "warning: --{} is a test-only flag, never for production: {}",
                a.get_long().expect("filtered"),
                help.trim_start_matches("Test only: ")
            )
        })
        .collect()
}

/// `RICOCHET_<KEY>` for key `id`.
pub fn env_name(id: &str) -> String {
    format!("{ENV_PREFIX}{}", id.to_uppercase())
}

/// `cli` with an environment variable on every settable serve argument.
pub fn with_env(cli: Command) -> Command {
    cli.mut_subcommand("serve", |serve| {
        let ids: Vec<String> = settable(&serve)
            .iter()
            .map(|a| a.get_id().to_string())
            .collect();
        ids.into_iter().fold(serve, |s, id| {
            s.mut_arg(id.clone(), |a| a.env(env_name(&id)))
        })
    })
}

/// One file key turned into flags.
struct FileSetting {
    key: String,
    line: usize,
    argv: Vec<String>,
}

/// The file's settings as flags, each checked alone by the flag's own parser so an error can
/// name the file and line. Keys whose environment variable is set are left out.
fn file_settings(path: &Path, cli: &Command) -> Result<Vec<FileSetting>, String> {
    let serve = cli.find_subcommand("serve").expect("serve subcommand");
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("--config {shown}: {e}"))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "--config {shown}: larger than {MAX_CONFIG_BYTES} bytes"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {shown}: {e}"))?;
    let table: BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>> =
        toml::from_str(&text).map_err(|e| format!("--config {shown}: {e}"))?;
    let line_of = |at: usize| text[..at.min(text.len())].matches('\n').count() + 1;
    let args = settable(serve);
    let mut out = Vec::new();
    for (k, v) in table {
        let line = line_of(k.span().start);
        let key = k.into_inner();
        let Some(arg) = args.iter().find(|a| a.get_id() == key.as_str()) else {
            let known: Vec<&str> = args.iter().map(|a| a.get_id().as_str()).collect();
            return Err(format!(
                "{shown}:{line}: unknown key `{key}` (keys: {})",
                known.join(", ")
            ));
        };
        if std::env::var_os(env_name(&key)).is_some() {
            continue; // The environment overrides the file.
        }
        let flag = format!("--{}", arg.get_long().expect("settable args are long"));
        let is_switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let argv = match (v.into_inner(), is_switch) {
            (toml::Value::Boolean(true), true) => vec![flag],
            (toml::Value::Boolean(false), true) => vec![],
            (toml::Value::String(s), false) => vec![flag, s],
            (toml::Value::Integer(i), false) => vec![flag, i.to_string()],
            (_, true) => return Err(format!("{shown}:{line}: `{key}` must be true or false")),
            (_, false) => {
                return Err(format!(
                    "{shown}:{line}: `{key}` must be a string or an integer"
                ))
            }
        };
        let alone = ["ricochet".to_string(), "serve".into()]
            .into_iter()
            .chain(argv.iter().cloned());
        if let Err(e) = cli.clone().try_get_matches_from(alone) {
            if e.kind() != clap::error::ErrorKind::MissingRequiredArgument {
                let msg = e.to_string();
                let first = msg
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ");
                return Err(format!("{shown}:{line}: `{key}`: {first}"));
            }
        }
        out.push(FileSetting { key, line, argv });
    }
    Ok(out)
}

/// The command line with `serve --config FILE`'s settings spliced in before the real flags,
/// or unchanged without `--config`. Errors name the file, line and key.
pub fn expand(raw: Vec<OsString>, cli: &Command) -> Result<Vec<OsString>, String> {
    if raw.get(1).and_then(|a| a.to_str()) != Some("serve") {
        return Ok(raw);
    }
    let Some(path) = config_path(&raw[2..]) else {
        return Ok(raw);
    };
    let settings = file_settings(Path::new(&path), cli)?;
    let mut out: Vec<OsString> = raw[..2].to_vec();
    out.extend(
        settings
            .into_iter()
            .flat_map(|s| s.argv)
            .map(OsString::from),
    );
    out.extend(raw[2..].iter().cloned());
    Ok(out)
}

/// The value of `--config` among serve's flags (`--config F` or `--config=F`).
fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_str()?;
        if s == "--" {
            return None;
        }
        if s == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    None
}

/// `ricochet config check FILE [-- FLAGS]`: expands like `serve --config FILE FLAGS` and
/// reports the effective settings, one `key = value` line each with where it came from
/// (`FILE:LINE`, `env RICOCHET_KEY`, `flag`, `default`), without starting anything.
pub fn check(file: &Path, flags: &[String], cli: &Command) -> Result<String, String> {
    let settings = file_settings(file, cli)?;
    // The file's flags sit right after `ricochet serve`; anything later is a real flag.
    let split = 2 + settings.iter().map(|s| s.argv.len()).sum::<usize>();
    let lines: BTreeMap<String, usize> = settings.iter().map(|s| (s.key.clone(), s.line)).collect();
    let mut raw: Vec<OsString> = vec![
        "ricochet".into(),
        "serve".into(),
        "--config".into(),
        file.into(),
    ];
    raw.extend(flags.iter().map(OsString::from));
    let matches = cli
        .clone()
        .try_get_matches_from(expand(raw, cli)?)
        .map_err(|e| e.to_string())?;
    let (_, m) = matches.subcommand().expect("serve");
    let serve = cli.find_subcommand("serve").expect("serve");
    let mut out = String::new();
    for arg in settable(serve) {
        let id = arg.get_id().as_str();
        let value: Vec<String> = m
            .get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        // Indices count from the subcommand's own arguments (1 = first after `serve`).
        let last_index = m.indices_of(id).and_then(|i| i.max());
        let source = match m.value_source(id) {
            Some(ValueSource::EnvVariable) => format!("env {}", env_name(id)),
            Some(ValueSource::CommandLine) => match (lines.get(id), last_index) {
                (Some(line), Some(at)) if at + 1 < split => format!("{}:{line}", file.display()),
                _ => "flag".into(),
            },
            Some(ValueSource::DefaultValue) => "default".into(),
            _ => "unset".into(),
        };
        let shown = match (value.as_slice(), arg.get_action()) {
            ([], ArgAction::SetTrue) => "false".to_string(),
            ([v], _) => v.clone(),
            ([], _) => "(none)".to_string(),
            (vs, _) => vs.join(","),
        };
        out.push_str(&format!("{id} = {shown}  # {source}\n"));
    }
    Ok(out)
}

/// `ricochet config default`: every key, commented out, with its help and default.
pub fn default_file(cli: &Command) -> String {
    let serve = cli.find_subcommand("serve").expect("serve");
    let mut out = String::from(
        "# ricochet serve settings (TOML). Every line is a flag of `ricochet serve` in snake_case;\n\
         # order of precedence: flags, then RICOCHET_<KEY> environment variables, then this file,\n\
         # then the defaults shown. Check a file with `ricochet config check FILE`.\n",
    );
    for arg in settable(serve) {
        let id = arg.get_id().as_str();
        out.push('\n');
        if let Some(help) = arg.get_help() {
            for l in help.to_string().lines() {
                out.push_str(&format!("# {l}\n"));
            }
        }
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let example = match (default.as_slice(), arg.get_action()) {
            (_, ArgAction::SetTrue) => "false".to_string(),
            ([], _) => "<value>  (unset by default)".to_string(),
            ([v], _) if v.parse::<i64>().is_ok() => v.clone(),
            ([v], _) => format!("{v:?}"),
            (vs, _) => format!("{:?}", vs.join(",")),
        };
        out.push_str(&format!("# env {}\n# {id} = {example}\n", env_name(id)));
    }
    out
}
