#!/usr/bin/env python3
"""TLS on the gateway and admin listeners (issue 33), through the real binary, real clients
(curl, openssl s_client, Python ssl and httpx) and certificates the test makes with the openssl
command (no private key is committed).

    python3 test_tls.py --binary build/tollgate [-v]

- RealClientTests: curl, s_client, ssl and httpx; keep-alive; ALPN; a 429 over TLS; the proxy
  headers say https; SNI (exact, wildcard, unknown name: default certificate); TLS 1.3 only.
- HostileHandshakeTests: a table of handshakes that must fail (garbage, plaintext HTTP, SSLv3 /
  TLS 1.0 / 1.1 offers, an oversized ClientHello, a refused unknown name) and stalled ones
  (slowloris at the TLS layer), each counted, the gateway serving others throughout.
- RotationTests: 20 swaps (rename and Kubernetes' symlink swap) while a client makes new
  connections: no failed handshake, the new certificate within a second; bad new files
  (missing, key not matching, expired, garbage) refused and counted, the old one serving;
  SIGHUP and POST /admin/reload; the expiry gauge.
- AdminTlsTests: server.admin_tls.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase, deadline_loop  # noqa: E402

try:
    import httpx
except ImportError:  # python3-httpx: installed by `make deps`
    httpx = None


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30)


class Certs:
    """A CA of the test's own and leaves signed by it, in `directory`."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
                "/CN=tollgate-test-ca", cwd=directory)
        self.ca = os.path.join(directory, "ca.pem")
        self.n = 0

    def leaf(self, cn, sans, days=2, rsa=False, ips=(), uris=()):
        """(cert_file, key_file) of a new leaf for the DNS names `sans`, addresses `ips` and URIs
        `uris`; `days` < 0: already expired."""
        self.n += 1
        base = "leaf-%d" % self.n
        key = ["-newkey", "rsa:2048"] if rsa else ["-newkey", "ec", "-pkeyopt",
                                                     "ec_paramgen_curve:prime256v1"]
        openssl("req", *key, "-nodes", "-keyout", base + ".key", "-out", base + ".csr", "-subj",
                "/CN=" + cn, cwd=self.dir)
        with open(os.path.join(self.dir, base + ".ext"), "w") as f:
            names = (["DNS:" + s for s in sans] + ["IP:" + a for a in ips] +
                     ["URI:" + u for u in uris])
            f.write("subjectAltName=" + ",".join(names) + "\n")
        openssl("x509", "-req", "-in", base + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", str(days), "-extfile", base + ".ext", "-out",
                base + ".pem", cwd=self.dir)
        return os.path.join(self.dir, base + ".pem"), os.path.join(self.dir, base + ".key")


def client_context(ca, **kw):
    ctx = ssl.create_default_context(cafile=ca)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def served_cn(port, server_name, ca=None, timeout=5):
    """The CN of the certificate the gateway serves for `server_name` (None: no SNI)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as s:
            der = s.getpeercert(binary_form=True)
    pem = ssl.DER_cert_to_PEM_cert(der)
    out = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "multiline"],
                         input=pem.encode(), capture_output=True, timeout=10).stdout.decode()
    for line in out.splitlines():
        if "commonName" in line:
            return line.split("=", 1)[1].strip()
    return None


def https_get(port, path, ca, server_name="localhost", headers=None, timeout=5):
    """GET over a new TLS connection, the certificate checked against `server_name`."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.sock = client_context(ca).wrap_socket(raw, server_hostname=server_name)
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()
        raw.close()


def tls_config(cert, key, **tls):
    t = {"certificates": [{"cert_file": cert, "key_file": key}]}
    t.update(tls)
    return {
        "server": {"threads": 2, "tls": t, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"free": {"limits": [{"name": "burst", "algorithm": "token_bucket",
                                       "capacity": 1000, "refill_per_second": 1000}]}},
        "routes": [{"path": "/public/*", "identity": "ip"}],
        "anonymous": {"limits": [{"name": "ip", "algorithm": "token_bucket", "capacity": 1000,
                                  "refill_per_second": 1000}]},
    }


