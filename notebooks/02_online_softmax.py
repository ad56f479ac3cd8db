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
# # 2 · Online softmax: the running max and normaliser
#
# FlashAttention never holds a whole row of scores. It sees the scores of one row **block by block**
# and still produces the exact softmax. This notebook derives how, checks every step numerically, and
# shows why the maximum that it carries along is not optional.
#
# 1. What goes wrong without the max: `exp` overflows (fp32 at scores ≈ 89, fp16 at ≈ 11).
# 2. The online softmax: a running max $m$ and normaliser $\ell$, proved by induction over blocks.
# 3. Merging block statistics — the induction argument of issue
#    [#941](https://github.com/Dao-AILab/flash-attention/issues/941) — and why any merge order works.
# 4. Carrying the output along: the step FlashAttention adds on top, and where it lives in `variants/`.

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
# ## 1 · What goes wrong without the max
#
# Softmax is $\mathrm{softmax}(x)_i = e^{x_i} / \sum_j e^{x_j}$. Written like that, a single large score
# overflows `exp` to `inf`, and `inf / inf` is `NaN`. Every practical implementation uses the identity
#
# $$\mathrm{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \qquad m = \max_j x_j,$$
#
# which is exact for any $m$ and, for $m = \max x$, keeps every exponent $\le 0$: each term is in
# $(0, 1]$ and the sum is in $[1, n]$. Where does plain `exp` give up in each dtype?

# %%
rows = []
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    limit = math.log(torch.finfo(dtype).max)  # exp(x) overflows for x above this
    just_below = torch.exp(torch.tensor(limit - 0.05, dtype=dtype))
    just_above = torch.exp(torch.tensor(limit + 0.5, dtype=dtype))
    rows.append([str(dtype).replace("torch.", ""), f"{torch.finfo(dtype).max:.4g}", f"{limit:.2f}",
                 f"{just_below.item():.4g}", just_above.item()])
show_table(["dtype", "largest finite", "exp overflows above", "exp(limit - 0.05)", "exp(limit + 0.5)"], rows)

# %% [markdown]
# Attention scores $s = q\cdot k/\sqrt d$ are not bounded: with large activations (or a large
# `scale`) they reach $10^4$. The cell below builds one query row whose scores are about $10^4$, and
# compares a softmax **without** the max to one **with** it.

# %%
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

# %% [markdown]
# The workbench's references all carry the max, so they survive such scores. Below, $q$ and $k$ are
# scaled so the scores are of order $10^4$; a softmax without the max turns the whole output into
# `NaN`, while FlashAttention-2 from `variants` agrees with the float64 oracle
# `variants.attention_reference`. (Note that `naive` in this workbench means *materialised* — S and P
# written to HBM — not *unsafe*: it uses the max too.)

# %%
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

# %% [markdown]
# ## 2 · The online softmax
#
# Split one row of scores into blocks $x^{(1)}, x^{(2)}, \dots, x^{(T)}$ that arrive one at a time
# (the key blocks $K_1, K_2, \dots$). Keep two numbers per row: a **running max** and a **running
# normaliser**, updated as each block arrives:
#
# $$m^{(j)} = \max\bigl(m^{(j-1)},\ \max x^{(j)}\bigr), \qquad
# \ell^{(j)} = e^{\,m^{(j-1)} - m^{(j)}}\,\ell^{(j-1)} + \sum_i e^{\,x^{(j)}_i - m^{(j)}},$$
#
# starting from $m^{(0)} = -\infty$, $\ell^{(0)} = 0$.
#
# **Claim.** After block $j$, $m^{(j)}$ is the max of everything seen so far and
# $\ell^{(j)} = \sum_{k \le j} \sum_i e^{\,x^{(k)}_i - m^{(j)}}$ — the normaliser of the safe softmax of
# the first $j$ blocks.
#
# **Proof by induction.** For $j = 1$: $e^{-\infty}\cdot 0 = 0$, so $\ell^{(1)} = \sum_i e^{x^{(1)}_i - m^{(1)}}$. ✓
# Assume the claim for $j-1$. The max part is immediate. For $\ell$:
#
# $$e^{\,m^{(j-1)} - m^{(j)}}\,\ell^{(j-1)}
# = e^{\,m^{(j-1)} - m^{(j)}} \sum_{k<j}\sum_i e^{\,x^{(k)}_i - m^{(j-1)}}
# = \sum_{k<j}\sum_i e^{\,x^{(k)}_i - m^{(j)}},$$
#
# and adding the new block's terms gives the claim for $j$. ∎ Every exponent is $\le 0$ throughout:
# nothing overflows, whatever the scores. At the end $\ell^{(T)} = \sum_i e^{x_i - m}$ and
# $m^{(T)} + \log \ell^{(T)} = \log\sum_i e^{x_i}$ is the **log-sum-exp** (FlashAttention-2 stores it).

