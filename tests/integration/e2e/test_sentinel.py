#!/usr/bin/env python3
"""Integration tests of the Redis store on Redis Sentinel (redis-sentinel://): the real tollgate
binary, a real master, one replica (--replicaof) and three redis-sentinel processes (quorum 2,
down-after-milliseconds 1000, failover-timeout 3000), everything on 127.0.0.1.

    python3 test_sentinel.py --binary build/tollgate [unittest args] -v

Each test starts its own servers on free loopback ports in a temp dir and stops them by PID
(harness.GatewayTestCase). Skipped when redis-server, redis-sentinel or redis-cli is missing.

FailoverTests  the master is killed (SIGKILL) under steady load on two routes, one failing
               open and one failing closed: decisions resume on the promoted replica within a
               bounded time, the budget carries on there (the replica had the counts), and the
               figures of docs/operations.md ("Redis Sentinel") are printed: how long decisions
               failed, how long after the sentinels' +switch-master tollgate followed, and how
               many requests were admitted beyond the budget during the switch.
               SENTINEL_RATE (requests per second per route, default 100) sets the load.
               With SENTINEL_WRK=1 (a measurement, skipped otherwise), the same through wrk
               as fast as it goes on the fail-closed route: how far past the budget the
               admissions go when the replica is furthest behind.
"""
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GatewayTestCase, deadline_loop  # noqa: E402
from test_redis import RedisServer  # noqa: E402

REDIS_SENTINEL = shutil.which("redis-sentinel")
REDIS_CLI = shutil.which("redis-cli")
HAVE_SENTINEL = bool(REDIS_SENTINEL and REDIS_CLI and shutil.which("redis-server"))
MASTER = "mymaster"
OPEN_KEY = "sk-sentinel-open-0123456789"
CLOSED_KEY = "sk-sentinel-closed-0123456789"
RATE = float(os.environ.get("SENTINEL_RATE", "100"))  # requests per second, per route
BUDGET = 400  # the fail-closed key's burst: used up after the failover, at 100/s
RESUME_BOUND_S = 15.0  # decisions resume within this of the kill (typically 2-3 s)


class Sentinel:
    """A redis-sentinel monitoring MASTER at 127.0.0.1:`master_port`, its config (which a
    sentinel rewrites) and log in the test's temp dir; started through the fixture, so the
    harness stops it by PID."""

    def __init__(self, fixture, master_port):
        self.port, held = harness.reserve_port()
        fixture.held_sockets.append(held)
        folder = os.path.join(fixture.tmpdir, "sentinel-%d" % self.port)
        os.makedirs(folder)
        conf = os.path.join(folder, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\nlogfile \"\"\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel down-after-milliseconds %s 1000\n"
                    "sentinel failover-timeout %s 3000\n"
                    % (self.port, folder, MASTER, master_port, MASTER, MASTER))
        self.process = fixture.spawn("sentinel", [REDIS_SENTINEL, conf])
        for _ in deadline_loop(harness.START_TIMEOUT_S, step=0.05):
            try:
                if self.cli("PING", timeout=2) == "PONG":
                    return
            except (AssertionError, subprocess.TimeoutExpired):
                pass
        raise AssertionError("redis-sentinel did not start on port %d" % self.port)

    def cli(self, *args, timeout=5):
        r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)] + list(args),
                           capture_output=True, timeout=timeout)
        out = r.stdout.decode(errors="replace").strip()
        if r.returncode != 0 or out.startswith("ERR") or "Could not connect" in out:
            raise AssertionError("redis-cli %s: %s %s" % (" ".join(args), out, r.stderr))
        return out

    def master_field(self, field):
        lines = self.cli("SENTINEL", "MASTER", MASTER).splitlines()
        fields = dict(zip(lines[0::2], lines[1::2]))
        return fields.get(field)

    def master_port(self):
        lines = self.cli("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER).splitlines()
        return int(lines[1]) if len(lines) == 2 else None


class SwitchWatcher(threading.Thread):
    """Subscribes to +switch-master on every sentinel and records when the first announces a
    new master (time.monotonic())."""

    def __init__(self, sentinels):
        super().__init__(daemon=True)
        self.socks = [socket.create_connection(("127.0.0.1", s.port), timeout=0.1)
                      for s in sentinels]
        for s in self.socks:
            s.sendall(b"SUBSCRIBE +switch-master\r\n")
        self.at = None
        self.stop_event = threading.Event()
        self.start()

    def run(self):
        buffers = [b""] * len(self.socks)
        end = time.monotonic() + 60
        while self.at is None and not self.stop_event.is_set() and time.monotonic() < end:
            for i, s in enumerate(self.socks):
                try:
                    buffers[i] += s.recv(4096)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if (MASTER + " 127.0.0.1 ").encode() in buffers[i] and self.at is None:
                    self.at = time.monotonic()

    def close(self):
        self.stop_event.set()
        self.join(timeout=5)
        for s in self.socks:
            s.close()


class RateLoad:
    """Requests at a fixed rate on one keep-alive connection per thread, until stopped (bounded
    by max_seconds). Records (sent_at, status, RateLimit-Remaining or None) per request."""

    def __init__(self, port, path, key, rate, threads=2, max_seconds=60.0):
        self.port, self.path, self.key = port, path, key
        self.interval = threads / rate
        self.max_seconds = max_seconds
        self.records, self.errors = [], []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _run(self, index):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=harness.REQUEST_TIMEOUT_S)
        start = time.monotonic()
        due = start + index * self.interval / len(self.threads)
        try:
            while not self.stop_event.is_set() and time.monotonic() < start + self.max_seconds:
                time.sleep(max(0.0, due - time.monotonic()))
                due += self.interval
                sent = time.monotonic()
                try:
                    conn.request("GET", self.path, headers={"X-API-Key": self.key})
                    r = conn.getresponse()
                    r.read()
                except (OSError, http.client.HTTPException) as e:
                    with self.lock:
                        self.errors.append(repr(e))
                    conn.close()
                    continue
                with self.lock:
                    self.records.append((sent, r.status, r.getheader("RateLimit-Remaining")))
        finally:
            conn.close()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=harness.REQUEST_TIMEOUT_S + 5)
        with self.lock:
            return sorted(self.records)


