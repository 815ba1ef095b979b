#!/usr/bin/env bash
# One open-loop point against a fresh server, with the CPU each of the server's threads used
# (10 ms ticks from /proc/PID/task/*/stat): how much CPU the click aggregator takes per click
# where it keeps up, and how many clicks are dropped where it does not.
#
#   perf/click_cpu.sh BINARY RATE DIST [SERVER FLAGS...]
#   perf/click_cpu.sh target/release/ricochet 20000 uniform
#
# Server `--cores 1` on CPU 0 (its aggregator shares it), loadgen on CPU 1, 64 connections,
# `--click-headers`, 10 s after 1 s of warm-up. Needs perf/run.sh's data (PERF_WORK, default
# /tmp/ricochet-perf) and the release loadgen (cargo build --release -p ricochet-tools).
set -euo pipefail
bin=$1; rate=$2; dist=$3; shift 3
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${PERF_WORK:-/tmp/ricochet-perf}"; s="$(mktemp -d)"
trap 'rm -rf "$s"' EXIT
cp -a $work/data-1000000 $s/data; rm -rf $s/data/clicks; sync # no writeback mid-run
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RICOCHET_API_KEY=probe-abcdefabcdef taskset -c 0 $bin serve --data-dir $s/data --listen 127.0.0.1:$port --cores 1 "$@" > $s/log 2>&1 &
pid=$!
for _ in $(seq 400); do curl -fs http://127.0.0.1:$port/readyz >/dev/null 2>&1 && break; sleep 0.05; done
cpu() { for t in /proc/$pid/task/*; do n=$(cat $t/comm); read -r -a f < $t/stat; echo "$n $(( ${f[13]} + ${f[14]} ))"; done | sort; }
metric() { curl -fs "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 ~ "^"n"[{]" || $1 == n {s+=$2} END {print s+0}'; }
cpu > $s/cpu0; d0=$(metric ricochet_clicks_dropped_total)
"$here/target/release/loadgen" --target 127.0.0.1:$port --rate $rate --duration 10s --warmup 1s --connections 64 --links $work/links-1000000.tsv --dist $dist --click-headers --cpu 1 --json $s/lg.json >/dev/null 2>&1 || true
cpu > $s/cpu1; d1=$(metric ricochet_clicks_dropped_total)
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["latency_us"]; print("p50",l["p50"],"p99",l["p99"],"p999",l["p999"],"ach",d["achieved_rps"])' $s/lg.json
echo "dropped $((d1-d0))"
join $s/cpu0 $s/cpu1 | sort -u | awk '{d=$3-$2; if (d>0) print "cpu ticks (10 ms)", $1, d}'
kill $pid; wait $pid 2>/dev/null || true
