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
# # 5 · Multiply V once (issue #941)
#
# **Two different questions.** The thread turns on a distinction worth fixing first: the *memory
# required* — how much must be held at once, and whether it fits in a thread block's SRAM — against the
# *bytes moved* between HBM and SRAM. An algorithm can need more memory and move no more bytes (while
# its working set fits), or need little memory and move many bytes (naive attention). Keep them apart
# below: section 2 is about the first, section 3 about the second.
#
# **Why "through HBM".** In PyTorch every unfused operation (`q @ k.T`, `softmax`, `p @ v`) is its own
# GPU kernel, and a kernel's result lives in HBM until the next kernel reads it back: nothing stays on
# chip between kernels. That is why naive attention writes $S$ and $P$ to HBM, and why keeping $f$ on
# chip means doing the whole row inside *one* kernel.
#
# In [Dao-AILab/flash-attention#941](https://github.com/Dao-AILab/flash-attention/issues/941)
# ("Fewer matrix multiplications, same results, should we consider adopting it?") a user proposed:
#
# > *In the inner loop of FlashAttention-2, each computation of O requires a computation of V. […]
# > For each block Q, after calculating the complete attention scores, they are then multiplied with
# > V, which means each Q only needs to be multiplied with V once.*
#
# Tri Dao's answer: *"You'd still need to write fi of each block to global memory / HBM before
# calling matmul with V. So the total number of bytes written to global memory / HBM is quadratic"*,
# and *"Do you have enough space in SRAM to hold a tensor of size (block_size, seqlen)? Maybe if seqlen
# is not too long."* The author's conclusion: when SRAM can hold $B_r \times N$, the method *"does not
# increase the read and write operations between HBM and SRAM, but it can reduce the computation load
# (as V only needs to be multiplied once)."*
#
# This notebook checks each claim with the workbench's `v_once` reference (`variants/v_once.py`),
# whose two knobs are the discussion's two questions:
# `placement` — is the $f$ row kept in SRAM (`sram`), spilled to HBM (`hbm`), or whichever fits
# (`auto`)? — and `rescale` — does every new block max rescale all earlier $f$ blocks (`eager`, the
# issue's code) or is each block rescaled once at the end (`lazy`)?
#
# 1. Equivalence, tested against the float64 reference.
# 2. The SRAM it needs, $B_r \times N$, against real GPUs.
# 3. The HBM traffic when the $f$ row spills, against FlashAttention-2.
# 4. "Fewer matrix multiplications": the matmul FLOPs.
# 5. Eager rescaling's extra work.
# 6. The GPU measurements.
# 7. The proposal at its strongest: the row across a thread-block cluster, and the verdict.

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
# ## 1 · Equivalence
#
# The derivation (the induction of notebook 2, section 3) says $f/\ell$ is the softmax row, so
# $(f/\ell)V$ is exact attention. Every combination of the two knobs, causal or not, $N_q \ne N_k$,
# tails, fp32 and fp16, against `attention_reference`:

# %%
from variants import VARIANTS, attention_reference
from counting.memory import Memory

v_once = VARIANTS["v_once"]
rows, worst = [], 0.0
for dtype, tol in ((torch.float32, 2e-5), (torch.float16, 1e-2)):
    for causal in (False, True):
        for n_q, n_k in ((64, 64), (37, 90)):
            q, k, v = (torch.randn(2, 2, n, 16).to(dtype) for n in (n_q, n_k, n_k))
            o_ref, lse_ref = attention_reference(q, k, v, causal=causal)
            errs = []
            for opts in v_once.configs():
                # placement "sram" needs a chip big enough for the row; "auto"/"hbm" under a small one
                mem = Memory(sram_bytes=None if opts["placement"] == "sram" else 16 * 1024)
                o, lse = v_once.forward(q, k, v, causal=causal, block_q=16, block_k=16, mem=mem, **opts)
                err = (o.double() - o_ref).abs().max().item()
                assert err < tol, (opts, err)
                errs.append(err)
            worst = max(worst, max(errs))
            rows.append([str(dtype).replace("torch.", ""), causal, f"{n_q}×{n_k}", len(errs), f"{max(errs):.1e}"])
show_table(["dtype", "causal", "Nq × Nk", "configs (placement × rescale)", "max |O − O_ref|"], rows)
print("all", len(v_once.configs()), "configurations agree with the reference:", [v_once.label(**c) for c in v_once.configs()])

# %% [markdown]
# ## 2 · The SRAM it needs
#
# **Occupancy**, used from here on: an SM runs several thread blocks at once only if their shared
# memory (and registers) fit in it together. The number resident per SM — *blocks per SM*, or as a share
# of the SM's maximum warps, the *occupancy* — is what hides memory latency: while one block waits for
# its loads, another computes. A kernel that takes the whole SM's 227 KiB for one block runs one block
# per SM and has nothing to switch to.
#
# To "multiply V once" without touching HBM, a thread block must hold its whole $f$ row, $B_r \times N_k$
# values, besides $Q_i$, a $K_j$/$V_j$ tile, the score tile and the accumulator. The working set is the
# variant's own `sram_bytes` (the one the reference declares to the Memory model), against the SRAM
# one thread block can use on each GPU (`counting.gpus`):

