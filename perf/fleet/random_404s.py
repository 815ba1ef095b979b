#!/usr/bin/env python3
# GETs N random 7-character base62 keys (none exists) over C keep-alive connections; prints
# the 404 count and the latency percentiles. Usage: random_404s.py PORT N C.
# Used by perf/fleet_floods.sh.
import random, socket, sys, threading, time
port, n, conns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
lat, statuses, lock = [], {}, threading.Lock()
def worker(w):
    rnd = random.Random(w)
    s = socket.create_connection(('127.0.0.1', port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    mine, seen = [], {}
    for _ in range(n // conns):
        key = ''.join(rnd.choice(alphabet) for _ in range(7))
        t = time.time()
        s.sendall(b'GET /%s HTTP/1.1\r\nHost: t\r\n\r\n' % key.encode())
        d = b''
        while b'\r\n\r\n' not in d: d += s.recv(4096)
        head, _, rest = d.partition(b'\r\n\r\n')
        length = int([l.split(b':')[1] for l in head.split(b'\r\n') if l.lower().startswith(b'content-length')][0])
        while len(rest) < length: rest += s.recv(4096)
        mine.append(time.time() - t)
        code = head.split(b' ')[1].decode()
        seen[code] = seen.get(code, 0) + 1
    with lock:
        lat.extend(mine)
        for k, v in seen.items(): statuses[k] = statuses.get(k, 0) + v
ts = [threading.Thread(target=worker, args=(w,)) for w in range(conns)]
t0 = time.time(); [t.start() for t in ts]; [t.join() for t in ts]; el = time.time() - t0
lat.sort()
print('%d conns: %d GETs in %.1f s, statuses %s, p50 %.2f ms p99 %.2f ms' % (
    conns, len(lat), el, statuses, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * .99)] * 1e3))
