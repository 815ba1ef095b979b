#!/usr/bin/env bash
# The fault harness of issue #24 (tests/fleet_faults.rs) for a long run: cycles of faults,
# each ending in a failover, for RICOCHET_FAULT_MINUTES (default 30), against a release
# build, with an asynchronous standby (default) or a synchronous one. Prints the checker's
# figures; the report goes under perf/reports/.
#   perf/fault_harness.sh [minutes] [async|sync]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
case "${2:-async}" in
    async) test=converges_and_loses_no_acknowledged_write ;;
    sync) test=with_a_synchronous_standby_loses_nothing_acknowledged ;;
    *) echo "usage: $0 [minutes] [async|sync]" >&2; exit 2 ;;
esac
cargo build --release --bin ricochet
eval "$(.ci/pg-cluster.sh start)"
trap '.ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"' EXIT
export RICOCHET_REQUIRE_PG=1
export RICOCHET_TEST_BIN="$PWD/target/release/ricochet"
export RICOCHET_FAULT_MINUTES=$minutes
echo "commit $(git rev-parse --short HEAD), $(nproc) CPUs, $(date -u +%FT%TZ), $minutes minutes, ${2:-async}"
cargo test --release --test fleet_faults -- "$test" --nocapture 2>&1 \
    | grep -E '^fault harness|^test |panicked|anomal|serves' || true
