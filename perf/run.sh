#!/usr/bin/env bash
# ricochet vs nginx, side by side, on the same links and the same CPUs.
#
# On a clean Debian machine: installs nginx and wrk, generates links with datagen, builds
# ricochet (release), imports, writes an nginx config serving the same links, then measures
#   (a) wrk throughput, non-pipelined and pipelined (depth 16), random keys;
#   (b) loadgen open-loop latency at fixed rates and the max rate holding the p99 SLO, with
#       the headers real clients send (User-Agent, Referer, X-Forwarded-For: --click-headers),
#       ricochet as users run it (click analytics at its default, `full`);
#   (c) RSS, startup time (until /readyz answers 200) and disk bytes, at PERF_LINKS links
#       (and 10M with PERF_10M=1);
#   (d) ricochet's durable creates per second (skipped if POST /api/v1/urls is not served).
# Raw JSON goes to perf/reports/<date>-<commit>/, the report to perf/reports/<date>-<commit>.md
# (written by tools' perf-report).
#
# Settings (environment):
#   PERF_LINKS=1000000      links in the main dataset
#   PERF_DURATION_S=5       seconds per measured run (lengthen for a real report)
#   PERF_WARMUP_S=1         warm-up before each loadgen run
#   PERF_RATES="5000 10000 20000 50000"   fixed loadgen rates, req/s
#   PERF_SLO_P99=1ms        p99 SLO for loadgen --max
#   PERF_CONNECTIONS=64     connections (wrk and loadgen)
#   PERF_10M=1              also measure RSS/startup/disk/import with 10M links
#   PERF_SERVER_CPUS=0      CPUs both servers get (taskset list); cores = how many
#   PERF_LOAD_CPU=1         CPU of wrk and loadgen
#   PERF_WRK_ROUNDS=3       wrk rounds per server and depth, servers alternating, each started
#                           afresh (one 5 s run swings ±10% on a shared VM; the report gives
#                           the median and the per-round ratios)
#   PERF_LABEL=             label in the report title (e.g. "smoke")
#   PERF_WORK=/tmp/ricochet-perf   scratch space (datasets, data dirs, nginx prefix)
#   PERF_SKIP_INSTALL=1     do not apt-get install (nginx and wrk must be on PATH)
#   PERF_PROFILE=1          also profile both servers' CPUs under wrk (perf record; installs
#                           linux-perf if missing) and put the hottest symbols in the report
#   PERF_BENCHES=1          also run the criterion benches the goals cite (e2e local hit,
#                           cross-core forward round trip); 0 skips them
#   RICOCHET_API_KEY        API key for the create test (a random one by default)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

links="${PERF_LINKS:-1000000}"
duration_s="${PERF_DURATION_S:-5}"
warmup_s="${PERF_WARMUP_S:-1}"
rates="${PERF_RATES:-5000 10000 20000 50000}"
slo="${PERF_SLO_P99:-1ms}"
conns="${PERF_CONNECTIONS:-64}"
server_cpus="${PERF_SERVER_CPUS:-0}"
load_cpu="${PERF_LOAD_CPU:-1}"
label="${PERF_LABEL:-}"
work="${PERF_WORK:-/tmp/ricochet-perf}"
api_key="${RICOCHET_API_KEY:-perf-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"
pipeline_depth=16
wrk_rounds="${PERF_WRK_ROUNDS:-3}"

