"""Test harness for tollgate's integration tests: the real binary, the real Python upstream
(tests/support/upstream.py), real HTTP clients, everything on 127.0.0.1.

Python 3 standard library only. Every process a fixture starts is stopped by PID in its
cleanup (terminate, wait, kill); every wait loop is bounded in count and in time.
"""
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
NGINX = os.environ.get("TOLLGATE_NGINX", "/usr/sbin/nginx")
UPSTREAM_SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "support", "upstream.py"))

# Set by test_gateway.py from --binary.
BINARY = os.environ.get("TOLLGATE_BINARY", "")

# Generous bounds: the machine running the suite may be small and busy (or an ASan build).
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 15.0

SLOW = "0.01"  # refill per second slow enough that nothing refills during a test


def burst(capacity, refill=SLOW, name="burst"):
    """A token-bucket limit for a test config."""
    return {"name": name, "algorithm": "token_bucket", "capacity": capacity,
            "refill_per_second": refill}


def deadline_loop(seconds, step=0.02, max_iterations=100_000):
    """Yields until `seconds` have passed (or max_iterations), sleeping `step` between turns."""
    end = time.monotonic() + seconds
    for i in range(max_iterations):
        if i:
            time.sleep(step)
        yield i
        if time.monotonic() >= end:
            return


def wait_until(predicate, timeout=5.0, step=0.01):
    """Polls `predicate` until it returns true or `timeout` seconds have passed; returns whether
    it did (asked once more at the deadline). Use it for what a test waits for, instead of a
    fixed time.sleep before an assertion."""
    for _ in deadline_loop(timeout, step=step):
        if predicate():
            return True
    return bool(predicate())


def reserve_port():
    """Binds 127.0.0.1:0 and keeps the socket (not listening) to hold the port.

    SO_REUSEADDR + SO_REUSEPORT let tollgate (which sets both on its listeners) bind the same
    port while we hold it, and the kernel never hands this port to another bind(0) meanwhile,
    so parallel fixtures cannot collide. A bound socket that is not listening takes no
    connections: a connect to a held port nobody listens on is refused.
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1], s


class Response:
    def __init__(self, status, headers, body, reason=""):
        self.status = status
        self.headers = headers  # http.client.HTTPMessage: case-insensitive get()
        self.body = body
        self.reason = reason

    def header(self, name, default=None):
        return self.headers.get(name, default)

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "<%d %s %r>" % (self.status, dict(self.headers.items()), self.body[:300])


def http_request(port, method, path, headers=None, body=None, timeout=REQUEST_TIMEOUT_S,
                 tls=False):
    """One request on a fresh connection to 127.0.0.1:port. tls: HTTPS taking any certificate;
    a (cert_file, key_file) pair is shown as the client's certificate."""
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if isinstance(tls, tuple):
            ctx.load_cert_chain(*tls)
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.headers, data, r.reason)
    finally:
        conn.close()


def raw_exchange(port, payload, timeout=5.0, max_bytes=1 << 20):
    """Sends raw bytes and reads until the server closes (or `timeout`). Returns
    (data, closed, seconds_until_closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    start = time.monotonic()
    data = b""
    closed = False
    try:
        if payload:
            s.sendall(payload)
        for _ in range(10_000):
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                closed = True
                break
            except socket.timeout:
                break
            if not chunk:
                closed = True
                break
            data += chunk
            if len(data) > max_bytes:
                break
    finally:
        s.close()
    return data, closed, time.monotonic() - start


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None


def parse_metrics(text):
    """Prometheus text -> {"name{labels}": value} (and "name" for unlabelled samples)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


