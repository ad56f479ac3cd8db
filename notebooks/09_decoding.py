# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · Decoding: where attention is predicted to be memory-bound
#
# Training and prefill attend $N$ queries to $N$ keys: $4 N^2 d$ FLOPs against $O(N d)$ bytes, and the kernels of
# notebooks 4-8 are bound by their tensor cores and exponentials, whatever the papers' count (no cache) says.
# Generation is the other regime. Each step appends one token per sequence and attends **one query** ($N_q = 1$;
# a few with speculative decoding) to everything cached: every byte of $K$ and $V$ is read for a handful of FLOPs.
#
# 1. Why FA2 starves at $N_q = 1$: $B \cdot H$ CTAs against 132 SMs.
# 2. Split-KV (FlashDecoding): cut the cache into chunks, one CTA each, and merge the partial results. The merge is
#    the online softmax's induction (notebook 2) taken one chunk at a time.
# 3. The bytes against the DRAM roofline: about $g \cdot N_q$ FLOP per byte, far left of the ridge.
#
# No decode kernel has run on a GPU yet: every time and bandwidth below is the GPU model's prediction, and the
# kernels are checked on CPU emulation only. Byte counts are in binary units (MiB, GiB), as `fa-traffic` prints them.
# 4. Paged caches: a block table maps each sequence's positions to pages.
# 5. Grouped-query attention: the $g$ query heads of a kv head share one read of its cache.
#
# The reference is `variants/split_kv.py` (the fifth variant), its contract and counts `counting/decode.py`, the
# split rule `counting/split_rule.py`, the GPU model of the decode kernels `gpumodel/decode_model.py`; the whole
# story is `docs/decoding.md`. Everything here runs on a CPU. Notation: $L$ (and $L_s$) is a log-sum-exp,
# as in FA2 and notebook 10; a sequence's cache length is $L_b$, the longest $L_{max}$; $g = H / H_{kv}$ is the GQA group.

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

torch.set_num_threads(1)
torch.manual_seed(0)
# %matplotlib inline

from analysis.nbtools import human, show_table
from counting import closed_forms as cf
from counting.gpus import GPUS
from counting import split_rule
from counting.memory import Memory
from gpumodel import decode_model
from variants import VARIANTS, decode_reference

split_kv = VARIANTS["split_kv"]

# %% [markdown]
# ## 1 · Why FA2 starves at $N_q = 1$
#
# FA2's grid is one CTA per (Q block, batch, head): $T_r \cdot B \cdot H$ CTAs. At $N_q = 1$, $T_r = 1$. With
# grouped-query attention the $g = H / H_{kv}$ query heads of a kv head are packed into one tile (section 5), so a
# decode step of a model with 8 kv heads launches $8B$ CTAs, each streaming its sequence's whole cache from DRAM:
# at $B = 1$ that is 8 CTAs on 132 SMs. A CTA keeps only its own $K/V$ tiles in flight, so the DRAM's bandwidth is
# out of reach, whatever the kernel.
#
# The GPU model of the decode kernel (`gpumodel/decode_model.py`) prices exactly that. The CTAs run in waves of the
# resident slots (two per SM); a wave of $n$ CTAs pulls the DRAM's read rate or $n$ times what one CTA keeps in flight
# over its round trip (Little's law: two $K/V$ tiles loading while one computes, over the DRAM latency and the
# kernel's own time per round), whichever is less; a fixed time per call comes on top. Its constants were fitted on
# the fp16 $d = 128$ cells of an H100 timing of the kernels (`results/decode_speed/`) and checked on the bf16 and
# $d = 64$ cells it was not fitted to (`results/decode_model_h100.json`: 33 of 35 held-out cells of `split_kv_fast`
# within ±15%, the two others timing outliers). Here on the H200 (its 4.3 TB/s copy rate, the read stream at the
# fitted 1.10 times it), a 128k-token cache, $d = 128$, 64 query heads on 8 kv heads (bf16), one split against the
# split rule of section 2, as the model predicts them:

# %%
desc = decode_model.describe("split_kv_fast", 128, "bf16")
rows = []
for b in (1, 4, 16, 64):
    one = decode_model.predict(desc, b, 64, 1, 131072, 128, "bf16", kv_heads=8, num_splits=1)
    split = decode_model.predict(desc, b, 64, 1, 131072, 128, "bf16", kv_heads=8)
    s = split.build.split("S=")[1].rstrip("]")
    rows.append([str(b), str(one.ctas), human(one.dram_bytes, binary=True), f"{one.time_s * 1e6:,.0f} µs",
                 f"{one.dram_bytes / one.time_s / 1e12:.2f} TB/s", s, str(split.ctas),
                 f"{split.time_s * 1e6:,.0f} µs", f"{split.dram_bytes / split.time_s / 1e12:.2f} TB/s"])
show_table(["B", "CTAs (S = 1)", "DRAM bytes", "predicted time, S = 1", "predicted TB/s", "S (rule)", "CTAs",
            "predicted time, split", "predicted TB/s"], rows)

# %% [markdown]
# Unsplit, the model's time at $B = 1$ is the cache over what 8 CTAs keep in flight: a twentieth of the DRAM's
# bandwidth. Split, $B = 1$ comes within 17% of the read rate (the fixed time of a 137 µs call) and $B = 64$, one
# split, reaches it. $B = 4$ and $B = 16$ do not: the rule asks for $2 \cdot 132$ CTAs and rounds up to 288 and 384,
# more than the 264 slots, so a second wave of 24 (120) CTAs streams its splits alone, latency-bound. The H100 run measured the same tail at $B = 8$ (320 CTAs): 80-92% of
# the copy rate at caches of 32k-256k where cuDNN's kernel reached 94-106%. (What no kernel can be is faster
# than the bytes over the bandwidth.)
#
# ## 2 · The split and the merge
#
# Split-KV cuts each cache into $S$ chunks of whole $K/V$ blocks and gives each (Q block, chunk) its own CTA. Split
# $s$ runs FA2's inner loop (FA2 Alg. 1 lines 6-10) over its chunk and ends with FA2 Alg. 1 lines 12-13: a
# normalised partial output and its log-sum-exp,
#
# $$o_s = \frac{1}{\ell_s} \sum_{t \in s} e^{x_t - m_s} v_t, \qquad L_s = m_s + \log \ell_s,
# \qquad \ell_s = \sum_{t \in s} e^{x_t - m_s},$$
#
# where $x_t$ is the row's score of position $t$. So $e^{L_s} = \sum_{t \in s} e^{x_t}$ and
# $e^{L_s} o_s = \sum_{t \in s} e^{x_t} v_t$. The chunks partition the row, hence
#
# $$L = \log \sum_s e^{L_s}, \qquad o = \frac{\sum_t e^{x_t} v_t}{\sum_t e^{x_t}} = \sum_s e^{L_s - L}\, o_s .$$
#
# With $m = \max_s L_s$ subtracted before the exponentials, this is FA2 Alg. 1 lines 9-10 (rescale the old state by
# $e^{m_{old} - m_{new}}$, add the new) with a chunk's $(m_s, \ell_s, o_s)$ in place of one key block's: the online
# softmax's induction, taken once per chunk. The sum is associative, so the chunks can be merged in any order, the
# point of issue #941's argument in notebook 5. An empty chunk has $L_s = -\infty$ and weight 0. It is the merge of
# notebook 10 §1 (ring attention: the same merge, across GPUs), taken over $S$ parts instead of two.
#
# The reference, every split count against the float64 oracle, on a paged cache with per-sequence lengths (one empty,
# one of a single token), causal, $N_q = 3$ queries (speculative decoding), $g = 4$:

