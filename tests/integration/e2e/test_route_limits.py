#!/usr/bin/env python3
"""Route limits through the real binary (issue 20): a route's own limits, per scope (key,
account, ip, global) and per plan, checked all-or-nothing with the caller's plan limits.

    python3 test_route_limits.py --binary build/tollgate [unittest args]

Each test starts its own upstream and gateway on 127.0.0.1 (memory store) and stops them by PID.
The Redis side (two replicas sharing a global route budget) is in test_redis.py.
"""
import json
import os
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import SLOW, burst, GatewayTestCase  # noqa: E402

FREE_KEY = "sk-free-0123456789abcdef"
TEAM_KEY = "sk-team-0123456789abcdef"
ENTERPRISE_KEY = "sk-enterprise-0123456789abcdef"
OTHER_FREE_KEY = "sk-free2-0123456789abcdef"

ROUTES = [
    # Per key, by plan: free 1, team 3, enterprise unlimited.
    {"name": "messages", "path": "/v1/messages", "method": "POST",
     "limits": [{"name": "send", "capacity": 1, "refill_per_second": SLOW,
                 "plans": {"team": {"capacity": 3}, "enterprise": "unlimited"}}]},
    # Per client address, for anyone (no key needed).
    {"name": "login", "path": "/v1/login", "method": "POST", "identity": "ip",
     "limits": [{"name": "attempts", "capacity": 2, "refill_per_second": SLOW}]},
    # One budget for every caller of the route (an upstream with its own limit), and a
    # per-address one on a keyed route.
    {"name": "search", "path": "/v1/search",
     "limits": [{"name": "upstream", "scope": "global", "capacity": 4,
                 "refill_per_second": SLOW},
                {"name": "per-ip", "scope": "ip", "capacity": 3, "refill_per_second": SLOW}]},
]


