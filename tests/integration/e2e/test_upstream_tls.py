#!/usr/bin/env python3
"""HTTPS upstreams (issue 33, `upstream.tls`), through the real binary and a real HTTPS upstream
(tests/support/upstream.py over Python's ssl), certificates made by the openssl command.

    python3 test_upstream_tls.py --binary build/tollgate [-v]

- VerificationTests: a table of upstream certificates and settings. Verified ones are served;
  another CA, a name or address not covered, an expired certificate or the system's CAs alone
  answer 502 upstream_tls_failed, the upstream receiving nothing; verify: false takes any
  certificate and says so at start.
- PoolTests: 60 requests over TLS 1.3 (whose session tickets arrive on idle connections) use one
  upstream connection, none found stale; a new connection resumes the session.
- CloseFramedTests: a body framed by the upstream's close, without close_notify, is relayed.
- NginxUpstreamTests: a real nginx over https: verified, SNI sent, one pooled connection for
  sequential requests; another CA refused.
- ClientCertificateTests: an upstream that requires a client certificate.
- StartupTests: unreadable or malformed upstream TLS files stop the start, naming the field.
"""
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase  # noqa: E402
from test_tls import Certs  # noqa: E402


def gateway_config(upstream_url, tls, threads=2):
    up = {"url": upstream_url}
    if tls is not None:
        up["tls"] = tls
    return {
        "server": {"threads": threads, "access_log": False},
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"free": {"limits": [{"name": "burst", "algorithm": "token_bucket",
                                       "capacity": 1000, "refill_per_second": 1000}]}},
        "routes": [{"path": "/public/*", "identity": "ip"},
                   {"path": "/slow", "identity": "ip"}, {"path": "/unframed", "identity": "ip"}],
        "anonymous": {"limits": [{"name": "ip", "algorithm": "token_bucket", "capacity": 1000,
                                  "refill_per_second": 1000}]},
        "upstream": up,
    }


class UpstreamTlsCase(GatewayTestCase):

    def setUp(self):
        super().setUp()
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))

    def start_pair(self, leaf, tls, host="127.0.0.1", threads=2, upstream_tls=None):
        """An HTTPS upstream serving `leaf`, and a gateway sending to https://host:port."""
        self.upstream = harness.Upstream(
            self, tls=upstream_tls or {"cert": leaf[0], "key": leaf[1]})
        url = "https://%s:%d" % (host, self.upstream.port)
        self.gw = harness.Gateway(self, gateway_config(url, tls, threads=threads))
        return self.gw

    def upstream_errors(self, kind):
        return self.gw.metrics().get('tollgate_upstream_errors_total{kind="%s"}' % kind, 0)


class VerificationTests(UpstreamTlsCase):

    def test_certificates_and_settings(self):
        other = Certs(os.path.join(self.tmpdir, "other-ca"))
        by_name = self.certs.leaf("localhost", ["localhost"])
        by_address = self.certs.leaf("by-address", [], ips=["127.0.0.1"])
        expired = self.certs.leaf("localhost", ["localhost"], days=-1)
        ca = self.certs.ca
        # (row, the upstream's certificate, upstream.tls, served)
        rows = [
            ("verified by name", by_name, {"ca_file": ca, "server_name": "localhost"}, True),
            ("verified by address", by_address, {"ca_file": ca}, True),
            ("another CA", by_name, {"ca_file": other.ca, "server_name": "localhost"}, False),
            ("a name not covered", by_name, {"ca_file": ca, "server_name": "api.test"}, False),
            ("an address not covered", by_name, {"ca_file": ca}, False),
            ("expired", expired, {"ca_file": ca, "server_name": "localhost"}, False),
            ("the system's CAs", by_name, {"server_name": "localhost"}, False),
            ("no upstream.tls: verified, system CAs", by_name, None, False),
            ("verify false, another CA", by_name, {"ca_file": other.ca, "verify": False}, True),
        ]
        for row, leaf, tls, served in rows:
            with self.subTest(row=row):
                self.start_pair(leaf, tls)
                for _ in range(3):
                    r = self.gw.get("/public/echo")
                    if served:
                        self.assertEqual(r.status, 200, r)
                        self.assertEqual(r.json()["path"], "/public/echo")
                    else:
                        self.assertEqual(r.status, 502, r)
                        self.assertEqual(r.json()["code"], "upstream_tls_failed", r)
                stats = self.upstream.stats()
                self.assertEqual(stats["received"], 3 if served else 0, "served: %s" % served)
                if not served:
                    self.assertEqual(self.upstream_errors("tls"), 3)
                warned = b"upstream.tls.verify is false" in self.gw.process.read_stderr()
                self.assertEqual(warned, tls is not None and tls.get("verify") is False)
                self._stop_all()


class PoolTests(UpstreamTlsCase):

    def test_one_connection_for_sequential_requests(self):
        leaf = self.certs.leaf("localhost", ["localhost"])
        self.start_pair(leaf, {"ca_file": self.certs.ca, "server_name": "localhost"}, threads=1)
        before = self.upstream.stats()["connections"]
        statuses = [self.gw.get("/public/echo?n=%d" % i).status for i in range(60)]
        self.assertEqual(statuses, [200] * 60)
        # Each stats call is a connection of its own.
        gateway_connections = self.upstream.stats()["connections"] - before - 1
        self.assertEqual(gateway_connections, 1)
        m = self.gw.metrics()
        self.assertEqual(m.get("tollgate_upstream_stale_total", 0), 0)
        self.assertEqual(m.get('tollgate_upstream_errors_total{kind="tls"}', 0), 0)
        # Two requests at once need a second connection, which resumes the first's session.
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            self.gw.get("/slow?ms=400").status)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertEqual(results, [200, 200])
        stats = self.upstream.stats()
        self.assertEqual(stats["connections"] - before - 2, 2)
        self.assertGreaterEqual(stats["resumed"], 1)


