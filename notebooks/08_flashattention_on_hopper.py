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
# # 8 · FlashAttention on Hopper
#
# Notebook 4 wrote FlashAttention-2 as a loop over key blocks. This notebook follows that loop onto an H100/H200
# (Hopper, sm_90a) through the project's own kernel, `fa2_wgmma` (`kernels/fa2_wgmma.py` launching
# `kernels/cuda/fa2_wgmma_tma.cu`): what a Hopper kernel is built from, why its time at d = 64 is set by the
# exponentials rather than by the tensor cores, the two FA4 tricks this project tried on it, and where it stands
# against cuDNN and SDPA's FlashAttention-2 in the committed runs.
#
# Everything here runs on a CPU in seconds: the kernel excerpts are read from the `.cu` file when the notebook
# runs, the hardware rates and timings from committed result files (each labelled with its run), and the
# timeline is a schematic computed from the algorithm's arithmetic, not a trace.
#
# 1. The pieces: warpgroups, wgmma, TMA, mbarriers.
# 2. The kernel: a producer warpgroup, consumer warpgroups, the ring.
# 3. Overlap: the softmax under the next products, and ping-pong (a schematic).
# 4. Why d = 64 is bound by the exponentials.
# 5. The rescale threshold and the exp2 polynomial, as measured here.
# 6. Against cuDNN and SDPA flash.

# %%
# Setup: make the workbench packages importable from wherever this notebook was opened.
import pathlib, sys
ROOT = pathlib.Path.cwd().resolve()
while not (ROOT / "variants").is_dir() and ROOT != ROOT.parent:
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))

import json, math, re
import numpy as np
import torch
import matplotlib.pyplot as plt
# %matplotlib inline

from analysis.nbtools import show_table
from analysis.results import RESULTS_DIR as RESULTS
from analysis.style import line_style

torch.set_num_threads(1)
KERNEL = ROOT / "kernels" / "cuda" / "fa2_wgmma_tma.cu"
SOFTMAX = ROOT / "kernels" / "cuda" / "wgmma_fa2.cuh"


def excerpt(path, start, end, include_end=True):
    """The lines of `path` from the first line containing `start` to the next containing `end`: quoted from the
    file as it is now, so the notebook cannot go stale when the kernel changes (it fails loudly if a marker goes)."""
    lines = path.read_text().splitlines()
    i = next(k for k, s in enumerate(lines) if start in s)
    j = next(k for k in range(i + 1, len(lines)) if end in lines[k])
    body = lines[i:j + include_end]
    indent = min(len(s) - len(s.lstrip()) for s in body if s.strip())
    print(f"{path.relative_to(ROOT)}, lines {i + 1}-{i + len(body)}:\n")
    print("\n".join(s[indent:] for s in body))


# %% [markdown]
# ## 1 · The pieces
#
# Hopper adds four things to the Ampere GPU that FlashAttention-2 was written for:
#
# - **Warpgroups and `wgmma`.** Four warps (128 threads) form a *warpgroup*, and one `wgmma.mma_async`
#   instruction has the whole warpgroup multiply a 64-row tile by an N-column tile (N up to 256), reading B (and
#   optionally A) straight from shared memory. It is *asynchronous*: the warpgroup issues it, goes on with other
#   instructions, and waits (`wgmma.wait_group`) only when it needs the result. Ampere's `mma.sync` is one warp,
#   16 rows, synchronous.
# - **TMA** (the Tensor Memory Accelerator). One thread issues `cp.async.bulk.tensor` with a tensor map and a
#   tile coordinate, and a copy engine moves the whole tile from global to shared memory: no address arithmetic
#   and no registers in the other threads.
# - **mbarriers** in shared memory. A TMA copy counts its bytes onto an mbarrier; a thread that waits on the
#   barrier's phase knows the tile has landed. They are the signals between warps that are not in lockstep.
# - **`setmaxnreg`**: a warpgroup can give registers back, and another take them, at run time.
#
# With them a kernel can *specialise* its warps: some only move data, others only compute, and they talk
# through barriers, as FlashAttention-3 (Shah et al., 2024) does and as `fa2_wgmma_tma.cu` does here.

