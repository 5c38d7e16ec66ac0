#!/usr/bin/env python3
"""HTTP/2 on the gateway listener (issue 34), through the real binary and real clients: curl
(--http2 over TLS, --http2-prior-knowledge), h2load, httpx with HTTP/2, a grpcio client, and a
raw-frame client of our own (hpack for the header blocks) for everything a stock client will not
send.

    python3 test_http2.py --binary build/tollgate [-v]

- ClientTests: h2c and h2 (ALPN), each stream limited like a request (exactly the capacity of
  concurrent streams pass), the 429 with its headers and problem body, bodies both ways (a 5 MB
  download, a 300 KB upload), HEAD, cookies joined, canonical targets, h2load, metrics.
- MalformedTests: a table of header blocks HTTP/2 forbids (RFC 9113 8.1.1, 8.2, 8.3): each is
  reset before the upstream sees it, and the connection serves the next stream.
- DefenceTests: rapid reset, SETTINGS / PING / PRIORITY / WINDOW_UPDATE / empty DATA floods,
  a CONTINUATION flood, an HPACK bomb, a header list past the limit (431), max concurrent streams,
  a stream stalled on a zero window, a client that never reads. Each fails without its defence.
- GrpcTests: a grpcio client gets RESOURCE_EXHAUSTED (and the rate-limit metadata) from a
  per-method limit, UNAUTHENTICATED for a bad key.
- GrpcUpstreamTests: upstream.http2, a grpcio server behind the gateway over h2c and h2 (TLS):
  unary, server- and client-streaming calls, statuses and trailing metadata, the health service,
  200 calls at once, a method limit in front, an upstream lost, refusing h2c, or restarted.
"""
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import unittest

try:
    import h2  # noqa: F401  (python3-h2 brings hpack)
    import hpack
    import httpx
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
            "/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase, SLOW, deadline_loop, wait_until  # noqa: E402
from test_tls import Certs  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10))
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
PROTOCOL_ERROR, REFUSED_STREAM, ENHANCE_YOUR_CALM = 0x1, 0x7, 0xb


def frame(kind, flags, stream, payload=b""):
    return struct.pack("!I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        "!I", stream) + payload


class RawH2:
    """A client that sends any frame, and reads the server's frames one by one."""

    def __init__(self, port, settings=(), tls_ca=None):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        if tls_ca:
            ctx = ssl.create_default_context(cafile=tls_ca)
            ctx.set_alpn_protocols(["h2"])
            raw = ctx.wrap_socket(raw, server_hostname="localhost")
        self.s = raw
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.closed = False
        payload = b"".join(struct.pack("!HI", k, v) for k, v in settings)
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0, payload))

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def block(self, fields):
        return self.enc.encode([(n.encode() if isinstance(n, str) else n,
                                 v.encode() if isinstance(v, str) else v) for n, v in fields],
                               huffman=False)

    def request(self, stream, fields, end_stream=True):
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        return self.send(frame(HEADERS, flags, stream, self.block(fields)))

    def next_frame(self, timeout):
        """(kind, flags, stream, payload), or None when the connection closed or went quiet; a
        HEADERS frame's payload is its decoded fields."""
        self.s.settimeout(timeout)
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            try:
                chunk = self.s.recv(65536)
            except (socket.timeout, TimeoutError):
                return None
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self.buf += chunk
        n = int.from_bytes(self.buf[:3], "big")
        f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7fffffff,
             self.buf[9:9 + n])
        self.buf = self.buf[9 + n:]
        if f[0] == SETTINGS and not f[1] & ACK:
            self.send(frame(SETTINGS, ACK, 0))
        if f[0] == HEADERS:  # decoded at once: the HPACK table follows every block
            f = f[:3] + (self.dec.decode(f[3]),)
        return f

    def until(self, predicate, timeout=5.0):
        """Frames until one matches (returned last) or the connection closes or times out."""
        seen = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            f = self.next_frame(max(0.05, end - time.monotonic()))
            if f is None:
                if self.closed:
                    break
                continue
            seen.append(f)
            if predicate(f):
                break
        return seen

    def response(self, stream, timeout=5.0):
        """(status, headers, body) of `stream`, or ("reset", code) / ("goaway", code) /
        ("closed", None)."""
        headers, body = None, b""
        for f in self.until(lambda f: (f[2] == stream and f[1] & END_STREAM and f[0] in
                                       (HEADERS, DATA)) or (f[2] == stream and f[0] == RST_STREAM)
                            or f[0] == GOAWAY, timeout):
            kind, flags, sid, payload = f
            if kind == GOAWAY:
                return ("goaway", int.from_bytes(payload[4:8], "big"))
            if sid != stream:
                continue
            if kind == RST_STREAM:
                return ("reset", int.from_bytes(payload[:4], "big"))
            if kind == HEADERS:
                if headers is None:
                    headers = dict((k.lower(), v) for k, v in payload)
            elif kind == DATA:
                body += payload
                if payload:
                    self.send(frame(WINDOW_UPDATE, 0, 0, struct.pack("!I", len(payload))) +
                              frame(WINDOW_UPDATE, 0, stream, struct.pack("!I", len(payload))))
        if headers is None:
            return ("closed", None)
        return (int(headers[":status"]), headers, body)

    def statuses(self, streams, timeout=10.0):
        """The :status (or "reset") each of `streams` ends with, as they come in any order."""
        got = {}
        want = set(streams)
        def ended(f):
            kind, flags, sid, payload = f
            if sid in want and kind == HEADERS and ":status" in dict(payload):
                got[sid] = int(dict(payload)[":status"])
            if sid in want and kind == DATA and payload:
                self.send(frame(WINDOW_UPDATE, 0, 0, struct.pack("!I", len(payload))))
            if sid in want and kind == RST_STREAM:
                got[sid] = "reset"
                want.discard(sid)
            elif sid in want and flags & END_STREAM and kind in (HEADERS, DATA):
                want.discard(sid)
            return not want
        self.until(ended, timeout)
        return [got.get(sid) for sid in streams]

    def goaway(self, timeout=5.0):
        """The error code of the server's GOAWAY, or None when it sent none before closing."""
        for f in self.until(lambda f: f[0] == GOAWAY, timeout):
            if f[0] == GOAWAY:
                return int.from_bytes(f[3][4:8], "big")
        return None

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def get_fields(path, authority="localhost", method="GET", extra=()):
    return [(":method", method), (":scheme", "http"), (":authority", authority),
            (":path", path)] + list(extra)


