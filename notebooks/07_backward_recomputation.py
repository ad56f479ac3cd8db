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
# # 7 · The backward pass: recomputation
#
# FlashAttention rests on two ideas. Notebooks 3-5 were about the first, **tiling**: never write the
# $N \times N$ scores to HBM. This one is about the second, **recomputation**: the backward pass needs
# $P = \mathrm{softmax}(S)$ again, and instead of keeping it from the forward ($N^2$ numbers per
# head) FlashAttention keeps only one number per row, $L = m + \log \ell$, and rebuilds $P$ tile by
# tile. More FLOPs, far fewer bytes, and memory that grows as $O(N)$ instead of $O(N^2)$.
#
# 1. The chain rule for softmax, and the identity $D = \mathrm{rowsum}(dO \circ O)$.
# 2. Standard attention's backward (FA1 paper, Algorithm 3): what an unfused backward moves.
# 3. FA1's Algorithm 4 against FA2's Algorithm 2: what FA2 moved out of the loop, and why $dQ$ needs
#    a float32 accumulator.
# 4. Recomputation's trade, counted and plotted.
# 5. Kernel fusion on a real GPU, from the committed timings.
# 6. The references as a differentiable op, and exercises.
#
# Everything runs on a CPU in seconds: the references in `variants/` are the same code the tests
# check against float64 autograd, and every count comes from `counting.memory.Memory` or its closed
# forms (`counting.backward_forms`).

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
# ## 1 · The chain rule for softmax
#
# Forward, per (batch, head): $S = \tau Q K^\top$, $P = \mathrm{softmax}(S)$ row by row, $O = P V$.
# Given $dO = \partial \mathcal{L} / \partial O$:
#
# $$dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad
# dS_{ij} = P_{ij}\,\Big(dP_{ij} - \sum_l P_{il}\, dP_{il}\Big), \qquad dQ = \tau\, dS\, K, \qquad dK = \tau\, dS^\top Q .$$
#
# The middle one is the softmax's Jacobian, $\partial P_{il} / \partial S_{ij} = P_{il}(\delta_{lj} - P_{ij})$,
# applied to a row. Its row sum has a cheaper form:
#
# $$D_i = \sum_l P_{il}\, dP_{il} = \sum_l P_{il}\, (dO_i \cdot V_l) = dO_i \cdot \sum_l P_{il} V_l = dO_i \cdot O_i .$$
#
# So $D = \mathrm{rowsum}(dO \circ O)$: $d$ multiplies per row from two $N \times d$ matrices, instead of
# $N$ from the $N \times N$ matrices $P$ and $dP$. Below, both forms and the five gradient formulas
# against PyTorch's autograd, in float64.

# %%
from variants import VARIANTS, attention
from variants.reference import attention_reference

B, H, Nq, Nk, d = 1, 2, 37, 45, 16
tau = 1 / math.sqrt(d)
q, k, v, dO = (torch.randn(B, H, n, d, dtype=torch.float64) for n in (Nq, Nk, Nk, Nq))

S = tau * q @ k.transpose(-1, -2)
P = torch.softmax(S, dim=-1)
O = P @ v
dV = P.transpose(-1, -2) @ dO
dP = dO @ v.transpose(-1, -2)
D_long = (P * dP).sum(-1, keepdim=True)   # from the N x N matrices
D_short = (dO * O).sum(-1, keepdim=True)  # from the N x d matrices
dS = P * (dP - D_short)
dQ, dK = tau * dS @ k, tau * dS.transpose(-1, -2) @ q

qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
torch.softmax(tau * qa @ ka.transpose(-1, -2), dim=-1).matmul(va).backward(dO)
show_table(["quantity", "max |difference|"], [
    ["D: rowsum(P∘dP) vs rowsum(dO∘O)", f"{(D_long - D_short).abs().max():.1e}"],
    ["dQ vs autograd", f"{(dQ - qa.grad).abs().max():.1e}"],
    ["dK vs autograd", f"{(dK - ka.grad).abs().max():.1e}"],
    ["dV vs autograd", f"{(dV - va.grad).abs().max():.1e}"],
])
assert torch.allclose(D_long, D_short) and torch.allclose(dQ, qa.grad) and torch.allclose(dK, ka.grad)

# %% [markdown]
# ## 2 · Standard attention's backward: P comes back from HBM
#
# The unfused backward (FA1 paper, Algorithm 3; `variants/naive.py`) is five kernels. It reads the
# $P$ its forward left in HBM, and writes $dP$ and $dS$, both $N_q \times N_k$, to HBM between kernels.
# It computes no exponential at all: nothing is recomputed. Run it under a counting `Memory`:

# %%
from counting.memory import Memory
from counting import backward_forms as bf

