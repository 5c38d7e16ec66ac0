#!/usr/bin/env python3
"""tollgate replay (issue 23) end to end: a real gateway in shadow mode serves known traffic, its
real access log is captured, and `tollgate replay` runs a stricter and a laxer candidate over it.
The counts are checked against a model of the traffic (capacities that never refill during the
test: the first C requests of an identity pass, in the log's order), the exit-code gate, malformed
lines, an empty log and the three formats.

    python3 test_replay.py --binary build/tollgate [unittest args]
"""
import collections
import csv
import io
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import burst  # noqa: E402

FREE_KEY = "sk-free-0123456789abcdef"
TEAM_KEY = "sk-team-0123456789abcdef"
KEYS = [
    {"key": FREE_KEY, "id": "k-free", "account": "acme", "plan": "free"},
    {"key": TEAM_KEY, "id": "k-team", "account": "beta", "plan": "team"},
]
ROUTES = [
    {"name": "public", "path": "/public/*", "identity": "ip"},
    {"name": "export", "path": "/v1/export", "cost": {"query": "pages", "per": 50, "min": 1}},
]


def policy(mode, free, team, anonymous):
    return {
        "store": {"type": "memory"},
        "mode": mode,
        "plans": {"free": {"limits": [burst(free)]}, "team": {"limits": [burst(team)]}},
        "anonymous": {"limits": [burst(anonymous)]},
        "keys": KEYS,
        "routes": ROUTES,
    }