class Process:
    """A child process whose stdout/stderr go to files in the test's temp dir."""

    def __init__(self, name, argv, tmpdir):
        self.name = name
        self.stdout_path = os.path.join(tmpdir, name + ".stdout")
        self.stderr_path = os.path.join(tmpdir, name + ".stderr")
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL, cwd=tmpdir)
        self.pid = self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def stop(self, sig=None):
        """`sig` (default SIGTERM), wait, kill: always leaves the process reaped. Returns its
        exit code."""
        try:
            if self.proc.poll() is None:
                if sig is None:
                    self.proc.terminate()
                else:
                    os.kill(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=STOP_TIMEOUT_S)
        finally:
            for f in (self._out, self._err):
                try:
                    f.close()
                except OSError:
                    pass
        return self.proc.returncode

    def read_stdout(self):
        with open(self.stdout_path, "rb") as f:
            return f.read()

    def read_stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read()


class Upstream:
    def __init__(self, fixture, idle_timeout=None, tls=None):
        """tls: None, or {"cert": PEM, "key": PEM} for an HTTPS upstream; with "client_ca" it
        requires a client certificate, and "probe": (cert, key) is the one the harness shows."""
        port_file = os.path.join(fixture.tmpdir, "upstream-%d.port" % len(fixture.processes))
        extra = ["--idle-timeout", str(idle_timeout)] if idle_timeout else []
        self.tls = tls
        if tls:
            extra += ["--tls-cert", tls["cert"], "--tls-key", tls["key"]]
            if tls.get("client_ca"):
                extra += ["--tls-client-ca", tls["client_ca"]]
        self.process = fixture.spawn("upstream", [sys.executable, UPSTREAM_SCRIPT, "--port", "0",
                                                  "--port-file", port_file] + extra)
        self.port = None
        for _ in deadline_loop(START_TIMEOUT_S):
            if not self.process.alive():
                raise AssertionError("upstream exited with %s" % self.process.proc.returncode)
            try:
                with open(port_file) as f:
                    text = f.read().strip()
                if text:
                    self.port = int(text)
                    break
            except (OSError, ValueError):
                pass
        if self.port is None:
            raise AssertionError("upstream did not write its port")
        for _ in deadline_loop(START_TIMEOUT_S):
            try:
                if self.stats_response(timeout=2).status == 200:
                    return
            except OSError:
                pass
        raise AssertionError("upstream not answering on port %d" % self.port)

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def stats_response(self, timeout=REQUEST_TIMEOUT_S):
        tls = bool(self.tls) and (self.tls.get("probe") or True)
        return http_request(self.port, "GET", "/__stats", timeout=timeout, tls=tls)

    def stats(self):
        return self.stats_response().json()


