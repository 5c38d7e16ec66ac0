#!/usr/bin/env python3
"""tollgate as a drop-in for envoyproxy/ratelimit: its descriptor files read as they are
(rls.envoy_config), through the real binary, called by a real gRPC client
(node/rls_client.js: @grpc/grpc-js loading src/rls/proto/rls.proto).

    python3 test_envoy_rls.py --binary build/tollgate [unittest args]

- ReadmeExampleTests: examples 1-9 of upstream's README configuration section, each written
  from its documented behaviour (rates scaled down to a few requests a day, so that a test
  never straddles a window).
- EnvoyRlsTests: tollgate's deliberate differences, per-descriptor statistics, reload (file
  change and SIGHUP, an invalid file refused), hostile calls, and Redis shared by two replicas.

Every process is started by the test in its temp dir on free loopback ports, and stopped by PID.
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase, burst, deadline_loop, reserve_port  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
NODE_DIR = os.path.join(HERE, "node")
RLS_CLIENT = os.path.join(NODE_DIR, "rls_client.js")
RLS_PROTO = os.path.join(REPO, "src", "rls", "proto", "rls.proto")
INVALID_ARGUMENT = 3
UINT32_MAX = 4294967295


def desc(*pairs, hits=None):
    d = {"entries": [{"key": k, "value": v} for k, v in pairs]}
    if hits is not None:
        d["hits_addend"] = {"value": str(hits)}
    return d


def call(domain, *descriptors, hits_addend=0):
    return {"domain": domain, "descriptors": list(descriptors), "hits_addend": hits_addend}


def seconds_to_midnight():
    now = int(time.time())
    return 86400 - now % 86400


@unittest.skipIf(os.environ.get("TOLLGATE_RLS") == "OFF",
                 "the binary is built without gRPC (-DTOLLGATE_RLS=OFF)")
class EnvoyRlsTestCase(GatewayTestCase):
    def setUp(self):
        super().setUp()
        missing = harness.missing_grpc_client()
        if missing:
            self.fail(missing)
        self.config_dir = os.path.join(self.tmpdir, "ratelimit", "config")
        os.makedirs(self.config_dir)

    def write(self, name, text):
        """Writes a descriptor file atomically (the watcher never reads half a file)."""
        path = os.path.join(self.config_dir, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    def tollgate_config(self, store=None, **rls):
        self.rls_port, held = reserve_port()
        self.held_sockets.append(held)
        r = {"listen": "127.0.0.1:%d" % self.rls_port, "envoy_config": self.config_dir}
        r.update(rls)
        return {"server": {"threads": 2}, "store": store or {"type": "memory"},
                "plans": {"free": {"limits": [burst(5)]}}, "rls": r,
                "headers": ["ratelimit"]}

    def start_rls(self, files, **kw):
        for name, text in files.items():
            self.write(name, text)
        return self.start(self.tollgate_config(**kw))

    def rls(self, calls, port=None):
        argv = ["node", RLS_CLIENT, "--target", "127.0.0.1:%d" % (port or self.rls_port),
                "--proto", RLS_PROTO, "--keep-going"]
        p = subprocess.run(argv, input=json.dumps(calls).encode(), capture_output=True,
                           timeout=60, cwd=NODE_DIR)
        out = p.stdout.decode(errors="replace")
        self.assertEqual(p.returncode, 0, "rls_client.js failed: %s\n%s" % (
            out, p.stderr.decode(errors="replace")[-2000:]))
        responses = json.loads(out)["responses"]
        self.assertEqual(len(responses), len(calls))
        return responses

    def codes(self, responses):
        return [r.get("overall_code", r.get("grpc_error")) for r in responses]

    def assertStatus(self, status, code, limit=None, unit="DAY", remaining=None, name=None):
        self.assertEqual(status["code"], code, status)
        if limit is None:
            self.assertIsNone(status.get("current_limit"), status)
            return
        self.assertEqual(status["current_limit"]["requests_per_unit"], limit, status)
        self.assertEqual(status["current_limit"]["unit"], unit, status)
        if name is not None:
            self.assertEqual(status["current_limit"]["name"], name, status)
        if remaining is not None:
            self.assertEqual(status["limit_remaining"], remaining, status)


class ReadmeExampleTests(EnvoyRlsTestCase):
    def test_example1_each_value_has_its_own_limit(self):
        self.start_rls({"mongo_cps.yaml": """
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: database
    value: default
    rate_limit: {unit: day, requests_per_unit: 3}
