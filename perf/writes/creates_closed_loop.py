#!/usr/bin/env python3
# Used by perf/reports/*-writes.md; usage: see that report. API key: bench-key-0123456789abcdef (RICOCHET_API_KEY of the server under test).
import socket,time,threading,sys
N=int(sys.argv[1]); per=int(sys.argv[2]); port=int(sys.argv[3])
lat=[]; lock=threading.Lock()
def worker(w):
    s=socket.create_connection(('127.0.0.1',port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    my=[]
    for i in range(per):
        body=b'{"long_url":"https://example.com/w%d/i%d"}'%(w,i)
        req=b'POST /api/v1/urls HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer bench-key-0123456789abcdef\r\nContent-Length: %d\r\n\r\n%s'%(len(body),body)
        t=time.time(); s.sendall(req); d=b''
        while not d.endswith(b'}'): d+=s.recv(4096)
        assert b' 201 ' in d[:20], d[:100]
        my.append(time.time()-t)
    with lock: lat.extend(my)
ts=[threading.Thread(target=worker,args=(w,)) for w in range(N)]
t0=time.time(); [t.start() for t in ts]; [t.join() for t in ts]; el=time.time()-t0
lat.sort()
print('%d conns closed-loop: %.0f durable creates/s, p50 %.2fms p99 %.2fms (n=%d)'%(N, N*per/el, lat[len(lat)//2]*1e3, lat[int(len(lat)*.99)]*1e3, len(lat)))
