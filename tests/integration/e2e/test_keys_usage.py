#!/usr/bin/env python3
"""Integration tests for issue 5: API keys and plans from PostgreSQL, usage metering.

    python3 test_keys_usage.py --binary build/tollgate [unittest args, e.g. PostgresKeyTests -v]

Real servers only, all on 127.0.0.1: a PostgreSQL 15 server per test (its data directory a
copy of one initdb made per run, owned by the postgres user), a redis-server where the counts
must outlive the gateway, the tollgate binary, the Python upstream (tests/support/upstream.py)
and real HTTP clients (http.client, psql, redis-cli, `tollgate usage`). Every process is
stopped by its PID in the test's cleanup; every wait is bounded.

PostgreSQL runs as the postgres user, so these tests need root (as tests/integration/postgres/
does); they are skipped, with the reason, where that is impossible.
"""
import csv
import hashlib
import io
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SLOW, burst, GatewayTestCase, deadline_loop, reserve_port  # noqa: E402

REPO = os.path.normpath(os.path.join(harness.HERE, "..", "..", ".."))
MIGRATION = os.path.join(REPO, "migrations", "001_api_keys.sql")
PG_BIN = "/usr/lib/postgresql/15/bin"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


KEY_A = "sk-live-aaaa0123456789abcdef"
KEY_B = "sk-live-bbbb0123456789abcdef"
KEY_C = "sk-live-cccc0123456789abcdef"
KEY_D = "sk-live-dddd0123456789abcdef"
UNKNOWN_KEY = "sk-live-zzzz0123456789abcdef"

# Outcome classes in the order of the export's columns.
OUTCOMES = ("success", "client_error", "server_error", "rejected")
CSV_HEADER = (["period", "account", "key_id"] + [o + "_requests" for o in OUTCOMES] +
              [o + "_cost" for o in OUTCOMES])


def sha256_hex(text):
    return hashlib.sha256(text.encode()).hexdigest()


def sql_literal(value):
    """A SQL literal: NULL, a number, or a quoted string."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        value = json.dumps(value)
    return "'" + value.replace("'", "''") + "'"


def per_minute(default_limit, name="minute"):
    """A sliding-window-log limit over 60 s whose limit comes from the key's columns."""
    return {"name": name, "algorithm": "sliding_window_log", "limit": default_limit,
            "window_seconds": 60, "from_key": True}


