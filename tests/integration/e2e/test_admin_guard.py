#!/usr/bin/env python3
"""The admin listener against DNS rebinding (issue 31): a Host allow-list on every request and
a bearer token on every change, through the real binary.

    python3 test_admin_guard.py --binary build/tollgate [-v]

A page served from a name the attacker points at 127.0.0.1 reaches the admin listener with that
name in Host (and no Origin on a simple GET, or its own on a POST it makes look same-origin):
before this, it could deny 0.0.0.0/0, reset limits and read usage.

- AdminHostTableTests: one gateway (token from a `file:` secret, one configured name); HOST_TABLE:
  one raw request per row, every Host form (rebound names, with and without port, case, the
  trailing dot, IPv6 forms, absent, twice, an absolute-form target naming another host), on a
  read and on each endpoint, and whether it is answered or refused 421.
- AdminTokenTableTests: the same gateway; every mutating endpoint with every token form
  (missing, wrong, another scheme, `bearer` in lower case, extra spaces, in the query, in another
  header, twice); only the right token in Authorization changes anything.
- AdminTokenEnvTests: the token from `${ENV}`; without a token on loopback changes still work
  (the documented default) while the Host allow-list still applies.
- AdminListenRefusalTests: admin_listen on a non-loopback address without a token is refused at
  start, with the field's path.

Every process is stopped by PID; all traffic is on 127.0.0.1.
"""
import atexit
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_hostile as hostile  # noqa: E402
from test_hostile import HostileCase, request_bytes  # noqa: E402

TOKEN = "adm-7f3c9a1e5b2d4c6e8f0a1b3c5d7e9f11"
ENV_TOKEN = "adm-from-env-0123456789abcdef"
NAME = "tollgate-admin.test"  # server.admin_hosts
EVERYONE = "0.0.0.0/0"


def guard_config(**server):
    c = hostile.gateway_config()
    c["server"] = dict(c["server"], **server)
    return c


class _AdminCase(HostileCase):
    """A HostileCase whose requests go to the admin listener."""

    TOKEN_FILE = True

    @classmethod
    def config(cls):
        path = os.path.join(hostile_tmp(), "admin-token")
        with open(path, "w") as f:
            f.write(TOKEN + "\n")  # a trailing newline, as `echo` writes it
        return guard_config(admin_token="file:" + path, admin_hosts=[NAME])

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.admin_port = cls.gateway.admin_port

    def admin_raw(self, data, method="GET"):
        # One connection per request, closed at once: the admin listener's own budget
        # (server.admin_max_connections) is small.
        with hostile.RawClient(self.admin_port) as c:
            c.send(data)
            resp = c.response(method)
        self.assertIsNotNone(resp, "no answer to %r" % data)
        return resp

    def admin(self, method, target, headers=(), body=b"", host=None, version="HTTP/1.1"):
        host = "127.0.0.1:%d" % self.admin_port if host is None else host
        return self.admin_raw(request_bytes(method, target, headers, body,
                                            host=host if host != "-" else None, version=version),
                              method=method)

    def authorized(self):
        return [("Authorization", "Bearer " + TOKEN)]

    def deny_entries(self):
        r = self.admin("GET", "/admin/deny")
        self.assertEqual(r.status, 200, r)
        return [e["value"] for e in json.loads(r.body)["admin"]]

    def assertNothingChanged(self, context):
        self.assertEqual(self.deny_entries(), [], context)
        r = self.get("/public/ok", ip=hostile.fresh_ip())
        self.assertEqual(r.status, 200, (context, r))


_tmp = []


def hostile_tmp():
    """A directory for the token file, removed when the suite ends."""
    if not _tmp:
        _tmp.append(tempfile.mkdtemp(prefix="tollgate-admin-guard-"))
        atexit.register(shutil.rmtree, _tmp[0], True)
    return _tmp[0]


