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
# # 1 · Why IO matters
#
# Attention is $O = \mathrm{softmax}(QK^T/\sqrt d)\,V$. Its FLOPs are fixed — about $4N^2d$ per head —
# so why are some implementations tens of times faster than others? Because standard attention writes
# two $N \times N$ matrices, $S$ and $P$, to the big, slow HBM and reads them back: it spends its time
# **moving bytes** between HBM and the small, fast on-chip SRAM, not on arithmetic. FlashAttention never
# writes them. With those bytes gone the picture turns over: on an H200 the fastest FlashAttention-2
# kernel waits for its tensor cores and its exponentials, not for memory (section 3's figure, measured).
# This notebook shows both halves with the workbench's numbers:
#
# 1. Standard ("naive") attention, and exactly what it writes to HBM.
# 2. The memory hierarchy of an H200 (`counting.gpus`).
# 3. HBM traffic and the roofline: naive attention against FlashAttention-2, by the papers' count
#    (`counting.closed_forms`, `analysis.roofline`) and as each kernel runs on the GPU (`analysis.story`).
# 4. Where naive attention's time goes: the bytes of $S$ and $P$ against those of $Q, K, V, O$.
#
# Reading order: this notebook, then 2 (online softmax), 3 (FlashAttention-1), 4 (FlashAttention-2),
# 5 (issue #941's "multiply V once"), 6 (measurements on a real GPU), 7 (the backward pass: recomputation),
# 8 (FlashAttention on Hopper), 10 (across GPUs).

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
# ## 1 · Standard attention
#
# The FlashAttention paper's Algorithm 0, as three passes (in a real implementation three kernels):
#
# 1. $S = QK^T/\sqrt d$ — **write $S$** ($N \times N$) to HBM;
# 2. $P = \mathrm{softmax}(S)$ — **read $S$, write $P$** ($N \times N$);
# 3. $O = PV$ — **read $P$**, write $O$.
#
# The workbench's reference `variants/naive.py` is written against a counting memory model: every
# transfer between HBM and SRAM is a `mem.load` or a `mem.store`, so the code itself says what goes
# where:

# %%
import inspect
import variants.naive
from variants import VARIANTS, attention_reference

for line in inspect.getsource(variants.naive.forward).splitlines():
    if "mem.load" in line or "mem.store" in line or "# line" in line:
        print(line.rstrip())

# %% [markdown]
# Run it on a small problem ($N = 64$, $d = 16$, fp16, tiles of $16 \times 16$) with a
# `Memory` to count, and check the answer against the float64 oracle:

# %%
from counting.memory import Memory

N, D = 64, 16
q, k, v = (torch.randn(1, 1, N, D).half() for _ in range(3))
mem = Memory()
o, lse = VARIANTS["naive"].forward(q, k, v, block_q=16, block_k=16, mem=mem)
o_ref, _ = attention_reference(q, k, v)
print(f"max |O - O_ref| = {(o.double() - o_ref).abs().max():.1e} (fp16 inputs, S and P stored in fp16)")

c = mem.counts
names = sorted(set(c.read_bytes) | set(c.write_bytes), key="QKVSPOlse".find)
show_table(["tensor", "read (bytes)", "written (bytes)"],
           [[x, f"{c.read_bytes.get(x, 0):,}", f"{c.write_bytes.get(x, 0):,}"] for x in names])
sp = sum(c.read_bytes.get(x, 0) + c.write_bytes.get(x, 0) for x in "SP")
print(f"S and P: {sp:,} of {c.hbm_bytes:,} bytes ({sp / c.hbm_bytes:.0%}) - and they grow as N², "
      "while reading each input once grows as N·d")

# %% [markdown]
# ## 2 · The memory hierarchy of an H200
#
# The figures below come from `counting.gpus` (each with its source). The on-chip SRAM (shared memory)
# is fast but tiny — 227 KiB per thread block — while HBM is huge but, per byte, far slower than the
# arithmetic units are per FLOP. (The FlashAttention paper quotes ~19 TB/s for an A100's SRAM against
# 1.5–2 TB/s for its HBM.)

# %%
from counting.gpus import get_gpu

