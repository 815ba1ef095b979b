#!/usr/bin/env bash
# The fault harness of issue #24 (tests/fleet_faults.rs) for a long run: cycles of faults,
# each ending in an asynchronous failover, for RICOCHET_FAULT_MINUTES (default 30), against
# a release build. Prints the checker's figures; the report goes under perf/reports/.
#   perf/fault_harness.sh [minutes]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
cargo build --release --bin ricochet
eval "$(.ci/pg-cluster.sh start)"
trap '.ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"' EXIT
export RICOCHET_REQUIRE_PG=1
export RICOCHET_TEST_BIN="$PWD/target/release/ricochet"
export RICOCHET_FAULT_MINUTES=$minutes
echo "commit $(git rev-parse --short HEAD), $(nproc) CPUs, $(date -u +%FT%TZ), $minutes minutes"
cargo test --release --test fleet_faults -- --nocapture 2>&1 \
    | grep -E '^fault harness|^test |panicked|anomal|serves' || true
