"""Reads Nsight Compute's per-instruction source counters (benchmarks/device_ncu.sh with SOURCE=1: `ncu -i R
--page source --csv --print-source sass`) and prints where a kernel's executed instructions and stall samples go.

    python benchmarks/sass_profile.py src_1.csv --rows 16384 [--elems 4096] [--listing]

Per executed SASS instruction: warp instructions executed, per row (--rows) and per thread-row, stall samples. The
summary groups them by opcode; --listing prints every executed instruction in address order (the hot path).
"""
import argparse
import csv
import re
from collections import defaultdict


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    hdr = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    cols = rows[hdr]
    out = []
    for r in rows[hdr + 1:]:
        if len(r) != len(cols):
            continue
        d = dict(zip(cols, r))
        try:
            d["exec"] = int(d["Instructions Executed"] or 0)
            d["thr"] = int(d["Thread Instructions Executed"] or 0)
            d["samples"] = int(d["Warp Stall Sampling (All Samples)"] or 0)
        except ValueError:
            continue
        d["op"] = re.sub(r"^@!?U?P\w+\s+", "", d["Source"].strip()).split(" ")[0]
        out.append(d)
    return rows[0][1] if rows and rows[0] else "", out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--rows", type=int, default=16384, help="rows the launch ran")
    p.add_argument("--elems", type=int, default=4096, help="elements per row")
    p.add_argument("--listing", action="store_true", help="every executed instruction, in address order")
    a = p.parse_args()
    name, ins = load(a.csv)
    total = sum(d["exec"] for d in ins)
    thr = sum(d["thr"] for d in ins)
    samples = sum(d["samples"] for d in ins) or 1
    print(name[:160])
    print(f"warp instructions {total}  per row {total / a.rows:.1f}  thread instructions per element "
          f"{thr / (a.rows * a.elems):.2f}  stall samples {samples}")
    by = defaultdict(lambda: [0, 0])
    for d in ins:
        by[d["op"]][0] += d["exec"]
        by[d["op"]][1] += d["samples"]
    print(f"{'opcode':14s} {'warp inst/row':>13s} {'share':>6s} {'stalls':>6s}")
    for op, (n, s) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        if n:
            print(f"{op:14s} {n / a.rows:13.1f} {100 * n / total:5.1f}% {100 * s / samples:5.1f}%")
    if a.listing:
        for d in ins:
            if d["exec"]:
                print(f"{d['Address'][-5:]} {d['exec'] / a.rows:8.2f} {100 * d['samples'] / samples:5.1f}%  "
                      f"{d['Source'].strip()}")


if __name__ == "__main__":
    main()
