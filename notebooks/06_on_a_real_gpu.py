# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 6 · On a real GPU
#
# The first five notebooks counted bytes and FLOPs. Here the kernels meet the hardware: the teaching
# CUDA kernels of all four variants (`kernels/`, one `.cu` per variant, mirroring the references), the
# tensor-core kernels `fa2_tc` and `v_once_tc`, and PyTorch's SDPA backends (FlashAttention-2 and cuDNN)
# as the bar to clear.
#
# - **Without a GPU** (this is how the test suite runs it) the notebook reads the measurements
#   committed under `results/` by `bench/bench_kernels.py` and `bench/bench_tc.py` on an H200.
#   Missing files are reported as "not measured yet".
# - **With a GPU** (`torch.cuda.is_available()`), section 4 also runs a small live benchmark through
#   `kernels.KERNELS` and `bench.harness`.
#
# 1. What has been measured.
# 2. Timings: TFLOP/s against $N$.
# 3. The model against the measurements: the GPU model (levels, bound, time) and measured counters.
# 4. Live, when a GPU is present.

# %%
# Setup: make the workbench packages importable from wherever this notebook was opened.
import pathlib, sys
ROOT = pathlib.Path.cwd().resolve()
while not (ROOT / "variants").is_dir() and ROOT != ROOT.parent:
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))

import math
import numpy as np
import torch
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

torch.set_num_threads(1)  # tiny problems: one thread is faster than two
torch.manual_seed(0)
# %matplotlib inline

from analysis.nbtools import human, show_table  # Markdown tables; 1.5 GB, 12 MB, 640 B
from analysis.style import colour, legend_outside, line_style  # one style per kernel, in every plot


# %% [markdown]
# ## 1 · What has been measured

# %%
import json

from analysis.results import RESULTS_DIR as RESULTS, load_records, one_per_shape, run_label
from analysis.style import tier

# The runs this notebook reads, named: a new file in results/ changes nothing here until it is
# listed. One file per tier, so every panel and every comparison inside it comes from one run.
TIMINGS = {"teaching": "bench_kernels.json",        # bench/bench_kernels.py: all four teaching kernels + SDPA
           "tensor-core": "tc_bench_wgmma_tma.json"}  # bench/bench_tc.py: fa2_tc, fa2_wgmma (wgmma + TMA) + SDPA
NCU_FILES = ["tc_ncu.csv", "tc_ncu_wgmma_tma_d64.csv", "tc_ncu_wgmma_tma_d128.csv"]

# %%
runs = {t: [r for r in load_records(name) if "{" not in r["kernel"]] for t, name in TIMINGS.items()}
show_table(["tier", "file", "run", "kernels", "timed records"],
           [[t, TIMINGS[t], run_label(rs), ", ".join(sorted({r["kernel"] for r in rs})), len(rs)]
            for t, rs in runs.items()])

# %% [markdown]
# ## 2 · Timings
#
# TFLOP/s in the two files read here, `bench_kernels.json` and `tc_bench_wgmma_tma.json`, counts the papers'
# FLOPs ($4 B H N^2 d$, halved when causal: exact only for the non-causal rows, since causal $N_q = N_k$ has
# $N(N+1)/2$ visible pairs) over the median time. Every run through `bench/harness.py` since (the A/B runs,
# `cluster_bench*.json`, `bwd_kernels_vs_sdpa_grid/`, and the live run at the end of this notebook) divides
# `counting.headline.attention_flops` (4·d per visible pair) instead; docs/results.md ("How the numbers are counted") lists
# which committed file uses which. Records use batch × $N$ = 16k tokens and hidden size 2048, fp16. Tuning-sweep candidates (kernels whose name
# carries a `{config}`) are left out.

# %%
# each row keeps its own tier (SDPA, the bar to clear, beside the tensor-core kernels): the teaching
# kernels run at a few TFLOP/s and would be a flat line on the tensor-core axis
timed = {t: one_per_shape([r for r in rs if r.get("n") and r.get("d") and r["dtype"] in ("float16", "fp16")
                           and tier(r["kernel"]) in ((t,) if t == "teaching" else (t, "library"))])
         for t, rs in runs.items()}
panels = sorted({(r["d"], r["causal"]) for rs in timed.values() for r in rs})
# one row of panels per tier, each from its own run
fig, axes = plt.subplots(len(timed), len(panels), figsize=(3.6 * len(panels) + 1.8, 3.3 * len(timed)),
                         squeeze=False, sharey="row")
