"""Closed forms: the exact HBM traffic, FLOPs and SRAM working set of every variant, without running it.

Each function below restates, count for count, what the PyTorch reference in `variants/` records
through `counting.memory.Memory` (tests/test_closed_forms.py holds the two exactly equal on drawn
shapes). Each is a polynomial in `counting.tiling.TileSums`, computed in time independent of N
(`tiling.tile_sums`), so any size answers in microseconds where the instrumented meta-tensor run
costs minutes at N = 64k.

Notation, per (batch, head); every count is then multiplied by B·H. Row block i has r_i rows
(the tail block is shorter); it visits n_i K/V blocks, always a prefix (causal masks hide a suffix),
covering W_i = min(n_i·Bc, Nk) key columns. Sums run over row blocks i (or, for fa1, over the visited
tiles (j, i) in its own K/V-outer order: Σ r·c = Σ_j c_j·R_j with R_j the rows of the Q blocks that
visit K block j).

    fa2     reads  Q: Σ r d          K, V: Σ W d each
            writes O: Nq d           lse: Nq
            matmul 4 d Σ r W;  exp Σ (r W + n r);  other Σ (4 r W + n (4 r + 2 r d) + r d + 2 r)
    fa1     writes O: Nq d + Σt r d,  ℓ, m: Nq + Σt r each (FA1 Alg. 1 line 2 + every visited tile),  lse: Nq
            reads  K, V: Nk d each;  Q, O: Σt r d each;  ℓ, m: Σt r + Nq each (epilogue)
            matmul 4 d Σt r c;  exp Σt (r c + 2 r);  other Σt (4 r c + 7 r + 4 r d) + 2 Nq
    naive   writes S, P: Nq Nk each (hidden tiles too), lse: Nq, O: Nq d
            reads  Q: Σ n r d,  K, V: Σ W d each,  S: Nq Nk,  P: Σ r W
            matmul 4 d Σ r W;  exp Nq Nk;  other Σ (r W + n r d) + 4 Nq Nk + 2 Nq
    v_once  reads as fa2; writes O: Nq d, lse: Nq; with m1 = max(n - 1, 0):
            matmul 4 d Σ r W
            exp    Σ (r W + 2 r m1)                 (+ Σ n r lazy)
            other  Σ (4 r W + 6 r m1 + n r d + 2 r + r W)
                   eager: + Σ (r Bc n (n-1)/2 + r (W - c_0))   (rescaling earlier blocks, then f_ij)
                   lazy:  + Σ 2 r n                   (the fused e^{m_ij - m_i}/ℓ_i factor)
            f spilled (placement hbm): reads = writes = Σ r W  (+ Σ r Bc n (n-1)/2 eager)
            cluster of CS CTAs (placement cluster, lazy only; counting.cluster picks CS against the SRAM):
                   as sram lazy, with reads Q: CS Nq d (each CTA loads Q_i), other + (CS-1) Nq d (the
                   partial O's summed); DSMEM bytes m, ℓ: 4 CS(CS-1) Nq each, O: 4 (CS-1) Nq d; no f byte

Only the last visited block of a row can be a tail, and it is never rescaled by a later block, so
eager rescaling touches exactly Bc·n(n-1)/2 columns per row. Bytes: Q, K, V, O, S, P, f have the
input dtype's itemsize; ℓ, m, lse are float32. The SRAM working set is the variant's own
`sram_bytes(...)` (counting.sram, which `variants` re-export: the one source of truth), called as the reference calls it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from counting import checks, decode, registry
from counting.cluster import dsmem_bytes, reference_plan
from counting.headline import attention_flops, paper_flops
from counting.sram import check_v_once_pair, v_once_resolve_placement, v_once_sram_bytes
from counting.tiling import TileSums, Tiling, cdiv, tile_sums

FLOP_KINDS = ("matmul", "exp", "other")
DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}  # name -> itemsize in HBM
F32 = 4
# VARIANT_NAMES: the registered variants, in registration order (a module attribute computed on access,
# see __getattr__ at the end: register() adds one)
PLACEMENTS = ("auto", "sram", "hbm", "cluster")  # as variants.v_once (checked equal in the tests)
RESCALES = ("eager", "lazy")
_FLOAT32_TENSORS = frozenset({"l", "m", "lse", "O_split", "lse_split"})  # split_kv's partials: float32


def dtype_name(dtype) -> str:
    """'fp16' for 'fp16', 'float16', torch.float16, ...; ValueError otherwise."""
    text = str(dtype).replace("torch.", "")
    aliases = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
               "bfloat16": "bf16"}
    text = aliases.get(text, text)
    if text not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return text


@dataclass
class Traffic:
    """What one forward moves and computes, for the whole (B, H) problem (layout of memory.Counts)."""

    variant: str
    batch: int
    heads: int
    n_q: int
    n_k: int
    d: int
    causal: bool
    dtype: str
    block_q: int
    block_k: int
    reads: dict = field(default_factory=dict)  # tensor -> elements
    writes: dict = field(default_factory=dict)
    read_bytes: dict = field(default_factory=dict)
    write_bytes: dict = field(default_factory=dict)
    flops: dict = field(default_factory=dict)  # kind -> FLOPs
    sram_peak_bytes: int = 0
    sram_capacity: int | None = None  # what the working set was checked against (None: unlimited)
    placement: str | None = None  # v_once: requested
    placement_resolved: str | None = None  # v_once: what auto became
    rescale: str | None = None
    # placement "cluster" (issue 18): bytes read across the cluster's distributed shared memory, by tensor
    # (m, l: reduction 1; O: the partial O's of reduction 2), and the cluster size CS; no HBM byte
    dsmem_bytes: dict = field(default_factory=dict)
    cluster_size: int | None = None
    # split_kv (issue 44): kv_heads, num_splits, page_size, cache lengths (counting.decode); {} elsewhere
    decode: dict = field(default_factory=dict)

    @property
    def dsmem_total_bytes(self) -> int:
        return sum(self.dsmem_bytes.values())

    @property
    def hbm_read_bytes(self) -> int:
        return sum(self.read_bytes.values())

    @property
    def hbm_write_bytes(self) -> int:
        return sum(self.write_bytes.values())

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())

    @property
    def fits(self) -> bool:
        return self.sram_capacity is None or self.sram_peak_bytes <= self.sram_capacity

    @property
    def over_by_bytes(self) -> int:
        return 0 if self.fits else self.sram_peak_bytes - self.sram_capacity

    @property
    def paper_flops(self) -> float:
        """The papers' convention (counting.headline); not the work when causal with Nq != Nk."""
        return paper_flops(self.batch, self.heads, self.n_q, self.n_k, self.d, self.causal)

    @property
    def attention_flops(self) -> int:
        """4·d per visible (query, key) pair, B·H: the work TFLOP/s figures divide by (split_kv: per sequence)."""
        if "attention_flops" in self.decode:
            return self.decode["attention_flops"]
        return attention_flops(self.batch, self.heads, self.n_q, self.n_k, self.d, self.causal)

    @property
    def options(self) -> dict:
        if self.variant != "v_once":
            return {}
        return {"placement": self.placement, "rescale": self.rescale}

    def label(self) -> str:
        """naive, fa2, v_once_auto(hbm)_lazy: the option values, with what auto resolved to."""
        if self.variant != "v_once":
            return self.variant
        place = self.placement
        if place == "auto":
            place = f"auto({self.placement_resolved})"
        return f"v_once_{place}_{self.rescale}"

    def as_dict(self) -> dict:
        """The keys of counting.memory.Counts.as_dict()."""
        return {
            "reads": dict(self.reads),
            "writes": dict(self.writes),
            "read_bytes": dict(self.read_bytes),
            "write_bytes": dict(self.write_bytes),
            "hbm_read_bytes": self.hbm_read_bytes,
            "hbm_write_bytes": self.hbm_write_bytes,
            "flops": {kind: self.flops.get(kind, 0) for kind in FLOP_KINDS},
            "sram_peak_bytes": self.sram_peak_bytes,
            "dsmem_bytes": dict(self.dsmem_bytes),
        }


