#!/usr/bin/env python3
"""report.py RECORDS.jsonl [--duration S --warmup S --elapsed S --gateway PATH --root DIR]
                            [--json OUT.json]

Renders bench/run.sh's records as the markdown report: the machine, every wrk run, then the
ratios against the nginx peer measured in the same run, memory and slowloris, each next to its
target with PASS / FAIL. A run with socket errors or non-2xx answers (or, against the gateway,
any request not counted 'handled' — a duplicate would mean the 204 path was measured) is marked
INVALID and no ratio is computed from it.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess

NGINX1 = "nginx peer (worker_processes 1)"
NGINX2 = "nginx peer (worker_processes 2)"
DIRECT = "upstream direct"
GATEWAY = "gateway memory://"
GATEWAY_REDIS = "gateway redis://"

# Targets (see BENCHMARKS.md for why these).
THROUGHPUT_RATIO_MIN = 1.0
ADDED_P50_SLACK_US = 20
RSS_MAX_MB = 50
SLOWLORIS_P99_MAX_MS = 50


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def machine(root, gateway):
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), "unknown CPU")
    nginx = sh("sh", "-c", "nginx -v 2>&1").replace("nginx version: ", "")
    wrk = sh("sh", "-c", "wrk --version 2>&1 | head -n 1").split(" Copyright")[0]
    head = sh("git", "-C", root, "rev-parse", "--short", "HEAD") or "?"
    dirty = sh("git", "-C", root, "status", "--porcelain", "--", "src", "include", "CMakeLists.txt")
    tree = head + (" + uncommitted changes under src/" if dirty else "")
    if not os.path.isfile(gateway):  # the store part alone runs without a gateway
        return f"{os.cpu_count()} × {model}, Linux {platform.release()}; tree {tree}"
    return (f"{os.cpu_count()} × {model}, Linux {platform.release()}, {nginx}, {wrk}; "
            f"gateway `{os.path.relpath(gateway, root)}` built from {tree}")


def errors(w):
    kinds = {k: w[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts", "non2xx")}
    return sum(kinds.values()), {k: v for k, v in kinds.items() if v}


def outcome_problems(r):
    """Gateway outcomes other than 'handled' that grew during the measured run."""
    before, after = r.get("outcomes_before"), r.get("outcomes_after")
    if not before or not after:
        return {}
    return {k: int(v - before.get(k, 0)) for k, v in after.items()
            if k != "handled" and v - before.get(k, 0) > 0}


def valid(r):
    n, _ = errors(r["wrk"])
    return r["wrk"]["requests"] > 0 and n == 0 and not outcome_problems(r)


def run_label(r):
    """A wrk run's target, with its round when the throughput part repeated it."""
    k = r.get("round", 1)
    return r["target"] + (f" (round {k})" if k > 1 else "")


def verdict(ok):
    return "PASS" if ok else "**FAIL**"


VERDICTS = ("PASS", "FAIL", "INVALID")


def json_document(lines, recs):
    """The report as one JSON document (bench/results/latest.json): its title and notes, every
    table row that carries a verdict (keyed by its table's header, plus "overall"), and every
    raw record the run made."""
    checks, header = [], None
    for line in lines:
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            # A table may judge two targets per row: its second "target" and verdict column
            # are keyed "target 2" and "verdict 2".
            header, seen = [], {}
            for c in cells:
                name = c or "verdict"
                seen[name] = seen.get(name, 0) + 1
                header.append(name if seen[name] == 1 else f"{name} {seen[name]}")
            continue
        bare = [c.strip("*") for c in cells]
        found = [c for c in bare if c in VERDICTS]
        if found:
            row = dict(zip(header, bare))
            # The row's overall verdict: INVALID or FAIL if any of its targets is.
            row["overall"] = next(v for v in ("INVALID", "FAIL", "PASS") if v in found)
            checks.append(row)
    return {
        "title": next((l.lstrip("# ") for l in lines if l.startswith("#")), ""),
        "notes": [l[2:] for l in lines if l.startswith("- ")],
        "checks": checks,
        "records": recs,
    }


# ---------------------------------------------------------------------------------------------
# The store part (bench/store_bench + redis-benchmark + pgbench).

STORE_RATIO_MIN = 0.9           # Redis and PostgreSQL: ours ÷ the store's limit (issue 15)
PEER_RATE_MIN = 2.0             # Redis: our pairs/s ÷ the Powertools peer's messages/s ...
PEER_RATE_AT = 8                # ... at this many threads / calls in flight (issue 15)
CPU_US_MAX = 8.0                # Redis: our client CPU per pair, every thread count (issue 15)
CPU_RATIO_MAX = 0.2             # Redis: ours ÷ the peer's client CPU per message (issue 15)
STORE_TARGETED = ("redis", "postgres")
STORE_ORDER = ("memory", "sqlite", "redis", "postgres")
SCALE_FLAT = 0.20               # claim p50 at every count within ±20 % of the smallest's (issue 15)
MEMORY_BYTES_MAX = 150          # memory: bytes per record at the most records, key included (15)


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def num(v, digits=0):
    return "—" if v is None else f"{v:,.{digits}f}"


