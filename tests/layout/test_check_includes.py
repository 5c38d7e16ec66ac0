#!/usr/bin/env python3
"""Unit tests of check_includes.py: python3 tests/layout/test_check_includes.py"""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_includes  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

PAIRS = """
[rooms]
store/redis: include/tollgate/store/redis_store.hpp src/store/redis/
[pairs]
core ->             # the math
util -> core
policy -> core util
store -> core util  # the interface
engine -> core store policy
http -> core util store policy engine
rls -> core engine
app -> core util store store/redis policy engine http rls
[exceptions]
"""


class Rules(unittest.TestCase):
    def test_a_files_module_is_its_first_directory_or_its_room(self):
        rules = read(PAIRS)
        self.assertEqual(rules.node_of("src/store/memory.cpp"), "store")
        self.assertEqual(rules.node_of("src/store/redis/x.cpp"), "store/redis")
        self.assertEqual(rules.node_of("include/tollgate/store/redis_store.hpp"), "store/redis")
        self.assertEqual(rules.node_of("include/tollgate/store/store.hpp"), "store")
        self.assertEqual(rules.node_of("include/tollgate/tollgate.hpp"), "embed")
        self.assertIsNone(rules.node_of("tests/unit/x.cpp"))

    def test_a_room_may_what_its_module_may(self):
        rules = read(PAIRS.replace("[exceptions]", "store/redis -> policy\n[exceptions]"))
        self.assertEqual(rules.allowed("store"), {"core", "util"})
        self.assertEqual(rules.allowed("store/redis"), {"core", "util", "policy"})

    def test_unreadable_lists_are_refused(self):
        for text in ("[pairs]\nhttp -> nowhere\n", "[pairs]\ncore ->\ncore -> util\n",
                     "[rooms]\nx/y: src/x/y\n[pairs]\ncore ->\n", "[weird]\n",
                     "[pairs]\nno arrow\n"):
            with self.assertRaises(ValueError, msg=text):
                read(text)

    def test_the_real_pairs_follow_the_design(self):
        """DESIGN.md "Layers": the arrows the issue names, read from the real list."""
        rules = check_includes.read_rules(check_includes.DEFAULT_ALLOWLIST)
        self.assertEqual(rules.exceptions, [])
        self.assertEqual(rules.pairs["core"], [])
        for adapter in ("http", "rls", "embed", "replay"):  # adapters never include each other
            for other in ("http", "rls", "embed", "replay"):
                if other != adapter:
                    self.assertNotIn(other, rules.allowed(adapter))
        for room in ("store/memory", "store/redis", "store/leasing", "policy/postgres",
                     "usage/redis"):  # the concrete stores and the key source: built by app
            self.assertNotIn(room, rules.allowed("http"))
            self.assertNotIn(room, rules.allowed("rls"))
            self.assertIn(room, rules.allowed("app"))
        self.assertNotIn("policy", rules.allowed("store"))  # a linear order allowed this
        self.assertNotIn("store", rules.allowed("policy"))
        self.assertNotIn("policy", rules.allowed("usage"))
        self.assertNotIn("http", rules.allowed("contract"))


