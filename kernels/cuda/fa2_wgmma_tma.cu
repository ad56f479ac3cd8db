// fa2_wgmma_tma.cu -- FlashAttention-2 forward on Hopper: wgmma + TMA + warp specialisation (sm_90a).
//
// fa2_wgmma.cu with its two measured limits removed (lab/NOTES-tc.md, fa2_wgmma v1):
//   * every thread there issued cp.async for K and V and met the others at a __syncthreads each step,
//     so the two warpgroups ran in lockstep and the tensor pipe idled at every step boundary (ncu: 48-51%
//     tensor-pipe activity against cuDNN's 76%);
//   * the fast builds used one warpgroup per CTA (2-3 CTAs/SM), which re-reads K and V from L2 for every
//     64 query rows (7.9 GB of L2 traffic at N = 4096, d = 128 against 2.9 GB with 128 rows).
// Here one producer warp moves tiles with TMA (cp.async.bulk.tensor: one instruction per 64-column panel,
// completion counted in bytes on an mbarrier, written through the async proxy that wgmma reads), and the
// NWG consumer warpgroups never meet at a CTA-wide barrier: each waits on "full" mbarriers for its
// operands and signals "empty" mbarriers when its products have read them. With two consumer warpgroups
// (PINGPONG=1) named barriers hand the tensor cores back and forth: warpgroup 0 issues its products, then
// warpgroup 1 issues its own while warpgroup 0 does its softmax (FA3 paper, "ping-pong scheduling").
// setmaxnreg moves registers from the producer (which needs few) to the consumers (O + S + P).
//
// FlashAttention-2 paper, Algorithm 1 (one Q block of Br = 64*NWG rows; consumer warpgroup c owns rows
// 64c..64c+63):
//   FA2 Alg. 1 line 4   load Qi                     -> producer: TMA, full_q
//   FA2 Alg. 1 line 5   O = 0, l = 0, m = -inf      -> consumer registers
//   FA2 Alg. 1 line 6   for j = Tc_visible-1 .. 0   -> step t = T-1-j (masked blocks first, hidden blocks skipped)
//   FA2 Alg. 1 line 7     load Kj, Vj               -> producer: TMA into ring slot t % STAGES, after empty_[kv][slot]
//   FA2 Alg. 1 line 8     S = Qi Kj^T               -> consumer: wgmma SS, then releases the K slot
//   FA2 Alg. 1 line 9     online softmax            -> consumer registers (overlaps P_{j+1} V_{j+1} on the tensor cores)
//   FA2 Alg. 1 line 10    O = diag(.) O + P Vj      -> consumer: wgmma RS (P from registers), then releases the V slot
//   FA2 Alg. 1 lines 12-15 O / l, lse, write         -> consumer, staged through its own Q rows
// Masking, the exact rescale skip, layouts and descriptors are those of fa2_wgmma.cu.
//
// Arguments: three CUtensorMaps (Q, K, V as 4-D tensors (d, N, H, B) with the inputs' own strides, so
// (B, N, H, d) views transposed to (B, H, N, d) need no copy; 128-byte swizzle, box 64 x rows x 1 x 1)
// made by kernels/tma.py (O_TMA builds: a fourth, o's, box 64 x 64), then o, lse, Nq, Nk, scale_log2, scale, causal,
// H, group. grid = (Tr, B*H);
// PERSISTENT builds add B*H and the tile counter, grid = (persistent CTAs, 1, 1).
// Grouped-query attention: K and V have H / group heads; query head h reads kv head h / group.
// Knobs: HEAD_DIM (64|96|128|256), BLOCK_N, NWG (1-3 consumer warpgroups), STAGES, PINGPONG, MIN_BLOCKS,
// IS_BF16, PV_N (d = 96 only: 128 pads the P V product to two full 64-column panels, 96 stops at d);
// speed knobs (v3): RESCALE_THRESHOLD, EXP2_POLY, EXP2_POLY_DEG (wgmma_fa2.cuh), PERSISTENT, QK_AHEAD (here);
// (v5) ROW_SUM_MMA (d = 64: the row sum l of FA2 Alg. 1 line 9 from the P V product over a panel of ones);
// (v6) O_TILE (persistent: O staged apart from Q, the next Q loaded early), CAUSAL_SECTION_KB (causal tile order);
// probe (stop 29): CTA_TRACE (cta_trace.cuh: when each CTA ran; one-tile builds; lab/cta_trace.py);
// (v9) DESC_STEP (wgmma_fa2.cuh); (v10) WG_SKIP (idle warpgroups of a ragged last Q block); (v11) WG_CAUSAL_SKIP
// (a warpgroup walks the causal key blocks past its own last row); (v12) TURN_CARRY (the ping-pong turn runs on across
// tiles).
// d = 96 is a 64-column panel plus a half panel: smem tiles are padded to 128 columns (TMA zero-fills
// columns 96..127, which count in the transaction bytes), S = Q K^T takes 6 k-steps, not 8.
//
// Version log (details in lab/NOTES-tc.md):
//   v1  first version. Correct first time (154/154 checks on odd shapes, tails, Nq != Nk, causal; memcheck
//       and racecheck clean). Sweep (fp16, N = 2k/8k/16k, results/wgmma_sweep_v4/v5): d=128 Bc=176
//       NWG=2: 490-538 / 598-636 / 603-651 TFLOP/s non-causal (cuDNN 574-649), Bc=128 531/588/583;
//       d=64 Bc=128 NWG=2: 356-378 / 433-447 / 441-445. Ping-pong: d=128 within +-3% of PINGPONG=0
//       (no clear gain), d=64 0-10% slower at N >= 8k (PINGPONG=0 is the d=64 default). STAGES=3: no gain.
//       ncu (d=128, N=4096): 0.860 ms, tensor pipe 76.2% active, L2 3.12 GB -- cuDNN 0.843 ms, 76.0%.
//       Full grid (results/tc_bench_wgmma_tma.md, fp16, N=2k..16k): d=128 1.54-2.25x SDPA flash,
//       0.88-1.06x cuDNN; d=64 1.13-1.55x flash, 0.79-0.97x cuDNN. Below N=1k at d=64 it trails flash
//       (0.90-0.98x): one 3-warpgroup CTA per SM and its prologue latency per Q block.
//   v2  layouts (issue 14): 4-D tensor maps with the inputs' strides ((B, N, H, d) views read in place),
//       grouped-query K/V (kv head h / group), d = 96 (tiles padded to two panels) and d = 256 (Br = 128,
//       Bc = 80, producer at 24 registers). NVRTC: no spills in any build. GPU check and timing:
//       lab/gpu_check_layouts.sh, H200 (results/fwd_wgmma_layouts/v2/): strided and GQA at 0.95-1.03x the
//       contiguous time at N = 4k/8k; d = 128 N = 8k 594 TFLOP/s, d = 256 N = 8k 655; memcheck clean on
//       Nq = 300, Nk = 1100 shapes; racecheck of these shapes did not finish in its time cap (not run).
//   v3  speed knobs (issue 14 item 1), each a compile-time define, off in CONFIGS until measured (A/B in one
//       run: lab/gpu_check_speed.sh -> lab/ab_wgmma_speed.py; configs: kernels/fa2_wgmma.py SPEED_KNOBS).
//       Second H200 visit (results/sessions/visit2/, 72 cells: fp16/bf16, d = 64/128/256, N = 512-16k, causal
//       and not; ratios are time / time of the build without the knob):
//       v3a RESCALE_THRESHOLD=8 (FA4): m moves only when a block's max exceeds it by > 2^8 in P; O/l rescale
//           and its multiply skipped otherwise (wgmma_fa2.cuh). Exact (lse uses the m used). Measured: 0.92-1.07;
//           geomean d = 256 0.94-0.98, d = 64 causal 0.97-0.985 (non-causal 1.00), d = 128 0.98-1.02 (cells
//           0.94-1.09, noise). In CONFIGS at d = 64 and 256.
//       v3b EXP2_POLY=2 (FA4): 2 of 8 exponentials per thread-row on the FMA pipe (exp2_poly.cuh: floor by a
//           rounded-down add + degree-4 (fp16) / 3 (bf16) minimax, rel. error 2.9e-6 / 8.6e-5 vs P's rounding
//           4.9e-4 / 3.9e-3; SASS d = 64: MUFU.EX2 264 -> 200). Measured: 1.00-1.18, slower in every cell
//           (geomean 1.03-1.11; with v3a 1.05-1.17 at d = 64): negative. On the H200 the softmax is not
//           MUFU-bound here; each polynomial exponential costs ~9 FMA/ALU issue slots for the one MUFU op.
//       v3c PERSISTENT=1|2 (FA3's persistent kernel): grid = SMs x CTAs/SM (kernels/fa2_wgmma.py; GRID
//           overrides it), each CTA loops over (Q block, batch*head) tiles: 1 a static stride, 2 the next tile
//           from an atomic counter the launcher zeroes per call. Causal tiles longest first (the Q blocks
//           that see the most key blocks), non-causal a head's Q blocks together (its K/V shared in L2). The
//           producer publishes each tile through two smem slots (tile_full/tile_empty mbarriers), runs the
//           K/V ring on from tile to tile and sends the next tile's first K block before waiting for the
//           consumers to hand the Q tile back (empty_q, after the epilogue staged O through it). Visit 2:
//           correct at d = 64/96/128 (1, 3, all CTAs; causal and not); d = 256 hung in setmaxnreg.inc: at
//           PRODUCER_REGS=32 the consumers asked for 240 registers where the producer had freed enough for 236
//           (the budget formula counted 65536, not the 168 x 384 the CTA holds). Fixed (REGS_AT_LAUNCH, a
//           static_assert); d = 256 keeps 24 (20-36 B of producer-only spill). Speed: not yet (last visit).
//       v3d QK_AHEAD=1 (FA3 Sec. 3.2, intra-warpgroup overlap with two S tiles; ptxas serialised it, see v7):
//           S_{t+1} = Q K^T issued before the softmax of step t, right after P_{t-1} V_{t-1}, so both products
//           run under it; PINGPONG=0.
//           Two S tiles fit beside O at d = 64 Bc = 128 (the shipped Bc), d = 96/128 Bc = 96, d = 256
//           Bc = 64 (Bc = 128 at d = 128 spills 240 B at 240 registers). NVRTC: no spills. Measured: not yet.
//       v3e combination dynamic+ahead (d = 256: persistent + two S tiles spill, not built).
//       Last visit (results/fwd_wgmma_speed_knobs/final/: GPU tests 87 passed; every persistent and QK_AHEAD build
//       correct on 1, 3 and all CTAs at every d; memcheck of the shipped builds at Nk = 2900, 0 errors; A/B
//       fp16/bf16, d = 64/128/256, N = 512/1k/2k/8k, causal and not, time / base, geomean N <= 2k | N > 2k):
//         v3c PERSISTENT=2: d = 64 1.00 | 1.06, d = 128 1.04 | 1.00, d = 256 1.08 | 1.02 (worst cells 1.11-1.22):
//             negative here. Not profiled; likely: the scheduler adds a counter reset and a tile hand-off, and this
//             kernel's one-tile-per-CTA grid already fills the SMs at B*N = 16k (>= 8 waves); FA3's gain at
//             N = 1k came against a kernel without its producer/consumer prologue overlap.
//         v3d QK_AHEAD=1 (d = 64): 1.23 | 1.35; with PERSISTENT 1.26 | 1.45: negative. Not profiled;
//             likely: two S tiles cost the ping-pong schedule they replace (PINGPONG=0), and at d = 64 the second
//             warpgroup's softmax already hides under the first's products. (v7: that build's wgmma pipeline was
//             serialised by ptxas; pipelined, v7d, it is 1.17 | 1.28, still negative.)
//       All off in CONFIGS (the A/B's decision rule: geomean <= 0.99 with no cell above 1.03). Against cuDNN
//       the shipped builds are >= 1.0x in 13 of 48 cells of that A/B (24 of 72 on visit 2): d = 256 and
//       d = 128 at N >= 8k; d = 64 (0.70-0.98x) and N <= 2k remain behind.
//   v4  size-based builds (kernels/fa2_wgmma.py SIZE_CANDIDATES, SIZE_RULES): NWG=1 (one consumer warpgroup,
//       no ping-pong partner) with 2-3 CTAs per SM, so one CTA's prologue (Q and the first K through TMA) and
//       epilogue overlap the other CTAs' products on short key loops. A/B (results/fwd_wgmma_size_rules/, fp16 and
//       bf16, N = 512-4096, time / the default's): d = 64 Bc = 96 x 3 CTAs 0.76-0.89 at N <= 1024, Bc = 128 x 2
//       CTAs 0.92-0.99 at N = 2048 -> SIZE_RULES[64]; at N = 4096 both lose (up to 1.13). Persistent (2 CTAs,
//       dynamic tiles) 0.84-1.32: negative. d = 128 Bc = 96 x 2 CTAs 1.27-1.67: negative (the default's two
//       ping-ponging warpgroups are what d = 128 needs). Against cuDNN at d = 64 the best build is still 0.88-0.94x.
//       d = 128 instead: the default with Bc = 128 at Nk <= 512 (SIZE_RULES[128]; three runs, results/
//       fwd_wgmma_size_rules/d128/: 0.96-0.98 non-causal, 0.87-0.89 causal; memcheck and racecheck at scale clean).
//       racecheck at the sanitizer's at-scale shapes (Nq = 300, Nk = 2900: each ring slot refilled 8-18 times;
//       GQA views) of every shipped build (CONFIGS at d = 64/96/128/256) and of the 3-CTA build: 0 hazards
//       (results/sanitize_fwd_wgmma_at_scale/, results/fwd_wgmma_size_rules/); memcheck of every size candidate: 0 errors.
//       Issue 14's grid with the rules (results/fwd_wgmma_vs_cudnn_grid/v4/: fp16/bf16, d = 64/128/256, N = 512-16k, causal and
//       not, B*N = 16k): forward()'s default >= cuDNN in 27 of 72 cells (d = 64 2/24, 0.83-1.07x; d = 128 8/24,
//       0.74-1.11x; d = 256 17/24, 0.89-1.23x); 1.28-2.70x SDPA flash everywhere. Two runs of one build differ by
//       up to +-7% per cell there (default = CONFIGS at d = 128, 256), so single-cell calls under ~5% are noise.
//       FA3's published numbers: d = 256 non-causal 16k 714-754 TFLOP/s (FA3 750), d = 128 non-causal 16k 602-634
//       (650), d = 128 causal 4k 507-541 (690). ncu (results/ncu_fwd_wgmma_vs_cudnn/moonshot_shapes_run1/, clocks not locked): at d = 128 causal
//       4k this kernel and cuDNN take the same 0.506 ms, SM throughput 66% / 63%, issue slots 38% / 37%, SM clock
//       1.62 GHz under load (the 1.98 GHz boost is not held: 1.49 GHz at d = 256). What stands between it and
//       FA3's figure there is the tensor pipe's idle third (causal tiles of uneven length over 15.5 waves of
//       2048 one-tile CTAs; cuDNN runs 132 persistent CTAs and is no faster) and the clock, not bytes (DRAM 11%).
//       At d = 64, N = 512 cuDNN is 13% faster with fewer instructions: 2.19 against 1.92 IPC at 54% / 47% issue
//       utilisation for the same work, i.e. this kernel's per-tile softmax and bookkeeping cost more issue slots.
//   v5  d = 64's softmax (issue 14). At d = 64 a warpgroup-step's 8192 exponentials take the MUFU (16/clk/SM) 512
//       clocks, as long as its two products take the tensor cores (2.1 MFLOP at 4096 FLOP/clk/SM), so both pipes
//       must stay busy and every other softmax instruction competes for the issue slots they need.
//       v5a ROW_SUM_MMA=1 (wgmma_fa2.cuh): l from the tensor core. P V runs over [V | ones] (m64n72k16; a constant
//           panel of ones after the V slots, the descriptor's LBO pointing at it from each slot), so O's column 64
//           is sum_j P~_ij in every lane of a quad: the fp32 add per score goes (SASS: 282 -> 18 FADD), l is
//           rescaled with O. fp16 only: with bf16's P rounding lse moved by 2.3-3.4e-3 (> the 2e-3 promised;
//           results/fwd_wgmma_row_sum_mma/rowsum/tests_first_run_bf16_lse.log), so bf16 builds drop the knob. H200 A/B
//           (results/fwd_wgmma_row_sum_mma/rowsum_ab/, fp16, N = 512-16k, causal and not, time / the build without it):
//           CONFIGS[64] 0.940-1.003, geomean 0.979 (11 of 12 cells faster); the one-warpgroup size builds 0.97-1.12,
//           geomean 1.009-1.018 (negative: with no second warpgroup the longer P V sits on the critical path).
//           GPU tests (hypothesis, Nk = 4100, GQA/strided, the rescale ramps) pass; memcheck 0 errors, racecheck 0
//           hazards at scale. Checked again in two more runs (results/fwd_wgmma_d64_tiles/tiles_ab/rep1, rep2): the build
//           without it 1.03-1.05x the time fp16 non-causal, 0.99-1.04 causal; bf16 (the same build twice) 0.98-1.02.
//       v5b NWG=3 (Br = 192, FA3's d = 64 tile; kernels/fa2_wgmma.py TILE_CANDIDATES "br192", "br192-rs"): three
//           consumer warpgroups, one CTA of 512 threads per SM, consumers at 160 registers (producer 24; Bc = 128:
//           176/192 spill). One more softmax in flight beside the tensor cores. Two runs (tiles64, fp16/bf16, time /
//           CONFIGS[64]'s): non-causal 0.93-0.96 at N <= 1k, 0.89-0.93 at 2k-4k, 0.88-0.89 at 8k-16k; causal
//           1.08-1.10 at N <= 1k (fewer, longer causal tiles), 0.92-0.96 from 2k. GPU tests, memcheck, racecheck
//           clean. SIZE_RULES[64] now: 3-CTA small-tma3 to Nk 1024 (causal 2048), br192-rs beyond; in those runs
//           that is 0.88-1.14x cuDNN, >= 1.0 in 10 of 24 cells (the grid14 default: 2 of 24), 1.30-1.74x SDPA flash.
//       v5c EXP2_POLY=1 beside ROW_SUM_MMA ("rs-poly1", "br192-rs-poly1"): 1.00-1.08x the time: negative (one
//           polynomial exponential per 8 still costs more issue slots than the MUFU op it saves).
//       v5d Br = 192 with Bc = 96 / 64 (results/fwd_wgmma_d64_tiles/bc192/): no better than Bc = 128 anywhere: negative.
//       Grid with these defaults (results/fwd_wgmma_vs_cudnn_grid/v5_d64/): >= cuDNN in 32 of 72 cells (d = 64 10, d = 128 5,
//       d = 256 17), 20 of them by >= 4% (an entry timed first in a cell runs ~1.6% faster on average: NOTES-tc.md).
//   v6  persistent builds for short rows and causal grids (issue 14; results/fwd_wgmma_persistent/, --order abba). ncu had
//       shown the dynamic scheduler's causal order (the longest Q block of every head first) moving 1.8-2.7x the DRAM
//       bytes at d = 128, N <= 1k: ~132 heads' K/V in flight, evicted before their next Q blocks.
//       v6a CAUSAL_SECTION_KB (tile_coords): longest first within sections of heads whose K and V fit in 16 MB (FA3's
//           L2 swizzle). d = 128 Bc = 128 causal, time / the one-tile-per-CTA build: 0.83-1.01 with sections, 0.99-1.07
//           without (bc128-dyn vs bc128-dyn-lpt): most of the causal gain.
//       v6b O_TILE=1: O staged in its own smem tile, so the Q tile goes back (empty_q) as soon as the tile's last
//           S = Q K^T has read it and the next tile's Q loads under this tile's last P V and epilogue. A further 4-9%
//           at N <= 1k (bc128-dyn-oq vs bc128-dyn). Needs a second Q-sized tile: d = 128 Bc <= 160, d = 64 any; not
//           d = 256 (224 KB) nor Bc = 176. wgmma.cuh gained N = 160 (bc160-dyn-oq: level with Bc = 128 from 2k).
//       v6c the tile hand-off: every consumer thread arrives on TILE_EMPTY (was: lane 0 after __syncwarp). racecheck
//           reported the slot's store/load pair as a race wherever a slot was reused (fwd_wgmma_persistent/persist_short/
//           racecheck); lab/racecheck_mbarrier_probe.py shows racecheck flags the lane-0 form and a real race, and
//           accepts per-thread arrivals (persist2/probe.txt). Under the PTX memory model both forms are ordered; the
//           per-thread form needs no argument about __syncwarp's cumulativity and costs one arrival per thread a tile.
//       Shipped (kernels/fa2_wgmma.py SIZE_RULES, time / the v5 rule's build, two runs): d = 128 bc128-dyn-oq at
//       non-causal Nk <= 2048 (0.89-0.99) and causal Nk <= 4096 (0.83-0.97); d = 64 small-tma3-dyn-oq causal <= 2048
//       (0.96-1.00), br192-rs-dyn-oq non-causal at 512 and from 2048 (0.93-1.01) and causal from 4096 (0.89-0.94);
//       d = 256 causal 1024-8192 CONFIGS + PERSISTENT=2 (0.89-0.96; 16k 0.99-1.03, not taken). GPU tests, memcheck 0 errors,
//       racecheck 0 hazards on 3 CTAs at scale. The producer of the 3-CTA persistent build spills 80-92 B (producer
//       only, PRODUCER_SPILL_BYTES).
//       v6d O_TMA=1 (with O_TILE): each consumer warpgroup stores its 64 rows of O from the staging tile with one TMA
//           per panel (tma_store, a bulk group; the leader waits for the previous store to have read the tile before
//           the next epilogue writes it), where every thread issued 16 shared loads, global stores and row checks per
//           tile (ncu at N = 512: cuDNN runs the same work with 8-25% fewer instructions; fwd_wgmma_persistent/ncu6). d = 128
//           (bc128-dyn-oqt, fwd_wgmma_persistent/oqt): 0.94-0.99x bc128-dyn-oq's time in every cell at N <= 4k -> SIZE_RULES[128]
//           (Nk <= 4096, causal or not). d = 64 Br = 192: 0.95-1.04, not taken. GPU tests, memcheck clean.
//       v6e the tile counter zeroes itself: one fetch per tile run, so a launch makes exactly Tr*B*H of them, and
//           atomicInc wrapping at Tr*B*H - 1 leaves 0 after the last (the value each fetch returns is unchanged); the
//           launcher keeps one counter per device and stream instead of a torch.zeros (a fill kernel in the stream)
//           before every call (under graph capture it still makes a fresh one). Measured (fwd_wgmma_persistent/v6e, abba,
//           fp16/bf16, 72 cells): the pre-v6e launch (a torch.zeros before the call) / v6e: 0.99-1.02 at N = 512,
//           geomean 1.000 over the grid (the fill kernel is ~2 us). GPU tests, memcheck and racecheck (3 CTAs,
//           forward()'s four persistent builds, O_TMA's first racecheck): 0 errors, 0 hazards. Its producer spills
//           16 B at d = 64 Br = 192 (was 0).
//       v6f no kernel change, forward()'s rules (kernels/fa2_wgmma.py SIZE_RULES; fwd_wgmma_persistent/cand7, confirm7, rescale8k):
//           RESCALE_THRESHOLD=8 at d = 128 now wins: persistent bc128-dyn-oqt 0.94-0.99 in all 16 cells at N <= 4k
//           (cand7; confirm7 0.94-1.02, geomean 0.976), CONFIGS 0.91-1.005 at 8k-16k (two runs, geomean ~0.96). v3a
//           had it level one tile per CTA. Not taken: Bc = 160 + O_TMA (0.99-1.16), 3 CTAs + O_TMA at d = 64
//           (0.95-1.13). Taken at d = 64: Br = 192 + O_TMA for non-causal N <= 2k (0.97-0.99, two runs). The grid
//           (grid7, two abba runs): >= cuDNN in 56 and 50 of 72 cells (mean of the two: 52). Then d = 256 Bc = 64 persistent (bc64-dyn: 8 whole key
//           blocks at N = 512 where Bc = 80 runs 7; finer causal diagonal blocks): causal 512-2k 0.95-0.97 of the
//           default's time (fwd_wgmma_persistent/bc64, bc64b), non-causal 512 0.97-0.98; level with Bc = 80 at causal 4k
//           (bc64c). Bc = 64 one tile per CTA 0.96-1.11, and d = 64's 3-CTA build at Bc = 64 1.00-1.17 (causal 512
//           0.97): not taken.
//   v7  the wgmma pipeline as ptxas builds it (issue 14; lab/NOTES-tc.md v7). kernels/loader.py reads ptxas' "Potential
//       Performance Loss: wgmma.mma_async instructions are serialized" lines (C7510-C7518) into wgmma_serialized; the
//       compile tests assert it empty for every build they compile (CONFIGS, the speed, size and tile candidates, the
//       backward's sweep, every kernel's compile configs). A serialised kernel is correct; only a timing shows it.
//       v7a TILE_FUSE (not kept; fwd_wgmma_persistent/fuse7): the next tile's S_0 issued in one turn with this tile's last P V, the
//           epilogue under it. 1.07-1.49x forward()'s default per cell, measured serialised (C7515: S_0 issued in
//           one branch, read after the join). Two Q tiles, S_0 waited before the back edge, its own S tile, the tile
//           body in two copies: each still C7515, or spilled 328-2804 B (C7511/C7512). Not a test of the idea.
//       v7c-v7d QK_AHEAD (v3d): every QK_AHEAD build was serialised the same way (S_{t+1} issued in one branch of a
//           join; P packed into the registers P_{t-1} V_{t-1} read while S_{t+1} ran), so v3d measured a serialised
//           build. Now each product is issued on a straight-line path (T = 1 apart, the last step its own inlined
//           copy) and P alternates between two tiles like S, so P_t is packed under S_{t+1} into registers no product
//           in flight reads: pipelined and spill-free at d = 64/96/128 (d = 256 spills 172 B, knob dropped there; at
//           d = 96/128 Bc = 128 compiles spill-free but ptxas serialises it, C7512, so the knob keeps Bc = 96).
//           Measured (abba, fp16/bf16, d = 64/96/128, 72 cells, time / CONFIGS[d]: at d = 64 the same build without
//           it, at d = 96/128 also Bc = 96 against 128/176 and no ping-pong): v7c (S_{t+1} waited for before the pack)
//           ahead 1.05-1.49, dynamic+ahead 0.99-1.54 (fwd_wgmma_persistent/ahead7c); v7d ahead 1.05-1.48, dynamic+ahead
//           0.99-1.53 (fwd_wgmma_persistent/ahead7d; the 0.99 is d = 64 causal N = 512 fp16 both times). Like for like with
//           v3d (d = 64, geomean N <= 2k | N > 2k): v3d 1.23 | 1.35, v7d 1.17 | 1.28. Negative on a pipelined build:
//           at d = 64 ncu has it issue ~5% fewer instructions in 46% more cycles each (7.8 against 5.4 warp cycles
//           per issued instruction, issue slots 28% against 41%; fwd_wgmma_persistent/ahead7dncu); likely two products queued
//           per warpgroup on the tensor pipe the two warpgroups share leave each waiting longer for its own S (no
//           stall breakdown was profiled). GPU tests 20 passed (each visit); memcheck and racecheck of ahead@64,
//           dynamic+ahead@64 on 3 CTAs and ahead@128: 0 errors, 0 hazards (ahead7csan).
//   v8  no kernel change (issue 14 and 11; results/sessions/fresh11, lab/NOTES-tc.md v8).
//       v8a d = 96 short rows: d = 128's short-N form on CONFIGS[96] (PERSISTENT=2, O_TILE, O_TMA, RESCALE_THRESHOLD=8;
//           SIZE_CANDIDATES[96] dyn-oqt-r): 0.837-0.969 of CONFIGS[96]'s time at N = 512-4096 (geomean 0.894; without
//           the threshold 0.857-0.997), fwd_wgmma_d96_rule/candidates. forward() runs it up to Nk = 4096 (SIZE_RULES[96]): d = 96 is then
//           >= cuDNN in 26 of 28 cells at N <= 4k (fwd_wgmma_d96_rule/candidates) and 21 of 24 over N = 512-16k (d96rule; causal N = 512
//           0.99 twice, bf16 8k 0.975 on CONFIGS). GPU tests 6 passed, memcheck 0 errors and racecheck 0 hazards on 3
//           CTAs (one d = 96 shape, non-causal), forward()'s
//           dispatch and layouts tests 43 passed.
//       v8b STAGES=1, one K and one V slot (measurement builds ring1, d = 128 and 256; cuDNN's d = 256 kernel has
//           smem for only that): 1.14-1.68x CONFIGS' time (fresh11, three runs; d = 256 non-causal 1.48-1.68). This
//           kernel's step holds K_j and V_{j+1} at once (S_j issued with P_{j+1} V_{j+1}), so each load waits for
//           the product that frees its slot. cuDNN's one-slot d = 256 kernel runs at 0.94-1.28x the two-slot default.
//   v9  DESC_STEP (wgmma_fa2.cuh): each operand's wgmma descriptor built once per product and stepped by the k-slice's
//       offset, not rebuilt (and, shift, or) for every wgmma. ncu per opcode at N = 512 (ncu_fwd_wgmma_vs_cudnn/opcodes_n512, the
//       builds without it): at d = 128 this kernel executes 46.3M warp instructions to cuDNN's 43.2M for the same
//       HGMMA, MUFU, FMNMX and F2FP counts; it issues 7.4M fewer FP32 instructions (FFMA where cuDNN has FMUL + FADD)
//       but 4.5M more uniform-datapath descriptor math (ULOP3, USHF, ULEA: ~0 in cuDNN) and 5.3M more mbarrier wait
//       loop (SYNCS, BRA, YIELD). A/B of forward()'s builds with and without it (fwd_wgmma_desc_step/tests_memcheck_ab, desc9ab; two grid runs,
//       abba, 72 cells each): geomean per d 0.98-0.998 at N <= 4k, 0.98-1.00 above; cells 0.924-1.048, faster in 55
//       and 57 of 72 (the 1.048,
//       d = 128 fp16 non-causal 4k, was 0.991 in the second run). GPU tests of every SIZE_RULES build and CONFIGS with
//       it (hypothesis shapes, long key loops, 3 persistent CTAs): 24 passed; memcheck of two persistent builds on 3
//       CTAs: 0 errors. forward() runs it (kernels/fa2_wgmma.py DEFAULT_KNOBS); explicit configs keep DESC_STEP=0.
//       forward()'s dispatch, head-dim and layouts GPU tests with it: 43 passed (results/fwd_wgmma_idle_warpgroup_skip/desc9final).
//   v10 WG_SKIP: a consumer warpgroup whose 64 rows all lie past Nq (the last Q block of a ragged Nq; Br = 192 at N = 512
//       leaves a third of its last block's rows past Nq, 11% of the products, and at N = 1000 two of its three
//       warpgroups) issues no product and no softmax. It waits on each full barrier and arrives on each empty one as
//       the working path does, takes its ping-pong turns and hands Q back, then leaves the tile before O is zeroed.
//       Three forms, A/B against forward()'s builds without it (results/fwd_wgmma_idle_warpgroup_skip/, abba, fp16/bf16, d = 64-256,
//       N = 512-8192 with ragged 1000 and 3000, time / without; forms 1-2 at d = 64/96/128):
//         form 1, the tile body in an if/else on the idle test: 0.95-1.14 (geomean 1.04-1.07), slower even where no
//           warpgroup is ever idle (the d = 64 one-warpgroup builds, whose idle test is always false: 1.07-1.10);
//         form 2, an early `continue` before O is zeroed: 0.95-1.14 (geomean 1.04-1.05; the d = 64 one-warpgroup builds
//           now compile to the same cubin, 0.96-1.00).
//           SASS (cuobjdump on the H200): the Br = 192 build grew from 3352 to 4512 instructions, its descriptor and
//           ring arithmetic moved off the uniform datapath (UIADD3 101 -> 26, IMAD 281 -> 473): ptxas took the idle
//           test, computed from the thread index, for a divergent branch, and nothing after its join stayed uniform;
//         form 3 (this one): the idle test and the warp index through __shfl_sync from lane 0 (CUTLASS's
//           canonical_warp_idx_sync), so ptxas sees both warp-uniform: the builds differ from the ones without it only
//           by the idle walk (+112-248 instructions of branches, barrier waits and address math). Measured: d = 64
//           0.903-1.008 (geomean 0.957 at N <= 4k, 0.970 above; non-causal N <= 1k 0.90-0.93, where Br = 192 idles
//           warpgroups; causal 3000-8192, where 1.5-5.6% of the warpgroup-steps idle, 0.95-0.99); d = 96/128/256
//           0.94-1.03, geomean 0.993-0.996. A second run and the two together: where a warpgroup idles (d = 64's
//           Br = 192 at every N; Br = 128 only at N = 3000) d = 64 0.961, d = 96 0.986, d = 128 0.989, d = 256 0.968;
//           elsewhere (nothing to skip) 0.992-0.996, level. GPU tests (idle warpgroups at
//           Nq = 398/462/270, 3 persistent CTAs, Nk = 4100, GQA views, hypothesis shapes): 33 passed; memcheck (every
//           build, 3 CTAs, Nq = 300) 0 errors; racecheck (d = 64 Br = 192 persistent, d = 128 ping-pong persistent and
//           one tile per CTA, d = 256) 0 hazards. forward() runs it at every d (kernels/fa2_wgmma.py DEFAULT_KNOBS).
//           The warp index goes through the shuffle only where a warpgroup can idle (NWG > 1): the one-warpgroup builds
//           compile to the cubin without WG_SKIP (after review: with the shuffle they had differed by one SHFL).
//           forward()'s dispatch, head-dim and layouts GPU tests with it at every d: 43 passed; racecheck of d = 256's
//           two persistent builds on 2 CTAs at the at-scale shapes: 0 hazards (results/fwd_wgmma_idle_warpgroup_skip/wgskipfinal).
//   v11 WG_CAUSAL_SKIP: causal, the key loop runs j = T-1 down to 0 and T is set by the Q block's last row; warpgroup 0
//       of Br = 128 with Bc = 64 (or of Br = 192) sees no key of block T-1 in any of its rows. It walks such blocks as
//       WG_SKIP walks a tile (full waits, empty arrivals, one ping-pong turn each) and runs Tw = T - sk steps from ring
//       position kv_it + sk (kernels/fa2_wgmma.py causal_walk_steps: d = 256 Bc = 64 at N = 512 walks 4 of 40
//       warpgroup-steps, 10%; 3% at 2k; Br = Bc = 128 at Nq = Nk none). Same registers, no spill, one SHFL per tile.
//       Two A/B runs (results/fwd_wgmma_causal_warpgroup_skip/cskipab, cskipfinal; abba, fp16/bf16, d = 64-256, N = 512-8192), time / without:
//       d = 256 causal N = 512 0.975-0.981 and 1k 0.972-1.005 in both runs (geomean of the two 0.976-0.988), 2k-8k
//       0.99-1.00; elsewhere level (two-run geomean per cell 0.967-1.029, the same spread as cells whose cubin is
//       unchanged: the one-warpgroup d = 64 builds 1.005-1.019). Exact, so forward() runs it (DEFAULT_KNOBS). GPU tests
//       (hypothesis causal shapes, Nk - Nq off the block grid, Nk = 4100, Nq > Nk, 3 persistent CTAs, strided GQA): 39
//       passed; memcheck and racecheck on 2 CTAs of four persistent builds: 0 errors, 0 hazards; forward()'s dispatch
//       tests with it: 43 passed. Not taken: Br = 192 at d = 64 causal N <= 1k, where the walk is 13% of the steps
//       (0.88-0.94 of cuDNN against the one-warpgroup 3-CTA build's 0.94-0.99), and d = 128 at Bc = 64 (1.15-1.29x the
//       default's time). Also not taken: WAIT_HINT (tma_pipe.cuh: try_wait's suspend-time hint, CUTLASS's 10^7 ns), two
//       runs level (geomean per d 0.979-0.999, cells 0.93-1.05; waithint/, waithint2/).
//   v12 TURN_CARRY: with ping-pong, warpgroup 1 took its tile's last turn and handed nothing back; the next tile began with
//       its arrive on barrier 1, after its last P V and its epilogue, so warpgroup 0's first S of every tile waited for
//       warpgroup 1's epilogue with the tensor cores idle. Now the turn runs on: warpgroup 1 arrives once before the
//       tile loop and hands the turn back as it issues its last P V; warpgroup 0 takes the last arrival before it exits
//       (FA3's mma_init arrives once per kernel). The protocol's count per tile is unchanged (T+1 turns each), so one
//       arrival is outstanding between tiles. It acts where the next Q is in before the epilogue ends (O_TILE):
//       two A/B runs (results/fwd_wgmma_turn_carry/carryab, carryfinal), time / without, N = 512-4096: d = 96 geomean 0.982
//       (causal 512-1k 0.961-0.976), d = 128 0.983 (N = 512 0.968-0.990); d = 256 (no O_TILE) level. GPU tests of every
//       ping-pong build (hypothesis shapes, warpgroup 1 idle in the last Q block, causal Q blocks with no key and no
//       turn, 1 and 3 persistent CTAs, strided GQA): 24 passed; synccheck / memcheck / racecheck on 2 CTAs: 0 / 0 / 0.
//       With it off the builds compile to the cubins before it. forward() runs it on its O_TILE ping-pong builds.
//   v13 O_DIRECT: d = 256 has no smem for O_TILE (Q 64 KB + two K/V stages leave 35 KB at Bc = 64), so its persistent
//       builds staged O through the Q tile and the next tile's Q load waited for the epilogue (the cells furthest behind
//       cuDNN after v12: causal N = 512 0.85-0.92, non-causal 512 0.96-0.98; results/fwd_wgmma_vs_cudnn_grid/v12). O_DIRECT writes O
//       from the accumulator registers straight to global memory (each quad of lanes a 16-byte run of a row: the L2
//       merges the halves of each sector) and hands Q back after the tile's last S, as O_TILE does, so the next Q loads
//       under the last P V and the epilogue. O_DIRECT=1 (4-byte stores, half a sector each): 1.03-1.13x the v12 build's
//       time at N <= 4k (odirect, odirect2). O_DIRECT=2 transposes each 4 x 4 block of words in the quad first (two
//       butterfly rounds of shuffles), so each lane stores 16 bytes: two runs over d = 256's grid (odirect2, odirect3;
//       abba, fp16/bf16, persistent at every N), time / v12's build: geomean 0.971 and 0.958 at N <= 4k, 0.972 above,
//       N = 512 0.926-0.949, cells 0.926-1.015. With TURN_CARRY added 0.985 (odirect2): not taken with it. GPU tests
//       (both forms at every d, hypothesis shapes, idle warpgroups, causal Nq > Nk, 1 and 3 persistent CTAs, strided
//       GQA): 33 passed; memcheck / racecheck / synccheck on 2 CTAs: 0 / 0 / 0. forward() runs O_DIRECT=2 at d = 256.
//       In place of O_TILE at d = 64 (results/fwd_wgmma_o_direct_store_d64: d64c13, d64od), two runs: causal 0.962-0.971 at N <= 4k,
//       0.986 above, non-causal level; forward()'s d = 64 causal builds run it (42 GPU tests passed, memcheck /
//       racecheck 0 / 0). In place of O_TILE + O_TMA at d = 96/128 (odirect3, odirectfinal): causal 0.981-0.994 with
//       the new build timed second, and a third run at d = 96 with the order reversed level (d96od); kept off.
//   stop 21 (results/sessions/stop21): STAGES=4 in d = 64's short-row builds (three runs: causal N = 512 0.957-0.986,
//       non-causal N <= 2k 0.975-1.008; SIZE_RULES[64]); a third slot at d = 96/128 with O from registers, level; two
//       CTAs per SM at d = 128, 1.05-1.28x. MAX_TREE (wgmma_fa2.cuh): the row max as a tree, after ncu put our warps at
//       2.2 cycles per instruction of fixed-latency waits against cuDNN's 1.0 (stall21). Exact, same registers; GPU
//       tests 42 passed. Two runs (tree21, tree21b), time / forward()'s build: d = 128 0.986 and 0.997 against the
//       control's 1.004 and 1.012, d = 64/96/256 level; cells 0.920-1.103. Not taken: the waits are spread over the
//       SASS (stall21's per-instruction samples of the wait stall: MUFU 19%, HGMMA 13%, the max's FMNMX 8%, FADD 7%).
//   stop 22 (results/sessions/stop22): MAX_TREE taken at d = 128 after a third run (knobs22: 0.987 against the control's
//       0.999; each of the three runs 1.2-1.8% under its control, within the A/B's added-entry bias found later in the
//       stop: exact and register-neutral, so kept). Also in knobs22 at d = 128 N <= 2k: no ping-pong
//       (PINGPONG=0, both warpgroups issue freely) 1.002, level; the static persistent scheduler (PERSISTENT=1) 1.086
//       (causal 1.165: its tiles are not longest-first): not taken.
//   stop 23 (results/sessions/stop23; no kernel change): the SM clock is set by the board's power cap (1545-1980 MHz; bf16
//       3-5% faster than fp16 for the same cycles), so the harness now records each timing's clock; in cycles d = 128
//       causal N = 512 runs 3% more than cuDNN at the same clock. CAUSAL_SECTION_KB 4 / 8 / 32 MB against 16: level or
//       worse over three runs, not taken. forward()'s d = 64 causal rule runs the 3-CTA Bc = 64 four-slot build to
//       Nk = 896 (was 512): 768 and 896 0.947-0.989 of the Bc = 96 build's time in two runs each, 1k level.
//   v14 HALF_DIAG (wgmma_fa2.cuh): on the causal diagonal of Br = Bc = 128, warpgroup 0's rows see only the first 64
//       keys of their first (last-visible) key block; it ran the whole 64 x 128 S, softmax and P V there. Now a
//       warpgroup whose rows all end in the first half of its first block runs S = Q K^T as m64n64 (issue_qk<Bc/2>),
//       the softmax over those columns and that block's P V over 4 of 8 k-slices; the masked half is P = 0 in every
//       row, so the result is the same. Each branch waits for its own S product, so no wgmma is in flight where the
//       paths join. The tile's last P V (one-block tiles) runs whole over P's zeroed half: a half-width branch there
//       made ptxas serialise d = 128's wgmma pipeline ("insufficient register resources"). The first GPU run failed
//       its tests (stale P; half22_bug): that branch had gone into the QK_AHEAD loop. ptxas keeps the pipeline in the
//       persistent d = 96/128/256 builds and serialises it at d = 64 and in CONFIGS[96]: built only there
//       (kernels/fa2_wgmma.py half_diag_ok). GPU tests (knob registry: hypothesis shapes, the diagonal, Nq > Nk, tails
//       of half a block and more, long key loops, 3 persistent CTAs, strided GQA) 9 passed; memcheck / racecheck of the
//       d = 128/256 builds on 2 CTAs at scale 0 / 0. Not shown on the GPU: as the A/B's added entry (half22ab,
//       half22ab2) d = 128 causal 0.974 and 0.973 (controls 0.995, 0.992), but the cells where it cannot act
//       (non-causal, d = 256 Bc = 64) as far under their controls; with roles reversed (isolate22) without / with
//       1.001 causal. The GPU model, told of it, predicts 0.966 (N = 512) to 0.990 (4k). forward() runs it nowhere.
//   stop 24 (results/sessions/stop24):
//     Q_SLOTS=2: two Q tiles in the persistent Q_EARLY builds, so the producer loads the next tile's Q as soon as it
//       reaches that tile, not after this tile's last S (stall21: 3.7% of the warp-state samples at d = 128 causal
//       N = 512 sat on the consumers' wait for Q at a tile's start). Same registers, no spill; GPU tests of the six
//       builds with room for it (d = 64's Br = 192 and 3-CTA Bc = 96, d = 96 / 128 at Nk <= 4096) 18 passed, memcheck
//       0 errors (q24), racecheck 0 hazards, synccheck 0 errors (q24race). A/B against the control, four runs (q24ab,
//       q24c): causal 0.980-0.992 (all of it fp16: 0.976-0.981, bf16 0.998-1.012), non-causal 1.012-1.022. Not taken:
//       an fp16-only gain in code that differs only in its converts has no mechanism, and non-causal loses. The producer
//       reaches the next tile only a step or two before this one ends (its K/V ring holds it), so the Q goes out only
//       about one step earlier.
//     CAUSAL_SECTION_KB 256 KB (one head's K/V at d = 128 N = 512) and 1 MB against 16 MB (sect24, two runs): geomean
//       per d 1.011-1.032, d = 256 1.062-1.065, as the GPU model predicted before the run (d = 128 N = 512 1.040,
//       measured 0.991-1.016; d = 256 N = 2048 1.111, measured 1.08-1.13). Not taken.
//     SECTION_RAGGED_FIRST (tile_coords): the section of the B*H % hs heads left over runs first. Last, its longest
//       tiles started when the others were nearly done and ran on alone: d = 128 causal N = 10240 (16 heads in sections of
//       3) ran the persistent build at 1.02-1.10x the one-tile build's time, 0.92-0.96x with it (rf24ab). Exact; GPU tests
//       27 passed, memcheck 0 errors (rf24); forward() runs it in every persistent build (kernels/fa2_wgmma.py
//       SECTION_KNOBS). With HALF_DIAG, ptxas serialises the wgmma pipeline of d = 96 / 128 / 256: HALF_DIAG's builds
//       leave it out.

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef NWG
#define NWG 2
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef PINGPONG
#define PINGPONG 1
#endif
#ifndef IS_BF16
#define IS_BF16 0
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
#ifndef PERSISTENT
#define PERSISTENT 0  // 1: persistent CTAs, static stride over the tiles; 2: dynamic, from an atomic counter
#endif
static_assert(PERSISTENT >= 0 && PERSISTENT <= 2, "PERSISTENT: 0, 1 (static) or 2 (atomic counter)");
#ifndef O_TILE
#define O_TILE 0  // 1 (persistent): O staged in its own smem tile, the Q tile handed back after the last S = Q K^T
#endif
#ifndef O_TMA
#define O_TMA 0  // 1 (O_TILE): each consumer warpgroup stores its 64 rows of O from the staging tile with TMA
#endif
#ifndef O_DIRECT
#define O_DIRECT 0  // 1, 2 (persistent, no O_TILE): O from registers to global memory (2: 16-byte stores after a quad
                    // transpose), the Q tile handed back after the last S