for row, (t, rs) in zip(axes, timed.items()):
    for ax, (d, causal) in zip(row, panels):
        for kernel in sorted({r["kernel"] for r in rs}, key=lambda k: (tier(k) == "library", k)):
            pts = sorted((r["n"], r["tflops"]) for r in rs if (r["kernel"], r["d"], r["causal"]) == (kernel, d, causal))
            if pts:
                ax.plot(*zip(*pts), label=kernel, **line_style(kernel))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_title(f"{t}: d = {d}, {'causal' if causal else 'non-causal'}", fontsize=9)
        ax.grid(True, alpha=0.3)
    row[0].set_ylabel("TFLOP/s (papers' FLOPs)")
    legend_outside(row[-1], title=TIMINGS[t])
fig.suptitle("Measured TFLOP/s, fp16, H200 (linear scale: the gaps are the point)")
fig.tight_layout()
plt.show()
for t, rs in timed.items():
    n_show = max(r["n"] for r in rs)
    kernels_seen = sorted({r["kernel"] for r in rs})
    show_table([f"{t} kernel, N = {n_show}"] + [f"d={d}, {'causal' if c else 'non-causal'}" for d, c in panels],
               [[kernel] + [next((f"{r['tflops']:.1f}" for r in rs if (r["kernel"], r["n"], r["d"], r["causal"])
                                  == (kernel, n_show, d, c)), "—") for d, c in panels]
                for kernel in kernels_seen])
    print(f"TFLOP/s from {run_label(rs)}; —: not measured at this N")

# %% [markdown]
# ## 3 · The model against the measurements
#
# The papers' count is what each thread block *asks* global memory for, as if there were no cache. On
# an H200 that is not what reaches DRAM: the 60 MB L2 serves most re-reads of $K_j, V_j$. The GPU model
# (`gpumodel.gpu_model`, `fa-traffic predict` / `validate`) follows each kernel as it really runs — its
# own tiling, instruction path (wgmma, mma.sync or FFMA), CTAs per SM, waves — and three memory levels
# (`gpumodel.levels`): the papers' count (**requests**), what the SMs send to the **L2**, and what an L2
# residency model lets through to **DRAM**. Its free constants are fitted on a training split
# (fp16, non-causal, N = 2k and 8k); every other cell below is held out. The "bound" is the term that sets the
# model's time: where the SMs' time is the longest, the largest of tensor, softmax (MUFU + ALU), smem and latency
# (dependent round trips), or for the cluster `v_once` exposed (its one fitted term, notebook 5); else L2 or DRAM.

# %%
import re

from counting import closed_forms
from counting.gpus import get_gpu
from analysis.roofline import roofline
from kernels import KERNELS

h200 = get_gpu("h200")
try:  # the fa2_tc block shapes the benchmark ran with (bench_tc.py records them)
    BENCH_FA2_CONFIGS = json.loads((RESULTS / "tc_bench.json").read_text())["meta"]["fa2_tc_configs"]
except (OSError, ValueError, KeyError, TypeError):
    BENCH_FA2_CONFIGS = {}


def model_of(kernel, d):
    # (variant, options, block_q, block_k) of the reference a kernel mirrors; None for SDPA and unknowns
    m = re.fullmatch(r"(naive|fa1|fa2|v_once)(_tc)?(?:[_\[](auto|sram|hbm)[_,](eager|lazy)\]?)?", kernel)
    if not m:
        return None
    variant, tc, placement, rescale = m.groups()
    options = {} if variant != "v_once" else dict(placement=placement or "auto", rescale=rescale or "lazy")
    br = bc = 64  # the teaching kernels' blocks (and v_once_tc's)
    if tc and variant == "fa2" and "fa2_tc" in KERNELS:
        cfg = BENCH_FA2_CONFIGS.get(str(d)) or KERNELS["fa2_tc"].module.CONFIGS.get(d, {})
        br, bc = cfg.get("BLOCK_M", br), cfg.get("BLOCK_N", bc)
    elif tc and "v_once_tc" in KERNELS:
        cfg = KERNELS["v_once_tc"].module.CONFIG
        br, bc = cfg.get("BLOCK_M", br), cfg.get("BLOCK_N", bc)
    return variant, options, br, bc


from gpumodel import validate as val

cells = val.rows()
timed_cells = [r for r in cells if r["quantity"] == "time" and r["n"] >= 2048]
if not timed_cells:
    print("not measured yet: no timings in results/ to compare with the model")