# %%
gen = torch.Generator().manual_seed(1)
B, H, H_kv, Nq, d, page = 3, 8, 2, 3, 16, 4
lengths = torch.tensor([0, 1, 45], dtype=torch.int32)
num_pages = 16
k_pages = torch.randn(num_pages, H_kv, page, d, generator=gen)
v_pages = torch.randn(num_pages, H_kv, page, d, generator=gen)
perm = torch.randperm(num_pages, generator=gen)
block_table = torch.full((B, 12), -1, dtype=torch.int32)  # -1: padding, never read
block_table[1, 0] = perm[0]                               # one token: one page
block_table[2, :] = perm[1:13]                            # 45 tokens: 12 pages, scattered
q = torch.randn(B, H, Nq, d, generator=gen)
ref_o, ref_lse = decode_reference(q, k_pages, v_pages, causal=True, cache_seqlens=lengths, block_table=block_table)
rows = []
for S in (1, 2, 3, 5, 12):
    o, lse = split_kv.forward(q, k_pages, v_pages, causal=True, cache_seqlens=lengths, block_table=block_table,
                              num_splits=S, block_q=16, block_k=4)
    seen = torch.isfinite(ref_lse)
    rows.append([str(S), f"{(o.double() - ref_o).abs().max():.1e}", f"{(lse.double() - ref_lse)[seen].abs().max():.1e}",
                 str(int((~seen).sum())), "yes" if (o[~seen] == 0).all() and torch.isneginf(lse[~seen]).all() else "no"])
show_table(["S asked", "max |o − oracle|", "max |lse − oracle|", "rows that see nothing", "o = 0, lse = −∞ there"], rows)

# %% [markdown]
# The merge by hand, next to the online softmax: one row, 40 scores cut into chunks of 8. Tree-merging the chunks'
# $(o_s, L_s)$ and folding them in one at a time with the online softmax's rescale give the same $(o, L)$ as the
# softmax over the whole row:

# %%
x = torch.randn(40, dtype=torch.float64) * 3
vals = torch.randn(40, 5, dtype=torch.float64)
parts = []
for c0 in range(0, 40, 8):
    xs = x[c0:c0 + 8]
    m_s = xs.max()
    l_s = torch.exp(xs - m_s).sum()
    parts.append(((torch.exp(xs - m_s) @ vals[c0:c0 + 8]) / l_s, m_s + torch.log(l_s)))
L_parts = torch.stack([L for _, L in parts])
L = torch.logsumexp(L_parts, 0)
o_tree = sum(torch.exp(L_s - L) * o_s for o_s, L_s in parts)
# the online softmax's induction (FA2 Alg. 1 lines 9-10), one chunk per step
m, l, acc = -math.inf, 0.0, torch.zeros(5, dtype=torch.float64)
for o_s, L_s in parts:
    m_new = max(m, L_s.item())
    alpha = math.exp(m - m_new) if m > -math.inf else 0.0
    l, acc, m = alpha * l + math.exp(L_s.item() - m_new), alpha * acc + math.exp(L_s.item() - m_new) * o_s, m_new
o_online = acc / l
o_full = torch.softmax(x, 0) @ vals
print(f"tree merge  vs softmax: {(o_tree - o_full).abs().max():.1e};  L = {L.item():.6f}, logsumexp(x) = {torch.logsumexp(x, 0).item():.6f}")
print(f"online fold vs softmax: {(o_online - o_full).abs().max():.1e};  L = {m + math.log(l):.6f}")

# %% [markdown]
# **How many splits.** More splits fill more SMs but add partials: each split writes $g N_q \cdot (d + 1)$ float32
# per kv head and the merge reads them back. The rule (`counting/split_rule.py`: `num_splits`, `chunk_len`,
# `used_splits`, the one the reference, the report and the kernels call): unsplit there are
# $B \cdot H_{kv} \cdot \lceil g N_q / B_r \rceil$ CTAs; take $S = \lceil 2 \cdot 132 / \text{CTAs} \rceil$ (two CTAs
# per SM where the shared memory allows it, so each SM has a second CTA's loads in flight while one computes:
# `split_kv_fast` fits two at $d \le 128$, only one at $d = 256$, where the $2 \cdot 132$ CTAs run in two waves), at
# most one split per $K/V$ block of the longest cache, and $S = 1$ when the grid already fills the GPU (training
# shapes, where split_kv is FA2 over the cache). A chunk is whole blocks and whole pages: $\lceil L_{max}/S \rceil$
# rounded up to a multiple of $\operatorname{lcm}(B_c, \text{page size})$.

