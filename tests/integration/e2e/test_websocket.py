#!/usr/bin/env python3
"""WebSockets and Upgrade through the real binary (issue 33): python3-websockets as the real
client and as the upstream (tests/support/ws_upstream.py), everything on 127.0.0.1.

Echo both ways (text and binary), the route's limits and cost before any upgrade, the per-identity
cap, the idle timeout, SIGTERM's drain closing tunnels, the metrics, malformed handshakes (a
table: 400 invalid_upgrade, nothing upstream), an upstream's 101 unasked or with another protocol
(502 upstream_invalid_upgrade, nothing of it relayed), h2c refused by the loader and ignored in a
request, and WebSocket over a TLS gateway listener.

Needs python3-websockets (scripts/install-deps.sh): re-executed under /usr/bin/python3 when the
interpreter running it lacks the module.
"""
import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import unittest

try:
    import websockets
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
            "/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import GatewayTestCase, burst, deadline_loop, wait_until  # noqa: E402
from test_tls import Certs  # noqa: E402

WS_UPSTREAM = os.path.normpath(os.path.join(HERE, "..", "..", "support", "ws_upstream.py"))
KEY = "dGhlIHNhbXBsZSBub25jZQ=="


class WsUpstream:
    def __init__(self, fixture, mode="echo", token="websocket", tls=None):
        port_file = os.path.join(fixture.tmpdir, "ws-%d.port" % len(fixture.processes))
        argv = [sys.executable, WS_UPSTREAM, "--port-file", port_file, "--mode", mode,
                "--token", token]
        if tls:
            argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.tls = bool(tls)
        self.process = fixture.spawn("ws-upstream", argv)
        self.port = None
        for _ in deadline_loop(harness.START_TIMEOUT_S):
            if not self.process.alive():
                raise AssertionError("ws upstream exited")
            if os.path.exists(port_file):
                with open(port_file) as f:
                    self.port = int(f.read())
                break
        if self.port is None:
            raise AssertionError("ws upstream wrote no port")
        self.url = "http://127.0.0.1:%d" % self.port

    def stats(self):
        return harness.http_request(self.port, "GET", "/__stats", tls=self.tls).json()


def config(**server):
    s = {"threads": 2}
    s.update(server)
    return {
        "server": s,
        "store": {"type": "memory"},
        "mode": "enforce",
        "plans": {"free": {"limits": [burst(1000)]}},
        "keys": [{"id": "k1", "key": "key-one", "plan": "free"},
                 {"id": "k2", "key": "key-two", "plan": "free"}],
        "routes": [{"name": "limited", "path": "/limited", "identity": "ip", "limits": [burst(2, name="room")]},
                   {"path": "/costly", "identity": "ip", "cost": 5}],
        "anonymous": {"limits": [burst(1000, name="ip")]},
    }


