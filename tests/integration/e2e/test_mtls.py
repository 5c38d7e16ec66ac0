#!/usr/bin/env python3
"""Client certificates (mTLS) on the gateway listener, and the certificate as the rate-limit
identity (issue 33, part 2), through the real binary, Python's ssl as the client, certificates
made by the openssl command.

    python3 test_mtls.py --binary build/tollgate [-v]

- IdentityTests: keys named by a certificate's fingerprint or by a name (URI SAN, DNS SAN) get
  their plan's limits, each its own budget; the upstream gets the key and the certificate's
  fingerprint and subject; a resumed session keeps its identity; on a key route a certificate
  stands for the key when no API key is presented.
- RefusalTests: a table of clients on a client_cert route: no certificate, a certificate naming
  no key, an API key instead, a certificate of another CA, an expired one. Nothing reaches the
  upstream.
- ForgedHeaderTests: every spelling of the certificate headers a client sends is dropped.
- RequiredModeTests: mode required fails the handshake without a certificate.
- CaRotationTests: a CA added to the CA file is taken within a second, without a restart.
"""
import hashlib
import http.client
import os
import shutil
import socket
import ssl
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase  # noqa: E402
from test_tls import Certs  # noqa: E402


def fingerprint(cert_file, colons=False):
    with open(cert_file) as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    hex_ = hashlib.sha256(der).hexdigest()
    return ":".join(hex_[i:i + 2].upper() for i in range(0, 64, 2)) if colons else hex_


def slow_bucket(capacity):
    return {"name": "burst", "algorithm": "token_bucket", "capacity": capacity,
            "refill_per_second": 0.001}


class MtlsCase(GatewayTestCase):

    def setUp(self):
        super().setUp()
        self.certs = Certs(os.path.join(self.tmpdir, "certs"))
        self.server = self.certs.leaf("localhost", ["localhost"])
        self.svc_a = self.certs.leaf("svc-a", ["svc-a.test"], uris=["spiffe://example.test/svc-a"])
        self.svc_b = self.certs.leaf("svc-b", ["svc-b.internal"])
        self.svc_c = self.certs.leaf("svc-c", ["svc-c.test"],
                                     uris=["spiffe://example.test/svc-c"])
        self.nobody = self.certs.leaf("nobody", ["nobody.test"])
        self.cn_billing = self.certs.leaf("billing", ["other.test"])  # its CN is not a name

    def start_gateway(self, mode="optional", ca_file=None, routes=(), capacity=3):
        self.upstream = harness.Upstream(self)
        cfg = {
            "server": {"threads": 2, "access_log": False, "tls": {
                "certificates": [{"cert_file": self.server[0], "key_file": self.server[1]}],
                "client_certificates": {"mode": mode, "ca_file": ca_file or self.certs.ca}}},
            "store": {"type": "memory"},
            "mode": "enforce",
            "plans": {"small": {"limits": [slow_bucket(capacity)]}},
            "keys": [
                {"cert_sha256": fingerprint(self.svc_a[0], colons=True), "id": "svc-a",
                 "plan": "small"},
                # DNS names in any case.
                {"cert_name": "SVC-B.Internal", "id": "svc-b", "plan": "small"},
                # A CN counts only in a certificate without subjectAltNames.
                {"cert_name": "billing", "id": "billing", "plan": "small"},
                {"cert_name": "spiffe://example.test/svc-c", "id": "svc-c", "plan": "small"},
                {"key": "sk-human", "id": "human", "plan": "small"},
            ],
            "routes": list(routes) + [{"path": "/machines/*", "identity": "client_cert"},
                                      {"path": "/public/*", "identity": "ip"}],
            "anonymous": {"limits": [slow_bucket(1000)]},
            "upstream": {"url": self.upstream.url},
        }
        self.gw = harness.Gateway(self, cfg)

    def context(self, cert=None):
        ctx = ssl.create_default_context(cafile=self.certs.ca)
        if cert:
            ctx.load_cert_chain(*cert)
        return ctx

    def post(self, path, cert=None, headers=None):
        return self.get(path, cert, headers, method="POST")

    def get(self, path, cert=None, headers=None, ctx=None, session=None, method="GET"):
        """(status, headers, body, the TLS socket's session and whether it was resumed)."""
        raw = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        tls = (ctx or self.context(cert)).wrap_socket(raw, server_hostname="localhost",
                                                      session=session)
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=5)
        conn.sock = tls
        try:
            conn.request(method, path, body=b"" if method == "POST" else None,
                         headers=headers or {})
            r = conn.getresponse()
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body, tls.session, \
                tls.session_reused
        finally:
            conn.close()

    def echoed(self, body):
        return {k.lower(): v for k, v in harness.Response(200, {}, body).json()["headers"].items()}

    def handshakes(self, result):
        return self.gw.metrics().get(
            'tollgate_tls_handshakes_total{listener="gateway",result="%s"}' % result, 0)


