#!/usr/bin/env python3
"""The .deb of `make package`, unpacked into a temporary root and used from there: the packaged
binary's --version, check-config on the packaged example, the files at their FHS places, the
control fields (Depends on the runtime libraries, the conffile, the maintainer scripts), the
systemd unit through `systemd-analyze verify`, and `serve` under the W^X rule of the unit's
MemoryDenyWriteExecute=.

    python3 tests/packaging/test_deb.py --build-dir build [unittest args, e.g. -v]

Builds the package first (cpack in the build folder, bounded in time) when there is none or
when the binary, the packaging files or CMakeLists.txt are newer than it. The build folder must
hold a built tollgate (`cmake --build build`). Needs dpkg-deb, dpkg-shlibdeps (dpkg-dev), file,
systemd-analyze (systemd) and man (man-db): scripts/install-deps.sh installs them.
Python 3 standard library only; every process started here is stopped by PID, every wait is
bounded.
"""
import argparse
import ctypes
import ctypes.util
import glob
import gzip
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))  # then the build's own source folder

CPACK_TIMEOUT_S = 240
RUN_TIMEOUT_S = 30
START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 20

BUILD_DIR = ""  # from --build-dir
DEB = ""  # the package under test, set by setUpModule
ROOT = ""  # where it is unpacked
VERSION = ""  # the project's version, from the build's CPackConfig.cmake
_TMP = None


def _newest_input_mtime():
    paths = [os.path.join(BUILD_DIR, "tollgate"), os.path.join(REPO, "CMakeLists.txt"),
             os.path.join(BUILD_DIR, "packaging", "tollgate.1.gz")]
    paths += glob.glob(os.path.join(REPO, "packaging", "**", "*"), recursive=True)
    paths += glob.glob(os.path.join(REPO, "migrations", "*.sql"))
    paths += glob.glob(os.path.join(REPO, "docs", "*.md"))
    paths += [os.path.join(REPO, "examples", "tollgate.yaml"), os.path.join(REPO, "README.md")]
    return max(os.path.getmtime(p) for p in paths if os.path.isfile(p))