class ReplayTests(harness.GatewayTestCase):
    def capture(self):
        """The recorded log: a shadow gateway (free 5, team 50, anonymous 3) serving known
        traffic. Returns the log's lines."""
        c = policy("shadow", 5, 50, 3)
        c["server"] = {"threads": 1, "access_log": True}
        gw = self.start(c)
        for _ in range(8):
            self.assertEqual(gw.get("/echo", key=FREE_KEY).status, 200)
        for _ in range(4):
            self.assertEqual(gw.get("/echo", key=TEAM_KEY).status, 200)
        for i in range(4):
            self.assertEqual(gw.get("/public/%d" % i).status, 200)
        self.assertEqual(gw.get("/echo", key="sk-unknown").status, 401)
        # pages=120 costs 3 under both the recorded and the candidate configs.
        self.assertEqual(gw.get("/v1/export?pages=120", key=TEAM_KEY).status, 200)
        self.assertEqual(gw.get("/healthz").status, 200)
        self.assertEqual(gw.process.stop(), 0)  # drained: every line flushed
        lines = [x for x in gw.process.read_stdout().decode().splitlines() if x.strip()]
        entries = [json.loads(x) for x in lines]
        # The fields replay needs, route and query among them.
        public = [e for e in entries if e["path"].startswith("/public/")]
        self.assertEqual([e["route"] for e in public], ["public"] * 4)
        export = [e for e in entries if e["path"] == "/v1/export"]
        self.assertEqual([(e["route"], e["query"], e["cost"]) for e in export],
                         [("export", "pages=120", 3)])
        health = [e["route"] for e in entries if e["path"] == "/healthz"]  # the harness's too
        self.assertTrue(health)
        self.assertEqual(set(health), {""})
        self.assertEqual(sum(e["decision"] == "shadow_rejected" for e in entries), 3 + 1)
        return lines

    def replay(self, config, log_lines, *args, stdin=None):
        cfg = os.path.join(self.tmpdir, "candidate-%d.json" % len(os.listdir(self.tmpdir)))
        with open(cfg, "w") as f:
            json.dump(config, f)
        log = "-"
        if stdin is None:
            log = os.path.join(self.tmpdir, "access-%d.jsonl" % len(os.listdir(self.tmpdir)))
            with open(log, "w") as f:
                f.write("".join(x + "\n" for x in log_lines))
        return subprocess.run([harness.BINARY, "replay", "--config", cfg, "--log", log] + list(args),
                              input=stdin, capture_output=True, timeout=60)

    @staticmethod
    def model(lines, capacities):
        """Expected counts: per identity, the first C requests pass (nothing refills)."""
        used = collections.Counter()
        out = collections.Counter()
        for line in lines:
            e = json.loads(line)
            if not e["route"] or e["decision"] == "invalid_key":
                ident, cap, cost = None, None, 0
            elif e["key_id"]:
                ident = e["key_id"]
                cap, cost = capacities[e["plan"]], 3 if e["path"] == "/v1/export" else 1
            else:
                ident, cap, cost = "ip:" + e["client"], capacities["anonymous"], 1
            rejects = ident is not None and used[ident] + cost > cap
            if ident is not None and not rejects:
                used[ident] += cost
            recorded = e["decision"] in ("rejected", "shadow_rejected")
            out["requests"] += 1
            out["rejected"] += rejects
            out["newly_rejected"] += rejects and not recorded
            out["newly_admitted"] += recorded and not rejects
        return out

    def check_total(self, report, expected):
        total = report["total"]
        for name in ("requests", "rejected", "newly_rejected", "newly_admitted"):
            self.assertEqual(total[name], expected[name], (name, total))
        self.assertEqual(total["shadow_rejected"], 0)
        self.assertAlmostEqual(total["share"], expected["rejected"] / expected["requests"], 5)

    def test_stricter_and_laxer_candidates(self):
        lines = self.capture()
        not_routed = sum(json.loads(x)["route"] == "" for x in lines)
        strict = policy("enforce", 2, 50, 1)
        r = self.replay(strict, lines, "--format", "json")
        self.assertEqual(r.returncode, 0, r)
        report = json.loads(r.stdout)
        expected = self.model(lines, {"free": 2, "team": 50, "anonymous": 1})
        # free: 8 requests, 6 over; anonymous: 4, 3 over. Recorded: 3 + 1 shadow rejections.
        self.assertEqual(expected["rejected"], 9)
        self.assertEqual(expected["newly_rejected"] - expected["newly_admitted"], 9 - 4)
        self.check_total(report, expected)
        self.assertEqual(report["lines"], len(lines))
        self.assertEqual(report["malformed"], {"count": 0, "first": []})
        self.assertFalse(report["empty"])
        self.assertEqual(report["outcomes"]["not_routed"], not_routed)
        self.assertEqual(report["outcomes"]["invalid_key"], 1)
        plans = {p["name"]: p["counts"] for p in report["plans"]}
        self.assertEqual((plans["free"]["requests"], plans["free"]["rejected"]), (8, 6))
        self.assertEqual((plans["team"]["requests"], plans["team"]["rejected"]), (5, 0))
        self.assertEqual((plans["anonymous"]["requests"], plans["anonymous"]["rejected"]), (4, 3))
        self.assertEqual(plans["(invalid key)"]["requests"], 1)
        self.assertIsNotNone(plans["free"]["first_rejection"])
        self.assertIsNone(plans["team"]["first_rejection"])
        routes = {g["name"]: g["counts"] for g in report["routes"]}
        self.assertEqual(routes["public"]["requests"], 4)
        self.assertEqual(routes["export"]["requests"], 1)
        self.assertEqual(routes["(default)"]["requests"], 8 + 4 + 1)
        self.assertEqual(routes["(not routed)"]["requests"], not_routed)
        keys = [(k["name"], k["counts"]["rejected"]) for k in report["top_keys"]]
        self.assertEqual(keys[0], ("k-free", 6))
        self.assertIn(("ip:127.0.0.1", 3), keys)

        # The gate: 9 of the lines is above 10 % and below 100 %.
        self.assertEqual(self.replay(strict, lines, "--max-reject-share", "0.1").returncode, 3)
        self.assertEqual(self.replay(strict, lines, "--max-reject-share", "1").returncode, 0)

        lax = policy("enforce", 100, 100, 100)
        r = self.replay(lax, lines, "--format", "json", "--max-reject-share", "0")
        self.assertEqual(r.returncode, 0, r)
        report = json.loads(r.stdout)
        expected = self.model(lines, {"free": 100, "team": 100, "anonymous": 100})
        self.assertEqual((expected["rejected"], expected["newly_admitted"]), (0, 4))
        self.check_total(report, expected)
        self.assertEqual(report["gate"], {"max_reject_share": 0.0, "exceeded": False})

        # A shadow candidate: would-be rejections, none enforced, and the gate still sees them.
        r = self.replay(policy("shadow", 2, 50, 1), lines, "--format", "json",
                        "--max-reject-share", "0.1")
        self.assertEqual(r.returncode, 3, r)
        total = json.loads(r.stdout)["total"]
        self.assertEqual((total["rejected"], total["shadow_rejected"]), (0, 9))

        # CSV and the table; stdin.
        r = self.replay(strict, lines, "--format", "csv")
        self.assertEqual(r.returncode, 0, r)
        rows = list(csv.DictReader(io.StringIO(r.stdout.decode())))
        total_row = [x for x in rows if x["section"] == "total"][0]
        self.assertEqual(int(total_row["requests"]), len(lines))
        self.assertEqual(int(total_row["rejected"]), 9)
        free_row = [x for x in rows if x["section"] == "plan" and x["name"] == "free"][0]
        self.assertEqual((int(free_row["requests"]), int(free_row["rejected"])), (8, 6))
        r = self.replay(strict, lines)
        self.assertEqual(r.returncode, 0, r)
        self.assertRegex(r.stdout.decode(), r"\n  free\s+8\s+6\s+0\s+75\.000%")
        r = self.replay(strict, None, "--format", "json",
                        stdin="".join(x + "\n" for x in lines).encode())
        self.assertEqual(r.returncode, 0, r)
        self.check_total(json.loads(r.stdout), self.model(lines, {"free": 2, "team": 50,
                                                                  "anonymous": 1}))

    def test_malformed_lines_are_reported_with_their_numbers(self):
        lines = self.capture()
        n = len(lines)
        bad = lines + ['{"ts":"2026-11-29T21:59:56.123Z"', "not json",
                       lines[0].replace('"key_id":"', '"key_id":"\\x'), "[]"]
        r = self.replay(policy("enforce", 2, 50, 1), bad, "--format", "json")
        self.assertEqual(r.returncode, 0, r)
        report = json.loads(r.stdout)
        self.assertEqual(report["lines"], n + 4)
        self.assertEqual(report["malformed"]["count"], 4)
        self.assertEqual([m["line"] for m in report["malformed"]["first"]],
                         [n + 1, n + 2, n + 3, n + 4])
        self.assertEqual([m["reason"] for m in report["malformed"]["first"]],
                         ["truncated", "not a JSON object", "bad escape in a string",
                          "not a JSON object"])
        self.assertEqual(report["total"]["requests"], n)
        self.assertEqual(report["total"]["rejected"], 9)
        self.assertIn(b"4 malformed line(s), the first at line %d" % (n + 1), r.stderr)
        r = self.replay(policy("enforce", 2, 50, 1), bad)
        self.assertIn(("malformed line %d: truncated" % (n + 1)).encode(), r.stdout)

    def test_an_empty_log_says_so(self):
        c = policy("enforce", 2, 50, 1)
        r = self.replay(c, [])
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b"the log is empty", r.stdout)
        self.assertIn(b"the log is empty", r.stderr)
        r = self.replay(c, [], "--format", "json", "--max-reject-share", "0")
        self.assertEqual(r.returncode, 0, r)
        report = json.loads(r.stdout)
        self.assertTrue(report["empty"])
        self.assertEqual(report["total"]["requests"], 0)
        rows = list(csv.DictReader(io.StringIO(self.replay(c, [], "--format", "csv")
                                               .stdout.decode())))
        self.assertEqual(rows[0]["note"], "the log is empty")

    def test_the_serving_config_over_its_own_log_changes_nothing(self):
        """Issue 31: lines are written when requests finish, so two slow requests decided first
        come after the fast ones decided later. Replayed in file order, the serving config
        reported the slow ones newly rejected and two fast ones newly admitted; in the order of
        decision there is nothing to report, with decided_us and, for older logs, without."""
        c = {
            "store": {"type": "memory"},
            "server": {"threads": 1, "access_log": True},
            "plans": {"free": {"limits": [burst(4, refill=0.001)]}},
            "anonymous": {"limits": [burst(1, refill=0.001)]},
            "keys": KEYS,
            "routes": ROUTES,
        }
        gw = self.start(c)
        statuses = {}

        def slow(ms):
            statuses[ms] = gw.get("/slow?ms=%d" % ms, key=FREE_KEY, timeout=10).status

        slows = [threading.Thread(target=slow, args=(ms,)) for ms in (1500, 900)]
        for t in slows:  # decided 1st and 2nd, one after the other
            t.start()
            time.sleep(0.1)
        fast = [gw.get("/echo", key=FREE_KEY).status for _ in range(5)]
        fast += [gw.get("/public/%d" % i).status for i in range(3)]
        for t in slows:
            t.join(10)
        self.assertEqual(statuses, {1500: 200, 900: 200})
        self.assertEqual(fast, [200, 200, 429, 429, 429, 200, 429, 429])
        self.assertEqual(gw.process.stop(), 0)
        lines = [x for x in gw.process.read_stdout().decode().splitlines() if x.strip()]
        entries = [json.loads(x) for x in lines]
        keyed = [e for e in entries if e["key_id"] == "k-free"]
        # The log's order is the order requests finished: the slow ones last.
        self.assertEqual([e["path"] for e in keyed][-2:], ["/slow", "/slow"])
        self.assertTrue(all("decided_us" in e for e in entries if e["route"]))
        decided = [e["decided_us"] for e in keyed]
        self.assertNotEqual(decided, sorted(decided))
        self.assertEqual(sorted(decided)[:2], [keyed[-1]["decided_us"], keyed[-2]["decided_us"]])

        old = []  # the same log as written before decided_us: ts less latency_ms
        for e in entries:
            e = dict(e)
            e.pop("decided_us", None)
            old.append(json.dumps(e, separators=(",", ":")))
        for name, log in (("decided_us", lines), ("ts less latency_ms", old)):
            with self.subTest(log=name):
                r = self.replay(gw.config, log, "--format", "json")
                self.assertEqual(r.returncode, 0, r)
                report = json.loads(r.stdout)
                total = report["total"]
                self.assertEqual(total["requests"], len(lines))
                self.assertEqual((total["newly_rejected"], total["newly_admitted"]), (0, 0), total)
                self.assertEqual(total["rejected"], 3 + 2)
                self.assertEqual(report["outcomes"].get("clock_held", 0), 0, report["outcomes"])

    def test_bad_config_or_log_exits_1_and_usage_2(self):
        r = self.replay({"plans": {"free": {"limits": [burst(-1)]}}}, [])
        self.assertEqual(r.returncode, 1, r)
        cfg = os.path.join(self.tmpdir, "c.json")
        with open(cfg, "w") as f:
            json.dump(policy("enforce", 2, 50, 1), f)
        r = subprocess.run([harness.BINARY, "replay", "--config", cfg, "--log",
                            os.path.join(self.tmpdir, "missing.jsonl")],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"missing.jsonl", r.stderr)
        for extra in (["--format", "xml"], ["--max-reject-share", "2"], []):
            args = [harness.BINARY, "replay", "--config", cfg] + (["--log", "-"] if extra else [])
            r = subprocess.run(args + extra, capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 2, (extra, r))


    def test_the_log_keeps_only_the_costed_query_parameter(self):
        """Query strings carry secrets (tokens, signatures, codes): the access log keeps only
        the parameters the matched route's cost counts, in every spelling the cost reads."""
        c = policy("shadow", 50, 50, 50)
        c["server"] = {"threads": 1, "access_log": True}
        gw = self.start(c)
        cases = [  # (target, the query as logged)
            ("/v1/export?token=SECRET1&pages=120", "pages=120"),
            ("/v1/export?pages=60&sig=SECRET2&pages=70", "pages=60&pages=70"),
            ("/v1/export?pag%65s=5&code=SECRET3", "pages=5"),  # canonical: %65 is "e"
            ("/v1/export?pages=1+0&access_token=SECRET4", "pages=1+0"),
            ("/v1/export?SECRET5", ""),
            ("/v1/export?page=3&SECRET6=pages", ""),
            ("/echo?pages=120&token=SECRET7", ""),  # a route that is not costed by a query
            ("/public/x?pages=2&key=SECRET8", ""),
        ]
        for target, _ in cases:
            r = gw.get(target, key=None if target.startswith("/public") else FREE_KEY)
            self.assertIn(r.status, (200, 400), (target, r))
        lines = [json.loads(raw) for raw in gw.access_log_lines(
            lambda line: line.get("route") in ("export", "public", "(default)"), len(cases))]
        lines = [line for line in lines if line.get("route")]
        self.assertEqual([line["query"] for line in lines], [want for _, want in cases])
        log = gw.process.read_stdout()
        for i in range(1, 9):
            self.assertNotIn(b"SECRET%d" % i, log)


if __name__ == "__main__":
    harness.main(__file__)
