#!/usr/bin/env python3
"""Integration tests of tollgate's decision service (issue #6): the gateways people already run
ask tollgate, and enforce its answer.

    python3 test_decision.py --binary build/tollgate [unittest args, e.g. NginxTests -v]

- NginxTests: a real nginx (Debian's package, /usr/sbin/nginx) runs examples/nginx-auth-request.conf
  as shipped (ports filled in) with `auth_request` to tollgate's decision listener
  (deny_status 403) in front of the test upstream; clients talk to nginx.
- TraefikForwardAuthTests / EnvoyExtAuthzTests: the decision listener called exactly as Traefik's
  ForwardAuth middleware (X-Forwarded-Method/-Uri/-For) and Envoy's ext_authz HTTP service (the
  original method and path) call it. Neither proxy is in Debian, so no real one runs.
- RlsTests: tollgate's Envoy RLS v3 gRPC listener called by a real gRPC client
  (tests/integration/e2e/node/rls_client.js: @grpc/grpc-js loading src/rls/proto/rls.proto).

Needs nginx (`nginx-light`, from scripts/install-deps.sh) and the Node packages
(scripts/install-node-deps.sh). A missing one fails the tests that need it, with the command to
run: nothing is skipped silently.

Every process is started by the test in its temp dir on free loopback ports, and stopped by PID.
"""
import http.client
import json
import os
import signal
import threading
import socket
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import SLOW, burst, GatewayTestCase, deadline_loop, http_request, reserve_port  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
NGINX_EXAMPLE = os.path.join(REPO, "examples", "nginx-auth-request.conf")
NODE_DIR = os.path.join(HERE, "node")
RLS_CLIENT = os.path.join(NODE_DIR, "rls_client.js")
HEALTH_CLIENT = os.path.join(NODE_DIR, "health_client.js")
RLS_PROTO = os.path.join(REPO, "src", "rls", "proto", "rls.proto")


FREE_KEY = "sk-free-0123456789abcdef"
OTHER_KEY = "sk-other-0123456789abcdef"
UNKNOWN_KEY = "sk-unknown-0123456789abcdef"

RATE_HEADERS = ("RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining",
                "RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining",
                "X-RateLimit-Reset")


def config(capacity=5, keys=None, **extra):
    """A tollgate config (JSON is YAML); the fixture adds the listeners and the upstream URL."""
    c = {
        "server": {"threads": 2, "access_log": True},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"free": {"limits": [burst(capacity)]}},
        "keys": keys if keys is not None else [
            {"key": FREE_KEY, "id": "k-free", "account": "acme", "plan": "free"},
            {"key": OTHER_KEY, "id": "k-other", "account": "globex", "plan": "free"},
        ],
        "routes": [
            {"path": "/v1/export", "method": "GET",
             "cost": {"query": "pages", "per": 50, "min": 1}},
            {"path": "/login", "method": "POST", "identity": "ip"},
            {"path": "/public/*", "identity": "ip"},
        ],
        "anonymous": {"limits": [burst(2, name="ip")]},
        "identity": {"trusted_proxies": ["127.0.0.1/32"]},
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    c.update(extra)
    return c


