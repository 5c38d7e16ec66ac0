#!/usr/bin/env python3
"""Several upstreams (issue 33, `upstreams:`): named groups of endpoints, balanced, health
checked, chosen by route and by host, through the real binary and real upstreams
(tests/support/upstream.py) on 127.0.0.1.

    python3 test_upstream_groups.py --binary build/tollgate [-v]

- BalanceTests: round robin spreads evenly; least outstanding sends to the idle endpoint while
  another holds slow requests.
- PassiveHealthTests: an endpoint stopped by PID is ejected after N failures while idempotent
  requests and POSTs that were never sent go to the others with no client-visible failure; it is
  admitted again after its back-off once it is back.
- ActiveHealthTests: an endpoint whose health path answers 500 is taken out and brought back.
- NoHealthyTests: every endpoint out answers 503 no_healthy_upstream with Retry-After at once,
  far below the timeouts, a request with an unsent body too.
- HttpsEndpointTests: http and https endpoints in one group, verified, health checked.
- ReloadTests: a reload may move routes between groups; one that changes the groups is refused.
- StartupTests: check-config refuses bad groups and routes, naming the field.
- VirtualHostTests: a table of Host spellings (case, port, trailing dot, absent, absolute-form,
  X-Forwarded-Host, spellings refused) and the route and group each meets; routes choosing groups
  by path.
"""
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase  # noqa: E402

KEY = "tg_live_groups_key"


def gateway_config(upstreams, routes=None, **server):
    return {
        "server": dict({"threads": 2, "access_log": False}, **server),
        "store": {"type": "memory"},
        "plans": {"free": {"limits": [{"name": "burst", "algorithm": "token_bucket",
                                       "capacity": 10000, "refill_per_second": 1000}]}},
        "keys": [{"key": KEY, "id": "k1", "plan": "free"}],
        "routes": routes if routes is not None else [{"path": "/*", "identity": "none",
                                                      "upstream": "g"}],
        "upstreams": upstreams,
    }


def start_upstream_on(fixture, port):
    """An upstream on `port` again (after the one there was stopped)."""
    proc = fixture.spawn("upstream", [sys.executable, harness.UPSTREAM_SCRIPT, "--port",
                                      str(port)])
    for _ in harness.deadline_loop(harness.START_TIMEOUT_S):
        try:
            if harness.http_request(port, "GET", "/__stats", timeout=2).status == 200:
                return proc
        except OSError:
            pass
    raise AssertionError("upstream not answering on port %d" % port)


def received(port):
    return harness.http_request(port, "GET", "/__stats").json()["received"]


class GroupsCase(GatewayTestCase):

    def upstreams(self, n):
        self.ups = [harness.Upstream(self) for _ in range(n)]
        return [u.url for u in self.ups]

    def state(self, group, url):
        return self.gw.metrics().get(
            'tollgate_upstream_endpoint_state{group="%s",endpoint="%s"}' % (group, url))

    def ejections(self, group, url):
        return self.gw.metrics().get(
            'tollgate_upstream_ejections_total{group="%s",endpoint="%s"}' % (group, url), 0)

    def counts(self):
        return [received(u.port) for u in self.ups]


class BalanceTests(GroupsCase):

    def test_round_robin_spreads_evenly(self):
        urls = self.upstreams(3)
        self.gw = harness.Gateway(self, gateway_config({"g": {"endpoints": urls}}))
        for i in range(30):
            self.assertEqual(self.gw.get("/echo/%d" % i).status, 200)
        self.assertEqual(self.counts(), [10, 10, 10])
        m = self.gw.metrics()
        for url in urls:
            key = 'tollgate_upstream_endpoint_requests_total{group="g",endpoint="%s"}' % url
            self.assertEqual(m.get(key), 10, key)
            self.assertEqual(self.state("g", url), 1)

    def test_least_outstanding_prefers_the_idle_endpoint(self):
        urls = self.upstreams(2)
        self.gw = harness.Gateway(self, gateway_config(
            {"g": {"endpoints": urls, "balance": "least_outstanding"}}))
        import threading
        # Slow enough to outlast the fast requests on a loaded machine.
        slow = threading.Thread(target=lambda: self.gw.get("/slow?ms=8000", timeout=15))
        slow.start()
        try:
            self.assertTrue(harness.wait_until(
                lambda: sum(u.stats()["in_progress"] for u in self.ups) == 1))
            busy = [u.stats()["in_progress"] for u in self.ups].index(1)
            for i in range(12):
                self.assertEqual(self.gw.get("/echo/%d" % i).status, 200)
            counts = self.counts()
            self.assertEqual(counts[busy], 1, counts)       # the slow request alone
            self.assertEqual(counts[1 - busy], 12, counts)  # every fast one on the idle one
        finally:
            slow.join(timeout=15)