# -- the registry: how to count each variant without running it ------------------------------------
@dataclass(frozen=True)
class ClosedForm:
    """One variant's closed form (docs/design.md, "How to add a variant").

    terms(s: TileSums, t: Tiling, d: int, **options) -> (reads, writes, flops): per (batch, head), in
        elements, tensor name -> count and FLOP kind -> count, exactly what the reference records
        (a fourth item, tensor -> DSMEM bytes, where the variant reduces across a cluster).
    sram: the reference's own working-set function, or "module:function" (imported on first use:
        variants import torch, this module does not). Without options it is called as
        sram(n_q, n_k, d, block_q, block_k, itemsize); with options as
        sram(n_q, n_k, d, block_q, block_k, itemsize, causal, capacity=..., **options) and returns
        (bytes, the options as resolved, e.g. placement "auto" -> "hbm").
    options: option -> choices, first the default (as variants.Variant.options).
    """

    name: str
    terms: Callable
    sram: str | Callable
    options: dict = field(default_factory=dict)
    # whole(batch, heads, n_q, n_k, d, causal=, block_q=, block_k=, itemsize=, **decode) -> (reads, writes, flops,
    # sram bytes, what it resolved): whole-problem counts for a variant whose work is not B·H times one head's
    # (split_kv: per-sequence cache lengths, H_kv kv heads, a split count from B·H_kv); `decode` names the keywords
    # it takes beyond the problem (counts() passes them through). terms is then unused by counts().
    whole: Callable | None = None
    decode: tuple = ()

    def sram_fn(self) -> Callable:
        if callable(self.sram):
            return self.sram
        module, _, attr = self.sram.partition(":")
        return getattr(importlib.import_module(module), attr)