def config(capacity=1000, refill="1000", **server):
    s = {"threads": 2, "access_log": False, "send_timeout_ms": 1500}
    s.update(server)
    return {
        "server": s,
        "store": {"type": "memory"},
        "mode": "enforce",
        "upstream": {"max_client_share_percent": 100},
        "plans": {"free": {"limits": [{"name": "burst", "algorithm": "token_bucket",
                                       "capacity": 5, "refill_per_second": SLOW}]}},
        "keys": [{"id": "k1", "key": "key-one", "plan": "free"}],
        "routes": [{"path": "/v1/*", "identity": "key"},
                   {"path": "/pkg.Limited/*", "name": "limited", "identity": "ip", "limits": [
                       {"name": "method", "algorithm": "token_bucket", "capacity": 2,
                        "refill_per_second": SLOW}]},
                   {"path": "/*", "identity": "ip"}],
        "anonymous": {"limits": [{"name": "ip", "algorithm": "token_bucket",
                                  "capacity": capacity, "refill_per_second": refill}]},
    }


class Http2Case(GatewayTestCase):

    def gateway(self, capacity=1000, refill="1000", tls=False, **server):
        c = config(capacity, refill, **server)
        if tls:
            self.certs = Certs(os.path.join(self.tmpdir, "certs"))
            cert, key = self.certs.leaf("localhost", ["localhost"])
            c["server"]["tls"] = {"certificates": [{"cert_file": cert, "key_file": key}]}
        return self.start(c)

    def received(self):
        return self.upstream.stats()["received"]

    def curl(self, *args):
        out = subprocess.run(["curl", "-s", "-S", "--max-time", "15"] + list(args),
                             capture_output=True, timeout=30)
        return out.stdout.decode(errors="replace"), out.returncode