class PassiveHealthTests(GroupsCase):

    def test_stopped_endpoint_is_ejected_and_admitted_again(self):
        urls = self.upstreams(3)
        self.gw = harness.Gateway(self, gateway_config({"g": {
            "endpoints": urls,
            "passive_health": {"consecutive_failures": 2, "base_ejection_ms": 1500,
                               "max_ejection_ms": 10000}}}))
        for i in range(6):
            self.assertEqual(self.gw.get("/warm/%d" % i).status, 200)
        dead = self.ups[1]
        dead.process.stop()  # by its PID
        # Every request answered by the others: connects to the dead one fail and go on to
        # another endpoint; a POST too (nothing of it was sent).
        for i in range(20):
            r = self.gw.get("/after/%d" % i)
            self.assertEqual(r.status, 200, r)
            r = self.gw.request("POST", "/post/%d" % i, body=b"x" * 100,
                                headers={"Content-Type": "text/plain"})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["body_bytes"], 100)
        self.assertEqual(self.state("g", dead.url), 0)
        self.assertEqual(self.ejections("g", dead.url), 1)
        self.assertGreaterEqual(self.gw.metrics().get("tollgate_upstream_retries_total", 0), 2)
        self.assertIn(b"upstream endpoint ejected", self.gw.process.read_stderr())
        # The live page's data shows each endpoint's state.
        data = self.gw.admin("GET", "/admin/ui/data").json()
        group = [u for u in data["upstreams"] if u["group"] == "g"][0]
        states = {e["url"]: e["state"] for e in group["endpoints"]}
        self.assertEqual(states, {urls[0]: "admitted", urls[1]: "ejected", urls[2]: "admitted"})
        self.assertEqual(group["balance"], "round_robin")
        self.assertEqual([u["group"] for u in data["upstreams"]], ["default", "g"])
        # Back on its port: admitted again after the back-off, and served.
        start_upstream_on(self, dead.port)
        self.assertTrue(harness.wait_until(lambda: self.state("g", dead.url) == 1, timeout=5))
        for i in range(9):
            self.assertEqual(self.gw.get("/back/%d" % i).status, 200)
        self.assertGreaterEqual(received(dead.port), 2)

    def test_5xx_answers_eject_after_n_in_a_row(self):
        urls = self.upstreams(2)
        self.gw = harness.Gateway(self, gateway_config({"g": {
            "endpoints": urls,
            "passive_health": {"consecutive_failures": 3, "base_ejection_ms": 60000,
                               "max_ejection_ms": 60000}}}))
        # A 5xx is relayed (it is an answer), and counted against its endpoint.
        for _ in range(6):
            self.assertEqual(self.gw.get("/status/500").status, 500)
        for url in urls:
            self.assertEqual(self.state("g", url), 0)
        r = self.gw.get("/echo")
        self.assertEqual((r.status, r.json()["code"]), (503, "no_healthy_upstream"))


class ActiveHealthTests(GroupsCase):

    def test_health_path_answering_500_takes_out_and_brings_back(self):
        urls = self.upstreams(2)
        self.gw = harness.Gateway(self, gateway_config({"g": {
            "endpoints": urls,
            "active_health": {"path": "/__health", "interval_ms": 200, "timeout_ms": 150}}}))
        bad = self.ups[0]
        harness.http_request(bad.port, "POST", "/__health?status=500")
        self.assertTrue(harness.wait_until(lambda: self.state("g", bad.url) == 0, timeout=5))
        self.assertEqual(self.ejections("g", bad.url), 1)
        before = self.counts()
        for i in range(10):
            self.assertEqual(self.gw.get("/echo/%d" % i).status, 200)
        after = self.counts()
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (0, 10))
        harness.http_request(bad.port, "POST", "/__health?status=200")
        self.assertTrue(harness.wait_until(lambda: self.state("g", bad.url) == 1, timeout=5))
        for i in range(10):
            self.assertEqual(self.gw.get("/echo/%d" % i).status, 200)
        self.assertEqual(self.counts()[0] - after[0], 5)
        self.assertIn(b"failed its health checks", self.gw.process.read_stderr())
        self.assertIn(b"passed its health checks", self.gw.process.read_stderr())


