"""FlashAttention-2 forward with Hopper wgmma (kernels/cuda/fa2_wgmma.cu, sm_90a): fp16/bf16 in, fp32 acc.

    o, lse = forward(q, k, v, causal=False, scale=None)

Same contract as kernels.fa2_tc (shapes, dtypes, bottom-right causal, lse, out=); needs a compute
capability 9.0 GPU (H100/H200): wgmma exists only in the sm_90a instruction set. fa2_tc is the
portable mma.sync kernel (sm_80 and newer); this module is the Hopper path, two kernels:
  cuda/fa2_wgmma.cu      wgmma, cp.async by every thread, one barrier per step (the readable first step);
  cuda/fa2_wgmma_tma.cu  wgmma + TMA producer warp + mbarrier ring + ping-pong consumers (config TMA=1,
                         the default): 0.88-1.06x cuDNN at d=128, N=2k..16k (lab/NOTES-tc.md).

Layouts (TMA builds, every default): q (B, H, Nq, d), k and v (B, H_kv, Nk, d) as views with any strides and
a unit last one -- a (B, N, H, d) tensor's .transpose(1, 2) is read in place, no copy -- and grouped-query
attention, H_kv dividing H (query head h reads kv head h // (H / H_kv)). TMA needs the address and the
strides 16-byte aligned; otherwise the error names the stride (.contiguous() is the copy that fixes it).
o is (B, H, Nq, d) contiguous and lse (B, H, Nq) float32, whatever the inputs' strides. The cp.async
builds (TMA=0, sweep candidates only) take contiguous, equal-head inputs.
Head dims 64, 96, 128, 256 (96 and 256: TMA builds only).
"""
from __future__ import annotations

from pathlib import Path

from counting import checks
from counting.checks import checked_once  # torch-free: the launch plan's cache
from counting.checks import check_grid_rows
from counting.tiling import warpgroup_steps
from kernels import fa2_tc, layouts, loader
from kernels.fa2_wgmma_bwd import backward  # noqa: F401  (FA2 Alg. 2, cuda/fa2_wgmma_bwd.cu)
from kernels.tma import tensor_map

SOURCE = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma.cu"
KERNEL = "fa2_wgmma_fwd"
# TMA=1 in a config selects the warp-specialised kernel: TMA producer warp, mbarrier ring, ping-pong
SOURCE_TMA = Path(__file__).resolve().parent / "cuda" / "fa2_wgmma_tma.cu"
KERNEL_TMA = "fa2_wgmma_tma_fwd"
TMA_DEFAULTS = dict(STAGES=2)
HEAD_DIMS = (64, 96, 128, 256)
CP_ASYNC_HEAD_DIMS = (64, 128)  # fa2_wgmma.cu (TMA=0): whole 64-column panels, d <= 128
MAX_HEAD_DIM = max(HEAD_DIMS)  # kernels.KernelSpec.supports_head_dim reads it (its default is 128)
ARCH = "sm_90a"

# Knobs of the .cu file: BLOCK_N (Bc), NWG (warpgroups; Br = 64 * NWG), OVERLAP (softmax of S_j during
# P V_{j+1}), STAGES (K/V ring slots), MIN_BLOCKS (CTAs per SM the register cap aims at).
DEFAULTS = dict(OVERLAP=1, STAGES=2, MIN_BLOCKS=1)
CONFIGS = {  # sweep v4 winners (results/wgmma_sweep_v4_tma.json): the TMA kernel
    # RESCALE_THRESHOLD=8 (FA4's rescale threshold, v3a) at d = 64 and 256, from the A/B of the second H200
    # visit (results/fwd_wgmma_speed_knobs/first_run/ab_wgmma_speed.json, time / time without it, geomean over N = 512-16k, fp16
    # and bf16): d = 256 0.94-0.98 (every cell 0.92-1.02), d = 64 causal 0.97-0.985, non-causal 1.00; d = 128
    # 0.98-1.02 with cells from 0.94 to 1.09 (noise level): left off there, and at d = 96 (not timed). The
    # decision rule (lab/ab_wgmma_speed.py decisions(): geomean <= 0.99, no cell over 1.03) gives the same.
    # ROW_SUM_MMA=1 (v5a: l from P V over a panel of ones; fp16 only, bf16 builds drop it): 0.940-1.003x the time
    # without it, geomean 0.979, 11 of 12 cells faster (results/fwd_wgmma_row_sum_mma/rowsum_ab/, fp16, N = 512-16k, causal
    # and not; the decision rule's geomean <= 0.99, no cell over 1.03). Runs timed before it: gpumodel/measured.py
    # KNOBS_ADDED_LATER.
    64: dict(TMA=1, BLOCK_N=128, NWG=2, PINGPONG=0, RESCALE_THRESHOLD=8, ROW_SUM_MMA=1),
    128: dict(TMA=1, BLOCK_N=176, NWG=2),
    # d = 96: Bc = 128 (FA3's hopper/tile_size.h: 128 or 144); the P V product padded to 128 columns
    # (PV_N=128: two whole swizzle panels, the d = 128 product); PV_N=96 is the unpadded candidate.
    96: dict(TMA=1, BLOCK_N=128, NWG=2, PV_N=128),
    # d = 256: FA3's Br = 128 (two consumer warpgroups), Bc = 80: Q 64 KB + 2 x (K 40 KB + V 40 KB) = 224 KB
    # of the 227 KB; O is 128 fp32 registers per thread, so the producer keeps 24 (consumers get 240).
    256: dict(TMA=1, BLOCK_N=80, NWG=2, PRODUCER_REGS=24, RESCALE_THRESHOLD=8),
}

# Candidates of the tuning sweep (measurements: lab/NOTES-tc.md, fa2_wgmma section). v1 sweep: d=64 NWG=3
# Bc=128 and d=128 NWG=2 Bc=128 best of the one-CTA-per-SM builds, OVERLAP=0 level with OVERLAP=1.
# v2 sweep: two CTAs per SM (d=64 Bc=64, 112 registers) +10-25% at d=64; STAGES=3 +0-3%.
# v3 sweep: one warpgroup per CTA, 2-3 CTAs per SM: d=64 Bc=128 x3 CTAs 1.29-1.36x SDPA flash; d=128
# Bc=96 x2 CTAs level with NWG=2 Bc=128 in geomean and better at N=2k and causal.
# Dropped before timing: d=128 Bc=64 NWG=2 with 2 CTAs/SM (the 128-register cap spills 144 bytes),
# d=64 Bc=96 NWG=2 with 2 CTAs/SM (spills 48).
SWEEP = {
    64: [
        dict(BLOCK_N=64, NWG=2, MIN_BLOCKS=2),
        dict(BLOCK_N=64, NWG=2, MIN_BLOCKS=2, STAGES=3),
        dict(BLOCK_N=64, NWG=1, MIN_BLOCKS=3),
        dict(BLOCK_N=128, NWG=1, MIN_BLOCKS=3),
        dict(BLOCK_N=128, NWG=2, STAGES=3),
        dict(TMA=1, BLOCK_N=128, NWG=2),
        dict(TMA=1, BLOCK_N=128, NWG=2, PINGPONG=0),
        dict(TMA=1, BLOCK_N=192, NWG=2),
        dict(TMA=1, BLOCK_N=128, NWG=2, STAGES=3),
        dict(TMA=1, BLOCK_N=192, NWG=2, PINGPONG=0),
        dict(TMA=1, BLOCK_N=128, NWG=2, PINGPONG=0, STAGES=3),
        dict(TMA=1, BLOCK_N=96, NWG=2, PINGPONG=0),
        dict(TMA=1, BLOCK_N=128, NWG=1, MIN_BLOCKS=2),
        dict(TMA=1, BLOCK_N=192, NWG=1, MIN_BLOCKS=2),
    ],
    128: [
        dict(BLOCK_N=128, NWG=2),
        dict(BLOCK_N=128, NWG=2, STAGES=3),
        dict(BLOCK_N=64, NWG=1, MIN_BLOCKS=2),
        dict(BLOCK_N=64, NWG=1, MIN_BLOCKS=2, STAGES=3),
        dict(BLOCK_N=96, NWG=1, MIN_BLOCKS=2),
        dict(TMA=1, BLOCK_N=128, NWG=2),
        dict(TMA=1, BLOCK_N=128, NWG=2, PINGPONG=0),
        dict(TMA=1, BLOCK_N=176, NWG=2),
        dict(TMA=1, BLOCK_N=128, NWG=2, STAGES=3),
        dict(TMA=1, BLOCK_N=176, NWG=2, PINGPONG=0),
    ],
    96: [  # not yet timed: the layouts work (issue 14) added them
        dict(TMA=1, BLOCK_N=128, NWG=2, PV_N=128),
        dict(TMA=1, BLOCK_N=128, NWG=2, PV_N=96),
        dict(TMA=1, BLOCK_N=176, NWG=2, PV_N=128),
    ],
    256: [
        dict(TMA=1, BLOCK_N=80, NWG=2, PRODUCER_REGS=24),
        dict(TMA=1, BLOCK_N=80, NWG=2, PRODUCER_REGS=24, PINGPONG=0),
        dict(TMA=1, BLOCK_N=64, NWG=2, PRODUCER_REGS=24),
    ],
}

# Every compile-time knob a config may set (defines_for refuses others: a misspelt knob must not time the
# baseline under a new name).
KNOBS = {"TMA", "BLOCK_N", "NWG", "STAGES", "PINGPONG", "MIN_BLOCKS", "PRODUCER_REGS", "CONSUMER_REGS", "PV_N",
         "OVERLAP", "RESCALE_THRESHOLD", "EXP2_POLY", "EXP2_POLY_DEG", "PERSISTENT", "QK_AHEAD", "ROW_SUM_MMA",
         "O_TILE", "CAUSAL_SECTION_KB", "O_TMA", "DESC_STEP", "WG_SKIP", "WAIT_HINT",
         "WG_CAUSAL_SKIP", "TURN_CARRY", "O_DIRECT", "MAX_TREE", "HALF_DIAG", "Q_SLOTS",
         "SECTION_RAGGED_FIRST", "CTA_TRACE"}
# Launch-only keys (not defines): GRID, the number of persistent CTAs (default: SMs x MIN_BLOCKS); the tests
# and the sanitizer set it small so that every CTA loops over several tiles at small shapes.
LAUNCH_KEYS = {"GRID"}