def read(text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        return check_includes.read_rules(f.name)
    finally:
        os.unlink(f.name)


class Check(unittest.TestCase):
    def run_check(self, files: dict, pairs: str = PAIRS, known: str = "") -> tuple[int, str]:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            allow = os.path.join(root, "allow.txt")
            with open(allow, "w") as f:
                f.write(pairs)
            known_path = os.path.join(root, "known.txt")
            with open(known_path, "w") as f:
                f.write(known)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = check_includes.main([root, "--allowlist", allow, "--known", known_path])
            return code, out.getvalue() + err.getvalue()

    def test_allowed_pairs_pass(self):
        code, out = self.run_check({
            "include/tollgate/core/a.hpp": "#pragma once\n",
            "include/tollgate/store/store.hpp": "#include <tollgate/core/a.hpp>\n",
            "include/tollgate/store/redis_store.hpp": "#include <tollgate/store/store.hpp>\n",
            "src/store/redis/c.cpp": '#include <tollgate/store/store.hpp>\n#include "d.hpp"\n'
                                     '#include "gen.grpc.pb.h"\n#include <vector>\n',
            "src/store/redis/d.hpp": "#include <tollgate/util/e.hpp>\n",
            "src/store/m.cpp": "#include <tollgate/store/redis_store.hpp>\n",  # its own module
            "src/http/g.cpp": "#include <tollgate/store/store.hpp>\n#include <tollgate/engine/x.hpp>\n",
            "src/app/main.cpp": "#include <tollgate/store/redis_store.hpp>\n#include <tollgate/http/g.hpp>\n",
        })
        self.assertEqual(code, 0, out)
        self.assertIn("0 violation(s), 0 known violation(s)", out)

    def test_pairs_not_listed_fail_though_a_linear_order_would_allow_them(self):
        files = {
            "src/store/s.cpp": "#include <tollgate/policy/policy.hpp>\n",  # below, not a pair
            "src/http/h.cpp": "// x\n#include <tollgate/store/redis_store.hpp>\n",  # a room
            "src/rls/r.cpp": "#include <tollgate/http/contract.hpp>\n",  # a sibling
            "src/util/u.cpp": '#include "../engine/e.hpp"\n',  # quoted, relative, upward
            "src/engine/e.hpp": "#pragma once\n",
            "include/tollgate/tollgate.hpp": "#include <tollgate/http/gateway.hpp>\n",
            "src/mystery/m.cpp": "\n",
        }
        code, out = self.run_check(files)
        self.assertEqual(code, 1)
        self.assertIn("src/store/s.cpp:1: module 'store' includes tollgate/policy/policy.hpp of "
                      "'policy': no pair 'store -> policy'", out)
        self.assertIn("src/http/h.cpp:2: module 'http' includes tollgate/store/redis_store.hpp "
                      "of 'store/redis': no pair 'http -> store/redis'", out)
        self.assertIn("src/rls/r.cpp:1: module 'rls' includes tollgate/http/contract.hpp of "
                      "'http'", out)
        self.assertIn("src/util/u.cpp:1: module 'util' includes ../engine/e.hpp", out)
        self.assertIn("include/tollgate/tollgate.hpp:1: module 'embed' has no line", out)
        self.assertIn("module 'mystery' has no line in the module pairs", out)
        self.assertIn("6 violation(s)", out)

    def test_known_violations_are_printed_and_counted_and_new_ones_still_fail(self):
        files = {
            "src/http/h.cpp": "#include <tollgate/store/redis_store.hpp>\n",
            "src/http/i.cpp": "#include <tollgate/store/redis_store.hpp>\n",
        }
        known = ("# why\nhttp-builds-stores: src/http/h.cpp -> tollgate/store/redis_store.hpp\n")
        code, out = self.run_check(files, known=known)
        self.assertEqual(code, 1)
        self.assertIn("[known violation 'http-builds-stores', to be removed by issue 32]", out)
        self.assertIn("src/http/i.cpp:1: module 'http'", out)
        self.assertIn("1 violation(s), 1 known violation(s)", out)

        code, out = self.run_check(files, known=known + "b: src/http/i.cpp->"
                                                        "tollgate/store/redis_store.hpp\n")
        self.assertEqual(code, 0, out)
        self.assertIn("0 violation(s), 2 known violation(s)", out)

    def test_a_listed_breach_that_no_longer_occurs_fails(self):
        code, out = self.run_check({"src/http/h.cpp": "\n"},
                                   known="gone: src/http/h.cpp -> tollgate/store/redis_store.hpp\n")
        self.assertEqual(code, 1)
        self.assertIn("'src/http/h.cpp -> tollgate/store/redis_store.hpp' no longer breaks a pair",
                      out)
        code, out = self.run_check({"src/http/h.cpp": "\n"},
                                   pairs=PAIRS + "src/http/h.cpp -> tollgate/rls/x.hpp  # why\n")
        self.assertEqual(code, 1)
        self.assertIn("'src/http/h.cpp -> tollgate/rls/x.hpp' no longer breaks a pair", out)

    def test_exceptions_pass_as_warnings(self):
        code, out = self.run_check({"src/rls/r.cpp": "#include <tollgate/http/x.hpp>\n"},
                                   pairs=PAIRS + "src/rls/r.cpp -> tollgate/http/x.hpp  # why\n")
        self.assertEqual(code, 0, out)
        self.assertIn("[warning: an exception]", out)

    def test_the_architecture_page_must_hold_the_table_the_pairs_give(self):
        table = check_includes.table(read(PAIRS))
        self.assertIn("| `http` | `core`, `util`, `store`, `policy`, `engine` |  |", table)
        self.assertIn("| `core` | nothing of tollgate | the math |", table)
        self.assertIn("| `store/redis` | `include/tollgate/store/redis_store.hpp`, "
                      "`src/store/redis/*` | `app` |", table)
        page = "# Architecture\n\n" + table + "\nMore.\n"
        code, out = self.run_check({"docs/architecture.md": page})
        self.assertEqual(code, 0, out)
        for changed in (page.replace("| `rls` | `core`, `engine` |", "| `rls` | `core` |"),
                        page.replace(check_includes.TABLE_BEGIN, ""), "# Architecture\n"):
            code, out = self.run_check({"docs/architecture.md": changed})
            self.assertEqual(code, 1)
            self.assertIn("docs/architecture.md: its table of module pairs is not the one", out)

    def test_the_real_page_holds_the_real_table(self):
        rules = check_includes.read_rules(check_includes.DEFAULT_ALLOWLIST)
        self.assertEqual(check_includes.doc_table(ROOT), check_includes.table(rules),
                         "run: python3 tests/layout/check_includes.py --table")


if __name__ == "__main__":
    unittest.main()
