#!/usr/bin/env python3
"""Helpers of bench/rls/run.sh, standard library only.

    grpc_bench.py frame DOMAIN KEY=VALUE... > body.bin   one gRPC frame of a RateLimitRequest
    grpc_bench.py port                                   a free 127.0.0.1 TCP port
    grpc_bench.py busy                                   busy % of the busier CPU over 1 s
    grpc_bench.py calib                                  ms of a fixed CPU-bound loop
    grpc_bench.py decode < response-body                 overall_code of the RateLimitResponse
    grpc_bench.py stats LOG STDOUT BEFORE AFTER T0 T1    one JSON line: calls/s, p50/p99/p99.9,
                                                         the growth of the counters, CPU use
                                                         (T0, T1: the shell's `times` around h2load)
    grpc_bench.py row JSON | clean JSON                  a line for people | exit 1 if busy
    grpc_bench.py metrics ADMIN_PORT PIDS0 PIDS1         tollgate_rls_*, degraded, redis; CPU ticks
                                                         (PIDSn: ours on CPU n, comma-separated)
    grpc_bench.py median FILE...                         medians of the `stats` lines

The request is encoded from the field numbers of src/rls/proto/rls.proto: RateLimitRequest
{domain = 1, descriptors = 2}, RateLimitDescriptor {entries = 1}, Entry {key = 1, value = 2}.
"""
import json
import os
import socket
import statistics
import struct
import sys
import time
import urllib.request


def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):  # wire type 2: length-delimited (strings and messages)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def frame(domain, pairs):
    entries = b"".join(field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in pairs)
    msg = field(1, domain.encode()) + field(2, entries)
    return b"\x00" + struct.pack(">I", len(msg)) + msg  # not compressed, big-endian length


