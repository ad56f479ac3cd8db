"""Why cuDNN's first timing pass in an A/B cell runs faster than its second (lab/NOTES-tc.md, stop 21): each entry
timed PASSES times in a row of passes, with no correctness check before the first; then the float64 check of cuDNN
on the timed inputs and two more passes of cuDNN alone. If the first pass is fast without the check, the speed-up
comes with the first calls of a shape, not with the check.

    PYTHONPATH=. python lab/pass_probe.py --out DIR       # -> DIR/pass_probe.json, a table on stdout
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CELLS = [(128, 1024, True), (128, 2048, False), (64, 4096, True), (256, 2048, False)]
PASSES = 4


def run(out: Path, dtypes=("bfloat16", "float16")) -> list[dict]:
    import torch

    from bench import harness
    from lab.ab_wgmma_speed import HIDDEN, TOKENS, entries, parse_variants

    rows = []
    for dt in dtypes:
        for d, n, causal in CELLS:
            sets = harness.input_sets(TOKENS // n, HIDDEN // d, n, n, d, getattr(torch, dt), max_sets=2)
            ents = entries(d, parse_variants("default"), n, ("cudnn", "flash"))
            passes = {e.label: [] for e in ents}
            for _ in range(PASSES):
                for e in ents:
                    t = harness.time_fn(lambda q, k, v, e=e: e.forward(q, k, v, causal), sets)
                    passes[e.label].append(t["median_ms"])
            cud = next(e for e in ents if e.label == "sdpa_cudnn")
            chk = harness.check_on(cud, *sets[0], causal)
            after = [harness.time_fn(lambda q, k, v: cud.forward(q, k, v, causal), sets)["median_ms"] for _ in range(2)]
            rows.append(dict(dtype=dt, d=d, n=n, causal=causal, passes=passes, cudnn_after_check=after,
                             cudnn_check_ok=chk["ok"]))
            print(dt, d, n, int(causal), " ".join(f"{k}: " + " ".join(f"{x:.4f}" for x in v) for k, v in passes.items()),
                  "| cudnn after check:", " ".join(f"{x:.4f}" for x in after), flush=True)
            del sets
            torch.cuda.empty_cache()
    out.mkdir(parents=True, exist_ok=True)
    (out / "pass_probe.json").write_text(json.dumps(dict(env=harness.environment(), rows=rows), indent=1))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    out = Path(ap.parse_args(argv).out)
    from bench import harness

    if harness.no_gpu("pass_probe"):
        return 2
    run(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
