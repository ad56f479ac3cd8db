"""FlashAttention-2 backward with Hopper wgmma (kernels/cuda/fa2_wgmma_bwd.cu, sm_90a): fp16/bf16, fp32 acc.

    dq, dk, dv = backward(q, k, v, o, lse, do, causal=False, scale=None)

q, o, do: (B, H, Nq, d); k, v: (B, H, Nk, d); one dtype (float16 or bfloat16), contiguous, d in {64, 128};
lse: float32 (B, H, Nq), exactly as kernels.fa2_wgmma.forward returns it (natural log, -inf for a row
that sees no key: its dq is 0). Causal is bottom-right (query i sees key j iff j <= i + Nk - Nq), as in
the forward. Three launches (FA2 Algorithm 2): D = rowsum(dO o O) and the dQ accumulator's zeroing, the
key-block-outer main kernel (dK, dV in registers, dQ by fp32 atomics), and dQ's conversion.
"""
from __future__ import annotations

from pathlib import Path

from counting import checks
from counting.checks import check_grid_rows
from kernels import fa2_tc, loader

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma_bwd.cu"
KERNEL = "fa2_wgmma_bwd"
KERNEL_PRE = "fa2_wgmma_bwd_pre"
KERNEL_DQ = "fa2_wgmma_bwd_dq"
KERNEL_DQ_BULK = "fa2_wgmma_bwd_dq_bulk"  # DQ_BULK=1: the accumulator is in per-tile fragment order
HEAD_DIMS = (64, 128)
ARCH = "sm_90a"
PAD = 128  # rows of the padded L2 / D / dQ-accumulator buffers: a multiple of every Br

# Knobs of the .cu file: NWG (warpgroups; Bc = 64 * NWG), BR (Br), STAGES (Q/dO ring slots), MIN_BLOCKS,
# DQ_BULK (dQ through smem and one TMA reduce-add per warpgroup and step, instead of red.global.add.v2).
DEFAULTS = dict(STAGES=2, MIN_BLOCKS=1, DQ_BULK=0)  # DQ_V4: red.v4 instead of .v2 when DQ_BULK=0
CONFIGS = {  # v1 sweep winners
    64: dict(NWG=2, BR=128, DQ_BULK=1),
    128: dict(NWG=2, BR=64, STAGES=3, DQ_BULK=1),
}
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
MAX_SPILL_BYTES = 80
KNOBS = set(DEFAULTS) | {"NWG", "BR", "DQ_V4", "ROTATE", "DQ_ABLATE"}  # the .cu's compile-time knobs


def knob_errors(defines: dict) -> list[str]:
    """Why fa2_wgmma_bwd.cu cannot build these defines (its static_asserts, lines 136-141, and its switches); empty:
    it builds. defines_for refuses a config= with these reasons instead of a compile error on the GPU."""
    g = defines.get
    d, nwg, br, stages = g("HEAD_DIM", 128), g("NWG", 2), g("BR", 64), g("STAGES", 2)
    out = [f"{k}={g(k)}: {k} is a switch, 0 or 1" for k in ("DQ_BULK", "ROTATE", "DQ_V4") if g(k, 0) not in (0, 1)]
    rules = [
        (br in (64, 128), f"BR={br}: 64 or 128"),
        (nwg in (1, 2), f"NWG={nwg}: 1 or 2 warpgroups"),
        (br not in (64, 128) or nwg not in (1, 2) or nwg % (br // 64) == 0,
         f"NWG={nwg}, BR={br}: every 64-row slice of dQ needs a warpgroup"),
        (br not in (64, 128) or nwg not in (1, 2) or nwg % (br // 64) or d // (nwg // (br // 64)) in (64, 128),
         f"NWG={nwg}, BR={br}, d={d}: dQ slices must be whole 64-column swizzle panels"),
        (2 <= stages <= 3, f"STAGES={stages}: 2..3 ring slots"),
        (g("MIN_BLOCKS", 1) >= 1, f"MIN_BLOCKS={g('MIN_BLOCKS')}: at least one CTA per SM"),
        (g("DQ_ABLATE", 0) in (0, 1, 2), f"DQ_ABLATE={g('DQ_ABLATE')}: 0, 1 or 2"),
    ]
    return out + [why for holds, why in rules if not holds]


def defines_for(d: int, is_bf16: bool, config: dict | None = None) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"fa2_wgmma backward supports head dims {HEAD_DIMS}, got d={d}")
    if config is None:
        return dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **dict(DEFAULTS, **CONFIGS[d]))
    # a dict of known integer knobs with NWG and BR (a typo must not time the default build under another name; a
    # string was a 'dictionary update sequence' error, 64.0 or True a define), then what the .cu file builds
    cfg = checks.knob_config("fa2_wgmma backward", config, KNOBS, ("NWG", "BR"), CONFIGS[d])
    defines = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **dict(DEFAULTS, **cfg))
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
    return [item for d in HEAD_DIMS for bf16 in (0, 1) for item in _build(defines_for(d, bf16))]


