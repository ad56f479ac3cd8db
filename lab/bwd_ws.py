"""LAB candidate v4 of the Hopper backward: FA3's warp-specialised main kernel (lab/cuda/fa2_wgmma_bwd_ws.cu, sm_90a).

    dq, dk, dv = backward(q, k, v, o, lse, do, causal=False, scale=None, config=None, out=None)

Takes what kernels.fa2_wgmma_bwd.backward takes, within a narrower scope: q, o, do (B, H, Nq, d); k, v
(B, H_kv, Nk, d) with H_kv dividing H (grouped-query attention: query head h reads kv head h // (H / H_kv)); one
dtype (float16 or bfloat16); d in {64, 128} (ValueError otherwise: the shipped backward has 96 and 256); any
strides with a unit last one whose other strides and base address are 16-byte aligned (the TMA tensor maps of
kernels/tma.py describe them; no input is copied). lse: float32 (B, H, Nq) contiguous, as the forward returns
it. Causal is bottom-right. No deterministic mode (ValueError). Returns (dq, dk, dv) in the inputs' layouts.

Three launches, as the shipped backward (FA2 Algorithm 2): the shipped pre kernel (FA2 Alg. 2 line 4:
D = rowsum(dO o O), L2 = lse * log2 e, dQ accumulator = 0), this file's main kernel on a (Tc, B*H_kv) grid
(one producer warpgroup: TMA loads and dQ's bulk reduce-adds; two MMA warpgroups), and the shipped DQ_BULK
conversion (fa2_wgmma_bwd_dq_bulk: the accumulator is in per-tile fragment order). The pre and conversion kernels
are the shipped default builds (kernels.fa2_wgmma_bwd.defines_for(d, bf16)), whose Br and NWG this kernel's
CONFIGS share: the accumulator layout is theirs.

kernels.loader's cache key includes kernels/cuda/*.cuh for a source outside kernels/cuda/, so editing a shared header
rebuilds this kernel.
"""
from __future__ import annotations

from pathlib import Path

from counting import checks
from kernels import fa2_tc, fa2_wgmma_bwd, loader, tma

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma_bwd_ws.cu"
KERNEL = "fa2_wgmma_bwd_ws"
ARCH = "sm_90a"
HEAD_DIMS = (64, 128)
NWG = 2  # consumer (MMA) warpgroups; Bc = 64 * NWG
THREADS = 128 * (NWG + 1)  # + the producer warpgroup
# The default build per head dim. Br and NWG must be the shipped DQ_BULK build's (the conversion kernel reads the
# accumulator in its fragment order). d = 64: MERGED=1 (S^T and dP^T waited together, P^T and dS^T in one pass):
# with MERGED=0 P^T's fp32 copy stays live beside its packed fragments and ptxas serialises the wgmma pipeline for
# lack of registers at the consumers' 240 (and spills 136 B). d = 128: DQ_BUFS=2 fits (231,528 B of smem).
# ptxas (NVRTC 13.0, sm_90a; consumer_spills() splits the SASS by role): the consumer path stores nothing to local
# memory in any of these builds and reloads 2-3 words a step (values computed before the role split); the producer
# (24 registers) spills 0-44 B (ptxas' totals: d=64 24/32 B stores/loads, d=128 44/52) in its single-thread loops,
# which run ahead of the consumers.
CONFIGS = {
    64: dict(BR=128, STAGES=2, DS_BUFS=2, DQ_BUFS=1, MERGED=1),
    128: dict(BR=64, STAGES=2, DS_BUFS=2, DQ_BUFS=2, MERGED=0),
}
# Other builds lab/bwd_ws_ab.py times beside the default (compiled and held to the same checks)
ALTERNATIVES = {
    64: [dict(BR=128, STAGES=2, DS_BUFS=1, DQ_BUFS=2, MERGED=1), dict(BR=128, STAGES=2, DS_BUFS=2, DQ_BUFS=1, MERGED=1,
                                                                     L2_HINT=1)],
    128: [dict(BR=64, STAGES=2, DS_BUFS=2, DQ_BUFS=2, MERGED=1), dict(BR=64, STAGES=3, DS_BUFS=1, DQ_BUFS=1, MERGED=0),
          dict(BR=64, STAGES=2, DS_BUFS=2, DQ_BUFS=2, MERGED=0, L2_HINT=1)],
}
MAX_SPILL_BYTES = 64  # ptxas' total for the whole kernel (the producer's, in practice: see consumer_spills)
# ORDER=1's loader steps hq every step (ORDER=0: i), and its 64-bit L2_i/D_i row with it: the 24-register producer
# spills more (ptxas, NVRTC 13.0: d=64 32/36 B stores/loads, d=128 76/80; consumer path still stores nothing)
MAX_SPILL_BYTES_ORDER1 = 80


def spill_budget(defines: dict) -> int:
    """The compile test's cap on ptxas' spill bytes for this build."""
    return MAX_SPILL_BYTES_ORDER1 if defines.get("ORDER") else MAX_SPILL_BYTES