class Nginx:
    """A real nginx (Debian's nginx-light) from its own prefix directory in the fixture's temp
    dir, running the config `render(listen)` gives for its port."""

    def __init__(self, fixture, render):
        if not os.access(NGINX, os.X_OK):
            fixture.fail("%s not found: install Debian's nginx-light (scripts/install-deps.sh, "
                         "run by `make deps`)" % NGINX)
        self.fixture = fixture
        self.prefix = os.path.join(fixture.tmpdir, "nginx-%d" % len(fixture.processes))
        os.mkdir(self.prefix)
        # Started as root, nginx's workers run as nobody: they must be able to reach the temp
        # directories the master creates (and chowns) inside the prefix.
        os.chmod(fixture.tmpdir, 0o755)
        os.chmod(self.prefix, 0o755)
        self.port, held = reserve_port()
        fixture.held_sockets.append(held)
        self.conf = os.path.join(self.prefix, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(render("127.0.0.1:%d" % self.port))
        self.error_log = os.path.join(self.prefix, "error.log")
        fixture.extra_logs.append(("nginx error.log", self.error_log))
        fixture.extra_logs.append(("nginx access.log", os.path.join(self.prefix, "access.log")))
        self.process = fixture.spawn("nginx", [NGINX, "-p", self.prefix + "/", "-c", self.conf,
                                               "-g", "daemon off;"])
        fixture.addCleanup(self._stop)
        for _ in deadline_loop(START_TIMEOUT_S):
            if not self.process.alive():
                break
            # A TCP connect is the probe: any request would spend tollgate's budget. The port
            # we hold refuses connections until nginx listens on it.
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                pass
        log = ""
        if os.path.exists(self.error_log):
            with open(self.error_log, errors="replace") as f:
                log = f.read()
        raise AssertionError("nginx did not start (exit %s):\n%s\n%s" % (
            self.process.proc.returncode, self.process.read_stderr().decode(errors="replace"), log))

    def _stop(self):
        # Cleanups run last-registered first, so this runs before the fixture's own: note the
        # workers' PIDs, stop the master (SIGTERM: it stops its workers and waits for them),
        # then any worker it left behind, by PID.
        workers = []
        try:
            with open("/proc/%d/task/%d/children" % (self.process.pid, self.process.pid)) as f:
                workers = [int(p) for p in f.read().split()]
        except OSError:
            pass
        self.process.stop()
        for pid in workers:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if b"nginx" not in f.read():
                        continue
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Gateway:
    """A running `tollgate serve` with its config file in the fixture's temp dir."""

    # The built-in endpoints most tests call on the gateway listener (the binary's default is
    # ["health", "rate_limit"]: /v1/usage and /metrics are the admin listener's). None: the
    # binary's default.
    PUBLIC_ENDPOINTS = ["health", "rate_limit", "usage"]

    def __init__(self, fixture, config, name="tollgate", wrapper=(), public_endpoints=PUBLIC_ENDPOINTS):
        self.fixture = fixture
        self.config_path = os.path.join(fixture.tmpdir, name + ".yaml")
        self.process = None
        last_error = ""
        for attempt in range(3):  # a new pair of ports if listening failed
            self.port, held = reserve_port()
            self.admin_port, held_admin = reserve_port()
            fixture.held_sockets += [held, held_admin]
            self.config = dict(config)
            server = dict(self.config.get("server", {}))
            server["listen"] = "127.0.0.1:%d" % self.port
            server["admin_listen"] = "127.0.0.1:%d" % self.admin_port
            server.setdefault("threads", 2)
            if public_endpoints is not None:
                server.setdefault("public_endpoints", list(public_endpoints))
            self.config["server"] = server
            self.write_config(self.config)
            # `wrapper`: a command that execs the binary in place (e.g. prlimit), so the PID
            # stays the gateway's.
            self.process = fixture.spawn(name, list(wrapper) + [BINARY, "serve", "--config", self.config_path])
            if self._wait_ready():
                return
            self.process.stop()
            last_error = self.process.read_stderr().decode(errors="replace")
            if "cannot listen" not in last_error:
                break
        raise AssertionError("tollgate did not become ready:\n" + last_error)

    def _wait_ready(self):
        for _ in deadline_loop(START_TIMEOUT_S):
            if not self.process.alive():
                return False
            try:
                # The admin listener answers /healthz whatever server.public_endpoints says.
                if http_request(self.admin_port, "GET", "/healthz", timeout=2).status == 200:
                    return True
            except OSError:
                pass
        return False

    def write_config(self, config):
        """Writes the config atomically (a reload never reads half a file). JSON is YAML."""
        text = config if isinstance(config, str) else json.dumps(config, indent=2)
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    def rewrite(self, config):
        """Writes a new config for a reload, keeping the listeners and upstream (which need a
        restart to change) as they are."""
        c = dict(config)
        c["server"] = self.config["server"]
        if "upstream" in self.config:
            c["upstream"] = self.config["upstream"]
        self.write_config(c)

    @property
    def pid(self):
        return self.process.pid

    def get(self, path, key=None, headers=None, **kw):
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = "Bearer " + key
        return http_request(self.port, "GET", path, headers=h, **kw)

    def request(self, method, path, **kw):
        return http_request(self.port, method, path, **kw)

    def admin(self, method, path, **kw):
        return http_request(self.admin_port, method, path, **kw)

    def metrics(self):
        r = http_request(self.admin_port, "GET", "/metrics")
        assert r.status == 200, r
        return parse_metrics(r.body.decode())

    def healthy(self):
        try:
            return self.process.alive() and self.get("/healthz").status == 200
        except OSError:
            return False

    def vm_hwm_kb(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        raise AssertionError("no VmHWM in /proc/%d/status" % self.pid)

    def access_log_lines(self, predicate, count, timeout=5.0):
        """JSON access-log lines from stdout matching `predicate`; waits (bounded) for
        `count` of them, since stdout is flushed on a timer."""
        lines = []
        for _ in deadline_loop(timeout, step=0.1):
            lines = []
            # Whole lines only: the last one may be half written.
            for raw in self.process.read_stdout().split(b"\n")[:-1]:
                if raw.strip():
                    lines.append(raw)
            if sum(1 for line in lines if predicate(json.loads(line))) >= count:
                break
        return lines


def missing_grpc_client():
    """Why the grpc-js clients of node/ cannot run (node or a package missing), or None."""
    if not shutil.which("node"):
        return "node is not installed: run scripts/install-node-deps.sh (`make deps`)"
    node_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
    for pkg in ("@grpc/grpc-js", "@grpc/proto-loader"):
        if not os.path.isfile(os.path.join(node_dir, "node_modules", pkg, "package.json")):
            return ("%s is missing from tests/integration/e2e/node/node_modules: run "
                    "scripts/install-node-deps.sh (`make deps`)" % pkg)
    return None


def missing_browser():
    """Why the headless-Chromium checks of node/ cannot run (the browser, node or
    playwright-core missing), or None. CHROMIUM names the browser (default: `chromium`)."""
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not chromium or not os.access(chromium, os.X_OK):
        return "chromium is not installed: run scripts/install-deps.sh (`make deps`)"
    if not shutil.which("node"):
        return "node is not installed: run scripts/install-node-deps.sh (`make deps`)"
    node_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
    if not os.path.isfile(os.path.join(node_dir, "node_modules", "playwright-core", "package.json")):
        return ("playwright-core is missing from tests/integration/e2e/node/node_modules: run "
                "scripts/install-node-deps.sh (`make deps`)")
    return None


class GatewayTestCase(unittest.TestCase):
    """Each test gets a fresh temp dir, its own processes and ports; all stopped afterwards,
    and their logs printed when the test failed."""

    maxDiff = None

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp(prefix="tollgate-it-")
        self.processes = []
        self.held_sockets = []
        self.extra_logs = []  # (label, path): more logs printed with the processes' on failure
        self.addCleanup(self._stop_all)

    def spawn(self, name, argv):
        p = Process("%s-%d" % (name, len(self.processes)), argv, self.tmpdir)
        self.processes.append(p)
        return p

    def _stop_all(self):
        for p in reversed(self.processes):
            p.stop()
        for s in self.held_sockets:
            s.close()
        # With a sanitizer build (-DTOLLGATE_SANITIZE=ON) a report fails the test that caused it.
        for p in self.processes:
            err = p.read_stderr()
            for marker in (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer", b"runtime error:"):
                if marker in err:
                    raise AssertionError("%s: sanitizer report in stderr (%s)" % (p.name, marker.decode()))

    def run(self, result=None):
        if result is None:
            result = self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        try:
            return super().run(result)
        finally:
            if len(result.failures) + len(result.errors) > before:
                self._dump_logs()
            shutil.rmtree(getattr(self, "tmpdir", ""), ignore_errors=True)

    def _dump_logs(self, max_lines=80):
        for p in getattr(self, "processes", []):
            for label, path in (("stdout", p.stdout_path), ("stderr", p.stderr_path)):
                self._dump_log("%s %s (pid %d, exit %s" % (p.name, label, p.pid, p.proc.returncode),
                               path, max_lines)
        for label, path in getattr(self, "extra_logs", []):
            self._dump_log(label + " (", path, max_lines)
        sys.stderr.flush()

    @staticmethod
    def _dump_log(title, path, max_lines):
        """The last lines of the file at `path` to stderr, under "---- <title>last N of M lines)"."""
        try:
            with open(path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return
        sep = "" if title.endswith("(") else ", "
        sys.stderr.write("---- %s%slast %d of %d lines)\n" % (
            title, sep, min(max_lines, len(lines)), len(lines)))
        for line in lines[-max_lines:]:
            sys.stderr.write(line + "\n")

    # Helpers shared by the tests.

    def start(self, config, upstream=True):
        """Starts an upstream (unless upstream is False or a URL) and a gateway for `config`."""
        config = dict(config)
        if upstream is True:
            self.upstream = Upstream(self)
            config.setdefault("upstream", {})
            config["upstream"] = dict(config["upstream"], url=self.upstream.url)
        elif isinstance(upstream, str):
            config["upstream"] = dict(config.get("upstream", {}), url=upstream)
        self.gateway = Gateway(self, config)
        return self.gateway

    def assertRateLimited(self, r, code="rate_limited", retry_after=True):
        self.assertEqual(r.status, 429, r)
        self.assertTrue(r.header("Content-Type", "").startswith("application/problem+json"), r)
        body = r.json()
        self.assertEqual(body["code"], code, body)
        self.assertEqual(body["status"], 429, body)
        if retry_after:
            ra = r.header("Retry-After")
            self.assertIsNotNone(ra, r)
            self.assertRegex(ra, r"^[0-9]+$")
            self.assertGreaterEqual(int(ra), 1)
        else:
            self.assertIsNone(r.header("Retry-After"), r)
        return body


class KeepAliveLoad:
    """Threads that each send requests back to back on one keep-alive connection until
    stopped (bounded by max_requests and max_seconds). Records every outcome."""

    def __init__(self, port, path, headers, threads=2, max_requests=5000, max_seconds=30.0):
        self.port, self.path, self.headers = port, path, headers
        self.max_requests, self.max_seconds = max_requests, max_seconds
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.statuses = {}
        self.errors = []
        self.reconnects = 0
        self.count = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        sock = None
        end = time.monotonic() + self.max_seconds
        try:
            for _ in range(self.max_requests):
                if self.stop_event.is_set() or time.monotonic() > end:
                    break
                try:
                    conn.request("GET", self.path, headers=self.headers)
                    r = conn.getresponse()
                    r.read()
                except (OSError, http.client.HTTPException) as e:
                    with self.lock:
                        self.errors.append(repr(e))
                    conn.close()
                    continue
                with self.lock:
                    self.count += 1
                    self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
                    if sock is not None and conn.sock is not sock:
                        self.reconnects += 1
                    if r.status >= 500:
                        self.errors.append("status %d" % r.status)
                sock = conn.sock
                if sock is None:  # the server closed the connection after this response
                    with self.lock:
                        self.reconnects += 1
        finally:
            conn.close()

    def wait_for(self, n, timeout=10.0):
        for _ in deadline_loop(timeout):
            with self.lock:
                if self.count >= n:
                    return True
        return False

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=REQUEST_TIMEOUT_S + 5)
        return self


def main(script):
    """The command line of every test file: --binary names the tollgate executable; the rest goes
    to unittest (a class or test name, -v)."""
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--binary", default=os.environ.get("TOLLGATE_BINARY", ""))
    args, rest = ap.parse_known_args()
    if not args.binary or not os.access(args.binary, os.X_OK):
        sys.exit("%s: --binary must name the tollgate executable (got %r)" % (script, args.binary))
    global BINARY
    BINARY = os.path.abspath(args.binary)
    unittest.main(argv=[sys.argv[0]] + rest)
