#!/usr/bin/env bash
# What click analytics costs the redirect path: `--analytics off`, `counts` and `full` side
# by side in one run, rounds alternating the modes (each server started afresh, one core,
# CPU 0, its aggregator thread on CPU 0 too: its cost is in the numbers), load on CPU 1.
#
#   perf/clicks.sh [RICOCHET_BINARY]
#
# 1. wrk, 64 connections, depth 1 and 16, prebuilt requests with a User-Agent, Referer and
#    X-Forwarded-For (rotating), random keys over the 1M-link dataset: req/s, p50/p99.
# 2. loadgen open loop at 5k and 20k req/s (uniform and zipf:1.1 keys, --click-headers):
#    p99, clicks dropped, and the aggregator thread's CPU per million clicks.
#
# Needs perf/run.sh's data (PERF_WORK, default /tmp/ricochet-perf), wrk on PATH and the
# release loadgen (cargo build --release -p ricochet-tools). Settings: CLICKS_ROUNDS=5,
# CLICKS_DURATION_S=10, CLICKS_OPEN_LOOP=1 (0: the wrk phase only, for more rounds of it in
# the same time). Writes perf/reports/<date>-<commit>-clicks.md.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$here/target/release/ricochet}"
loadgen="$here/target/release/loadgen"
work="${PERF_WORK:-/tmp/ricochet-perf}"
rounds="${CLICKS_ROUNDS:-5}"
duration="${CLICKS_DURATION_S:-10}"
open_loop="${CLICKS_OPEN_LOOP:-1}"
data="$work/data-1000000"
keys="$work/keys-1000000.txt"
links="$work/links-1000000.tsv"
for f in "$bin" "$loadgen" "$data" "$keys" "$links"; do
    [[ -e "$f" ]] || { echo "clicks.sh: $f is missing (cargo build --release --workspace; perf/run.sh)" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "clicks.sh: wrk not found" >&2; exit 1; }
commit="$(git -C "$here" rev-parse --short=10 HEAD)"
report="$here/perf/reports/$(date -u +%F)-$commit-clicks.md"
raw="$(mktemp -d)"
lua="$raw/clicks.lua"
cat >"$lua" <<'LUA'
-- Prebuilt GETs of random keys, each with a browser's headers (rotating).
local pool = {}
local at = 0
local POOL = 65536
local UAS = {
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
  "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
  "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
  "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
}
local REFS = {"https://www.google.com/", "https://t.co/AbCdEf", "https://news.ycombinator.com/item?id=1",
              "https://www.reddit.com/r/rust/comments/x"}