def counted_backward(name, q, k, v, dO, causal=False, br=16, bc=16):
    # forward, then the counted backward; returns (grads, Counts)
    saved = {}
    extra = {"saved": saved} if name in ("naive", "fa1") else {}
    o, lse = VARIANTS[name].forward(q, k, v, causal=causal, block_q=br, block_k=bc, **extra)
    mem = Memory()
    kw = {"P": saved["P"]} if name == "naive" else {"l": saved["l"], "m": saved["m"]} if name == "fa1" else {}
    grads = VARIANTS[name].backward(q, k, v, o, lse, dO, causal=causal, block_q=br, block_k=bc, mem=mem, **kw)
    return grads, mem.counts

q32, k32, v32, dO32 = (t.float() for t in (q, k, v, dO))
(gq, gk, gv), c = counted_backward("naive", q32, k32, v32, dO32)
print("dq error vs float64:", f"{(gq.double() - dQ).abs().max():.1e}")
names = sorted(set(c.reads) | set(c.writes))
show_table(["tensor", "elements read", "elements written"],
           [[n, c.reads.get(n, 0), c.writes.get(n, 0)] for n in names])
print("FLOPs:", dict(c.flops), " (no exp: P is read, not rebuilt)")

# %% [markdown]
# ## 3 · FA1's Algorithm 4 against FA2's Algorithm 2
#
# Both loop over key blocks outside ($j$) and query blocks inside ($i$), so $K_j, V_j$ are read once
# and $dK_j, dV_j$ accumulate on chip. Both rebuild $P_{ij}$ from $Q_i$, $K_j$ and per-row statistics.
# What differs is what happens at each visited tile $(j, i)$:
#
# | | FA1, Algorithm 4 | FA2, Algorithm 2 |
# |---|---|---|
# | statistics read per tile | $\ell_i$, $m_i$; $P = \mathrm{diag}(\ell)^{-1} e^{S - m}$ (FA1 Alg. 4 line 13) | $L_i$ only; $P = e^{S - L}$ (FA2 Alg. 2 line 11) |
# | $D_i = \mathrm{rowsum}(dO_i \circ O_i)$ | recomputed at every tile (FA1 Alg. 4 line 19), so $O_i$ is read $T_c$ times | computed once before the loop (FA2 Alg. 2 line 4), $O$ read once |
# | $dQ_i$ | read and written per tile, in the input dtype (FA1 Alg. 4 line 21) | read and written per tile, a **float32** accumulator (FA2 Alg. 2 line 15) |
# | $dK_j$, $dV_j$ | zeroed in HBM (FA1 Alg. 4 line 5), written at the end | written once at the end (FA2 Alg. 2 line 18) |
#
# (Line numbers as the papers print them; `docs/lines.md` lists each line and the code that carries it out.)
#
# **Why dQ needs an accumulator.** With $K/V$ outside, $dQ_i = \tau \sum_j dS_{ij} K_j$ receives one
# partial sum per visited key block, and those partial sums arrive in different iterations of the
# outer loop: $dQ_i$ cannot stay on chip, so it makes a round trip through HBM at every tile. If
# that running sum is stored in fp16/bf16, it is rounded $T_c$ times, like FA1's running $O$ in the
# forward. FA2 keeps it in float32 (and its GPU kernels add with atomics, since thread blocks for
# different $j$ run at once). The counts, and the effect of the rounding on a bf16 problem with 128
# key blocks:

# %%
rows = []
for name in ("fa1", "fa2"):
    (gq, gk, gv), c = counted_backward(name, q32, k32, v32, dO32)
    for t in ("O", "D", "l", "m", "lse", "dQ"):
        if c.reads.get(t) or c.writes.get(t):
            rows.append([name, t, c.reads.get(t, 0), c.writes.get(t, 0), c.read_bytes.get(t, 0) + c.write_bytes.get(t, 0)])
    rows.append([name, "other FLOPs", "", "", c.flops["other"]])
show_table(["variant", "tensor", "elements read", "elements written", "bytes (or FLOPs)"], rows)
# the totals in this float32 run and in fp16 (the training dtype), where FA2's dQ stays float32 and FA1's does not
q16, k16, v16, dO16 = (t.half() for t in (q, k, v, dO))
print("HBM bytes, whole backward:", "; ".join(
    f"{label}: fa1 {counted_backward('fa1', *ins)[1].hbm_bytes:,}, fa2 {counted_backward('fa2', *ins)[1].hbm_bytes:,}"
    for label, ins in (("float32", (q32, k32, v32, dO32)), ("fp16", (q16, k16, v16, dO16)))))

from tests.backward_helpers import reference_grads
qb, kb, vb, dOb = (torch.randn(1, 1, n, 32).to(torch.bfloat16) for n in (32, 1024, 1024, 32))
ref = reference_grads(qb, kb, vb, dOb)
errs = {}
for name in ("fa1", "fa2"):
    (gq, _, _), _ = counted_backward(name, qb, kb, vb, dOb, br=32, bc=8)
    errs[name] = (gq.double() - ref[0]).abs().max().item() / ref[0].abs().max().item()
print("bf16, Tc = 128 key blocks: relative dq error  fa1 (bf16 dQ in HBM): "
      f"{errs['fa1']:.1e}   fa2 (float32 accumulator): {errs['fa2']:.1e}")
