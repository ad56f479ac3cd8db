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
# # 10 · FlashAttention across GPUs: ring attention
#
# At 512k tokens, $d = 128$ and 16 heads, one layer's $K$ and $V$ in bf16 are 4 GiB, and the causal
# attention over them is over a PFLOP: one GPU takes seconds. **Ring attention** (Liu, Zaharia, Abbeel 2023)
# shards the sequence over $P$ GPUs: each keeps its queries and passes its $K/V$ block to the next GPU,
# $P - 1$ times, until every query has met every key.
#
# 1. The merge: two partial attentions over disjoint keys make the whole one (notebook 2's online softmax,
#    one level up).
# 2. The ring, run here on CPU processes (`torch.distributed` with gloo) against one process.
# 3. Causal attention: contiguous shards leave GPUs idle; zigzag shards do not.
# 4. The traffic and the overlap, counted: when does a step's compute hide its transfer?
# 5. The GPU run and its measured scaling (`bench/ring_speed.py`).
#
# The code is `ring/` (`docs/ring-attention.md`), the counts `counting/ring.py`.

# %%
# Setup: make the workbench packages importable from wherever this notebook was opened.
import pathlib, sys
ROOT = pathlib.Path.cwd().resolve()
while not (ROOT / "variants").is_dir() and ROOT != ROOT.parent:
    ROOT = ROOT.parent
sys.path.insert(0, str(ROOT))

import json, math
import numpy as np
import torch
import matplotlib.pyplot as plt

torch.set_num_threads(1)
torch.manual_seed(0)
# %matplotlib inline

from analysis.nbtools import human, show_table
from counting import ring as counts
from counting.gpus import GPUS
from ring import merge, shard, unshard
from variants import attention_reference

# %% [markdown]
# ## 1 · The merge
#
# Split the keys into two sets $a$ and $b$. Attention over each gives a normalised output $O_a$, $O_b$ and the
# log-sum-exp of its scores $L_a$, $L_b$ (what FA2 writes beside $O$). The union's softmax normaliser is
# $e^{L_a} + e^{L_b}$, so
#
# $$L = \log(e^{L_a} + e^{L_b}), \qquad O = e^{L_a - L}\, O_a + e^{L_b - L}\, O_b .$$
#
# It is the step FA2's inner loop takes per key block, here taken per GPU. `ring.merge` computes it in float32
# with the max subtracted first, as the online softmax does.

# %%
q, k, v = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 20, 8), torch.randn(1, 1, 20, 8)
o_a, lse_a = attention_reference(q, k[..., :9, :], v[..., :9, :])   # keys 0..8
o_b, lse_b = attention_reference(q, k[..., 9:, :], v[..., 9:, :])   # keys 9..19
o, lse = torch.zeros(q.shape), torch.full(q.shape[:-1], -math.inf)   # nothing seen yet
merge(o, lse, o_a.float(), lse_a.float())
merge(o, lse, o_b.float(), lse_b.float())
o_all, lse_all = attention_reference(q, k, v)
print(f"max |O - O_all| = {(o.double() - o_all).abs().max():.1e},  max |L - L_all| = {(lse.double() - lse_all).abs().max():.1e}")

# %% [markdown]
# ## 2 · The ring
#
# Rank $r$ holds $q$, $k$, $v$ of its positions. At step $t$ it holds the $K/V$ block that started on rank
# $r - t$ (mod $P$): it posts the send of that block to rank $r + 1$ and the receive of the next from $r - 1$,
# runs its local attention on the block in hand while they travel, merges, and waits. The backward runs the
# ring again: each step's partial $dq$ stays, the block's $dk$, $dv$ travel with it and arrive home after $P$
# steps.
#
# Four processes on this CPU (`ring.launch.spawn`: gloo, a timeout on every wait), causal, $N = 61$ positions,
# both layouts of section 3; the pieces put back together against one process:

# %%
from ring.attention import _demo_rank
from ring.launch import spawn
from variants import attention