# %%
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

# %% [markdown]
# **The same statistics, read off the package's FA2 reference.** Feed `variants/fa2.py` this very row as
# scores (one query $q = 1$, keys $k = x$, head dim 1, scale 1, key blocks of 8) through a `Memory` that
# notes what the reference computes: each $m^{(j)}$ (the value right after its `rowmax`), the rescale
# factor $e^{m^{(j-1)} - m^{(j)}}$ (its `exp` of one number per row, `alpha`), and each $\ell^{(j)}$ (the
# value right after its `rowsum`). The factor is $0$ at the first block ($m^{(0)} = -\infty$), $1$ where
# a block brings no new max, and below 1 where the max jumps: the old $\ell$ (and $O$) shrink to the new
# reference point. Rescaled to the final max, $\ell^{(j)} e^{m^{(j)} - m^{(T)}}$ only grows, and ends on
# the full softmax's normaliser.

# %%
from counting.memory import Memory


class Watch(Memory):
    # A Memory that also keeps the running statistics the reference computes, in order.
    def __init__(self):
        super().__init__()
        self.m, self.l, self.alpha, self._after = [], [], [], None

    def rowmax(self, x):
        self._after = "m"
        return super().rowmax(x)

    def rowsum(self, x):
        self._after = "l"
        return super().rowsum(x)

    def ew(self, x):
        if self._after:  # the ew right after rowmax is m_new; right after rowsum, the new l
            getattr(self, self._after).append(x.item())
            self._after = None
        return super().ew(x)

    def exp(self, x):
        if x.shape[-1] == 1 and x.numel() == 1:  # alpha = e^(m_old - m_new): one number per row
            self.alpha.append(torch.exp(x).item())
        return super().exp(x)


watch = Watch()
o_row, lse_row = VARIANTS["fa2"].forward(torch.ones(1, 1, 1, 1, dtype=torch.float64), x.view(1, 1, -1, 1),
                                         torch.randn(1, 1, x.numel(), 1, dtype=torch.float64),
                                         scale=1.0, block_q=1, block_k=8, mem=watch)
ms, ls, alphas = np.array(watch.m), np.array(watch.l), np.array(watch.alpha)
m_full, l_full = x.max().item(), torch.exp(x - x.max()).sum().item()
assert math.isclose(ms[-1], m_full) and math.isclose(ls[-1], l_full, rel_tol=1e-12)
assert np.allclose(np.exp(x.numpy() - ms[-1]) / ls[-1], torch.softmax(x, 0).numpy(), rtol=1e-12)

steps = np.arange(1, len(ms) + 1)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
ax = axes[0]
ax.plot(np.arange(len(x)) / 8 + 0.5 + 1 / 16, x.numpy(), ".", color="grey", label="scores $x$")
ax.step(np.r_[steps - 0.5, steps[-1] + 0.5], np.r_[ms, ms[-1]], where="post", color="tab:blue",
        label="running max $m^{(j)}$")
