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
# # 3 · FlashAttention-1: Algorithm 1, step by step
#
# FlashAttention (Dao et al. 2022) computes exact attention without ever writing the $N \times N$
# score matrix to HBM. This notebook runs the workbench's reference of **Algorithm 1 as printed**
# (`variants/fa1.py`) on a tiny problem and watches it work, then counts its HBM traffic and
# reproduces the paper's **Theorem 2**: traffic falls as $\Theta(N^2 d^2 / M)$ with SRAM size $M$.
#
# 1. Algorithm 1, and which tensor the code keeps where.
# 2. A tiny example: which tiles are visited in which order, and the running $O$ in HBM.
# 3. Its HBM traffic, counted with `counting.memory.Memory`, per tensor.
# 4. Theorem 2: traffic against SRAM size, counted, on a log-log plot.

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
# ## 1 · Algorithm 1
#
# In the paper's notation ($M$ = SRAM size in elements, $T_r = \lceil N/B_r \rceil$, $T_c = \lceil N/B_c \rceil$):
#
# | line | | where |
# |---|---|---|
# | 1 | $B_c = \lceil M/4d \rceil$, $B_r = \min(\lceil M/4d \rceil, d)$ | |
# | 2 | $O = 0$, $\ell = 0$, $m = -\infty$ | **written to HBM** |
# | 5–6 | **for** $j = 1..T_c$: load $K_j, V_j$ | HBM → SRAM |
# | 7–8 | &nbsp;&nbsp;**for** $i = 1..T_r$: load $Q_i, O_i, \ell_i, m_i$ | HBM → SRAM |
# | 9–11 | &nbsp;&nbsp;&nbsp;&nbsp;$S_{ij} = Q_i K_j^T$; $\tilde m_{ij}, \tilde P_{ij}, \tilde\ell_{ij}$; $m_i^\text{new}, \ell_i^\text{new}$ (online softmax, notebook 2) | SRAM |
# | 12 | &nbsp;&nbsp;&nbsp;&nbsp;$O_i \leftarrow \mathrm{diag}(\ell_i^\text{new})^{-1}\bigl(\mathrm{diag}(\ell_i)e^{m_i - m_i^\text{new}} O_i + e^{\tilde m_{ij} - m_i^\text{new}} \tilde P_{ij} V_j\bigr)$ | **written to HBM** |
# | 13 | &nbsp;&nbsp;&nbsp;&nbsp;$\ell_i \leftarrow \ell_i^\text{new}$, $m_i \leftarrow m_i^\text{new}$ | **written to HBM** |
#
# The outer loop runs over **key/value** blocks, the inner over **query** blocks, so the running
# output $O_i$ and its statistics make a round trip to HBM at every inner step. The workbench's
# reference is written against a counting memory model: every HBM transfer is a `mem.load` or a
# `mem.store`, so the code itself answers "which tensor lives where". Here are all of them in
# `variants/fa1.py`:

# %%
import inspect
import variants.fa1
from variants import VARIANTS, attention_reference

for line in inspect.getsource(variants.fa1.forward).splitlines():
    if "mem.load" in line or "mem.store" in line or line.strip().startswith("for "):
        print(line.rstrip())

# %% [markdown]
# ## 2 · A tiny example
#
# $N = 16$ queries and keys, $d = 8$, blocks $B_r = B_c = 4$: a $4 \times 4$ grid of tiles. To watch
# the algorithm, we subclass the package's `Memory` so that it also **logs** every transfer, in
# program order (the counts stay the package's own).

# %%
from counting.memory import Memory


class Recorder(Memory):
    # A Memory that also records every HBM transfer in .trace: (op, tensor, first row, value written).
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace = []

    @staticmethod
    def first_row(view):  # B = H = 1: the offset of the view in its tensor, in rows
        return view.storage_offset() // (view.stride(-2) if view.dim() == 4 else 1)

    def load(self, name, view):
        self.trace.append(("load", name, self.first_row(view), None))
        return super().load(name, view)

    def store(self, name, view, value):
        super().store(name, view, value)
        self.trace.append(("store", name, self.first_row(view), value.detach().clone()))


