"""Fit the GPU model's free constants (gpumodel.gpu_model.PARAMS) on a training split of the committed
benchmarks; everything else is held out and only ever predicted (`fa-traffic validate` reports both).

    PYTHONPATH=. python -m gpumodel.fit_gpu_model      # writes results/gpu_model_fit.json

Training split (TRAIN): fp16, N = 2048 and 8192 only, of
    tc_bench_wgmma_tma.json  fa2_tc, fa2_wgmma (TMA builds), SDPA flash, cuDNN: non-causal and causal (stop 25: the
                             causal rows, for the short causal Q blocks' per-tile costs no non-causal cell exercises)
    tc_bench.json            v_once_tc (every placement/rescale it timed), non-causal
    bench_kernels.json       every teaching kernel (naive, fa1, fa2, v_once lazy and eager), non-causal
Held out: bf16, the other kernels' causal rows, N = 512, 1024, 4096, 16384 (but v_once_tc's, below), the other runs
(tc_bench_run2, tc_bench_wgmma: the older cp.async fa2_wgmma builds, every A/B run), every ncu duration and byte counter.
Not fitted (stop 25): R_wgmma, from the measured wgmma ceiling and the recorded clock (wgmma_rate below).
The events-timed files' cells are compared as GPU time (stop 26): each run's median less the host gap that run
measured per kernel and head dim (gpumodel/measured.py host_gaps), not the model's one launch overhead per kernel.
Objective: the sum of squared log(predicted / measured) times; Nelder-Mead on log-parameters.
Stage 1 fits every constant but R_wgmma on that split with the spilled kernels' extra terms off (lat_dram,
L_gmem_dram = 0). Stage 2 refits SPILL_PARAMS, the constants only a kernel with its f row in HBM depends on
(σ_spill, lat_dram, L_gmem, L_gmem_dram), on the training cells such a kernel runs: the teaching v_once
cells of stage 1 and tc_bench.json v_once_tc fp16 non-causal at every N it timed (2048, 4096, 8192, 16384:
its CTAs/SM, and so its bytes in flight, change with N); the rest stay at stage 1's values.
Stage 3 fits PERSISTENT_PARAMS (L_persistent_steps: a prefetching persistent kernel's latency per work tile, in
tensor + softmax cycles of one tile) on the base split's cells of such kernels (cuDNN: d = 64, 128 at N = 2048,
8192); stages 1 and 2 price them as every other CTA (L_cycles per work tile) and their constants stay as fitted.
Stage 4 fits WG3_PARAMS (sigma_ws3: the warp-specialised overlap share of a CTA with three consumer warpgroups,
fa2_wgmma's Br = 192 at d = 64) on the fp16 non-causal N = 2048 and 8192 cells of those builds in the A/B that first
timed them (results/fwd_wgmma_d64_tiles/: bc192, tiles_ab/rep1, rep2; 12 cells), the others fixed; the stages before see
no such build (the base split's fa2_wgmma is CONFIGS: two warpgroups). Every later run of the Br = 192 builds, bf16,
causal and the other N stay held out. Its cells are timed by do_bench, so its loss compares gpu_model.as_timed.
Stage 1 runs with lat_dram = 0, so it prices neither the spilled kernels' Little's-law cap nor the K/V ring's wait
(gpu_model.ring_wait: fa2_wgmma's TMA builds; of the training cells it moves the d = 64 ones, 4.3% at N = 2048 and
1.3% at 8192, both toward the measured time); both use stage 2's lat_dram.
Before it, `gpumodel.local_memory` refits SDPA flash's spill bytes per step on its one ncu training row
(N = 4096 non-causal; results/local_memory_fit.json), which the L2 level uses.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

from gpumodel import gpu_model as gm
from gpumodel import local_memory
from gpumodel.descriptors import describe
from gpumodel.measured import RESULTS, ab_cells, bench_cells, teaching_cells

TRAIN_N = (2048, 8192)
# v_once_tc with f spilled: its CTAs/SM (so its bytes in flight, Little's law) change with N (the lazy
# block-max array, plan()'s placement), so stage 2 trains on every N it timed, fp16 non-causal
TRAIN_N_V_ONCE_TC = (2048, 4096, 8192, 16384)
SPILL_PARAMS = ("sigma_spill", "lat_dram", "L_gmem", "L_gmem_dram")  # stage 2: what only the spilled (f in HBM) kernels depend on
PERSISTENT_PARAMS = ("L_persistent_steps",)  # stage 3: what only a prefetching persistent kernel (cuDNN) depends on
WG3_PARAMS = ("sigma_ws3",)  # stage 4: what only a CTA of three consumer warpgroups (Br = 192) depends on
WG3_SOURCES = ("fwd_wgmma_d64_tiles/bc192/", "fwd_wgmma_d64_tiles/tiles_ab/rep1/", "fwd_wgmma_d64_tiles/tiles_ab/rep2/")  # the first Br = 192 A/B


CEILING_FILE = RESULTS / "probe_gpu" / "tc_ceiling" / "tc_ceiling.json"  # lab/tc_ceiling.py on the H200 (stop 25)
DATASHEET_CLOCK_MHZ = 1830.0  # the clock the model converts cycles at (counting/gpus.py clock_hz)
# the runs whose recorded clocks set R_wgmma: every run that recorded one when the rate was derived (stop 25); later
# runs stay out of it, so a new run does not move a constant
CLOCK_RUNS = (  # the A/B runs of stops 23 and 24 and the four-pass grid of stop 25 (results/sessions/)
    "fwd_wgmma_causal_sections/kb256_mb1/", "fwd_wgmma_causal_sections/mb4_8_32_run1/",
    "fwd_wgmma_causal_sections/mb4_8_32_run2/", "fwd_wgmma_d128_persistent_long/bc128_bc176/",
    "fwd_wgmma_d128_persistent_long/bc128_bc176_causal/", "fwd_wgmma_d128_persistent_long/bc160_bc128/",
    "fwd_wgmma_d64_causal_rule/bc64_vs_bc96_run1/", "fwd_wgmma_d64_causal_rule/bc64_vs_bc96_run2/",
    "fwd_wgmma_fresh_lengths/d64_causal_n576_960/", "fwd_wgmma_fresh_lengths/n640_5120/",
    "fwd_wgmma_fresh_lengths/n768_12288_run4/", "fwd_wgmma_knob_recheck/desc_step_rescale_rowsum/",
    "fwd_wgmma_ragged_section_first/ab/", "fwd_wgmma_two_q_tiles/ab/", "fwd_wgmma_two_q_tiles/ab_causal/",
    "fwd_wgmma_vs_cudnn_grid/d64_causal_rule_768/", "fwd_wgmma_vs_cudnn_grid/d64_causal_rule_896/",
    "fwd_wgmma_vs_cudnn_grid/four_passes_run1/", "fwd_wgmma_vs_cudnn_grid/four_passes_run2/",
    "fwd_wgmma_vs_cudnn_grid/four_passes_run3/", "fwd_wgmma_vs_cudnn_grid/ragged_section_first/",
    "fwd_wgmma_vs_cudnn_grid/sm_clock/",
)


def wgmma_rate() -> tuple[float, dict]:
    """R_wgmma from two measurements, not the fit: the wgmma ceiling in FLOP per SM clock (lab/tc_ceiling.py: every
    shape and warpgroup count reached 4095 of the dense 4096) times the SM clock the training split's shapes run at
    under the power cap over the datasheet clock the model converts cycles at. The clock: the median recorded
    clock_mhz (bench/harness.py; the runs of CLOCK_RUNS) of the wgmma kernels' (fa2_wgmma, cuDNN) fp16 non-causal
    timings at TRAIN_N, d = 64 and 128. Fitted, R_wgmma traded against sigma_ws along a flat valley of the loss (3838 with
    sigma_ws 0.38, 3316 with 0.15, at the same loss to 0.1%), so the fit could not say which."""
    rows = json.loads(CEILING_FILE.read_text())["rows"]
    ceiling = statistics.median(r["flop_per_clk_sm"] for r in rows if r.get("path") == "wgmma" and "error" not in r)
    clocks = []
    for path in sorted(RESULTS.glob("**/ab_wgmma_speed.json")):
        if not str(path.relative_to(RESULTS)).startswith(CLOCK_RUNS):
            continue
        for r in json.loads(path.read_text()).get("rows", []):
            if (r.get("clock_mhz") and r["variant"] != "sdpa_flash" and r["n"] in TRAIN_N and not r["causal"]
                    and r["d"] in (64, 128) and r["dtype"] in ("float16", "fp16")):
                clocks.append(r["clock_mhz"])
    clock = statistics.median(clocks)
    return ceiling * clock / DATASHEET_CLOCK_MHZ, dict(
        ceiling_flop_per_clk_sm=ceiling, ceiling_source=str(CEILING_FILE.relative_to(RESULTS.parent.parent)),
        clock_mhz=clock, clock_timings=len(clocks), clock_runs=list(CLOCK_RUNS), datasheet_clock_mhz=DATASHEET_CLOCK_MHZ)


def is_train(cell: dict) -> bool:
    """In either stage's training split (validate marks these rows 'train')."""
    return is_train_base(cell) or is_train_spill(cell) or is_train_wg3(cell)


