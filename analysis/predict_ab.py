"""The GPU model's time for each entry of an A/B run, written before the run (issues 11, 14).

bench/ab_wgmma_speed.py names its entries `default` (forward()'s build for the call), `default-again` (the same,
timed twice), `default+KNOB=V[+KNOB=V]` (forward()'s build with knobs: kernels.fa2_wgmma.with_knobs) and candidate
names (kernels.fa2_wgmma.SIZE_CANDIDATES, TILE_CANDIDATES, speed builds); SDPA's backends beside. This prices the same
entries on the same cells (batch * N = 16k, hidden 2048) as do_bench times them, so a prediction can be committed
before the run and read against it after (`over_default`: time / forward()'s build in the cell).

    PYTHONPATH=. python -m analysis.predict_ab --dims 128 --seqs 512,1024 --variants default,br192-bc64-dyn-oqt \
        [--causal 0,1] [--dtypes fp16,bf16] [--sdpa flash,cudnn] [--out FILE.json] [--about TEXT]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

TOKENS, HIDDEN = 16384, 2048  # bench/ab_wgmma_speed.py's cells


def entry_config(variant: str, d: int, n_k: int, causal: bool) -> dict:
    """The fa2_wgmma build an A/B entry runs for this call."""
    from kernels import fa2_wgmma

    if variant in ("default", "default-again"):
        return fa2_wgmma.with_knobs(d, n_k, causal, {})
    if variant.startswith("default+"):
        knobs = {k: int(v) for k, v in (kv.split("=") for kv in variant.split("+")[1:])}
        return fa2_wgmma.with_knobs(d, n_k, causal, knobs)
    return fa2_wgmma.candidate(d, variant)


def predict_rows(dims, seqs, variants, causals=(False, True), dtypes=("fp16", "bf16"), sdpa=("cudnn",)) -> list[dict]:
    from analysis import gpu_model as gm

    rows = []
    for d in dims:
        for n in seqs:
            b, h = TOKENS // n, HIDDEN // d
            for dtype in dtypes:
                for causal in causals:
                    ref = None
                    entries = [(v, "fa2_wgmma", dict(config=entry_config(v, d, n, causal))) for v in variants]
                    entries += [(f"sdpa_{s}", f"sdpa_{s}", {}) for s in sdpa]
                    for name, kernel, opts in entries:
                        p = gm.predict(kernel, b, h, n, n, d, dtype, causal, **opts)
                        t = gm.as_timed(p, gm.DO_BENCH)
                        ref = t if ref is None and name == "default" else ref
                        rows.append(dict(variant=name, kernel=kernel, d=d, n=n, b=b, h=h, causal=causal, dtype=dtype,
                                         time_s=t, build=p.build, bound=p.bound))
                    for r in rows[-len(entries):]:
                        r["over_default"] = r["time_s"] / ref if ref else None
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.predict_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="128")
    ap.add_argument("--seqs", default="512,1024,2048")
    ap.add_argument("--variants", default="default", help="A/B entry names, as bench/ab_wgmma_speed.py takes them")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sdpa", default="cudnn")
    ap.add_argument("--out", default="", help="write the rows as JSON here")
    ap.add_argument("--about", default="", help="what the prediction is for (recorded with the commit)")
    a = ap.parse_args(argv)
    try:
        rows = predict_rows([int(x) for x in a.dims.split(",")], [int(x) for x in a.seqs.split(",")],
                            [v for v in a.variants.split(",") if v], [x == "1" for x in a.causal.split(",")],
                            a.dtypes.split(","), [s for s in a.sdpa.split(",") if s])
    except (ValueError, KeyError) as e:
        print(f"predict_ab: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    for r in rows:
        ratio = f"x{r['over_default']:.3f}" if r["over_default"] is not None else "(no default entry)"
        print(f"d={r['d']:3d} N={r['n']:5d} {r['dtype']} causal={int(r['causal'])} {r['variant'][:48]:48s} "
              f"{r['time_s'] * 1e6:8.1f} us  {ratio}  {r['bound']}")
    if a.out:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
        except (OSError, subprocess.CalledProcessError):
            commit = None
        with open(a.out, "w") as f:
            json.dump(dict(about=a.about, commit=commit, args=vars(a), rows=rows), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