class ClientTests(Http2Case):

    def test_h2c_prior_knowledge(self):
        gw = self.gateway()
        out, rc = self.curl("--http2-prior-knowledge", "-o", "/dev/null", "-w",
                            "%{http_version} %{http_code}",
                            "http://127.0.0.1:%d/items" % gw.port)
        self.assertEqual((rc, out), (0, "2 200"))
        self.assertEqual(gw.metrics().get('tollgate_http2_connections_total{protocol="h2c"}'), 1)

    def test_h2_by_alpn_over_tls(self):
        gw = self.gateway(tls=True)
        out, rc = self.curl("--http2", "--cacert", self.certs.ca, "-o", "/dev/null", "-w",
                            "%{http_version} %{http_code}",
                            "https://localhost:%d/items" % gw.port, "--resolve",
                            "localhost:%d:127.0.0.1" % gw.port)
        self.assertEqual((rc, out), (0, "2 200"))
        body, _ = self.curl("--http2", "--cacert", self.certs.ca, "--resolve",
                            "localhost:%d:127.0.0.1" % gw.port,
                            "https://localhost:%d/items" % gw.port)
        self.assertEqual(json.loads(body)["headers"]["X-Forwarded-Proto"], "https")
        self.assertEqual(gw.metrics().get('tollgate_http2_connections_total{protocol="h2"}'), 2)

    def test_each_stream_is_limited_like_a_request(self):
        """Capacity 20, 60 concurrent streams on one connection: exactly 20 pass, 40 get the
        429 with the same headers and problem body as HTTP/1.1."""
        gw = self.gateway(capacity=20, refill=SLOW)
        import asyncio

        async def burst():
            async with httpx.AsyncClient(http2=True, http1=False, timeout=15) as c:
                return await asyncio.gather(*[c.get("http://127.0.0.1:%d/a" % gw.port)
                                              for _ in range(60)])
        rs = asyncio.run(burst())
        self.assertEqual({r.http_version for r in rs}, {"HTTP/2"})
        ok = [r for r in rs if r.status_code == 200]
        limited = [r for r in rs if r.status_code == 429]
        self.assertEqual((len(ok), len(limited)), (20, 40))
        r = limited[0]
        self.assertEqual(r.headers["content-type"], "application/problem+json")
        self.assertEqual(r.json()["code"], "rate_limited")
        self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
        self.assertEqual(r.headers["ratelimit-remaining"], "0")
        self.assertIn('"ip";r=0', r.headers["ratelimit"])
        self.assertIn("ratelimit-policy", ok[0].headers)
        h1 = gw.get("/a")  # the same answer on HTTP/1.1
        self.assertEqual(h1.status, 429)
        self.assertEqual(h1.json()["code"], r.json()["code"])
        self.assertEqual(self.received(), 20)
        self.assertEqual(gw.metrics().get("tollgate_http2_streams_total"), 60)
        live = gw.admin("GET", "/admin/ui/data").json()["connections"]  # the live page's
        self.assertEqual((live["h2c_total"], live["streams_total"]), (1, 60))

    def test_bodies_both_ways_and_head(self):
        gw = self.gateway()
        with httpx.Client(http2=True, http1=False, timeout=20) as c:
            big = c.get("http://127.0.0.1:%d/big?bytes=5000000" % gw.port)
            self.assertEqual((big.status_code, len(big.content)), (200, 5_000_000))
            up = c.post("http://127.0.0.1:%d/up" % gw.port, content=os.urandom(300_000))
            self.assertEqual(up.json()["body_bytes"], 300_000)
            chunks = c.post("http://127.0.0.1:%d/up" % gw.port,
                            content=iter([b"a" * 70_000, b"b" * 70_000]))  # no length
            self.assertEqual(chunks.json()["body_bytes"], 140_000)
            head = c.head("http://127.0.0.1:%d/items" % gw.port)
            self.assertEqual((head.status_code, head.content), (200, b""))
            empty = c.get("http://127.0.0.1:%d/status/204" % gw.port)
            self.assertEqual((empty.status_code, empty.content), (204, b""))
            unframed = c.get("http://127.0.0.1:%d/unframed?bytes=100000" % gw.port)
            self.assertEqual(len(unframed.content), 100_000)

    def test_response_trailers_pass(self):
        """A chunked response's trailers reach HTTP/2 clients (a HEADERS frame after the DATA)
        and HTTP/1.1 ones (in the last chunk), but for a connection's own fields."""
        gw = self.gateway()
        kept = ["grpc-status=0", "grpc-message=fine", "x-checksum=abc"]
        dropped = ["connection=close", "keep-alive=5", "te=trailers", "upgrade=h2c",
                   "proxy-connection=x", "trailer=x"]
        path = "/trailers?" + "&".join(kept + dropped)
        h = RawH2(gw.port)
        h.request(1, get_fields(path))
        blocks = [f for f in h.until(lambda f: f[2] == 1 and f[1] & END_STREAM, 10)
                  if f[0] == HEADERS and f[2] == 1]
        self.assertEqual(len(blocks), 2, blocks)
        self.assertTrue(blocks[1][1] & END_STREAM)
        trailers = dict(blocks[1][3])
        self.assertEqual(trailers, {"grpc-status": "0", "grpc-message": "fine",
                                    "x-checksum": "abc"})
        raw, _, _ = harness.raw_exchange(
            gw.port, ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" %
                      path).encode())
        tail = raw.split(b"\r\n0\r\n", 1)[1]
        self.assertEqual(tail, b"grpc-status: 0\r\ngrpc-message: fine\r\nx-checksum: abc\r\n\r\n")

    def test_cookies_joined_and_target_canonical(self):
        gw = self.gateway()
        h = RawH2(gw.port)
        h.request(1, get_fields("/public/../v1/echo%7e", extra=[("cookie", "a=1"),
                                                                 ("cookie", "b=2")]))
        status, headers, body = h.response(1)
        # /public/../v1/echo~ is a /v1/ route: it needs a key, like on HTTP/1.1.
        self.assertEqual(status, 401, body)
        h.request(3, get_fields("/echo", extra=[("cookie", "a=1"), ("cookie", "b=2")]))
        status, headers, body = h.response(3)
        self.assertEqual(status, 200)
        seen = json.loads(body)["headers"]
        self.assertEqual(seen.get("cookie"), "a=1; b=2")
        self.assertEqual(seen.get("Host"), "localhost")
        h.close()

    def test_sigterm_drains_streams_in_flight(self):
        gw = self.gateway()
        h = RawH2(gw.port)
        h.request(1, get_fields("/slow?ms=1000"))
        wait_until(lambda: self.upstream.stats()["in_progress"] == 1)
        gw.process.signal(signal.SIGTERM)
        # GOAWAY NO_ERROR (no new streams), and the stream in flight still answered.
        frames = h.until(lambda f: f[2] == 1 and f[1] & END_STREAM, timeout=10)
        if not any(f[0] == GOAWAY for f in frames):  # it may follow the stream's last frame
            frames += h.until(lambda f: f[0] == GOAWAY, timeout=5)
        goaways = [int.from_bytes(f[3][4:8], "big") for f in frames if f[0] == GOAWAY]
        self.assertEqual(goaways, [0], frames)
        status = [dict(f[3]).get(":status") for f in frames if f[0] == HEADERS and f[2] == 1]
        self.assertEqual(status, ["200"])
        self.assertEqual(gw.process.wait(10), 0)

    def test_h2load(self):
        gw = self.gateway(capacity=100_000)
        out = subprocess.run(["h2load", "-n", "2000", "-c", "2", "-m", "20",
                              "http://127.0.0.1:%d/items" % gw.port],
                             capture_output=True, timeout=60).stdout.decode()
        self.assertIn("2000 succeeded", out)
        self.assertEqual(self.received(), 2000)

    def test_h2c_off_and_http2_off(self):
        gw = self.gateway(tls=True, http2={"enabled": False, "h2c": False})
        out, rc = self.curl("--http2", "--cacert", self.certs.ca, "-o", "/dev/null", "-w",
                            "%{http_version}", "--resolve", "localhost:%d:127.0.0.1" % gw.port,
                            "https://localhost:%d/items" % gw.port)
        self.assertEqual((rc, out), (0, "1.1"))