# %%
from counting.gpus import GPUS
import variants.v_once as vo
import variants.fa2 as vf

seq = np.array([256 * i for i in range(1, 33)])  # 256 ... 8192
fig, ax = plt.subplots(figsize=(7, 4.2))
for d, br, style in ((64, 64, "-"), (64, 128, "--"), (128, 64, "-."), (128, 128, ":")):
    need = [vo.sram_bytes(n, n, d, br, 64, 2, placement="sram", rescale="lazy") for n in seq]
    ax.plot(seq, np.array(need) / 1024, style, label=f"v_once, f in SRAM: d={d}, Br={br}")
ax.plot(seq, [vf.sram_bytes(n, n, 64, 128, 64, 2) / 1024 for n in seq], "k-", lw=0.8,
        label="fa2 (d=64, Br=128): independent of N")
by_size = {}
for key, g in GPUS.items():  # GPUs with the same SRAM per block share a line
    by_size.setdefault(g.sram_bytes, []).append(key.upper())
for (size, keys), color in zip(sorted(by_size.items()), ("tab:red", "tab:green", "tab:purple")):
    ax.axhline(size / 1024, color=color, lw=1, alpha=0.7)
    ax.text(seq[-1], size / 1024, f"{' / '.join(keys)}: {size // 1024} KiB", color=color,
            va="bottom", ha="right", fontsize=8)
ax.set_yscale("log")
ax.set_xlabel("sequence length N (= Nk)")
ax.set_ylabel("SRAM working set per thread block (KiB)")
ax.set_title("v_once's f row against real SRAM (fp16, Bc = 64)")
legend_outside(ax)
plt.show()


def longest_fitting(gpu, d, br, bc=64, rescale="lazy"):
    n = 0
    while vo.sram_bytes(n + bc, n + bc, d, br, bc, 2, placement="sram", rescale=rescale) <= gpu.sram_bytes:
        n += bc
    return n


show_table(["GPU", "SRAM / block", "d=64, Br=64", "d=64, Br=128", "d=128, Br=64", "d=128, Br=128"],
           [[key.upper(), f"{g.sram_bytes // 1024} KiB"] +
            [f"N ≤ {longest_fitting(g, d, br):,}" for d, br in ((64, 64), (64, 128), (128, 64), (128, 128))]
            for key, g in GPUS.items()])

# %% [markdown]
# On an H200 the row fits only up to $N \approx 1.3$k at $d = 64$ with $B_r = 64$ — and that spends
# the whole SRAM of the SM on one thread block, where FlashAttention-2 runs two or more blocks per SM
# to hide latency. The larger $B_r = 128$ that fast FA2 kernels use leaves room for $N \le 512$.
#
# ## 3 · HBM traffic when the f row spills
#
# Past that length the row must go somewhere: `placement="hbm"` writes every $f$ block to HBM and
# reads it back for the product with $V$ — Tri Dao's "quadratic" bytes. Counted by the Memory model on
# a small problem whose row does not fit a 16 KiB SRAM:

# %%
N, D, BLK = 256, 32, 32
q, k, v = (torch.randn(1, 1, N, D).half() for _ in range(3))
counted = {}
for label, name, opts in (("fa2", "fa2", {}), ("v_once auto, lazy", "v_once", dict(placement="auto", rescale="lazy")),
                          ("v_once auto, eager", "v_once", dict(placement="auto", rescale="eager"))):
    mem = Memory(sram_bytes=16 * 1024)
    VARIANTS[name].forward(q, k, v, block_q=BLK, block_k=BLK, mem=mem, **opts)
    counted[label] = mem.counts
show_table(["", "Q read", "K, V read", "f written", "f read", "O, lse written", "HBM bytes"],
           [[label, f"{c.reads['Q']:,}", f"{c.reads['K'] + c.reads['V']:,}", f"{c.writes.get('f', 0):,}",
             f"{c.reads.get('f', 0):,}", f"{c.writes['O'] + c.writes['lse']:,}", f"{c.hbm_bytes:,}"]
            for label, c in counted.items()])
print("elements; the f row of one 32-row block is 32 x 256 fp16 = 16 KiB: it cannot fit a 16 KiB SRAM")

# %% [markdown]
# The same at real sizes from the closed forms, with `placement="auto"` resolved against an H200's
# SRAM — so `v_once` keeps the row on chip while it fits and spills when it does not. Same blocks
# for all ($B_r = B_c = 64$, $d = 64$, fp16), per (batch, head):

# %%
from counting import closed_forms
from counting.gpus import get_gpu

h200 = get_gpu("h200")
seq = [256, 512, 1024, 1344, 1408, 2048, 4096, 8192, 16384]
d, br, bc = 64, 64, 64
configs = {"fa2": ("fa2", {}), "naive": ("naive", {}),
           "v_once auto, lazy": ("v_once", dict(placement="auto", rescale="lazy")),
           "v_once auto, eager": ("v_once", dict(placement="auto", rescale="eager"))}
