#!/usr/bin/env bash
# Latency A/B: two or more ricochet binaries or flag sets side by side in one run, open loop at
# fixed rates below saturation (p50, p99, p99.9, clicks dropped) plus the highest rate held at
# a p99 SLO (`loadgen --max`). Rounds alternate the variants (order rotated each round), each
# server started afresh on a fresh click store; the report gives medians of rounds, each
# variant's ratio to the first one within each round, and every round's figures.
#
#   perf/latency_ab.sh 'LABEL=BINARY [FLAGS...]' 'LABEL=BINARY [FLAGS...]' ...
#   perf/latency_ab.sh 'old=/tmp/ricochet-old' 'new=target/release/ricochet'
#   perf/latency_ab.sh 'off=target/release/ricochet --analytics off' 'full=target/release/ricochet'
#
# The first variant is the baseline of the ratios. Every change to the redirect path or the
# click path reports this beside wrk's throughput (perf/ab.sh, perf/clicks.sh).
#
# Needs perf/run.sh's data (PERF_WORK, default /tmp/ricochet-perf: data-1000000 and
# links-1000000.tsv) and the release loadgen (cargo build --release -p ricochet-tools).
# Settings (environment):
#   LAB_ROUNDS=5            rounds (the issue's targets are medians of at least 5)
#   LAB_RATES="5000 10000 20000 50000"   fixed rates, req/s
#   LAB_DISTS="uniform zipf:1.1"         key popularity
#   LAB_DURATION_S=5  LAB_WARMUP_S=1     per point
#   LAB_CONNECTIONS=64
#   LAB_CORES=1             the server's --cores
#   LAB_SERVER_CPUS=0       taskset of the server (every thread: cores and aggregators share)
#   LAB_LOAD_CPU=1          the load generator's CPU
#   LAB_MAX=1               also search the rate held at p99 <= LAB_SLO (uniform keys)
#   LAB_SLO=1ms
#   LAB_LABEL=latency-ab    report name suffix
#   LAB_DATA_<LABEL>, LAB_LINKS_<LABEL>   a variant's own data dir and loadgen links file
#                           (default: perf/run.sh's 1M links): e.g. a server with several
#                           domains, its links file naming each link's Host (perf/domains_ab.sh
#                           builds both in $PERF_WORK/dom3)
#   LAB_PAUSE_DAMON=0       1: pause the kernel's DAMON monitor (kdamond) for the run and
#                           start it again at the end (needs root). This VM runs DAMON with a
#                           `pageout` scheme that preempts whatever runs for up to 12 ms every
#                           few hundred ms, the same for every variant (see
#                           perf/reports/2026-12-04-issue23-profile.md); the report says so.
# Writes perf/reports/<date>-<commit>-<LAB_LABEL>.md and the raw lines beside it (.txt).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -ge 2 ]] || { echo "usage: perf/latency_ab.sh 'LABEL=BINARY [FLAGS...]' 'LABEL=BINARY [FLAGS...]' ..." >&2; exit 2; }
work="${PERF_WORK:-/tmp/ricochet-perf}"
rounds="${LAB_ROUNDS:-5}"
rates="${LAB_RATES:-5000 10000 20000 50000}"
dists="${LAB_DISTS:-uniform zipf:1.1}"
duration="${LAB_DURATION_S:-5}"
warmup="${LAB_WARMUP_S:-1}"
conns="${LAB_CONNECTIONS:-64}"
cores="${LAB_CORES:-1}"
server_cpus="${LAB_SERVER_CPUS:-0}"
load_cpu="${LAB_LOAD_CPU:-1}"
do_max="${LAB_MAX:-1}"
slo="${LAB_SLO:-1ms}"
label="${LAB_LABEL:-latency-ab}"
loadgen="$here/target/release/loadgen"
data="$work/data-1000000"
links="$work/links-1000000.tsv"
for f in "$loadgen" "$data" "$links"; do
    [[ -e "$f" ]] || { echo "latency_ab.sh: $f is missing (cargo build --release -p ricochet-tools; perf/run.sh)" >&2; exit 1; }
done

labels=(); cmds=()
for v in "$@"; do
    [[ "$v" == *=* ]] || { echo "latency_ab.sh: '$v' is not LABEL=BINARY [FLAGS...]" >&2; exit 2; }
    l="${v%%=*}"; c="${v#*=}"
    [[ "$l" =~ ^[A-Za-z0-9_]+$ ]] || { echo "latency_ab.sh: label '$l': letters, digits and _ only" >&2; exit 2; }
    read -r b _ <<<"$c"
    [[ -x "$b" ]] || { echo "latency_ab.sh: variant '$l': $b is not an executable" >&2; exit 2; }
    labels+=("$l"); cmds+=("$c")
done

