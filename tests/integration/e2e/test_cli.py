#!/usr/bin/env python3
"""The command line of the real binary: --help and --version on stdout with exit 0, every
malformed command line refused with exit 2 and a reason on stderr, configuration errors exit 1;
configuration that cannot mean what it says refused with its field's path and line, files that
are not regular files refused at once (never a hang), keys of unknown plans warned about.

    python3 test_cli.py --binary build/tollgate [unittest args]
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
EXAMPLE = os.path.join(REPO, "examples", "tollgate.yaml")


def run(*args):
    return subprocess.run([harness.BINARY] + list(args), capture_output=True, timeout=30)


class CliTests(unittest.TestCase):
    def test_help_and_version_print_to_stdout_and_exit_0(self):
        cases = [
            (("--help",), [b"Subcommands:", b"serve", b"check-config", b"usage", b"Exit codes"]),
            (("-h",), [b"Subcommands:"]),
            (("serve", "--help"), [b"tollgate serve [OPTIONS]", b"--config"]),
            (("check-config", "-h"), [b"tollgate check-config", b"file"]),
            (("usage", "--help"), [b"--period", b"--account", b"--format"]),
        ]
        for args, wanted in cases:
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 0, r)
                self.assertEqual(r.stderr, b"", r)
                for w in wanted:
                    self.assertIn(w, r.stdout)
        for flag in ("--version", "-V"):
            r = run(flag)
            self.assertEqual(r.returncode, 0, r)
            self.assertRegex(r.stdout.decode(),
                             r"^tollgate \d+\.\d+\.\d+ \(git [0-9A-Za-z.\-]+\)\n$")

    def test_malformed_command_lines_exit_2_saying_why(self):
        cases = [
            ((), b"A subcommand is required"),
            (("launch",), b"launch"),
            (("--bogus",), b"--bogus"),
            (("serve",), b"--config is required"),
            (("serve", "--config"), b"--config"),
            (("serve", "--config", EXAMPLE, "--extra"), b"--extra"),
            (("serve", "--config", EXAMPLE, "stray"), b"stray"),
            (("check-config",), b"file is required"),
            (("check-config", EXAMPLE, "second.yaml"), b"second.yaml"),
            (("usage", "--config", EXAMPLE), b"--period is required"),
            (("usage", "--config", EXAMPLE, "--period", "2026-11", "--account"), b"--account"),
            (("usage", "--config", EXAMPLE, "--period", "2026-11", "--format", "xml"), b"xml"),
            (("serve", "check-config", EXAMPLE), b""),
        ]
        for args, reason in cases:
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r)
                self.assertEqual(r.stdout, b"", r)
                self.assertIn(reason, r.stderr)
                self.assertIn(b"--help", r.stderr)

    def test_configuration_errors_exit_1(self):
        self.assertEqual(run("check-config", EXAMPLE).returncode, 0)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("plans: {free: {limits: [{name: b, capacity: -1, refill_per_second: 1}]}}\n")
            f.flush()
            for args in (("check-config", f.name), ("serve", "--config", f.name)):
                with self.subTest(args=args):
                    r = run(*args)
                    self.assertEqual(r.returncode, 1, r)
                    self.assertIn(b"capacity", r.stderr)
        r = run("check-config", "/nonexistent/tollgate.yaml")
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"cannot read", r.stderr)


PLAN = "plans:\n  free:\n    limits:\n      - {name: b, capacity: 5, refill_per_second: 1}\n"


class ConfigRefusalTests(unittest.TestCase):
    """Issue 31, through the real binary: check-config and serve refuse each form, naming the
    field's path and line, within a bounded time (a FIFO or a device as a file hung them)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tollgate-cli-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(self.fifo)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def check(self, *args):
        # Bounded: a hang is a failure (subprocess.run kills the process on timeout).
        try:
            return subprocess.run([harness.BINARY] + list(args), capture_output=True, timeout=10,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.fail("%s hung (killed after 10 s)" % (args,))

    def test_refused_with_the_fields_path_and_line(self):
        cases = [
            ("a second mode", "mode: enforce\n" + PLAN + "mode: shadow\n",
             "line 6: mode: given twice (first at line 1)"),
            ("a plan's mode twice",
             "plans:\n  free:\n    mode: enforce\n    limits: [{name: b, capacity: 5, "
             "refill_per_second: 1}]\n    mode: shadow\n",
             "line 5: plans.free.mode: given twice (first at line 3)"),
            ("a limit field twice",
             "plans: {free: {limits: [{name: b, capacity: 5, capacity: 500, "
             "refill_per_second: 1}]}}\n",
             "line 1: plans.free.limits[0].capacity: given twice"),
            ("limits: []", "plans:\n  free:\n    limits: []\n",
             "line 3: plans.free.limits: must hold 1 to 8 limits; for a plan without limits, "
             "write unlimited: true"),
            ("method: post", PLAN + "routes:\n  - {path: /login, method: post}\n",
             "line 6: routes[0].method: 'post' would never match"),
            ("method: [GET, patch]", PLAN + "routes:\n  - {path: /x, method: [GET, patch]}\n",
             "line 6: routes[0].method[1]: 'patch' would never match"),
            ("listen :99999", "server:\n  listen: 127.0.0.1:99999\n" + PLAN,
             "line 2: server.listen: the port must be a number from 1 to 65535"),
            ("admin_listen :65536", "server: {admin_listen: '127.0.0.1:65536'}\n" + PLAN,
             "line 1: server.admin_listen: the port must be a number from 1 to 65535"),
            ("decision.listen :-80", PLAN + "decision: {listen: '127.0.0.1:-80'}\n",
             "line 5: decision.listen: the port must be a number"),
            ("${ in a route path", PLAN + "routes:\n  - {path: '/${TENANT}/x'}\n",
             "line 6: routes[0].path: '${' is not expanded in this field"),
            ("an unset variable", "upstream: {url: '${TOLLGATE_CLI_NO_SUCH}'}\n" + PLAN,
             "line 1: upstream.url: the environment variable TOLLGATE_CLI_NO_SUCH is not set"),
            ("keys_file a FIFO", PLAN + "keys_file: " + self.fifo + "\n",
             "line 5: keys_file: cannot read '%s': is a FIFO" % self.fifo),
            ("keys_file /dev/zero", PLAN + "keys_file: /dev/zero\n",
             "line 5: keys_file: cannot read '/dev/zero': is a device"),
            ("keys_file /dev/stdin", PLAN + "keys_file: /dev/stdin\n",
             "line 5: keys_file: cannot read '/dev/stdin': is a device"),
            ("keys_file a directory", PLAN + "keys_file: " + self.dir + "\n",
             "line 5: keys_file: cannot read '%s': is a directory" % self.dir),
            ("store.url file: a FIFO",
             "store:\n  type: redis\n  url: file:" + self.fifo + "\n" + PLAN,
             "line 3: store.url: cannot read the file of 'file:%s': is a FIFO" % self.fifo),
            ("store.tls.ca_file a FIFO",
             "store:\n  type: redis\n  url: rediss://127.0.0.1:6380\n  tls: {ca_file: %s}\n"
             % self.fifo + PLAN,
             "line 4: store.tls.ca_file: cannot read '%s': is a FIFO" % self.fifo),
            ("keys.url file: a FIFO",
             PLAN + "keys: {source: postgres, url: 'file:%s'}\n" % self.fifo,
             "line 5: keys.url: cannot read the file of 'file:%s': is a FIFO" % self.fifo),
        ]
        for why, text, error in cases:
            path = self.write("bad.yaml", text)
            for args in (("check-config", path), ("serve", "--config", path)):
                with self.subTest(why=why, args=args[0]):
                    r = self.check(*args)
                    self.assertEqual(r.returncode, 1, r)
                    self.assertIn(("%s: %s" % (path, error)).encode(), r.stderr)

    def test_the_config_file_itself_a_fifo_or_device(self):
        for path, what in ((self.fifo, "is a FIFO"), ("/dev/zero", "is a device"),
                           (self.dir, "is a directory")):
            with self.subTest(path=path):
                r = self.check("check-config", path)
                self.assertEqual(r.returncode, 1, r)
                self.assertIn(b"cannot read config file", r.stderr)
                self.assertIn(what.encode(), r.stderr)

    def test_descriptor_files_a_fifo(self):
        envoy = os.path.join(self.dir, "ratelimit")
        os.mkdir(envoy)
        os.mkfifo(os.path.join(envoy, "a.yaml"))
        path = self.write("rls.yaml", "rls:\n  listen: 127.0.0.1:0\n  envoy_config: ratelimit\n")
        r = self.check("check-config", path)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"a.yaml: cannot read: is a FIFO", r.stderr)

    def test_what_may_hold_env_and_unlimited_plans_pass(self):
        keys = self.write("keys.yaml", "- {key: '${TOLLGATE_CLI_KEY}', id: one, plan: free}\n")
        path = self.write("good.yaml", PLAN + (
            "  internal:\n    unlimited: true\n"
            "server: {listen: '${TOLLGATE_CLI_LISTEN}', admin_listen: '[::1]:0'}\n"
            "upstream: {url: 'http://${TOLLGATE_CLI_UPSTREAM}'}\n"
            "keys_file: ${TOLLGATE_CLI_DIR}/keys.yaml\n"
            "routes:\n  - {path: /login, method: [POST, PURGE]}\n"))
        env = dict(os.environ, TOLLGATE_CLI_KEY="sk-1", TOLLGATE_CLI_LISTEN="127.0.0.1:65535",
                   TOLLGATE_CLI_UPSTREAM="127.0.0.1:1", TOLLGATE_CLI_DIR=self.dir)
        r = subprocess.run([harness.BINARY, "check-config", path], capture_output=True,
                           timeout=10, env=env)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b"keys: 1", r.stdout)
        self.assertTrue(os.path.exists(keys))

    def test_keys_of_unknown_plans_are_warned_about(self):
        path = self.write("unknown.yaml", PLAN + (
            "keys:\n"
            "  - {key: k1, id: one, plan: free}\n"
            "  - {key: k2, id: two, plan: pro}\n"
            "  - {key: k3, id: three, plan: pro}\n"
            "  - {key: k4, id: four, plan: teams}\n"))
        r = self.check("check-config", path)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b"warning: key 'two' and 1 more name the plan 'pro', which does not exist: "
                      b"they get the strictest plan", r.stdout)
        self.assertIn(b"warning: key 'four' names the plan 'teams', which does not exist: it "
                      b"gets the strictest plan", r.stdout)
        clean = self.write("clean.yaml", PLAN + "keys:\n  - {key: k1, id: one, plan: free}\n")
        r = self.check("check-config", clean)
        self.assertEqual(r.returncode, 0, r)
        self.assertNotIn(b"warning", r.stdout)


