#!/usr/bin/env python3
"""Every promise holds (issue 31), through the real binary on 127.0.0.1:

    python3 test_promises.py --binary build/tollgate [unittest args, e.g. SpellingTests -v]

- SpellingTests: a route is met by every spelling a common upstream routes to it (Express,
  ASP.NET and IIS route case-insensitively; IIS drops trailing dots; Rails takes a format
  suffix; Werkzeug upper-cases the method; Tomcat strips ';' parameters; NFKC folds full-width
  letters), on a per-address limit and on a fail-closed route whose store is down; look-alike
  separators are refused.
- CostFormTests: the cost parameter in every form a common query parser reads (qs, Rack, PHP,
  ASP.NET): the largest is charged.
- ForwardedForTests: X-Forwarded-For entries with ports from a trusted proxy are the client;
  what cannot be parsed is counted.
- CohortTests: two processes of one config, and a restart, enforce the same keys.
- UnknownPlanTests: a key of an unknown plan is enforced although the strictest plan is mostly
  in shadow mode.
- SharedLimitTests: shadow keys are held to per-address and global route limits; enforced keys
  may be exempted from a per-address limit, shadow keys never; on two replicas of one Redis.

Each class starts its own upstream and gateways, and stops them by PID.
"""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import SLOW, burst, GatewayTestCase  # noqa: E402

KEY = "sk-promise-0123456789abcdef"
PEER_IS_PROXY = {"trusted_proxies": ["127.0.0.1/32"]}

_next_address = [0]