# Host forms: (name, Host value or "-" for none, version, expected status set). {port} is the
# admin port.
ALLOWED = [
    ("own address and port", "127.0.0.1:{port}"),
    ("own address", "127.0.0.1"),
    ("another loopback address", "127.0.0.2:{port}"),
    ("localhost", "localhost"),
    ("localhost with port", "localhost:{port}"),
    ("localhost with another port (a port map)", "localhost:19090"),
    ("LOCALHOST upper case", "LOCALHOST:{port}"),
    ("localhost. trailing dot", "localhost.:{port}"),
    ("[::1] with port", "[::1]:{port}"),
    ("[::1]", "[::1]"),
    ("[::1] spelt long", "[0:0:0:0:0:0:0:1]:{port}"),
    ("IPv4-mapped loopback", "[::ffff:127.0.0.1]:{port}"),
    ("configured name", NAME),
    ("configured name, upper case, port", NAME.upper() + ":{port}"),
    ("configured name, trailing dot", NAME + ".:{port}"),
]
REFUSED = [  # 421; a Host the parser already refuses is a 400
    ("rebound name", "rebind.attacker.example", {421}),
    ("rebound name with port", "rebind.attacker.example:{port}", {421}),
    ("rebound name, upper case", "REBIND.ATTACKER.EXAMPLE:{port}", {421}),
    ("rebound name, trailing dot", "rebind.attacker.example.:{port}", {421}),
    ("localhost as a subdomain", "localhost.attacker.example:{port}", {421}),
    ("address as a subdomain", "127.0.0.1.nip.io:{port}", {421}),
    ("a name under localhost", "admin.localhost:{port}", {421}),
    ("configured name as a prefix", NAME + ".attacker.example", {421}),
    ("configured name without its domain", "tollgate-admin", {421}),
    ("localhost, two trailing dots", "localhost..:{port}", {400, 421}),
    ("address in hex", "0x7f000001:{port}", {421}),
    ("address as one number", "2130706433:{port}", {421}),
    ("address shortened", "127.1:{port}", {421}),
    ("address with leading zeros", "0127.0.0.1:{port}", {421}),
    ("another address", "10.11.12.13:{port}", {421}),
    ("the any address (reaches loopback on Linux)", "0.0.0.0:{port}", {421}),
    ("the IPv6 any address", "[::]:{port}", {421}),
    ("another IPv6 address", "[::2]:{port}", {421}),
    ("IPv6 with a zone", "[fe80::1%25lo]:{port}", {400, 421}),
    ("IPv6 without brackets", "::1", {400, 421}),
    ("port not a number", "localhost:http", {400, 421}),
    ("empty Host", "", {400, 421}),
]