CLOSED_FORMS: dict[str, ClosedForm] = {}


def register(entry: ClosedForm, *, replace: bool = False) -> ClosedForm:
    """Add a variant's closed form: counts(), the fa-traffic CLI and tests/test_closed_forms.py use it."""
    return registry.add(CLOSED_FORMS, entry, ClosedForm, replace=replace)


def unregister(name: str) -> ClosedForm:
    return registry.remove(CLOSED_FORMS, name)


def _entry(variant: str) -> ClosedForm:
    if not isinstance(variant, str) or variant not in CLOSED_FORMS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(CLOSED_FORMS)}")
    return CLOSED_FORMS[variant]


def _options(entry: ClosedForm, given: dict) -> dict:
    """The entry's options from `given` (others ignored: counts() takes placement= for every variant),
    each checked against its choices."""
    out = {}
    for name, choices in entry.options.items():
        value = given.get(name, choices[0])
        if value not in choices:
            raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
        out[name] = value
    return out


def _working_set(entry: ClosedForm, n_q, n_k, d, block_q, block_k, itemsize, causal, capacity,
                 options: dict) -> tuple[int, dict]:
    fn = entry.sram_fn()
    if not entry.options:
        return fn(n_q, n_k, d, block_q, block_k, itemsize), {}
    return fn(n_q, n_k, d, block_q, block_k, itemsize, causal, capacity=capacity, **options)


def sram_working_set(variant, n_q, n_k, d, block_q, block_k, dtype="fp16", causal=False, *,
                     placement="auto", rescale="eager", capacity=None, **options) -> tuple[int, str | None]:
    """(bytes, resolved placement) of the working set the reference declares via require_sram."""
    entry = _entry(variant)
    opts = _options(entry, dict(options, placement=placement, rescale=rescale))
    nbytes, resolved = _working_set(entry, n_q, n_k, d, block_q, block_k, DTYPES[dtype_name(dtype)],
                                    causal, capacity, opts)
    return nbytes, resolved.get("placement")


