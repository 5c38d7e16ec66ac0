#!/usr/bin/env python3
"""Integration tests for the live page (issue 23): GET /admin/ui and GET /admin/ui/data on the
admin listener.

    python3 test_admin_ui.py --binary build/tollgate [-v]

The real binary and upstream on 127.0.0.1, traffic from three keys (one hammering past its
burst, one admitted, one in shadow mode), and the page opened in headless Chromium (Debian's
`chromium`, driven by playwright-core: node/ui_check.js), which must draw its charts from the
admin listener alone. The screenshot is written to test-artifacts/admin-ui.png beside the
binary (or under TOLLGATE_TEST_ARTIFACTS), and its path printed.

Without chromium, node or playwright-core the browser test is skipped, with the reason, except
under CI=true, where it fails.
"""
import json
import os
import re
import subprocess
import sys
import threading
import http.client
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GatewayTestCase, SLOW, burst, wait_until  # noqa: E402

NODE_DIR = os.path.join(harness.HERE, "node")

HAMMER_KEY = "sk-live-hammer0123456789abcdef"
TEAM_KEY = "sk-live-team00123456789abcdef"
TRIAL_KEY = "sk-live-trial0123456789abcdef"
# Key ids and accounts come from configuration or PostgreSQL rows: the page must show them as
# text. The hammering key's id is the one at the top of the offenders.
HOSTILE_ID = '<img src=x onerror="window.__pwned=1">'
HOSTILE_ACCOUNT = "<script>window.__pwned=2</script>"


def quota(name, period, allowance, ceiling):
    return {"name": name, "algorithm": "quota", "period": period, "allowance": allowance,
            "ceiling": ceiling}


def ui_config():
    return {
        "server": {"threads": 2, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {
            "free": {"limits": [burst(5), quota("daily", "day", 1000, 10000),
                                quota("monthly", "month", 20000, 200000)]},
            "team": {"limits": [burst(100000, refill="100000"),
                                quota("daily", "day", 50000, 500000)]},
            "trial": {"mode": "shadow", "limits": [burst(1)]},
        },
        "keys": [
            {"key": HAMMER_KEY, "id": HOSTILE_ID, "account": HOSTILE_ACCOUNT, "plan": "free"},
            {"key": TEAM_KEY, "id": "k-team", "account": "globex", "plan": "team"},
            {"key": TRIAL_KEY, "id": "k-trial", "account": "initech", "plan": "trial"},
        ],
        "headers": ["ietf"],
    }


class Traffic:
    """One thread per key, each sending about `per_second` requests a second on a keep-alive
    connection until stopped (bounded by max_seconds)."""

    def __init__(self, port, keys, per_second=40, max_seconds=90.0):
        self.port, self.per_second, self.max_seconds = port, per_second, max_seconds
        self.stop_event = threading.Event()
        self.sent = {k: 0 for k in keys}
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in keys]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _run(self, key):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=harness.REQUEST_TIMEOUT_S)
        end = time.monotonic() + self.max_seconds
        try:
            while not self.stop_event.is_set() and time.monotonic() < end:
                try:
                    conn.request("GET", "/v1/things", headers={"Authorization": "Bearer " + key})
                    conn.getresponse().read()
                    self.sent[key] += 1
                except (OSError, http.client.HTTPException):
                    conn.close()
                self.stop_event.wait(1.0 / self.per_second)
        finally:
            conn.close()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=harness.REQUEST_TIMEOUT_S + 5)


def artifacts_dir():
    d = os.environ.get("TOLLGATE_TEST_ARTIFACTS") or os.path.join(
        os.path.dirname(harness.BINARY), "test-artifacts")
    os.makedirs(d, exist_ok=True)
    return os.path.abspath(d)


def number(text):
    return float(text.replace(",", ""))