class PlainH2cOffTests(Http2Case):

    def test_preface_is_not_http2_when_h2c_is_off(self):
        gw = self.gateway(http2={"h2c": False})
        h = RawH2(gw.port)
        raw = h.s.recv(4096)
        self.assertTrue(raw.startswith(b"HTTP/1.1 400"), raw[:40])
        h.close()


# Header blocks HTTP/2 forbids, each sent on a fresh stream of one connection; none may reach the
# upstream. (name, fields)
MALFORMED = [
    ("upper-case name", get_fields("/m", extra=[("X-Api-Key", "key-one")])),
    ("connection", get_fields("/m", extra=[("connection", "close")])),
    ("keep-alive", get_fields("/m", extra=[("keep-alive", "5")])),
    ("proxy-connection", get_fields("/m", extra=[("proxy-connection", "x")])),
    ("transfer-encoding", get_fields("/m", extra=[("transfer-encoding", "chunked")])),
    ("upgrade", get_fields("/m", extra=[("upgrade", "websocket")])),
    ("te not trailers", get_fields("/m", extra=[("te", "gzip")])),
    ("space in :path", get_fields("/m HTTP/1.1\r\nX: y")),
    ("space only :path", get_fields("/a b")),
    ("CR LF in value", get_fields("/m", extra=[("x-a", "1\r\nx-tollgate-key-id: k1")])),
    ("LF in value", get_fields("/m", extra=[("x-a", "1\nhost: evil")])),
    ("NUL in value", get_fields("/m", extra=[("x-a", "1\x00")])),
    ("leading space in value", get_fields("/m", extra=[("x-a", " 1")])),
    ("trailing tab in value", get_fields("/m", extra=[("x-a", "1\t")])),
    ("colon in name", get_fields("/m", extra=[("x:a", "1")])),
    ("space in name", get_fields("/m", extra=[("x a", "1")])),
    ("empty name", get_fields("/m", extra=[("", "1")])),
    ("pseudo after regular", [(":method", "GET"), (":scheme", "http"), ("x-a", "1"),
                              (":path", "/m"), (":authority", "localhost")]),
    ("two :path", get_fields("/m", extra=[]) + [(":path", "/other")]),
    ("unknown pseudo", get_fields("/m") + [(":protocol", "websocket")]),
    ("no :path", [(":method", "GET"), (":scheme", "http"), (":authority", "localhost")]),
    ("no :method", [(":scheme", "http"), (":authority", "localhost"), (":path", "/m")]),
    ("empty :path", get_fields("")),
    ("space in :method", [(":method", "GET /x"), (":scheme", "http"), (":path", "/m"),
                          (":authority", "localhost")]),
    ("space in :authority", get_fields("/m", authority="a b")),
    ("host differs from :authority", get_fields("/m", extra=[("host", "evil.example")])),
    ("two host without :authority", [(":method", "GET"), (":scheme", "http"), (":path", "/m"),
                                     ("host", "a"), ("host", "b")]),
    ("two content-length", get_fields("/m", extra=[("content-length", "0"),
                                                   ("content-length", "0")])),
    ("DEL in :path", get_fields("/m\x7f")),
    ("non-ASCII in :path", get_fields("/m\xff")),
    # :path in the origin form only (8.3.1): an absolute URI would bring an authority of its own.
    (":path an absolute URI", get_fields("http://evil.example/v1/items")),
    (":path an https URI", get_fields("https://localhost/v1/items")),
    (":path relative", get_fields("v1/items")),
    (":path empty", get_fields("")),
    (":path * without OPTIONS", get_fields("*")),
]


