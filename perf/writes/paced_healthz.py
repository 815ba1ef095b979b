#!/usr/bin/env python3
# Used by perf/reports/*-writes.md; usage: see that report. API key: bench-key-0123456789abcdef (RICOCHET_API_KEY of the server under test).
import socket,time,threading,sys
rate=float(sys.argv[1]); dur=float(sys.argv[2]); port=int(sys.argv[3]); N=8
done=[0]; lock=threading.Lock()
def worker(w):
    s=socket.create_connection(('127.0.0.1',port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    per=rate/N; t0=time.time(); i=0
    while time.time()-t0<dur:
        body=b'{"long_url":"https://example.com/p%d/%d"}'%(w,i)
        req=b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
        s.sendall(req); d=b''
        while not d.endswith(b'ok\n'): d+=s.recv(4096)
        i+=1
        nxt=t0+i/per
        sl=nxt-time.time()
        if sl>0: time.sleep(sl)
    with lock: done[0]+=i
ts=[threading.Thread(target=worker,args=(w,)) for w in range(N)]
[t.start() for t in ts]; [t.join() for t in ts]
print('creates done: %d (%.0f/s)'%(done[0], done[0]/dur))