def base_config(plans, keys, **extra):
    """A gateway config (JSON is YAML); the harness fills in the listeners and the upstream.
    Polling with a key that is not loaded yet must not run into the per-IP limit on invalid
    keys, hence the generous invalid_key_limit."""
    c = {
        "server": {"threads": 2, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": plans,
        "keys": keys,
        "identity": {"invalid_key_limit": {"algorithm": "token_bucket", "capacity": 100000,
                                           "refill_per_second": 1000}},
        "headers": ["ietf", "ratelimit", "x-ratelimit"],
    }
    c.update(extra)
    return c


def policy_quota(r, name):
    m = re.search(r'"%s";q=(\d+);w=(\d+)' % re.escape(name), r.header("RateLimit-Policy", "") or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def seconds_to_utc_midnight(now=None):
    now = time.time() if now is None else now
    return (int(now // 86400) + 1) * 86400 - now


def keep_clear_of_utc_midnight(margin_s=20):
    """Day and month counters roll over at 00:00 UTC: a test that counts them waits (at most
    margin_s + 1 s) until it cannot straddle the boundary."""
    left = seconds_to_utc_midnight()
    if left < margin_s:
        time.sleep(left + 1)


def utc_day():
    return time.strftime("%Y-%m-%d", time.gmtime())


def utc_month():
    return time.strftime("%Y-%m", time.gmtime())


# ---------------------------------------------------------------------------------------------
# PostgreSQL


def postgres_unavailable():
    """Why a PostgreSQL server cannot be started here, or "" when it can."""
    if os.geteuid() != 0:
        return "needs root (initdb and postgres run as the postgres user)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    for tool in ("initdb", "postgres", "psql", "pg_isready"):
        if not os.access(os.path.join(PG_BIN, tool), os.X_OK):
            return "no %s/%s" % (PG_BIN, tool)
    if not shutil.which("runuser"):
        return "no runuser"
    return ""


def make_postgres_template():
    """initdb once per run (it takes seconds); each test copies the data directory. Returns
    the folder holding `data`, owned by the postgres user."""
    pw = pwd.getpwnam("postgres")
    folder = tempfile.mkdtemp(prefix="tollgate-pg-template-")
    os.chown(folder, pw.pw_uid, pw.pw_gid)
    r = subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "initdb"),
                        "-D", os.path.join(folder, "data"), "-A", "trust", "-U", "postgres", "-N",
                        "-E", "UTF8", "--no-instructions"],
                       capture_output=True, timeout=120, cwd=folder)
    if r.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise AssertionError("initdb failed: %s" % (r.stdout + r.stderr).decode(errors="replace"))
    return folder


def _die_with_parent():
    """preexec_fn of the postgres child (runs after the switch to the postgres user, which
    would clear it): a test runner killed outright leaves no server behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG
    except Exception:  # best effort: cleanup stops the server by PID anyway
        pass


class PostgresProcess(harness.Process):
    """One postmaster run, as the postgres user, with harness.Process's interface (the
    fixture's cleanup stops it and prints its log on failure). stop() is PostgreSQL's immediate
    shutdown (SIGQUIT), as a crash would be; SIGKILL after STOP_TIMEOUT_S."""

    def __init__(self, name, argv, tmpdir, home):
        self.name = name
        self.stdout_path = os.path.join(tmpdir, name + ".stdout")
        self.stderr_path = os.path.join(tmpdir, name + ".stderr")
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["HOME"] = home
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL, cwd=home, env=env,
                                     user="postgres", group="postgres", extra_groups=[],
                                     start_new_session=True, preexec_fn=_die_with_parent)
        self.pid = self.proc.pid

    def stop(self):
        # SIGQUIT: PostgreSQL's immediate shutdown (SIGKILL would orphan its backends).
        return super().stop(signal.SIGQUIT)


class Postgres:
    """A PostgreSQL 15 server of one test: a copy of the template's data directory in a folder
    owned by the postgres user, listening on 127.0.0.1:port (the same port across restarts).
    Database `postgres`, user `postgres`, trust authentication."""

    def __init__(self, fixture, template):
        self.fixture = fixture
        pw = pwd.getpwnam("postgres")
        self.dir = tempfile.mkdtemp(prefix="tollgate-pg-")
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        fixture.addCleanup(self._remove)
        subprocess.run(["cp", "-a", os.path.join(template, "data"), os.path.join(self.dir, "data")],
                       check=True, timeout=120)
        self.port = None
        self.process = None
        self.runs = 0
        self.start()

    def _remove(self):
        if self.process is not None:
            self.process.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def url(self):
        return "postgres://postgres@127.0.0.1:%d/postgres" % self.port

    def start(self, tcp=True):
        """Starts the server (tcp=False: on its Unix socket only, so that the gateway cannot
        reach it while the test changes rows) and waits until it accepts queries."""
        assert self.process is None or not self.process.alive()
        if self.port is None:
            # Held for the whole test (postgres binds it beside our socket, as tollgate does):
            # no other bind(0) gets it while the server is down between restarts.
            self.port, held = reserve_port()
            self.fixture.held_sockets.append(held)
        self.runs += 1
        self.tcp = tcp
        self.process = PostgresProcess(
            "postgres-%d" % self.runs,
            [os.path.join(PG_BIN, "postgres"), "-D", os.path.join(self.dir, "data"),
             "-p", str(self.port), "-k", self.dir,
             "-c", "listen_addresses=%s" % ("127.0.0.1" if tcp else ""),
             "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=30",
             "-c", "shared_buffers=16MB"],
            self.fixture.tmpdir, self.dir)
        self.fixture.processes.append(self.process)
        for _ in deadline_loop(harness.START_TIMEOUT_S, step=0.05):
            if not self.process.alive():
                break
            r = subprocess.run([os.path.join(PG_BIN, "pg_isready"), "-q", "-t", "1",
                                "-h", "127.0.0.1" if tcp else self.dir, "-p", str(self.port),
                                "-U", "postgres"], timeout=10)
            if r.returncode == 0:
                return
        self.process.stop()
        raise AssertionError("postgres did not start on port %d:\n%s" % (
            self.port, self.process.read_stderr().decode(errors="replace")))

    def stop(self):
        """Immediate shutdown (SIGQUIT), by PID: the server and its backends go at once, their
        connections with them."""
        self.process.stop()

    def psql(self, sql=None, file=None):
        """Runs SQL through psql on the server (over TCP, or its socket when tcp=False); returns
        the rows as text (unaligned, tuples only)."""
        argv = [os.path.join(PG_BIN, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1" if self.tcp else self.dir, "-p", str(self.port),
                "-U", "postgres", "-d", "postgres"]
        argv += ["-f", file] if file else ["-c", sql]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["PGCONNECT_TIMEOUT"] = "5"
        r = subprocess.run(argv, capture_output=True, timeout=30, env=env)
        if r.returncode != 0:
            raise AssertionError("psql failed (%s): %s" % (sql or file, r.stderr.decode(errors="replace")))
        return r.stdout.decode()

    def migrate(self):
        self.psql(file=MIGRATION)
        self.psql(file=MIGRATION)  # idempotent, as the migration promises

    def insert_key(self, key, key_id, account, plan, rate_limit_per_minute=None,
                   rate_limit_burst=None, overrides=None, key_sha256=None):
        cols = {"key_sha256": key_sha256 or sha256_hex(key), "key_id": key_id,
                "account_id": account, "plan": plan}
        if rate_limit_per_minute is not None:
            cols["rate_limit_per_minute"] = rate_limit_per_minute
        if rate_limit_burst is not None:
            cols["rate_limit_burst"] = rate_limit_burst
        if overrides is not None:
            cols["overrides"] = overrides
        self.psql("INSERT INTO api_keys (%s) VALUES (%s)" % (
            ", ".join(cols), ", ".join(sql_literal(v) for v in cols.values())))

    def update_key(self, key_id, **columns):
        sets = ", ".join("%s = %s" % (k, sql_literal(v)) for k, v in columns.items())
        self.psql("UPDATE api_keys SET %s WHERE key_id = %s" % (sets, sql_literal(key_id)))


# ---------------------------------------------------------------------------------------------
# Redis


class Redis:
    """A redis-server of one test on 127.0.0.1, in the test's temp dir, no persistence."""

    def __init__(self, fixture):
        port, held = reserve_port()
        fixture.held_sockets.append(held)
        self.port = port
        folder = os.path.join(fixture.tmpdir, "redis")
        os.mkdir(folder)
        self.process = fixture.spawn("redis", [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                                               "--save", "", "--appendonly", "no", "--dir", folder])
        for _ in deadline_loop(harness.START_TIMEOUT_S, step=0.05):
            if not self.process.alive():
                raise AssertionError("redis-server exited: %s" % self.process.read_stdout().decode(errors="replace"))
            if self.cli("PING").strip() == "PONG":
                return
        raise AssertionError("redis-server not answering on port %d" % port)

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def cli(self, *args):
        r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)] + list(args),
                           capture_output=True, timeout=10)
        return r.stdout.decode()


