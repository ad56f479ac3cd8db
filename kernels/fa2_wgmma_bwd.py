"""FlashAttention-2 backward with Hopper wgmma (kernels/cuda/fa2_wgmma_bwd.cu, fa2_wgmma_bwd_ws.cu; sm_90a): fp16/bf16,
fp32 accumulation.

    dq, dk, dv = backward(q, k, v, o, lse, do, causal=False, scale=None, deterministic=False, config=None, out=None,
                          impl=None)

Takes what kernels.fa2_wgmma.forward takes: q, o, do (B, H, Nq, d); k, v (B, H_kv, Nk, d) with H_kv dividing H
(grouped-query / multi-query: query head h reads kv head h // (H / H_kv)); one dtype (float16 or bfloat16);
d in {64, 96, 128, 256}; any strides with a unit last one whose other strides and base address are
16-byte aligned (what cp.async needs) -- e.g. a (B, N, H, d) tensor's .transpose(1, 2): no input is
copied (d = 96, 256 aside, below). lse: float32 (B, H, Nq) contiguous, as the forward returns it (natural log,
-inf for a row that sees no key: its dq is 0). Causal is bottom-right (query i sees key j iff
j <= i + Nk - Nq), as in the forward. dq comes back in q's layout, dk and dv in k's (a dense permutation of
(B, H, N, d) is kept; out=(dq, dk, dv) writes into given tensors of any aligned layout).

Three launches (FA2 Algorithm 2): D = rowsum(dO o O) and the dQ accumulator's zeroing over the B*H query
heads (fa2_wgmma_bwd.cu's pre kernel), the key-block-outer main kernel on a (Tc, B*H_kv) grid -- the CTA of key
block j loops over its group's query heads and their Q blocks, so dK_j, dV_j are summed over the group in registers
(no repeated K/V, no atomics on dK/dV) -- and dQ's conversion (fa2_wgmma_bwd.cu's dq / dq_bulk kernel).

Which main kernel (issue 42; docs/hopper-fa2-history.md, the backward's version log):
  v4  fa2_wgmma_bwd_ws.cu (kernels/fa2_wgmma_bwd_ws.py: its builds): FA3's warp specialisation -- a producer
      warpgroup issues the TMA loads of Q_i, dO_i, L2_i, D_i into a ring and dQ's bulk reduce-adds, two MMA
      warpgroups compute. The default at d in WS_HEAD_DIMS (64, 128) when deterministic=False and config= is not
      given, and q, k, v, do are layouts a TMA tensor map describes (kernels/tma.py: 16-byte aligned, positive
      strides; a stride-0 broadcast goes to v3). Its pre and dq_bulk launches are v3's default builds.
  v3  fa2_wgmma_bwd.cu's main kernel: d = 96 and 256, deterministic=True, any config= (the lab's sweeps), the
      layouts v4's tensor maps cannot describe, and d = 64, 128 when WS_HEAD_DIMS is emptied (a lab A/B's switch).
impl= picks explicitly: None (the rule above), "v3", or "ws" (v4; "v4" is another name for it; config= is then a
dict of its knobs, kernels.fa2_wgmma_bwd_ws.KNOBS; a ValueError for d = 96, 256, deterministic=True or a layout TMA
cannot describe). A config= with one of v4's own knobs (DS_BUFS, DQ_BUFS, MERGED, PRODUCER_REGS, L2_HINT) needs
impl="ws": without it, a ValueError says so. WS_HEAD_DIMS must be a subset of fa2_wgmma_bwd_ws.HEAD_DIMS.
GPU status: the GPU checks and timings of results/bwd_ws_v4 ran on the build with one empty_q arrive per consumer
warp; the shipped build (every consumer thread arrives on empty_q) has compiled and passed the CPU protocol model
but not yet run on a GPU.

deterministic=True: dQ's fp32 reduce-adds into each Q block happen in key-block order (a per-(b*h, Q block)
semaphore; fa2_wgmma_bwd.cu's header says how and what it costs), so two runs give identical bits. The
default (False) lets them land in any order, as before.

Head dims 64 and 128 are the kernel's own tiles; the other two:
  d = 96   the d = 128 build with D_REAL=96: the tile loads zero-fill columns 96..127 in shared memory
           (zero columns leave S = Q K^T and dP = dO V^T, hence P and dS, unchanged; the softmax scale stays
           1/sqrt(96)), and the stores of dq, dk, dv and the reads of o, do for D skip them. No copies of
           inputs or gradients; the cost, counted in MMA work (not timed), is 4/3 of d = 96's (the d = 128
           kernel's), and the d = 128 kernel's smem.
  d = 256  dK_j, dV_j (64 x 256 fp32 each per warpgroup, 256 registers a thread) do not fit next to S^T and
           dP^T, so the main kernel runs three times on one warpgroup (Bc = 64, Br = 64, 202 KB of smem):
           PASS 0 accumulates dK_j, dV_j columns 0..127, PASS 1 columns 128..255, PASS 2 dQ (red atomics: the
           fp32 bulk-reduce slice would not fit in smem). Each pass recomputes S^T and dP^T over all 256
           columns: 9 of the five products' worth of MMA work instead of 5 (1.8x the FLOPs), K_j, V_j, Q_i
           and dO_i read three times. deterministic=True (or D256_KERNEL = False) takes _backward_torch:
           FA2 Alg. 2 in float32 torch matmuls (cuBLAS, TF32 off), blocked over query rows so S never
           exceeds ~2^26 elements per block, K/V grouped by a reshape (no repeat), causal keys past a
           block's last diagonal skipped: correct and deterministic, expected (not timed) to be several times
           slower (fp32 cuBLAS and HBM passes over S-sized blocks). FA3's hdim-256 backward (dK/dV split across two MMA warpgroups,
           a producer warp) is the path to speed.
"""
from __future__ import annotations