traffic = {label: [closed_forms.counts(name, 1, 1, n, n, d, block_q=br, block_k=bc,
                                       sram_bytes=h200.sram_bytes, **opts) for n in seq]
           for label, (name, opts) in configs.items()}
fits_up_to = longest_fitting(h200, d, br, bc)

fig, ax = plt.subplots(figsize=(7, 4.4))
for label, ts in traffic.items():
    ax.loglog(seq, [t.hbm_bytes for t in ts], label=label, **line_style(configs[label][0] + (
        "_auto_" + configs[label][1]["rescale"] if configs[label][1] else "")))
ax.axvspan(fits_up_to, seq[-1], color="tab:red", alpha=0.08)
# at the bottom of the shaded band, where no curve runs (at the top it ran into the frame and the eager curve)
ax.text(fits_up_to * 1.1, 0.04, "f row spills to HBM\n(H200 SRAM, lazy; eager\nneeds a little less)",
        color="tab:red", fontsize=8, va="bottom", transform=ax.get_xaxis_transform())
ax.set_xlabel("sequence length N (log scale)")
ax.set_ylabel("HBM bytes per (batch, head), log scale")
ax.set_title(f"HBM traffic, d = {d}, Br = Bc = {br}, fp16, H200 SRAM")
legend_outside(ax)
plt.show()
show_table(["N", "f row"] + list(traffic),
           [[n, traffic["v_once auto, lazy"][i].placement_resolved] +
            [human(ts[i].hbm_bytes) for ts in traffic.values()] for i, n in enumerate(seq) if n in (1024, 2048, 16384)])

# %% [markdown]
# While the row fits, `v_once` moves **exactly** FA2's bytes — the author's claim is right. Once it
# spills, the lazy version moves $2 N_q N_k$ extra elements ($f$ written and read once) — here twice
# FA2's traffic — and the eager version, which re-reads and re-writes every earlier block at every
# new block max, moves $\Theta(N^3/B_c)$: worse than naive attention.
#
# ## 4 · "Fewer matrix multiplications"
#
# $(f/\ell)\,V = \sum_j (f_j/\ell)\,V_j$: one product of a $B_r \times N$ row with $V$ performs the same
# multiply-adds as $T_c$ products of $B_r \times B_c$ tiles. Fewer **calls**, not fewer FLOPs. Counted:

# %%
n = 1024  # the row still fits here
rows = []
for label, ts in traffic.items():
    t = ts[seq.index(n)]
    rows.append([label, f"{t.flops['matmul']:,}", f"{t.flops['exp']:,}", f"{t.flops['other']:,}",
                 f"{t.flops['other'] / traffic['fa2'][seq.index(n)].flops['other']:.2f}×"])
print(f"N = {n}, d = {d}, Br = Bc = {br}: the papers' 4·N²·d = {4 * n * n * d:,}")
show_table(["", "matmul FLOPs", "exp", "other", "other vs fa2"], rows)

# %% [markdown]
# ## 5 · Eager rescaling's extra work
#
# The code rescales **every earlier $f$ block** whenever a new block arrives
# (`for k in range(j): fi_BLOCK[k] = fi_BLOCK[k] * torch.exp(mi - mi_new)`): for a row of $T_c$ blocks
# that is $T_c(T_c-1)/2$ block rescales, $\Theta(N^2/B_c)$ multiplies per row and $\Theta(N^3/B_c)$ in
# all — against FA2's one rescale of the $B_r \times d$ accumulator per block. The lazy variant keeps
# each block's own max and rescales once, fused into the final product.

# %%
seq2 = [512, 1024, 2048, 4096, 8192, 16384, 32768]
fig, ax = plt.subplots(figsize=(6.5, 4))
base = [closed_forms.counts("fa2", 1, 1, n, n, d, block_q=br, block_k=bc).flops for n in seq2]
for label, rescale in (("v_once, eager (the issue's code)", "eager"), ("v_once, lazy", "lazy")):
    fl = [closed_forms.counts("v_once", 1, 1, n, n, d, block_q=br, block_k=bc, placement="sram",
                              rescale=rescale).flops for n in seq2]
    ax.semilogx(seq2, [(f["exp"] + f["other"]) / (b["exp"] + b["other"]) for f, b in zip(fl, base)], label=label,
                **line_style(f"v_once_sram_{rescale}"))
ax.axhline(1, color=colour("fa2"), lw=1, ls="--", label="fa2")
ax.set_xlabel("sequence length N (log scale)")
ax.set_ylabel("non-matmul FLOPs / fa2's")
ax.set_title(f"Non-matmul work against FlashAttention-2 (d = {d}, Bc = {bc})")
legend_outside(ax)
plt.show()

# %% [markdown]
# ## 6 · On the GPU
#
# The tensor-core kernels `kernels/fa2_tc.py` and `kernels/v_once_tc.py` (both knobs) are timed by
# `bench/bench_tc.py` on an H200 and committed under `results/`; the teaching kernels by
# `bench/bench_kernels.py`. This cell reads whatever is there (it does not need a GPU).

# %%
from analysis.results import RESULTS_DIR, load_ncu, load_records, measured_ratio, one_per_shape, run_label