def decode_overall_code(body):
    """Field 1 (varint) of the first frame's RateLimitResponse; 0 (UNKNOWN) when absent."""
    if len(body) < 5 or body[0] != 0:
        raise SystemExit("not an uncompressed gRPC frame: %r" % body[:16])
    (n,) = struct.unpack(">I", body[1:5])
    msg, i = body[5:5 + n], 0
    while i < len(msg):
        tag, i = read_varint(msg, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = read_varint(msg, i)
            if number == 1:
                return value
        elif wire == 2:
            length, i = read_varint(msg, i)
            i += length
        else:
            raise SystemExit("unexpected wire type %d" % wire)
    return 0


def read_varint(b, i):
    shift = value = 0
    while True:
        value |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not b[i - 1] & 0x80:
            return value, i


def pct(sorted_values, permille):  # nearest rank: the smallest value with permille/1000 at or below
    k = -(-permille * len(sorted_values) // 1000) - 1
    return sorted_values[max(0, min(len(sorted_values) - 1, k))]


def children_seconds(times_path):  # second line of bash's `times`: "0m1.250s 0m0.300s"
    line = open(times_path).read().splitlines()[1]
    return sum(int(m) * 60 + float(sec) for m, sec in
               (w.rstrip("s").split("m") for w in line.split()))


def stats(log_path, stdout_path, before_path, after_path, times0, times1):
    lat, bad = [], 0
    with open(log_path) as f:
        for line in f:
            cols = line.split("\t")
            if len(cols) < 3:
                continue
            if cols[1] == "200":
                lat.append(int(cols[2]))
            else:
                bad += 1
    text = open(stdout_path).read()
    rps = succeeded = started = failed = errored = timeout = None
    for line in text.splitlines():
        if line.startswith("finished in"):  # finished in 5.00s, 12345.60 req/s, 1.2MB/s
            rps = float(line.split(",")[1].split()[0])
        if line.startswith("requests:"):
            words = line.replace(",", "").split()
            named = {words[i + 1]: int(words[i]) for i in range(1, len(words) - 1, 2)}
            succeeded, started = named.get("succeeded"), named.get("started")
            failed = named.get("failed")
            errored, timeout = named.get("errored"), named.get("timeout")
    lat.sort()
    ms = lambda us: round(us / 1000.0, 3)
    row = {"calls_s": rps, "succeeded": succeeded, "failed": failed, "errored": errored,
           "timeout": timeout, "logged_200": len(lat), "logged_not_200": bad,
           "p50_ms": ms(pct(lat, 500)) if lat else None, "p99_ms": ms(pct(lat, 990)) if lat else None,
           "p999_ms": ms(pct(lat, 999)) if lat else None}
    # HTTP 200 is not a gRPC success (grpc-status comes in the trailers): tollgate's counters of
    # answers must have grown by what h2load saw succeed (up to `started`: h2load stops with
    # streams in flight that tollgate still answers), all OK.
    before, after = json.load(open(before_path)), json.load(open(after_path))
    delta = {k[len("tollgate_"):]: after[k] - before.get(k, 0) for k in after
             if k.startswith("tollgate_")}
    h2load_ticks = (children_seconds(times1) - children_seconds(times0)) * os.sysconf("SC_CLK_TCK")
    for n in ("0", "1"):
        busy, steal, total, process = (a - b for a, b in zip(after["_cpu" + n], before["_cpu" + n]))
        own = after["_own" + n] - before["_own" + n] + (h2load_ticks if n == "1" else 0)
        row["cpu%s_busy" % n] = round(100.0 * busy / max(total, 1))
        row["cpu%s_steal" % n] = round(100.0 * steal / max(total, 1))
        row["cpu%s_other" % n] = max(0, round(100.0 * (process - own) / max(total, 1)))
    row.update(delta)
    if os.environ.get("CALIB_MS"):
        row["calib_ms"] = int(os.environ["CALIB_MS"])
    if "rls_ok_total" in delta:
        ok = delta["rls_ok_total"]
        row["grpc_mismatch"] = (max(0, succeeded - ok) + max(0, ok - started)
                                + delta.get("rls_over_limit_total", 0)
                                + delta.get("rls_unknown_key_total", 0)
                                + delta.get("rls_unknown_domain_total", 0))
    else:
        row["grpc_mismatch"] = 0
        row["grpc_unchecked"] = True  # this binary exports no tollgate_rls_ok_total
    return row


WATCHED = ("tollgate_rls_", "tollgate_degraded_total", "tollgate_redis_calls_total",
           "tollgate_redis_timeouts_total", "tollgate_redis_errors_total",
           "tollgate_redis_reconnects_total")


def metrics(port, cpu0_pids="", cpu1_pids=""):
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(WATCHED):
            name, value = line.rsplit(" ", 1)
            name = name.split("{")[0]  # summed over labels
            out[name] = out.get(name, 0) + int(float(value))
    # Where the time went: ticks of CPU 0 (tollgate) and CPU 1 (h2load, redis) from /proc/stat,
    # and those of our own processes pinned there (h2load's come from the shell's `times`):
    # user+system ticks beyond ours are someone else's (a build on a shared machine).
    with open("/proc/stat") as f:
        for line in f:
            cols = line.split()
            if cols[0] in ("cpu0", "cpu1"):
                t = [int(x) for x in cols[1:9]]  # user nice system idle iowait irq softirq steal
                out["_" + cols[0]] = [sum(t) - t[3] - t[4] - t[7], t[7], sum(t), t[0] + t[1] + t[2]]
    for cpu, pids in (("_own0", cpu0_pids), ("_own1", cpu1_pids)):
        out[cpu] = 0
        for pid in filter(None, pids.split(",")):
            with open("/proc/%s/stat" % pid) as f:
                out[cpu] += sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
    return out


def is_clean(r):  # no one else took more than OTHER_MAX % of either CPU
    return max(r["cpu0_other"], r["cpu1_other"]) <= int(os.environ.get("OTHER_MAX", 10))


def errors(r):
    """h2load's failures, non-200 statuses, and 200s that were not an OK answer."""
    return ((r["failed"] or 0) + (r["errored"] or 0) + (r["timeout"] or 0) + r["logged_not_200"]
            + r.get("grpc_mismatch", 0))


def extras(r):
    """What a reader must know beside the figures: fail-open answers, Redis timeouts."""
    notes = ["cpu0 %d%% busy (%d%% not ours), cpu1 %d%% (%d%%), calib %s ms" % (
        r["cpu0_busy"], r["cpu0_other"], r["cpu1_busy"], r["cpu1_other"], r.get("calib_ms"))]
    notes += ["steal %s%%/%s%%" % (r["cpu0_steal"], r["cpu1_steal"])] if r.get(
        "cpu0_steal") or r.get("cpu1_steal") else []
    notes += ["%s %d" % (k, r[k]) for k in ("degraded_total", "redis_timeouts_total",
                                           "redis_errors_total", "redis_reconnects_total")
              if r.get(k)]
    if r.get("grpc_unchecked"):
        notes.append("gRPC status unchecked (no tollgate_rls_ok_total)")
    return ("  [" + ", ".join(notes) + "]") if notes else ""


def main(argv):
    cmd = argv[1]
    if cmd == "frame":
        sys.stdout.buffer.write(frame(argv[2], [a.split("=", 1) for a in argv[3:]]))
    elif cmd == "port":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
        s.close()
    elif cmd == "calib":  # ms for a fixed pure-Python loop: a slower host shows here (no steal)
        t = time.perf_counter()
        total = 0
        for i in range(1000000):
            total += i * i
        print(round((time.perf_counter() - t) * 1000))
    elif cmd == "busy":  # the busier CPU's busy % over the next second
        def ticks():
            with open("/proc/stat") as f:
                rows = [l.split() for l in f if l.startswith(("cpu0 ", "cpu1 "))]
            return [[int(x) for x in r[1:9]] for r in rows]
        a = ticks()
        time.sleep(1)
        b = ticks()
        print(max(round(100.0 * (sum(y) - sum(x) - (y[3] - x[3]) - (y[4] - x[4]))
                        / max(1, sum(y) - sum(x))) for x, y in zip(a, b)))
    elif cmd == "decode":
        print({0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}.get(
            decode_overall_code(sys.stdin.buffer.read()), "?"))
    elif cmd == "stats":
        print(json.dumps(stats(*argv[2:8])))
    elif cmd == "metrics":
        print(json.dumps(metrics(*argv[2:5])))
    elif cmd == "row":
        r = json.load(open(argv[2]))
        print("%8.0f calls/s  p50 %.3f  p99 %.3f  p99.9 %.3f ms  errors %d%s" % (
            r["calls_s"], r["p50_ms"], r["p99_ms"], r["p999_ms"], errors(r), extras(r)))
    elif cmd == "clean":  # someone else used more than OTHER_MAX % of a CPU: measure again
        sys.exit(0 if is_clean(json.load(open(argv[2]))) else 1)
    elif cmd == "median":
        rows = [json.loads(line) for path in argv[2:] for line in open(path) if line.strip()]
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("calls_s", "p50_ms", "p99_ms", "p999_ms", "calib_ms") if k in rows[0]}
        busy = sum(1 for r in rows if not is_clean(r))
        fail_open = sum(r.get("redis_timeouts_total", 0) + r.get("redis_errors_total", 0)
                        for r in rows)
        print("median of %d: %8.0f calls/s  p50 %.3f  p99 %.3f  p99.9 %.3f ms  errors (all) %d"
              "  calib %s ms%s%s"
              % (len(rows), med["calls_s"], med["p50_ms"], med["p99_ms"], med["p999_ms"],
                 sum(errors(r) for r in rows), med.get("calib_ms"),
                 "  redis timeouts+errors (all, answered OK: fail open) %d" % fail_open
                 if fail_open else "", "  ROUNDS ON A BUSY MACHINE: %d" % busy if busy else ""))
    else:
        raise SystemExit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