# Issue 14 item 1, the speed knobs of fa2_wgmma_tma.cu, each exact in the result and OFF in CONFIGS until
# lab/gpu_check_speed.sh has timed it against the build without it (A/B in one run):
#   rescale  RESCALE_THRESHOLD=8: FA4's rescale threshold (wgmma_fa2.cuh): m moves only when a block's max
#            exceeds it by more than 2^8 in P, so O and l are rescaled (and the warp's multiply skipped)
#            almost never after the first key block
#   poly     EXP2_POLY=2: 2 of every 8 exponentials on the FMA pipe (exp2_poly.cuh; FA4), the MUFU's share
#            of the softmax drops by a quarter. Measured (visit 2): 1.00-1.18x the time, slower everywhere:
#            the softmax is bound by issue slots / the FMA pipe, not the MUFU, on the H200
#   persist  PERSISTENT=1: SMs x CTAs/SM persistent CTAs stride over the (Q block, head) tiles (causal:
#            longest first), the K/V ring and the producer run on from one tile into the next
#   dynamic  PERSISTENT=2: the same, each CTA's next tile from an atomic counter (FA3's scheduler: a CTA that
#            drew short causal tiles takes more of them)
#   rowsum   ROW_SUM_MMA=1 (d = 64): l from the tensor core, P V over [V | ones] (wgmma_fa2.cuh): one
#            fp32 add per exponential leaves the softmax (its issue slots bound d = 64: NOTES-tc.md, v4 ncu)
#            for 8 more columns of the P V product (+12% of that product's tensor time)
#   ahead    QK_AHEAD=1 (FA3 Sec. 3.2, intra-warpgroup overlap): S_{t+1} issued before the softmax of step t,
#            two S tiles (and, v7d, two P tiles) in registers, no ping-pong turns (PINGPONG=0); where two S tiles
#            do not fit beside O at the shipped Bc, a smaller Bc (SPEED_KNOB_EXTRA). v3d measured a build ptxas had
#            serialised (C7515); pipelined (v7d) it is still 1.05-1.48x CONFIGS' time (d = 64: 1.17 | 1.28 against
#            v3d's 1.23 | 1.35, geomean N <= 2k | > 2k): off
SPEED_KNOBS = {
    "rescale": dict(RESCALE_THRESHOLD=8),
    "poly": dict(EXP2_POLY=2),
    "persist": dict(PERSISTENT=1),
    "dynamic": dict(PERSISTENT=2),
    "ahead": dict(QK_AHEAD=1, PINGPONG=0),
    "rowsum": dict(ROW_SUM_MMA=1),
}
# knobs that exist at some head dims only (the rest: every d). QK_AHEAD at d = 256 (O alone is 128 registers): with
# its products pipelined (v7c) O + two S tiles + P spill 172 B at Bc = 64; the v3d build that fit was serialised
SPEED_KNOB_DIMS = {"rowsum": (64,), "ahead": (64, 96, 128)}
# the combinations the A/B times beside each knob alone (on CONFIGS, which has RESCALE_THRESHOLD at d = 64 and
# 256). EXP2_POLY is in none: 1.00-1.18x the time without it in every cell of the second visit's A/B.
SPEED_COMBOS = {"dynamic+ahead": ("dynamic", "ahead")}
# what a knob needs besides itself at one head dim, and the spill budget of the persistent builds: d = 256's
# producer keeps 24 registers so that the consumers get 240 (O alone is 128); its tile loop spills 20-36 bytes
# there, all in the producer thread (a reload per key block or tile, L1). At 32 or 40 the consumers get 232
# (what the producer gives back bounds them: kernel header, setmaxnreg) and spill in the key loop.
# PRODUCER_SPILL_BYTES is the stated budget; the CPU test checks the count and that every local-memory
# access is in the producer's code.
# QK_AHEAD: O + two S tiles + two P tiles (v7d) at Bc = 128 compile without spills at d = 96 and 128, but ptxas
# serialises the pipeline there (C7512, insufficient registers; v3d's single P tile spilled 240 B); Bc = 96 pipelines.
SPEED_KNOB_EXTRA = {96: {"ahead": dict(BLOCK_N=96)}, 128: {"ahead": dict(BLOCK_N=96)}}
# The 3-CTA persistent build (small-tma3-dyn-oq: 80 registers at launch) spills 80-92 B in its producer at 24;
# at 32 its consumers (then 128 registers) spill in the key loop instead. With v13's O_DIRECT=2 (small-tma3-dyn-od2)
# the producer spills 100 B (39 local accesses, all after its setmaxnreg.dec in the SASS, as the 37 of the O_TILE build).
PRODUCER_SPILL_BYTES = 104
# combinations that do not exist at a head dim: d = 256 has no QK_AHEAD (SPEED_KNOB_DIMS; persistent + QK_AHEAD
# there spilled 148-244 B at every producer budget tried, 24-40 registers, even serialised)
SPEED_COMBO_SKIP = {256: {"dynamic+ahead"}}


def speed_configs(d: int) -> dict:
    """{name: config} of the A/B: "base" (CONFIGS[d]), each knob alone, each combination."""
    extra = SPEED_KNOB_EXTRA.get(d, {})

    def build(parts):
        cfg = dict(CONFIGS[d])
        for part in parts:
            cfg.update(SPEED_KNOBS[part], **extra.get(part, {}))
        return cfg
    out = {"base": dict(CONFIGS[d])}
    out.update({name: build([name]) for name in SPEED_KNOBS if d in SPEED_KNOB_DIMS.get(name, (d,))})
    out.update({name: build(parts) for name, parts in SPEED_COMBOS.items()
                if name not in SPEED_COMBO_SKIP.get(d, ())})
    return out


# Issue 14 item 5, a size-based choice of build. Candidates for short key loops, timed by the A/B only where
# N <= SIZE_MAX_N (lab/ab_wgmma_speed.py): one warpgroup per CTA, several CTAs per SM, so a Q block's
# prologue (Q and the first K through HBM) and epilogue overlap other CTAs' products. v1 evidence (old
# per-call event timing, tc_bench_wgmma.md): the cp.async d = 64 Bc = 128 x 3 CTAs build at 1.21-1.34x SDPA
# flash for N < 1k, where the TMA default was at 0.90-0.98x (NOTES-tc.md, fa2_wgmma v2).
# TMA candidates: NWG=1 (no ping-pong partner), the shipped rescale threshold at d = 64; NVRTC: no spills.
# Shared memory per CTA: d = 64 Bc = 128 x 2 CTAs 72 KB, Bc = 96 x 3 CTAs 56 KB; d = 128 Bc = 96 x 2 CTAs
# 112 KB (Bc = 128 is 144 KB: one CTA per SM, so not a candidate).
SIZE_CANDIDATES = {
    64: {"small-tma": dict(TMA=1, BLOCK_N=128, NWG=1, MIN_BLOCKS=2, PINGPONG=0, RESCALE_THRESHOLD=8),
         "small-tma3": dict(TMA=1, BLOCK_N=96, NWG=1, MIN_BLOCKS=3, PINGPONG=0, PRODUCER_REGS=24,
                            RESCALE_THRESHOLD=8),
         "small-cp": dict(BLOCK_N=128, NWG=1, MIN_BLOCKS=3)},
    # d = 128's TMA form (Bc = 96, 2 CTAs, and its persistent "-dyn") is gone: with its mbarriers and the 1 KB kept
    # to align the base it needs 115,784 B, and two CTAs with the runtime's 1 KB each take 144 B more than the SM's
    # 228 KB, so it always ran one CTA per SM (its timings in persist14 and earlier are of that); _check_fits now
    # refuses such a build. The cp.async form (no mbarriers) fits two exactly.
    128: {"small-cp": dict(BLOCK_N=96, NWG=1, MIN_BLOCKS=2)},
}
for _name in ("small-tma", "small-tma3"):  # the d = 64 size builds with l from the tensor core (ROW_SUM_MMA)
    SIZE_CANDIDATES[64][_name + "-rs"] = dict(SIZE_CANDIDATES[64][_name], ROW_SUM_MMA=1)
