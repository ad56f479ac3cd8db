"""FlashAttention-2 forward and backward, teaching tier: launchers for kernels/cuda/fa2.cu and
kernels/cuda/fa2_bwd.cu (mirror variants/fa2.py).

forward, one launch: grid (Tr, B*H), 256 threads, dynamic shared memory Q_i + K_j + the P tile, + V_j at
d <= 64 (at d > 64, V_j reuses K_j's buffer), float32: 4·(Br·ld + Bc·ld + Br·(Bc+1) [+ Bc·ld]) bytes,
ld = d_pad + 1 (83 KB at d = 128, 66 KB at d = 64).

backward (FA2 Alg. 2), three launches (see the top of fa2_bwd.cu), the main one on grid (Tc, B*H_kv); lse is
the forward's (natural log of the scaled scores' row sums, -inf for rows that see no key).

Grouped-query and multi-query attention: k, v (B, H_kv, Nk, d) with H_kv dividing H; query head h reads kv head
h // (H / H_kv). The forward reads K/V of the group's kv head; the backward's block that owns key block j of kv head
h_kv walks the group's query heads in turn and accumulates dK_j, dV_j on chip (no repeated K/V, no atomics on dK/dV).
Inputs must be contiguous (no strided views).
"""
from __future__ import annotations

import numpy as np
import torch

from counting import sm90
from counting.checks import flag
from kernels import _teaching, loader

SOURCE = "fa2.cu"
KERNEL = "fa2_forward"
DTYPES = _teaching.DTYPES
MAX_HEAD_DIM = _teaching.MAX_HEAD_DIM


def shared_bytes(d: int, block_q: int = 64, block_k: int = 64) -> int:
    ld = _teaching.tile_ld(d)
    return _teaching.F32 * (block_q * ld + block_k * ld * (1 + own_v(d)) + block_q * (block_k + 1))


def own_v(d: int) -> int:
    """fa2.cu's FA2_OWN_V: V_j gets its own buffer when the tiles are 64 wide (measured 1-3% faster there;
    at d = 128 the extra 33 KB would leave one block per SM)."""
    return int(_teaching.d_padded(d) <= 64)


BWD_SOURCE = "fa2_bwd.cu"
BWD_KERNELS = ("fa2_bwd_preprocess", "fa2_bwd", "fa2_bwd_dq")
PREPROCESS_ROWS = 8  # fa2_bwd_preprocess: one warp per row


def blocks_per_sm(smem: int) -> int:
    return sm90.ctas_by_smem(smem)


def can_stage(dtype: torch.dtype, d: int) -> bool:
    """fa2_bwd.cu's staging buffer takes 16-bit inputs at d_pad = 128 with 16-byte aligned rows (d % 8 == 0)."""
    return dtype in (torch.float16, torch.bfloat16) and _teaching.d_padded(d) == 128 and d % 8 == 0


def prefetch(dtype: torch.dtype, d: int, block_q: int | None = None, block_k: int | None = None) -> bool:
    """fa2_bwd.cu's FA2_PREFETCH (v3): stage Q_{i+1}, dO_{i+1} with cp.async during step i. Only where
    `can_stage`, and only where the staging buffer (2·Br·d_pad·2 bytes) does not cost a block per SM
    (64 x 64: one either way; 32 x 32: two either way)."""
    if not can_stage(dtype, d):
        return False
    bq, bk = backward_blocks(d, dtype)
    bq, bk = bq if block_q is None else block_q, bk if block_k is None else block_k
    return blocks_per_sm(backward_shared_bytes(d, bq, bk, staged=True)) == blocks_per_sm(
        backward_shared_bytes(d, bq, bk))


def bwd_defines(dtype: torch.dtype, d: int, block_q: int | None = None, block_k: int | None = None, *,
                use_prefetch: bool | None = None) -> dict:
    """The backward's compile-time knobs beyond STORAGE, BR, BC (fa2_bwd.cu's header); use_prefetch=False
    builds v2 where v3 would prefetch (lab/teach_bwd_ab.py's A/B)."""
    on = prefetch(dtype, d, block_q, block_k)
    return {"D_PAD": _teaching.d_padded(d), "FA2_PREFETCH": int(on if use_prefetch is None else on and use_prefetch)}