assert errs["fa1"] > 2 * errs["fa2"]

# %% [markdown]
# **One tile of FA2's backward, as a picture.** For each visited tile $(i, j)$ Algorithm 2 runs five
# matrix products (bold rows) and two elementwise steps. The columns are the operands, coloured by
# where they live: $K_j, V_j$ and the accumulators $dK_j, dV_j$ stay on chip for the whole inner loop
# (outer loop over $j$); $Q_i$, $dO_i$, $L_i$, $D_i$ are read from HBM at every tile; $dQ_i$ makes a
# round trip through HBM at every tile (the float32 accumulator above); $S$, $P$, $dP$, $dS$ are born
# and die on chip — the $N \times N$ matrices the standard backward stores are never stored.
# (`draw_backward_products` in `analysis/tiling_pictures.py`; its test holds the five products against the
# matmul FLOPs `variants/fa2.py`'s backward counts.)

# %%
from analysis.tiling_pictures import draw_backward_products

draw_backward_products(br=64, bc=64, d=64)
plt.show()

# %% [markdown]
# Note what the counts say and what they do not. In this float32 run both $dQ$'s take 4 bytes an
# element, and FA2 moves fewer bytes than FA1 (it reads $O$ once). In fp16, as models train, FA2 moves
# *more*: its float32 $dQ$ costs twice FA1's bytes per round trip. Either way it does less elementwise
# work ($D$ once, no $\ell$ divide). As in the forward (notebook 4), FA2's real advantages are parallelism
# and fewer non-matmul FLOPs; the HBM model does not credit the L2 cache that absorbs the re-reads.
#
# ## 4 · Recomputation's trade, counted
#
# Per visited tile, the recomputing backward does five products ($S$, $dV$, $dP$, $dQ$, $dK$)
# where the unfused one does four: the extra one is $S = \tau Q_i K_j^\top$, plus the exponentials of
# $P$. In exchange, nothing of size $N_q \times N_k$ is stored, read or written. The closed forms
# (`counting.backward_forms`, held exactly equal to the references by the tests) give the whole
# training step (forward + backward) at any $N$; first a check that they restate the counted run:

# %%
for name in ("naive", "fa1", "fa2"):
    _, c = counted_backward(name, q32, k32, v32, dO32, causal=True, br=8, bc=16)
    closed = bf.backward_counts(name, B, H, Nq, Nk, d, causal=True, dtype="fp32", block_q=8, block_k=16)
    got = c.as_dict()
    for key in ("reads", "writes", "read_bytes", "write_bytes"):
        got[key] = {t: n for t, n in got[key].items() if n}
    assert got == closed.as_dict(), name
print("closed forms == counted references (naive, fa1, fa2; causal, Nq != Nk, tails)")

Bh, Hh, dh, dt = 8, 16, 64, "bf16"  # a training-sized batch: B·H = 128 heads of d = 64
Ns = [512, 1024, 2048, 4096, 8192, 16384, 32768]
train = {name: [bf.pass_counts("train", name, Bh, Hh, n, n, dh, causal=True, dtype=dt,
                               block_q=64, block_k=64) for n in Ns] for name in ("naive", "fa2")}
show_table(["N", "naive HBM", "fa2 HBM", "naive FLOPs", "fa2 FLOPs", "fa2 recompute", "naive saved", "fa2 saved"],
           [[n, human(a.hbm_bytes), human(b.hbm_bytes), f"{sum(a.flops.values()):.3g}",
             f"{sum(b.flops.values()):.3g}", f"{sum(b.recompute_flops.values()) / sum(b.flops.values()):.0%}",
             human(a.saved_bytes, True), human(b.saved_bytes, True)]
            for n, a, b in zip(Ns, train["naive"], train["fa2"])])

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
for name in ("naive", "fa2"):
    rs, st = train[name], line_style(name)
    axes[0].plot(Ns, [r.saved_bytes for r in rs], label=name, **st)
    axes[1].plot(Ns, [r.hbm_bytes for r in rs], label=name, **st)
    axes[2].plot(Ns, [sum(r.flops.values()) for r in rs], label=name, **st)
from counting.gpus import GPUS
axes[0].axhline(GPUS["h200"].hbm_bytes.value, color="k", ls="--", lw=0.8, label="H200 HBM (141 GB)")
for ax, title in zip(axes, ("memory saved for the backward", "HBM traffic, forward + backward",
                            "FLOPs, forward + backward")):
    ax.set_xscale("log", base=2); ax.set_yscale("log"); ax.set_xlabel("N (log scale)"); ax.set_title(title)
    ax.grid(alpha=0.3); legend_outside(ax)
axes[0].set_ylabel("bytes (log scale)"); axes[1].set_ylabel("bytes (log scale)"); axes[2].set_ylabel("FLOPs (log scale)")
extra = sum(train["fa2"][-1].flops.values()) / sum(train["naive"][-1].flops.values()) - 1
fig.suptitle(f"B={Bh}, H={Hh}, d={dh}, {dt}, causal: recomputation buys O(N) memory and "
             f"{train['naive'][-1].hbm_bytes / train['fa2'][-1].hbm_bytes:.1f}x fewer bytes for {extra:.0%} more FLOPs")