"""})
        users = call("mongo_cps", desc(("database", "users")))
        res = self.rls([users] * 4 + [call("mongo_cps", desc(("database", "default"))),
                                      call("mongo_cps", desc(("database", "other")))])
        self.assertEqual(self.codes(res), ["OK", "OK", "OK", "OVER_LIMIT", "OK", "OK"])
        for i, remaining in enumerate([2, 1, 0]):
            self.assertStatus(res[i]["statuses"][0], "OK", 3, remaining=remaining)
        over = res[3]["statuses"][0]
        self.assertStatus(over, "OVER_LIMIT", 3, remaining=0)
        # Fixed windows aligned to the unit, as upstream counts: reset at midnight UTC.
        self.assertAlmostEqual(int(over["duration_until_reset"]["seconds"]),
                               seconds_to_midnight(), delta=3)
        self.assertStatus(res[4]["statuses"][0], "OK", 3, remaining=2)
        self.assertStatus(res[5]["statuses"][0], "OK")  # no rule: OK, no limit

    def test_example2_nested_lists_and_several_descriptors_in_one_call(self):
        self.start_rls({"messaging.yaml": """
domain: messaging
descriptors:
  # Only allow 2 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  # Only allow 3 messages a day to any unique phone number
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 3}
"""})
        both = call("messaging", desc(("message_type", "marketing"), ("to_number", "2061111111")),
                    desc(("to_number", "2061111111")))
        only_number = call("messaging", desc(("to_number", "2061111111")))
        res = self.rls([both, both, both, only_number, only_number,
                        call("messaging", desc(("to_number", "2062222222")))])
        self.assertEqual(self.codes(res), ["OK", "OK", "OVER_LIMIT", "OK", "OVER_LIMIT", "OK"])
        self.assertStatus(res[1]["statuses"][0], "OK", 2, remaining=0)
        self.assertStatus(res[1]["statuses"][1], "OK", 3, remaining=1)
        # The aggregate is the OR of the descriptors: marketing is over...
        self.assertStatus(res[2]["statuses"][0], "OVER_LIMIT", 2, remaining=0)
        # ...and, tollgate's difference, the call consumed nothing of the number's own limit:
        # one is left for the call after.
        self.assertStatus(res[2]["statuses"][1], "OK", 3, remaining=1)
        self.assertStatus(res[3]["statuses"][0], "OK", 3, remaining=0)
        self.assertStatus(res[5]["statuses"][0], "OK", 3, remaining=2)

    def test_example3_the_most_specific_match_first(self):
        self.start_rls({"edge.yaml": """
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 2}
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: day, requests_per_unit: 0}
"""})
        banned = call("edge_proxy_per_ip", desc(("remote_address", "50.0.0.5")))
        other = call("edge_proxy_per_ip", desc(("remote_address", "50.0.0.1")))
        res = self.rls([banned, other, other, other, banned])
        self.assertEqual(self.codes(res), ["OVER_LIMIT", "OK", "OK", "OVER_LIMIT", "OVER_LIMIT"])
        self.assertStatus(res[0]["statuses"][0], "OVER_LIMIT", 0, remaining=0)
        self.assertStatus(res[2]["statuses"][0], "OK", 2, remaining=0)

    def test_example4_matching_is_at_the_same_depth(self):
        self.start_rls({"flat.yaml": """
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 1, unit: day}
""", "nested.yaml": """
domain: example4b
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {requests_per_unit: 1, unit: day}
"""})
        two = desc(("key", "value"), ("subkey", "subvalue"))
        res = self.rls([call("example4", two)] * 2 + [call("example4b", two)] * 2)
        # Not matched by the one-level entry: never limited.
        self.assertEqual(self.codes(res), ["OK", "OK", "OK", "OVER_LIMIT"])
        self.assertStatus(res[0]["statuses"][0], "OK")
        self.assertStatus(res[2]["statuses"][0], "OK", 1, remaining=0)

    def test_example5_unlimited_descriptors_touch_no_store(self):
        self.start_rls({"internal.yaml": """
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: {unit: day, requests_per_unit: 2}
"""})
        res = self.rls([call("internal", desc(("ldap", "x")), hits_addend=1000)] * 5 +
                       [call("internal", desc(("azure", "x")))] * 3)
        self.assertEqual(self.codes(res), ["OK"] * 7 + ["OVER_LIMIT"])
        for r in res[:5]:
            self.assertEqual(r["statuses"][0]["code"], "OK")
            self.assertEqual(r["statuses"][0]["limit_remaining"], UINT32_MAX, r)

    def test_example6_shadow_mode_answers_ok_and_counts(self):
        self.start_rls({"example6.yaml": """
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 2, unit: day}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 2, unit: day}
"""})
        a = call("example6", desc(("service", "auth-service"), ("user", "user-a")))
        b = call("example6", desc(("service", "auth-service"), ("user", "user-b")))
        res = self.rls([a] * 4 + [b] * 3)
        self.assertEqual(self.codes(res), ["OK"] * 6 + ["OVER_LIMIT"])
        m = self.gateway.metrics()
        labels = '{domain="example6",descriptor="service.user_user-a"}'
        self.assertEqual(m.get("tollgate_rls_descriptor_hits_total" + labels), 4)
        self.assertEqual(m.get("tollgate_rls_descriptor_over_limit_total" + labels), 2)
        self.assertEqual(m.get("tollgate_rls_descriptor_shadow_mode_total" + labels), 2)
        self.assertEqual(m.get("tollgate_rls_descriptor_within_limit_total" + labels), 2)

    def test_example7_replaces(self):
        self.start_rls({"example7.yaml": """
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 2
          unit: day
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 4
          unit: day