class TlsCase(GatewayTestCase):

    def start(self, config):
        self.upstream = harness.Upstream(self)
        config = dict(config)
        config["upstream"] = {"url": self.upstream.url}
        self.gw = harness.Gateway(self, config)
        return self.gw

    def handshakes(self, result):
        return self.gw.metrics().get(
            'tollgate_tls_handshakes_total{listener="gateway",result="%s"}' % result, 0)

    def assertServes(self):
        status, _, _ = https_get(self.gw.port, "/public/echo", self.certs.ca)
        self.assertEqual(status, 200)


class RealClientTests(TlsCase):

    def setUp(self):
        super().setUp()
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        self.default = self.certs.leaf("default.test", ["localhost", "default.test"])
        self.api = self.certs.leaf("api.example.test", ["api.example.test"], rsa=True)
        self.wild = self.certs.leaf("wild.example.test", ["*.example.test"])
        cfg = tls_config(*self.default)
        cfg["server"]["tls"]["certificates"] += [
            {"cert_file": c, "key_file": k} for c, k in (self.api, self.wild)]
        cfg["anonymous"]["limits"][0].update(capacity=3, refill_per_second=0.001)
        self.start(cfg)

    def test_curl(self):
        out = subprocess.run(
            ["curl", "-sS", "--cacert", self.certs.ca, "--resolve",
             "localhost:%d:127.0.0.1" % self.gw.port, "-o", "/dev/null", "-w",
             "%{http_code} %{http_version} %{ssl_verify_result}",
             "https://localhost:%d/healthz" % self.gw.port],
            capture_output=True, timeout=20, text=True)
        self.assertEqual(out.stdout, "200 2 0", out.stderr)  # ALPN h2 (issue 34)
        # Plaintext HTTP to the TLS port is refused, not answered.
        out = subprocess.run(["curl", "-sS", "-m", "5", "http://127.0.0.1:%d/healthz" %
                              self.gw.port], capture_output=True, timeout=20, text=True)
        self.assertNotEqual(out.returncode, 0)

    def test_openssl_s_client(self):
        out = subprocess.run(
            ["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.gw.port, "-servername",
             "localhost", "-CAfile", self.certs.ca, "-alpn", "http/1.1", "-ign_eof"],
            input=b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            capture_output=True, timeout=20)
        text = out.stdout.decode(errors="replace")
        self.assertIn("Verify return code: 0 (ok)", text)
        self.assertIn("ALPN protocol: http/1.1", text)  # the client's only protocol
        self.assertIn(b"HTTP/1.1 200", out.stdout)

    @unittest.skipIf(httpx is None, "python3-httpx is not installed (make deps)")
    def test_httpx_keep_alive_and_limits(self):
        with httpx.Client(verify=self.certs.ca, timeout=5) as c:
            base = "https://localhost:%d" % self.gw.port
            statuses = [c.get(base + "/public/echo").status_code for _ in range(5)]
            self.assertEqual(statuses, [200, 200, 200, 429, 429])
            r = c.get(base + "/public/echo")
            self.assertIn("retry-after", r.headers)
            self.assertIn("ratelimit", r.headers)
        # One connection for all of them: one handshake.
        self.assertEqual(self.handshakes("ok"), 1)

    def test_proxy_headers_say_https(self):
        status, _, body = https_get(self.gw.port, "/public/echo", self.certs.ca)
        self.assertEqual(status, 200)
        headers = {k.lower(): v for k, v in json.loads(body)["headers"].items()}
        self.assertEqual(headers.get("x-forwarded-proto"), "https")

    def test_sni_chooses_the_certificate(self):
        rows = [
            ("localhost", "default.test"),
            ("api.example.test", "api.example.test"),      # exact (RSA) before the wildcard
            ("API.Example.Test", "api.example.test"),      # names are case-insensitive
            ("api.example.test.", "api.example.test"),     # a trailing dot
            ("www.example.test", "wild.example.test"),     # one label under the wildcard
            ("a.b.example.test", "default.test"),          # two labels: not the wildcard's
            ("example.test", "default.test"),              # nor the bare domain
            ("unknown.invalid", "default.test"),           # unknown: the default
            (None, "default.test"),                        # no SNI: the default
        ]
        for name, cn in rows:
            with self.subTest(name=name):
                self.assertEqual(served_cn(self.gw.port, name), cn)

    def test_tls_versions(self):
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            with self.subTest(version=version):
                ctx = client_context(self.certs.ca, minimum_version=version,
                                     maximum_version=version)
                with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as raw:
                    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                        self.assertEqual(s.version(), version.name.replace("_", "."))

    def test_sessions_resume(self):
        """Tickets on TLS 1.2 and 1.3, and the server's session cache for a TLS 1.2 client that
        takes no ticket: a session ended by either side resumes (a connection the gateway closes
        ends with close_notify, or OpenSSL would drop its session from the cache)."""
        rows = [("TLS 1.2, a ticket", ssl.TLSVersion.TLSv1_2, False),
                ("TLS 1.2, a session id", ssl.TLSVersion.TLSv1_2, True),
                ("TLS 1.3, a ticket", ssl.TLSVersion.TLSv1_3, False)]
        for row, version, no_ticket in rows:
            for closes in ("client", "gateway"):
                with self.subTest(row=row, closes=closes):
                    ctx = client_context(self.certs.ca, minimum_version=version,
                                         maximum_version=version)
                    if no_ticket:
                        ctx.options |= ssl.OP_NO_TICKET
                    session = None
                    reused = []
                    for _ in range(3):
                        raw = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
                        with ctx.wrap_socket(raw, server_hostname="localhost",
                                             session=session) as s:
                            close = "close" if closes == "gateway" else "keep-alive"
                            s.sendall(("GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
                                       "Connection: %s\r\n\r\n" % close).encode())
                            self.assertIn(b" 200 ", s.recv(4096))
                            if closes == "gateway":
                                self.assertEqual(s.recv(4096), b"")  # closed by the gateway
                            session = s.session
                            reused.append(s.session_reused)
                    self.assertEqual(reused, [False, True, True])