ax.axhline(m_full, color="black", ls=":", lw=1, label="max of the whole row")
ax.set_title("the running max")
ax = axes[1]
ax.plot(steps, ls, "o-", color="tab:orange", label=r"$\ell^{(j)}$ (relative to $m^{(j)}$)")
ax.plot(steps, ls * np.exp(ms - ms[-1]), "s--", color="tab:green",
        label=r"$\ell^{(j)} e^{m^{(j)} - m^{(T)}}$ (relative to the final max)")
ax.axhline(l_full, color="black", ls=":", lw=1, label=r"full softmax: $\sum_i e^{x_i - \max x}$")
ax.set_title(r"the running normaliser $\ell$")
ax = axes[2]
ax.bar(steps, alphas, color=["tab:red" if a < 1 else "tab:gray" for a in alphas])
for s_, a in zip(steps, alphas):
    ax.text(s_, a + 0.02, f"{a:.2g}", ha="center", fontsize=8)
ax.set_ylim(0, 1.15)
ax.set_title(r"rescale factor $e^{m^{(j-1)} - m^{(j)}}$ (red: the max moved)")
for ax in axes:
    ax.set_xlabel("key block j")
    ax.set_xticks(steps)
for ax in axes[:2]:
    ax.legend(fontsize=7)
fig.suptitle("One row, block by block, as variants/fa2.py computes it: the last block's $m$ and $\\ell$ are the full softmax's")
fig.tight_layout()
plt.show()
print(f"final m = {ms[-1]:.6f} (max x = {m_full:.6f});  final ℓ = {ls[-1]:.9f} (Σ e^(x − max) = {l_full:.9f})")


# %% [markdown]
# ## 3 · Merging block statistics: the induction argument of issue #941
#
# Issue [#941](https://github.com/Dao-AILab/flash-attention/issues/941) ("Fewer matrix
# multiplications, same results") derives the same recurrence in a slightly different form, "by
# induction": each block first computes **local** statistics — its own max $m_\text{local}$, its
# exponentials $f_j = e^{x^{(j)} - m_\text{local}}$ and their sum $\ell_\text{local}$ — and these are then
# **merged** into the running ones:
#
# $$m_\text{new} = \max(m_i, m_\text{local}), \qquad
# \ell_\text{new} = e^{\,m_i - m_\text{new}}\,\ell_i + e^{\,m_\text{local} - m_\text{new}}\,\ell_\text{local}.$$
#
# The issue keeps the exponentials themselves (its `f` row, the un-normalised probabilities) and
# rescales **every earlier block** by $e^{m_i - m_\text{new}}$ and the new one by
# $e^{m_\text{local} - m_\text{new}}$ (the issue's code:
# `fi_BLOCK[k] = fi_BLOCK[k] * torch.exp(mi - mi_new)` for `k < j`). The induction hypothesis is now
# "after block $j$, $f_k = e^{x^{(k)} - m^{(j)}}$ for every $k \le j$ and $\ell = \sum_k \sum f_k$"; the step
# is the same one-line computation as above. At the end $f/\ell$ **is** the softmax row, which the issue
# multiplies by $V$ once (notebook 5 counts what that costs).
#
# Below: the issue's merge, run on a row, against `torch.softmax`.

# %%
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

# %% [markdown]
# **Why any order works.** `merge` is the combination rule of the pairs $(m, \ell)$, and it is
# **associative and commutative**: both sides of $(a \oplus b) \oplus c = a \oplus (b \oplus c)$ equal
# $\bigl(\max(m_a,m_b,m_c),\ \sum e^{m - \max}\ell\bigr)$. So blocks can be merged left to right
# (FlashAttention), in a tree, or by different thread blocks that each handle a slice of the keys and
# combine at the end (split-KV / "flash-decoding"). The check below merges the same blocks in random
# orders and as a balanced tree.

# %%
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