class DecisionTestCase(GatewayTestCase):
    """A tollgate with its decision listener (and optionally its RLS listener), and an upstream
    that the decision service must never call."""

    def setUp(self):
        super().setUp()

    PROXY = "nginx"  # decision.proxy: whose headers describe the original request

    def start_decision(self, cfg, deny_status=None, rls_domains=None):
        cfg = dict(cfg)
        self.decision_port, held = reserve_port()
        self.held_sockets.append(held)
        cfg["decision"] = {"listen": "127.0.0.1:%d" % self.decision_port, "proxy": self.PROXY}
        if deny_status is not None:
            cfg["decision"]["deny_status"] = deny_status
        if rls_domains is not None:
            # gRPC sets SO_REUSEADDR and SO_REUSEPORT, so it binds the port we hold.
            self.rls_port, held_rls = reserve_port()
            self.held_sockets.append(held_rls)
            cfg["rls"] = {"listen": "127.0.0.1:%d" % self.rls_port, "domains": rls_domains}
        return self.start(cfg)

    def decide(self, method, uri, key=None, xff=None, headers=None):
        """One check, as Traefik's ForwardAuth sends it: GET to the auth address, the original
        request in X-Forwarded-* headers, the client's own headers (Authorization) copied."""
        h = {"X-Forwarded-Method": method, "X-Forwarded-Uri": uri,
             "X-Forwarded-Proto": "http", "X-Forwarded-Host": "api.example.com"}
        if xff is not None:
            h["X-Forwarded-For"] = xff
        if key is not None:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        return http_request(self.decision_port, "GET", "/", headers=h)

    def assertRateHeaders(self, r, remaining, capacity):
        self.assertEqual(r.header("RateLimit-Policy"), '"burst";q=%d;w=%d' % (
            capacity, round(capacity / float(SLOW))), r)
        self.assertRegex(r.header("RateLimit", ""), r'^"burst";r=%d;t=\d+$' % remaining)
        for prefix in ("RateLimit-", "X-RateLimit-"):
            self.assertEqual(r.header(prefix + "Limit"), str(capacity), r)
            self.assertEqual(r.header(prefix + "Remaining"), str(remaining), r)
            self.assertRegex(r.header(prefix + "Reset", ""), r"^\d+$", r)

    def assertRetryAfter(self, r, low=90, high=100, with_reset=True):
        """One token at 0.01/s: about 100 s. RateLimit-Reset says the same (with_reset), but
        not on a 429 of the invalid-key limit, which sends Retry-After alone."""
        ra = r.header("Retry-After")
        self.assertIsNotNone(ra, r)
        self.assertRegex(ra, r"^[0-9]+$")
        self.assertGreaterEqual(int(ra), low, r)
        self.assertLessEqual(int(ra), high, r)
        if with_reset:
            self.assertEqual(r.header("RateLimit-Reset"), ra, r)


# ---------------------------------------------------------------------------------------------
# nginx auth_request


def render_nginx_conf(listen, decision, upstream):
    """examples/nginx-auth-request.conf with its three placeholders filled in, as
    `envsubst '${NGINX_LISTEN} ${TOLLGATE_DECISION} ${API_UPSTREAM}'` does (nginx's own
    $variables stay)."""
    with open(NGINX_EXAMPLE) as f:
        text = f.read()
    for name, value in (("NGINX_LISTEN", listen), ("TOLLGATE_DECISION", decision),
                        ("API_UPSTREAM", upstream)):
        assert "${%s}" % name in text, name
        text = text.replace("${%s}" % name, value)
    return text


class Nginx(harness.Nginx):
    """A real nginx running examples/nginx-auth-request.conf in front of the test upstream."""

    def __init__(self, fixture, decision_port, upstream_port):
        super().__init__(fixture, lambda listen: render_nginx_conf(
            listen, "127.0.0.1:%d" % decision_port, "127.0.0.1:%d" % upstream_port))

    def get(self, path, key=None, headers=None, source=None):
        return self.request("GET", path, key=key, headers=headers, source=source)

    def request(self, method, path, key=None, headers=None, source=None, body=None):
        """One request on a fresh connection, from the loopback address `source` if given."""
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = "Bearer " + key
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=harness.REQUEST_TIMEOUT_S,
                                          source_address=(source, 0) if source else None)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return harness.Response(r.status, r.headers, r.read(), r.reason)
        finally:
            conn.close()