h200 = get_gpu("h200")
sms = int(h200.sms.value)
hierarchy = [
    ("SRAM per thread block", h200.smem_per_block_bytes),
    ("SRAM per SM", h200.smem_per_sm_bytes),
    ("L2 cache", h200.measured["l2_bytes"]),  # 60 MB as the device reports it (the whitepaper says 50)
    ("HBM", h200.hbm_bytes),
]
rows = [[name, human(f.value, binary=name != "HBM"), f"{f.source}: {f.note}" if f.note else f.source]
        for name, f in hierarchy]  # HBM: GB
rows.insert(2, [f"SRAM, all {sms} SMs", human(h200.smem_per_sm_bytes.value * sms, binary=True), "per SM × SMs"])
show_table(["level", "capacity", "source"], rows)

rates = [
    ("HBM bandwidth", "hbm_bandwidth", "B/s"),
    ("fp16 tensor-core matmul (dense)", "fp16_tensor_flops", "FLOP/s"),
    ("fp32 (CUDA cores)", "fp32_flops", "FLOP/s"),
    ("exponentials (SFU)", "exp_rate", "exp/s"),
]
rows_rates = []
for name, key, unit in rates:
    spec, measured = h200.figure(key), h200.measured.get(key)
    rows_rates.append([name, f"{spec.value:.3g} {unit}", f"{measured.value:.3g} {unit}" if measured else "—",
                       spec.source])
show_table(["rate", "spec", "measured on this workplace's H200", "source"], rows_rates)
ridge = h200.fp16_tensor_flops.value / h200.hbm_bandwidth.value
print(f"ridge point: {ridge:.0f} FLOP per byte of HBM traffic - below it, an algorithm waits for memory")

# capacity beside bandwidth: the level that holds the most is the slowest to read
levels = ["SRAM (all SMs)", "L2 cache", "HBM"]
capacity = [h200.smem_per_sm_bytes.value * sms, h200.measured["l2_bytes"].value, h200.hbm_bytes.value]
# bandwidth, one bar per level: HBM measured here (datasheet hatched); the L2 has no datasheet figure, so the
# most a profiled kernel moved through it (gpumodel.gpu_model.L2_BANDWIDTH, a lower bound); shared memory from
# the CUDA guide's 128 bytes per clock per SM at the boost clock
from gpumodel import gpu_model

fig, (ax_c, ax_b) = plt.subplots(1, 2, figsize=(10, 2.8), sharey=True)
colours = ["tab:green", "tab:orange", "tab:red"]
ax_c.barh(levels, capacity, color=colours)
ax_c.set_xscale("log")  # 8 decades: a linear axis would show only HBM
for y, v in enumerate(capacity):
    ax_c.text(v, y, " " + human(v, binary=y < 2), va="center", fontsize=8)
ax_c.set_xlim(right=max(capacity) * 50)
ax_c.invert_yaxis()
ax_c.set_xlabel("capacity (bytes, log scale)")
ax_c.set_title("how much it holds")
hbm_bw = h200.measured["hbm_bandwidth"].value
smem_bw = gpu_model.SMEM_BYTES_PER_CLK * sms * h200.value("clock_hz")
ax_b.barh(levels, [smem_bw / 1e12, gpu_model.L2_BANDWIDTH / 1e12, hbm_bw / 1e12], color=colours)
ax_b.barh(["HBM"], [h200.hbm_bandwidth.value / 1e12], color="none", edgecolor="tab:red", hatch="//")
for y, (v, text) in enumerate([
        (smem_bw, f"{smem_bw / 1e12:.0f} TB/s (128 B/clock/SM, CUDA guide)"),
        (gpu_model.L2_BANDWIDTH, f"≥ {gpu_model.L2_BANDWIDTH / 1e12:.1f} TB/s (the most a profiled kernel moved)"),
        (h200.hbm_bandwidth.value, f"{hbm_bw / 1e12:.1f} TB/s measured (datasheet "
                                   f"{h200.hbm_bandwidth.value / 1e12:.1f}, hatched)")]):
    ax_b.text(v / 1e12, y, " " + text, va="center", fontsize=8)  # right of the bar (and of the hatch)