# ---------------------------------------------------------------------------------------------


class KeysUsageTestCase(GatewayTestCase):
    """Shared helpers: waiting on a gateway's answers and metrics, bounded."""

    def wait_status(self, gw, key, status, timeout, path="/echo"):
        """Requests `path` with `key` until the answer is `status`; returns (response, seconds
        from the call to the first such answer)."""
        start = time.monotonic()
        r = None
        for _ in deadline_loop(timeout, step=0.01):
            r = gw.get(path, key=key)
            if r.status == status:
                return r, time.monotonic() - start
        self.fail("%s never answered %d within %.1f s; last answer %r" % (path, status, timeout, r))

    def wait_metric(self, gw, name, predicate, timeout=10.0):
        value = None
        for _ in deadline_loop(timeout, step=0.05):
            value = gw.metrics().get(name)
            if value is not None and predicate(value):
                return value
        self.fail("metric %s never satisfied the condition within %.1f s (last %r)" % (name, timeout, value))

    def usage_cli(self, gw, period, fmt="csv", account=None):
        argv = [harness.BINARY, "usage", "--config", gw.config_path, "--period", period, "--format", fmt]
        if account is not None:
            argv += ["--account", account]
        return subprocess.run(argv, capture_output=True, timeout=30)

    def usage_rows(self, gw, period, account=None):
        r = self.usage_cli(gw, period, "csv", account)
        self.assertTrue(gw.process.alive(), "the gateway died answering the usage export (exit %s)"
                        % gw.process.proc.returncode)
        self.assertEqual(r.returncode, 0, r)
        rows = list(csv.reader(io.StringIO(r.stdout.decode())))
        self.assertEqual(rows[0], CSV_HEADER, r.stdout)
        return rows[1:]

    def wait_usage_rows(self, gw, period, expected, account=None, timeout=5.0):
        """The export of `period` once it equals `expected`. A proxied request is metered when
        its response has been relayed, which may be just after the client has read it."""
        rows = None
        for _ in deadline_loop(timeout, step=0.05):
            rows = self.usage_rows(gw, period, account)
            if rows == expected:
                return rows
        self.assertEqual(rows, expected)