# %% [markdown]
# ## 2 · The kernel: producer, consumers, ring
#
# The kernel's header maps FlashAttention-2's Algorithm 1 (notebook 4) line by line onto the warpgroups. Read from
# the file:

# %%
excerpt(KERNEL, "// FlashAttention-2 paper, Algorithm 1", "// Masking, the exact rescale skip")

# %% [markdown]
# **The producer** (warpgroup 0, one elected thread) drops to a few registers with `setmaxnreg.dec`, loads the Q
# tile, then walks the key blocks: for block $t$ it waits until ring slot $t \bmod$ `STAGES` is *empty* (the
# consumers have finished reading it) and issues the TMA loads of $K_t$ and $V_t$ into it, which arrive on the
# slot's *full* barriers. Its whole loop is two calls per block:

# %%
excerpt(KERNEL, "for (int t = 1; t < T; ++t) {", "}")

# %% [markdown]
# **The consumers** (warpgroups 1..NWG, 64 query rows each) take the registers the producer gave back
# (`setmaxnreg.inc`): O, S and P of 64 rows live in registers for the whole key loop. Their steady-state step is
# the heart of the kernel. Note the order: $S_j = Q K_j^T$ and the *previous* block's $P_{j+1} V_{j+1}$ are
# issued together, the warpgroup waits only for $S_j$ (`wgmma_wait<1>`: one group may stay in flight), and the
# softmax of $S_j$ runs while $P_{j+1} V_{j+1}$ is still on the tensor cores:

# %%
excerpt(KERNEL, "// step t: S_j = Q K_j^T and O += P_{j+1} V_{j+1}", "pack_p(pa, s);")

# %% [markdown]
# The `mbar_wait(FULL_…)` lines are the consumer side of the ring; `mbar_arrive(EMPTY_…)` hands a slot back to
# the producer as soon as the product that read it is done (K after $S_j$, V after $P V$). `turn_begin` /
# `turn_end` are the ping-pong's named barriers (section 3). Nothing in the loop is a CTA-wide `__syncthreads`:
# the producer runs ahead by up to `STAGES` blocks, and each consumer warpgroup runs at its own pace.
#
# The builds `forward()` runs are not one: the tile shape, the number of consumer warpgroups and ping-pong depend
# on d and N (`kernels/fa2_wgmma.py` CONFIGS and SIZE_RULES). The committed grid records the build of every cell;
# at N = 16k, non-causal:

# %%
GRID = RESULTS / "fwd_wgmma_vs_cudnn_grid" / "four_passes_run3" / "ab_wgmma_speed.json"
grid = json.loads(GRID.read_text())
RUN = grid["env"]["run_id"]
builds = {r["d"]: r["config"] for r in grid["rows"] if r["variant"].startswith("fa2_wgmma") and r["n"] == 16384
          and not r["causal"] and r["dtype"] == "float16"}
show_table(["d", "consumer warpgroups (Br = 64 × NWG)", "Bc", "ring slots (STAGES)", "ping-pong", "persistent",
            "rescale threshold (section 5)"],
           [[d, c["NWG"], c["BLOCK_N"], c.get("STAGES", 2), "yes" if c.get("PINGPONG", 1) and c["NWG"] == 2 else "no",
             "yes" if c.get("PERSISTENT") else "no", c.get("RESCALE_THRESHOLD", "off")]
            for d, c in sorted(builds.items())])
print(f"builds as recorded in run {RUN} ({GRID.relative_to(ROOT)}); an absent STAGES or PINGPONG is the "
      "kernel's default (2, 1)")

# %% [markdown]
# ## 3 · Overlap: the softmax under the products
#
# Per key block a consumer warpgroup does two products on the tensor cores ($S = QK^T$, then $PV$) and, between
# them, the softmax on the other units: the exponentials on the MUFU (the special-function unit), the max, the
# scale and the conversions on the FP32/ALU lanes. The softmax of block $j$ needs $S_j$, and $P_j V_j$ needs
# the softmax, so *within* one warpgroup they are a chain. Two ways around it, both in this kernel:
#
# - **inside a warpgroup**: issue $S_j$ together with $P_{j+1}V_{j+1}$ (the loop above), so the softmax of $S_j$
#   overlaps the product of the block before;
# - **between warpgroups (ping-pong)**: two consumer warpgroups take turns at the tensor cores (named barriers
#   `turn_begin`/`turn_end`): warpgroup 1 issues its products while warpgroup 0 does its softmax, and back.
#
# The schematic below is computed, not traced: the tensor time per warpgroup step is its FLOPs over the measured
# tensor-core rate per SM clock (section 4), the softmax time its $64 \times B_c$ exponentials over the MUFU's
# 16 per clock. The MUFU and the tensor cores are each one per SM (shared by the warpgroups); the FP32/ALU part
# of the softmax is left out, so the real softmax bars are longer.

