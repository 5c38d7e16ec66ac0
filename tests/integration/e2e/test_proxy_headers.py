#!/usr/bin/env python3
"""Client proxy headers never reach the upstream from an untrusted peer (issue 31), through the
real binary and the recording upstream (tests/support/raw_upstream.py).

    python3 test_proxy_headers.py --binary build/tollgate [-v]

Forwarded, X-Real-IP, X-Forwarded-Host, X-Forwarded-Proto and the other fields through which a
proxy tells an upstream who the client is (docs/http-contract.md, "Proxy headers") are treated
like X-Forwarded-For: a peer that is not in identity.trusted_proxies cannot set them (in any
case, with '_' for '-', on one line or several); tollgate sets its own; a trusted proxy's are
kept as it sent them.

- ProxyHeaderTableTests: PROXY_HEADERS x every spelling x one line or two, from the untrusted
  peer (127.0.0.2) and from the trusted one (127.0.0.1).
- ProxyHeaderChoiceTests: upstream.forwarded_headers naming Forwarded and X-Forwarded-Port
  only; and an empty list.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_hostile as hostile  # noqa: E402
from test_hostile import HostileCase, norm  # noqa: E402

UNTRUSTED = hostile.UNTRUSTED_PEER
TRUSTED = hostile.PEER

# Every field the gateway must treat as a proxy's (docs/http-contract.md, "Proxy headers").
PROXY_HEADERS = [
    "Forwarded", "X-Real-IP", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port",
    "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Forwarded-Scheme", "X-Forwarded-Ssl",
    "X-Forwarded-Protocol", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Client-Cert",
    "X-Forwarded", "Forwarded-For", "X-Client-IP", "Client-IP", "True-Client-IP",
    "CF-Connecting-IP", "CF-Connecting-IPv6", "Fastly-Client-IP", "X-Cluster-Client-IP",
    "X-Original-Forwarded-For", "X-Originating-IP", "X-Remote-IP", "X-Remote-Addr",
    "X-AppEngine-User-IP", "X-ProxyUser-IP", "X-Url-Scheme", "Front-End-Https",
    "X-Original-URL", "X-Rewrite-URL", "X-Original-URI", "X-Original-Method", "X-Original-Host",
    "X-Host", "Proxy-Client-IP", "WL-Proxy-Client-IP", "X-Envoy-External-Address",
    "X-Azure-ClientIP", "X-Azure-SocketIP", "Akamai-Client-IP", "Via",
]
# What tollgate sets by default (upstream.forwarded_headers).
OWN = ("x-forwarded-proto", "x-forwarded-host", "x-real-ip")


def spellings(name):
    """The header as a client may spell it: as written, lower, upper, '_' for '-', mixed."""
    out = [name, name.lower(), name.upper()]
    if "-" in name:
        out += [name.replace("-", "_"), name.lower().replace("-", "_"),
                name.replace("-", "_").upper()]
    return out


def forged(i):
    return "203.0.113.%d" % (i % 250 + 1) if i % 2 else "for=203.0.113.9;host=evil-%d" % i


class ProxyHeaderTableTests(HostileCase):

    @classmethod
    def config(cls):
        return hostile.gateway_config(anon=100000)

    def send(self, headers, source, xff=None):
        h = list(headers)
        if xff:
            h.append(("X-Forwarded-For", xff))
        mark = self.upstream.mark()
        # Each on its own connection, closed at once: hundreds of rows from one address stay
        # under server.max_connections_per_address.
        r, client = self.exchange(hostile.request_bytes("GET", "/public/echo", h, b""),
                                  source=source)
        client.close()
        self.assertIsNotNone(r, "no response")
        self.assertEqual(r.status, 200, r)
        reqs = self.upstream.requests_since(mark)
        self.assertEqual(len(reqs), 1, reqs)
        return reqs[0]

    def own(self, req, name):
        return [v for k, v in req.headers if norm(k) == name]

    def test_untrusted_peer_cannot_set_any(self):
        i = 0
        for header in PROXY_HEADERS:
            for spelt in spellings(header):
                for lines in (1, 2):
                    i += 1
                    values = ["forged-%d-%d" % (i, n) for n in range(lines)]
                    with self.subTest(header=spelt, lines=lines):
                        req = self.send([(spelt, v) for v in values], UNTRUSTED)
                        for k, v in req.headers:
                            self.assertNotIn(v, values, "upstream got %s: %s" % (k, v))
                        # tollgate's own, once each, from what it saw.
                        self.assertEqual(self.own(req, "x-forwarded-proto"), ["http"], req)
                        self.assertEqual(self.own(req, "x-forwarded-host"), [hostile.HOST], req)
                        self.assertEqual(self.own(req, "x-real-ip"), [UNTRUSTED], req)
                        self.assertEqual(self.own(req, "forwarded"), [], req)  # off by default
                        self.assertEqual(self.own(req, "x-forwarded-port"), [], req)
                        self.assertIdentityHeaders(req)
        # All of them at once, and X-Forwarded-For, which is rewritten as before.
        req = self.send([(h, forged(n)) for n, h in enumerate(PROXY_HEADERS)], UNTRUSTED,
                        xff="198.51.100.7")
        for k, v in req.headers:
            if norm(k) in OWN or norm(k) == "x-forwarded-for":
                continue
            self.assertNotIn(norm(k), {norm(h) for h in PROXY_HEADERS}, req)
        # An untrusted client's own X-Forwarded-For is not passed on either (an upstream that
        # reads its left-most entry would believe it): only the peer, however it is spelt.
        self.assertEqual(self.own(req, "x-forwarded-for"), [UNTRUSTED], req)
        self.assertEqual(self.own(req, "x-real-ip"), [UNTRUSTED], req)
        for spelt in spellings("X-Forwarded-For"):
            for lines in (1, 2):
                with self.subTest(xff=spelt, lines=lines):
                    req = self.send([(spelt, "6.6.6.%d" % n) for n in range(lines)], UNTRUSTED)
                    self.assertEqual(self.own(req, "x-forwarded-for"), [UNTRUSTED], req)
                    self.assertNotIn("6.6.6.", repr(req.headers), req)
        # Connection cannot make the upstream lose the Host (nor any field tollgate sets).
        for named in ("Host", "host", "Host, X-Forwarded-For", "X-Real-IP, Host"):
            with self.subTest(connection=named):
                req = self.send([("Connection", named)], UNTRUSTED)
                self.assertEqual([v for k, v in req.headers if norm(k) == "host"], [hostile.HOST],
                                 req)
                self.assertEqual(self.own(req, "x-forwarded-for"), [UNTRUSTED], req)
                self.assertEqual(self.own(req, "x-real-ip"), [UNTRUSTED], req)

    def test_trusted_proxy_headers_are_kept(self):
        i = 0
        client = "198.18.7.7"
        for header in PROXY_HEADERS:
            for spelt in spellings(header):
                for lines in (1, 2):
                    i += 1
                    values = ["kept-%d-%d" % (i, n) for n in range(lines)]
                    with self.subTest(header=spelt, lines=lines):
                        req = self.send([(spelt, v) for v in values], TRUSTED, xff=client)
                        got = [v for k, v in req.headers if k == spelt]
                        if "_" in spelt:
                            # Never with '_': an upstream cannot tell it from the proxy's own.
                            self.assertEqual(got, [], req)
                            for k, v in req.headers:
                                self.assertNotIn(v, values, req)
                        else:
                            self.assertEqual(got, values, req)
                        # Ours only where the proxy sent none of that name.
                        for name, ours in (("x-forwarded-proto", "http"),
                                           ("x-forwarded-host", hostile.HOST),
                                           ("x-real-ip", client)):
                            sent = norm(spelt) == name and "_" not in spelt
                            want = values if sent else [ours]
                            self.assertEqual(self.own(req, name), want, (name, req))
        # Behind a chain of trusted proxies X-Real-IP is the right-most address that is not one.
        req = self.send([], TRUSTED, xff="198.18.8.8, 127.0.0.1")
        self.assertEqual(self.own(req, "x-real-ip"), ["198.18.8.8"], req)
        req = self.send([], TRUSTED, xff="198.18.8.9:4711")
        self.assertEqual(self.own(req, "x-real-ip"), ["198.18.8.9"], req)
        req = self.send([], TRUSTED, xff="[2001:db8::9]:443")
        self.assertEqual(self.own(req, "x-real-ip"), ["2001:db8::9"], req)
        req = self.send([], TRUSTED)  # no X-Forwarded-For: the proxy itself is the client
        self.assertEqual(self.own(req, "x-real-ip"), [TRUSTED], req)


class ProxyHeaderChoiceTests(HostileCase):
    """upstream.forwarded_headers: which of its own tollgate sets."""

    @classmethod
    def config(cls):
        c = hostile.gateway_config(anon=100000)
        c["upstream"] = {"forwarded_headers": ["forwarded", "x_forwarded_port"]}
        return c

    def test_forwarded_and_port_only(self):
        mark = self.upstream.mark()
        r = self.get("/public/echo", headers=[("Forwarded", "for=203.0.113.1"),
                                              ("X-Forwarded-Port", "1")], source=UNTRUSTED)
        self.assertEqual(r.status, 200, r)
        [req] = self.upstream.requests_since(mark)
        self.assertEqual(req.values("Forwarded"),
                         ['for=%s;host="%s";proto=http' % (UNTRUSTED, hostile.HOST)], req)
        self.assertEqual(req.values("X-Forwarded-Port"), [str(self.gateway.port)], req)
        for name in OWN:
            self.assertEqual(req.values(name), [], req)
        # Behind a trusted proxy its Forwarded element is kept and tollgate's appended.
        mark = self.upstream.mark()
        r = self.get("/public/echo", headers=[("Forwarded", "for=198.18.9.9;proto=https")],
                     ip="198.18.9.9")
        [req] = self.upstream.requests_since(mark)
        self.assertEqual(req.values("Forwarded"),
                         ["for=198.18.9.9;proto=https",
                          'for=%s;host="%s";proto=http' % (TRUSTED, hostile.HOST)], req)


class ProxyHeaderNoneTests(HostileCase):

    @classmethod
    def config(cls):
        c = hostile.gateway_config(anon=100000)
        c["upstream"] = {"forwarded_headers": []}
        return c

    def test_none_set_and_still_dropped(self):
        mark = self.upstream.mark()
        r = self.get("/public/echo", headers=[("X-Real-IP", "203.0.113.1")], source=UNTRUSTED)
        self.assertEqual(r.status, 200, r)
        [req] = self.upstream.requests_since(mark)
        for name in OWN + ("forwarded", "x-forwarded-port"):
            self.assertEqual(req.values(name), [], req)
        self.assertEqual(req.values("X-Forwarded-For"), [UNTRUSTED], req)


if __name__ == "__main__":
    harness.main(os.path.basename(__file__))
