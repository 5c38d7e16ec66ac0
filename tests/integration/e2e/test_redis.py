#!/usr/bin/env python3
"""Integration tests of the Redis store: the real tollgate binary on a real redis-server, driven
by real HTTP clients, everything on 127.0.0.1.

    python3 test_redis.py --binary build/tollgate [unittest args, e.g. OutageTests -v]

Each test starts its own redis-server (free loopback port, temp dir, no persistence), its own
upstream (tests/support/upstream.py) and gateways, and stops them all by PID afterwards
(harness.GatewayTestCase). A paused redis-server is always continued before it is stopped.
Skipped when redis-server or redis-cli is not installed.

What they prove (DESIGN.md, "Redis" and "Fail mode"):
  ReplicaTests   two replicas on one Redis share one budget exactly (burst and quota ceiling);
                 environments with different prefixes on one Redis do not.
  OutageTests    Redis killed or stalled: fail_mode open answers (degraded, counted), closed
                 answers 503 limiter_unavailable with Retry-After, nothing hangs past the
                 deadline; limiting resumes when Redis is back, with no gateway restart
                 (nor a gateway started while Redis was down). An empty script cache
                 (SCRIPT FLUSH, restart) costs no request.
  KeyspaceTests  every limiter key expires with its window (10,000 keys); the deny cache
                 answers a flood locally, exactly.
  TlsTests       rediss://: limiting through TLS; a server whose certificate does not verify
                 is refused, the routes fail open, and the log says why.
"""
import collections
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GatewayTestCase, KeepAliveLoad, deadline_loop  # noqa: E402

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
HAVE_REDIS = bool(REDIS_SERVER and REDIS_CLI)

SLOW = "0.001"  # refill per second: nothing refills during a test
# The decision deadline for tests that count exactly. A missed deadline fails open and lets
# through a request Redis may have refused; five in a row open the circuit breaker, and every
# decision fails open for 500 ms. With the default 5 ms on a 2-core host shared with 50 client
# threads, 1,000 concurrent requests for a budget of 300 got up to 872 200s. So these tests
# give Redis room and assert that no decision degraded; the deadline itself is tested with a
# stalled Redis (OutageTests).
EXACT_TIMEOUT_MS = 200
STALL_TIMEOUT_MS = 20

ONE_KEY = "sk-redis-one-0123456789"
TWO_KEY = "sk-redis-two-0123456789"
LOAD_KEY = "sk-redis-load-0123456789"


def burst(capacity, refill=SLOW, name="burst"):
    """harness.burst with a slower default: some of these tests run under load for tens of
    seconds."""
    return harness.burst(capacity, refill, name)


def daily(allowance, ceiling):
    return {"name": "daily", "algorithm": "quota", "period": "day", "allowance": allowance,
            "ceiling": ceiling}


def config(redis, plans, keys, prefix="it", timeout_ms=EXACT_TIMEOUT_MS, routes=None,
           deny_cache=True, access_log=False):
    """A gateway config on `redis` (JSON is YAML). The harness fills in the listen ports."""
    c = {
        "server": {"threads": 2, "access_log": access_log},
        "store": {"type": "redis", "url": redis.url, "prefix": prefix, "timeout_ms": timeout_ms,
                  "connect_timeout_ms": 1000, "deny_cache": deny_cache},
        "mode": "enforce",
        "plans": plans,
        "keys": keys,
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    if routes:
        c["routes"] = routes
    return c


def metric(gw, name):
    """One unlabelled sample of gw's /metrics; 0 when absent (counters appear on first use)."""
    return gw.metrics().get(name, 0.0)


class RedisServer:
    """A redis-server on a loopback port held for the whole test (so a restart gets the same
    port), no persistence, its files in the test's temp dir. Started through the fixture, so
    the harness stops it by PID; continued (SIGCONT) before that if it was paused."""

    def __init__(self, fixture, extra_args=(), password=None):
        self.fixture = fixture
        self.password = password
        self.extra_args = list(extra_args) + (["--requirepass", password] if password else [])
        # reserve_port holds the port with SO_REUSEADDR and never listens: redis-server (which
        # sets SO_REUSEADDR) can bind it, and nobody else gets it between restarts.
        self.port, held = harness.reserve_port()
        fixture.held_sockets.append(held)
        self.dir = os.path.join(fixture.tmpdir, "redis-%d" % self.port)
        os.makedirs(self.dir, exist_ok=True)
        self.process = None
        self.paused = False
        # Cleanups run last-in first-out: this one runs before the harness stops every process.
        fixture.addCleanup(self.resume)
        self.start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def start(self):
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--logfile", ""] + self.extra_args
        self.process = self.fixture.spawn("redis", argv)
        for _ in deadline_loop(harness.START_TIMEOUT_S, step=0.05):
            if not self.process.alive():
                break
            try:
                if self.cli("PING", timeout=2) == "PONG":
                    return
            except (AssertionError, subprocess.TimeoutExpired):
                pass
        raise AssertionError("redis-server did not start on port %d:\n%s" % (
            self.port, self.process.read_stdout().decode(errors="replace")[-2000:]))

    def cli(self, *args, timeout=5):
        """One redis-cli command; its raw output (stdout is not a tty), stripped."""
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)] + auth + list(args),
                           capture_output=True, timeout=timeout)
        out = r.stdout.decode(errors="replace").strip()
        if r.returncode != 0 or out.startswith("ERR") or "Could not connect" in out:
            raise AssertionError("redis-cli %s: %s %s" % (" ".join(args), out, r.stderr))
        return out

    def dbsize(self):
        return int(self.cli("DBSIZE"))

    def keys(self, pattern):
        """Every key matching `pattern` (SCAN, bounded)."""
        found, cursor = set(), "0"
        for _ in range(100_000):
            lines = self.cli("SCAN", cursor, "MATCH", pattern, "COUNT", "1000").splitlines()
            cursor = lines[0] if lines else "0"
            found.update(line for line in lines[1:] if line)
            if cursor == "0":
                return found
        raise AssertionError("SCAN did not finish")

    def limiter_keys(self, pattern="*"):
        """The limiter's keys matching `pattern`: usage counts (flushed every 100 ms, at any
        moment of a test) left out."""
        return {k for k in self.keys(pattern) if ":{usage:" not in k and ":usage:" not in k}

    def info(self, section):
        """INFO `section` as {field: value}."""
        out = {}
        for line in self.cli("INFO", section).splitlines():
            name, sep, value = line.partition(":")
            if sep:
                out[name.strip()] = value.strip()
        return out

    def script_calls(self):
        """Script calls Redis itself executed (EVALSHA + EVAL), from INFO commandstats."""
        total = 0
        for name, value in self.info("commandstats").items():
            if name in ("cmdstat_evalsha", "cmdstat_eval"):
                total += int(re.search(r"calls=(\d+)", value).group(1))
        return total

    def kill(self, sig=signal.SIGKILL):
        """Stops this redis-server by PID (SIGKILL: a crash; SIGTERM: a clean shutdown)."""
        self.resume()
        self.process.signal(sig)
        self.process.wait(timeout=harness.STOP_TIMEOUT_S)

    def restart(self, sig=signal.SIGKILL):
        """A new redis-server on the same port: empty, scripts not loaded."""
        self.kill(sig)
        self.start()

    def pause(self):
        self.paused = True
        self.process.signal(signal.SIGSTOP)

    def resume(self):
        if self.paused and self.process is not None:
            self.process.signal(signal.SIGCONT)
        self.paused = False