# One named run, never "the newest file": every ratio below comes from this one file's measurements.
RUN_FILE = "tc_bench.json"

# %%
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

records = one_per_shape([r for r in load_records(RUN_FILE) if "{" not in r["kernel"]
                         and (r["kernel"].startswith("v_once") or r["kernel"] in ("fa2_tc", "fa2"))])
tensor_core = [r for r in records if "_tc" in r["kernel"]]  # the tier whose speed is in question
if not records:
    print(f"not measured yet: no fa2 / v_once timings in results/{RUN_FILE}")
else:
    shown = tensor_core or records
    groups = sorted({(r["dtype"], r["d"], r["causal"]) for r in shown})
    groups = [g for g in groups if g[0] in ("float16", "fp16")][:4] or groups[:4]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 4), squeeze=False)
    for ax, (dt, dd, causal) in zip(axes[0], groups):
        for kernel in sorted({r["kernel"] for r in shown}):
            pts = sorted((r["n"], r["tflops"]) for r in shown
                         if (r["kernel"], r["dtype"], r["d"], r["causal"]) == (kernel, dt, dd, causal))
            if pts:
                ax.plot(*zip(*pts), label=kernel, **line_style(kernel))
        ax.axvline(longest_fitting(h200, dd, 64), color="tab:red", lw=0.8, ls=":")  # the model's limit
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # plain numbers on the log axis: its default minor labels (2×10¹, 3×10¹, ...) crowd one another
        ax.yaxis.set_major_locator(FixedLocator([5, 10, 20, 50, 100, 200, 500]))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("TFLOP/s (papers' FLOPs, log scale)")
        ax.set_title(f"{dt}, d = {dd}, {'causal' if causal else 'non-causal'}")
    legend_outside(axes[0][-1])
    fig.suptitle(("Tensor-core kernels" if tensor_core else "Kernels") + f" measured on the H200, {run_label(records)}\n"
                 "(red dotted: longest N whose f row fits, Br = 64, in the reference's SRAM model)", fontsize=9)
    fig.tight_layout()
    plt.show()
    print("measured:", run_label(records))


# %%
verdict_rows = []
for n in (512, 1024, 2048, 4096, 16384):
    row = [n]
    for dd in (64, 128):
        got = measured_ratio(records, n, d=dd)
        row += ["fits" if n <= longest_fitting(h200, dd, 64) else "spills",
                "not measured yet" if got is None else f"{got[0]:.2f}× ({got[1]})"]
    verdict_rows.append(row)
show_table(["N (fp16, non-causal)", "d=64: f row (model)", "d=64: best v_once / fa2",
            "d=128: f row (model)", "d=128: best v_once / fa2"], verdict_rows)
print("ratio: measured TFLOP/s of the fastest v_once kernel over fa2's, same tier (tensor-core first), "
      f"both from {run_label(records)}")

verdict_doc = ROOT / "docs" / "issue-941-verdict.md"
if verdict_doc.exists():  # the write-up of the GPU measurements: its title and verdict paragraph
    text = verdict_doc.read_text().split("\n\n")
    display(Markdown("\n\n".join(text[:2]) + f"\n\n*(from `{verdict_doc.relative_to(ROOT)}`)*"))
else:
    print("docs/issue-941-verdict.md: not written yet")

# %% [markdown]
# ### Why it loses even where it fits: blocks per SM and the tensor pipe
#
# Section 2's occupancy for the real kernels: each tensor-core build's plan gives its shared memory per
# block and so the blocks per SM; Nsight Compute (`tc_ncu.csv`, written before run ids: labelled by file
# name) measured how busy the tensor cores were. Holding the f row costs `v_once_tc` its second block
# per SM from N = 1k, and with it the tensor pipe's activity.

# %%
from gpumodel.descriptors import describe

occ_rows = []
for n in (512, 1024, 2048, 4096):
    row = [n]
    for name, opts in (("fa2_tc", {}), ("v_once_tc", dict(placement="sram", rescale="lazy")),
                       ("v_once_tc", dict(placement="hbm", rescale="lazy"))):
        try:
            k = describe(name, 128, "fp16", False, n_q=n, n_k=n, **opts)
            row.append(f"{k.ctas_per_sm} ({human(k.smem_bytes, binary=True)})")
        except ValueError:  # the f row does not fit in one block's shared memory at all
            row.append("does not fit")
    occ_rows.append(row)
show_table(["N (d = 128, fp16)", "fa2_tc: blocks / SM (smem / block)", "v_once_tc, f in SRAM", "v_once_tc, f spilled"],
           occ_rows)
print("from each build's plan (kernels/*_tc.py describe(), via gpumodel.descriptors), not a measurement")

pipe = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
show_table(["kernel", "N", "d", "tensor pipe active", "time (ncu)"],
           [[m["kernel"], m["n"], m["d"], f"{m[pipe]:.0f} %", f"{m['gpu__time_duration.sum'] / 1e6:.3f} ms"]
            for m in load_ncu(RESULTS_DIR / "tc_ncu.csv") if "n" in m and pipe in m and "sdpa" not in m["kernel"]])