# Cores = CPUs in the server list (e.g. "0", "0-3", "0,2").
cores=0
IFS=',' read -ra parts <<<"$server_cpus"
for p in "${parts[@]}"; do
    if [[ "$p" == *-* ]]; then cores=$((cores + ${p#*-} - ${p%-*} + 1)); else cores=$((cores + 1)); fi
done

log() { printf '[perf %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- setup
sudo_cmd=""
if [[ "$(id -u)" != 0 ]]; then sudo_cmd="sudo"; fi
if [[ "${PERF_SKIP_INSTALL:-0}" != 1 ]]; then
    need=()
    command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || need+=(nginx-light)
    command -v wrk >/dev/null || need+=(wrk)
    command -v curl >/dev/null || need+=(curl)
    command -v taskset >/dev/null || need+=(util-linux)
    command -v pgrep >/dev/null || need+=(procps)
    if [[ "${PERF_PROFILE:-0}" == 1 ]]; then command -v perf >/dev/null || need+=(linux-perf); fi
    if ((${#need[@]})); then
        log "installing ${need[*]}"
        $sudo_cmd apt-get update -q
        # nginx-light is gone from newer Debian releases; plain nginx serves the same config.
        if ! $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"; then
            need=("${need[@]/nginx-light/nginx}")
            $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
        fi
        # The packaged service would hold port 80 and a CPU; we run our own instance.
        $sudo_cmd systemctl stop nginx 2>/dev/null || true
    fi
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[[ -x "$nginx_bin" ]] || die "nginx not found"
command -v wrk >/dev/null || die "wrk not found"

cd "$repo"
commit="$(git rev-parse --short=10 HEAD)"
if ! git diff --quiet HEAD -- src shards tools Cargo.toml Cargo.lock 2>/dev/null; then commit="$commit-dirty"; fi
day="$(date -u +%Y-%m-%d)"
name="$day-$commit"
out="$repo/perf/reports/$name"
rm -rf "$out"
mkdir -p "$out" "$work"
commands="$out/commands.txt"
: >"$commands"

# Runs a command, recording it verbatim for the report.
run() {
    printf '%s\n' "$*" >>"$commands"
    "$@"
}

log "building (release)"
run cargo build --release -q -p ricochet -p ricochet-tools
bin="$repo/target/release"

# ---------------------------------------------------------------- helpers
port_free() {
    # A port no socket uses (listening, connected or in TIME_WAIT), picked at run time. Another
    # process may still take it before the server binds: start_server retries.
    local p hex
    while :; do
        p=$((20000 + RANDOM % 40000))
        hex="$(printf '%04X' "$p")"
        if ! grep -qi ":$hex " /proc/net/tcp /proc/net/tcp6 2>/dev/null &&
            ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
}

now_ms() { date +%s%3N; }

# Waits until GET /readyz answers 200; prints ms since $1 (a now_ms stamp). curl is spawned in a
# tight loop, so the figure is accurate to a few ms.
wait_ready() {
    local start="$1" port="$2" pid="$3" deadline=$(($(now_ms) + 600000))
    while :; do
        if [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null)" == 200 ]]; then
            echo $(($(now_ms) - start))
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
        log "server (pid $pid) exited before it was ready"
        return 1
    fi
        if (($(now_ms) >= deadline)); then
            log "server (pid $pid) not ready after 600 s"
            return 1
        fi
    done
}

# kB of a /proc/PID/status field.
proc_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

# {"vm_rss_kb":..,"rss_anon_kb":..,"rss_file_kb":..} of one process.
rss_json() {
    printf '{"pid":%s,"vm_rss_kb":%s,"rss_anon_kb":%s,"rss_file_kb":%s}' "$1" \
        "$(proc_kb "$1" VmRSS)" "$(proc_kb "$1" RssAnon)" "$(proc_kb "$1" RssFile)"
}

# The pids of the nginx master's workers.
nginx_workers() { pgrep -P "$1" | tr '\n' ' '; }

# {"master":{..},"workers":[{..},..]} for nginx; {"process":{..}} for ricochet.
memory_json() {
    local server="$1" pid="$2"
    if [[ "$server" == nginx ]]; then
        local first=1 w
        printf '{"master":%s,"workers":[' "$(rss_json "$pid")"
        for w in $(nginx_workers "$pid"); do
            ((first)) || printf ','
            first=0
            rss_json "$w"
        done
        printf ']}'
    else
        printf '{"process":%s}' "$(rss_json "$pid")"
    fi
}

json_str() {
    local s="${1//\\/\\\\}"
    s="${s//\"/\\\"}"
    printf '"%s"' "$s"
}

server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid"
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=""
}
trap stop_server EXIT

# Writes the nginx config for links file $1 into prefix $2, listening on $3.
nginx_config() {
    local tsv="$1" prefix="$2" port="$3" n
    mkdir -p "$prefix/logs" "$prefix/tmp"
    n="$(wc -l <"$tsv")"
    # nginx map keys are case-insensitive: the dataset is unique ignoring case
    # (datagen --unique-ignore-case), so every key still maps to its own link. Quoted, since
    # URLs may contain '#' (a comment outside quotes) and ';'.
    awk -F'\t' '{ printf "\"/%s\" \"%s\";\n", $1, $2 }' "$tsv" >"$prefix/links.map"
    cat >"$prefix/nginx.conf" <<CONF
# Generated by perf/run.sh: redirects for $n links, like ricochet serving the same data dir.
daemon off;
master_process on;
worker_processes $cores;
pid $prefix/nginx.pid;
error_log $prefix/logs/error.log warn;
events {
    worker_connections 16384;
    multi_accept on;
}
http {
    access_log off;
    server_tokens off;
    # The defaults close a keep-alive connection after 1000 requests; ricochet does not.
    keepalive_requests 100000000;
    keepalive_timeout 60s;
    client_body_temp_path $prefix/tmp/body;
    proxy_temp_path $prefix/tmp/proxy;
    fastcgi_temp_path $prefix/tmp/fastcgi;
    uwsgi_temp_path $prefix/tmp/uwsgi;
    scgi_temp_path $prefix/tmp/scgi;
    # Large enough that $n keys load (nginx refuses to start with a hash that does not fit).
    map_hash_max_size $((n * 2 + 1024));
    # 512-byte buckets let nginx find a hash size quickly; with 128 it searches every size up to
    # the maximum, then warns and ignores the bucket size (slower startup, same lookups).
    map_hash_bucket_size 512;
    map \$uri \$target {
        default "";
        include $prefix/links.map;
    }
    server {
        listen 127.0.0.1:$port reuseport backlog=4096;
        location = /readyz { return 200 "ready\n"; }
        location / {
            if (\$target = "") { return 404; }
            return 302 \$target;
        }
    }
}
CONF
}

# Starts server $1 (ricochet|nginx) on links $2 (tsv) / data dir $3; sets server_pid, port and
# ready_ms. Retries on another port if the server dies before it is ready (e.g. the port was
# taken between picking and binding).
start_server() {
    local attempt
    for attempt in 1 2 3 4 5; do
        if start_server_once "$@"; then return 0; fi
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
        log "start of $1 failed (attempt $attempt), see $work/$1.err"
    done
    die "$1 did not start"
}

start_server_once() {
    local server="$1" tsv="$2" data="$3" t0
    port="$(port_free)"
    t0="$(now_ms)"
    if [[ "$server" == ricochet ]]; then
        printf '%s\n' "RICOCHET_API_KEY=<key> taskset -c $server_cpus $bin/ricochet serve --data-dir $data --listen 127.0.0.1:$port --cores $cores --create-rate 100000000 --create-burst 100000000" >>"$commands"
        RICOCHET_API_KEY="$api_key" taskset -c "$server_cpus" "$bin/ricochet" serve \
            --data-dir "$data" --listen "127.0.0.1:$port" --cores "$cores" \
            --create-rate 100000000 --create-burst 100000000 \
            >"$work/ricochet.out" 2>"$work/ricochet.err" &
    else
        local prefix="$work/nginx-$(basename "$tsv" .tsv)"
        nginx_config "$tsv" "$prefix" "$port"
        t0="$(now_ms)"
        printf '%s\n' "taskset -c $server_cpus $nginx_bin -p $prefix -c $prefix/nginx.conf" >>"$commands"
        taskset -c "$server_cpus" "$nginx_bin" -p "$prefix" -c "$prefix/nginx.conf" \
            >"$work/nginx.out" 2>"$work/nginx.err" &
    fi
    server_pid=$!
    if [[ "$server" == nginx ]]; then cp "$prefix/nginx.conf" "$out/nginx-$(basename "$tsv" .tsv).conf"; fi
    ready_ms="$(wait_ready "$t0" "$port" "$server_pid")" || return 1
    log "$server ready on :$port after $ready_ms ms"
}

# ---------------------------------------------------------------- datasets
# Generates $1 links (tsv + keys) and imports them; sets tsv, keys, data, import_ms.
dataset() {
    local n="$1"
    tsv="$work/links-$n.tsv"
    keys="$work/keys-$n.txt"
    data="$work/data-$n"
    if [[ ! -s "$tsv" || ! -s "$keys" ]]; then
        log "generating $n links"
        run "$bin/datagen" --count "$n" --out "$tsv" --unique-ignore-case --keys-out "$keys" --seed 1
    fi
    rm -rf "$data"
    log "importing $n links"
    local t0
    t0="$(now_ms)"
    run "$bin/ricochet" import --data-dir "$data" "$tsv" >"$work/import-$n.log"
    import_ms=$(($(now_ms) - t0))
    # Written back now, not by the kernel's flusher 30 s later in the middle of a measured
    # run on the server's CPU (dirty_expire_centisecs; seen in perf/latency_ab.sh's runs).
    sync
    log "imported $n links in $import_ms ms"
}

# Startup time, RSS at ready, disk bytes of both servers for dataset size $1 -> size-$1.json.
measure_size() {
    local n="$1" f first=1
    f="$out/size-$n.json"
    dataset "$n"
    printf '{"links":%s,"import_ms":%s,"ricochet_disk_bytes":%s,"links_tsv_bytes":%s,"servers":{' \
        "$n" "$import_ms" "$(du -sb "$data" | cut -f1)" "$(stat -c %s "$tsv")" >"$f"
    for server in ricochet nginx; do
        start_server "$server" "$tsv" "$data"
        ((first)) || printf ',' >>"$f"
        first=0
        printf '"%s":{"ready_ms":%s,"memory_at_ready":%s}' "$server" "$ready_ms" \
            "$(memory_json "$server" "$server_pid")" >>"$f"
        stop_server
    done
    printf '}}\n' >>"$f"
}

# ---------------------------------------------------------------- load
wrk_lua() {
    # perf/random.lua, beside the results so a report's commands run as written.
    cp "$here/random.lua" "$work/random.lua"
    cp "$work/random.lua" "$out/random.lua"
}

# wrk against $1 at pipelining depth $2, round $3 -> wrk-<server>-p<depth>-r<round>.json;
# $4 = the keys file (default: the dataset's keys).
run_wrk() {
    local server="$1" depth="$2" round="$3" key_file="${4:-$keys}" name
    name="wrk-$server-p$depth-r$round"
    log "wrk $server depth $depth round $round (${duration_s}s)"
    printf '%s\n' "WRK_DEPTH=$depth WRK_KEYS=$key_file taskset -c $load_cpu wrk -t1 -c$conns -d${duration_s}s -s random.lua http://127.0.0.1:$port/" >>"$commands"
    WRK_DEPTH="$depth" WRK_KEYS="$key_file" WRK_JSON="$out/$name.json" \
        taskset -c "$load_cpu" wrk -t1 -c"$conns" -d"${duration_s}s" -s "$work/random.lua" \
        "http://127.0.0.1:$port/" >"$out/$name.txt" 2>&1 ||
        log "wrk against $server failed (see $name.txt)"
}

# perf profile of the server CPUs while wrk (no pipelining) drives server $1 -> profile-<server>.txt
run_profile() {
    local server="$1" perf_pid
    if ! command -v perf >/dev/null; then
        log "perf not found: profile of $server skipped"
        return
    fi
    # The serving processes (ricochet, or nginx's workers), user and kernel side: on loopback
    # the network stack is much of the cost. Per process, so other work on the CPUs stays out.
    local pids="$server_pid"
    if [[ "$server" == nginx ]]; then pids="$(nginx_workers "$server_pid" | xargs | tr ' ' ',')"; fi
    log "profiling $server (pids $pids) under wrk (${duration_s}s)"
    perf record -q -F 999 -g -p "$pids" -o "$work/$server.perf.data" -- sleep "$((duration_s + 1))" \
        >"$work/perf-record-$server.log" 2>&1 &
    perf_pid=$!
    printf '%s\n' "perf record -F 999 -g -p <$server pids> -- sleep $((duration_s + 1))  # during the wrk run below" >>"$commands"
    printf '%s\n' "WRK_DEPTH=1 WRK_KEYS=$keys taskset -c $load_cpu wrk -t1 -c$conns -d${duration_s}s -s random.lua http://127.0.0.1:$port/" >>"$commands"
    WRK_DEPTH=1 WRK_KEYS="$keys" WRK_JSON="$work/wrk-profiled-$server.json" \
        taskset -c "$load_cpu" wrk -t1 -c"$conns" -d"${duration_s}s" -s "$work/random.lua" \
        "http://127.0.0.1:$port/" >/dev/null 2>&1 || true
    wait "$perf_pid" || true
    printf '%s\n' "perf report --no-children --sort dso,symbol -g none --percent-limit 0.5 --stdio" >>"$commands"
    # Padding and the empty IPC columns (" -  -") off each line.
    perf report -i "$work/$server.perf.data" --no-children --sort dso,symbol -g none \
        --percent-limit 0.5 --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' |
        sed -E 's/([[:space:]]+-)*[[:space:]]*$//; s/[[:space:]]{3,}/  /g' >"$out/profile-$server.txt" ||
        log "perf report for $server failed"
}

# loadgen against $1: fixed rates, then --max -> loadgen-<server>-<rate|max>.json
run_loadgen() {
    local server="$1" rate
    for rate in $rates; do
        log "loadgen $server at $rate req/s"
        run taskset -c "$load_cpu" "$bin/loadgen" --target "127.0.0.1:$port" --links "$tsv" \
            --rate "$rate" --duration "${duration_s}s" --warmup "${warmup_s}s" --click-headers \
            --connections "$conns" --cpu "$load_cpu" --json "$out/loadgen-$server-$rate.json" \
            >"$out/loadgen-$server-$rate.txt" 2>&1 ||
            log "loadgen $server $rate reported errors (see loadgen-$server-$rate.txt)"
    done
    log "loadgen $server --max (SLO p99 $slo)"
    run taskset -c "$load_cpu" "$bin/loadgen" --target "127.0.0.1:$port" --links "$tsv" \
        --max --slo-p99 "$slo" --rate 10000 --duration "${duration_s}s" --warmup "${warmup_s}s" --click-headers \
        --connections "$conns" --cpu "$load_cpu" --json "$out/loadgen-$server-max.json" \
        >"$out/loadgen-$server-max.txt" 2>&1 ||
        log "loadgen $server --max reported errors (see loadgen-$server-max.txt)"
}

# Durable creates/s on the running ricochet -> creates.json
run_creates() {
    local code
    code="$(curl -s -o "$work/create-probe.out" -w '%{http_code}' -X POST \
        -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' \
        --data '{"long_url":"https://example.com/perf-probe"}' \
        "http://127.0.0.1:$port/api/v1/urls" || true)"
    if [[ "$code" != 201 ]]; then
        log "POST /api/v1/urls answered $code: create test skipped"
        printf '{"skipped":%s}\n' \
            "$(json_str "POST /api/v1/urls answered HTTP $code (expected 201): the create API is not available in this build")" \
            >"$out/creates.json"
        return
    fi
    log "loadgen creates --max"
    printf '%s\n' "taskset -c $load_cpu $bin/loadgen --target 127.0.0.1:$port --links $tsv --create-share 1.0 --api-key <key> --max --slo-p99 ${PERF_CREATE_SLO_P99:-10ms} --rate 1000 --duration ${duration_s}s --warmup ${warmup_s}s --connections $conns --cpu $load_cpu" >>"$commands"
    taskset -c "$load_cpu" "$bin/loadgen" --target "127.0.0.1:$port" --links "$tsv" \
        --create-share 1.0 --api-key "$api_key" --max --slo-p99 "${PERF_CREATE_SLO_P99:-10ms}" \
        --rate 1000 --duration "${duration_s}s" --warmup "${warmup_s}s" \
        --connections "$conns" --cpu "$load_cpu" --json "$out/loadgen-creates-max.json" \
        >"$out/loadgen-creates-max.txt" 2>&1 ||
        log "loadgen creates reported errors (see loadgen-creates-max.txt)"
    printf '{"loadgen":"loadgen-creates-max.json"}\n' >"$out/creates.json"
}

# ---------------------------------------------------------------- main
started_s="$(date +%s)"
measure_size "$links"   # leaves tsv/keys/data of the main dataset
wrk_lua
# wrk in rounds, servers alternating, each started afresh, so one unlucky 5 s window on a
# shared machine does not decide a ratio. All rounds come before the create test: its links
# would make the next ricochet start replay them and compact in the background, on the core.
# Each ricochet round also measures wrk's own ceiling without pipelining: the same script
# asking ricochet for /healthz (no lookup, a shorter answer). No server can show more than
# ceiling / nginx here, since wrk (Lua per request) runs out of CPU first.
echo healthz >"$work/ceiling-keys.txt"
for ((round = 1; round <= wrk_rounds; round++)); do
    for server in ricochet nginx; do
        start_server "$server" "$tsv" "$data"
        run_wrk "$server" 1 "$round"
        run_wrk "$server" "$pipeline_depth" "$round"
        if [[ "$server" == ricochet ]]; then
            run_wrk ceiling 1 "$round" "$work/ceiling-keys.txt"
        fi
        stop_server
    done
done
for server in ricochet nginx; do
    start_server "$server" "$tsv" "$data"
    if [[ "${PERF_PROFILE:-0}" == 1 ]]; then run_profile "$server"; fi
    run_loadgen "$server"
    printf '{"server":"%s","links":%s,"memory":%s}\n' "$server" "$links" \
        "$(memory_json "$server" "$server_pid")" >"$out/memory-after-load-$server.json"
    if [[ "$server" == ricochet ]]; then run_creates; fi
    stop_server
done
if [[ "${PERF_10M:-0}" == 1 && "$links" != 10000000 ]]; then
    measure_size 10000000
fi

# ---------------------------------------------------------------- criterion benches
if [[ "${PERF_BENCHES:-1}" == 1 ]]; then
    log "criterion benches: e2e (in-process local hit and miss), forward (cross-core round trip)"
    rm -rf "$repo/target/criterion/e2e_local" "$repo/target/criterion/mesh_forward"
    bench_env=()
    if [[ "${PERF_10M:-0}" == 1 ]]; then bench_env=(RICOCHET_BENCH_10M=1); fi
    # The in-process path on a server CPU; the forward bench pins its own two threads.
    run env "${bench_env[@]}" taskset -c "$server_cpus" cargo bench -q --bench e2e -- --noplot \
        >"$out/bench-e2e.txt" 2>&1 || log "e2e bench failed (see bench-e2e.txt)"
    run cargo bench -q --bench forward -- --noplot >"$out/bench-forward.txt" 2>&1 ||
        log "forward bench failed (see bench-forward.txt)"
    while IFS= read -r f; do
        rel="${f#"$repo/target/criterion/"}"
        rel="${rel%/new/estimates.json}"
        cp "$f" "$out/criterion-${rel//\//--}.json"
    done < <(find "$repo/target/criterion/e2e_local" "$repo/target/criterion/mesh_forward" \
        -path '*/new/estimates.json' 2>/dev/null)
fi

# ---------------------------------------------------------------- metadata and report
mem_kb="$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
cpu_model="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
{
    printf '{"date":"%s","commit":"%s","label":%s,' "$day" "$commit" "$(json_str "$label")"
    printf '"machine":{"cpu_model":%s,"cpus":%s,"ram_bytes":%s,"kernel":%s,"nginx_version":%s,"wrk_version":%s},' \
        "$(json_str "$cpu_model")" "$(nproc --all)" "$((mem_kb * 1024))" "$(json_str "$(uname -sr)")" \
        "$(json_str "$("$nginx_bin" -v 2>&1 | sed 's/^nginx version: //')")" \
        "$(json_str "$(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)")"
    printf '"config":{"links":%s,"duration_s":%s,"warmup_s":%s,"rates":[%s],"slo_p99":%s,"connections":%s,"pipeline_depth":%s,"wrk_rounds":%s,"server_cpus":%s,"load_cpu":%s,"cores":%s,"ten_million":%s},' \
        "$links" "$duration_s" "$warmup_s" "$(echo $rates | tr ' ' ',')" "$(json_str "$slo")" "$conns" \
        "$pipeline_depth" "$wrk_rounds" "$(json_str "$server_cpus")" "$(json_str "$load_cpu")" "$cores" \
        "$([[ "${PERF_10M:-0}" == 1 ]] && echo true || echo false)"
    printf '"wall_s":%s}\n' "$(($(date +%s) - started_s))"
} >"$out/meta.json"

run "$bin/perf-report" --raw "$out" --out "$repo/perf/reports/$name.md"
log "report: perf/reports/$name.md (raw: perf/reports/$name/)"
