"""Time one source tree's kernels with this tree's harness: the old-vs-new speed check of a runtime change.

    PYTHONPATH=<tree> python bench/ab_speed.py --tag old|new --out DIR

`kernels`, `variants` and `analysis` come from <tree> (PYTHONPATH), the harness from this file's folder
(loaded by path, so both trees are timed by the same code): fa2_wgmma (Hopper only), fa2_tc, v_once_tc
(its default options) and the teaching fa2, fp16, N = 4096, d = 64 and 128, causal and not, batch*N = 16k,
hidden 2048; each checked against the float64 reference on the timed inputs first (harness.measure).
The backwards too (kernels with one: fa2_wgmma, the teaching fa2), timed on the forward's own o and lse.
Also the host time per call on a tiny problem (1, 2, 128, 64), where the launch path is all there is,
and a checksum of each output, forward (o) and backward (dq, dk, dv), on fixed inputs (the same kernels must give
the same bits in both trees). To time an older tree whose packages are named differently, put it first on the
path and this tree after it: PYTHONPATH=<old tree>:. (the old tree's kernels run; what it lacks comes from here).
Writes DIR/ab_speed_<tag>.json; lab/gpu_check_runtime.sh runs it per tree and prints the ratios.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

KERNEL_NAMES = ("fa2_wgmma", "fa2_tc", "v_once_tc", "fa2")


def load_harness():
    spec = importlib.util.spec_from_file_location("ab_harness", Path(__file__).resolve().parent / "harness.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod




def _backward_row(h, name: str, sets, causal: bool) -> dict:
    """The backward of kernel `name` timed on each set's own forward output (o, lse) and a random dO."""
    import torch

    from kernels import KERNELS

    spec = KERNELS[name]
    bsets = []
    for q, k, v in sets:
        o, lse = spec.forward(q, k, v, causal=causal)
        bsets.append((q, k, v, o, lse, torch.randn_like(q)))
    t = h.time_fn(lambda *a: spec.backward(*a, causal=causal), bsets)
    q = sets[0][0]
    flops = 2.5 * h.flops(q.shape[0], q.shape[1], q.shape[2], sets[0][1].shape[2], q.shape[3], causal)
    return dict(kernel=name + " backward", n=q.shape[2], d=q.shape[3], causal=causal, median_ms=t["median_ms"],
                tflops=flops / t["median_ms"] / 1e9, ok=None, rel_err=None, skipped=None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp")
    ap.add_argument("--seqs", default="4096")
    ap.add_argument("--backward", action="store_true", help="time the backwards too (fa2_wgmma, the teaching fa2)")
    args = ap.parse_args(argv)
    h = load_harness()
    seqs = h.int_list(ap, "--seqs", args.seqs, at_most=16384, why="batch*N = 16384 tokens")
    if h.no_gpu("ab_speed"):
        return 2
    import torch

    import kernels
    from kernels import KERNELS

    entries = [h.Entry(n, KERNELS[n].tier, KERNELS[n], {}) for n in KERNEL_NAMES
               if n in KERNELS and KERNELS[n].available()]
    res = dict(tag=args.tag, tree=str(Path(kernels.__file__).resolve().parent.parent), rows=[], host=[],
               checksums={}, run_id=h.run_info()["run_id"], timer=h.timer_name())
    q, k, v = h.random_qkv(1, 2, 128, 128, 64, torch.float16, seed=1)
    do = h.random_qkv(1, 2, 128, 128, 64, torch.float16, seed=2)[0]  # the same dO in every tree and run
    for e in entries:
        o, lse = e.forward(q, k, v, True)
        res["checksums"][e.label] = float(o.double().sum())
        if KERNELS[e.label].backward is not None:
            grads = KERNELS[e.label].backward(q, k, v, o, lse, do, causal=True)
            res["checksums"][e.label + " backward"] = [float(g.double().sum()) for g in grads]
        res["host"].append(dict(kernel=e.label, host_us=h.host_us(lambda e=e: e.forward(q, k, v, False))))
    sdpa = h.entries(["sdpa_flash"])[0]
    res["host"].append(dict(kernel="sdpa_flash", host_us=h.host_us(lambda: sdpa.forward(q, k, v, False))))
    for n in seqs:
        for d in (64, 128):
            b, heads = 16384 // n, 2048 // d
            sets = h.input_sets(b, heads, n, n, d, torch.float16, max_sets=4)
            for causal in (False, True):
                for e in entries:
                    rec = h.measure(e, sets, causal)
                    res["rows"].append({k_: rec.get(k_) for k_ in ("kernel", "n", "d", "causal", "median_ms",
                                                                   "tflops", "ok", "rel_err", "skipped")})
                    print(f"[{args.tag}] {e.label:10s} N={n} d={d} causal={int(causal)} "
                          f"{rec.get('median_ms', float('nan')):8.3f} ms {rec.get('skipped', '')}", flush=True)
                    if args.backward and KERNELS[e.label].backward is not None and not rec.get("skipped"):
                        res["rows"].append(_backward_row(h, e.label, sets, causal))
            del sets
            torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ab_speed_{args.tag}.json").write_text(json.dumps(res, indent=1))
    return 1 if any(r.get("skipped") for r in res["rows"]) else 0


def compare(out: Path, tags=("old", "new")) -> int:
    """The summary table: per (kernel, d, causal) median ms of each tree and new/old; host µs per call."""
    runs = {}
    for path in sorted(out.glob("ab_speed_*.json")):
        r = json.loads(path.read_text())
        runs.setdefault(r["tag"].split("-")[0], []).append(r)
    if not all(t in runs for t in tags):
        print(f"ab_speed: missing runs, have {sorted(runs)}")
        return 1
    old, new = tags

    def best(tag, key, field):  # the lower median over the rounds of one tree
        vals = [row[field] for r in runs[tag] for row in (r["rows"] if field == "median_ms" else r["host"])
                if tuple(row.get(k) for k in key[0]) == key[1] and row.get(field) is not None]
        return min(vals) if vals else None

    print(f"{'kernel':10s} {'N':>5s} {'d':>4s} causal  {old + ' ms':>9s} {new + ' ms':>9s}  new/old")
    worst = 0.0
    keys = list(dict.fromkeys((row["kernel"], row["n"], row["d"], row["causal"]) for row in runs[new][0]["rows"]))
    for kern, n, d, causal in keys:
        key = (("kernel", "n", "d", "causal"), (kern, n, d, causal))
        a, b = best(old, key, "median_ms"), best(new, key, "median_ms")
        ratio = b / a if a and b else float("nan")
        worst = max(worst, ratio) if ratio == ratio else worst
        print(f"{kern:10s} {n:5d} {d:4d} {int(causal):6d}  {a or float('nan'):9.3f} {b or float('nan'):9.3f}  {ratio:7.3f}")
    print(f"\n{'host µs/call (1,2,128,64)':28s} {old:>8s} {new:>8s}")
    for row in runs[new][0]["host"]:
        key = (("kernel",), (row["kernel"],))
        print(f"{row['kernel']:28s} {best(old, key, 'host_us') or float('nan'):8.1f} {best(new, key, 'host_us'):8.1f}")
    same = {k: runs[old][0]["checksums"].get(k) == v for k, v in runs[new][0]["checksums"].items()}
    print(f"\nsame output bits (checksum) old vs new: {same}")
    print(f"worst new/old time ratio: {worst:.3f}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2])))
    sys.exit(main())