# and the 2-CTA TMA build persistent (v3c's dynamic scheduler): one more overlap of tiles
SIZE_CANDIDATES[64]["small-tma-dyn"] = dict(SIZE_CANDIDATES[64]["small-tma"], PERSISTENT=2)
# d = 128, the default's two ping-ponging warpgroups with Bc = 128: N = 512 and 1024 are whole 128-key blocks,
# where Bc = 176 ends each row on a masked, partly empty block (512 = 2 x 176 + 160)
SIZE_CANDIDATES[128]["small-bc128"] = dict(CONFIGS[128], BLOCK_N=128)
# Persistent builds for short rows, where a tile's prologue and epilogue are a large share of its time (d = 128,
# N = 512: 4 key blocks per tile): the dynamic scheduler, its causal order in L2-sized sections of heads
# (fa2_wgmma_tma.cu tile_coords; "-lpt": one section, the order ncu showed moving 1.8-2.7x the DRAM bytes), and
# O_TILE ("-oq"): O staged in its own smem tile, so the next tile's Q loads during this tile's last P V and
# epilogue instead of after them. O_TILE needs a second Q-sized tile: d = 128 Bc = 128 192 KB, d = 64 Br = 192
# 128 KB, d = 64 3 CTAs x 64 KB; d = 256 (224 KB) and d = 128 Bc = 176 (208 KB) have no room.
CAUSAL_SECTION_KB = 16384  # fa2_wgmma_tma.cu's default (tests/test_kernels_wgmma_speed.py reads it there)
SIZE_CANDIDATES[128]["bc128-dyn"] = dict(SIZE_CANDIDATES[128]["small-bc128"], PERSISTENT=2)
SIZE_CANDIDATES[128]["bc128-dyn-lpt"] = dict(SIZE_CANDIDATES[128]["bc128-dyn"], CAUSAL_SECTION_KB=0)
SIZE_CANDIDATES[128]["bc128-dyn-oq"] = dict(SIZE_CANDIDATES[128]["bc128-dyn"], O_TILE=1)
# the longest key block beside a second Q-sized tile at d = 128: 2 x 32 + 4 x 40 KB = 224 KB of the 227
SIZE_CANDIDATES[128]["bc160-dyn-oq"] = dict(CONFIGS[128], BLOCK_N=160, PERSISTENT=2, O_TILE=1)
# O_TMA: each consumer warpgroup stores its rows of O from the staging tile with one TMA per panel, instead of every
# thread's 16 shared loads, global stores and row checks per tile (ncu at N = 512: cuDNN does the same work with
# 8-25% fewer instructions; results/fwd_wgmma_persistent/ncu6)
SIZE_CANDIDATES[128]["bc128-dyn-oqt"] = dict(SIZE_CANDIDATES[128]["bc128-dyn-oq"], O_TMA=1)
SIZE_CANDIDATES[64]["small-tma3-dyn-oq"] = dict(SIZE_CANDIDATES[64]["small-tma3"], PERSISTENT=2, O_TILE=1)
# the cells still behind cuDNN after v6e (fwd_wgmma_persistent/v6e): d = 128 non-causal 1k-4k (0.94-0.99) with the longest key
# block that leaves room for O's tile, and with FA4's rescale threshold (v3a: level at d = 128 one tile per CTA, where
# the O rescale is under the next block's loads); d = 64 causal N <= 2k (0.93-0.99) with O stored by TMA
SIZE_CANDIDATES[128]["bc160-dyn-oqt"] = dict(SIZE_CANDIDATES[128]["bc160-dyn-oq"], O_TMA=1)
SIZE_CANDIDATES[128]["bc128-dyn-oqt-r"] = dict(SIZE_CANDIDATES[128]["bc128-dyn-oqt"], RESCALE_THRESHOLD=8)
# d = 96 had no short-N build: CONFIGS[96] (one tile per CTA) at every N trailed cuDNN by 0.905-0.93 at N = 768
# (results/sessions/fresh11). d = 128's short-N form on it: persistent, the next Q under this tile's end, O stored by TMA
# (its smem: Q + O + two K/V slots of 128 padded columns, 193 KiB)
SIZE_CANDIDATES[96] = {"dyn-oqt": dict(CONFIGS[96], PERSISTENT=2, O_TILE=1, O_TMA=1)}
SIZE_CANDIDATES[96]["dyn-oqt-r"] = dict(SIZE_CANDIDATES[96]["dyn-oqt"], RESCALE_THRESHOLD=8)
# A/B (results/fwd_wgmma_d96_rule/candidates, one run abba, fp16/bf16, N = 512-4096, causal and not; time / CONFIGS[96]): dyn-oqt
# 0.857-0.997 (geomean 0.927), dyn-oqt-r 0.837-0.969 (0.894; causal 0.857-0.905). With it d = 96 is >= cuDNN in 26 of
# 28 cells (causal N = 512: 0.988-0.991); CONFIGS[96] was in 9. GPU tests 6 passed; memcheck and racecheck on 3 CTAs at
# one d = 96 shape (1 x 1 x 300 x 2900, non-causal), 0 errors / 0 hazards.
# SIZE_RULES[96] takes dyn-oqt-r up to Nk = 4096, the measured range (d = 128's stopped there too until stop 24 took its
# causal calls to 10240).
SIZE_CANDIDATES[64]["small-tma3-dyn-oqt"] = dict(SIZE_CANDIDATES[64]["small-tma3-dyn-oq"], O_TMA=1)
# Key blocks that tile N = 512-2048 exactly: Bc = 96 at d = 64 (the 3-CTA build) runs 6 blocks over 512 keys, the
# last one a third full (12.5% of the products on padding), and d = 256's Bc = 80 runs 7 (9%); Bc = 64 runs 8 full
# ones at both (Bc = 128 does not fit 3 CTAs at d = 64, nor two stages at d = 256)
SIZE_CANDIDATES[64]["small-tma3-bc64-dyn-oq"] = dict(SIZE_CANDIDATES[64]["small-tma3-dyn-oq"], BLOCK_N=64)
# and with O stored by TMA: d = 64 causal at short rows, the cells furthest behind cuDNN after v12 (0.93-0.95). A/B of
# forward()'s build with Bc = 64 and O_TMA, time / the 3-CTA Bc = 96 build (results/fwd_wgmma_turn_carry/d64small, d64rule; abba):
# causal 512 0.949-0.955 and 0.968-0.970 (second run), 1k 0.974-0.975 and 1.014-1.019 (level), 2k 1.00-1.07; non-causal,
# where forward() runs Br = 192, 1.14-1.20. SIZE_RULES[64] takes it at causal Nk <= 512, where both runs gain (stop 23:
# with four K/V slots, to Nk = 896; see SIZE_RULES)
SIZE_CANDIDATES[64]["small-tma3-bc64-dyn-oqt"] = dict(SIZE_CANDIDATES[64]["small-tma3-bc64-dyn-oq"], O_TMA=1)
SIZE_CANDIDATES[256] = {"bc64": dict(CONFIGS[256], BLOCK_N=64), "bc64-dyn": dict(CONFIGS[256], BLOCK_N=64, PERSISTENT=2)}
# v13 O_DIRECT (fa2_wgmma_tma.cu): d = 256's persistent builds with O written from registers, so the next Q loads under
# the tile's end (no smem for O_TILE at d = 256). O_DIRECT=1 (4-byte stores) lost, 1.03-1.13x the time at N <= 4k;
# O_DIRECT=2 (16-byte stores after a quad transpose) is SIZE_RULES[256]'s at every N (see there)
SIZE_CANDIDATES[256]["bc64-dyn-od"] = dict(SIZE_CANDIDATES[256]["bc64-dyn"], O_DIRECT=1)
SIZE_CANDIDATES[256]["dyn-od"] = dict(CONFIGS[256], PERSISTENT=2, O_DIRECT=1)
SIZE_CANDIDATES[256]["bc64-dyn-od2"] = dict(SIZE_CANDIDATES[256]["bc64-dyn"], O_DIRECT=2)
SIZE_CANDIDATES[256]["dyn-od2"] = dict(CONFIGS[256], PERSISTENT=2, O_DIRECT=2)
# d = 64 at N = 512-1024 with whole tiles both ways: Br = 192 runs 3 Q blocks over 512 rows (the last 2/3 full) and the
# 3-CTA build's Bc = 96 runs 6 key blocks (the last 1/3 full), 11% of the products on padding each; CONFIGS[64]'s
# Br = Bc = 128 tiles N = 512 and 1024 exactly. Persistent with O_TILE and O_TMA (d = 128's winner at N <= 4k), and
# with the two warpgroups ping-ponging (v1: 0-10% slower at N >= 8k one tile per CTA; not tried on short rows).
# Measured (fwd_wgmma_persistent/rs64, abba, fp16/bf16, N = 512-4096, time / forward()'s default): rs-dyn-oqt 1.02-1.17,
# rs-dyn-oqt-pp 1.07-1.17: not taken (the whole tiles do not make up for Br = 192's third softmax in flight, nor for
# the 3-CTA build's overlap of one CTA's tile ends with the others' products)
SIZE_CANDIDATES[64]["rs-dyn-oqt"] = dict(CONFIGS[64], PERSISTENT=2, O_TILE=1, O_TMA=1)
SIZE_CANDIDATES[64]["rs-dyn-oqt-pp"] = dict(SIZE_CANDIDATES[64]["rs-dyn-oqt"], PINGPONG=1)
SIZE_MAX_N = 4096
# Tile candidates timed at every N (lab/ab_wgmma_speed.py): d = 64 with three consumer warpgroups (Br = 192,
# FA3's hopper/tile_size.h tile for d <= 64), one CTA of 512 threads per SM. At d = 64 the exponentials of a
# step take the MUFU (16/clk/SM) as long as its two products take the tensor cores, so the SM needs one more
# warpgroup's softmax in flight to keep both busy; consumers get 160 registers (the producer keeps 24).
# Bc = 176 and 192 spill 300-450 B at 160 registers (nvcc 13.0), so Bc = 128 only.
TILE_CANDIDATES = {
    64: {"br192": dict(TMA=1, BLOCK_N=128, NWG=3, PINGPONG=0, PRODUCER_REGS=24, RESCALE_THRESHOLD=8)},
}
TILE_CANDIDATES[64]["br192-rs"] = dict(TILE_CANDIDATES[64]["br192"], ROW_SUM_MMA=1)
# and FA4's FMA-pipe exponentials again, 1 of 8, now that ROW_SUM_MMA has freed an issue slot per score (v3b's 2 of
# 8 without it: 1.00-1.18x the time)
TILE_CANDIDATES[64]["rs-poly1"] = dict(CONFIGS[64], ROW_SUM_MMA=1, EXP2_POLY=1)
# the shipped d = 64 build before v5a (l summed on the FP32 pipe): the A/B's check that ROW_SUM_MMA still wins
TILE_CANDIDATES[64]["no-rs"] = {k: v for k, v in CONFIGS[64].items() if k != "ROW_SUM_MMA"}
TILE_CANDIDATES[64]["br192-rs-poly1"] = dict(TILE_CANDIDATES[64]["br192-rs"], EXP2_POLY=1)
# Br = 192 with shorter key blocks, for the cells it still trails in (causal N <= 4k, N <= 2k): less of the
# causal diagonal's block is masked work, and the short rows get more steps to pipeline
for _bc in (96, 64):
    TILE_CANDIDATES[64][f"br192-bc{_bc}-rs"] = dict(TILE_CANDIDATES[64]["br192-rs"], BLOCK_N=_bc)
# the persistent, early-Q build of Br = 192 (see the persistent size builds above); its producer at 32 registers
# (at 24 the tile loop spills 60-72 B; the consumers keep 160 either way)
TILE_CANDIDATES[64]["br192-rs-dyn-oq"] = dict(TILE_CANDIDATES[64]["br192-rs"], PERSISTENT=2, O_TILE=1,
                                              PRODUCER_REGS=32)
TILE_CANDIDATES[64]["br192-rs-dyn-oqt"] = dict(TILE_CANDIDATES[64]["br192-rs-dyn-oq"], O_TMA=1)
# v11 WG_CAUSAL_SKIP (fa2_wgmma_tma.cu): on causal rows a warpgroup walks the key blocks that lie wholly past its own
# last row. It acts where Br > Bc's alignment leaves warpgroup 0 a block short of the tile's last one (causal_walk_steps:
# d = 256 Bc = 64 at N = 512 walks 4 of 40 warpgroup-steps, d = 64 Br = 192 3 of 23; Br = Bc = 128 none at Nq = Nk).
# Two builds where it acts, for the causal cells behind cuDNN at N <= 2k: d = 64's Br = 192 (the 3-CTA build forward()
# runs there has one warpgroup, nothing to walk) and d = 128 at Bc = 64; with forward()'s DEFAULT_KNOBS (v9, v10)
SIZE_CANDIDATES[64]["br192-rs-dyn-oqt-cs"] = dict(TILE_CANDIDATES[64]["br192-rs-dyn-oqt"], DESC_STEP=1, WG_SKIP=1,
                                                  WG_CAUSAL_SKIP=1)
SIZE_CANDIDATES[128]["bc64-dyn-oqt-r-cs"] = dict(SIZE_CANDIDATES[128]["bc128-dyn-oqt-r"], BLOCK_N=64, DESC_STEP=1,
                                                 WG_SKIP=1, WG_CAUSAL_SKIP=1)
# Measurement builds, not speed candidates (issue 11): CONFIGS with a K/V ring of one slot each (STAGES=1), the
# pipeline cuDNN's d = 256 kernel runs (232,448 B of smem: Q and one K and one V tile of Bc = 128; ours keeps Bc = 80:
# Bc = 128 at d = 256 spills 144 B and ptxas serialises it, C7512). Measured (results/sessions/fresh11, three runs abba,
# time / CONFIGS): 1.14-1.68x (d = 256 non-causal 1.48-1.68): this kernel holds K_j and V_{j+1} through a step, so each
# load waits for the product that frees its slot. cuDNN's one-slot d = 256 kernel runs at 0.94-1.28x the two-slot
# default's time, far from that (an inference across two kernels): the cost is the schedule's,
# so the GPU model does not price a one-slot ring's serialisation (and validates no ring1 row: gpumodel/measured.py
# AB_VARIANTS). What it prices of the ring depth (descriptor kv_stages, gpumodel/gpu_model.py ring_wait) is how far
# ahead the producer issues a key block that DRAM serves: the stop-21 STAGES A/B below (four slots / two at causal
# N = 512, 3-CTA build: measured 0.957-0.986, model 0.969 as do_bench times it).
for _d in (128, 256):
    TILE_CANDIDATES.setdefault(_d, {})["ring1"] = dict(CONFIGS[_d], STAGES=1)


def candidate(d: int, name: str) -> dict:
    """A build by the name the A/B and the tests give it: a size-based or tile candidate (SIZE_CANDIDATES, then
    TILE_CANDIDATES), else a speed build ("base", a knob or a combination: speed_configs)."""
    for table in (SIZE_CANDIDATES, TILE_CANDIDATES):
        if name in table.get(d, {}):
            return table[d][name]
    speed = speed_configs(d) if d in CONFIGS else {}
    if name in speed:
        return speed[name]
    raise KeyError(f"fa2_wgmma: no candidate {name!r} at d={d}")


