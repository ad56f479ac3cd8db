"""The GPU model's time for each entry of an A/B run, written before the run (issues 11, 14).

lab/ab_wgmma_speed.py names its entries `default` (forward()'s build for the call), `default-again` (the same,
timed twice), `default+KNOB=V[+KNOB=V]` (forward()'s build with knobs: kernels.fa2_wgmma.with_knobs) and build
names (kernels.fa2_wgmma.named_builds); SDPA's backends beside. This prices the same
entries on the same cells (batch * N = 16k, hidden 2048) as do_bench times them, so a prediction can be committed
before the run and read against it after (`over_default`: time / forward()'s build in the cell).

    PYTHONPATH=. python -m lab.predict_ab --dims 128 --seqs 512,1024 --variants default,default+BLOCK_N=64 \
        [--causal 0,1] [--dtypes fp16,bf16] [--sdpa flash,cudnn] [--out FILE.json] [--about TEXT]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

TOKENS, HIDDEN = 16384, 2048  # lab/ab_wgmma_speed.py's cells


def parse_variants(text: str) -> list[tuple[str, set | None]]:
    """"base,dynamic,ahead@64" -> [(name, head dims or None for all)]; "@64+128" limits a variant to d = 64, 128.
    The A/B's --variants (lab/ab_wgmma_speed.py imports it from here)."""
    out = []
    for item in (x for x in text.split(",") if x):
        name, _, dims = item.partition("@")
        out.append((name, {int(x) for x in dims.split("+")} if dims else None))
    return out


def variant_knobs(variant: str) -> dict:
    """"default+A=1+B=2" -> {"A": 1, "B": 2} (plain "default": {}): the knobs an A/B's default+ entry adds to forward()'s
    build (lab/ab_wgmma_speed.py default_with_config, lab/knob_ab.py read the name the same way)."""
    return {k: int(v) for k, v in (kv.split("=") for kv in variant.split("+")[1:])}


def entry_config(variant: str, d: int, n_k: int, causal: bool) -> dict | None:
    """The fa2_wgmma build an A/B entry runs for this call (lab/ab_wgmma_speed.py entries): forward()'s build for
    default, default-again and default-memset, with the knobs for default+KNOB=V (kernels.fa2_wgmma.with_knobs), a
    named build's own config for its name. An unknown name is an error here."""
    from kernels import fa2_wgmma

    if variant in ("default", "default-again", "default-memset"):
        return fa2_wgmma.with_knobs(d, n_k, causal, {})
    if variant.startswith("default+"):
        return fa2_wgmma.with_knobs(d, n_k, causal, variant_knobs(variant))
    return fa2_wgmma.named_build(d, variant)


def predict_rows(dims, seqs, variants, causals=(False, True), dtypes=("fp16", "bf16"), sdpa=("cudnn",)) -> list[dict]:
    """variants: names, or (name, head dims or None) pairs as parse_variants gives them."""
    from gpumodel import gpu_model as gm

    pairs = [v if isinstance(v, tuple) else (v, None) for v in variants]
    for dtype in dtypes:
        if dtype not in ("fp16", "bf16"):
            raise ValueError(f"dtype {dtype!r}: fp16 or bf16")
    rows = []
    for d in dims:
        for n in seqs:
            b, h = TOKENS // n, HIDDEN // d
            for dtype in dtypes:
                for causal in causals:
                    ref = None
                    entries = [(v, "fa2_wgmma", dict(config=cfg)) for v, vd in pairs if vd is None or d in vd
                               for cfg in [entry_config(v, d, n, causal)] if cfg is not None]
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
    ap = argparse.ArgumentParser(prog="python -m lab.predict_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="128")
    ap.add_argument("--seqs", default="512,1024,2048")
    ap.add_argument("--variants", default="default", help="A/B entry names, as lab/ab_wgmma_speed.py takes them")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sdpa", default="cudnn")
    ap.add_argument("--out", default="", help="write the rows as JSON here")
    ap.add_argument("--about", default="", help="what the prediction is for (recorded with the commit)")
    a = ap.parse_args(argv)
    try:
        rows = predict_rows([int(x) for x in a.dims.split(",")], [int(x) for x in a.seqs.split(",")],
                            parse_variants(a.variants), [x == "1" for x in a.causal.split(",")],
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
            # "-dirty": code or data outside results had uncommitted changes, so the commit alone does not
            # reproduce the rows (result files, this prediction among them, do not count)
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
            if subprocess.check_output(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                        ":(exclude)results"], text=True).strip():
                commit += "-dirty"
        except (OSError, subprocess.CalledProcessError):
            commit = None
        with open(a.out, "w") as f:
            json.dump(dict(about=a.about, commit=commit, args=vars(a), rows=rows), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