def _cpack_value(name):
    with open(os.path.join(BUILD_DIR, "CPackConfig.cmake"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'^set\(%s "([^"]*)"\)' % re.escape(name), text, re.M)
    if not m:
        raise RuntimeError("%s not in CPackConfig.cmake" % name)
    return m.group(1)


def _find_deb():
    debs = glob.glob(os.path.join(BUILD_DIR, "packages", "tollgate_%s-*.deb" % VERSION))
    return max(debs, key=os.path.getmtime) if debs else ""


def _source_dir():
    """The source folder the build was configured from (CMakeCache.txt), else this checkout."""
    try:
        with open(os.path.join(BUILD_DIR, "CMakeCache.txt"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return REPO
    m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", text, re.M)
    return m.group(1) if m and os.path.isdir(m.group(1)) else REPO


def setUpModule():
    global DEB, ROOT, VERSION, REPO, _TMP
    binary = os.path.join(BUILD_DIR, "tollgate")
    if not os.access(binary, os.X_OK):
        raise RuntimeError("%s: no tollgate binary; build first (cmake --build)" % BUILD_DIR)
    REPO = _source_dir()
    VERSION = _cpack_value("CPACK_PACKAGE_VERSION")
    DEB = _find_deb()
    if not DEB or os.path.getmtime(DEB) < _newest_input_mtime():
        r = subprocess.run(["cpack", "-G", "DEB", "--config",
                            os.path.join(BUILD_DIR, "CPackConfig.cmake")],
                           cwd=BUILD_DIR, capture_output=True, text=True,
                           timeout=CPACK_TIMEOUT_S)
        if r.returncode != 0:
            raise RuntimeError("cpack failed (%d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
        DEB = _find_deb()
        if not DEB:
            raise RuntimeError("cpack made no tollgate_%s-*.deb:\n%s" % (VERSION, r.stdout))
    _TMP = tempfile.mkdtemp(prefix="tollgate-deb-")
    ROOT = os.path.join(_TMP, "root")
    subprocess.run(["dpkg-deb", "-x", DEB, ROOT], check=True, timeout=RUN_TIMEOUT_S)


def tearDownModule():
    if _TMP:
        shutil.rmtree(_TMP, ignore_errors=True)


def in_root(path):
    return os.path.join(ROOT, path.lstrip("/"))


def packaged_binary():
    return in_root("/usr/bin/tollgate")


def run(args, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", RUN_TIMEOUT_S)
    return subprocess.run(args, **kwargs)


def needed_libraries(path):
    out = run(["readelf", "-dW", path], check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def control_field(name):
    return run(["dpkg-deb", "-f", DEB, name], check=True).stdout.strip()


def depends_packages():
    """The package names of Depends, without versions or alternatives' bars."""
    names = set()
    for clause in control_field("Depends").split(","):
        for alt in clause.split("|"):
            if alt.strip():
                names.add(alt.strip().split()[0].split(":")[0])
    return names


def owning_package(soname):
    """The installed Debian package holding the library the dynamic linker finds for soname."""
    out = run(["ldconfig", "-p"], check=True).stdout
    m = re.search(r"^\s*%s \([^)]*x86-64[^)]*\) => (\S+)" % re.escape(soname), out, re.M) or \
        re.search(r"^\s*%s \([^)]*\) => (\S+)" % re.escape(soname), out, re.M)
    if not m:
        return None
    for candidate in (m.group(1), os.path.realpath(m.group(1))):
        for path in (candidate, re.sub(r"^/usr/lib/", "/lib/", candidate),
                     re.sub(r"^/lib/", "/usr/lib/", candidate)):
            r = run(["dpkg-query", "-S", path])
            if r.returncode == 0:
                return r.stdout.split(":")[0].strip()
    return None


class LayoutTests(unittest.TestCase):
    def test_files_are_at_their_fhs_places(self):
        self.assertTrue(os.access(packaged_binary(), os.X_OK))
        for path in ["/etc/tollgate/tollgate.yaml",
                     "/usr/share/man/man1/tollgate.1.gz",
                     "/usr/lib/systemd/system/tollgate.service",
                     "/usr/share/doc/tollgate/README.md"]:
            with self.subTest(path=path):
                self.assertTrue(os.path.isfile(in_root(path)), path)
        # Nothing else under /etc but the configuration; nothing under /usr/local.
        etc = [os.path.relpath(os.path.join(d, f), ROOT)
               for d, _, fs in os.walk(in_root("/etc")) for f in fs]
        self.assertEqual(etc, ["etc/tollgate/tollgate.yaml"])
        self.assertFalse(os.path.exists(in_root("/usr/local")))

    def test_example_migrations_and_docs_are_the_sources(self):
        pairs = [("examples/tollgate.yaml", "/etc/tollgate/tollgate.yaml"),
                 ("README.md", "/usr/share/doc/tollgate/README.md")]
        migrations = sorted(glob.glob(os.path.join(REPO, "migrations", "*.sql")))
        self.assertTrue(migrations)
        pairs += [(os.path.relpath(m, REPO),
                   "/usr/share/tollgate/migrations/" + os.path.basename(m)) for m in migrations]
        docs = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        self.assertTrue(docs)
        pairs += [(os.path.relpath(d, REPO), "/usr/share/doc/tollgate/" + os.path.basename(d))
                  for d in docs]
        for src, dst in pairs:
            with self.subTest(src=src):
                with open(os.path.join(REPO, src), "rb") as a, open(in_root(dst), "rb") as b:
                    self.assertEqual(a.read(), b.read(), "%s differs from %s" % (dst, src))

    def test_man_page_documents_the_subcommands(self):
        with gzip.open(in_root("/usr/share/man/man1/tollgate.1.gz"), "rt") as f:
            page = f.read()
        self.assertRegex(page, r'(?m)^\.TH TOLLGATE "1" ".*" "tollgate %s"' % re.escape(VERSION))
        for text in ["tollgate serve", "tollgate check\\-config", "tollgate usage",
                     "\\-\\-config", "\\-\\-period", "/etc/tollgate/tollgate.yaml"]:
            self.assertIn(text, page)
        man = shutil.which("man")
        if man:
            r = run([man, "-l", in_root("/usr/share/man/man1/tollgate.1.gz")],
                    env=dict(os.environ, MANWIDTH="100"))
            self.assertEqual(r.returncode, 0, r.stderr)
            text = re.sub(".\b", "", r.stdout)  # overstrike bold and underline
            for section in ["SYNOPSIS", "OPTIONS", "SUBCOMMANDS", "FILES", "SIGNALS"]:
                self.assertRegex(text, r"(?m)^%s$" % section)
            self.assertNotIn("warning", r.stderr)

    def test_binary_is_stripped_and_its_symbols_are_in_the_dbgsym_package(self):
        out = run(["file", "-b", packaged_binary()], check=True).stdout
        self.assertIn("stripped", out)
        self.assertNotIn("not stripped", out)
        ddebs = glob.glob(os.path.join(os.path.dirname(DEB),
                                       "tollgate-dbgsym_%s-*.ddeb" % VERSION))
        self.assertTrue(ddebs, "no tollgate-dbgsym .ddeb beside %s" % DEB)


class BinaryTests(unittest.TestCase):
    def test_version(self):
        r = run([packaged_binary(), "--version"])
        self.assertEqual(r.returncode, 0, r)
        self.assertRegex(r.stdout, r"^tollgate %s \(git [^)\s]+\)\n$" % re.escape(VERSION))
        self.assertEqual(r.stderr, "")

    def test_check_config_accepts_the_packaged_example(self):
        # From / as the service runs it (WorkingDirectory is not the configuration's folder).
        r = run([packaged_binary(), "check-config", in_root("/etc/tollgate/tollgate.yaml")],
                cwd="/")
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("routes:", r.stdout)

    def test_check_config_refuses_a_broken_file(self):
        bad = os.path.join(_TMP, "bad.yaml")
        with open(bad, "w") as f:
            f.write("server: {listen: 127.0.0.1:notaport}\n")
        r = run([packaged_binary(), "check-config", bad])
        self.assertEqual(r.returncode, 1, r)


class ControlTests(unittest.TestCase):
    def test_fields(self):
        self.assertEqual(control_field("Package"), "tollgate")
        self.assertRegex(control_field("Version"), r"^%s-\d+$" % re.escape(VERSION))
        self.assertEqual(control_field("Section"), "net")
        self.assertEqual(control_field("Architecture"),
                         run(["dpkg", "--print-architecture"], check=True).stdout.strip())
        self.assertTrue(control_field("Maintainer"))
        self.assertTrue(control_field("Description"))

    def test_depends_names_the_runtime_libraries(self):
        depends = depends_packages()
        wanted = [r"^libhiredis\d", r"^libpq\d", r"^libyaml-cpp\d", r"^libboost-json1\.\d+",
                  r"^libboost-url1\.\d+", r"^libssl\d", r"^libstdc\+\+6$", r"^libc6$",
                  r"^procps$"]
        needed = needed_libraries(packaged_binary())
        if any(n.startswith("libgrpc++") for n in needed):  # built with TOLLGATE_RLS
            wanted += [r"^libgrpc\+\+\d", r"^libprotobuf\d"]
        for pattern in wanted:
            with self.subTest(pattern=pattern):
                self.assertTrue(any(re.search(pattern, d) for d in depends),
                                "%s not in Depends: %s" % (pattern, sorted(depends)))

    def test_every_needed_library_comes_from_a_package_in_depends(self):
        depends = depends_packages()
        for soname in needed_libraries(packaged_binary()):
            with self.subTest(soname=soname):
                pkg = owning_package(soname)
                self.assertIsNotNone(pkg, "no installed package holds %s" % soname)
                self.assertIn(pkg, depends, "%s (from %s) not in Depends" % (pkg, soname))

    def test_conffile_and_maintainer_scripts(self):
        ctrl = os.path.join(_TMP, "control")
        subprocess.run(["dpkg-deb", "-e", DEB, ctrl], check=True, timeout=RUN_TIMEOUT_S)
        with open(os.path.join(ctrl, "conffiles")) as f:
            self.assertEqual(f.read().split(), ["/etc/tollgate/tollgate.yaml"])
        for script in ["postinst", "prerm", "postrm"]:
            with self.subTest(script=script):
                path = os.path.join(ctrl, script)
                self.assertTrue(os.access(path, os.X_OK), script)
                r = run(["sh", "-n", path])
                self.assertEqual(r.returncode, 0, r.stderr)


def _systemd_analyze_usable():
    """None when systemd-analyze verifies a trivial unit here, else the reason it cannot."""
    exe = shutil.which("systemd-analyze")
    if not exe:
        return "systemd-analyze is not installed (apt-get install systemd)"
    d = tempfile.mkdtemp(prefix="tollgate-sa-", dir=_TMP)
    with open(os.path.join(d, "probe.service"), "w") as f:
        f.write("[Service]\nType=oneshot\nExecStart=/bin/true\n")
    r = run([exe, "verify", "probe.service"], cwd=d)
    if r.returncode != 0:
        return "systemd-analyze cannot verify a trivial unit here: %s" % (
            (r.stdout + r.stderr).strip()[:500])
    return None


class UnitTests(unittest.TestCase):
    def unit_text(self):
        with open(in_root("/usr/lib/systemd/system/tollgate.service")) as f:
            return f.read()

    def test_unit_settings(self):
        unit = self.unit_text()
        settings = {}
        for line in unit.splitlines():
            if "=" in line and not line.lstrip().startswith(("#", ";")):
                k, v = line.split("=", 1)
                settings.setdefault(k.strip(), []).append(v.strip())
        expect = {
            "ExecStart": "/usr/bin/tollgate serve --config /etc/tollgate/tollgate.yaml",
            "ExecStartPre": "/usr/bin/tollgate check-config /etc/tollgate/tollgate.yaml",
            "ExecReload": "/bin/kill -HUP $MAINPID",
            "KillSignal": "SIGTERM",
            "Restart": "on-failure",
            "DynamicUser": "yes",
            "LimitNOFILE": "1048576",
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "ProtectHome": "yes",
            "PrivateTmp": "yes",
            "PrivateDevices": "yes",
            "MemoryDenyWriteExecute": "yes",
            "CapabilityBoundingSet": "",
            "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
            "SystemCallArchitectures": "native",
            "UMask": "0077",
        }
        for key, value in expect.items():
            with self.subTest(key=key):
                self.assertEqual(settings.get(key), [value])
        self.assertIn("@system-service", settings.get("SystemCallFilter", []))
        # The drain (server.drain_timeout_ms, 10 s by default) fits in the stop timeout.
        self.assertRegex(settings["TimeoutStopSec"][0], r"^\d+s$")
        self.assertGreater(int(settings["TimeoutStopSec"][0][:-1]), 10)

    def test_systemd_analyze_verify(self):
        reason = _systemd_analyze_usable()
        if reason:
            self.skipTest(reason)
        # The unit as packaged, its /usr/bin/tollgate and /etc/tollgate/ pointing into the
        # unpacked root (verify checks that the commands exist), and man(1) looking there for
        # Documentation=man:tollgate(1).
        d = tempfile.mkdtemp(prefix="tollgate-unit-", dir=_TMP)
        unit = self.unit_text().replace("/usr/bin/tollgate", packaged_binary())
        unit = unit.replace("/etc/tollgate/", in_root("/etc/tollgate/"))
        with open(os.path.join(d, "tollgate.service"), "w") as f:
            f.write(unit)
        env = dict(os.environ, MANPATH=in_root("/usr/share/man"), SYSTEMD_LOG_COLOR="0",
                   SYSTEMD_COLORS="0")
        r = run(["systemd-analyze", "verify", "tollgate.service"], cwd=d, env=env)
        # verify exits 0 on an unknown key or an unparsable value, with a warning: both count.
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual((r.stdout + r.stderr).strip(), "")


# systemd's MemoryDenyWriteExecute= (src/shared/seccomp-util.c): EPERM for mmap with both
# PROT_WRITE and PROT_EXEC, for mprotect/pkey_mprotect adding PROT_EXEC, for shmat with SHM_EXEC.
PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _load_libseccomp():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ScmpArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib


def _deny_write_execute(lib):
    """Installs systemd's MemoryDenyWriteExecute filter in this process (a child about to exec).
    Runs after fork: no allocation-heavy work, errors written to fd 2 and _exit(126)."""
    eperm = 0x00050000 | 1  # SCMP_ACT_ERRNO(EPERM)
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    rules = [("mmap", 2, PROT_WRITE | PROT_EXEC), ("mprotect", 2, PROT_EXEC),
             ("pkey_mprotect", 2, PROT_EXEC), ("shmat", 2, SHM_EXEC)]
    ok = bool(ctx)
    for name, arg, mask in rules:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            continue
        cmp = _ScmpArgCmp(arg, SCMP_CMP_MASKED_EQ, mask, mask)
        ok = ok and lib.seccomp_rule_add_array(ctx, eperm, nr, 1, ctypes.byref(cmp)) == 0
    ok = ok and lib.seccomp_load(ctx) == 0  # sets no_new_privs too, as NoNewPrivileges=yes
    if not ok:
        os.write(2, b"seccomp filter not installed\n")
        os._exit(126)


_WX_PROBE = r"""
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC,
              mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
sys.exit(0 if p in (None, ctypes.c_void_p(-1).value) and ctypes.get_errno() == 1 else 3)
"""


def _reserve_port():
    """127.0.0.1:0 bound (not listening) with SO_REUSEPORT: tollgate, which sets it too, can bind
    the same port while the socket holds it against other binds (as the e2e harness does)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1], s


def _http(port, method, path, headers=None, timeout=5.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class WriteExecuteTests(unittest.TestCase):
    """MemoryDenyWriteExecute=yes holds only if nothing in the process (gRPC, protobuf, OpenSSL,
    libpq's dependencies) maps memory writable and executable: the packaged binary serves, with
    its gRPC listener, reloads and drains under the same seccomp rule."""

    def setUp(self):
        self.lib = _load_libseccomp()
        if self.lib is None:
            self.skipTest("libseccomp is not installed (libseccomp2)")
        self.procs = []
        self.sockets = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=STOP_TIMEOUT_S)
        for s in self.sockets:
            s.close()

    def preexec(self):
        _deny_write_execute(self.lib)

    def port(self):
        port, s = _reserve_port()
        self.sockets.append(s)
        return port

    def test_the_filter_refuses_write_execute_memory(self):
        r = subprocess.run([sys.executable, "-c", _WX_PROBE], preexec_fn=self.preexec,
                           capture_output=True, timeout=RUN_TIMEOUT_S)
        self.assertEqual(r.returncode, 0, "the W^X filter did not refuse: %r" % (r,))

    def test_serve_reload_and_drain(self):
        gateway, admin, decision = self.port(), self.port(), self.port()
        upstream = self.port()  # held, never listening: the upstream refuses
        with open(in_root("/etc/tollgate/tollgate.yaml")) as f:
            config = f.read()
        for old, port in [("127.0.0.1:8080", gateway), ("127.0.0.1:9090", admin),
                          ("http://127.0.0.1:8081", upstream)]:
            self.assertIn(old, config)
            config = config.replace(old, re.sub(r":\d+$", ":%d" % port, old))
        config += '\ndecision: {listen: "127.0.0.1:%d"}\n' % decision
        grpc = any(n.startswith("libgrpc++") for n in needed_libraries(packaged_binary()))
        if grpc:
            rls = self.port()
            config += ('rls:\n  listen: "127.0.0.1:%d"\n  domains: [{domain: api, '
                       'key_entry: api_key, ip_entry: remote_address}]\n' % rls)
        path = os.path.join(tempfile.mkdtemp(prefix="wx-", dir=_TMP), "tollgate.yaml")
        with open(path, "w") as f:
            f.write(config)
        log = open(os.path.join(_TMP, "serve.log"), "w+")
        self.addCleanup(log.close)
        p = subprocess.Popen([packaged_binary(), "serve", "--config", path], cwd="/",
                             stdout=subprocess.DEVNULL, stderr=log, preexec_fn=self.preexec)
        self.procs.append(p)

        def log_text():
            log.flush()
            with open(log.name) as f:
                return f.read()

        def wait_for(predicate, timeout):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if predicate():
                    return True
                if p.poll() is not None:
                    return predicate()
                time.sleep(0.05)
            return predicate()

        def ready():
            try:
                return _http(admin, "GET", "/readyz", timeout=1.0)[0] == 200
            except OSError:
                return False

        self.assertTrue(wait_for(ready, START_TIMEOUT_S), "not ready:\n" + log_text())
        status, _ = _http(gateway, "GET", "/v1/anything", {"X-API-Key": "demo-free-key"})
        self.assertEqual(status, 502)  # decided and forwarded; the upstream refused
        status, _ = _http(decision, "GET", "/", {"X-API-Key": "demo-free-key"})
        self.assertEqual(status, 200)
        if grpc:
            with socket.create_connection(("127.0.0.1", rls), timeout=5.0):
                pass  # the gRPC server accepts
        p.send_signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: "configuration reloaded" in log_text(), 10),
                        log_text())
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=STOP_TIMEOUT_S), 0, log_text())
        self.assertIn("stopped", log_text())
        self.assertNotIn("Operation not permitted", log_text())


def main():
    global BUILD_DIR
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--build-dir", default=os.environ.get("TOLLGATE_BUILD_DIR", ""))
    args, rest = ap.parse_known_args()
    if not args.build_dir or not os.path.isfile(os.path.join(args.build_dir, "CPackConfig.cmake")):
        sys.exit("test_deb.py: --build-dir must name a configured build folder (with "
                 "CPackConfig.cmake), got %r" % args.build_dir)
    BUILD_DIR = os.path.abspath(args.build_dir)
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