class NginxTests(DecisionTestCase):
    """A real nginx with auth_request to tollgate (deny_status 403), seen from its clients."""

    def start_all(self, cfg):
        gw = self.start_decision(cfg, deny_status=403)
        self.nginx = Nginx(self, self.decision_port, self.upstream.port)
        return gw

    def test_the_original_host_meets_host_routes(self):
        # The example config sends X-Original-Host: $host.
        routes = [{"host": "api.example.com", "path": "/*", "identity": "key"},
                  {"path": "/*", "identity": "none"}]
        self.start_all(config(routes=routes))
        self.assertEqual(self.nginx.get("/v1/x", headers={"Host": "api.example.com"}).status, 401)
        self.assertEqual(self.nginx.get("/v1/x", headers={"Host": "www.example.com"}).status, 200)
        r = self.nginx.get("/v1/x", key=FREE_KEY, headers={"Host": "api.example.com"})
        self.assertEqual(r.status, 200, r)

    def test_serial_cap_then_429_with_retry_after_and_headers(self):
        self.start_all(config(capacity=5))
        for i in range(5):
            r = self.nginx.get("/v1/things?id=%d" % i, key=FREE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertRateHeaders(r, remaining=4 - i, capacity=5)
            self.assertIsNone(r.header("Retry-After"), r)
            seen = r.json()  # the upstream's echo of the request nginx forwarded
            self.assertEqual(seen["path"], "/v1/things?id=%d" % i)
            self.assertEqual(seen["headers"].get("X-Tollgate-Key-Id"), "k-free", seen)
            self.assertEqual(seen["headers"].get("X-Tollgate-Plan"), "free", seen)
        for _ in range(2):
            r = self.nginx.get("/v1/things", key=FREE_KEY)
            self.assertEqual(r.status, 429, r)  # tollgate's 403, mapped by error_page
            self.assertTrue(r.header("Content-Type", "").startswith("application/problem+json"), r)
            self.assertEqual(r.json()["status"], 429)
            self.assertRateHeaders(r, remaining=0, capacity=5)
            self.assertRetryAfter(r)
        self.assertEqual(self.upstream.stats()["received"], 5)
        m = self.gateway.metrics()
        self.assertEqual(m.get('tollgate_rejections_total{plan="free",code="rate_limited"}'), 2)

    def test_keys_are_isolated(self):
        self.start_all(config(capacity=3))
        for _ in range(3):
            self.assertEqual(self.nginx.get("/v1/things", key=FREE_KEY).status, 200)
        self.assertEqual(self.nginx.get("/v1/things", key=FREE_KEY).status, 429)
        # The other key, here in X-API-Key (both headers are configured), has its whole budget.
        r = self.nginx.get("/v1/things", headers={"X-API-Key": OTHER_KEY})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)
        self.assertEqual(r.json()["headers"].get("X-Tollgate-Key-Id"), "k-other")
        self.assertEqual(self.nginx.get("/v1/things", key=FREE_KEY).status, 429)
        self.assertEqual(self.upstream.stats()["received"], 4)

    def test_missing_or_invalid_key_is_401_and_repeated_invalid_keys_429(self):
        cfg = config(identity={"trusted_proxies": ["127.0.0.1/32"],
                               "invalid_key_limit": {"capacity": 3, "refill_per_second": SLOW}})
        self.start_all(cfg)
        for headers in ({"Authorization": "Bearer " + UNKNOWN_KEY}, {}, {"X-API-Key": "nope"}):
            r = self.nginx.get("/v1/things", headers=headers)
            self.assertEqual(r.status, 401, r)
            self.assertEqual(r.header("WWW-Authenticate"), "Bearer", r)
            self.assertEqual(r.json()["status"], 401, r)
            self.assertIsNone(r.header("RateLimit-Remaining"), r)
        # The fourth invalid key from this client address: tollgate denies (403), nginx says 429.
        r = self.nginx.get("/v1/things", key=UNKNOWN_KEY)
        self.assertEqual(r.status, 429, r)
        self.assertRetryAfter(r, with_reset=False)  # 1 token at 0.01/s
        self.assertEqual(self.upstream.stats()["received"], 0)
        self.assertEqual(self.gateway.metrics().get("tollgate_invalid_keys_total"), 4)

    def test_original_uri_and_method_set_route_and_cost(self):
        self.start_all(config(capacity=5))
        # GET /v1/export costs ceil(pages/50): the query reaches tollgate in X-Original-URI.
        r = self.nginx.get("/v1/export?pages=120", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)
        r = self.nginx.get("/v1/export?pages=150", key=FREE_KEY)  # costs 3, 2 left
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)  # a rejection consumes nothing
        r = self.nginx.get("/v1/export?pages=100", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "0", r)
        # POST /login is limited per client address (identity: ip) and needs no key: the method
        # reaches tollgate in X-Original-Method, the body goes to the API alone.
        for remaining in (1, 0):
            r = self.nginx.request("POST", "/login", body=b"user=ann&password=x")
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.header("RateLimit-Remaining"), str(remaining), r)
            self.assertEqual(r.json()["body_bytes"], 19, r)
        self.assertEqual(self.nginx.request("POST", "/login", body=b"x").status, 429)
        # GET /login is not that route: it needs a key.
        self.assertEqual(self.nginx.get("/login").status, 401)
        self.assertEqual(self.upstream.stats()["received"], 4)

    def test_anonymous_routes_are_limited_per_client_address(self):
        self.start_all(config())
        # Clients on two loopback addresses; nginx sends each one's address in X-Forwarded-For,
        # which tollgate believes because nginx (127.0.0.1) is a trusted proxy.
        a, b = "127.0.0.2", "127.0.0.3"
        for _ in range(2):
            r = self.nginx.get("/public/doc", source=a,
                               headers={"X-Tollgate-Key-Id": "forged"})
            self.assertEqual(r.status, 200, r)
            self.assertNotIn("X-Tollgate-Key-Id", r.json()["headers"])  # removed by nginx
        # A client's own X-Forwarded-For is not believed: nginx replaces it with the peer.
        r = self.nginx.get("/public/doc", source=a, headers={"X-Forwarded-For": "198.51.100.7"})
        self.assertEqual(r.status, 429, r)
        self.assertRetryAfter(r)
        r = self.nginx.get("/public/doc", source=b)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "1", r)

    def test_unreachable_decision_service_fails_closed_with_500(self):
        self.start_all(config())
        self.assertEqual(self.nginx.get("/v1/things", key=FREE_KEY).status, 200)
        self.gateway.process.stop()
        r = self.nginx.get("/v1/things", key=FREE_KEY)
        self.assertEqual(r.status, 500, r)  # auth_request's answer to a failed subrequest
        self.assertEqual(self.upstream.stats()["received"], 1)


