#!/usr/bin/env python3
"""Request-size limits per route (issue 33, part 6: `max_header_bytes`, `max_body_bytes` on a
route), through the real binary with http.client and raw sockets.

    python3 test_route_sizes.py --binary build/tollgate [-v]

- a table of requests over and under a route's limits: Content-Length and chunked bodies, the
  head as forwarded (optional whitespace not counted), a route taking no body, every spelling
  of a method override (which must not lead to a route taking larger requests), folded paths;
  each refused one gets 413 body_too_large or 431 header_too_large and never reaches the upstream;
- a refused request counts against no limit.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase  # noqa: E402


def bucket(capacity):
    return {"name": "burst", "algorithm": "token_bucket", "capacity": capacity,
            "refill_per_second": 0.001}


CONFIG = {
    "server": {"threads": 2},
    "store": {"type": "memory"},
    "mode": "enforce",
    "plans": {"small": {"limits": [bucket(2)]}},
    "keys": [{"key": "sk-1", "id": "one", "plan": "small"}],
    "routes": [
        {"path": "/upload/*", "method": "POST", "identity": "ip", "max_body_bytes": 1000},
        {"path": "/upload/*", "method": ["PUT", "PATCH"], "identity": "ip"},
        {"path": "/small/*", "identity": "ip", "max_header_bytes": 2048},
        {"path": "/nobody/*", "identity": "ip", "max_body_bytes": 0},
        {"path": "/keyed/*", "max_body_bytes": 10},
        {"path": "/public/*", "identity": "ip"},
    ],
    "anonymous": {"limits": [bucket(100000)]},
}


def chunked(sizes):
    out = b""
    for n in sizes:
        out += b"%x\r\n" % n + b"a" * n + b"\r\n"
    return out + b"0\r\n\r\n"


class RouteSizeTests(GatewayTestCase):

    def setUp(self):
        super().setUp()
        self.gw = self.start(dict(CONFIG))

    def raw(self, method, path, headers=(), body=b"", is_chunked=False):
        lines = ["%s %s HTTP/1.1" % (method, path), "Host: api", "Connection: close"]
        lines += list(headers)
        if is_chunked:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append("Content-Length: %d" % len(body))
        data, _, _ = harness.raw_exchange(self.gw.port,
                                          ("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return harness.status_of(data), data

    def test_requests_over_and_under_the_limits(self):
        big_header = "X-Pad: " + "p" * 2100
        padded = "X-Pad:" + " " * 600 + "p" * 1500 + " " * 600  # 2100 bytes, 1500 forwarded
        # (row, method, path, extra headers, body, chunked, status, code)
        rows = [
            ("a body at the limit", "POST", "/upload/a", [], b"a" * 1000, False, 200, None),
            ("a body over it", "POST", "/upload/a", [], b"a" * 1001, False, 413, "body_too_large"),
            ("chunked under", "POST", "/upload/a", [], chunked([400, 600]), True, 200, None),
            ("chunked over", "POST", "/upload/a", [], chunked([600, 600]), True, 413,
             "body_too_large"),
            ("a folded path", "POST", "/UPLOAD/a", [], b"a" * 1001, False, 413,
             "body_too_large"),
            ("a dot segment", "POST", "/public/../upload/a", [], b"a" * 1001, False, 413,
             "body_too_large"),
            ("the route of another method", "PUT", "/upload/a", [], b"a" * 5000, False, 200,
             None),
            ("X-HTTP-Method-Override", "POST", "/upload/a", ["X-HTTP-Method-Override: PUT"],
             b"a" * 1001, False, 413, "body_too_large"),
            ("X-HTTP-Method", "POST", "/upload/a", ["X-HTTP-Method: PATCH"], b"a" * 1001, False,
             413, "body_too_large"),
            ("X-Method-Override", "POST", "/upload/a", ["x-method-override: put"], b"a" * 1001,
             False, 413, "body_too_large"),
            ("an override spelt with _", "POST", "/upload/a", ["X_HTTP_Method_Override: PUT"],
             b"a" * 1001, False, 413, "body_too_large"),
            ("?_method=", "POST", "/upload/a?_method=PUT", [], b"a" * 1001, False, 413,
             "body_too_large"),
            ("a head under the route's", "GET", "/small/a", ["X-Pad: " + "p" * 1500], b"", False,
             200, None),
            ("a head over it", "GET", "/small/a", [big_header], b"", False, 431,
             "header_too_large"),
            ("whitespace is not forwarded", "GET", "/small/a", [padded], b"", False, 200, None),
            ("the same head elsewhere", "GET", "/public/a", [big_header], b"", False, 200, None),
            ("no body taken: empty", "POST", "/nobody/a", [], b"", False, 200, None),
            ("no body taken: one byte", "POST", "/nobody/a", [], b"x", False, 413,
             "body_too_large"),
            ("no body taken: chunked", "POST", "/nobody/a", [], chunked([1]), True, 413,
             "body_too_large"),
            ("no route limit", "POST", "/public/a", [], b"a" * 50000, False, 200, None),
        ]
        for row, method, path, headers, body, is_chunked, status, code in rows:
            with self.subTest(row=row):
                before = self.upstream.stats()["received"]
                got, data = self.raw(method, path, headers, body, is_chunked)
                self.assertEqual(got, status, data[:400])
                if code:
                    self.assertIn(code.encode(), data)
                    self.assertEqual(self.upstream.stats()["received"], before)
                else:
                    self.assertEqual(self.upstream.stats()["received"], before + 1)

    def test_a_refused_request_counts_against_no_limit(self):
        auth = ["Authorization: Bearer sk-1"]
        for _ in range(5):
            self.assertEqual(self.raw("POST", "/keyed/a", auth, b"a" * 11)[0], 413)
        statuses = [self.raw("POST", "/keyed/a", auth, b"a" * 10)[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 429])


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
