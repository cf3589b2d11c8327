#!/usr/bin/env python3
"""report.py RECORDS.jsonl [--duration S --warmup S --elapsed S --gateway PATH --root DIR]

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


def verdict(ok):
    return "PASS" if ok else "**FAIL**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    ap.add_argument("--duration", default="10")
    ap.add_argument("--warmup", default="2")
    ap.add_argument("--elapsed", default="?")
    ap.add_argument("--gateway", default="?")
    ap.add_argument("--root", default=".")
    ap.add_argument("--load", default="?", help="load averages before the bench started")
    a = ap.parse_args()
    recs = [json.loads(line) for line in open(a.records) if line.strip()]
    runs = [r for r in recs if r["kind"] == "wrk"]
    by = {(r["target"], r["conns"]): r for r in runs}
    out = []
    p = out.append

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    p(f"### `./dev bench` — {now}")
    p("")
    p(f"- machine: {machine(a.root, a.gateway)}")
    p(f"- wrk, the nginx processes and the gateway share these {os.cpu_count()} cores "
      "(nothing pinned): ratios from the same run are the result, absolute numbers are not; "
      f"load average (1/5/15 min) just before the bench: {a.load}")
    p(f"- each run: {a.warmup} s warm-up (not recorded), then {a.duration} s measured; POST of a "
      "Pub/Sub push envelope (~170 B) with a unique messageId per request; upstream: nginx "
      f"`return 200`; the bench took {a.elapsed} s")
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
            p(f"| {r['target']} | {r['conns']} ({r['threads']}) | {w['rps']:,.0f} | {w['p50_us']} "
              f"| {w['p99_us']} | {err} | {'ok' if valid(r) else '**INVALID**'} |")
        p("")

    targets = []

    def ratio(num, den):
        if num in by and den in by:
            if not (valid(by[num]) and valid(by[den])):
                return None, "INVALID"
            return by[num]["wrk"]["rps"] / by[den]["wrk"]["rps"], None
        return None, "not run"

    for c in (1, 16):
        for peer, is_target in ((NGINX1, True), (NGINX2, False)):
            v, why = ratio((GATEWAY, c), (peer, c))
            if why == "not run":
                continue
            label = f"gateway ÷ {peer.replace('nginx peer ', 'nginx ')} req/s, {c} conn"
            if why:
                targets.append((label, why, f"≥ {THROUGHPUT_RATIO_MIN:.1f}×" if is_target else "—", "INVALID"))
            else:
                targets.append((label, f"{v:.2f}×",
                                f"≥ {THROUGHPUT_RATIO_MIN:.1f}×" if is_target else "— (info)",
                                verdict(v >= THROUGHPUT_RATIO_MIN) if is_target else ""))

    def p50(t):
        r = by.get((t, 1))
        return r["wrk"]["p50_us"] if r and valid(r) else None

    d, n1, n2, g = p50(DIRECT), p50(NGINX1), p50(NGINX2), p50(GATEWAY)
    if d is not None and n1 is not None and g is not None:
        added_n, added_g = n1 - d, g - d
        targets.append(("added p50 at 1 conn: nginx (1 worker)", f"{added_n} µs", "—", ""))
        if n2 is not None:
            targets.append(("added p50 at 1 conn: nginx (2 workers)", f"{n2 - d} µs", "— (info)", ""))
        targets.append(("added p50 at 1 conn: gateway", f"{added_g} µs",
                        f"≤ nginx + {ADDED_P50_SLACK_US} µs",
                        verdict(added_g <= added_n + ADDED_P50_SLACK_US)))
        targets.append(("gateway − nginx added p50", f"{added_g - added_n:+d} µs",
                        f"≤ +{ADDED_P50_SLACK_US} µs", verdict(added_g - added_n <= ADDED_P50_SLACK_US)))
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
    print("\n".join(out))


if __name__ == "__main__":
    main()