# ---------------------------------------------------------------------------------------------
# Traefik ForwardAuth and Envoy ext_authz (HTTP): the calls those proxies make


class TraefikForwardAuthTests(DecisionTestCase):
    PROXY = "traefik"
    """What Traefik's forwardAuth middleware sends (deny_status: the default, 429). Traefik
    returns a denial to the client as it is: status, headers and body."""

    def test_serial_cap_then_429_with_retry_after(self):
        self.start_decision(config(capacity=4))
        for i in range(4):
            r = self.decide("GET", "/v1/things", key=FREE_KEY, xff="203.0.113.7")
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.body, b"", r)
            self.assertRateHeaders(r, remaining=3 - i, capacity=4)
            # authResponseHeaders: [X-Tollgate-Key-Id, X-Tollgate-Plan] copies these upstream.
            self.assertEqual(r.header("X-Tollgate-Key-Id"), "k-free", r)
            self.assertEqual(r.header("X-Tollgate-Plan"), "free", r)
        r = self.decide("GET", "/v1/things", key=FREE_KEY, xff="203.0.113.7")
        body = self.assertRateLimited(r, "rate_limited")
        self.assertEqual(body["violated-policies"], ["burst"], body)
        self.assertRateHeaders(r, remaining=0, capacity=4)
        self.assertRetryAfter(r)
        self.assertIsNone(r.header("X-Tollgate-Key-Id"), r)
        # The decision service never calls the upstream.
        self.assertEqual(self.upstream.stats()["received"], 0)

    def test_forwarded_uri_and_method_set_route_and_cost(self):
        self.start_decision(config(capacity=5))
        r = self.decide("GET", "/v1/export?pages=120", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)
        # POST /login is limited per client address (identity: ip), with no key needed.
        for _ in range(2):
            r = self.decide("POST", "/login", xff="203.0.113.7")
            self.assertEqual(r.status, 200, r)
            self.assertIsNone(r.header("X-Tollgate-Key-Id"), r)
        self.assertRateLimited(self.decide("POST", "/login", xff="203.0.113.7"))
        # GET /login is not that route: it needs a key.
        self.assertEqual(self.decide("GET", "/login", xff="203.0.113.7").status, 401)

    def test_forwarded_host_meets_host_routes(self):
        # A strict virtual host (a key needed) beside an open catch-all: the original Host, as
        # X-Forwarded-Host names it, chooses the route, and only from a trusted peer.
        routes = [{"host": "api.example.com", "path": "/*", "identity": "key"},
                  {"path": "/*", "identity": "none"}]
        self.start_decision(config(routes=routes))
        rows = [("api.example.com", 401), ("API.Example.com:443", 401),
                ("static.example.com", 200), ("api..example.com", 400)]
        for host, status in rows:
            with self.subTest(host=host):
                r = self.decide("GET", "/v1/x", headers={"X-Forwarded-Host": host})
                self.assertEqual(r.status, status, r)
        self.assertEqual(self.decide("GET", "/v1/x", key=FREE_KEY).status, 200)

    def test_forwarded_for_from_a_trusted_peer_names_the_client(self):
        self.start_decision(config())
        # trustForwardHeader: true appends the client to what it was sent; the right-most
        # address that is not a trusted proxy is the client.
        for xff in ("203.0.113.7", "198.51.100.66, 203.0.113.7"):
            self.assertEqual(self.decide("GET", "/public/doc", xff=xff).status, 200)
        self.assertRateLimited(self.decide("GET", "/public/doc", xff="10.1.1.1, 203.0.113.7"))
        r = self.decide("GET", "/public/doc", xff="203.0.113.8")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "1", r)

    def test_forwarded_headers_from_an_untrusted_peer_are_ignored(self):
        # Issue 18: whoever reaches the listener could otherwise name a cheaper route. From a
        # peer that is not a trusted proxy, the check is its own request, GET / (keyed).
        self.start_decision(config(identity={"trusted_proxies": []}))
        for xff in ("203.0.113.7", "203.0.113.8"):
            r = self.decide("GET", "/public/doc", xff=xff)
            self.assertEqual(r.status, 401, r)
            self.assertEqual(r.json()["code"], "missing_api_key", r)
        self.assertEqual(self.gateway.metrics().get("tollgate_decision_untrusted_headers_total"), 2)

    def test_only_traefiks_headers_are_read(self):
        # Traefik forwards the client's own headers to the check: a client's X-Original-URI
        # beside Traefik's X-Forwarded-Uri must not choose the route.
        self.start_decision(config())
        r = self.decide("GET", "/v1/items", xff="203.0.113.7",
                        headers={"X-Original-URI": "/public/doc", "X-Original-Method": "GET"})
        self.assertEqual(r.status, 401, r)
        r = self.decide("GET", "/public/../v1/items", xff="203.0.113.7")
        self.assertEqual(r.status, 401, r)  # canonical: /v1/items, keyed
        r = self.decide("GET", "/public/..%2fv1/items", xff="203.0.113.7")
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "invalid_request_target", r)

    def test_missing_or_invalid_key_is_401(self):
        self.start_decision(config())
        for key in (None, UNKNOWN_KEY):
            r = self.decide("GET", "/v1/things", key=key, xff="203.0.113.7")
            self.assertEqual(r.status, 401, r)
            self.assertEqual(r.header("WWW-Authenticate"), "Bearer", r)
            code = "missing_api_key" if key is None else "invalid_api_key"
            self.assertEqual(r.json()["code"], code, r)