NGINX_CONF = """
worker_processes 1;
pid nginx.pid;
error_log error.log;
events { worker_connections 64; }
http {
  access_log off;
  server {
    listen %(listen)s ssl;
    ssl_certificate %(cert)s;
    ssl_certificate_key %(key)s;
    keepalive_requests 10000;
    location / {
      default_type text/plain;
      return 200 "nginx $ssl_protocol sni=$ssl_server_name connection=$connection\\n";
    }
  }
}
"""


class CloseFramedTests(UpstreamTlsCase):

    def test_a_body_framed_by_the_upstreams_close(self):
        # The test upstream (Python's ssl) closes without close_notify, as many servers do: a
        # body framed by that close is relayed whole (and chunked to the client).
        leaf = self.certs.leaf("localhost", ["localhost"])
        self.start_pair(leaf, {"ca_file": self.certs.ca, "server_name": "localhost"})
        r = self.gw.get("/unframed?bytes=5000")
        self.assertEqual((r.status, r.body), (200, b"u" * 5000))


class NginxUpstreamTests(UpstreamTlsCase):
    """A real nginx over https as the upstream."""

    def start_nginx_pair(self, tls, leaf):
        nginx = harness.Nginx(self, lambda listen: NGINX_CONF % {
            "listen": listen, "cert": leaf[0], "key": leaf[1]})
        url = "https://127.0.0.1:%d" % nginx.port
        self.gw = harness.Gateway(self, gateway_config(url, tls, threads=1))

    def test_verified_pooled_and_refused(self):
        leaf = self.certs.leaf("localhost", ["localhost"])
        self.start_nginx_pair({"ca_file": self.certs.ca, "server_name": "localhost"}, leaf)
        bodies = [self.gw.get("/public/n%d" % i).body.decode() for i in range(30)]
        for b in bodies:
            self.assertRegex(b, r"^nginx TLSv1\.[23] sni=localhost connection=\d+\n$")
        # One upstream connection for all of them: nginx numbered one.
        self.assertEqual(len({b.split("connection=")[1] for b in bodies}), 1, bodies)
        self.assertEqual(self.gw.metrics().get("tollgate_upstream_stale_total", 0), 0)
        self._stop_all()
        other = Certs(os.path.join(self.tmpdir, "other-ca"))
        self.start_nginx_pair({"ca_file": other.ca, "server_name": "localhost"}, leaf)
        r = self.gw.get("/public/x")
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.json()["code"], "upstream_tls_failed")


class ClientCertificateTests(UpstreamTlsCase):

    def test_upstream_requiring_a_client_certificate(self):
        leaf = self.certs.leaf("localhost", ["localhost"])
        client = self.certs.leaf("tollgate-client", ["tollgate.test"])
        stranger = Certs(os.path.join(self.tmpdir, "stranger-ca")).leaf("x", ["x.test"])
        upstream_tls = {"cert": leaf[0], "key": leaf[1], "client_ca": self.certs.ca,
                        "probe": client}
        base = {"ca_file": self.certs.ca, "server_name": "localhost"}
        rows = [
            ("our certificate", dict(base, cert_file=client[0], key_file=client[1]), True),
            ("no certificate", base, False),
            ("a certificate of another CA",
             dict(base, cert_file=stranger[0], key_file=stranger[1]), False),
        ]
        for row, tls, served in rows:
            with self.subTest(row=row):
                self.start_pair(leaf, tls, upstream_tls=upstream_tls)
                r = self.gw.get("/public/echo")
                if served:
                    self.assertEqual(r.status, 200, r)
                else:
                    # TLS 1.3: the upstream refuses the certificate after the client's side of
                    # the handshake is done, so the refusal meets the request's first read: its
                    # alert, or the reset of the connection it closed, whichever comes first.
                    self.assertEqual(r.status, 502, r)
                    self.assertIn(r.json()["code"], ("upstream_tls_failed",
                                                     "upstream_unavailable"), r)
                self.assertEqual(self.upstream.stats()["received"], 1 if served else 0)
                self._stop_all()


class StartupTests(UpstreamTlsCase):

    def test_bad_files_fail_the_start_naming_them(self):
        garbage = os.path.join(self.tmpdir, "garbage.pem")
        with open(garbage, "w") as f:
            f.write("not a certificate\n")
        leaf = self.certs.leaf("localhost", ["localhost"])
        rows = [
            ("a missing CA file", {"ca_file": "/nonexistent/ca.pem"},
             "upstream.tls.ca_file: cannot read '/nonexistent/ca.pem'"),
            ("a CA file of garbage", {"ca_file": garbage}, garbage),
            ("a client key not matching", {"cert_file": leaf[0], "key_file": garbage}, garbage),
            ("tls on an http url", "http", "upstream.tls: needs an https:// upstream.url"),
        ]
        for row, tls, named in rows:
            with self.subTest(row=row):
                url = "https://127.0.0.1:9"
                if tls == "http":
                    url, tls = "http://127.0.0.1:9", {"verify": False}
                cfg = gateway_config(url, tls)
                cfg["server"].update(listen="127.0.0.1:0", admin_listen="127.0.0.1:0")
                path = os.path.join(self.tmpdir, "bad.yaml")
                with open(path, "w") as f:
                    json.dump(cfg, f)
                r = subprocess.run([harness.BINARY, "serve", "--config", path],
                                   capture_output=True, timeout=20, text=True)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(named, r.stderr)


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