KNOBS = {"BR", "STAGES", "DS_BUFS", "DQ_BUFS", "MERGED", "PRODUCER_REGS", "L2_HINT", "ORDER", "LPT"}
# ORDER=1 (issue 42's causal GQA gap): a key block's (query head, i) steps i descending, heads inner, so the CTAs of one
# kv head read each Q_i, dO_i tile at the same step (L2 reuse). LPT=1: grid (B*H_kv, Tc), every row's key block 0
# dispatched first (the longest causal CTAs first). lab/bwd_order_ab.py times both against the default.
SMEM_LIMIT = 227 * 1024


def smem_bytes(defines: dict) -> int:
    """K_j, V_j + STAGES slots of Q_i, dO_i + DS_BUFS dS^T tiles + DQ_BUFS x NWG fp32 dQ slices + STAGES x (L2_i, D_i)
    + the mbarriers + 1 KB to align the base to 1024 B (the .cu's SMEM_BYTES)."""
    d, br = defines["HEAD_DIM"], defines["BR"]
    st, ds, dqb = defines.get("STAGES", 2), defines.get("DS_BUFS", 2), defines.get("DQ_BUFS", 1)
    bn = 64 * NWG
    dq_n = d // (NWG // (br // 64))
    bars = 1 + 2 * st + 2 * dqb * NWG
    return (2 * bn * d * 2 + 2 * st * br * d * 2 + ds * bn * br * 2 + dqb * NWG * 64 * dq_n * 4 + st * 8 * br
            + 8 * bars + 1024)


def defines_for(d: int, is_bf16: bool, config: dict | None = None) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"the v4 (warp-specialised) backward builds head dims {HEAD_DIMS}, got d={d}")
    cfg = dict(CONFIGS[d], **(config or {}))
    unknown = set(cfg) - KNOBS
    if unknown:
        raise ValueError(f"v4 backward: unknown knobs {sorted(unknown)}; it has {sorted(KNOBS)}")
    if cfg.get("ORDER", 0) not in (0, 1):
        raise ValueError(f"v4 backward: ORDER={cfg['ORDER']}: 0 (heads outer, i ascending) or 1 (i descending, heads "
                         "inner)")
    if cfg.get("LPT", 0) not in (0, 1):
        raise ValueError(f"v4 backward: LPT={cfg['LPT']}: 0 (grid (Tc, B*H_kv)) or 1 ((B*H_kv, Tc))")
    if cfg["BR"] != CONFIGS[d]["BR"]:
        raise ValueError(f"v4 backward: BR={cfg['BR']} at d={d}; the dQ conversion kernel (the shipped DQ_BULK build) "
                         f"reads Br = {CONFIGS[d]['BR']}")
    defs = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **cfg)
    if smem_bytes(defs) > SMEM_LIMIT:
        raise ValueError(f"v4 backward {cfg} at d={d} needs {smem_bytes(defs)} B of shared memory; at most {SMEM_LIMIT}")
    return defs


def order_config(order: int, lpt: int = 0) -> dict | None:
    """config= of the default build with step order `order` and dispatch order `lpt` (None: the default build)."""
    cfg = dict(**(dict(ORDER=1) if order else {}), **(dict(LPT=1) if lpt else {}))
    return cfg or None


def order_configs() -> list[tuple[str, str, dict]]:
    """The default builds with ORDER=1 and/or LPT=1, both dtypes (lab/bwd_order_ab.py's, and the GPU tests')."""
    return [(str(SOURCE), KERNEL, defines_for(d, bf16, order_config(o, lpt))) for d in HEAD_DIMS for bf16 in (0, 1)
            for o, lpt in fa2_wgmma_bwd.ORDER_AB]


def _shipped_defines(d: int, is_bf16: bool) -> dict:
    """The shipped build whose pre and dq_bulk kernels this one launches (its accumulator layout: Br, NWG)."""
    defs = fa2_wgmma_bwd.defines_for(d, is_bf16)
    assert defs["DQ_BULK"] == 1 and defs["NWG"] == NWG and defs["BR"] == CONFIGS[d]["BR"], defs
    return defs


def compile_configs() -> list[tuple[str, str, dict]]:
    """Every build backward() launches by default, and the ALTERNATIVES, both dtypes: (source, kernel, defines)."""
    out = []
    for d in HEAD_DIMS:
        for bf16 in (0, 1):
            for cfg in [None, *ALTERNATIVES[d]]:
                out.append((str(SOURCE), KERNEL, defines_for(d, bf16, cfg)))
            shipped = _shipped_defines(d, bool(bf16))
            for k in (fa2_wgmma_bwd.KERNEL_PRE, fa2_wgmma_bwd.KERNEL_DQ_BULK):
                out.append((str(fa2_wgmma_bwd.SOURCE), k, shipped))
    return out