fig.tight_layout()
plt.show()

# %% [markdown]
# The left panel is the point of recomputation: at $B \cdot H = 128$ and $N = 32$k, naive's $P$ alone
# would not fit in an H200's memory, while FA2 keeps 16 MiB. The same numbers, with a roofline, come
# from the command line:
#
#     fa-traffic report --pass train --causal --batch 8 --heads 16 --dtype bf16 --plot footprint.png
#
# ## 5 · Kernel fusion on a real GPU
#
# The unfused algorithm is not only a memory problem. Each of its passes is a separate kernel that
# writes its result to HBM for the next one to read back. PyTorch's `math` backend of
# `scaled_dot_product_attention` is exactly that; its `flash` backend is one fused kernel. The
# committed timings put them side by side — the forward from `results/bench_kernels.json`, the
# backward from `results/bwd_kernels_vs_sdpa_grid/bwd_bench.json` (an H200, fp16, $B \cdot N = 16$k, $H = 2048/d$)
# — next to the traffic ratio our counts predict for each pass:

# %%
import json
from counting import closed_forms as cf

path = ROOT / "results" / "bench_kernels.json"
data = json.loads(path.read_text()) if path.exists() else {"records": []}
timing = {(r["label"], r["n"], r["d"], r["causal"]): r["median_ms"] for r in data["records"]
          if r.get("label") in ("sdpa_math", "sdpa_flash") and "median_ms" in r}
rows = []
for n in sorted({key[1] for key in timing}):
    key_m, key_f = ("sdpa_math", n, 64, False), ("sdpa_flash", n, 64, False)
    if key_m in timing and key_f in timing:
        b, h = 16384 // n, 2048 // 64
        naive = cf.counts("naive", b, h, n, n, 64, dtype="fp16", block_q=64, block_k=64)
        fa2 = cf.counts("fa2", b, h, n, n, 64, dtype="fp16", block_q=64, block_k=64)
        rows.append([n, f"{timing[key_m]:.3f}", f"{timing[key_f]:.3f}", f"{timing[key_m] / timing[key_f]:.1f}×",
                     f"{naive.hbm_bytes / fa2.hbm_bytes:.1f}×"])
if rows:
    show_table(["N", "SDPA math (ms)", "SDPA flash (ms)", "measured math/flash", "counted HBM naive/fa2"], rows)
else:
    print("not measured yet: no sdpa_math / sdpa_flash timings in", path)

# the backward: the committed run of bench/bench_bwd.py (same setting; every cell's gradients checked first)
bpath = ROOT / "results" / "bwd_kernels_vs_sdpa_grid" / "bwd_bench.json"
bdata = json.loads(bpath.read_text()) if bpath.exists() else {}
brecs, brun = bdata.get("rows", []), bdata.get("meta", {}).get("run_id", "no run id")
by = {(r["kernel"], r["n"]): r for r in brecs if r.get("ok") and r.get("bwd_ms") and r["dtype"] == "float16"
      and r["d"] == 64 and not r["causal"]}
brows = []
for n in sorted(n for k_, n in by if k_ == "sdpa_math"):
    if ("sdpa_flash", n) in by:
        b, h = by[("sdpa_math", n)]["b"], by[("sdpa_math", n)]["h"]
        naive = bf.backward_counts("naive", b, h, n, n, 64, dtype="fp16", block_q=64, block_k=64)
        fa2 = bf.backward_counts("fa2", b, h, n, n, 64, dtype="fp16", block_q=64, block_k=64)
        m, f = by[("sdpa_math", n)]["bwd_ms"], by[("sdpa_flash", n)]["bwd_ms"]
        brows.append([n, f"{m:.3f}", f"{f:.3f}", f"{m / f:.1f}×", f"{naive.hbm_bytes / fa2.hbm_bytes:.1f}×"])
if brows:
    show_table(["N", "math backward (ms)", "flash backward (ms)", "measured math/flash", "counted HBM naive/fa2"], brows)
    print(f"backward: fp16, d = 64, non-causal, run {brun.split('-')[0]} ({bpath.relative_to(ROOT)}); "
          "the math backend was not timed at N = 16k")
else:
    print(f"backward not measured yet: no sdpa_math / sdpa_flash rows in {bpath.relative_to(ROOT)}")