def bwd_builds(dtype: torch.dtype, block_q: int | None = None, block_k: int | None = None) -> list[dict]:
    """Every backward build a dtype can launch at these blocks: d_pad 64 and 128, 128 with the prefetch."""
    builds = [bwd_defines(dtype, 64, block_q, block_k), bwd_defines(dtype, 128, block_q, block_k, use_prefetch=False),
              bwd_defines(dtype, 128, block_q, block_k)]
    return list({tuple(sorted(b.items())): b for b in builds}.values())


def compile_configs():
    """The forward's builds, and every backward build at 64 x 64 and at the default blocks of its d_pad."""
    bwd = {}
    for dtype in DTYPES:
        for d in (64, 128):
            for b in {(64, 64), backward_blocks(d)}:
                for extra in {str(x): x for x in (bwd_defines(dtype, d, *b, use_prefetch=False),
                                                  bwd_defines(dtype, d, *b))}.values():
                    for name in BWD_KERNELS:
                        bwd[str((name, dtype, b, extra))] = (BWD_SOURCE, name, _teaching.defines(dtype, *b, **extra))
    return (_teaching.compile_configs(SOURCE, [KERNEL], extra_defines=({"FA2_OWN_V": 0}, {"FA2_OWN_V": 1}))
            + [bwd[key] for key in sorted(bwd)])


def forward(q, k, v, *, causal=False, scale=None, block_q=64, block_k=64, mem=None):
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem, gqa=True)
    o = torch.empty_like(q)
    lse = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)
    fn = loader.get_function(SOURCE, KERNEL, defines=_teaching.defines(q.dtype, block_q, block_k,
                                                                      FA2_OWN_V=own_v(p.d)),
                             device=q.device.index)
    fn.launch((p.tiling.t_r, p.batch * p.heads), (_teaching.NTHREADS,),
              (q, k, v, o, lse, p.n_q, p.n_k, p.d, p.scale, int(causal), _teaching.heads_per_kv(q, k)),
              shared_mem=shared_bytes(p.d, block_q, block_k))
    return o, lse


def backward_shared_bytes(d: int, block_q: int = 64, block_k: int = 64, *, staged: bool = False) -> int:
    """fa2_bwd.cu's carving: K_j, V_j (Bc x (d_pad+4)), Q_i, dO_i (Br x (d_pad+4)), P^T, dS^T (Bc x (Br+4)),
    L_i, D_i (Br), float32; staged (FA2_PREFETCH): + Q_{i+1}, dO_{i+1} (Br x d_pad) at 16 bits."""
    d_pad = _teaching.d_padded(d)
    ldk = d_pad + 4
    f32 = _teaching.F32 * (2 * block_k * ldk + 2 * block_q * ldk + 2 * block_k * (block_q + 4) + 2 * block_q)
    return f32 + (2 * block_q * d_pad * 2 if staged else 0)


