"""Write the teaching notebooks (notebooks/0*.ipynb) from the cell sources below.

    python notebooks/build_notebooks.py          # rewrite every notebook, outputs cleared
    python notebooks/build_notebooks.py 03       # only those whose name contains "03"

The .ipynb files are generated: edit the cells here, regenerate, and commit both (the test suite
checks that they agree and that the committed notebooks carry no outputs). Every notebook starts
with the same setup cell: find the repository root so `variants`, `analysis` and `kernels` import
from wherever JupyterLab was started, use one CPU thread (the problems are tiny: threads only add
overhead), and seed torch.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = '''\
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
%matplotlib inline


def show_table(headers, rows):
    """Display a short Markdown table."""
    lines = ["| " + " | ".join(str(h).replace("|", "\\\\|") for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\\\|") for c in r) + " |" for r in rows]
    display(Markdown("\\n".join(lines)))


def human(n, binary=False):
    """1.5 GB, 12 MB, 640 B: decimal units as traffic and bandwidth are quoted; binary=True: KiB, MiB."""
    units = ((("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)) if binary else
             (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)))
    for unit, size in units:
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"
'''


def md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text.strip("\n")}


def code(text: str) -> dict:
    return {"cell_type": "code", "source": text.strip("\n")}


# ------------------------------------------------------------------------------------------------
NB01 = [
    md(r"""
# 1 · Why IO matters

Attention is $O = \mathrm{softmax}(QK^T/\sqrt d)\,V$. Its FLOPs are fixed — about $4N^2d$ per head —
so why are some implementations several times faster than others? Because on a modern GPU most of
the time goes to **moving bytes** between the big, slow HBM and the small, fast on-chip SRAM, not
to arithmetic. This notebook shows it with the workbench's numbers:

1. Standard ("naive") attention, and exactly what it writes to HBM.
2. The memory hierarchy of an H200 (`analysis.gpus`).
3. The HBM traffic and roofline of naive attention (`analysis.closed_forms`, `analysis.roofline`).
4. Where the time goes: the bytes of $S$ and $P$ against those of $Q, K, V, O$.

