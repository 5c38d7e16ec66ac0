#!/usr/bin/env python3
"""Monitoring: tollgate's GET /metrics as Prometheus reads it, and what deploy/monitoring/ ships
(alert rules, their unit tests, the Grafana dashboard) checked against the metrics the binary
really exports, so a renamed metric fails here rather than on a dashboard in production.

    python3 test_monitoring.py --binary build/tollgate [unittest args, e.g. -v]

Needs promtool (Debian package `prometheus`; scripts/install-deps.sh installs it). Without it
the tests fail, naming the command that installs it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GatewayTestCase, burst  # noqa: E402

REPO = os.path.normpath(os.path.join(harness.HERE, "..", "..", ".."))
MONITORING = os.path.join(REPO, "deploy", "monitoring")
ALERTS = os.path.join(MONITORING, "alerts.yml")
ALERTS_TEST = os.path.join(MONITORING, "alerts_test.yml")
DASHBOARD = os.path.join(MONITORING, "grafana-dashboard.json")
SOURCES = os.path.join(REPO, "src")

INSTALL = "apt-get install -y prometheus (or scripts/install-deps.sh)"
PROMTOOL_TIMEOUT_S = 120
# The binary is built with the Envoy RLS server unless CMake says otherwise (CMakeLists.txt
# passes TOLLGATE_RLS to the suites); with it, the scrape carries the tollgate_rls_* families.
WITH_RLS = os.environ.get("TOLLGATE_RLS", "ON") != "OFF"

FREE_KEY = "sk-mon-free-0123456789abcdef"
TRIAL_KEY = "sk-mon-trial-0123456789abcdef"
UNKNOWN_KEY = "sk-mon-unknown-0123456789abcdef"
FREE_CAPACITY = 6
UPSTREAM_TIMEOUT_MS = 500
HISTOGRAMS = ("tollgate_limiter_latency_seconds", "tollgate_upstream_latency_seconds")


def promtool(test, *args, stdin=None):
    """Runs promtool; fails `test` (never skips it) when promtool is not installed."""
    path = shutil.which("promtool")
    if not path:
        test.fail("promtool is not installed: " + INSTALL)
    return subprocess.run([path] + list(args), input=stdin, capture_output=True, text=True,
                          timeout=PROMTOOL_TIMEOUT_S, cwd=MONITORING)


def promtool_output(p):
    return "promtool exited %d:\n%s%s" % (p.returncode, p.stdout, p.stderr)


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text):
    """Prometheus text -> [(name, {label: value}, float)], comments skipped."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def value(samples, name, **labels):
    """The sum of `name`'s samples whose labels include `labels` (0 when there is none)."""
    return sum(v for n, ls, v in samples
               if n == name and all(ls.get(k) == want for k, want in labels.items()))


def histogram(test, samples, name):
    """Checks `name`'s _bucket, _sum and _count series; returns its _count."""
    buckets = [(ls.get("le"), v) for n, ls, v in samples if n == name + "_bucket"]
    sums = [v for n, _, v in samples if n == name + "_sum"]
    counts = [v for n, _, v in samples if n == name + "_count"]
    test.assertTrue(buckets, "%s has no _bucket series" % name)
    test.assertEqual(len(sums), 1, "%s: one _sum series expected, got %r" % (name, sums))
    test.assertEqual(len(counts), 1, "%s: one _count series expected, got %r" % (name, counts))
    les = [le for le, _ in buckets]
    test.assertNotIn(None, les, "%s: a _bucket without le" % name)
    test.assertEqual(les[-1], "+Inf", "%s: the last bucket is not le=\"+Inf\"" % name)
    bounds = [float(le) for le in les]
    test.assertEqual(bounds, sorted(bounds), "%s: buckets out of order: %r" % (name, les))
    cumulative = [v for _, v in buckets]
    test.assertEqual(cumulative, sorted(cumulative), "%s: buckets not cumulative" % name)
    test.assertEqual(cumulative[-1], counts[0], "%s: +Inf bucket differs from _count" % name)
    test.assertGreaterEqual(sums[0], 0)
    return counts[0]


