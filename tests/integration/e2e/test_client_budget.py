#!/usr/bin/env python3
"""A client's own budget through the gateway listener (issue 31): GET /v1/rate-limit is a client
API answered there by default (server.public_endpoints turns it off for an upstream that owns
the path), and the monthly quota, counted and enforced through the real binary.

    python3 test_client_budget.py --binary build/tollgate [-v]
"""
import calendar
import datetime
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GatewayTestCase, burst  # noqa: E402

KEY = "sk-month-0123456789abcdef"
ALLOWANCE, CEILING = 3, 5


def month_seconds(now=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return calendar.monthrange(now.year, now.month)[1] * 86400


def seconds_to_month_end(now=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    nxt = datetime.datetime(now.year + (now.month == 12), now.month % 12 + 1, 1,
                            tzinfo=datetime.timezone.utc)
    return (nxt - now).total_seconds()


def config(**server):
    return {
        "server": dict({"threads": 2, "access_log": False}, **server),
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"metered": {"limits": [
            burst(100),
            {"name": "monthly", "algorithm": "quota", "period": "month",
             "allowance": ALLOWANCE, "ceiling": CEILING}]}},
        "keys": [{"key": KEY, "id": "k-month", "account": "acme", "plan": "metered"}],
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }


def monthly(r):
    """(q, w) of the "monthly" policy and (r, t) of its state, from the IETF headers."""
    p = re.search(r'"monthly";q=(\d+);w=(\d+)', r.header("RateLimit-Policy", ""))
    s = re.search(r'"monthly";r=(\d+);t=(\d+)', r.header("RateLimit", ""))
    return (tuple(map(int, p.groups())) if p else None, tuple(map(int, s.groups())) if s else None)


class RateLimitEndpointTests(GatewayTestCase):

    def test_answered_on_the_gateway_listener_by_default(self):
        # public_endpoints=None: the binary's default list.
        gw = harness.Gateway(self, dict(config(), upstream={"url": harness.Upstream(self).url}),
                             public_endpoints=None)
        r = gw.get("/v1/rate-limit", key=KEY)
        self.assertEqual(r.status, 200, r)
        body = r.json()
        self.assertNotIn("path", body)  # not the upstream's echo
        self.assertEqual((body["key_id"], body["plan"]), ("k-month", "metered"), body)
        self.assertEqual(body["quota"]["period"], "month", body)
        # Without a key it is the caller's problem, not the upstream's.
        self.assertEqual(gw.get("/v1/rate-limit").status, 401)
        # The other built-in endpoints stay the upstream's paths by default.
        for path in ("/v1/usage", "/metrics"):
            self.assertEqual(gw.get(path, key=KEY).json()["path"], path)

    def test_an_upstream_that_owns_the_path_keeps_it(self):
        gw = harness.Gateway(self, dict(config(public_endpoints=["health"]),
                                        upstream={"url": harness.Upstream(self).url}),
                             public_endpoints=None)
        r = gw.get("/v1/rate-limit", key=KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["path"], "/v1/rate-limit", r)  # the upstream's echo
        # The admin listener answers it whatever the list says.
        r = gw.admin("GET", "/v1/rate-limit", headers={"Authorization": "Bearer " + KEY})
        self.assertEqual(r.json()["key_id"], "k-month", r)


class MonthlyQuotaTests(GatewayTestCase):

    def test_monthly_quota_through_the_gateway(self):
        gw = self.start(config())
        month = month_seconds()
        used = []
        for i in range(CEILING):
            r = gw.get("/echo", key=KEY)
            self.assertEqual(r.status, 200, r)
            policy, state = monthly(r)
            # For a quota q is its allowance and w the month's length (docs/http-contract.md);
            # r, the allowance left, falls to 0 and stays there past it.
            self.assertEqual(policy, (ALLOWANCE, month), r)
            self.assertEqual(state[0], max(0, ALLOWANCE - i - 1), r)
            self.assertLessEqual(state[1], seconds_to_month_end() + 2, r)
            used.append(state[0])
        self.assertEqual(used, sorted(used, reverse=True))
        # GET /v1/rate-limit on the gateway shows it and consumes nothing.
        for _ in range(2):
            q = gw.get("/v1/rate-limit", key=KEY).json()["quota"]
            self.assertEqual((q["period"], q["used"], q["allowance"], q["ceiling"]),
                             ("month", CEILING, ALLOWANCE, CEILING), q)
            self.assertTrue(q["overAllowance"], q)
            self.assertEqual(q["windowSeconds"], month, q)
        # At the ceiling: rejected until the month ends.
        r = gw.get("/echo", key=KEY)
        body = self.assertRateLimited(r, "ceiling_exceeded")
        retry = int(r.header("Retry-After"))
        self.assertLessEqual(retry, seconds_to_month_end() + 2, r)
        self.assertGreater(retry, seconds_to_month_end() - 60, r)
        self.assertIn("monthly", str(body), body)
        self.assertEqual(gw.get("/echo", key=KEY).status, 429)
        self.assertEqual(gw.get("/v1/rate-limit", key=KEY).json()["quota"]["used"], CEILING)

    def test_hard_monthly_quota_through_the_gateway(self):
        """A monthly quota with a ceiling only: q is the ceiling, the remaining count falls to 0,
        then 429 quota_exceeded until the month ends."""
        c = config()
        c["plans"]["metered"]["limits"][1] = {"name": "monthly", "algorithm": "quota",
                                              "period": "month", "ceiling": 3}
        gw = self.start(c)
        month = month_seconds()
        for i in range(3):
            r = gw.get("/echo", key=KEY)
            self.assertEqual(r.status, 200, r)
            policy, state = monthly(r)
            self.assertEqual(policy, (3, month), r)
            self.assertEqual(state[0], 2 - i, r)
            self.assertEqual(r.header("RateLimit-Remaining"), str(2 - i), r)
        r = gw.get("/echo", key=KEY)
        self.assertRateLimited(r, "quota_exceeded")
        self.assertLessEqual(int(r.header("Retry-After")), seconds_to_month_end() + 2, r)
        self.assertGreater(int(r.header("Retry-After")), seconds_to_month_end() - 60, r)
        self.assertEqual(gw.get("/v1/rate-limit", key=KEY).json()["quota"]["used"], 3)


if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