Reading order: this notebook, then 2 (online softmax), 3 (FlashAttention-1), 4 (FlashAttention-2),
5 (issue #941's "multiply V once"), 6 (measurements on a real GPU).
"""),
    code(SETUP),
    md(r"""
## 1 · Standard attention

The FlashAttention paper's Algorithm 0, as three passes (in a real implementation three kernels):

1. $S = QK^T/\sqrt d$ — **write $S$** ($N \times N$) to HBM;
2. $P = \mathrm{softmax}(S)$ — **read $S$, write $P$** ($N \times N$);
3. $O = PV$ — **read $P$**, write $O$.

The workbench's reference `variants/naive.py` is written against a counting memory model: every
transfer between HBM and SRAM is a `mem.load` or a `mem.store`, so the code itself says what goes
where:
"""),
    code(r"""
import inspect
import variants.naive
from variants import VARIANTS, attention_reference

for line in inspect.getsource(variants.naive.forward).splitlines():
    if "mem.load" in line or "mem.store" in line or "# line" in line:
        print(line.rstrip())
"""),
    md(r"""
Run it on a small problem ($N = 64$, $d = 16$, fp16, tiles of $16 \times 16$) with a
`Memory` to count, and check the answer against the float64 oracle:
"""),
    code(r"""
from analysis.memory import Memory

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
"""),
    md(r"""
## 2 · The memory hierarchy of an H200

The figures below come from `analysis.gpus` (each with its source). The on-chip SRAM (shared memory)
is fast but tiny — 227 KiB per thread block — while HBM is huge but, per byte, far slower than the
arithmetic units are per FLOP. (The FlashAttention paper quotes ~19 TB/s for an A100's SRAM against
1.5–2 TB/s for its HBM.)
"""),
    code(r"""
from analysis.gpus import get_gpu

h200 = get_gpu("h200")
sms = int(h200.sms.value)
hierarchy = [
    ("SRAM per thread block", h200.smem_per_block_bytes),
    ("SRAM per SM", h200.smem_per_sm_bytes),
    ("L2 cache", h200.l2_bytes),
    ("HBM", h200.hbm_bytes),
]
rows = [[name, human(f.value, binary=name != "HBM"), f.source] for name, f in hierarchy]  # HBM: GB
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

fig, ax = plt.subplots(figsize=(6.5, 3))
labels = [r[0] for r in rows]
values = [h200.smem_per_block_bytes.value, h200.smem_per_sm_bytes.value,
          h200.smem_per_sm_bytes.value * sms, h200.l2_bytes.value, h200.hbm_bytes.value]
ax.barh(labels, values, color=["tab:green"] * 3 + ["tab:orange", "tab:red"])
ax.set_xscale("log")
ax.invert_yaxis()
ax.set_xlabel("capacity (bytes, log scale)")
ax.set_title("H200 memory hierarchy")
plt.show()
"""),
    md(r"""
## 3 · HBM traffic and roofline of naive attention

The closed forms (`analysis.closed_forms.counts`) restate the Memory model's counts exactly without
running anything, so real sizes are instant. Blocks come from FlashAttention's rule for an H200's
SRAM (`closed_forms.fa1_blocks`); FlashAttention-2 (`fa2`, notebook 4) is shown for contrast.
`analysis.roofline` turns each count into three times — HBM bytes / bandwidth, matmul FLOPs /
tensor rate, non-matmul work / SFU and FP32 rates — and the largest one bounds the kernel.
"""),
    code(r"""
from analysis import closed_forms
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

from analysis.headline import min_hbm_bytes

# intensity twice: by the papers' count (every request goes to HBM) and with each input read once and
# each output written once (what a cache that holds K and V would leave: the most DRAM can be spared)
show_table(["variant", "N", "HBM bytes (papers' count)", "FLOP/B papers' count", "FLOP/B each input once",
            "t memory", "t matmul", "t non-matmul", "roofline bound (papers' count)", "predicted TFLOP/s"],
           [[name, n, human(c.hbm_bytes), f"{r.intensity_flop_per_byte:.0f}",
             f"{c.total_flops / min_hbm_bytes(c.batch, c.heads, n, n, d, 2):.0f}", f"{r.t_memory_s * 1e6:.0f} µs",
             f"{r.t_matmul_s * 1e6:.0f} µs", f"{r.t_nonmatmul_s * 1e6:.0f} µs", r.bound,
             f"{r.predicted_tflops:.0f}"]
            for (name, n), (c, r) in res.items() if n in (1024, 4096, 16384)])
"""),
    code(r"""
peak = h200.fp16_tensor_flops.value
bw = h200.hbm_bandwidth.value
x = np.logspace(0, 4, 200)
fig, ax = plt.subplots(figsize=(6.5, 4.2))
ax.loglog(x, np.minimum(peak, bw * x) / 1e12, "k-", lw=1.5, label="roofline: min(tensor peak, BW × I)")
ax.axvline(peak / bw, color="grey", ls=":", lw=0.8)
ax.text(peak / bw * 1.15, 30, f"ridge:\n{peak / bw:.0f} FLOP/B", color="grey", fontsize=8)
for name, marker in (("naive", "o"), ("fa2", "s")):
    xs = [res[(name, n)][1].matmul_intensity_flop_per_byte for n in seq]
    ax.loglog(xs, np.minimum(peak, bw * np.array(xs)) / 1e12, marker, ms=7,
              label=f"{name}, N = 512 … 16k (the points coincide)")
ax.set_xlabel("arithmetic intensity I (matmul FLOP per HBM byte)")
ax.set_ylabel("attainable TFLOP/s (matmul roof only)")
ax.set_title(f"H200 roofline, d = {d}, fp16")
ax.legend(fontsize=8, loc="lower right")
plt.show()
"""),
    md(r"""
Naive attention's intensity does not grow with $N$: both its FLOPs and its $S$/$P$ bytes grow as
$N^2$, so by the papers' count it sits at a fixed point far left of the ridge at every length.
FlashAttention-2's bytes grow as $N^2 d / B_r$ (it re-reads $K$ and $V$ once per query block), so
its intensity is $\Theta(B_r)$: three times naive's with these blocks, and it grows with $B_r$. By
the papers' count it is still left of the ridge — but that count is *global-memory requests*, as if
there were no cache. Read each input once (the "each input once" column) and FA2's intensity grows
as $N$, far right of the ridge: on an H200 the 60 MB L2 serves nearly every re-read of $K_j, V_j$
(Nsight Compute: DRAM bytes 0.97–1.04× reading Q, K, V once and writing O once), so no FA2 kernel
measured here is bound by memory. Naive's $S$ and $P$ (128 MiB at N = 4k per head) do not fit any
cache: its DRAM traffic is real. Notebook 6 says what bounds each kernel on the H200, from the GPU
model, with the measurements beside it.

## 4 · Where the time goes

Split naive attention's HBM traffic into the score matrices ($S$, $P$) and everything else
($Q$, $K$, $V$, $O$, lse), against $N$, per (batch, head):
"""),
    code(r"""
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
ax.set_xlabel("sequence length N")
ax.set_ylabel("HBM bytes per (batch, head)")
ax.set_title(f"naive attention: HBM traffic by tensor, d = {d}, fp16")
ax.legend(fontsize=8)

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
ax.set_yscale("log")
ax.set_xlabel("sequence length N (batch = 16k / N, H = 32)")
ax.set_ylabel("time on an H200 if it were the only cost (µs)")
ax.set_title("naive attention: where the time goes")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
share = [a / (a + b) for a, b in zip(sp_bytes, qkvo_bytes)]
print("share of naive's HBM bytes that are S and P:", ", ".join(f"N={n}: {s:.0%}" for n, s in zip(seq, share)))
"""),
    md(r"""
The score matrices are the largest share of the traffic, and moving them alone takes several times
longer than all the arithmetic. (The other line grows as $N^2$ too: naive's tiled products re-read
$K$ and $V$ once per query block, $T_r \cdot N d$ elements — a cost of the tiling, which larger GEMM
tiles and the L2 cache shrink. $S$ and $P$ cannot be shrunk that way.) Yet $S$ and $P$ are intermediate results: nobody needs them in HBM. The rest of
the workbench is about not writing them:

- notebook 2: the **online softmax** lets a kernel normalise a row it sees only block by block;
- notebook 3: **FlashAttention-1** keeps $S$ and $P$ on chip and proves its traffic is
  $\Theta(N^2 d^2 / M)$;
- notebook 4: **FlashAttention-2** swaps the loops for parallelism and fewer non-matmul FLOPs;
- notebook 5: issue #941's **multiply V once**, and what its $f$ row costs;
- notebook 6: the kernels on a real GPU.

The same numbers are one command away: `fa-traffic report` (here for two variants):
"""),
    code(r"""
import subprocess

out = subprocess.run([sys.executable, "-m", "analysis", "report", "--variant", "naive,fa2",
                      "--seq-len", "1k,16k", "--format", "markdown"],
                     cwd=ROOT, capture_output=True, text=True)
display(Markdown(out.stdout) if out.returncode == 0 else Markdown(f"`fa-traffic` failed: {out.stderr}"))
"""),
    md(r"""
## Exercises

1. In the small counted example, predict the bytes of $S$ read and written for a **causal** mask
   before running it (`causal=True`). Why does naive attention gain nothing from the mask in HBM
   traffic? (See the docstring of `variants/naive.py`.)
2. At which $N$ do $S$ and $P$ alone (fp16, one head) fill the H200's 50 MB L2 cache? What changes
   for a kernel whose $S$ fits in L2?
3. Move the roofline to an A100 (`get_gpu("a100")`). Does the ridge point move left or right, and
   does naive attention (by the papers' count) get any closer to it there?
4. Naive attention at $d = 128$: does its arithmetic intensity change? Derive it from the closed
   form: FLOPs $\approx 4N^2 d$, bytes $\approx 4N^2 \cdot$ itemsize.
5. The roofline takes the **max** of three times (perfect overlap). Which real effects make a kernel
   slower than that bound? Keep your list for notebook 6.
"""),
]


# ------------------------------------------------------------------------------------------------
NB02 = [
    md(r"""
# 2 · Online softmax: the running max and normaliser

FlashAttention never holds a whole row of scores. It sees the scores of one row **block by block**
and still produces the exact softmax. This notebook derives how, checks every step numerically, and
shows why the maximum that it carries along is not optional.

1. What goes wrong without the max: `exp` overflows (fp32 at scores ≈ 89, fp16 at ≈ 11).
2. The online softmax: a running max $m$ and normaliser $\ell$, proved by induction over blocks.
3. Merging block statistics — the induction argument of issue
   [#941](https://github.com/Dao-AILab/flash-attention/issues/941) — and why any merge order works.
4. Carrying the output along: the step FlashAttention adds on top, and where it lives in `variants/`.
"""),
    code(SETUP),
    md(r"""
## 1 · What goes wrong without the max

Softmax is $\mathrm{softmax}(x)_i = e^{x_i} / \sum_j e^{x_j}$. Written like that, a single large score
overflows `exp` to `inf`, and `inf / inf` is `NaN`. Every practical implementation uses the identity

$$\mathrm{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \qquad m = \max_j x_j,$$

which is exact for any $m$ and, for $m = \max x$, keeps every exponent $\le 0$: each term is in
$(0, 1]$ and the sum is in $[1, n]$. Where does plain `exp` give up in each dtype?
"""),
    code(r"""
rows = []
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    limit = math.log(torch.finfo(dtype).max)  # exp(x) overflows for x above this
    just_below = torch.exp(torch.tensor(limit - 0.05, dtype=dtype))
    just_above = torch.exp(torch.tensor(limit + 0.5, dtype=dtype))
    rows.append([str(dtype).replace("torch.", ""), f"{torch.finfo(dtype).max:.4g}", f"{limit:.2f}",
                 f"{just_below.item():.4g}", just_above.item()])
show_table(["dtype", "largest finite", "exp overflows above", "exp(limit - 0.05)", "exp(limit + 0.5)"], rows)
"""),
    md(r"""
Attention scores $s = q\cdot k/\sqrt d$ are not bounded: with large activations (or a large
`scale`) they reach $10^4$. The cell below builds one query row whose scores are about $10^4$, and
compares a softmax **without** the max to one **with** it.
"""),
    code(r"""
x = torch.tensor([1.0e4, 1.0e4 - 1.0, 1.0e4 - 5.0, 0.0])  # scores of one query row, float32

def softmax_without_max(x):
    e = torch.exp(x)
    return e / e.sum()

def softmax_with_max(x):
    e = torch.exp(x - x.max())
    return e / e.sum()

print("exp(x)            :", torch.exp(x))
print("without the max   :", softmax_without_max(x))
print("with the max      :", softmax_with_max(x))
print("torch.softmax     :", torch.softmax(x, dim=0))
print("fp16, scores ~ 12 :", softmax_without_max(torch.tensor([12.0, 11.0, 0.0], dtype=torch.float16)))
"""),
    md(r"""
The workbench's references all carry the max, so they survive such scores. Below, $q$ and $k$ are
scaled so the scores are of order $10^4$; a softmax without the max turns the whole output into
`NaN`, while FlashAttention-2 from `variants` agrees with the float64 oracle
`variants.attention_reference`. (Note that `naive` in this workbench means *materialised* — S and P
written to HBM — not *unsafe*: it uses the max too.)
"""),
    code(r"""
from variants import VARIANTS, attention_reference

q, k, v = (torch.randn(1, 1, 32, 16) for _ in range(3))
q, k = 100 * q, 100 * k  # scores q.k/sqrt(d) of order 1e4
scale = 1 / math.sqrt(q.shape[-1])
s = scale * q @ k.transpose(-1, -2)
print(f"largest |score|: {s.abs().max():.3g}")

o_without = (torch.exp(s) / torch.exp(s).sum(-1, keepdim=True)) @ v
o_ref, lse_ref = attention_reference(q, k, v)
o_fa2, lse_fa2 = VARIANTS["fa2"].forward(q, k, v, block_q=8, block_k=8)
print("softmax without the max: NaN in", int(torch.isnan(o_without).sum()), "of", o_without.numel(), "outputs")
print(f"fa2 (carries the max):   max |o - o_ref| = {(o_fa2 - o_ref).abs().max():.2e}, "
      f"max |lse - lse_ref| / |lse_ref| = {((lse_fa2 - lse_ref) / lse_ref).abs().max():.2e}")
"""),
    md(r"""
## 2 · The online softmax

Split one row of scores into blocks $x^{(1)}, x^{(2)}, \dots, x^{(T)}$ that arrive one at a time
(the key blocks $K_1, K_2, \dots$). Keep two numbers per row: a **running max** and a **running
normaliser**, updated as each block arrives:

$$m^{(j)} = \max\bigl(m^{(j-1)},\ \max x^{(j)}\bigr), \qquad
\ell^{(j)} = e^{\,m^{(j-1)} - m^{(j)}}\,\ell^{(j-1)} + \sum_i e^{\,x^{(j)}_i - m^{(j)}},$$

starting from $m^{(0)} = -\infty$, $\ell^{(0)} = 0$.

**Claim.** After block $j$, $m^{(j)}$ is the max of everything seen so far and
$\ell^{(j)} = \sum_{k \le j} \sum_i e^{\,x^{(k)}_i - m^{(j)}}$ — the normaliser of the safe softmax of
the first $j$ blocks.

**Proof by induction.** For $j = 1$: $e^{-\infty}\cdot 0 = 0$, so $\ell^{(1)} = \sum_i e^{x^{(1)}_i - m^{(1)}}$. ✓
Assume the claim for $j-1$. The max part is immediate. For $\ell$:

$$e^{\,m^{(j-1)} - m^{(j)}}\,\ell^{(j-1)}
= e^{\,m^{(j-1)} - m^{(j)}} \sum_{k<j}\sum_i e^{\,x^{(k)}_i - m^{(j-1)}}
= \sum_{k<j}\sum_i e^{\,x^{(k)}_i - m^{(j)}},$$

and adding the new block's terms gives the claim for $j$. ∎ Every exponent is $\le 0$ throughout:
nothing overflows, whatever the scores. At the end $\ell^{(T)} = \sum_i e^{x_i - m}$ and
$m^{(T)} + \log \ell^{(T)} = \log\sum_i e^{x_i}$ is the **log-sum-exp** (FlashAttention-2 stores it).
"""),
    code(r"""
torch.manual_seed(1)
x = 4 * torch.randn(40, dtype=torch.float64)  # one row of scores
blocks = torch.split(x, 8)  # five blocks of 8, seen one at a time

m, l = -math.inf, 0.0
history = []
for j, xb in enumerate(blocks, start=1):
    m_new = max(m, xb.max().item())
    l = math.exp(m - m_new) * l + torch.exp(xb - m_new).sum().item()
    m = m_new
    seen = torch.cat(blocks[:j])  # the claim, checked directly on everything seen so far
    history.append([j, f"{m:.3f}", f"{seen.max():.3f}", f"{l:.6f}", f"{torch.exp(seen - seen.max()).sum():.6f}"])

show_table(["block j", "m⁽ʲ⁾ (online)", "max of blocks ≤ j", "ℓ⁽ʲ⁾ (online)", "Σ e^(x - m⁽ʲ⁾), blocks ≤ j"], history)
print(f"m + log l = {m + math.log(l):.12f}   torch.logsumexp = {torch.logsumexp(x, 0):.12f}")
"""),
    md(r"""
## 3 · Merging block statistics: the induction argument of issue #941

Issue [#941](https://github.com/Dao-AILab/flash-attention/issues/941) ("Fewer matrix
multiplications, same results") derives the same recurrence in a slightly different form, "by
induction": each block first computes **local** statistics — its own max $m_\text{local}$, its
exponentials $f_j = e^{x^{(j)} - m_\text{local}}$ and their sum $\ell_\text{local}$ — and these are then
**merged** into the running ones:

$$m_\text{new} = \max(m_i, m_\text{local}), \qquad
\ell_\text{new} = e^{\,m_i - m_\text{new}}\,\ell_i + e^{\,m_\text{local} - m_\text{new}}\,\ell_\text{local}.$$

The issue keeps the exponentials themselves (its `f` row, the un-normalised probabilities) and
rescales **every earlier block** by $e^{m_i - m_\text{new}}$ and the new one by
$e^{m_\text{local} - m_\text{new}}$ (the issue's code:
`fi_BLOCK[k] = fi_BLOCK[k] * torch.exp(mi - mi_new)` for `k < j`). The induction hypothesis is now
"after block $j$, $f_k = e^{x^{(k)} - m^{(j)}}$ for every $k \le j$ and $\ell = \sum_k \sum f_k$"; the step
is the same one-line computation as above. At the end $f/\ell$ **is** the softmax row, which the issue
multiplies by $V$ once (notebook 5 counts what that costs).

Below: the issue's merge, run on a row, against `torch.softmax`.
"""),
    code(r"""
def local_stats(xb):
    m_local = xb.max()
    f = torch.exp(xb - m_local)
    return m_local, f.sum(), f

def merge(m_a, l_a, m_b, l_b):
    m_new = torch.maximum(m_a, m_b)
    return m_new, torch.exp(m_a - m_new) * l_a + torch.exp(m_b - m_new) * l_b

f_blocks, m_i, l_i = [], None, None
for j, xb in enumerate(blocks):
    m_local, l_local, f = local_stats(xb)
    if j == 0:
        m_i, l_i, f_blocks = m_local, l_local, [f]
        continue
    m_new, l_new = merge(m_i, l_i, m_local, l_local)
    f_blocks = [fk * torch.exp(m_i - m_new) for fk in f_blocks]  # rescale every earlier block (eager)
    f_blocks.append(f * torch.exp(m_local - m_new))
    m_i, l_i = m_new, l_new

p_issue = torch.cat(f_blocks) / l_i
print(f"max |f/l - softmax(x)| = {(p_issue - torch.softmax(x, 0)).abs().max():.2e}")
"""),
    md(r"""
**Why any order works.** `merge` is the combination rule of the pairs $(m, \ell)$, and it is
**associative and commutative**: both sides of $(a \oplus b) \oplus c = a \oplus (b \oplus c)$ equal
$\bigl(\max(m_a,m_b,m_c),\ \sum e^{m - \max}\ell\bigr)$. So blocks can be merged left to right
(FlashAttention), in a tree, or by different thread blocks that each handle a slice of the keys and
combine at the end (split-KV / "flash-decoding"). The check below merges the same blocks in random
orders and as a balanced tree.
"""),
    code(r"""
stats = [local_stats(xb)[:2] for xb in blocks]

def fold(pairs):
    m, l = pairs[0]
    for m_b, l_b in pairs[1:]:
        m, l = merge(m, l, m_b, l_b)
    return m, l

def tree(pairs):
    if len(pairs) == 1:
        return pairs[0]
    half = len(pairs) // 2
    return merge(*tree(pairs[:half]), *tree(pairs[half:]))

exact = torch.logsumexp(x, 0)
results = [("left to right", fold(stats)), ("balanced tree", tree(stats))]
gen = torch.Generator().manual_seed(0)
for r in range(3):
    perm = torch.randperm(len(stats), generator=gen).tolist()
    results.append((f"random order {perm}", fold([stats[p] for p in perm])))
show_table(["merge order", "m + log ℓ − logsumexp(x)"],
           [[name, f"{(m + torch.log(l) - exact).item():.1e}"] for name, (m, l) in results])
"""),
    md(r"""
## 4 · Carrying the output along

FlashAttention goes one step further than the issue: instead of keeping the exponentials, it keeps
only the running **output** $O = \sum_k f_k V_k$, which is rescaled with the same factor:

$$O^{(j)} = e^{\,m^{(j-1)} - m^{(j)}}\,O^{(j-1)} + e^{\,x^{(j)} - m^{(j)}}\,V_j, \qquad
O = O^{(T)} / \ell^{(T)}.$$

By the same induction $O^{(j)} = \sum_{k\le j} e^{x^{(k)} - m^{(j)}} V_k$, so the division at the end
gives softmax-weighted values. This is line 9–10 of FlashAttention-2's Algorithm 1, and
`variants/fa2.py` is written exactly like that (`alpha` is $e^{m^{(j-1)} - m^{(j)}}$). The cell prints
those lines from the package and checks the package's result on many query rows and block sizes,
including a block size that does not divide $N$.
"""),
    code(r"""
import inspect
import variants.fa2

source = inspect.getsource(variants.fa2.forward).splitlines()
start = next(n for n, line in enumerate(source) if "line 9" in line)
print("\n".join(source[start:start + 9]))
"""),
    code(r"""
q, k, v = (torch.randn(2, 3, 50, 16) for _ in range(3))
o_ref, lse_ref = attention_reference(q, k, v)
rows = []
for block_k in (1, 7, 16, 50):
    o, lse = VARIANTS["fa2"].forward(q, k, v, block_q=16, block_k=block_k)
    rows.append([block_k, -(-50 // block_k), f"{(o - o_ref).abs().max():.1e}", f"{(lse - lse_ref).abs().max():.1e}"])
show_table(["Bc", "key blocks per row", "max |O − O_ref|", "max |lse − lse_ref|"], rows)
"""),
    md(r"""
## Exercises

1. Find, for fp16 and bf16, the largest score $s$ for which `softmax_without_max` on the row
   `[s, 0]` still returns finite numbers. Why is bf16's limit the same as fp32's?
2. Prove that `merge` is associative. Then show that the identity element is $(-\infty, 0)$, and find
   where `variants/_common.py` guards the case $m = -\infty$ (a causal row that has seen no key yet):
   what would $e^{m - m_\text{new}}$ evaluate to without the guard?
3. The issue's eager rescale multiplies every earlier $f$ block at every step. For a row of $T$ blocks,
   how many block rescales is that in total? What would a *lazy* scheme (remember each block's own
   max, rescale once at the end) cost instead? (Notebook 5 counts both.)
4. Classic "safe softmax" makes three passes over a row (max, sum, divide). How many does the online
   version make? How many does FlashAttention make over the scores of a whole attention matrix?
"""),
]


# ------------------------------------------------------------------------------------------------
NB03 = [
    md(r"""
# 3 · FlashAttention-1: Algorithm 1, step by step

FlashAttention (Dao et al. 2022) computes exact attention without ever writing the $N \times N$
score matrix to HBM. This notebook runs the workbench's reference of **Algorithm 1 as printed**
(`variants/fa1.py`) on a tiny problem and watches it work, then counts its HBM traffic and
reproduces the paper's **Theorem 2**: traffic falls as $\Theta(N^2 d^2 / M)$ with SRAM size $M$.

1. Algorithm 1, and which tensor the code keeps where.
2. A tiny example: which tiles are visited in which order, and the running $O$ in HBM.
3. Its HBM traffic, counted with `analysis.memory.Memory`, per tensor.
4. Theorem 2: traffic against SRAM size, counted, on a log-log plot.
"""),
    code(SETUP),
    md(r"""
## 1 · Algorithm 1

In the paper's notation ($M$ = SRAM size in elements, $T_r = \lceil N/B_r \rceil$, $T_c = \lceil N/B_c \rceil$):

| line | | where |
|---|---|---|
| 1 | $B_c = \lceil M/4d \rceil$, $B_r = \min(\lceil M/4d \rceil, d)$ | |
| 2 | $O = 0$, $\ell = 0$, $m = -\infty$ | **written to HBM** |
| 5–6 | **for** $j = 1..T_c$: load $K_j, V_j$ | HBM → SRAM |
| 7–8 | &nbsp;&nbsp;**for** $i = 1..T_r$: load $Q_i, O_i, \ell_i, m_i$ | HBM → SRAM |
| 9–11 | &nbsp;&nbsp;&nbsp;&nbsp;$S_{ij} = Q_i K_j^T$; $\tilde m_{ij}, \tilde P_{ij}, \tilde\ell_{ij}$; $m_i^\text{new}, \ell_i^\text{new}$ (online softmax, notebook 2) | SRAM |
| 12 | &nbsp;&nbsp;&nbsp;&nbsp;$O_i \leftarrow \mathrm{diag}(\ell_i^\text{new})^{-1}\bigl(\mathrm{diag}(\ell_i)e^{m_i - m_i^\text{new}} O_i + e^{\tilde m_{ij} - m_i^\text{new}} \tilde P_{ij} V_j\bigr)$ | **written to HBM** |
| 13 | &nbsp;&nbsp;&nbsp;&nbsp;$\ell_i \leftarrow \ell_i^\text{new}$, $m_i \leftarrow m_i^\text{new}$ | **written to HBM** |

The outer loop runs over **key/value** blocks, the inner over **query** blocks, so the running
output $O_i$ and its statistics make a round trip to HBM at every inner step. The workbench's
reference is written against a counting memory model: every HBM transfer is a `mem.load` or a
`mem.store`, so the code itself answers "which tensor lives where". Here are all of them in
`variants/fa1.py`:
"""),
    code(r"""
import inspect
import variants.fa1
from variants import VARIANTS, attention_reference

for line in inspect.getsource(variants.fa1.forward).splitlines():
    if "mem.load" in line or "mem.store" in line or line.strip().startswith("for "):
        print(line.rstrip())
"""),
    md(r"""
## 2 · A tiny example

$N = 16$ queries and keys, $d = 8$, blocks $B_r = B_c = 4$: a $4 \times 4$ grid of tiles. To watch
the algorithm, we subclass the package's `Memory` so that it also **logs** every transfer, in
program order (the counts stay the package's own).
"""),
    code(r"""
from analysis.memory import Memory


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
"""),
    code(r"""
def plot_order(ax, order, title):
    ax.imshow(np.nan_to_num(order, nan=-1), cmap="viridis", vmin=-1)
    for (i, j), s in np.ndenumerate(order):
        ax.text(j, i, "—" if np.isnan(s) else int(s), ha="center", va="center",
                color="white" if np.isnan(s) or s < order[~np.isnan(order)].max() / 2 else "black")
    ax.set_xticks(range(order.shape[1]))
    ax.set_yticks(range(order.shape[0]))
    ax.set_xlabel("key/value block j (outer loop)")
    ax.set_ylabel("query block i (inner loop)")
    ax.set_title(title)


fig, axes = plt.subplots(1, 2, figsize=(9, 4))
for ax, causal in zip(axes, (False, True)):
    plot_order(ax, visit_order(runs[causal].trace, BR, BC, N, N),
               f"FA1 visit order, {'causal' if causal else 'non-causal'}")
fig.suptitle("Tiles of S visited by Algorithm 1 (numbers: order; —: hidden by the mask, skipped)")
fig.tight_layout()
plt.show()
"""),
    md(r"""
Column by column: the outer loop holds $K_j, V_j$ on chip and sweeps every query block past them.
With a causal mask, tiles above the diagonal are skipped entirely — never loaded, never computed.

**The running O.** Every visit rewrites $O_i$ in HBM (line 12), already normalised by the running
$\ell_i$. So after outer step $j$, the $O$ in HBM is exactly the attention output **over the first
$j+1$ key blocks** — a correct answer to a smaller question. We replay the logged stores to see the
HBM copy of $O$ after each outer step, and compare it with the float64 reference over the keys seen
so far, and over all keys.
"""),
    code(r"""
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
fig, axes = plt.subplots(1, len(snapshots) + 2, figsize=(12, 3.6),
                         gridspec_kw={"width_ratios": [1] * (len(snapshots) + 1) + [2.4]})
err_seen, err_full = [], []
for j, snap in enumerate(snapshots):
    c1 = (j + 1) * BC
    o_seen, _ = attention_reference(q, k[..., :c1, :], v[..., :c1, :])
    err_seen.append((snap - o_seen[0, 0]).abs().max().item())
    err_full.append((snap - o_full[0, 0]).abs().max().item())
    axes[j].imshow(snap, cmap="RdBu", vmin=-1.5, vmax=1.5)
    axes[j].set_title(f"O in HBM\nafter j = {j}")
    axes[j].set_xlabel("d")
axes[0].set_ylabel("query row")
axes[len(snapshots)].imshow(o_full[0, 0].float(), cmap="RdBu", vmin=-1.5, vmax=1.5)
axes[len(snapshots)].set_title("reference O\n(all keys)")
ax = axes[-1]
ax.semilogy(range(len(snapshots)), err_full, "o-", label="vs reference over all keys")
ax.semilogy(range(len(snapshots)), np.maximum(err_seen, 1e-9), "s--", label="vs reference over keys < (j+1)·Bc")
ax.set_xlabel("outer step j")
ax.set_ylabel("max |error|")
ax.set_title("running O")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
"""),
    md(r"""
## 3 · HBM traffic, counted

The `Memory` counts of the run, per tensor, beside the closed forms of `analysis.closed_forms`
(the same numbers derived without running anything) and the formula in words. $Q$ and $O$ are read
$T_c$ times — once per outer step — and $O$, $\ell$, $m$ are written $T_c$ times.
"""),
    code(r"""
from analysis import closed_forms

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
"""),
    md(r"""
At real sizes: FlashAttention-1 against standard attention (`naive`: $S$ and $P$ written to HBM and
read back) and against the minimum (each input read once, each output written once,
`analysis.headline.min_hbm_bytes`), from the closed forms, with the blocks Algorithm 1's line 1
derives from an H200's SRAM (`analysis.gpus`, `closed_forms.fa1_blocks`).
"""),
    code(r"""
from analysis.gpus import get_gpu
from analysis.headline import min_hbm_bytes

h200 = get_gpu("h200")
d, dtype = 64, "fp16"
br, bc = closed_forms.fa1_blocks(h200.sram_bytes, d)
print(f"H200: {h200.sram_bytes // 1024} KiB of SRAM per thread block -> Br = {br}, Bc = {bc} (d = {d})")
seq = [1024, 2048, 4096, 8192, 16384, 32768]
traffic = {name: [closed_forms.counts(name, 1, 1, n, n, d, dtype=dtype, block_q=br, block_k=bc).hbm_bytes
                  for n in seq] for name in ("naive", "fa1")}
minimum = [min_hbm_bytes(1, 1, n, n, d, 2) for n in seq]

fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(seq, traffic["naive"], "o-", label="naive (S, P in HBM)")
ax.loglog(seq, traffic["fa1"], "s-", label=f"FA1 (Br={br}, Bc={bc})")
ax.loglog(seq, minimum, "k--", label="minimum: read Q, K, V, write O once")
ax.set_xlabel("sequence length N")
ax.set_ylabel("HBM bytes per (batch, head)")
ax.set_title(f"HBM traffic, d = {d}, {dtype}, H200 SRAM")
ax.legend()
plt.show()
show_table(["N", "naive", "FA1", "minimum", "naive / FA1"],
           [[n, human(a), human(b), human(c), f"{a / b:.1f}×"]
            for n, a, b, c in zip(seq, traffic["naive"], traffic["fa1"], minimum)])
"""),
    md(r"""
## 4 · Theorem 2: traffic against SRAM size

> **Theorem 2** (FlashAttention paper). Let $N$ be the sequence length, $d$ the head dimension, and
> $M$ the size of SRAM with $d \le M \le Nd$. Standard attention requires $\Theta(Nd + N^2)$ HBM
> accesses, while FlashAttention requires $\Theta(N^2 d^2 M^{-1})$ HBM accesses.

Why: with $B_c = \Theta(M/d)$, there are $T_c = \Theta(Nd/M)$ outer steps and each re-reads all of
$Q$ and $O$ ($\Theta(Nd)$), so traffic is $\Theta(Nd \cdot Nd/M)$. We **count** it: run both
references with the Memory model at $N = 256$, $d = 16$ for SRAM sizes from 1 KiB to 128 KiB, with
line 1's blocks for each $M$ (`fa1_blocks`; $M$ counted in float32 elements, the on-chip type). The
`Memory(sram_bytes=M)` raises if a working set does not fit, so every point is a legal schedule.
"""),
    code(r"""
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
ax.loglog(M_arr / 1024, naive_b, "o-", label="naive, counted")
ax.loglog(M_arr / 1024, fa1_b, "s-", label=f"FA1, counted (slope {slope:.2f} for M ≤ Nd)")
ax.loglog(M_arr / 1024, ref, "k:", label="∝ N²d²/M")
ax.axvline(N2 * D2 * 4 / 1024, color="grey", lw=0.8)
ax.text(N2 * D2 * 4 / 1024, ax.get_ylim()[1] * 0.6, " M = Nd", color="grey")
ax.set_xlabel("SRAM size M (KiB)")
ax.set_ylabel("HBM bytes")
ax.set_title(f"Theorem 2, counted: N = {N2}, d = {D2}, fp16")
ax.legend()
plt.show()
show_table(["M", "Br", "Bc", "naive bytes", "FA1 bytes"],
           [[f"{m // 1024} KiB", br, bc, f"{a:,}", f"{b:,}"] for m, br, bc, a, b in points])
"""),
    md(r"""
Naive levels off at its $S$ and $P$ traffic ($4N^2$ elements: each written once and read once),
which does not care about $M$ (at the smallest $M$ its tiled products also re-read $Q$ and $K$
many times). FlashAttention-1 falls with slope $-1$ while $M \le Nd$; beyond that one block of keys covers the whole sequence
($T_c = 1$) and it reaches the floor of reading each input once. The same curve at a real size
($N = 8192$, $d = 64$) is cheap with the closed forms; the dotted lines mark real GPUs' SRAM per
thread block.
"""),
    code(r"""
N3, D3 = 8192, 64
sizes3 = [2 ** e * 1024 for e in range(3, 14)]  # 8 KiB ... 8 MiB (beyond any real SRAM)
fa1_3, naive_3 = [], []
for M in sizes3:
    br, bc = closed_forms.fa1_blocks(M, D3)
    fa1_3.append(closed_forms.counts("fa1", 1, 1, N3, N3, D3, block_q=br, block_k=bc).hbm_bytes)
    naive_3.append(closed_forms.counts("naive", 1, 1, N3, N3, D3, block_q=br, block_k=bc).hbm_bytes)
fig, ax = plt.subplots(figsize=(6.5, 4.2))
x = np.array(sizes3) / 1024
ax.loglog(x, naive_3, "o-", label="naive")
ax.loglog(x, fa1_3, "s-", label="FA1")
ax.loglog(x, fa1_3[0] * sizes3[0] / np.array(sizes3), "k:", label="∝ N²d²/M")
for key, style in (("a100", "--"), ("h200", "-.")):
    g = get_gpu(key)
    ax.axvline(g.sram_bytes / 1024, color="grey", ls=style, lw=0.8, label=f"{key.upper()}: {g.sram_bytes // 1024} KiB")
ax.set_xlabel("SRAM size M (KiB)")
ax.set_ylabel("HBM bytes per (batch, head)")
ax.set_title(f"Theorem 2 from the closed forms: N = {N3}, d = {D3}, fp16")
ax.legend(fontsize=8)
plt.show()
"""),
    md(r"""
## Exercises

1. Change the tiny example to `causal=True` and replay the running $O$. Which rows of $O$ are final
   after outer step $j = 0$? Why can't you compare them with `attention_reference` on truncated keys
   directly? (Hint: the workbench's causal mask is aligned bottom-right.)
2. In the counts table, which tensors would disappear if the loops were swapped (query blocks
   outside, key blocks inside)? Check your answer against notebook 4.
3. Line 12 divides $O_i$ by $\ell_i^\text{new}$ at every visit. Count the divisions for $N = 16$,
   $B_r = B_c = 4$, $d = 8$ and compare with `runs[False].counts.flops["other"]`.
4. Theorem 2 assumes $B_c = \Theta(M/d)$. Re-run the counted sweep with fixed $B_r = B_c = 16$ for
   every $M$: what happens to the slope, and why?
5. The paper proves a matching lower bound (Proposition 3): no exact algorithm does
   $o(N^2 d^2 / M)$ accesses for all $M$. Which of the workbench's four variants beat FA1's count at
   $M$ = H200's SRAM, and by how much? (`closed_forms.counts` for each.)
"""),
]

# ------------------------------------------------------------------------------------------------
NB04 = [
    md(r"""
# 4 · FlashAttention-2: swap the loops, defer the division, go parallel

FlashAttention-2 (Dao 2023) computes the same thing as FlashAttention-1 with three changes. This
notebook takes them one at a time and **counts** what each buys, side by side with FA1, using the
references in `variants/` and the closed forms in `analysis/`.

1. **The loop swap**: query blocks outside, key/value blocks inside — $O_i$, $\ell_i$, $m_i$ never
   leave the chip.
2. **Deferred normalisation and the log-sum-exp**: divide by $\ell$ once at the end, store
   $L = m + \log \ell$ instead of $m$ and $\ell$.
3. **Parallelism over the sequence**: one thread block per (query block, batch, head), not per
   (batch, head).
4. **The drop in non-matmul FLOPs**, counted, and what the roofline says it is worth.
"""),
    code(SETUP),
    md(r"""
## 1 · The loop swap

FA1 streams $K_j, V_j$ in the outer loop and sweeps the query blocks past them, so $O_i$, $\ell_i$,
$m_i$ are read and written at every tile. FA2 makes the query block the outer loop: $Q_i$ is loaded
once, the accumulator $O_i$ and statistics stay in registers/SRAM while $K_j, V_j$ stream past, and
$O_i$ is written once. The visit order of the tiles, from the workbench's tiling
(`analysis.tiling.Tiling`, the same geometry the references and kernels use):
"""),
    code(r"""
from analysis.tiling import Tiling

t = Tiling(n_q=16, n_k=16, block_q=4, block_k=4, causal=True)
orders = {
    "FA1: K/V blocks outer": [(i, j) for j in range(t.t_c) for i in t.q_blocks(j)],
    "FA2: Q blocks outer": list(t.visited()),
}
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
for ax, (title, visits) in zip(axes, orders.items()):
    grid = np.full((t.t_r, t.t_c), np.nan)
    for step, (i, j) in enumerate(visits):
        grid[i, j] = step
    ax.imshow(np.nan_to_num(grid, nan=-1), cmap="viridis", vmin=-1)
    for (i, j), s in np.ndenumerate(grid):
        ax.text(j, i, "—" if np.isnan(s) else int(s), ha="center", va="center",
                color="white" if np.isnan(s) or s < len(visits) / 2 else "black")
    ax.set_xticks(range(t.t_c)), ax.set_yticks(range(t.t_r))
    ax.set_xlabel("key/value block j")
    ax.set_ylabel("query block i")
    ax.set_title(title)
fig.suptitle("Visit order of the tiles of S (causal; —: hidden, skipped)")
fig.tight_layout()
plt.show()
"""),
    md(r"""
What moves, counted by the Memory model on a small problem ($N = 256$, $d = 32$,
$B_r = B_c = 32$, fp16), per tensor. FA2 trades FA1's $T_c$-fold re-reads **and re-writes** of $Q$,
$O$, $\ell$, $m$ for $T_r$-fold re-reads of $K$ and $V$. Which side moves fewer bytes depends on the
blocks; what FA2 removes for good is the **writes**: $O$ is written once.
"""),
    code(r"""
from analysis import closed_forms
from analysis.memory import Memory
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
"""),
    md(r"""
## 2 · Deferred normalisation and the log-sum-exp

FA1's line 12 keeps $O_i$ **normalised** at every step: it multiplies the old $O_i$ by
$\ell_i e^{m_i - m^\text{new}}$, adds $e^{\tilde m - m^\text{new}}\tilde P V_j$ and divides by $\ell^\text{new}$ —
four $B_r \times d$ elementwise passes per tile, and two exponentials per row. FA2 keeps $O_i$
**un-normalised** (notebook 2, section 4): one rescale by $\alpha = e^{m^{(j-1)} - m^{(j)}}$ and one add
per tile, one exponential per row, and a single division at the very end (line 12):
"""),
    code(r"""
import inspect
import variants.fa2

src = inspect.getsource(variants.fa2.forward).splitlines()
print("\n".join(line for line in src if "line 10" in line or "line 12" in line or "line 13" in line
                or "Oi = mem.ew(mem.ew(alpha" in line))
"""),
    md(r"""
Per visited tile of $r$ rows and $c$ columns, the closed forms (`analysis/closed_forms.py`) count

| | exp | other (max, add, multiply, divide) |
|---|---|---|
| FA1 | $rc + 2r$ | $4rc + 7r + 4rd$ |
| FA2 | $rc + r$ | $4rc + 4r + 2rd$ (plus $rd + 2r$ once per query block) |

The $rc$ terms (scale, subtract the max, exponentiate, row max and sum on the score tile) are the
same; FA2 saves the $2rd + 3r$ work on the output accumulator and one exponential per row.

**The log-sum-exp.** Instead of $m$ and $\ell$ (two floats per row), FA2 writes
$L_i = m_i + \log \ell_i$ (one). It is all the backward pass needs: $P = \exp(S - L)$ recomputes the
softmax exactly from $S$. Checked on the package's output:
"""),
    code(r"""
q1, k1, v1 = (torch.randn(1, 2, 40, 16) for _ in range(3))
o, L = VARIANTS["fa2"].forward(q1, k1, v1, block_q=16, block_k=8)
S = (q1 @ k1.transpose(-1, -2)) / math.sqrt(16)
P = torch.exp(S - L.unsqueeze(-1))  # the backward's recomputation
print(f"rows of exp(S - L) sum to 1:     max |sum - 1| = {(P.sum(-1) - 1).abs().max():.1e}")
print(f"exp(S - L) V reproduces O:       max |PV - O|   = {(P @ v1 - o).abs().max():.1e}")
print(f"L is logsumexp of the scores:    max |L - lse|  = {(L - torch.logsumexp(S, -1)).abs().max():.1e}")
"""),
    md(r"""
## 3 · Parallelism over the sequence

A GPU runs one thread block per SM slot; an H200 has 132 SMs. FA1, as the paper parallelises it
(and the teaching kernel `kernels/fa1`), launches one thread block per (batch, head): its outer loop
over $K_j$ carries a dependency through $O$ in HBM. FA2's outer loop over query blocks has no
dependency at all, so it launches $T_r$ thread blocks per (batch, head).

Take the usual benchmark setting (as in the FA2 paper and `bench/`): batch × sequence = 16k tokens,
hidden size 2048, so $H = 2048/d$ heads and $B = 16\text{k}/N$. At long sequences the batch shrinks,
and FA1 runs out of thread blocks to fill the GPU:
"""),
    code(r"""
from analysis.gpus import get_gpu

gpus = {key: get_gpu(key) for key in ("h200", "a100")}
seq = [512, 1024, 2048, 4096, 8192, 16384]
d, br = 128, 128
heads = 2048 // d
fa1_ctas = [(16384 // n) * heads for n in seq]
fa2_ctas = [(16384 // n) * heads * Tiling(n, n, br, 64).t_r for n in seq]

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
ax = axes[0]
ax.loglog(seq, fa1_ctas, "o-", label="FA1: B·H thread blocks")
ax.loglog(seq, fa2_ctas, "s-", label=f"FA2: Tr·B·H (Br = {br})")
for (key, g), style in zip(gpus.items(), ("-.", "--")):
    ax.axhline(g.sms.value, color="grey", ls=style, lw=0.8, label=f"{key.upper()}: {int(g.sms.value)} SMs")
ax.set_xlabel("sequence length N (batch = 16k / N)")
ax.set_ylabel("thread blocks in the launch")
ax.set_title(f"Independent thread blocks, d = {d}, H = {heads}")
ax.legend(fontsize=8)

sms = gpus["h200"].sms.value
ax = axes[1]
ax.semilogx(seq, [min(1, c / sms) for c in fa1_ctas], "o-", label="FA1")
ax.semilogx(seq, [min(1, c / sms) for c in fa2_ctas], "s-", label="FA2")
ax.set_ylim(0, 1.05)
ax.set_xlabel("sequence length N (batch = 16k / N)")
ax.set_ylabel("fraction of the 132 SMs with work")
ax.set_title("H200: SMs busy (one thread block per SM)")
ax.legend()
fig.tight_layout()
plt.show()
show_table(["N", "batch", "FA1 blocks", "FA2 blocks", "FA1: SMs busy"],
           [[n, 16384 // n, a, b, f"{min(1, a / sms):.0%}"] for n, a, b in zip(seq, fa1_ctas, fa2_ctas)])
"""),
    md(r"""
At $N = 16$k FA1 has 16 thread blocks for 132 SMs: at most 12 % of the GPU works, however fast each
block is. This is the FlashAttention-2 paper's argument for parallelising over the sequence
(its section 3.2): long sequences come with small batches.

## 4 · Non-matmul FLOPs, counted, side by side

At a real size ($N = 4096$ and $16384$, $d = 128$, fp16, the same blocks for both — Algorithm 1's
line 1 on an H200's SRAM), from the closed forms. Matmul FLOPs are identical; the exponentials and
the other elementwise work drop. The roofline (`analysis.roofline`) turns counts into times on an
H200: HBM bytes at 4.8 TB/s, matmuls at the dense fp16 tensor rate, exponentials at the SFU rate
and the rest at the FP32 rate — one non-matmul FLOP costs as much time as 30 (other) to 250 (exp)
matmul FLOPs, so 1–2 % of the FLOPs take about as long as all the matmuls.
"""),
    code(r"""
from analysis.roofline import roofline

h200 = gpus["h200"]
d = 128
br, bc = closed_forms.fa1_blocks(h200.sram_bytes, d)
table, res = [], {}
for n in (4096, 16384):
    for name in ("fa1", "fa2"):
        c = closed_forms.counts(name, 16384 // n, heads, n, n, d, dtype="fp16", block_q=br,
                                block_k=bc, sram_bytes=h200.sram_bytes)  # batch x N = 16k tokens
        r = roofline(c, h200)
        res[(name, n)] = (c, r)
        table.append([n, name, human(c.hbm_read_bytes), human(c.hbm_write_bytes),
                      f"{c.flops['matmul']:.3g}", f"{c.flops['exp']:.3g}", f"{c.flops['other']:.3g}",
                      f"{(c.flops['exp'] + c.flops['other']) / c.flops['matmul']:.2%}",
                      f"{r.t_memory_s * 1e6:.0f} / {r.t_matmul_s * 1e6:.0f} / {r.t_nonmatmul_s * 1e6:.0f}",
                      r.bound])
print(f"batch = 16k / N, H = {heads} heads, d = {d}, Br = {br}, Bc = {bc}, fp16; "
      "times on an H200 (datasheet figures)")
show_table(["N", "variant", "HBM read", "HBM write", "matmul", "exp", "other", "non-matmul / matmul",
            "t memory / matmul / non-matmul (µs)", "roofline bound (papers' count)"], table)
"""),
    code(r"""
n = 16384
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
kinds = ["matmul", "exp", "other"]
x = np.arange(len(kinds))
for off, name in ((-0.2, "fa1"), (0.2, "fa2")):
    c, r = res[(name, n)]
    axes[0].bar(x + off, [c.flops[kd] for kd in kinds], width=0.4, label=name.upper())
axes[0].set_yscale("log")
axes[0].set_xticks(x, kinds)
axes[0].set_ylabel("FLOPs (whole problem)")
axes[0].set_title(f"FLOPs by kind, N = {n}, batch = 1, d = {d}, H = {heads}")
axes[0].legend()

parts = ["memory", "matmul", "non-matmul"]
x = np.arange(len(parts))
for off, name in ((-0.2, "fa1"), (0.2, "fa2")):
    c, r = res[(name, n)]
    axes[1].bar(x + off, [r.t_memory_s * 1e6, r.t_matmul_s * 1e6, r.t_nonmatmul_s * 1e6], width=0.4,
                label=name.upper())
axes[1].set_xticks(x, ["HBM traffic", "matmul", "exp + other"])
axes[1].set_ylabel("time on an H200 if that were the only cost (µs)")
axes[1].set_title("Roofline components")
axes[1].legend()
fig.tight_layout()
plt.show()
"""),
    md(r"""
**What to take away.** Counted, FA2's gains over FA1 are (1) $O$ written once instead of $T_c$
times, (2) fewer exponentials and less elementwise work on the accumulator — the share of
non-matmul FLOPs drops, and on a GPU whose tensor cores are ~15× faster than its FP32 units that
matters — and (3) by far the largest in practice, $T_r$ times more independent thread blocks. The
loop swap does **not** by itself reduce the bytes read: it swaps which operands are re-read. On the
GPU, FA2's re-reads of $K_j, V_j$ are shared by all the query blocks running at once and largely
hit the L2 cache, which this HBM model (deliberately) does not credit. Notebook 6 compares the
model with measured counters.

**On the H200.** The roofline above prices the papers' count at datasheet rates with perfect overlap.
The GPU model (`analysis.gpu_model`; notebook 6 checks it against every committed measurement) runs
the real kernels instead: the teaching FA1 and FA2 (float32 FFMA, 64×64 blocks) and `fa2_wgmma`
(tensor cores, its own blocks), at the same shapes, with the measured median beside each prediction.
FA1's teaching kernel has only $B \cdot H$ thread blocks (one per head: 16–64 here, on 132 SMs) and
one 8-warp block per SM (168 registers), so each SM issues at about half FA2's rate; the loop swap
and FA2's $T_r \cdot B \cdot H$ blocks are worth more than the bytes.
"""),
    code(r"""
from analysis import gpu_model as gm
from analysis.measured import bench_cells, teaching_cells

measured = {(c["kernel"], c["n_q"], c["d"]): c["time_s"] for c in teaching_cells() + bench_cells("tc_bench_wgmma_tma.json")
            if not c["causal"] and c["dtype"] == "fp16" and not c["options"].get("placement")}
rows = []
for n in (4096, 16384):
    for kernel in ("fa1", "fa2", "fa2_wgmma"):
        p = gm.predict(kernel, 16384 // n, heads, n, None, d, "fp16")
        t = measured.get((kernel, n, d))
        rows.append([n, kernel, f"{p.block_q}×{p.block_k}", p.ctas, p.bound, f"{p.time_s * 1e3:.3f} ms",
                     f"{t * 1e3:.3f} ms" if t else "not measured", f"{p.tflops:.0f}",
                     f"{4 * (16384 // n) * heads * n * n * d / t / 1e12:.0f}" if t else "—"])
show_table(["N", "kernel", "Br×Bc", "thread blocks", "bound (GPU model)", "model", "measured",
            "TFLOP/s model", "TFLOP/s measured"], rows)
"""),
    md(r"""
Measured, the teaching FA1 runs 2–4× slower than the teaching FA2, and `fa2_wgmma` another 20–30×
faster than that: the bytes FA2 saves were not what the GPU was waiting for.

## Exercises

1. Redo the counted table of section 1 with $B_r = 64$, $B_c = 16$. Which variant moves fewer bytes
   now, and why? Find blocks for which FA2 reads fewer bytes than FA1 at $N = 4096$, $d = 64$ on an
   H200 (`closed_forms.counts(..., sram_bytes=...)` tells you whether they fit).
2. Use the closed forms to verify the per-tile table of section 2: take a problem with exactly one
   tile ($N = B_r = B_c$) and compare the `exp` and `other` counts of FA1 and FA2.
3. Section 3 assumes one thread block per SM. An H200 SM has 228 KiB of shared memory: how many
   thread blocks of 64 KiB fit on one? Redraw the right-hand plot with that many slots per SM. What
   is the smallest $N$ at which FA1 now leaves SMs idle?
4. The backward pass needs $P = \exp(S - L)$. Why is storing $L$ enough, while storing only $m$ would
   not be? What would go wrong storing only $\ell$?
5. Causal attention halves the work. Does it halve FA2's thread blocks? Look at `Tiling.k_blocks`:
   which thread blocks have the most work, and what does that do to the tail of the launch?
"""),
]

# ------------------------------------------------------------------------------------------------
LOAD_RESULTS = r"""
import json

RESULTS = ROOT / "bench" / "results"


def load_bench_records():
    # Every timed record in bench/results/*.json, in one shape: kernel, n, d, causal, dtype, tflops, file.
    # Reads both layouts the bench scripts write ({"records": [...]} and {"rows": [...]}) and plain lists.
    out = []
    for path in sorted(RESULTS.glob("*.json")) if RESULTS.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        rows = (data.get("records") or data.get("rows") or []) if isinstance(data, dict) else data
        for r in rows if isinstance(rows, list) else []:
            if not isinstance(r, dict) or not isinstance(r.get("tflops"), (int, float)):
                continue
            if r.get("ok") is False or "skipped" in r:
                continue
            out.append(dict(r, kernel=str(r.get("label") or r.get("kernel")), n=r.get("n", r.get("n_q")),
                            dtype=str(r.get("dtype", "")).replace("torch.", ""), file=path.name))
    return out


def latest_per_shape(records):
    # One record per (kernel, N, d, causal, dtype) when several files measured it: benchmark files win
    # over tuning sweeps, and among those the file whose name sorts last.
    out = {}
    for r in sorted(records, key=lambda r: ("sweep" not in r["file"], r["file"])):
        out[(r["kernel"], r["n"], r["d"], r["causal"], r["dtype"])] = r
    return list(out.values())
"""

NB05 = [
    md(r"""
# 5 · Multiply V once (issue #941)

In [Dao-AILab/flash-attention#941](https://github.com/Dao-AILab/flash-attention/issues/941)
("Fewer matrix multiplications, same results, should we consider adopting it?") a user proposed:

> *In the inner loop of FlashAttention-2, each computation of O requires a computation of V. […]
> For each block Q, after calculating the complete attention scores, they are then multiplied with
> V, which means each Q only needs to be multiplied with V once.*

Tri Dao's answer: *"You'd still need to write fi of each block to global memory / HBM before
calling matmul with V. So the total number of bytes written to global memory / HBM is quadratic"*,
and *"Do you have enough space in SRAM to hold a tensor of size (block_size, seqlen)? Maybe if seqlen
is not too long."* The author's conclusion: when SRAM can hold $B_r \times N$, the method *"does not
increase the read and write operations between HBM and SRAM, but it can reduce the computation load
(as V only needs to be multiplied once)."*

This notebook checks each claim with the workbench's `v_once` reference (`variants/v_once.py`),
whose two knobs are the discussion's two questions:
`placement` — is the $f$ row kept in SRAM (`sram`), spilled to HBM (`hbm`), or whichever fits
(`auto`)? — and `rescale` — does every new block max rescale all earlier $f$ blocks (`eager`, the
issue's code) or is each block rescaled once at the end (`lazy`)?

1. Equivalence, tested against the float64 reference.
2. The SRAM it needs, $B_r \times N$, against real GPUs.
3. The HBM traffic when the $f$ row spills, against FlashAttention-2.
4. "Fewer matrix multiplications": the matmul FLOPs.
5. Eager rescaling's extra work.
6. The GPU measurements, and the verdict.
"""),
    code(SETUP),
    md(r"""
## 1 · Equivalence

The issue's derivation (the induction of notebook 2, section 3) says $f/\ell$ is the softmax row, so
$(f/\ell)V$ is exact attention. Every combination of the two knobs, causal or not, $N_q \ne N_k$,
tails, fp32 and fp16, against `attention_reference`:
"""),
    code(r"""
from variants import VARIANTS, attention_reference
from analysis.memory import Memory

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
"""),
    md(r"""
## 2 · The SRAM it needs

To "multiply V once" without touching HBM, a thread block must hold its whole $f$ row, $B_r \times N_k$
values, besides $Q_i$, a $K_j$/$V_j$ tile, the score tile and the accumulator. The working set is the
variant's own `sram_bytes` (the one the reference declares to the Memory model), against the SRAM
one thread block can use on each GPU (`analysis.gpus`):
"""),
    code(r"""
from analysis.gpus import GPUS
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
ax.legend(fontsize=7, loc="upper left")
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
"""),
    md(r"""
On an H200 the row fits only up to $N \approx 1.3$k at $d = 64$ with $B_r = 64$ — and that spends
the whole SRAM of the SM on one thread block, where FlashAttention-2 runs two or more blocks per SM
to hide latency. The larger $B_r = 128$ that fast FA2 kernels use leaves room for $N \le 512$.

## 3 · HBM traffic when the f row spills

Past that length the row must go somewhere: `placement="hbm"` writes every $f$ block to HBM and
reads it back for the product with $V$ — Tri Dao's "quadratic" bytes. Counted by the Memory model on
a small problem whose row does not fit a 16 KiB SRAM:
"""),
    code(r"""
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
"""),
    md(r"""
The same at real sizes from the closed forms, with `placement="auto"` resolved against an H200's
SRAM — so `v_once` keeps the row on chip while it fits and spills when it does not. Same blocks
for all ($B_r = B_c = 64$, $d = 64$, fp16), per (batch, head):
"""),
    code(r"""
from analysis import closed_forms
from analysis.gpus import get_gpu

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
    ax.loglog(seq, [t.hbm_bytes for t in ts], "o-" if "v_once" in label else "s--", label=label, ms=4)
ax.axvspan(fits_up_to, seq[-1], color="tab:red", alpha=0.08)
ax.text(fits_up_to * 1.05, ax.get_ylim()[1] / 3, "f row spills to HBM\n(H200 SRAM, lazy; eager\nneeds a little less)",
        color="tab:red", fontsize=8)
ax.set_xlabel("sequence length N")
ax.set_ylabel("HBM bytes per (batch, head)")
ax.set_title(f"HBM traffic, d = {d}, Br = Bc = {br}, fp16, H200 SRAM")
ax.legend(fontsize=8)
plt.show()
show_table(["N", "f row"] + list(traffic),
           [[n, traffic["v_once auto, lazy"][i].placement_resolved] +
            [human(ts[i].hbm_bytes) for ts in traffic.values()] for i, n in enumerate(seq) if n in (1024, 2048, 16384)])
"""),
    md(r"""
While the row fits, `v_once` moves **exactly** FA2's bytes — the author's claim is right. Once it
spills, the lazy version moves $2 N_q N_k$ extra elements ($f$ written and read once) — here twice
FA2's traffic — and the eager version, which re-reads and re-writes every earlier block at every
new block max, moves $\Theta(N^3/B_c)$: worse than naive attention.

## 4 · "Fewer matrix multiplications"

$(f/\ell)\,V = \sum_j (f_j/\ell)\,V_j$: one product of a $B_r \times N$ row with $V$ performs the same
multiply-adds as $T_c$ products of $B_r \times B_c$ tiles. Fewer **calls**, not fewer FLOPs. Counted:
"""),
    code(r"""
n = 1024  # the row still fits here
rows = []
for label, ts in traffic.items():
    t = ts[seq.index(n)]
    rows.append([label, f"{t.flops['matmul']:,}", f"{t.flops['exp']:,}", f"{t.flops['other']:,}",
                 f"{t.flops['other'] / traffic['fa2'][seq.index(n)].flops['other']:.2f}×"])
print(f"N = {n}, d = {d}, Br = Bc = {br}: the papers' 4·N²·d = {4 * n * n * d:,}")
show_table(["", "matmul FLOPs", "exp", "other", "other vs fa2"], rows)
"""),
    md(r"""
## 5 · Eager rescaling's extra work

The issue's code rescales **every earlier $f$ block** whenever a new block arrives
(`for k in range(j): fi_BLOCK[k] = fi_BLOCK[k] * torch.exp(mi - mi_new)`): for a row of $T_c$ blocks
that is $T_c(T_c-1)/2$ block rescales, $\Theta(N^2/B_c)$ multiplies per row and $\Theta(N^3/B_c)$ in
all — against FA2's one rescale of the $B_r \times d$ accumulator per block. The lazy variant keeps
each block's own max and rescales once, fused into the final product.
"""),
    code(r"""
seq2 = [512, 1024, 2048, 4096, 8192, 16384, 32768]
fig, ax = plt.subplots(figsize=(6.5, 4))
base = [closed_forms.counts("fa2", 1, 1, n, n, d, block_q=br, block_k=bc).flops for n in seq2]
for label, rescale in (("v_once, eager (the issue's code)", "eager"), ("v_once, lazy", "lazy")):
    fl = [closed_forms.counts("v_once", 1, 1, n, n, d, block_q=br, block_k=bc, placement="sram",
                              rescale=rescale).flops for n in seq2]
    ax.semilogx(seq2, [(f["exp"] + f["other"]) / (b["exp"] + b["other"]) for f, b in zip(fl, base)], "o-", label=label)
ax.axhline(1, color="k", lw=0.8, ls="--", label="fa2")
ax.set_xlabel("sequence length N")
ax.set_ylabel("non-matmul FLOPs / fa2's")
ax.set_title(f"Non-matmul work against FlashAttention-2 (d = {d}, Bc = {bc})")
ax.legend()
plt.show()
"""),
    md(r"""
## 6 · On the GPU

The tensor-core kernels `kernels/fa2_tc` and `kernels/v_once_tc` (both knobs) are timed by
`bench/bench_tc.py` on an H200 and committed under `bench/results/`; the teaching kernels by
`bench/bench_kernels.py`. This cell reads whatever is there (it does not need a GPU).
"""),
    code(LOAD_RESULTS),
    code(r"""
records = latest_per_shape([r for r in load_bench_records() if "{" not in r["kernel"]
                             and (r["kernel"].startswith("v_once") or r["kernel"] in ("fa2_tc", "fa2"))])
tensor_core = [r for r in records if "_tc" in r["kernel"]]  # the tier whose speed is in question
if not records:
    print("not measured yet: no fa2 / v_once timings in bench/results/ "
          f"({', '.join(p.name for p in sorted(RESULTS.glob('*'))) or 'empty'})")
else:
    shown = tensor_core or records
    groups = sorted({(r["dtype"], r["d"], r["causal"]) for r in shown})
    several_files = len({r["file"] for r in shown}) > 1
    groups = [g for g in groups if g[0] in ("float16", "fp16")][:4] or groups[:4]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 4), squeeze=False)
    for ax, (dt, dd, causal) in zip(axes[0], groups):
        for kernel in sorted({r["kernel"] for r in shown}):
            pts = sorted((r["n"], r["tflops"]) for r in shown
                         if (r["kernel"], r["dtype"], r["d"], r["causal"]) == (kernel, dt, dd, causal))
            if pts:
                src = next(r["file"] for r in shown if r["kernel"] == kernel).removesuffix(".json")
                ax.plot(*zip(*pts), "o-" if "v_once" in kernel else "s-k", ms=4,
                        label=f"{kernel} ({src})" if several_files else kernel,
                        lw=2.5 if "v_once" not in kernel else 1.2)
        ax.axvline(longest_fitting(h200, dd, 64), color="tab:red", lw=0.8, ls=":")  # the model's limit
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("TFLOP/s (papers' FLOPs)")
        ax.set_title(f"{dt}, d = {dd}, {'causal' if causal else 'non-causal'}")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(("Tensor-core kernels" if tensor_core else "Kernels") +
                 " measured on the H200 (red: longest N whose f row fits, Br = 64, in the reference's SRAM model)")
    fig.tight_layout()
    plt.show()
    print("files:", sorted({r["file"] for r in records}))
"""),
    code(r"""
def measured_ratio(records, n, d=64, causal=False, ref=("fa2_tc", "fa2")):
    # best v_once TFLOP/s over best fa2 TFLOP/s at one shape (tensor-core tier first)
    for tier_ref in ref:
        base = [r["tflops"] for r in records if r["kernel"] == tier_ref and r["n"] == n and r["d"] == d
                and r["causal"] == causal and r["dtype"] in ("float16", "fp16")]
        mine = [(r["tflops"], r["kernel"]) for r in records if r["kernel"].startswith("v_once")
                and ("_tc" in r["kernel"]) == tier_ref.endswith("_tc")
                and r["n"] == n and r["d"] == d and r["causal"] == causal and r["dtype"] in ("float16", "fp16")]
        if base and mine:
            best = max(mine)
            return best[0] / max(base), best[1], tier_ref
    return None


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
print("ratio: measured TFLOP/s of the fastest v_once kernel over fa2's, same tier (tensor-core first)")

verdict_doc = ROOT / "docs" / "issue-941-verdict.md"
if verdict_doc.exists():  # the write-up of the GPU measurements: its title and verdict paragraph
    text = verdict_doc.read_text().split("\n\n")
    display(Markdown("\n\n".join(text[:2]) + f"\n\n*(from `{verdict_doc.relative_to(ROOT)}`)*"))
else:
    print("docs/issue-941-verdict.md: not written yet")
"""),
    md(r"""
## Verdict

- **Correct?** Yes. `v_once` equals exact attention in every configuration (section 1); the issue's
  induction is sound.
- **Fewer matrix multiplications?** Fewer *calls*, the **same matmul FLOPs** (section 4): one
  $B_r \times N$ by $N \times d$ product is $T_c$ tile products added up. The lazy variant's
  non-matmul work equals FA2's to within a percent; the issue's eager rescaling adds
  $\Theta(N^3/B_c)$ multiplies (section 5).
- **No extra HBM traffic?** True **only while the $f$ row fits in SRAM**: then it moves exactly FA2's
  bytes (section 3). That is $N \lesssim 1.3$k on an H200 at $d = 64$, $B_r = 64$, and only by giving
  one thread block the whole SM (section 2). Beyond it, every $f$ element is written to and read from
  HBM — Tri Dao's quadratic bytes: twice FA2's traffic lazily, worse than naive attention eagerly.
- **So:** in its best case (short sequences, lazy rescaling) multiply-V-once matches FlashAttention-2
  in FLOPs and bytes while needing $\Theta(B_r N)$ SRAM instead of $\Theta(B_r d + B_c d)$ — so it
  fits fewer thread blocks per SM and cannot use large $B_r$; everywhere else it is strictly worse.
  There is nothing for FlashAttention to adopt.
- **Measured** (section 6, from `bench/results/tc_bench.json` and `docs/issue-941-verdict.md`): on
  an H200 the tensor-core `v_once` is slower than the tensor-core FA2 at every measured size; holding
  the row on chip costs so much occupancy that it loses even where it fits, and spilled it pays the
  quadratic $f$ traffic — which the ncu DRAM counters match to within about 1 % of the closed form.

## Exercises

1. Derive the SRAM working set of `v_once` with the row on chip by hand (see `variants/v_once.py`,
   `sram_bytes`) and check the longest fitting $N$ in the table for the H200, $d = 128$, $B_r = 64$.
2. Could the $f$ row be stored in fp8 to double the $N$ that fits? What would that do to accuracy?
   Try it on the reference by casting (`q.dtype` is what the reference uses for $f$).
3. Show that lazy rescaling needs $T_c$ extra floats per row on chip (the block maxima). At what
   $N$ does that matter?
4. The verdict says `v_once` uses the same bytes as FA2 when it fits. Find blocks for which
   spilled lazy `v_once` moves *fewer* bytes than FA2 (hint: FA2 re-reads $K$ and $V$ $T_r$ times;
   compare $2N^2 d/B_r$ with $2N^2$). Is that a real win?
5. Split-KV ("flash-decoding") also avoids holding a whole row: how does it use the merge of
   notebook 2 instead?
"""),
]

# ------------------------------------------------------------------------------------------------
NB06 = [
    md(r"""
# 6 · On a real GPU

The first five notebooks counted bytes and FLOPs. Here the kernels meet the hardware: the teaching
CUDA kernels of all four variants (`kernels/`, one `.cu` per variant, mirroring the references), the
tensor-core kernels `fa2_tc` and `v_once_tc`, and PyTorch's SDPA backends (FlashAttention-2 and cuDNN)
as the bar to clear.

- **Without a GPU** (this is how the test suite runs it) the notebook reads the measurements
  committed under `bench/results/` by `bench/bench_kernels.py` and `bench/bench_tc.py` on an H200.
  Missing files are reported as "not measured yet".
- **With a GPU** (`torch.cuda.is_available()`), section 4 also runs a small live benchmark through
  `kernels.KERNELS` and `bench.harness`.

1. What has been measured.
2. Timings: TFLOP/s against $N$.
3. The model against the measurements: the GPU model (levels, bound, time) and measured counters.
4. Live, when a GPU is present.
"""),
    code(SETUP),
    md(r"""
## 1 · What has been measured
"""),
    code(LOAD_RESULTS),
    code(r"""
from IPython.display import Image

files = sorted(RESULTS.glob("*")) if RESULTS.is_dir() else []
if not files:
    print("not measured yet: bench/results/ is empty or missing")
show_table(["file", "size", "what"],
           [[f.name, human(f.stat().st_size),
             {".json": "records", ".md": "tables (open it in JupyterLab)", ".png": "plot",
              ".csv": "counters (ncu)", ".txt": "log"}.get(f.suffix, "")]
            for f in files] or [["—", "—", "not measured yet"]])
records = load_bench_records()
names = sorted({r["kernel"].split("{")[0] + ("{…} (tuning sweep)" if "{" in r["kernel"] else "") for r in records})
print(f"{len(records)} timed records; kernels: {', '.join(names) or 'none'}")
for png in (f for f in files if f.suffix == ".png"):
    print(png.name)
    display(Image(filename=str(png), width=900))
"""),
    md(r"""
## 2 · Timings

TFLOP/s counts the papers' FLOPs ($4 B H N^2 d$, halved when causal) over the median time, with
batch × $N$ = 16k tokens and hidden size 2048, fp16. Tuning-sweep candidates (kernels whose name
carries a `{config}`) are left out.
"""),
    code(r"""
timed = [r for r in records if "{" not in r["kernel"] and r.get("n") and r.get("d")
         and r["dtype"] in ("float16", "fp16")]
timed = latest_per_shape(timed)  # the same kernel measured by several files: one record each

if not timed:
    print("not measured yet: no fp16 timings in bench/results/")
else:
    panels = sorted({(r["d"], r["causal"]) for r in timed})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    kernels_seen = sorted({r["kernel"] for r in timed})
    for ax, (d, causal) in zip(axes[0], panels):
        for kernel in kernels_seen:
            pts = sorted((r["n"], r["tflops"]) for r in timed if (r["kernel"], r["d"], r["causal"]) == (kernel, d, causal))
            if pts:
                style = "--^" if kernel.startswith("sdpa") else ("-s" if "_tc" in kernel else "-o")
                ax.plot(*zip(*pts), style, ms=4, label=kernel)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("TFLOP/s (papers' FLOPs)")
        ax.set_title(f"d = {d}, {'causal' if causal else 'non-causal'}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Measured TFLOP/s, fp16 (bench/results)")
    fig.tight_layout()
    plt.show()
    n_show = max(r["n"] for r in timed)
    show_table(["kernel"] + [f"d={d}, {'causal' if c else 'non-causal'}" for d, c in panels],
               [[kernel] + [next((f"{r['tflops']:.1f}" for r in timed if (r["kernel"], r["n"], r["d"], r["causal"])
                                  == (kernel, n_show, d, c)), "—") for d, c in panels]
                for kernel in kernels_seen])
    print(f"TFLOP/s at N = {n_show}; —: not measured at this N (e.g. the f row does not fit in SRAM, or a "
          "spilled eager call would move hundreds of GB)")
"""),
    md(r"""
## 3 · The model against the measurements

The papers' count is what each thread block *asks* global memory for, as if there were no cache. On
an H200 that is not what reaches DRAM: the 60 MB L2 serves most re-reads of $K_j, V_j$. The GPU model
(`analysis.gpu_model`, `fa-traffic predict` / `validate`) follows each kernel as it really runs — its
own tiling, instruction path (wgmma, mma.sync or FFMA), CTAs per SM, waves — and three memory levels
(`analysis.levels`): the papers' count (**requests**), what the SMs send to the **L2**, and what an L2
residency model lets through to **DRAM**. Its free constants are fitted on a training split
(fp16, non-causal, N = 2k and 8k); every other cell below is held out. The "bound" is the model's
largest term: tensor, softmax (MUFU + ALU), smem, latency (dependent round trips), L2 or DRAM.
"""),
    code(r"""
import re

from analysis import closed_forms
from analysis.gpus import get_gpu
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


from analysis import validate as val

cells = val.rows()
timed_cells = [r for r in cells if r["quantity"] == "time" and r["n"] >= 2048]
if not timed_cells:
    print("not measured yet: no timings in bench/results/ to compare with the model")
else:
    fig, ax = plt.subplots(figsize=(7, 5.5))
    for kernel in sorted({r["kernel"].split("{")[0] for r in timed_cells}):
        pts = [(r["model"] * 1e3, r["measured"] * 1e3) for r in timed_cells if r["kernel"].split("{")[0] == kernel]
        style = "*" if kernel == "fa2_wgmma" else ("^" if kernel.startswith("sdpa") else
                                                   ("s" if "_tc" in kernel else "o"))
        ax.loglog(*zip(*pts), style, ms=8 if kernel == "fa2_wgmma" else 4, alpha=0.75, label=kernel)
    lo = min(min(r["model"], r["measured"]) for r in timed_cells) * 1e3
    hi = max(max(r["model"], r["measured"]) for r in timed_cells) * 1e3
    for f, ls in ((1.0, "k-"), (1.15, "k:"), (1 / 1.15, "k:")):
        ax.loglog([lo, hi], [lo * f, hi * f], ls, lw=0.8)
    ax.set_xlabel("GPU model time (ms)")
    ax.set_ylabel("measured median time (ms)")
    ax.set_title("GPU model against measurement, H200, N ≥ 2k (dotted: ±15%)")
    ax.legend(fontsize=7, ncol=2)
    plt.show()
    for s in val.summary(cells):
        if s["banded"]:
            print(f"{s['quantity']:>24s}  {s['tier']:<12s} {s['split']:<9s} {s['in_band']:4d}/{s['banded']:<4d} in band, "
                  f"median |error| {s['median_abs_err']:.1%}")
    rank = val.ranking(cells)
    print(f"ranking: {rank['share']:.1%} of {rank['pairs']} measured pairs (ties within {val.RANK_TIE:.0%}: "
          f"right when the model keeps them within its band); strict, by sign: {rank['strict_share']:.1%}")
"""),
    md(r"""
### What bounds each kernel on the H200

The model's verdict at N = 16k (B = 1, H = 2048/d, fp16, non-causal), with the measured time beside it.
The verdict the papers' count gives FA2 (left of the ridge: notebooks 1 and 4) does not survive contact with the
L2: no FA2-style kernel here is DRAM- or L2-bound. The fastest (`fa2_wgmma`, `sdpa_cudnn`) are bound by
their tensor cores (d = 128) or their softmax (d = 64: MUFU exponentials and ALU work per FLOP double
when d halves); `fa2_tc` and SDPA flash (mma.sync) by the tensor path; the teaching tier (FFMA, scalar
shared loads) by shared-memory issue — even naive, whose S and P really do go through DRAM. Only
spilled `v_once` moves enough bytes for the L2 (lazy) or DRAM and round-trip latency (eager) to bind.
"""),
    code(r"""
# one run per kernel: the newest file that timed it (tc_bench_wgmma_tma.json holds today's fa2_wgmma builds)
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
"""),
    md(r"""
### What the L2 absorbs

For every kernel Nsight Compute profiled (N = 4k, `bench/results/*ncu*.csv`): the papers' count
(requests), the model's L2 and DRAM levels, and the counters — `lts__t_bytes` (all L2 traffic,
including the fabric between the two L2 partitions) and DRAM read + write. Between the first bar and
the DRAM bars is what the L2 absorbs: for FA2-style kernels nearly all the re-reads of $K_j, V_j$,
leaving DRAM at about one read of Q, K, V and one write of O. Spilled `v_once` is the exception: its
f row is too big for the cache. (`fa-traffic validate` checks the model's L2 level against the bytes the
SMs move over the crossbar, `l1tex__m_xbar2l1tex_read_bytes` + `l1tex__m_l1tex2xbar_write_bytes` in
`bench/results/ncu_levels.csv`: 0.98–1.06× of the model for every kernel but SDPA flash, whose register
spills add write-backs. The
L2 slices' own counters see less on non-causal rows, down to 0.58×: requests for one line from CTAs of a
head that run in lockstep are merged before the slice. See `docs/gpu-model.md`.)
"""),
    code(r"""
from analysis import gpu_model as gm
from analysis.fit_gpu_model import work_of
from analysis.measured import ncu_cells

prof = {}
for c in ncu_cells():  # file by file, oldest name first: a later profile of the same kernel replaces it
    if c["n_q"] == 4096 and not c["causal"] and c.get("lts_bytes") and "{" not in c["label"]:
        prof[(c["label"], c["d"])] = c
if not prof:
    print("not measured yet: no ncu counters in bench/results/")
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
    for i, (lab, w) in enumerate(zip(labels, (-0.32, -0.16, 0, 0.16, 0.32))):
        ax.bar(x + w, [s[i] / 1e9 for s in series], width=0.15, label=lab,
               hatch="//" if "ncu" in lab else None, alpha=0.85)
    ax.plot(x, [s[5] / 1e9 for s in series], "k_", ms=30, mew=2, label="Q, K, V read once + O written once")
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{k}\nd={d}" for k, d in keys], fontsize=7)
    ax.set_ylabel("GB (whole problem)")
    ax.set_title("What the L2 absorbs: requests → L2 → DRAM, H200, N = 4096, fp16")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    plt.show()
    show_table(["kernel", "d", "requests", "DRAM (ncu)", "DRAM / compulsory", "absorbed by the L2"],
               [[k, d, human(s[0]), human(s[4]), f"{s[4] / s[5]:.2f}", f"{1 - s[4] / s[0]:.0%}"]
                for (k, d), s in zip(keys, series)])
"""),
    md(r"""
**Measured counters.** `bench/bench_tc.py target --what ncu` launches each tensor-core kernel (and
SDPA) once on two representative shapes under Nsight Compute; `bench/results/tc_ncu.csv` holds the
counters. DRAM bytes are real HBM traffic; L2 (`lts__t_bytes`) bytes are what the SMs moved through
the L2 cache. The papers' count charges every re-read of $K_j, V_j$ to HBM, with no cache, so it should
sit near the **L2** figure, while DRAM sees each input about once — except for `v_once`'s spilled
$f$ row, which is too big for the cache:
"""),
    code(r"""
def find_counter_records(obj, path=""):
    # dicts anywhere in the results that carry a DRAM byte counter
    if isinstance(obj, dict):
        if any("dram" in str(k).lower() for k in obj):
            yield obj
        for v in obj.values():
            yield from find_counter_records(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from find_counter_records(v)


import csv


def load_ncu(path):
    # ncu --csv output: one row per (launch, metric), after "target launched <kernel> n=.. d=.. b=.. h=.." lines
    lines = path.read_text().splitlines()
    targets = []
    for line in lines:
        if line.startswith("target launched"):
            words = line.split()
            targets.append(dict([w.split("=", 1) for w in words[3:] if "=" in w], kernel=words[2]))
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    launches = {}
    for r in csv.DictReader(lines[start:]) if start is not None else []:
        try:
            value = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        launches.setdefault(int(r["ID"]), {"kernel_name": r.get("Kernel Name", "")})[r["Metric Name"]] = value
    out = [launches[i] for i in sorted(launches)]
    if len(out) == len(targets):  # one launch per target: attach the shapes
        out = [dict(t, **m) for t, m in zip(targets, out)]
    return out


ncu_rows = []
for path in (f for f in files if f.suffix == ".csv" and "ncu" in f.name):
    for m in load_ncu(path):
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
for f in (f for f in files if f.suffix == ".json"):
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
    print("not measured yet: no DRAM counters (ncu) in bench/results/")
"""),
    md(r"""
**What each kernel costs the SM.** `bench/bench_tc.py resources` records, per tensor-core build,
registers per thread, shared memory per thread block and the resulting occupancy — the quantity the
model does not see, and the one that decides `v_once` (notebook 5):
"""),
    code(r"""
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
    print("not measured yet: no bench/results/tc_resources.json")
else:
    keep = ("HEAD_DIM", "PLACEMENT_SRAM", "RESCALE_LAZY", "BLOCK_M", "BLOCK_N")
    show_table(["kernel", "build (fp16)", "registers / thread", "spills (bytes)", "shared memory / block",
                "blocks / SM", "occupancy"],
               [[r.get("kernel"), ", ".join(f"{k}={v}" for k, v in r.get("defines", {}).items() if k in keep),
                 r.get("registers"), r.get("spill_stores", 0),
                 human(r["smem_per_cta"], binary=True) if "smem_per_cta" in r else "grows with N (the f row)",
                 r.get("ctas_per_sm", "—"), f"{r['occupancy']:.1%}" if "occupancy" in r else "—"]
                for r in builds.values()][:16])
"""),
    md(r"""
## 4 · Live, when a GPU is present

A small run: every registered kernel (`kernels.KERNELS`, each of its benchmark options) on one
problem ($B = 4$, $H = 16$, $N = 2048$, $d = 64$, fp16), beside torch SDPA's flash and cuDNN backends,
through `bench.harness` (the benchmarks' one harness: checked against the float64 reference on the
timed inputs, then timed by its one method, medians over rotated inputs). On a machine without a GPU
this cell says so and does nothing.
"""),
    code(r"""
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
"""),
    md(r"""
## Exercises

1. In section 3, which kernels sit closest to their roofline bound, and which bound is it (memory,
   matmul, non-matmul)? For the teaching kernels, name one effect the model leaves out that could
   explain the gap (think of shared-memory bank conflicts, occupancy, and float32 arithmetic).
2. The model charges FA2 for re-reading $K_j, V_j$ once per query block. Compare its HBM bytes with
   the measured DRAM counter, where there is one: how much does the L2 cache absorb?
3. Find the $N$ at which the teaching `fa2` overtakes the teaching `naive` in the timings. Does the
   roofline predict the same crossover?
4. From the timings, at what $N$ (if any) is `v_once_tc` with the row in SRAM faster than `fa2_tc`?
   Relate the answer to notebook 5's table of the longest $N$ whose row fits.
5. With a GPU: change the live problem to causal (pass `causal=True` through the lambdas) and to
   $d = 128$. Which kernels gain most from causal masking, and why?
"""),
]


# ------------------------------------------------------------------------------------------------
NB07 = [
    md(r"""
# 7 · The backward pass: recomputation

FlashAttention rests on two ideas. Notebooks 3-5 were about the first, **tiling**: never write the
$N \times N$ scores to HBM. This one is about the second, **recomputation**: the backward pass needs
$P = \mathrm{softmax}(S)$ again, and instead of keeping it from the forward ($N^2$ numbers per
head) FlashAttention keeps only one number per row, $L = m + \log \ell$, and rebuilds $P$ tile by
tile. More FLOPs, far fewer bytes, and memory that grows as $O(N)$ instead of $O(N^2)$.

1. The chain rule for softmax, and the identity $D = \mathrm{rowsum}(dO \circ O)$.
2. Standard attention's backward (FA1 paper, Algorithm 3): what an unfused backward moves.
3. FA1's Algorithm 4 against FA2's Algorithm 2: what FA2 moved out of the loop, and why $dQ$ needs
   a float32 accumulator.
4. Recomputation's trade, counted and plotted.
5. Kernel fusion on a real GPU, from the committed timings.
6. The references as a differentiable op, and exercises.

Everything runs on a CPU in seconds: the references in `variants/` are the same code the tests
check against float64 autograd, and every count comes from `analysis.memory.Memory` or its closed
forms (`analysis.backward_forms`).
"""),
    code(SETUP),
    md(r"""
## 1 · The chain rule for softmax

Forward, per (batch, head): $S = \tau Q K^\top$, $P = \mathrm{softmax}(S)$ row by row, $O = P V$.
Given $dO = \partial \mathcal{L} / \partial O$:

$$dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad
dS_{ij} = P_{ij}\,\Big(dP_{ij} - \sum_l P_{il}\, dP_{il}\Big), \qquad dQ = \tau\, dS\, K, \qquad dK = \tau\, dS^\top Q .$$

The middle one is the softmax's Jacobian, $\partial P_{il} / \partial S_{ij} = P_{il}(\delta_{lj} - P_{ij})$,
applied to a row. Its row sum has a cheaper form:

$$D_i = \sum_l P_{il}\, dP_{il} = \sum_l P_{il}\, (dO_i \cdot V_l) = dO_i \cdot \sum_l P_{il} V_l = dO_i \cdot O_i .$$

So $D = \mathrm{rowsum}(dO \circ O)$: $d$ multiplies per row from two $N \times d$ matrices, instead of
$N$ from the $N \times N$ matrices $P$ and $dP$. Below, both forms and the five gradient formulas
against PyTorch's autograd, in float64.
"""),
    code(r"""
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
"""),
    md(r"""
## 2 · Standard attention's backward: P comes back from HBM

The unfused backward (FA1 paper, Algorithm 3; `variants/naive.py`) is five kernels. It reads the
$P$ its forward left in HBM, and writes $dP$ and $dS$, both $N_q \times N_k$, to HBM between kernels.
It computes no exponential at all: nothing is recomputed. Run it under a counting `Memory`:
"""),
    code(r"""
from analysis.memory import Memory
from analysis import backward_forms as bf

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
"""),
    md(r"""
## 3 · FA1's Algorithm 4 against FA2's Algorithm 2

Both loop over key blocks outside ($j$) and query blocks inside ($i$), so $K_j, V_j$ are read once
and $dK_j, dV_j$ accumulate on chip. Both rebuild $P_{ij}$ from $Q_i$, $K_j$ and per-row statistics.
What differs is what happens at each visited tile $(j, i)$:

| | FA1, Algorithm 4 | FA2, Algorithm 2 |
|---|---|---|
| statistics read per tile | $\ell_i$, $m_i$; $P = \mathrm{diag}(\ell)^{-1} e^{S - m}$ (line 12) | $L_i$ only; $P = e^{S - L}$ (line 11) |
| $D_i = \mathrm{rowsum}(dO_i \circ O_i)$ | recomputed at every tile (line 18), so $O_i$ is read $T_c$ times | computed once before the loop (line 4), $O$ read once |
| $dQ_i$ | read and written per tile, in the input dtype (line 20) | read and written per tile, a **float32** accumulator (line 15) |
| $dK_j$, $dV_j$ | zeroed in HBM (line 4), written at the end | written once at the end (line 18) |

**Why dQ needs an accumulator.** With $K/V$ outside, $dQ_i = \tau \sum_j dS_{ij} K_j$ receives one
partial sum per visited key block, and those partial sums arrive in different iterations of the
outer loop: $dQ_i$ cannot stay on chip, so it makes a round trip through HBM at every tile. If
that running sum is stored in fp16/bf16, it is rounded $T_c$ times, like FA1's running $O$ in the
forward. FA2 keeps it in float32 (and its GPU kernels add with atomics, since thread blocks for
different $j$ run at once). The counts, and the effect of the rounding on a bf16 problem with 128
key blocks:
"""),
    code(r"""
rows = []
for name in ("fa1", "fa2"):
    (gq, gk, gv), c = counted_backward(name, q32, k32, v32, dO32)
    for t in ("O", "D", "l", "m", "lse", "dQ"):
        if c.reads.get(t) or c.writes.get(t):
            rows.append([name, t, c.reads.get(t, 0), c.writes.get(t, 0), c.read_bytes.get(t, 0) + c.write_bytes.get(t, 0)])
    rows.append([name, "other FLOPs", "", "", c.flops["other"]])
show_table(["variant", "tensor", "elements read", "elements written", "bytes (or FLOPs)"], rows)

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
"""),
    md(r"""
Note what the counts say and what they do not: FA2's backward moves *more* bytes than FA1's in this
model — its float32 $dQ$ costs twice the bytes per round trip — while doing less elementwise work
($D$ once, no $\ell$ divide). As in the forward (notebook 4), FA2's real advantages are parallelism
and fewer non-matmul FLOPs; the HBM model does not credit the L2 cache that absorbs the re-reads.

## 4 · Recomputation's trade, counted

Per visited tile, the recomputing backward does five products ($S$, $dV$, $dP$, $dQ$, $dK$)
where the unfused one does four: the extra one is $S = \tau Q_i K_j^\top$, plus the exponentials of
$P$. In exchange, nothing of size $N_q \times N_k$ is stored, read or written. The closed forms
(`analysis.backward_forms`, held exactly equal to the references by the tests) give the whole
training step (forward + backward) at any $N$; first a check that they restate the counted run:
"""),
    code(r"""
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
"""),
    code(r"""
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
for name, style in (("naive", "s-"), ("fa2", "^-")):
    rs = train[name]
    axes[0].plot(Ns, [r.saved_bytes for r in rs], style, label=name)
    axes[1].plot(Ns, [r.hbm_bytes for r in rs], style, label=name)
    axes[2].plot(Ns, [sum(r.flops.values()) for r in rs], style, label=name)
from analysis.gpus import GPUS
axes[0].axhline(GPUS["h200"].hbm_bytes.value, color="k", ls="--", lw=0.8, label="H200 HBM (141 GB)")
for ax, title in zip(axes, ("memory saved for the backward", "HBM traffic, forward + backward",
                            "FLOPs, forward + backward")):
    ax.set_xscale("log", base=2); ax.set_yscale("log"); ax.set_xlabel("N"); ax.set_title(title)
    ax.grid(alpha=0.3); ax.legend()
axes[0].set_ylabel("bytes"); axes[1].set_ylabel("bytes"); axes[2].set_ylabel("FLOPs")
extra = sum(train["fa2"][-1].flops.values()) / sum(train["naive"][-1].flops.values()) - 1
fig.suptitle(f"B={Bh}, H={Hh}, d={dh}, {dt}, causal: recomputation buys O(N) memory and "
             f"{train['naive'][-1].hbm_bytes / train['fa2'][-1].hbm_bytes:.1f}x fewer bytes for {extra:.0%} more FLOPs")
fig.tight_layout()
plt.show()
"""),
    md(r"""
The left panel is the point of recomputation: at $B \cdot H = 128$ and $N = 32$k, naive's $P$ alone
would not fit in an H200's memory, while FA2 keeps 16 MiB. The same numbers, with a roofline, come
from the command line:

    fa-traffic report --pass train --causal --batch 8 --heads 16 --dtype bf16 --plot footprint.png

## 5 · Kernel fusion on a real GPU

The unfused algorithm is not only a memory problem. Each of its passes is a separate kernel that
writes its result to HBM for the next one to read back. PyTorch's `math` backend of
`scaled_dot_product_attention` is exactly that; its `flash` backend is one fused kernel. The
committed forward timings (`bench/results/bench_kernels.json`, an H200, fp16, $B \cdot N = 16$k,
$H = 2048/d$) put them side by side, next to the traffic ratio our counts predict for the forward:
"""),
    code(r"""
import json
from analysis import closed_forms as cf

path = ROOT / "bench" / "results" / "bench_kernels.json"
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

# the backward, when bench/sdpa_backward.py has been run on a GPU and its JSON committed
bpath = ROOT / "bench" / "results" / "sdpa_backward.json"
brecs = json.loads(bpath.read_text()).get("records", []) if bpath.exists() else []
by = {(r["backend"], r["n"]): r for r in brecs if "skipped" not in r and r["d"] == 64 and not r["causal"]}
brows = []
for n in sorted(n for b_, n in by if b_ == "math"):
    if ("flash", n) in by:
        b, h = 16384 // n, 2048 // 64
        naive = bf.backward_counts("naive", b, h, n, n, 64, dtype="fp16", block_q=64, block_k=64)
        fa2 = bf.backward_counts("fa2", b, h, n, n, 64, dtype="fp16", block_q=64, block_k=64)
        m, f = by[("math", n)]["bwd_ms"], by[("flash", n)]["bwd_ms"]
        brows.append([n, f"{m:.3f}", f"{f:.3f}", f"{m / f:.1f}×", f"{naive.hbm_bytes / fa2.hbm_bytes:.1f}×"])
if brows:
    show_table(["N", "math backward (ms)", "flash backward (ms)", "measured math/flash", "counted HBM naive/fa2"], brows)
else:
    print("backward not measured yet: run `PYTHONPATH=. python3 bench/sdpa_backward.py` on a GPU and "
          "commit its sdpa_backward.json under bench/results/")
"""),
    md(r"""
Fusion wins by more than an order of magnitude, several times what the byte ratio alone predicts.
The counts model Algorithm 0's three passes at full bandwidth; what they leave out - how many kernels
the math backend really launches, and what fraction of HBM bandwidth and tensor-core rate each
reaches - is for a profiler to measure (notebook 6; `bench/results/kernels_notes.md` has the math
backend at 16-26 TFLOP/s against 300+ for flash). The direction is the lesson: an unfused backward's
five kernels (section 2) pay the same toll for $P$, $dP$ and $dS$. The backward kernels come with
the next issue; its benchmark will add measured backward times here.

## 6 · The references as a differentiable op

`variants.attention(q, k, v, variant=..., causal=...)` is a `torch.autograd.Function`: its forward
runs the variant's forward and saves what that variant's backward reads (naive: $P$; fa1: $O, \ell,
m$; fa2 and v_once: $O$ and $L$), and its backward calls the variant's `backward`. A tiny byte-level
GPT (`model/`) trained with it follows the losses of one trained with SDPA (`tests/test_model.py`).
What the op keeps between the passes:
"""),
    code(r"""
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
"""),
    code(r"""
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

# the checks pass on correct answers (so a failure is yours, not theirs):
check_softmax_backward_row(lambda p, dp: p * (dp - (p * dp).sum()))
"""),
    md(r"""
## Exercises

1. Write `softmax_backward_row(p, dp)` returning $dS$ for one row from $P$ and $dP$ (section 1),
   without autograd. Check: `check_softmax_backward_row(softmax_backward_row)`.
2. From the FA2 backward's docstring in `variants/fa2.py`, write `fa2_reads(n, blk, d)` returning the
   dict of elements read per tensor for non-causal $N_q = N_k = n$, $B_r = B_c = $ `blk`, one head
   (mind the tail block when `blk` does not divide $n$). Check: `check_fa2_reads(fa2_reads)`.
3. With $B = 32$, $H = 16$, fp16: find the smallest $N$ for which naive's saved $P$ alone exceeds an
   H200's 141 GB. Check: `check_naive_limit(N)`. What does FA2 keep at that $N$?
4. Change FA2's accumulator to the input dtype (edit `dq_acc` in `variants/fa2.py`'s backward, in a
   scratch copy). How much HBM traffic does it save at $N = 16$k, and what does it do to the bf16
   error of section 3? Which would you choose, and why does FA2's CUDA code choose float32?
5. Algorithm 4 (FA1) recomputes $D_i$ at every tile. Count, with `counted_backward`, the extra
   `other` FLOPs and the extra bytes of $O$ this costs at $N_q = N_k = 4096$, $B_r = B_c = 64$ — is it
   the bytes or the FLOPs that matter on an H200 (use `analysis.roofline`)?
6. A row that sees no key (causal, $N_q > N_k$) has $L = -\infty$. Why does $P = e^{S - L}$ not give
   NaN in `variants/fa2.py`, and what is its $dq$? Verify with a call.
"""),
]


# ------------------------------------------------------------------------------------------------
NOTEBOOKS = {
    "01_why_io_matters": NB01,
    "02_online_softmax": NB02,
    "03_flashattention1": NB03,
    "04_flashattention2": NB04,
    "05_multiply_v_once": NB05,
    "06_on_a_real_gpu": NB06,
    "07_backward_recomputation": NB07,
}


def build(name: str, cells: list[dict]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for n, cell in enumerate(cells):
        make = nbformat.v4.new_markdown_cell if cell["cell_type"] == "markdown" else nbformat.v4.new_code_cell
        new = make(cell["source"])
        new.id = f"{name[:2]}-{n:02d}"  # stable ids keep the diffs small
        nb.cells.append(new)
    nbformat.validate(nb)
    return nb


def main(argv: list[str]) -> int:
    wanted = argv[1:] or [""]
    for name, cells in NOTEBOOKS.items():
        if any(w in name for w in wanted):
            path = HERE / f"{name}.ipynb"
            nbformat.write(build(name, cells), path)
            print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