class IdentityTests(MtlsCase):

    def setUp(self):
        super().setUp()
        self.start_gateway()

    def test_each_certificate_is_its_own_budget(self):
        for who, cert in (("svc-a", self.svc_a), ("svc-b", self.svc_b), ("svc-c", self.svc_c)):
            with self.subTest(key=who):
                statuses = [self.get("/machines/x", cert)[0] for _ in range(4)]
                self.assertEqual(statuses, [200, 200, 200, 429])

    def test_the_upstream_learns_the_key_and_the_certificate(self):
        status, _, body, _, _ = self.get("/machines/echo", self.svc_a)
        self.assertEqual(status, 200)
        h = self.echoed(body)
        self.assertEqual(h["x-tollgate-key-id"], "svc-a")
        self.assertEqual(h["x-tollgate-plan"], "small")
        self.assertEqual(h["x-tollgate-client-cert-sha256"], fingerprint(self.svc_a[0]))
        self.assertEqual(h["x-tollgate-client-cert-subject"], "CN=svc-a")

    def test_a_resumed_session_keeps_its_identity(self):
        ctx = self.context(self.svc_a)
        _, _, _, session, _ = self.get("/machines/echo", ctx=ctx)
        status, _, body, _, resumed = self.get("/machines/echo", ctx=ctx, session=session)
        self.assertTrue(resumed)
        self.assertEqual(status, 200)
        self.assertEqual(self.echoed(body)["x-tollgate-key-id"], "svc-a")

    def test_on_a_key_route_a_certificate_stands_for_the_key(self):
        status, _, body, _, _ = self.get("/api/echo", self.svc_b)
        self.assertEqual(status, 200)
        self.assertEqual(self.echoed(body)["x-tollgate-key-id"], "svc-b")
        # An API key is what the request presents: it wins over the certificate.
        status, _, body, _, _ = self.get("/api/echo", self.svc_b,
                                         {"Authorization": "Bearer sk-human"})
        self.assertEqual(status, 200)
        self.assertEqual(self.echoed(body)["x-tollgate-key-id"], "human")
        # A certificate naming no key is no credential: 401 as without one.
        status, _, body, _, _ = self.get("/api/echo", self.nobody)
        self.assertEqual(status, 401)
        self.assertIn(b"missing_api_key", body)


class RefusalTests(MtlsCase):

    def setUp(self):
        super().setUp()
        self.start_gateway()

    def test_refused_on_a_client_cert_route(self):
        rows = [
            ("no certificate", None, {}, 403, "client_certificate_required"),
            ("a certificate naming no key", self.nobody, {}, 403, "unknown_client_certificate"),
            ("a key's name as the CN beside subjectAltNames", self.cn_billing, {}, 403,
             "unknown_client_certificate"),
            ("an API key instead", None, {"Authorization": "Bearer sk-human"}, 403,
             "client_certificate_required"),
            ("an API key and a certificate naming no key", self.nobody,
             {"X-API-Key": "sk-human"}, 403, "unknown_client_certificate"),
        ]
        for row, cert, headers, status, code in rows:
            with self.subTest(row=row):
                got, h, body, _, _ = self.get("/machines/x", cert, headers)
                self.assertEqual(got, status, body)
                self.assertIn(code.encode(), body)
                self.assertNotIn("www-authenticate", h)
        self.assertEqual(self.upstream.stats()["received"], 0)

    def test_certificates_that_do_not_verify_fail_the_handshake(self):
        stranger = Certs(os.path.join(self.tmpdir, "stranger")).leaf("svc-a", ["svc-a.test"])
        expired = self.certs.leaf("svc-x", ["svc-x.test"], days=-1)
        rows = [("another CA", stranger), ("expired", expired)]
        for row, cert in rows:
            with self.subTest(row=row):
                failed = self.handshakes("failed")
                # TLS 1.3: the client's side is done before the gateway refuses its certificate;
                # the refusal meets the request.
                with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
                    self.get("/machines/x", cert)
                self.assertTrue(
                    harness.wait_until(lambda: self.handshakes("failed") == failed + 1))
        self.assertEqual(self.upstream.stats()["received"], 0)
        self.assertEqual(self.get("/machines/x", self.svc_a)[0], 200)


