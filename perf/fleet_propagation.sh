#!/usr/bin/env bash
# Read-through latency and change feed lag, idle and under a create load: three fleet nodes
# (--cores 1) on one local PostgreSQL; B's feed is paused (test flag), so its answers to new
# keys are read-throughs; C follows the feed. perf/fleet/propagation.py does the measuring,
# with 0 and then 8 connections creating on A meanwhile. Settings: PERF_PROBES (500).
# Writes perf/reports/<date>-<commit>-fleet-propagation.md.
set -euo pipefail
cd "$(dirname "$0")/.."
probes=${PERF_PROBES:-500}
commit=$(git rev-parse --short=10 HEAD)
report="perf/reports/$(date -u +%Y-%m-%d)-$commit-fleet-propagation.md"
cargo build --release --bin ricochet >/dev/null
eval "$(.ci/pg-cluster.sh start)"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; .ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"; rm -rf "$work"; }
trap cleanup EXIT
base=${RICOCHET_TEST_PG%/postgres}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
{
    echo "# Fleet read-through latency and feed lag"
    echo
    echo "- commit: $commit"
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "- PostgreSQL: $(psql -XAt -d "$RICOCHET_TEST_PG" -c 'show server_version'), local cluster from .ci/pg-cluster.sh"
    echo "- command: \`PERF_PROBES=$probes bash perf/fleet_propagation.sh\`; 3 nodes \`--cores 1\`, B's feed paused"
    echo
    for load in 0 8; do
        db="prop_$load"
        psql -XqAt -d "$RICOCHET_TEST_PG" -c "CREATE DATABASE $db"
        ./target/release/ricochet fleet init --pg "$base/$db" >/dev/null
        ./target/release/ricochet fleet namespace create --pg "$base/$db" perf --lo 1 --hi 1000000000 >/dev/null
        ports=()
        for n in a b c; do
            p=$(free_port); ports+=("$p")
            extra=()
            if [ "$n" = b ]; then touch "$work/pause-$load"; extra=(--test-fleet-pause-feed "$work/pause-$load"); fi
            RICOCHET_API_KEY=bench-key-0123456789abcdef ./target/release/ricochet serve \
                --data-dir "$work/$load-$n" --listen "127.0.0.1:$p" --cores 1 \
                --create-rate 1000000000 --create-burst 1000000000 \
                --fleet-pg "$base/$db" --namespace perf --node-id "$n" "${extra[@]}" >"$work/$load-$n.log" 2>&1 &
            pids+=($!)
            for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
        done
        echo "## $load connections creating on A meanwhile"
        echo
        echo '```'
        python3 perf/fleet/propagation.py "${ports[0]}" "${ports[1]}" "${ports[2]}" "$probes" "$load"
        echo '```'
        echo
        kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true; pids=()
    done
} | tee "$report"
echo "wrote $report"