ax_b.set_xlim(0, 75)
ax_b.set_xlabel("bandwidth (TB/s, linear)")
ax_b.set_title("how fast it is read")
fig.suptitle("H200 memory hierarchy: capacity beside bandwidth")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3 · HBM traffic and the roofline
#
# The closed forms (`counting.closed_forms.counts`) restate the Memory model's counts exactly without
# running anything, so real sizes are instant. Blocks come from FlashAttention's rule for an H200's
# SRAM (`closed_forms.fa1_blocks`); FlashAttention-2 (`fa2`, notebook 4) is shown for contrast.
# `analysis.roofline` turns each count into three times — HBM bytes / bandwidth, matmul FLOPs /
# tensor rate, non-matmul work / SFU and FP32 rates — and the largest one bounds the kernel.
#
# These are **the papers' count**: every byte a thread block asks global memory for, as if there were
# no cache (FA1's Theorem 2 and FA2's analysis count this way). It is the right count for proving an
# algorithm's traffic, and it is not what reaches DRAM: the table labels it so, and the figure after
# it shows what the GPU does.

# %%
from counting import closed_forms
from analysis.roofline import roofline

d, dtype, heads = 64, "fp16", 32  # hidden size 2048
br, bc = closed_forms.fa1_blocks(h200.sram_bytes, d)
seq = [512, 1024, 2048, 4096, 8192, 16384]
res = {}
for name in ("naive", "fa2"):
    for n in seq:
        c = closed_forms.counts(name, 16384 // n, heads, n, n, d, dtype=dtype, block_q=br, block_k=bc,
                                sram_bytes=h200.sram_bytes)  # batch x N = 16k tokens
        res[(name, n)] = (c, roofline(c, h200))

from counting.headline import min_hbm_bytes

# intensity twice: by the papers' count (every request goes to HBM) and with each input read once and
# each output written once (what a cache that holds K and V would leave: the most DRAM can be spared)
show_table(["variant", "N", "HBM bytes (papers' count, no cache)", "FLOP/B papers' count", "FLOP/B each input once",
            "t memory (papers' count)", "t matmul", "t non-matmul", "roofline bound by the papers' count (no cache)",
            "TFLOP/s by the papers' count"],
           [[name, n, human(c.hbm_bytes), f"{r.intensity_flop_per_byte:.0f}",
             f"{c.total_flops / min_hbm_bytes(c.batch, c.heads, n, n, d, 2):.0f}", f"{r.t_memory_s * 1e6:.0f} µs",
             f"{r.t_matmul_s * 1e6:.0f} µs", f"{r.t_nonmatmul_s * 1e6:.0f} µs", r.bound,
             f"{r.predicted_tflops:.0f}"]
            for (name, n), (c, r) in res.items() if n in (1024, 4096, 16384)])

# %% [markdown]
# **The figure to remember.** Each kernel below is drawn at its **measured** TFLOP/s on the H200 (a horizontal
# segment: one speed) against its three arithmetic intensities, FLOPs over bytes counted three ways
# (`gpumodel.levels`, at the kernel's own blocks): ○ the papers' count (no cache), ◆ what the SMs send to the
# L2, ■ what reaches DRAM. The ceilings: the HBM slope (bandwidth × intensity), the tensor cores' roof, and
# the exponential unit's roof — one exponential per (query, key) pair buys $4d$ FLOPs, so 16 exp per clock per
# SM is a FLOP/s roof of $16 \cdot \text{SMs} \cdot \text{clock} \cdot 4d$, which halves with $d$. The teaching
# kernels (`naive`, `fa1`, `fa2`) compute in FP32 on CUDA cores, so they sit under the FP32 roof (grey).

# %%
from analysis import story

bw = h200.hbm_bandwidth.value  # the datasheet's, as the table's times use it (section 4 too)