# %% [markdown]
# Fusion wins the forward by more than an order of magnitude (15–20×) and the backward by 5–8×, each
# several times what the byte ratio alone predicts.
# The counts model Algorithm 0's three passes at full bandwidth; what they leave out - how many kernels
# the math backend really launches, and what fraction of HBM bandwidth and tensor-core rate each
# reaches - is for a profiler to measure (notebook 6; `results/bwd_kernels_vs_sdpa_grid/bwd_bench.md` has the math
# backend's backward at 16-48 TFLOP/s against 107-310 for flash's). The direction is the lesson: an unfused
# backward's five kernels (section 2) pay the same toll for $P$, $dP$ and $dS$. The workbench's own backward
# kernels are the teaching one (`kernels/fa2.py` launching `kernels/cuda/fa2_bwd.cu`, readable) and the
# Hopper one (`kernels/fa2_wgmma_bwd.py`: before issue 42's promotion of v4, at N ≥ 2k 1.23–1.29× SDPA flash's
# backward at d = 64 and 1.39–1.44× at d = 128, `results/bwd_kernels_vs_sdpa_grid/bwd_bench.md`; v4, the default
# since, is 1.15–1.37× v3 on an H100, `results/bwd_ws_v4/alternatives`); they and `kernels.attention`, which
# trains a model with them, are measured in `results/`.
#
# ## 6 · The references as a differentiable op
#
# `variants.attention(q, k, v, variant=..., causal=...)` is a `torch.autograd.Function`: its forward
# runs the variant's forward and saves what that variant's backward reads (naive: $P$; fa1: $O, \ell,
# m$; fa2 and v_once: $O$ and $L$), and its backward calls the variant's `backward`. A tiny byte-level
# GPT (`model/`) trained with it follows the losses of one trained with SDPA (`tests/test_model.py`).
# What the op keeps between the passes:

# %%
x = [torch.randn(1, 1, 64, 8, requires_grad=True) for _ in range(3)]
rows = []
for name in VARIANTS:
    o = attention(*x, variant=name, causal=True, block_q=16, block_k=16)
    kept = sum(t.numel() for t in o.grad_fn.saved_tensors) - 3 * x[0].numel()
    o.sum().backward()
    rows.append([name, kept, f"{x[0].grad.abs().max():.3f}"])
    for t in x:
        t.grad = None
show_table(["variant", "floats saved beyond q, k, v", "max |dq|"], rows)


# %%
# Checks for the exercises: each takes your answer and says whether it is right.
def check_softmax_backward_row(fn):
    p = torch.softmax(torch.randn(7, dtype=torch.float64), 0)
    dp = torch.randn(7, dtype=torch.float64)
    s = torch.log(p).requires_grad_()
    torch.softmax(s, 0).backward(dp)
    assert torch.allclose(fn(p, dp), s.grad), "not the softmax's backward"
    print("exercise 1: right")

def check_fa2_reads(fn):
    for n, blk, d_ in ((256, 64, 32), (1000, 128, 64)):
        want = bf.backward_counts("fa2", 1, 1, n, n, d_, dtype="fp16", block_q=blk, block_k=blk).reads
        assert fn(n, blk, d_) == want, f"N={n}, blocks {blk}, d={d_}: expected {want}"
    print("exercise 2: right")

def check_naive_limit(n):
    fits = lambda m: bf.saved_bytes("naive", 32, 16, m, m, "fp16") <= GPUS["h200"].hbm_bytes.value
    assert not fits(n) and fits(n - 1), f"{n} is not the smallest N whose P exceeds the H200's HBM"
    print("exercise 3: right")

def check_dq_saving(saved_bytes):
    # exercise 4: B = H = 1, Nq = Nk = 16384, d = 64, Br = Bc = 64, bf16 inputs
    n, d, blk = 16384, 64, 64
    tc = n // blk
    want = 2 * tc * n * d * (4 - 2)  # Tc round trips (read + write) of the Nq x d accumulator, 2 bytes saved each
    if abs(saved_bytes - want) <= 0.01 * want:  # the one zeroing write and final read (0.4 % more) count too
        print(f"exercise 4: right ({human(want)} saved of the accumulator's traffic)")
        return
    if abs(saved_bytes - want / 2) <= 0.01 * want:
        raise AssertionError("half the answer: each visit reads dQ_i *and* writes it back — two accesses per tile")
    if abs(saved_bytes - 2 * want) <= 0.02 * want:
        raise AssertionError("twice the answer: a float32 element is 4 bytes and a bf16 one 2 — 2 bytes saved per "
                             "access, not 4")
    if 0.95 * want / (2 * tc) <= saved_bytes <= 1.05 * want / tc:
        raise AssertionError("that is one pass over dQ: the accumulator makes a round trip at every key block, "
                             f"Tc = N / Bc = {tc} times")
    raise AssertionError(f"{saved_bytes:,} bytes: count dQ_i's reads and writes, one of each per visited tile "
                         "(Tc per row block), each 2 bytes cheaper in bf16 than in float32")


def check_empty_row_dq(dq_row):
    dq_row = torch.as_tensor(dq_row)
    assert not torch.isnan(dq_row).any(), ("NaN: did you call variants.fa2.backward? Its P = exp(S − "
                                           "finite_or_zero(L)) avoids e^(−inf − (−inf)); a hand-made exp(S − L) "
                                           "gives NaN for a row with L = −inf")
    assert (dq_row == 0).all(), ("not zero: pass the dq of a row that sees no key (row 0 with causal=True and "
                                 "Nq > Nk); its P is 0, so dS = P ∘ (dP − D) and dq vanish")
    print("exercise 6: right — the row's dq is exactly 0")