def sweep_configs() -> list[tuple[str, str, dict]]:
    out = []
    for d in HEAD_DIMS:
        for cfg in SWEEP[d]:
            for bf16 in (0, 1):
                for item in _build(defines_for(d, bf16, cfg)):
                    if item not in out:
                        out.append(item)
    return out


def _check(q, k, v, o, lse, do) -> None:
    """Everything wrong with the inputs is named before anything touches the GPU."""
    import torch

    dtypes = (torch.float16, torch.bfloat16)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
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
    if k.shape[:2] != (b, h) or v.shape != k.shape or k.shape[3] != d:
        raise ValueError(f"k and v must be (B, H, Nk, d) = ({b}, {h}, Nk, {d}), got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if o.shape != q.shape or do.shape != q.shape:
        raise ValueError(f"o and do must have q's shape {tuple(q.shape)}, got o {tuple(o.shape)}, "
                         f"do {tuple(do.shape)}")
    if lse.shape != (b, h, n_q) or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 of shape {(b, h, n_q)} (the forward's), got {lse.dtype} "
                         f"{tuple(lse.shape)}")
    if min(q.shape) < 1 or k.shape[2] < 1:
        raise ValueError(f"every dimension must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous; call .contiguous() first")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do)):
        if not t.is_cuda:
            raise ValueError(f"{name} is on {t.device}; CUDA kernels need CUDA tensors "
                             "(use variants.VARIANTS for CPU references)")
        if t.device != q.device:
            raise ValueError(f"q, k, v, o, lse, do must be on one device; {name} is on {t.device}")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):  # cp.async and uint4 loads: a view at an
        loader.check_aligned(name, t)  # element offset would fault on the GPU
    check_grid_rows("fa2_wgmma backward", b, h)


def _grads(q, k, out):
    import torch

    if out is None:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(k)
    fa2_tc.check_out(out, ("dq", "dk", "dv"))
    for name, t, like in zip(("dq", "dk", "dv"), out, (q, k, k)):
        if t.shape != like.shape or t.dtype != like.dtype or not t.is_contiguous() or t.device != like.device:
            raise ValueError(f"out {name} must be a contiguous {like.dtype} tensor of shape {tuple(like.shape)}")
        # dQ can be stored in 16-byte pieces (DQ_BULK=0's uint4), dK and dV in 4-byte ones (fa2_wgmma_bwd.cu:
        # *(u32*)(dk_row + ...), the only stores to them in any build)
        loader.check_aligned(f"out {name}", t, 16 if name == "dq" else 4)
    return out


def backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None,
             config: dict | None = None, out=None, **options):
    """FA2 Algorithm 2 with wgmma; returns (dq, dk, dv). out=(dq, dk, dv) writes into given tensors."""
    import torch

    if options:
        raise TypeError(f"fa2_wgmma backward takes no options {sorted(options)} (it has config=, out=)")
    _check(q, k, v, o, lse, do)
    loader.require_hopper(q.device, "the fa2_wgmma backward needs a compute capability 9.x GPU (wgmma, sm_90a)")
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # as the forward checks them
    defs = defines_for(d, q.dtype == torch.bfloat16, config)
    dq, dk, dv = _grads(q, k, out)
    n_pad = -(-n_q // PAD) * PAD
    l2 = torch.empty((b * h, n_pad), dtype=torch.float32, device=q.device)
    dd = torch.empty_like(l2)
    dq_acc = torch.empty((b * h, n_pad, d), dtype=torch.float32, device=q.device)
    dev = q.device.index

    def fn(name):
        return loader.get_function(SOURCE, name, defines=defs, arch=ARCH, device=dev)

    fn(KERNEL_PRE).launch((n_pad // 64, b * h, 1), (128, 1, 1), (o, do, lse, l2, dd, dq_acc, int(n_q), int(n_pad)))
    fn(KERNEL).launch((-(-n_k // block_n(defs)), b * h, 1), (threads(defs), 1, 1),
                      (q, k, v, do, l2, dd, dq_acc, dk, dv, int(n_q), int(n_k), int(n_pad),
                       float(scale * fa2_tc.LOG2E), float(scale), int(bool(causal))),
                      shared_mem=smem_bytes(defs))
    grid_dq = (n_pad // defs["BR"], b * h, 1) if defs.get("DQ_BULK") else (-(-n_q // 64), b * h, 1)
    fn(_dq_kernel(defs)).launch(grid_dq, (128, 1, 1), (dq_acc, dq, int(n_q), int(n_pad), float(scale)))
    return dq, dk, dv