def is_train_base(cell: dict) -> bool:
    if cell["dtype"] != "fp16" or cell["n_q"] not in TRAIN_N or "time_s" not in cell:
        return False
    src, k = cell["source"], cell["kernel"]
    if src == "tc_bench_wgmma_tma.json":  # causal too (stop 25): the per-tile costs of the short causal Q blocks
        return k in ("fa2_tc", "fa2_wgmma", "sdpa_flash", "sdpa_cudnn")
    if cell["causal"]:
        return False
    if src == "tc_bench.json":
        return k == "v_once_tc"
    if src == "bench_kernels.json":
        return True  # every teaching kernel (fa1's occupancy, v_once's round trips need their own cells)
    return False


def is_train_spill(cell: dict) -> bool:
    """Stage 2 (SPILL_PARAMS): v_once_tc with f spilled, fp16 non-causal at every N tc_bench.json timed."""
    return (cell["source"] == "tc_bench.json" and cell["kernel"] == "v_once_tc" and cell["dtype"] == "fp16"
            and not cell["causal"] and cell["n_q"] in TRAIN_N_V_ONCE_TC and "time_s" in cell)


def is_train_wg3(cell: dict) -> bool:
    """Stage 4 (WG3_PARAMS): the three-warpgroup builds' fp16 non-causal cells at TRAIN_N in the first Br = 192 A/B."""
    return (cell["source"].startswith(WG3_SOURCES) and cell["kernel"] == "fa2_wgmma"
            and cell["options"].get("config", {}).get("NWG") == 3 and cell["dtype"] == "fp16" and not cell["causal"]
            and cell["n_q"] in TRAIN_N and "time_s" in cell)


