#!/usr/bin/env python3
"""Token leasing (`lease: N` on a token bucket) through the real binary: two tollgate replicas
on one real redis-server, real HTTP clients, everything on 127.0.0.1.

    python3 test_leases.py --binary build/tollgate [-v]

What it proves (docs/operations.md, "Token leasing"):
  - a hot key within its limit costs Redis one script call per lease, not per request: at least
    10x fewer calls than requests (tollgate_redis_calls_total against requests);
  - a budget that runs out is never exceeded across the replicas (a bucket that does not
    refill during the test: the exact budget is its capacity), the 429s are honest, and the
    tokens a replica holds when the key goes quiet go back to Redis when the lease ends, so the
    whole budget is still spent exactly;
  - a limit without `lease` stays exact: one call per request;
  - tokens a lease gives back are reachable from the other replica soon after, not hidden by
    its deny cache until the 429's Retry-After (issue 31).
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_redis import (HAVE_REDIS, Hammer, RedisTestCase, burst, config, metric,  # noqa: E402
                        wait_until)

HOT_KEY = "sk-lease-hot-0123456789"
EXACT_KEY = "sk-lease-exact-0123456789"
LEASE = 20


def scripts(*gateways):
    return sum(metric(gw, "tollgate_redis_calls_total") for gw in gateways)


@unittest.skipUnless(HAVE_REDIS, "redis-server or redis-cli not installed")
class LeaseTests(RedisTestCase):
    def start_replicas(self, capacity):
        leased = dict(burst(capacity), lease=LEASE)
        plans = {"hot": {"limits": [leased]}, "exact": {"limits": [burst(capacity)]}}
        keys = [{"key": HOT_KEY, "id": "k-hot", "plan": "hot"},
                {"key": EXACT_KEY, "id": "k-exact", "plan": "exact"}]
        cfg = config(self.redis, plans, keys)
        return [self.gateway(cfg, name="tollgate-%s" % n) for n in "ab"]

    def test_a_hot_key_costs_redis_one_call_per_lease(self):
        a, b = self.start_replicas(100000)
        before = scripts(a, b)
        load = Hammer([a.port, b.port], "/echo", {"X-API-Key": HOT_KEY}, 4000, threads=8).run()
        self.assertEqual(load.errors, [])
        self.assertEqual(dict(load.statuses), {200: 4000})
        calls = scripts(a, b) - before
        sys.stderr.write("[4,000 requests, %d Redis calls] " % calls)
        self.assertLessEqual(calls * 10, 4000)
        local = sum(metric(gw, "tollgate_lease_local_total") for gw in (a, b))
        self.assertGreaterEqual(local, 4000 - calls)
        # The headers count down what the replica knows is left.
        r = a.get("/echo", key=HOT_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertLess(int(r.header("RateLimit-Remaining")), 100000 - 4000)
        # Without a lease: a call per request.
        before = scripts(a, b)
        load = Hammer([a.port, b.port], "/echo", {"X-API-Key": EXACT_KEY}, 400, threads=8).run()
        self.assertEqual(dict(load.statuses), {200: 400})
        self.assertGreaterEqual(scripts(a, b) - before, 400)
        self.assertNoDegradation(a, b)

    def test_a_budget_is_never_exceeded_and_unspent_tokens_go_back(self):
        capacity = 300
        a, b = self.start_replicas(capacity)
        load = Hammer([a.port, b.port], "/echo", {"X-API-Key": HOT_KEY}, 1000, threads=20).run()
        self.assertEqual(load.errors, [])
        admitted = load.statuses[200]
        self.assertEqual(set(load.statuses), {200, 429}, load.statuses)
        self.assertLessEqual(admitted, capacity)
        self.assertGreaterEqual(admitted, capacity - 2 * LEASE)  # at most a lease per replica
        self.assertRateLimited(load.examples[429])
        self.assertEqual(self.upstream.stats()["received"], admitted)
        # Quiet for longer than a lease lives (1 s): what the replicas held is back in Redis.
        time.sleep(1.5)
        self.assertTrue(wait_until(lambda: sum(
            metric(gw, "tollgate_lease_given_back_tokens_total") for gw in (a, b)) >=
            capacity - admitted, 5))
        rest = sum(1 for i in range(2 * LEASE + 5)
                   if (a if i % 2 else b).get("/echo", key=HOT_KEY).status == 200)
        self.assertEqual(admitted + rest, capacity)
        self.assertNoDegradation(a, b)

    def test_a_reset_drops_the_leases_held(self):
        """POST /admin/reset empties the key's bucket in Redis; the lease this replica holds
        goes too (else it would spend tokens of the old budget on top of the new one)."""
        capacity = 100
        a, b = self.start_replicas(capacity)
        for _ in range(3):
            self.assertEqual(a.get("/echo", key=HOT_KEY).status, 200)
        self.assertEqual(metric(a, "tollgate_lease_grants_total"), 1)  # holds 17 tokens
        r = harness.http_request(a.admin_port, "POST", "/admin/reset",
                                 body=json.dumps({"key_id": "k-hot"}).encode(),
                                 headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r)
        def spend(n):
            return sum(1 for i in range(n)
                       if (a if i % 2 else b).get("/echo", key=HOT_KEY).status == 200)
        admitted = spend(capacity + 3 * LEASE)
        self.assertLessEqual(admitted, capacity)
        time.sleep(1.5)  # the leases held at the end go back (a replica may have held some)
        admitted += spend(2 * LEASE + 5)
        self.assertEqual(admitted, capacity)  # 117 if the old lease had been kept

    def test_tokens_given_back_are_not_hidden_by_the_other_replicas_deny_cache(self):
        """Issue 31: a replica holding a lease's unspent tokens while the other exhausts the
        bucket; the other's deny cache then answered 429 locally for the whole Retry-After
        (about 1,000 s here) after the tokens came back. Both directions, one key each."""
        capacity, lease = 40, 10
        slow = dict(burst(capacity, refill=0.001), lease=lease)  # 1,000 s a token
        keys = [{"key": "sk-giveback-%d-0123456789" % i, "id": "k-gb-%d" % i, "plan": "slow"}
                for i in range(2)]
        cfg = config(self.redis, {"slow": {"limits": [slow]}}, keys)
        a, b = [self.gateway(cfg, name="tollgate-%s" % n) for n in "ab"]
        # A replica's first look at the reset epoch (within a second of its start) clears its
        # deny cache: let it pass, or it would clear what this test is about.
        time.sleep(1.5)
        for key, holder, other in ((keys[0]["key"], a, b), (keys[1]["key"], b, a)):
            with self.subTest(holder=holder is a and "a" or "b"):
                self.assertEqual(holder.get("/echo", key=key).status, 200)  # holds 9 more
                admitted = 1
                r = None
                for _ in range(capacity):  # the other takes the rest, lease by lease
                    r = other.get("/echo", key=key)
                    if r.status != 200:
                        break
                    admitted += 1
                self.assertEqual(r.status, 429, r)
                self.assertEqual(admitted, capacity - (lease - 1))
                local_before = metric(other, "tollgate_deny_cache_rejections_total")
                r = other.get("/echo", key=key)
                self.assertEqual(r.status, 429)
                self.assertGreaterEqual(int(r.header("Retry-After")), 900)  # the hidden window
                self.assertGreater(metric(other, "tollgate_deny_cache_rejections_total"),
                                   local_before)  # answered by the deny cache
                # The holder's lease ends 1 s after its grant; its 9 tokens go back to Redis.
                self.assertTrue(wait_until(
                    lambda: metric(holder, "tollgate_lease_given_back_tokens_total") >= lease - 1,
                    5))
                # Reachable from the other replica within the deny cache's leased bound, far
                # before the Retry-After it answered.
                start = time.monotonic()
                reached = wait_until(lambda: other.get("/echo", key=key).status == 200, 8,
                                     step=0.1)
                self.assertTrue(reached, "the given-back tokens stayed hidden for 8 s")
                sys.stderr.write("[reachable after %.1f s] " % (time.monotonic() - start))
                rest = 1 + sum(1 for i in range(2 * lease)
                               if (holder if i % 2 else other).get("/echo", key=key).status == 200)
                self.assertEqual(admitted + rest, capacity)  # every token spent, none twice
        self.assertNoDegradation(a, b)

    def test_check_config_refuses_a_lease_that_cannot_apply(self):
        for limit, why in (
                (dict(burst(10), lease=11), "lease: must be 0 to the capacity"),
                ({"name": "w", "algorithm": "fixed_window", "limit": 10, "window_seconds": 60,
                  "lease": 5}, "does not apply to algorithm fixed_window"),
                (dict(burst(10), lease=-1), "lease"),
                (dict(burst(10), lease="many"), "lease")):
            cfg = config(self.redis, {"p": {"limits": [limit]}},
                         [{"key": HOT_KEY, "id": "k", "plan": "p"}])
            path = os.path.join(self.tmpdir, "check.yaml")
            with open(path, "w") as f:
                json.dump(cfg, f)
            r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                               timeout=30)
            self.assertEqual(r.returncode, 1, r)
            self.assertIn(why, r.stderr.decode(errors="replace"))

if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
