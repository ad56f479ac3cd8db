"""Ring attention: one sequence sharded over a process group, K/V passed around the ring (issue 45).

    o = ring_attention(q, k, v, causal=True, layout="zigzag")     # q, k, v: this rank's piece (ring.layout.shard)

Every rank holds its queries and its block of K and V (the same positions). At step t = 0..P-1 it attends its
queries to the block in hand, which started on rank r - t (its origin), while that block travels on to rank r + 1
and the next arrives from rank r - 1 (ring/comm.py: the send is posted before the local attention, so the two
overlap). Each step's local attention is a whole FlashAttention call returning a partial (o_j, lse_j) over the
keys of that block; `merge` folds it into the running (o, lse) in float32. Which part of the block a step computes
(everything, the causal diagonal, half of it, or nothing) is counting.ring.step_blocks.

Backward (the scheme of zhuzilin/ring-flash-attention): the K/V ring runs again; at each step the local backward
computes the block's partial dq, dk, dv from the final o and lse (FA2's backward needs nothing else: P = exp(S - L)
with the global L is already the block's share of the softmax), dq is accumulated in place, and dk, dv are
accumulators in float32 that travel with their K/V block: received from the previous rank, added to, sent on, so
after P steps each block's gradient, summed over every rank's queries, arrives back at its owner.

The local attention (`local`): CPU tensors run a reference of variants.VARIANTS ("fa2" by default), CUDA tensors a
kernel of kernels.KERNELS ("fa2_wgmma" for speed; "fa2", the default, is the teaching kernel). GQA: K and V travel
with their H_kv heads, so the ring moves H_kv/H of the bytes; a forward that reads grouped K/V itself (GQA_FORWARD)
gets them as they are; every other local call, and every local backward, gets them repeated to H heads here, and
dk, dv are summed back over each group.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from counting import checks
from counting import ring as counts
from kernels.registry import KERNELS
from ring.comm import RingComm, RingError, all_shapes
from variants.registry import VARIANTS

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)  # float64: references only (gradcheck)
GQA_FORWARD = frozenset({"fa2_wgmma"})  # kernels whose forward reads (B, H_kv, N, d) K/V itself (kernels/layouts.py)
KV, DKV = 0, 2  # tags of the two kinds of exchange (gloo matches by tag; NCCL by order, the same on every rank)


@dataclass(frozen=True)
class Local:
    """The attention each step runs on the block in hand."""

    name: str
    forward: Callable
    backward: Callable | None
    gqa: bool  # the forward takes K/V with fewer heads than q


def local_attention(name: str, device: torch.device) -> Local:
    """`name` in kernels.KERNELS for CUDA tensors, in variants.VARIANTS otherwise."""
    if device.type == "cuda":
        spec = KERNELS.get(name) if isinstance(name, str) else None
        if spec is None:
            raise ValueError(f"local={name!r} is not a kernel: CUDA tensors run one of kernels.KERNELS "
                             f"({', '.join(KERNELS)})")
        return Local(name, spec.forward, spec.backward, name in GQA_FORWARD)
    var = VARIANTS.get(name) if isinstance(name, str) else None
    if var is None:
        raise ValueError(f"local={name!r} is not a reference: {device.type} tensors run one of variants.VARIANTS "
                         f"({', '.join(VARIANTS)})")
    return Local(name, var.forward, var.backward, False)


def merge(o: torch.Tensor, lse: torch.Tensor, o_j: torch.Tensor, lse_j: torch.Tensor) -> None:
    """Fold a partial (o_j, lse_j) over one set of keys into the running (o, lse) over another, in place.

    The online-softmax identity, the step FA2 Alg. 1 lines 9-10 takes per key block and issue #941 takes per f
    block: for disjoint key sets a and b with log-sum-exps L_a, L_b and normalised outputs O_a, O_b,
        L = log(e^{L_a} + e^{L_b}) = m + log(e^{L_a - m} + e^{L_b - m}),  m = max(L_a, L_b)
        O = e^{L_a - L} O_a + e^{L_b - L} O_b
    so by induction over the ring's steps (o, lse) is exact for all keys seen so far. In float32 (float64 for
    float64 inputs), whatever the input dtype. A row that has seen no key has L = -inf and weight 0; the max is
    taken as 0 there, so -inf - -inf is never formed.
    """
    lse_j = lse_j.to(lse.dtype)
    m = torch.maximum(lse, lse_j)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    wa, wb = torch.exp(lse - m), torch.exp(lse_j - m)  # e^{-inf} = 0
    total = wa + wb
    new = m + torch.log(total)  # -inf where neither side saw a key
    seen = total > 0
    wa = torch.where(seen, wa / torch.where(seen, total, torch.ones_like(total)), torch.zeros_like(wa))
    wb = torch.where(seen, 1 - wa, torch.zeros_like(wb))
    o.copy_(wa.unsqueeze(-1) * o + wb.unsqueeze(-1) * o_j.to(o.dtype))
    lse.copy_(new)


@dataclass
class Ring:
    """One call's ring: who we are, what every rank holds, what runs locally."""

    comm: RingComm
    n: int  # the whole sequence
    layout: str
    causal: bool
    scale: float
    local: Local
    log: list | None

    @property
    def sizes(self) -> list[int]:
        return counts.sizes(self.n, self.comm.world, self.layout)

    def blocks(self, step: int) -> list[counts.Block]:
        return counts.step_blocks(self.n, self.comm.world, self.layout, self.causal, self.comm.rank, step)

    def held(self, step: int, like: torch.Tensor) -> tuple:
        """The shape of the K/V block rank r holds at `step` (sizes differ with ragged chunks)."""
        b, h_kv, _, d = like.shape
        return (b, h_kv, self.sizes[counts.origin(self.comm.rank, step, self.comm.world)], d)

    def note(self, pass_name: str, step: int, blk: counts.Block) -> None:
        if self.log is not None:
            self.log.append({"pass": pass_name, "step": step, "what": "attention", "q": (blk.q0, blk.q1),
                             "k": (blk.k0, blk.k1), "causal": blk.causal,
                             "origin": counts.origin(self.comm.rank, step, self.comm.world)})