def _v_once_sram(n_q, n_k, d, block_q, block_k, itemsize, causal, *, capacity, placement, rescale):
    if placement == "cluster":  # the cluster chosen against the capacity: the counts depend on its size
        check_v_once_pair(placement, rescale)
        cl = reference_plan(n_q, n_k, d, block_q=block_q, block_k=block_k, itemsize=itemsize, capacity=capacity)
        return cl.smem_bytes, {"placement": placement, "rescale": rescale, "cluster_size": cl.cluster_size}
    if placement == "auto":
        placement = v_once_resolve_placement(n_q, n_k, d, block_q, block_k, itemsize, causal,
                                             rescale=rescale, capacity=capacity)
    nbytes = v_once_sram_bytes(n_q, n_k, d, block_q, block_k, itemsize, causal, placement=placement,
                               rescale=rescale)
    return nbytes, {"placement": placement, "rescale": rescale}


# -- the tile geometry every formula sums over (counting.tiling.TileSums) ----------------------------
def _naive(s: TileSums, t: Tiling, d: int):
    nq, nk = t.n_q, t.n_k
    # reads: Q_i per visited tile and K_j (FA1 Alg. 0 line 1), S in full (FA1 Alg. 0 line 2),
    # the visited P tiles and V_j (FA1 Alg. 0 line 3)
    reads = {"Q": s.r * d, "K": s.c * d, "S": nq * nk, "P": s.rc, "V": s.c * d}
    # writes: S, hidden tiles too (FA1 Alg. 0 line 1); P and lse (FA1 Alg. 0 line 2); O (FA1 Alg. 0 line 3)
    writes = {"S": nq * nk, "P": nq * nk, "lse": nq, "O": nq * d}
    # matmul: QKᵀ (FA1 Alg. 0 line 1) and PV (FA1 Alg. 0 line 3), 2 d r c each; exp and the 4 Nq Nk
    # max/sub/sum/divide of softmax: FA1 Alg. 0 line 2; the r c scale: FA1 Alg. 0 line 1; the r d
    # accumulate: FA1 Alg. 0 line 3
    flops = {"matmul": 4 * d * s.rc, "exp": nq * nk, "other": s.rc + s.r * d + 4 * nq * nk + 2 * nq}
    return reads, writes, flops


def _fa1(s: TileSums, t: Tiling, d: int):
    # Σ over visited tiles (j, i) of r is s.r and of r·c is s.rc: the visited set does not depend on
    # the loop order, only the order of the transfers does.
    nq, nk = t.n_q, t.n_k
    # reads: K_j, V_j once (FA1 Alg. 1 line 6); Q_i, O_i, ℓ_i, m_i per visited tile (FA1 Alg. 1 line 8);
    # ℓ, m once more for lse (the epilogue)
    reads = {"K": nk * d, "V": nk * d, "Q": s.r * d, "O": s.r * d, "l": s.r + nq, "m": s.r + nq}
    # writes: O, ℓ, m initialised (FA1 Alg. 1 line 2); O_i (FA1 Alg. 1 line 12), ℓ_i, m_i (FA1 Alg. 1 line 13)
    # per visited tile; lse (the epilogue)
    writes = {"O": nq * d + s.r * d, "l": nq + s.r, "m": nq + s.r, "lse": nq}
    # matmul: S_ij (FA1 Alg. 1 line 9) and P̃_ij V_j (FA1 Alg. 1 line 12); exp: P̃_ij (FA1 Alg. 1 line 10)
    # and the two rescale factors (FA1 Alg. 1 line 11); other: FA1 Alg. 1 lines 9-12 per tile, 2 Nq lse
    flops = {"matmul": 4 * d * s.rc, "exp": s.rc + 2 * s.r,
             "other": 4 * s.rc + 7 * s.r + 4 * d * s.r + 2 * nq}
    return reads, writes, flops