P, N = 4, 61
results = spawn(_demo_rank, P, N)   # [rank 0's, ..., rank 3's] {layout: {"o", "dq", "log"}}
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, N, 16, generator=g).requires_grad_() for _ in range(3))
o1 = attention(q, k, v, causal=True)
o1.sum().backward()
rows = []
for layout in counts.LAYOUTS:
    o = unshard([r[layout]["o"] for r in results], layout)
    dq = unshard([r[layout]["dq"] for r in results], layout)
    rows.append([layout, str(counts.sizes(N, P, layout)), f"{(o - o1).abs().max():.1e}", f"{(dq - q.grad).abs().max():.1e}"])
show_table(["layout", "positions per rank", "max |o − one process|", "max |dq − one process|"], rows)

# %% [markdown]
# ## 3 · Causal: who computes what, when
#
# Under the causal mask query $i$ sees key $j \le i$. With **contiguous** shards, rank 0 holds the first
# positions: its queries see only its own keys, so it computes at step 0 and idles after; the last rank computes
# at every step. Each step ends when its slowest rank has its next block, so the ring runs at the pace of the
# busiest rank. **Zigzag** cuts the sequence into $2P$ chunks and gives rank $r$ chunks $r$ and $2P-1-r$: one
# early, one late. Off the diagonal every rank then computes exactly half a block at every step.
#
# Each visible (query, key) pair coloured by the step that computes it (left: contiguous, right: zigzag), and each
# rank's work per step below:

# %%
def step_map(n, world, layout):
    """(n, n) array: the step at which the pair (i, j) is computed, NaN where the mask hides it."""
    m = np.full((n, n), np.nan)
    pos = [shard(torch.arange(n), r, world, layout, dim=0).tolist() for r in range(world)]
    for r in range(world):
        for t in range(world):
            for b in counts.step_blocks(n, world, layout, True, r, t):
                rows_, cols = pos[r][b.q0:b.q1], pos[counts.origin(r, t, world)][b.k0:b.k1]
                for a, i in enumerate(rows_):
                    for c, j in enumerate(cols):
                        if not b.causal or c <= a:
                            m[i, j] = t
    return m

fig, axes = plt.subplots(2, 2, figsize=(10, 8.5), gridspec_kw=dict(height_ratios=[3, 2]))
for col, layout in enumerate(counts.LAYOUTS):
    ax = axes[0, col]
    im = ax.imshow(step_map(32, 4, layout), cmap="viridis", vmin=0, vmax=3)
    ax.set_title(f"{layout}, P = 4: the step of each pair")
    ax.set_xlabel("key j"); ax.set_ylabel("query i")
    work = np.array([[counts.step_pairs(4096, 4, layout, True, r, t) for t in range(4)] for r in range(4)])
    ax = axes[1, col]
    for r in range(4):
        ax.bar(np.arange(4) + 0.2 * (r - 1.5), work[r] / 1024 ** 2, width=0.2, label=f"rank {r}")
    ax.set_xlabel("step"); ax.set_ylabel("pairs computed (Mi), N = 4096")
    ax.set_xticks(range(4))
    ax.set_title(f"imbalance {counts.imbalance(4096, 4, layout, True):.3f}")
axes[1, 1].legend(loc="upper right", fontsize=8)
fig.colorbar(im, ax=axes[0, :], shrink=0.8, label="step")
plt.show()

# %% [markdown]
# The imbalance is the ring's critical path (the busiest rank's work, step by step) over the ideal (all the work
# shared equally): contiguous tends to $(2P-1)/P$, nearly 2; zigzag is exactly 1 when $2P$ divides $N$.

# %%
show_table(["P", "contiguous", "zigzag"],
           [[str(p), f"{counts.imbalance(2 * p * 1000, p, 'contiguous', True):.3f}",
             f"{counts.imbalance(2 * p * 1000, p, 'zigzag', True):.3f}"] for p in (2, 4, 8, 16)])

