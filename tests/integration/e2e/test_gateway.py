#!/usr/bin/env python3
"""Integration tests: the real tollgate binary in front of the real Python upstream
(tests/support/upstream.py), driven by real HTTP clients on 127.0.0.1.

    python3 test_gateway.py --binary build/tollgate [unittest args, e.g. LimitTests -v]

Each test starts its own upstream and gateway on free loopback ports with its own config in a
temp dir (harness.GatewayTestCase), and stops them by PID afterwards. The tests are grouped
in classes that CTest runs as separate entries (tests/integration/e2e/CMakeLists.txt).
"""
import datetime
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SLOW, burst, GatewayTestCase, KeepAliveLoad, deadline_loop, raw_exchange, status_of, wait_until  # noqa: E402


FREE_KEY = "sk-free-0123456789abcdef"
TEAM_KEY = "sk-team-0123456789abcdef"
OTHER_KEY = "sk-other-0123456789abcdef"


def daily(allowance=1000, ceiling=10000):
    return {"name": "daily", "algorithm": "quota", "period": "day", "allowance": allowance,
            "ceiling": ceiling}


def config(plans=None, keys=None, **extra):
    """A gateway config (a dict written as JSON, which is YAML). The harness fills in the
    listen ports and the upstream URL."""
    c = {
        "server": {"threads": 2, "access_log": True},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": plans or {"free": {"limits": [burst(5), daily()]}},
        "keys": keys if keys is not None else [
            {"key": FREE_KEY, "id": "k-free", "account": "acme", "plan": "free"},
        ],
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    c.update(extra)
    return c


def rate_limit_headers(r):
    names = ("RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining",
             "RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
             "Retry-After")
    return {n: r.header(n) for n in names if r.header(n) is not None}


def policy_quota(r, name="burst"):
    m = re.search(r'"%s";q=(\d+)' % re.escape(name), r.header("RateLimit-Policy", ""))
    return int(m.group(1)) if m else None


class LimitTests(GatewayTestCase):
    """The limits themselves: caps, concurrency, refill, headers, cost, overrides."""

    def test_reset_fields_retry_after_and_t_agree_on_2xx_and_429(self):
        # draft-ietf-httpapi-ratelimit-headers-10: `t` is the seconds until more quota is made
        # available; RateLimit-Reset, X-RateLimit-Reset and (on a 429) Retry-After say the same.
        plans = {
            "bucket": ("burst", {"name": "burst", "capacity": 3, "refill_per_second": 0.5}, 2),
            "window": ("win", {"name": "win", "algorithm": "fixed_window", "limit": 2,
                               "window_seconds": 3600}, 3600),
            "quota": ("day", {"name": "day", "algorithm": "quota", "period": "day",
                              "ceiling": 2}, 86400),
        }
        for plan, (name, limit, most) in plans.items():
            with self.subTest(plan=plan):
                key = "sk-%s-0123456789abcdef" % plan
                gw = self.start(config(plans={plan: {"limits": [limit]}},
                                       keys=[{"key": key, "id": plan, "plan": plan}]))
                statuses = []
                for _ in range(4):
                    r = gw.get("/echo", key=key)
                    statuses.append(r.status)
                    t = re.search(r'"%s";r=(\d+);t=(\d+)' % name, r.header("RateLimit", ""))
                    self.assertIsNotNone(t, r)
                    reset = r.header("RateLimit-Reset")
                    self.assertEqual(reset, t.group(2), r)
                    self.assertEqual(r.header("X-RateLimit-Reset"), reset, r)
                    self.assertLessEqual(int(reset), most, r)
                    if r.status == 429:
                        self.assertEqual(r.header("Retry-After"), reset, r)
                        self.assertGreaterEqual(int(reset), 1, r)
                    else:
                        self.assertIsNone(r.header("Retry-After"), r)
                self.assertEqual(statuses[-1], 429, statuses)
                for p in self.processes:
                    p.stop()

    def test_serial_cap_then_429_with_retry_after(self):
        gw = self.start(config(plans={"free": {"limits": [burst(5)]}}))
        for i in range(5):
            r = gw.get("/echo", key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.header("RateLimit-Remaining"), str(4 - i), r)
        r = gw.get("/echo", key=FREE_KEY)
        body = self.assertRateLimited(r, "rate_limited")
        self.assertEqual(r.header("RateLimit-Remaining"), "0", r)
        self.assertEqual(r.header("X-RateLimit-Remaining"), "0", r)
        self.assertEqual(r.header("RateLimit-Policy"), '"burst";q=5;w=500', r)
        self.assertRegex(r.header("RateLimit", ""), r'^"burst";r=0;t=\d+$')
        self.assertEqual(r.header("RateLimit-Reset"), r.header("Retry-After"), r)
        self.assertEqual(body["violated-policies"], ["burst"], body)
        # 1 token at 0.01/s: about 100 s.
        self.assertGreaterEqual(int(r.header("Retry-After")), 90)
        self.assertLessEqual(int(r.header("Retry-After")), 100)
        # The upstream saw exactly the accepted requests.
        self.assertEqual(self.upstream.stats()["received"], 5)

    def test_parallel_requests_accept_exactly_the_limit(self):
        limit, extra = 20, 50
        gw = self.start(config(plans={"free": {"limits": [burst(limit)]}}))
        barrier = threading.Barrier(limit + extra, timeout=30)
        results, lock = [], threading.Lock()

        def one():
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
            try:
                conn.connect()
                barrier.wait()
                conn.request("GET", "/echo", headers={"X-API-Key": FREE_KEY})
                r = conn.getresponse()
                r.read()
                out = r.status
            except Exception as e:  # recorded and asserted on below
                out = repr(e)
            finally:
                conn.close()
            with lock:
                results.append(out)

        threads = [threading.Thread(target=one, daemon=True) for _ in range(limit + extra)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(len(results), limit + extra, results)
        self.assertEqual(results.count(200), limit, results)
        self.assertEqual(results.count(429), extra, results)
        self.assertEqual(self.upstream.stats()["received"], limit)
        m = gw.metrics()
        self.assertEqual(m.get('tollgate_rejections_total{plan="free",code="rate_limited"}'), extra)

    def test_burst_then_sustained_rate_passes_and_faster_rate_is_limited(self):
        gw = self.start(config(plans={"free": {"limits": [burst(5, refill="5")]}}))
        # Spend the burst (a few refill while we spend it).
        spent = 0
        for _ in range(30):
            r = gw.get("/echo", key=FREE_KEY)
            if r.status == 429:
                break
            self.assertEqual(r.status, 200, r)
            spent += 1
        self.assertEqual(r.status, 429, "the burst never ran out")
        self.assertGreaterEqual(spent, 5)
        # Sustain at 4/s (below the 5/s refill) for 3 s, on an absolute schedule: a request sent
        # late only leaves more tokens for the next, so every one passes however noisy the host.
        start = time.monotonic()
        statuses = []
        for i in range(1, 13):
            delay = start + i * 0.25 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            statuses.append(gw.get("/echo", key=FREE_KEY).status)
        self.assertEqual(statuses, [200] * 12)
        # Much faster than the refill: some are limited.
        fast = [gw.get("/echo", key=FREE_KEY).status for _ in range(25)]
        self.assertIn(429, fast)
        self.assertIn(200, fast)  # what the sustain phase left over

    def test_waiting_retry_after_then_success(self):
        gw = self.start(config(plans={"free": {"limits": [burst(2, refill="1")]}}))
        r = None
        for _ in range(10):
            r = gw.get("/echo", key=FREE_KEY)
            if r.status == 429:
                break
        self.assertRateLimited(r)
        retry_after = int(r.header("Retry-After"))
        self.assertEqual(retry_after, 1)
        time.sleep(retry_after + 0.05)
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)

    def test_two_keys_are_isolated(self):
        gw = self.start(config(
            plans={"free": {"limits": [burst(3)]}},
            keys=[{"key": FREE_KEY, "id": "k-free", "plan": "free"},
                  {"key": OTHER_KEY, "id": "k-other", "plan": "free"}]))
        for _ in range(3):
            self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        self.assertRateLimited(gw.get("/echo", key=FREE_KEY))
        r = gw.get("/echo", key=OTHER_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)
        self.assertRateLimited(gw.get("/echo", key=FREE_KEY))

    def test_account_scope_shares_one_budget(self):
        gw = self.start(config(
            plans={"org": {"scope": "account", "limits": [burst(4)]}},
            keys=[{"key": FREE_KEY, "id": "k-a", "account": "acme", "plan": "org"},
                  {"key": TEAM_KEY, "id": "k-b", "account": "acme", "plan": "org"},
                  {"key": OTHER_KEY, "id": "k-c", "account": "globex", "plan": "org"}]))
        statuses = [gw.get("/echo", key=k).status for k in (FREE_KEY, TEAM_KEY) * 3]
        self.assertEqual(statuses, [200, 200, 200, 200, 429, 429])
        self.assertEqual(gw.get("/echo", key=OTHER_KEY).status, 200)

    def test_rate_limit_headers_on_200(self):
        gw = self.start(config(plans={"free": {"limits": [burst(20, refill="0.5"), daily()]}}))
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Policy"), '"burst";q=20;w=40, "daily";q=1000;w=86400')
        m = re.fullmatch(r'"burst";r=(\d+);t=(\d+), "daily";r=(\d+);t=(\d+)', r.header("RateLimit", ""))
        self.assertIsNotNone(m, r)
        self.assertEqual(int(m.group(1)), 19)
        self.assertEqual(int(m.group(2)), 2)  # one token at 0.5/s
        self.assertEqual(int(m.group(3)), 999)
        self.assertTrue(0 < int(m.group(4)) <= 86400, m.group(4))
        for prefix in ("RateLimit-", "X-RateLimit-"):
            self.assertEqual(r.header(prefix + "Limit"), "20", r)
            self.assertEqual(r.header(prefix + "Remaining"), "19", r)
            self.assertEqual(r.header(prefix + "Reset"), "2", r)
        self.assertIsNone(r.header("Retry-After"))
        # The upstream is told who called, never the key.
        echoed = r.json()["headers"]
        self.assertEqual(echoed.get("X-Tollgate-Key-Id"), "k-free")
        self.assertEqual(echoed.get("X-Tollgate-Plan"), "free")

    def test_header_sets_are_configurable(self):
        gw = self.start(config(headers=["ietf"]))
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertIsNotNone(r.header("RateLimit-Policy"))
        self.assertIsNone(r.header("RateLimit-Limit"))
        self.assertIsNone(r.header("X-RateLimit-Limit"))

    def test_route_cost_from_query(self):
        gw = self.start(config(
            plans={"free": {"limits": [burst(20)]}},
            routes=[{"path": "/v1/export", "method": "GET",
                     "cost": {"query": "pages", "per": 50, "min": 1}}]))
        r = gw.get("/v1/export?pages=120", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "17", r)  # ceil(120/50) = 3
        r = gw.get("/v1/export?pages=1", key=FREE_KEY)
        self.assertEqual(r.header("RateLimit-Remaining"), "16", r)  # min 1
        r = gw.get("/v1/export", key=FREE_KEY)
        self.assertEqual(r.header("RateLimit-Remaining"), "15", r)  # no count: min
        # More than the capacity can never pass: no Retry-After, and nothing consumed.
        r = gw.get("/v1/export?pages=5000", key=FREE_KEY)
        body = self.assertRateLimited(r, "cost_exceeds_capacity", retry_after=False)
        self.assertNotIn("retry_after", body)
        r = gw.get("/v1/export?pages=50", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "14", r)
        # A count that is not a number is the client's error.
        r = gw.get("/v1/export?pages=lots", key=FREE_KEY)
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "invalid_cost")
        # Other routes cost 1.
        r = gw.get("/echo?pages=500", key=FREE_KEY)
        self.assertEqual(r.header("RateLimit-Remaining"), "13", r)

    def test_override_expiry(self):
        gw = self.start(config(
            plans={"team": {"limits": [burst(5), daily()]}},
            keys=[{"key": FREE_KEY, "id": "k-expired", "plan": "team",
                   "overrides": {"burst": {"capacity": 50, "expires": "2001-01-01"}}},
                  {"key": TEAM_KEY, "id": "k-current", "plan": "team",
                   "overrides": {"burst": {"capacity": 50, "expires": "2099-12-31T23:00:00Z"}}},
                  {"key": OTHER_KEY, "id": "k-plain", "plan": "team"}]))
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r), 5, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "4", r)
        r = gw.get("/echo", key=TEAM_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r), 50, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "49", r)
        r = gw.get("/echo", key=OTHER_KEY)
        self.assertEqual(policy_quota(r), 5, r)
        # The expired override really limits at the plan's 5.
        for _ in range(4):
            self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        self.assertRateLimited(gw.get("/echo", key=FREE_KEY))
        for _ in range(10):
            self.assertEqual(gw.get("/echo", key=TEAM_KEY).status, 200)

    def test_status_endpoint_reports_and_consumes_nothing(self):
        gw = self.start(config(plans={"free": {"limits": [burst(10), daily(100, 1000)]}}))
        self.assertEqual(gw.get("/v1/rate-limit").status, 401)
        self.assertEqual(gw.get("/v1/rate-limit", key="sk-not-a-key").status, 401)
        first = None
        for _ in range(5):
            r = gw.get("/v1/rate-limit", key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            body = r.json()
            if first is None:
                first = body
            for field in ("limit", "remaining", "resetSeconds", "burst", "quota"):
                self.assertIn(field, body)
            self.assertEqual(body["limit"], 10, body)
            self.assertEqual(body["remaining"], 10, body)
            self.assertEqual(body["burst"]["remaining"], 10, body)
            self.assertEqual(body["quota"]["used"], 0, body)
        self.assertEqual(first["key_id"], "k-free")
        self.assertEqual(first["plan"], "free")
        self.assertEqual(first["quota"]["period"], "day")
        self.assertEqual(first["quota"]["allowance"], 100)
        self.assertEqual(first["quota"]["ceiling"], 1000)
        self.assertEqual(self.upstream.stats()["received"], 0)  # answered by the gateway
        # A real request consumes; the endpoint shows it.
        self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        body = gw.get("/v1/rate-limit", key=FREE_KEY).json()
        self.assertEqual(body["remaining"], 9, body)
        self.assertEqual(body["quota"]["used"], 1, body)
        # And the next request still has those 9 (the endpoint took none).
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.header("RateLimit-Remaining"), "8", r)

    def test_quota_ceiling(self):
        gw = self.start(config(plans={"free": {"limits": [burst(100), daily(2, 3)]}}))
        for _ in range(3):
            self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        r = gw.get("/echo", key=FREE_KEY)
        self.assertRateLimited(r, "ceiling_exceeded")
        self.assertGreater(int(r.header("Retry-After")), 0)
        self.assertLessEqual(int(r.header("Retry-After")), 86400)


    def test_a_repeated_429_always_says_what_is_true_for_its_request(self):
        # One worker renders a 429 once and sends the same bytes again while the numbers in it
        # stay the same: every way two 429s in a row can differ must still show. Keys of
        # different plans, limits and codes, keep-alive or not, HTTP/1.0 or 1.1, alternate on
        # the one worker, and a Retry-After must fall as time passes.
        plans = {
            "small": {"limits": [burst(1, name="small-burst")]},
            "big": {"limits": [burst(2, name="big-burst")]},
            "capped": {"limits": [burst(100), daily(1, 1)]},
            "tick": {"limits": [burst(1, refill=0.5, name="tick")]},
        }
        keys = [{"key": "sk-%s-0123456789abcdef" % p, "id": p, "plan": p} for p in plans]
        gw = self.start(config(plans=plans, keys=keys, server={"threads": 1}))
        expected = {  # plan -> (RateLimit-Policy, RateLimit-Limit, code, violated policy)
            "small": ('"small-burst";q=1;w=100', "1", "rate_limited", "small-burst"),
            "big": ('"big-burst";q=2;w=200', "2", "rate_limited", "big-burst"),
            "capped": (None, None, "ceiling_exceeded", "daily"),
        }

        def raw(plan, version, connection):
            req = ("GET /echo HTTP/%s\r\nHost: x\r\nAuthorization: Bearer sk-%s-0123456789abcdef"
                   "\r\n%s\r\n" % (version, plan,
                                    "Connection: %s\r\n" % connection if connection else ""))
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
            try:
                s.sendall(req.encode())
                data = b""
                while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
                        re.search(rb"Content-Length: (\d+)", data).group(1)):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                return data.decode()
            finally:
                s.close()

        for plan in expected:  # spend each budget
            while gw.get("/echo", key="sk-%s-0123456789abcdef" % plan).status == 200:
                pass
        for _ in range(3):
            for plan, (policy, limit, code, violated) in expected.items():
                # Each differs from the one before it in one way (the HTTP version, then
                # keep-alive, then the version again).
                for version, connection, answer in (
                        ("1.0", "keep-alive", "keep-alive"), ("1.1", None, None),
                        ("1.1", "close", "close"), ("1.0", None, "close")):
                    with self.subTest(plan=plan, version=version, connection=connection):
                        text = raw(plan, version, connection)
                        head, body = text.split("\r\n\r\n", 1)
                        self.assertTrue(head.startswith("HTTP/1.1 429 "), head)
                        self.assertEqual(json.loads(body)["code"], code, body)
                        self.assertEqual(json.loads(body)["violated-policies"], [violated], body)
                        if policy:
                            self.assertIn("\r\nRateLimit-Policy: %s\r\n" % policy, head)
                            self.assertIn("\r\nRateLimit-Limit: %s\r\n" % limit, head)
                        said = re.search(r"\r\nConnection: ([^\r]*)", head)
                        self.assertEqual(said and said.group(1), answer, head)
        # One token every 2 s: the wait a 429 names falls as the bucket refills.
        tick = "sk-tick-0123456789abcdef"
        self.assertEqual(gw.get("/echo", key=tick).status, 200)
        first = gw.get("/echo", key=tick)
        self.assertRateLimited(first)
        self.assertEqual(first.header("Retry-After"), "2", first)
        time.sleep(1.2)
        later = gw.get("/echo", key=tick)
        self.assertRateLimited(later)
        self.assertEqual(later.header("Retry-After"), "1", later)
        self.assertEqual(later.header("RateLimit-Reset"), "1", later)

