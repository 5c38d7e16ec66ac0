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


class Modules(unittest.TestCase):
    def test_a_files_module_is_its_first_directory(self):
        self.assertEqual(check_includes.module_of("src/store/redis/x.cpp"), "store")
        self.assertEqual(check_includes.module_of("src/policy/postgres/keys.cpp"), "policy")
        self.assertEqual(check_includes.module_of("include/tollgate/core/limit.hpp"), "core")
        self.assertEqual(check_includes.module_of("include/tollgate/tollgate.hpp"), "embed")
        self.assertIsNone(check_includes.module_of("tests/unit/x.cpp"))

    def test_siblings_share_a_layer_and_net_sits_above_util(self):
        level = check_includes.LEVEL
        self.assertEqual(level["http"], level["rls"])
        self.assertEqual(level["http"], level["embed"])
        self.assertEqual(level["net"], level["util"] + 1)
        self.assertLess(level["net"], level["store"])


class Check(unittest.TestCase):
    def run_check(self, files: dict, allowlist: str = "") -> tuple[int, str]:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            allow = os.path.join(root, "allow.txt")
            with open(allow, "w") as f:
                f.write(allowlist)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = check_includes.main([root, "--allowlist", allow])
            return code, out.getvalue()

    def test_downward_includes_pass(self):
        code, out = self.run_check({
            "include/tollgate/core/a.hpp": "#pragma once\n",
            "include/tollgate/store/b.hpp": "#include <tollgate/core/a.hpp>\n",
            "src/store/redis/c.cpp": '#include <tollgate/store/b.hpp>\n#include "d.hpp"\n'
                                     '#include "gen.grpc.pb.h"\n#include <vector>\n',
            "src/store/redis/d.hpp": "#include <tollgate/net/e.hpp>\n",
            "src/app/main.cpp": "#include <tollgate/tollgate.hpp>\n#include <tollgate/http/g.hpp>\n",
        })
        self.assertEqual(code, 0, out)

    def test_upward_sibling_and_relative_includes_fail(self):
        files = {
            "src/store/s.cpp": "#include <tollgate/engine/engine.hpp>\n",
            "src/rls/r.cpp": "// x\n#include <tollgate/http/contract.hpp>\n",
            "src/util/u.cpp": '#include "../config/loader.hpp"\n',
            "src/config/loader.hpp": "#pragma once\n",
            "include/tollgate/tollgate.hpp": "#include <tollgate/http/gateway.hpp>\n",
            "src/mystery/m.cpp": "\n",
        }
        code, out = self.run_check(files)
        self.assertEqual(code, 1)
        self.assertIn("src/store/s.cpp:1: module 'store' includes tollgate/engine/engine.hpp of "
                      "module 'engine', a layer above it", out)
        self.assertIn("src/rls/r.cpp:2: module 'rls' includes tollgate/http/contract.hpp of its "
                      "sibling 'http'", out)
        self.assertIn("src/util/u.cpp:1: module 'util' includes ../config/loader.hpp", out)
        self.assertIn("include/tollgate/tollgate.hpp:1: module 'embed' includes", out)
        self.assertIn("module 'mystery' is not in the layer table", out)

        code, out = self.run_check(files, "src/store/s.cpp -> tollgate/engine/engine.hpp  # why\n"
                                          "src/rls/r.cpp->tollgate/http/contract.hpp\n"
                                          "src/util/u.cpp -> ../config/loader.hpp\n"
                                          "include/tollgate/tollgate.hpp -> tollgate/http/gateway.hpp\n"
                                          "src/mystery/m.cpp -> (module)\n"
                                          "src/gone.cpp -> tollgate/app/x.hpp\n")
        self.assertEqual(code, 0, out)
        self.assertIn("[warning: allowlisted]", out)
        self.assertIn("'src/gone.cpp -> tollgate/app/x.hpp' no longer occurs", out)


if __name__ == "__main__":
    unittest.main()
