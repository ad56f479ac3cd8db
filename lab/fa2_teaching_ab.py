"""A/B of the teaching fa2's v2 change (kernels/cuda/fa2.cu FA2_OWN_V: V_j in its own buffer), in one run.

    PYTHONPATH=. python lab/fa2_teaching_ab.py [--out DIR]

Both builds (FA2_OWN_V = 0, v1; = 1, v2; the launcher picks 1 at d <= 64 only) are entries of
bench.harness beside the shipped launcher and the teaching naive: checked by the harness's rule
(float64 reference, poisoned outputs, odd shapes, causal, Nq != Nk), then measured (checked again on
the timed inputs, timed by bench.harness.time_fn; fp16, batch*N = 16k, hidden 2048) at N = 4096,
d = 64 (both builds) and d = 128 (the shipped one), causal and not. Writes fa2_teaching_ab.json.
(An earlier run of this script also toggled exp2f for expf: fa2_teaching_ab_v2a.json.)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

BUILDS = {"v1 own_v=0": dict(FA2_OWN_V=0), "v2 own_v=1": dict(FA2_OWN_V=1)}


def build_entry(name: str, flags: dict) -> harness.Entry:
    """One FA2_OWN_V build of kernels/cuda/fa2.cu as a harness entry (64 x 64 blocks, as shipped)."""
    def fn(q, k, v, causal, out=None):
        import torch

        from kernels import _teaching, fa2, loader

        p = _teaching.prepare(q, k, v, causal=causal, scale=None, block_q=64, block_k=64)
        o, lse = out if out is not None else (torch.empty_like(q), torch.empty((p.batch, p.heads, p.n_q),
                                                                                 device=q.device))
        kernel = loader.get_function(fa2.SOURCE, fa2.KERNEL, defines=_teaching.defines(q.dtype, 64, 64, **flags),
                                     device=q.device.index)
        kernel.launch((p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,),
                      (q, k, v, o, lse, p.n_q, p.n_k, p.d, p.scale, int(causal), 1),  # group 1: equal heads
                      shared_mem=fa2.shared_bytes(p.d))
        return o, lse
    return harness.Entry(f"fa2{json.dumps(flags, sort_keys=True)}", "teaching", fn=fn)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent.parent / "results"))
    args = ap.parse_args(argv)
    if harness.no_gpu("fa2_teaching_ab"):
        return 2
    import torch

    builds = {name: build_entry(name, flags) for name, flags in BUILDS.items()}
    shipped = {e.label: e for e in harness.entries(["fa2", "naive"], sdpa=())}
    problems = [(2, 3, 301, 250, d, True, 1.0) for d in (40, 64)] + [(1, 2, 77, 203, 64, False, 1.0)]
    for name, e in builds.items():
        chk = harness.check_entry(e, problems, dtypes=[torch.float16])
        if not chk["ok"]:
            print(f"WRONG {name}: {chk['problems']}", file=sys.stderr)
            return 1
    rows = []
    for d in (64, 128):
        n = 4096
        b, h = 16384 // n, 2048 // d
        sets = harness.input_sets(b, h, n, n, d, torch.float16)
        for causal in (False, True):
            cands = {name: e for name, e in builds.items() if d <= 64 or not BUILDS[name]["FA2_OWN_V"]}
            cands["fa2 (shipped)"], cands["naive"] = shipped["fa2"], shipped["naive"]
            for name, e in cands.items():
                rec = harness.measure(e, sets, causal)
                rows.append(dict(rec, build=name))
                print(f"d={d} causal={int(causal)} {name:18s} {rec.get('median_ms', float('nan')):8.2f} ms "
                      f"{rec.get('tflops', float('nan')):6.2f} TFLOP/s {rec.get('skipped', '')}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fa2_teaching_ab.json").write_text(json.dumps(
        dict(harness.environment(), device=torch.cuda.get_device_name(), rows=rows), indent=1))
    return 1 if any("skipped" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
