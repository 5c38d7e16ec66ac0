#!/usr/bin/env python3
"""One client must not starve the upstream pool (issue 31), through the real binary.

    python3 test_starvation.py --binary build/tollgate [unittest args, e.g. SlowBodyTests -v]

Before the fix, 300 clients of one address that never read a 16 MB response, or that sent their
POST bodies a byte every 0.3 s, left every other client with 503 upstream_busy. The gateways
here have a small pool (one thread, upstream.max_connections 4, upstream.queue_size 4) so that
tens of hostile connections are plenty; the default upstream.max_client_share_percent (25) then
leaves one client one connection and one queue place. Every class of hog, anonymous (one
address: the untrusted peer 127.0.0.2) and keyed (one key from many addresses, sent as
X-Forwarded-For by the trusted peer 127.0.0.1):

- SlowBodyTests: bodies trickled a byte at a time (Content-Length and chunked) hold no upstream
  connection while they trickle: another client gets 200.
- UnreadResponseTests: clients that never read a large response hold at most their share.
- HeldRequestTests: many parallel requests the upstream holds open: past the share, 503 at
  once for that client, 200 for the others.
- SendTimeoutTests: a client that stops reading is cut off after server.send_timeout_ms, and
  its upstream connection is freed.
- StalledLargeBodyTests: large bodies from distinct addresses sent fast, then stalled, lose
  their upstream connection after server.body_timeout_ms of silence; another address gets 200.
- BodyTimeoutTests: a body slower than server.body_timeout_ms / min_body_bytes_per_second
  allow gets 408 body_timeout and is never forwarded; a fast large body is forwarded whole.

The first three use only options the unfixed binary knows, so they show its failure as it was
reported. The last two configure new options; with TOLLGATE_BASELINE=1 those are left out of the
config, so that an unfixed binary starts and fails on behaviour rather than on its config.
Every wait is bounded; all traffic is on 127.0.0.1 and 127.0.0.2; every process is stopped by
PID (HostileCase).
"""
import os
import socket
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "support")))
import harness  # noqa: E402
from test_hostile import (HostileCase, RawClient, UNTRUSTED_PEER, fresh_ip, fresh_key,  # noqa: E402
                          gateway_config, request_bytes)

BASELINE = os.environ.get("TOLLGATE_BASELINE") == "1"
HOGS = 12          # hostile connections per row: three times the pool
LARGE = 16 << 20   # the response a hog never reads
TRICKLE_S = 0.3    # a hog's pause between two body bytes


def starved_config(server=None):
    """One thread, a pool of 4 connections and 4 queue places; anonymous budgets large enough
    that no hog is limited (a 429 would hide what the pool does)."""
    c = gateway_config(anon=100000)
    s = dict(c["server"], threads=1)
    if not BASELINE:
        s.update(server or {})
    c["server"] = s
    c["upstream"] = {"timeout_ms": 20000, "max_connections": 4, "queue_size": 4}
    return c


class _Starvation(HostileCase):
    UPSTREAM_ARGS = {"hold_prefix": ("/public/hold/", "/v1/hold/"),
                     "large_prefix": ("/public/large/", "/v1/large/")}

    @classmethod
    def config(cls):
        return starved_config()

    def hog(self, data, anonymous, key=None):
        """A hostile connection: from the untrusted peer (one address), or with `key` from a
        fresh address through the trusted peer. Sends `data`; the caller decides what else."""
        if anonymous:
            c = RawClient(self.port, source=UNTRUSTED_PEER)
        else:
            c = RawClient(self.port)
        self.addCleanup(c.close)
        c.send(data)
        return c

    def hog_headers(self, anonymous, key):
        h = []
        if not anonymous:
            h = [("X-Forwarded-For", fresh_ip()), ("Authorization", "Bearer " + key)]
        return h

    def hog_path(self, anonymous, what):
        return ("/public/%s/" if anonymous else "/v1/%s/") % what

    def probe(self, label):
        """Another client, anonymous and keyed: both must get 200 from the upstream."""
        r = self.get("/public/probe-%s" % label, ip=fresh_ip())
        self.assertEqual((r.status, r.code), (200, None), "anonymous probe: %r" % r)
        key, _ = fresh_key()
        r = self.get("/v1/probe-%s" % label, key=key, ip=fresh_ip())
        self.assertEqual((r.status, r.code), (200, None), "keyed probe: %r" % r)

    def wait_pool_free(self):
        """Until every upstream connection is idle again (no request of the upstream's is held
        or being answered), bounded."""
        self.upstream.release_all()
        self.assertTrue(self.upstream.wait_for(
            lambda up: up.held == 0 and all(q.answered or c.closed_by is not None
                                            for c in up.connections() for q in c.requests),
            timeout=10), "the pool did not drain")
        self.upstream.hold_again()


