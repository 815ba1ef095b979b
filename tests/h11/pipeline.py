#!/usr/bin/env python3
"""The reported response desync, reproduced with a strict third-party HTTP/1.1 client (h11).

Run by tests/h11_pipeline.rs against a real server:

    pipeline.py ADDR API_KEY KEYS_TSV TRIES

For TRIES rounds it writes, in one send on one keep-alive connection, a PATCH of a link, a GET
of an imported key (owned by any core), a GET of the patched link and a HEAD of an imported
key, then parses the four answers with h11 and checks each against its own request: the
PATCH's 200 carries the new target, the first GET redirects to the imported key's URL, the
second GET to the new target (it was pipelined after the PATCH, so it must see it), and the
HEAD has no body. Prints the number of mismatched answers and exits 1 if there is any.
"""

import json
import socket
import sys

import h11


def request_bytes(method, target, headers=(), body=b""):
    """A request as h11 encodes it (one throwaway connection per request)."""
    c = h11.Connection(h11.CLIENT)
    hs = [("Host", "t")] + list(headers)
    if body:
        hs.append(("Content-Length", str(len(body))))
    out = c.send(h11.Request(method=method, target=target, headers=hs))
    if body:
        out += c.send(h11.Data(data=body))
    out += c.send(h11.EndOfMessage())
    return out


class Reader:
    """Parses the answers of pipelined requests in order; h11 is told each request's method
    so it frames HEAD and 204 answers the strict way."""

    def __init__(self, sock):
        self.sock = sock
        self.conn = h11.Connection(h11.CLIENT)

    def read(self, method, target):
        self.conn.send(h11.Request(method=method, target=target, headers=[("Host", "t")]))
        self.conn.send(h11.EndOfMessage())
        status, headers, body = None, {}, b""
        while True:
            ev = self.conn.next_event()
            if ev is h11.NEED_DATA:
                data = self.sock.recv(65536)
                if not data:
                    raise RuntimeError("connection closed before a full answer")
                self.conn.receive_data(data)
            elif isinstance(ev, h11.Response):
                status = ev.status_code
                headers = {k.decode().lower(): v.decode() for k, v in ev.headers}
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                break
            else:
                raise RuntimeError(f"unexpected event {ev!r}")
        self.conn.start_next_cycle()
        return status, headers, body


def main():
    addr, api_key, keys_tsv, tries = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    host, port = addr.rsplit(":", 1)
    links = []
    with open(keys_tsv) as f:
        for line in f:
            key, url, status = line.rstrip("\n").split("\t")
            links.append((key, url, int(status)))
    auth = [("Authorization", f"Bearer {api_key}"), ("Content-Type", "application/json")]
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(20)
    r = Reader(sock)
    body = json.dumps({"long_url": "https://orig.example/", "custom_alias": "h11p"}).encode()
    sock.sendall(request_bytes("POST", "/api/v1/urls", auth, body))
    status, _, _ = r.read("POST", "/api/v1/urls")
    assert status == 201, status
    bad = 0
    for i in range(tries):
        new = f"https://patched.example/{i}"
        key, url, code = links[i % len(links)]
        hkey, hurl, hcode = links[(i * 7 + 3) % len(links)]
        patch = json.dumps({"long_url": new}).encode()
        sock.sendall(
            request_bytes("PATCH", "/api/v1/urls/h11p", auth, patch)
            + request_bytes("GET", f"/{key}")
            + request_bytes("GET", "/h11p")
            + request_bytes("HEAD", f"/{hkey}")
        )
        s1, _, b1 = r.read("PATCH", "/api/v1/urls/h11p")
        s2, h2, _ = r.read("GET", f"/{key}")
        s3, h3, _ = r.read("GET", "/h11p")
        s4, h4, b4 = r.read("HEAD", f"/{hkey}")
        ok = [
            s1 == 200 and json.loads(b1).get("long_url") == new,
            s2 == code and h2.get("location") == url,
            s3 == 302 and h3.get("location") == new,
            s4 == hcode and h4.get("location") == hurl and b4 == b"",
        ]
        if not all(ok):
            bad += ok.count(False)
            if bad <= 5:
                print(f"try {i}: {ok} -> {s1} {s2} {h2.get('location')} {s3} {h3.get('location')} {s4}")
    print(f"{tries} tries, {bad} mismatched answers")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