def _fa2(s: TileSums, t: Tiling, d: int):
    nq = t.n_q
    # reads: Q_i once (FA2 Alg. 1 line 4); K_j, V_j per visited tile (FA2 Alg. 1 line 7)
    reads = {"Q": nq * d, "K": s.c * d, "V": s.c * d}
    # writes: O_i (FA2 Alg. 1 line 14), L_i (FA2 Alg. 1 line 15)
    writes = {"O": nq * d, "lse": nq}
    # matmul: S (FA2 Alg. 1 line 8) and P̃ V_j (FA2 Alg. 1 line 10); exp: P̃ and e^{m_old - m_new}
    # (FA2 Alg. 1 line 9); other: scale, mask-free max/sub/sum (FA2 Alg. 1 line 9), the O rescale
    # (FA2 Alg. 1 line 10), O / ℓ (FA2 Alg. 1 line 12), L = m + log ℓ (FA2 Alg. 1 line 13)
    flops = {"matmul": 4 * d * s.rc, "exp": s.rc + s.r,
             "other": 4 * s.rc + 4 * s.r + 2 * d * s.r + nq * d + 2 * nq}
    return reads, writes, flops


def _v_once(s: TileSums, t: Tiling, d: int, spill: bool, eager: bool):
    nq = t.n_q
    tri = t.block_k * s.r_tri  # columns of earlier blocks rescaled by later ones
    # reads and writes as FA2 (Q_i: FA2 Alg. 1 line 4, K_j: FA2 Alg. 1 line 7, O_i and L_i:
    # FA2 Alg. 1 lines 14-15); V_j is read in #941 step 5 instead of FA2 Alg. 1 line 7
    reads = {"Q": nq * d, "K": s.c * d, "V": s.c * d}
    writes = {"O": nq * d, "lse": nq}
    # exp: f_ij (#941 step 2, as FA2 Alg. 1 line 9) and the two merge factors of every later block (step 4)
    exp = s.rc + 2 * s.r_later
    # other: as FA2 Alg. 1 lines 8-9 per tile, the step-4 merge, the (f/ℓ) product's divide (step 5)
    other = 4 * s.rc + 6 * s.r_later + d * s.r + 2 * nq + s.rc
    if eager:
        other += tri + s.rc - s.r_c0
    else:
        exp += s.r
        other += 2 * s.r
    if spill:
        f = s.rc + (tri if eager else 0)
        reads["f"] = f
        writes["f"] = f
    flops = {"matmul": 4 * d * s.rc, "exp": exp, "other": other}
    return reads, writes, flops


def _v_once_cluster(s: TileSums, t: Tiling, d: int, cs: int):
    """placement "cluster" (variants/v_once_cluster.py): placement "sram", rescale "lazy", plus each of the
    CS CTAs loading Q_i, the (CS - 1)·r·d adds of reduction 2, and the DSMEM bytes of both reductions."""
    reads, writes, flops = _v_once(s, t, d, False, False)
    reads["Q"] = cs * t.n_q * d  # #941 step 1's Q_i, once per CTA of the cluster
    flops["other"] += (cs - 1) * t.n_q * d  # the partial O's summed (reduction 2)
    dsmem = dsmem_bytes(cs, t.n_q, d)  # linear in the rows: Σ over Q blocks of r is Nq
    return reads, writes, flops, dsmem


def _v_once_terms(s: TileSums, t: Tiling, d: int, *, placement: str, rescale: str, cluster_size: int = 1):
    if placement == "cluster":
        return _v_once_cluster(s, t, d, cluster_size)
    return _v_once(s, t, d, placement == "hbm", rescale == "eager")


def _split_kv_terms(s: TileSums, t: Tiling, d: int):
    """split_kv per (batch, head) when that is all there is (H_kv = H, every cache full, S = 1): FA2's terms
    but for causal Q blocks that see no key (no Q read, no epilogue). counts() uses `whole` instead."""
    p = decode.Decode(1, 1, 1, t.n_q, t.n_k, d, t.causal, 1.0, t.block_q, t.block_k, (t.n_k,), 1)
    return decode.terms(p)


