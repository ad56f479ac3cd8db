// fa2_wgmma_tma.cu -- FlashAttention-2 forward on Hopper: wgmma + TMA + warp specialisation (sm_90a).
//
// fa2_wgmma.cu (the readable first step) with its two measured limits removed:
//   * every thread there issued cp.async for K and V and met the others at a __syncthreads each step,
//     so the two warpgroups ran in lockstep and the tensor pipe idled at every step boundary (ncu: 48-51%
//     tensor-pipe activity against cuDNN's 76%);
//   * the fast builds used one warpgroup per CTA (2-3 CTAs/SM), which re-reads K and V from L2 for every
//     64 query rows (7.9 GB of L2 traffic at N = 4096, d = 128 against 2.9 GB with 128 rows).
// Here warpgroup 0 is the producer: one thread moves tiles with TMA (cp.async.bulk.tensor: one instruction per
// 64-column panel, completion counted in bytes on an mbarrier, written through the async proxy that wgmma reads)
// into a ring of STAGES K and V slots. The NWG consumer warpgroups never meet at a CTA-wide barrier: each waits on
// "full" mbarriers for its operands and signals "empty" mbarriers when its products have read them. With two consumer
// warpgroups (PINGPONG=1) named barriers hand the tensor cores back and forth: warpgroup 0 issues its products, then
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
// Masking, the exact rescale skip, layouts and descriptors are those of fa2_wgmma.cu (wgmma_fa2.cuh).
//
// Arguments: three CUtensorMaps (Q, K, V as 4-D tensors (d, N, H, B) with the inputs' own strides, so
// (B, N, H, d) views transposed to (B, H, N, d) need no copy; 128-byte swizzle, box 64 x rows x 1 x 1)
// made by kernels/tma.py (O_TMA builds: a fourth, o's, box 64 x 64), then o, lse, Nq, Nk, scale_log2, scale, causal,
// H, group. grid = (Tr, B*H); PERSISTENT builds add B*H and the tile counter, grid = (persistent CTAs, 1, 1).
// Grouped-query attention: K and V have H / group heads; query head h reads kv head h / group.
// d = 96 is a 64-column panel plus a half panel: smem tiles are padded to 128 columns (TMA zero-fills
// columns 96..127, which count in the transaction bytes), S = Q K^T takes 6 k-steps, not 8.
//
// Knobs (what each does: kernels/fa2_wgmma.py KNOBS; the builds forward() runs: its CONFIGS and SIZE_RULES):
//   tile and schedule  HEAD_DIM (64|96|128|256), IS_BF16, BLOCK_N (Bc), NWG (1-3 consumer warpgroups), STAGES,
//                      PINGPONG, MIN_BLOCKS, PRODUCER_REGS, PV_N (d = 96: 128 pads P V to two whole panels)
//   softmax            RESCALE_THRESHOLD, ROW_SUM_MMA (d = 64: l from P V over a panel of ones), DESC_STEP
//                      (wgmma_fa2.cuh)
//   persistent CTAs    PERSISTENT=2 (tiles from an atomic counter; causal: longest first in sections of heads,
//                      SECTION_RAGGED_FIRST), O_TILE / O_TMA / O_DIRECT=2 (the epilogue lets the next Q load early),
//                      TURN_CARRY (the ping-pong turn runs on across tiles)
//   idle work skipped  WG_SKIP (warpgroups past Nq), WG_CAUSAL_SKIP (key blocks past a warpgroup's causal rows)
// How the kernel got here, each knob's measurements, and the knobs tried and removed: docs/hopper-fa2-history.md
// (the version log v1-v14); the notes of each stop: lab/NOTES-tc.md.

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
#define PERSISTENT 0  // 2: persistent CTAs, each taking its next tile from an atomic counter; 0: one tile per CTA
#endif
static_assert(PERSISTENT == 0 || PERSISTENT == 2, "PERSISTENT: 0 (one tile per CTA) or 2 (tiles from an atomic counter)");
#ifndef O_TILE
#define O_TILE 0  // 1 (persistent): O staged in its own smem tile, the Q tile handed back after the last S = Q K^T
#endif
#ifndef O_TMA
#define O_TMA 0  // 1 (O_TILE): each consumer warpgroup stores its 64 rows of O from the staging tile with TMA
#endif
#ifndef O_DIRECT
#define O_DIRECT 0  // 2 (persistent, no O_TILE): O from registers to global memory in 16-byte stores after a quad
                    // transpose, the Q tile handed back after the last S