class AdminHostTableTests(_AdminCase):

    def test_host_table(self):
        port = self.admin_port
        for name, host in ALLOWED:
            host = host.replace("{port}", str(port))
            for path in ("/admin/deny", "/healthz", "/metrics", "/admin/ui/data"):
                with self.subTest(row=name, path=path):
                    r = self.admin("GET", path, host=host)
                    self.assertEqual(r.status, 200, (host, path, r))
            with self.subTest(row=name, path="POST /admin/reload"):
                r = self.admin("POST", "/admin/reload", self.authorized(), host=host)
                self.assertEqual(r.status, 200, (host, r))
        for name, host, want in REFUSED:
            host = host.replace("{port}", str(port))
            for method, path, body in (
                    ("GET", "/admin/deny", b""), ("GET", "/admin/usage?period=2026-12", b""),
                    ("GET", "/admin/ui/data", b""), ("GET", "/admin/ui", b""),
                    ("GET", "/metrics", b""), ("GET", "/healthz", b""),
                    ("GET", "/admin/explain?key_id=k000&method=GET&path=/x", b""),
                    ("GET", "/v1/rate-limit", b""),
                    ("POST", "/admin/deny?kind=address&value=" + EVERYONE, b""),
                    ("POST", "/admin/reset", b'{"address":"198.18.0.1"}'),
                    ("POST", "/admin/reload", b"")):
                with self.subTest(row=name, path=method + " " + path):
                    # Even with the right token: a page cannot have it, and the Host is wrong.
                    r = self.admin(method, path, self.authorized(), body=body, host=host)
                    self.assertIn(r.status, want, (host, path, r))
                    if r.status == 421:
                        self.assertEqual(r.code, "host_not_allowed", r)
                        self.assertEqual(r.header("Content-Type"), "application/problem+json", r)
        self.assertNothingChanged("after the refused Hosts")
        m = harness.parse_metrics(self.admin("GET", "/metrics").body.decode())
        self.assertGreater(m.get('tollgate_admin_refused_total{reason="host"}', 0), 0, m)

    def test_absent_repeated_and_absolute_form_hosts(self):
        port = self.admin_port
        own = "127.0.0.1:%d" % port
        evil = "rebind.attacker.example:%d" % port
        deny = "/admin/deny?kind=address&value=" + EVERYONE
        auth = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        rows = [  # (name, raw request, expected statuses)
            ("HTTP/1.1 without Host", b"POST " + deny.encode() + b" HTTP/1.1\r\n" + auth +
             b"Content-Length: 0\r\n\r\n", {400}),
            ("HTTP/1.0 without Host", b"POST " + deny.encode() + b" HTTP/1.0\r\n" + auth +
             b"Content-Length: 0\r\n\r\n", {421}),
            ("two Host lines, own first", b"POST " + deny.encode() + b" HTTP/1.1\r\nHost: " +
             own.encode() + b"\r\nHost: " + evil.encode() + b"\r\n" + auth +
             b"Content-Length: 0\r\n\r\n", {400}),
            ("two Host lines, rebound first", b"POST " + deny.encode() + b" HTTP/1.1\r\nHost: " +
             evil.encode() + b"\r\nHost: " + own.encode() + b"\r\n" + auth +
             b"Content-Length: 0\r\n\r\n", {400}),
            ("absolute-form naming another host", b"POST http://" + evil.encode() +
             deny.encode() + b" HTTP/1.1\r\nHost: " + own.encode() + b"\r\n" + auth +
             b"Content-Length: 0\r\n\r\n", {400, 421}),
            ("absolute-form own host, rebound Host", b"POST http://" + own.encode() +
             deny.encode() + b" HTTP/1.1\r\nHost: " + evil.encode() + b"\r\n" + auth +
             b"Content-Length: 0\r\n\r\n", {400, 421}),
            ("absolute-form GET naming another host", b"GET http://" + evil.encode() +
             b"/admin/deny HTTP/1.1\r\nHost: " + own.encode() + b"\r\n\r\n", {400, 421}),
        ]
        for name, raw, want in rows:
            with self.subTest(row=name):
                r = self.admin_raw(raw, method=raw.split(b" ")[0].decode())
                self.assertIn(r.status, want, (name, r))
        self.assertNothingChanged("after absent, repeated and absolute-form Hosts")
        # The absolute form naming the listener itself is answered.
        r = self.admin_raw(b"GET http://" + own.encode() + b"/admin/deny HTTP/1.1\r\nHost: " +
                           own.encode() + b"\r\n\r\n")
        self.assertEqual(r.status, 200, r)