# %%
rows = []
for b, hk, gq, nq, L_max in ((1, 8, 8, 1, 131072), (4, 8, 8, 1, 131072), (32, 8, 8, 1, 8192), (1, 8, 8, 4, 131072),
                             (16, 32, 1, 4096, 4096)):
    tiles = math.ceil(gq * nq / 16)  # packed row tiles of Br = 16
    S = split_rule.num_splits(b, hk, tiles, L_max, 64)
    chunk = split_rule.chunk_len(L_max, S, 64, 256)
    rows.append([str(b), str(hk), str(gq), str(nq), f"{L_max:,}", str(b * hk * tiles), str(S), f"{chunk:,}",
                 str(split_rule.used_splits(L_max, chunk))])
show_table(["B", "H_kv", "g", "Nq", "L_max", "CTAs unsplit (Br = 16)", "S", "chunk (Bc = 64, pages of 256)",
            "splits run"], rows)

# %% [markdown]
# ## 3 · The bytes against the roofline
#
# Per kv head and cached position the kernel reads $2d$ elements of $K$ and $V$ and computes, for each of its
# $g N_q$ rows, $4d$ FLOPs of the two products. The arithmetic intensity is
#
# $$I = \frac{4 d \cdot g N_q}{2 d \cdot \text{itemsize}} = \frac{2 g N_q}{\text{itemsize}} \;=\; g N_q
# \ \text{FLOP/byte in fp16/bf16},$$
#
# against a ridge of $788 / 4.3 \approx 183$ FLOP/byte on the H200 (measured bf16 matmul rate over measured
# DRAM bandwidth). Even $g = 8$ with 4 speculative queries is at 32. Split-KV decoding is predicted to be
# memory-bound, by this intensity against the measured rates and by the GPU model, not only by the papers' count (no
# cache): the cache is read once and is far larger than the 60 MB L2 (the H100 run of `bench/decode_speed.py`,
# `results/decode_speed/`, measured `split_kv_fast` at 104-106% of the device copy's rate at B = 64 with caches of 32k-256k, 92-98% at
# B = 1 with a 256k cache: a read stream outruns a copy). The
# closed form's counts (`counting.closed_forms.counts("split_kv", ...)`), which include the partials, say the same:

# %%
h200 = GPUS["h200"]
ridge = h200.value("bf16_tensor_flops", "measured") / h200.value("hbm_bandwidth", "measured")
fig, ax = plt.subplots(figsize=(7.5, 4.2))
for hk, marker in ((8, "o"), (1, "s")):
    pts = []
    for gq in (1, 2, 4, 8, 16, 32, 64):
        H = hk * gq if hk > 1 else gq
        for nq in (1, 4):
            tr = cf.counts("split_kv", 1, H, nq, 32768, 128, dtype="bf16", block_q=64, block_k=64, kv_heads=hk,
                           page_size=256)
            pts.append((gq * nq, tr.flops["matmul"] / tr.hbm_bytes))
    pts.sort()
    ax.plot(*zip(*pts), marker=marker, ls="", label=f"split_kv, H_kv = {hk} (each point: g·Nq)")
xs = np.array([1, 512])
ax.plot(xs, xs, color="grey", lw=0.8, label="I = g·Nq")
ax.axhline(ridge, color="tab:red", ls="--", label=f"H200 ridge {ridge:.0f} FLOP/B (measured)")
ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
ax.set_xlabel("g · Nq (query rows per kv head)"); ax.set_ylabel("matmul FLOP per HBM byte")
ax.legend(fontsize=8); ax.set_title("decode intensity: 32k-token cache, d = 128, bf16")
plt.show()

