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
# # 4 · FlashAttention-2: swap the loops, defer the division, go parallel
#
# FlashAttention-2 (Dao 2023) computes the same thing as FlashAttention-1 with three changes (its
# paper's sections 3.1–3.3) and a consequence we count (4). This
# notebook takes them one at a time and **counts** what each buys, side by side with FA1, using the
# references in `variants/` and the closed forms in `counting/`.
#
# 1. **The loop swap**: query blocks outside, key/value blocks inside — $O_i$, $\ell_i$, $m_i$ never
#    leave the chip.
# 2. **Deferred normalisation and the log-sum-exp**: divide by $\ell$ once at the end, store
#    $L = m + \log \ell$ instead of $m$ and $\ell$.
# 3. **Parallelism over the sequence**: one thread block per (query block, batch, head), not per
#    (batch, head) — and, inside a block, **work split between warps by Q, not by K** (section 3b).
# 4. **The drop in non-matmul FLOPs**, counted, and what the roofline says it is worth.

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
# ## 1 · The loop swap
#
# FA1 streams $K_j, V_j$ in the outer loop and sweeps the query blocks past them, so $O_i$, $\ell_i$,
# $m_i$ are read and written at every tile. FA2 makes the query block the outer loop: $Q_i$ is loaded
# once, the accumulator $O_i$ and statistics stay in registers/SRAM while $K_j, V_j$ stream past, and
# $O_i$ is written once. The visit order of the tiles, from the workbench's tiling
# (`counting.tiling.Tiling`, the same geometry the references and kernels use):

# %%
from counting.tiling import Tiling

t = Tiling(n_q=16, n_k=16, block_q=4, block_k=4, causal=True)
orders = {
    "FA1: K/V blocks outer": [(i, j) for j in range(t.t_c) for i in t.q_blocks(j)],
    "FA2: Q blocks outer": list(t.visited()),
}
from analysis.tiling_pictures import draw_frames, plot_visit_order  # skipped tiles grey, apart from step 0

fig, axes = plt.subplots(1, 2, figsize=(9, 4))
for ax, (title, visits) in zip(axes, orders.items()):
    im = plot_visit_order(ax, t, visits, title)
    fig.colorbar(im, ax=ax, shrink=0.8, label="visit step (grey: skipped)")
fig.suptitle("Visit order of the tiles of S (causal; grey: hidden, skipped)")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Step by step: what is on chip, what crosses.** The same causal problem, one panel per step of
# FA2's loops (`analysis/tiling_pictures.py`, from the loops of `variants/fa2.py`; its test holds the
# panels' transfers equal to what `Memory` counts). Filled: on chip; blue edge: read from HBM this
# step; red: written. Compare with notebook 03's FA1 panels: there $O_i$, $\ell_i$, $m_i$ are read
# and written back at every tile; here $Q_i$ is read once, $O_i$, $\ell_i$, $m_i$ **stay on chip**
# while $K_j, V_j$ stream past, and the only writes are $O_i$ and $\mathrm{lse}_i$, once, after the last
# key block of the row. $\ell$ and $m$ never reach HBM at all.

# %%
draw_frames(t, "fa2")
plt.show()

# %% [markdown]
# What moves, counted by the Memory model on a small problem ($N = 256$, $d = 32$,
# $B_r = B_c = 32$, fp16), per tensor. FA2 trades FA1's $T_c$-fold re-reads **and re-writes** of $Q$,
# $O$, $\ell$, $m$ for $T_r$-fold re-reads of $K$ and $V$. Which side moves fewer bytes depends on the
# blocks; what FA2 removes for good is the **writes**: $O$ is written once.

# %%
from counting import closed_forms
from counting.memory import Memory
from variants import VARIANTS, attention_reference

N, D, BLK = 256, 32, 32
q, k, v = (torch.randn(1, 1, N, D).half() for _ in range(3))
counted = {}
for name in ("fa1", "fa2"):
    mem = Memory()
    o, lse = VARIANTS[name].forward(q, k, v, block_q=BLK, block_k=BLK, mem=mem)
    counted[name] = mem.counts
    closed = closed_forms.counts(name, 1, 1, N, N, D, block_q=BLK, block_k=BLK)
    assert closed.as_dict() == mem.counts.as_dict()  # the closed forms restate the counts exactly

tensors = ["Q", "K", "V", "O", "l", "m", "lse"]
rows = []
for name in ("fa1", "fa2"):
    c = counted[name]
    rows.append([name, "read"] + [f"{c.reads.get(x, 0):,}" for x in tensors] + [f"{c.hbm_read_bytes:,}"])
    rows.append([name, "write"] + [f"{c.writes.get(x, 0):,}" for x in tensors] + [f"{c.hbm_write_bytes:,}"])