#endif
#define Q_EARLY (O_TILE || O_DIRECT)  // the Q tile goes back after the tile's last S, not after the epilogue
#ifndef CAUSAL_SECTION_KB
#define CAUSAL_SECTION_KB 16384  // persistent causal order: longest first within sections of heads whose K/V fit
#endif
#ifndef SECTION_RAGGED_FIRST
#define SECTION_RAGGED_FIRST 0  // 1 (persistent causal): the section of the heads left over runs first, not last
#endif
#ifndef WG_SKIP
#define WG_SKIP 0  // 1: a consumer warpgroup whose 64 rows all lie past Nq keeps the barriers' count and computes nothing
#endif
#ifndef TURN_CARRY
#define TURN_CARRY 0  // 1 (ping-pong): the turn runs on across tiles; warpgroup 1 hands it back as it issues its last P V
#endif
#ifndef HALF_DIAG
#define HALF_DIAG 0  // 1: a warpgroup whose rows end in the first half of its first key block runs that block at half width
#endif
#ifndef WG_CAUSAL_SKIP
#define WG_CAUSAL_SKIP 0  // 1 (causal): a warpgroup walks the tile's first key blocks that lie wholly past its own last row
#endif
#ifndef Q_SLOTS
#define Q_SLOTS 1  // 2 (persistent, Q_EARLY): two Q tiles; the next tile's Q loads while this tile runs (stop 24)
#endif
#ifndef QK_AHEAD
#define QK_AHEAD 0  // 1: S_{t+1} issued before the softmax of step t (two S tiles in registers; no ping-pong)
#endif
// setmaxnreg: the CTA starts with REGS_AT_LAUNCH per thread (__launch_bounds__: the CTA's share of the
// 65536 registers over NTHREADS, in multiples of 8: 168 for NWG=2, one CTA per SM); the producer gives
// REGS_AT_LAUNCH - PRODUCER_REGS back and the NWG consumer warpgroups may take only that, in multiples of 8,
// at most 240: 232 at PRODUCER_REGS=40, 240 at 24. setmaxnreg.inc waits until the registers are free, so a
// consumer budget over what the producer frees is a hang, not an error (v3: PRODUCER_REGS=32 with the old
// formula, which counted 65536 instead of what the CTA holds, asked for 240 of a possible 236).
#define REGS_AT_LAUNCH ((65536 / MIN_BLOCKS / NTHREADS) / 8 * 8)
#define CONSUMER_REGS_FIT ((REGS_AT_LAUNCH + (REGS_AT_LAUNCH - PRODUCER_REGS) / NWG) / 8 * 8)
#ifndef CONSUMER_REGS
#define CONSUMER_REGS (CONSUMER_REGS_FIT < 240 ? CONSUMER_REGS_FIT : 240)
#endif