class PostgresKeyTests(KeysUsageTestCase):
    """keys: {source: postgres}: changes within a second, outages, the snapshot file,
    malformed rows and the per-key columns."""

    template = None

    @classmethod
    def setUpClass(cls):
        reason = postgres_unavailable()
        if reason:
            raise unittest.SkipTest("PostgreSQL: " + reason)
        cls.template = make_postgres_template()

    @classmethod
    def tearDownClass(cls):
        if cls.template:
            shutil.rmtree(cls.template, ignore_errors=True)

    def start_postgres(self):
        pg = Postgres(self, self.template)
        pg.migrate()
        return pg

    def pg_config(self, pg, plans, snapshot=None, **extra):
        keys = {"source": "postgres", "url": pg.url if isinstance(pg, Postgres) else pg,
                "resync_seconds": 60}
        if snapshot is not False:
            keys["snapshot"] = snapshot or os.path.join(self.tmpdir, "keys-snapshot.json")
        return base_config(plans, keys, **extra)

    def test_inserted_key_usable_and_revoked_key_refused_within_a_second(self):
        pg = self.start_postgres()
        pg.insert_key(KEY_A, "k-a", "acme", "team")
        gw = self.start(self.pg_config(pg, {"team": {"limits": [burst(1000)]}}))
        r = gw.get("/echo", key=KEY_A)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["headers"].get("X-Tollgate-Key-Id"), "k-a")
        self.assertEqual(gw.get("/echo", key=KEY_B).json()["code"], "invalid_api_key")

        # INSERT: the NOTIFY brings the key within a second.
        pg.insert_key(KEY_B, "k-b", "globex", "team")
        r, seconds = self.wait_status(gw, KEY_B, 200, timeout=5)
        self.assertLessEqual(seconds, 1.0, "the inserted key took %.2f s" % seconds)
        self.assertEqual(r.json()["headers"].get("X-Tollgate-Key-Id"), "k-b")
        self.assertEqual(r.json()["headers"].get("X-Tollgate-Plan"), "team")
        self.assertEqual(gw.get("/v1/usage", key=KEY_B).json()["account"], "globex")
        self.assertEqual(gw.admin("GET", "/admin/keys/k-b").json()["account"], "globex")

        # Revoked: 401 within a second; the other key is untouched.
        pg.update_key("k-b", status="revoked")
        r, seconds = self.wait_status(gw, KEY_B, 401, timeout=5)
        self.assertLessEqual(seconds, 1.0, "the revoked key was accepted for %.2f s" % seconds)
        self.assertEqual(r.json()["code"], "invalid_api_key")
        self.assertEqual(gw.get("/echo", key=KEY_A).status, 200)
        # Deleted: the same.
        pg.psql("DELETE FROM api_keys WHERE key_id = 'k-a'")
        r, seconds = self.wait_status(gw, KEY_A, 401, timeout=5)
        self.assertLessEqual(seconds, 1.0, "the deleted key was accepted for %.2f s" % seconds)

        m = gw.metrics()
        self.assertGreaterEqual(m.get("tollgate_keys_notifications_total", 0), 3, m)
        self.assertEqual(m.get("tollgate_keys_source_connected"), 1, m)
        self.assertEqual(m.get("tollgate_keys_errors_total"), 0, m)
        # The snapshot file: private, digests only, never a key.
        path = gw.config["keys"]["snapshot"]
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        with open(path) as f:
            text = f.read()
        for key in (KEY_A, KEY_B):
            self.assertNotIn(key, text)
        self.assertNotIn(b"sk-live-", gw.process.read_stderr())

    def test_postgres_outage_keeps_serving_then_reconnects_and_resyncs(self):
        pg = self.start_postgres()
        pg.insert_key(KEY_A, "k-a", "acme", "team")
        pg.insert_key(KEY_B, "k-b", "acme", "team")
        gw = self.start(self.pg_config(pg, {"team": {"limits": [burst(1000)]}}))
        self.assertEqual(gw.get("/echo", key=KEY_A).status, 200)
        before = gw.metrics()
        self.assertEqual(before.get("tollgate_keys_source_connected"), 1, before)

        # PostgreSQL dies: the gateway notices, counts it, and serves the keys it holds.
        pg.stop()
        self.wait_metric(gw, "tollgate_keys_source_connected", lambda v: v == 0, timeout=10)
        errors = self.wait_metric(gw, "tollgate_keys_errors_total",
                                  lambda v: v > before["tollgate_keys_errors_total"])
        for key in (KEY_A, KEY_B):
            self.assertEqual(gw.get("/echo", key=key).status, 200)
        self.assertEqual(gw.get("/echo", key=KEY_C).status, 401)
        # It keeps trying (every failed attempt is counted).
        self.wait_metric(gw, "tollgate_keys_errors_total", lambda v: v > errors, timeout=10)
        self.assertTrue(gw.healthy())

        # Rows change while the gateway cannot reach PostgreSQL (it listens on its socket only):
        # no NOTIFY can reach the gateway, only the resync after the reconnect.
        pg.start(tcp=False)
        pg.insert_key(KEY_C, "k-c", "acme", "team")
        pg.update_key("k-b", status="revoked")
        self.assertEqual(gw.get("/echo", key=KEY_B).status, 200)  # the held keys serve on
        self.assertEqual(gw.metrics().get("tollgate_keys_source_connected"), 0)
        loads = gw.metrics()["tollgate_keys_loads_total"]
        pg.stop()

        # Back on the same port: reconnect (backoff at most 5 s) and resync.
        pg.start()
        self.wait_status(gw, KEY_C, 200, timeout=15)
        self.wait_status(gw, KEY_B, 401, timeout=5)
        self.assertEqual(gw.get("/echo", key=KEY_A).status, 200)
        m = gw.metrics()
        self.assertEqual(m.get("tollgate_keys_source_connected"), 1, m)
        self.assertGreater(m.get("tollgate_keys_loads_total"), loads, m)
        # LISTEN is back too: a new row is usable within a second again.
        pg.insert_key(KEY_D, "k-d", "acme", "team")
        _, seconds = self.wait_status(gw, KEY_D, 200, timeout=5)
        self.assertLessEqual(seconds, 1.0, "the key inserted after the reconnect took %.2f s" % seconds)
        err = gw.process.read_stderr().decode(errors="replace")
        self.assertIn("lost PostgreSQL; serving the keys held", err)
        self.assertIn("PostgreSQL connected; resyncing api keys", err)

    def test_start_with_postgres_down_serves_the_snapshot_file(self):
        pg = self.start_postgres()
        pg.insert_key(KEY_A, "k-a", "acme", "team", rate_limit_per_minute=3, rate_limit_burst=1)
        pg.insert_key(KEY_B, "k-b", "globex", "team")
        plans = {"team": {"limits": [per_minute(100)]}}
        snapshot = os.path.join(self.tmpdir, "keys-snapshot.json")
        self.upstream = harness.Upstream(self)
        upstream = {"url": self.upstream.url}
        first = harness.Gateway(self, self.pg_config(pg, plans, snapshot, upstream=upstream),
                                name="first")
        self.assertEqual(first.get("/echo", key=KEY_A).status, 200)
        self.assertEqual(first.process.stop(), 0)
        self.assertTrue(os.path.exists(snapshot))
        pg.stop()

        gw = harness.Gateway(self, self.pg_config(pg, plans, snapshot, upstream=upstream),
                             name="second")
        r = gw.get("/echo", key=KEY_A)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r, "minute"), (4, 60), r)  # the per-key columns, from the file
        r = gw.get("/echo", key=KEY_B)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r, "minute"), (700, 60), r)  # the columns' defaults
        self.assertEqual(gw.get("/echo", key=KEY_C).status, 401)
        m = gw.metrics()
        self.assertEqual(m.get("tollgate_keys_source_connected"), 0, m)
        self.assertGreaterEqual(m.get("tollgate_keys_errors_total"), 1, m)
        self.assertIn(b"PostgreSQL unreachable at start; serving the keys of the snapshot file",
                      gw.process.read_stderr())

        # PostgreSQL comes back: the gateway connects and PostgreSQL wins over the file.
        pg.start()
        pg.update_key("k-b", status="revoked")
        self.wait_status(gw, KEY_B, 401, timeout=15)
        self.wait_metric(gw, "tollgate_keys_source_connected", lambda v: v == 1, timeout=5)
        self.assertEqual(gw.get("/echo", key=KEY_A).status, 200)

    def test_start_with_postgres_down_and_no_snapshot_exits_non_zero(self):
        port, held = reserve_port()  # bound, never listening: connections are refused
        self.held_sockets.append(held)
        url = "postgres://postgres:s3cret@127.0.0.1:%d/keys" % port
        plans = {"team": {"limits": [burst(10)]}}
        cases = {
            "missing file": self.pg_config(url, plans, os.path.join(self.tmpdir, "none.json")),
            "no snapshot configured": self.pg_config(url, plans, snapshot=False),
        }
        for name, cfg in cases.items():
            with self.subTest(name):
                listen, held_listen = reserve_port()
                admin, held_admin = reserve_port()
                self.held_sockets += [held_listen, held_admin]
                cfg["server"] = dict(cfg["server"], listen="127.0.0.1:%d" % listen,
                                     admin_listen="127.0.0.1:%d" % admin)
                cfg["upstream"] = {"url": "http://127.0.0.1:%d" % port}
                path = os.path.join(self.tmpdir, "down.yaml")
                with open(path, "w") as f:
                    json.dump(cfg, f)
                start = time.monotonic()
                r = subprocess.run([harness.BINARY, "serve", "--config", path], capture_output=True,
                                   timeout=60)
                err = r.stderr.decode(errors="replace")
                self.assertNotEqual(r.returncode, 0, err)
                self.assertLess(time.monotonic() - start, 30)
                self.assertIn("cannot load API keys", err)
                self.assertIn("PostgreSQL at postgres://postgres@127.0.0.1:%d/keys failed" % port, err)
                self.assertIn("snapshot", err)
                self.assertNotIn("s3cret", err)  # the password is never shown

    def test_check_config_reads_the_postgres_key_source(self):
        path = os.path.join(self.tmpdir, "pg.yaml")
        cfg = self.pg_config("postgres://postgres@127.0.0.1:1/keys", {"team": {"limits": [burst(10)]}})
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b": ok", r.stdout)
        cfg["keys"]["snapshott"] = "typo.json"
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"keys.snapshott: unknown field", r.stderr)

    def test_malformed_rows_are_counted_and_never_take_the_gateway_down(self):
        pg = self.start_postgres()
        # Plan order matters for nothing but the file; the strictest plan is the one whose first
        # limit has the smallest quota: free (5) rather than team (100).
        plans = {"team": {"limits": [per_minute(100)]}, "free": {"limits": [burst(5)]}}
        pg.insert_key(KEY_A, "k-good", "acme", "team", rate_limit_per_minute=10, rate_limit_burst=5)
        pg.insert_key(KEY_B, "k-unknown-plan", "acme", "platinum")
        pg.insert_key(KEY_C, "k-negative", "acme", "team", rate_limit_per_minute=-5, rate_limit_burst=2)
        gw = self.start(self.pg_config(pg, plans))
        self.assertEqual(gw.metrics().get("tollgate_keys_skipped_rows_total"), 2)

        r = gw.get("/echo", key=KEY_A)
        self.assertEqual((r.status, policy_quota(r, "minute")), (200, (15, 60)), r)
        # An unknown plan gets the strictest plan.
        r = gw.get("/echo", key=KEY_B)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(policy_quota(r, "burst"), (5, 500), r)
        self.assertIsNone(policy_quota(r, "minute"), r)
        admin = gw.admin("GET", "/admin/keys/k-unknown-plan").json()
        self.assertEqual((admin["plan"], admin["configured_plan"]), ("free", "platinum"), admin)
        # A negative rate_limit_per_minute: the key keeps its plan, with the plan's own limit.
        r = gw.get("/echo", key=KEY_C)
        self.assertEqual((r.status, policy_quota(r, "minute")), (200, (100, 60)), r)

        # While running, through NOTIFY: overrides that do not fit the plan, and a row whose
        # digest cannot be a digest (the table's CHECK dropped, as on a hand-made table).
        pg.insert_key(KEY_D, "k-bad-overrides", "acme", "team",
                      overrides={"burst": {"capacity": 50}})
        self.wait_metric(gw, "tollgate_keys_skipped_rows_total", lambda v: v >= 3, timeout=5)
        r, _ = self.wait_status(gw, KEY_D, 200, timeout=5)
        self.assertEqual(policy_quota(r, "minute"), (700, 60), r)
        pg.psql("ALTER TABLE api_keys DROP CONSTRAINT api_keys_key_sha256_check")
        pg.insert_key("x", "k-bad-digest", "acme", "team", key_sha256="not-a-digest")
        self.wait_metric(gw, "tollgate_keys_skipped_rows_total", lambda v: v >= 4, timeout=5)
        self.assertEqual(gw.admin("GET", "/admin/keys/k-bad-digest").status, 404)

        # Fixing a row is no new problem; the gateway served throughout.
        pg.update_key("k-unknown-plan", plan="team")
        for _ in deadline_loop(5, step=0.02):
            r = gw.get("/echo", key=KEY_B)
            if policy_quota(r, "minute"):
                break
        self.assertEqual((r.status, policy_quota(r, "minute")), (200, (700, 60)), r)
        self.assertEqual(gw.metrics().get("tollgate_keys_skipped_rows_total"), 4)
        self.assertTrue(gw.healthy())
        self.assertEqual(gw.metrics().get("tollgate_keys_source_connected"), 1)
        err = gw.process.read_stderr().decode(errors="replace")
        for key_id in ("k-unknown-plan", "k-negative", "k-bad-overrides", "k-bad-digest"):
            self.assertRegex(err, r'"malformed api_keys row"[^\n]*"key_id":"%s"' % key_id)

    def test_per_key_columns_set_the_from_key_window(self):
        pg = self.start_postgres()
        pg.insert_key(KEY_A, "k-small", "acme", "team", rate_limit_per_minute=3, rate_limit_burst=2)
        pg.insert_key(KEY_B, "k-default", "acme", "team")
        gw = self.start(self.pg_config(pg, {"team": {"limits": [per_minute(100)]}}))
        statuses = []
        for i in range(7):
            r = gw.get("/echo", key=KEY_A)
            statuses.append(r.status)
            self.assertEqual(policy_quota(r, "minute"), (5, 60), r)
            if r.status == 200:
                self.assertEqual(r.header("RateLimit-Remaining"), str(4 - i), r)
        self.assertEqual(statuses, [200] * 5 + [429] * 2)
        self.assertRateLimited(r, "rate_limited")
        self.assertLessEqual(int(r.header("Retry-After")), 60, r)
        self.assertEqual(self.upstream.stats()["received"], 5)
        # Per key: the other key has its own window, with the columns' defaults 600 + 100.
        r = gw.get("/echo", key=KEY_B)
        self.assertEqual((r.status, policy_quota(r, "minute")), (200, (700, 60)), r)
        # A new value applies at once (NOTIFY), counting what the window already holds.
        pg.update_key("k-small", rate_limit_per_minute=5)
        r, _ = self.wait_status(gw, KEY_A, 200, timeout=5)
        self.assertEqual(policy_quota(r, "minute"), (7, 60), r)
        self.assertEqual(r.header("RateLimit-Remaining"), "1", r)


