//! The OpenAPI description (`docs/openapi.yaml`, served at `/api/v1/openapi.json`) held to the
//! real server by a third-party fuzzer, schemathesis (PyPI), with every check it has: server
//! errors, status codes, content types, response schemas and headers, undeclared methods,
//! authentication, use after delete, and the stateful phase following the spec's links
//! (create, then read, patch and delete what was created).
//!
//! Two runs. Positive data, with `tests/schemathesis/ricochet_hooks.py` replacing generated
//! `long_url` and `expires_at` values by ones the API accepts (rules JSON Schema cannot state:
//! a valid IRI with a real host, a time in the future); every check but
//! `positive_data_acceptance`, which those rules make meaningless. Negative data, unchanged,
//! every check. The seed is fixed so CI is reproducible; `RICOCHET_ST_SEED` picks another.
//! Without schemathesis installed the test prints SKIPPED, unless `RICOCHET_REQUIRE_SCHEMATHESIS`
//! is set (CI sets it).

mod common;

use common::api::{data_dir, start, API_KEY, NO_RATE_LIMIT};
use std::process::Command;

const DEFAULT_SEED: &str = "20261201";

fn schemathesis_present() -> bool {
    Command::new("schemathesis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn schemathesis_holds_the_server_to_its_openapi_description() {
    if !schemathesis_present() {
        assert!(
            std::env::var_os("RICOCHET_REQUIRE_SCHEMATHESIS").is_none(),
            "RICOCHET_REQUIRE_SCHEMATHESIS is set but schemathesis is not installed"
        );
        eprintln!("SKIPPED: pip install schemathesis (CI does)");
        return;
    }
    let (_t, dir) = data_dir();
    let mut args = NO_RATE_LIMIT.to_vec();
    args.extend(["--cores", "2"]);
    let s = start(&dir, &args);
    let base = format!("http://{}", s.addr);
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis");
    let seed = std::env::var("RICOCHET_ST_SEED").unwrap_or_else(|_| DEFAULT_SEED.into());
    let auth = format!("Authorization: Bearer {API_KEY}");
    for (mode, hooks, checks) in [
        ("positive", true, "positive_data_acceptance"),
        ("negative", false, ""),
    ] {
        let mut cmd = Command::new("schemathesis");
        // Its cache goes to the working directory: the test's own, not the checkout.
        cmd.current_dir(_t.path());
        cmd.args(["--config-file", &format!("{here}/schemathesis.toml"), "run"])
            .arg(format!("{base}/api/v1/openapi.json"))
            .args([
                "--url", &base, "-H", &auth, "--checks", "all", "--mode", mode,
            ])
            .args(["--max-examples", "40", "--seed", &seed, "--no-color"]);
        if !checks.is_empty() {
            cmd.args(["--exclude-checks", checks]);
        }
        if hooks {
            cmd.env("PYTHONPATH", here)
                .env("SCHEMATHESIS_HOOKS", "ricochet_hooks");
        }
        let out = cmd.output().expect("schemathesis runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let tail: String = text
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            out.status.success(),
            "schemathesis ({mode}, seed {seed}) found failures:\n{}\n{}",
            &text[..text.len().min(20_000)],
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("API Links:") || mode == "negative",
            "no stateful phase:\n{tail}"
        );
        eprintln!(
            "schemathesis {mode}: {}",
            tail.lines()
                .rev()
                .find(|l| l.contains("generated"))
                .unwrap_or("")
        );
    }
}