#define D HEAD_DIM
#define PANELS ((D + 63) / 64)  // 64-column (128-byte) swizzle panels of a tile row
#define DP (64 * PANELS)        // a tile row in smem, padded to whole panels
#ifndef PV_N
#define PV_N DP
#endif
#ifndef ROW_SUM_MMA
#define ROW_SUM_MMA 0
#endif
#if ROW_SUM_MMA
#define O_N (D + 8)             // wgmma_fa2.cuh: O's column d is l (the P V product over a panel of ones)
#else
#define O_N PV_N                // wgmma_fa2.cuh: the O accumulator is 64 x PV_N
#endif
#define BLOCK_M (64 * NWG)
#define NTHREADS (128 * (NWG + 1))  // warpgroup 0: producer; 1..NWG: consumers
static_assert(NWG * (CONSUMER_REGS - REGS_AT_LAUNCH) <= REGS_AT_LAUNCH - PRODUCER_REGS,
              "setmaxnreg: the consumers may take only what the producer gives back (else setmaxnreg.inc hangs)");
#define CH (D / 8)
#define NT (BLOCK_N / 8)
#define KD (D / 16)
#define KN (BLOCK_N / 16)

static_assert(D == 64 || D == 96 || D == 128 || D == 256, "HEAD_DIM must be 64, 96, 128 or 256");
static_assert(PV_N == D || PV_N == DP, "PV_N: d, or d padded to whole panels");
// d = 64: the ones panel is V's second 64-column panel (the descriptor's LBO points at it from every slot);
// at d = 128 the third panel would have to sit at the V panel stride after every slot, and d = 256 + 8 is past
// wgmma's N = 256
static_assert(!ROW_SUM_MMA || D == 64, "ROW_SUM_MMA: d = 64 only");
static_assert(NWG >= 1 && NWG <= 3, "1 to 3 consumer warpgroups (3: Br = 192, FA3's d = 64 tile)");
static_assert(!PINGPONG || NWG == 2, "ping-pong needs two consumer warpgroups");
static_assert(!(QK_AHEAD && PINGPONG), "QK_AHEAD issues the products at two points per step: no ping-pong turns");
static_assert(!O_TMA || O_TILE, "O_TMA stores from O_TILE's staging tile");
static_assert(!(WG_SKIP && QK_AHEAD), "WG_SKIP's idle walk is tested on the one-S-tile loop only");
static_assert(!TURN_CARRY || PINGPONG, "TURN_CARRY carries the ping-pong turn from tile to tile");
static_assert(!(WG_CAUSAL_SKIP && QK_AHEAD), "WG_CAUSAL_SKIP's walk is written for the one-S-tile loop only");
static_assert(!(HALF_DIAG && QK_AHEAD), "HALF_DIAG is written for the one-S-tile loop only");
static_assert(!O_TILE || (PERSISTENT && !QK_AHEAD), "O_TILE: a persistent build without QK_AHEAD (its Q goes back early)");
static_assert(!O_DIRECT || (PERSISTENT && !QK_AHEAD && !O_TILE), "O_DIRECT: a persistent build without QK_AHEAD or O_TILE");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256, "BLOCK_N: a multiple of 16, at most 256 (TMA box)");
static_assert(STAGES >= 1, "STAGES: the K/V ring needs a slot (the producer loads block t into slot t % STAGES)");
static_assert(Q_SLOTS == 1 || (Q_SLOTS == 2 && PERSISTENT && (O_TILE || O_DIRECT)),
              "Q_SLOTS=2: a persistent build whose epilogue does not stage O through the Q tile (O_TILE or O_DIRECT)");