def _check_saved(q, o, lse, do):
    """o and do must look like q; lse like the forward's (B, H, Nq) float32."""
    b, h, n_q, _ = q.shape
    for name, t in (("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must match q: shape {tuple(q.shape)}, {q.dtype} on {q.device}; "
                             f"got {tuple(t.shape)}, {t.dtype} on {t.device}")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"lse must be a torch.Tensor, got {type(lse).__name__}")
    if lse.shape != (b, h, n_q) or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"lse must be float32 of shape {(b, h, n_q)} on {q.device} (the forward's); "
                         f"got {tuple(lse.shape)}, {lse.dtype} on {lse.device}")
    for name, t in (("o", o), ("lse", lse), ("do", do)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous; call .contiguous() first")


def backward_blocks(d: int, dtype: torch.dtype | None = None, aligned: bool = True) -> tuple[int, int]:
    """fa2_bwd.cu v5: the default (Br, Bc) of the backward. 64 x 64 at d <= 64 (two blocks per SM). At
    d_pad = 128, 64 x 64 with the v3 staging where it applies (`can_stage`, 16-byte aligned q and do), else
    32 x 32. Measured on the H200 (fp16, d = 128, N = 4k/8k, results/bwd_teaching_ab/v3_v4_staging_tiles/): 64 x 64 staged
    29.2-30.4 TFLOP/s, 32 x 32 staged (v4's default) 21.6-22.0, 64 x 64 unstaged (v2) 20.1-21.4: at one block
    per SM the staging hides what v4's second block per SM was meant to hide, with twice v4's reuse per shared
    read and half its dQ atomics. Without the staging 32 x 32 stays ahead of 64 x 64 (21.0-21.3 against
    20.1-21.4 at fp16)."""
    if _teaching.d_padded(d) == 64 or (dtype is not None and aligned and can_stage(dtype, d)):
        return 64, 64
    return 32, 32


def backward(q, k, v, o, lse, do, *, causal=False, scale=None, block_q=None, block_k=None, mem=None,
             use_prefetch=None):
    """FA2 Alg. 2 on the GPU: (dq, dk, dv) in q's dtype from the forward's o and lse and the gradient do.

    k, v may have H_kv heads dividing q's H (grouped-query); dk, dv then have H_kv heads, each the sum over its
    group's query heads. Rows that see no key (lse = -inf) get dq = 0 and add nothing to dk, dv. block_q, block_k: None picks
    `backward_blocks(d)`. use_prefetch: None (the default, `prefetch`) or False (fa2_bwd.cu v2's
    synchronous loads, for the A/B).
    """
    if use_prefetch is not None:  # a bool: 0 was taken as "not False" for the blocks and as off for the build (64 x 64
        # without the staging, the slow pair), "yes" failed in int()
        use_prefetch = flag("use_prefetch", use_prefetch)
    aligned = all(isinstance(t, torch.Tensor) and t.data_ptr() % 16 == 0 for t in (q, do))  # cp.async: 16 B
    if block_q is None or block_k is None:
        is4 = isinstance(q, torch.Tensor) and q.dim() == 4
        bq, bk = backward_blocks(q.shape[-1] if is4 else 64, q.dtype if is4 else None,
                                 aligned and use_prefetch is not False)
        block_q, block_k = bq if block_q is None else block_q, bk if block_k is None else block_k
    p = _teaching.prepare(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                          mem=mem, gqa=True)
    _check_saved(q, o, lse, do)
    knobs = bwd_defines(q.dtype, p.d, block_q, block_k,
                        use_prefetch=aligned if use_prefetch is None else use_prefetch and aligned)
    smem = backward_shared_bytes(p.d, block_q, block_k, staged=bool(knobs["FA2_PREFETCH"]))
    limit = loader.max_dynamic_smem(q.device.index)
    if smem > limit:
        raise ValueError(f"fa2 backward with Br={block_q}, Bc={block_k}, d={p.d} needs {smem:,} B of shared "
                         f"memory; this GPU allows {limit:,}: use smaller blocks (default 64 x 64)")
    bh, group = p.batch * p.heads, _teaching.heads_per_kv(q, k)
    dq_acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)  # zeroed by line 3
    delta = torch.empty(p.batch, p.heads, p.n_q, dtype=torch.float32, device=q.device)  # D, line 4
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    defs = _teaching.defines(q.dtype, block_q, block_k, **knobs)

    def fn(name):
        return loader.get_function(BWD_SOURCE, name, defines=defs, device=q.device.index)

    fn("fa2_bwd_preprocess").launch((-(-p.n_q // PREPROCESS_ROWS), bh), (_teaching.NTHREADS,),
                                    (o, do, dq_acc, delta, p.n_q, p.d))
    fn("fa2_bwd").launch((p.tiling.t_c, bh // group), (_teaching.NTHREADS,),  # one block per (j, b, h_kv)
                         (q, k, v, do, lse, delta, dq_acc, dk, dv, p.n_q, p.n_k, p.d, p.scale, int(causal), group),
                         shared_mem=smem)
    n = dq.numel()
    fn("fa2_bwd_dq").launch((min(-(-n // _teaching.NTHREADS), 8192),), (_teaching.NTHREADS,),
                            (dq_acc, dq, np.int64(n), p.scale))
    return dq, dk, dv
