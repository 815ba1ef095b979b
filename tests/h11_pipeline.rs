//! The reported desync, reproduced as its reporter did: with Python's strict h11 client
//! pipelining PATCH + GET (+ GET of the patched link + HEAD) in one write, 1,000 times, on 2
//! and 3 cores (`tests/h11/pipeline.py`). Needs `python3` with `h11` (`pip install h11`;
//! `.ci/run` installs it).

mod common;

use common::api::{self, API_KEY, NO_RATE_LIMIT};
use common::{dataset, import, write_tsv};
use std::process::Command;

fn run(cores: usize) {
    let (tmp, dir) = api::data_dir();
    let links = dataset(500, 91);
    import(&dir, &links);
    let tsv = tmp.path().join("keys.tsv");
    write_tsv(&tsv, &links);
    let cores_s = cores.to_string();
    let mut args = vec!["--cores", &cores_s];
    if cores > 2 {
        args.push("--test-oversubscribe");
    }
    args.extend(NO_RATE_LIMIT);
    let server = api::start(&dir, &args);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h11/pipeline.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(server.addr.to_string())
        .arg(API_KEY)
        .arg(&tsv)
        .arg("1000")
        .output()
        .expect("python3 runs (install it, and `pip install h11`)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'h11'"),
        "this test needs h11: pip install h11"
    );
    assert!(
        out.status.success(),
        "h11 saw mismatched answers on {cores} cores:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1000 tries, 0 mismatched answers"),
        "{stdout}"
    );
}

#[test]
fn h11_pipelined_patch_and_gets_never_swap_on_2_cores() {
    run(2);
}

#[test]
fn h11_pipelined_patch_and_gets_never_swap_on_3_cores() {
    run(3);
}
