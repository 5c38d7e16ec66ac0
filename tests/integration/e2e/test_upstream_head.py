#!/usr/bin/env python3
"""Upstream response heads through the real binary: what Beast's parser refuses is answered 502
and never relayed, whichever of the gateway's two head parsers reads it (docs/http-contract.md,
"Upstream response heads"; src/http/upstream_head.cpp). Found by tests/fuzz/upstream_head_fuzz.cpp:
the in-place parser relayed a status line without the SP after the code, field names that are not
tokens, and control bytes (a lone CR, NUL, DEL) in a value or the reason phrase, as they came.

    python3 tests/integration/e2e/test_upstream_head.py --binary build/tollgate -v

One gateway in front of one canned upstream on 127.0.0.1: the upstream answers each request with
the head its path names (/public/case/NAME), then closes the connection.
"""
import socket
import threading
import unittest

import harness
from harness import GatewayTestCase, burst

BODY = b"ok"

# name -> the upstream's answer, head and body. Each head is of the shape the in-place parser
# reads (a Content-Length, no Transfer-Encoding, CRLF line ends), but for one defect.
REFUSED = {
    "no-sp-after-status": b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n",
    "name-with-equals": b"HTTP/1.1 200 OK\r\nX-Len=gth: 1\r\nContent-Length: 2\r\n\r\n",
    "name-with-space": b"HTTP/1.1 200 OK\r\nX Bad: 1\r\nContent-Length: 2\r\n\r\n",
    "name-with-obs-text": b"HTTP/1.1 200 OK\r\nX-\xe9: 1\r\nContent-Length: 2\r\n\r\n",
    "name-with-slash": b"HTTP/1.1 200 OK\r\nX/Y: 1\r\nContent-Length: 2\r\n\r\n",
    "value-lone-cr": b"HTTP/1.1 200 OK\r\nX-A: a\rX-Injected: 1\r\nContent-Length: 2\r\n\r\n",
    "value-nul": b"HTTP/1.1 200 OK\r\nX-A: a\x00X-Injected\r\nContent-Length: 2\r\n\r\n",
    "value-del": b"HTTP/1.1 200 OK\r\nX-A: a\x7fX-Injected\r\nContent-Length: 2\r\n\r\n",
    "value-escape": b"HTTP/1.1 200 OK\r\nX-A: a\x1bX-Injected\r\nContent-Length: 2\r\n\r\n",
    "value-vertical-tab": b"HTTP/1.1 200 OK\r\nX-A: a\x0bX-Injected\r\nContent-Length: 2\r\n\r\n",
    "reason-lone-cr": b"HTTP/1.1 200 OK\rX-Injected: 1\r\nContent-Length: 2\r\n\r\n",
    "reason-nul": b"HTTP/1.1 200 O\x00X-Injected\r\nContent-Length: 2\r\n\r\n",
    "reason-control": b"HTTP/1.1 200 O\x01X-Injected\r\nContent-Length: 2\r\n\r\n",
}
# Heads that stay relayed: status as sent, and the field (when named) with its value.
RELAYED = {
    "plain": (b"HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n", 200, b"X-A: 1"),
    "empty-reason": (b"HTTP/1.1 201 \r\nX-A: 1\r\nContent-Length: 2\r\n\r\n", 201, b"X-A: 1"),
    "tab-in-value": (b"HTTP/1.1 200 OK\r\nX-A: a\tb\r\nContent-Length: 2\r\n\r\n", 200,
                     b"X-A: a\tb"),
    "obs-text-in-value": (b"HTTP/1.1 200 OK\r\nX-A: caf\xe9\r\nContent-Length: 2\r\n\r\n", 200,
                          b"X-A: caf\xe9"),
    "token-punctuation": (b"HTTP/1.1 200 OK\r\nX-!#$%&'*+.^_`|~: 1\r\nContent-Length: 2\r\n\r\n",
                          200, b"X-!#$%&'*+.^_`|~: 1"),
    "http10": (b"HTTP/1.0 200 OK\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n", 200, b"X-A: 1"),
}


class CannedUpstream:
    """Answers each request with ANSWERS[name] + BODY for a target /public/case/NAME, then
    closes. One accepting thread, one per connection; all bounded by the stop flag."""

    def __init__(self, answers):
        self.answers = answers
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn):
        conn.settimeout(5)
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            target = head.split(b" ", 2)[1].decode("latin-1")
            name = target.rsplit("/", 1)[-1]
            conn.sendall(self.answers.get(name, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0"
                                                b"\r\n\r\n") + BODY)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopping.set()
        self.sock.close()
        for t in self.threads:
            t.join(timeout=5)


class UpstreamHeadTests(GatewayTestCase):
    def setUp(self):
        super().setUp()
        answers = dict(REFUSED)
        answers.update({name: head for name, (head, _, _) in RELAYED.items()})
        self.canned = CannedUpstream(answers)
        self.addCleanup(self.canned.stop)
        self.start({
            "server": {"threads": 2},
            "store": {"type": "memory"},
            "mode": "enforce",
            "plans": {"p": {"limits": [burst(1000)]}},
            "keys": [],
            "routes": [{"path": "/public/*", "identity": "ip"}],
            "anonymous": {"limits": [burst(1000, name="ip")]},
        }, upstream=self.canned.url)

    def fetch(self, name):
        raw, _, _ = harness.raw_exchange(
            self.gateway.port,
            b"GET /public/case/%s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" %
            name.encode())
        head, _, body = raw.partition(b"\r\n\r\n")
        return harness.status_of(raw), head, body

    def test_heads_beast_refuses_are_answered_502_and_never_relayed(self):
        for name in REFUSED:
            with self.subTest(name):
                status, head, body = self.fetch(name)
                self.assertEqual(status, 502, head)
                self.assertNotIn(b"X-Injected", head + body)
                self.assertIn(b"upstream_unavailable", body)

    def test_heads_of_the_common_shape_are_relayed(self):
        for name, (_, want_status, field) in RELAYED.items():
            with self.subTest(name):
                status, head, body = self.fetch(name)
                self.assertEqual(status, want_status, head)
                self.assertIn(b"\r\n" + field + b"\r\n", head + b"\r\n")
                self.assertEqual(body, BODY)


if __name__ == "__main__":
    harness.main(__file__)