def draw_story(ax, n, d):
    ce = story.ceilings(d)
    xs = np.logspace(0, 4, 200)
    ax.loglog(xs, ce.hbm_bandwidth * xs / 1e12, "k-", lw=1.2, label=f"HBM slope ({ce.hbm_bandwidth / 1e12:.1f} TB/s)")
    ax.axhline(ce.tensor_flops / 1e12, color="k", ls="--", lw=1.2,
               label=f"tensor cores ({ce.tensor_flops / 1e12:.0f} TFLOP/s measured)")
    ax.axhline(ce.exp_flops / 1e12, color="tab:purple", ls="-.", lw=1.2,
               label=f"exponentials (MUFU × 4d = {ce.exp_flops / 1e12:.0f})")
    ax.axhline(h200.fp32_flops.value / 1e12, color="grey", ls=":", lw=1, label="FP32 cores (teaching kernels)")
    for p in story.points(n, d):
        y = p.measured_tflops
        x3 = [p.intensity(level) for level in ("requests", "l2", "dram")]
        st = line_style(p.kernel)
        ax.plot(x3, [y] * 3, "-", color=st["color"], lw=1.5, label=f"{p.label} (`{p.kernel}`): {y:.0f}")
        ax.plot(x3[0], y, "o", mfc="white", mec=st["color"], ms=8)
        ax.plot(x3[1], y, "D", color=st["color"], ms=4)
        ax.plot(x3[2], y, "s", color=st["color"], ms=7)
    ax.set_xlim(5, 1e4)
    ax.set_ylim(2, 3000)
    ax.set_xlabel("FLOP per byte (log): ○ papers' count  ◆ L2  ■ DRAM")
    ax.set_title(f"d = {d}, N = {n}, fp16")

fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
for ax, dd in zip(axes, (64, 128)):
    draw_story(ax, 4096, dd)
axes[0].set_ylabel("measured TFLOP/s (log)")
legend_outside(axes[1])
fig.suptitle("H200: each kernel at its measured speed, against its three intensities")
fig.tight_layout()
plt.show()
bw_measured = story.ceilings(64).hbm_bandwidth
verdicts = [[p.label, p.kernel, d_, f"{p.intensity('requests'):.0f}", f"{p.intensity('dram'):.0f}",
             story.BOUND_WORDS[p.bound], f"{bw_measured * p.intensity('requests') / 1e12:.0f}",
             f"{p.measured_tflops:.0f}"]
            for d_ in (64, 128) for p in story.points(4096, d_)]
show_table(["", "kernel", "d", "FLOP/B papers' count (no cache)", "FLOP/B DRAM", "bound on the H200 (GPU model)",
            "HBM slope at the papers' count (TFLOP/s)", "measured TFLOP/s"], verdicts)

# %% [markdown]
# Read the figure from left to right. **Naive attention** sits left of the ridge on every count: its $S$ and
# $P$ (64 MiB per (batch, head) at $N$ = 4k, 8 GiB for $B \cdot H = 128$) fit no cache, so even its DRAM
# intensity (■) stays low, and on the HBM slope there no kernel could run it faster than a few hundred
# TFLOP/s — naive attention is memory-bound as an algorithm. (The teaching `naive` kernel does not even reach
# that slope: it computes in FP32, and the GPU model finds it waiting on shared memory.) Its intensity does
# not grow with $N$: FLOPs and $S$/$P$ bytes both grow as $N^2$.
#
# **FlashAttention-2** by the papers' count (○) is left of the ridge too: it re-reads $K$ and $V$ once per
# query block, so its bytes grow as $N^2 d / B_r$ and its intensity is only $\Theta(B_r)$ — the table above
# prices it on the memory slope. But that count assumes no cache. On the H200 the 60 MB L2 serves nearly every
# re-read of $K_j, V_j$ (Nsight Compute: DRAM bytes 0.97–1.04× reading Q, K, V once and writing O once), so
# its DRAM intensity (■) grows as $N$, far right of the ridge. At $d = 128$ the measured Hopper kernel
# (`fa2_wgmma`) even runs faster than the HBM slope allows at its papers' count (the table's last two
# columns) — impossible if those bytes came from DRAM. It is **not memory-bound**. The GPU model
# and Nsight Compute agree on what bounds it: the tensor cores at $d = 128$, the exponentials (with the
# softmax's FP32 work) at $d = 64$, where the exponential roof is half as high. `v_once` (notebook 5)
# spills its $f$ row to HBM and is the one tensor-core kernel here that waits for memory.
#
# So "IO-aware" is the right lesson, and the right measure of IO depends on the cache: the papers' count
# proves what an algorithm must move; DRAM bytes say what the GPU waits for. Notebook 6 has the model
# against every measurement.
#
# ## 4 · Where the time goes
#
# Split naive attention's HBM traffic into the score matrices ($S$, $P$) and everything else
# ($Q$, $K$, $V$, $O$, lse), against $N$, per (batch, head):