#define TILE_Q_BYTES (BLOCK_M * DP * 2)
#define TILE_KV_BYTES (BLOCK_N * DP * 2)  // also the TMA transaction bytes: zero-filled columns count

#include "tc_common.cuh"  // pack2, ex2, quad reductions, NEG_INF
#include "wgmma.cuh"
#include "wgmma_fa2.cuh"  // layout, descriptors, the two products, softmax, epilogue


#include "tma_pipe.cuh"  // TensorMap, mbarriers, TMA panel loads, named barriers
#include "cta_trace.cuh"  // CTA_TRACE=1: when each CTA ran (lab/cta_trace.py; thread 128 is consumer 0's first)
static_assert(!CTA_TRACE || (!PERSISTENT && !QK_AHEAD), "CTA_TRACE: one tile per CTA, the one-S-tile loop");

// ping-pong: warpgroup c waits for its turn on barrier 1+c and hands the turn to the other on 2-c
__device__ __forceinline__ void turn_begin(int cg) {
#if PINGPONG
    named_sync(1 + cg, 256);
#endif
}
__device__ __forceinline__ void turn_end(int cg) {
#if PINGPONG
    named_arrive(2 - cg, 256);
#endif
}

// smem: [Q (Q_SLOTS=2: two Q tiles)][K slots][V slots][ROW_SUM_MMA: ones][O_TILE: O][mbarriers: full_q, full_k[S],
//        full_v[S], empty_k[S], empty_v[S] (PERSISTENT: + empty_q, tile_full[2], tile_empty[2], then two int32 tile
//        slots; Q_SLOTS=2: then slot 1's full_q and empty_q)]
#define PERSIST_BYTES (PERSISTENT ? 8 * 5 + 8 + 16 * (Q_SLOTS - 1) : 0)  // Q_SLOTS=2: full_q, empty_q of slot 1
#define ONES_BYTES (ROW_SUM_MMA * BLOCK_N * 128)  // ROW_SUM_MMA: a V-shaped panel of ones, after the V slots
#define O_TILE_BYTES (O_TILE * TILE_Q_BYTES)  // O_TILE: the epilogue's staging tile, apart from Q
#define SMEM_BYTES (Q_SLOTS * TILE_Q_BYTES + 2 * STAGES * TILE_KV_BYTES + ONES_BYTES + O_TILE_BYTES + 8 * (1 + 4 * STAGES) + PERSIST_BYTES)