def _check(q, k, v, o, lse, do, deterministic) -> None:
    """What the v4 kernel does not take (deterministic, d outside HEAD_DIMS) first, then the shipped backward's checks
    (types, shapes, dtypes, 16-byte strides, devices, alignment), then what a TMA tensor map cannot describe."""
    import torch

    if deterministic:
        raise ValueError("the v4 backward has no deterministic mode; use kernels.fa2_wgmma_bwd.backward(..., "
                         "deterministic=True)")
    if isinstance(q, torch.Tensor) and q.dim() == 4 and q.shape[3] not in HEAD_DIMS:
        raise ValueError(f"head dim d={q.shape[3]} unsupported; the v4 backward takes d in {list(HEAD_DIMS)} "
                         "(kernels.fa2_wgmma_bwd.backward also takes 96 and 256)")
    fa2_wgmma_bwd._check(q, k, v, o, lse, do)
    d = q.shape[3]
    br, bn = CONFIGS[d]["BR"], 64 * NWG
    for name, t, rows in (("q", q, br), ("k", k, bn), ("v", v, bn), ("do", do, br)):
        tma.tensor_map_args(t.shape, t.stride(), t.element_size(), t.data_ptr(), rows, name=name)  # LayoutError


def backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None, config: dict | None = None,
             deterministic: bool = False, out=None):
    """FA2 Algorithm 2, warp-specialised main kernel; returns (dq, dk, dv). out=(dq, dk, dv) writes into given
    tensors (dq 16-byte, dk and dv 4-byte aligned rows, as the shipped backward)."""
    import torch

    _check(q, k, v, o, lse, do, deterministic)
    loader.require_hopper(q.device, "the v4 backward needs a compute capability 9.x GPU (wgmma, TMA, sm_90a)")
    d = q.shape[3]
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # as the shipped backward
    bf16 = q.dtype == torch.bfloat16
    defs = defines_for(d, bf16, config)
    shipped = _shipped_defines(d, bf16)
    b, h, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    main_grid = fa2_wgmma_bwd.grid(dict(defs, NWG=NWG), n_k, b * h_kv)  # (Tc, B*H_kv); LPT: (B*H_kv, Tc), Tc checked
    dq, dk, dv = fa2_wgmma_bwd._grads(q, k, out)
    n_pad = -(-n_q // fa2_wgmma_bwd.PAD) * fa2_wgmma_bwd.PAD
    l2 = torch.empty((b * h, n_pad), dtype=torch.float32, device=q.device)
    dd = torch.empty_like(l2)
    dq_acc = torch.empty((b * h, n_pad, d), dtype=torch.float32, device=q.device)
    dev = q.device.index
    strides = fa2_wgmma_bwd._strides

    def fn(src, name, dfs):
        return loader.get_function(src, name, defines=dfs, arch=ARCH, device=dev)

    fn(fa2_wgmma_bwd.SOURCE, fa2_wgmma_bwd.KERNEL_PRE, shipped).launch(
        (n_pad // 64, b * h, 1), (128, 1, 1),
        (o, do, lse, l2, dd, dq_acc, int(n_q), int(n_pad), int(h), *strides(o), *strides(do)))
    br, bn = defs["BR"], 64 * NWG
    maps = (tma.tensor_map(q, br, name="q"), tma.tensor_map(k, bn, name="k"), tma.tensor_map(v, bn, name="v"),
            tma.tensor_map(do, br, name="do"))
    args = maps + (l2, dd, dq_acc, dk, dv, int(n_q), int(n_k), int(n_pad), float(scale * fa2_tc.LOG2E),
                   float(scale), int(bool(causal)), int(h), int(h // h_kv), *strides(dk), *strides(dv))
    fn(SOURCE, KERNEL, defs).launch(main_grid, (THREADS, 1, 1), args, shared_mem=smem_bytes(defs))
    fn(fa2_wgmma_bwd.SOURCE, fa2_wgmma_bwd.KERNEL_DQ_BULK, shipped).launch(
        (n_pad // br, b * h, 1), (128, 1, 1), (dq_acc, dq, int(n_q), int(n_pad), float(scale), int(h), *strides(dq)))
    return dq, dk, dv


def consumer_spills(defines: dict) -> dict:
    """Local-memory instructions of the main kernel by role, from its SASS (nvdisasm; no GPU): {'prologue',
    'consumer', 'producer'} -> (STL count, LDL count), and 'seen' -> the role markers found (a SASS without them would
    count everything as prologue). The roles are told apart by position: the consumers' code
    runs from their setmaxnreg.inc (USETMAXREG.TRY_ALLOC) and the producer's from its setmaxnreg.dec
    (USETMAXREG.DEALLOC), whichever comes first in the binary ending where the other begins."""
    import subprocess
    import tempfile

    from lab.spill_sites import nvdisasm

    cubin = loader.compile_cubin(SOURCE, defines=defines, arch=ARCH)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([nvdisasm(), "-c", str(f.name)], capture_output=True, text=True, check=True).stdout
    role, out = "prologue", {r: [0, 0] for r in ("prologue", "consumer", "producer")}
    seen = set()
    for line in sass.splitlines():
        if "USETMAXREG.TRY_ALLOC" in line:
            role = "consumer"
            seen.add(role)
        elif "USETMAXREG.DEALLOC" in line:
            role = "producer"
            seen.add(role)
        elif " STL" in line:
            out[role][0] += 1
        elif " LDL" in line:
            out[role][1] += 1
    return {**{r: tuple(v) for r, v in out.items()}, "seen": frozenset(seen)}
