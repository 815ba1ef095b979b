#!/usr/bin/env bash
# What an API list scan costs the redirects beside it: open-loop redirects at a fixed rate
# (loadgen, CPU 1) against one server (`--cores 1`, CPU 0, 1M links), each round twice: alone,
# then with a client asking for an ordered list page over and over (`SCAN_PATH`, the Shlink
# web client's default list: every link examined, in owner steps of SCAN_STEP_LINKS), and
# the reverse order in even rounds. Prints one line per point and the medians.
#
#   perf/scan_p99.sh BINARY
#
# Needs perf/run.sh's data (PERF_WORK, default /tmp/ricochet-perf) and the release loadgen.
# Settings: SCAN_ROUNDS=5, SCAN_RATE=20000, SCAN_DURATION_S=10, SCAN_PAUSE_S=1 (between one
#   page's answer and the next ask; 0: back to back, a client saturating the core with scans),
#   SCAN_PATH='/rest/v3/short-urls?orderBy=dateCreated-DESC&itemsPerPage=10',
#   SCAN_CORES=1 (more: every core still on CPU 0, with --test-oversubscribe, so that a walk's
#   owner steps run on other cores than its front, as on a many-CPU server).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:?usage: perf/scan_p99.sh BINARY}"
work="${PERF_WORK:-/tmp/ricochet-perf}"
rounds="${SCAN_ROUNDS:-5}"
rate="${SCAN_RATE:-20000}"
duration="${SCAN_DURATION_S:-10}"
pause="${SCAN_PAUSE_S:-1}"
cores="${SCAN_CORES:-1}"
over=""; ((cores > 1)) && over="--test-oversubscribe"
path="${SCAN_PATH:-/rest/v3/short-urls?orderBy=dateCreated-DESC&itemsPerPage=10}"
data="$work/data-1000000"
links="$work/links-1000000.tsv"
loadgen="$here/target/release/loadgen"
for f in "$bin" "$data" "$links" "$loadgen"; do
    [[ -e "$f" ]] || { echo "scan_p99.sh: $f is missing" >&2; exit 1; }
done
scratch="$(mktemp -d)"
trap 'kill "${pid:-0}" "${side:-0}" 2>/dev/null || true; rm -rf "$scratch"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
key="scan-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
results="$scratch/results"

point() { # $1 = alone|scans
    local side_pid=""
    if [[ "$1" == scans ]]; then
        (
            n=0
            while true; do
                taskset -c 1 curl -fs -o /dev/null -H "X-Api-Key: $key" "http://127.0.0.1:$port$path" || true
                n=$((n + 1))
                echo "$n" >"$scratch/scans"
                sleep "$pause"
            done
        ) &
        side_pid=$!
        side=$side_pid
    fi
    echo 0 >"$scratch/scans"
    "$loadgen" --target "127.0.0.1:$port" --rate "$rate" --duration "${duration}s" --warmup 1s \
        --connections 64 --links "$links" --dist uniform --click-headers --cpu 1 \
        --json "$scratch/lg.json" >/dev/null 2>&1 || true
    [[ -n "$side_pid" ]] && { kill "$side_pid"; wait "$side_pid" 2>/dev/null || true; }
    read -r p50 p99 p999 < <(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["latency_us"]; print(l["p50"], l["p99"], l["p999"])' "$scratch/lg.json")
    echo "round $round $1: p50 $p50 p99 $p99 p99.9 $p999 us, scans answered $(cat "$scratch/scans")"
    echo "$1 $p50 $p99 $p999" >>"$results"
}

for round in $(seq 1 "$rounds"); do
    port="$(free_port)"
    rm -rf "$scratch/data"; cp -a "$data" "$scratch/data"; rm -rf "$scratch/data/clicks"; sync
    RICOCHET_API_KEY="$key" taskset -c 0 "$bin" serve --data-dir "$scratch/data" \
        --listen "127.0.0.1:$port" --cores "$cores" $over >"$scratch/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 400); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
    order="alone scans"; ((round % 2 == 0)) && order="scans alone"
    for kind in $order; do point "$kind"; done
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for kind in ("alone", "scans"):
    r = [x for x in rows if x[0] == kind]
    med = lambda i: statistics.median(float(x[i]) for x in r)
    print(f"median {kind}: p50 {med(1):.0f} p99 {med(2):.0f} p99.9 {med(3):.0f} us ({len(r)} rounds)")
EOF