def token_forms():
    """(name, extra header lines, query suffix, accepted)."""
    basic = base64.b64encode(b"admin:" + TOKEN.encode()).decode()
    return [
        ("missing", [], "", False),
        ("wrong", [("Authorization", "Bearer adm-wrong")], "", False),
        ("one character off", [("Authorization", "Bearer " + TOKEN[:-1] + "2")], "", False),
        ("a prefix of it", [("Authorization", "Bearer " + TOKEN[:-4])], "", False),
        ("it and more", [("Authorization", "Bearer " + TOKEN + "x")], "", False),
        ("it and a word", [("Authorization", "Bearer " + TOKEN + " x")], "", False),
        ("upper case", [("Authorization", "Bearer " + TOKEN.upper())], "", False),
        ("Basic scheme", [("Authorization", "Basic " + basic)], "", False),
        ("Token scheme", [("Authorization", "Token " + TOKEN)], "", False),
        ("no scheme", [("Authorization", TOKEN)], "", False),
        ("scheme glued", [("Authorization", "Bearer" + TOKEN)], "", False),
        ("empty Bearer", [("Authorization", "Bearer")], "", False),
        ("in the query as access_token", [], "access_token=" + TOKEN, False),
        ("in the query as token", [], "token=" + TOKEN, False),
        ("in X-Admin-Token", [("X-Admin-Token", TOKEN)], "", False),
        ("in X-API-Key", [("X-API-Key", TOKEN)], "", False),
        ("in a cookie", [("Cookie", "token=" + TOKEN)], "", False),
        ("as Proxy-Authorization", [("Proxy-Authorization", "Bearer " + TOKEN)], "", False),
        ("twice, wrong first", [("Authorization", "Bearer adm-wrong"),
                                ("Authorization", "Bearer " + TOKEN)], "", False),
        ("twice, right first", [("Authorization", "Bearer " + TOKEN),
                                ("Authorization", "Bearer adm-wrong")], "", False),
        ("right", [("Authorization", "Bearer " + TOKEN)], "", True),
        ("bearer in lower case (schemes ignore case)", [("Authorization", "bearer " + TOKEN)],
         "", True),
        ("BEARER, extra spaces", [("Authorization", "BEARER    " + TOKEN)], "", True),
        ("right, header name in lower case", [("authorization", "Bearer " + TOKEN)], "", True),
    ]


# Every mutating endpoint: (method, target, body). A refused one must leave no trace: the deny
# list stays empty and the key's budget stays where it was.
MUTATING = [
    ("POST", "/admin/deny?kind=address&value=" + EVERYONE, b""),
    ("POST", "/admin/deny/remove?kind=address&value=" + EVERYONE, b""),
    ("POST", "/admin/reset", b'{"key_id":"k319"}'),
    ("POST", "/admin/reload", b""),
    ("POST", "/json", b'{"domain":"x","descriptors":[]}'),
    ("POST", "/admin/unknown", b""),
    ("PUT", "/admin/deny?kind=address&value=" + EVERYONE, b""),
    ("DELETE", "/admin/deny?kind=address&value=" + EVERYONE, b""),
    ("PATCH", "/admin/reload", b""),
]


class AdminTokenTableTests(_AdminCase):

    def test_token_table(self):
        for name, headers, query, accepted in token_forms():
            for method, target, body in MUTATING:
                if accepted and target.startswith("/admin/deny?"):
                    continue  # the right token's effects are checked below
                with self.subTest(token=name, endpoint=method + " " + target):
                    t = target + (("&" if "?" in target else "?") + query if query else "")
                    r = self.admin(method, t, headers, body=body)
                    if accepted:
                        self.assertNotEqual(r.status, 401, r)
                        continue
                    self.assertEqual(r.status, 401, r)
                    self.assertIn(r.code, {"admin_token_required", "invalid_admin_token"}, r)
                    self.assertTrue((r.header("WWW-Authenticate") or "").startswith("Bearer "), r)
            if not accepted:
                self.assertEqual(self.deny_entries(), [], name)
        m = harness.parse_metrics(self.admin("GET", "/metrics").body.decode())
        self.assertGreater(m.get('tollgate_admin_refused_total{reason="token"}', 0), 0, m)

    def test_right_token_changes_and_reads_need_none(self):
        # Reads need no token.
        for path in ("/admin/deny", "/admin/top", "/admin/ui", "/admin/ui/data", "/metrics",
                     "/admin/keys/k001"):
            with self.subTest(path=path):
                self.assertEqual(self.admin("GET", path).status, 200)
        self.assertNotEqual(self.admin("HEAD", "/admin/deny").status, 401)  # a read
        deny = "/admin/deny?kind=address&value=198.18.250.0/24"
        self.assertEqual(self.admin("POST", deny).status, 401)
        self.assertEqual(self.deny_entries(), [])
        self.assertEqual(self.admin("POST", deny, self.authorized()).status, 200)
        self.assertEqual(self.deny_entries(), ["198.18.250.0/24"])
        self.assertEqual(self.get("/public/x", ip="198.18.250.9").status, 403)
        remove = "/admin/deny/remove?kind=address&value=198.18.250.0/24"
        self.assertEqual(self.admin("POST", remove, [("Authorization", "bearer  " + TOKEN)]).status,
                         200)
        self.assertEqual(self.deny_entries(), [])