# %% [markdown]
# The points sit on $I = g N_q$ (the partials and $Q$ are under 1% of the bytes there) while the $g N_q$ packed rows
# fit one Q block ($B_r = 64$ here). Past it each Q block reads the cache again, and $I$ stays near $B_r$ (lower with
# one kv head, whose many splits add $Q$ reads and partials): the ridge is out of reach unless a kernel's tile grows
# with $g N_q$. The whole report for one decode step (64 query heads on 8 kv heads, a 128k cache in pages of 256),
# from the command line:

# %%
from analysis.cli import main
main(["report", "--seq-len", "1", "--seq-len-k", "131072", "--head-dim", "128", "--heads", "64", "--batch", "1",
      "--kv-heads", "8", "--page-size", "256", "--variant", "fa2,split_kv", "--dtype", "bf16"])

# %% [markdown]
# The fa2 row reads $K$ and $V$ for all 64 heads (it takes no kv heads): 8 times split_kv's bytes. Its time is
# **not** section 1's story: its GPU model is the training-shape one, fitted where hundreds of CTAs fill the GPU, and
# it prices $B \cdot H \cdot \lceil N_q / B_r \rceil = 64$ CTAs on 132 SMs with no cap on the bytes so few CTAs keep in
# flight, so its DRAM-bound figure is an optimistic bound (the report's last lines say so), not a prediction of the
# starved grid. The split_kv row is `split_kv_fast` (tensor cores, 16 packed rows per CTA), predicted DRAM-bound.
#
# ## 4 · Paged caches
#
# A serving system does not know how long each sequence will grow, so it hands out the cache in fixed pages
# (vLLM's PagedAttention): sequence $b$'s position $t$ lives in physical page `block_table[b, t // page_size]` at
# offset `t % page_size`. Pages of one sequence can be anywhere; unused entries past a sequence's pages are never
# read. The kernels gather each row of a $K/V$ tile through the table (any page size); the bytes are the same as a
# contiguous cache's (checked below). The split rule also makes a chunk whole pages, so no split starts mid-page
# (exercise 5 asks why).

# %%
fig, ax = plt.subplots(figsize=(8, 2.6))
cmap = plt.get_cmap("tab10")
for b in range(B):
    used = math.ceil(int(lengths[b]) / page)
    for p in range(block_table.shape[1]):
        phys = int(block_table[b, p])
        color = cmap(b) if p < used else "white"
        ax.add_patch(plt.Rectangle((p, B - 1 - b), 0.95, 0.9, color=color, ec="grey", lw=0.5))
        ax.text(p + 0.47, B - 1 - b + 0.45, str(phys) if p < used else "·", ha="center", va="center", fontsize=8)
ax.set_xlim(0, block_table.shape[1]); ax.set_ylim(0, B)
ax.set_yticks([B - 0.55 - b for b in range(B)], [f"seq {b}: L_b = {int(lengths[b])}" for b in range(B)])
ax.set_xticks([p + 0.47 for p in range(block_table.shape[1])], [f"{p * page}.." for p in range(block_table.shape[1])],
              fontsize=7)
ax.set_xlabel(f"logical page (first position; page_size = {page}); the number in a cell is its physical page")
ax.set_title("block_table: coloured entries are read, '·' entries are padding")
plt.show()