# The rule forward() applies when no config is given: per d, (largest Nk or None for any, config, "causal" or None),
# first match wins; a "causal" entry applies to causal calls only; a cp.async candidate (no TMA key) only for
# contiguous inputs with equal head counts. Each entry goes in with the cells that justify it (H200, fp16 and bf16,
# causal and not, batch*N = 16k, H = 2048/d; time / time of CONFIGS[d], < 1 faster):
#   d = 64 (results/fwd_wgmma_d64_tiles/tiles_ab/rep1, rep2: two runs of one visit, the mean per cell):
#     Nk <= 1024: small-tma3 (3 CTAs/SM, Bc = 96) 0.76-0.90 (8 cells; fwd_wgmma_size_rules/ab_wgmma_speed.json: 0.76-0.89)
#     causal, Nk <= 2048: small-tma3 0.89-0.90 (br192-rs 0.95-0.96); at causal 4096 0.91-0.98, level with br192-rs
#     otherwise: br192-rs (three consumer warpgroups, Br = 192, ROW_SUM_MMA in fp16) non-causal 0.89-0.93 at
#       N = 2048-4096 and 0.88-0.89 at 8k-16k, causal 0.92-0.96 from 4096; loses below (1.08-1.10 causal N <= 1k).
#     The 2-CTA small-tma of the previous rule (Nk <= 2048) is 0.98-1.05 at N = 2048 in these runs: dropped.
#     CONFIGS[64] stays the base the knob A/Bs are measured against; at d = 64 every Nk has a rule.
# At d = 128 the one-warpgroup builds are 1.2-1.8x slower (they lose the ping-pong between two warpgroups that
# d = 128's default relies on). The default with Bc = 128 ("small-bc128") instead: three runs
# (results/fwd_wgmma_vs_cudnn_grid/v4/, results/fwd_wgmma_size_rules/d128/rep1, rep2), time / CONFIGS' time at N = 512: non-causal
# 0.96-0.98, causal 0.87-0.89 (the Q and key blocks meet the diagonal on the same 128-row grid); at N = 1024
# causal 0.91-0.94 but non-causal fp16 1.04-1.05, so Nk <= 512 only.
# v6 (persistent builds: causal tiles longest first in L2-sized sections of heads, O_TILE's early Q; two runs of one
# visit, results/fwd_wgmma_persistent/persist_short (fp16, N <= 4k) and persist2 (fp16 and bf16, N = 512-16k), time /
# the v5 rule's build (the one above each entry; --order abba):
#   d = 64, causal Nk <= 2048: small-tma3-dyn-oq 0.96-1.00 (against small-tma3); at 4k and beyond br192-rs-dyn-oq
#     0.89-0.92 (4k), 0.90-0.94 (8k-16k) against br192-rs (its 1.19-1.23 at causal N <= 1k keeps it there);
#   d = 64, non-causal: br192-rs-dyn-oq 0.93-0.97 at N = 512 (against small-tma3), 0.96-0.98 at 2k, 0.93-1.01 at 4k,
#     0.96-0.99 at 8k-16k (against br192-rs); at 1k 0.98-1.03, so small-tma3 keeps N <= 1024;
#   d = 128: bc128-dyn-oq (Bc = 128, persistent, O_TILE) non-causal 0.89-0.92 at N = 512, 0.93-0.95 at 1k, 0.98-0.99
#     at 2k (CONFIGS at 4k: 0.99-1.01); causal 0.91-0.92 at 512, 0.83-0.84 at 1k, 0.87-0.89 at 2k, 0.95-0.97 at 4k.
#     Without the sections (bc128-dyn-lpt) 0.99-1.07 where bc128-dyn gives 0.89-1.01: the sections are most of the
#     causal gain, O_TILE 4-9% more at N <= 1k;
#   d = 256, causal N = 1024-8192: the dynamic persistent build (CONFIGS[256], PERSISTENT=2; no room for O_TILE)
#     0.89-0.96; at 16k 0.99-1.03 and at 512 1.00-1.02, non-causal 0.97-1.03 (CONFIGS stays there).
#   A third run (fwd_wgmma_persistent/confirm6, forward()'s default against the v5 builds) agrees: d = 64 0.89-1.00, d = 128
#     0.83-0.98 at N <= 4k, d = 256 causal 0.92-0.99 at 1k-8k.
# GPU tests (hypothesis shapes, Nk = 4100, 3 CTAs over many tiles, causal rows with no key, sections of 1 and 4
# heads, GQA (B, N, H, d) views), memcheck 0 errors and racecheck 0 hazards at scale on 3 CTAs (persist2).
# v6d, d = 128: the same build with O stored by TMA (bc128-dyn-oqt; fwd_wgmma_persistent/oqt, one run, fp16 and bf16): 0.94-0.99
# against bc128-dyn-oq in every cell at N <= 4k, causal and not (0.95-0.99 against CONFIGS at non-causal 4k), so it
# replaces bc128-dyn-oq and takes non-causal 4k too; GPU tests 6 passed, memcheck 0 errors on 3 CTAs. At d = 64
# (br192-rs-dyn-oqt) 0.95-1.04, geomean ~0.99 with cells over 1.03: not taken.
# After v6e (fwd_wgmma_persistent/cand7, one run, fp16 and bf16, time / forward()'s v6e default; fwd_wgmma_persistent/confirm7 the second):
#   d = 128, N <= 4k: bc128-dyn-oqt-r (FA4's rescale threshold on bc128-dyn-oqt) 0.94-0.99 in all 16 cells (geomean
#     0.963), causal and not. One tile per CTA it was level (v3a); here the O rescale it skips is no longer hidden.
#     Bc = 160 with O_TMA: 0.99-1.16, not taken.
#   d = 64, non-causal N <= 2k: br192-rs-dyn-oqt 0.97-0.99 (fwd_wgmma_persistent/oqt: 0.98-1.01); at 4k 1.00-1.02, so not there.
#     The 3-CTA build with O_TMA: causal 0.95-1.02, non-causal 0.96-1.13, not taken.
#   confirm7 (the second run) agrees: bc128-dyn-oqt / the new default 0.98-1.07 (geomean 1.025); br192-rs-dyn-oq 1.02-1.03
#     and small-tma3 1.01-1.03 in the non-causal cells the new d = 64 entry took from them.
#   d = 128, N > 4k: CONFIGS[128] with the rescale threshold ("rescale") 0.91-1.00 against CONFIGS (geomean 0.957, 8
#     cells, confirm7); fwd_wgmma_persistent/rescale8k, the second run: 0.94-1.005 (geomean ~0.97). v3a had measured it level.
#   d = 256, Bc = 64 persistent (bc64-dyn: 8 whole key blocks at N = 512 where Bc = 80 runs 7, the last 40% full;
#     finer causal diagonal blocks) against the default (fwd_wgmma_persistent/bc64, one run; fwd_wgmma_persistent/bc64b the second): causal
#     512-2048 0.95-0.97 (6 cells), non-causal 512 0.97-0.98 (1k-2k 1.02-1.05: not there). Bc = 64 one tile per CTA:
#     0.96-1.11. d = 64 with 3 CTAs at Bc = 64: causal 512 0.97, elsewhere 1.00-1.17: not taken. The second run
#     (bc64b, time / CONFIGS): bc64-dyn causal 0.95 / 0.91 / 0.88 / 0.87-0.89 at 512 / 1k / 2k / 4k where "dynamic"
#     (Bc = 80) is 1.00 / 0.94 / 0.90-0.92 / 0.90-0.91; non-causal 512 0.96-0.98. At causal 4k a third run (bc64c,
#     with the rule briefly at 4k) has the two level (bc64-dyn 0.87-0.90 as the default and 0.87-0.89 by name,
#     "dynamic" 0.87-0.88; geomean over both runs 0.988, one cell 1.02), so "dynamic" keeps causal 4k-8k.
#   GPU tests after the change (rescale8k): the threshold's paths, one CTA over tiles of three heads whose max jumps,
#     stays and creeps, and forward()'s dispatch and layouts (62 passed); memcheck of the build 0 errors.
# v13 (results/fwd_wgmma_o_direct_store/; fa2_wgmma_tma.cu v13): d = 256 with O written from registers in 16-byte stores (O_DIRECT=2)
# and the Q tile handed back after the tile's last S, persistent at every N: the v12 rule's builds above with it, and
# CONFIGS[256] (one tile per CTA, non-causal 1k-16k, causal 16k) made persistent with it. Time / forward()'s v12 build,
# two runs (abba, fp16/bf16): odirect2 (N <= 4k) geomean 0.971 (0.933-1.013; N = 512 0.933-0.949), odirect3 (N <= 16k)
# 0.958 at N <= 4k, 0.972 above (0.926-1.015). The same with TURN_CARRY: 0.985 (odirect2), so forward() does not add it
# here; O_DIRECT=1 (4-byte stores): 1.09. GPU tests 30 passed; memcheck / racecheck / synccheck on 2 CTAs 0 / 0 / 0.
# v13 at d = 64 (results/fwd_wgmma_o_direct_store_d64/d64c13, d64od): the causal rule builds with O written from registers in 16-byte
# stores (O_DIRECT=2) in place of O_TILE (and O_TMA): time / forward()'s v12 build, two runs (abba, fp16/bf16): causal
# N <= 2k 0.930-0.990 (geomean 0.962) and N <= 4k 0.932-0.991 (0.971), above 0.974-0.998 (0.986); non-causal level
# (0.979-1.031, geomean 0.984 and 1.000), so the non-causal builds keep O_TILE. ROW_SUM_MMA in the 3-CTA build: 1.061.
for _name in ("small-tma3-bc64-dyn-oqt", "small-tma3-dyn-oq", "br192-rs-dyn-oq"):
    _base = (SIZE_CANDIDATES[64] | TILE_CANDIDATES[64])[_name]
    SIZE_CANDIDATES[64][_name.replace("-oqt", "").replace("-oq", "") + "-od2"] = {
        k: v for k, v in dict(_base, O_TILE=0, O_DIRECT=2).items() if k != "O_TMA"}
# v13 at d = 96 (results/fwd_wgmma_o_direct_store/odirect3/d128, odirectfinal/d128): the rule's build with O_DIRECT=2 in place of
# O_TILE + O_TMA (TURN_CARRY kept), time / the rule's build, two runs (abba, fp16/bf16, N = 512-4096): causal geomean
# 0.985 and 0.981 (cells 0.95-1.015), non-causal 1.006 and 1.010. A third run with the order of the two builds reversed
# (results/fwd_wgmma_o_direct_store_d64/d96od: the rule's O_TILE build as the variant) has the O_TILE build at 0.988 of the time on the
# causal cells, and at 0.980 on the non-causal cells, where both entries were the same build: a 2% order bias in that run,
# the size of the gain. Not taken at d = 96; at d = 128 (causal 0.982 and 0.994) not either. d = 64's and d = 256's gains
# hold grid to grid against cuDNN (v13 above; d = 64 causal 0.974, d = 256 causal 0.959 of the earlier grid's time).
SIZE_CANDIDATES[96]["dyn-od2-r"] = dict(SIZE_CANDIDATES[96]["dyn-oqt-r"], O_TILE=0, O_TMA=0, O_DIRECT=2, TURN_CARRY=1)
# stop 21, a deeper K/V ring at short rows (results/sessions/stop21): a tile of N = 512 has 4-8 key steps, so the ring's
# two slots are all the loads its CTA has in flight when the next tile's first K and V come from DRAM. One run (abba,
# entries rotated per cell, the default timed twice as the control: 0.992-1.003), d = 64 N = 512, time / forward()'s
# build: STAGES=4 causal 0.957-0.970 (3-CTA build, 73 KB each), non-causal 0.978-0.989 (Br = 192, 193 KB); STAGES=3
# 0.970-0.973 / 0.989-1.002. d = 96/128 (O_DIRECT=2 in place of O_TILE frees its tile for a third slot, 225 KB at
# Bc = 128): d = 96 0.969-1.011 (geomean 0.991), d = 128 0.986-1.053, not taken. The d = 64 builds with four slots,
# for the A/B at every N and the GPU tests (the 3-CTA Bc = 96 build has no room: 3 x 105 KB). Second run (stages21b,
# N = 512-8k; control 0.987-1.037): causal 512 0.963-0.964, non-causal 512-2k 0.975-0.995, causal 4k 0.980-0.981 and 8k
# 0.926-1.000; non-causal 4k-8k 0.980-1.017 and the 3-CTA Bc = 64 build at causal 1k-2k 1.027-1.086 (not taken).
# Third run (stages21c, the rule builds against themselves with two slots, N = 512-16k; control 0.988-1.024, the
# unchanged builds 0.953-1.088 at N >= 4k; four slots / two): causal 512 0.965-0.986, non-causal 512-2k 0.984-1.008;
# causal 4k-16k 0.979-1.028 and 1.056 at 16k fp16. So SIZE_RULES[64] runs four slots in the 3-CTA causal N <= 512 (896 since stop 23)
# build (three runs 0.957-0.986) and Br = 192 non-causal N <= 2k (geomean per run 0.983, 0.981, 0.995, no cell over 1.008),
# not at causal N > 2k (level: 0.926-1.056 over two runs). d = 128's two-CTA builds (small2-bc64/80-dyn-od2 below, stages21c):
# 1.05-1.28x the default's time at N <= 2k, not taken (the 64-row tiles read K/V twice as often and the SM runs one
# product per CTA, not two warpgroups ping-ponging within one).
for _name, _base in (("small-tma3-bc64-dyn-od2", SIZE_CANDIDATES[64]), ("br192-rs-dyn-od2", SIZE_CANDIDATES[64]),
                     ("br192-rs-dyn-oqt", TILE_CANDIDATES[64]), ("br192-rs-dyn-oq", TILE_CANDIDATES[64])):
    SIZE_CANDIDATES[64][_name + "-s4"] = dict(_base[_name], STAGES=4)