# wrk's responses by status, summed over its threads.
WRK_COUNT_STATUSES = """
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init() counts = {} end
function response(status) counts[status] = (counts[status] or 0) + 1 end
function done()
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("counts")) do total[status] = (total[status] or 0) + n end
  end
  for status, n in pairs(total) do io.write(string.format("status %d: %d\\n", status, n)) end
end
"""


@unittest.skipUnless(HAVE_SENTINEL, "redis-server, redis-sentinel and redis-cli are needed")
class FailoverTests(GatewayTestCase):

    def setUp(self):
        super().setUp()
        self.master = RedisServer(self)
        self.replica = RedisServer(self, ["--replicaof", "127.0.0.1", str(self.master.port)])
        self.sentinels = [Sentinel(self, self.master.port) for _ in range(3)]
        # Ready for a failover: every sentinel knows the replica and the two others, and the
        # replica is in sync (hello messages go every 2 s: a few seconds).
        ready = harness.wait_until(lambda: all(
            s.master_field("num-other-sentinels") == "2" and s.master_field("num-slaves") == "1"
            for s in self.sentinels) and "master_link_status:up" in self.replica.cli(
                "INFO", "replication"), timeout=30, step=0.1)
        self.assertTrue(ready, "the sentinels did not discover each other")
        self.upstream = harness.Upstream(self)

    def start_gateway(self, budget=BUDGET):
        url = "redis-sentinel://%s@%s" % (
            MASTER, ",".join("127.0.0.1:%d" % s.port for s in self.sentinels))
        config = {
            "server": {"threads": 2, "access_log": False},
            "store": {"type": "redis", "url": url, "prefix": "st", "timeout_ms": 200,
                      "connect_timeout_ms": 1000},
            "mode": "enforce",
            "plans": {"open": {"limits": [harness.burst(1000000, "0.001")]},
                      "closed": {"limits": [harness.burst(budget, "0.001")]}},
            "keys": [{"key": OPEN_KEY, "id": "k-open", "plan": "open"},
                     {"key": CLOSED_KEY, "id": "k-closed", "plan": "closed"}],
            "routes": [{"path": "/closed*", "fail_mode": "closed"},
                       {"path": "/open*", "fail_mode": "open"}],
            "headers": ["ietf", "ratelimit", "x-ratelimit"],
            "upstream": {"url": self.upstream.url},
        }
        return harness.Gateway(self, config)

    def test_master_killed_under_load(self):
        gw = self.start_gateway()
        watcher = SwitchWatcher(self.sentinels)
        self.addCleanup(watcher.close)
        loads = {"open": RateLoad(gw.port, "/open/x", OPEN_KEY, RATE).start(),
                 "closed": RateLoad(gw.port, "/closed/x", CLOSED_KEY, RATE).start()}
        try:
            time.sleep(100 / RATE)  # a quarter of the budget
            killed = time.monotonic()
            self.master.kill()
            self.assertTrue(harness.wait_until(
                lambda: self.sentinels[0].master_port() == self.replica.port, 20, 0.05),
                "the sentinels did not promote the replica")
            # Until the budget is spent and for a second of 429s after.
            harness.wait_until(lambda: any(
                rec[1] == 429 for rec in list(loads["closed"].records)[-100:]), 30, 0.1)
            time.sleep(1.0)
        finally:
            records = {name: load.stop() for name, load in loads.items()}
        for load in loads.values():
            self.assertEqual(load.errors, [])
        figures = self.figures(records, killed, watcher.at)
        sys.stderr.write("\n[sentinel failover at %g req/s per route: %s]\n" % (
            RATE, ", ".join("%s=%s" % kv for kv in figures.items())))
        self.assertLess(figures["resume_ms"], RESUME_BOUND_S * 1000)
        self.assertIsNotNone(watcher.at, "no +switch-master seen")
        # The budget carried on: the first count after the switch continues the last before it
        # (give or take what async replication lost, and decisions the old master made whose
        # answers the kill cut), instead of starting again from full.
        self.assertLessEqual(abs(figures["remaining_after"] - (figures["remaining_before"] - 1)),
                             5, figures)
        # Fail closed: 503 while no master answered, and the budget holds within a handful:
        # above it by what async replication lost, below it by decisions the old master counted
        # whose answers the kill cut (503s).
        self.assertGreater(figures["closed_503"], 0)
        self.assertLessEqual(abs(figures["beyond_budget"]), 5, figures)
        self.assertGreater(figures["open_unchecked"], 0)
        m = gw.metrics()
        self.assertEqual(m.get("tollgate_redis_master_switches_total"), 1)
        self.assertEqual(m.get("tollgate_limiter_unavailable_total"), figures["closed_503"])
        self.assertEqual(m.get("tollgate_degraded_total"), figures["open_unchecked"])
        # The promoted replica holds the counts.
        self.assertEqual(self.replica.cli("ROLE").splitlines()[0], "master")
        self.assertIn("st:{key:k-closed}:burst:tb", self.replica.keys("st:*"))

    @unittest.skipUnless(os.environ.get("SENTINEL_WRK") and shutil.which("wrk"),
                         "a measurement: SENTINEL_WRK=1, with wrk installed")
    def test_master_killed_under_wrk_load(self):
        """As fast as wrk goes on the fail-closed route (the replica furthest behind when the
        master dies): how far the admissions pass the budget. Prints the figures only."""
        budget = int(os.environ.get("SENTINEL_WRK_BUDGET", "30000"))
        gw = self.start_gateway(budget)
        script = os.path.join(self.tmpdir, "count.lua")
        with open(script, "w") as f:
            f.write(WRK_COUNT_STATUSES)
        wrk = self.spawn("wrk", ["wrk", "-t2", "-c32", "-d10s", "-s", script,
                                 "-H", "X-API-Key: " + CLOSED_KEY,
                                 "http://127.0.0.1:%d/closed/x" % gw.port])
        time.sleep(float(os.environ.get("SENTINEL_WRK_KILL_AFTER", "2.0")))
        peek = gw.get("/v1/rate-limit", headers={"X-API-Key": CLOSED_KEY}).json()
        self.master.kill()
        wrk.wait(timeout=30)
        out = wrk.read_stdout().decode()
        counts = {int(k): int(v) for k, v in re.findall(r"status (\d+): (\d+)", out)}
        sys.stderr.write("\n[sentinel failover under wrk: budget %d, %s left at the kill, "
                         "statuses %s, beyond the budget %d]\n%s\n" % (
                             budget, peek.get("remaining"), counts, counts.get(200, 0) - budget,
                             out))
        self.assertGreater(peek.get("remaining", 0), 0, "the budget was spent before the kill")
        self.assertIn(429, counts, "the budget was not spent after the failover")

    def figures(self, records, killed, switched):
        """The failover's figures from the requests' records (see the module's docstring).
        A decision failed when its answer carries no RateLimit-Remaining (fail open: 200 without
        it; fail closed: 503)."""
        closed, opened = records["closed"], records["open"]
        both = sorted(closed + opened)
        failed = [t for t, st, rm in both if t >= killed and rm is None]
        self.assertTrue(failed, "no decision failed: was the master killed?")
        back = min((t for t, st, rm in both if t > failed[-1] and rm is not None), default=None)
        self.assertIsNotNone(back, "decisions did not resume")
        first_back = min(t for t, st, rm in both if t > failed[0] and rm is not None)
        before = [int(rm) for t, st, rm in closed if t < failed[0] and rm is not None]
        after = [int(rm) for t, st, rm in closed if t > failed[-1] and rm is not None]
        ms = lambda seconds: round(seconds * 1000)  # noqa: E731
        return {
            # From the kill until every lane decides again (the first lane: first_resume_ms).
            "resume_ms": ms(back - killed),
            "first_resume_ms": ms(first_back - killed),
            "switch_master_ms": ms(switched - killed) if switched else None,
            # From the first +switch-master until every lane decides again.
            "after_switch_master_ms": ms(back - switched) if switched else None,
            "failed_decisions": len(failed),
            "remaining_before": before[-1] if before else BUDGET,
            "remaining_after": after[0] if after else -1,
            "closed_admitted": sum(1 for t, st, rm in closed if st == 200),
            "beyond_budget": sum(1 for t, st, rm in closed if st == 200) - BUDGET,
            "closed_503": sum(1 for t, st, rm in closed if st == 503),
            "open_unchecked": sum(1 for t, st, rm in opened if st == 200 and rm is None),
        }


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
