"""A time model of one kernel build on the H200: per-tile SM cycles, wave scheduling, memory levels.

Per visited Br x Bc tile, in SM cycles (rates per SM per clock):
    tensor  4·Br·Bc·d / R_path       R_wgmma, R_mma_sync: attainable FLOP/clk/SM (PARAMS); R_wgmma not fitted:
                                     the measured ceiling (lab/tc_ceiling.py: 4095 of the dense 4096, H100
                                     whitepaper: 989.4 TFLOP/s / 132 / 1.83 GHz) at the training shapes' recorded
                                     clock (gpumodel/fit_gpu_model.py wgmma_rate); R_mma_sync fitted (its ceiling
                                     2688); 2·Br·Bc·(2d + c) with c the columns the products run past d: row sums
                                     (descriptor row_sum_cols) and padding (pv_pad_cols, qk_pad_cols)
    smem    smem bytes per tile / 128 (CUDA guide: 32 banks x 4 B per clock per SM)
    mufu    exponentials per tile / 16 (CUDA guide, CC 9.0: 16 ex2 results/clk/SM)
    alu     (k_alu · 'other' ops + exp_alu · exponentials) per tile / 128 (128 FP32 lanes/clk/SM)
    (FA2-style builds with a measured issue_per_tile, gpumodel/issue.py: softmax = mufu + alu is replaced
    by their non-MMA warp instructions per tile / 4 schedulers: what the code issues, not an estimate)
    teaching (FFMA path): (LDS per tile / η_lds + FFMA / 4 + alu + mufu) / min(1, warps / W_sat)
            (the same warps issue all of it; η_lds fitted: the fraction of one LDS wavefront per clock the
            micro-tiles reach; W_sat fitted: the resident warps per SM whose LDS -> FFMA chains keep the
            four schedulers issuing. FA1's one CTA of 8 warps per SM (its B·H grid, 168 registers) gets
            half the issue rate of FA2's two: the measured 2.0-2.2x per tile, bench_kernels.json)
Overlap rule per kernel structure (the descriptor's):
    warp_specialized  max(tensor, smem, mufu + alu) + σ_ws · min(tensor, mufu + alu)
                      (σ_ws3 in place of σ_ws for a CTA of three consumer warpgroups, descriptor
                      consumer_warpgroups: fa2_wgmma's Br = 192 at d = 64 keeps a third softmax in flight while
                      the other two's products run, so less of the shorter term is exposed; fitted apart, stage 4
                      of gpumodel/fit_gpu_model.py, on the first Br = 192 A/B's fp16 non-causal cells)
    fa2               max(tensor, smem) + σ · (mufu + alu)   (the same warps do both; other CTAs hide part:
                      σ = σ_fa2^(CTAs/SM - 1), each co-resident CTA hiding the same share of what is left;
                      σ = 1 at one CTA per SM: nothing runs products while its warps do the softmax)
A CTA visiting n tiles, m of them masked (the Nk tail's and the causal diagonal's key blocks, counting/tiling.py
masked_steps; a masked tile's softmax runs MASK_OPS_PER_SCORE more FP32 ops per score, t_mask its tile's cycles with
them), takes ctas_per_sm · (n · t_tile + m · (t_mask − t_tile)) + L + io + L_gmem · rt(n) cycles (it shares its SM with
ctas_per_sm - 1 others; L: prologue/epilogue latency, fitted; io: its Q tile in and O tile out, 2·Br·d·item bytes,
at the SM's share of the L2's rate, L2_BANDWIDTH / SMs: not fitted, so L is what is left once the tile sizes are
priced, and a d = 256 tile's start and end cost 4x a d = 64 one's; a persistent kernel that loads its next work tile
while this one finishes (descriptor next_tile_prefetch: cuDNN) pays L + io once per CTA and per work tile only
ctas_per_sm · λ_p · (tensor + softmax) of one unmasked tile, the step its pipeline cannot overlap at a tile's start
and end, run at the CTA's share of the SM as its tiles are (ctas_per_sm · t_tile; λ_p fitted, stage 3 of
gpumodel/fit_gpu_model.py, on cuDNN's one CTA per SM); a build whose producer fills a K/V ring of S slots (descriptor
kv_stages: fa2_wgmma's TMA builds, STAGES) issues each key block's load S - 1 of its steps (ctas_per_sm · t_tile each)
before its consumers need it: a block whose bytes come from DRAM (the share DRAM bytes / L2 bytes) waits lat_dram
(the DRAM request's wait under load, stage 2's constant). With S loads in flight a slot turns over once per load
and step, so a step takes (lat_dram + step) / S when that is longer than the step (Little's law): per tile the CTA
waits (DRAM / L2) · max(0, lat_dram - (S - 1) · ctas_per_sm · t_tile) / S / ctas_per_sm, the SM losing the waiting
CTA's share of it while the other ctas_per_sm - 1 CTAs issue (nothing fitted: a d = 64 N = 512 tile of the 3-CTA build
at S = 2 waits, at S = 4 does not; the STAGES A/B, results/fwd_wgmma_kv_stages/{run1,run2,in_size_rules}, measured 0.957-0.986x the time with
four slots at causal N = 512, the model gives 0.969x as do_bench times it (as_timed); Br = 192 non-causal N = 512-2k
0.975-1.009x, model 0.979-0.997x. At S = 1, the ring1 measurement builds, it charges each block's whole wait; their
rows are not validated: their cost is the schedule's, the ring1 builds of results/fresh11);
rt(n): the dependent global round trips the
descriptor declares, round_trips_per_tile · n + rescale_round_trips · n(n-1)/2 (eager v_once, spilled:
block n rescales the n earlier f blocks in HBM, one read-scale-write round trip each); a round trip waits
L_gmem when the L2 serves it and L_gmem + L_gmem_dram when its line went to DRAM, weighted by the share of
the re-touched bytes the levels send to DRAM ((DRAM - compulsory) / (L2 - compulsory)); both fitted); CTAs are list-scheduled in launch order onto
SMs x ctas_per_sm slots (wave quantisation and the causal tail fall out of it; causal grids in the order the
kernel launches its Q blocks, descriptor causal_order: the repo's kernels the longest first); the persistent cuDNN
kernel is scheduled the same way over its work tiles. One head's CTAs are a pattern the schedule repeats B·H times:
past EXACT_CTAS CTAs of it the repeats are closed (_place_many: whole periods of a recurring schedule skipped, else the
slots shifted by the work's exact mean, within one CTA's cycles of the walk), so a row answers in well under a second
at any B·H. Cycles -> seconds at the clock of gpus.py.
Then t = max(t_compute, L2 bytes / BW_L2, DRAM bytes / BW_DRAM) + launch overhead (measured per launcher);
a kernel that spills its f row (v_once, placement hbm) runs two phases in each CTA, the products and the
f stores, then the f loads and (f/l)V, so its memory time only partly hides under its compute:
+ σ_spill · min(t_compute, t_memory) (σ_spill fitted); and its memory rate is capped by Little's law:
a level delivers at most (bytes in flight) / latency, bytes in flight per SM = resident warps (CTAs/SM x
warps) x the bytes each warp has outstanding (in_flight_per_sm), latency lat_dram fitted:
t_dram = max(bytes / BW_dram, bytes · lat_dram / (SMs · in flight per SM)) (the same cap on the L2 level,
with its own latency, fitted to its floor: no training cell is L2-latency bound, so it is left out);
kernels of several launches (naive) pay their spilled S/P traffic after the compute instead of under it.
The bound is the term that sets the time (limiting_term): where t_compute is at least the L2's and DRAM's times, the
largest of compute's terms (tensor, softmax, smem, latency: the round trips); else the larger of L2 and DRAM.

Counts (exponentials, 'other' ops, tiles) come from `counting.closed_forms` at the kernel's own tiling,
so the model and the papers' count agree on what is computed.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from counting import closed_forms as cf
from counting.checks import check_grid_rows
from counting.cluster import SMEM_PER_CTA, plan_or_largest
from counting.gpus import get_gpu
from counting.headline import attention_flops
from counting.tiling import Tiling, cdiv, half_first_steps, warpgroup_steps
from gpumodel import coverage
from gpumodel.cluster_model import busiest_rank_tiles, cluster_costs, exposed_cycles_per_tile
from gpumodel.descriptors import describe
from gpumodel.levels import counts, grid_ctas, levels, q_block_slots
from gpumodel.measured import EVENTS_LESS_GAP

FIT_FILE = Path(__file__).resolve().parent.parent / "results" / "gpu_model_fit.json"
# The GPUs (counting.gpus keys) the fitted parameters cover (gpumodel/coverage.py: the H200, fitted; the H100, the
# H200's constants carried over): `fa-traffic predict --gpu` refuses others in one line and `report` shows counts and the
# papers' roofline there
COVERED_GPUS = coverage.COVERED_GPUS

# Constants with their sources; PARAMS are fitted by gpumodel/fit_gpu_model.py on the training split it
# names (written to results/gpu_model_fit.json), the rest are datasheet or committed measurements.
SMEM_BYTES_PER_CLK = 128  # CUDA C++ Programming Guide, shared memory: 32 banks x 4 bytes per clock per SM (stop 25's
#                           16-byte-load loop read 215 B per SM clock, but ptxas had merged 7 of its 16 loads: 121 counted
#                           right; the corrected loop is not yet run, lab/NOTES-tc.md stop 25)
MUFU_PER_CLK = 16  # CUDA guide, CC 9.0 arithmetic throughput: 16 exp2 results/clk/SM (measured 16.0 per SM clock on the
#                   H200: lab/tc_ceiling.py, results/probe_gpu/tc_ceiling)
FP32_LANES = 128  # H100 whitepaper: 128 FP32 cores per SM (measured 123 FFMA lane-ops per SM clock, the loop's own add and
#                   branch in the rest: results/probe_gpu/tc_ceiling)
ISSUE_PER_CLK = 4  # four warp schedulers per SM, one instruction each per clock (H100 whitepaper)
MASK_OPS_PER_SCORE = 2  # a masked step's extra FP32-pipe work per score: a compare against the row's last visible
#                         column and a select of -inf (kernels/cuda/wgmma_fa2.cuh softmax_step<true>: ISETP + FSEL)
L2_BANDWIDTH = 6.6e12  # B/s: the most any committed ncu row moved, lts__t_bytes / gpu__time_duration
#                        (v_once_tc d=128 N=4096: 14.49 GB in 2.19 ms, results/tc_ncu_wgmma_tma_d128.csv):
#                        a measured lower bound of the L2's rate, not a datasheet figure (there is none)

DEFAULT_PARAMS = {
    "R_wgmma": 3000.0,  # FLOP/clk/SM
    "R_mma_sync": 2300.0,
    "k_alu": 2.0,  # FP32 instructions per counted 'other' op (conversions, packing, masking included)
    "sigma_fa2": 0.5,
    "sigma_ws": 0.1,
    "sigma_ws3": 0.1,  # σ_ws of a CTA with three consumer warpgroups (stage 4 of the fit; absent: σ_ws)
    "L_cycles": 4000.0,
    "L_persistent_steps": 1.0,  # λ_p: per work tile of a prefetching persistent kernel (cuDNN), its latency in
    #                            units of one tile's tensor + softmax cycles (stage 3 of the fit; absent: L_cycles)
    "eta_lds": 0.5,
    "k_alu_ffma": 2.0,  # teaching tier; fitted near 14: it also carries the per-element work the counts
    #                     leave out there (P stored to smem, the 16-lane shuffles of row_max16/row_sum16,
    #                     the visibility test), all on the same FP32 issue slots
    "W_sat": 16.0,  # resident warps per SM for the teaching tier's full issue rate (fits near 16: 2 CTAs of 8)
    "L_gmem": 1500.0,  # cycles per dependent global round trip under load, served by the L2
    "L_gmem_dram": 1500.0,  # what a round trip adds when its line went to DRAM (teaching v_once, spilled f)
    "sigma_spill": 0.3,
    "lat_dram": 2000.0,  # cycles a DRAM request waits under load: fitted on the spilled kernels (Little's law,
    #                    v_once_tc hbm, stage 2); also what a K/V ring's block from DRAM waits (ring_wait)
}


def load_params() -> dict:
    try:
        data = json.loads(FIT_FILE.read_text())
        return {k: float(v) for k, v in data["params"].items()}
    except (OSError, KeyError, ValueError):
        return dict(DEFAULT_PARAMS)


@dataclass
class Work:
    """What a build does on a problem, independent of the fitted constants."""

    desc: object
    batch: int
    heads: int
    n_q: int
    n_k: int
    d: int
    dtype: str
    causal: bool
    traffic: object
    levels: object
    tiles: int  # visited tiles, whole problem
    cta_tiles: list  # tiles per CTA, one head's pattern (grid q_blocks/persistent) or [all] (heads)
    cta_masked: list  # of those, the tiles whose key block the kernel masks (Tiling.masked_steps), CTA by CTA
    repeats: int  # how many times the pattern repeats (B·H; persistent causal sections: whole sections)
    paper_flops: float  # the work TFLOP/s divides by: counting.headline.attention_flops (visible pairs)
    # persistent causal sections (prepare): the section of the B·H % hs heads left over, (tiles, masked) CTA by CTA,
    # run once before the repeats of the pattern (desc.ragged_section_first) or after them; () when there is none
    ragged: tuple = ()
    ragged_first: bool = False

    def segments(self) -> list:
        """[(tiles, masked, repeats)] in launch order: the pattern `repeats` times, with the ragged section."""
        main = (self.cta_tiles, self.cta_masked, self.repeats)
        if not self.ragged:
            return [main]
        extra = (self.ragged[0], self.ragged[1], 1)
        return [extra, main] if self.ragged_first else [main, extra]

    def ctas(self) -> int:
        """Work tiles (CTAs, or a persistent kernel's tiles) the schedule places, whole problem."""
        return sum(len(t) * r for t, _, r in self.segments())

    def total(self, which: str = "tiles", fn=None) -> float:
        """Σ over every CTA of its tiles (or masked tiles), through fn (arrays -> arrays) if given: each segment's
        pattern summed in order, times its repeats."""
        out = 0.0 if fn is not None or which == "masked" else 0
        for tiles, masked, reps in self.segments():
            xs = np.asarray(tiles if which == "tiles" else masked)
            out += sum((fn(xs) if fn is not None else xs).tolist()) * reps
        return out


@dataclass(frozen=True)
class Prediction:
    kernel: str
    build: str
    time_s: float
    tflops: float
    bound: str
    terms: dict  # seconds per term, whole problem (each as if it alone bound the kernel)
    l2_bytes: int
    dram_bytes: int
    requests_bytes: int
    ctas: int
    ctas_per_sm: int
    waves: float
    block_q: int
    block_k: int
    dsmem_bytes: int = 0  # a cluster's reductions through distributed shared memory (issue 18)

    def as_dict(self) -> dict:
        return asdict(self)


def _causal_walk_share(m0: int, steps: int, desc, n_q: int, n_k: int, idle_skip: bool) -> float:
    """The share of a causal Q block's tiles (of `steps` key blocks) whose products run under WG_CAUSAL_SKIP: each
    warpgroup runs max(1, its own key blocks) steps (fa2_wgmma_tma.cu v11; kernels.fa2_wgmma.causal_walk_steps), over
    the warpgroups holding a row (idle_skip already priced the others at zero) or all of them."""
    if steps <= 1:
        return 1.0
    # a warpgroup with no row (None) is idle (priced before) or computes the whole tile
    run = [s if s is not None else steps for s in
           warpgroup_steps(m0, steps, n_q, n_k, desc.block_k, desc.block_q // 64) if s is not None or not idle_skip]
    return sum(run) / (steps * len(run)) if run else 1.0


def _per_block_loop(t: Tiling, desc) -> tuple[list, list]:
    """(tiles, masked tiles) each Q block of `t` costs the build `desc`, block by block: the definition _per_block
    computes with array operations (tests/test_gpu_model.py holds the two equal, element by element)."""
    n_q, n_k, causal = t.n_q, t.n_k, t.causal
    per_block = [len(t.k_blocks(i)) for i in range(t.t_r)]
    masked = [t.masked_steps(i, desc.mask_every_step_if_ragged and not causal) for i in range(t.t_r)]
    if desc.idle_skip and per_block:  # the last Q block's warpgroups past Nq compute nothing (a fraction of its tiles)
        rows = n_q - (t.t_r - 1) * desc.block_q
        share = min(desc.block_q, -(-rows // 64) * 64) / desc.block_q
        per_block[-1] *= share
        masked[-1] *= share
    if desc.causal_walk and causal and desc.block_q > 64:  # fa2_wgmma WG_CAUSAL_SKIP: each warpgroup's own key blocks
        walked = [n * _causal_walk_share(i * desc.block_q, len(t.k_blocks(i)), desc, n_q, n_k, desc.idle_skip)
                  for i, n in enumerate(per_block)]
        # the blocks a warpgroup walks past are the tile's last, wholly past its own rows: masked ones (the tile's need_mask
        # tests the tile's first row), so its masked steps fall by as many
        masked = [max(0.0, m - (n - w)) for m, n, w in zip(masked, per_block, walked)]
        per_block = walked
    if desc.half_diag and per_block:  # fa2_wgmma HALF_DIAG: a warpgroup's first step at half width
        # per_block counts warpgroup-steps / warpgroups (a whole tile is every warpgroup's step). A half step saves half
        # of S, softmax and P V; a warpgroup's only step keeps its P V whole: half of S (a quarter of the products, the
        # tensor-bound d = 128's term) and of the softmax, priced as a quarter step
        nwg = desc.block_q // 64
        for i in range(len(per_block)):
            half = half_first_steps(i * desc.block_q, len(t.k_blocks(i)), n_q, n_k, desc.block_k, nwg, bool(causal),
                                    desc.causal_walk)
            per_block[i] -= sum((0.5 if tw > 1 else 0.25) for h, tw in filter(None, half) if h) / nwg
            masked[i] = max(0.0, masked[i] - 0.5 * sum(1 for h, _ in filter(None, half) if h) / nwg)  # masked at half width
    return per_block, masked


def _per_block(t: Tiling, desc) -> tuple[list, list]:
    """_per_block_loop's lists from array operations: the same numbers, each from the same IEEE operations in the same
    order (int64 counts, float64 where the loop turns them into floats), in O(Tr) NumPy work rather than Tr Python calls
    of Tiling's methods: a causal row of 65,536 Q blocks took seconds there."""
    counts = t.block_counts(desc.mask_every_step_if_ragged and not t.causal)
    if counts is None:  # Nq or Nk near 2**63: Python's integers
        return _per_block_loop(t, desc)
    n_q, n_k, causal, bq, bc = t.n_q, t.n_k, t.causal, desc.block_q, desc.block_k
    steps = counts[0]  # len(t.k_blocks(i))
    per_block, masked = steps.tolist(), counts[1].tolist()
    if desc.idle_skip and per_block:  # as _per_block_loop (one element)
        rows = n_q - (t.t_r - 1) * bq
        share = min(bq, -(-rows // 64) * 64) / bq
        per_block[-1] *= share
        masked[-1] *= share
    nwg = bq // 64
    m0 = np.arange(t.t_r, dtype=np.int64) * bq
    if desc.causal_walk and causal and bq > 64:  # _causal_walk_share for every block: warpgroup_steps column by column
        total = np.zeros(t.t_r, dtype=np.int64)
        count = np.zeros(t.t_r, dtype=np.int64)
        for cg in range(nwg):
            row0 = m0 + 64 * cg
            holds = row0 < n_q  # warpgroup_steps gives None past Nq
            own = np.maximum(1, -(-np.maximum(0, np.minimum(n_k, np.minimum(row0 + 64, n_q) + n_k - n_q)) // bc)) \
                if nwg > 1 else steps
            if desc.idle_skip:  # a warpgroup with no row is left out of the mean
                total += np.where(holds, own, 0)
                count += holds
            else:  # ... or computes the whole tile
                total += np.where(holds, own, steps)
                count += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where((steps <= 1) | (count == 0), 1.0, total / (steps * count))
        n = np.array(per_block, dtype=np.float64)
        walked = n * share
        left = np.array(masked, dtype=np.float64) - (n - walked)
        per_block, masked = walked.tolist(), np.where(left > 0.0, left, 0.0).tolist()
    if desc.half_diag and per_block:  # half_first_steps for every block, column by column
        quarters = np.zeros(t.t_r, dtype=np.float64)  # Σ 0.5 or 0.25 over the half-width warpgroups: exact in any order
        halves = np.zeros(t.t_r, dtype=np.int64)
        walk = desc.causal_walk and causal and nwg > 1
        for cg in range(nwg):
            row0 = m0 + 64 * cg
            holds = row0 < n_q
            vis = np.minimum(n_k, np.minimum(row0 + 64, n_q) + n_k - n_q) if causal else np.full(t.t_r, n_k)
            tw = np.where(steps > 1, np.maximum(1, -(-np.maximum(0, vis) // bc)), steps) if walk else steps
            half = holds & (steps > 0) & (vis - (tw - 1) * bc <= bc // 2)
            quarters += np.where(half, np.where(tw > 1, 0.5, 0.25), 0.0)
            halves += half
        per_block = (np.array(per_block, dtype=np.float64) - quarters / nwg).tolist()
        left = np.array(masked, dtype=np.float64) - 0.5 * halves / nwg
        masked = np.where(left > 0.0, left, 0.0).tolist()
    return per_block, masked


def prepare(desc, batch, heads, n_q, n_k, d, dtype="fp16", causal=False, gpu="h200") -> Work:
    check_grid_rows(desc.kernel, batch, heads)  # a launch the kernel refuses has no time to predict
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    dtype = cf.dtype_name(dtype)
    tr = counts(desc, batch, heads, n_q, n_k, d, dtype, causal)
    lv = levels(desc, g, batch, heads, n_q, n_k, d, dtype, causal, traffic=tr)
    t = Tiling(n_q, n_k, desc.block_q, desc.block_k, bool(causal))
    per_block, masked = _per_block(t, desc)
    ragged = ()
    if desc.grid == "heads":
        pattern, mpattern, repeats = [sum(per_block)], [sum(masked)], batch * heads
    elif desc.grid == "clusters":  # a cluster lasts as long as its busiest CTA, rank 0 (gpumodel/cluster_model.py)
        cs = plan_or_largest(n_k, d, block_q=desc.block_q, block_k=desc.block_k,
                             capacity=_smem_per_cta()).cluster_size
        pattern, repeats = [busiest_rank_tiles(n, cs) for n in per_block], batch * heads
        mpattern = [m * p / n if n else 0 for m, p, n in zip(masked, pattern, per_block)]  # rank 0's share
    else:
        pattern, mpattern, repeats = per_block, masked, batch * heads
    if causal and desc.grid == "persistent" and desc.causal_section_kb:
        # fa2_wgmma_tma.cu tile_coords: sections of hs heads (their K and V, ((Nk + 255) / 256) * d KB per head, in
        # causal_section_kb), each section's tiles longest first; the CTAs take them in that order. A section of the
        # B*H % hs heads left over goes first (stop 24, desc.ragged_section_first), else last
        bh = batch * heads
        hs = max(1, min(bh, desc.causal_section_kb // max(1, (n_k + 255) // 256 * d)))
        # each section holds every Q block's (tiles, masked) `size` times, longest first: one sort, each pair repeated;
        # the bh // hs whole sections are one pattern repeated (O(Tr·hs) memory, not O(B·H·Tr): 2.3 GB at 16.7M tiles)
        order = sorted(zip(per_block, masked), reverse=True)
        tiles, masks = np.array([n for n, _ in order]), np.array([m for _, m in order])
        pattern, mpattern, repeats = np.repeat(tiles, hs).tolist(), np.repeat(masks, hs).tolist(), bh // hs
        if bh % hs:
            ragged = (np.repeat(tiles, bh % hs).tolist(), np.repeat(masks, bh % hs).tolist())
    elif causal and desc.causal_order == "heaviest_first":  # blockIdx.x -> Q block Tr - 1 - blockIdx.x
        pattern, mpattern = pattern[::-1], mpattern[::-1]
    return Work(desc, batch, heads, n_q, n_k, d, dtype, bool(causal), tr, lv, sum(per_block) * batch * heads,
                pattern, mpattern, repeats, attention_flops(batch, heads, n_q, n_k, d, causal),  # 4·d per visible pair
                ragged, bool(desc.ragged_section_first))


def _smem_per_cta() -> int:
    return SMEM_PER_CTA


def round_trips(desc, n: int) -> float:
    """Dependent global round trips of a CTA visiting n tiles (see the module docstring)."""
    return desc.round_trips_per_tile * n + desc.rescale_round_trips * n * (n - 1) / 2


def _schedule(tiles: list, masked: list, repeats: int, slots, cost, head=None, tail=None) -> tuple[float, float]:
    """Makespan (cycles) of CTAs taking cost((n, m)) cycles each (n tiles, m masked tiles), list-scheduled in launch
    order onto `slots`, and the number of waves (CTAs / slots): the pattern (tiles, masked) `repeats` times, after the
    CTAs of `head` and before those of `tail` ((tiles, masked) each, run once: a persistent grid's ragged section).
    The heap's list schedule (tests/test_gpu_model_fast.py keeps it as the oracle, one heap operation per CTA), the
    same float to the bit, in NumPy batches: `cost` takes arrays (it is arithmetic on n and m), and the heap's state
    is kept as a sorted array of the slots' finish times h. The heap gives the next b CTAs the b earliest slots in
    order as long as no finish time it pushed meanwhile is earlier than the next one it pops (min(h[s] + c[s], s < t)
    >= h[t] for t < b; a tie pops the same value); so those b CTAs are placed at once, each finish time h[t] + c[t] the
    same IEEE sum as the heap's. A run of k >= slots equal costs c on slots whose spread is at most c (h[0] + c >=
    h[-1]) adds c to every slot k // slots times, order kept. A causal row of 2M CTAs took seconds in the heap; here a
    batch places ~slots of them."""
    segments = [(np.asarray(t), np.asarray(m), r) for t, m, r in
                ([(*head, 1)] if head else []) + [(tiles, masked, repeats)] + ([(*tail, 1)] if tail else [])
                if len(t) and r]
    n_ctas = sum(len(t) * r for t, _, r in segments)
    waves = n_ctas / slots
    first_t, first_m = segments[0][0][0], segments[0][1][0]
    if all((t == first_t).all() and (m == first_m).all() for t, m, _ in segments):  # equal CTAs: whole waves
        return float(cdiv(n_ctas, slots) * cost((first_t, first_m))), waves
    costs = [np.asarray(cost((t, m)), dtype=np.float64) for t, m, _ in segments]
    if n_ctas <= slots:
        return float(max(c.max() for c in costs)), waves
    s = int(slots)
    h = np.zeros(s)
    for c_all, (_, _, reps) in zip(costs, segments):
        if len(c_all) < s and reps > 1:  # a short pattern: m repeats as one, so that a batch may fill every slot (the
            m = min(reps, -(-s // len(c_all)))  # same CTAs in the same order: the same schedule)
            whole, reps = divmod(reps, m)
            h = _place_pattern(h, np.tile(c_all, m), whole)
        h = _place_pattern(h, c_all, reps)
    return float(h[-1]), waves


def _place_pattern(h: np.ndarray, c_all: np.ndarray, repeats: int) -> np.ndarray:
    """_place up to EXACT_CTAS CTAs, _place_many past it."""
    return _place(h, c_all, repeats) if len(c_all) * repeats <= EXACT_CTAS else _place_many(h, c_all, repeats)


# CTAs the list schedule places (in _place's batches) per segment; past it, _place_many closes the pattern's repeats
EXACT_CTAS = 1 << 19
MAX_SHAPES = 2048  # the latest repeats' shapes _place_many keeps to find a recurrence (2048 x 528 slots: 8.7 MB)


def _place_many(h: np.ndarray, c_all: np.ndarray, repeats: int) -> np.ndarray:
    """_place's result for a pattern repeated more often than EXACT_CTAS CTAs allow, in well under a second at any
    count (issue 46 item 5: B·H = 65,535 over 65,536 Q blocks is 4.3G CTAs). The list schedule is translation-
    equivariant and the mean of the slots' finish times grows by exactly Σc / slots per pattern; the spread of the
    finish times never exceeds the longest CTA (each CTA starts on the earliest slot). So after r exact repeats:
      - where the slots' shape (finish times less the earliest) recurs after p repeats, within a few ulps of the finish
        times, every later period adds the same shift: the remaining whole periods are one addition, the rest placed
        exactly (the walk's result to float rounding: an error of at most the tolerance per period skipped);
      - else (no recurrence by EXACT_CTAS CTAs) the shape is kept and shifted by the mean's growth: the makespan is
        then within the longest CTA's cycles of the walk's (both lie between the mean and the mean plus that spread),
        relative to it at most ~2 slots / CTAs placed exactly (measured: tests/test_gpu_model_fast.py).
    A recurrence of any period is found by looking each shape up rounded (fa2_wgmma causal d = 64 N = 48k recurs every
    33 repeats at 132 slots, sdpa_cudnn causal d = 128 N = 16k every 132); one that straddles a rounding edge is missed
    and the repeats are shifted as without one."""
    n, s = len(c_all), len(h)
    grid = 1e-6 * float(c_all.max())  # shapes are looked up rounded to this grid, then compared to the tolerance
    seen = {}  # rounded shape -> (repeat, its shape, its earliest finish time)
    run_end = _run_ends(c_all)
    budget = max(1, EXACT_CTAS // n)
    done = 0
    while done < repeats:
        h = _place_runs(h, c_all, run_end, 1)
        done += 1
        shape = h - h[0]
        key = np.round(shape / grid).tobytes() if grid > 0 else b""
        tol = 16 * np.finfo(np.float64).eps * max(float(h[-1]), 1.0)
        if key in seen and float(np.max(np.abs(seen[key][1] - shape))) <= tol:  # the shape of p repeats ago: a period
            then, _, first = seen[key]
            p = done - then
            skip = (repeats - done) // p
            h = h + skip * (float(h[0]) - first)
            return _place_runs(h, c_all, run_end, repeats - done - skip * p)
        if done >= budget:
            return h + (repeats - done) * (float(c_all.sum()) / s)
        seen[key] = (done, shape, float(h[0]))
        if len(seen) > MAX_SHAPES:  # the oldest goes: memory O(MAX_SHAPES x slots), periods up to MAX_SHAPES repeats
            del seen[next(iter(seen))]
    return h


def _place(h: np.ndarray, c_all: np.ndarray, repeats: int) -> np.ndarray:
    """_schedule's batches: CTAs of costs c_all, `repeats` times over, onto the slots whose sorted finish times are h."""
    return _place_runs(h, c_all, _run_ends(c_all), repeats)


def _run_ends(c_all: np.ndarray) -> np.ndarray:
    """For each CTA i, the end of its run of equal costs."""
    change = np.flatnonzero(np.diff(c_all)) + 1
    return np.append(change, len(c_all))[np.searchsorted(change, np.arange(len(c_all)), side="right")]


def _place_runs(h: np.ndarray, c_all: np.ndarray, run_end: np.ndarray, repeats: int) -> np.ndarray:
    """_place with c_all's run ends (_run_ends) given."""
    n, s = len(c_all), len(h)
    for _ in range(repeats):
        i = 0
        while i < n:
            k = int(run_end[i]) - i
            if k >= s and h[0] + c_all[i] >= h[-1]:  # balanced slots, a run of equal costs: whole rounds
                c = c_all[i]
                for _ in range(k // s):
                    h += c
                i += k // s * s
                continue
            b = min(s, n - i)
            pushed = h[:b] + c_all[i:i + b]
            late = np.minimum.accumulate(pushed)[:-1] < h[1:b]  # a pushed time before the next pop
            first = int(late.argmax()) if b > 1 else 0
            b = first + 1 if b > 1 and late[first] else b
            h = np.concatenate((pushed[:b], h[b:]))
            h.sort()
            i += b
    return h


def in_flight_per_sm(desc, d: int, item: int) -> float:
    """Bytes a SM keeps in flight in a spilled two-phase kernel (v_once_tc, f in HBM): resident warps x the
    bytes each has outstanding, its share of the K/V ring tile being loaded (Bc x d, cp.async, while the
    other slot is used) and its rows of one f block (its A fragments of f_k: the eager rescale loads KN
    16-byte fragments per lane before it scales them; phase 2 prefetches f_{j+1} while block j multiplies)."""
    per_warp = desc.block_k * d * item / desc.warps + desc.block_q / desc.warps * desc.block_k * item
    return desc.ctas_per_sm * desc.warps * per_warp


def io_cycles(desc, d: int, item: int, g) -> float:
    """Cycles a work tile spends moving its Q tile in and its O tile out (Br x d each way) at its SM's share of
    the L2's rate (L2_BANDWIDTH / SMs): what a CTA's start and end expose beyond the fitted L, growing with d.
    Tensor-core kernels only: the teaching tier's CTAs (FFMA, scalar loads by every thread) keep the fitted L alone
    (with io there too, the one shared L refits to 2990 cycles, R_wgmma to 3571, and the ranking falls to 94.7%)."""
    if desc.path == "ffma":
        return 0.0
    per_sm = L2_BANDWIDTH / g.value("sms", "measured") / g.value("clock_hz")
    return 2 * desc.block_q * d * item / per_sm


def ring_wait(desc, step: float, lv, params: dict) -> float:
    """Cycles per tile a CTA waits on key blocks its K/V ring could not load far enough ahead (module docstring): its
    producer issues block j + S when block j frees its slot, S - 1 steps (step: the CTA's cycles per tile, its share of
    the SM) before the consumers reach it; S loads in flight, so a step takes (lat_dram + step) / S at the least
    (Little's law); the DRAM's share of the bytes (DRAM / L2) waits, the rest hits the L2 in time; the SM loses the
    waiting CTA's share. 0 where the descriptor states no ring (kv_stages 0: cuDNN's is
    closed) or with lat_dram 0 (stage 1 of the fit, as for the spilled kernels' Little's-law cap)."""
    stages, lat = desc.kv_stages, params.get("lat_dram", 0.0)
    if not stages or not lat:
        return 0.0
    share = min(1.0, lv.dram_bytes / max(1, lv.l2_bytes))
    return share * max(0.0, lat - (stages - 1) * step) / stages / desc.ctas_per_sm


def tile_terms(work: Work, params: dict) -> dict:
    """SM cycles per tile of each compute term."""
    desc = work.desc
    tiles = max(work.tiles, 1)
    fl = work.traffic.flops
    exps = fl["exp"] / tiles
    other = fl["other"] / tiles
    spill_smem = 0.0
    if desc.variant == "v_once" and desc.f == "sram":  # eager rescales earlier f blocks in smem
        f_elems = counts(desc.__class__(**dict(desc.as_dict(), f="hbm")), work.batch, work.heads, work.n_q,
                         work.n_k, work.d, work.dtype, work.causal).reads.get("f", 0)
        spill_smem = 2 * f_elems * cf.DTYPES[work.dtype] / tiles
    smem = (desc.smem_bytes_per_tile + spill_smem) / SMEM_BYTES_PER_CLK
    mufu = exps / MUFU_PER_CLK
    if desc.path == "ffma":
        alu = (params["k_alu_ffma"] * other + desc.exp_alu * exps) / FP32_LANES
        lds = desc.lds_per_tile / params["eta_lds"]
        ffma = desc.ffma_per_tile / ISSUE_PER_CLK
        occ = min(1.0, desc.ctas_per_sm * desc.warps / params["W_sat"])
        return {"tensor": ffma / occ, "smem": lds / occ, "softmax": (mufu + alu) / occ}
    rate = params["R_wgmma"] if desc.path == "wgmma" else params["R_mma_sync"]
    # S = Q K^T over d, O += P V over d (+ the row-sum columns, where l comes from the tensor cores)
    tensor = 2.0 * desc.block_q * desc.block_k * (2 * work.d + desc.row_sum_cols + desc.pv_pad_cols
                                                  + desc.qk_pad_cols) / rate
    if desc.row_sum_cols:  # the softmax's row-sum add per score (FA2 Alg. 1 line 9) is the product's now
        other = max(0.0, other - desc.block_q * desc.block_k)
    if desc.rescale_skip:  # FA2 Alg. 1 line 10's O rescale (Br x d multiplies) only when a row max moves past the bound:
        # every row's first step still moves it (m from -inf), so one tile per Q block keeps it; the rare later move is left out
        firsts = sum(int(np.count_nonzero(np.asarray(t) > 0)) * r for t, _, r in work.segments())
        other = max(0.0, other - desc.block_q * work.d * max(0.0, 1.0 - firsts / tiles))
    alu = (params["k_alu"] * other + desc.exp_alu * exps) / FP32_LANES
    if desc.issue_per_tile:  # measured (gpumodel/issue.py): every non-MMA instruction, MUFU and ldmatrix included
        return {"tensor": tensor, "smem": smem, "softmax": desc.issue_per_tile / ISSUE_PER_CLK}
    return {"tensor": tensor, "smem": smem, "softmax": mufu + alu}


def mask_cycles(desc) -> float:
    """FP32-pipe cycles a masked tile's softmax adds (MASK_OPS_PER_SCORE per score over Br x Bc); the teaching tier's
    fitted k_alu_ffma already carries its visibility test, so 0 there."""
    return 0.0 if desc.path == "ffma" else MASK_OPS_PER_SCORE * desc.block_q * desc.block_k / FP32_LANES


def combine(desc, terms: dict, params: dict) -> float:
    tc, sm, sfx = terms["tensor"], terms["smem"], terms["softmax"]
    if desc.structure == "teaching":
        return sm + tc + sfx
    if desc.structure == "warp_specialized":
        # a third consumer warpgroup's softmax runs while the other two's products do: its own exposed share
        sigma = params.get("sigma_ws3", params["sigma_ws"]) if desc.consumer_warpgroups >= 3 else params["sigma_ws"]
        return max(tc, sm, sfx) + sigma * min(tc, sfx)
    # the softmax hides under the products of the other CTAs on the SM, each hiding the same share of what
    # the others left; a lone CTA has none to hide under
    sigma = params["sigma_fa2"] ** (desc.ctas_per_sm - 1)
    return max(tc, sm) + sigma * sfx


def predict_work(work: Work, params: dict | None = None, gpu="h200") -> Prediction:
    params = params or load_params()
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    desc = work.desc
    clock = g.value("clock_hz")
    sms = g.value("sms", "measured")
    slots = sms * desc.ctas_per_sm
    terms = tile_terms(work, params)
    t_tile = combine(desc, terms, params)
    lv = work.levels
    # a dependent round trip to the spilled f row waits on the L2 or, when the line was evicted, on DRAM:
    # L_gmem + (share of the re-touched bytes that miss) x L_gmem_dram
    miss = min(1.0, max(0.0, (lv.dram_bytes - lv.compulsory_bytes) / max(1, lv.l2_bytes - lv.compulsory_bytes)))
    io = io_cycles(desc, work.d, cf.DTYPES[work.dtype], g)
    per_tile, fixed = desc.ctas_per_sm * t_tile, params["L_cycles"] + io
    once = 0.0  # cycles a CTA pays once, not per work tile
    if desc.grid == "persistent" and desc.next_tile_prefetch and params.get("L_persistent_steps") is not None:
        # the next tile's Q and K/V load under this tile's end: a work tile pays its pipeline's fill and drain,
        # one step of products and softmax in series at the CTA's share of the SM (as per_tile); its first loads (L) once
        fixed = params["L_persistent_steps"] * desc.ctas_per_sm * (terms["tensor"] + terms["softmax"])
        once = max(0.0, params["L_cycles"] + io - fixed)
    lat = params["L_gmem"] + miss * params.get("L_gmem_dram", 0.0)
    cluster_terms = {}
    if desc.grid == "clusters":  # issue 18: clusters co-scheduled in a GPC; DSMEM reductions and barriers per Q block
        slots = q_block_slots(desc, g)  # clusters resident at once
        q_blocks = len(work.cta_tiles) * work.repeats
        cluster_terms = cluster_costs(desc, work.d, work.traffic.dsmem_total_bytes / max(1, q_blocks))
        fixed += sum(cluster_terms.values())
        exposed = params.get("cluster_exposed_cycles")
        if exposed is None:
            exposed = exposed_cycles_per_tile()
        per_tile += exposed  # one consumer warpgroup: the latency it leaves exposed per tile (fitted)
        cluster_terms["exposed"] = exposed * sum(work.cta_tiles) / max(1, len(work.cta_tiles))
    per_tile += ring_wait(desc, per_tile, lv, params)
    # a masked tile (causal diagonal, Nk tail) runs the mask before its softmax: what that adds to the tile's cycles
    mask = mask_cycles(desc)
    per_mask = desc.ctas_per_sm * (combine(desc, dict(terms, softmax=terms["softmax"] + mask), params) - t_tile)
    tiles = np.asarray(work.cta_tiles)
    ragged = {"head" if work.ragged_first else "tail": work.ragged} if work.ragged else {}
    cycles, waves = _schedule(tiles, work.cta_masked, work.repeats, slots,
                              lambda nm: per_tile * nm[0] + per_mask * nm[1] + fixed + lat * round_trips(desc, nm[0]),
                              **ragged)
    cycles += once
    t_compute = cycles / clock
    # Σ over the pattern's CTAs in order, as Python sums them (the same floats, each from the same operations)
    t_latency = work.total("tiles", lambda xs: lat * round_trips(desc, xs)) / slots / clock
    dram_bw = coverage.hbm_rate(g)  # measured (H200), or the datasheet's at the H200's attainable share
    t_dram = lv.dram_bytes / dram_bw
    t_l2 = lv.l2_bytes / L2_BANDWIDTH
    # each compute term as if it alone ran: whole-problem SM cycles spread over every SM
    cta_slots = slots * (desc.cluster_size if desc.grid == "clusters" else 1)
    scale = work.tiles * desc.ctas_per_sm / cta_slots / clock
    masked_share = (work.total("masked") / max(1e-9, work.total("tiles")) if work.ragged else
                    sum(work.cta_masked) / max(1e-9, sum(work.cta_tiles)))  # one pattern: its own share
    named = {"tensor": terms["tensor"] * scale, "softmax": (terms["softmax"] + mask * masked_share) * scale,
             "smem": terms["smem"] * scale, "latency": t_latency, "l2": t_l2, "dram": t_dram}
    for k, cyc in cluster_terms.items():  # per cluster, whole problem spread over the resident clusters
        named[k] = cyc * len(work.cta_tiles) * work.repeats / slots / clock
    if desc.launches > 1:  # separate passes: the spilled S/P traffic is not hidden under the products
        spill = max(0, lv.dram_bytes - lv.compulsory_bytes) / dram_bw
        t = max(t_compute, t_l2) + spill
    elif desc.f == "hbm":  # two phases per CTA: the f traffic partly exposed (σ_spill)
        if desc.path != "ffma":  # Little's law: the resident warps keep too few bytes in flight (teaching: L_gmem)
            flight = sms * in_flight_per_sm(desc, work.d, cf.DTYPES[work.dtype])
            t_dram = max(t_dram, lv.dram_bytes * params["lat_dram"] / clock / flight)
            named.update(dram=t_dram)
        t_mem = max(t_l2, t_dram)
        t = max(t_compute, t_mem) + params["sigma_spill"] * min(t_compute, t_mem)
    else:
        t = max(t_compute, t_l2, t_dram)
    overhead = desc.launch_overhead_s * desc.launches
    named.update(compute=t_compute, overhead=overhead)
    total = t + overhead
    bound = limiting_term(named, tuple(cluster_terms))
    if desc.path == "ffma" and bound == "tensor":
        bound = "ffma"
    return Prediction(kernel=desc.kernel, build=desc.build, time_s=total,
                      tflops=work.paper_flops / total / 1e12, bound=bound, terms=named,
                      l2_bytes=lv.l2_bytes, dram_bytes=lv.dram_bytes, requests_bytes=lv.requests_bytes,
                      ctas=grid_ctas(desc, work.batch, work.heads, work.n_q), ctas_per_sm=desc.ctas_per_sm,
                      waves=waves, block_q=desc.block_q, block_k=desc.block_k, dsmem_bytes=lv.dsmem_bytes)


COMPUTE_TERMS = ("tensor", "softmax", "smem", "latency")  # what the SMs' cycles (t_compute) are made of
MEMORY_TERMS = ("l2", "dram")


def limiting_term(named: dict, cluster_terms: tuple = ()) -> str:
    """The bound: the term that sets the time. Where the SMs' cycles (the compute time: the products, softmax, smem and
    latency terms as they combine per tile, with waves and fixed costs) are at least the L2's and DRAM's times, the
    largest of those compute terms; else the larger memory level. Not simply the largest term: at d = 128 the L2's time
    (2.6 ms at N = 16k) is over the products' alone (2.3 ms) and under the compute time they and the softmax make
    (3.3 ms), so a faster L2 would not shorten the kernel and `l2` would be the wrong verdict (stop 26)."""
    if named["compute"] >= max(named[k] for k in MEMORY_TERMS):
        return max(COMPUTE_TERMS + cluster_terms, key=lambda k: named[k])
    return max(MEMORY_TERMS, key=lambda k: named[k])


def as_timed(pred: Prediction, timer: str | None = None) -> float:
    """The prediction as a timer measures it. Per-call CUDA events (the older bench files, no `timer` field)
    include the host's launch work after the kernel's: GPU time + host time. triton.testing.do_bench
    (bench/harness.py, `timer` recorded) times calls queued behind one another (and behind its L2 flush), so
    the host enqueues the next call while the GPU runs the last: the larger of the two. EVENTS_LESS_GAP (an events
    timing less its own run's measured host gap, gpumodel/measured.py host_gaps): the GPU time alone."""
    host = pred.terms.get("overhead", 0.0)
    if timer == EVENTS_LESS_GAP:
        return pred.time_s - host
    if timer and "do_bench" in timer:
        return max(pred.time_s - host, host)
    return pred.time_s


DO_BENCH = "triton.testing.do_bench"  # the timer bench/harness.time_fn uses and records
# EVENTS_LESS_GAP (imported above from gpumodel/measured.py, where the gap is measured): an older bench file's per-call
# CUDA-event median less the host gap that run measured (its median less its back-to-back time, per kernel and head
# dim: measured.host_gaps): what the GPU alone took


def as_benchmarked(pred: Prediction, timer: str | None = DO_BENCH) -> dict:
    """The prediction as a benchmark reports it (`fa-traffic predict` and `report` print this): time_s as the timer
    measures it (as_timed), its GPU and host parts, TFLOP/s at that time, and the bound, `host` where the launch work
    outlasts the kernel."""
    host = pred.terms.get("overhead", 0.0)
    timed = as_timed(pred, timer)
    return dict(time_s=timed, gpu_time_s=pred.time_s - host, host_s=host, tflops=pred.tflops * pred.time_s / timed,
                bound="host" if host > pred.time_s - host else pred.bound)


def predict(kernel: str, batch: int, heads: int, n_q: int, n_k: int | None, d: int, dtype="fp16",
            causal=False, gpu="h200", params=None, **options) -> Prediction:
    n_k = n_q if n_k is None else n_k
    desc = describe(kernel, d, cf.dtype_name(dtype), causal, n_q=n_q, n_k=n_k, **options)
    return predict_work(prepare(desc, batch, heads, n_q, n_k, d, dtype, causal, gpu), params, gpu)