class AdminTokenEnvTests(HostileCase):
    """`${ENV}` for the token; and a listener with no token configured."""

    @classmethod
    def config(cls):
        os.environ["TOLLGATE_TEST_ADMIN_TOKEN"] = ENV_TOKEN
        return guard_config(admin_token="${TOLLGATE_TEST_ADMIN_TOKEN}")

    def test_token_from_the_environment(self):
        port = self.gateway.admin_port
        r = harness.http_request(port, "POST", "/admin/reload")
        self.assertEqual((r.status, r.json()["code"]), (401, "admin_token_required"), r)
        r = harness.http_request(port, "POST", "/admin/reload",
                                 headers={"Authorization": "Bearer " + ENV_TOKEN})
        self.assertEqual(r.status, 200, r)
        r = harness.http_request(port, "POST", "/admin/reload",
                                 headers={"Authorization": "Bearer ${TOLLGATE_TEST_ADMIN_TOKEN}"})
        self.assertEqual(r.status, 401, r)


class AdminNoTokenTests(HostileCase):
    """No token on a loopback listener: changes need none (docs/configuration.md), the Host
    allow-list and the cross-site refusal still apply."""

    def test_loopback_without_token(self):
        port = self.gateway.admin_port
        own = "127.0.0.1:%d" % port
        deny = "/admin/deny?kind=address&value=198.18.251.0/24"
        r = harness.http_request(port, "POST", deny, headers={"Host": "rebind.attacker.example"})
        self.assertEqual(r.status, 421, r)
        self.assertEqual(r.json()["code"], "host_not_allowed", r)
        r = harness.http_request(port, "POST", deny,
                                 headers={"Host": own, "Origin": "http://rebind.attacker.example"})
        self.assertEqual((r.status, r.json()["code"]), (403, "cross_site_refused"), r)
        r = harness.http_request(port, "GET", "/admin/deny")
        self.assertEqual(r.json()["admin"], [], r)
        self.assertEqual(harness.http_request(port, "POST", deny).status, 200)
        self.assertEqual(harness.http_request(port, "POST", deny.replace("deny?", "deny/remove?"))
                         .status, 200)


class AdminListenRefusalTests(unittest.TestCase):
    """admin_listen that other machines can reach needs a token: refused at start (serve and
    check-config), with the field's path."""

    def run_binary(self, config, *args):
        with tempfile.TemporaryDirectory(prefix="tollgate-admin-listen-") as d:
            path = os.path.join(d, "c.yaml")
            with open(path, "w") as f:
                json.dump(config, f)
            return subprocess.run([harness.BINARY] + list(args) + [path], capture_output=True,
                                  timeout=30)

    def test_non_loopback_without_token_is_refused(self):
        for listen in ("0.0.0.0:19091", "[::]:19091", ":19091", "10.1.2.3:19091",
                       "admin.example:19091"):
            for command in (("check-config",), ("serve", "--config")):
                with self.subTest(listen=listen, command=command[0]):
                    r = self.run_binary(guard_config(admin_listen=listen), *command)
                    self.assertNotEqual(r.returncode, 0, r)
                    self.assertIn(b"server.admin_token", r.stderr + r.stdout, r)
                    self.assertIn(b"not a loopback address", r.stderr + r.stdout, r)
        for listen in ("127.0.0.1:19091", "127.0.0.2:19091", "localhost:19091", "[::1]:19091"):
            with self.subTest(listen=listen):
                r = self.run_binary(guard_config(admin_listen=listen), "check-config")
                self.assertEqual(r.returncode, 0, r)
        r = self.run_binary(guard_config(admin_listen="0.0.0.0:19091", admin_token="t0ken"),
                            "check-config")
        self.assertEqual(r.returncode, 0, r)
        r = self.run_binary(guard_config(admin_token=""), "check-config")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn(b"server.admin_token", r.stderr + r.stdout, r)


if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
