#!/usr/bin/env python3
"""summary.py RESULTS LATDIR OUT_TSV: the KL-9 part of `make bench` / `make peers`.

RESULTS holds "NAME<TAB>LINE" rows written by tests/bench/run.sh: NAME is CELL,RUN for the
alternating runs (rf3_1, js_1, rf3_64, rf3_64t, js_64, xfer_1, pg_1, xfer_32, coord, pg_8) or
longpoll, js_source; LINE is that run's key=value output line. Prints every run, the medians
and each KL-9 target as a ratio with PASS/MISS; writes OUT_TSV ("key<TAB>JSON value", which
run.sh turns into summary.json with jq) and, for the plot, LATDIR/CELL.pct (percentile
curves of all runs of a cell together: "nines latency_us" rows, nines = -log10(1 - q)) and
LATDIR/titles.gp (each cell's sample count for the plot's key).
"""
import glob
import json
import math
import os
import sys


def kv(line):
    out = {}
    for tok in (line or "").split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def num(s):
    try:
        v = float(s)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def median(vals):
    v = sorted(x for x in vals if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def fmt(v, unit=""):
    return "n/a" if v is None else ("%.1f%s" % (v, unit))


def load(path):
    runs, other = {}, {}
    for row in open(path):
        name, _, line = row.rstrip("\n").partition("\t")
        if "," in name:
            cell, run = name.split(",", 1)
            runs.setdefault(cell, {})[int(run)] = kv(line)
        else:
            other[name] = line
    return runs, other


def series(runs, cell, key):
    """The values of KEY in CELL's runs, in run order (None where a run gave nothing)."""
    r = runs.get(cell, {})
    return [num(r[i].get(key)) for i in sorted(r)]


def show(title, rows):
    print(title)
    for label, vals, unit in rows:
        print("  %-44s runs: %-34s median %s" % (label, ", ".join(fmt(v) for v in vals) or "none",
                                                  fmt(median(vals), unit)))


def target(label, num_v, den_v, cmp, limit, nu, du):
    if num_v is None or not den_v:
        print("target (KL-9) %s: no data MISS" % label)
        return None
    r = num_v / den_v
    ok = r <= limit if cmp == "<=" else r >= limit
    print("target (KL-9) %s: %.1f %s / %.1f %s = %.2fx (target %s %.1fx) %s"
          % (label, num_v, nu, den_v, du, r, cmp, limit, "PASS" if ok else "MISS"))
    return r


def percentiles(latdir, cell):
    vals = []
    for f in sorted(glob.glob(os.path.join(latdir, "%s.r*.txt" % cell))):
        vals += [x for x in (num(l) for l in open(f)) if x is not None]
    vals.sort()
    n = len(vals)
    with open(os.path.join(latdir, "%s.pct" % cell), "w") as out:
        if n == 0:
            out.write("0 1\n")  # a valid row (log scale) so the other curves still plot
            return 0
        step = max(1, n // 2000)
        for i in range(0, n, step):
            q = (i + 1) / (n + 1)
            out.write("%.4f %.1f\n" % (-math.log10(1 - q), vals[i]))
        out.write("%.4f %.1f\n" % (-math.log10(1 - n / (n + 1)), vals[-1]))
    return n


def main():
    runs, other = load(sys.argv[1])
    latdir, out_tsv = sys.argv[2], sys.argv[3]
    s = {}
    print()
    print("=== KL-9: KeyLoad and its peers, same machine, median of three alternating runs ===")
    print("KeyLoad: RF3 (replica_count 3: every copy fsynced before the ack), sessions required, every")
    print("request sealed, 100-byte bodies; JetStream 2.9 R3: file storage, NOT fsynced before the ack")
    print("(2-minute sync interval), unique Nats-Msg-Id per message; PostgreSQL 15 outbox: one node,")
    print("fsync=on, synchronous_commit=on, three commits per transfer")
    show("1 in flight (one client / one synchronous publisher), latency us:", [
        ("KeyLoad RF3 sealed p50", series(runs, "rf3_1", "p50_us"), " us"),
        ("JetStream R3 p50", series(runs, "js_1", "p50_us"), " us"),
        ("KeyLoad RF3 sealed p99", series(runs, "rf3_1", "p99_us"), " us"),
        ("JetStream R3 p99", series(runs, "js_1", "p99_us"), " us")])
    show("64 in flight:", [
        ("KeyLoad RF3 sealed msgs/s", series(runs, "rf3_64", "msgs_per_s"), ""),
        ("JetStream R3 msgs/s", series(runs, "js_64", "msgs_per_s"), ""),
        ("KeyLoad RF3 sealed p99 us", series(runs, "rf3_64", "p99_us"), " us"),
        ("JetStream R3 p99 us", series(runs, "js_64", "p99_us"), " us"),
        ("KeyLoad CPU us per msg (3 members)", series(runs, "rf3_64", "cpu_us_per_msg"), " us"),
        ("JetStream CPU us per msg (3 servers)", series(runs, "js_64", "cpu_us_per_msg"), " us"),
        ("JetStream client CPU % (one node process)", series(runs, "js_64", "client_cpu_pct"), "%"),
        ("KeyLoad client CPU us per msg (keyload-bench, 1 thread)",
         series(runs, "rf3_64", "client_cpu_us_per_msg"), " us"),
        ("informational: KeyLoad, 64 threads x 1 blocking call, msgs/s", series(runs, "rf3_64t", "msgs_per_s"), ""),
        ("informational: KeyLoad, 64 threads x 1 blocking call, p99 us", series(runs, "rf3_64t", "p99_us"), " us")])
    show("transfers (KeyLoad: Create+Accept+receipt read+Complete, RF3 x 3 partitions):", [
        ("KeyLoad client-driven, 1 in flight /s", series(runs, "xfer_1", "transfers_per_s"), ""),
        ("PostgreSQL outbox, 1 client /s", series(runs, "pg_1", "transfers_per_s"), ""),
        ("KeyLoad client-driven, 32 in flight /s", series(runs, "xfer_32", "transfers_per_s"), ""),
        ("PostgreSQL outbox, 8 clients /s", series(runs, "pg_8", "transfers_per_s"), "")])
    show("coordinator-driven, default config (each run right after that round's client-driven "
         "32-in-flight run, same cluster):", [
        ("KeyLoad coordinator-driven /s", series(runs, "coord", "transfers_per_s"), ""),
        ("its transfers (N) per run", series(runs, "coord", "transfers"), ""),
        ("its p50 create-to-delivered ms", series(runs, "coord", "p50_ms"), " ms")])
    for r, line in sorted(runs.get("coord", {}).items()):
        if line.get("drained", "1") != "1":
            print("  coordinator run %d NOT DRAINED: its rate covers only what was delivered before the "
                  "bench gave up" % r)
    src = kv(other.get("js_source"))
    print("  JetStream sourcing (stream COPY sourcing BENCH, async, no receipt; informational): %s msgs/s "
          "(%s of %s copied)" % (src.get("msgs_per_s", "n/a"), src.get("copied", "?"), src.get("msgs", "?")))

    m = lambda cell, key: median(series(runs, cell, key))
    s["rf3_sealed_1c_p50_us"] = m("rf3_1", "p50_us")
    s["rf3_sealed_1c_p99_us"] = m("rf3_1", "p99_us")
    s["js_1c_p99_us"] = m("js_1", "p99_us")
    s["rf3_sealed_64_msgs_per_s"] = m("rf3_64", "msgs_per_s")
    s["rf3_sealed_64_p99_us"] = m("rf3_64", "p99_us")
    s["cpu_us_per_msg_rf3_64"] = m("rf3_64", "cpu_us_per_msg")
    s["js_1c_p50_us"] = m("js_1", "p50_us")
    s["js_64_msgs_per_s"] = m("js_64", "msgs_per_s")
    s["js_64_p99_us"] = m("js_64", "p99_us")
    s["js_cpu_us_per_msg_64"] = m("js_64", "cpu_us_per_msg")
    s["js_64_client_cpu_pct"] = m("js_64", "client_cpu_pct")
    s["rf3_64_client_cpu_us_per_msg"] = m("rf3_64", "client_cpu_us_per_msg")
    s["rf3_sealed_64threads_msgs_per_s"] = m("rf3_64t", "msgs_per_s")
    s["rf3_sealed_64threads_p99_us"] = m("rf3_64t", "p99_us")
    s["xfer_client_1_per_s"] = m("xfer_1", "transfers_per_s")
    s["xfer_client_32_per_s"] = m("xfer_32", "transfers_per_s")
    s["xfer_coord_per_s"] = m("coord", "transfers_per_s")
    s["pg_outbox_1c_per_s"] = m("pg_1", "transfers_per_s")
    s["pg_outbox_8c_per_s"] = m("pg_8", "transfers_per_s")
    s["js_source_msgs_per_s"] = num(src.get("msgs_per_s"))

    target("RF3 sealed 1 client p50 / JetStream 1 publisher p50", s["rf3_sealed_1c_p50_us"],
           s["js_1c_p50_us"], "<=", 1.0, "us", "us")
    target("RF3 sealed 64 in flight msgs/s / JetStream 64 msgs/s", s["rf3_sealed_64_msgs_per_s"],
           s["js_64_msgs_per_s"], ">=", 1.0, "msgs/s", "msgs/s")
    target("RF3 sealed 64 in flight p99 / JetStream 64 p99", s["rf3_sealed_64_p99_us"], s["js_64_p99_us"],
           "<=", 1.0, "us", "us")
    target("transfers client-driven 32 in flight / PostgreSQL outbox 8 clients", s["xfer_client_32_per_s"],
           s["pg_outbox_8c_per_s"], ">=", 1.0, "/s", "/s")
    target("transfers coordinator (default config) / client-driven 32 in flight", s["xfer_coord_per_s"],
           s["xfer_client_32_per_s"], ">=", 0.8, "/s", "/s")
    c, j = s["cpu_us_per_msg_rf3_64"], s["js_cpu_us_per_msg_64"]
    s["cpu_ratio_rf3_to_js_64"] = c / j if c is not None and j else None
    print("report (KL-9) CPU per acknowledged message, 64 in flight: KeyLoad %s / JetStream %s = %s"
          % (fmt(c, " us"), fmt(j, " us"), "n/a" if s["cpu_ratio_rf3_to_js_64"] is None
             else "%.2fx" % s["cpu_ratio_rf3_to_js_64"]))
    r1 = s["xfer_client_1_per_s"], s["pg_outbox_1c_per_s"]
    if None not in r1 and r1[1]:
        print("report (KL-9) transfers 1 in flight / PostgreSQL outbox 1 client: %.1f / %.1f = %.2fx"
              % (r1[0], r1[1], r1[0] / r1[1]))
    lp = other.get("longpoll", "")
    lpv = kv(lp)
    s["longpoll_idle_entries"] = num(lpv.get("entries"))
    if "entries" in lpv:
        e = int(lpv["entries"])
        print("target (KL-9) idle consumer, 10 s receive --wait-ms 10000 on an empty queue: %d log entries "
              "appended (waited %s ms; target 0) %s" % (e, lpv.get("wait_ms", "?"), "PASS" if e == 0 else "MISS"))
    else:
        print("target (KL-9) idle consumer long-poll: %s" % (lp or "not measured"))

    counts = {c: percentiles(latdir, c) for c in
              ("rf3_1", "js_1", "rf3_64", "js_64", "xfer_1", "pg_1", "xfer_32", "pg_8")}
    s["latency_samples"] = counts
    # Curve titles with their sample counts (latency.gp loads them): an empty cell says so.
    with open(os.path.join(latdir, "titles.gp"), "w") as f:
        for c, n in counts.items():
            f.write('n_%s = "%s"\n' % (c, "n=%d" % n if n else "NO DATA"))
    s["runs"] = {cell: [runs[cell][i] for i in sorted(runs[cell])] for cell in sorted(runs)}
    with open(out_tsv, "w") as f:
        for k, v in s.items():
            f.write("%s\t%s\n" % (k, json.dumps(v if not isinstance(v, float) else round(v, 2))))


if __name__ == "__main__":
    main()
