#!/usr/bin/env python3
"""Integration tests of tollgate's connection budgets (issue 18, "Availability"): the real
binary, real sockets, everything on 127.0.0.1.

    python3 test_connections.py --binary build/tollgate [unittest args]

- one client address cannot take every connection (server.max_connections_per_address);
- the admin listener has its own budget: a full gateway never locks the operator out;
- max_connections derives from the file limit (the soft limit raised to the hard one);
- an accept that fails for want of descriptors backs off instead of spinning a core.

Every process is started by the test and stopped by PID; every wait is bounded.
"""
import os
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import Gateway, GatewayTestCase, burst, deadline_loop, http_request  # noqa: E402

PRLIMIT = "/usr/bin/prlimit"


def config(**server):
    return {
        "server": dict({"threads": 1}, **server),
        "plans": {"free": {"limits": [burst(1000)]}},
        "keys": [{"key": "k-1", "id": "k1", "plan": "free"}],
        "routes": [{"path": "/public/*", "identity": "ip"}],
        "anonymous": {"limits": [burst(1000, name="ip")]},
    }


def open_idle(port, n):
    """n connections that send nothing; each checked accepted and still open."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks.append(s)
    return socks


def closed_by_server(sock, timeout=2.0):
    """Whether the server closed `sock` (EOF or reset) within `timeout`."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def admin_metrics(gw):
    r = http_request(gw.admin_port, "GET", "/metrics")
    assert r.status == 200, r
    return harness.parse_metrics(r.body.decode())


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ConnectionBudgetTests(GatewayTestCase):
    def test_one_address_cannot_take_every_connection(self):
        gw = self.start(config(max_connections_per_address=3, idle_timeout_ms=30000))
        socks = open_idle(gw.port, 3)
        self.addCleanup(lambda: [s.close() for s in socks])
        extra = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        self.addCleanup(extra.close)
        self.assertTrue(closed_by_server(extra), "a 4th connection from one address was kept")
        # Those three still work; and when one closes, its place is free again.
        socks[0].sendall(b"GET /public/x HTTP/1.1\r\nHost: a\r\n\r\n")
        self.assertTrue(socks[0].recv(100).startswith(b"HTTP/1.1 200"))
        socks.pop(0).close()
        for _ in deadline_loop(5):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
            s.sendall(b"GET /public/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            s.settimeout(5)
            try:
                data = s.recv(100)
            except ConnectionResetError:
                data = b""
            s.close()
            if data.startswith(b"HTTP/1.1 200"):
                break
        else:
            self.fail("the place of a closed connection was not freed")
        m = admin_metrics(gw)  # the gateway's port is this address's to fill
        self.assertGreaterEqual(
            m.get('tollgate_connections_refused_total{listener="gateway",reason="per_address"}', 0), 1, m)

    def test_trusted_proxies_are_exempt_from_the_address_cap(self):
        cfg = config(max_connections_per_address=2)
        cfg["identity"] = {"trusted_proxies": ["127.0.0.1/32"]}
        gw = self.start(cfg)
        socks = open_idle(gw.port, 5)
        self.addCleanup(lambda: [s.close() for s in socks])
        for s in socks:
            s.sendall(b"GET /public/x HTTP/1.1\r\nHost: a\r\n\r\n")
            s.settimeout(5)
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 200"))

    def test_a_full_gateway_leaves_the_admin_listener_its_own_budget(self):
        gw = self.start(config(max_connections=4, max_connections_per_address=0, admin_max_connections=2))
        socks = open_idle(gw.port, 4)
        self.addCleanup(lambda: [s.close() for s in socks])
        extra = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        self.addCleanup(extra.close)
        self.assertTrue(closed_by_server(extra), "a 5th connection was kept past max_connections")
        m = admin_metrics(gw)
        self.assertEqual(m.get("tollgate_max_connections"), 4, m)
        self.assertGreaterEqual(
            m.get('tollgate_connections_refused_total{listener="gateway",reason="max_connections"}', 0), 1, m)
        # The admin budget is its own, and bounded too.
        admin = open_idle(gw.admin_port, 2)
        self.addCleanup(lambda: [s.close() for s in admin])
        third = socket.create_connection(("127.0.0.1", gw.admin_port), timeout=5)
        self.addCleanup(third.close)
        self.assertTrue(closed_by_server(third), "a 3rd admin connection was kept")


@unittest.skipUnless(os.path.exists(PRLIMIT), "prlimit (util-linux) is needed")
class FileLimitTests(GatewayTestCase):
    def start_limited(self, cfg, soft, hard):
        self.upstream = harness.Upstream(self)
        cfg = dict(cfg, upstream={"url": self.upstream.url, "max_connections": 8})
        self.gateway = Gateway(self, cfg, wrapper=[PRLIMIT, "--nofile=%d:%d" % (soft, hard), "--"])
        return self.gateway

    def test_max_connections_follows_the_file_limit_raised_to_the_hard_one(self):
        gw = self.start_limited(config(), soft=256, hard=2048)
        limit = gw.metrics()["tollgate_max_connections"]
        # The soft limit (256) was raised: more than it, less than the hard limit, which also
        # holds the upstream pool, the admin budget and spare descriptors.
        self.assertGreater(limit, 256)
        self.assertLess(limit, 2048 - 8 - 64)

    def test_a_configured_max_connections_above_the_limit_is_lowered_with_a_warning(self):
        gw = self.start_limited(config(max_connections=100000), soft=512, hard=512)
        self.assertLess(gw.metrics()["tollgate_max_connections"], 512)
        self.assertIn(b"server.max_connections lowered", gw.process.read_stderr())

    def test_accept_without_descriptors_backs_off(self):
        # Issue 18: accept failing with EMFILE was retried at once (190 % CPU, new clients
        # timed out). The file limit is lowered under the running process, then clients keep
        # arriving: accepts fail, and must be retried at the back-off pace, not in a loop.
        gw = self.start_limited(config(max_connections_per_address=0), soft=4096, hard=4096)
        held = open_idle(gw.port, 40)
        self.addCleanup(lambda: [s.close() for s in held])
        subprocess.run([PRLIMIT, "--pid", str(gw.pid), "--nofile=32:4096"], check=True)
        pending = []
        self.addCleanup(lambda: [s.close() for s in pending])
        for _ in range(20):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", gw.port))  # completes in the kernel's backlog
            pending.append(s)
        time.sleep(0.3)  # pacing: the gateway runs out of descriptors and starts backing off
        cpu0, t0 = cpu_seconds(gw.pid), time.monotonic()
        time.sleep(1.0)  # the interval its CPU use is measured over
        cpu = (cpu_seconds(gw.pid) - cpu0) / (time.monotonic() - t0)
        self.assertLess(cpu, 0.5)
        # Descriptors back: the waiting clients are served, and the failures were counted at
        # the back-off pace (50 ms between tries: ~30 in these 1.3 s, not hundreds of thousands).
        subprocess.run([PRLIMIT, "--pid", str(gw.pid), "--nofile=4096:4096"], check=True)
        for s in held:
            s.close()
        held.clear()
        ok = False
        for _ in deadline_loop(5):
            try:
                if http_request(gw.port, "GET", "/healthz", timeout=2).status == 200:
                    ok = True
                    break
            except OSError:
                pass
        self.assertTrue(ok, "no connection accepted after descriptors came back")
        errors = gw.metrics()["tollgate_accept_errors_total"]
        self.assertGreater(errors, 0)
        self.assertLess(errors, 150)


def main():
    harness.main(os.path.basename(__file__))


if __name__ == "__main__":
    main()
