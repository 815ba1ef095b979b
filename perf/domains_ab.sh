#!/usr/bin/env bash
# Issue 26's redirect check: one binary serving the same 1M links two ways, side by side in one
# run. A: one (default) domain, wrk's Host naming none (every server before domains). B: three
# declared domains, the links dealt over them (a link's key is on one domain), every request
# naming its link's domain in Host, in random order, half of them in uppercase with a port (so
# the per-core Host memo misses on about two requests in three and the table is asked).
# Rounds alternate A and B (A first in odd rounds), each server started afresh on a fresh copy
# of its data dir with an empty click store, one core on CPU 0, wrk on CPU 1, depth 1 and 16.
#
#   perf/domains_ab.sh BINARY
#
# AB_SAME_REQUESTS=1: A is sent B's requests too (the same `Host` values, which name no domain
# on A's server and so are the default domain's): the two sides then differ only in the
# server's domains, not in the bytes it parses.
#
# Needs perf/run.sh's fixture (PERF_WORK, default /tmp/ricochet-perf: data-1000000,
# links-1000000.tsv, keys-1000000.txt) and wrk. Builds the three-domain data dir beside it once
# ($PERF_WORK/dom3). Settings: AB_ROUNDS=3, AB_DURATION_S=10, AB_CONNECTIONS=64, AB_DEPTHS="1 16".
# Prints one line per run, the medians, and each round's B/A with their median; nothing is
# written elsewhere.
set -euo pipefail

bin="${1:?usage: perf/domains_ab.sh BINARY}"
work="${PERF_WORK:-/tmp/ricochet-perf}"
rounds="${AB_ROUNDS:-3}"
duration="${AB_DURATION_S:-10}"
conns="${AB_CONNECTIONS:-64}"
one="$work/data-1000000"
for f in "$bin" "$one" "$work/links-1000000.tsv" "$work/keys-1000000.txt"; do
    [[ -e "$f" ]] || { echo "domains_ab.sh: $f is missing (run perf/run.sh first)" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "domains_ab.sh: wrk not found" >&2; exit 1; }
domains=(sho.rt go.brand.com links.other-brand.example)

dom3="$work/dom3"
if [[ ! -e "$dom3/done" ]]; then
    rm -rf "$dom3"; mkdir -p "$dom3"
    "$bin" domains --data-dir "$dom3/data" add "${domains[0]}" --default >/dev/null
    for d in "${domains[@]:1}"; do "$bin" domains --data-dir "$dom3/data" add "$d" >/dev/null; done
    # key, long URL, status, no expiry, domain: each link on one domain, dealt in turn.
    awk -F'\t' -v OFS='\t' -v d0="${domains[0]}" -v d1="${domains[1]}" -v d2="${domains[2]}" \
        'BEGIN {d[0]=d0; d[1]=d1; d[2]=d2} {print $1, $2, $3, "", d[NR%3]}' \
        "$work/links-1000000.tsv" >"$dom3/links.tsv"
    "$bin" import --data-dir "$dom3/data" "$dom3/links.tsv" >/dev/null
    # The Host each request names: its link's domain, every other one as a browser behind a
    # proxy might send it (uppercase, with the port).
    awk -F'\t' -v d0="${domains[0]}" -v d1="${domains[1]}" -v d2="${domains[2]}" \
        'BEGIN {d[0]=d0; d[1]=d1; d[2]=d2}
         {h=d[NR%3]; if (NR%2) h=toupper(h) ":443"; print $1 "\t" h}' \
        "$work/links-1000000.tsv" >"$dom3/keys.txt"
    touch "$dom3/done"
fi

# The same requests for loadgen (perf/latency_ab.sh, for the open-loop p99 of the two sides):
# key, URL, status and the Host of the line's request, as keys.txt names it.
if [[ ! -e "$dom3/lg-links.tsv" ]]; then
    awk -F'\t' -v OFS='\t' 'NR == FNR {host[$1] = $2; next} {print $1, $2, $3, host[$1]}' \
        "$dom3/keys.txt" "$work/links-1000000.tsv" >"$dom3/lg-links.tsv"
fi

lua="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/random.lua"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

results="$(mktemp)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for round in $(seq 1 "$rounds"); do
    order="A B"; ((round % 2 == 0)) && order="B A"
    for side in $order; do
        data="$one"; keys="$work/keys-1000000.txt"
        [[ "${AB_SAME_REQUESTS:-0}" == 1 ]] && keys="$dom3/keys.txt"
        [[ "$side" == B ]] && { data="$dom3/data"; keys="$dom3/keys.txt"; }
        port="$(free_port)"
        rm -rf "$scratch/data"; cp -a "$data" "$scratch/data"; rm -rf "$scratch/data/clicks"
        sync
        RICOCHET_API_KEY="ab-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
            taskset -c 0 "$bin" serve --data-dir "$scratch/data" --listen "127.0.0.1:$port" --cores 1 \
            >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 200); do
            curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
            sleep 0.05
        done
        for depth in ${AB_DEPTHS:-1 16}; do
            json="$(mktemp)"
            WRK_DEPTH=$depth WRK_KEYS="$keys" WRK_JSON="$json" taskset -c 1 \
                wrk -t1 -c"$conns" -d"${duration}s" -s "$lua" "http://127.0.0.1:$port/" >/dev/null
            read -r rps bad p50 p99 < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["latency_us"]; print(d["rps"], d["errors"]["status"], l["p50"], l["p99"])' "$json")
            rm -f "$json"
            echo "round $round $side depth $depth: $rps req/s, p50 $p50 us, p99 $p99 us, non-3xx $bad"
            echo "$side $depth $rps $p99 $round" >>"$results"
        done
        kill "$pid"; wait "$pid" 2>/dev/null || true
    done
done
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "medians (A = one domain, B = three domains, Host mix; AB_SAME_REQUESTS=${AB_SAME_REQUESTS:-0}; binary $bin):"
for depth in ${AB_DEPTHS:-1 16}; do
    a="$(awk -v d=$depth '$1=="A" && $2==d {print $3}' "$results" | median)"
    b="$(awk -v d=$depth '$1=="B" && $2==d {print $3}' "$results" | median)"
    ap="$(awk -v d=$depth '$1=="A" && $2==d {print $4}' "$results" | median)"
    bp="$(awk -v d=$depth '$1=="B" && $2==d {print $4}' "$results" | median)"
    awk -v d=$depth -v a="$a" -v b="$b" -v ap="$ap" -v bp="$bp" \
        'BEGIN {printf "depth %d: A %.0f req/s p99 %d us, B %.0f req/s p99 %d us, B/A %.3f\n", d, a, ap, b, bp, b/a}'
    # Each round's B/A (its two servers ran minutes apart at most): the median of these
    # is less moved by the VM's slow and fast phases than the ratio of the medians.
    per_round="$(awk -v d=$depth '$2==d {r[$5 "," $1]=$3; n[$5]=1} END {for (k in n) printf "%.3f\n", r[k ",B"]/r[k ",A"]}' "$results" | sort -n)"
    echo "depth $depth: B/A per round $(echo $per_round), median $(echo "$per_round" | median)"
done
rm -f "$results"