class MalformedTests(Http2Case):

    def test_every_malformed_block_is_reset_before_the_upstream(self):
        gw = self.gateway()
        before = self.received()
        h = RawH2(gw.port)
        sid = 1
        for name, fields in MALFORMED:
            with self.subTest(name):
                if h.closed:  # nghttp2 ends a connection for some: a fresh one for the next
                    h = RawH2(gw.port)
                    sid = 1
                h.request(sid, fields)
                r = h.response(sid)
                self.assertIn(r[0], ("reset", "goaway", "closed"), (name, r))
                if r[0] in ("reset", "goaway"):
                    self.assertEqual(r[1], PROTOCOL_ERROR, (name, r))
                sid += 2
        self.assertEqual(self.received(), before, "a malformed request reached the upstream")
        # The gateway and a well-formed stream are fine afterwards.
        h = RawH2(gw.port)
        h.request(1, get_fields("/fine"))
        self.assertEqual(h.response(1)[0], 200)
        self.assertGreater(gw.metrics().get("tollgate_http2_malformed_total", 0), 0)


class DefenceTests(Http2Case):

    def assert_calm(self, gw, h, kind):
        self.assertEqual(h.goaway(10), ENHANCE_YOUR_CALM)
        wait_until(lambda: gw.metrics().get('tollgate_http2_floods_total{kind="%s"}' % kind, 0) >= 1)
        self.assertTrue(gw.healthy())

    def test_rapid_reset(self):
        gw = self.gateway(http2={"max_resets": 50})
        h = RawH2(gw.port)
        for sid in range(1, 2 * 200, 2):
            if not (h.request(sid, get_fields("/slow?ms=2000")) and
                    h.send(frame(RST_STREAM, 0, sid, struct.pack("!I", 8)))):
                break
        self.assert_calm(gw, h, "resets")
        self.assertLessEqual(self.received(), 60)

    def test_control_frame_floods(self):
        gw = self.gateway(http2={"max_control_frames": 100})
        floods = {
            "PING": lambda i: frame(PING, 0, 0, struct.pack("!Q", i)),
            "SETTINGS": lambda i: frame(SETTINGS, 0, 0),
            "PRIORITY": lambda i: frame(PRIORITY, 0, 1 + 2 * i, struct.pack("!IB", 0, 15)),
            "WINDOW_UPDATE": lambda i: frame(WINDOW_UPDATE, 0, 0, struct.pack("!I", 1)),
            "empty DATA": lambda i: frame(DATA, 0, 1, b""),
        }
        for name, make in floods.items():
            with self.subTest(name):
                h = RawH2(gw.port)
                if name == "empty DATA":
                    h.request(1, get_fields("/slow?ms=3000", method="POST"), end_stream=False)
                for i in range(300):
                    if not h.send(make(i)):
                        break
                self.assertEqual(h.goaway(10), ENHANCE_YOUR_CALM, name)
                h.close()
        self.assertGreaterEqual(
            gw.metrics().get('tollgate_http2_floods_total{kind="control_frames"}'), 5)

    def test_continuation_flood(self):
        gw = self.gateway(http2={"max_continuations": 8})
        h = RawH2(gw.port)
        h.send(frame(HEADERS, 0, 1, h.block(get_fields("/c"))))
        for i in range(200):
            if not h.send(frame(CONTINUATION, 0, 1, h.block([("x-c%d" % i, "v")]))):
                break
        code = h.goaway(10)
        self.assertIn(code, (PROTOCOL_ERROR, ENHANCE_YOUR_CALM))
        self.assertEqual(self.received(), 0)
        self.assertTrue(gw.healthy())

    def test_hpack_bomb(self):
        """One 4 KB field in the HPACK table, then referenced 4000 times (one byte each): 16 MB
        decoded from 4 KB sent. The connection ends past 4x server.max_header_bytes."""
        gw = self.gateway()
        h = RawH2(gw.port)
        big = b"x" * 4000
        # A literal with incremental indexing and a new name (0x40), no Huffman; lengths of
        # 127 and more take HPACK's integer continuation.
        def literal_len(n):
            if n < 127:
                return bytes([n])
            out, n = [127], n - 127
            while n >= 128:
                out.append((n % 128) + 128)
                n //= 128
            out.append(n)
            return bytes(out)
        first = h.block(get_fields("/b")) + bytes([0x40]) + literal_len(5) + b"x-big" + \
            literal_len(len(big)) + big
        bomb = first + bytes([0x80 | 62]) * 4000  # index 62: the newest dynamic entry
        h.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, bomb))
        self.assert_calm(gw, h, "headers")
        self.assertEqual(self.received(), 0)

    def test_header_list_past_the_limit_gets_431(self):
        gw = self.gateway(max_header_bytes=4096)
        h = RawH2(gw.port)
        h.request(1, get_fields("/h", extra=[("x-pad", "p" * 5000)]))
        status, headers, body = h.response(1)
        self.assertEqual(status, 431)
        self.assertEqual(json.loads(body)["code"], "header_too_large")
        fields = [("x-f%d" % i, "v") for i in range(150)]  # past server.max_header_fields
        h.request(3, get_fields("/h", extra=fields))
        self.assertEqual(h.response(3)[0], 431)
        self.assertEqual(self.received(), 0)

    def test_max_concurrent_streams(self):
        gw = self.gateway(http2={"max_concurrent_streams": 3})
        h = RawH2(gw.port)
        settings = h.until(lambda f: f[0] == SETTINGS and not f[1] & ACK)[-1]
        values = dict(struct.unpack("!HI", settings[3][i:i + 6])
                      for i in range(0, len(settings[3]), 6))
        self.assertEqual(values.get(0x3), 3)  # SETTINGS_MAX_CONCURRENT_STREAMS
        for sid in (1, 3, 5, 7):
            h.request(sid, get_fields("/slow?ms=1500"))
        # The fourth is refused: RST_STREAM REFUSED_STREAM while our SETTINGS are unacknowledged,
        # else a connection error (RFC 9113 5.1.2).
        r = h.response(7)
        self.assertIn(r, [("reset", REFUSED_STREAM), ("goaway", PROTOCOL_ERROR)])
        if r[0] == "reset":
            self.assertEqual(h.response(1, timeout=10)[0], 200)
        self.assertLessEqual(self.received(), 3)

    def test_streams_count_in_the_connection_budget(self):
        """Each stream in flight holds a lane (two descriptors) and a place in
        server.max_connections_per_address: past it, streams are refused, not served by
        exhausting the process's descriptors."""
        gw = self.gateway(max_connections_per_address=4)  # the connection and 3 lanes
        h = RawH2(gw.port)
        for sid in (1, 3, 5, 7, 9):
            h.request(sid, get_fields("/slow?ms=1500"))
        refused = [sid for sid in (7, 9) if h.response(sid, timeout=5) == ("reset", REFUSED_STREAM)]
        self.assertEqual(refused, [7, 9])
        self.assertEqual(h.statuses((1, 3, 5)), [200] * 3)
        h.request(11, get_fields("/fine"))  # a lane free again: served
        self.assertEqual(h.response(11)[0], 200)
        self.assertEqual(gw.metrics().get("tollgate_http2_refused_streams_total"), 2)

    def test_resets_we_send_count_as_a_flood(self):
        """A client that has the gateway reset its streams (each block malformed) floods it as
        one that resets them itself (CVE-2025-8671): GOAWAY past max_resets."""
        gw = self.gateway(http2={"max_resets": 50})
        h = RawH2(gw.port)
        for sid in range(1, 2 * 120, 2):
            if not h.request(sid, get_fields("/m", extra=[("Upper", "1")])):
                break
        self.assert_calm(gw, h, "resets")
        self.assertEqual(self.received(), 0)

    def test_idle_connection_times_out_despite_pings(self):
        """No stream served for the idle timeout: GOAWAY NO_ERROR and the end, though the client
        keeps the connection busy with PINGs."""
        gw = self.gateway(idle_timeout_ms=800)
        h = RawH2(gw.port)
        h.request(1, get_fields("/fine"))
        self.assertEqual(h.response(1)[0], 200)
        start = time.monotonic()
        code = None
        for i in deadline_loop(6, step=0.2):
            h.send(frame(PING, 0, 0, struct.pack("!Q", i)))
            code = h.goaway(0.01) if code is None else code
            if code is not None or h.closed:
                break
        self.assertEqual(code, 0, "no GOAWAY NO_ERROR on the idle timeout")
        self.assertLess(time.monotonic() - start, 4)
        self.assertTrue(gw.metrics().get('tollgate_http2_goaways_sent_total{error="no_error"}'))

    def test_a_lane_takes_two_places_in_max_connections(self):
        """A stream's lane is two descriptors: two places in server.max_connections."""
        gw = self.gateway(max_connections=7, max_connections_per_address=0)  # 1 + 3 lanes
        h = RawH2(gw.port)
        for sid in (1, 3, 5, 7):
            h.request(sid, get_fields("/slow?ms=1500"))
        self.assertEqual(h.response(7, timeout=5), ("reset", REFUSED_STREAM))
        self.assertEqual(h.statuses((1, 3, 5)), [200] * 3)

    def test_small_response_stalled_on_a_zero_window_is_reset(self):
        """A response read whole from its lane still waits for the client's window: one left at
        zero past the send timeout is reset, its lane and memory freed."""
        gw = self.gateway()  # send_timeout_ms 1500
        h = RawH2(gw.port, settings=[(0x4, 0)])  # SETTINGS_INITIAL_WINDOW_SIZE 0
        start = time.monotonic()
        h.request(1, get_fields("/fine"))
        frames = h.until(lambda f: f[0] == RST_STREAM and f[2] == 1, timeout=10)
        self.assertEqual(frames[-1][0], RST_STREAM, frames[-3:])
        self.assertLess(time.monotonic() - start, 6)

    def test_stream_stalled_on_a_zero_window_is_reset(self):
        gw = self.gateway()  # send_timeout_ms 1500
        h = RawH2(gw.port, settings=[(0x4, 0)])  # SETTINGS_INITIAL_WINDOW_SIZE 0
        h.request(1, get_fields("/big?bytes=20000000"))
        frames = h.until(lambda f: f[0] == RST_STREAM and f[2] == 1, timeout=15)
        self.assertEqual(frames[-1][0], RST_STREAM, frames[-3:])
        h.request(3, get_fields("/fine"))  # the connection still serves
        h.send(frame(WINDOW_UPDATE, 0, 3, struct.pack("!I", 1 << 20)))
        self.assertEqual(h.response(3)[0], 200)

    def test_client_that_never_reads_is_cut_off(self):
        gw = self.gateway()
        h = RawH2(gw.port)
        h.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for sid in range(1, 40, 2):
            h.request(sid, get_fields("/big?bytes=5000000"))
            # Open every window wide: only the socket holds the gateway back.
            h.send(frame(WINDOW_UPDATE, 0, sid, struct.pack("!I", 1 << 30)))
        h.send(frame(WINDOW_UPDATE, 0, 0, struct.pack("!I", 1 << 30)))
        # Never read: the gateway's writes stall, and it closes the connection after its
        # send timeout (1.5 s); its memory stays bounded meanwhile.
        start = time.monotonic()
        closed = False
        for _ in deadline_loop(20, step=0.5):
            try:
                h.s.send(frame(PING, 0, 0, b"\0" * 8))
            except OSError:
                closed = True
                break
        self.assertTrue(closed, "the connection stayed open")
        self.assertLess(time.monotonic() - start, 20)
        self.assertLess(gw.vm_hwm_kb(), 200_000)
        self.assertTrue(gw.healthy())