class NoHealthyTests(GroupsCase):

    def test_every_endpoint_out_answers_503_at_once(self):
        urls = self.upstreams(2)
        self.gw = harness.Gateway(self, gateway_config({"g": {
            "endpoints": urls, "connect_timeout_ms": 5000, "timeout_ms": 10000,
            "passive_health": {"consecutive_failures": 1, "base_ejection_ms": 30000,
                               "max_ejection_ms": 30000}}}))
        for u in self.ups:
            u.process.stop()
        r = self.gw.get("/first")  # both tried, both ejected
        self.assertEqual(r.status, 502, r)
        for _ in range(5):
            t0 = time.monotonic()
            r = self.gw.get("/echo")
            took = time.monotonic() - t0
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.json()["code"], "no_healthy_upstream")
            self.assertEqual(r.header("Content-Type"), "application/problem+json")
            self.assertTrue(25 <= int(r.header("Retry-After")) <= 30, r.header("Retry-After"))
            self.assertLess(took, 0.5)
        # A request whose body never comes is answered at once too, not read.
        t0 = time.monotonic()
        raw, closed, _ = harness.raw_exchange(
            self.gw.port, b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nxx",
            timeout=5)
        self.assertEqual(harness.status_of(raw), 503, raw[:200])
        self.assertIn(b"no_healthy_upstream", raw)
        self.assertLess(time.monotonic() - t0, 1.0)
        m = self.gw.metrics()
        self.assertGreaterEqual(m.get('tollgate_upstream_no_healthy_total{group="g"}', 0), 6, m)

    def test_every_endpoint_failing_its_checks_answers_503(self):
        urls = self.upstreams(2)
        self.gw = harness.Gateway(self, gateway_config({"g": {
            "endpoints": urls,
            "active_health": {"path": "/__health", "interval_ms": 2000, "timeout_ms": 150}}}))
        for u in self.ups:
            harness.http_request(u.port, "POST", "/__health?status=503")
        self.assertTrue(harness.wait_until(
            lambda: all(self.state("g", u.url) == 0 for u in self.ups), timeout=8))
        r = self.gw.get("/echo")
        self.assertEqual((r.status, r.json()["code"]), (503, "no_healthy_upstream"))
        self.assertEqual(r.header("Retry-After"), "2")


def raw_get(port, target, host_lines, key=None):
    """A raw request (the Host lines as given, none for HTTP/1.0), its status."""
    version = "HTTP/1.1" if host_lines else "HTTP/1.0"
    head = "GET %s %s\r\n" % (target, version) + "".join(h + "\r\n" for h in host_lines)
    if key:
        head += "X-API-Key: %s\r\n" % key
    head += "Connection: close\r\n\r\n"
    raw, _, _ = harness.raw_exchange(port, head.encode(), timeout=5)
    return harness.status_of(raw), raw