# %% [markdown]
# ## 4 · Carrying the output along
#
# FlashAttention goes one step further than the issue: instead of keeping the exponentials, it keeps
# only the running **output** $O = \sum_k f_k V_k$, which is rescaled with the same factor:
#
# $$O^{(j)} = e^{\,m^{(j-1)} - m^{(j)}}\,O^{(j-1)} + e^{\,x^{(j)} - m^{(j)}}\,V_j, \qquad
# O = O^{(T)} / \ell^{(T)}.$$
#
# By the same induction $O^{(j)} = \sum_{k\le j} e^{x^{(k)} - m^{(j)}} V_k$, so the division at the end
# gives softmax-weighted values. This is line 9–10 of FlashAttention-2's Algorithm 1, and
# `variants/fa2.py` is written exactly like that (`alpha` is $e^{m^{(j-1)} - m^{(j)}}$). The cell prints
# those lines from the package and checks the package's result on many query rows and block sizes,
# including a block size that does not divide $N$.

# %%
import inspect
import variants.fa2

source = inspect.getsource(variants.fa2.forward).splitlines()
start = next(n for n, line in enumerate(source) if "line 9" in line)
print("\n".join(source[start:start + 9]))

# %%
q, k, v = (torch.randn(2, 3, 50, 16) for _ in range(3))
o_ref, lse_ref = attention_reference(q, k, v)
rows = []
for block_k in (1, 7, 16, 50):
    o, lse = VARIANTS["fa2"].forward(q, k, v, block_q=16, block_k=block_k)
    rows.append([block_k, -(-50 // block_k), f"{(o - o_ref).abs().max():.1e}", f"{(lse - lse_ref).abs().max():.1e}"])
show_table(["Bc", "key blocks per row", "max |O − O_ref|", "max |lse − lse_ref|"], rows)

# %%
# Checks for the exercises: call one with your answer; it says whether it is right.
def _largest_finite_score(dtype):
    # every positive finite value of the dtype, by bit pattern; keep those where softmax([s, 0]) is finite
    top = 0x7C00 if dtype == torch.float16 else 0x7F80
    s = torch.arange(0, top, dtype=torch.int32).to(torch.int16).view(dtype)
    e = torch.exp(s)
    ok = torch.isfinite(e / (e + 1)) & torch.isfinite(1 / (e + 1))
    return s[ok].max().item()


def check_overflow_limits(fp16_limit, bf16_limit):
    for name, dtype, got in (("fp16", torch.float16, fp16_limit), ("bf16", torch.bfloat16, bf16_limit)):
        want = _largest_finite_score(dtype)
        if got == want:
            continue
        e = torch.exp(torch.tensor(got, dtype=dtype))
        if got > want:
            raise AssertionError(f"{name}: at s = {got}, e^s = {e.item()} in {name}: the sum e^s + 1 is not finite "
                                 f"there, so softmax([s, 0]) is inf/NaN — too high. Scan {name}'s values, not fp32's.")
        raise AssertionError(f"{name}: {got} still works, but larger {name} values do too — keep going up to the last "
                             f"one whose e^s + 1 stays below {name}'s largest finite, {torch.finfo(dtype).max:.4g}.")
    print("exercise 1: right")


def check_rescales(eager, lazy):
    for t in (5, 40, 1, 2):
        if eager(t) != t * (t - 1) // 2:
            hint = {t * t: " — at step t only the t − 1 earlier blocks are rescaled, not the new one",
                    t * (t + 1) // 2: " — the new block at each step is made with the current max: nothing to "
                                      "rescale; only the t − 1 earlier ones are"}.get(eager(t), "")
            raise AssertionError(f"eager, T = {t}: {eager(t)} — count the earlier blocks at every step{hint}")
        assert lazy(t) == t, (f"lazy, T = {t}: {lazy(t)} — each block is rescaled once, at the end, to the final max "
                              "(its own max is remembered; that is the price)")
    print("exercise 3: right")


def check_unguarded(value):
    # exercise 2: e^(m - m_new) with m = m_new = -inf, computed without finite_or_zero
    if math.isnan(value):
        print("exercise 2: right — −∞ − (−∞) is NaN, and e^NaN = NaN poisons ℓ and O of the row")
        return
    raise AssertionError(f"{value}: try it — math.exp(-math.inf - (-math.inf)). −∞ − (−∞) is not 0 and not −∞ "
                         "(IEEE 754 leaves it undefined: NaN), so the factor is NaN, not 1 or 0")


def check_passes(online, fa_score_reads):
    # exercise 4: passes over a row of scores (online softmax); reads of the scores from HBM (FlashAttention)
    assert online != 3, "3 is the classic safe softmax (max, sum, divide): the online version finds m and ℓ together"
    assert online == 2, f"{online} passes: one computes m and ℓ together, one divides — how many is that?"
    assert fa_score_reads == 0, (f"{fa_score_reads}: FlashAttention never stores S in HBM — each tile of scores is "
                                 "computed, used and discarded on chip, so nothing reads the scores back")
    print("exercise 4: right")


# %% [markdown]
# ## Exercises
#
# **1.** Find, for fp16 and bf16, the largest score $s$ for which `softmax_without_max` on the row
# `[s, 0]` still returns finite numbers. Check: `check_overflow_limits(fp16_s, bf16_s)`. Why is bf16's
# limit the same as fp32's (up to bf16's rounding)?
#
# <details><summary>Solution</summary>
#
# Scan the representable values (e.g. `torch.arange(0, 12, 1/128, dtype=torch.float16)`): $e^s$ overflows
# fp16's 65504 just above $s \approx 11.09$, bf16's $3.4 \cdot 10^{38}$ above $s \approx 88.7$. bf16 keeps
# fp32's 8-bit exponent (it drops mantissa bits only), so its range — and the overflow point — is fp32's.
#
# </details>
#
# **2.** Prove that `merge` is associative. Then show that the identity element is $(-\infty, 0)$, and find
# where `variants/_common.py` guards the case $m = -\infty$ (a causal row that has seen no key yet):
# what would $e^{m - m_\text{new}}$ evaluate to without the guard? Check: `check_unguarded(value)`.
#
# <details><summary>Solution</summary>
#
# `merge` returns $(\max(m_a, m_b),\ \sum e^{m_x - m}\ell_x)$, i.e. the pair for $\sum_x \ell_x e^{m_x}$ with
# its max: any bracketing gives the max of all $m$ and the same sum, so it is associative (and
# commutative). $(-\infty, 0)$: $\max(-\infty, m) = m$ and $e^{-\infty - m} \cdot 0 = 0$. The guard is
# `finite_or_zero` in `variants/_common.py`: if $m = m_\text{new} = -\infty$, $m - m_\text{new}$ is
# $-\infty - (-\infty) = \text{NaN}$, and $e^\text{NaN}$ = NaN poisons the row.
#
# </details>
#
# **3.** The issue's eager rescale multiplies every earlier $f$ block at every step. For a row of $T$ blocks,
# how many block rescales is that in total? What would a *lazy* scheme (remember each block's own
# max, rescale once at the end) cost instead? Check: `check_rescales(eager, lazy)` with two functions of $T$.
# (Notebook 5 counts both in FLOPs.)
#
# <details><summary>Solution</summary>
#
# Eager: at step $t$ the $t - 1$ earlier blocks are rescaled, $\sum_{t=1}^{T} (t-1) = T(T-1)/2$ block
# rescales — quadratic in the row length. Lazy: each block once at the end, $T$ — the price is keeping
# $T$ block maxima per row.
#
# </details>
#
# **4.** Classic "safe softmax" makes three passes over a row (max, sum, divide). How many does the online
# version make? How many does FlashAttention make over the scores of a whole attention matrix? Check:
# `check_passes(online_passes, fa_reads_of_scores_from_hbm)`.
#
# <details><summary>Solution</summary>
#
# Online softmax: two — one pass computes $m$ and $\ell$ together, one divides. FlashAttention: one pass
# over $K, V$ per query block, and none over the scores at all: each score tile is computed, used and
# discarded on chip; the division is applied once to the $B_r \times d$ output, not to the scores.
#
# </details>