def check_d_recompute(extra_other_flops, extra_o_bytes):
    """Exercise 5: FA1's backward against FA2's at Nq = Nk = 4096, d = 64, Br = Bc = 64, fp16, one head."""
    from counting import backward_forms as bf

    fa1, fa2 = (bf.backward_counts(v, 1, 1, 4096, 4096, 64, dtype="fp16", block_q=64, block_k=64) for v in ("fa1", "fa2"))
    want_flops = fa1.flops["other"] - fa2.flops["other"]
    want_bytes = fa1.read_bytes["O"] - fa2.read_bytes["O"]
    per_visit = 4096 * 64 * 2
    if extra_o_bytes != want_bytes:
        hint = (" — that is one visit's O; FA1 reads it at each of its Tc = 64 visits, FA2 once"
                if extra_o_bytes == per_visit else " — count bytes (fp16: 2 a value), not elements"
                if extra_o_bytes * 2 == want_bytes else "")
        raise AssertionError(f"extra bytes of O: {extra_o_bytes:,} is not {want_bytes:,}{hint}")
    if extra_other_flops != want_flops:
        raise AssertionError(f"extra `other` FLOPs: {extra_other_flops:,} is not {want_flops:,} — FA1 redoes its row work "
                             "(D_i = rowsum(dO_i ∘ O_i): a multiply and an add per element) at every one of its visits, "
                             "and rebuilds P as e^(S − m)/ℓ, one FLOP more per score than FA2's e^(S − L)")
    print("exercise 5: right — both tiny next to the matmul FLOPs; the bytes are what the papers' roofline notices")


def check_fa2_backward(fn):
    # fn(q, k, v, o, lse, do, br, bc) -> (dq, dk, dv) for one head: q, o, do (Nq, d); k, v (Nk, d); lse (Nq,)
    import variants as _variants  # VARIANTS and the float64 oracle

    torch.manual_seed(7)
    for n_q, n_k, d, br, bc in ((32, 32, 8, 8, 8), (40, 27, 16, 16, 8)):
        q, k, v = (torch.randn(n, d, dtype=torch.float64, requires_grad=True) for n in (n_q, n_k, n_k))
        do = torch.randn(n_q, d, dtype=torch.float64)
        o, lse = (t[0, 0].detach() for t in _variants.attention_reference(q[None, None], k[None, None], v[None, None]))
        (torch.softmax(q @ k.T / math.sqrt(d), -1) @ v).backward(do)  # the float64 oracle, by autograd
        want = (q.grad, k.grad, v.grad)
        q, k, v = (t.detach() for t in (q, k, v))
        fa2 = [g[0, 0].double() for g in _variants.VARIANTS["fa2"].backward(
            q[None, None], k[None, None], v[None, None], o[None, None], lse[None, None].float(), do[None, None],
            block_q=br, block_k=bc)]
        where = f"Nq = {n_q}, Nk = {n_k}, d = {d}, Br = {br}, Bc = {bc}"
        got = [torch.as_tensor(g).double() for g in fn(q.clone(), k.clone(), v.clone(), o.clone(), lse.clone(),
                                                        do.clone(), br, bc)]
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            assert g.shape == w.shape, f"{where}: {name} has shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        dq, dk, dv = got
        tau = 1 / math.sqrt(d)
        p = torch.exp(tau * q @ k.T - lse[:, None])
        if not torch.allclose(dv, want[2], atol=1e-9):
            if torch.allclose(dv, torch.exp(q @ k.T - lse[:, None]).T @ do, atol=1e-9):
                raise AssertionError(f"{where}: dV — recompute S with the scale: P = exp(τ Q_i K_jᵀ − L_i), τ = 1/√d")
            raise AssertionError(f"{where}: dV is off (max error {(dv - want[2]).abs().max():.2e}): dV_j accumulates "
                                 "P_ijᵀ dO_i over every query block i (line 12), with P = exp(τ S − L) (line 11).")
        ds_no_d = p * (do @ v.T)
        for name, g, w, no_d in (("dq", dq, want[0], tau * ds_no_d @ k), ("dk", dk, want[1], tau * ds_no_d.T @ q)):
            if torch.allclose(g, w, atol=1e-9):
                continue
            if torch.allclose(g, no_d, atol=1e-9):
                raise AssertionError(f"{where}: {name} — dS = P ∘ (dP − D_i), with D_i = rowsum(dO_i ∘ O_i) "
                                     "(line 4); without D the softmax's backward misses its −P·(P·dP) term.")
            if torch.allclose(g * tau, w, atol=1e-9) or torch.allclose(g / tau, w, atol=1e-9):
                raise AssertionError(f"{where}: {name} is off by the factor τ = 1/√d: S = τ Q Kᵀ, so the chain "
                                     "rule puts one τ on dQ = τ dS K and on dK = τ dSᵀ Q.")
            raise AssertionError(f"{where}: {name} is off (max error {(g - w).abs().max():.2e}); dQ_i accumulates "
                                 "τ dS_ij K_j over the key blocks (line 15), dK_j accumulates τ dS_ijᵀ Q_i (line 16).")
        for name, g, f in zip(("dq", "dk", "dv"), got, fa2):
            assert torch.allclose(g, f, atol=1e-4), f"{where}: {name} differs from VARIANTS['fa2'].backward's"
    print("exercise 7: right — equal to autograd in float64 and to VARIANTS['fa2'].backward, ragged blocks included")

