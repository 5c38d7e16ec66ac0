#!/usr/bin/env python3
"""fail_mode: local through the real binary: two tollgate replicas on one real redis-server,
Redis killed and restarted (with an append-only file, so that its state survives) while both are hammered, then continued.

    python3 test_fail_local.py --binary build/tollgate [-v]
    TOLLGATE_OUTAGE_S=10 python3 test_fail_local.py --binary build/tollgate -v   # the docs' run

What it proves (docs/operations.md, "When Redis fails"):
  - the replicas learn how many they are from their heartbeats in Redis (tollgate_replicas);
  - while Redis cannot answer, each replica enforces 1/replicas of every limit on its own
    memory: a key's admitted requests across both replicas stay within one budget of the limit
    over the outage (capacity + refill x seconds; a test that fails if that bound is exceeded),
    and the 429s carry Retry-After and the replica's share in the rate-limit headers;
  - each such decision is counted (tollgate_local_decisions_total, tollgate_degraded_total)
    and logged as local_allowed / local_rejected;
  - when Redis answers again it decides again, from the state it had: what the replicas
    admitted locally was never written to it.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import KeepAliveLoad  # noqa: E402
from test_redis import (HAVE_REDIS, RedisServer, RedisTestCase, burst, config, metric,  # noqa: E402
                        wait_until)

OUTAGE_S = float(os.environ.get("TOLLGATE_OUTAGE_S", "3"))
EXACT_KEY = "sk-local-exact-0123456789"
REFILL_KEY = "sk-local-refill-0123456789"
CAPACITY = 40
REFILL_CAPACITY, REFILL_PER_S = 20, 4


@unittest.skipUnless(HAVE_REDIS, "redis-server or redis-cli not installed")
class FailLocalTests(RedisTestCase):
    def setUp(self):
        # Redis with an append-only file written at every command: killed and restarted, it
        # comes back with the state it had (a stopped Redis would run the calls queued on its
        # sockets when continued, timed out or not).
        harness.GatewayTestCase.setUp(self)
        self.redis = RedisServer(self, ["--appendonly", "yes", "--appendfsync", "always"])
        self.upstream = harness.Upstream(self)

    def start_replicas(self):
        plans = {"exact": {"limits": [burst(CAPACITY)]},
                 "refill": {"limits": [burst(REFILL_CAPACITY, str(REFILL_PER_S))]}}
        keys = [{"key": EXACT_KEY, "id": "k-exact", "plan": "exact"},
                {"key": REFILL_KEY, "id": "k-refill", "plan": "refill"}]
        cfg = config(self.redis, plans, keys, timeout_ms=50, access_log=True,
                     routes=[{"path": "/v1/export", "fail_mode": "local",
                              "cost": {"query": "pages", "per": 1}},
                             {"path": "/*", "fail_mode": "local"}])
        return [self.gateway(cfg, name="tollgate-%s" % n) for n in "ab"]

    def replicas_seen(self, gw):
        return metric(gw, "tollgate_replicas")

    def test_two_replicas_share_each_limit_while_redis_is_down(self):
        a, b = self.start_replicas()
        self.assertTrue(wait_until(lambda: self.replicas_seen(a) == 2 and
                                   self.replicas_seen(b) == 2, 10),
                        "the replicas did not learn of each other: %s, %s" % (
                            self.replicas_seen(a), self.replicas_seen(b)))
        # Redis decides: 10 of the exact key's 40 spent, 30 left in Redis.
        for i in range(10):
            r = (a if i % 2 else b).get("/x", key=EXACT_KEY)
            self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Limit"), str(CAPACITY), r)

        self.redis.kill()
        loads = {}
        for gw in (a, b):
            for key in (EXACT_KEY, REFILL_KEY):
                loads[gw.port, key] = KeepAliveLoad(gw.port, "/x", {"X-API-Key": key}, threads=2,
                                                    max_requests=200000,
                                                    max_seconds=OUTAGE_S + 30).start()
        started = time.monotonic()
        time.sleep(OUTAGE_S)
        for load in loads.values():
            load.stop()
        seconds = time.monotonic() - started
        self.redis.start()

        def admitted(key, gw=None):
            return sum(load.statuses.get(200, 0) for (port, k), load in loads.items()
                       if k == key and (gw is None or port == gw.port))

        for load in loads.values():
            self.assertEqual(load.errors, [])
            self.assertEqual(set(load.statuses) - {200, 429}, set(), load.statuses)
        # Without a refill each replica admits exactly its half of the capacity: the whole
        # outage stays within one budget of the limit (Redis still holds its own 30).
        self.assertEqual(admitted(EXACT_KEY, a), CAPACITY // 2)
        self.assertEqual(admitted(EXACT_KEY, b), CAPACITY // 2)
        # With a refill: at most capacity + refill x seconds across both, and close to it.
        bound = REFILL_CAPACITY + REFILL_PER_S * seconds
        got = admitted(REFILL_KEY)
        sys.stderr.write("[outage %.1f s: refill key admitted %d of the bound %.1f (exact %d); "
                         "requests %d] " % (seconds, got, bound, REFILL_CAPACITY +
                                            REFILL_PER_S * seconds,
                                            sum(l.count for l in loads.values())))
        self.assertLessEqual(got, bound)
        self.assertGreaterEqual(got, bound - REFILL_PER_S - 2)

        local = [metric(gw, 'tollgate_local_decisions_total{result="allowed"}') for gw in (a, b)]
        self.assertEqual(sum(local), admitted(EXACT_KEY) + admitted(REFILL_KEY))
        self.assertGreater(sum(metric(gw, 'tollgate_local_decisions_total{result="rejected"}')
                               for gw in (a, b)), 0)
        self.assertGreaterEqual(sum(metric(gw, "tollgate_degraded_total") for gw in (a, b)),
                                sum(local))

        # Back: Redis decides again, from its own 30. Each replica's breaker closes in its own
        # time: wait for both (a probe answered from Redis spends one of the 30; one answered
        # locally spends nothing there).
        def from_redis(gw):
            r = gw.get("/x", key=EXACT_KEY)
            return r.status == 200 and r.header("RateLimit-Limit") == str(CAPACITY)
        for gw in (a, b):
            self.assertTrue(wait_until(lambda: from_redis(gw), 15), "Redis did not decide again")
        allowed = 2 + sum(1 for i in range(40)
                          if (a if i % 2 else b).get("/x", key=EXACT_KEY).status == 200)
        self.assertEqual(allowed, CAPACITY - 10)

    def test_a_rejection_while_redis_is_down_is_honest(self):
        a, b = self.start_replicas()
        self.assertTrue(wait_until(lambda: self.replicas_seen(a) == 2, 10))
        self.redis.kill()
        statuses = [a.get("/x", key=EXACT_KEY) for _ in range(CAPACITY // 2 + 1)]
        self.redis.start()
        self.assertEqual([r.status for r in statuses],
                         [200] * (CAPACITY // 2) + [429], [r.status for r in statuses])
        last = statuses[-1]
        self.assertRateLimited(last, "rate_limited")
        self.assertEqual(last.header("RateLimit-Limit"), str(CAPACITY // 2), last)
        self.assertEqual(last.header("RateLimit-Remaining"), "0", last)
        self.assertRegex(last.header("Retry-After", ""), r"^[1-9][0-9]*$")
        def exact(line):
            return line.get("key_id") == "k-exact"
        lines = [json.loads(raw) for raw in a.access_log_lines(exact, CAPACITY // 2 + 1)]
        lines = [line for line in lines if exact(line)]
        self.assertEqual([l["decision"] for l in lines],
                         ["local_allowed"] * (CAPACITY // 2) + ["local_rejected"])

    def test_a_huge_cost_never_passes_while_redis_is_down(self):
        """The cost (from the query) times the replicas must not wrap around to a cost that
        passes: every spelling of a huge count is refused, and nothing is credited."""
        a, b = self.start_replicas()
        self.assertTrue(wait_until(lambda: self.replicas_seen(a) == 2, 10))
        self.redis.kill()
        for pages in ("9223372036854775807", "9223372036854775806", "4611686018427387904",
                      "4611686018427387905", "3074457345618258603", "18446744073709551615",
                      "99999999999999999999999", "9223372036854775808", "%39223372036854775807",
                      "9223372036854775807&pages=1", "1e30", "-9223372036854775808"):
            r = a.get("/v1/export?pages=" + pages, key=EXACT_KEY)
            self.assertIn(r.status, (400, 429), (pages, r))
        # The key's local share is untouched: exactly half the capacity.
        allowed = sum(1 for _ in range(CAPACITY) if a.get("/x", key=EXACT_KEY).status == 200)
        self.redis.start()
        self.assertEqual(allowed, CAPACITY // 2)


if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