#if PERSISTENT
// tile -> (Q block, batch*head). Causal: longest first (the Q blocks that see the most key blocks before any
// shorter one), so the last tiles to start are the short ones, within sections of heads whose K and V fit in
// CAUSAL_SECTION_KB (FA3's L2 swizzle of its LPT scheduler): ordered over every head at once, the CTAs running
// together read the K/V of ~132 heads, evicted before the same heads' next Q blocks reread them (ncu at
// d = 128, N = 512-1024: 1.8-2.7x the DRAM bytes of the one-tile-per-CTA grid; results/fwd_wgmma_d64_tiles/
// short128_ncu). CAUSAL_SECTION_KB=0: one section. Non-causal: a head's Q blocks are consecutive, so CTAs
// running at the same time share its K and V in L2.
__device__ __forceinline__ void tile_coords(int tile, int Tr, int BH, bool causal, int Nk, int group, int& m_block,
                                            int& bh) {
    if (causal) {
#if CAUSAL_SECTION_KB
        // K and V per query head in KB, 32-bit (the producer runs on 24-40 registers): 4 Nk D / 1024 / group
        const unsigned kv_kb = max(1u, ((unsigned)(Nk + 255) >> 8) * D / (unsigned)group);
        const int hs = max(1, min(BH, (int)(CAUSAL_SECTION_KB / kv_kb)));
#if SECTION_RAGGED_FIRST
        // stop 24: the section of the BH % hs heads left over goes first. Last, its longest tiles started when the
        // other sections were nearly done and ran on alone (d = 128 causal N = 10240, 16 heads in sections of 3: the
        // one-head section's 80-step tiles, 1.02-1.10x the time of one tile per CTA)
        const int rag = BH % hs, t0 = tile - Tr * rag;
        const int sec = t0 < 0 ? 0 : t0 / (Tr * hs), r = t0 < 0 ? tile : t0 - sec * Tr * hs;
        const int h_sec = t0 < 0 ? rag : hs, h0 = t0 < 0 ? 0 : rag + sec * hs;
#else
        const int sec = tile / (Tr * hs), r = tile - sec * Tr * hs;
        const int h_sec = min(hs, BH - sec * hs);  // the last section may hold fewer heads
        const int h0 = sec * hs;
#endif
        m_block = Tr - 1 - r / h_sec;
        bh = h0 + r % h_sec;
#else
        m_block = Tr - 1 - tile / BH;
        bh = tile % BH;
#endif
    } else {
        bh = tile / Tr;
        m_block = tile % Tr;
    }
}
// Tr, computed where it is used from an opaque copy of Nq: hoisted above the producer/consumer split, NVRTC
// kept it in local memory (a reload per tile in both roles)
__device__ __forceinline__ int q_blocks(int Nq) {
    int n;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(n) : "r"(Nq));
    return (n + BLOCK_M - 1) / BLOCK_M;
}
// gridDim.x read where it is used (asm volatile: not hoisted into a register the producer would spill at 24-40)
__device__ __forceinline__ int n_ctas() {
    int n;
    asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(n));
    return n;
}
__device__ __forceinline__ void st_shared_s32(u32 addr, int v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(u32 addr) {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
fa2_wgmma_tma_fwd(const __grid_constant__ TensorMap tmQ, const __grid_constant__ TensorMap tmK,
                  const __grid_constant__ TensorMap tmV,
#if O_TMA
                  const __grid_constant__ TensorMap tmO,  // o as (d, Nq, H, B), box 64 x 64: one warpgroup's rows
#endif
                  u16* __restrict__ Og, float* __restrict__ LSEg, int Nq,
                  int Nk, float scale_log2, float scale, int causal, int H, int group
#if PERSISTENT
                  , int BH, int* __restrict__ tile_counter  // B*H; PERSISTENT=2: 0 at launch, 0 again at exit
#endif
                  ) {
    extern __shared__ __align__(1024) unsigned char smem[];
    // WG_SKIP: the warp index through a shuffle from lane 0 (CUTLASS's canonical_warp_idx_sync), so ptxas knows it and
    // the warpgroup index are warp-uniform; otherwise the idle test below reads as a divergent branch, whatever follows
    // its join (the ring counters, the wgmma descriptors) leaves the uniform datapath, and the build ran 3-12% slower
    // (v10, first form; lab/NOTES-tc.md)
    const int tid = threadIdx.x, lane = tid & 31,
              warp = (WG_SKIP || WG_CAUSAL_SKIP) && NWG > 1 ? __shfl_sync(0xffffffffu, tid >> 5, 0) : tid >> 5,
              wg = warp >> 2;
    TRACE_START(tid == 0);
    const int causal_off = Nk - Nq;
    const bool is_causal = causal != 0;

    const u32 s_base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 sQ = s_base;
    const u32 sK0 = sQ + Q_SLOTS * TILE_Q_BYTES;  // Q_SLOTS=2: Q slot 1 right after slot 0
    const u32 sV0 = sK0 + STAGES * TILE_KV_BYTES;
    const u32 sOnes = sV0 + STAGES * TILE_KV_BYTES;
    const u32 sO = sOnes + ONES_BYTES;  // O_TILE: the epilogue's own tile (else it stages O through Q's)
    const u32 bar0 = sO + O_TILE_BYTES;
    const u32 full_q = bar0;
    // P V reads V slot s and, ROW_SUM_MMA, the ones panel as its next 64 columns
#define PV_LBO(s) (ROW_SUM_MMA ? sOnes - (sV0 + (s) * TILE_KV_BYTES) : BLOCK_N * 128)
#define FULL_K(s) (bar0 + 8 * (1 + (s)))
#define FULL_V(s) (bar0 + 8 * (1 + STAGES + (s)))
#define EMPTY_K(s) (bar0 + 8 * (1 + 2 * STAGES + (s)))
#define EMPTY_V(s) (bar0 + 8 * (1 + 3 * STAGES + (s)))
#if PERSISTENT
    // empty_q: the consumers are done with the Q tile (last S product, and without O_TILE the epilogue)
    const u32 empty_q = bar0 + 8 * (1 + 4 * STAGES);
#define TILE_FULL(i) (bar0 + 8 * (2 + 4 * STAGES + (i)))   // the producer published tile slot i
#define TILE_EMPTY(i) (bar0 + 8 * (4 + 4 * STAGES + (i)))  // every consumer thread has read it
    const u32 tile_slot0 = bar0 + 8 * (6 + 4 * STAGES);
#endif
    // Q slot i's barriers: slot 0's as before, slot 1's (Q_SLOTS=2) after the two tile slots. Tile k uses slot
    // k % Q_SLOTS, that slot's (k / Q_SLOTS)-th phase
#if PERSISTENT && Q_SLOTS == 2
#define FULL_Q(i) ((i) ? tile_slot0 + 8 : full_q)
#define EMPTY_Q(i) ((i) ? tile_slot0 + 16 : empty_q)
#else
#define FULL_Q(i) full_q
#define EMPTY_Q(i) empty_q
#endif

    if (tid == 0) {
        mbar_init(full_q, 1);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(FULL_K(s), 1);
            mbar_init(FULL_V(s), 1);
            mbar_init(EMPTY_K(s), 4 * NWG);  // one arrival per consumer warp
            mbar_init(EMPTY_V(s), 4 * NWG);
        }
#if PERSISTENT
        mbar_init(empty_q, 4 * NWG);
        if (Q_SLOTS == 2) {
            mbar_init(FULL_Q(1), 1);
            mbar_init(EMPTY_Q(1), 4 * NWG);
        }
        for (int i = 0; i < 2; ++i) {
            mbar_init(TILE_FULL(i), 1);
            mbar_init(TILE_EMPTY(i), 128 * NWG);  // one arrival per consumer thread: each orders its own load
        }
#endif
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
#if ROW_SUM_MMA
    {   // 1.0 in every element (so the swizzle does not matter), written by the generic proxy and read by wgmma
        const u32 one2 = IS_BF16 ? 0x3F803F80u : 0x3C003C00u;
        for (int i = tid; i < ONES_BYTES / 16; i += NTHREADS)
            asm volatile("st.shared.v4.b32 [%0], {%1,%1,%1,%1};\n" ::"r"(sOnes + 16 * i), "r"(one2) : "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
#endif
    __syncthreads();  // the last CTA-wide barrier: from here producer and consumers run apart

    if (wg == 0) {
        // ------------------------------------------------------------------------ producer (FA2 Alg. 1 line 4, 7)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (warp == 0 && lane == 0) {
            int kv_it = 0;  // K/V blocks loaded so far by this CTA: the ring runs on across tiles
#if PERSISTENT
            int tile = blockIdx.x;
            for (int k = 0;; ++k) {  // k-th tile of this CTA
                if (k >= 2) mbar_wait(TILE_EMPTY(k & 1), ((k >> 1) - 1) & 1);  // tile k-2's slot was read
                st_shared_s32(tile_slot0 + 4 * (k & 1), tile);
                mbar_arrive(TILE_FULL(k & 1));  // release: the consumers' wait orders their read after the store
                const int Tr = q_blocks(Nq);
                if (tile >= Tr * BH) break;
                int m_block, bh;
                tile_coords(tile, Tr, BH, is_causal, Nk, group, m_block, bh);
#else
            {
                const int k = 0;
                const int m_block = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
                const int bh = blockIdx.y;
#endif
                const int b_idx = bh / H, h_idx = bh % H, hk_idx = h_idx / group;  // GQA: kv head of query head h
                const int m0 = m_block * BLOCK_M;
                int n_vis = Nk;
                if (is_causal) n_vis = max(0, min(Nk, min(m0 + BLOCK_M, Nq) + causal_off));
                const int T = (n_vis + BLOCK_N - 1) / BLOCK_N;
                auto load_q = [&]() {
                    const int qs = k % Q_SLOTS;
#if PERSISTENT
                    // tile k - Q_SLOTS is done with this Q slot (Q_SLOTS=2: long since, as tile k-1 runs)
                    if (k >= Q_SLOTS) mbar_wait(EMPTY_Q(qs), (k / Q_SLOTS - 1) & 1);
#endif
                    mbar_expect_tx(FULL_Q(qs), TILE_Q_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        tma_load(sQ + qs * TILE_Q_BYTES + p * BLOCK_M * 128, &tmQ, p * 64, m0, h_idx, b_idx, FULL_Q(qs));
                };
                auto load_k = [&](int t) {
                    const int j = T - 1 - t, slot = (kv_it + t) % STAGES, use = (kv_it + t) / STAGES;
                    if (use > 0) mbar_wait(EMPTY_K(slot), (use - 1) & 1);  // S of step t-STAGES has read it
                    mbar_expect_tx(FULL_K(slot), TILE_KV_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        tma_load(sK0 + slot * TILE_KV_BYTES + p * BLOCK_N * 128, &tmK, p * 64, j * BLOCK_N, hk_idx, b_idx, FULL_K(slot));
                };
                auto load_v = [&](int t) {
                    const int j = T - 1 - t, slot = (kv_it + t) % STAGES, use = (kv_it + t) / STAGES;
                    if (use > 0) mbar_wait(EMPTY_V(slot), (use - 1) & 1);  // P V of step t-STAGES+1 has read it
                    mbar_expect_tx(FULL_V(slot), TILE_KV_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        tma_load(sV0 + slot * TILE_KV_BYTES + p * BLOCK_N * 128, &tmV, p * 64, j * BLOCK_N, hk_idx, b_idx, FULL_V(slot));
                };
                if (T > 0) {
#if PERSISTENT
                    // tile k's first K block goes out before its Q, while tile k-1's epilogue runs; with two Q slots
                    // Q waits for nothing, so it goes first, as soon as the producer reaches tile k
                    if (Q_SLOTS == 2) load_q();
                    load_k(0);
                    if (Q_SLOTS == 1) load_q();
#else
                    load_q();
                    load_k(0);
#endif
                    load_v(0);
                }
                for (int t = 1; t < T; ++t) {
                    load_k(t);
                    load_v(t);
                }
                // the consumers stage this tile's epilogue through it (O_TILE, O_DIRECT: they do not, but each tile's
                // full_q / empty_q phase needs its load)
                if (PERSISTENT && T == 0) load_q();
                kv_it += T;
#if PERSISTENT == 2
                // one fetch per tile run, so exactly Tr*B*H fetches a launch: atomicInc wraps at Tr*B*H - 1, so the
                // last of them leaves 0 behind for the next launch on the stream (v6e)
                tile = n_ctas() + (int)atomicInc(reinterpret_cast<unsigned*>(tile_counter), (unsigned)(Tr * BH - 1));
#elif PERSISTENT
                tile += n_ctas();
#endif
            }
        }
        return;
    }

    // ---------------------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
    const int cg = wg - 1;                   // consumer warpgroup: rows 64cg..64cg+63 of the Q block
    const int cw = warp - 4;                 // consumer warp 0..4*NWG-1: rows 16cw..16cw+15
    int kv_it = 0;
#if PINGPONG && TURN_CARRY
    // v12: the turn runs on from tile to tile, so warpgroup 0 issues its next tile's first S while warpgroup 1 finishes
    // its last P V and epilogue (FA3's mma_init arrives once per kernel, too); one arrival stays outstanding between
    // tiles, and warpgroup 0 takes the last one before it exits
    if (cg == 1) named_arrive(1, 256);
#endif
#if PERSISTENT
    for (int k = 0;; ++k) {
        mbar_wait(TILE_FULL(k & 1), (k >> 1) & 1);
        const int tile = ld_shared_s32(tile_slot0 + 4 * (k & 1));
        mbar_arrive(TILE_EMPTY(k & 1));  // per thread, not lane 0 after __syncwarp: racecheck, see the v6 log
        const int Tr = q_blocks(Nq);
        if (tile >= Tr * BH) break;
        int m_block, bh;
        tile_coords(tile, Tr, BH, is_causal, Nk, group, m_block, bh);
#else
    {
        const int k = 0;
        const int m_block = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
        const int bh = blockIdx.y;  // o and lse are (B, H, Nq, .) contiguous: row bh
#endif
        const int m0 = m_block * BLOCK_M;
        const int row0 = m0 + cw * 16;
        const int qs = k % Q_SLOTS, qph = (k / Q_SLOTS) & 1;  // this tile's Q slot and its phase
        const u32 sQk = sQ + qs * TILE_Q_BYTES;
        int n_vis = Nk;
        if (is_causal) n_vis = max(0, min(Nk, min(m0 + BLOCK_M, Nq) + causal_off));
        const int T = (n_vis + BLOCK_N - 1) / BLOCK_N;
#if WG_SKIP
        // v10: rows past Nq are never written (FA2 Alg. 1 line 15 stores rows < Nq), so a warpgroup whose 64 rows all lie
        // past Nq (the last Q block of a ragged Nq: Br = 192 at N = 512 leaves its third warpgroup empty) issues no
        // product and no softmax. It waits on every full barrier and arrives on every empty one as the working path
        // does (each ring phase needs its arrival, so none completes early), takes its ping-pong turns, and hands the
        // Q tile back; then it leaves the tile before O is even zeroed, so the working path's code is not touched.
        if (NWG > 1 && __shfl_sync(0xffffffffu, (int)(m0 + 64 * cg >= Nq), 0)) {  // uniform: m0 comes from smem
            if (PERSISTENT || T > 0) mbar_wait(FULL_Q(qs), qph);
            if (T > 0) {
#if PINGPONG
                if (!TURN_CARRY && cg == 1) named_arrive(1, 256);
#endif
                for (int t = 0; t < T; ++t) {
                    const int ks = (kv_it + t) % STAGES;
                    mbar_wait(FULL_K(ks), ((kv_it + t) / STAGES) & 1);
                    if (t > 0) mbar_wait(FULL_V((kv_it + t - 1) % STAGES), ((kv_it + t - 1) / STAGES) & 1);
                    turn_begin(cg);
                    turn_end(cg);
                    if (lane == 0) {
                        mbar_arrive(EMPTY_K(ks));
                        if (t > 0) mbar_arrive(EMPTY_V((kv_it + t - 1) % STAGES));
                    }
                }
                mbar_wait(FULL_V((kv_it + T - 1) % STAGES), ((kv_it + T - 1) / STAGES) & 1);
#if PINGPONG
                named_sync(1 + cg, 256);
                if (TURN_CARRY) named_arrive(2 - cg, 256); else if (cg == 0) named_arrive(2, 256);
#endif
#if PERSISTENT
                if (lane == 0) mbar_arrive(EMPTY_V((kv_it + T - 1) % STAGES));
#endif
            }
#if PERSISTENT
            if (lane == 0) mbar_arrive(EMPTY_Q(qs));  // with Q_EARLY after the tile's last S (or none), else after O
            kv_it += T;
            continue;
#else
#if PINGPONG && TURN_CARRY
            if (cg == 0) named_sync(1, 256);  // warpgroup 1 (idle too) handed the turn back at its walk's end
#endif
            return;  // one tile per CTA: nothing left for this warpgroup
#endif
        }
#endif
        float o[O_N / 2];
#pragma unroll
        for (int i = 0; i < O_N / 2; ++i) o[i] = 0.f;
        Softmax sm;
        sm.m[0] = sm.m[1] = NEG_INF;
        sm.l[0] = sm.l[1] = 0.f;
        float s[BLOCK_N / 2];
        u32 pa[KN][4];
        float alpha[2];

        if (PERSISTENT || T > 0) mbar_wait(FULL_Q(qs), qph);  // persistent: Q is loaded even when T = 0
#if QK_AHEAD
        if (T > 0) {
            // FA3 Sec. 3.2 with two S tiles: S_{t+1} = Q K^T is issued before the softmax of step t and P_{t-1} V
            // just before it, so both products of a step run under its softmax (FA2 Alg. 1 lines 8-10)
            float s2[BLOCK_N / 2];
            const int k0 = kv_it % STAGES;
            mbar_wait(FULL_K(k0), (kv_it / STAGES) & 1);
            issue_qk(s, sQk, sK0 + k0 * TILE_KV_BYTES, cg);
            wgmma_wait<0>();
            wgmma_fence_operand(s);
            if (lane == 0) mbar_arrive(EMPTY_K(k0));
            auto softmax_0 = [&]() {
                const int n0 = (T - 1) * BLOCK_N;
                const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
                if (need_mask) softmax_step<true>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                else softmax_step<false>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                pack_p(pa, s);
            };
            // step t: S_t in `cur` (issued a step ago), S_{t+1} into `nxt` (ahead: not the last step), O += P_{t-1} V_{t-1}
            // with P_{t-1} from `pin`, P_t packed into `pout`. Two P tiles, like the two S tiles: P_t is packed while
            // S_{t+1} still runs, into registers no product in flight reads. v3d packed into the one P tile that
            // P_{t-1} V_{t-1} had read and issued S_{t+1} in one branch of a join; ptxas serialised every wgmma of
            // that build (C7515). v7c waited for S_{t+1} before packing instead; the two measured alike (NOTES-tc.md v7)
            // (ahead is a literal at each call: inlined, each copy is straight-line code)
            u32 pb[KN][4];
            auto step = [&](const bool ahead, int t, float(&cur)[BLOCK_N / 2], float(&nxt)[BLOCK_N / 2],
                            u32(&pin)[KN][4], u32(&pout)[KN][4]) {
                const int n0 = (T - 1 - t) * BLOCK_N;
                const int ks = (kv_it + t) % STAGES, vs = (kv_it + t - 1) % STAGES;
                mbar_wait(FULL_V(vs), ((kv_it + t - 1) / STAGES) & 1);
                wgmma_fence_operand(o);
                issue_pv(o, pin, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));
                wgmma_wait<1>();  // S_t done; P_{t-1} V_{t-1} in flight
                wgmma_fence_operand(cur);
                if (lane == 0) mbar_arrive(EMPTY_K(ks));
                if (ahead) {
                    const int kn = (kv_it + t + 1) % STAGES;
                    mbar_wait(FULL_K(kn), ((kv_it + t + 1) / STAGES) & 1);
                    issue_qk(nxt, sQk, sK0 + kn * TILE_KV_BYTES, cg);
                }
                const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
                const bool moved = need_mask
                    ? softmax_step<true>(cur, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2)
                    : softmax_step<false>(cur, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                if (ahead) wgmma_wait<1>();  // P_{t-1} V_{t-1} done; S_{t+1} may still run
                else wgmma_wait<0>();
                wgmma_fence_operand(o);
                if (lane == 0) mbar_arrive(EMPTY_V(vs));
                if (moved) rescale_o(o, alpha);
                pack_p(pout, cur);
            };
            if (T == 1) {
                softmax_0();
            } else {
                const int k1 = (kv_it + 1) % STAGES;
                mbar_wait(FULL_K(k1), ((kv_it + 1) / STAGES) & 1);
                issue_qk(s2, sQk, sK0 + k1 * TILE_KV_BYTES, cg);
                softmax_0();
                int t = 1;
                for (; t + 2 < T; t += 2) {  // unrolled by two: the S and P tiles swap roles without a copy
                    step(true, t, s2, s, pa, pb);
                    step(true, t + 1, s, s2, pb, pa);
                }
                if (t + 1 < T) {  // two steps left
                    step(true, t, s2, s, pa, pb);
                    step(false, t + 1, s, s2, pb, pa);
                } else {  // one: its P lands in pb, where the last P V below does not read
                    step(false, t, s2, s, pa, pb);
#pragma unroll
                    for (int i = 0; i < KN; ++i)
#pragma unroll
                        for (int c = 0; c < 4; ++c) pa[i][c] = pb[i][c];
                }
            }
            const int vs = (kv_it + T - 1) % STAGES;
            mbar_wait(FULL_V(vs), ((kv_it + T - 1) / STAGES) & 1);
            wgmma_fence_operand(o);
            issue_pv(o, pa, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));
            wgmma_wait<0>();
            wgmma_fence_operand(o);
#if PERSISTENT
            if (lane == 0) mbar_arrive(EMPTY_V(vs));  // the ring runs on into the next tile
#endif
        }
#else
#if WG_CAUSAL_SKIP
        // v11: causal, the loop runs j = T-1 down to 0, and T is set by the tile's last row. A warpgroup whose rows end
        // earlier (warpgroup 0 of Br = 128 with Bc = 64: its rows m0..m0+63 see no key of block j = T-1) finds its first
        // sk blocks masked in every row (FA2 Alg. 1 line 9 would give P = 0 there): it walks them as WG_SKIP walks a
        // tile (waits on the full barriers, arrives on the empty ones, takes its turns) and runs Tw = T - sk steps from
        // ring position kv_it + sk. The tile's last warpgroup has sk = 0, so one warpgroup's products always run.
        int sk = 0;
        if (NWG > 1 && is_causal && T > 1) {
            const int vis = max(0, min(Nk, min(m0 + 64 * cg + 64, Nq) + causal_off));  // this warpgroup's keys
            sk = __shfl_sync(0xffffffffu, T - max(1, (vis + BLOCK_N - 1) / BLOCK_N), 0);
        }
        const int Tw = T - sk, kvw = kv_it + sk;
#else
        const int Tw = T, kvw = kv_it;
#endif
        if (T > 0) {
#if PINGPONG
            if (!TURN_CARRY && cg == 1) named_arrive(1, 256);  // warpgroup 0 takes the first turn
#endif
#if WG_CAUSAL_SKIP
            for (int t = 0; t < sk; ++t) {  // the walk: K_j and V_j released unread, one ping-pong turn each
                const int ks = (kv_it + t) % STAGES, ph = ((kv_it + t) / STAGES) & 1;
                mbar_wait(FULL_K(ks), ph);
                turn_begin(cg);
                turn_end(cg);
                mbar_wait(FULL_V(ks), ph);
                if (lane == 0) {
                    mbar_arrive(EMPTY_K(ks));
                    mbar_arrive(EMPTY_V(ks));
                }
            }
#endif
            TRACE_STEP(tid == 128, 0, Tw);
            // step 0 (j = Tw-1): S and softmax
#if HALF_DIAG
            // the keys this warpgroup's last row sees end in the first half of block Tw-1 (warpgroup 0 on the causal
            // diagonal of Br = Bc = 128): S, the softmax and the next P V over that half (wgmma_fa2.cuh)
            bool half;
            {
                const int vis = min(Nk, is_causal ? min(m0 + 64 * cg + 64, Nq) + causal_off : Nk);
                half = __shfl_sync(0xffffffffu, vis - (Tw - 1) * BLOCK_N <= BLOCK_N / 2, 0);
            }
            bool pv_half = half;  // the P V of this block is the next one issued
#endif
            mbar_wait(FULL_K(kvw % STAGES), (kvw / STAGES) & 1);
            turn_begin(cg);
#if HALF_DIAG
            if (half) {  // each branch waits for its own product: no wgmma is in flight where the two paths join
                issue_qk<BLOCK_N / 2>(s, sQk, sK0 + (kvw % STAGES) * TILE_KV_BYTES, cg);
                turn_end(cg);
                wgmma_wait<0>();
            } else
#endif
            {
            issue_qk(s, sQk, sK0 + (kvw % STAGES) * TILE_KV_BYTES, cg);
            turn_end(cg);
            wgmma_wait<0>();
            }
            wgmma_fence_operand(s);
            if (lane == 0) mbar_arrive(EMPTY_K(kvw % STAGES));
#if Q_EARLY
            if (Tw == 1 && lane == 0) mbar_arrive(EMPTY_Q(qs));  // the tile's last S has read Q
#endif
            {
                const int n0 = (Tw - 1) * BLOCK_N;
                const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
#if HALF_DIAG
                if (half) {  // the second half is masked in every row of the warpgroup
                    softmax_step<true, NT / 2>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                    pack_p<KN / 2>(pa, s);
                    // P = 0 on the masked half: the tile's last P V (Tw == 1) runs whole, since a half-width branch
                    // there makes ptxas serialise the wgmma pipeline at d = 128 (insufficient registers)
#pragma unroll
                    for (int kn = KN / 2; kn < KN; ++kn) pa[kn][0] = pa[kn][1] = pa[kn][2] = pa[kn][3] = 0u;
                } else {
#endif
                if (need_mask) softmax_step<true>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                else softmax_step<false>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                pack_p(pa, s);
#if HALF_DIAG
                }
#endif
            }
            // step t: S_j = Q K_j^T and O += P_{j+1} V_{j+1}
            for (int t = 1; t < Tw; ++t) {
                TRACE_STEP(tid == 128, t, Tw);
                const int j = Tw - 1 - t, n0 = j * BLOCK_N;
                const int ks = (kvw + t) % STAGES, vs = (kvw + t - 1) % STAGES;
                mbar_wait(FULL_K(ks), ((kvw + t) / STAGES) & 1);
                mbar_wait(FULL_V(vs), ((kvw + t - 1) / STAGES) & 1);
                turn_begin(cg);
                issue_qk(s, sQk, sK0 + ks * TILE_KV_BYTES, cg);
                wgmma_fence_operand(o);
#if HALF_DIAG
                if (pv_half) issue_pv<KN / 2>(o, pa, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));
                else
#endif
                issue_pv(o, pa, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));
#if HALF_DIAG
                pv_half = false;
#endif
                turn_end(cg);
                wgmma_wait<1>();  // S_j done; P_{j+1} V_{j+1} still on the tensor cores during the softmax
                wgmma_fence_operand(s);
                if (lane == 0) mbar_arrive(EMPTY_K(ks));
#if Q_EARLY
                if (t == Tw - 1 && lane == 0) mbar_arrive(EMPTY_Q(qs));  // the next tile's Q may load now
#endif
                const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
                const bool moved = need_mask
                    ? softmax_step<true>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2)
                    : softmax_step<false>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                wgmma_wait<0>();
                wgmma_fence_operand(o);
                if (lane == 0) mbar_arrive(EMPTY_V(vs));
                if (moved) rescale_o(o, alpha);
                pack_p(pa, s);
            }
            // step Tw: the last P V (block j = 0)
            const int vs = (kvw + Tw - 1) % STAGES;
            mbar_wait(FULL_V(vs), ((kvw + Tw - 1) / STAGES) & 1);
#if PINGPONG
            named_sync(1 + cg, 256);
            // warpgroup 1's last turn: it hands back nothing, so warpgroup 0's next tile waits for its epilogue; with
            // TURN_CARRY it hands the turn back here, and the arrival made once before the tile loop stands for the first
            if (TURN_CARRY) named_arrive(2 - cg, 256); else if (cg == 0) named_arrive(2, 256);
#endif
            wgmma_fence_operand(o);
            issue_pv(o, pa, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));  // HALF_DIAG, Tw == 1: P's zeroed half included
            wgmma_wait<0>();
            wgmma_fence_operand(o);
#if PERSISTENT
            if (lane == 0) mbar_arrive(EMPTY_V(vs));  // the ring runs on into the next tile
#endif
        }
#endif  // QK_AHEAD

#if PERSISTENT && !O_DIRECT
        // an opaque copy of the staging tile's address per tile: the epilogue's lane-dependent addresses are then
        // computed per tile instead of being hoisted out of the tile loop and kept live (spilled) across it
        u32 s_stage;
        asm volatile("mov.b32 %0, %1;\n" : "=r"(s_stage) : "r"(O_TILE ? sO : sQ));
#elif !O_DIRECT
        const u32 s_stage = sQ;
#endif  // O_DIRECT stages nothing
#if Q_EARLY
        if (T == 0 && lane == 0) mbar_arrive(EMPTY_Q(qs));  // no S read Q (the row sees no key)
#endif
#if O_TILE
        __syncwarp();  // every lane's reads of the previous tile's O in this warp's rows are done
#endif
#if O_TMA
        {   // FA2 Alg. 1 lines 12-15: O / l staged, then one TMA store per 64-column panel of this warpgroup's rows
            const bool leader = (tid & 127) == 0;
            if (leader) bulk_wait_read();  // the previous tile's store has read the staging rows
            named_sync(3 + cg, 128);
            stage_o_lse(o, sm, s_stage, LSEg, bh, m0, Nq, cw, lane, scale);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> the TMA's reads
            named_sync(3 + cg, 128);
            if (leader) {
#pragma unroll
                for (int p = 0; p < PANELS; ++p)
                    tma_store(&tmO, s_stage + p * BLOCK_M * 128 + cg * 64 * 128, p * 64, m0 + 64 * cg, bh % H, bh / H);
                bulk_commit();
            }
        }
#elif O_DIRECT
        write_o_lse_direct(o, sm, Og, LSEg, bh, m0, Nq, cw, lane, scale);  // FA2 Alg. 1 lines 12-15, no staging
#else
        write_o_lse(o, sm, s_stage, Og, LSEg, bh, m0, Nq, cw, lane, scale);  // FA2 Alg. 1 lines 12-15
#endif
#if PERSISTENT && !Q_EARLY
        // the epilogue wrote and read the Q tile through the generic proxy; the next Q arrives through the
        // async proxy (TMA): order the two before handing the tile back
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncwarp();
        if (lane == 0) mbar_arrive(EMPTY_Q(qs));
#endif
        TRACE_END(tid == 128, T);
        kv_it += T;
    }
#if PINGPONG && TURN_CARRY
    if (cg == 0) named_sync(1, 256);  // warpgroup 1's last hand-back: no arrival outlives the CTA
#endif
#if O_TMA
    if ((tid & 127) == 0) bulk_wait_all();  // smem outlives the stores
#endif
}