print("from file tc_ncu.csv (no run id)")

# %% [markdown]
# ## 7 · The proposal at its strongest: the f row across a thread-block cluster (Hopper)
#
# Section 6's kernel had to spill $f$ beyond $N \approx 1$k, and it ran on the older mma.sync path.
# Hopper adds a way out: a *cluster* of up to 8 (16) thread blocks shares *distributed shared memory*, so
# one Q block's $f$ row can be split over the cluster's blocks and never leave the chip. `kernels/v_once_cluster.py`
# does exactly the proposal: each block builds its slice of $f$ ($B_r \times N_k/\mathrm{CS}$), the row maxima and
# sums are reduced across the cluster, every $f$ block is scaled **once** by the final max, and V is
# multiplied once. It uses the same wgmma + TMA path as the fastest FA2 here, `fa2_wgmma`.
#
# How large a cluster each row needs (`counting/cluster.py`: the smallest whose blocks' shared memory holds it):

# %%
from counting import cluster as cl

show_table(["cluster size (CTAs)", "largest N_k on chip, d = 64", "d = 128"],
           [[cs, f"{cl.max_keys(64, cs):,}", f"{cl.max_keys(128, cs):,}"] for cs in (1, 2, 4, 8, 16)])
print("8 is the portable cluster size; 16 needs the driver's non-portable opt-in")

# %% [markdown]
# The measurement (`results/cluster_bench.json`, H200, one run, and `cluster_bench_16k.json` for
# N = 16k with the 16-CTA cluster; every cell checked against the float64 reference first): the cluster kernel's time over `fa2_wgmma`'s, with the GPU model's predicted
# ratio beside it (`gpumodel.gpu_model`; its one cluster constant is fitted on the fp16, d = 64, non-causal
# cells at N ≥ 2k). Above 1: FA2 is faster.

# %%
import json
from gpumodel import gpu_model as gm

# N = 16k needs the non-portable 16-CTA cluster (config MAX_CLUSTER=16): it was timed in a second run, whose
# cells (the cluster kernel and fa2_wgmma together) replace the first run's, so each ratio stays within one run
CLUSTER_RUNS = [RESULTS_DIR / "cluster_bench.json", RESULTS_DIR / "cluster_bench_16k.json"]
CLUSTER_BUILDS = ("v_once_cluster_cluster", 'v_once_cluster{"MAX_CLUSTER":16}')
if not CLUSTER_RUNS[0].exists():
    print(f"not measured yet: no {CLUSTER_RUNS[0].name}")