else:
    fig, ax = plt.subplots(figsize=(7, 5.5))
    for kernel in sorted({r["kernel"].split("{")[0] for r in timed_cells}):
        pts = [(r["model"] * 1e3, r["measured"] * 1e3) for r in timed_cells if r["kernel"].split("{")[0] == kernel]
        ax.loglog(*zip(*pts), alpha=0.75, label=kernel, **dict(line_style(kernel, markersize=5), linestyle="none"))
    lo = min(min(r["model"], r["measured"]) for r in timed_cells) * 1e3
    hi = max(max(r["model"], r["measured"]) for r in timed_cells) * 1e3
    for f, ls in ((1.0, "k-"), (1.15, "k:"), (1 / 1.15, "k:")):
        ax.loglog([lo, hi], [lo * f, hi * f], ls, lw=0.8)
    ax.set_xlabel("GPU model time (ms, log scale)")
    ax.set_ylabel("measured median time (ms, log scale)")
    ax.set_title("GPU model against measurement, H200, N ≥ 2k (dotted: ±15%)")
    legend_outside(ax)
    plt.show()
    for s in val.summary(cells):
        if s["banded"]:
            print(f"{s['quantity']:>24s}  {s['tier']:<12s} {s['split']:<9s} {s['in_band']:4d}/{s['banded']:<4d} in band, "
                  f"median |error| {s['median_abs_err']:.1%}")
    rank = val.ranking(cells)
    print(f"ranking: {rank['share']:.1%} of {rank['pairs']} measured pairs (ties within {val.RANK_TIE:.0%}: "
          f"right when the model keeps them within its band); strict, by sign: {rank['strict_share']:.1%}")
    if rank.get("families"):  # the A/B runs of fa2_wgmma's d = 64 builds are what the model cannot order
        print("  by run: " + ", ".join(f"{f} {v:.1%}" for f, v in rank["families"].items()))

# %% [markdown]
# ### What bounds each kernel on the H200
#
# The model's verdict at N = 16k (B = 1, H = 2048/d, fp16, non-causal), with the measured time beside it.
# The verdict the papers' count gives FA2 (left of the ridge: notebooks 1 and 4) does not survive contact with the
# L2: no FA2-style kernel here is DRAM- or L2-bound. The fastest (`fa2_wgmma`, `sdpa_cudnn`) are bound by
# their tensor cores (d = 128) or their softmax (d = 64: MUFU exponentials and ALU work per FLOP double
# when d halves); `fa2_tc` and SDPA flash (mma.sync) by the tensor path; the teaching tier (FFMA, scalar
# shared loads) by shared-memory issue — even naive, whose S and P really do go through DRAM. Only
# spilled `v_once_tc` moves enough bytes for memory to bind: the L2, or DRAM at d = 64 and 16k as below,
# when lazy; eager (not timed at 16k) is DRAM-bound at 4k. The cluster `v_once` keeps its row on chip
# and is bound by `exposed`: the cycles per tile its lone consumer warpgroup cannot hide (notebook 5,
# section 7).

# %%
# one run per kernel: the newest file that timed it (tc_bench_wgmma_tma.json holds today's fa2_wgmma builds)
# "measured" is GPU time: an events-timed file's median less its run's measured host gap (gpumodel.measured.host_gaps)
PREFER = ("tc_bench_wgmma_tma.json", "tc_bench.json", "bench_kernels.json")
verdict = {}
for r in sorted(cells, key=lambda r: PREFER.index(r["source"]) if r["source"] in PREFER else len(PREFER)):
    if r["quantity"] == "time" and r["n"] == 16384 and not r["causal"] and r["dtype"] == "fp16":
        verdict.setdefault((r["kernel"].split("{")[0], r["d"]), r)
show_table(["kernel", "d", "bound (model)", "model", "measured", "model / measured", "measured TFLOP/s"],
           [[k, d, r["bound"], f"{r['model'] * 1e3:.3f} ms", f"{r['measured'] * 1e3:.3f} ms",
             f"{r['ratio']:.2f}", f"{4 * r['batch'] * r['heads'] * r['n'] ** 2 * d / r['measured'] / 1e12:.0f}"]
            for (k, d), r in sorted(verdict.items(), key=lambda kv: (kv[0][1], kv[1]["measured"]))]
           or [["—"] * 7])