class TlsOnlyThirteenTests(TlsCase):

    def test_min_version_13_refuses_12(self):
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        self.start(tls_config(*self.certs.leaf("localhost", ["localhost"]), min_version="1.3"))
        ctx = client_context(self.certs.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as raw:
            with self.assertRaises(ssl.SSLError):
                ctx.wrap_socket(raw, server_hostname="localhost")
        self.assertServes()


def client_hello_record(length):
    """A TLS record header announcing a handshake record of `length` bytes, then junk."""
    return bytes([0x16, 0x03, 0x01, (length >> 8) & 0xFF, length & 0xFF, 0x01]) + b"\x00" * 64


def legacy_context(version):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    ctx.minimum_version = version
    ctx.maximum_version = version
    return ctx


class HostileHandshakeTests(TlsCase):

    def setUp(self):
        super().setUp()
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        self.start(tls_config(*self.certs.leaf("localhost", ["localhost"]),
                              handshake_timeout_ms=1000))

    def raw(self, payload, wait=3.0):
        """Sends `payload`, then reads until the server closes; returns (bytes, closed)."""
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=wait) as s:
            if payload:
                s.sendall(payload)
            data = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        return data, True
                    data += chunk
            except ConnectionResetError:
                return data, True
            except socket.timeout:
                return data, False

    def test_garbage_and_malformed_hellos_are_refused(self):
        rows = [
            ("garbage", b"\x00\xff" * 200),
            ("plaintext HTTP", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
            ("SSLv2 hello", bytes([0x80, 0x2e, 0x01, 0x00, 0x02]) + b"\x00" * 45),
            ("oversized hello", client_hello_record(0x4800) + b"\x00" * 0x4800),
            ("huge record length", client_hello_record(0xFFFF) + b"\x00" * 1000),
            ("alert first", bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])),
            ("application data first", bytes([0x17, 0x03, 0x03, 0x00, 0x10]) + b"\x00" * 16),
        ]
        failed = self.handshakes("failed")
        for name, payload in rows:
            with self.subTest(row=name):
                data, closed = self.raw(payload)
                self.assertTrue(closed, "the connection stays open")
                self.assertNotIn(b"HTTP/1.1", data)  # never answered in plaintext
                self.assertServes()
        self.assertGreaterEqual(self.handshakes("failed") - failed, len(rows) - 2)

    def test_legacy_versions_are_refused(self):
        versions = [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1]
        if hasattr(ssl.TLSVersion, "SSLv3"):
            versions.insert(0, ssl.TLSVersion.SSLv3)
        for version in versions:
            with self.subTest(version=version.name):
                try:
                    ctx = legacy_context(version)
                except (ValueError, ssl.SSLError):
                    self.skipTest("this OpenSSL cannot offer %s" % version.name)
                with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as raw:
                    with self.assertRaises((ssl.SSLError, ConnectionResetError, OSError)):
                        ctx.wrap_socket(raw, server_hostname="localhost")
                self.assertServes()

    def test_stalled_handshakes_time_out_and_others_are_served(self):
        stalled = []
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
            if i % 2:
                s.sendall(client_hello_record(200)[:8])  # half a ClientHello, then nothing
            stalled.append(s)
        try:
            start = time.monotonic()
            for _ in range(5):
                self.assertServes()  # served while 20 handshakes stall
            for s in stalled:
                s.settimeout(5)
                try:
                    self.assertEqual(s.recv(100), b"")
                except ConnectionResetError:
                    pass
            # handshake_timeout_ms: 1000 (the sweep enforces it to within 10 ms).
            self.assertLess(time.monotonic() - start, 4.0)
        finally:
            for s in stalled:
                s.close()
        for _ in deadline_loop(3):
            if self.handshakes("timeout") >= 20:
                break
        self.assertEqual(self.handshakes("timeout"), 20)