def _split_kv_whole(batch, heads, n_q, n_k, d, *, causal, block_q, block_k, itemsize, kv_heads=None,
                    cache_seqlens=None, page_size=None, num_splits=None, num_sms=decode.NUM_SMS):
    """split_kv's whole-problem counts (counting.decode.terms), on a contiguous cache of Nk positions or a paged
    one of pages of page_size (max_pages = ⌈Nk / page_size⌉, so the capacity covers Nk)."""
    kv_heads = heads if kv_heads is None else kv_heads
    if page_size is None:
        k_shape, table = (batch, kv_heads, n_k, d), None
    else:
        page_size = checks.positive_int("page_size", page_size)
        k_shape, table = (1, kv_heads, page_size, d), (batch, cdiv(n_k, page_size))
        cache_seqlens = (n_k,) * batch if cache_seqlens is None else cache_seqlens
    p = decode.check_decode((batch, heads, n_q, d), k_shape, k_shape, causal=causal, block_q=block_q,
                            block_k=block_k, lengths=cache_seqlens, num_splits=num_splits, paged=table is not None,
                            table_shape=table, num_sms=num_sms)
    reads, writes, flops = decode.terms(p)
    sram = decode.split_kv_sram_bytes(p.rows, max(p.lengths), d, block_q, block_k, itemsize)
    lengths = sorted(set(p.lengths))
    info = {"kv_heads": p.kv_heads, "group": p.group, "num_splits": p.num_splits, "page_size": p.page_size,
            "cache_len_min": lengths[0], "cache_len_max": lengths[-1], "cache_tokens": sum(p.lengths),
            "ctas": p.batch * p.kv_heads * p.t_r * p.num_splits,
            "attention_flops": decode.attention_flops(p), "min_hbm_bytes": decode.min_hbm_bytes(p, itemsize)}
    return reads, writes, flops, sram, info


DECODE_OPTIONS = ("kv_heads", "cache_seqlens", "page_size", "num_splits", "num_sms")

for _cf in (ClosedForm("naive", _naive, "counting.sram:naive_sram_bytes"),  # torch-free (issue 11: the
            ClosedForm("fa1", _fa1, "counting.sram:fa1_sram_bytes"),        # report imports no torch)
            ClosedForm("fa2", _fa2, "counting.sram:fa2_sram_bytes"),
            ClosedForm("v_once", _v_once_terms, _v_once_sram, {"placement": PLACEMENTS, "rescale": RESCALES}),
            ClosedForm("split_kv", _split_kv_terms, "counting.sram:split_kv_sram_bytes", whole=_split_kv_whole,
                       decode=DECODE_OPTIONS)):
    register(_cf)


