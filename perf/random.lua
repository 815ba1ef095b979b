-- wrk's requests for perf/run.sh and perf/domains_ab.sh: random keys from WRK_KEYS, built
-- once in init (Lua string building per request would make wrk the bottleneck); depth > 1
-- sends that many requests per write. A line is KEY, or KEY<TAB>HOST to send that Host.
local pool = {}
local at = 0
local POOL = 65536

function init(args)
    local depth = tonumber(os.getenv("WRK_DEPTH") or "1")
    local keys = {}
    for line in io.lines(os.getenv("WRK_KEYS")) do keys[#keys + 1] = line end
    math.randomseed(tonumber(os.getenv("WRK_SEED") or "1"))
    local batches = math.floor(POOL / depth)
    for b = 1, batches do
        local parts = {}
        for i = 1, depth do
            local line = keys[math.random(#keys)]
            local key, host = line:match("^([^\t]+)\t(.+)$")
            if key then
                parts[i] = wrk.format("GET", "/" .. key, {Host = host})
            else
                parts[i] = wrk.format("GET", "/" .. line)
            end
        end
        pool[b] = table.concat(parts)
    end
end

function request()
    at = at % #pool + 1
    return pool[at]
end

function done(summary, latency, requests)
    local e = summary.errors
    local f = assert(io.open(os.getenv("WRK_JSON"), "w"))
    f:write(string.format(
        '{"requests":%d,"duration_us":%d,"bytes":%d,"rps":%.1f,' ..
        '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
        '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.1f}}\n',
        summary.requests, summary.duration, summary.bytes,
        summary.requests / (summary.duration / 1e6),
        e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(50), latency:percentile(90), latency:percentile(99),
        latency:percentile(99.9), latency.max, latency.mean))
    f:close()
end
