"""v4 of the Hopper backward's main kernel: FA3's warp-specialised kernel (kernels/cuda/fa2_wgmma_bwd_ws.cu, sm_90a).

Not an entry point: kernels.fa2_wgmma_bwd.backward launches it by default at d = 64 and 128 when deterministic=False
and config= is not given (its WS_HEAD_DIMS; impl="ws" forces it, with config= one of this kernel's knob dicts, and
impl="v3" times the older main kernel). This module holds the kernel's builds (CONFIGS, KNOBS, defines_for,
smem_bytes, the spill budgets), which inputs it takes (layout_error: what a TMA tensor map cannot describe) and its
launch (launch_main); it imports nothing of kernels.fa2_wgmma_bwd, which imports it.

What it takes, within the shipped backward's scope: q, do (B, H, Nq, d); k, v (B, H_kv, Nk, d) with H_kv dividing H
(grouped-query attention: query head h reads kv head h // (H / H_kv)); one dtype (float16 or bfloat16); d in
{64, 128}; any strides with a unit last one whose other strides and base address are 16-byte aligned and positive
(the TMA tensor maps of kernels/tma.py describe them; no input is copied). A layout the shipped backward takes but
a map cannot describe (a stride-0 broadcast, a stride over 2**40 bytes) goes to v3 there. No deterministic mode.

Three launches, as v3 (FA2 Algorithm 2): v3's pre kernel (FA2 Alg. 2 line 4: D = rowsum(dO o O), L2 = lse * log2 e,
dQ accumulator = 0), this file's main kernel on a (Tc, B*H_kv) grid (one producer warpgroup: TMA loads and dQ's
bulk reduce-adds; two MMA warpgroups), and v3's DQ_BULK conversion (fa2_wgmma_bwd_dq_bulk: the accumulator is in
per-tile fragment order). The pre and conversion kernels are v3's default builds (kernels.fa2_wgmma_bwd.defines_for(d,
bf16)), whose Br and NWG this kernel's CONFIGS share: the accumulator layout is theirs.

The lab's A/B alternatives (ALTERNATIVES) and the SASS split of spills by role (consumer_spills) are lab/bwd_ws.py's.

GPU status: the GPU checks and timings in results/bwd_ws_v4 ran on the build with one empty_q arrive per consumer
warp; the shipped build (every consumer thread arrives on empty_q) has compiled and passed the CPU protocol model but
not yet run on a GPU.
"""
from __future__ import annotations

from pathlib import Path