# %%
CEILING = RESULTS / "probe_gpu" / "tc_ceiling" / "tc_ceiling.json"
ceiling = json.loads(CEILING.read_text())
R_TC = max(r["flop_per_clk_sm"] for r in ceiling["rows"] if r["path"] == "wgmma")     # FLOP / clock / SM
R_MUFU = max(r["per_clk_sm"] for r in ceiling["rows"] if r["path"] == "mufu")          # ex2 / clock / SM
CEILING_RUN = ceiling["run"]["run_id"]


def schedule(d, bc, steps=4, pingpong=True, br=64):
    """A two-resource list schedule of NWG = 2 consumer warpgroups: 'tc' (S = QK^T and PV, one job per step) and
    'mufu' (the block's exponentials). With ping-pong the warpgroups take the tensor cores in turn; without it
    each waits for the other's softmax too (lockstep). Returns [(warpgroup, unit, start, end)] in clocks."""
    gemm = 2 * (2 * br * bc * d) / R_TC   # two products of one 64-row warpgroup tile
    expo = br * bc / R_MUFU               # its exponentials
    free = {"tc": 0.0, "mufu": 0.0}
    ready = [0.0, 0.0]
    bars = []
    for t in range(steps):
        starts = []
        for wg in (0, 1):
            s = max(free["tc"], ready[wg] if pingpong else max(ready))
            free["tc"] = s + gemm
            bars.append((wg, "tc", s, s + gemm))
            starts.append(s + gemm)
        for wg in (0, 1):
            s = max(free["mufu"], starts[wg])
            free["mufu"] = s + expo
            bars.append((wg, "mufu", s, s + expo))
            ready[wg] = s + expo
    return bars


fig, axes = plt.subplots(2, 1, figsize=(8, 4.2), sharex=True)
for ax, (d, bc) in zip(axes, ((128, 128), (64, 128))):
    bars = schedule(d, bc)
    for wg, unit, a, b in bars:
        y = {0: 2, 1: 1}[wg]
        ax.broken_barh([(a, b - a)], (y - 0.35, 0.7), color="navy" if unit == "tc" else "tab:orange",
                       edgecolor="white")
    # the producer: K_t, V_t land a ring slot ahead of the step that reads them (TMA, no SM instructions)
    for t in range(4):  # K_t, V_t issued as soon as their ring slot frees; drawn at the start of each step
        ax.broken_barh([(bars[2 * 2 * t][2], 60)], (2.65, 0.3), color="tab:gray")
    ax.set_yticks([1, 2, 2.8], ["consumer WG 2", "consumer WG 1", "producer (TMA)"], fontsize=8)
    end = max(b for *_, b in bars)
    busy_tc = sum(b - a for _, u, a, b in bars if u == "tc") / end
    busy_mufu = sum(b - a for _, u, a, b in bars if u == "mufu") / end
    ax.set_title(f"d = {d}, Bc = {bc}: tensor cores busy {busy_tc:.0%}, MUFU busy {busy_mufu:.0%} of the span",
                 fontsize=9)
    ax.set_ylim(0.4, 3.1)
axes[1].set_xlabel("SM clocks (schematic: exponentials only, no ALU work, no latencies)")
axes[0].plot([], [], color="navy", lw=6, label="S = QKᵀ and PV (tensor cores)")
axes[0].plot([], [], color="tab:orange", lw=6, label="exponentials (MUFU)")
axes[0].legend(fontsize=8, loc="upper right", ncol=2)
fig.suptitle("Ping-pong between two consumer warpgroups: a schematic from the arithmetic", fontsize=10)
fig.tight_layout()
plt.show()
print(f"rates: {R_TC:.0f} FLOP/clk/SM (wgmma) and {R_MUFU:.2f} ex2/clk/SM (MUFU), measured in run {CEILING_RUN}")