#endif
static_assert(O_DIRECT == 0 || O_DIRECT == 2, "O_DIRECT: 0, or 2 (16-byte stores)");
#define Q_EARLY (O_TILE || O_DIRECT)  // the Q tile goes back after the tile's last S, not after the epilogue
#define CAUSAL_SECTION_KB 16384  // persistent causal order: longest first within sections of heads whose K/V fit
#ifndef SECTION_RAGGED_FIRST
#define SECTION_RAGGED_FIRST 0  // 1 (persistent causal): the section of the heads left over runs first, not last
#endif
#ifndef WG_SKIP
#define WG_SKIP 0  // 1: a consumer warpgroup whose 64 rows all lie past Nq keeps the barriers' count and computes nothing
#endif
#ifndef TURN_CARRY
#define TURN_CARRY 0  // 1 (ping-pong): the turn runs on across tiles; warpgroup 1 hands it back as it issues its last P V
#endif
#ifndef WG_CAUSAL_SKIP
#define WG_CAUSAL_SKIP 0  // 1 (causal): a warpgroup walks the tile's first key blocks that lie wholly past its own last row
#endif
// setmaxnreg: the CTA starts with REGS_AT_LAUNCH per thread (__launch_bounds__: the CTA's share of the
// 65536 registers over NTHREADS, in multiples of 8: 168 for NWG=2, one CTA per SM); the producer gives
// REGS_AT_LAUNCH - PRODUCER_REGS back and the NWG consumer warpgroups may take only that, in multiples of 8,
// at most 240: 232 at PRODUCER_REGS=40, 240 at 24. setmaxnreg.inc waits until the registers are free, so a
// consumer budget over what the producer frees is a hang, not an error (v3: PRODUCER_REGS=32 with the old
// formula, which counted 65536 instead of what the CTA holds, asked for 240 of a possible 236).
#define REGS_AT_LAUNCH ((65536 / MIN_BLOCKS / NTHREADS) / 8 * 8)
#define CONSUMER_REGS_FIT ((REGS_AT_LAUNCH + (REGS_AT_LAUNCH - PRODUCER_REGS) / NWG) / 8 * 8)
#define CONSUMER_REGS (CONSUMER_REGS_FIT < 240 ? CONSUMER_REGS_FIT : 240)

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
static_assert(!O_TMA || O_TILE, "O_TMA stores from O_TILE's staging tile");
static_assert(!TURN_CARRY || PINGPONG, "TURN_CARRY carries the ping-pong turn from tile to tile");
static_assert(!O_TILE || PERSISTENT, "O_TILE: a persistent build (its Q goes back early)");
static_assert(!O_DIRECT || (PERSISTENT && !O_TILE), "O_DIRECT: a persistent build without O_TILE");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256, "BLOCK_N: a multiple of 16, at most 256 (TMA box)");
static_assert(STAGES >= 1, "STAGES: the K/V ring needs a slot (the producer loads block t into slot t % STAGES)");

#define TILE_Q_BYTES (BLOCK_M * DP * 2)
#define TILE_KV_BYTES (BLOCK_N * DP * 2)  // also the TMA transaction bytes: zero-filled columns count

#include "tc_common.cuh"  // pack2, ex2, quad reductions, NEG_INF
#include "wgmma.cuh"
#include "wgmma_fa2.cuh"  // layout, descriptors, the two products, softmax, epilogue
#include "tma_pipe.cuh"   // TensorMap, mbarriers, TMA panel loads, named barriers

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

// smem: [Q][K slots][V slots][ROW_SUM_MMA: ones][O_TILE: O][mbarriers: full_q, full_k[S], full_v[S], empty_k[S],
//        empty_v[S] (PERSISTENT: + empty_q, tile_full[2], tile_empty[2], then two int32 tile slots)]
#define PERSIST_BYTES (PERSISTENT ? 8 * 5 + 8 : 0)
#define ONES_BYTES (ROW_SUM_MMA * BLOCK_N * 128)  // ROW_SUM_MMA: a V-shaped panel of ones, after the V slots
#define O_TILE_BYTES (O_TILE * TILE_Q_BYTES)  // O_TILE: the epilogue's staging tile, apart from Q
#define SMEM_BYTES (TILE_Q_BYTES + 2 * STAGES * TILE_KV_BYTES + ONES_BYTES + O_TILE_BYTES + 8 * (1 + 4 * STAGES) + PERSIST_BYTES)