show_table(["variant", ""] + tensors + ["bytes"], rows)

# %% [markdown]
# ## 2 · Deferred normalisation and the log-sum-exp
#
# FA1's line 12 keeps $O_i$ **normalised** at every step: it multiplies the old $O_i$ by
# $\ell_i e^{m_i - m^\text{new}}$, adds $e^{\tilde m - m^\text{new}}\tilde P V_j$ and divides by $\ell^\text{new}$ —
# four $B_r \times d$ elementwise passes per tile, and two exponentials per row. FA2 keeps $O_i$
# **un-normalised** (notebook 2, section 4): one rescale by $\alpha = e^{m^{(j-1)} - m^{(j)}}$ and one add
# per tile, one exponential per row, and a single division at the very end (line 12):

# %%
import inspect
import variants.fa2

src = inspect.getsource(variants.fa2.forward).splitlines()
print("\n".join(line for line in src if "line 10" in line or "line 12" in line or "line 13" in line
                or "Oi = mem.ew(mem.ew(alpha" in line))

# %% [markdown]
# Per visited tile of $r$ rows and $c$ columns, the closed forms (`counting/closed_forms.py`) count
#
# | | exp | other (max, add, multiply, divide) |
# |---|---|---|
# | FA1 | $rc + 2r$ | $4rc + 7r + 4rd$ (plus $2r$ once per query block: the lse) |
# | FA2 | $rc + r$ | $4rc + 4r + 2rd$ (plus $rd + 2r$ once per query block) |
#
# The $rc$ terms (scale, subtract the max, exponentiate, row max and sum on the score tile) are the
# same; FA2 saves the $2rd + 3r$ work on the output accumulator and one exponential per row.
#
# **The log-sum-exp.** Instead of $m$ and $\ell$ (two floats per row), FA2 writes
# $L_i = m_i + \log \ell_i$ (one). It is all the backward pass needs: $P = \exp(S - L)$ recomputes the
# softmax exactly from $S$. Checked on the package's output:

# %%
q1, k1, v1 = (torch.randn(1, 2, 40, 16) for _ in range(3))
o, L = VARIANTS["fa2"].forward(q1, k1, v1, block_q=16, block_k=8)
S = (q1 @ k1.transpose(-1, -2)) / math.sqrt(16)
P = torch.exp(S - L.unsqueeze(-1))  # the backward's recomputation
print(f"rows of exp(S - L) sum to 1:     max |sum - 1| = {(P.sum(-1) - 1).abs().max():.1e}")
print(f"exp(S - L) V reproduces O:       max |PV - O|   = {(P @ v1 - o).abs().max():.1e}")
print(f"L is logsumexp of the scores:    max |L - lse|  = {(L - torch.logsumexp(S, -1)).abs().max():.1e}")

# %% [markdown]
# ## 3 · Parallelism over the sequence
#
# A GPU runs one thread block per SM slot; an H200 has 132 SMs. FA1, as the paper parallelises it
# (and the teaching kernel `kernels/fa1.py`), launches one thread block per (batch, head): its outer loop
# over $K_j$ carries a dependency through $O$ in HBM. FA2's outer loop over query blocks has no
# dependency at all, so it launches $T_r$ thread blocks per (batch, head).
#
# Take the usual benchmark setting (as in the FA2 paper and `bench/`): batch × sequence = 16k tokens,
# hidden size 2048, so $H = 2048/d$ heads and $B = 16\text{k}/N$. At long sequences the batch shrinks,
# and FA1 runs out of thread blocks to fill the GPU:

# %%
from counting.gpus import get_gpu