# %% [markdown]
# At d = 128 one warpgroup's softmax (half as long as its products) hides under the other's products and the
# tensor cores never wait. At d = 64 the products halve but the exponentials do not: the two are equal, the
# MUFU is as busy as the tensor cores, and the FP32 work of the softmax (not drawn) is then on the critical path.
# The d = 64 build (the table in section 2) accordingly runs FA3's d = 64 tile: three consumer warpgroups
# (Br = 192) and no strict turns, so that more softmaxes are in flight to keep both units fed.

# %% [markdown]
# ## 4 · Why d = 64 is bound by the exponentials
#
# Count per (query, key) pair. The two products cost $2d + 2d = 4d$ FLOPs; the softmax costs one exponential.
# On one SM, per clock, the tensor cores do $R_{tc}$ FLOPs and the MUFU $R_{ex}$ exponentials:
#
# $$ t_{tensor} = \frac{4d}{R_{tc}}, \qquad t_{exp} = \frac{1}{R_{ex}} \qquad \text{clocks per pair.} $$
#
# The exponentials cost as much as the products when $d = R_{tc} / (4 R_{ex})$. Both rates were measured on the
# H200 (`lab/tc_ceiling.py`: each SM runs one instruction kind on operands already on chip and reads its own
# clock counter, so the answer is per clock, whatever clock the power cap allowed):

# %%
d_cross = R_TC / (4 * R_MUFU)
show_table(["d", "tensor clocks / pair", "exp clocks / pair", "exp / tensor", "bound (perfect overlap)"],
           [[d, f"{4 * d / R_TC:.4f}", f"{1 / R_MUFU:.4f}", f"{(1 / R_MUFU) / (4 * d / R_TC):.2f}",
             "exponentials" if 1 / R_MUFU > 4 * d / R_TC * 1.001 else
             ("both (equal)" if abs(1 / R_MUFU - 4 * d / R_TC) < 1e-3 * (1 / R_MUFU) else "tensor cores")]
            for d in (32, 64, 96, 128, 256)])
print(f"crossover: d = R_tc / (4 R_ex) = {R_TC:.0f} / (4 x {R_MUFU:.2f}) = {d_cross:.1f} (run {CEILING_RUN})")

# %% [markdown]
# So d = 64 sits exactly on the crossover: even with perfect overlap the MUFU is as busy as the tensor cores, and
# anything else the softmax does (the row max, the scale-and-subtract FMA, the conversion of P to 16 bits: all on
# the FP32/ALU lanes) can no longer hide. At d = 128 the exponentials need half the tensor time, at d = 256 a
# quarter. The measurement agrees: FLOPs per SM clock (the grid's TFLOP/s over 132 SMs at the SM clock each timing
# recorded) against the two ceilings:

# %%
from counting.gpus import get_gpu

SMS = int(get_gpu("h200").sms.value)
kernels = ("fa2_wgmma[default]", "sdpa_cudnn", "sdpa_flash")
per_clk = {}
for r in grid["rows"]:
    if r["n"] == 16384 and not r["causal"] and r["dtype"] == "float16" and r.get("clock_mhz"):
        per_clk[(r["variant"], r["d"])] = r["tflops"] * 1e12 / (SMS * r["clock_mhz"] * 1e6)
ds = sorted({d for _, d in per_clk})
dd = np.linspace(32, 272, 200)
fig, ax = plt.subplots(figsize=(8, 3.8))
ax.plot(dd, np.full_like(dd, R_TC), "k-", lw=1, label="tensor ceiling (measured)")
ax.plot(dd, 4 * dd * R_MUFU, "k--", lw=1, label="exponential ceiling 4d · R_ex")
ax.plot(dd, 1 / (1 / R_TC + 1 / (4 * dd * R_MUFU)), "k:", lw=1, label="no overlap: 1 / (1/R_tc + 1/(4d R_ex))")
for k in kernels:
    pts = [(d, per_clk[(k, d)]) for d in ds if (k, d) in per_clk]
    ax.plot(*zip(*pts), label=k.replace("[default]", ""), **line_style(k.split("[")[0]))
