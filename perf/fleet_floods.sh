#!/usr/bin/env bash
# Unknown-key floods on a fleet node: 10,000 GETs of random 7-character keys (none exists)
# at 1, 8 and 64 concurrent connections against `serve --cores 2 --fleet-pg`, and how many
# read-through queries the database got for them (`ricochet_fleet_read_queries_total`), plus
# the 404 latency; each twice in one run, without shedding and with it. "Without": the
# node's change feed is paused (the test flag `--test-fleet-pause-feed`), so it reads no
# ceilings and every miss is read through, batched; "with": the feed runs, and keys above
# every fresh ceiling are answered without a query (`ricochet_fleet_shed_lookups_total`).
# The database is a throwaway local cluster. Settings: PERF_GETS (10000).
# Writes perf/reports/<date>-<commit>-fleet-floods.md.
set -euo pipefail
cd "$(dirname "$0")/.."
gets=${PERF_GETS:-10000}
commit=$(git rev-parse --short=10 HEAD)
report="perf/reports/$(date -u +%Y-%m-%d)-$commit-fleet-floods.md"
cargo build --release --bin ricochet >/dev/null
eval "$(.ci/pg-cluster.sh start)"
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; .ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"; rm -rf "$work"; }
trap cleanup EXIT
base=${RICOCHET_TEST_PG%/postgres}
psql -XqAt -d "$RICOCHET_TEST_PG" -c "CREATE DATABASE fleet_floods"
./target/release/ricochet fleet init --pg "$base/fleet_floods" >/dev/null
./target/release/ricochet fleet namespace create --pg "$base/fleet_floods" perf --lo 1 --hi 1000000000 >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RICOCHET_API_KEY=bench-key-0123456789abcdef ./target/release/ricochet serve --data-dir "$work/d" \
    --listen "127.0.0.1:$port" --cores 2 --fleet-pg "$base/fleet_floods" --namespace perf \
    --node-id floods --test-fleet-pause-feed "$work/pause" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
metric() { curl -fs "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
{
    echo "# Unknown-key floods on a fleet node"
    echo
    echo "- commit: $commit"
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "- command: \`PERF_GETS=$gets bash perf/fleet_floods.sh\`; server \`--cores 2 --fleet-pg\`, local PostgreSQL"
    echo
    echo '```'
    for c in 1 8 64; do
        for mode in without with; do
            if [ "$mode" = without ]; then
                touch "$work/pause"; sleep 0.8 # past HIGH_WATER_FRESH_MS: the last read is stale
            else
                rm -f "$work/pause"; sleep 0.5
            fi
            q0=$(metric ricochet_fleet_read_queries_total); k0=$(metric ricochet_fleet_read_keys_total)
            s0=$(metric ricochet_fleet_shed_lookups_total)
            line=$(python3 perf/fleet/random_404s.py "$port" "$gets" "$c")
            q1=$(metric ricochet_fleet_read_queries_total); k1=$(metric ricochet_fleet_read_keys_total)
            s1=$(metric ricochet_fleet_shed_lookups_total)
            echo "$mode shedding, $line; read-through queries $((q1 - q0)) for $((k1 - k0)) keys; shed $((s1 - s0))"
        done
    done
    echo '```'
} | tee "$report"
echo "wrote $report"