def work_of(cell: dict):
    desc = describe(cell["kernel"], cell["d"], cell["dtype"], cell["causal"], n_q=cell["n_q"], n_k=cell["n_k"],
                    **cell["options"])
    return gm.prepare(desc, cell["batch"], cell["heads"], cell["n_q"], cell["n_k"], cell["d"], cell["dtype"],
                      cell["causal"])


def nelder_mead(f, x0, step=0.3, iters=600, tol=1e-7):
    n = len(x0)
    pts = [list(x0)] + [[x + (step if i == j else 0) for j, x in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        xr = [c[j] + (c[j] - pts[-1][j]) for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [c[j] + 2 * (c[j] - pts[-1][j]) for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [c[j] + 0.5 * (pts[-1][j] - c[j]) for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [[pts[0][j] + 0.5 * (p[j] - pts[0][j]) for j in range(n)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = min(range(n + 1), key=lambda i: vals[i])
    return pts[best], vals[best]


def _sq_log(work, measured, params) -> float:
    """measured: a time in seconds (per-call events: the older bench files), or (seconds, timer) as an A/B records it."""
    t, timer = measured if isinstance(measured, tuple) else (measured, None)
    return math.log(gm.as_timed(gm.predict_work(work, params), timer) / t) ** 2


def _fit_names(names, fixed, works, start, bounded, restarts):
    def params_of(x):
        p = dict(fixed)
        p.update({k: math.exp(v) for k, v in zip(names, x)})
        for k, (lo, hi) in bounded.items():
            if k in p:  # a stage that leaves a constant out (absent: its term off)
                p[k] = min(max(p[k], lo), hi)
        return p

    def loss(x):
        p = params_of(x)
        return sum(_sq_log(w, t, p) for w, t in works)

    x, val = nelder_mead(loss, [math.log(start[k]) for k in names])
    for _ in range(restarts):  # restarts from the best point
        x, val = nelder_mead(loss, x, step=0.1)
    return params_of(x), val


def fit(verbose=True) -> dict:
    """Stage 1: every constant but SPILL_PARAMS on the base split (the spilled kernels' Little's-law cap off:
    lat_dram 0). Stage 2: SPILL_PARAMS on every training cell a spilled (f in HBM) kernel runs, the others
    fixed at stage 1's: the v_once_tc cells of is_train_spill and the teaching v_once cells of stage 1. Stage 3:
    PERSISTENT_PARAMS on the prefetching persistent kernels' base cells. Stage 4: WG3_PARAMS on is_train_wg3's cells."""
    base = [c for c in bench_cells() + teaching_cells() if is_train_base(c)]
    works = [(work_of(c), (c["time_s"], c.get("timer"))) for c in base]  # A/B cells: as their timer measures
    r_wgmma, r_wgmma_from = wgmma_rate()
    fixed = {"lat_dram": 0.0, "L_gmem_dram": 0.0, "R_wgmma": r_wgmma}  # the spilled kernels' terms off; R_wgmma derived
    names = [k for k in gm.DEFAULT_PARAMS if k not in fixed and k not in PERSISTENT_PARAMS + WG3_PARAMS]
    bounded = {"sigma_fa2": (0.0, 1.0), "sigma_ws": (0.0, 1.0), "sigma_ws3": (0.0, 1.0), "eta_lds": (0.05, 1.0),
               "R_wgmma": (500, 4096), "R_mma_sync": (500, 4096),
               "W_sat": (8.0, 64.0), "sigma_spill": (0.0, 1.0), "lat_dram": (0.0, 20000.0),
               "L_persistent_steps": (0.0, 4.0)}
    params, val = _fit_names(names, fixed, works, gm.DEFAULT_PARAMS, bounded, restarts=2)
    spill_cells = [c for c in bench_cells() + teaching_cells() if is_train(c)]
    spill_works = [(w, (c["time_s"], c.get("timer"))) for c in spill_cells for w in [work_of(c)] if w.desc.f == "hbm"]
    fixed = {k: v for k, v in params.items() if k not in SPILL_PARAMS}
    params, _ = _fit_names(list(SPILL_PARAMS), fixed, spill_works, gm.DEFAULT_PARAMS, bounded, restarts=2)
    persistent = [(w, t) for w, t in works if w.desc.grid == "persistent" and w.desc.next_tile_prefetch]
    params, _ = _fit_names(list(PERSISTENT_PARAMS), params, persistent, gm.DEFAULT_PARAMS, bounded, restarts=2)
    wg3 = [(work_of(c), (c["time_s"], c.get("timer"))) for c in ab_cells() if is_train_wg3(c)]
    params, _ = _fit_names(list(WG3_PARAMS), params, wg3, gm.DEFAULT_PARAMS, bounded, restarts=2)
    cells = base + [c for c in spill_cells if not is_train_base(c)]
    works += [(work_of(c), (c["time_s"], c.get("timer"))) for c in cells[len(base):]] + wg3
    val = sum(_sq_log(w, t, params) for w, t in works)
    rms = math.sqrt(val / len(works))
    if verbose:
        print(f"fitted on {len(works)} cells, rms log error {rms:.4f}", file=sys.stderr)
    return dict(params=params, train_cells=len(works), rms_log_error=rms,
                derived={"R_wgmma": r_wgmma_from},
                split="fp16 N in {2048, 8192}: tc_bench_wgmma_tma.json (fa2_tc, fa2_wgmma, sdpa_flash, sdpa_cudnn; "
                      "non-causal and causal), tc_bench.json (v_once_tc, non-causal), bench_kernels.json (every teaching "
                      "kernel, non-causal), events-timed cells as GPU time (the run's median less its measured host gap, "
                      "gpumodel/measured.py host_gaps); R_wgmma not fitted (derived); "
                      "stage 2 (sigma_spill, lat_dram, L_gmem, L_gmem_dram): the spilled (f in HBM) cells among them and tc_bench.json "
                      "v_once_tc fp16 non-causal at N in {2048, 4096, 8192, 16384}; stage 3 (L_persistent_steps): the "
                      "prefetching persistent kernels' cells among the base split (sdpa_cudnn, d = 64 and 128, N in {2048, 8192}); "
                      "stage 4 (sigma_ws3): fa2_wgmma's three-warpgroup (Br = 192) builds, fp16 non-causal N in {2048, 8192}, "
                      "in the first Br = 192 A/B (results/fwd_wgmma_d64_tiles: bc192, tiles_ab/rep1, rep2)",
                script="gpumodel/fit_gpu_model.py",
                measured_inputs="descriptors' issue_per_tile of the profiled FA2-style builds (fa2_tc, sdpa_flash at d = 64, "
                                "128): instruction counts of results/ncu_levels.csv's non-causal rows (gpumodel/issue.py), "
                                "not their times")


def main(argv=None) -> int:
    # no options: the parser is there so that --help (or a typo) says what would be overwritten instead of refitting
    argparse.ArgumentParser(
        prog="python -m gpumodel.fit_gpu_model",
        description=f"Refit the GPU model's free constants on the training split of the committed benchmarks and "
                    f"write {gm.FIT_FILE.relative_to(local_memory.ROOT)} (first {local_memory.FIT_FILE.relative_to(local_memory.ROOT)}: SDPA "
                    "flash's spill constants, which the time fit's L2 level uses). Takes no arguments.").parse_args(argv)
    local_memory.main([])  # SDPA flash's spill constants first: the L2 level the time fit sees uses them
    result = fit()
    gm.FIT_FILE.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["params"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