class SlowBodyTests(_Starvation):
    """Bodies sent a byte every 0.3 s (server.body_timeout_ms is 10 s by default)."""

    ROWS = [
        # (name, anonymous, chunked)
        ("anonymous_content_length", True, False),
        ("anonymous_chunked", True, True),
        ("keyed_content_length", False, False),
        ("keyed_chunked", False, True),
    ]

    def test_trickling_bodies_hold_no_upstream_connection(self):
        key, _ = fresh_key()
        for n, (name, anonymous, chunked) in enumerate(self.ROWS):
            with self.subTest(row=name):
                path = self.hog_path(anonymous, "upload") + name
                h = self.hog_headers(anonymous, key)
                if chunked:
                    head = request_bytes("POST", path, h + [("Transfer-Encoding", "chunked")])
                    first = b"64\r\n" + b"a" * 10  # a chunk of 100 bytes, 10 of them sent
                else:
                    head = request_bytes("POST", path, h + [("Content-Length", "100")])
                    first = b"a" * 10
                hogs = [self.hog(head + first, anonymous) for _ in range(HOGS)]
                stop = threading.Event()

                def trickle():
                    for _ in range(100):  # bounded: 30 s at most; stopped below
                        if stop.wait(TRICKLE_S):
                            return
                        for c in hogs:
                            try:
                                c.send(b"b")
                            except OSError:
                                pass
                t = threading.Thread(target=trickle, daemon=True)
                t.start()
                try:
                    time.sleep(1.0)  # several bytes trickled: each hog has had time to hold
                    self.probe("slow-%d" % n)
                finally:
                    stop.set()
                    t.join(timeout=5)
                    for c in hogs:
                        c.close()
                self.wait_pool_free()


class UnreadResponseTests(_Starvation):
    """Clients that ask for 16 MB and read none of it."""

    ROWS = [("anonymous", True), ("keyed", False)]

    def test_clients_that_never_read_hold_at_most_their_share(self):
        key, _ = fresh_key()
        for n, (name, anonymous) in enumerate(self.ROWS):
            with self.subTest(row=name):
                mark = self.upstream.mark()
                path = self.hog_path(anonymous, "large") + str(LARGE)
                hogs = [self.hog(request_bytes("GET", path, self.hog_headers(anonymous, key)),
                                 anonymous) for _ in range(HOGS)]
                self.assertTrue(self.upstream.wait_requests(1, since=mark, timeout=5),
                                "no hog reached the upstream: nothing tested")
                time.sleep(0.5)  # for the other hogs to take what they can
                try:
                    self.probe("unread-%d" % n)
                finally:
                    for c in hogs:
                        c.close()
                self.assertTrue(self.upstream.wait_for(
                    lambda up: all(c.closed_by is not None for c in up.connections()
                                   if any(q.path == path for q in c.requests)), timeout=10),
                    "the hogs' upstream connections were not freed")


class HeldRequestTests(_Starvation):
    """Many parallel requests of one client that the upstream holds open."""

    ROWS = [("anonymous", True), ("keyed", False)]

    def test_one_client_past_its_share_gets_503_and_others_200(self):
        key, _ = fresh_key()
        for n, (name, anonymous) in enumerate(self.ROWS):
            with self.subTest(row=name):
                path = self.hog_path(anonymous, "hold") + name
                hogs = [self.hog(request_bytes("GET", path, self.hog_headers(anonymous, key)),
                                 anonymous) for _ in range(HOGS)]
                try:
                    self.assertTrue(self.upstream.wait_held(1, timeout=5), "nothing held")
                    time.sleep(0.3)  # for the other hogs to take what they can
                    # The probes hold nothing: the upstream answers them (they are not /hold/).
                    self.probe("held-%d" % n)
                    self.assertLessEqual(self.upstream.held, 2, "one client held %d connections"
                                         % self.upstream.held)
                    # The hogs past the share were answered at once, before any release.
                    busy = 0
                    for c in hogs:
                        c.sock.settimeout(0.2)
                        try:
                            r = c.response()
                        except socket.timeout:
                            continue
                        if r is not None and (r.status, r.code) == (503, "upstream_busy"):
                            busy += 1
                    self.assertGreaterEqual(busy, HOGS - 2, "hogs answered 503: %d" % busy)
                finally:
                    self.wait_pool_free()
                    for c in hogs:
                        c.close()