damon_paused=()
if [[ "${LAB_PAUSE_DAMON:-0}" == 1 ]]; then
    for st in /sys/kernel/mm/damon/admin/kdamonds/*/state; do
        [[ -e "$st" && "$(cat "$st")" == on ]] || continue
        echo off >"$st"
        damon_paused+=("$st")
    done
fi
resume_damon() { for st in "${damon_paused[@]}"; do echo on >"$st" || true; done; }

commit="$(git -C "$here" rev-parse --short=10 HEAD)"
stem="$here/perf/reports/$(date -u +%F)-$commit-$label"
raw="$stem.txt"
: >"$raw"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"; resume_damon' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -fs "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 ~ "^"n"[{]" || $1 == n {s+=$2} END {print s+0}'; }
start_server() {
    port="$(free_port)"
    # A copy of the links' data dir per server: its click store starts empty each time, as a
    # fresh server's would, and no variant reads another's clicks.
    rm -rf "$scratch/data"; cp -a "$2" "$scratch/data"; rm -rf "$scratch/data/clicks"
    # Written back now, not by the kernel's flusher 30 s later (dirty_expire_centisecs) in the
    # middle of a point: 150 MB of writeback on the server's CPU stalled whichever point ran
    # then, every variant alike (2026-12-05-5a69e272a5-issue23-one-visitor-damon-paused.md).
    sync
    local bin flags
    read -r bin flags <<<"$1"
    # shellcheck disable=SC2086
    RICOCHET_API_KEY="lab-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
        taskset -c "$server_cpus" "$bin" serve --data-dir "$scratch/data" --listen "127.0.0.1:$port" \
        --cores "$cores" $flags >"$scratch/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 400); do
        curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return
        sleep 0.05
    done
    echo "latency_ab.sh: server '$1' did not start" >&2; cat "$scratch/server.log" >&2; exit 1
}
stop_server() { kill "$pid"; wait "$pid" 2>/dev/null || true; }

n=${#labels[@]}
for l in "${labels[@]}"; do
    own_data="LAB_DATA_$l"; own_links="LAB_LINKS_$l"
    echo "data $l ${!own_data:-$data} ${!own_links:-$links}" >>"$raw"
done
for round in $(seq 1 "$rounds"); do
    for k in $(seq 0 $((n - 1))); do
        i=$(( (k + round - 1) % n ))
        l="${labels[$i]}"
        own_data="LAB_DATA_$l"; own_links="LAB_LINKS_$l"
        v_links="${!own_links:-$links}"
        start_server "${cmds[$i]}" "${!own_data:-$data}"
        for dist in $dists; do
            for rate in $rates; do
                d0="$(metric ricochet_clicks_dropped_total)"
                "$loadgen" --target "127.0.0.1:$port" --rate "$rate" --duration "${duration}s" \
                    --warmup "${warmup}s" --connections "$conns" --links "$v_links" --dist "$dist" \
                    --click-headers --cpu "$load_cpu" --json "$scratch/lg.json" >/dev/null 2>&1 || true
                d1="$(metric ricochet_clicks_dropped_total)"
                read -r p50 p99 p999 ach errs < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["latency_us"]; print(l["p50"], l["p99"], l["p999"], d["achieved_rps"], d["error_total"])' "$scratch/lg.json")
                echo "round $round $l $dist $rate/s: p50 $p50 p99 $p99 p99.9 $p999 us, achieved $ach, errors $errs, clicks dropped $((d1 - d0))"
                echo "pt $round $l $dist $rate $p50 $p99 $p999 $ach $errs $((d1 - d0))" >>"$raw"
            done
        done
        if [[ "$do_max" == 1 ]]; then
            "$loadgen" --target "127.0.0.1:$port" --max --slo-p99 "$slo" --rate 20000 \
                --duration "${duration}s" --warmup "${warmup}s" --connections "$conns" --links "$v_links" \
                --click-headers --cpu "$load_cpu" --json "$scratch/max.json" >/dev/null 2>&1 || true
            held="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["held_rps"] or 0)' "$scratch/max.json")"
            echo "round $round $l held at p99 <= $slo: $held req/s"
            echo "max $round $l $held" >>"$raw"
        fi
        stop_server
    done
done

python3 - "$raw" "$stem.md" "$commit" "$rounds" "$duration" "$cores" "$server_cpus" "$load_cpu" "$slo" "${#damon_paused[@]}" "${labels[@]/%/=}" -- "${cmds[@]}" <<'PY'
import sys, statistics, subprocess, datetime
a = sys.argv[1:]
raw, report, commit, rounds, duration, cores, scpus, lcpu, slo, damon = a[:10]
rest = a[10:]
sep = rest.index("--")
labels = [x[:-1] for x in rest[:sep]]
cmds = rest[sep + 1:]
rows = [l.split() for l in open(raw)]
med = statistics.median
base = labels[0]
cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
o = [f"# Latency A/B ({datetime.date.today()}): {' vs '.join(labels)}\n"]
o.append(f"- commit `{commit}`; machine: {cpu}, 2 CPUs, kernel {kernel}")
o.append(f"- server `--cores {cores}` under `taskset -c {scpus}` (its aggregator threads share those CPUs), "
         f"loadgen on CPU {lcpu}, 64 connections, `--click-headers`, {duration} s per point, 1M links")
o.append(f"- {rounds} rounds, variants alternating (order rotated per round), each server started afresh with an empty click store")
if damon != "0":
    o.append("- the kernel's DAMON monitor (kdamond, a `pageout` scheme of this VM) paused for the run (`LAB_PAUSE_DAMON=1`)")
for r in rows:
    if r[0] == "data":
        o.append(f"- `{r[1]}`: data dir `{r[2]}`, loadgen links `{r[3]}`")
o.append("- command: `perf/latency_ab.sh " + " ".join(f"'{l}={c}'" for l, c in zip(labels, cmds)) + "`\n")
pts = [r for r in rows if r[0] == "pt"]
keys = []
for r in pts:
    if (r[3], r[4]) not in keys:
        keys.append((r[3], r[4]))
def sel(l, d, rate, col):
    return [float(r[col]) for r in pts if r[2] == l and r[3] == d and r[4] == rate]
def per_round_ratio(l, d, rate, col):
    q = []
    for rd in range(1, int(rounds) + 1):
        x = [float(r[col]) for r in pts if r[1] == str(rd) and r[2] == l and r[3] == d and r[4] == rate]
        y = [float(r[col]) for r in pts if r[1] == str(rd) and r[2] == base and r[3] == d and r[4] == rate]
        if x and y and y[0] > 0:
            q.append(x[0] / y[0])
    return q
o.append("## Open loop: medians of rounds (µs)\n")
hdr = "| keys | rate | " + " | ".join(f"{l} p50 / p99 / p99.9" for l in labels) + " | " + \
      " | ".join(f"{l}/{base} p99, p99.9 (median of per-round ratios)" for l in labels[1:]) + " | clicks dropped (sum of rounds) |"
o.append(hdr)
o.append("|" + "---|" * (2 + len(labels) + len(labels) - 1 + 1))
for d, rate in keys:
    cells = [f"{med(sel(l, d, rate, 5)):.0f} / {med(sel(l, d, rate, 6)):.0f} / {med(sel(l, d, rate, 7)):.0f}" for l in labels]
    ratios = []
    for l in labels[1:]:
        r99 = per_round_ratio(l, d, rate, 6)
        r999 = per_round_ratio(l, d, rate, 7)
        ratios.append(f"{med(r99):.2f}, {med(r999):.2f} (p99 ratio of medians {med(sel(l, d, rate, 6)) / med(sel(base, d, rate, 6)):.2f})")
    drops = ", ".join(f"{l} {int(sum(sel(l, d, rate, 10)))}" for l in labels)
    errs = sum(sum(sel(l, d, rate, 9)) for l in labels)
    o.append(f"| {d} | {rate} | " + " | ".join(cells) + " | " + " | ".join(ratios) + f" | {drops}" + (f"; {int(errs)} errors" if errs else "") + " |")
mx = [r for r in rows if r[0] == "max"]
if mx:
    o.append(f"\n## Rate held at p99 ≤ {slo} (loadgen --max, uniform keys)\n")
    o.append("| variant | median req/s | per round | ratio to " + base + " (median of per-round ratios) |\n|---|---|---|---|")
    for l in labels:
        v = [float(r[3]) for r in mx if r[2] == l]
        q = []
        for rd in range(1, int(rounds) + 1):
            x = [float(r[3]) for r in mx if r[1] == str(rd) and r[2] == l]
            y = [float(r[3]) for r in mx if r[1] == str(rd) and r[2] == base]
            if x and y and y[0] > 0:
                q.append(x[0] / y[0])
        o.append(f"| {l} | {med(v):.0f} | {' / '.join(f'{x:.0f}' for x in v)} | {med(q):.3f} |")
o.append("\n## Every round\n")
o.append("| round | variant | keys | rate | p50 | p99 | p99.9 | achieved | errors | clicks dropped |\n|---|---|---|---|---|---|---|---|---|---|")
for r in pts:
    o.append(f"| {r[1]} | {r[2]} | {r[3]} | {r[4]} | {float(r[5]):.0f} | {float(r[6]):.0f} | {float(r[7]):.0f} | {float(r[8]):.0f} | {r[9]} | {r[10]} |")
open(report, "w").write("\n".join(o) + "\n")
print(f"report: {report}")
PY