# d = 128 at two CTAs per SM, now that the TMA form really runs two (see SIZE_CANDIDATES' head): one consumer warpgroup
# of 64 rows each, persistent, O from registers (no staging tile), Bc = 64 (81 KB) or 80 (97 KB); for N = 512, where
# d = 128 trails cuDNN by 1-2%: a second CTA's tile ends and starts under the first's products
for _bc in (64, 80):
    SIZE_CANDIDATES[128][f"small2-bc{_bc}-dyn-od2"] = dict(TMA=1, BLOCK_N=_bc, NWG=1, MIN_BLOCKS=2, PINGPONG=0, PERSISTENT=2,
                                                         O_DIRECT=2, RESCALE_THRESHOLD=8)
# stop 23 (results/fwd_wgmma_d64_causal_rule/bc64_vs_bc96_run1: two runs, abba, Williams order, causal, fp16/bf16; time / forward()'s build):
# the Bc = 64 four-slot build at N = 768 0.960-0.983 in all four cells (control 0.984-1.000; cuDNN at 0.982-0.993 of
# forward()'s old build there and in fresh23), 1k 0.982-1.028 (level), 1.5k 1.04-1.07, 2k 0.996-1.020: its causal
# diagonal wastes half a 64-key block where Bc = 96 wastes half a 96-key one, and at 513-767 keys Bc = 96's last block
# is partly empty. Past 768 (d64c23b, two runs): 832 0.990-1.009 (level), 896 0.947-0.989 in all four cells (control
# 0.969-1.008; Bc = 96's last block a third full there), 960 0.990-1.024, 1024 0.957-1.029. So it runs to Nk = 896.
# stop 24 (results/sessions/stop24: bc24, bc24b, bc24c, rf24ab; abba, fp16/bf16): d = 128's persistent Bc = 128 build had
# never been timed past SIZE_MAX_N (the A/B times size candidates only up to it). As the added entry
# "default+BLOCK_N=128+PERSISTENT=2+O_TILE=1+O_TMA=1" (with forward()'s knobs), time / forward()'s one-tile build, causal:
# 4608 0.865-0.968 (four runs), 5120 0.913-0.973, 5632 0.929-1.021, 6144 0.959-1.048, 7168 0.904-0.974, 8192 0.941-0.982, 10240
# 1.021-1.098 (the ragged section: 0.916-0.961 with SECTION_RAGGED_FIRST), 12288 0.954-1.047, 14336 0.991-1.080, 16384
# 0.975-1.047; non-causal 4608-16384 level (0.933-1.073, geomean 0.997-1.012). The Bc = 176 build made persistent with O
# from registers: the same causal gain (0.967 / 0.976, the first build 0.968 / 0.977 in bc24b). So the causal rule runs
# the Bc = 128 persistent build to Nk = 10240; at 12288 and beyond the runs disagree in sign and the one-tile build stays.
SIZE_RULES: dict = {64: [(896, SIZE_CANDIDATES[64]["small-tma3-bc64-dyn-od2-s4"], "causal"),
                         (2048, SIZE_CANDIDATES[64]["small-tma3-dyn-od2"], "causal"),
                         (None, SIZE_CANDIDATES[64]["br192-rs-dyn-od2"], "causal"),
                         (2048, SIZE_CANDIDATES[64]["br192-rs-dyn-oqt-s4"], None),  # non-causal: causal took the above
                         (None, TILE_CANDIDATES[64]["br192-rs-dyn-oq"], None)],
                    128: [(4096, SIZE_CANDIDATES[128]["bc128-dyn-oqt-r"], None),
                          (10240, SIZE_CANDIDATES[128]["bc128-dyn-oqt-r"], "causal"),
                          (None, candidate(128, "rescale"), None)],
                    96: [(4096, SIZE_CANDIDATES[96]["dyn-oqt-r"], None)],
                    256: [(2048, SIZE_CANDIDATES[256]["bc64-dyn-od2"], "causal"),
                          (None, SIZE_CANDIDATES[256]["dyn-od2"], "causal"),
                          (512, SIZE_CANDIDATES[256]["bc64-dyn-od2"], None),
                          (None, SIZE_CANDIDATES[256]["dyn-od2"], None)]}


# v9 (results/fwd_wgmma_desc_step/tests_memcheck_ab, desc9ab; fa2_wgmma_tma.cu v9): the builds forward() picks itself (config=None) run
# with each wgmma descriptor built once per product and stepped per k-slice. Time / the same builds without it, two
# grid runs (abba, 72 cells each): geomean 0.98-0.998 per d at N <= 4k, 0.98-1.00 above, cells 0.924-1.048. GPU tests on
# every rule build and CONFIGS (hypothesis shapes, long key loops, 3 persistent CTAs): 24 passed; memcheck 0 errors.
# Explicit configs (the sweep, speed and size candidates) keep DESC_STEP=0 until their GPU tests run with it.
# v10 (results/fwd_wgmma_idle_warpgroup_skip/; fa2_wgmma_tma.cu v10): WG_SKIP, a consumer warpgroup whose 64 rows all lie past Nq walks the
# barriers and computes nothing (the idle test and the warp index warp-uniform for ptxas). A/B of forward()'s builds with
# and without it, two runs (final/ab, final/ab2; abba, fp16/bf16, N = 512-8192 with ragged 1000 and 3000, causal and
# not), time / without, geomean of the two runs per cell:
#   cells where a warpgroup idles (d = 64's Br = 192 at every N of the grid; Br = 128 at N = 3000 only): d = 64 0.961
#     (20 cells, 0.911-1.005), d = 96 0.986, d = 128 0.989, d = 256 0.968 (4 cells each);
#   cells where none does (it cannot act there): 0.992-0.996, level.
# The one-run decision rule (geomean <= 0.99, no cell over 1.03, over all cells) takes d = 64 in the first run (0.957 at
# N <= 4k, 0.970 above, no cell over 1.008; the second: 0.978 / 1.008, bf16 non-causal 8k 1.044) and d = 256 in the
# second. The gain is where the knob acts, at every d, and it is exact, so forward() runs it at every d. The
# one-warpgroup builds compile to the same cubin with it.
# v11 (results/fwd_wgmma_causal_warpgroup_skip/; fa2_wgmma_tma.cu v11): WG_CAUSAL_SKIP, on causal rows a warpgroup walks the key blocks wholly
# past its own last row. GPU tests of every NWG >= 2 build with it (hypothesis causal shapes, Nk - Nq off the block
# grid, Nk = 4100, Nq > Nk, 3 persistent CTAs, strided GQA): 39 passed; memcheck and racecheck of four persistent builds
# on 2 CTAs: 0 / 0. A/B (cskipab, abba, fp16/bf16, N = 512-8192), time / without: d = 256 causal 0.962-0.985 in all 10
# cells (geomean 0.974; the Bc = 64 and 80 builds walk 10-11% of the warpgroup-steps at N = 512, 3% at 2k), the cells
# where it cannot act (non-causal, and Br = Bc = 128 at Nq = Nk) 0.93-1.03, level (geomean 0.989-1.004). Exact, so
# forward() runs it at every d, as v10's WG_SKIP.
# Not taken, the same visits: WAIT_HINT (try_wait's suspend-time hint, CUTLASS's 10^7 ns; waithint/): geomean per d
# 0.990-0.999 at N <= 4k, 0.97-1.00 above, cells 0.94-1.05, level; and the two builds where the walk acts more
# (SIZE_CANDIDATES br192-rs-dyn-oqt-cs, bc64-dyn-oqt-r-cs; cskipab): d = 64 Br = 192 causal 512-1k 0.88-0.94 of
# cuDNN against the 3-CTA default's 0.94-0.99; d = 128 Bc = 64 0.79-0.93 of cuDNN, 1.15-1.29x the default's time.
DEFAULT_KNOBS = {"DESC_STEP": 1, "WG_SKIP": 1, "WG_CAUSAL_SKIP": 1}
# Not in it (stop 22): MAX_TREE (the row max as a pairwise tree, wgmma_fa2.cuh; exact, register-neutral; GPU tests of
# every build with it 42 passed). It ran in forward()'s d = 128 builds for part of stop 22, taken on three runs, each
# 1.2-1.8% under the control (default-again): 0.986 / 1.004 (fwd_wgmma_max_tree/tests_ab_run1), 0.997 / 1.012 (tree21b), 0.987 / 0.999
# (fwd_wgmma_max_tree/d128_knobs). Those margins are within the 1-2% by which any added entry then ran under the control (the cyclic
# order's bias, results/lab_ab_method/entry_order_cyclic). Under the Williams-design order that removes it (recheck22) the build
# without it is 1.004 against the control's 1.000: level, so it is off again (the knob stays; d = 64/96/256 were level
# in tree21 too).
# Nor HALF_DIAG (v14, stop 22; half_diag_builds below): its gain is not shown. Two A/B runs with it as the added
# entry in the cyclic order (half22ab, half22ab2): d = 128 causal 0.974 and 0.973 (controls 0.995, 0.992), but the
# cells where it cannot act ran as far under their controls (d = 128 non-causal 0.988 / 0.986, d = 96 non-causal,
# d = 256 N = 512); with roles reversed (isolate22) without / with causal 1.001. Under the Williams order (recheck22):
# 1.001, causal 0.999 against the control's 1.005. The GPU model, told of the half step, predicts 0.966x (N = 512) to
# 0.990x (4k) as do_bench times it; the GPU does not show it
# v12 (results/fwd_wgmma_turn_carry/; fa2_wgmma_tma.cu v12): TURN_CARRY, the ping-pong turn runs on from tile to tile, so
# warpgroup 0 issues its next tile's first S while warpgroup 1 finishes its last P V and epilogue. It can act only where
# the next tile's Q is already in (O_TILE: the persistent d = 96/128 builds forward() runs at Nk <= 4096). Two A/B runs
# (carryab, carryfinal; abba, fp16/bf16, N = 512-4096), time / without, geomean of the two per cell: d = 96 0.956-1.024
# (geomean 0.982; causal 512-1k 0.961-0.976), d = 128 0.968-0.998 (geomean 0.983; 512 0.968-0.990). In the first run
# d = 256 (no O_TILE: the next Q waits for the epilogue anyway) was level (0.97-1.03), and so were the one-tile-per-CTA
# builds at 8k (0.98-1.04). GPU tests of every ping-pong build with it: 24 passed; synccheck, memcheck, racecheck on 2
# CTAs of the persistent ones: 0 / 0 / 0; forward()'s dispatch tests with it: 43 passed. forward() runs it on the builds
# with O_TILE and ping-pong (default_knobs). Not with v13's O_DIRECT at d = 256: 0.985 of the v12 build's time with it,
# 0.971 without (results/fwd_wgmma_o_direct_store/odirect2).
TURN_CARRY_KNOBS = {"TURN_CARRY": 1}
# stop 24 SECTION_RAGGED_FIRST (results/fwd_wgmma_ragged_section_first/ab; fa2_wgmma_tma.cu tile_coords): a persistent build's causal
# tiles run in sections of hs heads whose K/V fit 16 MB, longest first in each; the section of the B*H % hs heads left
# over ran last, so its longest tiles started when the rest was nearly done and ran on alone. First, they start with
# the others. Time / forward()'s one-tile build, two runs (abba, fp16/bf16, causal), d = 128's persistent Bc = 128 build
# without / with it: N = 10240 (16 heads in sections of 3) 1.021-1.071 / 0.916-0.961, 6144 (32 in 5s) 0.959-0.993 /
# 0.883-0.936, 4608 (48 in 7s; 6 left over) 0.865-0.968 / 0.900-0.994; d = 64's rule builds with it 0.970-0.986 at
# 6144 and 10240, 0.990-1.034 at 3000. The GPU model, told of the order, predicted 1.031 -> 0.926 (10240), 0.985 ->
# 0.911 (6144), 0.901 -> 0.910 (4608); d = 64 0.961 (6144), 0.942 (10240), before the run. Exact (the same tiles in
# another order); GPU tests of every persistent forward() build with it (sections of two heads, one left over, 1 and 3
# CTAs) 27 passed, memcheck on 2 CTAs 0 errors (rf24). Where B*H is a multiple of hs (every power-of-two grid cell) the
# order is unchanged.
SECTION_KNOBS = {"SECTION_RAGGED_FIRST": 1}