def store_report(recs, p):
    setup = next((r for r in recs if r["kind"] == "store_setup"), None)
    ours = [r for r in recs if r["kind"] == "store"]
    limits = [r for r in recs if r["kind"] == "limit"]
    failed = [r for r in recs if r["kind"] == "store_failed"]
    if not setup and not ours and not failed:
        return
    p("#### Stores: the library against each store's own limit")
    p("")
    for r in failed:
        p(f"- **store_bench failed** (round {r['round']}, exit status {r['status']}): "
          f"`store_bench {r['command']}`; what it printed before is in the tables below")
    if failed:
        p("")
    if setup:
        servers = []
        if "redis" in setup:
            servers.append(f"{setup['redis']} ({setup['redis_persistence']})")
        if "postgres" in setup:
            servers.append(f"{setup['postgres']} ({setup['pg_durability']})")
        if "sqlite" in setup.get("backends", "sqlite"):
            servers.append(f"SQLite {setup['sqlite']} (WAL, synchronous=FULL)")
        only = (f"only {setup['backends']} (BENCH_STORE_BACKENDS); "
                if setup.get("backends", "memory,sqlite,redis,postgres,peer")
                != "memory,sqlite,redis,postgres,peer" else "")
        p(f"- {only}servers: {'; '.join(servers)}; "
          f"each measurement {setup['seconds']} s after 0.5 s unrecorded, {setup['rounds']} "
          "round(s); a number is the median over rounds, a ratio the median of each round's "
          "back-to-back ratio")
    p("- pair = claim (Won) + complete (true) of a fresh key; latency per store call; client CPU "
      "= the driver process's user + system time (getrusage, all threads) over the measured "
      "window ÷ pairs; limit: "
      "Redis `redis-benchmark` EVALSHA of the library's claim script ÷ 2, PostgreSQL `pgbench "
      "-M prepared` of the library's claim + complete statements, SQLite the same statements "
      "in a raw C loop at the same durability")
    p("")

    def key(r):
        return (r["backend"], r["path"], r["threads"])

    groups, lim = {}, {}
    for r in ours:
        groups.setdefault(key(r), []).append(r)
    for r in limits:
        lim.setdefault(key(r), []).append(r)

    p("| backend | threads | pool | pairs/s | p50 µs | p99 µs | client CPU µs/pair | limit pairs/s "
      "| ours ÷ limit | target | |")
    p("|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    for b in STORE_ORDER:
        for (kb, path, t), rs in sorted(groups.items(), key=lambda kv: kv[0][2]):
            if kb != b or path != "pair":
                continue
            bad = sum(r["unexpected"] for r in rs)
            pool = rs[0].get("pool")
            pool_txt = "—" if pool is None else (f"{pool} (limits {t} threads)"
                                                 if rs[0].get("pool_limited") else str(pool))
            if rs[0].get("pipelined"):
                pool_txt = f"{pool} pipelined"
            rate = median([r["rate"] for r in rs])
            ls = lim.get((b, "pair", t), [])
            lrate = median([r["rate"] for r in ls]) if ls else None
            by_round = {r["round"]: r["rate"] for r in ls}
            ratios = [r["rate"] / by_round[r["round"]] for r in rs
                      if by_round.get(r["round"])]
            ratio = median(ratios)
            targeted = b in STORE_TARGETED
            if bad:
                verdict_txt = f"INVALID ({bad} unexpected answers or errors)"
            elif ratio is None:
                verdict_txt = ""
            elif targeted:
                verdict_txt = verdict(ratio >= STORE_RATIO_MIN)
            else:
                verdict_txt = "info"
            cpu = median([r["cpu_us_per_op"] for r in rs if "cpu_us_per_op" in r])
            p(f"| {b} | {t} | {pool_txt} | {num(rate)} | {num(median([r['p50_us'] for r in rs]), 1)} "
              f"| {num(median([r['p99_us'] for r in rs]), 1)} | {num(cpu, 1)} | {num(lrate)} "
              f"| {'—' if ratio is None else f'{ratio:.2f}×'} "
              f"| {f'≥ {STORE_RATIO_MIN}×' if targeted else '— (info)'} | {verdict_txt} |")
    p("")

    pipelining_report(groups, p)
    peer_report(recs, groups, p)

    floors = [r for r in recs if r["kind"] == "floor"]
    if floors or limits:
        p("| store's own rate, same run | threads | statements/s | p50 µs | p99 µs "
          "| its client's CPU µs/call |")
        p("|---|---:|---:|---:|---:|---:|")
        rows = {}
        for r in limits + floors:
            label = r.get("tool", r["kind"])
            rows.setdefault((r["backend"], label, r["threads"]), []).append(r)
        for (b, label, t), rs in sorted(rows.items()):
            rate = median([r["statement_rate"] if "statement_rate" in r else r["rate"] * 2 for r in rs])
            p50 = median([r["p50_us"] for r in rs if r.get("p50_us") is not None])
            p99 = median([r["p99_us"] for r in rs if r.get("p99_us") is not None])
            if p50 is None and rs[0].get("latency_avg_ms") is not None:
                p50txt = f"avg {median([r['latency_avg_ms'] for r in rs]) * 1000:,.0f} (per pair)"
            else:
                p50txt = num(p50, 1)
            client = median([r["client_cpu_us_per_call"] for r in rs if "client_cpu_us_per_call" in r])
            p(f"| {b}: {label} | {t} | {num(rate)} | {p50txt} | {num(p99, 1)} | {num(client, 1)} |")
        p("")

    script_weight_report(recs, p)

    other = {k: v for k, v in groups.items() if k[1] in ("dup", "dupcache", "hot")}
    if other:
        p("| backend | threads | duplicate claims/s (AlreadyDone) | p50 µs | p99 µs "
          "| duplicates behind a DoneCache, claims/s | p50 µs | p99 µs "
          "| one hot key claims/s (HeldByOther) | p50 µs | p99 µs |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for b in STORE_ORDER:
            for t in sorted({k[2] for k in other if k[0] == b}):
                cells = []
                for path in ("dup", "dupcache", "hot"):
                    rs = other.get((b, path, t))
                    if not rs:
                        cells += ["—"] * 3
                        continue
                    bad = sum(r["unexpected"] for r in rs)
                    cells += [num(median([r["rate"] for r in rs])) + (f" ({bad} unexpected)" if bad else ""),
                              num(median([r["p50_us"] for r in rs]), 1),
                              num(median([r["p99_us"] for r in rs]), 1)]
                p(f"| {b} | {t} | " + " | ".join(cells) + " |")
        p("")

    scale = [r for r in recs if r["kind"] == "scale"]
    if scale:
        p("| backend | live records | claim p50 µs (each round's) | claim p99 µs | bytes per record | fill s |")
        p("|---|---:|---:|---:|---:|---:|")
        for b in STORE_ORDER:
            for r in (r for r in scale if r["backend"] == b):
                bad = f" ({r['unexpected']} unexpected)" if r["unexpected"] else ""
                rounds = " / ".join(str(v) for v in r.get("round_p50_us", []))
                rounds = f" ({rounds})" if rounds else ""
                p(f"| {b} | {held(r)} | {r['p50_us']}{bad}{rounds} | {r['p99_us']} "
                  f"| {r['bytes_per_record']:,.0f} | {r['fill_seconds']} |")
        p("")
        p("Each count of records is a store of its own (another memory store, SQLite file, Redis "
          "database or PostgreSQL table), all filled first; then each round takes a batch of "
          "claims of fresh keys (each then completed, so the store grows by the rounds' claims: "
          "live records at the first round → after the last) from every store in turn, so that "
          "the machine's moods fall on every count alike; the p50 is the median of the rounds'. "
          "Bytes per record: the store's growth during its fill ÷ records (memory: the process's "
          "RSS; SQLite: the file after a WAL checkpoint; Redis: `used_memory`; PostgreSQL: "
          "`pg_total_relation_size`, table + indexes). Records are written in bulk in each "
          "store's own format.")
        p("")
        scale_verdicts(scale, p)

    purge = [r for r in recs if r["kind"] == "store_purge"]
    if purge:
        p("| backend | expired records | purged | purge_expired() s | records/s |")
        p("|---|---:|---:|---:|---:|")
        for b in STORE_ORDER:
            for r in (r for r in purge if r["backend"] == b):
                rate = r["purged"] / r["seconds"] if r["seconds"] else 0
                p(f"| {b} | {r['expired']:,} | {r['purged']:,} | {r['seconds']:.3f} | {rate:,.0f} |")
        p("")
        p("Redis has no row: it deletes each record itself at its `expires_at` (PEXPIREAT), and "
          "`purge_expired()` returns 0 without a call.")
        p("")


# The live records of a scale record: at the first round, and after the last when the rounds'
# claims added to them (records before the rounds carry no records_end).
def held(r):
    end = r.get("records_end", r["records"])
    return f"{r['records']:,}" + (f" → {end:,}" if end != r["records"] else "")


# Flat scale (issue 15): each backend's claim p50 at every count against its p50 at the fewest
# records, and the memory store's bytes per record at the most.
def scale_verdicts(scale, p):
    p("| backend | claim p50 µs, fewest → most records | furthest from the fewest's | target | |")
    p("|---|---|---:|---|---|")
    for b in STORE_ORDER:
        rs = sorted((r for r in scale if r["backend"] == b), key=lambda r: r["records"])
        if len(rs) < 2:
            continue
        first = rs[0]["p50_us"]

        # A run before the rounds (no vs_fewest) compares the p50s themselves.
        def ratio(r):
            return r["vs_fewest"] if "vs_fewest" in r else r["p50_us"] / first

        worst = max(rs[1:], key=lambda r: abs(ratio(r) - 1))
        off = ratio(worst) - 1
        bad = any(r["unexpected"] for r in rs)
        steps = " → ".join(f"{r['p50_us']} ({ratio(r) - 1:+.0%})" if r is not rs[0]
                           else str(r["p50_us"]) for r in rs)
        p(f"| {b} | {steps} ({rs[0]['records']:,} → "
          f"{rs[-1]['records']:,}) | {off:+.0%} at {worst['records']:,} | ±{SCALE_FLAT:.0%} | "
          f"{'INVALID' if bad else verdict(abs(off) <= SCALE_FLAT)} |")
    p("")
    if any("vs_fewest" in r for r in scale):
        p("A count's distance from the fewest (in brackets, and the verdict's) is the median of "
          "the rounds' own ratios, not the ratio of the medians shown.")
        p("")
    memory_read_floor(scale, p)
    redis_server_scale(scale, p)
    most = max((r for r in scale if r["backend"] == "memory"), key=lambda r: r["records"],
               default=None)
    if most:
        per = most["bytes_per_record"]
        p("| measure | measured | target | |")
        p("|---|---:|---|---|")
        p(f"| memory: bytes per record at {most['records']:,} records, the key included | {per:,.0f} "
          f"| ≤ {MEMORY_BYTES_MAX} | {verdict(per <= MEMORY_BYTES_MAX)} |")
        p("")


# A table beside a backend's flat scale, one row per count of records that carries `field`
# (store_bench's measure of what the store itself does at that count), then a note.
def scale_side_table(scale, p, backend, field, header, row, note):
    rs = sorted((r for r in scale if r["backend"] == backend and field in r),
                key=lambda r: r["records"])
    if len(rs) < 2:
        return
    p(header)
    p("|" + "---:|" * header.count("|", 1))
    for r in rs:
        p(f"| {held(r)} | " + " | ".join(row(r, rs[0])) + " |")
    p("")
    p(note)
    p("")


# What the memory store's flat scale is up against: one read at a random place in its slot
# tables, timed by store_bench at each count's table size (a dependent chase, no overlap).
def memory_read_floor(scale, p):
    def row(r, first):
        extra = (r["random_read_ns"] - first["random_read_ns"]) / 1000 / first["p50_us"]
        return [f"{r['table_bytes'] / 2**20:,.2f} MiB", str(r["random_read_ns"]), f"{extra:+.0%}",
                f"{r['vs_fewest'] - 1:+.0%}"]

    scale_side_table(
        scale, p, "memory", "random_read_ns",
        "| memory: live records | slot tables | one random read there, ns | that read beyond the "
        "fewest's, ÷ the fewest's p50 | measured, the median of the rounds' ratios |",
        row,
        "A claim of a fresh key reads its home slot at a random place in its shard's table "
        "(the reads here: a dependent chase through 32 arrays laid out as the store's tables at "
        "the size they reach in the rounds, huge pages where the store asks for them, timed "
        "after the rounds). Everything after that read (the lookup, the transition, the insert) "
        "waits for it; the store prefetches the slot once the key is hashed, so only the clock "
        "read (tens of ns) overlaps it. What a read there costs beyond one in tables that fit "
        "the caches is about what the claim must add at that count.")


# What Redis's own SET NX PX GET (a fresh claim's one command) does at the same counts, on the
# same databases, in the same rounds: the server's part of the claim's flat scale.
def redis_server_scale(scale, p):
    def row(r, _first):
        return [str(r["p50_us"]), f"{r['vs_fewest'] - 1:+.0%}", str(r["raw_set_p50_us"]),
                f"{r['raw_set_vs_fewest'] - 1:+.0%}"]

    scale_side_table(
        scale, p, "redis", "raw_set_p50_us",
        "| redis: live records | our claim p50 µs | from the fewest's | the server's own "
        "`SET NX PX GET` p50 µs | from the fewest's |",
        row,
        "The raw command runs on a connection of the bench's own to the same database, right "
        "after each round's claims there, with a value the size of a claim's record: what the "
        "server alone does with a fresh key at that count.")


# The Redis script's weight (bench/script_weight.sh): instructions, not time, so that the
# script is compared with the least a claim can be on a VM whose timings move by a third.
def script_weight_report(recs, p):
    w = {r["case"]: r for r in recs if r["kind"] == "script_weight"}
    if not w:
        return
    calls = next(iter(w.values()))["calls"]
    p(f"**The Redis script's weight** (`bench/script_weight.sh`: redis-server under valgrind's "
      f"callgrind, {calls:,} calls through `redis-cli --pipe`, instructions per call above a "
      f"server that only started and stopped)")
    p("")
    p("| call | instructions per call | ÷ the minimal claim script |")
    p("|---|---:|---:|")
    minimal = w.get("minimal", {}).get("instructions_per_call")
    labels = [("setnx", "SET key token NX PX (no script)"),
              ("noop", "EVALSHA of `return 1`"),
              ("minimal", "EVALSHA of the minimal claim: TIME, HGETALL, HSET of 5 fields, PEXPIREAT"),
              ("claim", "**ours: claim of a fresh key**"),
              ("complete", "**ours: complete of that claim** (with its PUBLISH)"),
              ("fresh", "**ours: claim of a fresh key on Redis 7: SET NX PX GET + PEXPIRETIME, "
                        "no script**"),
              ("fresh_complete", "**ours: complete of that fresh claim**"),
              ("held", "**ours: claim of a key another claim holds: SET NX PX GET + PEXPIRETIME "
                       "+ TIME, no script** (after a claim that met a holder)"),
              ("held_script", "the script's claim of a key another claim holds")]
    for case, label in labels:
        if case not in w:
            continue
        n = w[case]["instructions_per_call"]
        ratio = f"{n / minimal:.2f}×" if minimal else "—"
        p(f"| {label} | {n:,} | {ratio} |")
    p("")


# The push's path in instructions (bench/push_path.sh): exact counts where the VM's timings are
# not, split at the writes that pass the push on, and what guarding it adds to the gateway's.
def push_path_report(recs, runs, p):
    # A push's shape: its bytes of data, and whether it came as Pub/Sub sends one. Records from
    # before these options carried neither: the runs' push, 12 bytes.
    def shape(r):
        return (r.get("data_bytes", 12), r.get("as_pubsub", False))

    for failed in (r for r in recs if r["kind"] == "push_path_failed"):
        p(f"**The push's path in instructions**, `{failed.get('shape', '')}`: not measured "
          f"(`bench/push_path.sh`: {failed['error']}).")
        p("")
    paths = {r["proxy"]: r for r in recs if r["kind"] == "push_path" and shape(r) == (12, False)}
    if set(paths) != {"peer", "gateway"}:
        return
    steps = [r for r in recs if r["kind"] == "push_path_step" and shape(r) == (12, False)]
    requests = paths["gateway"]["requests"]
    p(f"**The push's path in instructions** (`bench/push_path.sh`: each proxy under valgrind's "
      f"callgrind, a profile part ended at every write and every `epoll_wait`; {requests} pushes "
      "one at a time over one connection). At one connection a push waits on what runs from a "
      "wake-up to the write that passes it on; what runs after a write overlaps the other side:")
    p("")
    p("| proxy | wake → request to the upstream | upstream's answer → answer to the client "
      "| on the path | after the writes | total | user CPU µs a push, 1 conn | "
      "instructions per µs of user CPU |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|")
    for proxy, target, label in (("peer", NGINX1, "nginx `proxy_pass` (1 worker)"),
                                 ("gateway", GATEWAY, "gateway memory://")):
        r = paths[proxy]
        total = r["on_path"] + r["after"]
        users = [x["cpu"]["proxy_user_s"] * 1e6 / x["wrk"]["requests"] for x in runs
                 if x["target"] == target and x["conns"] == 1 and "cpu" in x
                 and x["cpu"].get("proxy_user_s") is not None and x["wrk"]["requests"] > 0]
        user = median(users) if users else None
        per_us = f"{total / user:,.0f}" if user else "—"
        p(f"| {label} | {r['to_upstream'] / 1e3:.1f}k | {r['to_client'] / 1e3:.1f}k | "
          f"{r['on_path'] / 1e3:.1f}k | {r['after'] / 1e3:.1f}k | {total / 1e3:.1f}k | "
          f"{num(user, 1)} | {per_us} |")
    p("")
    if steps:
        guard = sum(x["instructions"] for x in steps)
        rest = paths["gateway"]["on_path"] - guard
        # after_write: what the step costs once its leg's write has gone (absent in records
        # of the script before it counted that part).
        after = sum(x.get("after_write", 0) for x in steps)
        p("| what guarding the push costs the gateway | leg | on the path | after the leg's "
          "write |")
        p("|---|---|---:|---:|")
        for x in steps:
            leg = "wake → upstream" if x["leg"] == 0 else "upstream → client"
            p(f"| {x['what']} | {leg} | {x['instructions'] / 1e3:.1f}k | "
              f"{x.get('after_write', 0) / 1e3:.1f}k |")
        p(f"| **guarding, all of it** | both | **{guard / 1e3:.1f}k** | **{after / 1e3:.1f}k** |")
        p(f"| the rest: HTTP in and out, the upstream exchange | both | {rest / 1e3:.1f}k "
          f"(nginx's whole path: {paths['peer']['on_path'] / 1e3:.1f}k) | |")
        p("")
    others = sorted({shape(r) for r in recs if r["kind"] == "push_path"} - {(12, False)})
    rows = []
    for data_bytes, as_pubsub in others:
        of = {r["proxy"]: r for r in recs
              if r["kind"] == "push_path" and shape(r) == (data_bytes, as_pubsub)}
        if set(of) != {"peer", "gateway"}:
            continue
        what = f"{data_bytes:,} bytes of data"
        if as_pubsub:
            what += ", as Pub/Sub sends it (OIDC token and Google's headers, 5 attributes)"
        flags = f"--data-bytes {data_bytes}" + (" --as-pubsub" if as_pubsub else "")
        totals = {k: v["on_path"] + v["after"] for k, v in of.items()}
        rows.append(f"| {what} (`{flags}`) | {of['peer']['on_path'] / 1e3:.1f}k / "
                    f"{totals['peer'] / 1e3:.1f}k | {of['gateway']['on_path'] / 1e3:.1f}k / "
                    f"{totals['gateway'] / 1e3:.1f}k | "
                    f"{totals['gateway'] / totals['peer']:.2f}× |")
    if rows:
        p("Other pushes through both (`bench/push_path.sh` with the options named): what each "
          "proxy spends on a bigger envelope, and on a push as Pub/Sub sends one.")
        p("")
        p("| push | nginx: on the path / total | gateway: on the path / total "
          "| total, gateway ÷ nginx |")
        p("|---|---:|---:|---:|")
        for row in rows:
            p(row)
        p("")


# OidcVerifier::verify() (bench/oidc_bench): a token verified before against a fresh one.
def oidc_report(recs, p):
    rows = {r["tokens"]: r for r in recs if r["kind"] == "oidc"}
    if set(rows) != {"fresh", "repeated"}:
        return
    fresh, repeated = rows["fresh"]["us_per_verify"], rows["repeated"]["us_per_verify"]
    p("**An OIDC-authenticated push: `OidcVerifier::verify()`** (`bench/oidc_bench`, one thread, "
      "RS256 tokens over a 2048-bit key with Pub/Sub's claims, the key set from a file). A "
      "fresh token has its signature checked and its JSON decoded; a repeated one, as Pub/Sub "
      "sends for up to an hour, has only its claims judged again:")
    p("")
    p("| token | µs a verify | calls |")
    p("|---|---:|---:|")
    for name, label in (("fresh", "fresh (256 distinct, more than the 64 remembered)"),
                        ("repeated", "repeated (one token)")):
        r = rows[name]
        p(f"| {label} | {r['us_per_verify']:.2f} | {r['calls']:,} |")
    p(f"| repeated ÷ fresh | {repeated / fresh:.3f} | |")
    p("")


def pipelining_report(groups, p):
    """Redis: the default (pipelined) against `?pipelines=0`, a connection per call, same rounds."""
    rows = sorted(t for (b, path, t) in groups if b == "redis-unpipelined" and path == "pair")
    if not rows:
        return
    p("#### Redis pipelining: the default against a connection per call (`?pipelines=0`), same rounds")
    p("")
    p("| threads | pipelined pairs/s | CPU µs/pair | a connection per call, pairs/s | CPU µs/pair "
      "| pipelined ÷ per call |")
    p("|---:|---:|---:|---:|---:|---:|")
    for t in rows:
        on, off = groups.get(("redis", "pair", t), []), groups[("redis-unpipelined", "pair", t)]
        on_rate, off_rate = median([r["rate"] for r in on]), median([r["rate"] for r in off])
        on_cpu = median([r["cpu_us_per_op"] for r in on if "cpu_us_per_op" in r])
        off_cpu = median([r["cpu_us_per_op"] for r in off if "cpu_us_per_op" in r])
        gain = f"{on_rate / off_rate:.2f}×" if on_rate and off_rate else "—"
        p(f"| {t} | {num(on_rate)} | {num(on_cpu, 1)} | {num(off_rate)} | {num(off_cpu, 1)} | {gain} |")
    p("")


def peer_report(recs, groups, p):
    """Redis: the library against AWS Lambda Powertools' idempotency (bench/peer), same run."""
    peers = [r for r in recs if r["kind"] == "peer"]
    overlap = next((r for r in recs if r["kind"] == "peer_overlap"), None)
    if not peers and not overlap:
        return
    p("#### Redis: the library against the Powertools peer, same Redis, same run")
    p("")
    if peers:
        first = peers[0]
        setup = next((r for r in recs if r["kind"] == "store_setup"), {})
        window = (f"{setup['peer_seconds']} s measured after {setup['peer_warmup']} s unrecorded"
                  if "peer_seconds" in setup else f"{first['seconds']:.0f} s measured")
        p(f"- peer: `@aws-lambda-powertools/idempotency` {first['powertools']} (`makeIdempotent` "
          f"of a no-op on its Redis layer, `CachePersistenceLayer`) + `@redis/client` "
          f"{first['redis_client']}, Node.js {first['node']}, a Lambda-like context registered "
          "(`getRemainingTimeInMillis` 60 s, our lease); N calls in flight on one event loop and "
          f"its one connection, each a message id never used before, {window}; client CPU = "
          "`process.cpuUsage()` (user + system, the whole process) over the measured window ÷ "
          "messages. Ours: the Redis pair rows above (N threads, the default 2 pipelined "
          "connections), and N pairs in flight from one thread by `claim_async` / "
          "`complete_async` (the backend's I/O thread and its connection). In each round the "
          "peer runs between our two runs at the same count, and every Redis run (ours, the "
          "peer's, redis-benchmark's) starts on an emptied database")
        p("")
    by_t = {}
    for r in peers:
        by_t.setdefault(r["threads"], []).append(r)

    def per_round(ours, theirs, field):
        theirs_by_round = {r["round"]: r[field] for r in theirs}
        return median([r[field] / theirs_by_round[r["round"]] for r in ours
                       if field in r and theirs_by_round.get(r["round"])])

    # What Redis's own C client spends on two calls at the same count (redis-benchmark's SET NX
    # PX, run with the limits): the floor of a client that sends one call at a time.
    def rb_two_calls(t):
        return median([2 * r["client_cpu_us_per_call"] for r in recs
                       if r["kind"] == "floor" and r["backend"] == "redis" and r["threads"] == t
                       and "client_cpu_us_per_call" in r])

    # What a blocking pair cannot cost less than here (store_bench floor, same run): two bare
    # round trips on one connection, and one thread's wake-up of another, on one core (the
    # cheapest) and across cores.
    def floor_median(path, field, pinned=None):
        return median([r[field] for r in recs if r["kind"] == "blocking_floor"
                       and r["path"] == path and r.get("pinned") in (pinned, None)])

    bare_pair = floor_median("pair", "client_cpu_us_per_pair")
    wake = floor_median("wake", "cpu_us_per_wake", pinned=True)
    wake_any = floor_median("wake", "cpu_us_per_wake", pinned=False)

    # At one thread (or one call in flight) a caller makes its own round trips; above it, a
    # design may share connections instead, and the cheaper way is the floor.
    def blocking_floor(t):
        if t == 1:
            return bare_pair
        ways = [f for f in (bare_pair, 2 * wake if wake is not None else None) if f is not None]
        return min(ways) if ways else None

    rate_rows, cpu_rows = [], []
    # Ours two ways: N blocking threads (pair), and N pairs in flight from one thread by
    # claim_async / complete_async (async), which is how the peer keeps N calls in flight.
    for path, how in (("pair", "threads"), ("async", "in flight")):
        for t in sorted(by_t):
            theirs = by_t[t]
            ours = groups.get(("redis", path, t), [])
            if not ours:
                continue
            label = f"{t} {'thread' if how == 'threads' and t == 1 else how}"
            bad = sum(r["unexpected"] for r in ours + theirs)
            invalid = f"INVALID ({bad} unexpected answers or errors)" if bad else None
            rate_ratio = per_round(ours, theirs, "rate")
            targeted = t == PEER_RATE_AT
            if invalid:
                rv = invalid
            elif rate_ratio is None:
                rv = ""
            else:
                rv = verdict(rate_ratio >= PEER_RATE_MIN) if targeted else "info"
            rate_rows.append(
                f"| ours: {label} | {num(median([r['rate'] for r in ours]))} "
                f"| {num(median([r['rate'] for r in theirs]))} "
                f"| {num(median([r['p50_us'] for r in theirs]), 1)} "
                f"| {num(median([r['p99_us'] for r in theirs]), 1)} "
                f"| {'—' if rate_ratio is None else f'{rate_ratio:.2f}×'} "
                f"| {f'≥ {PEER_RATE_MIN:.0f}×' if targeted else '— (info)'} | {rv} |")
            our_cpu = median([r["cpu_us_per_op"] for r in ours if "cpu_us_per_op" in r])
            cpu_ratio = per_round(ours, theirs, "cpu_us_per_op")
            cv = invalid or ("" if our_cpu is None else verdict(our_cpu <= CPU_US_MAX))
            crv = invalid or ("" if cpu_ratio is None else verdict(cpu_ratio <= CPU_RATIO_MAX))
            # One call in flight on an event loop waits as a blocking call does: the loop
            # sleeps in epoll_wait until the reply and sends and receives it alone.
            floor = blocking_floor(t) if path == "pair" or t == 1 else None
            cpu_rows.append(
                f"| ours: {label} | {num(our_cpu, 1)} | {num(floor, 1)} "
                f"| ≤ {CPU_US_MAX:.0f} µs | {cv} "
                f"| {num(rb_two_calls(t), 1)} "
                f"| {num(median([r['cpu_us_per_op'] for r in theirs]), 1)} "
                f"| {'—' if cpu_ratio is None else f'{cpu_ratio:.2f}×'} | ≤ {CPU_RATIO_MAX:.2f}× | {crv} |")
    if rate_rows:
        p("| ours (peer: as many calls in flight) | ours pairs/s | peer messages/s | peer p50 µs "
          "| peer p99 µs | ours ÷ peer | target | |")
        p("|---:|---:|---:|---:|---:|---:|---|---|")
        for row in rate_rows:
            p(row)
        p("")
        p("| ours (peer: as many calls in flight) | ours client CPU µs/pair "
          "| a blocking pair's floor here, µs | target | "
          "| redis-benchmark's client, CPU µs per 2 calls | peer client CPU µs/message "
          "| ours ÷ peer | target | |")
        p("|---:|---:|---:|---|---|---:|---:|---:|---|---|")
        for row in cpu_rows:
            p(row)
        p("")
        if bare_pair is not None or wake is not None:
            p("| what a blocking pair cannot cost less than here, without the library "
              "(`store_bench floor`) | client CPU µs a pair | ≤ 8 µs a pair |")
            p("|---|---:|---|")
            def reach(floor):
                return "reachable" if floor <= CPU_US_MAX else "impossible here"

            if bare_pair is not None:
                p(f"| each call on a connection of its own: two bare blocking round trips "
                  f"(`SET NX PX GET`, then `SET XX PX`: a send and a blocking receive each) | "
                  f"{num(bare_pair, 1)} | {reach(bare_pair)} |")
            if wake is not None:
                p(f"| calls that share connections: each caller woken by the thread that read its "
                  f"reply, twice a pair (a futex wake-up and a sleep, both threads' CPU, on one "
                  f"core: {num(wake, 1)} µs each; across cores {num(wake_any, 1)}) | "
                  f"{num(2 * wake, 1)} | {reach(2 * wake)} |")
            p("")
            p("A caller that blocks for each reply either makes its own round trips (each a "
              "send and a blocking receive: the first row) or shares a connection and sleeps "
              "until the thread that reads the replies wakes it, at least once a call (the "
              "second row, before any send or receive, which that design adds in batches). At "
              "one thread, or one call in flight on an event loop, only the first applies; "
              "above, the cheaper of the two is the floor. The floor column is that figure. "
              "Where it is above a target (≤ 8 µs, or 0.20× the peer's CPU), no client that "
              "waits for each reply can meet that target here; calls in flight from one thread "
              "(no wake-up a call) are where it is met.")
            p("")
        p("redis-benchmark's client: the CPU Redis's own C client (an event loop, as many "
          "connections as ours has threads or calls in flight) spent on two `SET NX PX` round "
          "trips in the same run, a pair's two calls: with one connection, the least any client "
          "that sends one call at a time can spend here.")
        p("")
        p("Peer latency is per message (its two round trips, SET NX EX then SET EX, and the "
          "wrapper); ours in the table above is per store call.")
        p("")
    if overlap:
        w, wo = overlap["with_context"], overlap["without_context"]

        def refused(x):
            return ", ".join(f"{v} × {k}" for k, v in x["refusals"].items()) or "none"

        p(f"Overlapping duplicates (peer; each of {w['keys']} keys called twice at once, the "
          f"handler running {overlap['handler_ms']} ms): **with** the registered context "
          f"{w['executed_twice']} of {w['keys']} keys ran the handler twice (refused: "
          f"{refused(w)}); **without** one {wo['executed_twice']} of {wo['keys']} ran it twice "
          f"(refused: {refused(wo)}; Powertools warned {wo['warnings']} times that it could not "
          "determine the remaining time). Without `getRemainingTimeInMillis` the in-progress "
          "record has no in-progress expiry, so a concurrent duplicate takes it for an orphan, "
          "takes it over and runs again.")
        p("")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    ap.add_argument("--duration", default="10")
    ap.add_argument("--warmup", default="2")
    ap.add_argument("--elapsed", default="?")
    ap.add_argument("--gateway", default="?")
    ap.add_argument("--root", default=".")
    ap.add_argument("--load", default="?", help="load averages before the bench started")
    ap.add_argument("--store-bench", default=None, help="the store part's driver")
    ap.add_argument("--json", default=None, help="also write the report as one JSON document")
    a = ap.parse_args()
    recs = [json.loads(line) for line in open(a.records) if line.strip()]
    runs = [r for r in recs if r["kind"] == "wrk"]
    # The first round's run of each target (every part measures it), and each round's of the
    # runs the throughput part repeats; the verdicts take the median of the rounds' own ratios.
    by = {(r["target"], r["conns"]): r for r in runs if r.get("round", 1) == 1}
    rounds = {}
    for r in runs:
        rounds.setdefault((r["target"], r["conns"]), {})[r.get("round", 1)] = r
    out = []
    p = out.append

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open("/proc/loadavg") as f:
        end_load = " ".join(f.read().split()[:3])
    p(f"### `./dev bench` — {now}")
    p("")
    p(f"- machine: {machine(a.root, a.gateway)}")
    if a.store_bench and any(r["kind"] == "store" for r in recs):
        p(f"- store driver: `{os.path.relpath(a.store_bench, a.root)}` (same tree)")
    p(f"- the load generators, the servers and the code measured share these {os.cpu_count()} "
      "cores (nothing pinned): ratios from the same run are the result, absolute numbers are "
      f"not; load average (1/5/15 min) just before the bench: {a.load}, at its end: {end_load}")
    if runs:
        p(f"- each wrk run: {a.warmup} s warm-up (not recorded), then {a.duration} s measured; POST "
          "of a Pub/Sub push envelope (~170 B) with a unique messageId per request; upstream: "
          "nginx `return 200`")
    p(f"- the bench took {a.elapsed} s")
    p("")

    if runs:
        p("| target | conns (wrk threads) | req/s | p50 µs | p99 µs | errors | valid |")
        p("|---|---|---:|---:|---:|---|---|")
        for r in runs:
            w = r["wrk"]
            n, kinds = errors(w)
            err = str(n) + (" (" + ", ".join(f"{k} {v}" for k, v in kinds.items()) + ")" if kinds else "")
            bad = outcome_problems(r)
            if bad:
                err += "; gateway outcomes " + ", ".join(f"{k} {v}" for k, v in bad.items())
            p(f"| {run_label(r)} | {r['conns']} ({r['threads']}) | {w['rps']:,.0f} | {w['p50_us']} "
              f"| {w['p99_us']} | {err} | {'ok' if valid(r) else '**INVALID**'} |")
        p("")

    # Where the CPU went: on a box whose cores the load generator, the upstream and the proxy
    # share, a saturated run's rate is the cores over the CPU all of them spend per request.
    cpu_runs = [r for r in runs if "cpu" in r and r["target"] in (DIRECT, NGINX1, NGINX2, GATEWAY, GATEWAY_REDIS)
                and r["wrk"]["requests"] > 0]
    if cpu_runs:
        p("CPU per request in each measured run (µs; `/proc/PID/stat` of the proxy and the "
          "upstream, nginx masters with their workers, and wrk's own from bash's `time`):")
        p("")
        p("| target | conns | proxy user | proxy kernel | upstream | wrk | sum | cores ÷ sum, req/s |")
        p("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in cpu_runs:
            c, n = r["cpu"], r["wrk"]["requests"]
            us = {k: v * 1e6 / n for k, v in c.items()}
            parts = [us.get("proxy_user_s"), us.get("proxy_sys_s"), us["upstream_s"], us["wrk_s"]]
            total = sum(x for x in parts if x is not None)
            cells = " | ".join("—" if x is None else f"{x:.1f}" for x in parts)
            p(f"| {run_label(r)} | {r['conns']} | {cells} | {total:.1f} | "
              f"{os.cpu_count() / total * 1e6:,.0f} |")
        p("")

    push_path_report(recs, runs, p)
    oidc_report(recs, p)

    targets = []

    def paired(num, den):
        """The rounds both runs have, or None when one of them is INVALID."""
        common = sorted(set(rounds.get(num, {})) & set(rounds.get(den, {})))
        pairs = [(rounds[num][k], rounds[den][k]) for k in common]
        return None if any(not (valid(a) and valid(b)) for a, b in pairs) else pairs

    def each(pairs, f):
        """f of each round's pair, as `(median, the rounds' values)`."""
        values = [f(a, b) for a, b in pairs]
        return median(values), values

    def ratio(num, den):
        if num in by and den in by:
            pairs = paired(num, den)
            if pairs is None:
                return None, "INVALID"
            v, values = each(pairs, lambda a, b: a["wrk"]["rps"] / b["wrk"]["rps"])
            return v, None if len(values) < 2 else "rounds " + " / ".join(f"{x:.2f}" for x in values)
        return None, "not run"

    for c in (1, 16):
        for peer, is_target in ((NGINX1, True), (NGINX2, False)):
            v, why = ratio((GATEWAY, c), (peer, c))
            if why == "not run":
                continue
            label = f"gateway ÷ {peer.replace('nginx peer ', 'nginx ')} req/s, {c} conn"
            if v is None:
                targets.append((label, why, f"≥ {THROUGHPUT_RATIO_MIN:.1f}×" if is_target else "—", "INVALID"))
            else:
                targets.append((label, f"{v:.2f}×" + (f" ({why}; the median)" if why else ""),
                                f"≥ {THROUGHPUT_RATIO_MIN:.1f}×" if is_target else "— (info)",
                                verdict(v >= THROUGHPUT_RATIO_MIN) if is_target else ""))

    # The sidecar's usual deployment, for information: what a real store costs it.
    v, why = ratio((GATEWAY_REDIS, 16), (GATEWAY, 16))
    if why != "not run":
        targets.append(("gateway on redis:// ÷ on memory:// req/s, 16 conn",
                        why if v is None else f"{v:.2f}×", "— (info)", "INVALID" if v is None else ""))

    # Added p50 at 1 connection: each round's p50 through the proxy less that round's direct
    # p50. The target compares the two proxies, so its verdict is the median of each round's
    # gateway − nginx (the direct p50 cancels out); the medians of each proxy's own are shown.
    def p50s(t):
        return {k: r["wrk"]["p50_us"] for k, r in rounds.get((t, 1), {}).items() if valid(r)}

    def listed(values, fmt):
        return f" (rounds {' / '.join(fmt(x) for x in values)}; the median)" if len(values) > 1 else ""

    d, n1, n2, g = p50s(DIRECT), p50s(NGINX1), p50s(NGINX2), p50s(GATEWAY)
    common = sorted(set(d) & set(n1) & set(g))
    if common and len(common) == len(rounds.get((GATEWAY, 1), {})):
        added_n = [n1[k] - d[k] for k in common]
        added_g = [g[k] - d[k] for k in common]
        gaps = [g[k] - n1[k] for k in common]
        gap = median(gaps)
        targets.append(("added p50 at 1 conn: nginx (1 worker)",
                        f"{median(added_n):.0f} µs" + listed(added_n, str), "—", ""))
        if 1 in n2 and 1 in d:
            targets.append(("added p50 at 1 conn: nginx (2 workers)", f"{n2[1] - d[1]} µs", "— (info)", ""))
        targets.append(("added p50 at 1 conn: gateway",
                        f"{median(added_g):.0f} µs" + listed(added_g, str), "—", ""))
        targets.append(("gateway − nginx added p50", f"{gap:+.0f} µs" + listed(gaps, lambda x: f"{x:+d}"),
                        f"≤ +{ADDED_P50_SLACK_US} µs", verdict(gap <= ADDED_P50_SLACK_US)))
    elif (GATEWAY, 1) in by:
        targets.append(("added p50 at 1 conn", "a run was INVALID", "", "INVALID"))

    for r in recs:
        if r["kind"] == "rss" and "peak_vmrss_kb" in r:
            peak = max(r["peak_vmrss_kb"], r["vmrss_kb"], r["vmhwm_kb"]) / 1024
            targets.append((f"{r['target']}: peak RSS (VmHWM)", f"{peak:.1f} MB",
                            f"< {RSS_MAX_MB} MB", verdict(peak < RSS_MAX_MB)))

    slow = next((r for r in recs if r["kind"] == "slowloris"), None)
    slow_run = next((r for r in runs if "slowloris" in r["target"]), None)
    if slow and slow_run:
        p99_ms = slow_run["wrk"]["p99_us"] / 1000
        ok = valid(slow_run)
        targets.append((f"p99 with {slow['client']['conns']} slowloris conns open, wrk -c1",
                        f"{p99_ms:.2f} ms", f"< {SLOWLORIS_P99_MAX_MS} ms",
                        verdict(p99_ms < SLOWLORIS_P99_MAX_MS) if ok else "INVALID"))
        n, _ = errors(slow_run["wrk"])
        targets.append(("errors / non-2xx during slowloris", str(n), "0", verdict(n == 0)))

    purge_runs = {r["target"]: r for r in runs if "--purge-interval" in r["target"]}
    without = next((r for t, r in purge_runs.items() if t.endswith("--purge-interval 0")), None)
    with_purge = next((r for t, r in purge_runs.items() if not t.endswith("--purge-interval 0")), None)
    purged = next((r["purged"] for r in recs if r["kind"] == "purge" and r["interval"] != "0"), None)
    def claim_p99(interval):
        # The upper bound of the histogram bucket holding the 99th percentile claim (the
        # gateway's counts are cumulative over the process's life, warm-up included).
        r = next((r for r in recs if r["kind"] == "purge" and r["interval"] == interval), None)
        if not r or not r.get("claim_buckets"):
            return None
        total = r["claim_buckets"][-1][1]
        for bound, count in r["claim_buckets"]:
            if total and count >= 0.99 * total:
                return bound
        return None

    if without and with_purge:
        c0, c1 = claim_p99("0"), claim_p99(next(r["interval"] for r in recs
                                                if r["kind"] == "purge" and r["interval"] != "0"))
        if c0 is not None and c1 is not None:
            targets.append(("claim p99 (histogram bucket) on sqlite:// (1 s ttl): no purge → purging every 1 s",
                            f"≤ {c0} s → ≤ {c1} s", "— (info)", ""))
        ok = valid(without) and valid(with_purge)
        targets.append(("p99 at -c16 on sqlite:// (1 s ttl): purging every 1 s ÷ no purge",
                        f"{with_purge['wrk']['p99_us'] / max(without['wrk']['p99_us'], 1):.2f}× "
                        f"({with_purge['wrk']['p99_us'] / 1000:.2f} / {without['wrk']['p99_us'] / 1000:.2f} ms; "
                        f"{purged} records purged)",
                        "— (info)", "" if ok else "INVALID"))

    if targets:
        p("| measure | measured | target | |")
        p("|---|---:|---|---|")
        for t in targets:
            p("| " + " | ".join(t) + " |")
        p("")

    rss = [r for r in recs if r["kind"] == "rss"]
    if rss:
        p("| memory | VmRSS idle | VmRSS peak (sampled every 200 ms) | VmRSS after | VmHWM |")
        p("|---|---:|---:|---:|---:|")
        for r in rss:
            def mb(k):
                return f"{r[k] / 1024:.1f} MB" if k in r else "—"
            p(f"| {r['target']} | {mb('idle_kb')} | {mb('peak_vmrss_kb')} | {mb('vmrss_kb')} | {mb('vmhwm_kb')} |")
        p("")

    if slow:
        c = slow["client"]
        base = by.get((GATEWAY, 1))
        base_txt = f"{base['wrk']['p99_us'] / 1000:.2f} ms" if base else "not run"
        life = (f"{c['closed_lifetime_min_s']}–{c['closed_lifetime_median_s']} s (min–median)"
                if c["closed_lifetime_median_s"] is not None else "none closed")
        p(f"Slowloris ({slow['note']}): {c['conns']} slow connections kept pending "
          f"({slow['established_at_start']} established when wrk started, "
          f"{slow['established_at_end']} when it stopped); the gateway closed "
          f"{c['closed_by_server']} of {c['opened']} opened, after {life} (seen at the client's "
          f"1 s tick); "
          f"{c['refused']} connects refused. Gateway p99 at -c1 without them: {base_txt}.")
        p("")
    store_report(recs, p)
    print("\n".join(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(json_document(out, recs), f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