class OverrideTests(MtlsCase):
    """A POST asking for another method meets that method's route too: when the strictest of
    them (here the fail-closed one) demands less, the POST route's key or certificate is still
    required, since the upstream may run the POST."""

    def test_an_override_does_not_walk_past_a_key_or_a_certificate(self):
        self.start_gateway(capacity=100, routes=[
            {"path": "/m/*", "method": "POST", "identity": "client_cert"},
            {"path": "/m/*", "method": "DELETE", "identity": "ip", "fail_mode": "closed"},
            {"path": "/k/*", "method": "POST", "identity": "key"},
            {"path": "/k/*", "method": "DELETE", "identity": "ip", "fail_mode": "closed"},
        ])
        overrides = [("X-HTTP-Method-Override", "DELETE"), ("X-HTTP-Method", "DELETE"),
                     ("X-Method-Override", "delete"), ("x_http_method_override", "DELETE"),
                     ("?_method=", "DELETE")]
        for name, value in overrides:
            headers = {} if name.startswith("?") else {name: value}
            q = "?_method=" + value if name.startswith("?") else ""
            with self.subTest(override=name):
                before = self.upstream.stats()["received"]
                status, _, body, _, _ = self.post("/m/x" + q, None, headers)
                self.assertEqual(status, 403, body)
                self.assertIn(b"client_certificate_required", body)
                status, _, body, _, _ = self.post("/k/x" + q, None, headers)
                self.assertEqual(status, 401, body)
                self.assertIn(b"missing_api_key", body)
                self.assertEqual(self.upstream.stats()["received"], before)
                # With the credential each demands: served, as that key.
                status, _, body, _, _ = self.post("/m/x" + q, self.svc_a, headers)
                self.assertEqual(status, 200, body)
                self.assertEqual(self.echoed(body)["x-tollgate-key-id"], "svc-a")
                auth = dict(headers, Authorization="Bearer sk-human")
                status, _, body, _, _ = self.post("/k/x" + q, None, auth)
                self.assertEqual(status, 200, body)
                self.assertEqual(self.echoed(body)["x-tollgate-key-id"], "human")


class ForgedHeaderTests(MtlsCase):

    def test_clients_cannot_send_the_certificate_headers(self):
        self.start_gateway()
        spellings = ["X-Tollgate-Client-Cert-Sha256", "x-tollgate-client-cert-sha256",
                     "X-TOLLGATE-CLIENT-CERT-SUBJECT", "X_Tollgate_Client_Cert_Sha256",
                     "x-tollgate-client-cert-subject", "X-Tollgate-Key-Id"]
        for name in spellings:
            for cert in (None, self.svc_a):
                with self.subTest(header=name, certificate=cert is not None):
                    status, _, body, _, _ = self.get("/public/echo", cert, {name: "forged"})
                    self.assertEqual(status, 200)
                    h = self.echoed(body)
                    self.assertNotIn("forged", h.values())
                    self.assertNotIn(name.lower().replace("_", "-"),
                                     [k for k, v in h.items() if v == "forged"])
                    self.assertEqual("x-tollgate-client-cert-sha256" in h, cert is not None)


class RequiredModeTests(MtlsCase):

    def test_no_certificate_no_handshake(self):
        self.start_gateway(mode="required")
        failed = self.handshakes("failed")
        with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            self.get("/public/echo")
        self.assertTrue(harness.wait_until(lambda: self.handshakes("failed") == failed + 1))
        self.assertEqual(self.get("/public/echo", self.svc_a)[0], 200)
        self.assertEqual(self.upstream.stats()["received"], 1)


class CaRotationTests(MtlsCase):

    def test_a_new_ca_file_is_taken_without_a_restart(self):
        other = Certs(os.path.join(self.tmpdir, "other"))
        partner = other.leaf("partner", ["partner.test"])
        ca_file = os.path.join(self.tmpdir, "clients-ca.pem")
        shutil.copy(self.certs.ca, ca_file)
        self.start_gateway(mode="required", ca_file=ca_file)
        with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            self.get("/public/echo", partner)
        # Both CAs in the file, written beside it and renamed over it.
        with open(ca_file + ".new", "w") as f:
            for ca in (self.certs.ca, other.ca):
                with open(ca) as c:
                    f.write(c.read())
        os.rename(ca_file + ".new", ca_file)

        def partner_served():
            try:
                return self.get("/public/echo", partner)[0] == 200
            except (ssl.SSLError, ConnectionError, http.client.HTTPException):
                return False
        self.assertTrue(harness.wait_until(partner_served, timeout=5))
        self.assertEqual(self.get("/public/echo", self.svc_a)[0], 200)


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