# %% [markdown]
# ## 4 · The traffic and the overlap
#
# A step sends the block in hand: $2 \cdot B \cdot H_{kv} \cdot n \cdot d \cdot s$ bytes ($n$ tokens per rank,
# itemsize $s$; the backward also sends $dK$, $dV$ in float32). It computes $4 \cdot H \cdot d \cdot f n^2$ FLOPs
# ($f = 1$ for a whole block, $\tfrac12$ for the causal diagonal or a zigzag half). The send is hidden when the
# compute lasts longer:
#
# $$\frac{4 H d f n^2}{\text{rate}} \ge \frac{2 H_{kv} n d s}{\text{link}} \iff n \ge \frac{H_{kv}\, s \cdot \text{rate}}{2 f H \cdot \text{link}} .$$
#
# $d$ cancels: what matters is tokens per GPU. On an H100 (989 TFLOP/s bf16, NVLink 4 at 450 GB/s each way):

# %%
h100 = GPUS["h100"]
rate, link = h100.bf16_tensor_flops.value, h100.nvlink_bandwidth.value
show_table(["", "forward", "backward"],
           [[name, f"{counts.min_tokens_hidden(lay, c, itemsize=2, rate=rate, link=link):,.0f}",
             f"{counts.min_tokens_hidden(lay, c, itemsize=2, rate=rate, link=link, backward=True):,.0f}"]
            for name, lay, c in (("no mask", "contiguous", False), ("causal, contiguous", "contiguous", True),
                                 ("causal, zigzag", "zigzag", True))])

# %% [markdown]
# The step model (`counting.ring.overlap`: each step lasts the longer of its busiest rank's compute and its
# largest transfer) predicts the ring's speedup over one GPU, here causal, $H = 16$, $d = 128$, bf16, both at the
# H100's peak rate. Below a few thousand tokens per GPU the link sets the pace; above it, the layout does.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.5))
seqs = [2 ** e for e in range(12, 21)]
for p, mark in ((2, "o"), (4, "s"), (8, "D")):
    for layout, ls in (("contiguous", "--"), ("zigzag", "-")):
        sp = [counts.overlap(n, p, layout, True, heads=16, kv_heads=16, d=128, itemsize=2, rate=rate, link=link)["speedup"]
              for n in seqs]
        ax.plot(seqs, sp, ls, marker=mark, label=f"P = {p}, {layout}")
ax.set_xscale("log", base=2); ax.set_xlabel("sequence length N (whole)"); ax.set_ylabel("predicted speedup over one GPU")
ax.legend(fontsize=8, ncol=2); ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The same counts, as `fa-traffic report --ranks 8` prints them for the largest case:

# %%
from argparse import Namespace
from analysis import report_ring

recs = report_ring.records(Namespace(ranks=8, gpu="h100", seq_len=[[524288]], head_dim=[[128]], batch=1, heads=16,
                                     dtype="bf16", causal=True, pass_name="train"))
show_table(["layout", "pass", "sent / step", "t compute / step", "t link / step", "hidden", "imbalance", "speedup"],
           [[r["layout"], r["pass"], human(r["bytes_per_step"], binary=True), f"{r['compute_s_per_step'] * 1e3:.2f} ms",
             f"{r['transfer_s_per_step'] * 1e3:.2f} ms", "yes" if r["hidden"] else "no", f"{r['imbalance']:.3f}",
             f"{r['speedup']:.2f}"] for r in recs])

# %% [markdown]
# ## 5 · On the GPUs
#
# `bench/ring_speed.py` runs under `torchrun` on 2, 4 and 8 GPUs: it checks the ring against one GPU first (output,
# lse and gradients), then times forward and forward+backward against one GPU and against PyTorch's own context
# parallelism. The cell below plots what it measured when a run is committed (its `ring_speed.json` in a
# folder of results/ named ring2, ring4 or ring8); until then it says so.

# %%
runs = sorted((ROOT / "results").glob("ring*/ring_speed.json"))
if not runs:
    print("no GPU run committed yet: torchrun --nproc-per-node 8 bench/ring_speed.py --out $OUT, then commit $OUT as results/ring<P>/")
else:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for path in runs:
        data = json.loads(path.read_text())
        meta = data["rows"][0]
        for r in data["rows"]:
            if r.get("kind") == "time" and r.get("speedup_vs_one_gpu") and r["label"].startswith("ring") \
                    and r["causal"] and r["pass_name"] == "fwd":
                ax.scatter(r["n"], r["speedup_vs_one_gpu"], marker="o" if "zigzag" in r["label"] else "x",
                           label=f"P = {meta['world']}, {r['label']}")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=8)
    ax.set_xscale("log", base=2); ax.set_xlabel("N"); ax.set_ylabel("measured speedup over one GPU (causal forward)")
    plt.show()