from pathlib import Path

from counting import checks
from counting.checks import check_grid_rows
from kernels import fa2_tc, fa2_wgmma_bwd_ws, loader

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma_bwd.cu"
KERNEL = "fa2_wgmma_bwd"
KERNEL_PRE = "fa2_wgmma_bwd_pre"
KERNEL_DQ = "fa2_wgmma_bwd_dq"
KERNEL_DQ_BULK = "fa2_wgmma_bwd_dq_bulk"  # DQ_BULK=1: the accumulator is in per-tile fragment order
HEAD_DIMS = (64, 96, 128, 256)  # what backward() takes
KERNEL_DIMS = (64, 96, 128, 256)  # what the .cu builds (96 on the 128 tiles, D_REAL=96; 256 in three PASSes)
WS_HEAD_DIMS = (64, 128)  # where backward() runs v4's main kernel by default (fa2_wgmma_bwd_ws); () -> v3 everywhere
IMPLS = (None, "v3", "ws", "v4")  # backward(impl=...); "v4" is another name for "ws" (fa2_wgmma_bwd_ws.cu)
D256_KERNEL = True  # d = 256 through the kernel's three passes; False: _backward_torch (float32 torch, slower)
ARCH = "sm_90a"
PAD = 128  # rows of the padded L2 / D / dQ-accumulator buffers: a multiple of every Br

# Knobs of the .cu file: NWG (warpgroups; Bc = 64 * NWG), BR (Br), STAGES (Q/dO ring slots), MIN_BLOCKS,
# DQ_BULK (dQ through smem and one TMA reduce-add per warpgroup and step, instead of red.global.add.v2), ORDER (0: a
# key block's steps run its group's query heads outer, i ascending; 1: i descending, heads inner; order_configs()),
# LPT (1: grid (B*H_kv, Tc), every row's key block 0 dispatched first: the longest causal CTAs first; grid()).
DEFAULTS = dict(STAGES=2, MIN_BLOCKS=1, DQ_BULK=0)  # DQ_V4: red.v4 instead of .v2 when DQ_BULK=0
CONFIGS = {  # v1 sweep winners
    64: dict(NWG=2, BR=128, DQ_BULK=1),
    128: dict(NWG=2, BR=64, STAGES=3, DQ_BULK=1),
    256: dict(NWG=1, BR=64, STAGES=2, DQ_BULK=0),  # the only build that fits (K_j, V_j, 2 x Q_i, dO_i: 202 KB smem)
}
PASSES_256 = (0, 1, 2)  # dK_j, dV_j columns 0..127; columns 128..255; dQ (each recomputes S^T and dP^T)
# v1 sweep (results/bwd_wgmma_v1.json, fp16, N = 2k/4k/16k): d=64 NWG=2 Br=128 DQ_BULK=1 297-353
# TFLOP/s non-causal (NWG=1 Br=64 x2 CTAs/SM: 257-301), d=128 NWG=2 Br=64 STAGES=3 DQ_BULK=1 358-420
# (STAGES=2: 333-404, red.v2 atomics: 326-384). SDPA flash 225-300, cuDNN 376-523. Dropped before timing:
# d=64 Br=128 STAGES=3 (spills 104 B), NWG=2 Br=64 at d=64 (a 32-column dQ slice is half a swizzle panel).
# v2 sweep (results/bwd_wgmma_v2.json): ROTATE (each key block starts at its own Q block) 0-4% slower,
# DQ_V4 (red.v4) 3-15% slower than DQ_BULK: the defaults stay.
SWEEP = {
    64: [dict(NWG=2, BR=128, DQ_BULK=1), dict(NWG=2, BR=128, DQ_BULK=1, ROTATE=1), dict(NWG=2, BR=128, DQ_V4=1),
         dict(NWG=2, BR=128, DQ_V4=1, ROTATE=1)],
    128: [dict(NWG=2, BR=64, STAGES=3, DQ_BULK=1), dict(NWG=2, BR=64, STAGES=3, DQ_BULK=1, ROTATE=1),
          dict(NWG=2, BR=64, STAGES=3, DQ_V4=1), dict(NWG=2, BR=64, STAGES=3, DQ_V4=1, ROTATE=1)],
}
# ptxas (NVRTC 13.0, sm_90a) at the 255-register cap of 256-thread CTAs: d=128 NWG=2 Br=64 spills 36 B
# (0 with DQ_BULK), d=64 NWG=2 Br=128 60 B (72 with DQ_BULK): dK, dV, S^T, dP^T and the in-flight P^T / dS^T
# fragments are live together. The compile test holds every build to this budget so growth fails.
# v3 (GQA + strided views): the 18 stride arguments live in the constant bank; b, kv head and the group's first
# query head are re-read from %ctaid.y where used, not held across the loop: d=64 80 B (was 72; 96 when held),
# d=128 0. DETERMINISTIC=1 (its own build; the semaphore's address and spin) d=64 104 B, d=128 0.
MAX_SPILL_BYTES = 80
MAX_SPILL_BYTES_DETERMINISTIC = 112