ax.axvline(d_cross, color="grey", lw=0.6)
ax.set_ylim(0, R_TC * 1.15)
ax.set_xticks(ds)
ax.set_xlabel("head dimension d")
ax.set_ylabel("FLOP per SM clock")
ax.set_title(f"Measured FLOP/clock/SM at N = 16k, fp16, non-causal (run {RUN})", fontsize=9)
ax.legend(fontsize=7, loc="lower right")
fig.tight_layout()
plt.show()
show_table(["kernel"] + [f"d = {d}" for d in ds],
           [[k.replace("[default]", "")] + [f"{per_clk[(k, d)] / R_TC:.0%}" if (k, d) in per_clk else "—" for d in ds]
            for k in kernels])
print("share of the measured tensor ceiling per clock")

# %% [markdown]
# The kernels sit near the dotted no-overlap line, not under the solid ceiling: the overlap of section 3 hides the
# exponentials about as fast as the rest of each step (the FP32 part of the softmax, the barrier waits, the tile's
# prologue and epilogue) adds time back. So the gap to the tensor ceiling follows the exponentials' share: widest at
# d = 64 and 96 (d = 96 also pads its P·V to 128 columns, `PV_N=128`, a third more tensor work than the FLOPs
# counted), narrowest at d = 256. The two FA4 ideas of the next section attack exactly the softmax's term.

# %% [markdown]
# ## 5 · Two FA4 tricks, as tried and measured here
#
# FlashAttention-4 (Blackwell) shortens the softmax in two ways. Both were built into `fa2_wgmma_tma.cu` as
# compile-time knobs and A/B-timed on the H200 (`docs/hopper-fa2-history.md`, version v3; run
# `results/fwd_wgmma_speed_knobs/first_run`, fp16 and bf16, d = 64/128/256, N = 512–16k, causal and not).
#
# **The rescale threshold** (`RESCALE_THRESHOLD=8`). The online softmax rescales O and $\ell$ by
# $\alpha = 2^{(m_{old} - m_{new})\cdot\text{scale}}$ whenever a block raises the row max. With a threshold the
# running max $m$ moves only when the block's max exceeds it by more than $2^8$ in P; otherwise the block is
# exponentiated against the old $m$ (its P may reach up to 256, harmless in fp32) and the multiply of O is
# skipped. It is exact: the final $O / \ell$ and the lse use the $m$ actually used. From the kernel's softmax:

# %%
excerpt(SOFTMAX, "#if RESCALE_THRESHOLD", "#else", include_end=False)


# %% [markdown]
# The same rule in a few lines of PyTorch, on one row block by block, against the exact softmax:

# %%
def online_softmax_pv(s, v, bc, tau=None):
    """Online softmax · V over key blocks of width bc (base 2, scores already scaled by log2 e). tau=None moves
    the max at every new maximum (FA2); tau=8 only when the block's max exceeds it by more than 2^8 (FA4)."""
    m, l, o, moves = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64), 0
    for j in range(0, s.numel(), bc):
        mx = max(m, s[j:j + bc].max().item())
        if mx > m and (tau is None or mx - m > tau):  # -inf old max: always moves
            alpha = 2.0 ** (m - mx) if m > -math.inf else 0.0
            o, l, m, moves = o * alpha, l * alpha, mx, moves + 1
        p = torch.exp2(s[j:j + bc] - m)
        o, l = o + p @ v[j:j + bc], l + p.sum().item()
    return o / l, moves


g = torch.Generator().manual_seed(0)
n, bc = 4096, 128
s = torch.randn(n, generator=g, dtype=torch.float64) * 3 + torch.linspace(0, 6, n, dtype=torch.float64)  # a drift up
v = torch.randn(n, 8, generator=g, dtype=torch.float64)
exact = torch.softmax(s * math.log(2), 0) @ v
rows = []
for tau in (None, 8):
    out, moves = online_softmax_pv(s, v, bc, tau)
    rows.append(["every new max (FA2)" if tau is None else f"threshold {tau} (FA4)", moves, n // bc,
                 f"{(out - exact).abs().max().item():.1e}"])
show_table(["rule", "rescales of O", "key blocks", "max |error| vs exact"], rows)