else:
    from gpumodel.measured import run_options  # the fa2_wgmma build each run timed
    from analysis.results import latest_run_cells

    runs = [p for p in CLUSTER_RUNS if p.exists()]
    run_ids = [json.loads(p.read_text())["run"]["run_id"].split("-")[0] for p in runs]
    # the benchmark setting only (B·N = 16k, H·d = 2048): one cell per N, without the small-B·H runs. A B·H > 16
    # filter would also drop d = 128 at N = 16k (B·H = 16), the cell where the gap is widest
    by = latest_run_cells(runs, lambda r: (r["d"], r["causal"], r["n"]),
                          keep=lambda r: r.get("median_ms") and r.get("dtype") == "float16"
                          and r["b"] * r["n"] == 16384 and r["h"] * r["d"] == 2048)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, dd in zip(axes, (64, 128)):
        for causal, ls in ((False, "-"), (True, "--")):
            pts = []
            for n in sorted({k[2] for k in by if k[0] == dd and k[1] == causal}):
                c = next((by[(dd, causal, n, b)] for b in CLUSTER_BUILDS if (dd, causal, n, b) in by), None)
                f = by.get((dd, causal, n, "fa2_wgmma"))
                if c and f:
                    b, h = f["b"], f["h"]
                    # each model time as its file's timer measured it (do_bench hides the launch work)
                    model = (gm.as_timed(gm.predict("v_once_cluster", b, h, n, None, dd, "fp16", causal), c.get("timer"))
                             / gm.as_timed(gm.predict("fa2_wgmma", b, h, n, None, dd, "fp16", causal,
                                                      **run_options("fa2_wgmma", f["file"], dd)), f.get("timer")))
                    pts.append((n, c["median_ms"] / f["median_ms"], model))
            if pts:
                ns, meas, model = zip(*pts)
                label = "causal" if causal else "non-causal"
                ax.plot(ns, meas, ls, marker="o", color=colour("v_once_tc"), label=f"measured, {label}")
                ax.plot(ns, model, ls, marker="x", color="grey", label=f"model, {label}")
        ax.axhline(1, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N (B·N = 16k)")
        ax.set_title(f"d = {dd}, fp16")
    axes[0].set_ylabel("v_once_cluster time / fa2_wgmma time")
    legend_outside(axes[1])
    fig.suptitle(f"The cluster v_once against FA2 on the same wgmma path, runs {', '.join(run_ids)}", fontsize=9)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# It never wins. The $f$ row does stay on chip (ncu: DRAM bytes 0.97× the compulsory Q, K, V, O), so Tri
# Dao's objection about quadratic HBM bytes is answered. But holding the row costs what section 2 warned
# about: its slice fills a block's shared memory (162–204 KB), so each SM runs a single consumer
# warpgroup. ncu puts the tensor pipe at 12.6% active at d = 64 and 22% at d = 128, against 48% and 77%
# for `fa2_wgmma`. On top of that, the two products can no longer overlap, because no P·V may start before the whole
# cluster has its row max, and $f$ makes a round trip through shared memory. The GPU model explains the
# gap with one more term, fitted on three cells (fp16, d = 64, non-causal): about 1060 cycles per tile that a
# lone warpgroup leaves exposed (`results/cluster_model_fit.json`). It then holds within ±15% on every held-out cell with N ≥ 2k (d = 128,
# causal, bf16, small B·H; `docs/issue-941-verdict.md`), and it predicted the N = 16k cells, timed after the
# fit, at 0.88–0.93× of the measured time. There the gap is widest (3.9–6.3×): 16-CTA clusters leave 20 of
# the 132 SMs idle, and each slice is still one warpgroup's.

# %% [markdown]
# ## Verdict
#
# - **Correct?** Yes. `v_once` equals exact attention in every configuration (section 1); the issue's
#   induction is sound.
# - **Fewer matrix multiplications?** Fewer *calls*, the **same matmul FLOPs** (section 4): one
#   $B_r \times N$ by $N \times d$ product is $T_c$ tile products added up. The lazy variant's
#   non-matmul work equals FA2's to within a percent; the issue's eager rescaling adds
#   $\Theta(N^3/B_c)$ multiplies (section 5).
# - **No extra HBM traffic?** True **only while the $f$ row fits in SRAM**: then it moves exactly FA2's
#   bytes (section 3). That is $N \lesssim 1.3$k on an H200 at $d = 64$, $B_r = 64$, and only by giving
#   one thread block the whole SM (section 2). Beyond it, every $f$ element is written to and read from
#   HBM — Tri Dao's quadratic bytes: twice FA2's traffic lazily, worse than naive attention eagerly.
# - **So:** in its best case (short sequences, lazy rescaling) multiply-V-once matches FlashAttention-2
#   in FLOPs and bytes while needing $\Theta(B_r N)$ SRAM instead of $\Theta(B_r d + B_c d)$ — so it
#   fits fewer thread blocks per SM and cannot use large $B_r$; everywhere else it is strictly worse.
#   There is nothing for FlashAttention to adopt.
# - **Measured** (section 6, from `results/tc_bench.json` and `docs/issue-941-verdict.md`): on
#   an H200 the tensor-core `v_once` is slower than the tensor-core FA2 at every measured size; holding
#   the row on chip costs so much occupancy that it loses even where it fits, and spilled it pays the
#   quadratic $f$ traffic — which the ncu DRAM counters match to within about 1 % of the closed form.
# - **At its strongest** (section 7): with the row held on chip across a thread-block cluster, on the same
#   wgmma path as the fastest FA2, it moves only the compulsory bytes and still takes 2.2–6.5× FA2's
#   time (N = 512…16k), because holding the row leaves one consumer warpgroup per SM and serialises the two products.

# %% [markdown]
# ## 8 · The five side by side
#
# Everything notebooks 1–5 built, in one table: standard attention, FlashAttention-1, FlashAttention-2 (the
# teaching kernels: FP32 on CUDA cores), the Hopper FlashAttention-2 (`fa2_wgmma`: tensor cores, TMA) and
# multiply-V-once (`v_once_tc`, its $f$ row spilled at this length). One shape, $N = 4096$, $d = 128$, fp16,
# the benchmarks' full GPU ($B = 16\text{k}/N$, $H = 2048/d$). Every number is computed: the traffic from the
# closed forms at each kernel's own blocks (the formula column is checked against them), the thread blocks and
# the bound from the GPU model (`gpumodel.gpu_model`), the speed from the committed measurements
# (`analysis.story.MEASURED_FILE`: `results/bench_kernels.json` for the teaching tier, `results/cluster_bench.json`
# for the tensor-core kernels, one run each). The traffic column is **the papers' count** (no cache); the
# last column is what reaches DRAM, from the model's L2, against $Q, K, V$ read once and $O$ written once.

# %%
from analysis import story

headers, rows = story.comparison_rows(4096, 128)
show_table(headers, rows)

# %% [markdown]
# Read down the last three columns. Only two rows wait for memory: naive attention (its $S$ and $P$: 33× the
# compulsory bytes reach DRAM — the teaching kernel is slower still, on FP32 cores and shared memory) and
# `v_once` (its spilled $f$ row). FA2's re-reads of $K$ and $V$, large by the papers' count, stay in the L2:
# DRAM sees 1.00× the compulsory bytes, and the Hopper kernel is bound by its tensor cores. FA1's $O_i$ round
# trips reach DRAM too, but its teaching kernel is starved first: $B \cdot H = 64$ thread blocks for 132 SMs.

# %%
# Checks for the exercises: call one with your answer; it says whether it is right.
def check_fp8_f(fn):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(64, 64, generator=gen) for _ in range(3))
    s = (q @ k.T) / 8
    f = torch.exp(s - s.max(-1, keepdim=True).values)
    want = (f.to(torch.float8_e4m3fn).float() / f.sum(-1, keepdim=True)) @ v
    got = fn(q, k, v)
    assert torch.allclose(got, want, atol=1e-5), "not (fp8-rounded f / row sum) @ V"
    exact = torch.softmax(s.double(), -1) @ v.double()
    err = (got.double() - exact).abs().max().item()
    err16 = ((f.half().float() / f.sum(-1, keepdim=True)) @ v - exact).abs().max().item()
    print(f"exercise 2: right; max error {err:.1e} with f in fp8, {err16:.1e} with f in fp16")


