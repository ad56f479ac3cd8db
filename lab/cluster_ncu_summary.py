"""The cluster ncu table (lab/cluster_ncu_target.py under ncu): per profiled launch, time, DRAM bytes over the
compulsory Q, K, V, O bytes (issue 18's on-chip target: ~1), L2 bytes and tensor-pipe activity.

    python lab/cluster_ncu_summary.py results/fwd_v_once_cluster/speed_tests_ncu/ncu.csv
"""
import csv
import sys


def main(path: str) -> int:
    launches, rows, table = [], {}, []
    for line in open(path):
        if line.startswith("target launched"):
            launches.append(dict(kv.split("=", 1) for kv in line.split()[3:]) | {"name": line.split()[2]})
        elif line.startswith('"'):
            table.append(line)
    for r in csv.DictReader(table):  # the header row ("ID", ..., "Metric Name", "Metric Unit", "Metric Value")
        try:
            rows.setdefault(int(r["ID"]), {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except (KeyError, TypeError, ValueError):
            pass
    ids = sorted(rows)
    # two launches per (kernel, shape): the warm one, then the one "target launched" names
    print(f"{'kernel':16s} {'N':>6s} {'d':>4s} {'CS':>3s} {'ms':>8s} {'DRAM/compulsory':>16s} {'L2 GB':>7s} {'tensor%':>7s}")
    for i, meta in enumerate(launches):
        if 2 * i + 1 >= len(ids):
            break
        m = rows[ids[2 * i + 1]]
        dram = m.get("dram__bytes_read.sum", float("nan")) + m.get("dram__bytes_write.sum", float("nan"))
        print(f"{meta['name']:16s} {meta['n']:>6s} {meta['d']:>4s} {meta['cluster_size']:>3s} "
              f"{m.get('gpu__time_duration.sum', float('nan')) / 1e6:8.3f} {dram / float(meta['compulsory_bytes']):16.3f} "
              f"{m.get('lts__t_bytes.sum', float('nan')) / 1e9:7.2f} "
              f"{m.get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', float('nan')):7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