from counting import checks
from kernels import fa2_tc, loader, tma

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma_bwd_ws.cu"
KERNEL = "fa2_wgmma_bwd_ws"
ARCH = "sm_90a"
HEAD_DIMS = (64, 128)
NWG = 2  # consumer (MMA) warpgroups; Bc = 64 * NWG
THREADS = 128 * (NWG + 1)  # + the producer warpgroup
# The default build per head dim. Br and NWG must be v3's DQ_BULK build's (the conversion kernel reads the
# accumulator in its fragment order; tests/test_kernels_bwd_ws_compile.py checks it). d = 64: MERGED=1 (S^T and dP^T
# waited together, P^T and dS^T in one pass): with MERGED=0 P^T's fp32 copy stays live beside its packed fragments and
# ptxas serialises the wgmma pipeline for lack of registers at the consumers' 240 (and spills 136 B). d = 128:
# DQ_BUFS=2 fits (231,528 B of smem).
# ptxas (NVRTC 13.0, sm_90a; lab/bwd_ws.py consumer_spills() splits the SASS by role): the consumer path stores nothing
# to local memory in any of these builds and reloads 2-3 words a step (values computed before the role split); the
# producer (24 registers) spills 0-44 B (ptxas' totals: d=64 24/32 B stores/loads, d=128 44/52) in its single-thread
# loops, which run ahead of the consumers.
CONFIGS = {
    64: dict(BR=128, STAGES=2, DS_BUFS=2, DQ_BUFS=1, MERGED=1),
    128: dict(BR=64, STAGES=2, DS_BUFS=2, DQ_BUFS=2, MERGED=0),
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
ORDER_AB = ((1, 0), (0, 1), (1, 1))  # (ORDER, LPT) of the order A/B's non-default builds, v3's and v4's
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


REGS_AT_LAUNCH = (65536 // THREADS) // 8 * 8  # the .cu's: registers a thread has before setmaxnreg


def knob_errors(defines: dict) -> list[str]:
    """Why fa2_wgmma_bwd_ws.cu cannot build these defines (its static_asserts on STAGES, DS_BUFS, DQ_BUFS,
    PRODUCER_REGS and the switches; Br against v3's conversion kernel); empty: it builds. defines_for refuses a config=
    with these reasons, on CPU, instead of a compile error on the GPU."""
    g = defines.get
    d = defines["HEAD_DIM"]
    out = [f"{k}={g(k)}: {k} is a switch, 0 or 1" for k in ("MERGED", "L2_HINT", "ORDER", "LPT") if g(k, 0) not in (0, 1)]
    regs = g("PRODUCER_REGS", 24)
    rules = [
        (2 <= g("STAGES", 2) <= 3, f"STAGES={g('STAGES')}: 2..3 ring slots"),
        (1 <= g("DS_BUFS", 2) <= 2, f"DS_BUFS={g('DS_BUFS')}: 1 or 2 dS^T buffers"),
        (1 <= g("DQ_BUFS", 1) <= 2, f"DQ_BUFS={g('DQ_BUFS')}: 1 or 2 dQ buffers"),
        # setmaxnreg.dec takes a multiple of 8 in 24..256 and must give registers back (at most what a thread has)
        (24 <= regs <= REGS_AT_LAUNCH and regs % 8 == 0,
         f"PRODUCER_REGS={regs}: a multiple of 8, at least 24 and at most {REGS_AT_LAUNCH} (the registers a thread "
         "has at launch)"),
        # the conversion kernel (v3's DQ_BULK build) reads the accumulator in its own Br's fragment order
        (g("BR") == CONFIGS[d]["BR"], f"BR={g('BR')} at d={d}: the dQ conversion kernel (v3's DQ_BULK build) reads "
                                       f"Br = {CONFIGS[d]['BR']}"),
    ]
    return out + [why for holds, why in rules if not holds]


def defines_for(d: int, is_bf16: bool, config: dict | None = None) -> dict:
    """The main kernel's build for head dim d (64, 128): CONFIGS[d] with config='s knobs over it; a config= the .cu
    cannot build (knob_errors, smem) raises ValueError, a non-dict or non-integer value TypeError, before any launch."""
    if d not in HEAD_DIMS:
        raise ValueError(f"the v4 (warp-specialised) backward builds head dims {HEAD_DIMS}, got d={d}")
    # a dict of known integer knobs (a typo must not time the default build under another name; 64.0 or True a define)
    cfg = {} if config is None else checks.knob_config("v4 backward", config, KNOBS, (), CONFIGS[d])
    defs = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **dict(CONFIGS[d], **cfg))
    errors = knob_errors(defs)
    if not errors and smem_bytes(defs) > SMEM_LIMIT:
        errors = [f"{dict(CONFIGS[d], **cfg)} at d={d} needs {smem_bytes(defs)} B of shared memory; at most "
                  f"{SMEM_LIMIT}"]
    if errors:
        raise ValueError(f"v4 backward: {'; '.join(errors)}")
    return defs


def compile_configs() -> list[tuple[str, str, dict]]:
    """The main kernel's default builds, d = 64 and 128, both dtypes: what kernels.fa2_wgmma_bwd.backward launches
    (beside v3's pre and dq_bulk builds, which are in its own compile_configs())."""
    return [(str(SOURCE), KERNEL, defines_for(d, bf16)) for d in HEAD_DIMS for bf16 in (0, 1)]


def order_config(order: int, lpt: int = 0) -> dict | None:
    """config= of the default build with step order `order` and dispatch order `lpt` (None: the default build)."""
    cfg = dict(**(dict(ORDER=1) if order else {}), **(dict(LPT=1) if lpt else {}))
    return cfg or None


def order_configs() -> list[tuple[str, str, dict]]:
    """The default builds with ORDER=1 and/or LPT=1, both dtypes (lab/bwd_order_ab.py's, and the GPU tests')."""
    return [(str(SOURCE), KERNEL, defines_for(d, bf16, order_config(o, lpt))) for d in HEAD_DIMS for bf16 in (0, 1)
            for o, lpt in ORDER_AB]


def box_rows(d: int) -> dict:
    """Rows of each input's TMA box: q and do Br (a Q block), k and v Bc = 64 * NWG (a key block)."""
    br, bn = CONFIGS[d]["BR"], 64 * NWG
    return dict(q=br, k=bn, v=bn, do=br)


def layout_error(q, k, v, do) -> tma.LayoutError | None:
    """Why a TMA tensor map cannot describe one of q, k, v, do (kernels/tma.py's rules: 16-byte aligned address and
    strides, positive strides, under 2**40 bytes), or None. Pure arithmetic on shapes and strides (no driver), so the
    dispatch of kernels.fa2_wgmma_bwd.backward is testable on CPU tensors. d must be in HEAD_DIMS."""
    rows = box_rows(q.shape[3])
    for name, t in (("q", q), ("k", k), ("v", v), ("do", do)):
        try:
            tma.tensor_map_args(t.shape, t.stride(), t.element_size(), t.data_ptr(), rows[name], name=name)
        except tma.LayoutError as exc:
            return exc
    return None


def launch_main(defs: dict, grid: tuple, device: int, q, k, v, do, l2, dd, dq_acc, dk, dv, n_pad: int, scale: float,
                causal: bool, h: int, h_kv: int, strides) -> None:
    """The main kernel (FA2 Alg. 2 lines 5-18 but dQ's conversion) on `grid` (kernels.fa2_wgmma_bwd.grid of defs with
    NWG): four tensor maps (q, k, v, do), the pre kernel's L2, D and dQ accumulator, dK and dV with their strides
    (`strides`: fa2_wgmma_bwd._strides), in fa2_wgmma_bwd_ws.cu's argument order."""
    rows = box_rows(defs["HEAD_DIM"])
    maps = tuple(tma.tensor_map(t, rows[name], name=name) for name, t in (("q", q), ("k", k), ("v", v), ("do", do)))
    args = maps + (l2, dd, dq_acc, dk, dv, int(q.shape[2]), int(k.shape[2]), int(n_pad), float(scale * fa2_tc.LOG2E),
                   float(scale), int(bool(causal)), int(h), int(h // h_kv), *strides(dk), *strides(dv))
    fn = loader.get_function(SOURCE, KERNEL, defines=defs, arch=ARCH, device=device)
    fn.launch(grid, (THREADS, 1, 1), args, shared_mem=smem_bytes(defs))
