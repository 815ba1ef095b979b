#!/usr/bin/env python3
# Read-through latency and feed lag under a create load. Usage:
#   propagation.py A_PORT B_PORT C_PORT PROBES LOAD_CONNS
# LOAD_CONNS threads create links on node A in a closed loop the whole time. The main thread
# creates PROBES aliases on A, one at a time; after each 201 it GETs the alias once on B (whose
# change feed is paused: the answer is a read-through) and polls C (feed on) with the API's
# GET /api/v1/urls/{key}, which answers from the node's own store only (no read-through),
# until the feed has applied the link there.
# Prints the create load, read-through latency and feed propagation percentiles.
import socket, sys, threading, time
a, b, c, probes, load = (int(x) for x in sys.argv[1:6])
KEY = b'bench-key-0123456789abcdef'
def conn(port):
    s = socket.create_connection(('127.0.0.1', port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); return s
def roundtrip(s, req):
    s.sendall(req); d = b''
    while b'\r\n\r\n' not in d: d += s.recv(65536)
    head, _, rest = d.partition(b'\r\n\r\n')
    n = int([l.split(b':')[1] for l in head.split(b'\r\n') if l.lower().startswith(b'content-length')][0])
    while len(rest) < n: rest += s.recv(65536)
    return int(head.split(b' ')[1]), rest
def create(s, url, alias=None):
    body = b'{"long_url":"%s"%s}' % (url, b',"custom_alias":"%s"' % alias if alias else b'')
    return roundtrip(s, b'POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ' + KEY +
                     b'\r\nContent-Length: %d\r\n\r\n%s' % (len(body), body))[0]
def get(s, key):
    return roundtrip(s, b'GET /%s HTTP/1.1\r\nHost: t\r\n\r\n' % key)[0]
def api_get(s, key):
    return roundtrip(s, b'GET /api/v1/urls/%s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n' % (key, KEY))[0]
stop = False; made = [0] * load
def loader(w):
    s = conn(a); i = 0
    while not stop:
        assert create(s, b'https://example.com/load/%d/%d' % (w, i)) == 201; i += 1; made[w] = i
ts = [threading.Thread(target=loader, args=(w,)) for w in range(load)]
t0 = time.time(); [t.start() for t in ts]
sa, sb, sc = conn(a), conn(b), conn(c)
rt, feed = [], []
for i in range(probes):
    alias = b'probe-%d' % i
    assert create(sa, b'https://example.com/probe/%d' % i, alias) == 201
    t = time.time()
    st = get(sb, alias); rt.append(time.time() - t)
    assert st == 302, st
    t = time.time()
    while api_get(sc, alias) != 200:
        time.sleep(0.0005)
    feed.append(time.time() - t)
stop = True; [t.join() for t in ts]; el = time.time() - t0
def pct(v, p): v = sorted(v); return v[min(len(v) - 1, int(len(v) * p))] * 1e3
print('create load on A: %d conns, %.0f creates/s' % (load, sum(made) / el))
print('read-through GET on B (feed paused), n=%d: p50 %.2f ms p99 %.2f ms max %.2f ms' % (len(rt), pct(rt, .5), pct(rt, .99), max(rt) * 1e3))
print('feed lag to C (201 on A -> applied on C), n=%d: p50 %.1f ms p99 %.1f ms max %.1f ms' % (len(feed), pct(feed, .5), pct(feed, .99), max(feed) * 1e3))