class AdminUiTests(GatewayTestCase):

    def start_with_traffic(self):
        gw = self.start(ui_config())
        self.traffic = Traffic(gw.port, [HAMMER_KEY, TEAM_KEY, TRIAL_KEY]).start()
        self.addCleanup(self.traffic.stop)
        self.assertTrue(wait_until(lambda: all(n >= 10 for n in self.traffic.sent.values()),
                                   timeout=15), self.traffic.sent)
        return gw

    def logged_config_version(self, gw, msg):
        """The config_version of the last event-log line with this msg (stderr)."""
        versions = []
        for line in gw.process.read_stderr().decode(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("msg") == msg and "config_version" in event:
                versions.append(event["config_version"])
        return versions[-1] if versions else None

    def test_data_endpoint_has_everything_the_page_shows(self):
        gw = self.start_with_traffic()
        self.assertTrue(wait_until(
            lambda: gw.admin("GET", "/admin/ui/data").json()["decisions"][0]["rejected"] > 0,
            timeout=10))
        r = gw.admin("GET", "/admin/ui/data")
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.header("Content-Type").startswith("application/json"), r)
        data = r.json()
        plans = {d["plan"]: d for d in data["decisions"]}
        self.assertEqual(list(plans), ["free", "team", "trial", "anonymous"])
        for d in plans.values():
            self.assertEqual(d["admitted"] + d["rejected"], d["decided"], d)
        self.assertGreater(plans["free"]["rejected"], 0, plans)
        self.assertEqual(plans["free"]["admitted"], 5, plans)  # the burst, never refilled
        self.assertGreater(plans["team"]["admitted"], 0, plans)
        self.assertEqual(plans["team"]["rejected"], 0, plans)
        self.assertGreater(plans["trial"]["shadow_rejected"], 0, plans)
        # The same counters as /metrics.
        m = gw.metrics()
        self.assertGreaterEqual(
            m['tollgate_rejections_total{plan="free",code="rate_limited"}'], plans["free"]["rejected"])
        self.assertEqual(data["top"]["keys"][0]["key"], HOSTILE_ID, data["top"])
        self.assertEqual(data["top"]["addresses"][0]["address"], "127.0.0.1", data["top"])
        accounts = {a["account"]: a for a in data["usage"]["accounts"]}
        self.assertEqual(set(accounts), {HOSTILE_ACCOUNT, "globex", "initech"})
        hammer = accounts[HOSTILE_ACCOUNT]
        self.assertEqual(hammer["plan"], "free")
        self.assertEqual((hammer["day"]["allowance"], hammer["day"]["ceiling"]), (1000, 10000))
        self.assertEqual((hammer["month"]["allowance"], hammer["month"]["ceiling"]), (20000, 200000))
        self.assertEqual(hammer["month"]["used"], 5, hammer)  # rejected requests cost nothing
        self.assertGreater(hammer["month"]["rejected"], 0, hammer)
        self.assertEqual((accounts["globex"]["day"]["allowance"], accounts["globex"]["day"]["ceiling"]),
                         (50000, 500000))
        self.assertIsNone(accounts["globex"]["month"]["allowance"])  # team has no monthly quota
        self.assertEqual(data["store"]["type"], "memory")
        self.assertEqual(data["store"]["status"], "ok")
        self.assertEqual(data["key_source"], {"type": "file", "status": "ok"})
        self.assertGreaterEqual(data["uptime_seconds"], 0)
        self.assertRegex(data["config"]["version"], r"^[0-9a-f]{12}$")
        self.assertEqual(data["config"]["version"], self.logged_config_version(gw, "listening"))

        # A reload that changes the file changes the version; the reload line says which.
        config = ui_config()
        config["plans"]["free"]["limits"][1] = quota("daily", "day", 1500, 15000)
        gw.rewrite(config)
        self.assertEqual(gw.admin("POST", "/admin/reload").status, 200)
        data2 = gw.admin("GET", "/admin/ui/data").json()
        self.assertNotEqual(data2["config"]["version"], data["config"]["version"])
        self.assertEqual(data2["config"]["version"],
                         self.logged_config_version(gw, "configuration reloaded"))
        self.assertGreater(data2["config"]["generation"], data["config"]["generation"])
        hammer2 = {a["account"]: a for a in data2["usage"]["accounts"]}[HOSTILE_ACCOUNT]
        self.assertEqual((hammer2["day"]["allowance"], hammer2["day"]["ceiling"]), (1500, 15000))

    def test_usage_rows_show_each_quota_against_its_own_limit(self):
        """Issue 31: an account with a free key and a team key is two rows, each key's use
        against its own plan's quota; keys of a plan counted per account share one row and one
        counter."""
        free_key, team_key = "sk-acme-free-0123456789abcdef", "sk-acme-team-0123456789abcdef"
        pool_a, pool_b = "sk-pool-a-0123456789abcdef", "sk-pool-b-0123456789abcdef"
        config = {
            "server": {"threads": 2, "access_log": False},
            "store": {"type": "memory"},
            "mode": "enforce",
            "plans": {
                "free": {"limits": [burst(100), quota("daily", "day", 10, 100),
                                    quota("monthly", "month", 100, 1000)]},
                "team": {"limits": [burst(100), quota("daily", "day", 5000, 50000)]},
                "pooled": {"scope": "account",
                           "limits": [burst(100), quota("daily", "day", 20, 200)]},
            },
            "keys": [
                {"key": free_key, "id": "k-acme-free", "account": "acme", "plan": "free"},
                {"key": team_key, "id": "k-acme-team", "account": "acme", "plan": "team"},
                {"key": pool_a, "id": "k-pool-a", "account": "pool", "plan": "pooled"},
                {"key": pool_b, "id": "k-pool-b", "account": "pool", "plan": "pooled"},
            ],
            "headers": ["ietf"],
        }
        gw = self.start(config)
        for key, n in ((free_key, 3), (team_key, 7), (pool_a, 2), (pool_b, 4)):
            for _ in range(n):
                self.assertEqual(gw.get("/echo", key=key).status, 200)
        usage = gw.admin("GET", "/admin/ui/data").json()["usage"]
        rows = {(a["account"], a["plan"]): a for a in usage["accounts"]}
        self.assertEqual(set(rows), {("acme", "free"), ("acme", "team"), ("pool", "pooled")},
                         usage)
        free, team, pool = rows["acme", "free"], rows["acme", "team"], rows["pool", "pooled"]
        self.assertEqual((free["key"], free["keys"]), ("k-acme-free", 1), free)
        self.assertEqual((free["day"]["used"], free["day"]["allowance"], free["day"]["ceiling"],
                          free["day"]["per"]), (3, 10, 100, "key"), free)
        self.assertEqual((free["month"]["used"], free["month"]["allowance"]), (3, 100), free)
        self.assertEqual((team["key"], team["day"]["used"], team["day"]["allowance"],
                          team["day"]["ceiling"]), ("k-acme-team", 7, 5000, 50000), team)
        self.assertIsNone(team["month"]["allowance"], team)  # no monthly quota: its own use
        self.assertEqual(team["month"]["used"], 7, team)
        self.assertIsNone(pool["key"], pool)
        self.assertEqual((pool["keys"], pool["day"]["used"], pool["day"]["allowance"],
                          pool["day"]["per"]), (2, 6, 20, "account"), pool)
        # The numbers are the quotas' own: what GET /v1/rate-limit says of each key's counter.
        for key, row in ((free_key, free), (team_key, team), (pool_a, pool)):
            q = gw.get("/v1/rate-limit", key=key).json()["quota"]
            self.assertEqual((q["used"], q["allowance"]),
                             (row["day"]["used"], row["day"]["allowance"]), (q, row))

    def test_page_files_are_served_with_a_strict_policy(self):
        gw = self.start(ui_config())
        page = gw.admin("GET", "/admin/ui")
        self.assertEqual(page.status, 200, page)
        self.assertEqual(page.header("Content-Type"), "text/html; charset=utf-8")
        csp = page.header("Content-Security-Policy")
        self.assertIn("default-src 'none'", csp)
        self.assertIn("script-src 'self'", csp)
        self.assertIn("connect-src 'self'", csp)
        self.assertNotIn("unsafe", csp)
        self.assertEqual(page.header("X-Content-Type-Options"), "nosniff")
        self.assertIn(b'<script src="/admin/ui/app.js"', page.body)
        self.assertNotRegex(page.body.decode(), r"(src|href)=\"(https?:)?//")  # nothing external
        self.assertEqual(gw.admin("GET", "/admin/ui/").body, page.body)
        js = gw.admin("GET", "/admin/ui/app.js")
        self.assertEqual((js.status, js.header("Content-Type")), (200, "text/javascript; charset=utf-8"))
        self.assertNotIn(b"innerHTML", js.body)
        css = gw.admin("GET", "/admin/ui/app.css")
        self.assertEqual((css.status, css.header("Content-Type")), (200, "text/css; charset=utf-8"))
        self.assertEqual(gw.admin("GET", "/admin/ui/missing.js").status, 404)
        self.assertEqual(gw.admin("POST", "/admin/ui").status, 404)

    def test_page_is_not_on_the_gateway_listener(self):
        """On the gateway listener /admin/* are the upstream's paths, as before."""
        gw = self.start(ui_config())
        for path in ("/admin/ui", "/admin/ui/data", "/admin/ui/app.js"):
            r = gw.get(path, key=TEAM_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["path"], path, r)  # the upstream's echo
            self.assertIsNone(r.header("Content-Security-Policy"), r)

    def test_browser_requests_from_elsewhere_are_refused(self):
        """Another site's page must not drive the admin API (CSRF) nor read the live page
        through a name it points at 127.0.0.1 (DNS rebinding); tools without these headers
        pass."""
        gw = self.start(ui_config())
        port = gw.admin_port
        own = "127.0.0.1:%d" % port
        cases = [  # (method, path, headers, expected status)
            ("GET", "/admin/ui/data", {}, 200),
            ("GET", "/admin/ui", {"Host": own}, 200),
            ("GET", "/admin/ui", {"Host": "localhost:%d" % port}, 200),
            ("GET", "/admin/ui", {"Host": "localhost"}, 200),
            ("GET", "/admin/ui/data", {"Host": "[::1]:%d" % port}, 200),
            ("GET", "/admin/ui/data", {"Host": own, "Sec-Fetch-Site": "same-origin"}, 200),
            ("GET", "/admin/ui/data", {"Host": own, "Origin": "http://" + own}, 200),
            ("GET", "/metrics", {"Host": "tollgate-admin.internal:9090"}, 421),
            ("GET", "/admin/ui", {"Host": "evil.example:%d" % port}, 421),
            ("GET", "/admin/ui/data", {"Host": "evil.example"}, 421),
            ("GET", "/admin/ui/app.js", {"Host": "127.0.0.1.evil.example"}, 421),
            ("GET", "/admin/ui/data", {"Host": "LOCALHOST.evil.example:%d" % port}, 421),
            ("GET", "/admin/ui/data", {"Host": "0x7f000001"}, 421),
            ("GET", "/admin/ui/data", {"Host": own, "Sec-Fetch-Site": "cross-site"}, 403),
            ("GET", "/admin/ui/data", {"Host": own, "Sec-Fetch-Site": "same-site"}, 403),
            ("POST", "/admin/reload", {"Host": own, "Origin": "http://evil.example"}, 403),
            ("POST", "/admin/reload", {"Host": own, "Origin": "null"}, 403),
            ("POST", "/admin/reload", {"Host": own, "Origin": "http://" + own + ".evil"}, 403),
            ("POST", "/admin/reload", {"Host": own, "Sec-Fetch-Site": "cross-site"}, 403),
            ("POST", "/admin/deny?kind=key&value=k-x", {"Host": own, "Sec-Fetch-Site": "cross-site"},
             403),
            ("POST", "/admin/reset", {"Host": own, "Origin": "https://evil.example",
                                      "Content-Type": "text/plain"}, 403),
            ("POST", "/admin/reload", {}, 200),
        ]
        for method, path, headers, want in cases:
            r = harness.http_request(port, method, path, headers=headers,
                                     body=b"{}" if method == "POST" else None)
            self.assertEqual(r.status, want, (method, path, headers, r))
            if want == 403:
                self.assertEqual(r.json()["code"], "cross_site_refused", r)
            if want == 421:  # DNS rebinding: test_admin_guard.py has every Host form
                self.assertEqual(r.json()["code"], "host_not_allowed", r)
        deny = harness.http_request(port, "GET", "/admin/deny")
        self.assertNotIn("k-x", deny.body.decode(), deny)

    def test_page_in_headless_chromium(self):
        why = harness.missing_browser()
        if why:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                self.fail(why + " (CI is set: the browser test must run)")
            self.skipTest(why)
        gw = self.start_with_traffic()
        screenshot = os.path.join(artifacts_dir(), "admin-ui.png")
        url = "http://127.0.0.1:%d/admin/ui" % gw.admin_port
        env = dict(os.environ)
        env.setdefault("CHROMIUM", os.environ.get("CHROMIUM") or "/usr/bin/chromium")
        proc = subprocess.run(["node", os.path.join(NODE_DIR, "ui_check.js"), url, screenshot,
                               "3", "30000"], cwd=NODE_DIR, env=env, capture_output=True,
                              timeout=90)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode(errors="replace"))
        print("\nadmin page screenshot: %s" % screenshot, file=sys.stderr)
        result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        print("admin page load (Navigation Timing): %s" % json.dumps(result["timing"]),
              file=sys.stderr)
        shown = result["shown"]
        self.assertTrue(os.path.getsize(screenshot) > 0)

        self.assertEqual(result["console_errors"], [])
        origin = "http://127.0.0.1:%d/" % gw.admin_port
        self.assertTrue(result["requests"], result)
        for u in result["requests"]:
            self.assertTrue(u.startswith(origin), "request to another host: %s" % u)

        # Every chart drew (and painted something) at least three times.
        charts = shown["charts"]
        self.assertEqual(sorted(c["chart"] for c in charts), ["rates"] * 4 + ["usage"], charts)
        for c in charts:
            self.assertGreaterEqual(c["drawn"], 3, c)
            self.assertGreater(c["painted"], 0, c)

        rates = {row[0]: row for row in shown["rates"]}
        self.assertEqual(list(rates), ["free", "team", "trial", "anonymous"], shown["rates"])
        self.assertGreater(number(rates["free"][2]), 0, rates)   # rejected/s
        self.assertGreater(number(rates["team"][1]), 0, rates)   # admitted/s
        self.assertEqual(number(rates["team"][2]), 0, rates)
        self.assertGreater(number(rates["trial"][3]), 0, rates)  # shadow-rejected/s

        # The hammering key tops the offenders, its hostile id shown as text, never as markup.
        self.assertEqual(shown["top_keys"][0][0], HOSTILE_ID, shown["top_keys"])
        self.assertEqual(shown["top_addresses"][0][0], "127.0.0.1", shown["top_addresses"])
        self.assertEqual(shown["images"], 0)
        self.assertEqual(shown["scripts"], 1)
        self.assertIsNone(shown["pwned"])

        usage = {row[0]: row for row in shown["usage"]}
        self.assertEqual(set(usage), {HOSTILE_ACCOUNT, "globex", "initech"}, shown["usage"])
        # account, plan, counted per, today used/allowance/ceiling, month used/allowance/ceiling,
        # rejected
        self.assertEqual(usage[HOSTILE_ACCOUNT][1], "free")
        self.assertEqual(usage[HOSTILE_ACCOUNT][2], "key " + HOSTILE_ID)
        self.assertEqual([number(x) for x in usage[HOSTILE_ACCOUNT][4:6]], [1000, 10000])
        self.assertEqual([number(x) for x in usage[HOSTILE_ACCOUNT][7:9]], [20000, 200000])
        self.assertEqual([number(x) for x in usage["globex"][4:6]], [50000, 500000])

        self.assertEqual(shown["store"], "ok")
        self.assertEqual(shown["key_source"], "ok")
        self.assertEqual(shown["error"], "")
        self.assertEqual(shown["config_version"], self.logged_config_version(gw, "listening"))
        self.assertEqual(shown["config_version"],
                         gw.admin("GET", "/admin/ui/data").json()["config"]["version"])


if __name__ == "__main__":
    harness.main(__file__)