class UnknownPlanServeTests(harness.GatewayTestCase):
    """The serving side of the same warning: a log line at load and a gauge, reload included."""

    def test_the_gateway_counts_and_logs_keys_of_unknown_plans(self):
        plans = {"free": {"limits": [harness.burst(5)]}}
        keys = [{"key": "sk-one-0123456789", "id": "one", "plan": "free"},
                {"key": "sk-two-0123456789", "id": "two", "plan": "pro"}]
        gw = self.start({"plans": plans, "keys": keys})
        self.assertEqual(gw.metrics().get("tollgate_keys_unknown_plan"), 1)
        self.assertTrue(harness.wait_until(
            lambda: b'"keys name a plan that does not exist' in gw.process.read_stderr()))
        self.assertIn(b'"first_key_id":"two","plan":"pro"', gw.process.read_stderr())
        # The key still gets the strictest plan: limited, not unlimited.
        statuses = [gw.get("/echo", key="sk-two-0123456789").status for _ in range(7)]
        self.assertEqual(statuses, [200] * 5 + [429] * 2)
        keys.append({"key": "sk-three-0123456789", "id": "three", "plan": "gold"})
        gw.rewrite({"plans": plans, "keys": keys})
        os.kill(gw.pid, signal.SIGHUP)
        self.assertTrue(harness.wait_until(
            lambda: gw.metrics().get("tollgate_keys_unknown_plan") == 2))
        keys[1:] = []
        gw.rewrite({"plans": plans, "keys": keys})
        os.kill(gw.pid, signal.SIGHUP)
        self.assertTrue(harness.wait_until(
            lambda: gw.metrics().get("tollgate_keys_unknown_plan") == 0))


if __name__ == "__main__":
    harness.main("test_cli.py")
