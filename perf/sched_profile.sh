#!/usr/bin/env bash
# Where a core's CPU time goes while it serves an open loop: a scheduler trace (`perf sched
# record`) of a running server, read into the figures that explain a redirect tail:
#   - the core thread's wake-ups and their scheduling delay (wake-up to running);
#   - every time the core was taken off its CPU while runnable (state R: preempted), by which
#     thread and for how long (a service thread holding the core's CPU until the next tick is
#     how the click aggregator cost the p99, perf/reports/2026-12-04-issue23-profile.md);
#   - the click aggregators' slices on the core's CPU (count, longest, total).
#
#   perf/sched_profile.sh 'LABEL=BINARY [FLAGS...]' ...
#   perf/sched_profile.sh 'full=target/release/ricochet' 'off=target/release/ricochet --analytics off'
#
# Needs perf (linux-perf) with the sched tracepoints, perf/run.sh's data (PERF_WORK) and the
# release loadgen. Settings (environment):
#   SP_RATE=20000  SP_DIST=uniform  SP_SECONDS=3 (traced)  SP_CORES=1  SP_SERVER_CPUS=0
#   SP_LOAD_CPU=1  SP_CONNECTIONS=64
# Prints one block per variant (and the loadgen's p50/p99/p99.9 of the same run).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -ge 1 ]] || { echo "usage: perf/sched_profile.sh 'LABEL=BINARY [FLAGS...]' ..." >&2; exit 2; }
work="${PERF_WORK:-/tmp/ricochet-perf}"
rate="${SP_RATE:-20000}"
dist="${SP_DIST:-uniform}"
secs="${SP_SECONDS:-3}"
cores="${SP_CORES:-1}"
server_cpus="${SP_SERVER_CPUS:-0}"
load_cpu="${SP_LOAD_CPU:-1}"
conns="${SP_CONNECTIONS:-64}"
loadgen="$here/target/release/loadgen"
for f in "$loadgen" "$work/data-1000000" "$work/links-1000000.tsv"; do
    [[ -e "$f" ]] || { echo "sched_profile.sh: $f is missing (perf/run.sh makes the data)" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "sched_profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for v in "$@"; do
    l="${v%%=*}"; c="${v#*=}"
    port="$(free_port)"
    rm -rf "$scratch/data"; cp -a "$work/data-1000000" "$scratch/data"; rm -rf "$scratch/data/clicks"
    read -r bin flags <<<"$c"
    # shellcheck disable=SC2086
    RICOCHET_API_KEY="sp-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
        taskset -c "$server_cpus" "$bin" serve --data-dir "$scratch/data" --listen "127.0.0.1:$port" \
        --cores "$cores" $flags >"$scratch/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 400); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
    curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || { echo "sched_profile.sh: '$c' did not start" >&2; cat "$scratch/server.log" >&2; exit 1; }
    (sleep 2; perf sched record -o "$scratch/sched.data" -- sleep "$secs" >/dev/null 2>&1) &
    rec=$!
    "$loadgen" --target "127.0.0.1:$port" --rate "$rate" --duration "$((secs + 3))s" --warmup 1s \
        --connections "$conns" --links "$work/links-1000000.tsv" --dist "$dist" --click-headers \
        --cpu "$load_cpu" --json "$scratch/lg.json" >/dev/null 2>&1 || true
    wait "$rec"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "== $l ($c) at $rate req/s, $dist keys, ${secs} s traced"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["latency_us"]; print("loadgen: p50 %s p99 %s p99.9 %s us" % (l["p50"], l["p99"], l["p999"]))' "$scratch/lg.json"
    perf sched timehist -i "$scratch/sched.data" --state 2>/dev/null | python3 -c '
import sys, re
rows = []
for line in sys.stdin:
    f = line.split()
    if len(f) < 7 or not f[1].startswith("[") or not re.match(r"^\d", f[0]):
        continue
    try:
        rows.append((float(f[0]), f[1], f[2], float(f[3]), float(f[4]), float(f[5]), f[6]))
    except ValueError:
        pass
# rows: time (switch-out), cpu, task, wait ms, sch delay ms, run ms, state at switch-out
core = [r for r in rows if "ricochet-core" in r[2]]
agg = [r for r in rows if "ricochet-clicks" in r[2]]
def dist(xs):
    xs = sorted(xs)
    if not xs:
        return "none"
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]
    return "n %d, p50 %.0f, p99 %.0f, p99.9 %.0f, max %.0f us" % (len(xs), q(.5)*1e3, q(.99)*1e3, q(.999)*1e3, xs[-1]*1e3)
print("core: on CPU %.0f ms; wake-up delay: %s" % (sum(r[5] for r in core), dist([r[4] for r in core])))
# Who ran right after the core was switched out while runnable, and for how long.
by_cpu = {}
for r in rows:
    by_cpu.setdefault(r[1], []).append(r)
steals = {}
for cpu, rs in by_cpu.items():
    for a, b in zip(rs, rs[1:]):
        if "ricochet-core" in a[2] and a[6] == "R":
            name = re.sub(r"\[.*", "", b[2])
            s = steals.setdefault(name, [])
            s.append(b[5])
print("core preempted while runnable (state R), by the next thread on its CPU:")
for name, xs in sorted(steals.items(), key=lambda kv: -sum(kv[1])):
    print("  %-18s %4d times, %8.3f ms in all, longest %.3f ms" % (name, len(xs), sum(xs), max(xs)))
if agg:
    print("aggregator slices: %s; on CPU %.0f ms" % (dist([r[5] for r in agg]), sum(r[5] for r in agg)))
'
done