# %% [markdown]
# ## Exercises
#
# **1.** Write `softmax_backward_row(p, dp)` returning $dS$ for one row from $P$ and $dP$ (section 1),
# without autograd. Check: `check_softmax_backward_row(softmax_backward_row)`.
#
# <details><summary>Solution</summary>
#
# ```python
# def softmax_backward_row(p, dp):
#     return p * (dp - (p * dp).sum())   # dS_i = P_i (dP_i − Σ_j P_j dP_j): the Jacobian diag(P) − P Pᵀ times dP
# ```
# The sum $\sum_j P_j\, dP_j$ is the $D$ of the attention backward: $D_i = \mathrm{rowsum}(dO_i \circ O_i)$
# equals $\mathrm{rowsum}(P_i \circ dP_i)$ because $O = PV$ and $dP = dO\,V^\top$.
#
# </details>
#
# **2.** From the FA2 backward's docstring in `variants/fa2.py`, write `fa2_reads(n, blk, d)` returning the
# dict of elements read per tensor for non-causal $N_q = N_k = n$, $B_r = B_c = $ `blk`, one head
# (mind the tail block when `blk` does not divide $n$). Check: `check_fa2_reads(fa2_reads)`.
#
# <details><summary>Solution</summary>
#
# Per tile $(j, i)$ the backward reads $Q_i$, $dO_i$, $L_i$, $D_i$ and round-trips $dQ_i$; per key block
# it reads $K_j$, $V_j$ once; before the loops it reads $O$ and $dO$ once for $D$; after them $dQ$ once.
# ```python
# def fa2_reads(n, blk, d):
#     t = -(-n // blk)                      # Tr = Tc, the tail block included
#     return {"Q": t * n * d, "K": n * d, "V": n * d, "O": n * d, "dO": (t + 1) * n * d,
#             "lse": t * n, "D": t * n, "dQ": (t + 1) * n * d}
# ```
# (Each key block $j$ meets every query block, so every row of $Q$, $dO$, $L$, $D$ is read $T_c$ times —
# the tail block only changes $T_c$, not the rows per pass.)
#
# </details>
#
# **3.** With $B = 32$, $H = 16$, fp16: find the smallest $N$ for which naive's saved $P$ alone exceeds an
# H200's 141 GB. Check: `check_naive_limit(N)`. What does FA2 keep at that $N$?
#
# <details><summary>Solution</summary>
#
# ```python
# n = next(m for m in range(1, 1 << 20) if bf.saved_bytes("naive", 32, 16, m, m, "fp16") > GPUS["h200"].hbm_bytes.value)
# ```
# $P$ is $B H N^2$ fp16 elements, so $N \approx \sqrt{141\,\text{GB} / (32 \cdot 16 \cdot 2)}$: 11,735.
# FA2 keeps, beyond $q, k, v$ and its output $O$, only $L$: $B H N$ float32 numbers, 24 MB there
# (`bf.saved_bytes("fa2", 32, 16, n, n, "fp16")`) — linear in $N$, so memory no longer sets the length.
#
# </details>
#
# **4.** Change FA2's accumulator to the input dtype (edit `dq_acc` in `variants/fa2.py`'s backward, in a
# scratch copy). How much HBM traffic does it save at $N = 16$k, and what does it do to the bf16
# error of section 3? Which would you choose, and why does FA2's CUDA code choose float32? Check the
# bytes saved for $B = H = 1$, $N_q = N_k = 16384$, $d = 64$, $B_r = B_c = 64$, bf16:
# `check_dq_saving(saved_bytes)`.
#
# <details><summary>Solution</summary>
#
# `dq_acc` is read and written once per key block ($T_c$ times), so storing it in the input dtype halves
# those $2 T_c N_q d$ accesses' bytes (4 → 2 per element): count it with `counted_backward` before and
# after. But every add then rounds to bf16's 8 mantissa bits, and the rounding errors of $T_c$ partial
# sums accumulate — section 3's bf16 error grows with $N$. FA2's CUDA code keeps float32 (atomic adds)
# because accuracy of dQ is worth far more than those bytes.
#
# </details>
#
# **5.** Algorithm 4 (FA1) recomputes $D_i$ at every tile. Count, with `counted_backward`, the extra
# `other` FLOPs and the extra bytes of $O$ this costs at $N_q = N_k = 4096$, $d = 64$, $B_r = B_c = 64$ — is it
# the bytes or the FLOPs that matter on an H200 (use `analysis.roofline`)? Check:
# `check_d_recompute(extra_other_flops, extra_o_bytes)` (FA1's count minus FA2's).
#
# <details><summary>Solution</summary>
#
# ```python
# q, k, v, dO = (torch.randn(1, 1, 4096, 64, dtype=torch.float16) for _ in range(4))
# counts = {name: counted_backward(name, q, k, v, dO, br=64, bc=64)[1] for name in ("fa1", "fa2")}
# check_d_recompute(counts["fa1"].flops["other"] - counts["fa2"].flops["other"],
#                   counts["fa1"].read_bytes["O"] - counts["fa2"].read_bytes["O"])
# ```
# FA1 recomputes $D_i = \mathrm{rowsum}(dO_i \circ O_i)$ at each of the $T_c$ visits: $(T_c - 1)$ extra
# reads of $O$ ($N_q d$ elements each, 16,515,072 bytes in fp16). The extra `other` FLOPs, 82,837,504, are that
# per-visit row work FA2 does once (66,060,288 with the column work beside it) and one FLOP more per score
# (16,777,216: FA1 rebuilds $P$ as $e^{S - m}/\ell$ where FA2 subtracts one $L$); `_fa1` and `_fa2` in
# `counting/backward_forms.py` itemise them. Against the matmul
# FLOPs these are tiny. The bytes are what `analysis.roofline` notices: by the papers' count (no cache) the
# backward sits left of the H200's ridge (≈ 200 FLOP/B), so the extra reads of $O$ add to its memory time —
# still little next to the $K, V$ re-reads. That is the papers' count, not the H200's bound: on the GPU the
# L2 serves re-reads, so DRAM can see far fewer bytes (for the forward, Nsight Compute measures FA2's DRAM
# bytes at about one read of each input; notebooks 1 and 6).
#
# </details>
#
# **6.** A row that sees no key (causal, $N_q > N_k$) has $L = -\infty$. Why does $P = e^{S - L}$ not give
# NaN in `variants/fa2.py`, and what is its $dq$? Verify with a call, then `check_empty_row_dq(dq[0, 0, 0])`.
#
# <details><summary>Solution</summary>
#
# `variants/fa2.py`'s backward computes $P = e^{S - \text{finite\_or\_zero}(L)}$: for such a row every score
# is masked to $-\infty$ and $L$ is replaced by 0, so $P = e^{-\infty} = 0$ instead of
# $e^{-\infty - (-\infty)} = $ NaN. Then $dS = P \circ (dP - D) = 0$ and the row's $dq$ is exactly 0 —
# call `variants.fa2.backward` with $N_q > N_k$, `causal=True`, and look at `dq[..., 0, :]`.
#
# </details>
#
# **7.** Write FA2's backward (Algorithm 2) for one head: `fa2_backward(q, k, v, o, lse, do, br, bc)` with
# `q`, `o`, `do` of shape $(N_q, d)$, `k`, `v` of shape $(N_k, d)$ and `lse` of shape $(N_q,)$, returning
# `(dq, dk, dv)`; non-causal, $\tau = 1/\sqrt{d}$; blocks need not divide $N$. Outer loop over key blocks
# ($dK_j$, $dV_j$ accumulate on chip), inner over query blocks; recompute $S$ and $P = e^{\tau S - L}$,
# then the five products of the picture in section 3. Check: `check_fa2_backward(fa2_backward)` (against
# autograd in float64 and `VARIANTS["fa2"].backward`).
#
# <details><summary>Solution</summary>
#
# ```python
# def fa2_backward(q, k, v, o, lse, do, br, bc):
#     n_q, d = q.shape
#     tau = 1 / math.sqrt(d)
#     D = (do * o).sum(-1, keepdim=True)              # line 4: once, before the loops
#     dq = torch.zeros_like(q)                        # line 3: the accumulator in HBM
#     dk, dv = torch.zeros_like(k), torch.zeros_like(v)
#     for c0 in range(0, k.shape[0], bc):             # line 5: outer loop over K_j, V_j
#         kj, vj = k[c0:c0 + bc], v[c0:c0 + bc]
#         dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)   # line 7: on chip
#         for r0 in range(0, n_q, br):                # line 8: Q_i, dO_i, L_i, D_i stream past
#             qi, doi = q[r0:r0 + br], do[r0:r0 + br]
#             p = torch.exp(tau * qi @ kj.T - lse[r0:r0 + br, None])   # lines 10-11: S, P recomputed
#             dvj += p.T @ doi                        # line 12
#             dp = doi @ vj.T                         # line 13
#             ds = p * (dp - D[r0:r0 + br])           # line 14
#             dq[r0:r0 + br] += tau * ds @ kj         # line 15: read, add, write back
#             dkj += tau * ds.T @ qi                  # line 16
#         dk[c0:c0 + bc], dv[c0:c0 + bc] = dkj, dvj   # line 18: one write each
#     return dq, dk, dv
# ```
#
# </details>