class GrpcTests(Http2Case):

    def setUp(self):
        super().setUp()
        try:
            import grpc  # noqa: F401  (python3-grpcio)
        except ImportError:
            self.skipTest("python3-grpcio is not installed: run `make deps`")

    def test_grpc_rejection_is_resource_exhausted(self):
        import grpc
        gw = self.gateway()
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        call = channel.unary_unary("/pkg.Limited/Get")
        codes = []
        for _ in range(4):
            try:
                call(b"\0\0\0\0\0", timeout=10)
                codes.append("OK")
            except grpc.RpcError as e:
                codes.append(e.code())
                last = e
        # The first two reach the upstream (a plain HTTP one here: not gRPC, so UNKNOWN); the
        # method's limit of 2 answers the next ones RESOURCE_EXHAUSTED.
        self.assertEqual(codes[:2], [grpc.StatusCode.UNKNOWN] * 2)
        self.assertEqual(codes[2:], [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2)
        self.assertIn("rate_limited", last.details())
        meta = dict(last.trailing_metadata() or ()) | dict(last.initial_metadata() or ())
        self.assertGreaterEqual(int(meta["retry-after"]), 1)
        self.assertEqual(meta["ratelimit-remaining"], "0")
        other = channel.unary_unary("/pkg.Other/Get")  # another method: its own budget
        with self.assertRaises(grpc.RpcError) as e:
            other(b"\0\0\0\0\0", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNKNOWN)
        channel.close()

    def test_grpc_bad_key_is_unauthenticated(self):
        import grpc
        gw = self.gateway()
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        with self.assertRaises(grpc.RpcError) as e:
            channel.unary_unary("/v1/Get")(b"", timeout=10, metadata=[("x-api-key", "wrong")])
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        channel.close()


def grpc_upstream(credentials=None):
    """A grpcio server on 127.0.0.1 with raw-bytes methods: (server, port)."""
    import grpc
    from concurrent import futures

    def ident(b):
        return b

    def say(req, ctx):
        ctx.set_trailing_metadata((("x-echo-trailer", "yes"),))
        return b"echo:" + req

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")

    def count(req, ctx):
        for i in range(int(req or b"3")):
            yield b"n%d" % i

    def total(requests, ctx):
        return b"%d" % sum(len(r) for r in requests)

    def health(req, ctx):
        return b"\x08\x01"  # grpc.health.v1.HealthCheckResponse{status: SERVING}

    handlers = {
        "/pkg.Echo/Say": grpc.unary_unary_rpc_method_handler(say, ident, ident),
        "/pkg.Limited/Get": grpc.unary_unary_rpc_method_handler(say, ident, ident),
        "/pkg.Echo/Fail": grpc.unary_unary_rpc_method_handler(fail, ident, ident),
        "/pkg.Echo/Count": grpc.unary_stream_rpc_method_handler(count, ident, ident),
        "/pkg.Echo/Total": grpc.stream_unary_rpc_method_handler(total, ident, ident),
        "/grpc.health.v1.Health/Check": grpc.unary_unary_rpc_method_handler(health, ident, ident),
    }

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            return handlers.get(details.method)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((Handler(),))
    if credentials:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


class GrpcUpstreamTests(Http2Case):
    """upstream.http2: gRPC through the gateway to a grpcio server, over h2c and h2 (TLS)."""

    def setUp(self):
        super().setUp()
        try:
            import grpc  # noqa: F401  (python3-grpcio)
        except ImportError:
            self.skipTest("python3-grpcio is not installed: run `make deps`")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop(0)
        super().tearDown()

    def through(self, url, tls=None):
        c = config()
        c["upstream"]["http2"] = True
        if tls:
            c["upstream"]["tls"] = tls
        return self.start(c, upstream=url)

    def h2c_gateway(self):
        server, port = grpc_upstream()
        self.servers.append(server)
        return self.through("http://127.0.0.1:%d" % port), server

    def call(self, channel, method):
        import grpc
        ident = lambda b: b  # noqa: E731
        return channel.unary_unary(method, ident, ident)

    def test_every_call_shape_passes_an_h2c_upstream(self):
        import grpc
        gw, _ = self.h2c_gateway()
        ident = lambda b: b  # noqa: E731
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        reply, call = self.call(channel, "/pkg.Echo/Say").with_call(b"hi", timeout=10)
        self.assertEqual(reply, b"echo:hi")
        self.assertEqual(dict(call.trailing_metadata())["x-echo-trailer"], "yes")
        self.assertIn("ratelimit-remaining", dict(call.initial_metadata()))
        with self.assertRaises(grpc.RpcError) as e:
            self.call(channel, "/pkg.Echo/Fail")(b"", timeout=10)
        self.assertEqual((e.exception.code(), e.exception.details()),
                         (grpc.StatusCode.NOT_FOUND, "no such thing"))
        streamed = channel.unary_stream("/pkg.Echo/Count", ident, ident)(b"5", timeout=10)
        self.assertEqual(list(streamed), [b"n0", b"n1", b"n2", b"n3", b"n4"])
        total = channel.stream_unary("/pkg.Echo/Total", ident, ident)
        self.assertEqual(total(iter([b"ab", b"cde", b"x" * 100000]), timeout=10), b"100005")
        # The upstream's health service passes through.
        self.assertEqual(self.call(channel, "/grpc.health.v1.Health/Check")(b"", timeout=10),
                         b"\x08\x01")
        channel.close()

    def test_method_limit_in_front_of_a_grpc_upstream(self):
        import grpc
        gw, _ = self.h2c_gateway()
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        codes = []
        for _ in range(4):
            try:
                self.call(channel, "/pkg.Limited/Get")(b"x", timeout=10)
                codes.append("OK")
            except grpc.RpcError as e:
                codes.append(e.code())
        self.assertEqual(codes, ["OK", "OK"] + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2)
        channel.close()

    def test_many_calls_at_once_share_one_connection(self):
        import grpc
        from concurrent import futures
        gw, _ = self.h2c_gateway()
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        say = self.call(channel, "/pkg.Echo/Say")
        with futures.ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda i: say(b"%d" % i, timeout=20), range(200)))
        self.assertEqual(replies, [b"echo:%d" % i for i in range(200)])
        channel.close()

    def test_h2_upstream_over_tls(self):
        import grpc
        certs = Certs(os.path.join(self.tmpdir, "certs"))
        cert, key = certs.leaf("localhost", ["localhost"])
        with open(key, "rb") as k, open(cert, "rb") as c:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        server, port = grpc_upstream(creds)
        self.servers.append(server)
        gw = self.through("https://localhost:%d" % port, tls={"ca_file": certs.ca})
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        self.assertEqual(self.call(channel, "/pkg.Echo/Say")(b"tls", timeout=10), b"echo:tls")
        channel.close()

    def test_upstream_lost_then_back(self):
        """An upstream that does not speak h2c (the plain HTTP/1.1 one), or is gone: the call
        is UNAVAILABLE (502), and the gateway stays up."""
        import grpc
        self.upstream = harness.Upstream(self)
        gw = self.through(self.upstream.url)
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        with self.assertRaises(grpc.RpcError) as e:
            self.call(channel, "/pkg.Echo/Say")(b"", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertTrue(gw.healthy())
        channel.close()

    def test_upstream_restarted_gets_a_new_connection(self):
        import grpc
        gw, server = self.h2c_gateway()
        channel = grpc.insecure_channel("127.0.0.1:%d" % gw.port)
        say = self.call(channel, "/pkg.Echo/Say")
        self.assertEqual(say(b"1", timeout=10), b"echo:1")
        port = int(gw.config["upstream"]["url"].rsplit(":", 1)[1])
        server.stop(0).wait()
        with self.assertRaises(grpc.RpcError) as e:
            say(b"2", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        from concurrent import futures
        again = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        again.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("pkg.Echo", {
                "Say": grpc.unary_unary_rpc_method_handler(lambda r, c: b"again:" + r)}),))
        again.add_insecure_port("127.0.0.1:%d" % port)
        again.start()
        self.servers.append(again)
        for _ in deadline_loop(10, step=0.2):
            try:
                if say(b"3", timeout=10) == b"again:3":
                    break
            except grpc.RpcError:
                pass
        self.assertEqual(say(b"4", timeout=10), b"again:4")
        channel.close()


if __name__ == "__main__":
    harness.main(__file__)