class VirtualHostTests(GroupsCase):

    def setUp(self):
        super().setUp()
        urls = self.upstreams(3)  # api, static, default
        self.api, self.static, self.default = self.ups
        routes = [
            # The strict virtual host: a key needed.
            {"host": "api.example.com", "path": "/*", "identity": "key", "upstream": "api"},
            {"host": ["*.static.example.com"], "path": "/*", "identity": "none",
             "upstream": "static"},
            {"path": "/to-static/*", "identity": "none", "upstream": "static"},
            {"path": "/*", "identity": "none"},
        ]
        cfg = gateway_config({"api": {"endpoints": [urls[0]]},
                              "static": {"endpoints": [urls[1]]}}, routes)
        cfg["upstream"] = {"url": urls[2]}
        self.gw = harness.Gateway(self, cfg)

    def test_host_spellings(self):
        # (row, Host lines or an absolute-form target, where it goes: the group, or a status)
        rows = [
            ("exact", ["Host: api.example.com"], "api"),
            ("upper case", ["Host: API.Example.COM"], "api"),
            ("with a port", ["Host: api.example.com:8443"], "api"),
            ("trailing dot", ["Host: api.example.com."], "api"),
            ("trailing dot and port", ["Host: Api.Example.Com.:80"], "api"),
            ("wildcard", ["Host: a.static.example.com"], "static"),
            ("wildcard two deep", ["Host: x.Y.static.example.com:1"], "static"),
            ("wildcard's own name", ["Host: static.example.com"], "default"),
            ("another host", ["Host: other.example.com"], "default"),
            ("suffix without a dot", ["Host: evilapi.example.com"], "default"),
            ("prefix of the name", ["Host: api.example.com.evil"], "default"),
            ("absent (HTTP/1.0)", [], "default"),
            ("X-Forwarded-Host is not the host",
             ["Host: other.example.com", "X-Forwarded-Host: api.example.com"], "default"),
            # Spellings an upstream might read as another name: refused.
            ("two trailing dots", ["Host: api.example.com.."], 400),
            ("percent-encoded dot", ["Host: api%2eexample.com"], 400),
            ("empty label", ["Host: api..example.com"], 400),
            ("two Host lines", ["Host: other.example.com", "Host: api.example.com"], 400),
            ("empty Host", ["Host: "], "default"),
        ]
        for row, hosts, want in rows:
            with self.subTest(row):
                before = self.counts()
                status, raw = raw_get(self.gw.port, "/v1/items", hosts, key=KEY)
                after = self.counts()
                if isinstance(want, int):
                    self.assertEqual(status, want, raw[:300])
                    self.assertEqual(after, before)
                    continue
                self.assertEqual(status, 200, raw[:300])
                got = [a - b for a, b in zip(after, before)]
                self.assertEqual(got, [int(want == g) for g in ("api", "static", "default")])
                if want == "api":
                    # The strict route whatever the spelling: no key, no entry.
                    status, raw = raw_get(self.gw.port, "/v1/items", hosts)
                    self.assertEqual(status, 401, raw[:300])

    def test_absolute_form_target_is_the_host(self):
        rows = [
            ("authority api, Host other", "http://api.example.com/v1/x", "other.example.com",
             "api"),
            ("authority other, Host api", "http://other.example.com/v1/x", "api.example.com",
             "default"),
        ]
        for row, target, host, want in rows:
            with self.subTest(row):
                before = self.counts()
                status, raw = raw_get(self.gw.port, target, ["Host: " + host], key=KEY)
                self.assertEqual(status, 200, raw[:300])
                got = [a - b for a, b in zip(self.counts(), before)]
                self.assertEqual(got, [int(want == g) for g in ("api", "static", "default")])
                body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
                # The upstream gets the host the route was chosen by.
                self.assertEqual(body["headers"]["Host"], target.split("/")[2])

    def test_explain_meets_the_route_of_its_host(self):
        rows = [("", "none"), ("&host=API.example.com:443", "key"),
                ("&host=a.static.example.com", "none"), ("&host=other.example.com", "none")]
        for host, identity in rows:
            with self.subTest(host=host):
                r = self.gw.admin("GET", "/admin/explain?key_id=k1&path=/v1/items" + host)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["route"]["identity"], identity)
        r = self.gw.admin("GET", "/admin/explain?key_id=k1&path=/v1/items&host=api..example.com")
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "invalid_host")

    def test_routes_choose_groups_by_path(self):
        for path, want in [("/to-static/a", "static"), ("/TO-STATIC/b", "static"),
                           ("/elsewhere", "default")]:
            with self.subTest(path):
                before = self.counts()
                self.assertEqual(self.gw.get(path, headers={"Host": "x.test"}).status, 200)
                got = [a - b for a, b in zip(self.counts(), before)]
                self.assertEqual(got, [int(want == g) for g in ("api", "static", "default")])