def default_knobs(cfg: dict) -> dict:
    """DEFAULT_KNOBS, TURN_CARRY_KNOBS where the build ping-pongs two warpgroups and loads the next Q under this tile's
    end from its O_TILE, and SECTION_KNOBS where it is persistent and has no HALF_DIAG (with both, ptxas serialises the
    wgmma pipeline at d = 96 / 128 / 256): the knobs forward() adds to a rule build."""
    pingpong = cfg.get("NWG", 2) == 2 and cfg.get("PINGPONG", 1) and not cfg.get("QK_AHEAD")
    return dict(DEFAULT_KNOBS, **(TURN_CARRY_KNOBS if pingpong and cfg.get("O_TILE") else {}),
                **(SECTION_KNOBS if cfg.get("PERSISTENT") and not cfg.get("HALF_DIAG") else {}))


def with_knobs(d: int, n_k: int, causal: bool, knobs: dict) -> dict:
    """forward()'s build for this call (its rule, contiguous equal-head inputs) with these knobs, then the knobs forward()
    adds to the build they make (TURN_CARRY where they turn O_TILE on in a ping-pong build, SECTION_RAGGED_FIRST where
    they make it persistent without HALF_DIAG), unless named. The build an A/B's "default+KNOB=V" entry runs
    (lab/ab_wgmma_speed.py) and `fa-traffic predict --knobs` prices."""
    cfg = dict(choose_config(d, n_k, True, causal=causal) or CONFIGS[d], **knobs)
    return {**cfg, **default_knobs(cfg), **knobs}


# stop 26: d = 128 with three consumer warpgroups (Br = 192), never built before. What the GPU model credits it with at
# short causal rows (causal N = 512): Bc = 64 wastes less of the diagonal's masked products (tensor term 39.8 us
# against forward()'s 44.2), a third softmax in flight (sigma_ws3 0.46 against sigma_ws 0.53), and a 192-row Q block
# reads each K_j, V_j once for 1.5x the rows (L2 time 63.7 us against 71.3; not the bound: compute is 1.4x it). Its O (64 x 128 fp32 per warpgroup) leaves room for Bc = 64 or 80 at the 152 registers
# three consumers get beside a producer at 40 (at 32 the producer spills 16 B, at 24 60 B; the consumers none);
# persistent, the next Q under this tile's end (O_TILE), O by TMA (smem 165 / 181 KB), with the knobs forward() adds to
# such a build (default_knobs: explicit builds get none at launch). Model, before any run (results/sessions/stop26/
# br192d128_prediction.json): time / forward()'s build at causal N = 512 0.91 (Bc = 64) / 0.97 (80), non-causal 512
# 0.98 / 1.01, causal 2048 0.96, non-causal 2048-4096 level. Not yet timed (gpu_visit_open.sh br192d128, d128ab26)
for _bc in (64, 80):
    _cfg = dict(TMA=1, BLOCK_N=_bc, NWG=3, PINGPONG=0, PRODUCER_REGS=40, PERSISTENT=2, O_TILE=1, O_TMA=1,
                RESCALE_THRESHOLD=8)
    SIZE_CANDIDATES[128][f"br192-bc{_bc}-dyn-oqt"] = {**_cfg, **default_knobs(_cfg)}


def default_config(d: int, n_k: int | None, plain: bool = True, causal: bool = False) -> dict:
    """The build forward() runs when given no config: SIZE_RULES' for this Nk (or CONFIGS[d]), with default_knobs;
    None for a head dim it does not take (defines_for then says which it does)."""
    if d not in CONFIGS:
        return None
    rule = choose_config(d, n_k, plain, causal=causal) if n_k is not None else None
    cfg = rule or CONFIGS[d]
    return dict(cfg, **default_knobs(cfg))


# stop 24 Q_SLOTS=2 (fa2_wgmma_tma.cu): two Q tiles in a persistent build, so the producer loads the next tile's Q as soon
# as it reaches that tile instead of after this tile's last S = Q K^T (stall21: at d = 128 causal N = 512, 3.7% of the
# warp-state samples sat on the consumers' wait for Q at a tile's start). It needs a Q_EARLY build (O_TILE or O_DIRECT:
# the epilogue does not stage O through Q) with room for a second Q tile: d = 96 / 128's persistent builds (225 KB), d = 64's
# Br = 192 builds (217 KB) and its 3-CTA Bc = 96 build (3 x 65 KB); not the 3-CTA Bc = 64 four-slot build (3 x 81 KB) nor
# d = 256.
def q_slots_builds() -> list[tuple[int, dict]]:
    """(d, config) of every build default_builds() lists that takes Q_SLOTS=2, with it."""
    out = []
    for d, c in default_builds():
        try:
            defines_for(d, 0, dict(c, Q_SLOTS=2))
        except ValueError:  # no second Q tile's room, or not a Q_EARLY build
            continue
        out.append((d, dict(c, Q_SLOTS=2)))
    return out


def default_builds() -> list[tuple[int, dict]]:
    """(d, config) of every build forward() can pick itself: each distinct SIZE_RULES entry, then CONFIGS[d], all
    with default_knobs (the builds the v9-v12 GPU tests and compile tests run)."""
    return [(d, dict(c, **default_knobs(c))) for d, c in _rule_builds()]


def _rule_builds() -> list[tuple[int, dict]]:
    """(d, config) of each distinct SIZE_RULES entry, then CONFIGS[d], without forward()'s knobs."""
    rules = {repr(c): (d, c) for d, entries in SIZE_RULES.items() for _, c, _ in entries}
    return list(rules.values()) + list(CONFIGS.items())


# stop 22 HALF_DIAG (fa2_wgmma_tma.cu, wgmma_fa2.cuh): a warpgroup whose rows end in the first half of its first key
# block runs it at half width (S over Bc/2 keys, the softmax over them, P V over Bc/2 slices); exact. ptxas keeps the
# wgmma pipeline with it in the persistent builds at d = 96, 128, 256 (forward()'s d = 96 / 128 builds at N <= 4k, d = 256's
# Bc = 64); it serialises it ("insufficient register resources" or accumulator moves) in forward()'s d = 64 Bc = 64 and
# Br = 192 O_DIRECT builds and in CONFIGS[96] (one tile per CTA). Other d = 64 builds keep it, but d = 64 was not
# measured with it; half_diag_builds() (the GPU tests) and forward() stay at d = 96-256
HALF_DIAG_DIMS = (96, 128, 256)


def half_diag_compiles(cfg: dict) -> bool:
    """Whether HALF_DIAG can be built: a TMA build without QK_AHEAD whose Bc (the kernel's 128 unless set) halves into
    whole 16-key slices (defines_for refuses it elsewhere)."""
    return bool(cfg.get("TMA")) and cfg.get("BLOCK_N", 128) % 32 == 0 and not cfg.get("QK_AHEAD")


def half_diag_ok(d: int, cfg: dict) -> bool:
    """Whether HALF_DIAG is built in this build: d in HALF_DIAG_DIMS and a persistent build where it compiles (it is
    correct in every build half_diag_compiles takes; some of the others serialise their wgmma pipeline with it, see
    above)."""
    return d in HALF_DIAG_DIMS and bool(cfg.get("PERSISTENT")) and half_diag_compiles(cfg)


def half_diag_builds() -> list[tuple[int, dict]]:
    """default_builds() that HALF_DIAG is built in (half_diag_ok), with it; their knobs are default_knobs' for a HALF_DIAG
    build (no SECTION_RAGGED_FIRST: with both, ptxas serialises the wgmma pipeline, insufficient registers)."""
    return [(d, {**c, **default_knobs(dict(c, HALF_DIAG=1)), "HALF_DIAG": 1}) for d, c in _rule_builds()
            if half_diag_ok(d, c)]


def wg_skip_builds() -> list[tuple[int, dict]]:
    """default_builds() where a consumer warpgroup can be idle (two or three of them; WG_SKIP is a DEFAULT_KNOBS knob):
    the v10 idle-warpgroup tests' and sanitizer's builds."""
    return [(d, c) for d, c in default_builds() if c.get("NWG", 2) >= 2]


