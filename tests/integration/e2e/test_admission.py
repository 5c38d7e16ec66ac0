#!/usr/bin/env python3
"""One admission for every adapter (issue 32, part 1), through the real binary: the same callers
(a key, an address, both) go through the gateway, the decision listener (as Traefik's
ForwardAuth calls it), GET /admin/explain and the Envoy RLS listener's `rls.domains` (a real
gRPC client), and each adapter gives the same verdict: admitted, refused by the deny list (the
configuration's or the admin API's runtime list), or an invalid key.

    python3 test_admission.py --binary build/tollgate [unittest args]

Where an adapter deliberately differs, the row says so:
- RLS domains have no routes: a descriptor naming only an address is an anonymous request
  (admitted), where a `key` route of the gateway answers 401; rows on `identity: ip` routes are
  not asked of RLS.
- explain names one identity (key_id or address) and no unknown key (404): rows with both, or
  with an unknown key, are not asked of explain.

libtollgate and `tollgate replay` call the same engine::Admitter; their deny-list tests are
LimiterDenyList (tests/unit/embed) and the replay suite.
"""
import os
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import burst, http_request  # noqa: E402
import test_decision  # noqa: E402  (a module: unittest must not collect its classes here)
from test_decision import call, descriptor  # noqa: E402

GOOD_KEY = "sk-good-0123456789abcdef"
DENIED_KEY = "sk-denied-0123456789abcdef"   # deny.keys names its id
BANNED_KEY = "sk-banned-0123456789abcdef"   # its account is in deny.accounts
RUNTIME_KEY = "sk-runtime-0123456789abcdef"  # denied by POST /admin/deny at the start
UNKNOWN_KEY = "sk-unknown-0123456789abcdef"
ID = {GOOD_KEY: "k-good", DENIED_KEY: "k-denied", BANNED_KEY: "k-banned",
      RUNTIME_KEY: "k-runtime"}

GOOD_ADDRESS = "203.0.113.5"
DENIED_ADDRESS = "198.51.100.7"       # in deny.addresses (a /24)
RUNTIME_ADDRESS = "192.0.2.99"        # denied by POST /admin/deny at the start

ADMITTED, BLOCKED, INVALID_KEY = "admitted", "blocked", "invalid_key"
GATEWAY_STATUS = {ADMITTED: 200, BLOCKED: 403, INVALID_KEY: 401}
RLS_CODE = {ADMITTED: "OK", BLOCKED: "OVER_LIMIT", INVALID_KEY: "OVER_LIMIT"}

# (why, key, address, path, verdict, rls): rls is the RLS domain's verdict where it differs
# deliberately, "skip" where RLS is not asked (an `identity: ip` route: RLS has no routes).
ROWS = [
    ("a good key from a good address", GOOD_KEY, GOOD_ADDRESS, "/v1/items", ADMITTED, None),
    ("a good key alone", GOOD_KEY, None, "/v1/items", ADMITTED, None),
    ("a key the configuration denies by id", DENIED_KEY, None, "/v1/items", BLOCKED, None),
    ("a key of a denied account", BANNED_KEY, None, "/v1/items", BLOCKED, None),
    ("a key the runtime list denies", RUNTIME_KEY, None, "/v1/items", BLOCKED, None),
    ("a good key from a denied address", GOOD_KEY, DENIED_ADDRESS, "/v1/items", BLOCKED, None),
    ("a good key from an address the runtime list denies", GOOD_KEY, RUNTIME_ADDRESS,
     "/v1/items", BLOCKED, None),
    ("a good key from a denied address, IPv4-mapped IPv6", GOOD_KEY, "::ffff:198.51.100.7",
     "/v1/items", BLOCKED, None),
    ("a good key from a denied IPv6 range", GOOD_KEY, "2001:db8::5", "/v1/items", BLOCKED, None),
    ("a denied key from a denied address", DENIED_KEY, DENIED_ADDRESS, "/v1/items", BLOCKED,
     None),
    ("no key from a denied address", None, DENIED_ADDRESS, "/v1/items", BLOCKED, None),
    ("an unknown key", UNKNOWN_KEY, GOOD_ADDRESS, "/v1/items", INVALID_KEY, None),
    ("an unknown key from a denied address", UNKNOWN_KEY, DENIED_ADDRESS, "/v1/items", BLOCKED,
     None),
    # RLS: an address alone is an anonymous request; the gateway's `key` route wants a key.
    ("no key from a good address on a key route", None, GOOD_ADDRESS, "/v1/items", INVALID_KEY,
     ADMITTED),
    # `identity: ip` routes do not read the key: a denied key passes, a denied address does not.
    ("a denied key on an ip route", DENIED_KEY, GOOD_ADDRESS, "/public/x", ADMITTED, "skip"),
    ("a good key from a denied address on an ip route", GOOD_KEY, DENIED_ADDRESS, "/public/x",
     BLOCKED, "skip"),
    ("an address alone on an ip route", None, GOOD_ADDRESS, "/public/x", ADMITTED, "skip"),
]