"""})
        d1 = desc(("key_1", "value_1"), ("user", "bkthomps"))
        d2 = desc(("key_2", "value_2"), ("user", "bkthomps"))
        res = self.rls([call("example7", d1, d2)] * 5 + [call("example7", d1)])
        self.assertEqual(self.codes(res), ["OK"] * 4 + ["OVER_LIMIT", "OK"])
        # The replaced limit is not evaluated: OK without a limit, and left untouched.
        self.assertStatus(res[3]["statuses"][0], "OK")
        self.assertStatus(res[3]["statuses"][1], "OK", 4, remaining=0)
        self.assertStatus(res[5]["statuses"][0], "OK", 2, remaining=1, name="specific_limit")

    def test_example8_detailed_metric_names_each_value(self):
        self.start_rls({"example8.yaml": """
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
"""})
        self.rls([call("example8", desc(("key1", "unspecified_value")))] * 2 +
                 [call("example8", desc(("key1", "unspecified_value2"))),
                  call("example8", desc(("key1", "value1")))])
        m = self.gateway.metrics()
        hits = lambda d: m.get('tollgate_rls_descriptor_hits_total{domain="example8",'
                               'descriptor="%s"}' % d)
        self.assertEqual(hits("key1_unspecified_value"), 2)
        self.assertEqual(hits("key1_unspecified_value2"), 1)
        self.assertEqual(hits("key1_value1"), 1)
        self.assertEqual(hits("key1"), 0)  # the rolled-up series stays at zero

    def test_example9_wildcard_values(self):
        self.start_rls({"example9.yaml": """
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: day, requests_per_unit: 2}
"""})
        v1 = call("example9", desc(("key1", "value_1")))
        res = self.rls([v1, v1, v1, call("example9", desc(("key1", "value_2"))),
                        call("example9", desc(("key1", "other")))])
        self.assertEqual(self.codes(res), ["OK", "OK", "OVER_LIMIT", "OK", "OK"])
        self.assertStatus(res[3]["statuses"][0], "OK", 2, remaining=1)  # its own counter
        self.assertStatus(res[4]["statuses"][0], "OK")  # no match


class EnvoyRlsTests(EnvoyRlsTestCase):
    DOMAIN = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: %d, name: per_user}
"""

    def test_hits_addend_near_limit_and_response_headers(self):
        self.start_rls({"api.yaml": self.DOMAIN % 10}, response_headers=True)
        u = desc(("user", "ann"))
        res = self.rls([call("api", u, hits_addend=7), call("api", u, hits_addend=2),
                        call("api", desc(("user", "ann"), hits=5)),
                        call("api", desc(("user", "ann"), hits=0))])
        self.assertEqual(self.codes(res), ["OK", "OK", "OVER_LIMIT", "OK"])
        self.assertEqual([r["statuses"][0]["limit_remaining"] for r in res], [3, 1, 1, 1])
        headers = {h["key"]: h["value"] for h in res[1]["response_headers_to_add"]}
        self.assertEqual(headers.get("RateLimit-Limit"), "10", headers)
        self.assertEqual(headers.get("RateLimit-Remaining"), "1", headers)
        over = {h["key"]: h["value"] for h in res[2]["response_headers_to_add"]}
        self.assertAlmostEqual(int(over["Retry-After"]), seconds_to_midnight(), delta=3)
        m = self.gateway.metrics()
        labels = '{domain="api",descriptor="user"}'
        self.assertEqual(m.get("tollgate_rls_descriptor_hits_total" + labels), 14)
        self.assertEqual(m.get("tollgate_rls_descriptor_over_limit_total" + labels), 5)
        self.assertEqual(m.get("tollgate_rls_descriptor_within_limit_total" + labels), 9)
        self.assertEqual(m.get("tollgate_rls_descriptor_near_limit_total" + labels), 2)

    def test_reload_on_a_file_change_and_on_sighup_refusing_invalid_files(self):
        self.start_rls({"api.yaml": self.DOMAIN % 1})
        u = call("api", desc(("user", "ann")))
        self.assertEqual(self.codes(self.rls([u, u])), ["OK", "OVER_LIMIT"])
        self.write("api.yaml", self.DOMAIN % 3)  # the watcher reads it within a second or two
        for _ in deadline_loop(5, step=0.2):
            if self.gateway.metrics().get("tollgate_rls_config_reloads_ok_total", 0) >= 1:
                break
        res = self.rls([u])
        self.assertStatus(res[0]["statuses"][0], "OK", 3, remaining=1)  # the counter carried on
        # An invalid file is refused, naming file and field; the previous rules keep serving.
        self.write("broken.yaml", "domain: other\ndescriptors: [{key: k, rate_limit: {unit: "
                                  "fortnight, requests_per_unit: 1}}]\n")
        for _ in deadline_loop(5, step=0.2):
            if self.gateway.metrics().get("tollgate_rls_config_reloads_error_total", 0) >= 1:
                break
        self.assertEqual(self.gateway.metrics().get("tollgate_rls_config_reloads_error_total"), 1)
        self.assertIn("broken.yaml: descriptors[0].rate_limit.unit: must be second",
                      self.gateway.process.read_stderr().decode(errors="replace"))
        res = self.rls([u])
        self.assertStatus(res[0]["statuses"][0], "OK", 3, remaining=0)
        # Fixed, then SIGHUP: read at once.
        os.remove(os.path.join(self.config_dir, "broken.yaml"))
        self.write("api.yaml", self.DOMAIN % 5)
        self.gateway.process.signal(signal.SIGHUP)
        for _ in deadline_loop(5, step=0.1):
            if self.gateway.metrics().get("tollgate_rls_config_reloads_ok_total", 0) >= 2:
                break
        self.assertStatus(self.rls([u])[0]["statuses"][0], "OK", 5, remaining=1)

    def test_invalid_files_stop_the_start_and_check_config_names_them(self):
        cases = {
            "a cycle of replaces": ({"a.yaml": """
domain: d
descriptors:
  - {key: a, rate_limit: {name: A, unit: day, requests_per_unit: 1, replaces: [{name: B}]}}
  - {key: b, rate_limit: {name: B, unit: day, requests_per_unit: 1, replaces: [{name: A}]}}
"""}, "a.yaml: replaces: a cycle: A -> B -> A"),
            "a domain twice": ({"a.yaml": "domain: d\n", "b.yaml": "domain: d\n"},
                               "b.yaml: domain: 'd' is already defined in "),
            "an empty key": ({"a.yaml": "domain: d\ndescriptors: [{key: ''}]\n"},
                             "a.yaml: descriptors[0].key: must not be empty"),
        }
        for label, (files, error) in cases.items():
            with self.subTest(label):
                for f in os.listdir(self.config_dir):
                    os.remove(os.path.join(self.config_dir, f))
                for name, text in files.items():
                    self.write(name, text)
                path = os.path.join(self.tmpdir, "tollgate.yaml")
                cfg = self.tollgate_config()
                cfg["upstream"] = {"url": "http://127.0.0.1:9"}
                with open(path, "w") as f:
                    json.dump(cfg, f)
                check = subprocess.run([harness.BINARY, "check-config", path],
                                       capture_output=True, timeout=30)
                self.assertEqual(check.returncode, 1, check)
                self.assertIn(error, check.stderr.decode())
                serve = subprocess.run([harness.BINARY, "serve", "--config", path],
                                       capture_output=True, timeout=30)
                self.assertEqual(serve.returncode, 1, serve)
                self.assertIn(error, serve.stderr.decode())

    def test_a_config_of_descriptor_files_alone_needs_no_plans(self):
        self.write("api.yaml", self.DOMAIN % 1)
        path = os.path.join(self.tmpdir, "rls-only.yaml")
        with open(path, "w") as f:
            f.write("rls:\n  listen: 127.0.0.1:0\n  envoy_config: ratelimit/config\n")
        check = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                               timeout=30)
        self.assertEqual(check.returncode, 0, check)
        self.assertIn(b"rls.envoy_config: 1 domain(s) from 1 file(s)", check.stdout)
        with open(path, "w") as f:
            f.write("rls:\n  listen: 127.0.0.1:0\n")
        check = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                               timeout=30)
        self.assertEqual(check.returncode, 1, check)
        self.assertIn(b"plans: at least one plan is required", check.stderr)

    def test_hostile_calls_get_clear_answers_and_consume_nothing(self):
        self.start_rls({"api.yaml": self.DOMAIN % 3})
        u = desc(("user", "ann"))
        big = "v" * (1 << 20)
        cases = [
            ("unknown domain", call("nope", u), "OK"),
            ("no descriptors", call("api"), INVALID_ARGUMENT),
            ("no domain", call("", u), INVALID_ARGUMENT),
            ("an entry without a key", call("api", u, desc(("", "x"))), INVALID_ARGUMENT),
            ("a descriptor without entries", call("api", u, {"entries": []}), INVALID_ARGUMENT),
            ("a 1 MB value", call("api", u, desc(("user", big))), INVALID_ARGUMENT),
            ("a 1 MB key", call("api", u, desc((big, "x"))), INVALID_ARGUMENT),
            ("1,000 limited descriptors", call("api", *[desc(("user", "u%d" % i))
                                                        for i in range(1000)]), INVALID_ARGUMENT),
            ("an override of unknown unit",
             call("api", dict(u, limit={"requests_per_unit": 5, "unit": 99})), INVALID_ARGUMENT),
        ]
        res = self.rls([c for _, c, _ in cases])
        for (label, _, code), r in zip(cases, res):
            self.assertEqual(r.get("overall_code", r.get("grpc_error")), code, (label, r))
        # 1,000 descriptors nothing limits: answered, one status each.
        many = self.rls([call("api", *[desc(("other", str(i))) for i in range(1000)])])[0]
        self.assertEqual(many["overall_code"], "OK")
        self.assertEqual(len(many["statuses"]), 1000)
        # The same descriptor many times in one call: one counter, the costs added.
        twice = self.rls([call("api", u, u)])[0]
        self.assertEqual([s["limit_remaining"] for s in twice["statuses"]], [1, 1])
        # Nothing above consumed ann's budget but the last call.
        self.assertStatus(self.rls([call("api", u)])[0]["statuses"][0], "OK", 3, remaining=0)
        m = self.gateway.metrics()
        self.assertEqual(m.get("tollgate_rls_invalid_total"), 8)
        self.assertEqual(m.get("tollgate_rls_unknown_domain_total"), 1)
        self.assertTrue(self.gateway.process.alive())

    def test_json_debug_endpoint_on_the_admin_listener(self):
        self.start_rls({"api.yaml": self.DOMAIN % 1})
        body = json.dumps({"domain": "api", "descriptors": [
            {"entries": [{"key": "user", "value": "ann"}]}]}).encode()
        post = lambda b: self.gateway.admin("POST", "/json", body=b, headers={
            "Content-Type": "application/json", "Content-Length": str(len(b))})
        first, second = post(body), post(body)
        self.assertEqual(first.status, 200, first)
        self.assertEqual(first.json()["overallCode"], "OK")
        self.assertEqual(first.json()["statuses"][0]["currentLimit"],
                         {"requestsPerUnit": 1, "unit": "DAY", "name": "per_user"})
        self.assertEqual(second.status, 429, second)
        self.assertEqual(second.json()["overallCode"], "OVER_LIMIT")
        self.assertRegex(second.json()["statuses"][0]["durationUntilReset"], r"^\d+s$")
        for bad in (b"{", b'{"domain": 5}', b'{"domain": "api"}', b'{"nope": 1}'):
            r = post(bad)
            self.assertEqual(r.status, 400, (bad, r))
            self.assertEqual(r.json()["code"], "invalid_request", r)
        # Only on the admin listener: the public one treats /json as an upstream path.
        public = self.gateway.request("POST", "/json", body=body)
        self.assertNotIn(b"overallCode", public.body, public)

    def test_global_shadow_mode_answers_ok_and_counts(self):
        self.start_rls({"api.yaml": self.DOMAIN % 1}, shadow_mode=True)
        u = call("api", desc(("user", "ann")))
        res = self.rls([u, u, u])
        self.assertEqual(self.codes(res), ["OK", "OK", "OK"])
        m = self.gateway.metrics()
        self.assertEqual(m.get("tollgate_rls_shadow_mode_total"), 2)
        self.assertEqual(m.get('tollgate_rls_descriptor_shadow_mode_total{domain="api",'
                               'descriptor="user"}'), 2)

    def test_two_replicas_on_one_redis_share_one_budget(self):
        from test_redis import RedisServer
        redis = RedisServer(self)
        self.write("api.yaml", self.DOMAIN % 4)
        ports = []
        for name in ("a", "b"):
            cfg = self.tollgate_config(store={"type": "redis", "url": redis.url})
            cfg["upstream"] = {"url": "http://127.0.0.1:9"}
            harness.Gateway(self, cfg, name=name)
            ports.append(self.rls_port)
        u = call("api", desc(("user", "ann")), desc(("user", "bob")))
        bob = call("api", desc(("user", "bob")))
        res = (self.rls([u, u], port=ports[0]) + self.rls([u], port=ports[1]) +
               self.rls([bob], port=ports[1]) + self.rls([u], port=ports[0]))
        self.assertEqual(self.codes(res), ["OK", "OK", "OK", "OK", "OVER_LIMIT"])
        last = res[4]["statuses"]
        # bob's fourth went through replica b alone; the call with ann was then rejected as a
        # whole, and ann still has one left.
        self.assertStatus(last[1], "OVER_LIMIT", 4, remaining=0)
        self.assertStatus(last[0], "OK", 4, remaining=1)


if __name__ == "__main__":
    harness.main("test_envoy_rls.py")