def config(routes=ROUTES, **extra):
    c = {
        "server": {"threads": 2, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "identity": {"trusted_proxies": ["127.0.0.1/32"]},
        "plans": {"free": {"limits": [burst(100)]},
                  "team": {"limits": [burst(100)]},
                  "enterprise": {"limits": [burst(100)]}},
        "keys": [{"key": FREE_KEY, "id": "k-free", "plan": "free"},
                 {"key": OTHER_FREE_KEY, "id": "k-free2", "plan": "free"},
                 {"key": TEAM_KEY, "id": "k-team", "plan": "team"},
                 {"key": ENTERPRISE_KEY, "id": "k-ent", "plan": "enterprise"}],
        "routes": routes,
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    c.update(extra)
    return c


class RouteLimitTests(GatewayTestCase):

    def post(self, gw, path, key=None, headers=None):
        h = dict(headers or {})
        if key:
            h["X-API-Key"] = key
        return gw.request("POST", path, headers=h, body=b"")

    def test_a_route_limit_differs_by_plan(self):
        gw = self.start(config())
        for key, expected in ((FREE_KEY, [200, 429, 429]),
                              (TEAM_KEY, [200, 200, 200, 429]),
                              (ENTERPRISE_KEY, [200] * 6)):
            got = [self.post(gw, "/v1/messages", key).status for _ in expected]
            self.assertEqual(got, expected, key)
        r = self.post(gw, "/v1/messages", FREE_KEY)
        body = self.assertRateLimited(r)
        self.assertEqual(body["violated-policies"], ["messages:send"], body)
        self.assertIn('"messages:send";q=1', r.header("RateLimit-Policy"), r)
        # Another free key has its own budget on the route (scope key).
        self.assertEqual(self.post(gw, "/v1/messages", OTHER_FREE_KEY).status, 200)

    def test_a_request_the_route_rejects_consumes_nothing_of_the_plan(self):
        gw = self.start(config())
        self.assertEqual(self.post(gw, "/v1/messages", FREE_KEY).status, 200)  # burst 99
        for _ in range(5):
            self.assertEqual(self.post(gw, "/v1/messages", FREE_KEY).status, 429)
        # The five rejected requests took nothing from the plan's burst: 99 left, then 98.
        r = gw.get("/echo", headers={"X-API-Key": FREE_KEY})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "98", r)

    def test_a_plan_rejection_consumes_nothing_of_the_route(self):
        cfg = config()
        cfg["plans"]["free"]["limits"] = [burst(1)]
        gw = self.start(cfg)
        self.assertEqual(gw.get("/echo", headers={"X-API-Key": FREE_KEY}).status, 200)
        # The plan's burst is spent: these are refused by it, and the route's own budget (1)
        # stays whole for the key.
        for _ in range(3):
            self.assertEqual(self.post(gw, "/v1/messages", FREE_KEY).status, 429)
        self.assertEqual(
            gw.get("/v1/rate-limit", headers={"X-API-Key": FREE_KEY}).status, 200)

    def test_login_is_limited_per_address_without_a_key(self):
        gw = self.start(config())
        got = [self.post(gw, "/v1/login").status for _ in range(3)]
        self.assertEqual(got, [200, 200, 429])
        # Another client address (through the trusted proxy) has its own attempts.
        other = {"X-Forwarded-For": "198.51.100.7"}
        got = [self.post(gw, "/v1/login", headers=other).status for _ in range(3)]
        self.assertEqual(got, [200, 200, 429])
        # A key changes nothing on an identity: ip route.
        self.assertEqual(self.post(gw, "/v1/login", FREE_KEY).status, 429)

    def test_a_global_limit_is_one_budget_for_every_caller(self):
        gw = self.start(config())
        statuses = []
        keys = [FREE_KEY, TEAM_KEY, ENTERPRISE_KEY, OTHER_FREE_KEY, FREE_KEY, TEAM_KEY]
        for i, key in enumerate(keys):
            # Each from its own address: the per-ip limit (3) never binds here.
            h = {"X-API-Key": key, "X-Forwarded-For": "203.0.113.%d" % (i + 1)}
            statuses.append(gw.get("/v1/search", headers=h).status)
        self.assertEqual(statuses, [200, 200, 200, 200, 429, 429])
        self.assertEqual(self.upstream.stats()["received"], 4)

    def test_an_ip_limit_on_a_keyed_route_binds_an_address_cycling_keys(self):
        gw = self.start(config(routes=[
            {"name": "search", "path": "/v1/search",
             "limits": [{"name": "per-ip", "scope": "ip", "capacity": 3,
                         "refill_per_second": SLOW}]}]))
        h = {"X-Forwarded-For": "192.0.2.44"}
        got = [gw.get("/v1/search", headers=dict(h, **{"X-API-Key": k})).status
               for k in (FREE_KEY, TEAM_KEY, ENTERPRISE_KEY, OTHER_FREE_KEY)]
        self.assertEqual(got, [200, 200, 200, 429])

    def test_concurrent_requests_take_exactly_the_global_budget(self):
        gw = self.start(config(routes=[
            {"name": "search", "path": "/v1/search",
             "limits": [{"name": "upstream", "scope": "global", "capacity": 50,
                         "refill_per_second": SLOW}]}]))
        keys = [FREE_KEY, TEAM_KEY, ENTERPRISE_KEY, OTHER_FREE_KEY]
        barrier = threading.Barrier(40, timeout=30)
        results, lock = [], threading.Lock()

        def run(i):
            barrier.wait()
            for j in range(5):
                r = gw.get("/v1/search", headers={"X-API-Key": keys[(i + j) % 4]})
                with lock:
                    results.append(r.status)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(sorted(set(results)), [200, 429])
        self.assertEqual(results.count(200), 50, results)
        self.assertEqual(self.upstream.stats()["received"], 50)


class RouteLimitConfigTests(GatewayTestCase):
    """Bad route limits are refused naming the field, by check-config and by a reload (which
    keeps the old configuration serving)."""

    BAD = [  # (change to the routes, the field the error must name)
        ([{"name": "x", "path": "/x", "identity": "ip",
           "limits": [{"name": "l", "scope": "key", "capacity": 1, "refill_per_second": 1}]}],
         "routes[0].limits[0].scope"),
        ([{"name": "x", "path": "/x", "identity": "none",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1}]}],
         "routes[0].limits"),
        ([{"path": "/x", "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1}]}],
         "routes[0].name"),
        ([{"name": "x", "path": "/x",
           "limits": [{"name": "l", "scope": "planet", "capacity": 1, "refill_per_second": 1}]}],
         "routes[0].limits[0].scope"),
        ([{"name": "x", "path": "/x",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1,
                       "plans": {"gold": {"capacity": 2}}}]}],
         "routes[0].limits[0].plans.gold"),
        ([{"name": "x", "path": "/x",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1,
                       "plans": {"free": {"capacity": 0}}}]}],
         "routes[0].limits[0].plans.free.capacity"),
        ([{"name": "x", "path": "/x",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1,
                       "plans": {"free": "sometimes"}}]}],
         "routes[0].limits[0].plans.free"),
        ([{"name": "x", "path": "/x",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1},
                      {"name": "l", "capacity": 2, "refill_per_second": 1}]}],
         "routes[0].limits[1].name"),
        ([{"name": "x y", "path": "/x",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1}]}],
         "routes[0].name"),
        ([{"name": "free", "path": "/x",
           "limits": [{"name": "l", "capacity": 1, "refill_per_second": 1}]}],
         "routes[0].name"),
        ([{"name": "x", "path": "/v1/{a}{b}"}], "routes[0].path"),
    ]

    def test_check_config_refuses_each_naming_the_field(self):
        for routes, field in self.BAD:
            path = os.path.join(self.tmpdir, "bad.yaml")
            with open(path, "w") as f:
                json.dump(config(routes=routes), f)
            r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                               timeout=30)
            self.assertEqual(r.returncode, 1, (routes, r))
            self.assertIn(field.encode(), r.stderr, (routes, r.stderr))

    def test_a_bad_reload_keeps_the_old_route_limits(self):
        gw = self.start(config())
        for routes, field in self.BAD[:3]:
            gw.write_config(config(routes=routes))
            r = gw.admin("POST", "/admin/reload")
            self.assertEqual(r.status, 400, r)
            self.assertIn(field, r.json()["detail"])
        # The old routes still limit.
        got = [gw.request("POST", "/v1/messages", headers={"X-API-Key": FREE_KEY},
                          body=b"").status for _ in range(2)]
        self.assertEqual(got, [200, 429])

    def test_route_limits_on_redis_cluster_are_refused(self):
        cfg = config(store={"type": "redis", "url": "redis-cluster://127.0.0.1:1"})
        path = os.path.join(self.tmpdir, "cluster.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"routes[0].limits", r.stderr)


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