def run(coro, timeout=20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def connect(port, path="/chat", key=None, tls=None):
    """websockets.connect(): awaited, or `async with`."""
    headers = {"Authorization": "Bearer " + key} if key else {}
    scheme = "wss" if tls else "ws"
    return websockets.connect("%s://127.0.0.1:%d%s" % (scheme, port, path), ssl=tls,
                                    extra_headers=headers, ping_interval=None, open_timeout=10, compression=None,
                                    close_timeout=2)


def handshake(path="/chat", drop=(), extra=(), method="GET", version="HTTP/1.1", body=b""):
    fields = [("Host", "127.0.0.1"), ("Authorization", "Bearer key-one"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
              ("Sec-WebSocket-Key", KEY), ("Sec-WebSocket-Version", "13")]
    fields = [f for f in fields if f[0] not in drop] + list(extra)
    head = "%s %s %s\r\n" % (method, path, version)
    head += "".join("%s: %s\r\n" % f for f in fields) + "\r\n"
    return head.encode() + body


def exchange(port, payload, timeout=5):
    """Sends `payload`, reads until the gateway closes or 0.5 s pass without a byte."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        s.settimeout(0.5)
        out = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out


def status(raw):
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None


def body_json(raw):
    return json.loads(raw.split(b"\r\n\r\n", 1)[1].decode())


class WebSocketTests(GatewayTestCase):

    def start_ws(self, mode="echo", token="websocket", **server):
        self.ws = WsUpstream(self, mode, token)
        cfg = config(**server)
        cfg["upstream"] = {"url": self.ws.url}
        self.gw = harness.Gateway(self, cfg)
        return self.gw

    def metric(self, name):
        return self.gw.metrics().get(name, 0)

    def closed(self):
        """tollgate_upgraded_closed_total by reason, those above 0."""
        m = self.gw.metrics()
        reasons = ["client", "upstream", "idle_timeout", "drain"]
        out = {r: m.get('tollgate_upgraded_closed_total{reason="%s"}' % r, 0) for r in reasons}
        return {r: v for r, v in out.items() if v}

    def test_echo_text_and_binary_both_ways(self):
        gw = self.start_ws()

        async def go():
            async with connect(gw.port, key="key-one") as ws:
                got = []
                for m in ["hello", b"\x00\x01\xffbinary", "x" * 100_000, bytes(range(256)) * 300]:
                    await ws.send(m)
                    got.append(await ws.recv())
                return got, ws.response_headers
        got, headers = run(go())
        self.assertEqual(got, ["hello", b"\x00\x01\xffbinary", "x" * 100_000,
                               bytes(range(256)) * 300])
        self.assertIn("RateLimit", headers)  # the 101 went through the limiter
        lines = [json.loads(x) for x in gw.access_log_lines(lambda j: j.get("status") == 101, 1)]
        self.assertEqual([(j["path"], j["key_id"]) for j in lines if j.get("status") == 101],
                         [("/chat", "k1")])
        # The close handshake ends with the upstream's TCP close (RFC 6455 7.1.1: the server
        # closes first).
        self.assertTrue(wait_until(lambda: self.closed() == {"upstream": 1}), self.closed())
        m = gw.metrics()
        self.assertEqual(m['tollgate_upgrades_total{result="switched"}'], 1)
        self.assertGreater(m['tollgate_upgraded_bytes_total{direction="to_upstream"}'], 176_800)
        self.assertGreater(m['tollgate_upgraded_bytes_total{direction="to_client"}'], 176_800)
        self.assertEqual(m["tollgate_upgraded_connections"], 0)

    def test_limits_and_cost_apply_before_any_upgrade(self):
        gw = self.start_ws()

        async def attempt(path):
            try:
                ws = await connect(gw.port, path)
            except websockets.InvalidStatusCode as e:
                return e.status_code
            await ws.close()
            return 101
        self.assertEqual([run(attempt("/limited")) for _ in range(3)], [101, 101, 429])
        self.assertEqual(self.ws.stats()["requests"], 2)  # the 429 never reached it
        self.assertEqual(self.metric('tollgate_upgrades_total{result="not_switched"}'), 1)
        # The route's cost: 5 of the anonymous bucket's 1000 per handshake (the 2 handshakes above took 2).
        raw = exchange(gw.port, handshake("/costly"))
        self.assertEqual(status(raw), 101, raw[:300])
        self.assertIn(b'"ip";r=993', raw)

    def test_per_identity_cap(self):
        gw = self.start_ws(max_upgraded_per_identity=2)

        async def go():
            a = await connect(gw.port, key="key-one")
            b = await connect(gw.port, key="key-one")
            with self.assertRaises(websockets.InvalidStatusCode) as refused:
                await connect(gw.port, key="key-one")
            other = await connect(gw.port, key="key-two")  # another identity has its own
            await a.close()
            for _ in range(50):  # the place comes back when the tunnel ends
                try:
                    c = await connect(gw.port, key="key-one")
                    break
                except websockets.InvalidStatusCode:
                    await asyncio.sleep(0.05)
            for ws in (b, other, c):
                await ws.send("still")
                self.assertEqual(await ws.recv(), "still")
                await ws.close()
            return refused.exception.status_code
        self.assertEqual(run(go()), 429)
        # The third, and any retry before the first tunnel had ended.
        self.assertGreaterEqual(self.metric('tollgate_upgrades_total{result="too_many"}'), 1)
        lines = [json.loads(x) for x in gw.access_log_lines(lambda j: j.get("status") == 429, 1)]
        self.assertGreaterEqual(len([j for j in lines if j.get("status") == 429]), 1)

    def test_process_cap_is_503(self):
        gw = self.start_ws(max_upgraded_connections=1)

        async def go():
            a = await connect(gw.port, key="key-one")
            try:
                await connect(gw.port, key="key-two")
            except websockets.InvalidStatusCode as e:
                return e.status_code
            finally:
                await a.close()
        self.assertEqual(run(go()), 503)
        raw = b""
        async def hold():
            a = await connect(gw.port, key="key-one")
            nonlocal raw
            raw = await asyncio.get_running_loop().run_in_executor(
                None, exchange, gw.port, handshake())
            await a.close()
        run(hold())
        self.assertEqual(status(raw), 503)
        self.assertEqual(body_json(raw)["code"], "upgrade_capacity")

    def test_idle_timeout_closes_a_quiet_tunnel(self):
        gw = self.start_ws(upgrade_idle_timeout_ms=400)

        async def go():
            ws = await connect(gw.port, key="key-one")
            for _ in range(4):  # traffic keeps it open past the timeout
                await asyncio.sleep(0.2)
                await ws.send("ping")
                self.assertEqual(await ws.recv(), "ping")
            start = time.monotonic()
            with self.assertRaises(websockets.ConnectionClosed):
                await ws.recv()
            return time.monotonic() - start
        quiet = run(go())
        self.assertLess(quiet, 3.0)
        self.assertTrue(wait_until(lambda: self.closed() == {"idle_timeout": 1}), self.closed())
        self.assertTrue(wait_until(lambda: self.ws.stats()["open"] == 0))

    def test_sigterm_drain_closes_tunnels(self):
        gw = self.start_ws(drain_timeout_ms=5000)

        async def go():
            ws = await connect(gw.port, key="key-one")
            await ws.send("before")
            self.assertEqual(await ws.recv(), "before")
            start = time.monotonic()
            gw.process.signal(signal.SIGTERM)
            with self.assertRaises(websockets.ConnectionClosed):
                await ws.recv()
            return time.monotonic() - start
        closed_after = run(go())
        # Closed at the end of the drain (nothing else in flight: at once), not after its timeout.
        self.assertLess(closed_after, 3.0)
        self.assertEqual(gw.process.wait(10), 0)

    def test_malformed_handshakes_are_refused(self):
        gw = self.start_ws()
        rows = [
            ("no key", handshake(drop=["Sec-WebSocket-Key"])),
            ("short key", handshake(drop=["Sec-WebSocket-Key"],
                                    extra=[("Sec-WebSocket-Key", "c2hvcnQ=")])),
            ("two keys", handshake(extra=[("Sec-WebSocket-Key", KEY)])),
            ("no version", handshake(drop=["Sec-WebSocket-Version"])),
            ("version 8", handshake(drop=["Sec-WebSocket-Version"],
                                    extra=[("Sec-WebSocket-Version", "8")])),
            ("no Connection: upgrade", handshake(drop=["Connection"])),
            ("Connection: keep-alive", handshake(drop=["Connection"],
                                                 extra=[("Connection", "keep-alive")])),
            ("POST with a body", handshake(method="POST", extra=[("Content-Length", "5")],
                                           body=b"hello")),
            ("PUT without a body", handshake(method="PUT")),
            ("chunked body", handshake(method="POST", extra=[("Transfer-Encoding", "chunked")],
                                       body=b"5\r\nhello\r\n0\r\n\r\n")),
            ("HTTP/1.0", handshake(version="HTTP/1.0")),
        ]
        for name, payload in rows:
            with self.subTest(row=name):
                raw = exchange(gw.port, payload)
                self.assertEqual(status(raw), 400, raw[:300])
                self.assertEqual(body_json(raw)["code"], "invalid_upgrade")
                self.assertIn(b"Sec-WebSocket-Version: 13", raw)
        self.assertEqual(self.ws.stats()["requests"], 0)
        self.assertEqual(self.metric('tollgate_upgrades_total{result="invalid"}'), len(rows))
        self.assertTrue(gw.healthy())

    def test_upstream_101_unasked_or_with_another_protocol(self):
        rows = [
            ("unasked", "websocket", b"GET /plain HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer key-one\r\n\r\n"),
            ("another protocol", "h2c", handshake()),
            ("upgrade of another name", "websocket2", handshake()),
        ]
        for name, token, payload in rows:
            with self.subTest(row=name):
                gw = self.start_ws(mode="switch", token=token)
                raw = exchange(gw.port, payload)
                self.assertEqual(status(raw), 502, raw[:300])
                self.assertEqual(body_json(raw)["code"], "upstream_invalid_upgrade")
                self.assertNotIn(b"UPSTREAM-SECRET", raw)
                self.assertNotIn(b"101", raw.split(b"\r\n", 1)[0])
                self.assertEqual(self.ws.stats()["requests"], 1)
                self.assertEqual(
                    self.metric('tollgate_upgrades_total{result="upstream_invalid"}'), 1)
                gw.process.stop()

    def test_h2c_is_refused_by_the_loader_and_ignored_in_a_request(self):
        path = os.path.join(self.tmpdir, "h2c.yaml")
        cfg = config(upgrades=["websocket", "h2c"])
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = subprocess.run([harness.BINARY, "check-config", path],
                           capture_output=True, text=True, timeout=20)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("server.upgrades[1]", r.stdout + r.stderr)
        self.assertIn("h2c", r.stdout + r.stderr)
        # A request asking for h2c is served as HTTP/1.1: its Upgrade never reaches the upstream.
        self.start(config())
        raw = exchange(self.gateway.port, b"GET /echo HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer key-one\r\nConnection: Upgrade, "
                       b"HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA"
                       b"\r\n\r\n")
        self.assertEqual(status(raw), 200, raw[:300])
        seen = {k.lower() for k in body_json(raw).get("headers", {})}
        self.assertNotIn("upgrade", seen)
        self.assertNotIn("http2-settings", seen)

    def test_websocket_over_a_tls_listener(self):
        certs = Certs(os.path.join(self.tmpdir, "certs"))
        cert, key = certs.leaf("localhost", ["localhost"], ips=["127.0.0.1"])
        self.ws = WsUpstream(self)
        cfg = config(tls={"certificates": [{"cert_file": cert, "key_file": key}]})
        cfg["upstream"] = {"url": self.ws.url}
        self.gw = harness.Gateway(self, cfg)
        ctx = ssl.create_default_context(cafile=certs.ca)

        async def go():
            async with connect(self.gw.port, key="key-one", tls=ctx) as ws:
                out = []
                for m in ["over tls", b"\x00" * 70_000]:
                    await ws.send(m)
                    out.append(await ws.recv())
                return out
        self.assertEqual(run(go()), ["over tls", b"\x00" * 70_000])
        self.assertTrue(wait_until(lambda: self.closed() == {"upstream": 1}), self.closed())

    def test_websocket_to_an_https_upstream_over_a_tls_listener(self):
        certs = Certs(os.path.join(self.tmpdir, "certs"))
        cert, key = certs.leaf("localhost", ["localhost"], ips=["127.0.0.1"])
        self.ws = WsUpstream(self, tls=(cert, key))
        cfg = config(tls={"certificates": [{"cert_file": cert, "key_file": key}]})
        cfg["upstream"] = {"url": "https://127.0.0.1:%d" % self.ws.port,
                           "tls": {"ca_file": certs.ca}}
        self.gw = harness.Gateway(self, cfg)
        ctx = ssl.create_default_context(cafile=certs.ca)

        async def go():
            async with connect(self.gw.port, key="key-one", tls=ctx) as ws:
                out = []
                for m in ["tls both sides", bytes(range(256)) * 400]:
                    await ws.send(m)
                    out.append(await ws.recv())
                return out
        self.assertEqual(run(go()), ["tls both sides", bytes(range(256)) * 400])
        self.assertTrue(wait_until(lambda: self.closed() == {"upstream": 1}), self.closed())


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