def config():
    return {
        "server": {"threads": 2},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"free": {"limits": [burst(1000)]}},
        "keys": [
            {"key": GOOD_KEY, "id": "k-good", "account": "acme", "plan": "free"},
            {"key": DENIED_KEY, "id": "k-denied", "account": "acme", "plan": "free"},
            {"key": BANNED_KEY, "id": "k-banned", "account": "banned", "plan": "free"},
            {"key": RUNTIME_KEY, "id": "k-runtime", "account": "acme", "plan": "free"},
        ],
        "routes": [{"path": "/public/*", "identity": "ip"}],
        "anonymous": {"limits": [burst(1000, name="ip")]},
        "identity": {"trusted_proxies": ["127.0.0.1/32"]},
        "deny": {"keys": ["k-denied"], "accounts": ["banned"],
                 "addresses": ["198.51.100.0/24", "2001:db8::/32"]},
    }


@unittest.skipIf(os.environ.get("TOLLGATE_RLS") == "OFF",
                 "the binary is built without gRPC (-DTOLLGATE_RLS=OFF)")
class AdmissionTableTests(test_decision.DecisionTestCase):
    PROXY = "traefik"
    rls = test_decision.RlsTests.rls

    def setUp(self):
        super().setUp()
        missing = harness.missing_grpc_client()
        if missing:
            self.fail(missing)
        self.start_decision(config(), rls_domains=test_decision.RlsTests.DOMAINS)
        for kind, value in (("key", "k-runtime"), ("address", RUNTIME_ADDRESS)):
            r = self.gateway.admin("POST", "/admin/deny?kind=%s&value=%s" % (kind, value))
            self.assertEqual(r.status, 200, r)

    def gateway_verdict(self, key, address, path):
        headers = {}
        if key:
            headers["Authorization"] = "Bearer " + key
        if address:
            headers["X-Forwarded-For"] = address
        return http_request(self.gateway.port, "GET", path, headers=headers)

    def explain(self, key, address, path):
        q = {"method": "GET", "path": path}
        q.update({"key_id": ID[key]} if key else {"address": address})
        return self.gateway.admin("GET", "/admin/explain?" + urllib.parse.urlencode(q))

    def test_every_adapter_gives_the_same_verdict(self):
        rls_rows = [row for row in ROWS if row[5] != "skip"]
        rls_answers = self.rls([
            call(descriptors=[descriptor(**dict(
                ([("api_key", key)] if key else []) +
                ([("remote_address", address)] if address else [])))])
            for _, key, address, _, _, _ in rls_rows])
        for (why, key, address, path, verdict, rls), answer in zip(rls_rows, rls_answers):
            self.assertEqual(answer["overall_code"], RLS_CODE[rls or verdict], "rls: " + why)
        for why, key, address, path, verdict, _ in ROWS:
            with self.subTest(why):
                r = self.gateway_verdict(key, address, path)
                self.assertEqual(r.status, GATEWAY_STATUS[verdict], "gateway: %s %r" % (why, r))
                if verdict == BLOCKED:
                    self.assertEqual(r.json()["code"], "blocked", r)
                xff = address if address else None
                d = self.decide("GET", path, key=key, xff=xff)
                self.assertEqual(d.status, GATEWAY_STATUS[verdict], "decision: %s %r" % (why, d))
                if verdict == INVALID_KEY or (key and address):
                    continue  # explain names one identity, and knows no unknown key
                e = self.explain(key, address, path)
                self.assertEqual(e.status, 200, e)
                self.assertEqual(e.json()["denied_by_deny_list"], verdict == BLOCKED,
                                 "explain: %s %r" % (why, e.json()))
        # Refused calls consumed nothing: the good key spent only its admitted rows.
        e = self.explain(GOOD_KEY, None, "/v1/items").json()
        spent = sum(1 for _, key, _, path, verdict, rls in ROWS
                    if key == GOOD_KEY and path == "/v1/items" and verdict == ADMITTED)
        # each admitted row: once through the gateway, the decision listener and RLS
        self.assertEqual(e["limits"][0]["remaining"], 1000 - 3 * spent, e)


if __name__ == "__main__":
    harness.main(__file__)
