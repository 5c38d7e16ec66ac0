#!/usr/bin/env python3
"""A realistic access log for `tollgate replay` (bench/replay/run.sh) and its candidate config.

    bench/replay/generate.py OUT_DIR [--lines 5000000] [--keys 10000] [--seed 1]

Writes OUT_DIR/candidate.yaml (plans free/team/enterprise, `--keys` keys spread over them, an
export route costed by its `pages` query, a public per-address route, an identity-none health
route) and OUT_DIR/access.jsonl: `--lines` lines as Worker::Finish writes them, one every 100 µs
or so, keys Zipf-skewed (a few hot keys go over their limits), 8 % anonymous lines from 2,000
addresses, 1 % invalid keys, 1 % health checks, decisions as a shadow gateway would record them
(roughly: a hot key's lines shadow_rejected). Seeded: the same arguments give the same files.
"""
import argparse
import os
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--lines", type=int, default=5_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out_dir, exist_ok=True)
    plans = ["free", "team", "enterprise"]
    key_plan = [plans[0] if i % 10 < 7 else plans[1] if i % 10 < 9 else plans[2]
                for i in range(a.keys)]
    with open(os.path.join(a.out_dir, "candidate.yaml"), "w") as f:
        f.write("""mode: enforce
store: {type: memory, max_keys: 1000000}
plans:
  free:
    limits:
      - {name: burst, capacity: 20, refill_per_second: 2}
      - {name: daily, algorithm: quota, period: day, allowance: 1000, ceiling: 10000}
  team:
    limits:
      - {name: burst, capacity: 200, refill_per_second: 20}
      - {name: daily, algorithm: quota, period: day, allowance: 100000, ceiling: 1000000}
  enterprise:
    limits:
      - {name: burst, capacity: 2000, refill_per_second: 200}
anonymous:
  limits:
    - {name: burst, capacity: 10, refill_per_second: 1}
routes:
  - {name: health, path: /health, identity: none}
  - {name: export, path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - {name: public, path: /public/*, identity: ip}
keys:
""")
        for i in range(a.keys):
            f.write("  - {key: sk-bench-%06d, id: k-%06d, account: acct-%05d, plan: %s}\n"
                    % (i, i, i // 3, key_plan[i]))
    # Zipf-like weights: key i is picked with weight 1/(i+1)^1.1.
    weights = [1.0 / (i + 1) ** 1.1 for i in range(a.keys)]
    picks = rng.choices(range(a.keys), weights=weights, k=a.lines)
    paths = ["/v1/items", "/v1/items/123", "/v1/orders", "/v1/search"]
    t_ms = 1_795_989_596_000  # 2026-11-29T21:59:56Z
    hot = set(range(20))
    with open(os.path.join(a.out_dir, "access.jsonl"), "w") as f:
        out = []
        for n in range(a.lines):
            t_ms += rng.random() < 0.2  # about 5 lines per millisecond
            secs, ms = divmod(t_ms, 1000)
            days, rem = divmod(secs, 86400)
            hh, rem = divmod(rem, 3600)
            mm, ss = divmod(rem, 60)
            ts = "2026-11-%02dT%02d:%02d:%02d.%03dZ" % (29 + days - 20786, hh, mm, ss, ms)
            r = rng.random()
            query, route, key_id, plan, client = "", "(default)", "", "", "198.51.100.%d" % (n % 250)
            if r < 0.01:
                path, route, decision, status = "/health", "health", "none", 200
            elif r < 0.02:
                path, decision, status = "/v1/items", "invalid_key", 401
            elif r < 0.10:
                path, route, plan = "/public/docs/%d" % (n % 7), "public", "anonymous"
                client = "203.0.%d.%d" % divmod(rng.randrange(2000), 250)
                decision, status = "allowed", 200
            else:
                k = picks[n]
                key_id, plan = "k-%06d" % k, key_plan[k]
                if r < 0.15:
                    path, route, query = "/v1/export", "export", "pages=%d" % rng.randrange(1, 400)
                else:
                    path = paths[n % 4]
                shadow = k in hot and rng.random() < 0.5
                decision, status = ("shadow_rejected" if shadow else "allowed"), 200
            out.append('{"ts":"%s","method":"GET","path":"%s","query":"%s","status":%d,'
                       '"client":"%s","peer":"10.0.0.2","request_id":"%032x","key_id":"%s",'
                       '"plan":"%s","route":"%s","decision":"%s","cost":1,"upstream_status":%d,'
                       '"latency_ms":%d.%03d}\n'
                       % (ts, path, query, status, client, rng.getrandbits(128), key_id, plan,
                          route, decision, status if decision != "invalid_key" else 0,
                          rng.randrange(3), rng.randrange(1000)))
            if len(out) >= 100_000:
                f.writelines(out)
                out = []
        f.writelines(out)


if __name__ == "__main__":
    main()