def causal_walk_steps(cfg: dict, n_q: int, n_k: int) -> tuple[int, int]:
    """(warpgroup-steps walked, warpgroup-steps in all) of a causal launch with WG_CAUSAL_SKIP (v11), as
    fa2_wgmma_tma.cu counts them: in each Q block of T key blocks, a consumer warpgroup whose rows end before the
    block's last row runs max(1, its own key blocks) steps and walks the rest; warpgroups with no row below Nq
    (WG_SKIP's idle ones) are counted in neither."""
    nwg, bc = cfg.get("NWG", 2), cfg["BLOCK_N"]
    br = 64 * nwg
    walked = total = 0
    for m0 in range(0, n_q, br):
        t = -(-max(0, min(n_k, min(m0 + br, n_q) + n_k - n_q)) // bc)
        for tw in warpgroup_steps(m0, t, n_q, n_k, bc, nwg):
            if tw is not None:
                walked, total = walked + t - tw, total + t
    return walked, total


def choose_config(d: int, n_k: int, plain: bool, rules: dict | None = None, causal: bool = False) -> dict | None:
    """The size-based build for d, Nk and causal (None: CONFIGS[d]); plain: contiguous q, k, v with equal heads."""
    for max_nk, cfg, only in (SIZE_RULES if rules is None else rules).get(d, ()):
        if ((max_nk is None or n_k <= max_nk) and (cfg.get("TMA") or plain)
                and (only is None or (only == "causal") == bool(causal))):
            return cfg
    return None


for _d, _cands in list(SIZE_CANDIDATES.items()) + list(TILE_CANDIDATES.items()):  # compiled (spill-free) and
    # GPU-tested as sweep candidates
    SWEEP[_d] += [c for c in _cands.values() if c not in SWEEP[_d]]


# The builds that could become defaults after the last A/B (persistent everywhere, QK_AHEAD at d = 64, where
# it keeps the shipped Bc): what the final GPU visit checks under memcheck and times against CONFIGS.
# (d = 64's ahead builds measured off since, v7d; kept here as the builds with the most knobs for the sanitizer)
DEFAULT_CANDIDATES = {64: ("dynamic", "ahead", "dynamic+ahead"), 96: ("dynamic",), 128: ("dynamic",),
                      256: ("dynamic",)}


def full_speed_config(d: int) -> dict:
    """The candidate default with the most knobs at d (the last of DEFAULT_CANDIDATES[d]): the sanitizer's."""
    return speed_configs(d)[DEFAULT_CANDIDATES[d][-1]]


for _d in HEAD_DIMS:  # the speed builds are sweep candidates: compiled (spill-free) and GPU-tested as such
    SWEEP[_d] += [c for name, c in speed_configs(_d).items() if name != "base" and c not in SWEEP[_d]]


def defines_for(d: int, is_bf16: bool, config: dict | None = None) -> dict:
    if d not in HEAD_DIMS:
        raise ValueError(f"fa2_wgmma supports head dims {HEAD_DIMS}, got d={d}")
    if config is not None:  # a dict of known integer knobs (counting.checks.knob_config): not a dict was an
        # AttributeError, 64.0 or True a define of another kernel, NWG='2' a TypeError from a comparison
        config = checks.knob_config("fa2_wgmma", config, KNOBS | LAUNCH_KEYS, example=CONFIGS[d])
        if config.get("GRID", 1) < 1:
            raise ValueError(f"fa2_wgmma: GRID={config['GRID']}: the persistent CTAs to launch, at least 1")
    cfg = {k: v for k, v in (CONFIGS[d] if config is None else config).items() if k not in LAUNCH_KEYS}
    if not cfg.get("TMA") and d not in CP_ASYNC_HEAD_DIMS:
        raise ValueError(f"fa2_wgmma: d={d} needs a TMA build (TMA=1); the cp.async build takes d in "
                         f"{CP_ASYNC_HEAD_DIMS}")
    if "PV_N" in cfg and cfg["PV_N"] not in (d, padded_d(d)):
        raise ValueError(f"fa2_wgmma: PV_N={cfg['PV_N']} must be d={d} or {padded_d(d)}")
    if cfg.get("ROW_SUM_MMA") and not (cfg.get("TMA") and d == 64):
        raise ValueError(f"fa2_wgmma: ROW_SUM_MMA is a TMA build at d = 64 only (got d={d}, "
                         f"TMA={cfg.get('TMA', 0)})")
    if cfg.get("HALF_DIAG") and not half_diag_compiles(cfg):
        raise ValueError(f"fa2_wgmma: HALF_DIAG is a TMA build with Bc a multiple of 32 and no QK_AHEAD (got "
                         f"TMA={cfg.get('TMA', 0)}, BLOCK_N={cfg.get('BLOCK_N')}, QK_AHEAD={cfg.get('QK_AHEAD', 0)})")
    if cfg.get("Q_SLOTS", 1) not in (1, 2) or (cfg.get("Q_SLOTS", 1) == 2 and not (
            cfg.get("TMA") and cfg.get("PERSISTENT") and (cfg.get("O_TILE") or cfg.get("O_DIRECT")))):
        raise ValueError(f"fa2_wgmma: Q_SLOTS is 1, or 2 in a persistent TMA build with O_TILE or O_DIRECT (its epilogue "
                         f"must not stage O through Q); got Q_SLOTS={cfg.get('Q_SLOTS')}, PERSISTENT="
                         f"{cfg.get('PERSISTENT', 0)}, O_TILE={cfg.get('O_TILE', 0)}, O_DIRECT={cfg.get('O_DIRECT', 0)}")
    if cfg.get("ROW_SUM_MMA") and is_bf16:
        # bf16 keeps the fp32 row sum: l from bf16-rounded P (2^-9) moves lse by up to ~4e-3, past the 2e-3 the
        # kernels promise (H200, tests/test_kernels_wgmma_speed_gpu.py: 2.3-3.4e-3; fp16's 2^-11 stays inside)
        cfg = {k: v for k, v in cfg.items() if k != "ROW_SUM_MMA"}
    if cfg.get("TMA"):
        base = dict(TMA_DEFAULTS, PINGPONG=int(cfg.get("NWG", 2) == 2))  # ping-pong takes two warpgroups
    else:
        base = DEFAULTS
    defines = dict(HEAD_DIM=d, IS_BF16=int(bool(is_bf16)), **dict(base, **cfg))
    # the .cu files' own defaults where a config leaves Bc or the warpgroups out (knob_errors reads them so; they were
    # KeyErrors in smem_bytes and block_m); appended, so a config that names them keeps its defines and its cubin
    defines.setdefault("BLOCK_N", 128)
    defines.setdefault("NWG", 2)
    check_knobs(defines)
    _check_fits(defines)
    return defines


# Knobs that are switches (#if KNOB): another value than 0 or 1 would build the 1 kernel under a name of its own (no
# measured registers, no timing matches it), so it is refused as the kernel's range checks refuse theirs
SWITCHES = ("TMA", "PINGPONG", "QK_AHEAD", "ROW_SUM_MMA", "O_TILE", "O_TMA", "DESC_STEP", "WG_SKIP", "WG_CAUSAL_SKIP",
            "TURN_CARRY", "MAX_TREE", "HALF_DIAG", "SECTION_RAGGED_FIRST", "OVERLAP", "CTA_TRACE")
SETMAXNREG = range(24, 257, 8)  # PTX ISA: setmaxnreg takes 24 to 256 registers, a multiple of 8


def _cdiv_c(a: int, b: int) -> int:
    """C's integer division (truncates toward zero), as the preprocessor computes the kernel's register budget."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def knob_errors(defines: dict) -> list[str]:
    """Why the kernel cannot be built with these defines (defines_for's, every default filled in), in the kernel's own
    words: the static_asserts of fa2_wgmma_tma.cu (TMA=1; lines 398 and 462-487), fa2_wgmma.cu (TMA=0; lines 82-86),
    wgmma_fa2.cuh (46-48) and exp2_poly.cuh (25), and what else its source cannot take (a K/V ring of no slot, no CTA
    per SM, a setmaxnreg count PTX refuses). Empty: it builds. defines_for calls it, so the launcher (forward) and the
    GPU model (describe, `fa-traffic predict --knobs`) refuse the same builds."""
    g = defines.get
    tma, nwg, bn, stages = g("TMA", 0), g("NWG", 2), g("BLOCK_N", 128), g("STAGES", 2)
    out = [f"{k}={g(k)}: {k} is a switch, 0 or 1" for k in SWITCHES if g(k, 0) not in (0, 1)]
    rules = [  # (holds, the kernel's reason)
        (g("MIN_BLOCKS", 1) >= 1, f"MIN_BLOCKS={g('MIN_BLOCKS')}: at least one CTA per SM (the register cap divides by it)"),
        (1 <= nwg <= 3, f"NWG={nwg}: 1 to 3 consumer warpgroups (3: Br = 192, FA3's d = 64 tile)"),
        (0 <= g("RESCALE_THRESHOLD", 0) <= 15, f"RESCALE_THRESHOLD={g('RESCALE_THRESHOLD')}: 0..15 (P <= 2^15 < fp16 max)"),
        (0 <= g("EXP2_POLY", 0) <= 8, f"EXP2_POLY={g('EXP2_POLY')}: 0..8 of every 8 exponentials"),
        (3 <= g("EXP2_POLY_DEG", 3) <= 5, f"EXP2_POLY_DEG={g('EXP2_POLY_DEG')}: 3, 4 or 5"),
        (not g("HALF_DIAG") or bn % 32 == 0, f"HALF_DIAG with BLOCK_N={bn}: Bc/2 a whole number of 16-key P V slices"),
    ]
    if tma:  # fa2_wgmma_tma.cu
        rules += [
            (0 <= g("PERSISTENT", 0) <= 2, f"PERSISTENT={g('PERSISTENT')}: 0, 1 (static) or 2 (atomic counter)"),
            (bn > 0 and bn % 16 == 0 and bn <= 256, f"BLOCK_N={bn}: a multiple of 16, at most 256 (TMA box)"),
            (stages >= 1, f"STAGES={stages}: the K/V ring needs a slot (the producer loads block t into slot t % STAGES)"),
            (not g("PINGPONG") or nwg == 2, f"PINGPONG=1 with NWG={nwg}: ping-pong needs two consumer warpgroups"),
            (not (g("QK_AHEAD") and g("PINGPONG")), "QK_AHEAD issues the products at two points per step: no ping-pong turns"),
            (not g("O_TMA") or g("O_TILE"), "O_TMA stores from O_TILE's staging tile"),
            (not (g("WG_SKIP") and g("QK_AHEAD")), "WG_SKIP's idle walk is tested on the one-S-tile loop only"),
            (not g("TURN_CARRY") or g("PINGPONG"), "TURN_CARRY carries the ping-pong turn from tile to tile"),
            (not (g("WG_CAUSAL_SKIP") and g("QK_AHEAD")), "WG_CAUSAL_SKIP's walk is written for the one-S-tile loop only"),
            (not (g("HALF_DIAG") and g("QK_AHEAD")), "HALF_DIAG is written for the one-S-tile loop only"),
            (not g("O_TILE") or (g("PERSISTENT") and not g("QK_AHEAD")),
             "O_TILE: a persistent build without QK_AHEAD (its Q goes back early)"),
            (g("O_DIRECT", 0) in (0, 1, 2), f"O_DIRECT={g('O_DIRECT')}: 0, 1 or 2"),
            (not g("O_DIRECT") or (g("PERSISTENT") and not g("QK_AHEAD") and not g("O_TILE")),
             "O_DIRECT: a persistent build without QK_AHEAD or O_TILE"),
            (g("CAUSAL_SECTION_KB", 0) >= 0, f"CAUSAL_SECTION_KB={g('CAUSAL_SECTION_KB')}: a size in KB, 0 for one section"),
            (g("WAIT_HINT", 0) >= 0, f"WAIT_HINT={g('WAIT_HINT')}: a suspend time in ns, 0 for the system's"),
            (not g("CTA_TRACE") or not (g("PERSISTENT") or g("QK_AHEAD")),
             "CTA_TRACE records one tile per CTA, the one-S-tile loop: not with PERSISTENT or QK_AHEAD"),
        ]
        if g("MIN_BLOCKS", 1) >= 1 and 1 <= nwg <= 3:  # the setmaxnreg budget (the kernel's header, lines 434-463)
            at_launch = 65536 // g("MIN_BLOCKS", 1) // (128 * (nwg + 1)) // 8 * 8
            producer = g("PRODUCER_REGS", 40)
            consumer = g("CONSUMER_REGS", min(_cdiv_c(at_launch + _cdiv_c(at_launch - producer, nwg), 8) * 8, 240))
            rules += [
                (producer in SETMAXNREG and consumer in SETMAXNREG,
                 f"setmaxnreg takes 24 to 256 registers, a multiple of 8 (PTX): PRODUCER_REGS={producer}, "
                 f"CONSUMER_REGS={consumer}"),
                (nwg * (consumer - at_launch) <= at_launch - producer,
                 "setmaxnreg: the consumers may take only what the producer gives back (else setmaxnreg.inc hangs)"),
            ]
    else:  # fa2_wgmma.cu
        rules += [
            (bn in (64, 96, 128, 192, 256), f"BLOCK_N={bn}: must be a wgmma N of wgmma.cuh (64, 96, 128, 192 or 256)"),
            (2 <= stages <= 4, f"STAGES={stages}: 2..4 ring slots"),
            (not g("CTA_TRACE"), "CTA_TRACE: the TMA kernel's builds only (fa2_wgmma_tma.cu)"),
        ]
    return out + [why for holds, why in rules if not holds]


def check_knobs(defines: dict) -> None:
    """Raise ValueError with the kernel's reason for a build it cannot compile (knob_errors)."""
    errors = knob_errors(defines)
    if errors:
        raise ValueError(f"fa2_wgmma: {'; '.join(errors)}")


def _check_fits(defines: dict) -> None:
    """Refuse a build whose smem cannot launch, or cannot put MIN_BLOCKS CTAs on an SM: the first fails at launch,
    the second would run silently at fewer CTAs (MIN_BLOCKS only caps registers), and time as another build."""
    smem, ctas = smem_bytes(defines), defines.get("MIN_BLOCKS", 1)
    if smem > fa2_tc.SMEM_PER_BLOCK:
        raise ValueError(f"fa2_wgmma: d={defines['HEAD_DIM']} BLOCK_N={defines['BLOCK_N']} NWG={defines['NWG']} "
                         f"STAGES={defines.get('STAGES', 2)} O_TILE={defines.get('O_TILE', 0)} needs {smem} B of "
                         f"shared memory per CTA; the SM gives at most {fa2_tc.SMEM_PER_BLOCK}")
    if fa2_tc.ctas_by_smem(smem) < ctas:  # the rule occupancy() counts CTAs by
        raise ValueError(f"fa2_wgmma: MIN_BLOCKS={ctas} CTAs of {smem} B shared memory (+1 KB each, reserved) do not "
                         f"fit the SM's {fa2_tc.SMEM_PER_SM} B; at most {fa2_tc.ctas_by_smem(smem)} would run")


def source_of(defines: dict) -> tuple[Path, str]:
    return (SOURCE_TMA, KERNEL_TMA) if defines.get("TMA") else (SOURCE, KERNEL)


def threads(defines: dict) -> int:
    """Consumer warpgroups, plus the producer warpgroup in the TMA kernel."""
    return 128 * (defines["NWG"] + (1 if defines.get("TMA") else 0))


def block_m(defines: dict) -> int:
    return 64 * defines["NWG"]


def padded_d(d: int) -> int:
    """A tile row in smem: whole 64-column (128-byte) swizzle panels (d = 96 -> 128)."""
    return -(-d // 64) * 64


def smem_bytes(defines: dict) -> int:
    """Q tile (and O_TILE's staging tile) + 2-slot K and V rings (fp16/bf16) + ROW_SUM_MMA's panel of ones +
    the mbarriers + 1 KB so the kernel can align its base to 1024 B."""
    d, bn, stages = padded_d(defines["HEAD_DIM"]), defines["BLOCK_N"], defines.get("STAGES", 2)
    barriers = 8 * (1 + 4 * stages) if defines.get("TMA") else 0  # mbarriers: full_q, full/empty K and V
    q_slots = defines.get("Q_SLOTS", 1)
    if defines.get("PERSISTENT"):
        barriers += 8 * 5 + 8 + 16 * (q_slots - 1)  # empty_q, tile_full[2], tile_empty[2], two int32 tile slots
        # (Q_SLOTS=2: and the second Q slot's full and empty barriers)
    ones = bn * 128 if defines.get("ROW_SUM_MMA") else 0  # the panel of ones beside V (l from P V)
    tiles_q = q_slots + (1 if defines.get("O_TILE") else 0)  # O_TILE: the epilogue's staging tile beside Q's
    return tiles_q * block_m(defines) * d * 2 + 2 * stages * bn * d * 2 + ones + barriers + 1024


def _build(defines: dict) -> tuple[str, str, dict]:
    src, kernel = source_of(defines)
    return (str(src), kernel, defines)


def compile_configs() -> list[tuple[str, str, dict]]:
    return [_build(defines_for(d, bf16)) for d in HEAD_DIMS for bf16 in (0, 1)]


def sweep_configs() -> list[tuple[str, str, dict]]:
    out = []
    for d in HEAD_DIMS:
        for cfg in SWEEP[d]:
            for bf16 in (0, 1):
                item = _build(defines_for(d, bf16, cfg))
                if item not in out:
                    out.append(item)
    return out


def occupancy(defines: dict, registers: int, **limits) -> dict:
    return fa2_tc.occupancy_for(threads(defines) // 32, smem_bytes(defines), registers, **limits)


def supported(device=None) -> bool:
    """True on a compute capability 9.x GPU (wgmma)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] == 9


_PLANS: dict = {}      # (d, bf16, config) -> launch plan: defines, source, block, smem, tile sizes


def _plan(d: int, bf16: bool, config: dict | None) -> tuple:
    # keyed so that 64.0 or True never reuses the plan of 64 or 1
    return checked_once(_PLANS, (d, bf16), config, lambda c: _new_plan(d, bf16, c))


def _new_plan(d: int, bf16: bool, config: dict | None) -> tuple:
    defs = defines_for(d, bf16, config)  # not a dict of integer knobs: it names the problem
    src, kernel = source_of(defs)
    return (defs, src, kernel, (threads(defs), 1, 1), smem_bytes(defs), block_m(defs), defs["BLOCK_N"],
            bool(defs.get("TMA")))


def forward(q, k, v, *, causal: bool = False, scale: float | None = None, config: dict | None = None,
            out=None):
    """FlashAttention-2 forward with wgmma; returns (o, lse). out=(o, lse) writes into given tensors.

    q (B, H, Nq, d); k, v (B, H_kv, Nk, d), H_kv dividing H; any strides with a unit last one (no copy)."""
    import torch

    b, h, h_kv, n_q, n_k, d = layouts.check_strided_gqa(q, k, v, head_dims=HEAD_DIMS)
    check_grid_rows("fa2_wgmma", b, h)
    dev = q.device.index
    loader.require_hopper(q.device, "fa2_wgmma needs a compute capability 9.x GPU (wgmma, sm_90a)", "fa2_tc")
    scale, causal = checks.scale_value(scale, d), checks.flag("causal", causal)  # the references' rules
    q, scale = layouts.positive_scale(q, scale)  # the kernel masks S before scaling it
    if config is None:
        config = default_config(d, n_k, h_kv == h and q.is_contiguous() and k.is_contiguous() and v.is_contiguous(),
                                causal=causal)
    defs, src, kernel, block, smem, bm, bn, tma = _plan(d, q.dtype == torch.bfloat16, config)
    if out is None:  # not empty_like: o is contiguous whatever q's strides
        o = torch.empty((b, h, n_q, d), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    else:
        o, lse = fa2_tc._outputs(q, out)
    if tma:
        maps = (tensor_map(q, bm, name="q"), tensor_map(k, bn, name="k"), tensor_map(v, bn, name="v"))
        if defs.get("O_TMA"):  # o stored by TMA, 64 rows (one consumer warpgroup) per box
            maps += (tensor_map(o, 64, name="o"),)
        args = maps + (o, lse, int(n_q), int(n_k), float(scale * fa2_tc.LOG2E), float(scale), int(bool(causal)),
                       int(h), int(h // h_kv))
    else:
        if h_kv != h or not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
            raise ValueError("the cp.async build (TMA=0) takes contiguous q, k, v with equal head counts; "
                             "use a TMA build (the default) for strided or grouped-query inputs")
        for name, t in (("q", q), ("k", k), ("v", v)):  # its cp.async loads fault on a view at an element offset
            loader.check_aligned(name, t)
        args = (q, k, v, o, lse, int(n_q), int(n_k), float(scale * fa2_tc.LOG2E), float(scale),
                int(bool(causal)))
    grid = (-(-n_q // bm), b * h, 1)
    if defs.get("PERSISTENT"):  # persistent CTAs loop over the Tr x B*H tiles (fa2_wgmma_tma.cu)
        n_tiles = grid[0] * grid[1]
        ctas = (config or {}).get("GRID") or _sm_count(dev) * defs.get("MIN_BLOCKS", 1)
        grid = (max(1, min(n_tiles, int(ctas))), 1, 1)
        # PERSISTENT=2 hands out tiles with atomicInc, which the launch's last fetch wraps back to 0 (v6e), so
        # one counter serves every call on a stream; PERSISTENT=1 never reads it
        counter = _tile_counter(q.device) if defs["PERSISTENT"] == 2 else o
        args = args + (int(b * h), counter)
    loader.get_function(src, kernel, defines=defs, arch=ARCH, device=dev).launch(grid, block, args, shared_mem=smem)
    return o, lse


_SMS: dict = {}  # device index -> SM count
_COUNTERS: dict = {}  # (device index, stream) -> the PERSISTENT=2 tile counter


def _tile_counter(device):
    """The dynamic scheduler's int32 tile counter for the current stream: zeroed once here, and by each launch's
    last fetch after that (fa2_wgmma_tma.cu v6e). One per stream, since launches on two streams may overlap.
    Under CUDA-graph capture a fresh zeroed counter per call, as before v6e: a cached one would be shared by the
    graph's replays and eager calls, and one first made during capture is zeroed only when the graph replays."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(1, dtype=torch.int32, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    c = _COUNTERS.get(key)
    if c is None:
        c = _COUNTERS[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return c


def _sm_count(dev) -> int:
    n = _SMS.get(dev)
    if n is None:
        import torch

        n = _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return n


# -- what the GPU model needs (gpumodel.descriptors; torch-free) ------------------------------------------
def describe(d: int, dtype: str = "fp16", causal: bool = False, *, config: dict | None = None,
             n_k: int | None = None, **_) -> dict:
    """This build's descriptor: wgmma reads Q, K_j, V_j straight from swizzled smem (P from registers);
    TMA=1 is warp-specialised (a producer warpgroup feeds consumers that overlap softmax and products),
    the cp.async build has every warp load, then compute (FA2's structure). No config: the build forward()
    runs for this Nk (SIZE_RULES, contiguous inputs), else CONFIGS[d]."""
    rule = choose_config(d, n_k, True, causal=causal) if config is None and n_k is not None else None
    config = default_config(d, n_k, True, causal) if config is None else config
    defs = defines_for(d, dtype == "bf16", config)
    bc, nwg = defs["BLOCK_N"], defs["NWG"]
    tma = bool(defs.get("TMA"))
    rs_cols = 8 if defs.get("ROW_SUM_MMA") else 0  # P V also reads 8 columns of the ones panel
    smem_tile = nwg * (64 * padded_d(d) * 2 + 2 * bc * padded_d(d) * 2 + bc * rs_cols * 2)
    warps = threads(defs) // 32
    return dict(kernel="fa2_wgmma", build=f"{'TMA' if tma else 'cp.async'} Br={block_m(defs)} Bc={bc}"
                + (f" pingpong={defs.get('PINGPONG', 0)}" if tma else ""),
                variant="fa2", path="wgmma", structure="warp_specialized" if tma else "fa2",
                block_q=block_m(defs), block_k=bc, warps=warps,
                occupancy_from=dict(defines=defs, min_blocks=defs.get("MIN_BLOCKS", 1)),
                loads="tma" if tma else "cp.async", s_p="registers",
                # PERSISTENT: SMs x CTAs/SM CTAs over the tiles; O_TILE / O_DIRECT (v13): the next tile's Q loads under
                # this one's end
                grid="persistent" if defs.get("PERSISTENT") else "q_blocks",
                next_tile_prefetch=bool(defs.get("PERSISTENT") and (defs.get("O_TILE") or defs.get("O_DIRECT"))),
                kv_stages=int(defs.get("STAGES", 2)) if tma else 0,  # the producer's K/V ring (ring_wait)
                causal_section_kb=defs.get("CAUSAL_SECTION_KB", CAUSAL_SECTION_KB) if defs.get("PERSISTENT") else 0,
                ragged_section_first=bool(defs.get("PERSISTENT") and defs.get("SECTION_RAGGED_FIRST")),
                idle_skip=bool(tma and defs.get("WG_SKIP") and nwg > 1),  # v10: the idle warpgroups walk the barriers
                causal_walk=bool(tma and defs.get("WG_CAUSAL_SKIP") and nwg > 1),  # v11
                half_diag=bool(tma and defs.get("HALF_DIAG")),  # v14: a warpgroup's half-visible first block, half width
                rescale_skip=bool(defs.get("RESCALE_THRESHOLD")),  # v6f: O rescaled only when a row max moves past 2^T
                consumer_warpgroups=nwg if tma else 0,  # Br = 192's three: the model's overlap share sigma_ws3
                smem_bytes_per_tile=smem_tile, smem_bytes=smem_bytes(defs),
                row_sum_cols=rs_cols, pv_pad_cols=defs.get("PV_N", padded_d(d)) - d if not rs_cols else 0,
                load_cols=padded_d(d) if tma else d,  # TMA boxes of whole 64-column panels
                # the same CuPy driver launch as fa2_tc (+ tensor maps for TMA, not timed apart)
                launch_overhead_of="fa2_tc",
                source="kernels/fa2_wgmma.py " + ("SIZE_RULES" if rule else "CONFIGS"),
                options={k: v for k, v in defs.items() if k not in ("HEAD_DIM", "IS_BF16")})
