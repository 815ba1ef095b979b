#!/usr/bin/env python3
# Creates aliases k0..k{N-1} -> https://example.com/perf/{i} on a server (16 keep-alive
# connections). Usage: create_aliases.py PORT N API_KEY. Used by perf/fleet_redirects.sh.
import socket, sys, threading
port, n, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
def worker(w):
    s = socket.create_connection(('127.0.0.1', port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(w, n, 16):
        body = b'{"long_url":"https://example.com/perf/%d","custom_alias":"k-%d"}' % (i, i)
        req = (b'POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ' + key +
               b'\r\nContent-Length: %d\r\n\r\n%s' % (len(body), body))
        s.sendall(req); d = b''
        while not d.endswith(b'}'): d += s.recv(4096)
        assert b' 201 ' in d[:20], d[:200]
ts = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
