#!/usr/bin/env python3
"""A small HTTP/1.1 upstream for tests and `make run`.

GET  /big?bytes=N   streams N bytes (chunked), never holding them in memory
GET  /slow?ms=N     answers after N ms
ANY  /status/NNN    answers status NNN (200-599) with a small JSON body
GET  /headers?Name=value&...  answers 200 with these response headers added
GET  /early         sends 103 Early Hints, then 200
GET  /__stats       {"received": N, "in_progress": M, "connections": C, "resumed": R}: requests
                    seen and still being answered (tests use it to know a request has reached
                    the upstream), connections accepted, and those that resumed a TLS session
GET  /__health      answers the status POST /__health?status=NNN set last (200 at first), not
                    counted in /__stats: an endpoint's health check that a test turns bad
With --tls-cert and --tls-key it speaks HTTPS (--tls-client-ca: a client certificate required).
ANY  /echo...       (and any other path) answers JSON describing the request it received
"""
import argparse
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Stats:
    lock = threading.Lock()
    received = 0
    in_progress = 0
    connections = 0
    resumed = 0  # TLS connections that resumed a session
    health = 200  # what /__health answers


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: without this, Nagle and delayed ACKs add
    # ~40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def setup(self):
        with Stats.lock:
            Stats.connections += 1
            Stats.resumed += bool(getattr(self.request, "session_reused", False))
        super().setup()

    def _answer(self):
        url = urlsplit(self.path)
        if url.path == "/__health":
            if self.command == "POST":
                Stats.health = int(parse_qs(url.query).get("status", ["200"])[0])
            self.send_response(Stats.health)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path == "/__stats":
            with Stats.lock:
                out = json.dumps({"received": Stats.received,
                                  "in_progress": Stats.in_progress,
                                  "connections": Stats.connections,
                                  "resumed": Stats.resumed}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        with Stats.lock:
            Stats.received += 1
            Stats.in_progress += 1
        try:
            self._respond(url)
        finally:
            with Stats.lock:
                Stats.in_progress -= 1

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _respond(self, url):
        query = parse_qs(url.query)
        body = self._read_body()
        if url.path == "/early":
            self.send_response_only(103)
            self.send_header("Link", "</style.css>; rel=preload")
            self.end_headers()
            self.wfile.flush()
        if url.path == "/headers":
            self.send_response(200)
            for name, values in query.items():
                for v in values:
                    self.send_header(name, v)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        if url.path == "/unframed":
            # Neither a length nor chunks: the body runs to the connection's close.
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"u" * int(query.get("bytes", ["10"])[0]))
            self.close_connection = True
            return
        if url.path == "/trailers":
            # A chunked body, then the query's fields as trailers.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n0\r\n")
            for name, values in query.items():
                for v in values:
                    self.wfile.write(("%s: %s\r\n" % (name, v)).encode())
            self.wfile.write(b"\r\n")
            return
        if url.path == "/big":
            n = int(query.get("bytes", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"x" * 65536
            left = n
            while left > 0:
                part = chunk[: min(left, len(chunk))]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                left -= len(part)
            self.wfile.write(b"0\r\n\r\n")
            return
        if url.path == "/slow":
            time.sleep(int(query.get("ms", ["1000"])[0]) / 1000)
        status = url.path[len("/status/"):] if url.path.startswith("/status/") else ""
        if status.isdigit() and 200 <= int(status) <= 599:
            # 204 and 304 never carry a body.
            out = b"" if status in ("204", "304") else json.dumps({"status": int(status)}).encode()
            self.send_response(int(status))
            self.send_header("Content-Type", "application/json")
            if out:
                self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)
            return
        out = json.dumps({
            "method": self.command,
            "path": self.path,
            "headers": {k: v for k, v in self.headers.items()},
            "body_bytes": len(body),
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _answer


class Server(ThreadingHTTPServer):
    # The default listen backlog (5) drops connections when the gateway opens many upstream
    # connections at once, which then look like connect timeouts.
    request_queue_size = 128
    daemon_threads = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--port-file", help="write the bound port here (use --port 0)")
    ap.add_argument("--idle-timeout", type=float,
                    help="close a keep-alive connection after this many idle seconds")
    ap.add_argument("--tls-cert", help="PEM certificate: answer HTTPS")
    ap.add_argument("--tls-key", help="its PEM key")
    ap.add_argument("--tls-client-ca", help="require a client certificate signed by this CA")
    args = ap.parse_args()
    if args.idle_timeout:
        Handler.timeout = args.idle_timeout  # StreamRequestHandler: a timeout ends the connection
    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        # The handshake at accept (a failed one is dropped by socketserver, counted nowhere).
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.tls_client_ca)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(str(server.server_address[1]))
    print(f"upstream listening on 127.0.0.1:{server.server_address[1]}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
