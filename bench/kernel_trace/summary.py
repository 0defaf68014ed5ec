#!/usr/bin/env python3
"""Summarises a kernel_trace CSV (bench/kernel_trace/kernel_trace.cpp): per training step, the GPU's busy time
against the step's span, the idle gaps and what the host was doing in them, and the kernels by total time.

    python3 bench/kernel_trace/summary.py TRACE.csv [--step-kernel embedding_forward] [--skip 2] [--top 40]

A step starts at each launch of --step-kernel's first match (the embedding lookup that opens every forward pass);
the first --skip steps (warm-up) are left out. "Busy" is the union of kernel, memcpy and memset intervals, so two
streams' overlapping kernels count once. A gap is time with nothing on the GPU; each large one is listed with the
kernels on either side and the host calls that were running in it (a synchronisation, a host-to-device copy, ...).
"""
import argparse
import bisect
import collections
import csv
import re
import shutil
import subprocess
import sys


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    result = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = result.stdout.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def short(name, width=110):
    name = re.sub(r"\(.*\)$", "", name)  # argument lists say little here
    return name if len(name) <= width else name[: width - 3] + "..."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--step-kernel", default="embedding_forward")
    parser.add_argument("--skip", type=int, default=2)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--gap-us", type=float, default=20.0, help="list gaps longer than this")
    args = parser.parse_args()

    gpu, api = [], []
    with open(args.trace, newline="") as f:
        for row in csv.DictReader(f):
            item = (int(row["start_ns"]), int(row["end_ns"]), row["kind"], int(row["stream"]), int(row["correlation"]), row["name"])
            (gpu if row["kind"] in ("kernel", "memcpy", "memset") else api).append(item)
    gpu.sort()
    api.sort()
    names = demangle(sorted({g[5] for g in gpu if g[2] == "kernel"}))
    starts = [g[0] for g in gpu if g[2] == "kernel" and args.step_kernel in names[g[5]]]
    if len(starts) < args.skip + 2:
        print(f"found {len(starts)} launches of a kernel matching '{args.step_kernel}': too few steps", file=sys.stderr)
        return 1
    steps = list(zip(starts[args.skip:-1], starts[args.skip + 1:]))
    launch_of = {a[4]: a for a in api if a[4]}
    api_starts = [a[0] for a in api]

    per_name = collections.defaultdict(lambda: [0, 0])
    gap_total = busy_total = span_total = 0
    starved = 0  # kernels that began less than 5 us after their launch call returned: the GPU waited for the host
    listed = []
    for begin, end in steps:
        items = [g for g in gpu if begin <= g[0] < end]
        cursor, busy = begin, 0
        previous = None
        for g in items:
            s, e = g[0], min(g[1], end)
            if s > cursor:
                gap = s - cursor
                gap_total += gap
                if gap / 1e3 >= args.gap_us:
                    listed.append((gap, previous, g, cursor, s))
            busy += max(0, e - max(s, cursor))
            cursor = max(cursor, e)
            previous = g
            key = names.get(g[5], g[5]) if g[2] == "kernel" else g[2]
            per_name[key][0] += g[1] - g[0]
            per_name[key][1] += 1
            launch = launch_of.get(g[4])
            if g[2] == "kernel" and launch and s - launch[1] < 5000:
                starved += 1
        if cursor < end:  # idle from the step's last work to the next step's first kernel
            gap_total += end - cursor
            if (end - cursor) / 1e3 >= args.gap_us:
                following = next((g for g in gpu if g[0] >= end), None)
                listed.append((end - cursor, previous, following, cursor, end))
        busy_total += busy
        span_total += end - begin
    n = len(steps)
    print(f"{n} steps (after {args.skip} skipped): span {span_total / n / 1e6:.3f} ms a step, GPU busy "
          f"{busy_total / n / 1e6:.3f} ms, idle {gap_total / n / 1e6:.3f} ms ({100 * gap_total / span_total:.1f}%)")
    kernels = sum(c for k, (t, c) in per_name.items() if k not in ("memcpy", "memset"))
    print(f"{kernels / n:.0f} kernels a step; {starved / n:.0f} of them started < 5 us after their launch returned "
          "(the GPU had nothing queued)")
    def label(g):
        return short(names.get(g[5], g[2]), 60) if g else "-"

    print(f"\nidle gaps >= {args.gap_us:.0f} us, per step (largest first, at most 25):")
    for gap, before, after, s, e in sorted(listed, key=lambda x: -x[0])[:25]:
        host = [a for a in api[bisect.bisect_left(api_starts, s - 2_000_000):bisect.bisect_left(api_starts, e)]
                if a[1] > s and a[0] < e and a[1] - a[0] > 2000]
        calls = collections.Counter(a[5] for a in host)
        print(f"  {gap / 1e3:8.1f} us after {label(before)}  before {label(after)}")
        if calls:
            print("             host: " + ", ".join(f"{k} x{v}" for k, v in calls.most_common(4)))
    print(f"\nkernels by time, ms a step (top {args.top}):")
    total = sum(t for t, c in per_name.values())
    for key, (t, c) in sorted(per_name.items(), key=lambda x: -x[1][0])[: args.top]:
        print(f"  {t / n / 1e6:8.3f}  {100 * t / total:5.1f}%  x{c / n:5.0f}  {short(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