contig_k = torch.zeros(B, H_kv, 48, d)
contig_v = torch.zeros(B, H_kv, 48, d)
for b in range(B):
    for t in range(int(lengths[b])):
        contig_k[b, :, t] = k_pages[block_table[b, t // page], :, t % page]
        contig_v[b, :, t] = v_pages[block_table[b, t // page], :, t % page]
m_paged, m_contig = Memory(), Memory()
o_p, _ = split_kv.forward(q, k_pages, v_pages, cache_seqlens=lengths, block_table=block_table, num_splits=3,
                          block_q=16, block_k=4, mem=m_paged)
o_c, _ = split_kv.forward(q, contig_k, contig_v, cache_seqlens=lengths, num_splits=3, block_q=16, block_k=4,
                          mem=m_contig)
print(f"paged vs contiguous: max |Δo| = {(o_p - o_c).abs().max():.1e}; K, V bytes read "
      f"{m_paged.counts.read_bytes['K'] + m_paged.counts.read_bytes['V']} vs "
      f"{m_contig.counts.read_bytes['K'] + m_contig.counts.read_bytes['V']}")

# %% [markdown]
# ## 5 · Grouped-query attention: one read for $g$ heads
#
# With $H = 64$ query heads on $H_{kv} = 8$ kv heads, the 8 query heads of a kv head read the same $K$, $V$. Packed
# into one tile of $g \cdot N_q$ rows (row $h N_q + i$), a block of $K$ and $V$ is loaded once and multiplied by all
# $g$ heads' queries: the cache is read once per kv head. Expanding $K$, $V$ to 64 heads first (what a kernel without
# GQA needs) reads it $g$ times. The counted bytes, reference against reference:

# %%
gq, hk, L_b = 8, 2, 96  # g query heads per kv head, kv heads, cache length
q8 = torch.randn(1, gq * hk, 1, 32)
k8, v8 = torch.randn(1, hk, L_b, 32), torch.randn(1, hk, L_b, 32)
packed, expanded = Memory(), Memory()
o_pk, _ = split_kv.forward(q8, k8, v8, num_splits=2, block_q=16, block_k=16, mem=packed)
o_ex, _ = split_kv.forward(q8, k8.repeat_interleave(gq, 1), v8.repeat_interleave(gq, 1), num_splits=2, block_q=16,
                           block_k=16, mem=expanded)
hb = lambda n: human(n, binary=True)  # noqa: E731
show_table(["layout", "K + V bytes read", "Q bytes read", "partials written", "max |o − packed o|"],
           [[f"packed, H_kv = {hk}", hb(packed.counts.read_bytes["K"] + packed.counts.read_bytes["V"]),
             hb(packed.counts.read_bytes["Q"]), hb(packed.counts.write_bytes["O_split"]), "0"],
            [f"expanded to H = {gq * hk}", hb(expanded.counts.read_bytes["K"] + expanded.counts.read_bytes["V"]),
             hb(expanded.counts.read_bytes["Q"]), hb(expanded.counts.write_bytes["O_split"]),
             f"{(o_ex - o_pk).abs().max():.1e}"]])

# %%
# Checks for the exercises: each takes your answer and says whether it is right.
def check_merge(fn):
    from variants import attention_reference
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 3, 4, generator=gen), torch.randn(1, 2, 17, 4, generator=gen),
               torch.randn(1, 2, 17, 4, generator=gen))
    cuts = [(0, 5), (5, 6), (6, 17)]
    parts = [attention_reference(q, k[..., a:b, :], v[..., a:b, :]) for a, b in cuts]
    o, lse = fn(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]))
    want = attention_reference(q, k, v)
    assert (o - want[0]).abs().max() < 1e-9, "o is not the attention over all 17 positions: weight o_s by e^(L_s - L)"
    assert (lse - want[1]).abs().max() < 1e-9, "lse is not log Σ_s e^(L_s)"
    big = fn(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]) + 1000.0)
    assert torch.isfinite(big[0]).all() and torch.isfinite(big[1]).all(), "overflows at L_s = 1000: subtract max_s L_s first"
    empty = fn(torch.zeros(2, 1, 1, 1, 4, dtype=torch.float64), torch.full((2, 1, 1, 1), -math.inf, dtype=torch.float64))
    assert (empty[0] == 0).all() and torch.isneginf(empty[1]).all(), \
        "a row whose every split is empty must give o = 0, lse = -inf (no NaN): guard the all -inf max"
    print("exercise 1: right")

def check_splits(fn):
    from counting import split_rule  # the function section 2 calls
    for b, hk, tiles, n, bc in ((1, 8, 1, 131072, 64), (4, 8, 1, 131072, 128), (64, 8, 1, 4096, 64),
                                (1, 1, 1, 100, 64), (3, 5, 2, 0, 32), (16, 32, 256, 4096, 64)):
        want = split_rule.num_splits(b, hk, tiles, n, bc)
        got = fn(b, hk, tiles, n, bc)
        assert got == want, f"B={b}, H_kv={hk}, row tiles {tiles}, L_max={n}, Bc={bc}: {want} splits, not {got}"
    print("exercise 2: right")