class EnvoyExtAuthzTests(DecisionTestCase):
    """Envoy's ext_authz filter with an http_service sends the original method and path as
    the check request itself (no path_prefix), with the allowed headers."""
    PROXY = "envoy"

    def test_forwarded_for_from_an_untrusted_peer_is_ignored(self):
        self.start_decision(config(identity={"trusted_proxies": []}))
        # Every check comes from 127.0.0.1, whatever X-Forwarded-For claims: one budget.
        for xff in ("203.0.113.7", "203.0.113.8"):
            r = http_request(self.decision_port, "GET", "/public/doc", headers={"X-Forwarded-For": xff})
            self.assertEqual(r.status, 200, r)
        r = http_request(self.decision_port, "GET", "/public/doc", headers={"X-Forwarded-For": "203.0.113.9"})
        self.assertRateLimited(r)

    def test_client_original_uri_is_not_read(self):
        # With proxy: envoy no header names the request, even from a trusted peer.
        self.start_decision(config())
        r = http_request(self.decision_port, "GET", "/v1/items",
                         headers={"X-Original-URI": "/public/doc", "X-Forwarded-Uri": "/public/doc"})
        self.assertEqual(r.status, 401, r)

    def test_check_request_is_the_original_method_and_path(self):
        self.start_decision(config(capacity=2))
        h = {"x-api-key": FREE_KEY, "x-forwarded-for": "203.0.113.7"}
        for i in range(2):
            r = http_request(self.decision_port, "DELETE", "/v1/things/7", headers=h)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.header("X-Tollgate-Key-Id"), "k-free", r)
            self.assertEqual(r.header("RateLimit-Remaining"), str(1 - i), r)
        r = http_request(self.decision_port, "DELETE", "/v1/things/7", headers=h)
        self.assertRateLimited(r)
        # The route is chosen by the original method and path: POST /login is per address.
        r = http_request(self.decision_port, "POST", "/login",
                         headers={"x-forwarded-for": "203.0.113.7", "content-length": "0"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "1", r)
        self.assertEqual(self.upstream.stats()["received"], 0)


# ---------------------------------------------------------------------------------------------
# Envoy RLS v3 over gRPC


def descriptor(**entries):
    return {"entries": [{"key": k, "value": v} for k, v in entries.items()]}


def call(domain="api", descriptors=(), hits_addend=0):
    return {"domain": domain, "descriptors": list(descriptors), "hits_addend": hits_addend}


@unittest.skipIf(os.environ.get("TOLLGATE_RLS") == "OFF",
                 "the binary is built without gRPC (-DTOLLGATE_RLS=OFF)")
class RlsTests(DecisionTestCase):
    """tollgate's RateLimitService/ShouldRateLimit through the real binary, called by grpc-js."""

    DOMAINS = [{"domain": "api", "key_entry": "api_key", "ip_entry": "remote_address"}]

    def setUp(self):
        super().setUp()
        missing = harness.missing_grpc_client()
        if missing:
            self.fail(missing)

    def rls(self, calls):
        """Sends the calls one after the other on one gRPC channel; returns the responses."""
        argv = ["node", RLS_CLIENT, "--target", "127.0.0.1:%d" % self.rls_port,
                "--proto", RLS_PROTO]
        p = subprocess.run(argv, input=json.dumps(calls).encode(), capture_output=True,
                           timeout=60, cwd=NODE_DIR)
        out = p.stdout.decode(errors="replace")
        self.assertEqual(p.returncode, 0, "rls_client.js failed: %s\n%s" % (
            out, p.stderr.decode(errors="replace")))
        responses = json.loads(out)["responses"]
        self.assertEqual(len(responses), len(calls))
        return responses

    def health(self, service=""):
        """grpc.health.v1.Health/Check on the RLS listener, through grpc-js."""
        p = subprocess.run(["node", HEALTH_CLIENT, "--target", "127.0.0.1:%d" % self.rls_port,
                            "--service", service], capture_output=True, timeout=30,
                           cwd=NODE_DIR)
        out = json.loads(p.stdout.decode(errors="replace") or "{}")
        self.assertEqual(p.returncode, 0, (out, p.stderr.decode(errors="replace")))
        return out["status"]

    def test_health_is_serving_then_not_serving_while_draining(self):
        self.start_decision(config(), rls_domains=self.DOMAINS)
        self.assertEqual(self.health(), "SERVING")
        self.assertEqual(self.health("envoy.service.ratelimit.v3.RateLimitService"), "SERVING")
        # SIGTERM while a proxied request is in flight (the upstream answers after 3 s): the
        # drain waits for it, and meanwhile the RLS listener says NOT_SERVING, so probes and
        # Envoy's health checks take this replica out before it goes.
        results = []
        slow = threading.Thread(target=lambda: results.append(
            self.gateway.get("/slow?ms=3000", key=FREE_KEY).status))
        slow.start()
        self.assertTrue(harness.wait_until(lambda: self.upstream.stats()["in_progress"] >= 1),
                        "the slow request never reached the upstream")
        os.kill(self.gateway.pid, signal.SIGTERM)
        status = None
        for _ in deadline_loop(2.5, step=0.1):
            status = self.health()
            if status == "NOT_SERVING":
                break
        self.assertEqual(status, "NOT_SERVING")
        slow.join(timeout=10)
        self.assertEqual(results, [200])

    def test_ok_until_the_budget_then_over_limit_with_duration_until_reset(self):
        self.start_decision(config(capacity=3), rls_domains=self.DOMAINS)
        res = self.rls([call(descriptors=[descriptor(api_key=FREE_KEY)])] * 5)
        for i in range(3):
            self.assertEqual(res[i]["overall_code"], "OK", res[i])
            st = res[i]["statuses"]
            self.assertEqual(len(st), 1, res[i])
            self.assertEqual(st[0]["code"], "OK")
            self.assertEqual(st[0]["limit_remaining"], 2 - i)
            self.assertEqual(st[0]["current_limit"]["name"], "burst")
            # 0.01 tokens per second: 36 per hour, the first unit with a whole request.
            self.assertEqual(st[0]["current_limit"]["unit"], "HOUR")
            self.assertEqual(st[0]["current_limit"]["requests_per_unit"], 36)
            # The rate-limit headers, for Envoy to add to the response it forwards.
            headers = {h["key"]: h["value"] for h in res[i]["response_headers_to_add"]}
            self.assertEqual(headers.get("RateLimit-Remaining"), str(2 - i), headers)
            self.assertEqual(headers.get("RateLimit-Policy"), '"burst";q=3;w=300', headers)
            self.assertNotIn("Retry-After", headers)
        for r in res[3:]:
            self.assertEqual(r["overall_code"], "OVER_LIMIT", r)
            st = r["statuses"][0]
            self.assertEqual(st["code"], "OVER_LIMIT")
            self.assertEqual(st["limit_remaining"], 0)
            # One token at 0.01/s: 100 s, also sent for Envoy to add to its 429.
            self.assertEqual(int(st["duration_until_reset"]["seconds"]), 100, st)
            headers = {h["key"]: h["value"] for h in r["response_headers_to_add"]}
            self.assertEqual(headers.get("Retry-After"), "100", headers)
            self.assertEqual(headers.get("RateLimit-Remaining"), "0", headers)
        m = self.gateway.metrics()
        self.assertEqual(m.get("tollgate_rls_ok_total"), 3)
        self.assertEqual(m.get("tollgate_rls_over_limit_total"), 2)

    def test_hits_addend_is_the_request_cost(self):
        self.start_decision(config(capacity=5), rls_domains=self.DOMAINS)
        d = [descriptor(api_key=FREE_KEY)]
        res = self.rls([call(descriptors=d, hits_addend=3),   # 5 -> 2
                        call(descriptors=d, hits_addend=3),   # rejected: consumes nothing
                        call(descriptors=d, hits_addend=2),   # 2 -> 0
                        call(descriptors=d, hits_addend=0)])  # 0 means 1: rejected
        self.assertEqual([r["overall_code"] for r in res], ["OK", "OVER_LIMIT", "OK", "OVER_LIMIT"])
        self.assertEqual([r["statuses"][0]["limit_remaining"] for r in res], [2, 2, 0, 0])

    def test_a_descriptor_hits_addend_overrides_the_requests(self):
        # RateLimitDescriptor.hits_addend (field 3, a UInt64Value), as newer Envoys send it: the
        # descriptor's own cost; 0 reads without consuming.
        self.start_decision(config(capacity=5), rls_domains=self.DOMAINS)
        own = lambda n: dict(descriptor(api_key=FREE_KEY), hits_addend={"value": str(n)})
        res = self.rls([call(descriptors=[own(4)], hits_addend=1),   # 5 -> 1
                        call(descriptors=[own(0)], hits_addend=9),   # a read: 1 left
                        call(descriptors=[own(2)], hits_addend=1),   # rejected
                        call(descriptors=[descriptor(api_key=FREE_KEY)], hits_addend=1)])  # 1 -> 0
        self.assertEqual([r["overall_code"] for r in res], ["OK", "OK", "OVER_LIMIT", "OK"])
        self.assertEqual([r["statuses"][0]["limit_remaining"] for r in res], [1, 1, 1, 0])

    def test_unknown_domain_answers_ok(self):
        self.start_decision(config(capacity=1), rls_domains=self.DOMAINS)
        res = self.rls([call(domain="other", descriptors=[descriptor(api_key=FREE_KEY)])] * 3)
        for r in res:
            self.assertEqual(r["overall_code"], "OK", r)
            self.assertEqual([s["code"] for s in r["statuses"]], ["OK"], r)
        self.assertEqual(self.gateway.metrics().get("tollgate_rls_unknown_domain_total"), 3)
        # Nothing was spent on the key's budget.
        res = self.rls([call(descriptors=[descriptor(api_key=FREE_KEY)])])
        self.assertEqual(res[0]["statuses"][0]["limit_remaining"], 0)
        self.assertEqual(res[0]["overall_code"], "OK")

    def test_remote_address_entry_gets_the_anonymous_limits(self):
        self.start_decision(config(), rls_domains=self.DOMAINS)
        a = [descriptor(remote_address="203.0.113.7")]
        res = self.rls([call(descriptors=a)] * 3 +
                       [call(descriptors=[descriptor(remote_address="203.0.113.8")])])
        self.assertEqual([r["overall_code"] for r in res], ["OK", "OK", "OVER_LIMIT", "OK"])
        self.assertEqual(res[0]["statuses"][0]["current_limit"]["name"], "ip")

    def test_unknown_key_is_over_limit_and_unmapped_descriptor_ok(self):
        self.start_decision(config(), rls_domains=self.DOMAINS)
        res = self.rls([call(descriptors=[descriptor(api_key=UNKNOWN_KEY)]),
                        call(descriptors=[descriptor(path="/v1/things")]),
                        call(descriptors=[descriptor(api_key=FREE_KEY),
                                          descriptor(api_key=UNKNOWN_KEY)])])
        self.assertEqual(res[0]["overall_code"], "OVER_LIMIT", res[0])
        self.assertEqual(res[1]["overall_code"], "OK", res[1])
        self.assertEqual([s["code"] for s in res[2]["statuses"]], ["OK", "OVER_LIMIT"], res[2])
        self.assertEqual(res[2]["overall_code"], "OVER_LIMIT", res[2])

    def test_rls_and_http_decisions_share_one_budget(self):
        self.start_decision(config(capacity=5), rls_domains=self.DOMAINS)
        self.rls([call(descriptors=[descriptor(api_key=FREE_KEY)], hits_addend=2)])
        r = self.decide("GET", "/v1/things", key=FREE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("RateLimit-Remaining"), "2", r)

    def test_bearer_value_from_the_authorization_header_is_a_key(self):
        # Envoy's request_headers action copies a header's value as it is: with keys in
        # `Authorization: Bearer <key>` (the gateway's default), the descriptor holds
        # "Bearer <key>", which must identify the key as it does on the HTTP listeners.
        # Fails today: src/rls/rls_server.cpp hashes the entry's value as it is, so the key is
        # unknown and every such request is OVER_LIMIT (docs/decision-service.md, known issue).
        self.start_decision(config(capacity=3), rls_domains=self.DOMAINS)
        res = self.rls([call(descriptors=[descriptor(api_key="Bearer " + FREE_KEY)])])
        self.assertEqual(res[0]["overall_code"], "OK", res[0])
        self.assertEqual(res[0]["statuses"][0]["limit_remaining"], 2, res[0])


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
