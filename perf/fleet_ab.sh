#!/usr/bin/env bash
# A/B of two ricochet binaries as fleet nodes, side by side in one run: each binary a node
# `serve --cores 1` on CPU 0 with its own database (initialized by that binary, so a schema
# change between them is no obstacle) in one throwaway local cluster, the same aliases created
# through the API on each, then rounds alternating A and B: wrk -t1 -c64 on CPU 1, random GETs
# of the aliases at depth 1 and 16. For a change to the fleet node's paths (issue #24 asks
# redirect throughput of a fleet node unchanged). Settings: PERF_ROUNDS (3),
# PERF_DURATION_S (10), PERF_LINKS (20000), PERF_ANALYTICS (full).
#   perf/fleet_ab.sh OLD_BINARY NEW_BINARY
# Writes perf/reports/<date>-<commit>-fleet-ab.md.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A bin=([A]="${1:?usage: perf/fleet_ab.sh OLD_BINARY NEW_BINARY}" [B]="${2:?usage: perf/fleet_ab.sh OLD_BINARY NEW_BINARY}")
rounds=${PERF_ROUNDS:-3}
duration=${PERF_DURATION_S:-10}
links=${PERF_LINKS:-20000}
analytics=${PERF_ANALYTICS:-full}
commit=$(git rev-parse --short=10 HEAD)
report="perf/reports/$(date -u +%Y-%m-%d)-$commit-fleet-ab.md"
command -v wrk >/dev/null || { echo "fleet_ab.sh: wrk not found" >&2; exit 1; }
eval "$(.ci/pg-cluster.sh start)"
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; .ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"; rm -rf "$work"; }
trap cleanup EXIT
base=${RICOCHET_TEST_PG%/postgres}
key=bench-key-0123456789abcdef
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A port
for mode in A B; do
    db="fleet_ab_${mode,,}" # unquoted SQL names fold to lower case
    psql -XqAt -d "$RICOCHET_TEST_PG" -c "CREATE DATABASE $db"
    "${bin[$mode]}" fleet init --pg "$base/$db" >/dev/null
    "${bin[$mode]}" fleet namespace create --pg "$base/$db" perf --lo 1 --hi 1000000000 >/dev/null
    port[$mode]=$(free_port)
    RICOCHET_API_KEY=$key taskset -c 0 "${bin[$mode]}" serve --data-dir "$work/$mode" \
        --listen "127.0.0.1:${port[$mode]}" --cores 1 \
        --create-rate 1000000000 --create-burst 1000000000 --analytics "$analytics" \
        --fleet-pg "$base/$db" --namespace perf --node-id "perf-$mode" >"$work/$mode.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:${port[$mode]}/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    python3 perf/fleet/create_aliases.py "${port[$mode]}" "$links" "$key"
done
cat >"$work/random.lua" <<LUA
local pool = {}
function init(args)
    local depth = tonumber(os.getenv("WRK_DEPTH"))
    math.randomseed(1)
    for b = 1, 4096 do
        local parts = {}
        for i = 1, depth do parts[i] = wrk.format("GET", "/k-" .. math.random(0, $links - 1)) end
        pool[b] = table.concat(parts)
    end
end
local at = 0
function request() at = at % #pool + 1; return pool[at] end
function done(summary, latency, requests)
    local f = assert(io.open(os.getenv("WRK_JSON"), "w"))
    f:write(string.format('%.1f %d %d %d\n', summary.requests / (summary.duration / 1e6),
        latency:percentile(50), latency:percentile(99),
        summary.errors.status + summary.errors.read + summary.errors.timeout))
    f:close()
end
LUA
{
    echo "# Redirects of a fleet node: A/B of two binaries"
    echo
    echo "- commit: $commit; A = ${bin[A]} ($("${bin[A]}" --version 2>/dev/null || echo ?)), B = ${bin[B]} ($("${bin[B]}" --version 2>/dev/null || echo ?))"
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "- PostgreSQL: $(psql -XAt -d "$RICOCHET_TEST_PG" -c 'show server_version'), local cluster from .ci/pg-cluster.sh"
    echo "- command: \`PERF_ROUNDS=$rounds PERF_DURATION_S=$duration PERF_LINKS=$links PERF_ANALYTICS=$analytics bash perf/fleet_ab.sh A B\`"
    echo "- both fleet nodes \`--cores 1\` on CPU 0, each on its own database, $links aliases each created through the API; wrk -t1 -c64 on CPU 1, ${duration} s per run, rounds alternating"
    echo
    echo '```'
    for r in $(seq 1 "$rounds"); do
        order=(A B)
        [ $((r % 2)) -eq 0 ] && order=(B A)
        for mode in "${order[@]}"; do
            for depth in 1 16; do
                (cd "$work" && WRK_DEPTH=$depth WRK_JSON="$work/out" taskset -c 1 \
                    wrk -t1 -c64 -d"${duration}s" -s "$work/random.lua" "http://127.0.0.1:${port[$mode]}/" >/dev/null)
                read -r rps p50 p99 errs <"$work/out"
                # Every GET is of an existing alias: an error means the setup is wrong, and the
                # figures would measure 404s (read through to the database in fleet mode).
                [ "$errs" = 0 ] || { echo "fleet_ab.sh: $errs errors ($mode, depth $depth)" >&2; exit 1; }
                echo "round $r $(printf '%-6s' "$mode") depth $(printf '%2d' "$depth"): $rps req/s p50 $p50 us p99 $p99 us errors $errs"
                echo "$mode $depth $rps $p99" >>"$work/rates"
            done
        done
    done
    echo '```'
    echo
    python3 - "$work/rates" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for depth in ("1", "16"):
    med = {m: (statistics.median(float(r[2]) for r in rows if r[0] == m and r[1] == depth),
               statistics.median(float(r[3]) for r in rows if r[0] == m and r[1] == depth))
           for m in ("A", "B")}
    ratio = med["B"][0] / med["A"][0]
    if med["A"][1] > 0:
        print("- depth %s, median of rounds: A %.0f req/s (p99 %.0f us), B %.0f req/s (p99 %.0f us): "
              "B/A = %.3f throughput, %.2f p99." % (depth, med["A"][0], med["A"][1],
              med["B"][0], med["B"][1], ratio, med["B"][1] / med["A"][1]))
    else:  # wrk reports no latency for pipelined batches (p99 0)
        print("- depth %s, median of rounds: A %.0f req/s, B %.0f req/s: B/A = %.3f "
              "throughput (wrk gives no latency for pipelined requests)." % (depth, med["A"][0],
              med["B"][0], ratio))
PY
} | tee "$report"
echo "wrote $report"