class IdentityTests(GatewayTestCase):
    """Who is limited: keys, client IPs and X-Forwarded-For, and hostile input."""

    def ip_config(self, trusted):
        return config(
            identity={"trusted_proxies": trusted},
            routes=[{"path": "/public/*", "identity": "ip"}],
            anonymous={"limits": [{"name": "ip", "algorithm": "token_bucket", "capacity": 3,
                                   "refill_per_second": SLOW}]})

    def test_key_or_ip_route_limits_a_key_by_its_plan_and_anyone_else_by_address(self):
        gw = self.start(config(
            routes=[{"name": "catalog", "path": "/v1/catalog/*", "identity": "key_or_ip"}],
            anonymous={"limits": [{"name": "ip", "algorithm": "token_bucket", "capacity": 2,
                                   "refill_per_second": SLOW}]}))
        # Each presentation of the key, and none: (headers, expected status, expected policy).
        rows = [
            ({"Authorization": "Bearer " + FREE_KEY}, 200, "burst"),
            ({"X-API-Key": FREE_KEY}, 200, "burst"),
            ({"authorization": "bearer " + FREE_KEY}, 200, "burst"),
            ({}, 200, "ip"),
            ({"Authorization": "Basic dXNlcjpwdw=="}, 200, "ip"),  # not a key: by address
            ({"Authorization": "Bearer sk-unknown"}, 401, None),      # a wrong key: 401
            ({"X-API-Key": "sk-unknown"}, 401, None),
        ]
        for headers, status, policy in rows:
            r = gw.get("/v1/catalog/items", headers=headers)
            self.assertEqual(r.status, status, (headers, r))
            if policy:
                self.assertIsNotNone(policy_quota(r, policy), (headers, r))
        # The anonymous budget (2) is spent by the two keyless requests above; keys are not.
        self.assertEqual(gw.get("/v1/catalog/items").status, 429)
        self.assertEqual(gw.get("/v1/catalog/items", key=FREE_KEY).status, 200)

    def test_route_templates_and_method_lists_match_the_canonical_path(self):
        gw = self.start(config(plans={"free": {"limits": [burst(1000)]}}, routes=[
            {"name": "messages", "path": "/v1/users/{id}/messages", "method": ["POST", "PUT"],
             "cost": 3},
            {"name": "public", "path": "/public/*", "identity": "none"},
        ]))
        rows = [  # (method, target, cost charged; 0: the route of identity none)
            ("POST", "/v1/users/42/messages", 3),
            ("PUT", "/v1/users/42/messages/", 3),
            ("POST", "/v1/users/42/./messages", 3),
            ("POST", "/v1/users/x/../42/messages", 3),
            ("POST", "/v1//users/42/messages", 3),
            ("POST", "/v1/users/%34%32/messages", 3),
            ("GET", "/v1/users/42/messages", 1),           # not in the method list
            ("POST", "/v1/users/42/43/messages", 1),       # {id} is one segment
            ("POST", "/v1/users/messages", 1),
            ("POST", "/public/../v1/users/42/messages", 3),
            ("GET", "/public/x", 0),
        ]
        remaining = 1000
        for method, target, cost in rows:
            r = gw.request(method, target, headers={"Authorization": "Bearer " + FREE_KEY})
            self.assertEqual(r.status, 200, (method, target, r))
            if cost == 0:
                self.assertIsNone(r.header("RateLimit-Policy"), (method, target))
                continue
            # The cost charged is what the bucket lost (requests are sequential).
            left = int(r.header("RateLimit-Remaining"))
            self.assertEqual(remaining - left, cost, (method, target, r))
            remaining = left

    def test_forwarded_for_from_untrusted_peer_is_ignored(self):
        gw = self.start(self.ip_config([]))
        statuses = []
        for i in range(5):
            r = gw.get("/public/echo", headers={"X-Forwarded-For": "10.0.0.%d" % (i + 1),
                                                "X-Tollgate-Key-Id": "k-spoofed"})
            statuses.append(r.status)
            if r.status == 200:
                echoed = r.json()["headers"]
                # Not passed on (issue 31): the upstream gets the real peer alone; identity
                # headers are the gateway's own.
                self.assertEqual(echoed["X-Forwarded-For"], "127.0.0.1")
                self.assertNotIn("X-Tollgate-Key-Id", echoed)
        self.assertEqual(statuses, [200, 200, 200, 429, 429])
        self.assertEqual(policy_quota(r, "ip"), 3, r)

    def test_forwarded_for_from_trusted_proxy_is_honoured(self):
        gw = self.start(self.ip_config(["127.0.0.1/32"]))
        a = [gw.get("/public/x", headers={"X-Forwarded-For": "10.0.0.1"}).status for _ in range(4)]
        self.assertEqual(a, [200, 200, 200, 429])
        # The right-most untrusted address is the client, whatever is left of it.
        r = gw.get("/public/x", headers={"X-Forwarded-For": "10.0.0.1, 10.0.0.2"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)
        r = gw.get("/public/x", headers={"X-Forwarded-For": "198.51.100.7, 127.0.0.1"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)
        # No X-Forwarded-For: the peer itself.
        self.assertEqual(gw.get("/public/x").status, 200)
        # IPv6 clients are grouped by /64.
        v6 = [gw.get("/public/x", headers={"X-Forwarded-For": "2001:db8:0:7::%x" % (i + 1)}).status
              for i in range(4)]
        self.assertEqual(v6, [200, 200, 200, 429])
        r = gw.get("/public/x", headers={"X-Forwarded-For": "2001:db8:0:8::1"})
        self.assertEqual(r.status, 200, r)

    def test_missing_and_invalid_keys_get_401(self):
        gw = self.start(config())
        r = gw.get("/echo")
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.header("Content-Type"), "application/problem+json", r)
        self.assertEqual(r.json()["code"], "missing_api_key")
        self.assertEqual(r.header("WWW-Authenticate"), "Bearer")
        r = gw.get("/echo", key="sk-not-a-key")
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.json()["code"], "invalid_api_key")
        r = gw.get("/echo", headers={"X-API-Key": "sk-not-a-key"})
        self.assertEqual(r.json()["code"], "invalid_api_key")
        r = gw.get("/echo", headers={"Authorization": "Basic " + FREE_KEY})  # not Bearer
        self.assertEqual(r.status, 401, r)
        self.assertEqual(gw.get("/echo", headers={"X-API-Key": FREE_KEY}).status, 200)
        self.assertEqual(self.upstream.stats()["received"], 1)

    def test_repeated_invalid_keys_are_limited_per_ip(self):
        gw = self.start(config(identity={"invalid_key_limit": {
            "algorithm": "token_bucket", "capacity": 3, "refill_per_second": SLOW}}))
        statuses = [gw.get("/echo", key="sk-guess-%d" % i).status for i in range(5)]
        self.assertEqual(statuses, [401, 401, 401, 429, 429])
        r = gw.get("/echo", key="sk-guess-x")
        self.assertRateLimited(r)
        # A valid key from the same address is not punished.
        self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        self.assertEqual(gw.metrics().get("tollgate_invalid_keys_total"), 6)

    def test_unknown_plan_gets_the_strictest_plan(self):
        # The enforced plan with the lowest sustained rate: free's refill, not team's; never
        # the shadow plan, however low its rate.
        gw = self.start(config(
            plans={"team": {"limits": [burst(50, refill=1), daily()]},
                   "trial": {"mode": "shadow", "limits": [burst(1, refill="0.001")]},
                   "free": {"limits": [burst(4), daily()]}},
            keys=[{"key": FREE_KEY, "id": "k-lost", "plan": "platinum"}]))
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r), 4, r)
        info = gw.admin("GET", "/admin/keys/k-lost").json()
        self.assertEqual(info["plan"], "free")
        self.assertEqual(info["configured_plan"], "platinum")

    def test_oversized_header_gets_431(self):
        gw = self.start(config(server={"max_header_bytes": 2048}))
        # About 3 KB in one write, so the gateway reads it all before answering.
        req = ("GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: %s\r\n\r\n" % ("a" * 3000)).encode()
        data, closed, _ = raw_exchange(gw.port, req)
        self.assertEqual(status_of(data), 431, data[:200])
        self.assertTrue(closed)
        self.assertTrue(gw.healthy())

    def test_malformed_request_line_gets_400(self):
        gw = self.start(config())
        for junk in (b"GET /echo HTTX/1.1\r\nHost: x\r\n\r\n",
                     b"GET\r\n\r\n",
                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"):
            data, closed, _ = raw_exchange(gw.port, junk)
            self.assertEqual(status_of(data), 400, (junk, data[:200]))
            self.assertTrue(closed)
        self.assertTrue(gw.healthy())

    def test_slow_headers_are_cut_off(self):
        gw = self.start(config(server={"header_timeout_ms": 500, "idle_timeout_ms": 20000}))
        # Half the headers, then nothing.
        data, closed, seconds = raw_exchange(
            gw.port, b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-", timeout=10)
        self.assertTrue(closed, "the connection stayed open for %.1f s" % seconds)
        self.assertGreaterEqual(seconds, 0.4)
        self.assertLess(seconds, 5.0)
        self.assertEqual(status_of(data), 408, data[:300])
        self.assertIn(b'"code":"header_timeout"', data)
        self.assertTrue(gw.healthy())

    def test_hostile_input_does_not_crash(self):
        gw = self.start(config(
            plans={"free": {"limits": [burst(100)]}},
            server={"max_header_bytes": 2048, "header_timeout_ms": 300},
            routes=[{"path": "/v1/export", "cost": {"query": "pages", "per": 50}}]))
        key = FREE_KEY.encode()
        close = b"Connection: close\r\n"
        hostile = [
            b"GET /echo HTTP/1.1\r\n" + b"X: y\r\n" * 1000 + b"\r\n",
            b"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"GET /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"GET /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" % key,
            b"GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \r\n" + close + b"\r\n",
            b"GET /v1/export?pages=-1&pages HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n" % key + close + b"\r\n",
            b"GET /v1/export?pages=99999999999999999999999 HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n" % key
            + close + b"\r\n",
            b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: ,,,[::1]], 999.1.1.1\r\nX-API-Key: %s\r\n" % key
            + close + b"\r\n",
            b"GET /%ff%00/\xc3\x28?a=%00 HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + b"\r\n" + close + b"\r\n",
            b"GET /echo HTTP/1.0\r\nX-API-Key: %s\r\n\r\n" % key,
            b"GET http://example.com/echo HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n" % key + close + b"\r\n",
            b"",  # connect and close
        ]
        for payload in hostile:
            raw_exchange(gw.port, payload, timeout=3)
        # A body that never arrives: the client gives up first.
        raw_exchange(gw.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                     b"Content-Length: 10\r\n\r\nabc" % key, timeout=0.5)
        self.assertTrue(gw.healthy())
        self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)

    def test_idle_connections_are_closed(self):
        gw = self.start(config(server={"idle_timeout_ms": 500}))
        # After a request on a keep-alive connection.
        data, closed, seconds = raw_exchange(
            gw.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=10)
        self.assertEqual(status_of(data), 200, data)
        self.assertTrue(closed, "open after %.1f s" % seconds)
        self.assertTrue(0.3 <= seconds < 5, seconds)
        # And a connection that never sends anything.
        _, closed, seconds = raw_exchange(gw.port, b"", timeout=10)
        self.assertTrue(closed and seconds < 5, "open after %.1f s" % seconds)

    def test_connection_limit(self):
        gw = self.start(config(server={"max_connections": 3}))
        held = []
        try:
            # Three keep-alive connections, each proven open by a request answered on it (one
            # may be refused while the readiness probe's connection is still counted: retry).
            for _ in range(50):
                if len(held) == 3:
                    break
                conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
                try:
                    conn.request("GET", "/healthz")
                    r = conn.getresponse()
                    r.read()
                    self.assertEqual(r.status, 200)
                    held.append(conn)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    time.sleep(0.05)
            self.assertEqual(len(held), 3)
            data, closed, _ = raw_exchange(
                gw.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertEqual((data, closed), (b"", True), "a 4th connection was served")
            # The held ones still work.
            held[0].request("GET", "/healthz")
            r = held[0].getresponse()
            r.read()
            self.assertEqual(r.status, 200)
        finally:
            for conn in held:
                conn.close()
        ok = False
        for _ in deadline_loop(5, step=0.05):
            try:
                if gw.get("/healthz", timeout=2).status == 200:
                    ok = True
                    break
            except OSError:
                pass
        self.assertTrue(ok, "connections freed by closing were not given back")

    def test_the_deny_list_blocks_keys_accounts_and_addresses_with_403(self):
        keys = [{"key": FREE_KEY, "id": "k-free", "account": "acme", "plan": "free"},
                {"key": "sk-other-0123456789ab", "id": "k-other", "account": "fraud-co",
                 "plan": "free"},
                {"key": "sk-third-0123456789ab", "id": "k-third", "account": "fine",
                 "plan": "free"}]
        gw = self.start(config(plans={"free": {"limits": [burst(100)]}}, keys=keys,
                               identity={"trusted_proxies": ["127.0.0.1/32"]},
                               routes=[{"path": "/public/*", "identity": "ip"}],
                               anonymous={"limits": [burst(100, name="ip")]},
                               deny={"accounts": ["fraud-co"],
                                     "addresses": ["203.0.113.0/24", "2001:db8:bad::/48"]}))
        def get(path, key=None, xff="198.51.100.1"):
            return gw.get(path, key=key, headers={"X-Forwarded-For": xff})
        cases = [  # (label, request, blocked)
            ("account in config", lambda: get("/echo", "sk-other-0123456789ab"), True),
            ("network in config", lambda: get("/echo", FREE_KEY, "203.0.113.9"), True),
            ("anonymous route, network", lambda: get("/public/x", None, "203.0.113.200"), True),
            ("IPv6 network", lambda: get("/public/x", None, "2001:db8:bad:1::5"), True),
            ("IPv6 next door", lambda: get("/public/x", None, "2001:db8:bae::5"), False),
            ("other address", lambda: get("/public/x", None, "203.0.114.1"), False),
            ("other key", lambda: get("/echo", FREE_KEY), False),
        ]
        for label, send, blocked in cases:
            with self.subTest(label):
                r = send()
                if blocked:
                    self.assertEqual((r.status, r.json()["code"]), (403, "blocked"), r)
                    self.assertEqual(r.header("Content-Type"), "application/problem+json")
                else:
                    self.assertEqual(r.status, 200, r)
        upstream_seen = self.upstream.stats()["received"]
        # At run time, through the admin API: a key by id, removed again.
        add = lambda kind, value, path="/admin/deny": gw.admin(
            "POST", "%s?kind=%s&value=%s" % (path, kind, value))
        self.assertEqual(add("key", "k-third").status, 200)
        self.assertEqual(get("/echo", "sk-third-0123456789ab").status, 403)
        listed = gw.admin("GET", "/admin/deny").json()
        self.assertIn({"kind": "key", "value": "k-third"}, listed["admin"])
        self.assertIn({"kind": "account", "value": "fraud-co"}, listed["config"])
        self.assertEqual(add("key", "k-third", "/admin/deny/remove").status, 200)
        self.assertEqual(get("/echo", "sk-third-0123456789ab").status, 200)
        for kind, value in (("nope", "x"), ("address", "not-an-ip"), ("address", "1.2.3.4/99"),
                            ("key", "")):
            r = add(kind, value)
            self.assertEqual((r.status, r.json()["code"]), (400, "invalid_deny"), (kind, value))
        self.assertEqual(gw.metrics().get("tollgate_blocked_total"), 5)
        self.assertEqual(self.upstream.stats()["received"], upstream_seen + 1)  # blocked: none
        events = gw.process.read_stderr().decode()
        self.assertIn('"msg":"admin: deny list entry added","kind":"key","value":"k-third"', events)

    def test_admin_reset_gives_one_key_or_address_its_budget_back(self):
        keys = [{"key": FREE_KEY, "id": "k-free", "account": "acme", "plan": "free"},
                {"key": "sk-other-0123456789ab", "id": "k-other", "account": "b", "plan": "free"}]
        gw = self.start(config(plans={"free": {"limits": [burst(2)]}}, keys=keys,
                               identity={"trusted_proxies": ["127.0.0.1/32"]},
                               routes=[{"path": "/public/*", "identity": "ip"}],
                               anonymous={"limits": [burst(1, name="ip")]}))
        spend = lambda key: [gw.get("/echo", key=key).status for _ in range(3)]
        ip = lambda: gw.get("/public/x", headers={"X-Forwarded-For": "198.51.100.7"}).status
        self.assertEqual(spend(FREE_KEY), [200, 200, 429])
        self.assertEqual(spend("sk-other-0123456789ab"), [200, 200, 429])
        self.assertEqual([ip(), ip()], [200, 429])
        reset = lambda doc: gw.admin("POST", "/admin/reset", body=json.dumps(doc).encode(),
                                     headers={"Content-Type": "application/json"})
        r = reset({"key_id": "k-free"})
        self.assertEqual((r.status, r.json()["status"]), (200, "reset"), r)
        self.assertEqual(spend(FREE_KEY), [200, 200, 429])  # its budget back
        self.assertEqual(gw.get("/echo", key="sk-other-0123456789ab").status, 429)  # not others
        self.assertEqual(reset({"address": "198.51.100.7"}).status, 200)
        self.assertEqual([ip(), ip()], [200, 429])
        for doc, status, code in (({"key_id": "nope"}, 404, "unknown_key"),
                                  ({"address": "not-an-ip"}, 400, "invalid_reset"),
                                  ({}, 400, "invalid_reset"),
                                  ({"key_id": "k-free", "address": "1.2.3.4"}, 400,
                                   "invalid_reset"),
                                  ([1], 400, "invalid_reset")):
            r = reset(doc)
            self.assertEqual((r.status, r.json()["code"]), (status, code), (doc, r))
        self.assertIn('"msg":"admin: counters reset","scope":"key:k-free"',
                      gw.process.read_stderr().decode())

    def test_explain_says_why_consuming_nothing(self):
        gw = self.start(config(plans={"free": {"limits": [burst(3), daily()]}},
                               routes=[{"path": "/v1/export", "method": "GET",
                                        "cost": {"query": "pages", "per": 50, "min": 1}},
                                       {"path": "/public/*", "identity": "ip"}],
                               anonymous={"limits": [burst(2, name="ip")]}))
        self.assertEqual([gw.get("/echo", key=FREE_KEY).status for _ in range(2)], [200, 200])
        explain = lambda q: gw.admin("GET", "/admin/explain?" + q)
        cheap = explain("key_id=k-free&method=GET&path=/echo").json()
        self.assertEqual(cheap["identity"]["plan"], "free")
        self.assertEqual(cheap["identity"]["mode"], "enforce")
        self.assertEqual((cheap["cost"], cheap["would"]), (1, "pass"))
        burst_state = [x for x in cheap["limits"] if x["name"] == "burst"][0]
        self.assertEqual((burst_state["remaining"], burst_state["would_reject"]), (1, False))
        self.assertEqual(burst_state["scope"], "key:k-free")
        costly = explain("key_id=k-free&method=GET&path=%2Fv1%2Fexport%3Fpages%3D120").json()
        self.assertEqual((costly["cost"], costly["would"]), (3, "reject"))
        burst_state = [x for x in costly["limits"] if x["name"] == "burst"][0]
        self.assertTrue(burst_state["would_reject"])
        self.assertGreater(burst_state["frees_in_seconds"], 0)
        # Nothing was consumed: the third request still passes.
        self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        anon = explain("address=203.0.113.9&path=/public/x").json()
        self.assertEqual((anon["limited_by"], anon["route"]["identity"]), ("address", "ip"))
        self.assertEqual(anon["limits"][0]["scope"], "ip:203.0.113.9")
        for q, status, code in (("key_id=nope", 404, "unknown_key"), ("", 400, "invalid_explain"),
                                ("key_id=k-free&address=1.2.3.4", 400, "invalid_explain"),
                                ("address=zzz", 400, "invalid_explain")):
            r = explain(q)
            self.assertEqual((r.status, r.json()["code"]), (status, code), (q, r))
        cli = subprocess.run([harness.BINARY, "explain", "--config", gw.config_path, "--key-id",
                              "k-free", "--path", "/echo"], capture_output=True, timeout=30)
        self.assertEqual(cli.returncode, 0, cli)
        self.assertEqual(json.loads(cli.stdout)["identity"]["key_id"], "k-free")

    def test_top_offenders_by_key_and_by_address(self):
        keys = [{"key": "sk-heavy-0123456789ab", "id": "heavy", "plan": "free"},
                {"key": "sk-light-0123456789ab", "id": "light", "plan": "free"}]
        gw = self.start(config(plans={"free": {"limits": [burst(2)]}}, keys=keys,
                               identity={"trusted_proxies": ["127.0.0.1/32"]}))
        for key, n, xff in (("sk-heavy-0123456789ab", 12, "198.51.100.1"),
                            ("sk-light-0123456789ab", 4, "198.51.100.2")):
            for _ in range(n):
                gw.get("/echo", key=key, headers={"X-Forwarded-For": xff})
        top = lambda q: gw.admin("GET", "/admin/top?" + q)
        rejected = top("by=rejected&of=key&window=60s&n=5").json()
        self.assertEqual([(i["key"], i["count"], i["error"]) for i in rejected["items"]],
                         [("heavy", 10, 0), ("light", 2, 0)])
        self.assertEqual((rejected["total"], rejected["error_bound"]), (12, 0))
        admitted = top("by=admitted&of=address").json()
        self.assertEqual(sorted((i["address"], i["count"]) for i in admitted["items"]),
                         [("198.51.100.1", 2), ("198.51.100.2", 2)])
        self.assertEqual(len(top("by=rejected&of=key&n=1").json()["items"]), 1)
        for q in ("by=nope", "of=account", "window=0", "window=301", "n=0", "window=x"):
            r = top(q)
            self.assertEqual((r.status, r.json()["code"]), (400, "invalid_top"), (q, r))

    def test_request_ids_and_the_resolved_client_in_the_access_log(self):
        gw = self.start(config(plans={"free": {"limits": [burst(100)]}},
                               identity={"trusted_proxies": ["127.0.0.1/32"]}))
        cases = [  # (X-Request-Id sent or None, expected: the same, or a new one)
            ("req-abc_123.x:y/z+=@", "same"),
            (None, "new"),
            ("", "new"),
            ("x" * 129, "new"),
            ("has space", "new"),
            ("semi;colon", "new"),
            ("\u00e9t\u00e9", "new"),
        ]
        for i, (sent, expect) in enumerate(cases):
            with self.subTest(sent=sent):
                headers = {"X-Forwarded-For": "198.51.100.%d" % (i + 1)}
                if sent is not None:
                    headers["X-Request-Id"] = sent
                r = gw.get("/echo/n%d" % i, key=FREE_KEY, headers=headers)
                self.assertEqual(r.status, 200, r)
                got = r.json()["headers"].get("X-Request-Id")
                if expect == "same":
                    self.assertEqual(got, sent)
                else:
                    self.assertRegex(got or "", r"^[0-9a-f]{32}$")
                lines = gw.access_log_lines(lambda e: e.get("path") == "/echo/n%d" % i, 1)
                entry = [json.loads(x) for x in lines if b'"/echo/n%d"' % i in x][0]
                self.assertEqual(entry["request_id"], got)  # the id the upstream saw
                self.assertEqual(entry["client"], "198.51.100.%d" % (i + 1))  # resolved
                self.assertEqual(entry["peer"], "127.0.0.1")
        # A spelling an upstream may read as X-Request-Id ('_' for '-') never reaches it: the
        # id it gets is ours.
        r = gw.get("/echo/spelt", key=FREE_KEY, headers={"X_Request_Id": "evil",
                                                         "X-Request_Id": "evil2"})
        seen = r.json()["headers"]
        self.assertNotIn("X_Request_Id", seen)
        self.assertNotIn("X-Request_Id", seen)
        self.assertRegex(seen.get("X-Request-Id", ""), r"^[0-9a-f]{32}$")
        # Event lines on stderr carry their time.
        events = [json.loads(x) for x in gw.process.read_stderr().decode().splitlines()
                  if x.startswith("{")]
        self.assertTrue(events)
        for e in events:
            self.assertRegex(e["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

    def test_access_log_is_json_with_key_id_and_never_the_key(self):
        gw = self.start(config())
        self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        self.assertEqual(gw.get("/echo", headers={"X-API-Key": FREE_KEY}).status, 200)
        self.assertEqual(gw.get("/echo", key="sk-wrong-secret").status, 401)
        lines = gw.access_log_lines(lambda e: e.get("path") == "/echo", 3)
        entries = [json.loads(line) for line in lines]  # every line is JSON
        echo = [e for e in entries if e.get("path") == "/echo"]
        self.assertEqual(len(echo), 3, lines)
        # A line is written once its response is out: the next request, on a connection of
        # its own and maybe another thread, may be logged first. Ordered here by status.
        echo.sort(key=lambda e: e["status"])
        self.assertEqual([e["key_id"] for e in echo], ["k-free", "k-free", ""])
        self.assertEqual([e["status"] for e in echo], [200, 200, 401])
        self.assertEqual(echo[0]["plan"], "free")
        self.assertEqual(echo[0]["decision"], "allowed")
        self.assertEqual(echo[0]["cost"], 1)
        self.assertEqual(echo[0]["upstream_status"], 200)
        for e in echo:
            self.assertIsInstance(e["latency_ms"], (int, float))
            self.assertTrue(0 < e["latency_ms"] < 5000, e)
            self.assertRegex(e["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            logged = datetime.datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=datetime.timezone.utc)
            age = (datetime.datetime.now(datetime.timezone.utc) - logged).total_seconds()
            self.assertTrue(-2 < age < 60, e)
        everything = gw.process.read_stdout() + gw.process.read_stderr()
        for secret in (FREE_KEY, "sk-wrong-secret"):
            self.assertNotIn(secret.encode(), everything)


class ModeTests(GatewayTestCase):
    """Shadow mode and reloading configuration."""

    def test_global_shadow_mode_never_rejects_and_counts(self):
        gw = self.start(config(mode="shadow", plans={"free": {"limits": [burst(3), daily()]}}))
        metric = 'tollgate_shadow_rejections_total{plan="free"}'
        for i in range(6):
            r = gw.get("/echo", key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(rate_limit_headers(r), {}, r)
            if i == 3:
                self.assertEqual(gw.metrics().get(metric), 1)
        self.assertEqual(gw.metrics().get(metric), 3)
        self.assertEqual(self.upstream.stats()["received"], 6)
        body = gw.get("/v1/rate-limit", key=FREE_KEY).json()
        self.assertEqual(body["mode"], "shadow")
        lines = gw.access_log_lines(lambda e: e.get("decision") == "shadow_rejected", 3)
        decisions = [json.loads(line)["decision"] for line in lines]
        self.assertEqual(decisions.count("shadow_rejected"), 3, lines)

    def test_per_plan_shadow_mode(self):
        gw = self.start(config(
            plans={"free": {"limits": [burst(3)]},
                   "trial": {"mode": "shadow", "limits": [burst(3)]}},
            keys=[{"key": FREE_KEY, "id": "k-free", "plan": "free"},
                  {"key": TEAM_KEY, "id": "k-trial", "plan": "trial"}]))
        for _ in range(6):
            r = gw.get("/echo", key=TEAM_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(rate_limit_headers(r), {}, r)
        for _ in range(3):
            r = gw.get("/echo", key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertIsNotNone(r.header("RateLimit-Policy"), r)
        self.assertRateLimited(gw.get("/echo", key=FREE_KEY))
        m = gw.metrics()
        self.assertEqual(m.get('tollgate_shadow_rejections_total{plan="trial"}'), 3)
        self.assertIsNone(m.get('tollgate_shadow_rejections_total{plan="free"}'))
        self.assertEqual(m.get('tollgate_rejections_total{plan="free",code="rate_limited"}'), 1)

    def test_reload_under_load(self):
        def cfg(capacity, mode="enforce"):
            return config(mode=mode, plans={"team": {"limits": [burst(capacity, refill="1000")]}},
                          keys=[{"key": TEAM_KEY, "id": "k-team", "plan": "team"}])

        gw = self.start(cfg(100000))
        load = KeepAliveLoad(gw.port, "/echo", {"X-API-Key": TEAM_KEY}, threads=2).start()
        try:
            self.assertTrue(load.wait_for(20), "the load did not get going")
            # SIGHUP.
            gw.rewrite(cfg(200000))
            os.kill(gw.pid, signal.SIGHUP)
            seen = None
            for _ in deadline_loop(10, step=0.05):
                seen = policy_quota(gw.get("/echo", key=TEAM_KEY))
                if seen == 200000:
                    break
            self.assertEqual(seen, 200000)
            # The admin call: synchronous, so the very next request sees it.
            gw.rewrite(cfg(300000))
            r = gw.admin("POST", "/admin/reload")
            self.assertEqual(r.status, 200, r)
            self.assertEqual(policy_quota(gw.get("/echo", key=TEAM_KEY)), 300000)
            # Switching modes is a reload too.
            gw.rewrite(cfg(300000, mode="shadow"))
            self.assertEqual(gw.admin("POST", "/admin/reload").status, 200)
            self.assertIsNone(gw.get("/echo", key=TEAM_KEY).header("RateLimit-Policy"))
            gw.rewrite(cfg(300000))
            self.assertEqual(gw.admin("POST", "/admin/reload").status, 200)
            self.assertTrue(load.wait_for(load.count + 20), "the load stalled")
        finally:
            load.stop()
        self.assertEqual(load.errors, [])
        self.assertEqual(set(load.statuses), {200}, load.statuses)
        self.assertEqual(load.reconnects, 0)
        self.assertGreater(load.count, 40)
        m = gw.metrics()
        self.assertEqual(m.get('tollgate_config_reloads_total{result="ok"}'), 4)

    def test_invalid_reload_is_refused_and_the_old_config_serves(self):
        good = config(plans={"free": {"limits": [burst(7), daily()]}})
        gw = self.start(good)
        self.assertEqual(policy_quota(gw.get("/echo", key=FREE_KEY)), 7)
        bad = json.loads(json.dumps(gw.config))
        bad["plans"]["free"]["limits"][0]["capacity"] = 0
        gw.write_config(bad)
        r = gw.admin("POST", "/admin/reload")
        self.assertEqual(r.status, 400, r)
        body = r.json()
        self.assertEqual(body["code"], "invalid_config", body)
        self.assertIn("plans.free.limits[0].capacity", body["detail"])
        # Not YAML at all.
        gw.write_config("plans: [unclosed\n")
        r = gw.admin("POST", "/admin/reload")
        self.assertEqual(r.status, 400, r)
        # A reload by signal is refused the same way, and the process lives on.
        os.kill(gw.pid, signal.SIGHUP)
        for _ in deadline_loop(5, step=0.05):
            if gw.metrics().get('tollgate_config_reloads_total{result="error"}') == 3:
                break
        self.assertEqual(gw.metrics().get('tollgate_config_reloads_total{result="error"}'), 3)
        self.assertTrue(gw.healthy())
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r), 7)
        self.assertEqual(r.header("RateLimit-Remaining"), "5", r)
        self.assertIn(b"plans.free.limits[0].capacity", gw.process.read_stderr())

    def test_admin_is_a_separate_listener(self):
        gw = self.start(config())
        self.assertEqual(gw.request("POST", "/admin/reload").status, 401)  # a proxied route
        self.assertEqual(self.upstream.stats()["received"], 0)
        self.assertEqual(gw.admin("GET", "/admin/keys/k-free").json()["plan"], "free")
        self.assertEqual(gw.admin("GET", "/admin/keys/nope").status, 404)


    def test_enforcement_by_cohort_key_mode_and_status_endpoint(self):
        gw = self.start(config(
            plans={"rollout": {"enforce_percent": 0, "limits": [burst(2)]}},
            keys=[{"key": FREE_KEY, "id": "k-internal", "plan": "rollout", "mode": "enforce"},
                  {"key": TEAM_KEY, "id": "k-customer", "plan": "rollout"}]))
        internal = [gw.get("/echo", key=FREE_KEY).status for _ in range(3)]
        customer = [gw.get("/echo", key=TEAM_KEY).status for _ in range(3)]
        self.assertEqual(internal, [200, 200, 429])  # its own mode: enforced
        self.assertEqual(customer, [200, 200, 200])  # outside the cohort: shadow
        self.assertEqual(gw.get("/v1/rate-limit", key=FREE_KEY).json()["mode"], "enforce")
        self.assertEqual(gw.get("/v1/rate-limit", key=TEAM_KEY).json()["mode"], "shadow")
        m = gw.metrics()
        self.assertEqual(m.get('tollgate_shadow_rejections_total{plan="rollout"}'), 1, m)
        # Enforced and shadow decisions told apart per cohort (the status calls are not counted).
        self.assertEqual(m.get('tollgate_requests_by_mode_total{plan="rollout",mode="enforce"}'),
                         3, m)
        self.assertEqual(m.get('tollgate_requests_by_mode_total{plan="rollout",mode="shadow"}'),
                         3, m)

    def test_check_config(self):
        example = os.path.join(harness.HERE, "..", "..", "..", "examples", "tollgate.yaml")
        r = subprocess.run([harness.BINARY, "check-config", example], capture_output=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b": ok", r.stdout)
        self.assertNotIn(b"warning:", r.stdout)
        # A route an earlier one shadows is valid, and warned about; the strictest plan is named.
        shadowed = os.path.join(self.tmpdir, "shadowed.yaml")
        with open(shadowed, "w") as f:
            json.dump(config(routes=[{"name": "all", "path": "/v1/*"},
                                     {"name": "items", "path": "/v1/items", "method": "GET"}]), f)
        r = subprocess.run([harness.BINARY, "check-config", shadowed], capture_output=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b"warning: routes[1] 'items' (GET /v1/items) can never match: "
                      b"routes[0] 'all' (/v1/*) comes first", r.stdout)
        self.assertIn(b"[strictest:", r.stdout)
        bad = os.path.join(self.tmpdir, "bad.yaml")
        with open(bad, "w") as f:
            json.dump(config(plans={"free": {"limits": [burst(5, refill="-1")]}}), f)
        r = subprocess.run([harness.BINARY, "check-config", bad], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"plans.free.limits[0].refill_per_second", r.stderr)
        # serve refuses it too, and exits non-zero.
        r = subprocess.run([harness.BINARY, "serve", "--config", bad], capture_output=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn(b"plans.free.limits[0].refill_per_second", r.stderr)


class ProxyTests(GatewayTestCase):
    """Forwarding: streaming, upstream failures, draining on SIGTERM."""

    def test_large_response_is_streamed(self):
        gw = self.start(config(plans={"free": {"limits": [burst(100)]}}))
        # Warm up the path (connections, buffers, allocator arenas) before measuring.
        r = gw.get("/big?bytes=1048576", key=FREE_KEY)
        self.assertEqual(len(r.body), 1048576)
        before_kb = gw.vm_hwm_kb()
        size = 10 * 1024 * 1024
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        try:
            conn.request("GET", "/big?bytes=%d" % size, headers={"X-API-Key": FREE_KEY})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertIsNotNone(resp.getheader("RateLimit-Policy"))
            received = 0
            for _ in range(size // 1024 + 10):
                chunk = resp.read(65536)
                if not chunk:
                    break
                self.assertEqual(chunk.count(b"x"), len(chunk))
                received += len(chunk)
        finally:
            conn.close()
        self.assertEqual(received, size)
        grown_kb = gw.vm_hwm_kb() - before_kb
        sys.stderr.write("[peak RSS %d kB before, grew by %d kB] " % (before_kb, grown_kb))
        self.assertLess(grown_kb, 5 * 1024, "peak RSS grew by %d kB for a 10 MB response" % grown_kb)

    def test_request_heads_of_every_shape_are_forwarded_alike(self):
        # The common shape is parsed in place; a head split across reads, one with more fields
        # than that parser takes, or an HTTP/1.0 one go to Beast's parser. The upstream sees
        # the same request either way, and the client the same answer.
        gw = self.start(config(plans={"free": {"limits": [burst(100)]}}))
        key = FREE_KEY.encode()

        def exchange(parts, pause=0.0, expect=1):
            with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
                for i, part in enumerate(parts):
                    if i:
                        time.sleep(pause)
                    s.sendall(part)
                data = b""
                while data.count(b"HTTP/1.1 ") < expect or not data.rstrip().endswith(b"}"):
                    chunk = s.recv(65536)
                    self.assertTrue(chunk, data)
                    data += chunk
            responses = [b"HTTP/1.1 " + r for r in data.split(b"HTTP/1.1 ")[1:]]
            self.assertEqual(len(responses), expect, data)
            out = []
            for r in responses:
                self.assertEqual(status_of(r), 200, r)
                head, _, body = r.partition(b"\r\n\r\n")
                self.assertIn(b"\r\nRateLimit-Policy: ", head)
                echo = json.loads(body)
                # A request id of its own for each (generated: the client sent none).
                self.assertRegex(echo["headers"].pop("X-Request-Id"), r"^[0-9a-f]{32}$")
                out.append((head, echo))
            return out

        head = b"GET /echo?a=1 HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + b"\r\nX-Custom:  v 1 \r\n\r\n"
        [(_, whole)] = exchange([head])
        self.assertEqual(whole["path"], "/echo?a=1")
        self.assertEqual(whole["headers"].get("X-Custom"), "v 1")
        self.assertEqual(whole["headers"].get("X-Tollgate-Key-Id"), "k-free")
        [(_, split)] = exchange([head[:30], head[30:]], pause=0.1)
        self.assertEqual(split, whole)
        # Two requests in one write: both answered, in order.
        pipelined = exchange([head.replace(b"?a=1", b"?a=2") + head], expect=2)
        self.assertEqual([e["path"] for _, e in pipelined], ["/echo?a=2", "/echo?a=1"])
        # More fields than the in-place parser takes: every one reaches the upstream.
        many = b"".join(b"X-F%d: %d\r\n" % (i, i) for i in range(60))
        [(_, echo)] = exchange([head[:-2] + many + b"\r\n"])
        self.assertEqual(sum(1 for h in echo["headers"] if re.fullmatch(r"X-F\d+", h)), 60)
        self.assertEqual(echo["headers"].get("X-F59"), "59")
        # HTTP/1.0 asking to be kept alive is kept alive, and told so.
        [(h10, _)] = exchange([b"GET /echo HTTP/1.0\r\nX-API-Key: " + key + b"\r\nConnection: keep-alive\r\n\r\n"])
        self.assertIn(b"\r\nConnection: keep-alive\r\n", h10 + b"\r\n")

    def test_response_to_a_slow_reader_arrives_whole(self):
        # A client with a small receive buffer that waits before reading: the gateway's first,
        # non-blocking write takes only part of a chunk and the rest must follow as the client
        # drains its socket, in order and complete.
        gw = self.start(config(plans={"free": {"limits": [burst(100)]}}))
        size = 3 * 1024 * 1024
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", gw.port))
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        conn.sock = s
        try:
            conn.request("GET", "/big?bytes=%d" % size, headers={"X-API-Key": FREE_KEY})
            time.sleep(0.5)  # pacing: the gateway fills the 4 KiB window before anything is read
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            body = b""
            while True:
                chunk = resp.read(8192)
                if not chunk:
                    break
                body += chunk
                time.sleep(0.0002)
        finally:
            conn.close()
        self.assertEqual(len(body), size)
        self.assertEqual(body.count(b"x"), size)

    def test_each_upstream_response_head_is_read_afresh(self):
        # One client connection, responses of different shapes one after another: nothing of
        # one response's head (its fields, its length) carries over to the next.
        gw = self.start(config(plans={"free": {"limits": [burst(100)]}}))
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
        try:
            def get(path):
                conn.request("GET", path, headers={"X-API-Key": FREE_KEY})
                resp = conn.getresponse()
                return resp, resp.read()
            resp, body = get("/headers?X-One=1&X-Two=2&X-Three=3")
            self.assertEqual((resp.status, body, resp.getheader("X-Two")), (200, b"ok", "2"))
            resp, body = get("/headers?X-Four=4")
            self.assertEqual((resp.status, body, resp.getheader("X-Four")), (200, b"ok", "4"))
            for name in ("X-One", "X-Two", "X-Three"):
                self.assertIsNone(resp.getheader(name), name)
            self.assertEqual(resp.getheader("Content-Length"), "2")
            # No length after one with a length: relayed whole, chunked.
            resp, body = get("/unframed?bytes=1000")
            self.assertEqual(resp.status, 200)
            self.assertEqual(body, b"u" * 1000)
            self.assertIsNone(resp.getheader("Content-Length"))
            self.assertEqual(resp.getheader("Transfer-Encoding"), "chunked")
        finally:
            conn.close()

    def test_request_body_is_forwarded(self):
        gw = self.start(config())
        body = b"y" * 200_000
        r = gw.request("POST", "/echo", body=body, headers={"X-API-Key": FREE_KEY,
                                                            "Content-Type": "application/octet-stream"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["body_bytes"], len(body))
        self.assertEqual(r.json()["method"], "POST")

    def test_chunked_request_body_is_forwarded_chunked(self):
        gw = self.start(config())
        chunks = [b"a" * 10, b"b" * 70_000, b"c" * 3]
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        data, _, _ = raw_exchange(
            gw.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + FREE_KEY.encode() +
            b"\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        self.assertEqual(status_of(data), 200, data[:300])
        echo = json.loads(data.split(b"\r\n\r\n", 1)[1])
        self.assertEqual(echo["body_bytes"], 70_013)
        self.assertEqual(echo["headers"].get("Transfer-Encoding"), "chunked")
        self.assertNotIn("Content-Length", echo["headers"])

    def test_expect_100_continue_is_answered_by_the_gateway(self):
        gw = self.start(config(plans={"free": {"limits": [burst(1)]}}))
        head = (b"POST /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + FREE_KEY.encode() +
                b"\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
            s.sendall(head)
            self.assertEqual(s.recv(100), b"HTTP/1.1 100 Continue\r\n\r\n")
            s.sendall(b"hello")
            data = b""
            while b"}" not in data:
                chunk = s.recv(65536)
                self.assertTrue(chunk, data)
                data += chunk
        self.assertEqual(status_of(data), 200, data[:300])
        echo = json.loads(data.split(b"\r\n\r\n", 1)[1])
        self.assertEqual(echo["body_bytes"], 5)
        self.assertNotIn("Expect", echo["headers"])
        # Over the limit: 429 at once, and no 100 Continue (the body is never asked for).
        data, closed, _ = raw_exchange(gw.port, head)
        self.assertEqual(status_of(data), 429, data[:300])
        self.assertTrue(closed)

    def test_interim_upstream_responses_are_dropped(self):
        gw = self.start(config())
        data, _, _ = raw_exchange(
            gw.port, b"GET /early HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: " +
            FREE_KEY.encode() + b"\r\n\r\n")
        self.assertEqual(status_of(data), 200, data[:300])
        self.assertNotIn(b"103", data.split(b"\r\n", 1)[0])
        self.assertEqual(data.count(b"HTTP/1.1 "), 1, data[:500])

    def test_hop_by_hop_headers_stay_on_their_hop(self):
        gw = self.start(config())
        data, _, _ = raw_exchange(
            gw.port, b"GET /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + FREE_KEY.encode() +
            b"\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n"
            b"Proxy-Connection: keep-alive\r\nTE: trailers\r\nX-Tollgate-Plan: forged\r\n"
            b"X-End: 2\r\n\r\n")
        self.assertEqual(status_of(data), 200, data[:300])
        seen = {k.lower(): v for k, v in json.loads(data.split(b"\r\n\r\n", 1)[1])["headers"].items()}
        for name in ("x-hop", "keep-alive", "proxy-connection", "te"):
            self.assertNotIn(name, seen)
        self.assertEqual(seen["x-end"], "2")
        self.assertEqual(seen["x-tollgate-plan"], "free")
        self.assertEqual(seen["x-forwarded-for"], "127.0.0.1")

    def test_upstream_rate_limit_headers_give_way_to_ours(self):
        gw = self.start(config())
        data, _, _ = raw_exchange(
            gw.port, b"GET /headers?RateLimit-Limit=999&X-Upstream=yes&Connection=X-Upstream-Hop"
            b"&X-Upstream-Hop=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: " +
            FREE_KEY.encode() + b"\r\n\r\n")
        head = data.partition(b"\r\n\r\n")[0].lower()
        self.assertEqual(status_of(data), 200, head)
        self.assertEqual(re.findall(rb"\r\nratelimit-limit: (\d+)", head), [b"5"], head)
        self.assertIn(b"\r\nx-upstream: yes\r\n", head)
        self.assertNotIn(b"x-upstream-hop", head)

    def test_every_upstream_header_is_relayed_however_many(self):
        # Heads of up to 48 end-to-end fields are relayed from the lines found while scanning
        # them; longer ones go through Beast's parser. Both must relay every field, in order.
        gw = self.start(config())
        for count in (45, 46, 47, 60):  # the upstream adds Server and Date
            query = "&".join("X-H-%d=v%d" % (i, i) for i in range(count))
            data, _, _ = raw_exchange(
                gw.port, b"GET /headers?" + query.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                b"Connection: close\r\nX-API-Key: " + FREE_KEY.encode() + b"\r\n\r\n")
            head = data.partition(b"\r\n\r\n")[0].decode()
            self.assertEqual(status_of(data), 200, head[:300])
            relayed = re.findall(r"\r\nX-H-(\d+): v(\d+)", head, re.IGNORECASE)
            self.assertEqual(relayed, [(str(i), str(i)) for i in range(count)], count)
            self.assertEqual(len(re.findall(r"\r\nratelimit-limit: ", head, re.IGNORECASE)), 1, count)

    def test_http10_client_gets_an_unframed_body_then_close(self):
        gw = self.start(config())
        # The upstream answers chunked; an HTTP/1.0 client cannot read chunked encoding.
        data, closed, seconds = raw_exchange(
            gw.port, b"GET /big?bytes=100000 HTTP/1.0\r\nX-API-Key: " + FREE_KEY.encode() +
            b"\r\nConnection: keep-alive\r\n\r\n", timeout=10)
        head, _, body = data.partition(b"\r\n\r\n")
        self.assertEqual(status_of(data), 200, head)
        self.assertNotIn(b"transfer-encoding", head.lower())
        self.assertEqual(len(body), 100_000)
        self.assertTrue(closed and seconds < 5)

    def test_client_connection_close_is_honoured(self):
        gw = self.start(config())
        req = ("GET /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nConnection: close\r\n\r\n"
               % FREE_KEY).encode()
        data, closed, seconds = raw_exchange(gw.port, req, timeout=5)
        self.assertEqual(status_of(data), 200, data[:300])
        self.assertIn(b"\r\nConnection: close\r\n", data)
        self.assertTrue(closed and seconds < 3, "connection left open (%.1f s)" % seconds)
        # The upstream did not see the client's connection headers.
        body = json.loads(data.split(b"\r\n\r\n", 1)[1])
        self.assertNotEqual(body["headers"].get("Connection", "").lower(), "close")

    def test_keep_alive_connection_is_reused(self):
        gw = self.start(config())
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
        try:
            socks = set()
            for i in range(5):
                conn.request("GET", "/echo", headers={"X-API-Key": FREE_KEY})
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, 200)
                socks.add(id(conn.sock))
            self.assertEqual(len(socks), 1)
        finally:
            conn.close()

    def test_head_and_pipelined_requests(self):
        gw = self.start(config())
        key = FREE_KEY.encode()
        data, closed, _ = raw_exchange(
            gw.port,
            b"HEAD /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + b"\r\n\r\n"
            b"GET /echo?n=2 HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + b"\r\n\r\n"
            b"GET /echo?n=3 HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + b"\r\nConnection: close\r\n\r\n")
        self.assertTrue(closed)
        parts = data.split(b"HTTP/1.1 200 OK\r\n")
        self.assertEqual(parts[0], b"", data[:300])
        self.assertEqual(len(parts), 4, data)
        head, second, third = parts[1:]
        self.assertTrue(head.endswith(b"\r\n\r\n"), head)  # no body after a HEAD
        self.assertIn(b"RateLimit-Remaining: 4\r\n", head)
        self.assertIn(b'"path": "/echo?n=2"', second)
        self.assertIn(b"RateLimit-Remaining: 3\r\n", second)
        self.assertIn(b'"path": "/echo?n=3"', third)

    def test_a_request_arriving_while_the_one_before_waits_on_the_upstream_is_answered(self):
        # The gateway's reads wait for epoll once a read has drained the socket
        # (src/http/socket.hpp). The second request arrives while no read waits (the first is
        # at the upstream): it must be read when the first is done, not when more bytes come.
        gw = self.start(config(server={"idle_timeout_ms": 20000}))
        key = FREE_KEY.encode()
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        data = b""
        try:
            s.sendall(b"GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + b"\r\n\r\n")
            self.assertTrue(wait_until(lambda: self.upstream.stats()["in_progress"] >= 1),
                            "the first request never reached the upstream")
            start = time.monotonic()
            s.sendall(b"GET /echo?n=2 HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key +
                      b"\r\nConnection: close\r\n\r\n")
            while chunk := s.recv(65536):
                data += chunk
            elapsed = time.monotonic() - start
        finally:
            s.close()
        self.assertEqual(data.count(b"HTTP/1.1 200 OK\r\n"), 2, data[:600])
        self.assertIn(b'"path": "/echo?n=2"', data)
        self.assertLess(elapsed, 5.0)

    def test_a_request_sent_in_pieces_is_read_whole(self):
        # Each piece drains the socket; the next one is reported by epoll. Head and body both.
        gw = self.start(config(server={"idle_timeout_ms": 20000, "header_timeout_ms": 10000}))
        key = FREE_KEY.encode()
        pieces = [b"POST /echo HTTP/1.1\r\nHost: x\r\n", b"X-API-Key: " + key + b"\r\n",
                  b"Content-Length: 10\r\nConnection: close\r\n\r\n", b"01234", b"56789"]
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        data = b""
        try:
            for piece in pieces:
                s.sendall(piece)
                time.sleep(0.15)  # pacing: each piece reaches the gateway as a read of its own
            while chunk := s.recv(65536):
                data += chunk
        finally:
            s.close()
        self.assertEqual(status_of(data), 200, data[:600])
        self.assertIn(b'"body_bytes": 10', data)

    def test_a_client_that_half_closes_after_its_request_gets_the_response(self):
        # The FIN may arrive with the request, where a drained read does not see it
        # (src/http/socket.hpp): the response still goes out, and the connection is closed by
        # the idle timeout at the latest.
        gw = self.start(config(server={"idle_timeout_ms": 1000}))
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        data = b""
        try:
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + FREE_KEY.encode() + b"\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            start = time.monotonic()
            while chunk := s.recv(65536):
                data += chunk
            elapsed = time.monotonic() - start
        finally:
            s.close()
        self.assertEqual(status_of(data), 200, data[:600])
        self.assertIn(b'"path": "/echo"', data)
        self.assertLess(elapsed, 3.0)

    def test_a_pooled_connection_the_upstream_closed_is_replaced_at_once(self):
        # The upstream closes connections idle for 0.3 s, while they sit in the gateway's pool.
        # The next request finds out when it is written (its read waits for epoll at once, see
        # Socket::ReadAfterRequest()), and goes again on a fresh connection, without waiting
        # for the upstream timeout.
        self.upstream = harness.Upstream(self, idle_timeout=0.3)
        gw = self.start(config(upstream={"timeout_ms": 10000}), upstream=self.upstream.url)
        for i in range(4):
            start = time.monotonic()
            r = gw.get("/echo?n=%d" % i, key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertLess(time.monotonic() - start, 2.0)
            time.sleep(0.6)  # pacing: past the upstream's idle timeout, so it closes the connection
        self.assertIsNone(gw.metrics().get('tollgate_upstream_errors_total{kind="protocol"}'))

    def test_request_body_limit(self):
        gw = self.start(config(server={"max_body_bytes": 1000}))
        key = FREE_KEY.encode()
        r = gw.request("POST", "/echo", body=b"z" * 1000, headers={"X-API-Key": FREE_KEY})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["body_bytes"], 1000)
        # Announced too large: refused before the body.
        data, closed, _ = raw_exchange(
            gw.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key +
            b"\r\nContent-Length: 5000\r\n\r\n" + b"z" * 5000)
        self.assertEqual(status_of(data), 413, data[:300])
        self.assertIn(b'"code":"body_too_large"', data)
        # Chunked, growing past the limit.
        data, closed, _ = raw_exchange(
            gw.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key +
            b"\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + b"z" * 5000 + b"\r\n0\r\n\r\n")
        self.assertEqual(status_of(data), 413, data[:300])
        self.assertTrue(gw.healthy())

    def test_upstream_base_path(self):
        self.upstream = harness.Upstream(self)
        gw = self.start(config(), upstream=self.upstream.url + "/api")
        r = gw.get("/echo/x?q=1", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["path"], "/api/echo/x?q=1")
        lines = gw.access_log_lines(lambda e: e.get("key_id") == "k-free", 1)
        paths = [json.loads(line)["path"] for line in lines]
        self.assertEqual([p for p in paths if p != "/healthz"], ["/echo/x"], lines)

    def test_every_error_of_ours_is_a_problem_with_its_code(self):
        # RFC 9457 problem details, the one format of every error tollgate writes itself.
        port, held = harness.reserve_port()  # bound, never listening: connections are refused
        self.held_sockets.append(held)
        gw = self.start(config(server={"threads": 2, "max_body_bytes": 1024,
                                       "max_header_bytes": 4096},
                               routes=[{"path": "/v1/export", "method": "GET",
                                        "cost": {"query": "pages", "per": 50, "min": 1}}]),
                        upstream="http://127.0.0.1:%d" % port)
        raw = lambda payload: harness.raw_exchange(gw.port, payload)[0]
        cases = [
            ("401 missing key", lambda: gw.get("/echo"), 401, "missing_api_key"),
            ("401 unknown key", lambda: gw.get("/echo", key="sk-nope"), 401, "invalid_api_key"),
            ("400 target", lambda: gw.get("/a%2Fb", key=FREE_KEY), 400,
             "invalid_request_target"),
            ("400 cost", lambda: gw.get("/v1/export?pages=x", key=FREE_KEY), 400,
             "invalid_cost"),
            ("400 host", lambda: raw(b"GET /echo HTTP/1.1\r\nHost: a b\r\n\r\n"), 400,
             "invalid_host"),
            ("413 body", lambda: raw(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000"
                                     b"\r\n\r\n"), 413, "body_too_large"),
            ("431 head", lambda: raw(b"GET /echo HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 8000 +
                                     b"\r\n\r\n"), 431, "header_too_large"),
            ("502 upstream", lambda: gw.get("/echo", key=FREE_KEY), 502, "upstream_unavailable"),
            ("404 admin", lambda: gw.admin("GET", "/admin/nope"), 404, "not_found"),
            ("404 admin key", lambda: gw.admin("GET", "/admin/keys/nope"), 404, "unknown_key"),
            ("400 usage period", lambda: gw.admin("GET", "/admin/usage?period=nope"), 400,
             "invalid_period"),
        ]
        for label, send, status, code in cases:
            with self.subTest(label):
                r = send()
                if isinstance(r, bytes):
                    head, _, body = r.partition(b"\r\n\r\n")
                    self.assertIn(b" %d " % status, head.split(b"\r\n")[0], r)
                    self.assertIn(b"\r\nContent-Type: application/problem+json\r\n", head + b"\r\n", r)
                    doc = json.loads(body)
                else:
                    self.assertEqual(r.status, status, r)
                    self.assertEqual(r.header("Content-Type"), "application/problem+json", r)
                    doc = r.json()
                self.assertEqual(doc["status"], status, doc)
                self.assertEqual(doc["code"], code, doc)
                self.assertEqual(doc["type"], "about:blank", doc)
                self.assertTrue(doc["title"] and doc["detail"], doc)

    def test_upstream_down_gives_502(self):
        port, held = harness.reserve_port()  # bound, never listening: connections are refused
        self.held_sockets.append(held)
        gw = self.start(config(), upstream="http://127.0.0.1:%d" % port)
        r = gw.get("/echo", key=FREE_KEY)
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.header("Content-Type"), "application/problem+json", r)
        self.assertEqual(r.json()["code"], "upstream_unavailable")
        self.assertTrue(gw.healthy())
        m = gw.metrics()
        self.assertEqual(m.get('tollgate_upstream_errors_total{kind="connect"}'), 1)

    def test_slow_upstream_gives_504(self):
        gw = self.start(config(upstream={"timeout_ms": 300}))
        start = time.monotonic()
        r = gw.get("/slow?ms=3000", key=FREE_KEY)
        elapsed = time.monotonic() - start
        self.assertEqual(r.status, 504, r)
        self.assertEqual(r.json()["code"], "upstream_timeout")
        self.assertLess(elapsed, 2.5)
        # The pool recovers: the next request gets a good connection.
        self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        self.assertEqual(gw.get("/slow?ms=50", key=FREE_KEY).status, 200)

    def test_sigterm_drains_in_flight_requests(self):
        gw = self.start(config(server={"drain_timeout_ms": 10000}))
        result = {}

        def slow():
            try:
                result["response"] = gw.get("/slow?ms=1500", key=FREE_KEY, timeout=20)
            except Exception as e:  # asserted on below
                result["error"] = repr(e)

        t = threading.Thread(target=slow, daemon=True)
        t.start()
        for _ in deadline_loop(10):
            if self.upstream.stats()["in_progress"] >= 1:
                break
        self.assertEqual(self.upstream.stats()["in_progress"], 1, "the slow request never arrived")
        os.kill(gw.pid, signal.SIGTERM)
        # It stops accepting while the request is still in flight.
        refused = False
        for _ in deadline_loop(1.0):
            try:
                harness.http_request(gw.port, "GET", "/healthz", timeout=1)
            except ConnectionRefusedError:
                refused = True
                break
            except OSError:
                pass
        t.join(timeout=20)
        self.assertFalse(t.is_alive())
        self.assertNotIn("error", result)
        self.assertEqual(result["response"].status, 200, result["response"])
        self.assertEqual(result["response"].json()["path"], "/slow?ms=1500")
        self.assertTrue(refused, "still accepting connections while draining")
        self.assertEqual(gw.process.wait(timeout=15), 0)

    def test_sigterm_turns_readyz_503_and_serves_for_the_shutdown_delay(self):
        gw = self.start(config(plans={"free": {"limits": [burst(1000)]}},
                               server={"threads": 2, "shutdown_delay_ms": 1500}))
        for port in (gw.port, gw.admin_port):
            r = harness.http_request(port, "GET", "/readyz")
            self.assertEqual((r.status, r.json()), (200, {"status": "ready"}), r)
        os.kill(gw.pid, signal.SIGTERM)
        start = time.monotonic()
        for _ in deadline_loop(1.0, step=0.01):  # the signal is handled on the main thread
            if harness.http_request(gw.admin_port, "GET", "/readyz").status == 503:
                break
        for port in (gw.port, gw.admin_port):
            r = harness.http_request(port, "GET", "/readyz")
            self.assertEqual((r.status, r.json()), (503, {"status": "stopping"}), r)
            self.assertEqual(harness.http_request(port, "GET", "/healthz").status, 200)
        # Still serving (new connections too) during the delay, closing keep-alive connections.
        served = 0
        while time.monotonic() - start < 1.0:
            r = gw.get("/echo", key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.header("Connection"), "close", r)
            served += 1
            time.sleep(0.05)
        self.assertGreater(served, 5)
        # Then the drain: connections refused, exit 0.
        refused = False
        for _ in deadline_loop(3.0, step=0.05):
            try:
                harness.http_request(gw.port, "GET", "/healthz", timeout=1)
            except ConnectionRefusedError:
                refused = True
                break
            except OSError:
                pass
        self.assertTrue(refused, "still accepting after the shutdown delay")
        self.assertGreaterEqual(time.monotonic() - start, 1.4)
        self.assertEqual(gw.process.wait(timeout=15), 0)

    def test_readyz_waits_for_redis(self):
        from test_redis import RedisServer
        redis = RedisServer(self)
        redis.process.stop()
        gw = self.start(config(store={"type": "redis", "url": redis.url}))
        r = gw.admin("GET", "/readyz")
        self.assertEqual((r.status, r.json()), (503, {"status": "store_unavailable"}), r)
        self.assertEqual(gw.admin("GET", "/healthz").status, 200)  # alive, not ready
        redis.start()
        ready = None
        for _ in deadline_loop(5, step=0.1):
            ready = gw.admin("GET", "/readyz")
            if ready.status == 200:
                break
        self.assertEqual(ready.status, 200, ready)

    def test_built_in_endpoints_are_the_admin_listeners_unless_made_public(self):
        # The binary's default (public_endpoints=None): /healthz, /readyz and GET /v1/rate-limit
        # (a client API, issue 31) answer on the gateway listener; /metrics and /v1/usage are
        # the upstream's paths there.
        gw = harness.Gateway(self, dict(config(), upstream={"url": harness.Upstream(self).url}),
                             public_endpoints=None)
        self.assertEqual(gw.get("/v1/rate-limit", key=FREE_KEY).json()["key_id"], "k-free")
        for path in ("/metrics", "/v1/usage"):
            with self.subTest(path=path):
                r = gw.get(path, key=FREE_KEY)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["path"], path, r)  # the upstream's echo
        self.assertEqual(gw.get("/healthz").status, 200)
        admin = lambda path: harness.http_request(gw.admin_port, "GET", path, headers={
            "Authorization": "Bearer " + FREE_KEY})
        self.assertIn(b"tollgate_requests_total", admin("/metrics").body)
        self.assertEqual(admin("/v1/rate-limit").json()["key_id"], "k-free")
        self.assertEqual(admin("/v1/usage").json()["key_id"], "k-free")
        r = admin("/echo")  # the admin listener forwards nothing
        self.assertEqual((r.status, r.json()["code"]), (404, "not_found"), r)
        # Made public by configuration.
        gw2 = harness.Gateway(self, dict(config(), upstream={"url": harness.Upstream(self).url}),
                              name="public", public_endpoints=["metrics", "rate_limit"])
        self.assertIn(b"tollgate_requests_total", gw2.get("/metrics").body)
        self.assertEqual(gw2.get("/v1/rate-limit", key=FREE_KEY).json()["key_id"], "k-free")
        self.assertEqual(gw2.get("/v1/usage", key=FREE_KEY).json()["path"], "/v1/usage")
        # /healthz is not in that list: on the gateway listener it is the upstream's path.
        self.assertEqual(gw2.get("/healthz", key=FREE_KEY).json()["path"], "/healthz")


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
