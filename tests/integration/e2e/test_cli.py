#!/usr/bin/env python3
"""The command line of the real binary: --help and --version on stdout with exit 0, every
malformed command line refused with exit 2 and a reason on stderr, configuration errors exit 1.

    python3 test_cli.py --binary build/tollgate [unittest args]
"""
import os
import re
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


if __name__ == "__main__":
    harness.main("test_cli.py")