class RefuseUnknownNamesTests(TlsCase):

    def test_refused(self):
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        self.start(tls_config(*self.certs.leaf("api.test", ["api.test", "*.api.test"]),
                              unknown_names="refuse"))
        for name, ok in (("api.test", True), ("v1.api.test", True), ("other.test", False),
                         ("api.test.evil", False), ("xapi.test", False),
                         (None, True)):  # no SNI (a client that dialled an address): the default
            with self.subTest(name=name):
                if ok:
                    self.assertEqual(served_cn(self.gw.port, name), "api.test")
                else:
                    with self.assertRaises(ssl.SSLError):
                        served_cn(self.gw.port, name)
        self.assertEqual(self.gw.metrics()['tollgate_tls_unknown_names_total{listener="gateway"}'], 3)


class RotationTests(TlsCase):

    def setUp(self):
        super().setUp()
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        self.live = os.path.join(self.tmpdir, "live")
        os.makedirs(self.live)
        self.cert = os.path.join(self.live, "tls.crt")
        self.key = os.path.join(self.live, "tls.key")

    def install(self, pair, how="rename"):
        """Puts `pair` at the served paths: an atomic rename of each file, or Kubernetes' swap
        of a `..data` symlink to a new directory (the served paths link through it)."""
        cert, key = pair
        if how == "rename":
            for src, dst in ((key, self.key), (cert, self.cert)):
                shutil.copy(src, dst + ".new")
                os.replace(dst + ".new", dst)
            return
        stamp = os.path.join(self.live, "..%d" % time.monotonic_ns())
        os.makedirs(stamp)
        shutil.copy(cert, os.path.join(stamp, "tls.crt"))
        shutil.copy(key, os.path.join(stamp, "tls.key"))
        tmp = os.path.join(self.live, "..data_tmp")
        os.symlink(os.path.basename(stamp), tmp)
        os.replace(tmp, os.path.join(self.live, "..data"))

    def k8s_layout(self, pair):
        self.install(pair, how="k8s")
        for name in ("tls.crt", "tls.key"):
            path = os.path.join(self.live, name)
            if os.path.lexists(path):
                os.remove(path)
            os.symlink(os.path.join("..data", name), path)

    def reloads(self, result):
        return self.gw.metrics().get(
            'tollgate_tls_reloads_total{listener="gateway",result="%s"}' % result, 0)

    def test_twenty_swaps_under_load(self):
        pairs = [self.certs.leaf("gen-%d" % i, ["localhost"]) for i in range(21)]
        self.k8s_layout(pairs[0])
        self.start(tls_config(self.cert, self.key, reload_check_ms=100))
        stop = threading.Event()
        results = {"ok": 0, "failed": []}

        def connect_continuously():
            ctx = client_context(self.certs.ca)
            while not stop.is_set() and results["ok"] < 20000:
                try:
                    with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as raw:
                        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
                                      b"Connection: close\r\n\r\n")
                            if not s.recv(100).startswith(b"HTTP/1.1 200"):
                                results["failed"].append("no 200")
                    results["ok"] += 1
                except (OSError, ssl.SSLError) as e:
                    results["failed"].append(repr(e))

        threads = [threading.Thread(target=connect_continuously) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(1, 21):
                how = "k8s" if i % 2 else "rename"
                if how == "rename" and os.path.islink(self.cert):
                    os.remove(self.cert)
                    os.remove(self.key)
                self.install(pairs[i], how) if how == "rename" else self.k8s_layout(pairs[i])
                start = time.monotonic()
                for _ in deadline_loop(1.0, step=0.02):
                    if served_cn(self.gw.port, "localhost") == "gen-%d" % i:
                        break
                self.assertEqual(served_cn(self.gw.port, "localhost"), "gen-%d" % i,
                                 "swap %d (%s) not served within a second" % (i, how))
                self.assertLess(time.monotonic() - start, 1.0)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        self.assertEqual(results["failed"], [])
        self.assertGreater(results["ok"], 20)
        self.assertEqual(self.reloads("error"), 0)
        self.assertGreaterEqual(self.reloads("ok"), 20)

    def test_bad_new_files_are_refused_and_the_old_keep_serving(self):
        good = self.certs.leaf("good", ["localhost"])
        self.install(good)
        self.start(tls_config(self.cert, self.key, reload_check_ms=100))
        other = self.certs.leaf("other", ["localhost"])
        expired = self.certs.leaf("expired", ["localhost"], days=-1)
        garbage = os.path.join(self.tmpdir, "garbage.pem")
        with open(garbage, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        rows = [
            ("key not matching", (other[0], good[1])),
            ("expired", expired),
            ("garbage certificate", (garbage, good[1])),
            ("garbage key", (good[0], garbage)),
        ]
        for name, pair in rows:
            with self.subTest(row=name):
                errors = self.reloads("error")
                self.install(pair)
                for _ in deadline_loop(3):
                    if self.reloads("error") > errors:
                        break
                self.assertEqual(self.reloads("error"), errors + 1)
                self.assertEqual(served_cn(self.gw.port, "localhost"), "good")
                self.install(good)  # back, for the next row
                for _ in deadline_loop(3):
                    if self.reloads("ok") >= 1 and served_cn(self.gw.port, "localhost") == "good":
                        break
        # A missing file: refused too.
        errors = self.reloads("error")
        os.remove(self.key)
        for _ in deadline_loop(3):
            if self.reloads("error") > errors:
                break
        self.assertEqual(self.reloads("error"), errors + 1)
        self.assertEqual(served_cn(self.gw.port, "localhost"), "good")
        err = self.gw.process.read_stdout().decode() + self.gw.process.read_stderr().decode()
        self.assertIn("tls certificates refused", err)

    def test_sighup_and_admin_reload(self):
        self.install(self.certs.leaf("first", ["localhost"]))
        self.start(tls_config(self.cert, self.key, reload_check_ms=3_600_000))
        self.install(self.certs.leaf("second", ["localhost"]))
        time.sleep(0.3)
        self.assertEqual(served_cn(self.gw.port, "localhost"), "first")  # not watched so soon
        os.kill(self.gw.pid, signal.SIGHUP)
        for _ in deadline_loop(3):
            if served_cn(self.gw.port, "localhost") == "second":
                break
        self.assertEqual(served_cn(self.gw.port, "localhost"), "second")
        self.install(self.certs.leaf("third", ["localhost"]))
        self.assertEqual(self.gw.admin("POST", "/admin/reload").status, 200)
        self.assertEqual(served_cn(self.gw.port, "localhost"), "third")

    def test_expiry_gauge(self):
        self.install(self.certs.leaf("soon", ["localhost"], days=2))
        self.start(tls_config(self.cert, self.key))
        left = self.gw.metrics()['tollgate_tls_certificate_expiry_seconds{listener="gateway"}']
        self.assertGreater(left, 2 * 86400 - 600)
        self.assertLessEqual(left, 2 * 86400)


class AdminGateway(harness.Gateway):
    """A gateway whose admin listener speaks TLS: ready when /healthz answers over it."""

    CA = None

    def _wait_ready(self):
        for _ in deadline_loop(harness.START_TIMEOUT_S):
            if not self.process.alive():
                return False
            try:
                if https_get(self.admin_port, "/healthz", self.CA)[0] == 200:
                    return True
            except (OSError, ssl.SSLError):
                pass
        return False


class AdminTlsTests(TlsCase):

    def test_admin_listener_over_tls(self):
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        cert, key = self.certs.leaf("localhost", ["localhost"])
        cfg = tls_config(cert, key)
        cfg["server"]["admin_tls"] = {"certificates": [{"cert_file": cert, "key_file": key}]}
        self.upstream = harness.Upstream(self)
        cfg["upstream"] = {"url": self.upstream.url}
        AdminGateway.CA = self.certs.ca
        self.gw = AdminGateway(self, cfg)
        status, _, body = https_get(self.gw.admin_port, "/metrics", self.certs.ca)
        self.assertEqual(status, 200)
        self.assertIn(b'tollgate_tls_handshakes_total{listener="admin",result="ok"}', body)
        with self.assertRaises((OSError, http.client.HTTPException)):
            harness.http_request(self.gw.admin_port, "GET", "/healthz", timeout=3)


class StartupTests(GatewayTestCase):

    def test_bad_files_fail_the_start_naming_them(self):
        certs = Certs(os.path.join(self.tmpdir, "certs"))
        good = certs.leaf("localhost", ["localhost"])
        other = certs.leaf("other", ["localhost"])
        expired = certs.leaf("expired", ["localhost"], days=-1)
        rows = [
            ("missing", ("/nonexistent/cert.pem", good[1]), "/nonexistent/cert.pem"),
            ("key not matching", (good[0], other[1]), good[0]),
            ("expired", expired, expired[0]),
        ]
        for name, (cert, key), named in rows:
            with self.subTest(row=name):
                path = os.path.join(self.tmpdir, "bad-%s.yaml" % name.replace(" ", "-"))
                cfg = tls_config(cert, key)
                cfg["server"]["listen"] = "127.0.0.1:0"
                cfg["server"]["admin_listen"] = "127.0.0.1:0"
                cfg["upstream"] = {"url": "http://127.0.0.1:9"}
                with open(path, "w") as f:
                    json.dump(cfg, f)
                r = subprocess.run([harness.BINARY, "serve", "--config", path],
                                   capture_output=True, timeout=20, text=True)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("server.tls", r.stderr)
                self.assertIn(named, r.stderr)


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