function init(args)
    local depth = tonumber(os.getenv("WRK_DEPTH") or "1")
    local keys = {}
    for line in io.lines(os.getenv("WRK_KEYS")) do keys[#keys + 1] = line end
    math.randomseed(tonumber(os.getenv("WRK_SEED") or "1"))
    for b = 1, math.floor(POOL / depth) do
        local parts = {}
        for i = 1, depth do
            local h = {["User-Agent"] = UAS[math.random(#UAS)],
                       ["Referer"] = REFS[math.random(#REFS)],
                       ["X-Forwarded-For"] = "10.0." .. math.random(0, 255) .. "." .. math.random(0, 255)}
            parts[i] = wrk.format("GET", "/" .. keys[math.random(#keys)], h)
        end
        pool[b] = table.concat(parts)
    end
end
function request()
    at = at % #pool + 1
    return pool[at]
end
function done(summary, latency, requests)
    local f = assert(io.open(os.getenv("WRK_JSON"), "w"))
    f:write(string.format('{"rps":%.1f,"p50":%d,"p99":%d,"errors":%d}\n',
        summary.requests / (summary.duration / 1e6), latency:percentile(50),
        latency:percentile(99), summary.errors.status + summary.errors.read + summary.errors.timeout))
    f:close()
end
LUA

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -fs "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 ~ "^"n"[{]" {s+=$2} END {print s+0}'; }
# CPU ticks (utime+stime) of the server's thread named $1.
thread_ticks() {
    for t in /proc/"$pid"/task/*; do
        if [[ "$(cat "$t/comm")" == "$1" ]]; then awk '{print $14+$15}' "$t/stat"; return; fi
    done
    echo 0
}
start_server() {
    port="$(free_port)"
    RICOCHET_API_KEY="clicks-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
        taskset -c 0 "$bin" serve --data-dir "$data" --listen "127.0.0.1:$port" --cores 1 \
        --analytics "$1" --client-ip x-forwarded-for >"$raw/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 400); do
        curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return
        sleep 0.05
    done
    echo "clicks.sh: server did not start" >&2; cat "$raw/server.log" >&2; exit 1
}
stop_server() { kill "$pid"; wait "$pid" 2>/dev/null || true; }

modes=(off counts full)
results="$raw/results.txt"
for round in $(seq 1 "$rounds"); do
    # Rotate the order each round so no mode always runs first.
    order=("${modes[@]:$(( (round - 1) % 3 ))}" "${modes[@]:0:$(( (round - 1) % 3 ))}")
    for mode in "${order[@]}"; do
        start_server "$mode"
        for depth in 1 16; do
            json="$raw/wrk.json"
            (cd "$raw" && WRK_DEPTH=$depth WRK_KEYS="$keys" WRK_JSON="$json" WRK_SEED=$round taskset -c 1 \
                wrk -t1 -c64 -d"${duration}s" -s "$lua" "http://127.0.0.1:$port/" >/dev/null)
            read -r rps p50 p99 errs < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["rps"], d["p50"], d["p99"], d["errors"])' "$json")
            echo "round $round $mode wrk depth $depth: $rps req/s p50 $p50 us p99 $p99 us errors $errs"
            echo "wrk $mode $depth $rps $p50 $p99" >>"$results"
        done
        # The open-loop runs get a server of their own: after wrk's millions of clicks the
        # aggregator may still be catching up, and that backlog is not what 5k req/s costs.
        d_wrk="$(metric ricochet_clicks_dropped_total)"
        echo "round $round $mode wrk phase: clicks dropped $d_wrk"
        echo "wrkdrop $mode $d_wrk" >>"$results"
        stop_server
        rm -rf "$data/clicks"
        [[ "$open_loop" == 1 ]] || continue
        start_server "$mode"
        for dist in uniform zipf:1.1; do
            for rate in 5000 20000; do
                d0="$(metric ricochet_clicks_dropped_total)"; m0="$(metric ricochet_clicks_merged_total)"
                a0="$(thread_ticks ricochet-clicks)"
                "$loadgen" --target "127.0.0.1:$port" --rate "$rate" --duration "${duration}s" --warmup 2s \
                    --links "$links" --dist "$dist" --click-headers --cpu 1 --json "$raw/lg.json" >/dev/null 2>&1
                sleep 1.3   # one group commit, so the merged count covers the run
                d1="$(metric ricochet_clicks_dropped_total)"; m1="$(metric ricochet_clicks_merged_total)"
                a1="$(thread_ticks ricochet-clicks)"
                read -r p50 p90 p99 < <(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["latency_us"]; print(l["p50"], l["p90"], l["p99"])' "$raw/lg.json")
                echo "round $round $mode loadgen $dist $rate/s: p50 $p50 p90 $p90 p99 $p99 us, dropped $((d1 - d0)), merged $((m1 - m0)), aggregator ticks $((a1 - a0))"
                echo "lg $mode $dist $rate $p99 $((d1 - d0)) $((m1 - m0)) $((a1 - a0)) $p50 $p90" >>"$results"
            done
        done
        stop_server
        rm -rf "$data/clicks"
    done
done

python3 - "$results" "$report" "$commit" "$bin" "$rounds" "$duration" <<'PY'
import sys, statistics, subprocess, platform, datetime
res, report, commit, binary, rounds, duration = sys.argv[1:]
rows = [l.split() for l in open(res)]
med = lambda xs: statistics.median(xs) if xs else float("nan")
hz = 100  # USER_HZ
out = []
out.append(f"# Click analytics cost: off vs counts vs full ({datetime.date.today()})\n")
cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
out.append(f"- commit `{commit}`, binary `{binary}`\n- machine: {cpu}, 2 CPUs; server `--cores 1` on CPU 0 "
           "(its aggregator thread shares CPU 0), load on CPU 1\n- command: `perf/clicks.sh` "
           f"(CLICKS_ROUNDS={rounds}, CLICKS_DURATION_S={duration}); medians of {rounds} alternating rounds\n")
out.append("\n## Throughput (wrk, 64 connections, requests with User-Agent, Referer, X-Forwarded-For)\n")
out.append("| depth | off req/s | counts req/s | full req/s | counts/off | full/off | p99 off/counts/full (us) |\n|---|---|---|---|---|---|---|")
for depth in ("1", "16"):
    r = {m: [float(x[3]) for x in rows if x[0] == "wrk" and x[1] == m and x[2] == depth] for m in ("off", "counts", "full")}
    p = {m: [float(x[5]) for x in rows if x[0] == "wrk" and x[1] == m and x[2] == depth] for m in ("off", "counts", "full")}
    o, c, f = med(r["off"]), med(r["counts"]), med(r["full"])
    # wrk's latency percentiles are not per request when pipelining (depth 16 reports 0).
    p99s = "n/a" if depth != "1" else f"{med(p['off']):.0f} / {med(p['counts']):.0f} / {med(p['full']):.0f}"
    out.append(f"| {depth} | {o:.0f} | {c:.0f} | {f:.0f} | {c/o:.3f} | {f/o:.3f} | {p99s} |")
# The spread, and the ratio within each round (the modes of one round run minutes apart, so
# a drift of the VM between rounds cancels out of these).
out.append("\nSpread of the rounds (req/s, min - max) and the ratio within each round:\n")
out.append("| depth | off | counts | full | counts/off per round: median (min - max) | full/off per round: median (min - max) |\n|---|---|---|---|---|---|")
for depth in ("1", "16"):
    r = {m: [float(x[3]) for x in rows if x[0] == "wrk" and x[1] == m and x[2] == depth] for m in ("off", "counts", "full")}
    span = lambda xs: f"{min(xs):.0f} - {max(xs):.0f}" if xs else "n/a"
    def per_round(m):
        q = [a / b for a, b in zip(r[m], r["off"])]
        return f"{med(q):.3f} ({min(q):.3f} - {max(q):.3f})" if q else "n/a"
    out.append(f"| {depth} | {span(r['off'])} | {span(r['counts'])} | {span(r['full'])} | {per_round('counts')} | {per_round('full')} |")
# Share of the wrk phase's clicks dropped: each round's drops over the GETs answered at both
# depths (req/s times the duration).
def dropped_share(m):
    shares = []
    for r in range(int(rounds)):
        w = [x for x in rows if x[0] == "wrk" and x[1] == m][2 * r:2 * r + 2]
        d = [x for x in rows if x[0] == "wrkdrop" and x[1] == m][r:r + 1]
        if len(w) == 2 and d:
            shares.append(int(d[0][2]) / sum(float(x[3]) * float(duration) for x in w))
    return med(shares)
out.append(f"\nShare of the wrk phase's clicks dropped (median of rounds): counts {dropped_share('counts'):.1%}, "
           f"full {dropped_share('full'):.1%}. A saturated core leaves its aggregator (SCHED_IDLE, on the same CPU) "
           "next to no CPU, so its batches do not come back and clicks are dropped and counted, never waited for; "
           "a click taken with no batch free looks at no header (`Combiner::take`), so these ratios are the cost "
           "of analytics to a core whose aggregator cannot keep up, not of counting every click at this rate.\n")
if any(x[0] == "lg" for x in rows):
    out.append("\n## Open loop (loadgen --click-headers): p99, drops, aggregator CPU\n")
    out.append("| keys | rate | p50 off / counts / full (us) | p90 off / counts / full (us) | p99 off / counts / full (us) | full/off p99 | counts/off p99 | dropped (counts, full) | aggregator CPU per 1M clicks (counts, full) |\n|---|---|---|---|---|---|---|---|---|")
    for dist in ("uniform", "zipf:1.1"):
        for rate in ("5000", "20000"):
            sel = lambda m: [x for x in rows if x[0] == "lg" and x[1] == m and x[2] == dist and x[3] == rate]
            p99 = {m: med([float(x[4]) for x in sel(m)]) for m in ("off", "counts", "full")}
            p50 = {m: med([float(x[8]) for x in sel(m) if len(x) > 9]) for m in ("off", "counts", "full")}
            p90 = {m: med([float(x[9]) for x in sel(m) if len(x) > 9]) for m in ("off", "counts", "full")}
            trio = lambda p: f"{p['off']:.0f} / {p['counts']:.0f} / {p['full']:.0f}"
            drop = {m: sum(int(x[5]) for x in sel(m)) for m in ("counts", "full")}
            def cpu_per_m(m):
                merged = sum(int(x[6]) for x in sel(m)); ticks = sum(int(x[7]) for x in sel(m))
                return f"{ticks / hz / merged * 1e6:.2f} s" if merged else "n/a"
            out.append(f"| {dist} | {rate}/s | {trio(p50)} | {trio(p90)} | {trio(p99)} | {p99['full']/p99['off']:.3f} | {p99['counts']/p99['off']:.3f} | {drop['counts']}, {drop['full']} | {cpu_per_m('counts')}, {cpu_per_m('full')} |")
out.append("\n## Raw\n\n```")
out += [" ".join(x) for x in rows]
out.append("```\n")
open(report, "w").write("\n".join(out) + "\n")
print(report)
PY
rm -rf "$raw"