class UsageTests(KeysUsageTestCase):
    """Metering by outcome class, the usage export and GET /v1/usage; counts in Redis outlive
    the gateway; the daily allowance and ceiling."""

    PLANS = {"metered": {"limits": [burst(10)]}}
    KEYS = [{"key": KEY_A, "id": "k-a", "account": "acme", "plan": "metered"},
            {"key": KEY_B, "id": "k-b", "account": "acme", "plan": "metered"},
            {"key": KEY_C, "id": "k-c", "account": "globex", "plan": "metered"}]
    ROUTES = [{"path": "/v1/export", "method": "GET", "cost": {"query": "pages", "per": 50}}]

    def traffic(self, gw):
        """Requests ending in every outcome class; returns the counts they must give, by key id:
        (requests by outcome, cost by outcome)."""
        def go(key, path, status):
            r = gw.get(path, key=key)
            self.assertEqual(r.status, status, (path, r))
            return r

        # k-a: the burst of 10 tokens runs out on the way.
        for _ in range(3):
            go(KEY_A, "/echo", 200)                      # success, 1 each
        go(KEY_A, "/v1/export?pages=120", 200)           # success, ceil(120/50) = 3
        go(KEY_A, "/status/404", 404)                    # client_error, 1 each
        go(KEY_A, "/status/404", 404)
        go(KEY_A, "/status/503", 503)                    # server_error, 1 (9 tokens spent)
        r = go(KEY_A, "/v1/export?pages=100", 429)       # rejected by tollgate, cost 2
        self.assertEqual(r.json()["code"], "rate_limited")
        go(KEY_A, "/echo", 200)                          # success, the 10th token
        go(KEY_A, "/echo", 429)                          # rejected, 1
        # k-b (same account) and k-c (another account).
        go(KEY_B, "/echo", 200)
        go(KEY_B, "/status/500", 500)
        go(KEY_C, "/v1/export?pages=1", 200)             # min 1
        go(KEY_C, "/status/418", 418)
        # Not metered: unknown keys, the built-in endpoints.
        go(UNKNOWN_KEY, "/echo", 401)
        go(KEY_A, "/v1/rate-limit", 200)
        go(KEY_A, "/healthz", 200)
        return {
            "k-a": ((5, 2, 1, 2), (7, 2, 1, 3)),
            "k-b": ((1, 0, 1, 0), (1, 0, 1, 0)),
            "k-c": ((1, 1, 0, 0), (1, 1, 0, 0)),
        }

    @staticmethod
    def csv_rows(period, expected, accounts=("acme", "globex")):
        owner = {"k-a": "acme", "k-b": "acme", "k-c": "globex"}
        rows = []
        for key_id in sorted(expected, key=lambda k: (owner[k], k)):
            if owner[key_id] not in accounts:
                continue
            requests, cost = expected[key_id]
            rows.append([period, owner[key_id], key_id] + [str(n) for n in requests + cost])
        return rows

    @staticmethod
    def counts_json(requests, cost):
        return {o: {"requests": requests[i], "cost": cost[i]} for i, o in enumerate(OUTCOMES)}

    def test_outcome_classes_and_cost_units_in_the_export_and_v1_usage(self):
        keep_clear_of_utc_midnight()
        gw = self.start(base_config(self.PLANS, self.KEYS, routes=self.ROUTES))
        expected = self.traffic(gw)
        month, day = utc_month(), utc_day()

        self.wait_usage_rows(gw, month, self.csv_rows(month, expected))
        self.assertEqual(self.usage_rows(gw, day), self.csv_rows(day, expected))
        self.assertEqual(self.usage_rows(gw, month, account="acme"),
                         self.csv_rows(month, expected, accounts=("acme",)))
        self.assertEqual(self.usage_rows(gw, month, account="globex"),
                         self.csv_rows(month, expected, accounts=("globex",)))
        self.assertEqual(self.usage_rows(gw, month, account="nobody"), [])
        self.assertEqual(self.usage_rows(gw, "2001-01"), [])

        r = self.usage_cli(gw, month, "json")
        self.assertEqual(r.returncode, 0, r)
        records = json.loads(r.stdout)
        self.assertEqual([(x["account"], x["key_id"]) for x in records],
                         [("acme", "k-a"), ("acme", "k-b"), ("globex", "k-c")])
        for x in records:
            self.assertEqual(x["period"], month)
            self.assertEqual({o: x[o] for o in OUTCOMES}, self.counts_json(*expected[x["key_id"]]), x)
        r = self.usage_cli(gw, month, "json", account="globex")
        self.assertEqual([x["key_id"] for x in json.loads(r.stdout)], ["k-c"])
        # The admin endpoint behind the CLI refuses a malformed period.
        r = self.usage_cli(gw, "2026-13")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn(b"invalid_period", r.stderr)
        # A flag without its value is a usage error, not an export of every account.
        r = subprocess.run([harness.BINARY, "usage", "--config", gw.config_path, "--period", month,
                            "--account"], capture_output=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout), (2, b""), r)

        # GET /v1/usage: the caller's own key, today and this month.
        for key, key_id in ((KEY_A, "k-a"), (KEY_C, "k-c")):
            r = gw.get("/v1/usage", key=key)
            self.assertEqual(r.status, 200, r)
            body = r.json()
            self.assertEqual(body["key_id"], key_id, body)
            self.assertEqual(body["day"]["period"], day, body)
            self.assertEqual(body["month"]["period"], month, body)
            self.assertEqual(body["day"]["usage"], self.counts_json(*expected[key_id]), body)
            self.assertEqual(body["month"]["usage"], self.counts_json(*expected[key_id]), body)
        self.assertEqual(gw.get("/v1/usage").status, 401)
        # Neither the export nor /v1/usage is metered itself.
        self.assertEqual(self.usage_rows(gw, month), self.csv_rows(month, expected))

    def test_redis_counts_survive_a_gateway_restart(self):
        if not os.access(REDIS_SERVER, os.X_OK) or not os.access(REDIS_CLI, os.X_OK):
            self.skipTest("no redis-server / redis-cli")
        keep_clear_of_utc_midnight()
        redis = Redis(self)
        prefix = "it%d" % os.getpid()
        cfg = base_config(self.PLANS, self.KEYS, routes=self.ROUTES,
                          store={"type": "redis", "url": redis.url, "prefix": prefix,
                                 "timeout_ms": 500})
        gw = self.start(cfg)
        expected = self.traffic(gw)
        month = utc_month()
        self.wait_usage_rows(gw, month, self.csv_rows(month, expected))
        # One more request just before SIGTERM: the flush at shutdown writes it.
        self.assertEqual(gw.get("/echo", key=KEY_C).status, 200)
        os.kill(gw.pid, signal.SIGTERM)
        self.assertEqual(gw.process.wait(timeout=20), 0)
        (c_requests, c_cost) = expected["k-c"]
        expected["k-c"] = ((c_requests[0] + 1,) + c_requests[1:], (c_cost[0] + 1,) + c_cost[1:])

        second = harness.Gateway(self, dict(cfg, upstream={"url": self.upstream.url}), name="second")
        self.assertEqual(self.usage_rows(second, month), self.csv_rows(month, expected))
        r = second.get("/v1/usage", key=KEY_A)
        self.assertEqual(r.json()["month"]["usage"], self.counts_json(*expected["k-a"]), r)
        # The new process adds to the stored counts.
        self.assertEqual(second.get("/echo", key=KEY_B).status, 200)
        b_requests, b_cost = expected["k-b"]
        expected["k-b"] = ((b_requests[0] + 1,) + b_requests[1:], (b_cost[0] + 1,) + b_cost[1:])
        self.wait_usage_rows(second, month, self.csv_rows(month, expected))
        # Every usage key in Redis expires (nothing grows forever).
        keys = [k for k in redis.cli("--scan", "--pattern", prefix + ":*usage*").split() if k]
        self.assertGreaterEqual(len(keys), 3, keys)  # two accounts' hashes and the day's index
        for k in keys:
            self.assertGreater(int(redis.cli("TTL", k).strip()), 86400, k)

    def test_daily_allowance_then_ceiling_until_utc_midnight(self):
        keep_clear_of_utc_midnight()
        plans = {"metered": {"limits": [burst(100), {
            "name": "daily", "algorithm": "quota", "period": "day", "allowance": 3, "ceiling": 5}]}}
        gw = self.start(base_config(plans, self.KEYS))

        def quota():
            r = gw.get("/v1/rate-limit", key=KEY_A)
            self.assertEqual(r.status, 200, r)
            return r.json()["quota"]

        for i in range(1, 6):
            r = gw.get("/echo", key=KEY_A)
            self.assertEqual(r.status, 200, (i, r))
            q = quota()
            self.assertEqual((q["used"], q["allowance"], q["ceiling"], q["period"]),
                             (i, 3, 5, "day"), q)
            self.assertEqual(q["overAllowance"], i > 3, (i, q))
        sent = time.time()
        r = gw.get("/echo", key=KEY_A)
        received = time.time()
        body = self.assertRateLimited(r, "ceiling_exceeded")
        self.assertEqual(body["violated-policies"], ["daily"], body)
        # Seconds to the next 00:00 UTC, as of some instant while the request was in flight.
        retry_after = int(r.header("Retry-After"))
        self.assertGreaterEqual(retry_after, seconds_to_utc_midnight(received) - 1, r)
        self.assertLessEqual(retry_after, seconds_to_utc_midnight(sent) + 1, r)
        self.assertEqual(self.upstream.stats()["received"], 5)
        # The ceiling is per key: another key of the plan is not affected.
        self.assertEqual(gw.get("/echo", key=KEY_B).status, 200)
        self.assertEqual(quota()["used"], 5)  # the rejected request consumed nothing


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