def counts(variant: str, batch: int, heads: int, n_q: int, n_k: int, d: int, *, causal=False,
           dtype="fp16", block_q=64, block_k=64, placement="auto", rescale="eager",
           sram_bytes: int | None = None, **options) -> Traffic:
    """Exact whole-problem counts of `variant` (what its reference records), without running it.

    sram_bytes: the capacity the working set is checked against (v_once "auto" resolves against it;
    None = unlimited). A working set that does not fit is reported (`fits`, `over_by_bytes`), not
    raised: the counts are what the variant would move on a chip big enough. placement and rescale
    are v_once's options; a registered variant's own options come as keywords.
    """
    entry = _entry(variant)
    # the references' and kernels' rules and messages (counting.checks)
    pr = checks.check_problem(batch, heads, n_q, n_k, d, causal=causal, block_q=block_q,
                              block_k=block_k, scores_in_hbm=variant == "naive")
    batch, heads, n_q, n_k, d = (pr[x] for x in ("batch", "heads", "n_q", "n_k", "d"))
    causal, block_q, block_k = pr["causal"], pr["block_q"], pr["block_k"]
    sram_bytes = checks.sram_capacity("sram_bytes", sram_bytes)
    dtype = dtype_name(dtype)
    itemsize = DTYPES[dtype]
    opts = _options(entry, dict(options, placement=placement, rescale=rescale))
    given = {k: v for k, v in options.items() if k in DECODE_OPTIONS and v is not None}
    if given and not entry.decode:
        raise ValueError(f"{', '.join(given)} apply to split_kv only (variant {variant} takes H_kv = H and a full, "
                         "contiguous cache)")
    if entry.whole is not None:
        return _whole(entry, batch, heads, n_q, n_k, d, causal, dtype, itemsize, block_q, block_k, sram_bytes,
                      {k: v for k, v in options.items() if k in entry.decode})
    t = Tiling(n_q, n_k, block_q, block_k, causal)
    sram, resolved = _working_set(entry, n_q, n_k, d, block_q, block_k, itemsize, causal,
                                  sram_bytes, opts)
    s = tile_sums(t)
    terms = entry.terms(s, t, d, **resolved)
    reads, writes, flops = terms[:3]
    dsmem = terms[3] if len(terms) > 3 else {}  # (reads, writes, flops[, DSMEM bytes by tensor])
    bh = batch * heads
    reads = {k: v * bh for k, v in reads.items() if v}
    writes = {k: v * bh for k, v in writes.items() if v}

    def nbytes(name, n):
        return n * (F32 if name in _FLOAT32_TENSORS else itemsize)

    return Traffic(
        variant=variant, batch=batch, heads=heads, n_q=n_q, n_k=n_k, d=d, causal=bool(causal),
        dtype=dtype, block_q=block_q, block_k=block_k,
        reads=reads, writes=writes,
        read_bytes={k: nbytes(k, v) for k, v in reads.items()},
        write_bytes={k: nbytes(k, v) for k, v in writes.items()},
        flops={k: flops[k] * bh for k in FLOP_KINDS},
        sram_peak_bytes=int(sram), sram_capacity=sram_bytes,
        placement=opts.get("placement"), placement_resolved=resolved.get("placement"),
        rescale=opts.get("rescale"),
        dsmem_bytes={k: v * bh for k, v in dsmem.items() if v}, cluster_size=resolved.get("cluster_size"),
    )


def _whole(entry, batch, heads, n_q, n_k, d, causal, dtype, itemsize, block_q, block_k, capacity, options):
    reads, writes, flops, sram, info = entry.whole(batch, heads, n_q, n_k, d, causal=causal, block_q=block_q,
                                                   block_k=block_k, itemsize=itemsize, **options)
    reads = {k: v for k, v in reads.items() if v}
    writes = {k: v for k, v in writes.items() if v}

    def nbytes(name, n):
        return n * (F32 if name in _FLOAT32_TENSORS else itemsize)

    return Traffic(variant=entry.name, batch=batch, heads=heads, n_q=n_q, n_k=n_k, d=d, causal=bool(causal),
                   dtype=dtype, block_q=block_q, block_k=block_k, reads=reads, writes=writes,
                   read_bytes={k: nbytes(k, v) for k, v in reads.items()},
                   write_bytes={k: nbytes(k, v) for k, v in writes.items()},
                   flops={k: flops[k] for k in FLOP_KINDS}, sram_peak_bytes=int(sram), sram_capacity=capacity,
                   decode=info)


def fa1_blocks(sram_bytes: int, d: int) -> tuple[int, int]:
    """FA1 Alg. 1 line 1: Bc = ⌈M/4d⌉, Br = min(Bc, d), with M = sram_bytes / 4 elements.

    M counts float32 elements, the on-chip compute type: every declared working set holds its S/P
    tile (Br·Bc) and accumulators in float32, so M in input-dtype elements (bytes / 2 for fp16)
    would double Bc and overflow the chip (e.g. fa2 at H200, d=64, fp16 needs 251 KiB of 227 KiB).
    """
    sram_bytes, d = checks.positive_int("sram_bytes", sram_bytes), checks.positive_int("d", d)
    m = sram_bytes // F32
    bc = max(1, cdiv(m, 4 * d))
    return min(bc, d), bc


def __getattr__(name: str):
    if name == "VARIANT_NAMES":  # live: a variant registered at runtime is listed (the CLI's choices)
        return tuple(CLOSED_FORMS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
