"""Summarise lab/ncu_moonshot.sh's CSV: one line per profiled launch, the metrics that say where time goes.

    python lab/ncu_moonshot_summary.py results/ncu_moonshot.csv
"""
from __future__ import annotations

import csv
import io
import sys

WANT = {  # ncu section metric name -> column
    "Duration": "ms", "Compute (SM) Throughput": "SM %", "Memory Throughput": "mem %",
    "Issue Slots Busy": "issue %", "Executed Ipc Active": "IPC", "Registers Per Thread": "regs",
    "Achieved Occupancy": "occ %", "Warp Cycles Per Issued Instruction": "cyc/inst", "SM Frequency": "SM GHz",
    "L2 Cache Throughput": "L2 %", "DRAM Throughput": "DRAM %", "Grid Size": "CTAs", "Waves Per SM": "waves",
}


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
            elif name == "SM Frequency" and v != "-":
                v = f"{float(v.replace(',', '')) / (1e9 if unit in ('hz', 'Hz', '') else 1e3 if unit == 'Mhz' else 1):.2f}"
            vals.append(f"{col} {v}")
        print(f"{label}\n    " + ", ".join(vals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
