#!/usr/bin/env bash
# A fleet node's bootstrap and live regeneration at scale: PERF_LINKS links (1,000,000)
# inserted straight into a throwaway PostgreSQL's `ricochet_links`, then one `serve --cores 2
# --fleet-pg` node bootstraps them (time to /readyz, data dir size). Then two wrk windows of
# PERF_DURATION_S (20) each, random GETs of the links (wrk -t1 -c64): the first as a
# baseline, the second while the node regenerates its links (its feed paused by the test flag,
# one link deleted elsewhere and its tombstone removed, the feed resumed: its cursor is behind
# the horizon). Reports the regeneration's time (from the node's log), both windows'
# throughput, p50/p99 and errors side by side, and whether the deleted link is gone after.
# Writes perf/reports/<date>-<commit>-fleet-regen.md.
set -euo pipefail
cd "$(dirname "$0")/.."
links=${PERF_LINKS:-1000000}
duration=${PERF_DURATION_S:-20}
commit=$(git rev-parse --short=10 HEAD)
report="perf/reports/$(date -u +%Y-%m-%d)-$commit-fleet-regen.md"
cargo build --release --bin ricochet >/dev/null
command -v wrk >/dev/null || { echo "fleet_regen.sh: wrk not found" >&2; exit 1; }
eval "$(.ci/pg-cluster.sh start)"
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; .ci/pg-cluster.sh stop "$RICOCHET_PG_DIR"; rm -rf "$work"; }
trap cleanup EXIT
base=${RICOCHET_TEST_PG%/postgres}
url="$base/fleet_regen"
psql -XqAt -d "$RICOCHET_TEST_PG" -c "CREATE DATABASE fleet_regen"
./target/release/ricochet fleet init --pg "$url" >/dev/null
./target/release/ricochet fleet namespace create --pg "$url" perf --lo 1 --hi 1000000000 >/dev/null
psql -XqAt -d "$url" -c "INSERT INTO ricochet_links (key, target, status, created_at)
    SELECT 'r-' || g, 'https://example.com/landing/' || g, 302, extract(epoch FROM now())::bigint
      FROM generate_series(0, $links - 1) g"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
t0=$(date +%s.%N)
RICOCHET_API_KEY=bench-key-0123456789abcdef ./target/release/ricochet serve --data-dir "$work/d" \
    --listen "127.0.0.1:$port" --cores 2 --fleet-pg "$url" --namespace perf --node-id regen \
    --test-fleet-pause-feed "$work/pause" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
t1=$(date +%s.%N)
bootstrap_s=$(python3 -c "print('%.1f' % ($t1 - $t0))")
du_mb() { du -sm "$work/d/$1" | cut -f1; }
cat >"$work/random.lua" <<LUA
local pool = {}
function init(args)
    math.randomseed(1)
    for b = 1, 65536 do pool[b] = wrk.format("GET", "/r-" .. math.random(1, $links - 1)) end
end
local at = 0
function request() at = at % #pool + 1; return pool[at] end
function done(summary, latency, requests)
    local f = assert(io.open(os.getenv("WRK_OUT"), "w"))
    f:write(string.format('%.1f %d %d %d %d\n', summary.requests / (summary.duration / 1e6),
        latency:percentile(50), latency:percentile(99), latency.max,
        summary.errors.status + summary.errors.read + summary.errors.timeout + summary.errors.connect))
    f:close()
end
LUA
window() { (cd "$work" && WRK_OUT="$work/$1" wrk -t1 -c64 -d"${duration}s" -s "$work/random.lua" "http://127.0.0.1:$port/" >/dev/null); }
window baseline
touch "$work/pause"; sleep 0.3
# Deleted elsewhere (straight in the database, as another node's delete would be).
psql -XqAt -d "$url" -c "UPDATE ricochet_links SET deleted = true WHERE key = 'r-0'"
./target/release/ricochet fleet gc-tombstones --pg "$url" --older-than-s 0 >/dev/null
window regen &
wrk_pid=$!
sleep 2
rm -f "$work/pause"
wait "$wrk_pid"
regen_line=$(grep -m1 "regenerated this node's links" "$work/log" || true)
[ -n "$regen_line" ] || { echo "fleet_regen.sh: no regeneration in the window" >&2; tail -20 "$work/log" >&2; exit 1; }
gone=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/r-0")
{
    echo "# A fleet node's bootstrap and live regeneration at $links links"
    echo
    echo "- commit: $commit"
    echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
    echo "- PostgreSQL: $(psql -XAt -d "$RICOCHET_TEST_PG" -c 'show server_version'), local cluster on the same CPUs"
    echo "- command: \`PERF_LINKS=$links PERF_DURATION_S=$duration bash perf/fleet_regen.sh\`; node \`--cores 2 --fleet-pg\`, wrk -t1 -c64, random GETs of the links"
    echo
    echo '```'
    echo "bootstrap: ${bootstrap_s} s from start to /readyz for $links links; data dir $(du_mb .) MB (tables $(du_mb tables) MB)"
    echo "regeneration: ${regen_line#*: }"
    for w in baseline regen; do
        read -r rps p50 p99 max errs <"$work/$w"
        echo "$(printf '%-8s' "$w") window: $rps req/s p50 $p50 us p99 $p99 us max $max us errors $errs"
    done
    echo "after: GET /r-0 (deleted elsewhere, tombstone removed) -> $gone; data dir $(du_mb .) MB"
    echo '```'
    echo
    python3 - "$work/baseline" "$work/regen" <<'PY'
import sys
b, r = ([float(x) for x in open(p).read().split()] for p in sys.argv[1:3])
print("- regen window / baseline: %.3f throughput, %.2f p99, %.2f max latency." % (r[0] / b[0], r[2] / b[2], r[3] / b[3]))
PY
} | tee "$report"
echo "wrote $report"