def check_spill_extra(fn):
    from counting import closed_forms as _cf
    for n, d, br in ((1024, 64, 64), (4096, 128, 32), (2000, 64, 128)):
        extra = (_cf.counts("v_once", 1, 1, n, n, d, dtype="fp16", block_q=br, block_k=64, placement="hbm",
                            rescale="lazy").hbm_bytes
                 - _cf.counts("fa2", 1, 1, n, n, d, dtype="fp16", block_q=br, block_k=64).hbm_bytes)
        got = fn(n, d, br)
        if got == extra:
            continue
        if got == extra // 2:
            raise AssertionError(f"N={n}, d={d}, Br={br}: {got:,} is half — the f row is written *and* read back once")
        if got == 2 * extra:
            raise AssertionError(f"N={n}, d={d}, Br={br}: {got:,} is twice — fp16 is 2 bytes, and the f row moves "
                                 "once each way")
        raise AssertionError(f"N={n}, d={d}, Br={br}: expected {extra:,} extra bytes, got {got:,} — does the spill "
                             "depend on d or Br? (It is N² numbers of f, whatever the blocks.)")
    print("exercise 4: right")


def check_longest_fitting(n):
    # exercise 1: the longest N (a multiple of Bc = 64) whose v_once working set fits the H200, d = 128, Br = 64, fp16
    import variants.v_once as _vo
    from counting.gpus import get_gpu as _gg

    sram = _gg("h200").sram_bytes

    def fits(m):
        return _vo.sram_bytes(m, m, 128, 64, 64, 2, placement="sram", rescale="lazy") <= sram

    if n % 64 == 0 and fits(n) and not fits(n + 64):
        print(f"exercise 1: right — N ≤ {n:,}")
        return
    if not fits(n):
        need = _vo.sram_bytes(n, n, 128, 64, 64, 2, placement="sram", rescale="lazy")
        raise AssertionError(f"N = {n:,} needs {need:,} bytes of SRAM, over the H200's {sram:,}: the f row alone is "
                             f"Br · N · 2 = {64 * n * 2:,} bytes — did you leave out the Q, K, V tiles, the "
                             "accumulator or the block maxima?")
    raise AssertionError(f"N = {n:,} fits, but so does N + 64 = {n + 64:,}: go up in steps of Bc = 64 to the last one "
                         "that fits")


def check_lazy_overhead(ratio):
    # exercise 3: block maxima over the f row's bytes, Bc = 64, fp16 f row, float32 maxima
    want = 2 / 64
    if abs(ratio - want) < 1e-9:
        print("exercise 3: right — about 3 %, at every N: it never decides whether the row fits")
        return
    if abs(ratio - 1 / 64) < 1e-9:
        raise AssertionError("1/64 counts a max as 2 bytes: the maxima are float32 (4 bytes), the f row fp16 (2)")
    if abs(ratio - 4 / 64) < 1e-9:
        raise AssertionError("4/64 counts the f row at 1 byte an entry: it is fp16, 2 bytes")
    raise AssertionError(f"{ratio}: per row, Tc = N / Bc maxima of 4 bytes against N entries of f of 2 bytes — "
                         "N cancels")


def check_combine(fn):
    # exercise 5: combine split-KV partials [(m_x, l_x, O_x), ...] (O_x normalised by its own l_x) into O
    gen = torch.Generator().manual_seed(5)
    s = 8 * torch.randn(3, 96, generator=gen, dtype=torch.float64)
    v = torch.randn(96, 4, generator=gen, dtype=torch.float64)
    parts = []
    for c0 in range(0, 96, 32):
        sc = s[:, c0:c0 + 32]
        m = sc.amax(-1, keepdim=True)
        e = torch.exp(sc - m)
        parts.append((m, e.sum(-1, keepdim=True), (e @ v[c0:c0 + 32]) / e.sum(-1, keepdim=True)))
    want = torch.softmax(s, -1) @ v
    got = torch.as_tensor(fn(parts)).double()
    if got.shape == want.shape and torch.allclose(got, want, atol=1e-10):
        print("exercise 5: right — one (m, ℓ, O) per chunk, merged as notebook 2's merge does")
        return
    if got.shape == want.shape and torch.allclose(got, sum(p[2] for p in parts) / len(parts), atol=1e-10):
        raise AssertionError("a plain average of the partial O's weighs every chunk alike: weigh chunk x by its "
                             "share of the row's total, ℓ_x e^(m_x − m) with m = max m_x")
    lw = [p[1] for p in parts]
    if got.shape == want.shape and torch.allclose(got, sum(w * p[2] for w, p in zip(lw, parts)) / sum(lw), atol=1e-10):
        raise AssertionError("the ℓ_x are relative to different maxima m_x: bring them to the common max first, "
                             "ℓ_x e^(m_x − m)")
    raise AssertionError(f"max |O − O_ref| = {(got - want).abs().max():.2e}" if got.shape == want.shape else
                         f"shape {tuple(got.shape)}, expected {tuple(want.shape)}")