# %% [markdown]
# The polynomial (**`EXP2_POLY=k`**): move $k$ of every 8 exponentials off the MUFU onto the FMA lanes,
# computing $2^x = 2^{\lfloor x \rfloor}\cdot 2^{f}$ with the integer part in the exponent bits and $2^f$,
# $f \in [0, 1)$, a degree-3 or 4 polynomial (Horner: one FMA per degree). The accuracy is easy to check on a
# CPU: a least-squares fit is within the rounding of the P it produces.

# %%
f = np.linspace(0, 1, 4001)
for deg, dtype, eps in ((3, "bf16", 2.0 ** -8), (4, "fp16", 2.0 ** -11)):
    c = np.polyfit(f, 2 ** f, deg)
    err = np.max(np.abs(np.polyval(c, f) / 2 ** f - 1))
    print(f"degree {deg}: max relative error {err:.1e}; P is rounded to {dtype} (relative {eps / 2:.1e}) "
          f"right after: {'invisible' if err < eps / 2 else 'visible'}")

# %% [markdown]
# Arithmetic says it should help at d = 64 (section 4: the MUFU is the bound). The GPU said otherwise. Each
# A/B cell below is a variant's median time over the build without the knob, all in one run:

# %%
KNOBS = RESULTS / "fwd_wgmma_speed_knobs" / "first_run" / "ab_wgmma_speed.json"
knob_run = json.loads(KNOBS.read_text())
KNOB_RUN = knob_run["env"]["run_id"]
base = {(r["dtype"], r["d"], r["n"], r["causal"]): r["median_ms"] for r in knob_run["rows"]
        if r["variant"] == "fa2_wgmma[base]" and r.get("ok")}
ratios = {}
for r in knob_run["rows"]:
    key = (r["dtype"], r["d"], r["n"], r["causal"])
    if r["variant"] in ("fa2_wgmma[rescale]", "fa2_wgmma[poly]") and r.get("ok") and key in base:
        ratios.setdefault((r["variant"][10:-1], r["d"]), []).append(r["median_ms"] / base[key])
fig, ax = plt.subplots(figsize=(8, 3.2))
labels = sorted(ratios, key=lambda k: (k[0], k[1]))
for i, key in enumerate(labels):
    ys = ratios[key]
    ax.scatter(np.full(len(ys), i) + np.linspace(-0.2, 0.2, len(ys)), ys, s=10,
               color="tab:blue" if key[0] == "rescale" else "tab:red")
ax.axhline(1, color="grey", lw=0.8)
ax.set_xticks(range(len(labels)), [f"{'threshold' if k == 'rescale' else 'polynomial'}\nd = {d}" for k, d in labels],
              fontsize=8)
ax.set_ylabel("time / time without the knob")
ax.set_title(f"RESCALE_THRESHOLD=8 and EXP2_POLY=2, every cell (run {KNOB_RUN})", fontsize=9)
fig.tight_layout()
plt.show()
geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
show_table(["knob", "d", "cells", "geomean", "best", "worst", "cells faster"],
           [[k, d, len(ratios[(k, d)]), f"{geo(ratios[(k, d)]):.3f}", f"{min(ratios[(k, d)]):.3f}",
             f"{max(ratios[(k, d)]):.3f}", sum(x < 1 for x in ratios[(k, d)])] for k, d in labels])

# %% [markdown]
# The threshold helps where rescales were common and the multiply of O is large (d = 256, causal rows) and is level
# elsewhere: it went into the d = 64 and 256 builds, and later into most (the last column of section 2's table).
# The polynomial was slower in every cell and was removed. The kernel's version log gives the reason:
# each polynomial exponential costs about 9 FMA/ALU issue slots to save one MUFU slot, and on Hopper those FP32 lanes
# are exactly what the rest of the softmax is waiting for; the SASS count of `MUFU.EX2` fell from 264 to 200 and the
# time rose. FA4's case is Blackwell's, where the tensor cores are twice as fast per SM and the MUFU is not.