N, D, BR, BC = 16, 8, 4, 4
q, k, v = (torch.randn(1, 1, N, D) for _ in range(3))
runs = {}
for causal in (False, True):
    mem = Recorder()
    o, lse = VARIANTS["fa1"].forward(q, k, v, causal=causal, block_q=BR, block_k=BC, mem=mem)
    o_ref, _ = attention_reference(q, k, v, causal=causal)
    print(f"causal={causal}: {len(mem.trace)} HBM transfers, max |O - O_ref| = {(o - o_ref).abs().max():.1e}")
    runs[causal] = mem


def visit_order(log, br, bc, n_q, n_k):
    # the order in which tiles (i, j) are visited, read off the log: K_j loads open a step, Q_i loads visit
    order = np.full((-(-n_q // br), -(-n_k // bc)), np.nan)
    step, j = 0, None
    for op, name, row, _ in log:
        if op == "load" and name == "K":
            j = row // bc
        elif op == "load" and name == "Q":
            order[row // br, j] = step
            step += 1
    return order


# %%
def plot_order(ax, order, title):
    # skipped tiles (NaN) in grey, apart from step 0's colour
    im = ax.imshow(np.ma.masked_invalid(order), cmap=plt.get_cmap("viridis").with_extremes(bad="#d9d9d9"), vmin=0)
    plt.colorbar(im, ax=ax, shrink=0.8, label="visit step (grey: skipped)")
    for (i, j), s in np.ndenumerate(order):
        ax.text(j, i, "skip" if np.isnan(s) else int(s), ha="center", va="center", fontsize=8 if np.isnan(s) else 10,
                color="dimgrey" if np.isnan(s) else "white" if s < order[~np.isnan(order)].max() / 2 else "black")
    ax.set_xticks(range(order.shape[1]))
    ax.set_yticks(range(order.shape[0]))
    ax.set_xlabel("key/value block j (outer loop)")
    ax.set_ylabel("query block i (inner loop)")
    ax.set_title(title)


fig, axes = plt.subplots(1, 2, figsize=(9, 4))
for ax, causal in zip(axes, (False, True)):
    plot_order(ax, visit_order(runs[causal].trace, BR, BC, N, N),
               f"FA1 visit order, {'causal' if causal else 'non-causal'}")
fig.suptitle("Tiles of S visited by Algorithm 1 (numbers: order; grey: hidden by the mask, skipped)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Column by column: the outer loop holds $K_j, V_j$ on chip and sweeps every query block past them.
# With a causal mask, tiles above the diagonal are skipped entirely — never loaded, never computed.
#
# **Step by step: what is on chip, what crosses.** One panel per step of the causal run above
# (`analysis/tiling_pictures.py`, drawn from the same loops as `variants/fa1.py`; its test holds the
# panels' reads and writes, summed, equal to what `Memory` counts). Filled blocks are on chip; a blue
# edge is a read from HBM at that step, red a write, purple a block read *and* written back. Watch
# $O_i$, $\ell_i$, $m_i$: they are read and written back at **every** tile, because the inner loop
# moves on to another query block and the on-chip copy must make room.

# %%
from analysis.tiling_pictures import draw_frames
from counting.tiling import Tiling

draw_frames(Tiling(N, N, BR, BC, causal=True), "fa1")
plt.show()

# %% [markdown]
# **The running O.** Every visit rewrites $O_i$ in HBM (line 12), already normalised by the running
# $\ell_i$. So after outer step $j$, the $O$ in HBM is exactly the attention output **over the first
# $j+1$ key blocks** — a correct answer to a smaller question. We replay the logged stores to see the
# HBM copy of $O$ after each outer step, and compare it with the float64 reference over the keys seen
# so far, and over all keys.

# %%
log = runs[False].trace
o_hbm = torch.zeros(N, D)
snapshots = []
for n, (op, name, row, value) in enumerate(log):
    if op == "store" and name == "O":
        o_hbm[row:row + value.shape[-2]] = value[0, 0]
    next_is_new_step = n + 1 == len(log) or (log[n + 1][0] == "load" and log[n + 1][1] == "K")
    if next_is_new_step and any(e[1] == "K" for e in log[:n + 1]):
        snapshots.append(o_hbm.clone())
snapshots = snapshots[:N // BC]  # one per outer step (the lse epilogue adds no O store)

o_full, _ = attention_reference(q, k, v)
# two figures: the heatmaps need the height (16 rows of 8), the error curve needs the width for its legend
fig, axes = plt.subplots(1, len(snapshots) + 1, figsize=(10, 4.2), layout="constrained")
err_seen, err_full = [], []
for j, snap in enumerate(snapshots):
    c1 = (j + 1) * BC
    o_seen, _ = attention_reference(q, k[..., :c1, :], v[..., :c1, :])
    err_seen.append((snap - o_seen[0, 0]).abs().max().item())
    err_full.append((snap - o_full[0, 0]).abs().max().item())
    axes[j].imshow(snap, cmap="RdBu", vmin=-1.5, vmax=1.5)
    axes[j].set_title(f"O in HBM\nafter j = {j}")
    axes[j].set_xlabel("column of O (d)")
axes[0].set_ylabel("query row")
im = axes[-1].imshow(o_full[0, 0].float(), cmap="RdBu", vmin=-1.5, vmax=1.5)
axes[-1].set_title("reference O\n(all keys)")
axes[-1].set_xlabel("column of O (d)")
fig.colorbar(im, ax=axes, shrink=0.8, label="value of O (all panels)")
plt.show()

fig, ax = plt.subplots(figsize=(6, 3.2))
ax.semilogy(range(len(snapshots)), err_full, "o-", label="vs reference over all keys")
ax.semilogy(range(len(snapshots)), np.maximum(err_seen, 1e-9), "s--", label="vs reference over keys < (j+1)·Bc")
ax.set_xlabel("outer step j")
ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))  # steps are integers
ax.set_ylabel("max |error| (log scale)")
ax.set_title("the running O in HBM after each outer step")
legend_outside(ax)
plt.show()

# %% [markdown]
# ## 3 · HBM traffic, counted
#
# The `Memory` counts of the run, per tensor, beside the closed forms of `counting.closed_forms`
# (the same numbers derived without running anything) and the formula in words. $Q$ and $O$ are read
# $T_c$ times — once per outer step — and $O$, $\ell$, $m$ are written $T_c$ times.

# %%
from counting import closed_forms

counted = runs[False].counts
closed = closed_forms.counts("fa1", 1, 1, N, N, D, dtype="fp32", block_q=BR, block_k=BC)
TC = N // BC
formula = {
    ("read", "Q"): "Tc·N·d", ("read", "K"): "N·d", ("read", "V"): "N·d", ("read", "O"): "Tc·N·d",
    ("read", "l"): "Tc·N + N", ("read", "m"): "Tc·N + N", ("write", "O"): "N·d + Tc·N·d",
    ("write", "l"): "N + Tc·N", ("write", "m"): "N + Tc·N", ("write", "lse"): "N",
}
rows = []
for (op, name), words in formula.items():
    got = (counted.reads if op == "read" else counted.writes)[name]
    cf = (closed.reads if op == "read" else closed.writes)[name]
    rows.append([op, name, got, cf, words])
show_table(["", "tensor", "elements (Memory)", "closed form", "formula (Tc = 4)"], rows)
print(f"total: {counted.hbm_bytes:,} bytes in fp32; the inputs and output alone are "
      f"{4 * N * D * 4:,} bytes")

# %% [markdown]
# At real sizes: FlashAttention-1 against standard attention (`naive`: $S$ and $P$ written to HBM and
# read back) and against the minimum (each input read once, each output written once,
# `counting.headline.min_hbm_bytes`), from the closed forms, with the blocks Algorithm 1's line 1
# derives from an H200's SRAM (`counting.gpus`, `closed_forms.fa1_blocks`).

# %%
from counting.gpus import get_gpu
from counting.headline import min_hbm_bytes

h200 = get_gpu("h200")
d, dtype = 64, "fp16"
br, bc = closed_forms.fa1_blocks(h200.sram_bytes, d)
print(f"H200: {h200.sram_bytes // 1024} KiB of SRAM per thread block -> Br = {br}, Bc = {bc} (d = {d})")
seq = [1024, 2048, 4096, 8192, 16384, 32768]
traffic = {name: [closed_forms.counts(name, 1, 1, n, n, d, dtype=dtype, block_q=br, block_k=bc).hbm_bytes
                  for n in seq] for name in ("naive", "fa1")}
minimum = [min_hbm_bytes(1, 1, n, n, d, 2) for n in seq]

fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(seq, traffic["naive"], label="naive (S, P in HBM)", **line_style("naive"))
ax.loglog(seq, traffic["fa1"], label=f"FA1 (Br={br}, Bc={bc})", **line_style("fa1"))
ax.loglog(seq, minimum, "k--", label="minimum: read Q, K, V, write O once")
ax.set_xlabel("sequence length N (log scale)")
ax.set_ylabel("HBM bytes per (batch, head), log scale")
ax.set_title(f"HBM traffic, d = {d}, {dtype}, H200 SRAM")
legend_outside(ax)
plt.show()
show_table(["N", "naive", "FA1", "minimum", "naive / FA1"],
           [[n, human(a), human(b), human(c), f"{a / b:.1f}×"]
            for n, a, b, c in zip(seq, traffic["naive"], traffic["fa1"], minimum)])

# %% [markdown]
# ## 4 · Theorem 2: traffic against SRAM size
#
# > **Theorem 2** (FlashAttention paper). Let $N$ be the sequence length, $d$ the head dimension, and
# > $M$ the size of SRAM with $d \le M \le Nd$. Standard attention requires $\Theta(Nd + N^2)$ HBM
# > accesses, while FlashAttention requires $\Theta(N^2 d^2 M^{-1})$ HBM accesses.
#
# Why: with $B_c = \Theta(M/d)$, there are $T_c = \Theta(Nd/M)$ outer steps and each re-reads all of
# $Q$ and $O$ ($\Theta(Nd)$), so traffic is $\Theta(Nd \cdot Nd/M)$. We **count** it: run both
# references with the Memory model at $N = 256$, $d = 16$ for SRAM sizes from 1 KiB to 128 KiB, with
# line 1's blocks for each $M$ (`fa1_blocks`; $M$ counted in float32 elements, the on-chip type). The
# `Memory(sram_bytes=M)` raises if a working set does not fit, so every point is a legal schedule.

# %%
N2, D2 = 256, 16
q2, k2, v2 = (torch.randn(1, 1, N2, D2).half() for _ in range(3))
sizes = [1024 * 2 ** e for e in range(8)]  # 1 KiB ... 128 KiB
points = []
for M in sizes:
    br, bc = closed_forms.fa1_blocks(M, D2)
    row = [M, br, bc]
    for name in ("naive", "fa1"):
        mem = Memory(sram_bytes=M)
        VARIANTS[name].forward(q2, k2, v2, block_q=br, block_k=bc, mem=mem)
        row.append(mem.counts.hbm_bytes)
    points.append(row)
M_arr, _, _, naive_b, fa1_b = map(np.array, zip(*points))

# Θ(N² d² / M): the line through the point at M = 4 KiB (in elements: M / 4)
ref = fa1_b[2] * (M_arr[2] / M_arr)
inside = M_arr / 4 <= N2 * D2  # the theorem's range d <= M <= N·d (elements)
slope = np.polyfit(np.log(M_arr[inside]), np.log(fa1_b[inside]), 1)[0]

fig, ax = plt.subplots(figsize=(6.5, 4.2))
ax.loglog(M_arr / 1024, naive_b, label="naive, counted", **line_style("naive"))
ax.loglog(M_arr / 1024, fa1_b, label=f"FA1, counted (slope {slope:.2f} for M ≤ Nd)", **line_style("fa1"))
ax.loglog(M_arr / 1024, ref, "k:", label="∝ N²d²/M")
ax.axvline(N2 * D2 * 4 / 1024, color="grey", lw=0.8)
ax.text(N2 * D2 * 4 / 1024, ax.get_ylim()[1] * 0.6, " M = Nd", color="grey")
ax.set_xlabel("SRAM size M (KiB, log scale)")
ax.set_ylabel("HBM bytes (log scale)")
ax.set_title(f"Theorem 2, counted: N = {N2}, d = {D2}, fp16")
legend_outside(ax)
plt.show()
show_table(["M", "Br", "Bc", "naive bytes", "FA1 bytes"],
           [[f"{m // 1024} KiB", br, bc, f"{a:,}", f"{b:,}"] for m, br, bc, a, b in points])

# %% [markdown]
# Naive levels off at its $S$ and $P$ traffic ($4N^2$ elements: each written once and read once),
# which does not care about $M$ (at the smallest $M$ its tiled products also re-read $Q$ and $K$
# many times). FlashAttention-1 falls with a slope close to $-1$ while $M \le Nd$ (the legend's fit:
# reading $K$ and $V$ once does not shrink with $M$ and flattens it a little), and keeps falling until
# $B_c = M/4d$ reaches $N$, at $M = 4Nd$ (64 KiB here, in fp32 elements): one block of keys then
# covers the whole sequence ($T_c = 1$) and it reaches its floor — $Q$, $K$, $V$ read once, $O$ zeroed,
# read back and written once, and $\ell$, $m$ likewise. The same curve at a real size
# ($N = 8192$, $d = 64$) is cheap with the closed forms; the dotted lines mark real GPUs' SRAM per
# thread block.

# %%
N3, D3 = 8192, 64
sizes3 = [2 ** e * 1024 for e in range(3, 14)]  # 8 KiB ... 8 MiB (beyond any real SRAM)
fa1_3, naive_3 = [], []
for M in sizes3:
    br, bc = closed_forms.fa1_blocks(M, D3)
    fa1_3.append(closed_forms.counts("fa1", 1, 1, N3, N3, D3, block_q=br, block_k=bc).hbm_bytes)
    naive_3.append(closed_forms.counts("naive", 1, 1, N3, N3, D3, block_q=br, block_k=bc).hbm_bytes)
fig, ax = plt.subplots(figsize=(6.5, 4.2))
x = np.array(sizes3) / 1024
ax.loglog(x, naive_3, label="naive", **line_style("naive"))
ax.loglog(x, fa1_3, label="FA1", **line_style("fa1"))
ax.loglog(x, fa1_3[0] * sizes3[0] / np.array(sizes3), "k:", label="∝ N²d²/M")
for key, style in (("a100", "--"), ("h200", "-.")):
    g = get_gpu(key)
    ax.axvline(g.sram_bytes / 1024, color="grey", ls=style, lw=0.8, label=f"{key.upper()}: {g.sram_bytes // 1024} KiB")
ax.set_xlabel("SRAM size M (KiB, log scale)")
ax.set_ylabel("HBM bytes per (batch, head), log scale")
ax.set_title(f"Theorem 2 from the closed forms: N = {N3}, d = {D3}, fp16")
legend_outside(ax)
plt.show()

# %%
# Checks for the exercises: call one with your answer; it says whether it is right.
def check_divisions(count):
    from counting.tiling import Tiling as _Tiling
    t = _Tiling(n_q=16, n_k=16, block_q=4, block_k=4)
    want = t.t_r * t.t_c * 4 * 8  # every visit (i, j) divides the Br x d block O_i (d = 8)
    if count == want:
        print("exercise 3: right")
        return
    visits = t.t_r * t.t_c
    hint = {visits * 4: "that is one division per row per visit: line 12 divides every entry of the Br × d block "
                        "O_i, d = 8 of them per row",
            visits: "that is one per visit: each visit divides all Br × d = 32 entries of O_i",
            16 * 8: "that is one division per entry of O, once: FA2's count — FA1 divides at every visit (i, j), "
                    f"Tc = {t.t_c} times per entry"}.get(count, "count the visits (i, j), then the entries of O_i "
                                                           "divided per visit")
    raise AssertionError(f"{count}: {hint}")


def check_final_rows(rows):
    # exercise 1: rows of O final after outer step j = 0, causal, N = 16, Br = Bc = 4 (square: row r sees keys <= r)
    rows = sorted(set(int(r) for r in rows))
    if rows == [0, 1, 2, 3]:
        print("exercise 1: right — rows 0..Bc−1 see only keys ≤ their own index, all in key block 0")
        return
    if rows == list(range(16)):
        raise AssertionError("every row is written after step 0, but only rows whose visible keys all lie in "
                             "block 0 are final; the others still get key blocks 1, 2, 3")
    if rows == [0]:
        raise AssertionError("row 0 is final, but not alone: row r sees keys 0..r, so every r < Bc = 4 is done")
    raise AssertionError(f"{rows}: a row r is final once every key it sees (0..r) has been visited; after step "
                         "0 the keys 0..3 have")


def check_swapped_gone(tensors):
    # exercise 2: tensors whose repeated traffic disappears when query blocks go outside
    got = {str(x).replace("ℓ", "l") for x in tensors}
    want = {"O", "l", "m"}
    if got == want:
        print("exercise 2: right — O_i, ℓ_i, m_i stay on chip through the inner loop; Q_i is read once too")
        return
    if got >= {"K", "V"} or got & {"K", "V"}:
        raise AssertionError("K and V do not disappear: with query blocks outside they are re-read once per query "
                             "block (notebook 4 counts it) — the repeated traffic moves to them")
    if "Q" in got:
        raise AssertionError("Q is still read — once instead of Tc times; which tensors are no longer *read and "
                             "written* at every tile?")
    raise AssertionError(f"{sorted(got)}: which tensors does FA1 read and write back at every visit (line 12-13)? "
                         f"missing: {sorted(want - got)}")


def check_fixed_block_slope(slope):
    # exercise 4: log-log slope of the traffic against M with Br = Bc = 16 fixed
    if abs(slope) < 0.05:
        print("exercise 4: right — with the blocks fixed, M changes nothing the traffic depends on")
        return
    if abs(slope + 1) < 0.1:
        raise AssertionError("−1 is Theorem 2's slope, where Bc grows with M; fix Br = Bc = 16 and the re-reads "
                             "(Tc = N / Bc of them) no longer change with M")
    raise AssertionError(f"slope {slope}: the traffic depends on M only through the block sizes — fixed here")


def check_beats_fa1(names):
    # exercise 5: which variants move fewer HBM bytes than FA1 at N = 4096, d = 64, M = the H200's SRAM
    got = set(names)
    if got == {"fa2"}:
        print("exercise 5: right — FA2 drops FA1's repeated O, ℓ, m traffic (a constant factor, not asymptotic)")
        return
    if "v_once" in got:
        raise AssertionError("v_once at N = 4096: its f row (Br × N) does not fit the SRAM and spills to HBM — "
                             "print closed_forms.counts('v_once', ...).hbm_bytes")
    if "naive" in got:
        raise AssertionError("naive writes and reads the N × N matrices S and P: more than FA1, not less")
    raise AssertionError(f"{sorted(got)}: compare closed_forms.counts(name, ...).hbm_bytes for all four")


# %% [markdown]
# ## Exercises
#
# **1.** Change the tiny example to `causal=True` and replay the running $O$. Which rows of $O$ are final
# after outer step $j = 0$? Why can't you compare them with `attention_reference` on truncated keys
# directly? (Hint: the workbench's causal mask is aligned bottom-right.) Check: `check_final_rows(rows)`.
#
# <details><summary>Solution</summary>
#
# Rows $0 \dots B_c - 1$: row $r$ sees keys $\le r$ (square problem), all in the first key block. Truncating
# the keys to $B_c$ makes $N_k < N_q$, and a bottom-right-aligned mask then lets row $r$ see keys
# $\le r - (N_q - B_c)$: the early rows see no key at all, a different mask from the full problem's.
#
# </details>
#
# **2.** In the counts table, which tensors would disappear if the loops were swapped (query blocks
# outside, key blocks inside)? Check your answer against notebook 4, and with
# `check_swapped_gone({"...", ...})` (tensor names as in the table).
#
# <details><summary>Solution</summary>
#
# The repeated reads and writes of $O$, $\ell$ and $m$ (once per outer step each): with query blocks
# outside, $O_i, \ell_i, m_i$ stay on chip and are written once. $Q_i$ is then read once, while $K_j, V_j$
# are re-read once per query block instead.
#
# </details>
#
# **3.** Line 12 divides $O_i$ by $\ell_i^\text{new}$ at every visit. Count the divisions for $N = 16$,
# $B_r = B_c = 4$, $d = 8$ and compare with `runs[False].counts.flops["other"]`. Check:
# `check_divisions(count)`.
#
# <details><summary>Solution</summary>
#
# $T_r \cdot T_c = 16$ visits, each dividing the $B_r \times d = 32$ entries of $O_i$: 512 divisions —
# a sizeable share of `other`, and the work FA2 removes by dividing once at the end.
#
# </details>
#
# **4.** Theorem 2 assumes $B_c = \Theta(M/d)$. Re-run the counted sweep with fixed $B_r = B_c = 16$ for
# every $M$: what happens to the slope, and why? Check: `check_fixed_block_slope(slope)`.
#
# <details><summary>Solution</summary>
#
# It goes to 0 wherever the working set fits: the traffic depends on $M$ only through the block sizes
# ($T_c = N/B_c$ re-reads of $Q$, $O$), so with the blocks fixed a larger SRAM buys nothing.
#
# </details>
#
# **5.** The paper proves a matching lower bound (Proposition 3): no exact algorithm does
# $o(N^2 d^2 / M)$ accesses for all $M$. Which of the workbench's four variants beat FA1's count at
# $M$ = H200's SRAM, and by how much? (`closed_forms.counts` for each, $N = 4096$, $d = 64$.) Check:
# `check_beats_fa1({"...", ...})`.
#
# <details><summary>Solution</summary>
#
# ```python
# h200 = get_gpu("h200")
# for name in ("naive", "fa1", "fa2", "v_once"):
#     c = closed_forms.counts(name, 1, 1, 4096, 4096, 64, sram_bytes=h200.sram_bytes)
#     print(name, human(c.hbm_bytes))
# ```
# FA2 (and `v_once` while its row fits) move fewer bytes than FA1 at the same blocks — they drop FA1's
# repeated $O$ traffic — but by a constant factor, not asymptotically: the bound holds for all. At
# $N = 4096$ `v_once`'s row does not fit (notebook 5): it spills to HBM, with the issue's eager rescaling
# by default, and prints 2.25 GB, far more than even naive.
#
# </details>