class Hammer:
    """`total` requests at once: `threads` threads released together by a barrier, each with
    one keep-alive connection per port, sending its share round-robin over the ports.
    Bounded: each thread sends its share once, each request has a timeout. Records statuses
    per port, one example response per status, and errors."""

    def __init__(self, ports, path, headers, total, threads=50, timeout=20.0):
        self.ports, self.path, self.headers = list(ports), path, headers
        self.timeout = timeout
        self.lock = threading.Lock()
        self.statuses = collections.Counter()
        self.by_port = {p: collections.Counter() for p in self.ports}
        self.examples = {}
        self.errors = []
        self.seconds = 0.0
        shares = [total // threads + (1 if i < total % threads else 0) for i in range(threads)]
        self.barrier = threading.Barrier(threads, timeout=60)
        self.workers = [threading.Thread(target=self._run, args=(i, s), daemon=True)
                        for i, s in enumerate(shares)]

    def _run(self, index, share):
        conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=self.timeout)
                 for p in self.ports]
        try:
            try:
                for c in conns:
                    c.connect()
            except OSError:
                self.barrier.abort()  # nobody waits for a thread that cannot start
                raise
            self.barrier.wait()
            for i in range(share):
                n = (index + i) % len(conns)
                try:
                    conns[n].request("GET", self.path, headers=self.headers)
                    r = conns[n].getresponse()
                    body = r.read()
                except (OSError, http.client.HTTPException) as e:
                    with self.lock:
                        self.errors.append(repr(e))
                    conns[n].close()  # reconnects on the next request
                    continue
                with self.lock:
                    self.statuses[r.status] += 1
                    self.by_port[self.ports[n]][r.status] += 1
                    if r.status not in self.examples:
                        self.examples[r.status] = harness.Response(r.status, r.headers, body)
        except (OSError, threading.BrokenBarrierError) as e:
            with self.lock:
                self.errors.append(repr(e))
        finally:
            for c in conns:
                c.close()

    def run(self):
        start = time.monotonic()
        for t in self.workers:
            t.start()
        join_all(self.workers, 120)
        self.seconds = time.monotonic() - start
        return self