# %% [markdown]
# ## 6 · Against cuDNN and SDPA flash
#
# The current grid (`four_passes_run3`): fa2_wgmma's `forward()` beside PyTorch's SDPA cuDNN and FlashAttention-2
# backends, fp16 and bf16, d = 64/96/128/256, N = 512–16k with batch × N = 16k tokens and hidden size 2048,
# causal and not, each cell timed in four passes in ABBA order (the median of the passes). TFLOP/s divides
# `counting.headline.attention_flops` (4·d per visible pair).

# %%
cells = {}
for r in grid["rows"]:
    if r.get("ok") and r.get("tflops"):
        cells[(r["variant"].replace("[default]", ""), r["dtype"], r["d"], r["n"], bool(r["causal"]))] = r
fig, axes = plt.subplots(2, len(ds), figsize=(8, 4.6), sharex=True, sharey=True)
for row, causal in zip(axes, (False, True)):
    for ax, d in zip(row, ds):
        for k in ("fa2_wgmma", "sdpa_cudnn", "sdpa_flash"):
            pts = sorted((n, r["tflops"]) for (kk, dt, d2, n, c), r in cells.items()
                         if (kk, dt, d2, c) == (k, "float16", d, causal))
            ax.plot(*zip(*pts), label=k, **line_style(k))
        ax.set_xscale("log", base=2)
        ax.set_xticks([512, 2048, 8192], ["512", "2k", "8k"])
        ax.set_title(f"d = {d}{', causal' if causal else ''}", fontsize=8)
        ax.grid(True, alpha=0.3)
    row[0].set_ylabel("TFLOP/s")
for ax in axes[1]:
    ax.set_xlabel("N")
axes[0][0].legend(fontsize=7)
fig.suptitle(f"fp16, H200 (run {RUN})", fontsize=9)
fig.tight_layout()
plt.show()

rows = []
for d in ds:
    for causal in (False, True):
        ratio_c = [cells[("sdpa_cudnn", dt, d, n, causal)]["median_ms"] / r["median_ms"]
                   for (k, dt, d2, n, c), r in cells.items() if (k, d2, c) == ("fa2_wgmma", d, causal)]
        ratio_f = [cells[("sdpa_flash", dt, d, n, causal)]["median_ms"] / r["median_ms"]
                   for (k, dt, d2, n, c), r in cells.items() if (k, d2, c) == ("fa2_wgmma", d, causal)]
        rows.append([d, "yes" if causal else "no", len(ratio_c), sum(x >= 1 for x in ratio_c),
                     f"{min(ratio_c):.2f}–{max(ratio_c):.2f}", f"{geo(ratio_f):.2f}"])
show_table(["d", "causal", "cells (fp16 + bf16)", "fa2_wgmma ≥ cuDNN", "cuDNN time / fa2_wgmma time",
            "SDPA flash time / fa2_wgmma time (geomean)"], rows)
behind = sorted((d2, n, c, dt, cells[("sdpa_cudnn", dt, d2, n, c)]["median_ms"] / r["median_ms"])
                for (k, dt, d2, n, c), r in cells.items()
                if k == "fa2_wgmma" and cells[("sdpa_cudnn", dt, d2, n, c)]["median_ms"] < r["median_ms"])
print("behind cuDNN: " + "; ".join(f"d = {d2}, N = {n}{' causal' if c else ''} {dt} ({x:.3f})"
                                   for d2, n, c, dt, x in behind))
print(f"all from run {RUN} ({GRID.relative_to(ROOT)}, ab.txt beside it)")

# %% [markdown]
# Against SDPA's FlashAttention-2 (mma.sync: two thirds of wgmma's rate per clock, `lab/tc_ceiling.py`) the
# Hopper kernel is faster in every cell, most at d = 256. Against cuDNN, NVIDIA's own Hopper kernel, it is level
# or ahead in most cells; the cells behind are listed above: short rows, where each tile's prologue and epilogue
# weigh most. The share of the tensor ceiling is lowest at d = 64 and 96 for every kernel (section 4).

# %%
# Checks for the exercises: each takes your answer and says whether it is right.
def _rates():
    rows = json.loads((RESULTS / "probe_gpu" / "tc_ceiling" / "tc_ceiling.json").read_text())["rows"]
    return (max(r["flop_per_clk_sm"] for r in rows if r["path"] == "wgmma"),
            max(r["per_clk_sm"] for r in rows if r["path"] == "mufu"))


