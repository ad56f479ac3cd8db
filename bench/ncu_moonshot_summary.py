"""Summarise bench/ncu_moonshot.sh's CSV: one line per profiled launch, the metrics that say where time goes.

    python bench/ncu_moonshot_summary.py bench/results/ncu_moonshot.csv
"""
from __future__ import annotations

import csv
import io
import re
import sys

WANT = {  # ncu section metric name -> column
    "Duration": "ms", "Compute (SM) Throughput": "SM %", "Memory Throughput": "mem %",
    "Issue Slots Busy": "issue %", "Executed Ipc Active": "IPC", "Registers Per Thread": "regs",
    "Achieved Occupancy": "occ %", "Warp Cycles Per Issued Instruction": "cyc/inst",
}
STALL = re.compile(r"^Stall (.+)$")


def main(path: str) -> int:
    lines = open(path).read().splitlines()
    launches = [line.split("target launched ", 1)[1] for line in lines if "target launched " in line]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        print("no ncu rows")
        return 1
    rows: dict = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        rows.setdefault(r["ID"], {"kernel": r["Kernel Name"][:40]})[r["Metric Name"]] = (r["Metric Value"],
                                                                                          r["Metric Unit"])
    for i, (rid, m) in enumerate(sorted(rows.items(), key=lambda kv: int(kv[0]))):
        label = launches[i] if i < len(launches) else "?"
        vals = []
        for name, col in WANT.items():
            v, unit = m.get(name, ("-", ""))
            if name == "Duration" and unit in ("usecond", "us"):
                v = f"{float(v.replace(',', '')) / 1e3:.3f}"
            elif name == "Duration" and unit in ("nsecond", "ns"):
                v = f"{float(v.replace(',', '')) / 1e6:.3f}"
            vals.append(f"{col} {v}")
        stalls = sorted(((float(v.replace(",", "")), STALL.match(k).group(1)) for k, (v, _) in m.items()
                         if STALL.match(k) and v not in ("", "n/a")), reverse=True)[:4]
        print(f"{label}\n    " + ", ".join(vals) + "\n    top stalls (cycles per issued instruction): "
              + ", ".join(f"{s} {v:.2f}" for v, s in stalls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