def _acc_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _grouped(t: torch.Tensor, heads: int, takes_gqa: bool) -> torch.Tensor:
    """K or V as the local call takes it: H_kv heads, or each repeated H / H_kv times (query head h reads kv head
    h // (H / H_kv), the kernels' convention)."""
    if takes_gqa or t.shape[1] == heads:
        return t
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def _ungrouped(g: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """dk or dv of H heads summed back to H_kv: a kv head's gradient is the sum over the query heads that read it."""
    b, h, n, d = g.shape
    return g if h == kv_heads else g.reshape(b, kv_heads, h // kv_heads, n, d).sum(2)


def _forward(q, k, v, ring: Ring):
    comm, heads = ring.comm, q.shape[1]
    acc = _acc_dtype(q)
    o = torch.zeros(q.shape, dtype=acc, device=q.device)
    lse = torch.full(q.shape[:-1], -math.inf, dtype=acc, device=q.device)
    kv = (k, v)
    for t in range(comm.world):
        pending = None
        if t < comm.world - 1:  # posted first: the next block travels while this one is computed on
            shape = ring.held(t + 1, k)
            pending = comm.exchange(list(kv), [shape, shape], what="k/v", step=t, pass_name="forward", tag=KV)
        for blk in ring.blocks(t):
            qb = q[..., blk.q0:blk.q1, :].contiguous()
            kb, vb = (_grouped(x[..., blk.k0:blk.k1, :], heads, ring.local.gqa).contiguous() for x in kv)
            o_j, lse_j = ring.local.forward(qb, kb, vb, causal=blk.causal, scale=ring.scale)
            merge(o[..., blk.q0:blk.q1, :], lse[..., blk.q0:blk.q1], o_j, lse_j)
            ring.note("forward", t, blk)
        if pending is not None:
            kv = tuple(pending.wait())
    return o.to(q.dtype), lse.float()


def _backward(q, k, v, o, lse, do, ring: Ring):
    comm, heads, kv_heads = ring.comm, q.shape[1], k.shape[1]
    acc = _acc_dtype(q)
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    kv, travelling = (k, v), None  # travelling: the dk, dv accumulators of the block in hand, from the ranks before
    for t in range(comm.world):
        pending = None
        if t < comm.world - 1:
            shape = ring.held(t + 1, k)
            pending = comm.exchange(list(kv), [shape, shape], what="k/v", step=t, pass_name="backward", tag=KV)
        dk = torch.zeros(kv[0].shape, dtype=acc, device=q.device)
        dv = torch.zeros_like(dk)
        for blk in ring.blocks(t):
            rows = slice(blk.q0, blk.q1)
            kb, vb = (_grouped(x[..., blk.k0:blk.k1, :], heads, False).contiguous() for x in kv)
            gq, gk, gv = ring.local.backward(q[..., rows, :].contiguous(), kb, vb, o[..., rows, :].contiguous(),
                                             lse[..., rows].contiguous(), do[..., rows, :].contiguous(),
                                             causal=blk.causal, scale=ring.scale)
            dq[..., rows, :] += gq.to(acc)
            dk[..., blk.k0:blk.k1, :] += _ungrouped(gk.to(acc), kv_heads)
            dv[..., blk.k0:blk.k1, :] += _ungrouped(gv.to(acc), kv_heads)
            ring.note("backward", t, blk)
        if travelling is not None:  # what the ranks before added for this block
            got_dk, got_dv = travelling.wait()
            dk += got_dk
            dv += got_dv
        if pending is not None:
            kv = tuple(pending.wait())
        if comm.world == 1:
            return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
        # on to the next rank, which holds this block at step t + 1; the last send returns each block to its owner
        shape = ring.held(t + 1, k)
        travelling = comm.exchange([dk, dv], [shape, shape], what="dk/dv", step=t, pass_name="backward", tag=DKV)
    dk, dv = travelling.wait()
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring):
        o, lse = _forward(q, k, v, ring)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.ring = ring
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        return (*_backward(q, k, v, o, lse, do.contiguous(), ctx.ring), None)


def _check_local(q, k, v, *, causal, scale, layout, local) -> tuple:
    """This rank's own checks (no communication): (Local, B, H, H_kv, n, d, causal, scale)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; ring_attention takes "
                            "float32, float16, bfloat16 (float64 on the references)")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    b, h, n_q, n_k, d = checks.check_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), gqa=True)
    if n_q != n_k:
        raise ValueError(f"q holds {n_q} positions but k and v hold {n_k}: ring_attention shards one sequence, so "
                         "each rank's q, k and v hold the same positions")
    counts.check_layout(layout)
    causal = checks.flag("causal", causal)
    scale = checks.scale_value(scale, d)
    loc = local_attention(local, q.device)
    if loc.backward is None and any(t.requires_grad for t in (q, k, v)):
        raise ValueError(f"local={local!r} has no backward: ring_attention cannot train through it")
    return loc, b, h, k.shape[1], n_q, d, causal, scale


def _descriptor_device(group) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in str(dist.get_backend(group)) \
        else torch.device("cpu")


_FIELDS = ("B", "H", "H_kv", "d", "dtype", "causal", "layout", "scale")


def _field(name: str, value: float):
    """A descriptor entry as the caller wrote it (the descriptor is a float64 tensor)."""
    if name == "dtype":
        return str(DTYPES[int(value)]).replace("torch.", "")
    if name == "causal":
        return bool(value)
    if name == "layout":
        return counts.LAYOUTS[int(value)]
    return value if name == "scale" else int(value)


def _agree(rows: list[list], layout: str) -> int:
    """Every rank checks every rank's descriptor the same way, so all raise the same error; returns N."""
    for r, other in enumerate(rows):
        if other[0] < 0:
            raise RingError(f"ring_attention: rank {r} refused its input (its own error says why)")
    for r, other in enumerate(rows):
        if other[1:] != rows[0][1:]:
            diff = [f"{nm} {_field(nm, a)!r} on rank 0, {_field(nm, b)!r} on rank {r}"
                    for nm, a, b in zip(_FIELDS, rows[0][1:], other[1:]) if a != b]
            raise ValueError(f"ring_attention: the ranks disagree: {'; '.join(diff)}")
    n, world = int(sum(x[0] for x in rows)), len(rows)
    counts.check_ring(n, world, layout)
    want = counts.sizes(n, world, layout)
    for r, other in enumerate(rows):
        if int(other[0]) != want[r]:
            raise ValueError(f"ring_attention: rank {r} holds {int(other[0])} positions, but layout {layout!r} of "
                             f"N={n} over {world} ranks gives it {want[r]} (ring.layout.shard cuts the pieces)")
    return n


def ring_attention(q, k, v, *, causal=False, scale=None, group=None, layout="contiguous", local="fa2",
                   return_lse=False, log=None):
    """softmax(scale·q kᵀ) v over the whole sequence, for this rank's piece of it; differentiable.

    q: (B, H, n_r, d), k and v: (B, H_kv, n_r, d) with H_kv dividing H: rank r's positions of one sequence of N,
    in `layout` ("contiguous" or "zigzag"; ring.layout.shard makes them). Returns this rank's rows of o (and lse,
    float32 (B, H, n_r), with return_lse). causal: query i sees key j iff j <= i, over the whole sequence.
    group: the process group (None: the default one); every member must call with matching shapes. local: the
    attention each step runs (module docstring). log: a list that receives what was sent and computed (tests).
    A bad input raises on every rank (the ranks compare descriptors first); a rank that fails or hangs ends the
    others' waits with a RingError at the process group's timeout.
    """
    counts.check_layout(layout)  # before anything: no rank can agree on a layout that does not exist
    comm = RingComm(group, log)
    row, error = [-1.0] + [0.0] * 8, None
    try:
        loc, b, h, h_kv, n, d, causal, scale = _check_local(q, k, v, causal=causal, scale=scale, layout=layout,
                                                            local=local)
        row = [float(n), b, h, h_kv, d, DTYPES.index(q.dtype), float(causal), counts.LAYOUTS.index(layout), scale]
    except (TypeError, ValueError) as e:
        error = e
    rows = all_shapes(row, device=_descriptor_device(group), group=group, rank=comm.rank)
    if error is not None:  # raised after the gather, so the other ranks learn of it instead of waiting
        raise error
    ring = Ring(comm, _agree(rows, layout), layout, causal, scale, loc, log)
    o, lse = _RingAttention.apply(q, k, v, ring)
    return (o, lse) if return_lse else o


# -- the demo's ranks (python -m ring [P]: ring/__main__.py) -----------------------------------------------------------------------------

def _demo_rank(rank: int, world: int, n: int) -> dict:
    from ring.layout import shard

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g) for _ in range(3))
    out = {}
    for layout in counts.LAYOUTS:
        pieces = [shard(x, rank, world, layout).clone().requires_grad_() for x in (q, k, v)]
        log = []
        o = ring_attention(*pieces, causal=True, layout=layout, log=log)
        o.sum().backward()
        out[layout] = {"o": o.detach(), "dq": pieces[0].grad, "log": log}
    return out