# %% [markdown]
# ### What the L2 absorbs
#
# For every kernel Nsight Compute profiled (N = 4k, `results/*ncu*.csv`): the papers' count
# (requests), the model's L2 and DRAM levels, and the counters — `lts__t_bytes` (all L2 traffic,
# including the fabric between the two L2 partitions) and DRAM read + write. Between the first bar and
# the DRAM bars is what the L2 absorbs: for FA2-style kernels nearly all the re-reads of $K_j, V_j$,
# leaving DRAM at about one read of Q, K, V and one write of O. Spilled `v_once` is the exception: its
# f row is too big for the cache. (`fa-traffic validate` checks the model's L2 level against the bytes the
# SMs move over the crossbar, `l1tex__m_xbar2l1tex_read_bytes` + `l1tex__m_l1tex2xbar_write_bytes` in
# `results/ncu_levels.csv`: 0.98–1.03× of the model for every kernel, SDPA flash included (the model
# counts its register spills' write-backs as a local-memory level). The L2 slices' own counters see less
# on non-causal rows, down to 0.58×: requests for one line from CTAs of a head that run in lockstep are
# merged before the slice. See `docs/gpu-model.md`.)

# %%
from gpumodel import gpu_model as gm
from gpumodel.fit_gpu_model import work_of
from gpumodel.measured import ncu_cells

prof = {}
for c in ncu_cells():  # file by file, oldest name first: a later profile of the same kernel replaces it
    if c["n_q"] == 4096 and not c["causal"] and c.get("lts_bytes") and "{" not in c["label"]:
        prof[(c["label"], c["d"])] = c
if not prof:
    print("not measured yet: no ncu counters in results/")