#if PERSISTENT
// tile -> (Q block, batch*head). Causal: longest first (the Q blocks that see the most key blocks before any
// shorter one), so the last tiles to start are the short ones, within sections of heads whose K and V fit in
// CAUSAL_SECTION_KB (FA3's L2 swizzle of its LPT scheduler): ordered over every head at once, the CTAs running
// together read the K/V of ~132 heads, evicted before the same heads' next Q blocks reread them (ncu at
// d = 128, N = 512-1024: 1.8-2.7x the DRAM bytes of the one-tile-per-CTA grid; results/fwd_wgmma_d64_tiles/
// short128_ncu). Non-causal: a head's Q blocks are consecutive, so CTAs running at the same time share its K and
// V in L2.
__device__ __forceinline__ void tile_coords(int tile, int Tr, int BH, bool causal, int Nk, int group, int& m_block,
                                            int& bh) {
    if (causal) {
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
                  , int BH, int* __restrict__ tile_counter  // B*H; the tile counter: 0 at launch, 0 again at exit
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
    const int causal_off = Nk - Nq;
    const bool is_causal = causal != 0;

    const u32 s_base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 sQ = s_base;
    const u32 sK0 = sQ + TILE_Q_BYTES;
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
#if PERSISTENT
                    if (k >= 1) mbar_wait(empty_q, (k - 1) & 1);  // tile k-1 is done with the Q tile
#endif
                    mbar_expect_tx(full_q, TILE_Q_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        tma_load(sQ + p * BLOCK_M * 128, &tmQ, p * 64, m0, h_idx, b_idx, full_q);
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
                    // tile k's first K block goes out before its Q, while tile k-1's epilogue runs
                    load_k(0);
                    load_q();
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
#if PERSISTENT
                // one fetch per tile run, so exactly Tr*B*H fetches a launch: atomicInc wraps at Tr*B*H - 1, so the
                // last of them leaves 0 behind for the next launch on the stream (v6e)
                tile = n_ctas() + (int)atomicInc(reinterpret_cast<unsigned*>(tile_counter), (unsigned)(Tr * BH - 1));
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
        const int qph = k & 1;  // this tile's phase of full_q
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
            if (PERSISTENT || T > 0) mbar_wait(full_q, qph);
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
            if (lane == 0) mbar_arrive(empty_q);  // with Q_EARLY after the tile's last S (or none), else after O
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

        if (PERSISTENT || T > 0) mbar_wait(full_q, qph);  // persistent: Q is loaded even when T = 0
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
            // step 0 (j = Tw-1): S and softmax
            mbar_wait(FULL_K(kvw % STAGES), (kvw / STAGES) & 1);
            turn_begin(cg);
            issue_qk(s, sQ, sK0 + (kvw % STAGES) * TILE_KV_BYTES, cg);
            turn_end(cg);
            wgmma_wait<0>();
            wgmma_fence_operand(s);
            if (lane == 0) mbar_arrive(EMPTY_K(kvw % STAGES));
#if Q_EARLY
            if (Tw == 1 && lane == 0) mbar_arrive(empty_q);  // the tile's last S has read Q
#endif
            {
                const int n0 = (Tw - 1) * BLOCK_N;
                const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
                if (need_mask) softmax_step<true>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                else softmax_step<false>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
                pack_p(pa, s);
            }
            // step t: S_j = Q K_j^T and O += P_{j+1} V_{j+1}
            for (int t = 1; t < Tw; ++t) {
                const int j = Tw - 1 - t, n0 = j * BLOCK_N;
                const int ks = (kvw + t) % STAGES, vs = (kvw + t - 1) % STAGES;
                mbar_wait(FULL_K(ks), ((kvw + t) / STAGES) & 1);
                mbar_wait(FULL_V(vs), ((kvw + t - 1) / STAGES) & 1);
                turn_begin(cg);
                issue_qk(s, sQ, sK0 + ks * TILE_KV_BYTES, cg);
                wgmma_fence_operand(o);
                issue_pv(o, pa, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));
                turn_end(cg);
                wgmma_wait<1>();  // S_j done; P_{j+1} V_{j+1} still on the tensor cores during the softmax
                wgmma_fence_operand(s);
                if (lane == 0) mbar_arrive(EMPTY_K(ks));
#if Q_EARLY
                if (t == Tw - 1 && lane == 0) mbar_arrive(empty_q);  // the next tile's Q may load now
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
            issue_pv(o, pa, sV0 + vs * TILE_KV_BYTES, PV_LBO(vs));
            wgmma_wait<0>();
            wgmma_fence_operand(o);
#if PERSISTENT
            if (lane == 0) mbar_arrive(EMPTY_V(vs));  // the ring runs on into the next tile
#endif
        }

#if PERSISTENT && !O_DIRECT
        // an opaque copy of the staging tile's address per tile: the epilogue's lane-dependent addresses are then
        // computed per tile instead of being hoisted out of the tile loop and kept live (spilled) across it
        u32 s_stage;
        asm volatile("mov.b32 %0, %1;\n" : "=r"(s_stage) : "r"(O_TILE ? sO : sQ));
#elif !O_DIRECT
        const u32 s_stage = sQ;
#endif  // O_DIRECT stages nothing
#if Q_EARLY
        if (T == 0 && lane == 0) mbar_arrive(empty_q);  // no S read Q (the row sees no key)
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
        if (lane == 0) mbar_arrive(empty_q);
#endif
        kv_it += T;
    }
#if PINGPONG && TURN_CARRY
    if (cg == 0) named_sync(1, 256);  // warpgroup 1's last hand-back: no arrival outlives the CTA
#endif
#if O_TMA
    if ((tid & 127) == 0) bulk_wait_all();  // smem outlives the stores
#endif
}