def check_crossover(d):
    r_tc, r_ex = _rates()
    want = r_tc / (4 * r_ex)
    assert abs(d - want) < 1, f"{d}: at that d the exponentials and the products do not take the same clocks"
    print(f"exercise 1: right (d = {want:.1f}; above it the tensor cores bound, below it the exponentials)")


def check_exp_share(fn):
    r_tc, r_ex = _rates()
    for d in (32, 64, 128, 256):
        want = (1 / r_ex) / (4 * d / r_tc)
        assert abs(fn(d) - want) < 1e-3 * want, f"d = {d}: expected {want:.3f}, got {fn(d)}"
    print("exercise 2: right")


def check_threshold(fn):
    g = torch.Generator().manual_seed(5)
    for shift in (0.0, 40.0):
        s = torch.randn(1000, generator=g, dtype=torch.float64) * 4 + torch.linspace(0, shift, 1000, dtype=torch.float64)
        v = torch.randn(1000, 3, generator=g, dtype=torch.float64)
        want = torch.softmax(s * math.log(2), 0) @ v
        out, moves = fn(s, v, 64, 8)
        assert torch.allclose(torch.as_tensor(out), want, atol=1e-9), "not the softmax · V of the row"
        assert moves <= 1 + shift / 8 + 1, f"{moves} rescales: the max should move only by more than 8 at a time"
    print("exercise 3: right")


# %% [markdown]
# ## Exercises
#
# **1.** At which head dimension $d$ do the exponentials stop being the bound, that is, take exactly as many
# clocks per (query, key) pair as the two products? Use the measured rates (`R_TC`, `R_MUFU`). Check:
# `check_crossover(d)`.
#
# <details><summary>Solution</summary>
#
# $4d / R_{tc} = 1 / R_{ex}$, so $d = R_{tc} / (4 R_{ex}) = 4095 / 64 \approx 64$: `check_crossover(R_TC / (4 * R_MUFU))`.
# Above d = 64 the tensor cores bound; at d = 64 the two tie, and the softmax's FP32 work decides.
#
# </details>
#
# **2.** Write `exp_share(d)`: the MUFU's clocks per pair as a fraction of the tensor cores' clocks per pair.
# What is it at d = 128 and d = 256, and what does it say about how much of the softmax ping-pong must hide?
# Check: `check_exp_share(exp_share)`.
#
# <details><summary>Solution</summary>
#
# ```python
# def exp_share(d):
#     return (1 / R_MUFU) / (4 * d / R_TC)
# ```
# 0.5 at d = 128 and 0.25 at d = 256: one warpgroup's exponentials fit in half (a quarter) of the other's products,
# with room for the FP32 part of the softmax. At d = 64 it is 1.0: no room.
#
# </details>
#
# **3.** Write `online_softmax_pv(s, v, bc, tau)` yourself (or reuse section 5's): the row's softmax (base 2)
# times V over key blocks of width `bc`, with the running max moved only when a block's max exceeds it by more
# than `tau`; return `(out, number_of_rescales)`. Check: `check_threshold(online_softmax_pv)`.
#
# <details><summary>Solution</summary>
#
# Section 5's function passes: the O and $\ell$ accumulated against a stale max are both scaled by the same
# $2^{m_{used}}$, which cancels in $O/\ell$. With scores rising by 40 over the row the max moves about 40 / 8 times.
#
# </details>
#
# **4.** The polynomial moved 2 of every 8 exponentials to the FMA lanes at ~9 issue slots each. Per pair at d = 64,
# how many FP32 lane-slots per SM clock does that add, against the 128 lanes an SM has, and why can it lose even
# though the MUFU is the bound?
#
# <details><summary>Solution</summary>
#
# $2/8 \times 9 = 2.25$ lane-slots per pair. At the tensor rate a d = 64 SM finishes $R_{tc}/(4\cdot 64) = 16$ pairs
# per clock, so the polynomial adds 36 of the 128 lane-slots per clock, on top of the softmax's own max, FMA and
# conversions (several per pair) and the FP32 work of the rescale. The MUFU's share falls from 16 to 12 per clock,
# but the FP32 lanes, already the other half of the softmax, become the bound: 1.01–1.14× the time measured at d = 64 (1.00–1.18× over every d).
#
# </details>