class SendTimeoutTests(_Starvation):
    """server.send_timeout_ms: 500."""

    @classmethod
    def config(cls):
        return starved_config({"send_timeout_ms": 500})

    def test_a_client_that_stops_reading_is_cut_off(self):
        for n, anonymous in enumerate((True, False)):
            with self.subTest(anonymous=anonymous):
                key, _ = fresh_key()
                mark = self.upstream.mark()
                path = self.hog_path(anonymous, "large") + str(LARGE)
                hog = self.hog(request_bytes("GET", path, self.hog_headers(anonymous, key)),
                               anonymous)
                self.assertTrue(self.upstream.wait_requests(1, since=mark, timeout=5))
                [req] = self.upstream.requests_since(mark)
                [conn] = [c for c in self.upstream.connections() if c.id == req.conn_id]
                # The gateway gives up on the client and closes the upstream connection that
                # was feeding it (the upstream's write fails).
                self.assertTrue(self.upstream.wait_for(lambda up: conn.closed_by is not None,
                                                       timeout=8), "never cut off")
                # The client's connection was closed before the response was whole.
                got = 0
                hog.sock.settimeout(5)
                for _ in range(100_000):
                    try:
                        data = hog.sock.recv(1 << 20)
                    except (ConnectionResetError, socket.timeout):
                        break
                    if not data:
                        break
                    got += len(data)
                self.assertLess(got, LARGE, "the whole response arrived: nothing was cut")
                hog.close()
                # Its share is free again: the same client is served.
                h = self.hog_headers(anonymous, key)
                r, _ = self.exchange(request_bytes("GET", self.hog_path(anonymous, "after") +
                                                   str(n), h),
                                     source=UNTRUSTED_PEER if anonymous else None)
                self.assertEqual((r.status, r.code), (200, None), r)


class BodyTimeoutTests(_Starvation):
    """server.body_timeout_ms 1000 and min_body_bytes_per_second 1 MiB/s: a body must be whole
    within about a second, and 200 KB sent at once (faster than 1 MiB/s) passes."""

    @classmethod
    def config(cls):
        return starved_config({"body_timeout_ms": 1000, "min_body_bytes_per_second": 1 << 20})

    # (name, headers, body bytes sent at once, then: "trickle" | "stall", expected status)
    ROWS = [
        ("content_length_trickle", [("Content-Length", "100")], b"a" * 10, "trickle"),
        ("content_length_stall", [("Content-Length", "100")], b"a" * 10, "stall"),
        ("content_length_no_body_byte", [("Content-Length", "100")], b"", "stall"),
        ("chunked_trickle", [("Transfer-Encoding", "chunked")], b"64\r\n" + b"a" * 10, "trickle"),
        ("chunked_size_line_trickle", [("Transfer-Encoding", "chunked")], b"6", "trickle"),
        ("chunked_stall_between_chunks", [("Transfer-Encoding", "chunked")], b"3\r\nabc\r\n",
         "stall"),
        ("expect_continue_then_trickle",
         [("Content-Length", "100"), ("Expect", "100-continue")], b"", "trickle"),
        # Past server.body_buffer_bytes (64 KiB) at once, then a trickle: relayed, then cut.
        ("large_then_trickle", [("Content-Length", "300000")], b"a" * 200000, "trickle"),
    ]

    def test_slow_bodies_get_408(self):
        for name, headers, first, then in self.ROWS:
            with self.subTest(row=name):
                mark = self.upstream.mark()
                path = "/public/slow-" + name
                c = RawClient(self.port)
                self.addCleanup(c.close)
                c.send(request_bytes("POST", path, headers + [("X-Forwarded-For", fresh_ip())]) +
                       first)
                start = time.monotonic()
                c.sock.settimeout(TRICKLE_S)
                answer = None
                for _ in range(40):  # 12 s at most: the answer is due after about one
                    try:
                        answer = c.response("POST")
                        if answer is not None:
                            break
                    except socket.timeout:
                        pass
                    if then == "trickle":
                        try:
                            c.send(b"b")
                        except OSError:
                            break
                    if time.monotonic() - start > 12:
                        break
                self.assertIsNotNone(answer, "no answer to a slow body")
                self.assertEqual((answer.status, answer.code), (408, "body_timeout"), answer)
                self.assertTrue(c.closed_within(2), "the connection stayed open")
                c.close()
                if len(first) < 65536:
                    got = [q for q in self.upstream.requests_since(mark) if q.path == path]
                    self.assertEqual(got, [], "a slow body reached the upstream")

    def test_fast_large_bodies_are_forwarded_whole(self):
        body = bytes(range(256)) * 800  # 200 KB: past body_buffer_bytes
        for chunked in (False, True):
            with self.subTest(chunked=chunked):
                path = "/public/fast-%s" % chunked
                h = [("X-Forwarded-For", fresh_ip())]
                if chunked:
                    data = request_bytes("POST", path, h + [("Transfer-Encoding", "chunked")])
                    data += b"".join(b"%x\r\n%s\r\n" % (len(p), p)
                                     for p in (body[i:i + 30000]
                                               for i in range(0, len(body), 30000)))
                    data += b"0\r\n\r\n"
                else:
                    data = request_bytes("POST", path, h, body)
                mark = self.upstream.mark()
                r, _ = self.exchange(data, method="POST")
                self.assertEqual((r.status, r.code), (200, None), r)
                got = [q for q in self.upstream.requests_since(mark) if q.path == path]
                self.assertEqual(len(got), 1, got)
                self.assertEqual(got[0].body, body)