def join_all(threads, seconds):
    """Joins `threads` within `seconds` in all; fails if any is still running."""
    end = time.monotonic() + seconds
    for t in threads:
        t.join(timeout=max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise AssertionError("client threads still running after %d s" % seconds)


def wait_until(predicate, seconds, step=0.05):
    """True as soon as predicate() is true, False after `seconds` (bounded)."""
    for _ in deadline_loop(seconds, step=step):
        if predicate():
            return True
    return False


@unittest.skipUnless(HAVE_REDIS, "redis-server and redis-cli are not installed")
class RedisTestCase(GatewayTestCase):
    """Starts a fresh redis-server and upstream for each test; gateways on demand."""

    def setUp(self):
        super().setUp()
        self.redis = RedisServer(self)
        self.upstream = harness.Upstream(self)

    def gateway(self, cfg, name="tollgate"):
        cfg = dict(cfg, upstream={"url": self.upstream.url})
        return harness.Gateway(self, cfg, name=name)

    def assertNoDegradation(self, *gateways):
        for gw in gateways:
            m = gw.metrics()
            self.assertEqual(m.get("tollgate_degraded_total", 0), 0, "a decision failed open")
            self.assertEqual(m.get("tollgate_limiter_unavailable_total", 0), 0)
            self.assertEqual(m.get("tollgate_redis_timeouts_total", 0), 0)
            self.assertEqual(m.get("tollgate_redis_errors_total", 0), 0)

    def assertHasRateLimitHeaders(self, r, remaining=None):
        self.assertIsNotNone(r.header("RateLimit-Policy"), r)
        self.assertIsNotNone(r.header("RateLimit-Remaining"), r)
        if remaining is not None:
            self.assertEqual(r.header("RateLimit-Remaining"), str(remaining), r)


class ReplicaTests(RedisTestCase):
    """Several replicas, one Redis: one budget per key, one per environment."""

    def start_replicas(self, plans, keys, **kw):
        a = self.gateway(config(self.redis, plans, keys, **kw), name="tollgate-a")
        b = self.gateway(config(self.redis, plans, keys, **kw), name="tollgate-b")
        return a, b

    def assertExactAcrossReplicas(self, a, b, key, budget, total, code):
        load = Hammer([a.port, b.port], "/echo", {"X-API-Key": key}, total).run()
        sys.stderr.write("[%d requests in %.2f s; per replica %s] " % (
            total, load.seconds, {p: dict(c) for p, c in load.by_port.items()}))
        self.assertEqual(load.errors, [])
        self.assertEqual(dict(load.statuses), {200: budget, 429: total - budget}, load.statuses)
        # Both replicas accepted some: the budget really is shared, not counted twice.
        self.assertGreater(load.by_port[a.port][200], 0, load.by_port)
        self.assertGreater(load.by_port[b.port][200], 0, load.by_port)
        self.assertRateLimited(load.examples[429], code)
        self.assertEqual(self.upstream.stats()["received"], budget)
        self.assertNoDegradation(a, b)
        rejected = sum(m.get('tollgate_rejections_total{plan="p",code="%s"}' % code, 0)
                       for m in (a.metrics(), b.metrics()))
        self.assertEqual(rejected, total - budget)

    def test_burst_budget_is_exact_across_two_replicas(self):
        a, b = self.start_replicas({"p": {"limits": [burst(300)]}},
                                   [{"key": ONE_KEY, "id": "k-one", "plan": "p"}])
        self.assertExactAcrossReplicas(a, b, ONE_KEY, 300, 1000, "rate_limited")
        # The state lives in Redis under the documented key.
        self.assertEqual(self.redis.keys("it:{key:*"), {"it:{key:k-one}:burst:tb"})

    def test_global_route_limit_is_one_budget_across_replicas_and_keys(self):
        # 1,000 concurrent requests of two keys through two replicas; the route's global limit
        # (100) admits exactly 100 in all, whoever sends them (issue 20).
        other = "sk-two-0123456789abcdef"
        plans = {"p": {"limits": [burst(100000, "1000")]}}
        keys = [{"key": ONE_KEY, "id": "k-one", "plan": "p"},
                {"key": other, "id": "k-two", "plan": "p"}]
        routes = [{"name": "search", "path": "/echo",
                   "limits": [{"name": "upstream", "scope": "global", "capacity": 100,
                               "refill_per_second": SLOW}]}]
        a, b = self.start_replicas(plans, keys, routes=routes)
        loads = [Hammer([a.port, b.port], "/echo", {"X-API-Key": k}, 500, threads=25)
                 for k in (ONE_KEY, other)]
        runners = [threading.Thread(target=h.run) for h in loads]
        for t in runners:
            t.start()
        join_all(runners, 150)
        for h in loads:
            self.assertEqual(h.errors, [])
        admitted = sum(h.statuses[200] for h in loads)
        rejected = sum(h.statuses[429] for h in loads)
        self.assertEqual((admitted, rejected), (100, 900),
                         [dict(h.statuses) for h in loads])
        self.assertEqual(self.upstream.stats()["received"], 100)
        self.assertNoDegradation(a, b)
        body = loads[0].examples[429].json()
        self.assertEqual(body["violated-policies"], ["search:upstream"], body)
        # One key for every caller, under the documented name.
        self.assertIn("it:{global}:search:upstream:tb", self.redis.keys("it:{global}*"))

    def test_smoothing_holds_to_one_schedule_across_replicas(self):
        # 2 of burst, 10/s, held up to 450 ms (issue 20): of 8 requests at once through two
        # replicas, the script reserves 2 immediate slots and 4 delayed ones (100-400 ms) on
        # one schedule; the last 2 would wait 500 and 600 ms: 429.
        plans = {"p": {"limits": [{"name": "burst", "capacity": 2, "refill_per_second": 10,
                                   "on_limit": "delay", "max_delay_ms": 450}]}}
        a, b = self.start_replicas(plans, [{"key": ONE_KEY, "id": "k-one", "plan": "p"}])
        load = Hammer([a.port, b.port], "/echo", {"X-API-Key": ONE_KEY}, 8, threads=8).run()
        self.assertEqual(load.errors, [])
        self.assertEqual(dict(load.statuses), {200: 6, 429: 2}, load.statuses)
        # The four held requests waited 0.1-0.4 s: the run lasts at least the last slot.
        self.assertGreaterEqual(load.seconds, 0.35)
        self.assertNoDegradation(a, b)
        held = sum(m.get("tollgate_delay_seconds_count", 0) for m in (a.metrics(), b.metrics()))
        self.assertEqual(held, 4)

    def test_quota_ceiling_is_exact_across_two_replicas(self):
        # A UTC day must not end during the test (the quota would start again).
        to_midnight = 86400 - time.time() % 86400
        if to_midnight < 30:
            time.sleep(to_midnight + 1)
        a, b = self.start_replicas({"p": {"limits": [burst(100000, "1000"), daily(100, 250)]}},
                                   [{"key": ONE_KEY, "id": "k-one", "plan": "p"}])
        self.assertExactAcrossReplicas(a, b, ONE_KEY, 250, 1000, "ceiling_exceeded")

    def test_prefixes_isolate_environments_on_one_redis(self):
        plans = {"p": {"limits": [burst(5)]}}
        keys = [{"key": ONE_KEY, "id": "k-one", "plan": "p"}]
        staging = self.gateway(config(self.redis, plans, keys, prefix="staging"), "staging")
        prod = self.gateway(config(self.redis, plans, keys, prefix="production"), "production")
        self.assertEqual([staging.get("/echo", key=ONE_KEY).status for _ in range(6)],
                         [200] * 5 + [429])
        # Staging spent its budget; production's, for the same key, is whole.
        r = prod.get("/echo", key=ONE_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertHasRateLimitHeaders(r, remaining=4)
        self.assertEqual([prod.get("/echo", key=ONE_KEY).status for _ in range(5)],
                         [200] * 4 + [429])
        self.assertRateLimited(staging.get("/echo", key=ONE_KEY))
        self.assertEqual(self.redis.limiter_keys("staging:*"), {"staging:{key:k-one}:burst:tb"})
        self.assertEqual(self.redis.limiter_keys("production:*"), {"production:{key:k-one}:burst:tb"})
        # Usage counts too stay under their environment's prefix.
        self.assertEqual({k for k in self.redis.keys("*")
                          if not k.startswith(("staging:", "production:"))}, set())
        self.assertNoDegradation(staging, prod)


class OutageTests(RedisTestCase):
    """Redis dies, stalls or forgets its scripts; the routes follow their fail_mode."""

    ROUTES = [{"path": "/closed*", "fail_mode": "closed"}, {"path": "/open*", "fail_mode": "open"}]

    def outage_config(self, timeout_ms):
        return config(self.redis,
                      {"load": {"limits": [burst(1000000, "1000")]}, "p": {"limits": [burst(5)]}},
                      [{"key": LOAD_KEY, "id": "k-load", "plan": "load"},
                       {"key": ONE_KEY, "id": "k-one", "plan": "p"},
                       {"key": TWO_KEY, "id": "k-two", "plan": "p"}],
                      timeout_ms=timeout_ms, routes=self.ROUTES)

    def assertUnavailable(self, r):
        self.assertEqual(r.status, 503, r)
        self.assertTrue(r.header("Content-Type", "").startswith("application/problem+json"), r)
        self.assertEqual(r.json()["code"], "limiter_unavailable", r)
        self.assertRegex(r.header("Retry-After", ""), r"^[1-9][0-9]*$", r)

    def assertLimitingWorks(self, gw, key, capacity=5):
        """A key unused so far: `capacity` 200s with rate-limit headers, then a 429."""
        for i in range(capacity):
            r = gw.get("/open/x", key=key)
            self.assertEqual(r.status, 200, r)
            self.assertHasRateLimitHeaders(r, remaining=capacity - 1 - i)
        self.assertRateLimited(gw.get("/open/x", key=key))

    def wait_back(self, gw):
        """Waits (bounded) until decisions come from Redis again: rate-limit headers are back.
        Returns the seconds it took."""
        start = time.monotonic()
        back = wait_until(
            lambda: gw.get("/open/x", key=LOAD_KEY).header("RateLimit-Policy") is not None, 15)
        self.assertTrue(back, "limiting did not resume within 15 s of Redis coming back")
        return time.monotonic() - start

    def test_redis_killed_during_load_then_back(self):
        gw = self.gateway(self.outage_config(EXACT_TIMEOUT_MS))
        load = KeepAliveLoad(gw.port, "/open/load", {"X-API-Key": LOAD_KEY}, threads=4,
                             max_requests=20000, max_seconds=40).start()
        try:
            self.assertTrue(load.wait_for(100), "the load did not get going")
            self.assertEqual(metric(gw, "tollgate_degraded_total"), 0)
            self.redis.kill()
            # Fail open: the load goes on (KeepAliveLoad records any 5xx as an error), counted.
            self.assertTrue(wait_until(lambda: metric(gw, "tollgate_degraded_total") >= 50, 10),
                            "degraded_total did not rise while Redis was down")
            during = load.count
            self.assertTrue(load.wait_for(during + 100), "the load stalled while Redis was down")
            r = gw.get("/open/x", key=ONE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertIsNone(r.header("RateLimit-Policy"), r)  # nothing known to advertise
            # Fail closed: 503 limiter_unavailable with Retry-After, and the upstream not called.
            received = self.upstream.stats()["received"]
            for _ in range(3):
                self.assertUnavailable(gw.get("/closed/x", key=ONE_KEY))
            self.assertGreaterEqual(metric(gw, "tollgate_limiter_unavailable_total"), 3)
            # Back on the same port, empty: limiting resumes with no gateway restart.
            self.redis.start()
            seconds = self.wait_back(gw)
            sys.stderr.write("[limiting back %.2f s after Redis] " % seconds)
            self.assertTrue(load.wait_for(load.count + 50), "the load stalled after Redis came back")
        finally:
            load.stop()
        self.assertEqual(load.errors, [])
        self.assertEqual(set(load.statuses), {200}, load.statuses)
        self.assertGreater(self.upstream.stats()["received"], received)
        self.assertLimitingWorks(gw, TWO_KEY)
        r = gw.get("/closed/x", key=LOAD_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertHasRateLimitHeaders(r)
        self.assertEqual(gw.process.alive(), True)
        m = gw.metrics()
        self.assertGreater(m.get("tollgate_redis_reconnects_total", 0), 0)
        self.assertGreater(m.get("tollgate_redis_errors_total", 0) +
                           m.get("tollgate_redis_breaker_rejections_total", 0), 0)

    def test_stalled_redis_trips_the_deadline(self):
        gw = self.gateway(self.outage_config(STALL_TIMEOUT_MS))
        self.assertHasRateLimitHeaders(gw.get("/open/x", key=LOAD_KEY))
        self.redis.pause()
        slowest = 0.0
        try:
            for i in range(40):
                path = "/closed/x" if i % 4 == 3 else "/open/x"
                start = time.monotonic()
                r = gw.get(path, key=LOAD_KEY, timeout=5)
                slowest = max(slowest, time.monotonic() - start)
                if path == "/open/x":
                    self.assertEqual(r.status, 200, r)
                else:
                    self.assertUnavailable(r)
                if i == 20:
                    time.sleep(0.6)  # past the breaker's open time: probes go out, and time out
            # Concurrent requests do not hang either.
            load = Hammer([gw.port], "/open/x", {"X-API-Key": LOAD_KEY}, 100, threads=10,
                          timeout=5).run()
            m = gw.metrics()
        finally:
            self.redis.resume()
        sys.stderr.write("[slowest %.0f ms, 100 concurrent in %.2f s] " % (
            slowest * 1000, load.seconds))
        self.assertLess(slowest, 1.0)
        self.assertEqual(load.errors, [])
        self.assertEqual(dict(load.statuses), {200: 100})
        self.assertLess(load.seconds, 5.0)
        self.assertEqual(m.get("tollgate_degraded_total", 0), 30 + 100)
        self.assertEqual(m.get("tollgate_limiter_unavailable_total", 0), 10)
        self.assertGreater(m.get("tollgate_redis_timeouts_total", 0), 0)
        self.assertGreater(m.get("tollgate_redis_breaker_rejections_total", 0), 0)
        # Continued: the breaker closes on the next probe, limiting resumes.
        self.wait_back(gw)
        self.assertLimitingWorks(gw, ONE_KEY)
        self.assertEqual(metric(gw, "tollgate_redis_breaker_open"), 0)

    def test_script_flush_costs_no_request(self):
        # One thread: one connection to Redis (each thread has its own), so the flush costs
        # exactly one NOSCRIPT below.
        c = self.outage_config(EXACT_TIMEOUT_MS)
        c["server"]["threads"] = 1
        gw = self.gateway(c)
        statuses = [gw.get("/closed/x", key=ONE_KEY).status for _ in range(2)]
        self.assertEqual(self.redis.cli("SCRIPT", "FLUSH"), "OK")
        statuses += [gw.get("/closed/x", key=ONE_KEY).status for _ in range(4)]
        self.assertEqual(statuses, [200] * 5 + [429])
        # The script is loaded when the connection opens; the flush costs one NOSCRIPT.
        self.assertEqual(metric(gw, "tollgate_redis_noscript_total"), 1)
        # Under load, on a fail-closed route (a failed decision would be a 503): every
        # EVALSHA in flight when the scripts go is answered NOSCRIPT and sent again.
        load = KeepAliveLoad(gw.port, "/closed/load", {"X-API-Key": LOAD_KEY}, threads=4,
                             max_requests=20000, max_seconds=30).start()
        try:
            self.assertTrue(load.wait_for(50), "the load did not get going")
            for _ in range(5):
                self.assertEqual(self.redis.cli("SCRIPT", "FLUSH"), "OK")
                self.assertTrue(load.wait_for(load.count + 50), "the load stalled")
        finally:
            load.stop()
        self.assertEqual(load.errors, [])
        self.assertEqual(set(load.statuses), {200}, load.statuses)
        self.assertGreaterEqual(metric(gw, "tollgate_redis_noscript_total"), 1 + 5)
        self.assertNoDegradation(gw)

    def test_restarted_redis_with_empty_script_cache_costs_no_request(self):
        gw = self.gateway(self.outage_config(EXACT_TIMEOUT_MS))
        self.assertEqual([gw.get("/closed/x", key=ONE_KEY).status for _ in range(6)],
                         [200] * 5 + [429])
        # A clean restart (the gateway sees its connection close): nothing in Redis survives,
        # neither the state nor the script.
        self.redis.restart(signal.SIGTERM)
        self.assertEqual(self.redis.limiter_keys(), set())
        self.assertEqual(self.redis.cli("SCRIPT", "EXISTS", "0" * 40), "0")
        time.sleep(0.3)  # past the reconnect backoff (50 ms after the first failure)
        statuses = [gw.get("/closed/x", key=TWO_KEY).status for _ in range(6)]
        self.assertEqual(statuses, [200] * 5 + [429])
        # The reconnect loads the script again before the first decision: no NOSCRIPT at all.
        self.assertEqual(metric(gw, "tollgate_redis_noscript_total"), 0)
        self.assertNoDegradation(gw)

    def test_gateway_started_while_redis_is_down(self):
        self.redis.kill()
        gw = self.gateway(self.outage_config(EXACT_TIMEOUT_MS))
        r = gw.get("/open/x", key=LOAD_KEY)
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(r.header("RateLimit-Policy"), r)
        self.assertUnavailable(gw.get("/closed/x", key=LOAD_KEY))
        self.assertEqual(metric(gw, "tollgate_degraded_total"), 1)
        self.assertEqual(metric(gw, "tollgate_limiter_unavailable_total"), 1)
        self.redis.start()
        self.wait_back(gw)
        self.assertLimitingWorks(gw, ONE_KEY)


class DenyShareTests(RedisTestCase):
    def test_a_deny_entry_reaches_every_replica_within_a_second(self):
        cfg = config(self.redis, {"p": {"limits": [burst(100)]}},
                     [{"key": ONE_KEY, "id": "one", "account": "a1", "plan": "p"}])
        a, b = self.gateway(cfg, name="a"), self.gateway(cfg, name="b")
        self.assertEqual(b.get("/x", key=ONE_KEY).status, 200)
        r = a.admin("POST", "/admin/deny?kind=account&value=a1")
        self.assertEqual(r.status, 200, r)
        added = time.monotonic()
        status = None
        for _ in deadline_loop(3, step=0.05):
            status = b.get("/x", key=ONE_KEY).status
            if status == 403:
                break
        self.assertEqual(status, 403)
        self.assertLess(time.monotonic() - added, 1.5)
        self.assertEqual(a.admin("POST", "/admin/deny/remove?kind=account&value=a1").status, 200)
        for _ in deadline_loop(3, step=0.05):
            status = b.get("/x", key=ONE_KEY).status
            if status == 200:
                break
        self.assertEqual(status, 200)


class ResetTests(RedisTestCase):
    def test_admin_reset_forgets_a_keys_counters_in_redis(self):
        cfg = config(self.redis, {"p": {"limits": [burst(2)]}},
                     [{"key": ONE_KEY, "id": "one", "plan": "p"}])
        a, b = self.gateway(cfg, name="a"), self.gateway(cfg, name="b")
        self.assertEqual([a.get("/x", key=ONE_KEY).status for _ in range(3)], [200, 200, 429])
        self.assertEqual(b.get("/x", key=ONE_KEY).status, 429)  # one budget, in Redis
        r = a.admin("POST", "/admin/reset", body=b'{"key_id": "one"}',
                    headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r)
        # Every replica sees the fresh budget within a second: b's deny cache, which knew the
        # bucket empty, is cleared when b reads the reset epoch.
        status = None
        for _ in deadline_loop(2, step=0.05):
            status = b.get("/x", key=ONE_KEY).status
            if status == 200:
                break
        self.assertEqual(status, 200)
        self.assertEqual([b.get("/x", key=ONE_KEY).status for _ in range(2)], [200, 429])


class SecretTests(GatewayTestCase):
    """A Redis password kept out of the config file: `${ENV}` and `file:` in store.url. Nothing
    the binary prints names the secret."""

    PASSWORD = "s3cret-0f-the-redis"

    def setUp(self):
        super().setUp()
        self.redis = RedisServer(self, password=self.PASSWORD)
        self.upstream = harness.Upstream(self)
        self.env = {}
        self.addCleanup(lambda: [os.environ.pop(k, None) for k in self.env])

    def setenv(self, name, value):
        self.env[name] = value
        os.environ[name] = value  # inherited by the processes the test starts

    def cfg(self, url):
        c = config(self.redis, {"p": {"limits": [burst(3)]}},
                   [{"key": ONE_KEY, "id": "one", "plan": "p"}])
        c["store"]["url"] = url
        c["upstream"] = {"url": self.upstream.url}
        return c

    def check_config(self, cfg):
        path = os.path.join(self.tmpdir, "check.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                           timeout=30)
        self.assertNotIn(self.PASSWORD.encode(), r.stdout + r.stderr)
        return r

    def test_the_password_from_the_environment_or_a_file(self):
        self.setenv("TG_TEST_REDIS_PASSWORD", self.PASSWORD)
        secret_file = os.path.join(self.tmpdir, "redis-url")
        with open(secret_file, "w") as f:
            f.write("redis://:%s@127.0.0.1:%d\n" % (self.PASSWORD, self.redis.port))
        for label, url in (
                ("env", "redis://:${TG_TEST_REDIS_PASSWORD}@127.0.0.1:%d" % self.redis.port),
                ("file", "file:" + secret_file)):
            with self.subTest(label):
                cfg = self.cfg(url)
                cfg["store"]["prefix"] = label  # a budget of its own
                self.assertEqual(self.check_config(cfg).returncode, 0)
                gw = harness.Gateway(self, cfg, name=label)
                statuses = [gw.get("/x", key=ONE_KEY).status for _ in range(4)]
                self.assertEqual(statuses, [200, 200, 200, 429])
                self.assertGreater(int(self.redis.cli("DBSIZE")), 0)
                gw.process.stop()
                err = gw.process.read_stderr() + gw.process.read_stdout()
                self.assertNotIn(self.PASSWORD.encode(), err)

    def test_a_missing_variable_or_file_is_refused_naming_it_not_a_value(self):
        self.setenv("TG_TEST_SET", self.PASSWORD)
        cases = [
            ("redis://:${TG_TEST_UNSET_VAR}@127.0.0.1:1",
             b"store.url: the environment variable TG_TEST_UNSET_VAR is not set"),
            ("redis://:${TG_TEST_SET@127.0.0.1:1", b"store.url: '${' without its '}'"),
            ("redis://:${1BAD}@127.0.0.1:1", b"does not name an environment variable"),
            ("file:/nonexistent/redis-url", b"store.url: cannot read the file of"),
        ]
        for url, error in cases:
            with self.subTest(url):
                r = self.check_config(self.cfg(url))
                self.assertEqual(r.returncode, 1, r)
                self.assertIn(error, r.stderr)


class KeyspaceTests(RedisTestCase):
    """What the keys cost Redis: memory (TTLs) and calls (the deny cache)."""

    def test_keys_of_many_identities_expire_with_their_windows(self):
        n = 10_000
        keys = [{"key": "sk-bulk-%05d-0123456789" % i, "id": "b%05d" % i, "account": "bulk",
                 "plan": "tiny"} for i in range(n)]
        # Two tokens at 20/s: a key used once is full again, and gone, after 50 ms.
        cfg = config(self.redis, {"tiny": {"limits": [burst(2, "20")]}}, keys)
        # The requests go to the decision listener (same engine, same store, same keys), which
        # answers itself: the Python upstream, about 40 ms per request on a keep-alive
        # connection, would make 10,000 requests take half a minute.
        decision_port, held = harness.reserve_port()
        self.held_sockets.append(held)
        cfg["decision"] = {"listen": "127.0.0.1:%d" % decision_port}
        gw = self.gateway(cfg)
        expired_before = int(self.redis.info("stats")["expired_keys"])
        statuses = collections.Counter()
        lock = threading.Lock()
        threads = 8

        def run(index):
            conn = http.client.HTTPConnection("127.0.0.1", decision_port, timeout=20)
            try:
                for i in range(index, n, threads):
                    conn.request("GET", "/auth", headers={"X-API-Key": keys[i]["key"],
                                                          "X-Original-URI": "/echo"})
                    r = conn.getresponse()
                    r.read()
                    with lock:
                        statuses[r.status] += 1
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    statuses[repr(e)] += 1
            finally:
                conn.close()

        start = time.monotonic()
        workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
        for t in workers:
            t.start()
        join_all(workers, 120)
        seconds = time.monotonic() - start
        self.assertEqual(dict(statuses), {200: n})
        self.assertNoDegradation(gw)
        self.assertEqual(metric(gw, "tollgate_redis_calls_total"), n)
        # Every limiter key expires; what stays is the usage meter (one hash per account and
        # day plus that day's account index, with a retention TTL: billing records) and the
        # replicas' heartbeats (fail_mode: local), which expire a minute after the last one.
        limiter_keys = lambda: self.redis.keys("it:{key:*")  # noqa: E731
        left = len(limiter_keys())
        wait_start = time.monotonic()
        gone = wait_until(lambda: not limiter_keys(), 10, step=0.2)
        waited = time.monotonic() - wait_start
        sys.stderr.write("[%d keys: requests %.2f s, %d limiter keys left at the end, all gone "
                         "%.2f s later] " % (n, seconds, left, waited))
        self.assertTrue(gone, "%d limiter keys still in Redis" % len(limiter_keys()))
        expired = int(self.redis.info("stats")["expired_keys"]) - expired_before
        self.assertGreaterEqual(expired, n)
        for k in self.redis.keys("*"):
            self.assertRegex(k, r"^it:((usage:|\{usage:bulk\}:)\d{4}-\d{2}-\d{2}|replicas)$")
            self.assertGreater(int(self.redis.cli("TTL", k)), 0, k)

    def test_deny_cache_answers_a_flood_locally(self):
        capacity, total = 10, 1000  # 100 times the limit
        gw = self.gateway(config(self.redis, {"p": {"limits": [burst(capacity)]}},
                                 [{"key": ONE_KEY, "id": "k-one", "plan": "p"},
                                  {"key": TWO_KEY, "id": "k-two", "plan": "p"}]))
        calls_before = metric(gw, "tollgate_redis_calls_total")
        scripts_before = metric(gw, "tollgate_redis_scripts_total")
        noscript_before = metric(gw, "tollgate_redis_noscript_total")
        redis_before = self.redis.script_calls()
        load = Hammer([gw.port], "/echo", {"X-API-Key": ONE_KEY}, total, threads=20).run()
        self.assertEqual(load.errors, [])
        self.assertEqual(dict(load.statuses), {200: capacity, 429: total - capacity})
        self.assertRateLimited(load.examples[429])
        m = gw.metrics()
        calls = m["tollgate_redis_calls_total"] - calls_before
        scripts = m["tollgate_redis_scripts_total"] - scripts_before
        local = m.get("tollgate_deny_cache_rejections_total", 0)
        # Redis's own count: each call, plus one EVAL for each EVALSHA answered NOSCRIPT.
        redis_calls = (self.redis.script_calls() - redis_before -
                       (m.get("tollgate_redis_noscript_total", 0) - noscript_before))
        sys.stderr.write("[%d requests: %d decisions sent to Redis in %d script calls (Redis counted %d), "
                         "%d rejected locally] " % (total, calls, scripts, redis_calls, local))
        # Every request either reached Redis or was rejected locally, and most were local.
        self.assertEqual(calls + local, total)
        self.assertLessEqual(calls, total // 10)
        # Decisions waiting while others are in flight leave together, in one script call.
        self.assertLessEqual(scripts, calls)
        self.assertEqual(redis_calls, scripts)
        self.assertGreaterEqual(local, total - total // 10)
        self.assertEqual(m.get('tollgate_rejections_total{plan="p",code="rate_limited"}'),
                         total - capacity)
        # A second key within its limit is untouched by the cache.
        for i in range(capacity // 2):
            r = gw.get("/echo", key=TWO_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertHasRateLimitHeaders(r, remaining=capacity - 1 - i)
        self.assertEqual(metric(gw, "tollgate_redis_calls_total") - calls_before,
                         calls + capacity // 2)
        self.assertNoDegradation(gw)


def make_certs(d):
    """With the openssl command line tool, in `d`: a CA (ca.crt), a certificate for 127.0.0.1
    signed by it (server.crt, server.key), and another CA (other.crt)."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)
    path = lambda name: os.path.join(d, name)  # noqa: E731
    for ca in ("ca", "other"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=" + ca,
                "-keyout", path(ca + ".key"), "-out", path(ca + ".crt"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=server", "-keyout", path("server.key"),
            "-out", path("server.csr"))
    with open(path("server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-days", "2", "-in", path("server.csr"), "-CA", path("ca.crt"), "-CAkey",
            path("ca.key"), "-CAcreateserial", "-extfile", path("server.ext"), "-out", path("server.crt"))
    return path


class TlsTests(RedisTestCase):
    """A redis-server that speaks TLS on a second port (its plain port serves redis-cli)."""

    def setUp(self):
        super().setUp()
        self.cert = make_certs(self.tmpdir)
        self.tls_port, held = harness.reserve_port()
        self.held_sockets.append(held)
        self.tls_redis = RedisServer(self, [
            "--tls-port", str(self.tls_port), "--tls-cert-file", self.cert("server.crt"),
            "--tls-key-file", self.cert("server.key"), "--tls-ca-cert-file", self.cert("ca.crt"),
            "--tls-auth-clients", "no"])

    def tls_config(self, ca_file):
        c = config(self.tls_redis, {"p": {"limits": [burst(5)]}}, [{"key": ONE_KEY, "id": "k-one", "plan": "p"}])
        c["store"] = dict(c["store"], url="rediss://127.0.0.1:%d" % self.tls_port, tls={"ca_file": ca_file})
        return c

    def test_limits_through_tls(self):
        gw = self.gateway(self.tls_config(self.cert("ca.crt")))
        for i in range(5):
            r = gw.get("/v1/x", key=ONE_KEY)
            self.assertEqual(r.status, 200, r)
            self.assertHasRateLimitHeaders(r, remaining=4 - i)
        self.assertRateLimited(gw.get("/v1/x", key=ONE_KEY))
        self.assertNoDegradation(gw)
        self.assertEqual(self.tls_redis.limiter_keys("it:*"), {"it:{key:k-one}:burst:tb"})

    def test_unverified_server_is_refused_and_the_log_says_why(self):
        gw = self.gateway(self.tls_config(self.cert("other.crt")))
        r = gw.get("/v1/x", key=ONE_KEY)
        self.assertEqual(r.status, 200, r)  # fail_mode open: allowed, without rate-limit headers
        self.assertIsNone(r.header("RateLimit-Policy"), r)
        self.assertGreaterEqual(metric(gw, "tollgate_degraded_total"), 1)
        self.assertEqual(self.tls_redis.limiter_keys(), set())
        logged = wait_until(lambda: b"certificate verify failed" in gw.process.read_stderr(), 5)
        self.assertTrue(logged, gw.process.read_stderr()[-2000:])


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