def source_metric_names():
    """Every metric name the C++ registers (a "tollgate_..." string literal under src/), with
    the _bucket/_sum/_count series of the histogram families of src/metrics/metrics.cpp."""
    names, histograms = set(), set()
    for root, _, files in os.walk(SOURCES):
        for f in files:
            if not f.endswith((".cpp", ".hpp", ".h", ".in")):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            names.update(re.findall(r'"(tollgate_[a-z0-9_]+)"', text))
            histograms.update(re.findall(r'\{"(tollgate_[a-z0-9_]+)",\s*"histogram"', text))
    for h in histograms:
        names.update(h + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def scrape_metric_names(text):
    """Every sample name of a scrape, and every family its # TYPE lines declare."""
    names = {n for n, _, _ in parse_samples(text)}
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(family)
        if kind == "histogram":
            names.update(family + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def metric_names_in(text):
    return set(re.findall(r"\btollgate_[a-zA-Z0-9_:]+", text))


def load_dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def dashboard_panels(dashboard):
    """Every panel, those inside collapsed rows included."""
    for p in dashboard.get("panels", []):
        yield p
        for inner in p.get("panels", []):
            yield inner


def dashboard_exprs(dashboard):
    """(where, PromQL) of every panel target."""
    for p in dashboard_panels(dashboard):
        for t in p.get("targets", []):
            if t.get("expr"):
                yield "panel %r target %s" % (p.get("title"), t.get("refId")), t["expr"]


def grafana_to_promql(expr):
    """A panel's query as Prometheus would get it: Grafana's variables replaced."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    expr = expr.replace("$__range", "1h")
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def monitoring_config(tmpdir):
    """Two plans (one enforced, one in shadow mode), a short upstream timeout for the 504
    path, and (when built with it) the Envoy RLS server with one descriptor file, so its
    families are in the scrape too."""
    config = {
        "server": {"threads": 2, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"free": {"limits": [burst(FREE_CAPACITY)]},
                  "trial": {"mode": "shadow", "limits": [burst(1)]}},
        "keys": [{"key": FREE_KEY, "id": "k-free", "account": "acme", "plan": "free"},
                 {"key": TRIAL_KEY, "id": "k-trial", "account": "acme", "plan": "trial"}],
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
        "upstream": {"timeout_ms": UPSTREAM_TIMEOUT_MS},
    }
    if WITH_RLS:
        descriptors = os.path.join(tmpdir, "ratelimit")
        os.makedirs(descriptors)
        with open(os.path.join(descriptors, "edge.yaml"), "w") as f:
            f.write("domain: edge\n"
                    "descriptors:\n"
                    "  - key: remote_address\n"
                    "    rate_limit: {unit: minute, requests_per_unit: 10}\n")
        rls_port, held = harness.reserve_port()
        config["rls"] = {"listen": "127.0.0.1:%d" % rls_port, "envoy_config": descriptors}
        return config, held
    return config, None


def scrape(test, gw):
    """GET /metrics from the admin listener, else (404) from the public one."""
    r = gw.admin("GET", "/metrics")
    if r.status == 404:
        r = gw.request("GET", "/metrics")
    test.assertEqual(r.status, 200, r)
    test.assertTrue(r.header("Content-Type", "").startswith("text/plain"), r)
    return r.body.decode("utf-8")


def check_metrics(test, text):
    p = promtool(test, "check", "metrics", stdin=text)
    test.assertEqual(p.returncode, 0, "promtool check metrics complains about GET /metrics:\n%s%s"
                     % (p.stdout, p.stderr))


class ScrapeTests(GatewayTestCase):
    """The real binary after real traffic: what its /metrics says, and whether Prometheus
    accepts it."""

    def setUp(self):
        super().setUp()
        config, held = monitoring_config(self.tmpdir)
        if held is not None:
            self.held_sockets.append(held)
        self.gw = self.start(config)

    def scrape(self):
        return scrape(self, self.gw)

    def send_traffic(self):
        """Allowed, upstream-error, rejected, shadow-rejected and invalid-key requests.
        Returns what the metrics must then show, counted from the responses themselves."""
        out = {"decided": 0, "proxied": 0, "rejected": 0, "timeouts": 0, "invalid": 0,
               "free": 0, "trial": 0}

        def go(path, key, plan):
            r = self.gw.get(path, key=key)
            if r.status == 401:
                out["invalid"] += 1
                return r
            # Every request with a valid key is decided: limiter latency is observed in
            # Exchange::Conclude for allowed, rejected and shadow-rejected requests alike
            # (src/http/exchange.cpp), never for an invalid key.
            out["decided"] += 1
            out[plan] += 1
            if r.status == 429:
                out["rejected"] += 1
            elif r.status == 504:
                out["timeouts"] += 1
            else:
                # The upstream's response head arrived (whatever its status): upstream
                # latency observed in Worker::Forward (src/http/forward.cpp).
                out["proxied"] += 1
            return r

        r = go("/status/502", FREE_KEY, "free")
        self.assertEqual(r.status, 502, r)  # the upstream's own 502: an answer, not an error
        r = go("/slow?ms=%d" % (UPSTREAM_TIMEOUT_MS * 4), FREE_KEY, "free")
        self.assertEqual(r.status, 504, r)  # no answer in time: tollgate's 504, not observed
        self.assertEqual(r.json().get("code"), "upstream_timeout", r)
        for _ in range(FREE_CAPACITY + 10):
            go("/echo", FREE_KEY, "free")
            if out["rejected"] >= 3:
                break
        self.assertEqual(out["rejected"], 3, "the free plan's burst never ran out")
        for _ in range(3):  # burst(1) in shadow mode: all answered, two would-be rejections
            self.assertEqual(go("/echo", TRIAL_KEY, "trial").status, 200)
        self.assertEqual(go("/echo", UNKNOWN_KEY, None).status, 401)
        self.assertEqual(go("/echo", None, None).status, 401)
        return out

    def test_scrape_passes_promtool_check_metrics(self):
        self.send_traffic()
        check_metrics(self, self.scrape())

    def test_latency_histograms_count_decided_and_proxied_requests(self):
        before = parse_samples(self.scrape())
        counts_before = {h: value(before, h + "_count") for h in HISTOGRAMS}
        sent = self.send_traffic()
        after = parse_samples(self.scrape())
        counts = {h: histogram(self, after, h) for h in HISTOGRAMS}
        self.assertEqual(counts["tollgate_limiter_latency_seconds"]
                         - counts_before["tollgate_limiter_latency_seconds"], sent["decided"],
                         sent)
        self.assertEqual(counts["tollgate_upstream_latency_seconds"]
                         - counts_before["tollgate_upstream_latency_seconds"], sent["proxied"],
                         sent)
        # The upstream also got the request it answered too late.
        self.assertEqual(self.upstream.stats()["received"], sent["proxied"] + sent["timeouts"])

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        self.assertEqual(delta("tollgate_invalid_keys_total"), sent["invalid"])
        self.assertEqual(delta("tollgate_rejections_total", plan="free", code="rate_limited"),
                         sent["rejected"])
        self.assertEqual(delta("tollgate_shadow_rejections_total", plan="trial"), 2)
        self.assertEqual(delta("tollgate_upstream_errors_total", kind="timeout"),
                         sent["timeouts"])
        self.assertEqual(delta("tollgate_requests_by_mode_total", plan="free", mode="enforce"),
                         sent["free"])
        self.assertEqual(delta("tollgate_requests_by_mode_total", plan="trial", mode="shadow"),
                         sent["trial"])
        # One check per request on these plans: one decision each.
        self.assertEqual(delta("tollgate_decisions_total", plan="free"), sent["free"])
        self.assertEqual(delta("tollgate_decisions_total", plan="trial"), sent["trial"])

    def test_dashboard_and_alerts_name_only_exported_metrics(self):
        self.send_traffic()
        exported = scrape_metric_names(self.scrape()) | source_metric_names()
        dashboard = load_dashboard()
        used = {}
        for where, expr in dashboard_exprs(dashboard):
            for name in metric_names_in(expr):
                used.setdefault(name, []).append(where)
        for var in dashboard.get("templating", {}).get("list", []):
            query = var.get("query")
            query = query.get("query", "") if isinstance(query, dict) else (query or "")
            for name in metric_names_in(query):
                used.setdefault(name, []).append("variable %r" % var.get("name"))
        self.assertTrue(used, "no tollgate_ metric in any panel of the dashboard")
        with open(ALERTS, encoding="utf-8") as f:
            for name in metric_names_in(f.read()):
                used.setdefault(name, []).append("alerts.yml")
        unknown = {n: w for n, w in sorted(used.items()) if n not in exported}
        self.assertEqual(unknown, {}, "deploy/monitoring/ names metrics tollgate does not "
                         "export (neither in a scrape nor in src/)")


class RedisDownScrapeTests(GatewayTestCase):
    """The Redis store's families, and the state the alerts watch: a Redis that refuses every
    connection (a held loopback port nobody listens on), fail-open and fail-closed routes."""

    def test_scrape_with_redis_down_passes_promtool_check_metrics(self):
        port, held = harness.reserve_port()
        self.held_sockets.append(held)
        config, rls_held = monitoring_config(self.tmpdir)
        if rls_held is not None:
            self.held_sockets.append(rls_held)
        config["store"] = {"type": "redis", "url": "redis://127.0.0.1:%d" % port,
                           "timeout_ms": 50, "connect_timeout_ms": 200}
        config["routes"] = [{"path": "/closed*", "fail_mode": "closed"}]
        gw = self.start(config)
        for _ in range(4):
            self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)  # fail-open
        for _ in range(2):
            self.assertEqual(gw.get("/closed/x", key=FREE_KEY).status, 503)  # fail-closed
        text = scrape(self, gw)
        check_metrics(self, text)
        samples = parse_samples(text)
        self.assertEqual(value(samples, "tollgate_degraded_total"), 4)
        self.assertEqual(value(samples, "tollgate_limiter_unavailable_total"), 2)
        names = {n for n, _, _ in samples}
        # Open for 500 ms at a time: its value depends on when the scrape came, not its presence.
        for name in ("tollgate_redis_breaker_open", "tollgate_redis_breaker_rejections_total",
                     "tollgate_redis_errors_total", "tollgate_redis_timeouts_total"):
            self.assertIn(name, names)


class MonitoringFilesTests(unittest.TestCase):
    """deploy/monitoring/ on its own: promtool on the rules, the dashboard's shape."""

    def test_alert_rules_pass_promtool_check_rules(self):
        p = promtool(self, "check", "rules", ALERTS)
        self.assertEqual(p.returncode, 0, promtool_output(p))

    def test_alert_rules_pass_their_unit_tests(self):
        p = promtool(self, "test", "rules", ALERTS_TEST)
        self.assertEqual(p.returncode, 0, promtool_output(p))

    def test_alert_rules_cover_the_operability_issue(self):
        with open(ALERTS, encoding="utf-8") as f:
            alerts = set(re.findall(r"^\s*- alert:\s*(\S+)", f.read(), re.M))
        self.assertEqual(sorted({"TollgateLimiterDegraded", "TollgateLimiterUnavailable",
                                 "TollgateRedisBreakerOpen", "TollgateHighRejectionRate",
                                 "TollgateUpstreamErrors", "TollgateConfigReloadFailed",
                                 "TollgateRlsConfigReloadFailed"} - alerts), [],
                         "alerts.yml lacks these alerts")

    def test_dashboard_is_an_importable_grafana_dashboard(self):
        d = load_dashboard()
        self.assertGreaterEqual(d.get("schemaVersion", 0), 37)
        self.assertIn("DS_PROMETHEUS", [i.get("name") for i in d.get("__inputs", [])])
        ids = [p.get("id") for p in dashboard_panels(d)]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are not unique: %r" % ids)
        for p in dashboard_panels(d):
            if p.get("type") == "row":
                continue
            self.assertEqual(p.get("datasource", {}).get("uid"), "${DS_PROMETHEUS}", p["title"])
            self.assertTrue(p.get("targets"), "panel %r has no query" % p.get("title"))
            for t in p["targets"]:
                self.assertTrue(metric_names_in(t.get("expr", "")),
                                "panel %r: a query on no tollgate metric" % p.get("title"))
        # What the operability issue asked the dashboard to show.
        used = set()
        for _, expr in dashboard_exprs(d):
            used |= metric_names_in(expr)
        self.assertEqual(sorted({
            "tollgate_decisions_total", "tollgate_rejections_total",
            "tollgate_shadow_rejections_total", "tollgate_degraded_total",
            "tollgate_limiter_unavailable_total", "tollgate_limiter_latency_seconds_bucket",
            "tollgate_upstream_latency_seconds_bucket", "tollgate_upstream_errors_total",
            "tollgate_redis_timeouts_total", "tollgate_redis_errors_total",
            "tollgate_redis_breaker_open", "tollgate_config_reloads_total",
            "tollgate_rls_ok_total", "tollgate_rls_over_limit_total",
            "tollgate_rls_descriptor_hits_total"} - used), [], "no panel queries these")

    def test_dashboard_queries_are_valid_promql(self):
        """Every panel query, Grafana's variables replaced, as a recording rule for promtool
        (a rules file in JSON, which is YAML)."""
        rules = [{"record": "dashboard:query_%d" % i, "expr": grafana_to_promql(expr)}
                 for i, (_, expr) in enumerate(dashboard_exprs(load_dashboard()))]
        self.assertTrue(rules)
        with tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="tollgate-dashboard-",
                                         delete=False) as f:
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        self.addCleanup(os.unlink, f.name)
        p = promtool(self, "check", "rules", f.name)
        self.assertEqual(p.returncode, 0, promtool_output(p))


if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