# %%
# Checks for the exercises: each takes your answer and says whether it is right.
def check_merge(fn):
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 1, 5, 4, generator=g), torch.randn(1, 1, 11, 4, generator=g), torch.randn(1, 1, 11, 4, generator=g)
    a, b = attention_reference(q, k[..., :4, :], v[..., :4, :]), attention_reference(q, k[..., 4:, :], v[..., 4:, :])
    o, lse = fn(a[0], a[1], b[0], b[1])
    want = attention_reference(q, k, v)
    assert (o - want[0]).abs().max() < 1e-9 and (lse - want[1]).abs().max() < 1e-9, "not the attention over all keys"
    big = fn(a[0], a[1] + 1000.0, b[0], b[1] + 1000.0)  # e^1000 overflows: subtract the max first
    assert torch.isfinite(big[0]).all() and torch.isfinite(big[1]).all(), "overflows at lse = 1000: subtract the max"
    print("exercise 1: right")

def check_zigzag(fn):
    for n, p in ((16, 2), (29, 4), (100, 8)):
        for r in range(p):
            want = [i for a, b in counts.positions(n, p, "zigzag", r) for i in range(a, b)]
            assert list(fn(n, p, r)) == want, f"N={n}, P={p}, rank {r}: expected {want}"
    print("exercise 2: right")

def check_tokens(n):
    a100 = GPUS["a100"]
    want = counts.min_tokens_hidden("zigzag", True, itemsize=2, rate=a100.fp16_tensor_flops.value,
                                    link=a100.nvlink_bandwidth.value)
    assert abs(n - want) <= 1, f"{n} is not the zigzag causal forward's threshold on an A100 (NVLink 3)"
    print("exercise 3: right")

# %% [markdown]
# ## Exercises
#
# **1.** Write `merge2(o_a, lse_a, o_b, lse_b)` returning $(O, L)$ for the union of two key sets (section 1), safe
# when the lse are large (subtract their max first). Check: `check_merge(merge2)`.
#
# **2.** Write `zigzag(n, p, r)` returning the list of global positions rank `r` holds in the zigzag layout of
# $N = n$ over $p$ ranks, chunk $c$ of $2p$ being $[\lfloor cN/2p \rfloor, \lfloor (c+1)N/2p \rfloor)$. Check:
# `check_zigzag(zigzag)`.
#
# **3.** How many tokens per GPU does a causal zigzag ring need on A100s (312 TFLOP/s fp16, NVLink 3 at 300 GB/s
# each way) before every forward step hides its transfer? Check: `check_tokens(n)`.
#
# **4.** The backward sends the $dK$, $dV$ accumulators in float32, twice the bytes of bf16. Why not bf16?
#
# <details><summary>Solution</summary>
#
# Each block's $dK$ is a sum of $P$ partial gradients, one per rank's queries, added as it travels. Rounded to
# bf16 (8 mantissa bits) after each of the $P$ additions, the small contributions of the later ranks are lost
# in the rounding of the running sum, and the error grows with $P$, as FA2's $dQ$ accumulator would in the input
# dtype (notebook 7). The bytes are what the overlap must hide: at bf16 the float32 $dK$, $dV$ are twice the $K$,
# $V$ bytes, so a backward step carries three times a forward step's (`counting.ring.dkv_bytes`), against 2.5 times
# the FLOPs: the backward's threshold is the higher one.
#
# </details>
#
# **5.** With $N$ not a multiple of $P$ the ranks hold blocks of different sizes. Padding each block to the
# largest would also work: what would every local attention then need that it does not need now?
#
# <details><summary>Solution</summary>
#
# A mask for the padded keys (and rows to discard for the padded queries) in every local call, causal or not,
# and the padded positions' bytes on the link. With ragged chunks (`docs/ring-attention.md`) the ranks only need
# each other's sizes, which they exchange once before the ring, so each receive has the right size.
#
# </details>