# %% [markdown]
# ## Exercises
#
# **1.** Derive the SRAM working set of `v_once` with the row on chip by hand (see `variants/v_once.py`,
# `sram_bytes`) and check the longest fitting $N$ in the table for the H200, $d = 128$, $B_r = 64$.
# Check: `check_longest_fitting(n)`.
#
# <details><summary>Solution</summary>
#
# The $f$ row, $B_r \times N$ in the input dtype, dominates; add the $Q_i$, $K_j$, $V_j$ tiles, the
# $B_r \times d$ accumulator and the row statistics (lazy: one max per key block). Setting the sum equal
# to `h200.sram_bytes` and solving for $N$ (in steps of $B_c$) gives `longest_fitting(h200, 128, 64)`.
#
# </details>
#
# **2.** Could the $f$ row be stored in fp8 to double the $N$ that fits? The reference takes float32, float16,
# bfloat16 or float64 only (fp8 inputs raise), so emulate it for one query block: write
# `fp8_f(q, k, v)` for 2-D `q`, `k`, `v` (float32, scale $1/\sqrt{64}$) that forms $f = e^{S - m}$ with
# the row max $m$, rounds $f$ to fp8 (`f.to(torch.float8_e4m3fn).float()`), and returns
# $(f / \ell)\,V$ with $\ell$ the row sum of the unrounded $f$. Check: `check_fp8_f(fp8_f)`; it prints
# the error against fp16's. Is the trade worth it?
#
# <details><summary>Solution</summary>
#
# ```python
# def fp8_f(q, k, v):
#     s = q @ k.T / math.sqrt(q.shape[-1])
#     f = torch.exp(s - s.max(-1, keepdim=True).values)
#     return (f.to(torch.float8_e4m3fn).float() / f.sum(-1, keepdim=True)) @ v
# ```
# The $N$ that fits nearly doubles, but e4m3 keeps 3 mantissa bits: the error grows by about two orders of
# magnitude over fp16's — and the kernel still loses occupancy (section 6). Not a fix.
#
# </details>
#
# **3.** Show that lazy rescaling needs $T_c$ extra floats per row on chip (the block maxima). At what
# $N$ does that matter? Check the ratio of the maxima's bytes to the $f$ row's at $B_c = 64$:
# `check_lazy_overhead(ratio)`.
#
# <details><summary>Solution</summary>
#
# One max per key block per row: $B_r T_c$ floats, $4 B_r N / B_c$ bytes, against the $f$ row's
# $2 B_r N$: a ratio of $2/B_c$, 3 % at $B_c = 64$, at every $N$. It never decides whether the row fits.
#
# </details>
#
# **4.** The verdict says `v_once` uses the same bytes as FA2 when it fits. When it spills (lazy), how many
# extra HBM bytes does it move than FA2 at the same blocks, as a function of $N$, $d$, $B_r$ (fp16, one
# head, non-causal)? Write `spill_extra(n, d, br)`. Check: `check_spill_extra(spill_extra)`. Do small
# $B_r$ (where FA2 re-reads $K$, $V$ often) ever make spilled `v_once` cheaper?
#
# <details><summary>Solution</summary>
#
# `spill_extra = lambda n, d, br: 2 * n * n * 2`: the $f$ row written and read once, fp16, whatever $d$
# and $B_r$. `v_once` still reads $K_j$ (and $V_j$) once per query block, as FA2 does — it changes when
# $V$ is multiplied, not how often the tiles are read — so it is never cheaper.
#
# </details>
#
# **5.** Split-KV ("flash-decoding") also avoids holding a whole row: how does it use the merge of
# notebook 2 instead? Write `combine(parts)` that takes one `(m_x, l_x, O_x)` per chunk of keys (each a
# column per query row; $O_x$ already divided by its own $\ell_x$) and returns the row's $O$. Check:
# `check_combine(combine)`.
#
# <details><summary>Solution</summary>
#
# It splits the keys into chunks processed by different thread blocks, each producing a partial $O$ with
# its own $(m, \ell)$; a final step merges the partials with notebook 2's `merge`, rescaling each by
# $e^{m_x - m}$. Nothing of size $N$ per row is ever held — only one $(m, \ell, O)$ per chunk.
#
# ```python
# def combine(parts):
#     m = torch.stack([p[0] for p in parts]).amax(0)             # the common max
#     w = [p[1] * torch.exp(p[0] - m) for p in parts]            # each chunk's ℓ, relative to it
#     return sum(wx * p[2] for wx, p in zip(w, parts)) / sum(w)
# ```
#
# </details>