def check_kv_bytes(n):
    want = 2 * 4 * 8 * 32768 * 128 * 2
    assert n != 2 * 4 * 64 * 32768 * 128 * 2, "that reads K and V once per query head: GQA reads them once per kv head"
    assert n == want, f"{human(n, binary=True)} is not the K and V bytes of that step ({human(want, binary=True)})"
    print(f"exercise 3: right ({human(n, binary=True)}: {n / 4.3e12 * 1e6:.0f} µs at 4.3 TB/s, the step's floor)")

# %% [markdown]
# ## Exercises
#
# **1.** Write `merge(o_parts, lse_parts)` taking the $S$ partials stacked on a first dimension (o: (S, ..., d),
# lse: (S, ...)) and returning $(o, L)$ over the union of the chunks (section 2), safe when the $L_s$ are large, and
# giving $o = 0$, $L = -\infty$ for a row whose every split is empty. Check: `check_merge(merge)`.
#
# **2.** Write `splits(b, h_kv, row_tiles, l_max, block_k)`: the split rule of section 2 for an H100/H200 (132 SMs),
# the signature of `split_rule.num_splits` that section 2 calls. Check: `check_splits(splits)`.
#
# **3.** A decode step of a 70B-class model: $B = 4$ sequences with 32k cached tokens each, $H = 64$ query heads on
# $H_{kv} = 8$ kv heads, $d = 128$, bf16. How many bytes of $K$ and $V$ must one layer's attention read? Check:
# `check_kv_bytes(n)`.
#
# **4.** At what $g \cdot N_q$ does decoding reach the H200's ridge, and what would it take to get there?
#
# <details><summary>Solution</summary>
#
# On paper, $I = g N_q$ FLOP/byte in bf16 and the ridge is about 183 (788 TFLOP/s over 4.3 TB/s, both measured), so
# $g N_q \approx 183$: e.g. $g = 8$ with 23 speculative queries. But section 3's caveat decides it: $I = g N_q$ holds only
# while the packed rows fit one Q block, since each Q block reads the cache again, so $I \approx \min(g N_q, B_r)$. At
# $g N_q = 184$, `split_kv_fast`'s 16-row tiles are 12 tiles each reading the cache ($I \approx 15$), the reference's
# $B_r = 64$ three ($I \approx 61$): neither is near the ridge. Getting there takes a different kernel, one whose tile
# holds about 183 packed rows against one read of each $K/V$ block (several warpgroups sharing a $K/V$ tile, as
# prefill kernels' tall Q blocks do), and that many query rows per kv head: many speculative queries, or a batch's
# shared prefix read once for many sequences (the same packing as GQA, across sequences). Short of that, a faster
# decode step comes from fewer bytes: a smaller cache dtype (fp8 $K$, $V$ halves the bytes and doubles $I$), fewer kv
# heads, or fewer positions read.
#
# </details>
#
# **5.** The split rule makes every chunk a multiple of the page size. Does `split_kv_fast` need that, and what does
# the alignment cost?
#
# <details><summary>Solution</summary>
#
# It does not: `split_kv_fast` gathers each row of a $K/V$ tile through `block_table` (any page size), so a chunk
# that starts mid-page would cost it no extra bytes: two splits would read disjoint rows of that page. The alignment is
# a design choice for kernels that load whole pages at a time (a TMA or page-tile copy, one descriptor per page):
# there, a chunk starting mid-page makes two splits load the same page (its bytes read twice) or needs a masked
# partial page at the chunk's start as well as at the cache's end. Its cost is split granularity: the chunk's unit is
# $\operatorname{lcm}(B_c, \text{page size})$, e.g. $\operatorname{lcm}(64, 48) = 192$ positions, so $\lceil L_{max}/S
# \rceil$ rounds up further and a short cache may run fewer splits than the rule asked for. With pages of a multiple of
# $B_c$ (256 here) the unit is the page, and $K$, $V$ are still read once (section 4's counts).
#
# </details>
