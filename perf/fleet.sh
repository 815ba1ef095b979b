#!/usr/bin/env bash
# Fleet mode's allocation authority on a local PostgreSQL (a throwaway cluster, like CI's):
#  1. allocbench: allocation transactions/s and latency with 1, 2, 4 and 8 concurrent
#     allocators (one session each), 1 ID per allocation (every create would pay it);
#  2. durable creates/s on `serve --cores 2`, the data dir's own file authority vs
#     `--fleet-pg`, both with --segment-len 10000, alternating rounds on fresh data dirs,
#     16 closed-loop connections (perf/writes/creates_closed_loop.py). Since fleet mode part 2
#     every fleet create is also one INSERT committed on the primary before its 201;
#  3. three fleet nodes (--cores 1 each) against the one database, 8 connections creating on
#     each at once: creates/s per node and in total.
# Writes perf/reports/<date>-<commit>-fleet.md. Knobs: PERF_DURATION_S (allocbench seconds,
# default 10), PERF_ROUNDS (default 3), PERF_CREATES_PER_CONN (default 500).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${PERF_DURATION_S:-10}
rounds=${PERF_ROUNDS:-3}
per_conn=${PERF_CREATES_PER_CONN:-500}
commit=$(git rev-parse --short=10 HEAD)
report="perf/reports/$(date -u +%Y-%m-%d)-$commit-fleet.md"
cargo build --release --bin ricochet >/dev/null
cargo build --release -p ricochet-tools --bin allocbench >/dev/null
eval "$(.ci/pg-cluster.sh start)"
work=$(mktemp -d)
cleanup() { .ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"; rm -rf "$work"; }
trap cleanup EXIT
base=${RICOCHET_TEST_PG%/postgres}
key=bench-key-0123456789abcdef

{
    echo "# Fleet mode: PostgreSQL allocation authority"
    echo
    echo "- commit: $commit"
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "- PostgreSQL: $(psql -XAt -d "$RICOCHET_TEST_PG" -c 'show server_version'), local cluster from .ci/pg-cluster.sh (fsync on, synchronous_commit on)"
    echo "- command: \`PERF_DURATION_S=$duration PERF_ROUNDS=$rounds PERF_CREATES_PER_CONN=$per_conn bash perf/fleet.sh\`"
    echo
    echo "## Allocation transactions (allocbench, 1 ID each)"
    echo
    echo '```'
    for n in 1 2 4 8; do
        psql -XqAt -d "$RICOCHET_TEST_PG" -c "CREATE DATABASE bench_$n"
        ./target/release/allocbench --pg "$base/bench_$n" --allocators "$n" --seconds "$duration"
    done
    echo '```'
    echo
    echo "## Durable creates/s on 2 cores, --segment-len 10000 (16 closed-loop connections)"
    echo
    psql -XqAt -d "$RICOCHET_TEST_PG" -c "CREATE DATABASE fleet_creates"
    ./target/release/ricochet fleet init --pg "$base/fleet_creates" >/dev/null
    ./target/release/ricochet fleet namespace create --pg "$base/fleet_creates" perf --lo 1 --hi 3000000000000 >/dev/null
    echo '```'
    for r in $(seq 1 "$rounds"); do
        for mode in file fleet; do
            dir="$work/$mode-$r"
            port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
            extra=()
            if [ "$mode" = fleet ]; then
                extra=(--fleet-pg "$base/fleet_creates" --namespace perf --node-id "perf-$r")
            fi
            RICOCHET_API_KEY=$key ./target/release/ricochet serve --data-dir "$dir" \
                --listen "127.0.0.1:$port" --cores 2 --segment-len 10000 \
                --create-rate 1000000000 --create-burst 1000000000 "${extra[@]}" \
                >"$work/$mode-$r.log" 2>&1 &
            pid=$!
            for _ in $(seq 1 100); do
                curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
                sleep 0.1
            done
            line=$(python3 perf/writes/creates_closed_loop.py 16 "$per_conn" "$port")
            echo "round $r $(printf '%-5s' "$mode") $line"
            echo "$mode $(echo "$line" | sed -E 's/.*: ([0-9]+) durable.*p99 ([0-9.]+)ms.*/\1 \2/')" >>"$work/rates"
            kill -TERM "$pid"
            wait "$pid" || true
        done
    done
    echo '```'
    echo
    python3 - "$work/rates" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {m: (statistics.median(float(r[1]) for r in rows if r[0] == m),
           statistics.median(float(r[2]) for r in rows if r[0] == m)) for m in ("file", "fleet")}
print("Median of %d rounds: file authority %.0f creates/s (p99 %.2f ms), --fleet-pg %.0f creates/s "
      "(p99 %.2f ms): fleet/file = %.2f." % (len(rows) // 2, med["file"][0], med["file"][1],
      med["fleet"][0], med["fleet"][1], med["fleet"][0] / med["file"][0]))
PY
    echo
    echo "## Three fleet nodes x --cores 1, one database, 8 closed-loop connections per node at once"
    echo
    echo '```'
    pids=(); ports=()
    for n in 1 2 3; do
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        RICOCHET_API_KEY=$key ./target/release/ricochet serve --data-dir "$work/three-$n" \
            --listen "127.0.0.1:$port" --cores 1 --segment-len 10000 \
            --create-rate 1000000000 --create-burst 1000000000 \
            --fleet-pg "$base/fleet_creates" --namespace perf --node-id "three-$n" \
            >"$work/three-$n.log" 2>&1 &
        pids+=($!); ports+=("$port")
        for _ in $(seq 1 100); do
            curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
            sleep 0.1
        done
    done
    cpids=()
    for p in "${ports[@]}"; do
        python3 perf/writes/creates_closed_loop.py 8 "$per_conn" "$p" >"$work/three-$p.out" &
        cpids+=($!)
    done
    for c in "${cpids[@]}"; do wait "$c"; done
    total=0
    for p in "${ports[@]}"; do
        line=$(cat "$work/three-$p.out")
        echo "node :$p $line"
        total=$((total + $(echo "$line" | sed -E 's/.*: ([0-9]+) durable.*/\1/')))
    done
    echo "sum of the three nodes: $total creates/s (each node's rate over its own run)"
    kill -TERM "${pids[@]}"
    for pid in "${pids[@]}"; do wait "$pid" || true; done
    echo '```'
} | tee "$report"
echo "wrote $report"