gpus = {key: get_gpu(key) for key in ("h200", "a100")}
seq = [512, 1024, 2048, 4096, 8192, 16384]
d, br = 128, 128
heads = 2048 // d
fa1_ctas = [(16384 // n) * heads for n in seq]
fa2_ctas = [(16384 // n) * heads * Tiling(n, n, br, 64).t_r for n in seq]

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
ax = axes[0]
ax.loglog(seq, fa1_ctas, label="FA1: B·H thread blocks", **line_style("fa1"))
ax.loglog(seq, fa2_ctas, label=f"FA2: Tr·B·H (Br = {br})", **line_style("fa2"))
for (key, g), style in zip(gpus.items(), ("-.", "--")):
    ax.axhline(g.sms.value, color="grey", ls=style, lw=0.8, label=f"{key.upper()}: {int(g.sms.value)} SMs")
ax.set_xlabel("sequence length N (batch = 16k / N), log scale")
ax.set_ylabel("thread blocks in the launch (log scale)")
ax.set_title(f"Independent thread blocks, d = {d}, H = {heads}")
legend_outside(ax)

sms = gpus["h200"].sms.value
ax = axes[1]
ax.semilogx(seq, [min(1, c / sms) for c in fa1_ctas], label="FA1", **line_style("fa1"))
ax.semilogx(seq, [min(1, c / sms) for c in fa2_ctas], label="FA2", **line_style("fa2"))
ax.set_ylim(0, 1.05)
ax.set_xlabel("sequence length N (batch = 16k / N), log scale")
ax.set_ylabel("fraction of the 132 SMs with work")
ax.set_title("H200: SMs busy (one thread block per SM)")
legend_outside(ax)
fig.tight_layout()
plt.show()
show_table(["N", "batch", "FA1 blocks", "FA2 blocks", "FA1: SMs busy"],
           [[n, 16384 // n, a, b, f"{min(1, a / sms):.0%}"] for n, a, b in zip(seq, fa1_ctas, fa2_ctas)])

# %% [markdown]
# At $N = 16$k FA1 has 16 thread blocks for 132 SMs: at most 12 % of the GPU works, however fast each
# block is. This is the FlashAttention-2 paper's argument for parallelising over the sequence
# (its section 3.2): long sequences come with small batches.
#
# ## 3b · Inside a thread block: split the work between warps by Q, not by K
#
# A thread block's 4–8 warps share one $Q_i$ and one $K_j, V_j$ tile. FA1 splits the tile **by K**
# ("split-K"): every warp takes all $B_r$ query rows against a slice of $B_c/W$ keys. Each warp then
# holds only part of each row's scores, so the row max, the row sum and the partial products
# $\tilde P V_j$ ($B_r \times d$ per warp) must be written to shared memory, synchronised and added up —
# at every $K_j, V_j$ step. FA2 splits it **by Q** (its section 3.3): each warp takes $B_r/W$ query rows
# against all of $K_j, V_j$; a row's scores, max, sum and output live in one warp's registers, and the
# warps never exchange anything. Counted per thread block and per $K_j, V_j$ step, in float32:

# %%
def exchange_bytes(split, br, d, warps):
    # shared-memory bytes written + read to combine warps' partial results at one K_j, V_j step
    if split == "Q":
        return 0  # each warp owns whole rows: nothing to combine
    partial_o = warps * br * d  # every warp's Br x d partial P~ V_j
    stats = 2 * warps * br      # every warp's row max and row sum
    return 2 * 4 * (partial_o + stats)  # written once, read once, float32


br, warps = 128, 4
show_table(["d", "split-K (FA1): bytes through shared memory per step", "split-Q (FA2)",
            "split-K vs loading K_j, V_j once (fp16)"],
           [[dd, human(exchange_bytes("K", br, dd, warps)), human(exchange_bytes("Q", br, dd, warps)),
             f"{exchange_bytes('K', br, dd, warps) / (2 * 64 * dd * 2):.0f}×"] for dd in (64, 128)])
print(f"Br = {br}, Bc = 64, {warps} warps; plus a __syncthreads() per step for split-K")

# %% [markdown]
# The exchange moves 16 times the bytes of the $K_j, V_j$ tile itself (at both $d$: both grow as $d$)
# and comes with a barrier every step, so split-K spends shared-memory bandwidth and stalls that
# split-Q does not. The counts in this workbench are HBM counts and do not see it; the GPU model of
# notebook 6 does (its smem term).
#
# ## 4 · Non-matmul FLOPs, counted, side by side
#
# At a real size ($N = 4096$ and $16384$, $d = 128$, fp16, the same blocks for both — Algorithm 1's
# line 1 on an H200's SRAM), from the closed forms. Matmul FLOPs are identical; the exponentials and
# the other elementwise work drop. The roofline (`analysis.roofline`) turns counts into times on an
# H200: HBM bytes at 4.8 TB/s, matmuls at the dense fp16 tensor rate, exponentials at the SFU rate
# and the rest at the FP32 rate — one non-matmul FLOP costs as much time as 30 (other) to 256 (exp)
# matmul FLOPs (computed in the cell below), so 1–2 % of the FLOPs take about as long as all the matmuls.
#
# Two counts of memory. **The papers' count** (no cache) charges every $K_j, V_j$ re-read to HBM, and by it
# HBM is the largest term. On the H200 the L2 serves those re-reads, and DRAM sees about $Q, K, V$ read once and
# $O$ written once (Nsight Compute: 0.97–1.04× that, for FA2's kernels): the "each input once" column. FA1 is
# different: its $O_i$ round trips are writes that depend on the last read, and the GPU model sends them to DRAM.

# %%
from analysis.roofline import roofline
from counting.headline import min_hbm_bytes

h200 = gpus["h200"]
# what one non-matmul FLOP costs in matmul FLOPs' time, at the roofline's rates (an FMA counts two FLOPs in the
# FP32 peak, a step of `other` one instruction: hence FP32 / 2)
tc_rate, fp32_rate = h200.fp16_tensor_flops.value, h200.fp32_flops.value
cost = {"tensor cores / FP32 peak": tc_rate / fp32_rate, "other": tc_rate / (fp32_rate / 2),
        "exp": tc_rate / h200.exp_rate.value}
print("matmul FLOPs per non-matmul FLOP's time:", ", ".join(f"{k}: {v:.0f}×" for k, v in cost.items()))
d = 128
br, bc = closed_forms.fa1_blocks(h200.sram_bytes, d)
table, res = [], {}
for n in (4096, 16384):
    for name in ("fa1", "fa2"):
        c = closed_forms.counts(name, 16384 // n, heads, n, n, d, dtype="fp16", block_q=br,
                                block_k=bc, sram_bytes=h200.sram_bytes)  # batch x N = 16k tokens
        r = roofline(c, h200)
        res[(name, n)] = (c, r)
        t_once = min_hbm_bytes(16384 // n, heads, n, n, d, 2) / h200.hbm_bandwidth.value
        with_l2 = {"memory": t_once, "matmul": r.t_matmul_s, "non-matmul": r.t_nonmatmul_s}
        table.append([n, name, human(c.hbm_read_bytes), human(c.hbm_write_bytes),
                      f"{c.flops['matmul']:.3g}", f"{c.flops['exp']:.3g}", f"{c.flops['other']:.3g}",
                      f"{(c.flops['exp'] + c.flops['other']) / c.flops['matmul']:.2%}",
                      f"{r.t_memory_s * 1e6:.0f} / {t_once * 1e6:.0f} / {r.t_matmul_s * 1e6:.0f} / "
                      f"{r.t_nonmatmul_s * 1e6:.0f}",
                      r.bound, max(with_l2, key=with_l2.get) if name == "fa2" else "(O round trips: DRAM)"])
print(f"batch = 16k / N, H = {heads} heads, d = {d}, Br = {br}, Bc = {bc}, fp16; "
      "times on an H200 (datasheet figures)")
show_table(["N", "variant", "HBM read (papers' count)", "HBM write (papers' count)", "matmul", "exp", "other",
            "non-matmul / matmul",
            "t memory: papers' count (no cache) / each input once / t matmul / t non-matmul (µs)",
            "roofline bound by the papers' count (no cache)", "bound when DRAM reads each input once"], table)

# %%
n = 16384
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
kinds = ["exp", "other"]  # matmul FLOPs are equal (printed below); a linear axis shows the difference
x = np.arange(len(kinds))
for off, name in ((-0.2, "fa1"), (0.2, "fa2")):
    c, r = res[(name, n)]
    axes[0].bar(x + off, [c.flops[kd] / 1e9 for kd in kinds], width=0.4, label=name.upper(), color=colour(name))
axes[0].set_xticks(x, kinds)
axes[0].set_ylabel("non-matmul GFLOP (whole problem)")  # GFLOP: no 1e10 offset above the axis
axes[0].set_title(f"non-matmul FLOPs\nN = {n}, batch = 1, d = {d}, H = {heads}")
legend_outside(axes[0])

parts = ["memory", "matmul", "non-matmul"]
x = np.arange(len(parts))
for off, name in ((-0.2, "fa1"), (0.2, "fa2")):
    c, r = res[(name, n)]
    axes[1].bar(x + off, [r.t_memory_s * 1e6, r.t_matmul_s * 1e6, r.t_nonmatmul_s * 1e6], width=0.4,
                label=f"{name.upper()} (memory: papers' count, no cache)", color=colour(name))
t_once = min_hbm_bytes(16384 // n, heads, n, n, d, 2) / h200.hbm_bandwidth.value
axes[1].bar([0], [t_once * 1e6], width=0.8, color="none", edgecolor="k", hatch="//",
            label="DRAM reading each input once (FA2 on the H200, ncu)")
axes[1].set_xticks(x, ["HBM traffic", "matmul", "exp + other"])
axes[1].set_ylabel("time on an H200 if that were the only cost (µs)")
axes[1].set_title("Roofline components: the papers' count against DRAM")
legend_outside(axes[1])
fig.tight_layout()
plt.show()
print("matmul FLOPs, FA1 and FA2:", ", ".join(f"{res[(k, n)][0].flops['matmul']:.4g}" for k in ("fa1", "fa2")))

# %% [markdown]
# **What to take away.** Counted, FA2's gains over FA1 are (1) $O$ written once instead of $T_c$
# times, (2) fewer exponentials and less elementwise work on the accumulator — the share of
# non-matmul FLOPs drops, and where one non-matmul FLOP costs 30 to 256 matmul FLOPs' time (the
# factors printed above) that matters — and (3) by far the largest in practice, $T_r$ times more
# independent thread blocks. The loop swap does **not** by itself reduce the bytes read: it swaps which
# operands are re-read. By the papers' count (no cache) FA2 looks memory-bound; on the GPU its re-reads
# of $K_j, V_j$ are shared by all the query blocks running at once and hit the L2, so DRAM sees each input
# about once and FA2 is bound by its arithmetic — the next table measures `fa2_wgmma` faster than the
# papers'-count memory time allows. Notebook 6 compares the model with measured counters.
#
# **On the H200.** The roofline above prices the papers' count at datasheet rates with perfect overlap.
# The GPU model (`gpumodel.gpu_model`; notebook 6 checks it against every committed measurement) runs
# the real kernels instead: the teaching FA1 and FA2 (float32 FFMA, 64×64 blocks) and `fa2_wgmma`
# (tensor cores, its own blocks), at the same shapes, with the measured median beside each prediction.
# FA1's teaching kernel has only $B \cdot H$ thread blocks (one per head: 16–64 here, on 132 SMs) and
# one 8-warp block per SM (168 registers), so each SM issues at about half FA2's rate; the loop swap
# and FA2's $T_r \cdot B \cdot H$ blocks are worth more than the bytes.

# %%
from gpumodel import gpu_model as gm
from gpumodel.measured import bench_cells, teaching_cells

# the GPU time: an events-timed file's median less the host gap that run measured (its median less its back-to-back
# time, gpumodel.measured.host_gaps); do_bench-timed files as they are
measured = {(c["kernel"], c["n_q"], c["d"]): (c["time_s"], c.get("timer"))
            for c in teaching_cells() + bench_cells("tc_bench_wgmma_tma.json")
            if not c["causal"] and c["dtype"] == "fp16" and not c["options"].get("placement")}
rows = []
for n in (4096, 16384):
    for kernel in ("fa1", "fa2", "fa2_wgmma"):
        p = gm.predict(kernel, 16384 // n, heads, n, None, d, "fp16")
        t, timer = measured.get((kernel, n, d), (None, None))
        model_s = gm.as_timed(p, timer)  # as that file's timer measured it (do_bench hides the launch work)
        rows.append([n, kernel, f"{p.block_q}×{p.block_k}", p.ctas, p.bound, f"{model_s * 1e3:.3f} ms",
                     f"{t * 1e3:.3f} ms" if t else "not measured", f"{p.tflops * p.time_s / model_s:.0f}",
                     f"{4 * (16384 // n) * heads * n * n * d / t / 1e12:.0f}" if t else "—"])
show_table(["N", "kernel", "Br×Bc", "thread blocks", "bound (GPU model)", "model", "measured",
            "TFLOP/s model", "TFLOP/s measured"], rows)
for n in (4096, 16384):  # the papers'-count memory time of section 4 against what fa2_wgmma measured
    t, _ = measured.get(("fa2_wgmma", n, d), (None, None))
    if t:
        floor = res[("fa2", n)][1].t_memory_s
        verdict = "under" if t < floor else "over"
        print(f"N = {n}: fa2_wgmma measured {t * 1e6:.0f} µs, {verdict} the papers'-count memory time of "
              f"{floor * 1e6:.0f} µs (section 4)" + (": those bytes do not come from DRAM" if t < floor else ""))

# %% [markdown]
# Measured, the teaching FA1 takes 4.2× the teaching FA2's time at N = 4096 (113.0 against 26.8 ms; it was
# not timed at 16k), and `fa2_wgmma` is about 30× faster than that again: the bytes FA2 saves were not what the
# GPU was waiting for. Over every non-causal fp16 shape in `results/bench_kernels.json` (N = 512–8k, d = 64
# and 128) FA1 takes 1.4–8.4× FA2's time, the gap growing with N: B·N is fixed, so FA1's $B \cdot H$ thread
# blocks get fewer (d = 128: 64 at N = 4k, 32 at 8k).

# %%
# Checks for the exercises: call one with your answer; it says whether it is right.
def check_slots(blocks_per_sm, first_idle_n):
    from counting.gpus import get_gpu as _get_gpu
    g = _get_gpu("h200")
    want_blocks = g.smem_per_sm_bytes.value // (64 * 1024)
    assert blocks_per_sm == want_blocks, f"{blocks_per_sm} blocks of 64 KiB: divide the SM's shared memory"
    slots = want_blocks * g.sms.value
    idle = [n for n in (512, 1024, 2048, 4096, 8192, 16384) if (16384 // n) * (2048 // 128) < slots]
    assert first_idle_n == idle[0], f"N = {first_idle_n}: FA1 has B·H = (16k/N)·16 blocks for {slots:.0f} slots"
    print("exercise 3: right")


def check_fa2_fewer_reads(br, bc):
    # exercise 1: blocks at which FA2 reads fewer HBM bytes than FA1, N = 4096, d = 64, fp16, fitting an H200
    from counting import closed_forms as _cf
    from counting.gpus import get_gpu as _gg

    sram = _gg("h200").sram_bytes
    a, b = (_cf.counts(x, 1, 1, 4096, 4096, 64, block_q=br, block_k=bc, sram_bytes=sram) for x in ("fa1", "fa2"))
    assert a.fits and b.fits, (f"Br = {br}, Bc = {bc}: the working set does not fit the H200's {sram:,} bytes of "
                               "SRAM (closed_forms.counts(..., sram_bytes=...).fits) — smaller blocks")
    assert b.hbm_read_bytes < a.hbm_read_bytes, (
        f"Br = {br}, Bc = {bc}: FA2 reads {b.hbm_read_bytes:,} bytes, FA1 {a.hbm_read_bytes:,}. FA2 re-reads K, V "
        "Tr = N / Br times, FA1 re-reads Q, O, ℓ, m Tc = N / Bc times: make Br larger than Bc")
    print(f"exercise 1: right — FA2 reads {b.hbm_read_bytes / a.hbm_read_bytes:.0%} of FA1's bytes at these blocks")


def check_tile_flops(exp_extra, other_extra):
    # exercise 2: FA1's extra exp and other FLOPs over FA2's on one 64 x 64 tile, d = 64
    from counting import closed_forms as _cf

    a, b = (_cf.counts(x, 1, 1, 64, 64, 64, block_q=64, block_k=64).flops for x in ("fa1", "fa2"))
    want_e, want_o = a["exp"] - b["exp"], a["other"] - b["other"]
    assert exp_extra == want_e, (f"exp: {exp_extra} — per visit FA1 evaluates one exponential per row more than "
                                 "FA2 (its rescale of ℓ and of O uses two factors); count the rows of the tile")
    assert other_extra == want_o, (f"other: {other_extra} — subtract FA2's count from FA1's, both from "
                                   "closed_forms.counts(name, 1, 1, 64, 64, 64, block_q=64, block_k=64).flops")
    print("exercise 2: right")


def check_causal_ctas(n_blocks, heaviest):
    # exercise 5: causal, N = 4096, Br = Bc = 128: FA2's thread blocks (one per query block), and the heaviest one
    from counting.tiling import Tiling as _T

    t = _T(4096, 4096, 128, 128, causal=True)
    if n_blocks == t.t_r // 2:
        raise AssertionError("the mask halves the *tiles*, not the thread blocks: every query block still sees at "
                             "least one key block (its diagonal), so all Tr are launched")
    assert n_blocks == t.t_r, f"{n_blocks}: one thread block per query block, Tr = N / Br"
    work = [len(t.k_blocks(i)) for i in range(t.t_r)]
    assert heaviest == work.index(max(work)), (f"query block {heaviest} visits {work[heaviest]} key blocks; "
                                              "block i visits i + 1 (Tiling.k_blocks): which i visits most?")
    print(f"exercise 5: right — block {heaviest} visits {max(work)} key blocks, block 0 only 1")


def check_p_from_lse(p_from):
    """Exercise 4: p_from(S, L) -> P for scores S (..., Nq, Nk) and the stored L (..., Nq), at scores large enough
    that exp(S) alone overflows float32."""
    g = torch.Generator().manual_seed(4)
    S = 400 * torch.randn(2, 3, 7, 11, generator=g)
    L = torch.logsumexp(S, dim=-1)
    P = p_from(S, L)
    want = torch.softmax(S, dim=-1)
    if not torch.isfinite(P).all():
        raise AssertionError("P has inf or NaN: e^S overflows float32 at scores of a few hundred — subtract L inside "
                             "the exponential, e^(S − L), never e^S / e^L")
    rows = P.sum(-1)
    if (rows - 1).abs().max() > 1e-4:
        raise AssertionError(f"rows of P sum to {rows.min():.3g}…{rows.max():.3g}, not 1: L = m + log ℓ carries the "
                             "normaliser as well as the max (e^(S − m) alone is unnormalised)")
    assert (P - want).abs().max() < 1e-5, "P is not softmax(S): check which axis L belongs to (one value per row)"
    print("exercise 4: right")


def check_fa2_forward(fn):
    # fn(q, k, v, br, bc) -> (o, lse) for one head: q (Nq, d), k and v (Nk, d), non-causal, scale 1/√d
    import variants as _variants  # VARIANTS and the float64 oracle, in a notebook and in the tests alike

    torch.manual_seed(4)
    for n_q, n_k, d, br, bc, amp in ((32, 32, 8, 8, 8, 1), (50, 37, 16, 16, 8, 1), (24, 24, 8, 8, 8, 400)):
        q, k, v = (amp * torch.randn(n, d, dtype=torch.float64) if x == "q" else torch.randn(n, d, dtype=torch.float64)
                   for x, n in (("q", n_q), ("k", n_k), ("v", n_k)))
        want_o, want_lse = (t[0, 0] for t in _variants.attention_reference(q[None, None], k[None, None], v[None, None]))
        fa2_o = _variants.VARIANTS["fa2"].forward(q[None, None], k[None, None], v[None, None], block_q=br, block_k=bc)[0][0, 0]
        where = f"Nq = {n_q}, Nk = {n_k}, d = {d}, Br = {br}, Bc = {bc}" + (
            f", scores up to |S| = {(q @ k.T).abs().max() / math.sqrt(d):.0f}" if amp > 1 else "")
        o, lse = fn(q.clone(), k.clone(), v.clone(), br, bc)
        o, lse = torch.as_tensor(o).double(), torch.as_tensor(lse).double().reshape(-1)
        assert o.shape == want_o.shape, f"{where}: O has shape {tuple(o.shape)}, expected {tuple(want_o.shape)}"
        assert lse.shape == want_lse.shape, f"{where}: lse has {lse.numel()} entries, expected one per query row"
        if not torch.isfinite(o).all():
            raise AssertionError(f"{where}: O has inf/NaN — exponentiate S − m with the running max m, never S "
                                 "itself (notebook 2); and start m at −inf, ℓ at 0, and take e^(m_old − m_new).")
        if not torch.allclose(o, want_o, atol=1e-9):
            one = fn(q.clone(), k.clone(), v.clone(), n_q, n_k)[0]
            if torch.allclose(torch.as_tensor(one).double(), want_o, atol=1e-9):
                raise AssertionError(f"{where}: right with one block, wrong with several — when a block raises the "
                                     "max, rescale the old ℓ and O by e^(m_old − m_new) before adding (lines 9–10).")
            s = q @ k.T / math.sqrt(d)
            p = torch.exp(s - s.amax(-1, keepdim=True))
            if torch.allclose(o, p @ v, atol=1e-9):
                raise AssertionError(f"{where}: O is not divided by ℓ — the deferred normalisation O / ℓ after "
                                     "the inner loop (line 12) is missing.")
            if torch.allclose(o, torch.softmax(q @ k.T, -1) @ v, atol=1e-9):
                raise AssertionError(f"{where}: scale the scores: S = Q Kᵀ / √d.")
            raise AssertionError(f"{where}: max |O − O_ref| = {(o - want_o).abs().max():.2e} (the float64 oracle)")
        assert torch.allclose(o, fa2_o.double(), atol=1e-4), f"{where}: O differs from VARIANTS['fa2'].forward's"
        if not torch.allclose(lse, want_lse, atol=1e-9):
            raise AssertionError(f"{where}: O is right, lse is not: lse = m + log ℓ per row, with ℓ relative to "
                                 "the final m (line 13); max |lse − lse_fa2| = "
                                 f"{(lse - want_lse).abs().max():.2e}")
    print("exercise 6: right — equal to the float64 oracle and to VARIANTS['fa2'].forward, ragged blocks and large "
          "scores included")


# %% [markdown]
# ## Exercises
#
# **1.** Redo the counted table of section 1 with $B_r = 64$, $B_c = 16$. Which variant moves fewer bytes
# now, and why? Find blocks for which FA2 reads fewer bytes than FA1 at $N = 4096$, $d = 64$ on an
# H200 (`closed_forms.counts(..., sram_bytes=...)` tells you whether they fit). Check:
# `check_fa2_fewer_reads(br, bc)`.
#
# <details><summary>Solution</summary>
#
# FA1 re-reads $Q_i, O_i, \ell_i, m_i$ once per key block ($T_c = N/B_c$ times) and writes $O$ as often;
# FA2 re-reads $K_j, V_j$ once per query block ($T_r = N/B_r$ times). So FA2 wins when its re-reads are
# fewer — large $B_r$ — and always by the $O$ writes FA1 repeats. Compare
# `closed_forms.counts("fa1", 1, 1, 4096, 4096, 64, block_q=br, block_k=bc, sram_bytes=h200.sram_bytes).reads`
# with `"fa2"` for a few $(B_r, B_c)$.
#
# </details>
#
# **2.** Use the closed forms to verify the per-tile table of section 2: take a problem with exactly one
# tile ($N = B_r = B_c$) and compare the `exp` and `other` counts of FA1 and FA2. Check FA1's extra
# counts at $N = B_r = B_c = d = 64$: `check_tile_flops(exp_extra, other_extra)`.
#
# <details><summary>Solution</summary>
#
# ```python
# for name in ("fa1", "fa2"):
#     print(name, closed_forms.counts(name, 1, 1, 64, 64, 64, block_q=64, block_k=64).flops)
# ```
# `exp`: 4,224 against 4,160, FA1's second exponential per row ($r = 64$). `other`: 33,344 against
# 29,056; the difference, 4,288 $= 2rd + 3r$ less FA2's once-per-block $rd$ (its final division), is the
# per-visit rescale and division FA1 does.
#
# </details>
#
# **3.** Section 3 assumes one thread block per SM. An H200 SM has 228 KiB of shared memory: how many
# thread blocks of 64 KiB fit on one? With that many slots per SM, what is the smallest $N$ of section
# 3's sequence at which FA1 leaves SMs idle? Check: `check_slots(blocks_per_sm, n)`.
#
# <details><summary>Solution</summary>
#
# $\lfloor 228 / 64 \rfloor = 3$ blocks, so $3 \times 132 = 396$ slots. FA1 launches $B \cdot H =
# (16\text{k}/N) \cdot 16$ blocks: 512 at $N = 512$ (all busy), 256 at $N = 1024$ — idle SMs already at 1k,
# where one slot per SM would still be full.
#
# </details>
#
# **4.** The backward pass needs $P = \exp(S - L)$. Why is storing $L$ enough, while storing only $m$ would
# not be? What would go wrong storing only $\ell$? Write `p_from(S, L)`, which recomputes $P$ from the scores
# and the stored $L$ alone, and check it: `check_p_from_lse(p_from)`.
#
# <details><summary>Solution</summary>
#
# ```python
# def p_from(S, L):
#     return torch.exp(S - L[..., None])  # one L per row, broadcast over the keys
# check_p_from_lse(p_from)
# ```
#
# $P = e^{S - m}/\ell = e^{S - (m + \log \ell)}$: $L = m + \log\ell$ carries both in one number. $m$ alone
# lacks the normaliser; $\ell$ alone lacks the max, so recomputing $e^{S}/\ell$ would overflow exactly
# where the max was needed (notebook 2).
#
# </details>
#
# **5.** Causal attention halves the work. Does it halve FA2's thread blocks? Look at `Tiling.k_blocks`:
# which thread blocks have the most work, and what does that do to the tail of the launch? Check, for
# $N = 4096$, $B_r = B_c = 128$: `check_causal_ctas(thread_blocks, index_of_the_heaviest)`.
#
# <details><summary>Solution</summary>
#
# No: every query block still sees at least one key block, so all $T_r$ thread blocks are launched.
# Query block $i$ visits $i + 1$ key blocks (square problem), so the last query blocks have the most
# work; launched last, they leave a tail in which few SMs are busy — hence kernels schedule the
# heaviest blocks first.
#
# </details>
#
# **6.** Write FA2's forward (Algorithm 1) for one head in about 20 lines of PyTorch:
# `fa2_forward(q, k, v, br, bc)` with `q` of shape $(N_q, d)$, `k`, `v` of shape $(N_k, d)$, returning
# `(o, lse)`; non-causal, scale $1/\sqrt{d}$; blocks need not divide $N$. Outer loop over query blocks,
# inner over key blocks; keep $m_i$, $\ell_i$, $O_i$ on chip (local variables), rescale by
# $e^{m^{\text{old}} - m^{\text{new}}}$, divide once at the end, and return $\mathrm{lse} = m + \log\ell$.
# Check: `check_fa2_forward(fa2_forward)` (against the float64 oracle and `VARIANTS["fa2"].forward`, with
# ragged blocks and large scores).
#
# <details><summary>Solution</summary>
#
# ```python
# def fa2_forward(q, k, v, br, bc):
#     n_q, d = q.shape
#     o, lse = torch.empty_like(q), torch.empty(n_q, dtype=q.dtype)
#     for r0 in range(0, n_q, br):                      # outer loop: one query block (a thread block)
#         qi = q[r0:r0 + br] / math.sqrt(d)
#         oi = torch.zeros_like(qi)                     # on chip for the whole inner loop
#         li = torch.zeros(len(qi), 1, dtype=q.dtype)
#         mi = torch.full((len(qi), 1), -math.inf, dtype=q.dtype)
#         for c0 in range(0, k.shape[0], bc):           # inner loop: stream K_j, V_j past
#             s = qi @ k[c0:c0 + bc].T
#             m_new = torch.maximum(mi, s.amax(-1, keepdim=True))
#             p = torch.exp(s - m_new)
#             alpha = torch.exp(mi - m_new)             # e^(m_old - m_new): 0 at the first block
#             li = alpha * li + p.sum(-1, keepdim=True)
#             oi = alpha * oi + p @ v[c0:c0 + bc]
#             mi = m_new
#         o[r0:r0 + br] = oi / li                       # deferred normalisation, one write
#         lse[r0:r0 + br] = (mi + torch.log(li)).squeeze(-1)
#     return o, lse
# ```
#
# </details>