def spill_budget(defines: dict) -> int:
    """The compile test's cap on the main kernel's spill bytes for this build."""
    return MAX_SPILL_BYTES_DETERMINISTIC if defines.get("DETERMINISTIC") else MAX_SPILL_BYTES
KNOBS = set(DEFAULTS) | {"NWG", "BR", "DQ_V4", "ROTATE", "DQ_ABLATE", "DETERMINISTIC", "ORDER", "LPT"}  # the .cu's compile-time knobs
V4_ONLY_KNOBS = fa2_wgmma_bwd_ws.KNOBS - KNOBS  # DS_BUFS, DQ_BUFS, MERGED, PRODUCER_REGS, L2_HINT: config= of impl='ws'


def knob_errors(defines: dict) -> list[str]:
    """Why fa2_wgmma_bwd.cu cannot build these defines (its static_asserts, lines 115-121, and its switches); empty:
    it builds. defines_for refuses a config= with these reasons instead of a compile error on the GPU."""
    g = defines.get
    d, nwg, br, stages = g("HEAD_DIM", 128), g("NWG", 2), g("BR", 64), g("STAGES", 2)
    out = [f"{k}={g(k)}: {k} is a switch, 0 or 1" for k in ("DQ_BULK", "ROTATE", "DQ_V4", "DETERMINISTIC", "LPT")
           if g(k, 0) not in (0, 1)]
    if g("ORDER", 0) not in (0, 1):
        out.append(f"ORDER={g('ORDER')}: 0 (heads outer, i ascending) or 1 (i descending, heads inner)")
    elif g("ORDER", 0) and g("ROTATE", 0):
        out.append("ORDER=1 with ROTATE=1: ROTATE rotates ORDER=0's ascending Q blocks")
    if g("DETERMINISTIC", 0) and not g("DQ_BULK", 0):
        out.append("DETERMINISTIC=1 orders the bulk reduce-adds of dQ: needs DQ_BULK=1")
    rules = [
        (br in (64, 128), f"BR={br}: 64 or 128"),
        (nwg in (1, 2), f"NWG={nwg}: 1 or 2 warpgroups"),
        (br not in (64, 128) or nwg not in (1, 2) or nwg % (br // 64) == 0,
         f"NWG={nwg}, BR={br}: every 64-row slice of dQ needs a warpgroup"),
        (br not in (64, 128) or nwg not in (1, 2) or nwg % (br // 64) or d // (nwg // (br // 64)) in (64, 128)
         or d == 256,
         f"NWG={nwg}, BR={br}, d={d}: dQ slices must be whole 64-column swizzle panels"),
        (2 <= stages <= 3, f"STAGES={stages}: 2..3 ring slots"),
        (g("MIN_BLOCKS", 1) >= 1, f"MIN_BLOCKS={g('MIN_BLOCKS')}: at least one CTA per SM"),
        (g("DQ_ABLATE", 0) in (0, 1, 2), f"DQ_ABLATE={g('DQ_ABLATE')}: 0, 1 or 2"),
        (g("D_REAL", d) in (d, 96 if d == 128 else d), f"D_REAL={g('D_REAL')}: HEAD_DIM, or 96 with HEAD_DIM=128"),
        (d != 256 or (nwg, br, stages, g("DQ_BULK", 0), g("DETERMINISTIC", 0)) == (1, 64, 2, 0, 0),
         "HEAD_DIM=256 builds only NWG=1, BR=64, STAGES=2, DQ_BULK=0 (red atomics), not DETERMINISTIC"),
        (g("PASS", 0) in ((0, 1, 2) if d == 256 else (0,)), f"PASS={g('PASS')}: 0..2, and only with HEAD_DIM=256"),
    ]
    return out + [why for holds, why in rules if not holds]


def defines_for(d: int, is_bf16: bool, config: dict | None = None, deterministic: bool = False,
                pass_: int = 0) -> dict:
    """The kernel build for head dim d (64, 128; 96 is the 128 tiles with D_REAL=96; 256 one of three passes,
    pass_ in PASSES_256, with no config= and no deterministic mode)."""
    if d not in KERNEL_DIMS:
        raise ValueError(f"the fa2_wgmma backward kernel builds head dims {KERNEL_DIMS}, got d={d}")
    if d == 256:
        if config is not None or deterministic or pass_ not in PASSES_256:
            raise ValueError("fa2_wgmma backward: d=256 has one build per pass (0, 1, 2), no config= and no "
                             "deterministic mode (backward(deterministic=True) runs _backward_torch there)")
        return dict(HEAD_DIM=256, IS_BF16=int(bool(is_bf16)), **dict(DEFAULTS, **CONFIGS[256]), PASS=pass_)
    det = dict(DETERMINISTIC=1) if deterministic else {}
    base = dict(HEAD_DIM=128, D_REAL=96) if d == 96 else dict(HEAD_DIM=d)
    d = base["HEAD_DIM"]
    if config is None:
        return dict(base, IS_BF16=int(bool(is_bf16)), **dict(DEFAULTS, **CONFIGS[d], **det))
    if deterministic and "DETERMINISTIC" not in config:
        config = dict(config, **det)
    # a dict of known integer knobs with NWG and BR (a typo must not time the default build under another name; a
    # string was a 'dictionary update sequence' error, 64.0 or True a define), then what the .cu file builds
    cfg = checks.knob_config("fa2_wgmma backward", config, KNOBS, ("NWG", "BR"), CONFIGS[d])
    defines = dict(base, IS_BF16=int(bool(is_bf16)), **dict(DEFAULTS, **cfg))
    errors = knob_errors(defines)
    if not errors and smem_bytes(defines) > fa2_tc.SMEM_PER_BLOCK:
        errors = [f"NWG={defines['NWG']} BR={defines['BR']} STAGES={defines.get('STAGES', 2)} at d={d} needs "
                  f"{smem_bytes(defines)} B of shared memory per CTA; the SM gives at most {fa2_tc.SMEM_PER_BLOCK}"]
    if errors:
        raise ValueError(f"fa2_wgmma backward: {'; '.join(errors)}")
    return defines


def threads(defines: dict) -> int:
    return 128 * defines["NWG"]


def block_n(defines: dict) -> int:
    return 64 * defines["NWG"]


def smem_bytes(defines: dict) -> int:
    """K_j, V_j + STAGES slots of Q_i, dO_i (fp16/bf16) + the dS^T tile + STAGES x (L2_i, D_i) fp32 + 1 KB
    so the kernel can align its base to 1024 B."""
    d, bn, br, st = defines["HEAD_DIM"], block_n(defines), defines["BR"], defines.get("STAGES", 2)
    dq_slices = br * d * 4 if defines.get("DQ_BULK") else 0  # NWG slices of 64 x DQ_N fp32 = one Br x d tile
    return 2 * bn * d * 2 + 2 * st * br * d * 2 + bn * br * 2 + dq_slices + st * 8 * br + 1024


def _build(defines: dict) -> list[tuple[str, str, dict]]:
    return [(str(SOURCE), k, defines) for k in (KERNEL, KERNEL_PRE, _dq_kernel(defines))]


def _dq_kernel(defines: dict) -> str:
    return KERNEL_DQ_BULK if defines.get("DQ_BULK") else KERNEL_DQ


def compile_configs() -> list[tuple[str, str, dict]]:
    """Every build backward() can launch without config=: v3's at d = 64, 96 (the 128 tiles, D_REAL=96), 128, both
    dtypes, default and deterministic (GQA and strides are run-time arguments of the same builds), d = 256's three
    passes, and v4's main kernel at WS_HEAD_DIMS (fa2_wgmma_bwd_ws.cu; its pre and dq_bulk are v3's default builds,
    listed above). v3's builds come first; sweep_configs() and the v3 compile tests take those whose source is SOURCE."""
    return ([item for d in (64, 96, 128) for bf16 in (0, 1) for det in (False, True)
             for item in _build(defines_for(d, bf16, deterministic=det))]
            + [item for bf16 in (0, 1) for p in PASSES_256 for item in _build(defines_for(256, bf16, pass_=p))]
            + [c for c in fa2_wgmma_bwd_ws.compile_configs() if c[2]["HEAD_DIM"] in ws_head_dims()])


def ws_companion_defines(d: int, is_bf16: bool) -> dict:
    """The v3 build whose pre and dq_bulk kernels v4 launches at head dim d (64, 128): v3's default build, whose dQ
    accumulator layout (DQ_BULK=1, NWG, Br) v4's main kernel must share. ValueError if the two modules' CONFIGS drift
    apart (a build that would convert dQ in another fragment order)."""
    defs = defines_for(d, is_bf16)
    ws_br = fa2_wgmma_bwd_ws.CONFIGS[d]["BR"]
    if (defs["DQ_BULK"], defs["NWG"], defs["BR"]) != (1, fa2_wgmma_bwd_ws.NWG, ws_br):
        raise ValueError(f"fa2_wgmma backward: v3's default build at d={d} (DQ_BULK={defs['DQ_BULK']}, "
                         f"NWG={defs['NWG']}, BR={defs['BR']}) is not the dQ accumulator layout v4's main kernel "
                         f"writes (DQ_BULK=1, NWG={fa2_wgmma_bwd_ws.NWG}, BR={ws_br})")
    return defs


def ws_head_dims() -> tuple:
    """WS_HEAD_DIMS, checked where it is read: a tuple of head dims v4 builds (fa2_wgmma_bwd_ws.HEAD_DIMS), () for
    v3 everywhere."""
    if not isinstance(WS_HEAD_DIMS, tuple) or any(x not in fa2_wgmma_bwd_ws.HEAD_DIMS for x in WS_HEAD_DIMS):
        raise ValueError(f"fa2_wgmma_bwd.WS_HEAD_DIMS={WS_HEAD_DIMS!r}: a tuple of head dims in "
                         f"{fa2_wgmma_bwd_ws.HEAD_DIMS} (where v4 runs by default), or () for v3 everywhere")
    return WS_HEAD_DIMS


def v3_compile_configs() -> list[tuple[str, str, dict]]:
    """compile_configs()' builds of fa2_wgmma_bwd.cu (v3's main kernel, the pre and conversion kernels)."""
    return [c for c in compile_configs() if c[0] == str(SOURCE)]


# Issue 42's step-order A/B (lab/bwd_order_ab.py): ORDER=1 runs a key block's (query head, i) steps i descending,
# heads inner, so the CTAs of one kv head read each Q_i, dO_i tile at the same step (L2 reuse under causal GQA).
# Not the default until a GPU A/B decides; these are its builds, compiled and held to the same spill budget.

def step_tiles(order: int, i_first: int, t_r: int, g: int) -> list[tuple[int, int]]:
    """(query head of the group 0..G-1, Q block i) of steps t = 0..G*T-1 of a key block whose first visible Q block is
    i_first (T = Tr - i_first), as fa2_wgmma_bwd.cu's q_block / head_of map t (ROTATE=0). ORDER=0: t = h*T +
    (i - i_first); ORDER=1: t = (Tr-1 - i)*G + h, the same step for every key block that sees tile (h, i)."""
    if order not in (0, 1):
        raise ValueError(f"ORDER={order}: 0 or 1")
    n = max(0, t_r - i_first)
    if order:
        return [(t % g, i_first + n - 1 - t // g) for t in range(g * n)]
    return [(t // n, i_first + t % n) for t in range(g * n)]


def order_config(d: int, order: int, lpt: int = 0) -> dict:
    """config= for the default build of head dim d (64, 96, 128) with step order `order` (0 or 1) and dispatch order
    `lpt` (0: grid (Tc, B*H_kv); 1: (B*H_kv, Tc), longest CTAs first)."""
    return dict(CONFIGS[128 if d == 96 else d], ORDER=order, **(dict(LPT=1) if lpt else {}))


ORDER_AB = fa2_wgmma_bwd_ws.ORDER_AB  # (ORDER, LPT) of the A/B's non-default builds (v4's A/B has the same)


def order_configs() -> list[tuple[str, str, dict]]:
    """The ORDER=1 / LPT=1 twins of compile_configs()' d = 64, 96, 128 builds (both dtypes, deterministic on and off)."""
    return [item for d in (64, 96, 128) for bf16 in (0, 1) for det in (False, True) for order, lpt in ORDER_AB
            for item in _build(defines_for(d, bf16, order_config(d, order, lpt), deterministic=det))]


def grid(defines: dict, n_k: int, rows: int) -> tuple[int, int, int]:
    """The main kernel's grid: (Tc, B*H_kv), or (B*H_kv, Tc) under LPT (key block j = blockIdx.y)."""
    t_c = -(-n_k // block_n(defines))
    if defines.get("LPT"):
        if t_c > 65535:
            raise ValueError(f"fa2_wgmma backward: LPT=1 puts the Tc = {t_c} key blocks on grid.y, at most 65535 "
                             f"(Nk <= {65535 * block_n(defines)}); use LPT=0")
        return (rows, t_c, 1)
    return (t_c, rows, 1)


def sweep_configs() -> list[tuple[str, str, dict]]:
    """v3's builds: those of compile_configs() and the SWEEP's (fa2_wgmma_bwd.cu only)."""
    out = v3_compile_configs()
    for d in SWEEP:
        for cfg in SWEEP[d]:
            for bf16 in (0, 1):
                for item in _build(defines_for(d, bf16, cfg)):
                    if item not in out:
                        out.append(item)
    return out


_NAMES = ("q", "k", "v", "o", "do")


def _check(q, k, v, o, lse, do) -> None:
    """Everything wrong with the inputs is named before anything touches the GPU (and, but for the device
    itself, on CPU tensors too: the order below lets the CPU tests reach every rule)."""
    import torch

    dtypes = (torch.float16, torch.bfloat16)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in zip(_NAMES, (q, k, v, o, do)):
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; the fa2_wgmma backward "
                            "supports float16, bfloat16")
    if not (q.dtype == k.dtype == v.dtype == o.dtype == do.dtype):
        raise TypeError(f"q, k, v, o, do must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}, {o.dtype}, "
                        f"{do.dtype}")
    b, h, n_q, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"head dim d={d} unsupported; the fa2_wgmma backward takes d in {list(HEAD_DIMS)}")
    if k.shape[0] != b or v.shape != k.shape or k.shape[3] != d:
        raise ValueError(f"k and v must be (B, H_kv, Nk, d) = ({b}, H_kv, Nk, {d}), got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    h_kv = k.shape[1]
    if h_kv < 1 or h % h_kv:
        raise ValueError(f"k and v have H_kv={h_kv} heads, which must divide q's H={h} (grouped-query attention: "
                         f"query head h reads kv head h // (H / H_kv))")
    if o.shape != q.shape or do.shape != q.shape:
        raise ValueError(f"o and do must have q's shape {tuple(q.shape)}, got o {tuple(o.shape)}, "
                         f"do {tuple(do.shape)}")
    if lse.shape != (b, h, n_q) or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 of shape {(b, h, n_q)} (the forward's), got {lse.dtype} "
                         f"{tuple(lse.shape)}")
    if min(q.shape) < 1 or k.shape[2] < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if not lse.is_contiguous():
        raise ValueError("lse must be contiguous (as the forward returns it); call .contiguous() first")
    for name, t in zip(_NAMES, (q, k, v, o, do)):
        _check_strides(name, t, 8)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do)):
        if not t.is_cuda:
            raise ValueError(f"{name} is on {t.device}; CUDA kernels need CUDA tensors "
                             "(use variants.VARIANTS for CPU references)")
        if t.device != q.device:
            raise ValueError(f"q, k, v, o, lse, do must be on one device; {name} is on {t.device}")
    for name, t in zip(_NAMES, (q, k, v, o, do)):  # cp.async and uint4 loads: a view at an element offset
        loader.check_aligned(name, t)  # would fault on the GPU
    check_grid_rows("fa2_wgmma backward", b, h)


def _check_strides(name: str, t, multiple: int) -> None:
    """A unit last stride, and the (batch, head, row) strides whole multiples of `multiple` elements: 8 for
    16-byte cp.async rows and uint4 stores, 2 for the 4-byte stores of dK and dV."""
    if t.stride(3) != 1 and t.shape[3] > 1:
        raise ValueError(f"{name} must have a unit stride in its last dimension (d), got strides {t.stride()} for "
                         f"shape {tuple(t.shape)}; call .contiguous() for a copy")
    for dim, what in ((2, "row"), (1, "head"), (0, "batch")):
        if t.stride(dim) % multiple and t.shape[dim] > 1:
            raise ValueError(f"{name}'s {what} stride {t.stride(dim)} (dim {dim} of strides {t.stride()}) is not a "
                             f"multiple of {multiple} elements ({2 * multiple} bytes), which the kernel's "
                             f"{'16-byte copies' if multiple == 8 else '4-byte stores'} need; call .contiguous()")


def _empty_like_layout(t):
    """An empty tensor of t's shape and dtype whose dims are laid out in t's stride order (torch.empty_like
    does this for dense tensors; a slice of a larger buffer gets the dense version of its permutation), d innermost
    whatever the others' strides: the kernels store rows of unit stride (a broadcast's stride-0 head dim would
    otherwise sort after d)."""
    import torch

    like = torch.empty_like(t)  # dense inputs: the same strides, size-1 dimensions' included
    if like.stride() == t.stride():
        return like
    last = t.dim() - 1
    perm = sorted(range(t.dim()), key=lambda i: (i == last, -t.stride(i), i))
    buf = torch.empty([t.shape[i] for i in perm], dtype=t.dtype, device=t.device)
    return buf.permute([perm.index(i) for i in range(t.dim())])


def _grads(q, k, out):
    if out is None:
        return _empty_like_layout(q), _empty_like_layout(k), _empty_like_layout(k)
    fa2_tc.check_out(out, ("dq", "dk", "dv"))
    for name, t, like in zip(("dq", "dk", "dv"), out, (q, k, k)):
        if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
            raise ValueError(f"out {name} must be a {like.dtype} tensor of shape {tuple(like.shape)} on "
                             f"{like.device}")
        # dQ is stored in 16-byte pieces (DQ_BULK=0's uint4), dK and dV in 4-byte ones (fa2_wgmma_bwd.cu:
        # *(u32*)(dk_row + ...), the only stores to them in any build)
        _check_strides(f"out {name}", t, 8 if name == "dq" else 2)
        loader.check_aligned(f"out {name}", t, 16 if name == "dq" else 4)
    return out


def _strides(t):
    import numpy as np

    return tuple(np.int64(x) for x in t.stride()[:3])


def _impl(impl, d: int | None, deterministic: bool, config) -> str | None:
    """impl= checked against what needs no tensor (d: None when q is not a rank-4 tensor yet): None (the rule), "v3"
    or "ws" ("v4" is its other name). ValueError for an unknown impl, for impl='ws' with deterministic=True or a d v4
    does not build, and for a config= holding v4's knobs without impl='ws' (the rule would run v3, whose knob check
    would only call them unknown)."""
    if impl not in IMPLS:
        raise ValueError(f"fa2_wgmma backward: impl={impl!r}; it takes None (v4 at d in {WS_HEAD_DIMS} unless "
                         "deterministic or config=, else v3), 'v3' or 'ws' (also named 'v4')")
    impl = "ws" if impl == "v4" else impl
    if impl == "ws":
        if deterministic:
            raise ValueError("the v4 backward (impl='ws') has no deterministic mode; use impl='v3' or None with "
                             "deterministic=True")
        if d is not None and d not in fa2_wgmma_bwd_ws.HEAD_DIMS:
            raise ValueError(f"head dim d={d} unsupported; the v4 backward (impl='ws') takes d in "
                             f"{list(fa2_wgmma_bwd_ws.HEAD_DIMS)} (impl='v3' also takes 96 and 256)")
    elif isinstance(config, dict):
        v4_only = sorted(set(config) & V4_ONLY_KNOBS, key=str)
        if v4_only:
            raise ValueError(f"fa2_wgmma backward: config {v4_only[0]} is v4's knob: pass impl='ws' (v4's knobs: "
                             f"{sorted(fa2_wgmma_bwd_ws.KNOBS)}; v3's: {sorted(KNOBS)})")
    return impl


def main_kernel(q, k, v, do, *, deterministic: bool = False, config: dict | None = None, impl: str | None = None):
    """Which main kernel backward() runs for these (checked) inputs: "ws" (v4, fa2_wgmma_bwd_ws.cu) or "v3" (the
    module docstring's rule). impl="ws" (or "v4") where v4 cannot run raises ValueError (tma.LayoutError for a
    layout)."""
    d = q.shape[3]
    impl = _impl(impl, d, deterministic, config)
    if impl == "ws":
        err = fa2_wgmma_bwd_ws.layout_error(q, k, v, do)
        if err is not None:
            raise err
        return "ws"
    if impl is None and config is None and not deterministic and d in ws_head_dims():
        # a layout v3 takes but a TMA map cannot describe (a stride-0 broadcast): v3, as before v4 was the default
        return "ws" if fa2_wgmma_bwd_ws.layout_error(q, k, v, do) is None else "v3"
    return "v3"


def backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None,
             deterministic: bool = False, config: dict | None = None, out=None, impl: str | None = None, **options):
    """FA2 Algorithm 2 with wgmma; returns (dq, dk, dv). out=(dq, dk, dv) writes into given tensors. The main kernel
    is v4's or v3's (main_kernel; the module docstring). Every check of the inputs, impl= and config= runs before
    the GPU is asked for (the CPU tests reach them)."""
    import torch

    if options:
        raise TypeError(f"fa2_wgmma backward takes no options {sorted(options)} (it has deterministic=, config=, "
                        "out=, impl=)")
    deterministic = checks.flag("deterministic", deterministic)
    d = q.shape[3] if isinstance(q, torch.Tensor) and q.dim() == 4 else None
    _impl(impl, d, deterministic, config)  # named before the shared input checks
    _check(q, k, v, o, lse, do)
    kind = main_kernel(q, k, v, do, deterministic=deterministic, config=config, impl=impl)
    d = q.shape[3]
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # as the forward checks them
    bf16 = q.dtype == torch.bfloat16
    rows, n_k = k.shape[0] * k.shape[1], k.shape[2]
    # the builds and grids (LPT's limit on Tc) are settled before the GPU is asked for and anything is allocated
    ws_defs = None
    if kind == "ws":
        ws_defs = fa2_wgmma_bwd_ws.defines_for(d, bf16, config)
        passes = [ws_companion_defines(d, bf16)]  # v3's default build: the pre and dq_bulk kernels v4 launches
        grids = [grid(dict(ws_defs, NWG=fa2_wgmma_bwd_ws.NWG), n_k, rows)]
    elif d == 256:
        if config is not None:
            raise ValueError("fa2_wgmma backward: d=256 has one build (three passes); it takes no config=")
        passes = [defines_for(256, bf16, pass_=p) for p in PASSES_256]
        grids = [grid(p, n_k, rows) for p in passes]
    else:
        passes = [defines_for(d, bf16, config, deterministic)]
        grids = [grid(passes[0], n_k, rows)]
    loader.require_hopper(q.device, "the fa2_wgmma backward needs a compute capability 9.x GPU (wgmma, sm_90a)")
    dq, dk, dv = _grads(q, k, out)
    if d == 256 and (deterministic or not D256_KERNEL):  # the passes' dQ goes by red atomics: not bitwise repeatable
        _backward_torch(q, k, v, o, lse, do, causal, scale, dq, dk, dv)
    else:
        _launch(q, k, v, o, lse, do, causal, scale, passes, grids, (dq, dk, dv), ws=ws_defs)
    return dq, dk, dv


def _launch(q, k, v, o, lse, do, causal, scale, passes, grids, grads, ws: dict | None = None) -> None:
    """The pre kernel, the main kernel once per build in passes on its grid in grids (one; d = 256: three) or, given
    ws (v4's defines), v4's main kernel once on grids[0] (passes: ws_companion_defines, whose pre and dq_bulk it
    shares), dQ's conversion."""
    import torch

    dq, dk, dv = grads
    defs = passes[0]
    b, h, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    n_pad = -(-n_q // PAD) * PAD
    l2 = torch.empty((b * h, n_pad), dtype=torch.float32, device=q.device)
    dd = torch.empty_like(l2)
    dq_acc = torch.empty((b * h, n_pad, defs["HEAD_DIM"]), dtype=torch.float32, device=q.device)  # d=96: 128 wide
    # DETERMINISTIC: key blocks done per (b*h, Q block); otherwise an unused pointer
    sem = (torch.zeros((b * h, n_pad // defs["BR"]), dtype=torch.int32, device=q.device)
           if defs.get("DETERMINISTIC") else l2)
    dev = q.device.index

    def fn(name, defs=defs):
        return loader.get_function(SOURCE, name, defines=defs, arch=ARCH, device=dev)

    fn(KERNEL_PRE).launch((n_pad // 64, b * h, 1), (128, 1, 1),
                          (o, do, lse, l2, dd, dq_acc, int(n_q), int(n_pad), int(h), *_strides(o), *_strides(do)))
    if ws is not None:
        fa2_wgmma_bwd_ws.launch_main(ws, grids[0], dev, q, k, v, do, l2, dd, dq_acc, dk, dv, n_pad, scale, causal, h,
                                     h_kv, _strides)
    else:
        args = (q, k, v, do, l2, dd, dq_acc, dk, dv, int(n_q), int(n_k), int(n_pad), float(scale * fa2_tc.LOG2E),
                float(scale), int(bool(causal)), int(h), int(h // h_kv), sem,
                *_strides(q), *_strides(k), *_strides(v), *_strides(do), *_strides(dk), *_strides(dv))
        for p, g in zip(passes, grids):
            fn(KERNEL, p).launch(g, (threads(p), 1, 1), args, shared_mem=smem_bytes(p))
    grid_dq = (n_pad // defs["BR"], b * h, 1) if defs.get("DQ_BULK") else (-(-n_q // 64), b * h, 1)
    fn(_dq_kernel(defs)).launch(grid_dq, (128, 1, 1),
                                (dq_acc, dq, int(n_q), int(n_pad), float(scale), int(h), *_strides(dq)))


_S_BLOCK = 1 << 26  # elements of one S block in _backward_torch (256 MB in float32)


def _backward_torch(q, k, v, o, lse, do, causal, scale, dq, dk, dv) -> None:
    """FA2 Alg. 2 in float32 torch (the d = 256 route; see the module docstring): query rows in blocks of
    Br so S_i (B, H, Br, Nk) stays under _S_BLOCK elements; a GQA group is one batched matmul over its
    G x Br query rows (k, v reshaped, never repeated). Deterministic: no atomics, a fixed block order."""
    import torch

    b, h, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    g = h // h_kv
    kf, vf = k.float(), v.float()
    dk_acc, dv_acc = torch.zeros_like(kf), torch.zeros_like(vf)          # FA2 Alg. 2 line 7
    dd = (do.float() * o.float()).sum(-1)                                # line 4: D = rowsum(dO o O)
    br = max(1, min(n_q, _S_BLOCK // max(1, b * h * n_k)))
    keys = torch.arange(n_k, device=q.device)
    for r0 in range(0, n_q, br):
        r1 = min(n_q, r0 + br)
        c = r1 - r0
        # causal: keys past the block's last row's diagonal are hidden from all its rows (FA2 Alg. 2 line 8's skip)
        n_kv = min(n_k, r1 + n_k - n_q) if causal else n_k
        if n_kv <= 0:  # no row of the block sees a key: dq = 0, nothing for dk, dv
            dq[:, :, r0:r1] = 0
            continue
        kb, vb = kf[:, :, :n_kv], vf[:, :, :n_kv]

        def grouped(t):  # (B, H, c, x) -> (B, H_kv, G * c, x): the group's query rows against one kv head
            return t[:, :, r0:r1].float().reshape(b, h_kv, g * c, t.shape[-1])

        qi, doi = grouped(q), grouped(do)
        li = lse[:, :, r0:r1].reshape(b, h_kv, g * c, 1)
        di = dd[:, :, r0:r1].reshape(b, h_kv, g * c, 1)
        s = (qi @ kb.transpose(-1, -2)) * scale                          # line 10
        p = torch.exp(s - torch.where(torch.isinf(li), torch.zeros_like(li), li))  # line 11
        seen = ~torch.isinf(li)                                          # a row that saw no key: P = 0
        if causal:
            rows = torch.arange(r0, r1, device=q.device).repeat(g)
            seen = seen & (keys[None, :n_kv] <= rows[:, None] + (n_k - n_q))
        p = torch.where(seen, p, torch.zeros_like(p))
        dv_acc[:, :, :n_kv] += p.transpose(-1, -2) @ doi                 # line 12
        dp = doi @ vb.transpose(-1, -2)                                  # line 13
        ds = p * (dp - di)                                               # line 14
        dqi = (ds @ kb) * scale                                          # line 15
        dq[:, :, r0:r1] = dqi.reshape(b, h, c, d).to(dq.dtype)
        dk_acc[:, :, :n_kv] += (ds.transpose(-1, -2) @ qi) * scale       # line 16
    dk.copy_(dk_acc)                                                     # line 18
    dv.copy_(dv_acc)