class HttpsEndpointTests(GroupsCase):

    def test_http_and_https_endpoints_in_one_group_with_checks(self):
        from test_tls import Certs
        certs = Certs(os.path.join(self.tmpdir, "certs"))
        leaf = certs.leaf("localhost", ["localhost"])
        secure = harness.Upstream(self, tls={"cert": leaf[0], "key": leaf[1]})
        plain = harness.Upstream(self)
        self.ups = [secure, plain]
        self.gw = harness.Gateway(self, gateway_config({"g": {
            "endpoints": [secure.url, plain.url],
            "tls": {"ca_file": certs.ca, "server_name": "localhost"},
            "active_health": {"path": "/__health", "interval_ms": 200, "timeout_ms": 150}}}))
        for i in range(10):
            self.assertEqual(self.gw.get("/echo/%d" % i).status, 200)
        self.assertEqual([u.stats()["received"] for u in self.ups], [5, 5])
        # The checks reach the https endpoint too: one that answers 500 is taken out.
        harness.http_request(secure.port, "POST", "/__health?status=500", tls=True)
        self.assertTrue(harness.wait_until(lambda: self.state("g", secure.url) == 0, timeout=5))
        self.assertEqual(self.state("g", plain.url), 1)


class ReloadTests(GroupsCase):

    def test_routes_may_change_group_but_the_groups_need_a_restart(self):
        urls = self.upstreams(2)
        cfg = gateway_config({"g": {"endpoints": [urls[0]]}})
        cfg["upstream"] = {"url": urls[1]}
        self.gw = harness.Gateway(self, cfg)
        self.assertEqual(self.gw.get("/a").status, 200)
        self.assertEqual(self.counts(), [1, 0])
        changed = dict(cfg, upstreams={"g": {"endpoints": [urls[0]]},
                                       "h": {"endpoints": [urls[1]]}})
        self.gw.rewrite(changed)
        r = self.gw.admin("POST", "/admin/reload")
        self.assertEqual(r.status, 400, r)
        self.assertIn("upstreams: the groups changed; restart to change them", r.json()["detail"])
        self.assertEqual(self.gw.get("/b").status, 200)  # the running configuration
        self.assertEqual(self.counts(), [2, 0])
        self.gw.rewrite(dict(cfg, routes=[{"path": "/*", "identity": "none"}]))
        self.assertEqual(self.gw.admin("POST", "/admin/reload").status, 200)
        self.assertEqual(self.gw.get("/c").status, 200)  # now the default group
        self.assertEqual(self.counts(), [2, 1])
        warning = b"changed endpoints or settings of a group apply at the next restart"
        self.assertNotIn(warning, self.gw.process.read_stderr())
        # Another endpoint in a group: reloaded, the running endpoints kept, and said so.
        self.gw.rewrite(dict(cfg, upstreams={"g": {"endpoints": [urls[1]]}}))
        self.assertEqual(self.gw.admin("POST", "/admin/reload").status, 200)
        self.assertIn(warning, self.gw.process.read_stderr())


class StartupTests(GroupsCase):

    def test_check_config_refuses_naming_the_field(self):
        rows = [
            ("unknown group", {"g": {"endpoints": ["http://127.0.0.1:1"]}},
             [{"path": "/*", "upstream": "nope"}], "routes[0].upstream: no upstream group 'nope'"),
            ("no endpoints", {"g": {"balance": "round_robin"}}, [],
             "upstreams.g.endpoints: required"),
            ("bad scheme", {"g": {"endpoints": ["ftp://127.0.0.1:1"]}}, [],
             "upstreams.g.endpoints[0]: must start with http:// or https://"),
            ("bad balance", {"g": {"endpoints": ["http://127.0.0.1:1"], "balance": "random"}}, [],
             "upstreams.g.balance: must be round_robin or least_outstanding"),
            ("host with a port", {"g": {"endpoints": ["http://127.0.0.1:1"]}},
             [{"path": "/*", "host": "a.test:80"}], "routes[0].host: must be a host name"),
        ]
        for row, upstreams, routes, message in rows:
            with self.subTest(row):
                path = os.path.join(self.tmpdir, "bad.yaml")
                with open(path, "w") as f:
                    json.dump(gateway_config(upstreams, routes), f)
                import subprocess
                p = subprocess.run([harness.BINARY, "check-config", path],
                                   capture_output=True, timeout=20)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(message.encode(), p.stdout + p.stderr)


if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