def fresh_address():
    """A client address not used before in this process (198.18.0.0/15): a full bucket."""
    _next_address[0] += 1
    i = _next_address[0]
    return "198.18.%d.%d" % (i // 250, i % 250 + 1)


def raw_request(port, method, target, headers=(), body=b""):
    """One request as raw bytes on its own connection; returns (status, response bytes)."""
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: api.test", "Connection: close"]
    lines += ["%s: %s" % h for h in headers]
    if body or method.upper() in ("POST", "PUT"):
        lines.append("Content-Length: %d" % len(body))
    payload = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    data, _, _ = harness.raw_exchange(port, payload, timeout=5.0)
    return harness.status_of(data), data


# Spellings of "POST /login" that a common upstream routes to its login handler.
LOGIN_SPELLINGS = [
    ("POST", "/login"),
    ("POST", "/LOGIN"),
    ("POST", "/Login"),
    ("POST", "/lOgIn/"),
    ("POST", "/login."),
    ("POST", "/LOGIN.."),
    ("POST", "/login%20"),
    ("POST", "/login.%20"),
    ("POST", "/login.json"),
    ("POST", "/Login.JSON"),
    ("POST", "/%4c%4f%47%49%4e"),                                    # encoded capitals
    ("POST", "/%6cogin"),                                            # encoded small letter
    ("POST", "/%EF%BC%AC%EF%BC%AF%EF%BC%A7%EF%BC%A9%EF%BC%AE"),      # full-width LOGIN
    ("POST", "/%ef%bd%8c%ef%bd%8f%ef%bd%87%ef%bd%89%ef%bd%8e"),      # full-width login
    ("POST", "/log%C4%B1n"),                                         # dotless i
    ("POST", "//LOGIN"),
    ("POST", "/x/../LOGIN"),
    ("POST", "/LOGIN?x=1"),
    ("POST", "http://api.test/LOGIN"),
    ("post", "/login"),
    ("Post", "/LOGIN"),
    ("pOsT", "/Login."),
    ("POST", "/login.json-x"),                                       # Rails' (.:format)
    ("POST", "/login.a_b"),
    ("POST", "/login.js%20on"),
    ("POST", "/login.abcdefghijklmnopqrstuvwxyz"),
    ("POST", "/log%C4%B0n"),                                         # capital I with dot
]


def spelling_config(**extra):
    c = {
        "server": {"threads": 2, "access_log": False,
                   "request_target": {"allow_path_parameters": True}},
        "store": {"type": "memory"},
        "mode": "enforce",
        "identity": PEER_IS_PROXY,
        "plans": {"big": {"limits": [burst(1000)]}},
        "keys": [{"key": KEY, "id": "k-promise", "plan": "big"}],
        "anonymous": {"limits": [burst(100)]},
        "routes": [
            {"name": "login", "path": "/login", "method": "POST", "identity": "ip",
             "fail_mode": "closed",
             "limits": [{"name": "attempts", "capacity": 2, "refill_per_second": SLOW}]},
            {"name": "exact", "path": "/v1/Exact", "match": "exact",
             "limits": [{"name": "calls", "capacity": 1, "refill_per_second": SLOW}]},
            {"path": "/public/*", "identity": "none"},
        ],
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    c.update(extra)
    return c


class SpellingTests(GatewayTestCase):
    def test_every_spelling_of_the_login_route_meets_its_per_address_limit(self):
        gw = self.start(spelling_config())
        for method, target in LOGIN_SPELLINGS + [("POST", "/login;jsessionid=1"),
                                                 ("POST", "/LOGIN;x=y/")]:
            address = fresh_address()
            statuses = [raw_request(gw.port, method, target,
                                    [("X-Forwarded-For", address)])[0] for _ in range(3)]
            # Two attempts, then the route's limit: the third never reaches the upstream.
            self.assertEqual(statuses[2], 429, "%s %s: %s" % (method, target, statuses))
            status, data = raw_request(gw.port, method, target, [("X-Forwarded-For", address)])
            self.assertIn(b"login:attempts", data, "%s %s" % (method, target))

    def test_other_paths_do_not_meet_the_login_route(self):
        gw = self.start(spelling_config())
        for method, target in [("GET", "/login"), ("POST", "/login/x"), ("POST", "/loginx"),
                               ("POST", "/login.tar.gz"), ("POST", "/log-in")]:
            address = fresh_address()
            statuses = [raw_request(gw.port, method, target,
                                    [("X-Forwarded-For", address), ("X-API-Key", KEY)])[0]
                        for _ in range(3)]
            self.assertNotIn(429, statuses, "%s %s" % (method, target))

    def test_look_alike_separators_are_refused(self):
        gw = self.start(spelling_config())
        for target in ["/public/%EF%BC%8E%EF%BC%8E/login", "/public%EF%BC%8Flogin",
                       "/public/%ef%bc%8e%ef%bc%8e%ef%bc%8flogin", "/public%EF%BC%BClogin",
                       "/public/%E2%80%A5/login", "/public/%E2%80%A4%E2%80%A4/login",
                       "/public/%EF%B9%92%EF%B9%92/login", "/public%E2%88%95login",
                       "/public%EF%B9%A8login", "/public%E2%81%84login",
                       "/public/%E2%80%A6/login", "/public/%C0%AE%C0%AE/login",
                       "/public%C0%AFlogin", "/public%c1%9clogin",
                       "/public/%E0%80%AE%E0%80%AE/login"]:
            status, data = raw_request(gw.port, "POST", target)
            self.assertEqual(status, 400, target)
            self.assertIn(b"invalid_request_target", data, target)
        self.assertEqual(self.upstream.stats()["received"], 0)

    def test_no_spelling_meets_a_looser_route_than_its_exact_one(self):
        # A case-sensitive upstream routes "/Status" to "/{page}", "/v1/items/..." to the item
        # handler, and "/v1/report.pdf" to its own route: the fold and the format suffix must
        # not take them to a looser route.
        cfg = spelling_config()
        cfg["routes"] = [
            {"name": "report", "path": "/v1/report"},
            {"name": "pdf", "path": "/v1/report.pdf", "cost": 50},
            {"name": "items", "path": "/v1/items", "identity": "none"},
            {"name": "item", "path": "/v1/items/{id}", "cost": 10},
            {"name": "status", "path": "/status", "identity": "none"},
            {"name": "page", "path": "/{page}", "identity": "ip",
             "limits": [{"name": "per-ip", "capacity": 2, "refill_per_second": SLOW}]},
        ]
        gw = self.start(cfg)
        for target in ("/Status", "/STATUS", "/status.", "/Status.json", "/other"):
            address = fresh_address()
            got = [raw_request(gw.port, "GET", target, [("X-Forwarded-For", address)])[0]
                   for _ in range(3)]
            self.assertEqual(got, [200, 200, 429], target)
        self.assertEqual([raw_request(gw.port, "GET", "/status")[0] for _ in range(4)], [200] * 4)
        h = [("X-API-Key", KEY)]
        for target, cost in (("/v1/report.pdf", 50), ("/v1/report.csv", 1), ("/V1/Report.PDF", 50),
                             ("/v1/items/...", 10), ("/v1/items/%20", 10), ("/v1/items/7", 10)):
            status, data = raw_request(gw.port, "GET", target, h)
            self.assertEqual(status, 200, target)
            m = re.search(rb"RateLimit-Remaining: (\d+)", data, re.I)
            self.assertIsNotNone(m, target)
            before = int(m.group(1))
            status, data = raw_request(gw.port, "GET", target, h)
            after = int(re.search(rb"RateLimit-Remaining: (\d+)", data, re.I).group(1))
            self.assertEqual(before - after, cost, target)

    def test_every_method_override_meets_the_overridden_methods_route(self):
        # A POST that an upstream's method-override support runs as DELETE meets the DELETE
        # route's limit too (the stricter of the two routes).
        cfg = spelling_config()
        cfg["keys"] = [{"key": "sk-override-%02d-0123456789" % i, "id": "o%02d" % i, "plan": "big"}
                       for i in range(16)]
        cfg["routes"] = [{"name": "remove", "path": "/v1/items/{id}", "method": "DELETE",
                          "limits": [{"name": "deletes", "capacity": 1,
                                      "refill_per_second": SLOW}]}]
        gw = self.start(cfg)
        forms = [
            ([("X-HTTP-Method-Override", "DELETE")], ""),
            ([("x-http-method-override", "delete")], ""),
            ([("X_HTTP_Method_Override", "DELETE")], ""),
            ([("X-HTTP-Method", "DELETE")], ""),
            ([("X-Method-Override", "DELETE")], ""),
            ([("X-HTTP-Method-Override", "GET, DELETE")], ""),
            ([("X-HTTP-Method-Override", "PUT"), ("X-HTTP-Method-Override", "DELETE")], ""),
            ([], "?_method=DELETE"),
            ([], "?x=1&_method=delete"),
        ]
        for i, (headers, query) in enumerate(forms):
            h = headers + [("X-API-Key", cfg["keys"][i]["key"])]
            got = [raw_request(gw.port, "POST", "/v1/items/7" + query, h)[0] for _ in range(2)]
            self.assertEqual(got, [200, 429], (headers, query))
        # Only a POST is overridden (as the frameworks do); a plain POST meets the default route.
        h = [("X-API-Key", cfg["keys"][15]["key"])]
        self.assertEqual([raw_request(gw.port, "POST", "/v1/items/7", h)[0] for _ in range(3)],
                         [200] * 3)
        h = [("X-API-Key", cfg["keys"][14]["key"]), ("X-HTTP-Method-Override", "DELETE")]
        self.assertEqual([raw_request(gw.port, "PUT", "/v1/items/7", h)[0] for _ in range(3)],
                         [200] * 3)

    def test_an_exact_route_matches_byte_for_byte(self):
        gw = self.start(spelling_config())
        h = [("X-API-Key", KEY)]
        self.assertEqual([raw_request(gw.port, "GET", "/v1/Exact", h)[0] for _ in range(2)],
                         [200, 429])
        # Other spellings are other paths to an exact route: the default route (the key's plan).
        for target in ("/v1/exact", "/V1/EXACT", "/v1/Exact."):
            self.assertEqual(raw_request(gw.port, "GET", target, h)[0], 200, target)

    def test_server_route_match_exact_turns_folding_off(self):
        cfg = spelling_config()
        cfg["server"]["route_match"] = "exact"
        gw = self.start(cfg)
        address = fresh_address()
        statuses = [raw_request(gw.port, "POST", "/LOGIN",
                                [("X-Forwarded-For", address), ("X-API-Key", KEY)])[0]
                    for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 200])

    def test_every_spelling_of_a_fail_closed_route_is_closed_while_the_store_is_down(self):
        # A Redis store on a port nobody listens on: the login route answers 503, and so must
        # every spelling of it, with a valid key too (a keyed default route fails open).
        port, held = harness.reserve_port()
        self.held_sockets.append(held)
        cfg = spelling_config(store={"type": "redis", "url": "redis://127.0.0.1:%d" % port,
                                     "timeout_ms": 20, "connect_timeout_ms": 50})
        gw = self.start(cfg)
        for method, target in LOGIN_SPELLINGS:
            status, data = raw_request(gw.port, method, target,
                                       [("X-API-Key", KEY), ("X-Forwarded-For", fresh_address())])
            self.assertEqual(status, 503, "%s %s: %r" % (method, target, data[:200]))
            self.assertIn(b"limiter_unavailable", data, "%s %s" % (method, target))
        self.assertEqual(self.upstream.stats()["received"], 0)
        # The default route fails open: the store really is what is down.
        self.assertEqual(raw_request(gw.port, "GET", "/v1/items", [("X-API-Key", KEY)])[0], 200)


# The cost parameter "pages" (per 50) in every form a common parser reads as it.
COST_FORMS = [
    ("pages=5000", 100),
    ("pages[]=5000", 100),
    ("pages%5B%5D=5000", 100),
    ("pages%5b%5d=5000", 100),
    ("pages[0]=5000", 100),
    ("pages%5B0%5D=5000", 100),
    ("pages[0]=1&pages[1]=5000", 100),
    ("pages[]=1&pages[]=5000", 100),
    ("pages[x]=5000", 100),
    ("pages[a][b]=5000", 100),
    ("PAGES=5000", 100),
    ("Pages%5B%5D=5000", 100),
    ("+pages=5000", 100),
    ("%20pages=5000", 100),
    ("x=1;pages=5000", 100),
    ("pages=1;pages=5000", 100),
    ("pag%65s[]=5000", 100),
    ("[pages]=5000", 100),                                            # Rack 2
    ("pages]=5000", 100),
    ("pages%00=5000", 100),                                           # PHP cuts at NUL
    ("pages=1", 1),
    ("pagesx=5000", 1),
    ("xpages=5000", 1),
]


class CostFormTests(GatewayTestCase):
    def test_every_form_of_the_cost_parameter_is_charged(self):
        keys = [{"key": "sk-cost-%02d-0123456789" % i, "id": "c%02d" % i, "plan": "big"}
                for i in range(len(COST_FORMS) + 10)]
        gw = self.start({
            "server": {"threads": 2, "access_log": False},
            "store": {"type": "memory"},
            "plans": {"big": {"limits": [burst(1000)]}},
            "keys": keys,
            "routes": [{"path": "/v1/export", "cost": {"query": "pages", "per": 50, "min": 1}},
                       {"path": "/v1/list", "cost": {"query": "per_page", "per": 50}}],
            "headers": ["ratelimit"],
        })
        for (query, cost), key in zip(COST_FORMS, keys):
            status, data = raw_request(gw.port, "GET", "/v1/export?" + query,
                                       [("X-API-Key", key["key"])])
            self.assertEqual(status, 200, query)
            m = re.search(rb"RateLimit-Remaining: (\d+)", data, re.I)
            self.assertIsNotNone(m, query)
            self.assertEqual(int(m.group(1)), 1000 - cost, query)
        # PHP reads ' ', '.' and an unclosed '[' in a name as '_'.
        php_forms = ("per_page=5000", "per.page=5000", "per%20page=5000", "per+page=5000",
                     "per[page=5000", "PER.PAGE=5000")
        for query, key in zip(php_forms, keys[len(COST_FORMS):]):
            h = [("X-API-Key", key["key"])]
            status, data = raw_request(gw.port, "GET", "/v1/list?" + query, h)
            self.assertEqual(status, 200, query)
            m = re.search(rb"RateLimit-Remaining: (\d+)", data, re.I)
            remaining = int(m.group(1))
            status, data = raw_request(gw.port, "GET", "/v1/list?" + query, h)
            self.assertEqual(remaining - int(re.search(rb"RateLimit-Remaining: (\d+)", data,
                                                       re.I).group(1)), 100, query)
        # What is not a count is refused, in any form.
        for query in ("pages[]=abc", "pages[0]=-1", "PAGES=1e3"):
            status, data = raw_request(gw.port, "GET", "/v1/export?" + query,
                                       [("X-API-Key", keys[-1]["key"])])
            self.assertEqual(status, 400, query)
            self.assertIn(b"invalid_cost", data, query)


class ForwardedForTests(GatewayTestCase):
    def test_entries_with_ports_are_the_client(self):
        gw = self.start({
            "server": {"threads": 2, "access_log": False},
            "store": {"type": "memory"},
            "identity": PEER_IS_PROXY,
            "plans": {"big": {"limits": [burst(1000)]}},
            "anonymous": {"limits": [burst(2)]},
            "routes": [{"path": "/public/*", "identity": "ip"}],
        })
        # Each row: the spellings of one client, sent in turn: two pass, the third is refused.
        rows = [
            ["198.51.100.1:5678", "198.51.100.1:1", "198.51.100.1"],
            ["[2001:db8::7]:443", "[2001:db8::7]", "2001:db8::8"],  # one /64
            ["\"[2001:db8:1::7]:443\"", "2001:db8:1::9", "[2001:db8:1::1]:80"],
            ["9.9.9.9, 198.51.100.2:80", "198.51.100.2:81, 127.0.0.1:9", "198.51.100.2"],
            ["fe80::1%eth0", "[fe80::1%25eth0]:443", "fe80::2"],  # a zone is the proxy's
            ["[::ffff:198.51.100.5]:80", "198.51.100.5:0080", "::ffff:198.51.100.5"],
        ]
        for row in rows:
            got = [gw.get("/public/x", headers={"X-Forwarded-For": xff}).status for xff in row]
            self.assertEqual(got, [200, 200, 429], row)
        # Different ports of different addresses are different clients.
        self.assertEqual(gw.get("/public/x", headers={"X-Forwarded-For": "198.51.100.3:1"}).status,
                         200)
        before = gw.metrics().get("tollgate_forwarded_for_unparsed_total", 0)
        for xff in ("unknown", "_hidden", "198.51.100.4:99999", "[2001:db8::1", "1.2.3:80"):
            gw.get("/public/x", headers={"X-Forwarded-For": xff})
        after = gw.metrics().get("tollgate_forwarded_for_unparsed_total", 0)
        self.assertEqual(after - before, 5)


def cohort_config(keys):
    return {
        "server": {"threads": 2, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"rollout": {"enforce_percent": 50, "limits": [burst(100)]}},
        "keys": keys,
        "headers": ["ratelimit"],
    }


class CohortTests(GatewayTestCase):
    def enforced_keys(self, gw, keys):
        # An enforced key's answer advertises its limits; a shadow key's does not.
        out = set()
        for k in keys:
            r = gw.get("/echo", headers={"X-API-Key": k["key"]})
            self.assertEqual(r.status, 200, r)
            if r.header("RateLimit-Limit") is not None:
                out.add(k["id"])
        return out

    def test_two_processes_and_a_restart_enforce_the_same_keys(self):
        keys = [{"key": "sk-cohort-%03d-0123456789" % i, "id": "key-%d" % i, "plan": "rollout"}
                for i in range(200)]
        cfg = cohort_config(keys)
        self.upstream = harness.Upstream(self)
        cfg["upstream"] = {"url": self.upstream.url}
        a = harness.Gateway(self, cfg, name="tollgate-a")
        b = harness.Gateway(self, cfg, name="tollgate-b")
        in_a = self.enforced_keys(a, keys)
        in_b = self.enforced_keys(b, keys)
        self.assertEqual(in_a, in_b)
        self.assertTrue(70 <= len(in_a) <= 130, len(in_a))
        # The fixed hash: key-1 (bucket 2) is in, key-0 (bucket 78) is out (unit-tested values).
        self.assertIn("key-1", in_a)
        self.assertNotIn("key-0", in_a)
        a.process.stop()
        c = harness.Gateway(self, cfg, name="tollgate-c")
        self.assertEqual(self.enforced_keys(c, keys), in_a)


class UnknownPlanTests(GatewayTestCase):
    def test_a_key_of_an_unknown_plan_is_enforced(self):
        # The strictest plan enforces 1 % of its keys; key-0's bucket is 78: out of its cohort.
        cfg = {
            "server": {"threads": 2, "access_log": False},
            "store": {"type": "memory"},
            "plans": {"slow": {"enforce_percent": 1, "limits": [burst(2)]},
                      "fast": {"limits": [{"name": "burst", "capacity": 100,
                                           "refill_per_second": 100}]}},
            "keys": [{"key": "sk-unknown-plan-0123456789", "id": "key-0", "plan": "nosuch"},
                     {"key": "sk-slow-plan-0123456789", "id": "key-2", "plan": "slow"}],
        }
        self.upstream = harness.Upstream(self)
        cfg["upstream"] = {"url": self.upstream.url}
        gateways = [harness.Gateway(self, cfg, name="tollgate-%s" % n) for n in "ab"]
        for gw in gateways:
            got = [gw.get("/echo", headers={"X-API-Key": "sk-unknown-plan-0123456789"}).status
                   for _ in range(3)]
            self.assertEqual(got, [200, 200, 429])
            # The plan's own keys keep its cohort: key-2 (bucket 24) stays in shadow mode.
            got = [gw.get("/echo", headers={"X-API-Key": "sk-slow-plan-0123456789"}).status
                   for _ in range(3)]
            self.assertEqual(got, [200, 200, 200])


from test_redis import HAVE_REDIS, RedisServer  # noqa: E402

DARK_KEY = "sk-dark-0123456789abcdef"
LIVE_KEY = "sk-live-0123456789abcdef"


@unittest.skipUnless(HAVE_REDIS, "redis-server or redis-cli not installed")
class SharedLimitTests(GatewayTestCase):
    def setUp(self):
        super().setUp()
        self.redis = RedisServer(self)
        self.upstream = harness.Upstream(self)

    def start_replicas(self, *routes, mode="enforce"):
        cfg = {
            "server": {"threads": 2, "access_log": False},
            "store": {"type": "redis", "url": self.redis.url, "prefix": "promise",
                      "timeout_ms": 500, "connect_timeout_ms": 1000},
            "mode": mode,
            "identity": PEER_IS_PROXY,
            "plans": {"dark": {"mode": "shadow", "limits": [burst(1000)]},
                      "live": {"mode": "enforce", "limits": [burst(1000)]}},
            "keys": [{"key": DARK_KEY, "id": "k-dark", "plan": "dark"},
                     {"key": LIVE_KEY, "id": "k-live", "plan": "live"}],
            "routes": list(routes),
            "headers": ["ietf", "ratelimit", "x-ratelimit"],
            "upstream": {"url": self.upstream.url},
        }
        self.replicas = [harness.Gateway(self, cfg, name="tollgate-%s" % n) for n in "ab"]

    def send(self, i, path, key, address):
        gw = self.replicas[i % 2]  # alternate the replicas: one budget in Redis
        return gw.get(path, headers={"X-API-Key": key, "X-Forwarded-For": address})

    def test_a_shadow_key_is_held_to_a_per_address_limit(self):
        self.start_replicas({"name": "search", "path": "/v1/search",
                             "limits": [{"name": "per-ip", "scope": "ip", "capacity": 3,
                                         "refill_per_second": SLOW}]})
        address = fresh_address()
        got = [self.send(i, "/v1/search", DARK_KEY, address).status for i in range(5)]
        self.assertEqual(got, [200, 200, 200, 429, 429])
        r = self.send(0, "/v1/search", DARK_KEY, address)
        body = self.assertRateLimited(r)
        self.assertEqual(body["violated-policies"], ["search:per-ip"])
        # Its plan's own limit stays unadvertised (shadow); the route's is advertised.
        self.assertNotIn('"burst"', r.header("RateLimit-Policy"))
        # An enforced key from the same address meets the same exhausted budget.
        self.assertEqual(self.send(1, "/v1/search", LIVE_KEY, address).status, 429)

    def test_a_shadow_key_is_held_to_a_global_limit(self):
        self.start_replicas({"name": "upload", "path": "/v1/upload",
                             "limits": [{"name": "upstream", "scope": "global", "capacity": 4,
                                         "refill_per_second": SLOW}]})
        got = [self.send(i, "/v1/upload", DARK_KEY if i % 2 else LIVE_KEY, fresh_address()).status
               for i in range(6)]
        self.assertEqual(got, [200, 200, 200, 200, 429, 429])

    def test_an_enforced_key_may_be_exempt_from_a_per_address_limit_a_shadow_key_never(self):
        self.start_replicas({"name": "items", "path": "/v1/items",
                             "limits": [{"name": "per-ip", "scope": "ip", "capacity": 2,
                                         "refill_per_second": SLOW,
                                         "exempt_enforced_keys": True}]})
        address = fresh_address()
        self.assertEqual([self.send(i, "/v1/items", LIVE_KEY, address).status for i in range(5)],
                         [200] * 5)
        self.assertEqual([self.send(i, "/v1/items", DARK_KEY, address).status for i in range(3)],
                         [200, 200, 429])

    def test_mode_caller_follows_the_callers_mode(self):
        self.start_replicas({"name": "quiet", "path": "/v1/quiet",
                             "limits": [{"name": "per-ip", "scope": "ip", "capacity": 1,
                                         "refill_per_second": SLOW, "mode": "caller"}]})
        address = fresh_address()
        # The shadow key is counted, never held; an enforced key from that address is held.
        self.assertEqual([self.send(i, "/v1/quiet", DARK_KEY, address).status for i in range(3)],
                         [200, 200, 200])
        self.assertEqual(self.send(0, "/v1/quiet", LIVE_KEY, address).status, 429)
        other = fresh_address()
        self.assertEqual([self.send(i, "/v1/quiet", LIVE_KEY, other).status for i in range(2)],
                         [200, 429])

    def test_an_enforced_plan_is_held_to_shared_limits_under_a_global_shadow_mode(self):
        # The rollout's "enforce plan by plan" step: mode: shadow, one plan enforced.
        self.start_replicas({"name": "search", "path": "/v1/search",
                             "limits": [{"name": "per-ip", "scope": "ip", "capacity": 2,
                                         "refill_per_second": SLOW}]}, mode="shadow")
        address = fresh_address()
        self.assertEqual([self.send(i, "/v1/search", LIVE_KEY, address).status for i in range(3)],
                         [200, 200, 429])
        # Everything else is in shadow mode: the shadow key is never held.
        self.assertEqual([self.send(i, "/v1/search", DARK_KEY, fresh_address()).status
                          for i in range(4)], [200] * 4)


if __name__ == "__main__":
    harness.main(__file__)