class StalledLargeBodyTests(HostileCase):
    """Large bodies sent fast up to their last byte, then stalled (issue 31 review: 4 addresses
    sending 307,199 of 307,200 bytes held a pool of 4 for body_timeout + received/rate, about
    310 s, and a fifth address got 503 upstream_busy at 1, 6 and 11 s). Once an upstream
    connection is held, no gap in the body may be longer than server.body_timeout_ms (2 s here),
    and the bytes read before connecting earn no time: each hog is cut off with 408 after about
    2 s of silence, and a victim from another address gets 200 within 8 s. One thread, a pool of
    4 connections, the default upstream.max_client_share_percent (one connection an address)."""

    HOG_ADDRESSES = ["127.0.0.%d" % i for i in range(10, 14)]  # one connection each
    VICTIM = "127.0.0.50"
    LENGTH = 307200
    VICTIM_BOUND_S = 8.0

    @classmethod
    def config(cls):
        c = gateway_config(anon=100000)
        c["server"] = dict(c["server"], threads=1, body_timeout_ms=2000)
        c["upstream"] = {"timeout_ms": 20000, "max_connections": 4, "queue_size": 4}
        return c

    # (name, framing, then: "stall" | seconds between single bytes after the burst)
    ROWS = [
        ("content_length_stall", "length", "stall"),
        ("chunked_stall", "chunked", "stall"),
        ("content_length_byte_a_second", "length", 1.0),
        ("chunked_byte_a_second", "chunked", 1.0),
    ]

    def test_stalled_bodies_free_the_pool_for_another_address(self):
        for name, framing, then in self.ROWS:
            with self.subTest(row=name):
                mark = self.upstream.mark()
                path = "/public/up-" + name
                # All but the last byte; a trickle sends at most 30 more of the 100 left.
                burst = b"a" * (self.LENGTH - (1 if then == "stall" else 100))
                if framing == "length":
                    head = request_bytes("POST", path, [("Content-Length", str(self.LENGTH))])
                else:
                    head = request_bytes("POST", path, [("Transfer-Encoding", "chunked")])
                    burst = b"%x\r\n" % self.LENGTH + burst
                hogs = []
                for address in self.HOG_ADDRESSES:
                    c = RawClient(self.port, source=address)
                    self.addCleanup(c.close)
                    c.send(head + burst)
                    hogs.append(c)
                stop = threading.Event()

                def trickle():
                    for _ in range(30):  # bounded; stopped below
                        if stop.wait(then):
                            return
                        for c in hogs:
                            try:
                                c.send(b"b")
                            except OSError:
                                pass
                t = None
                if then != "stall":
                    t = threading.Thread(target=trickle, daemon=True)
                    t.start()
                try:
                    self.assertTrue(self.upstream.wait_requests(4, since=mark, timeout=5),
                                    "the hogs did not reach the upstream: nothing tested")
                    began = time.monotonic()
                    answer = None
                    for i in range(100):  # bounded by VICTIM_BOUND_S
                        v = RawClient(self.port, source=self.VICTIM)
                        self.addCleanup(v.close)
                        v.send(request_bytes("GET", "/public/victim-%s-%d" % (name, i)))
                        answer = v.response()
                        v.close()
                        if answer is not None and answer.status == 200:
                            break
                        if time.monotonic() - began > self.VICTIM_BOUND_S:
                            break
                        time.sleep(0.25)
                    took = time.monotonic() - began
                    self.assertIsNotNone(answer, "the victim got no answer")
                    self.assertEqual((answer.status, answer.code), (200, None),
                                     "victim after %.1f s: %r" % (took, answer))
                    # The hogs were cut off with 408 (their bodies never ended).
                    for c in hogs:
                        c.sock.settimeout(3)
                        r = c.response("POST")
                        self.assertIsNotNone(r, "a hog got no answer")
                        self.assertEqual((r.status, r.code), (408, "body_timeout"), r)
                finally:
                    stop.set()
                    if t:
                        t.join(timeout=5)
                    for c in hogs:
                        c.close()
                got = [q for q in self.upstream.requests_since(mark)
                       if q.path == path and q.answered]
                self.assertEqual(got, [], "a stalled body was answered by the upstream")


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