else:
    keys = sorted(prof, key=lambda k: (k[1], k[0]))
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(keys)), 4.5))
    x = np.arange(len(keys))
    series = []
    for key in keys:
        c = prof[key]
        lv = gm.prepare(work_of(c).desc, c["batch"], c["heads"], c["n_q"], c["n_k"], c["d"], c["dtype"],
                        c["causal"]).levels
        series.append((lv.requests_bytes, lv.l2_bytes, c["lts_bytes"], lv.dram_bytes, c["dram_bytes"],
                       lv.compulsory_bytes))
    labels = ["requests (papers' count)", "L2 (model)", "L2 lts__t_bytes (ncu)", "DRAM (model)", "DRAM (ncu)"]
    # dots on a log axis, not bars: a bar's length means nothing on a log scale, and the levels span 3 decades
    marks = (("s", "none"), ("o", "none"), ("o", None), ("D", "none"), ("D", None))  # hollow: model, filled: ncu
    level_colour = ("tab:gray", "tab:blue", "tab:blue", "tab:red", "tab:red")
    for i, (lab, w) in enumerate(zip(labels, (-0.24, -0.12, 0, 0.12, 0.24))):
        ax.plot(x + w, [s[i] / 1e9 for s in series], marks[i][0], mfc=marks[i][1] or level_colour[i],
                color=level_colour[i], ms=6, ls="none", label=lab)
    # a short line per kernel (hlines: its legend entry is a line, where a 30-point marker ran into the text)
    ax.hlines([s[5] / 1e9 for s in series], x - 0.3, x + 0.3, colors="k", lw=1.5,
              label="Q, K, V read once + O written once")
    ax.set_yscale("log")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.set_xticks(x, [f"{k}\nd={d}" for k, d in keys], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("GB (whole problem, log scale)")
    ax.set_title("What the L2 absorbs: requests → L2 → DRAM, H200, N = 4096, fp16")
    legend_outside(ax)
    fig.tight_layout()
    plt.show()
    show_table(["kernel", "d", "requests", "DRAM (ncu)", "DRAM / compulsory", "absorbed by the L2"],
               [[k, d, human(s[0]), human(s[4]), f"{s[4] / s[5]:.2f}", f"{1 - s[4] / s[0]:.0%}"]
                for (k, d), s in zip(keys, series)])


# %% [markdown]
# **Measured counters.** `bench/bench_tc.py target --what ncu` launches each tensor-core kernel (and
# SDPA) once on two representative shapes under Nsight Compute; `results/tc_ncu.csv` holds the
# counters. DRAM bytes are real HBM traffic; L2 (`lts__t_bytes`) bytes are what the SMs moved through
# the L2 cache. The papers' count charges every re-read of $K_j, V_j$ to HBM, with no cache, so it should
# sit near the **L2** figure, while DRAM sees each input about once — except for `v_once`'s spilled
# $f$ row, which is too big for the cache:

# %%
from analysis.results import find_counter_records, load_ncu

ncu_rows = []
for name in NCU_FILES:
    for m in load_ncu(RESULTS / name):
        if "n" not in m:
            continue
        n, d, b, h = (int(m[x]) for x in ("n", "d", "b", "h"))
        dram = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
        l2 = m.get("lts__t_bytes.sum")
        model = model_of(m["kernel"], d)
        model_bytes = None
        if model:
            variant, options, br, bc = model
            model_bytes = closed_forms.counts(variant, b, h, n, n, d, dtype="fp16", block_q=br, block_k=bc,
                                              sram_bytes=h200.sram_bytes, **options).hbm_bytes
        ncu_rows.append([m["kernel"], n, d, f"{b}×{h}", human(dram), human(l2) if l2 else "—",
                         human(model_bytes) if model_bytes else "—",
                         f"{l2 / model_bytes:.2f}" if l2 and model_bytes else "—",
                         f"{m.get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', float('nan')):.0f} %",
                         f"{m.get('gpu__time_duration.sum', float('nan')) / 1e6:.3f} ms"])
if ncu_rows:
    show_table(["kernel", "N", "d", "B×H", "DRAM read + write", "L2 bytes", "model HBM bytes", "L2 / model",
                "tensor pipe active", "time (ncu)"], ncu_rows)

counter_rows = []
for f in (RESULTS / name for name in TIMINGS.values()):
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        continue
    for rec in find_counter_records(data):
        kernel = str(rec.get("kernel") or rec.get("label") or "?")
        dram = {k: v for k, v in rec.items() if "dram" in str(k).lower() and isinstance(v, (int, float))}
        n, d = rec.get("n", rec.get("n_q")), rec.get("d")
        model = model_of(kernel.split("{")[0], d) if n and d else None
        model_bytes = "—"
        if model:
            variant, options, br, bc = model
            b, h = rec.get("batch", rec.get("b", 1)), rec.get("heads", rec.get("h", 1))
            model_bytes = human(closed_forms.counts(variant, b, h, n, n, d, causal=bool(rec.get("causal")),
                                                    block_q=br, block_k=bc, sram_bytes=h200.sram_bytes,
                                                    **options).hbm_bytes)
        counter_rows.append([f.name, kernel, n, d, ", ".join(f"{k} = {human(v) if v > 1e4 else v}" for k, v in dram.items()),
                             model_bytes])
if counter_rows:
    show_table(["file", "kernel", "N", "d", "measured DRAM counters", "model HBM bytes"], counter_rows[:20])
if not ncu_rows and not counter_rows:
    print("not measured yet: no DRAM counters (ncu) in results/")

# %% [markdown]
# **What each kernel costs the SM.** `bench/bench_tc.py resources` records, per tensor-core build,
# registers per thread, shared memory per thread block and the resulting occupancy — the quantity the
# model does not see, and the one that decides `v_once` (notebook 5):

# %%
res_path = RESULTS / "tc_resources.json"
try:
    resources = [r for r in json.loads(res_path.read_text()) if isinstance(r, dict) and r.get("default") is not False]
except (OSError, ValueError, AttributeError):
    resources = []
builds = {}
for r in resources:  # fp16 builds, one row per distinct build
    defs = r.get("defines", {})
    if not defs.get("IS_BF16"):
        builds.setdefault((r.get("kernel"), tuple(sorted(defs.items()))), r)
if not builds:
    print("not measured yet: no results/tc_resources.json")
else:
    keep = ("HEAD_DIM", "PLACEMENT_SRAM", "RESCALE_LAZY", "BLOCK_M", "BLOCK_N")
    show_table(["kernel", "build (fp16)", "registers / thread", "spills (bytes)", "shared memory / block",
                "blocks / SM", "occupancy"],
               [[r.get("kernel"), ", ".join(f"{k}={v}" for k, v in r.get("defines", {}).items() if k in keep),
                 r.get("registers"), r.get("spill_stores", 0),
                 human(r["smem_per_cta"], binary=True) if "smem_per_cta" in r else "grows with N (the f row)",
                 r.get("ctas_per_sm", "—"), f"{r['occupancy']:.1%}" if "occupancy" in r else "—"]
                for r in builds.values()][:16])

# %% [markdown]
# ### The clock under the power cap
#
# The model turns cycles into seconds at one clock. The H200 does not run at one: under these kernels the
# board sits at its power cap (about 690 W), and the SM clock is whatever that power buys — it depends on
# what each kernel draws. `lab/clock_probe.py` timed each kernel six times per shape while `nvidia-smi`
# read the SM clock every 50 ms (`results/probe_gpu/sm_clock_power_cap`; a *stop* is one numbered round of this
# project's GPU work, with its notes in `lab/NOTES-tc.md` and `results/sessions/stopNN/`). A time
# is cycles / clock, so kilocycles = ms × MHz separates the work from the clock:

# %%
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

clock_path = RESULTS / "probe_gpu" / "sm_clock_power_cap" / "clock_probe.json"
try:
    clock_rows = json.loads(clock_path.read_text())["rows"]
except (OSError, ValueError, KeyError):
    clock_rows = []
if not clock_rows:
    print("not measured yet: no results/probe_gpu/sm_clock_power_cap/clock_probe.json")
else:
    cells = {}
    for r in clock_rows:  # that run's keys: median_ms, mhz (median SM clock over the timing's window)
        if r.get("mhz"):
            cells.setdefault((r["d"], r["n"], r["causal"], r["label"]), {}).setdefault(r["dtype"], []).append(r)
    med = lambda rs, k: float(np.median([x[k] for x in rs]))  # noqa: E731
    table = []
    for (d, n, causal, label), by in cells.items():
        if {"float16", "bfloat16"} <= set(by):
            f16, b16 = by["float16"], by["bfloat16"]
            table.append([label, d, n, "yes" if causal else "no",
                          f"{med(f16, 'mhz'):.0f} / {med(b16, 'mhz'):.0f}",
                          f"{med(f16, 'median_ms') / med(b16, 'median_ms'):.3f}",
                          f"{med(f16, 'median_ms') * med(f16, 'mhz') / (med(b16, 'median_ms') * med(b16, 'mhz')):.3f}"])
    show_table(["kernel", "d", "N", "causal", "SM MHz fp16 / bf16", "time fp16 / bf16", "cycles fp16 / bf16"], table)
    labels = sorted({k[3] for k in cells})
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, label in enumerate(labels):
        xs = [(k, dt) for k in cells if k[3] == label for dt in ("float16", "bfloat16") if dt in cells[k]]
        ax.scatter([med(cells[k][dt], "median_ms") * med(cells[k][dt], "mhz") / 1e3 for k, dt in xs],
                   [med(cells[k][dt], "mhz") for k, dt in xs], color=colour(label), label=label,
                   marker="o", s=[30 if dt == "float16" else 60 for _, dt in xs])
    ax.set_xscale("log")
    # plain numbers: the log axis's default minor labels (2×10⁻¹, 3×10⁻¹, 4×10⁻¹) ran into one another
    ax.xaxis.set_major_locator(FixedLocator([0.2, 0.5, 1, 2, 4]))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("megacycles per call (ms × MHz / 1000, log scale)")
    ax.set_ylabel("SM clock (MHz) while timed")
    ax.set_title("H200 at its power cap: the clock each kernel runs at (small: fp16, large: bf16)")
    legend_outside(ax)
    plt.show()

# %% [markdown]
# Read it as the machine, not the paper: the same kernel does the same cycles in fp16 and bf16, but at
# d = 128 the wgmma kernels (`fa2_wgmma`, cuDNN) run 3–5% faster in bf16 (1–2% at d = 64): for the same
# work bf16 draws less power, so the cap allows a higher clock. SDPA's FlashAttention-2 (mma.sync, a less
# busy tensor pipe) runs near the 1.98 GHz boost in both, gaining 0–2%, while the wgmma kernels run lower.
# A benchmark therefore times the kernel *and* the clock it earned: from stop 23 every timing in
# `bench/harness.py` records the SM clock over its window, and the A/B prints each lead over cuDNN in time
# and in cycles.

# %% [markdown]
# ### What one clock buys
#
# If the clock moves, what is fixed is the work per clock. `lab/tc_ceiling.py` measures it (stop 25): each SM runs
# nothing but one kind of instruction on operands already on chip and reads its own cycle counter around the loop,
# so the answer is per clock, whatever clock the power cap set. The tensor cores, the exponential unit and the FP32
# lanes, against the figures the model had taken from the datasheets:

# %%
ceiling_path = RESULTS / "probe_gpu" / "tc_ceiling" / "tc_ceiling.json"
ceiling_rows = json.loads(ceiling_path.read_text())["rows"] if ceiling_path.exists() else []
if not ceiling_rows:
    print("not measured yet: no results/probe_gpu/tc_ceiling/tc_ceiling.json")
else:
    pipes = {}  # path -> (best measured per SM clock, datasheet figure, unit)
    for r in ceiling_rows:
        if "error" in r or r["path"] == "lds":  # shared loads: over the guide's figure, not understood (NOTES stop 25)
            continue
        rate = r.get("flop_per_clk_sm", r.get("per_clk_sm"))
        best = pipes.get(r["path"], (0, 0, ""))[0]
        pipes[r["path"]] = (max(best, rate), r.get("datasheet", 4096), r.get("unit", "FLOP"))
    show_table(["pipe", "per SM clock", "measured", "datasheet", "measured / datasheet"],
               [[p, u, f"{m:.1f}", d, f"{m / d:.3f}"] for p, (m, d, u) in pipes.items()])
    fit = json.loads((RESULTS / "gpu_model_fit.json").read_text())
    src = fit["derived"]["R_wgmma"]
    print(f"the model's wgmma rate: {src['ceiling_flop_per_clk_sm']:.0f} per clock x {src['clock_mhz']:.0f} MHz "
          f"(the training shapes' recorded clock) / {src['datasheet_clock_mhz']:.0f} MHz = {fit['params']['R_wgmma']:.0f}")

# %% [markdown]
# wgmma does the dense 4096 FLOP per SM clock, every shape; mma.sync (SDPA's FlashAttention-2) two thirds of it. So
# the distance between a Hopper kernel and the 989 TFLOP/s of the datasheet, which is quoted at 1.83 GHz, is first the
# clock the cap allows (1.6–1.9 GHz here) and then the cycles the kernel spends not multiplying. The model used to
# fit its wgmma rate; it fitted 3838 per clock at 1.83 GHz, which is this ceiling at 1.715 GHz: the clock its d = 128
# cells run at. It now takes the measured ceiling and the recorded clock, and fits only what no instruction loop can
# measure: how much of the softmax the products hide.

# %% [markdown]
# ### Predicting a change before it is built
#
# A model earns trust when it says what a change will do before the GPU does. Every A/B of this project
# times forward()'s build beside variants of it (`default+KNOB=V`, `lab/ab_wgmma_speed.py`) and forward()'s
# build again as a control. `lab.knob_ab` asks the model for each variant's ratio to forward()'s build
# and sets it beside the measured ratio. Stop 24's runs (`results/sessions/stop24`) were planned this way: the
# model was asked first.
#
# - d = 128's persistent build at causal N > 4096: faster except at N = 10240.
# - At 10240, 16 heads in sections of three leave one head's longest tiles to run last and alone.
# - Run that section first: the loss becomes a gain.

# %%
from lab import knob_ab

# the A/B runs of stop 24 (results/sessions/stop24/README.md), each under the knob it timed
STOP24 = ("fwd_wgmma_d128_persistent_long/", "fwd_wgmma_ragged_section_first/",
          "fwd_wgmma_causal_sections/kb256_mb1/", "fwd_wgmma_two_q_tiles/")

ab_rows = knob_ab.rows(source=STOP24)
if not ab_rows:
    print("not measured yet: no A/B variant rows of stop 24's runs in results/")
else:
    families = {"SECTION_RAGGED_FIRST": "ragged section first", "PERSISTENT": "persistent past 4k",
                "CAUSAL_SECTION_KB": "smaller sections", "Q_SLOTS": "two Q tiles"}
    def family(v):
        return next((name for key, name in families.items() if key in v), "one-tile Bc")
    fig, ax = plt.subplots(figsize=(5.6, 5))
    for name in dict.fromkeys(family(r["variant"]) for r in ab_rows):
        rs = [r for r in ab_rows if family(r["variant"]) == name]
        ax.scatter([r["model"] for r in rs], [r["measured"] / (r["control"] or 1.0) for r in rs], s=18, label=name)
    lo, hi = 0.84, 1.13  # every cell inside (the measured ratios reach 1.122)
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.axhline(1, color="grey", lw=0.5, ls=":")
    ax.axvline(1, color="grey", lw=0.5, ls=":")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("model: variant / forward()'s time")
    ax.set_ylabel("measured: variant / forward()'s time, / control")
    ax.set_title("Stop 24's A/Bs, each cell (H200)")
    legend_outside(ax)
    plt.show()
    show_table(["run", "variant", "cells", "model", "measured", "control"],
               [[s["run"], s["variant"].replace("default+", "+"), s["cells"],
                 f"{s['model']:.3f}", f"{s['measured']:.3f}", "-" if s["control"] is None else f"{s['control']:.3f}"]
                for s in knob_ab.summary(ab_rows)])

# %% [markdown]
# Points near the diagonal are changes the model priced right. Points near the middle are changes it called
# level that were level: two Q tiles, one-tile key blocks. The model prices what it can see: the schedule of
# tiles over SMs, bytes per level, the work per tile. It misses what only the compiled code shows; over every
# committed A/B (2606 rows), where it moves a cell by more than 2% the GPU moves the same way in 406 of 522
# cells, 78% (`python -m lab.knob_ab`: the `moved` and `same_way` columns summed).
# The misses are listed in `docs/gpu-model.md`: a store pattern the model does not price, and code generation.

# %% [markdown]
# ## 4 · Live, when a GPU is present
#
# A small run: every registered kernel (`kernels.KERNELS`, each of its benchmark options) on one
# problem ($B = 4$, $H = 16$, $N = 2048$, $d = 64$, fp16), beside torch SDPA's flash and cuDNN backends,
# through `bench.harness` (the benchmarks' one harness: checked against the float64 reference on the
# timed inputs, then timed by its one method, medians over rotated inputs). On a machine without a GPU
# this cell says so and does nothing.

# %%
if not torch.cuda.is_available():
    print("no GPU here (torch.cuda.is_available() is False): live run skipped; the sections above show "
          "the committed H200 measurements")
else:
    from bench import harness

    B, H, N, D = 4, 16, 2048, 64
    sets = harness.input_sets(B, H, N, N, D, torch.float16, max_sets=4)
    live = []
    for entry in harness.entries(sdpa=("flash", "cudnn")):
        r = harness.measure(entry, sets, False)
        if "median_ms" not in r:  # one kernel failing must not hide the others
            live.append([entry.label, f"{r.get('rel_err', float('nan')):.1e}", r.get("skipped", "")[:80], "—", "—"])
            continue
        model = model_of(entry.label, D)
        bound = "—"
        if model:
            variant, options, br, bc = model
            c = closed_forms.counts(variant, B, H, N, N, D, block_q=br, block_k=bc,
                                    sram_bytes=h200.sram_bytes, **options)
            bound = f"{roofline(c, h200, basis='measured').t_s * 1e3:.3f} ms"
        live.append([entry.label, f"{r['rel_err']:.1e}", f"{r['median_ms']:.3f} ms", f"{r['tflops']:.1f}", bound])
    print(torch.cuda.get_device_name(), f"B={B} H={H} N={N} d={D} fp16, non-causal; run {harness.run_info()['run_id']}")
    show_table(["kernel", "relative error", "median time", "TFLOP/s", "roofline bound (H200)"], live)

# %% [markdown]
# ## Exercises
#
# **1.** In section 3, which kernels sit closest to the model, and what bounds them? For the teaching
# kernels, name one effect the papers' count leaves out that explains why they are far slower than
# their roofline (think of shared-memory bank conflicts, occupancy, and float32 arithmetic).
#
# <details><summary>Solution</summary>
#
# Read the "What bounds each kernel" table: the model's bound and model / measured per kernel. The
# teaching kernels are bound by shared-memory issue (scalar loads, FFMA instead of tensor cores), which
# the papers' HBM count cannot see; bank conflicts and low occupancy add to it.
#
# </details>
#
# **2.** The papers' count charges FA2 for re-reading $K_j, V_j$ once per query block. Compare its bytes
# with the measured DRAM counter in "What the L2 absorbs": how much does the L2 cache absorb?
#
# <details><summary>Solution</summary>
#
# The "absorbed by the L2" column: for FA2-style kernels nearly all of the re-reads — DRAM sees about one
# read of $Q, K, V$ and one write of $O$ (DRAM / compulsory close to 1).
#
# </details>
#
# **3.** Find the $N$ at which the teaching `fa2` overtakes the teaching `naive` in the timings. Does the
# roofline predict the same crossover?
#
# <details><summary>Solution</summary>
#
# ```python
# t = {(r["kernel"], r["n"]): r["tflops"] for r in timed["teaching"] if r["d"] == 64 and not r["causal"]}
# print([n for n in sorted({n for _, n in t}) if t.get(("fa2", n), 0) > t.get(("naive", n), 0)])
# ```
# By the papers' count FA2 moves fewer bytes at every $N$; the measured crossover also depends on launch
# overhead and each kernel's instruction path.
#
# </details>
#
# **4.** From the timings, at what $N$ (if any) is `v_once_tc` with the row in SRAM faster than `fa2_tc`?
# Relate the answer to notebook 5's table of the longest $N$ whose row fits.
#
# <details><summary>Solution</summary>
#
# At none: notebook 5's ratio table (one run, `tc_bench.json`) shows the best `v_once_tc` below `fa2_tc`
# at every measured $N$, even where the row fits — it holds one block per SM from $N = 1$k, and its
# tensor pipe is less busy.
#
# </details>
#
# **5.** With a GPU: change the live problem to causal (`harness.measure(entry, sets, True)`: its third
# argument is `causal`) and to $d = 128$ (`D = 128`). Which kernels gain most from causal masking, and why?
#
# <details><summary>Solution</summary>
#
# Those that skip the masked tiles (FA2-style kernels, SDPA): about half the tiles, so close to half the
# time at long $N$; naive gains little, since it still writes and reads the whole $S$ and $P$.
#
# </details>