# %%
sp_bytes, qkvo_bytes = [], []
for n in seq:
    c = closed_forms.counts("naive", 1, 1, n, n, d, dtype=dtype, block_q=br, block_k=bc)
    sp = sum(c.read_bytes.get(x, 0) + c.write_bytes.get(x, 0) for x in "SP")
    sp_bytes.append(sp)
    qkvo_bytes.append(c.hbm_bytes - sp)

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
ax = axes[0]
ax.loglog(seq, sp_bytes, "o-", label="S and P (written + read)")
ax.loglog(seq, qkvo_bytes, "s-", label="Q, K, V (re-read per tile), O, lse")
ax.loglog(seq, [4 * n * d * 2 for n in seq], "k:", label="Q, K, V, O once each")
ax.set_xlabel("sequence length N (log scale)")
ax.set_ylabel("HBM bytes per (batch, head), log scale")
ax.set_title(f"naive attention: HBM traffic by tensor, d = {d}, fp16")
legend_outside(ax)

ax = axes[1]
width = 0.2
xs = np.arange(len(seq))
t_sp = [b * (16384 // n) * heads / bw * 1e6 for b, n in zip(sp_bytes, seq)]
t_rest = [b * (16384 // n) * heads / bw * 1e6 for b, n in zip(qkvo_bytes, seq)]
t_mm = [res[("naive", n)][1].t_matmul_s * 1e6 for n in seq]
t_nm = [res[("naive", n)][1].t_nonmatmul_s * 1e6 for n in seq]
for off, vals, lab in ((-1.5, t_sp, "HBM: S and P"), (-0.5, t_rest, "HBM: Q, K, V, O"),
                       (0.5, t_mm, "matmul"), (1.5, t_nm, "exp + other")):
    ax.bar(xs + off * width, vals, width, label=lab)
ax.set_xticks(xs, [f"{n // 1024}k" if n >= 1024 else str(n) for n in seq])
ax.set_xlabel("sequence length N (batch = 16k / N, H = 32)")
ax.set_ylabel("time on an H200 if it were the only cost (µs)")
ax.set_title("naive attention: where the time goes")
legend_outside(ax)
fig.tight_layout()
plt.show()
share = [a / (a + b) for a, b in zip(sp_bytes, qkvo_bytes)]
print("share of naive's HBM bytes that are S and P:", ", ".join(f"N={n}: {s:.0%}" for n, s in zip(seq, share)))

# %% [markdown]
# The score matrices are the largest share of the traffic, and moving them alone takes about 2.5 times
# as long as all the arithmetic together (matmul plus exp and other). (The other line grows as $N^2$
# too: naive's tiled products re-read $K$ and $V$ once per query block, $T_r \cdot N d$ elements — a
# cost of the tiling, which larger GEMM tiles and the L2 cache shrink. $S$ and $P$ cannot be shrunk
# that way.) Yet $S$ and $P$ are intermediate results: nobody needs them in HBM. The rest of the
# workbench is about not writing them:
#
# - notebook 2: the **online softmax** lets a kernel normalise a row it sees only block by block;
# - notebook 3: **FlashAttention-1** keeps $S$ and $P$ on chip and proves its traffic is
#   $\Theta(N^2 d^2 / M)$;
# - notebook 4: **FlashAttention-2** swaps the loops for parallelism and fewer non-matmul FLOPs;
# - notebook 5: issue #941's **multiply V once**, and what its $f$ row costs;
# - notebook 6: the kernels on a real GPU;
# - notebook 7: the backward pass, which rebuilds $P$ from one number per row instead of storing it.
#
# The same numbers are one command away: `fa-traffic report --blocks fa1-rule` (here for two variants).
# It takes the benchmarks' full GPU unless told (B = 16k/N, H = 2048/d: 16 x 32 at N = 1k, 1 x 32 at 16k),
# section 3's shape, so its bytes, times and TFLOP/s are that table's: **the papers' count (no cache)**, whose
# `bound` column says "memory" for FA2. Without `--blocks fa1-rule` it models each variant's real kernel with its
# own blocks instead (the GPU model of notebook 6): requests (the papers' count), L2 and DRAM bytes, and the bound
# on the H200 — for FA2 (`fa2_wgmma`) the softmax, not memory; for the teaching `naive` kernel shared memory, with
# many times the compulsory bytes reaching DRAM (the `DRAM × min` column).

# %%
import subprocess

for title, extra in (("`--blocks fa1-rule`: the papers' count (no cache) and its roofline, as in section 3's table",
                      ["--blocks", "fa1-rule"]),
                     ("default: each variant's kernel in the GPU model, its bound on the H200", [])):
    out = subprocess.run([sys.executable, "-m", "analysis", "report", "--variant", "naive,fa2",
                          "--seq-len", "1k,16k", "--format", "markdown", *extra],
                         cwd=ROOT, capture_output=True, text=True)
    display(Markdown(f"**{title}**\n\n" + out.stdout) if out.returncode == 0
            else Markdown(f"`fa-traffic` failed: {out.stderr}"))

# %% [markdown]
# ## 5 · S in HBM, in the input dtype
#
# Writing $S$ to HBM has a second cost besides the bytes: it is stored in the **input dtype**. In fp16
# a score beyond ±65504 becomes ±inf there, and the softmax turns it into NaN; a row whose scores all
# lie below −65504 reads as a row that sees no key ($o = 0$, lse $= -\infty$). FlashAttention keeps
# $S$ on chip in float32, where the same scores are ordinary numbers. `variants.naive` keeps the
# overflow (it is what unfused attention does) and reports it with a `ScoreRangeWarning`:

# %%
import warnings

from variants.naive import ScoreRangeWarning

torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 8, 4) for _ in range(3))
q[..., 0, :] = torch.tensor([400.0, 0, 0, 0])  # score (0, 0) = 400 · 400 / sqrt(4) = 8e4
k[..., 0, :] = torch.tensor([400.0, 0, 0, 0])
q, k, v = q.half(), k.half(), v.half()
ref_o, ref_lse = attention_reference(q, k, v)
rows = []
for name in ("naive", "fa2"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o, lse = VARIANTS[name].forward(q, k, v, block_q=4, block_k=4)
    said = [str(w.message) for w in caught if issubclass(w.category, ScoreRangeWarning)]
    rows.append([name, f"{lse[0, 0, 0].item():.6g}", str([round(x, 3) for x in o[0, 0, 0].tolist()]),
                 f"{(o.double() - ref_o).abs().max().item():.3g}", said[0][:60] + "…" if said else "—"])
rows.append(["float64 reference", f"{ref_lse[0, 0, 0].item():.6g}",
             str([round(x, 3) for x in ref_o[0, 0, 0].tolist()]), "0", ""])
show_table(["variant (fp16 inputs)", "lse row 0", "o row 0", "max |o - o_ref|", "warning"], rows)

# %% [markdown]
# bf16 has fp32's range, so it does not overflow, but it keeps 8 significant bits: at $|S| \approx 10^4$
# a stored score is off by up to 32, and $e^{32}$ is not a rounding error. The warning fires from
# $|S| \ge 2/\varepsilon$ (fp16: 2048, bf16: 256), where rounding $S$ errs by 1 or more.

# %%
# Checks for the exercises: call one with your answer; it says whether it is right.
from counting.gpus import get_gpu as _get_gpu


def check_l2_fill(n):
    l2 = _get_gpu("h200").measured["l2_bytes"].value  # 60 MB, as the device reports it

    def sp(m):
        return 2 * m * m * 2  # S and P, fp16, one head

    assert sp(n) >= l2, (f"N = {n} is too small: S and P take 2·N²·2 = {sp(n):,} bytes, short of the L2's {l2:,} "
                         f"bytes by {l2 - sp(n):,}. Solve 4·N² ≥ L2 bytes for N (take the ceiling).")
    assert sp(n - 1) < l2, (f"N = {n} is past the first one: already at N − 1 = {n - 1}, S and P take {sp(n - 1):,} "
                            f"bytes ≥ the L2's {l2:,} bytes. Look for the smallest N (compare bytes exactly: "
                            f"{human(sp(n - 1))} and {human(l2)} print alike).")
    print("exercise 2: right")


def check_intensity(d, flops_per_byte):
    want = 4 * d / (4 * 2)  # 4N²d FLOPs over 4N² fp16 elements of S and P moved
    if abs(flops_per_byte - want) < 1e-9 * want:
        print("exercise 4: right")
        return
    hint = ""
    if abs(flops_per_byte - 2 * want) < 1e-9 * want:
        hint = " — twice the answer: an fp16 element is 2 bytes, not 1"
    elif abs(flops_per_byte - want / 2) < 1e-9 * want:
        hint = " — half the answer: count S and P each once written and once read (4N² elements), not 8N²"
    raise AssertionError(f"d = {d}: {flops_per_byte} FLOP/B is not 4N²d FLOPs / (4N² elements · 2 bytes){hint}. "
                         "N cancels: the intensity depends on d only.")


def check_causal_s_bytes(read, written):
    # the small counted example of section 1 (N = 64, d = 16, blocks of 16, fp16), now causal
    from counting.memory import Memory
    from variants import VARIANTS

    n = 64
    m = Memory()
    VARIANTS["naive"].forward(*(torch.zeros(1, 1, n, 16, dtype=torch.float16) for _ in range(3)), causal=True,
                              block_q=16, block_k=16, mem=m)
    want_r, want_w = m.counts.read_bytes["S"], m.counts.write_bytes["S"]
    full = n * n * 2
    for got, want, what in ((read, want_r, "read"), (written, want_w, "written")):
        if got == want:
            continue
        if got < want and abs(got - full / 2) <= full / 4:
            raise AssertionError(f"S {what}: {got:,} bytes is about half of the N² · 2 = {full:,} — but the mask "
                                 "does not halve naive's traffic: pass 1 writes the whole N × N matrix (hidden "
                                 "entries as −inf) and pass 2 reads it all back, as separate kernels.")
        if got == want // 2:
            raise AssertionError(f"S {what}: {got:,} — count bytes, not elements: fp16 is 2 bytes an element.")
        raise AssertionError(f"S {what}: {got:,} bytes is not what Memory counts; S is N × N = {n * n:,} "
                             "fp16 elements, and each pass moves it whole.")
    print("exercise 1: right")


def check_no_overlap(ratio):
    """Exercise 5: naive at N = 4096 (section 3's table: res[("naive", 4096)]), the no-overlap time (the three times
    added) over the roofline's max."""
    _, rf = res[("naive", 4096)]
    times = (rf.t_memory_s, rf.t_matmul_s, rf.t_nonmatmul_s)
    want = sum(times) / max(times)
    if abs(ratio - want) <= 1e-6 * want:
        print(f"exercise 5: right ({want:.3f}×: the bound hides at most that much; nothing overlapping costs it all)")
        return
    if abs(ratio - 1 / want) <= 1e-6 / want:
        raise AssertionError("upside down: the sum of the three times over their max (at least 1)")
    if abs(ratio - 3) < 1e-9:
        raise AssertionError("3 would need the three times equal; add the table's own t_memory_s, t_matmul_s, "
                             "t_nonmatmul_s and divide by the largest")
    raise AssertionError(f"{ratio:.4g}: add rf.t_memory_s, rf.t_matmul_s, rf.t_nonmatmul_s of res[('naive', 4096)] "
                         "and divide by the largest of them (the roofline's time)")


def check_a100_ridge(ridge):
    a100 = _get_gpu("a100")
    want = a100.fp16_tensor_flops.value / a100.hbm_bandwidth.value
    if abs(ridge - want) <= 0.01 * want:
        print(f"exercise 3: right ({want:.0f} FLOP/B, left of the H200's "
              f"{_get_gpu('h200').fp16_tensor_flops.value / _get_gpu('h200').hbm_bandwidth.value:.0f})")
        return
    if abs(ridge - 1 / want) <= 0.01 / want:
        raise AssertionError("upside down: the ridge is peak FLOP/s divided by HBM bytes/s (FLOP per byte)")
    raise AssertionError(f"{ridge:.4g} FLOP/B: the ridge is the A100's fp16 tensor peak over its HBM bandwidth, "
                         "both from get_gpu('a100') (fp16_tensor_flops.value / hbm_bandwidth.value)")


# %% [markdown]
# ## Exercises
#
# **1.** In the small counted example, predict the bytes of $S$ read and written for a **causal** mask
# before running it (`causal=True`). Why does naive attention gain nothing from the mask in HBM
# traffic? (See the docstring of `variants/naive.py`.) Check: `check_causal_s_bytes(read, written)`.
#
# <details><summary>Solution</summary>
#
# The same as without the mask: $N_q N_k$ elements of $S$ written and read again (and the same for $P$).
# Each pass is a separate kernel and the next one reads a full $N \times N$ matrix, so the hidden
# entries are still written (as $-\infty$, without computing them). Only pass 3 skips the $P$ tiles
# the mask hides. Check with `Memory` and `variants.naive.forward(..., causal=True)`.
#
# </details>
#
# **2.** At which $N$ do $S$ and $P$ alone (fp16, one head) fill the H200's 60 MiB (62,914,560-byte) L2 cache (as the device
# reports it)? Check: `check_l2_fill(N)`. What changes for a kernel whose $S$ fits in L2?
#
# <details><summary>Solution</summary>
#
# The smallest $N$ with $2 \cdot N^2 \cdot 2$ bytes $\ge$ `h200.measured["l2_bytes"].value`. Below it,
# $S$ written by one kernel can be read back by the next from the L2 instead of DRAM: the papers' count
# (requests) stays the same, but the DRAM bytes drop — the gap notebook 6 measures.
#
# </details>
#
# **3.** Move the roofline to an A100 (`get_gpu("a100")`). Does the ridge point move left or right, and
# does naive attention (by the papers' count) get any closer to it there? Check: `check_a100_ridge(ridge)`.
#
# <details><summary>Solution</summary>
#
# Left: the A100's ridge (datasheet figures) is about 153 FLOP/B against the H200's 206, because its
# tensor cores are slower relative to its HBM. Naive attention's intensity hardly depends on the GPU
# ($\approx d/2$ FLOP/B in fp16 counting $S$ and $P$ alone, 32 at $d = 64$; section 3's table shows 21
# because it also counts the tiled re-reads of $K$ and $V$), so it is relatively closer on the A100 but
# still far left of the ridge: memory-bound on both.
#
# </details>
#
# **4.** Naive attention at $d = 128$: does its arithmetic intensity change? Derive it from the closed
# form: FLOPs $\approx 4N^2 d$, bytes $\approx 4N^2 \cdot$ itemsize. Check: `check_intensity(d, your_value)`
# for $d = 64$ and $128$.
#
# <details><summary>Solution</summary>
#
# Intensity $= 4N^2 d / (4N^2 \cdot 2) = d/2$ FLOP per byte in fp16: it doubles from 32 to 64 when $d$
# doubles, independent of $N$ — still well below the ridge. (Section 3's table shows 21 at $d = 64$, not
# 32: it also counts naive's tiled re-reads of $K$ and $V$, bytes that bring no FLOPs.)
#
# </details>
#
# **5.** The roofline takes the **max** of three times (perfect overlap). How much slower would naive attention
# at $N = 4096$ be if nothing overlapped (the three times added, over their max)? Check: `check_no_overlap(ratio)`.
# Which real effects make a kernel slower than the bound? Keep your list for notebook 6.
#
# <details><summary>Solution</summary>
#
# ```python
# _, rf = res[("naive", 4096)]
# times = (rf.t_memory_s, rf.t_matmul_s, rf.t_nonmatmul_s)
# check_no_overlap(sum(times) / max(times))
# ```
#
# Imperfect overlap of memory and compute; latency that too few resident warps cannot hide (occupancy);
# kernel launch overhead at small sizes; wave quantisation and the causal tail; shared-memory bank
# conflicts and instruction issue; the L2, which makes DRAM traffic differ from the papers' count.
#
# </details>
