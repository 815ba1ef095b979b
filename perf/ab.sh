#!/usr/bin/env bash
# A/B of two ricochet binaries on the same data, side by side in one run: rounds alternate
# A and B (A first in odd rounds, B first in even ones: the first server of a round had a
# 5-10% edge on this VM), each started afresh on a fresh copy of the links' data dir with an
# empty click store (the fixture's own click store grows with every run that serves it), one
# core, CPU 0; wrk on CPU 1, depth 1 and 16, random keys.
# For regression checks of a change against the commit before it; perf/run.sh is the report
# against nginx.
#
#   perf/ab.sh OLD_BINARY NEW_BINARY
#
# Needs a data dir and key list from perf/run.sh (PERF_WORK, default /tmp/ricochet-perf) and
# wrk on PATH. Settings: AB_ROUNDS=3, AB_DURATION_S=10, AB_CONNECTIONS=64. Prints one line per
# run (binary, depth, req/s, p50/p99 latency) and the medians; nothing is written elsewhere.
set -euo pipefail

old="${1:?usage: perf/ab.sh OLD_BINARY NEW_BINARY}"
new="${2:?usage: perf/ab.sh OLD_BINARY NEW_BINARY}"
work="${PERF_WORK:-/tmp/ricochet-perf}"
rounds="${AB_ROUNDS:-3}"
duration="${AB_DURATION_S:-10}"
conns="${AB_CONNECTIONS:-64}"
data="$work/data-1000000"
keys="$work/keys-1000000.txt"
lua="$work/random.lua"
for f in "$old" "$new" "$data" "$keys" "$lua"; do
    [[ -e "$f" ]] || { echo "ab.sh: $f is missing (run perf/run.sh first)" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "ab.sh: wrk not found" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

results="$(mktemp)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for round in $(seq 1 "$rounds"); do
    order="A B"; ((round % 2 == 0)) && order="B A"
    for side in $order; do
        bin="$old"; [[ "$side" == B ]] && bin="$new"
        port="$(free_port)"
        rm -rf "$scratch/data"; cp -a "$data" "$scratch/data"; rm -rf "$scratch/data/clicks"
        sync # written back now, not by the flusher in the middle of a run
        RICOCHET_API_KEY="ab-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
            taskset -c 0 "$bin" serve --data-dir "$scratch/data" --listen "127.0.0.1:$port" --cores 1 \
            >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 200); do
            curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
            sleep 0.05
        done
        for depth in 1 16; do
            json="$(mktemp)"
            (cd "$work" && WRK_DEPTH=$depth WRK_KEYS="$keys" WRK_JSON="$json" taskset -c 1 \
                wrk -t1 -c"$conns" -d"${duration}s" -s "$lua" "http://127.0.0.1:$port/" >/dev/null)
            read -r rps p50 p99 < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["latency_us"]; print(d["rps"], l["p50"], l["p99"])' "$json")
            rm -f "$json"
            echo "round $round $side depth $depth: $rps req/s, p50 $p50 us, p99 $p99 us"
            echo "$side $depth $rps" >>"$results"
        done
        kill "$pid"; wait "$pid" 2>/dev/null || true
    done
done
echo "medians (A = $old, B = $new):"
for depth in 1 16; do
    a="$(awk -v d=$depth '$1=="A" && $2==d {print $3}' "$results" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
    b="$(awk -v d=$depth '$1=="B" && $2==d {print $3}' "$results" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
    awk -v d=$depth -v a="$a" -v b="$b" 'BEGIN {printf "depth %d: A %.0f req/s, B %.0f req/s, B/A %.3f\n", d, a, b, b/a}'
done
rm -f "$results"
