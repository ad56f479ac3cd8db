"""The decode model's constants (gpumodel/decode_model.py), fitted on a named subset of one decode_speed run and
checked on the rest (gpumodel/decode_heldout.py).

    python -m gpumodel.fit_decode_model results/decode_speed/decode_speed.json     # writes results/decode_model_fit.json

TRAIN: the run's fp16 d = 128 cells (B = 1, 8, 64; caches 1k-128k/256k); held out: every bf16 cell and every d = 64
cell. Fitted, by least squares on log(model / measured):
    split_kv_fast         eta_read (the read stream's rate over the run's device copy: one figure for the GPU),
                          t_round (the per-CTA round beyond lat_dram), t_fixed (the call's fixed time)
    split_kv_fast_paged   t_round, t_fixed at split_kv_fast's eta_read
    split_kv              t_split (its merge's time per split: the S partials walked in turn)
Everything else is the model's own: lat_dram, R_mma_sync of results/gpu_model_fit.json, the H100's datasheet SMs,
clock and L2, the kernels' tiles. scipy is needed for the refit only (predict reads the committed JSON).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from gpumodel import decode_model as dm

ROOT = Path(__file__).resolve().parent.parent
TRAIN_RULE = "fp16, d = 128"


def is_train(cell: dict) -> bool:
    return cell["dtype"] == "fp16" and cell["d"] == 128


def _resid(cells, params):
    return [math.log(dm.price(c, params) / c["measured_ms"]) for c in cells]


def fit(result: dict) -> dict:
    """The constants on TRAIN cells of one decode_speed.json (loaded)."""
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise SystemExit("python -m gpumodel.fit_decode_model needs scipy (pip install scipy)") from None
    cells = [c for c in dm.cells(result) if is_train(c)]
    params = dict(dm.DEFAULT)

    def by(name):
        return [c for c in cells if c["kernel"] == name]

    # split_kv_fast: eta_read, t_round (us), t_fixed (us)
    r = least_squares(lambda x: _resid(by("split_kv_fast"), dict(params, eta_read=x[0], split_kv_fast=dict(
        t_round=x[1] * 1e-6, t_fixed=x[2] * 1e-6))), [1.05, 0.5, 10.0], bounds=([0.8, 0.0, 0.0], [1.3, 20.0, 100.0]),
        diff_step=1e-4)
    params.update(eta_read=float(r.x[0]), split_kv_fast=dict(t_round=float(r.x[1]) * 1e-6,
                                                             t_fixed=float(r.x[2]) * 1e-6))
    r = least_squares(lambda x: _resid(by("split_kv_fast_paged"), dict(params, split_kv_fast_paged=dict(
        t_round=x[0] * 1e-6, t_fixed=x[1] * 1e-6))), [1.0, 10.0], bounds=([0.0, 0.0], [20.0, 100.0]), diff_step=1e-4)
    params["split_kv_fast_paged"] = dict(t_round=float(r.x[0]) * 1e-6, t_fixed=float(r.x[1]) * 1e-6)
    r = least_squares(lambda x: _resid(by("split_kv"), dict(params, split_kv=dict(t_split=x[0] * 1e-6))), [1.0],
                      bounds=([0.0], [50.0]), diff_step=1e-4)
    params["split_kv"] = dict(t_split=float(r.x[0]) * 1e-6)
    return params


def document(result: dict, source: str, params: dict) -> dict:
    cells = dm.cells(result)
    rms = {}
    for split, sel in (("train", [c for c in cells if is_train(c)]), ("held_out", [c for c in cells if not is_train(c)])):
        for kernel in dm.CHECKED:
            res = _resid([c for c in sel if c["kernel"] == kernel], params)
            if res:
                rms[f"{kernel}/{split}"] = round(math.sqrt(sum(x * x for x in res) / len(res)), 4)
    return dict(
        about="gpumodel/decode_model.py's constants: fitted on the train split of one H100 decode_speed run "
              "(gpumodel/fit_decode_model.py), checked on its held-out cells (results/decode_model_h100.json)",
        params=params, source=source, device=result["device"], run_id=result.get("environment", {}).get("run_id"),
        copy_gbps=result.get("copy", {}).get("gbps"), split=f"train: {TRAIN_RULE} (every batch and cache of the run, "
        "split_kv_fast, split_kv_fast_paged and the teaching split_kv); held out: bf16 and d = 64",
        train_cells=sum(is_train(c) for c in cells), held_out_cells=sum(not is_train(c) for c in cells),
        rms_log_error=rms, units="t_round, t_fixed, t_split in seconds; eta_read a ratio to the run's copy rate",
        script="python -m gpumodel.fit_decode_model " + source)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gpumodel.fit_decode_model results/<run>/decode_speed.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    result = json.loads(path.read_text())
    params = fit(result)
    try:
        source = str(path.resolve().relative_to(ROOT))
    except ValueError:
        source = str(path)
    doc = document(result, source, params)
    dm.FIT_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["params"], indent=1))
    print(json.dumps(doc["rms_log_error"], indent=1))
    print(f"wrote {dm.FIT_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
