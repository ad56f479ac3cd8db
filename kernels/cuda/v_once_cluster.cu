// v_once_cluster.cu -- "multiply V once" (Dao-AILab/flash-attention issue #941) with the whole f row on chip,
// spread over a thread-block cluster: wgmma + TMA + distributed shared memory (sm_90a). Issue 18.
//
// The proposal at its strongest: the reference's rescale="lazy" (variants/v_once.py), f never leaves the chip.
// One Q block of Br = 64 rows per cluster of CS CTAs. The Q block's Tc_vis visible key
// blocks are split evenly over the ranks: CTA r takes blocks [r*per, min((r+1)*per, Tc_vis)), per =
// ceil(Tc_vis / CS) (at most kernels/v_once_cluster.py's tc_alloc, the per-CTA f slots counting/cluster.py's
// plan() sized shared memory for; an even split per Q block, so causal Q blocks near the top keep every rank
// busy). A rank whose share is empty still joins every cluster barrier with m = -inf, l = 0, O = 0.
// NWG = 2: two consumer warpgroups share the CTA's 64 rows and split its key blocks (local t even / odd), each
// with its own m, l and partial O (so Br, the f slice and plan() are unchanged; the tensor cores run one
// warpgroup's product during the other's softmax). Their partials join the cluster reductions as 2 CS partials.
//
//   issue #941 / FA2 Algorithm 1                     -> here
//   FA2 Alg. 1 line 4     load Q_i                   -> producer warp: TMA once (each CTA its own copy)
//   FA2 Alg. 1 line 7     load K_j                   -> producer: TMA into ring slot u % stages, u = 0..T-1
//   #941 step 1           S = Q_i K_j^T              -> consumer: wgmma SS (issue_qk), next S issued before this
//                                                       block's softmax (two S buffers)
//   #941 step 2           m_ij = rowmax(S), f_ij = exp(S - m_ij), l_ij = rowsum(f_ij)
//                                                    -> softmax_step on a fresh state (its block-local form),
//                                                       masked blocks only where a tail or the diagonal cuts
//                         f_ij kept                  -> 16-bit A fragments, stored as they sit in registers
//                                                       (thread-private uint4s: no swizzle, no bank conflict)
//                                                       to this CTA's f slice; m_ij to its block-maxima array
//   #941 steps 3-4 (lazy) m_r = max_j m_ij, l_r = sum_j e^(m_ij - m_r) l_ij (registers, online; f untouched)
//   cluster reduction 1   M = max_r m_r, l = sum_r e^(m_r - M) l_r
//                                                    -> m_r, l_r to smem, barrier.cluster, every CTA reads
//                                                       all ranks' through DSMEM (mapa + ld.shared::cluster)
//   #941 step 5, once     O_r = sum_j (f_ij e^(m_ij - M)) V_j
//                                                    -> producer: V_j through the same ring (u = T..2T-1);
//                                                       consumer: f_ij back from smem, one FMUL per element
//                                                       (no exponential of f), wgmma RS (issue_pv), the next
//                                                       block's fragments built while this product runs
//   cluster reduction 2   O = (sum_r O_r) / l, lse = M scale + ln l (FA2 Alg. 1 lines 12-15)
//                                                    -> O_r (64 x d fp32) into this CTA's ring (free by then),
//                                                       barrier.cluster, CTA r sums rows [r*64/CS, (r+1)*64/CS)
//                                                       of all partials through DSMEM, writes O and lse;
//                                                       a last barrier.cluster before any CTA exits
// Rows that see no key: M = -inf, l = 0 -> O = 0, lse = -inf (as fa2_wgmma). Causal is bottom-right aligned.
//
// Arguments: three CUtensorMaps (Q box 64 x 64 rows, K and V box 64 x BLOCK_N rows; kernels/tma.py, any strides,
// grouped-query K/V), o, lse, Nq, Nk, scale_log2, scale, causal, H, group, tc_alloc (f slots per CTA: the
// shared-memory layout's size). grid = (Tr * CS, B*H), __cluster_dims__(CS, 1, 1) (CS = 16: set at launch):
// cluster c is Q block c.
// smem (1024-aligned base): [Q][ring: stages x K/V tile][mbarriers][m_r, l_r of 2 warpgroups, M, l: 6 x 64 f32]
//                           [block maxima: tc_alloc x 64 f32][f: tc_alloc x 64 x BLOCK_N 16-bit]
// = counting/cluster.py smem_bytes() at a 2-slot ring (its RESERVE: alignment slack + mbarriers + the reduction
// arrays); the launcher then deepens the ring (argument stages, up to MAX_STAGES) into what the f slice leaves.
// Knobs: HEAD_DIM (64|128), CS (1|2|4|8|16), NWG (1|2), BLOCK_N (Bc), IS_BF16,
// RUNTIME_CLUSTER (1: the cluster shape set at launch, as CS = 16 always is).
//
// Version log:
//   v1  as above, Br = 64, Bc = 64, STAGES = 2, CS = 1/2/4/8, NWG = 1 (default) and 2. NVRTC (sm_90a): no spills,
//       no wgmma serialisation warning in any build (a wgmma under a branch inside the phase-1 loop, or in flight
//       across its back edge, or a rank from %cluster_ctarank that ptxas cannot prove warp-uniform, each made
//       ptxas serialise every wgmma: C7515 / C7518). Candidates beside it (kernels/v_once_cluster.py SWEEP): NWG=2,
//       Bc=128 (NWG=1; with NWG=2 at d=128 it spills 8-20 B); CS = 16 (non-portable, shape set at launch).
//       H200 (first visit, results/sessions/visit2 on main): correct on every memcheck shape (CS 1..8, default and
//       NWG=2); DRAM bytes 0.974-0.976x the compulsory Q, K, V, O (ncu: no f byte leaves the chip); 3.2-3.7x
//       fa2_wgmma's time (N = 4k d = 64/128, 8k d = 128); Bc=128 hung (the launcher's TMA box stayed 64 rows).
//   v2  per CTA ~18 us at N = 4k, mostly exposed latency: a 2-slot ring gave the producer one pair of blocks of
//       look-ahead (a TMA round trip per pair, ~1 us), and the cluster reductions waited on each DSMEM load in
//       turn (3 CS NWG remote latencies, then CS per output chunk). Now every DSMEM load of a reduction is
//       issued before any is used, and the ring is as deep as the shared memory the f slice leaves (the launcher
//       passes stages, 2..7; plan() still sizes the cluster at 2 slots). Measured: not yet run.

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CS
#define CS 1
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#define MAX_STAGES 7  // ring slots the mbarrier block holds; the launcher passes how many this launch has
#ifndef IS_BF16
#define IS_BF16 0
#endif
#ifndef NWG
#define NWG 1  // consumer warpgroups; with 2 they split the CTA's key blocks (even / odd), not its rows
#endif

#define D HEAD_DIM
#define PANELS (D / 64)
#define BLOCK_M 64                  // Br: the rows of one consumer warpgroup
#define NTHREADS (128 * (NWG + 1))  // warpgroup 0: producer; 1..NWG: consumers
#define CH (D / 8)
#define NT (BLOCK_N / 8)
#define KD (D / 16)
#define KN (BLOCK_N / 16)
#define TILE_Q_BYTES (BLOCK_M * D * 2)
#define TILE_KV_BYTES (BLOCK_N * D * 2)
#define F_SLOT_BYTES (BLOCK_M * BLOCK_N * 2)  // one f_ij block: KN uint4 per consumer thread
#define BAR_BYTES 128
#define RED_BYTES (6 * BLOCK_M * 4)  // m_r, l_r of up to 2 consumer warpgroups, then M, l (fixed: one layout)
#define RED_M(w) ((w) * BLOCK_M)
#define RED_L(w) ((2 + (w)) * BLOCK_M)
#define RED_MFIN (4 * BLOCK_M)
#define RED_LFIN (5 * BLOCK_M)
#define PAIRS (NWG == 1)  // phase 1 holds two ring slots at once (two warpgroups overlap each other instead)
#define ROWS_PER_RANK (BLOCK_M / CS)  // cluster reduction 2: rows of O each rank sums and writes

static_assert(D == 64 || D == 128, "HEAD_DIM must be 64 or 128");
static_assert(CS == 1 || CS == 2 || CS == 4 || CS == 8 || CS == 16, "CS: 1, 2, 4, 8 or 16 CTAs per cluster");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256, "BLOCK_N: a multiple of 16, at most 256 (TMA box)");
static_assert(2 * TILE_KV_BYTES >= BLOCK_M * D * 4, "two ring slots must hold the partial O (64 x d fp32)");
static_assert(NWG == 1 || NWG == 2, "1 or 2 consumer warpgroups");
static_assert(8 * (1 + 2 * MAX_STAGES) <= BAR_BYTES, "mbarriers");

#include "tc_common.cuh"  // pack2, ex2, quad reductions, NEG_INF, scale2
#include "wgmma.cuh"
#include "wgmma_fa2.cuh"  // sw128 descriptors, issue_qk, issue_pv, softmax_step, pack_p
#include "tma_pipe.cuh"   // TensorMap, mbarriers, TMA panel loads, named barriers
#include "cluster.cuh"    // rank, cluster barrier, DSMEM loads

__device__ __forceinline__ void st_shared_v4(u32 addr, const u32 (&v)[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
                 : "memory");
    return v;
}

// What a consumer thread carries through phase 1: its two rows' running m_r, l_r (l: this thread's columns).
struct Phase1 {
    float m[2], l[2];
    u32 sF, sMb;   // this CTA's f slice and block maxima
    int ctid;      // consumer thread 0..127: owner of uint4 ctid of every f fragment group
    int lane, cw;  // cw: consumer warp, rows 16cw..16cw+15 of the Q block
    int row0;      // global index of the warp's first row
    int Nk, causal_off, m0;
    bool causal;
    float scale_log2;
};

// #941 step 2 on a finished S_j (in place: S becomes f_ij, fp32), then steps 3-4 lazy, then f_ij and m_ij kept.
__device__ __forceinline__ void phase1_block(float (&s)[BLOCK_N / 2], Phase1& p, int t, int j) {
    const int n0 = j * BLOCK_N;
    Softmax blk;  // a fresh state: softmax_step's online update reduces to the block-local max and sum
    blk.m[0] = blk.m[1] = NEG_INF;
    blk.l[0] = blk.l[1] = 0.f;
    float alpha[2];
    const bool need_mask = (n0 + BLOCK_N > p.Nk) || (p.causal && n0 + BLOCK_N - 1 > p.m0 + p.causal_off);
    if (need_mask) softmax_step<true>(s, blk, alpha, p.row0, n0, p.lane, p.Nk, p.causal_off, p.causal, p.scale_log2);
    else softmax_step<false>(s, blk, alpha, p.row0, n0, p.lane, p.Nk, p.causal_off, p.causal, p.scale_log2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        // l_r = e^(m_r - m_new) l_r + e^(m_ij - m_new) l_ij; an all -inf pair gives 0 (ex2(-inf)), never NaN
        const float m_new = fmaxf(p.m[h], blk.m[h]);
        const float ms_new = (m_new == NEG_INF) ? 0.f : m_new * p.scale_log2;
        p.l[h] = p.l[h] * ex2(p.m[h] * p.scale_log2 - ms_new) + blk.l[h] * ex2(blk.m[h] * p.scale_log2 - ms_new);
        p.m[h] = m_new;
        if ((p.lane & 3) == 0) {
            const u32 row = p.cw * 16 + (p.lane >> 2) + h * 8;
            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(p.sMb + (t * BLOCK_M + row) * 4), "f"(blk.m[h]) : "memory");
        }
    }
    u32 pa[KN][4];
    pack_p(pa, s);
#pragma unroll
    for (int kn = 0; kn < KN; ++kn) st_shared_v4(p.sF + ((t * KN + kn) * 128 + p.ctid) * 16, pa[kn]);
}

// #941 step 5's operand for block t: f_ij e^(m_ij - M) as the RS wgmma's A fragments (Ms = M scale_log2).
__device__ __forceinline__ void build_p(u32 (&pa)[KN][4], u32 sF, u32 sMb, int t, int ctid, int cw, int lane,
                                        const float (&Ms)[2], float scale_log2) {
    float c[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mij;
        asm volatile("ld.shared.f32 %0, [%1];\n"
                     : "=f"(mij) : "r"(sMb + (t * BLOCK_M + cw * 16 + (lane >> 2) + h * 8) * 4) : "memory");
        c[h] = (mij == NEG_INF) ? 0.f : ex2(fmaf(mij, scale_log2, -Ms[h]));
    }
#pragma unroll
    for (int kn = 0; kn < KN; ++kn) {  // pack_p's order: x, z row g; y, w row g + 8
        const uint4 v = ld_shared_v4(sF + ((t * KN + kn) * 128 + ctid) * 16);
        pa[kn][0] = scale2(v.x, c[0]);
        pa[kn][1] = scale2(v.y, c[1]);
        pa[kn][2] = scale2(v.z, c[0]);
        pa[kn][3] = scale2(v.w, c[1]);
    }
}

// O (accumulator layout, 64 x d fp32) to/from sO: row r's 16-byte chunk c at r*4d + ((c ^ (r%8)) * 16), so the
// eight rows a warp writes per column pair spread over the banks
__device__ __forceinline__ u32 o_addr(u32 sO, int r, int dt, int lane) {
    const int c = 2 * dt + ((lane & 3) >> 1);  // the chunk of columns 8dt + 2(lane%4), +1
    return sO + r * (D * 4) + ((c ^ (r & 7)) << 4) + ((lane & 1) << 3);
}
__device__ __forceinline__ void store_o(u32 sO, const float (&o)[D / 2], const int (&rowl)[2], int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(o_addr(sO, rowl[h], dt, lane)),
                         "f"(o[4 * dt + 2 * h]), "f"(o[4 * dt + 2 * h + 1]) : "memory");
}
__device__ __forceinline__ void add_o(u32 sO, float (&o)[D / 2], const int (&rowl)[2], int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            const u32 addr = o_addr(sO, rowl[h], dt, lane);
            float x, y;
            asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(addr) : "memory");
            o[4 * dt + 2 * h] += x;
            o[4 * dt + 2 * h + 1] += y;
        }
    store_o(sO, o, rowl, lane);
}

#ifndef RUNTIME_CLUSTER
#define RUNTIME_CLUSTER 0  // 1: no compile-time cluster shape; the launcher sets it (cuLaunchKernelEx)
#endif
#if CS <= 8 && !RUNTIME_CLUSTER
#define CLUSTER_DIMS __cluster_dims__(CS, 1, 1)
#else  // 16 is over the portable 8: no compile-time shape, the launcher sets it (cuLaunchKernelEx, opt-in attribute)
#define CLUSTER_DIMS
#endif

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(NTHREADS, 1)
v_once_cluster_fwd(const __grid_constant__ TensorMap tmQ, const __grid_constant__ TensorMap tmK,
                   const __grid_constant__ TensorMap tmV, u16* __restrict__ Og, float* __restrict__ LSEg, int Nq,
                   int Nk, float scale_log2, float scale, int causal, int H, int group, int tc_alloc, int stages) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // = %cluster_ctarank for __cluster_dims__(CS, 1, 1); from blockIdx, ptxas knows it is warp-uniform (from the
    // special register it does not, and serialises every wgmma under a branch on T)
    const int rank = blockIdx.x % CS;
    const int n_qblocks = gridDim.x / CS;
    const int q_blk = blockIdx.x / CS;
    const int m_block = causal ? n_qblocks - 1 - q_blk : q_blk;  // causal: the longest rows first
    const int bh = blockIdx.y;
    const int b_idx = bh / H, h_idx = bh % H, hk_idx = h_idx / group;
    const int m0 = m_block * BLOCK_M;
    const int causal_off = Nk - Nq;
    const bool is_causal = causal != 0;

    const u32 s_base = (smem_addr(smem) + 1023u) & ~1023u;  // the same offset in every CTA: DSMEM maps by offset
    const u32 sQ = s_base;
    const u32 sRing = sQ + TILE_Q_BYTES;
    const u32 bar0 = sRing + stages * TILE_KV_BYTES;  // stages: 2..MAX_STAGES, as deep as the f slice leaves room
    const u32 sRed = bar0 + BAR_BYTES;  // f32 [RED_M(w)] m_r, [RED_L(w)] l_r of warpgroup w; [RED_MFIN] M, [RED_LFIN] l
    const u32 sMb = sRed + RED_BYTES;
    const u32 sF = sMb + tc_alloc * BLOCK_M * 4;
    const u32 full_q = bar0;
#define FULL(s) (bar0 + 8 * (1 + (s)))
#define EMPTY(s) (bar0 + 8 * (1 + MAX_STAGES + (s)))

    // this CTA's share of the visible key blocks (FA2's Tc, cut at the causal diagonal)
    int n_vis = Nk;
    if (is_causal) n_vis = max(0, min(Nk, min(m0 + BLOCK_M, Nq) + causal_off));
    const int tc_vis = (n_vis + BLOCK_N - 1) / BLOCK_N;
    const int per = (tc_vis + CS - 1) / CS;
    const int j_begin = min(rank * per, tc_vis);
    const int T = min(j_begin + per, tc_vis) - j_begin;
    if (per > tc_alloc || stages < 2 || stages > MAX_STAGES) __trap();  // the launcher's plan: never true

    if (tid == 0) {
        mbar_init(full_q, 1);
#pragma unroll
        for (int s = 0; s < MAX_STAGES; ++s) {
            mbar_init(FULL(s), 1);
            mbar_init(EMPTY(s), 4);  // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {
        // ------------------------------------------------ producer (FA2 Alg. 1 line 4, FA2 Alg. 1 line 7)
        if (warp == 0) {
            if (lane == 0 && T > 0) {
                mbar_expect_tx(full_q, TILE_Q_BYTES);
#pragma unroll
                for (int p = 0; p < PANELS; ++p) tma_load(sQ + p * BLOCK_M * 128, &tmQ, p * 64, m0, h_idx, b_idx, full_q);
                for (int u = 0; u < T; ++u) {  // K_j, then (after the barrier arrival) V_j through the same ring
                    const int slot = u % stages, use = u / stages;
                    if (use > 0) mbar_wait(EMPTY(slot), (use - 1) & 1);
                    mbar_expect_tx(FULL(slot), TILE_KV_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        tma_load(sRing + slot * TILE_KV_BYTES + p * BLOCK_N * 128, &tmK, p * 64, (j_begin + u) * BLOCK_N,
                                 hk_idx, b_idx, FULL(slot));
                }
            }
            __syncwarp();
        }
        cluster_arrive();  // reduction 1: the producer publishes nothing, and must not wait here (V needs slots
                           // that phase 2 frees only after this barrier)
        if (warp == 0) {
            if (lane == 0) {
                for (int u = T; u < 2 * T; ++u) {
                    const int slot = u % stages, use = u / stages;
                    if (use > 0) mbar_wait(EMPTY(slot), (use - 1) & 1);
                    mbar_expect_tx(FULL(slot), TILE_KV_BYTES);
#pragma unroll
                    for (int p = 0; p < PANELS; ++p)
                        tma_load(sRing + slot * TILE_KV_BYTES + p * BLOCK_N * 128, &tmV, p * 64,
                                 (j_begin + u - T) * BLOCK_N, hk_idx, b_idx, FULL(slot));
                }
            }
            __syncwarp();
        }
        cluster_wait();
        cluster_sync();  // reduction 2
        cluster_sync();  // exit guard
        return;
    }

    // ---------------------------------------------------------------------------------------- consumer
    const int cg = warp / 4 - 1;          // consumer warpgroup: local key blocks t = cg, cg + NWG, ...
    const int ctid = tid & 127, cw = warp & 3;
    const int Tw = T > cg ? (T - cg + NWG - 1) / NWG : 0;
    Phase1 p1;
    p1.m[0] = p1.m[1] = NEG_INF;
    p1.l[0] = p1.l[1] = 0.f;
    p1.sF = sF;
    p1.sMb = sMb;
    p1.ctid = ctid;
    p1.lane = lane;
    p1.cw = cw;
    p1.row0 = m0 + cw * 16;
    p1.Nk = Nk;
    p1.causal_off = causal_off;
    p1.m0 = m0;
    p1.causal = is_causal;
    p1.scale_log2 = scale_log2;

    // ---- phase 1: S_j = Q K_j^T, f_ij and m_ij kept. PAIRS: both products of a pair issued, the first one's
    // softmax while the second is on the tensor cores; else (two warpgroups, 2 slots) one block at a time, the
    // other warpgroup's product overlapping. No wgmma under a branch inside a loop and none in flight across a
    // back edge: either makes ptxas serialise every wgmma ----
    if (Tw > 0) {
        float s0[BLOCK_N / 2];
        mbar_wait(full_q, 0);
        int i = 0;
#if PAIRS
        float s1[BLOCK_N / 2];
        for (; i + 1 < Tw; i += 2) {
            const int t0 = cg + NWG * i, t1 = t0 + NWG;
            mbar_wait(FULL(t0 % stages), (t0 / stages) & 1);
            issue_qk(s0, sQ, sRing + (t0 % stages) * TILE_KV_BYTES, 0);
            mbar_wait(FULL(t1 % stages), (t1 / stages) & 1);
            issue_qk(s1, sQ, sRing + (t1 % stages) * TILE_KV_BYTES, 0);
            wgmma_wait<1>();
            wgmma_fence_operand(s0);
            if (lane == 0) mbar_arrive(EMPTY(t0 % stages));
            phase1_block(s0, p1, t0, j_begin + t0);
            wgmma_wait<0>();
            wgmma_fence_operand(s1);
            if (lane == 0) mbar_arrive(EMPTY(t1 % stages));
            phase1_block(s1, p1, t1, j_begin + t1);
        }
#endif
        for (; i < Tw; ++i) {  // PAIRS: an odd count's last block
            const int t0 = cg + NWG * i;
            mbar_wait(FULL(t0 % stages), (t0 / stages) & 1);
            issue_qk(s0, sQ, sRing + (t0 % stages) * TILE_KV_BYTES, 0);
            wgmma_wait<0>();
            wgmma_fence_operand(s0);
            if (lane == 0) mbar_arrive(EMPTY(t0 % stages));
            phase1_block(s0, p1, t0, j_begin + t0);
        }
    }

    // ---- cluster reduction 1: M and l of every row from all ranks' (and warpgroups') m_r, l_r ----
    const int rowl[2] = {cw * 16 + (lane >> 2), cw * 16 + (lane >> 2) + 8};  // the thread's rows in the Q block
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float l_row = quad_sum(p1.l[h]);
        if ((lane & 3) == 0) {
            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sRed + (RED_M(cg) + rowl[h]) * 4), "f"(p1.m[h]) : "memory");
            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sRed + (RED_L(cg) + rowl[h]) * 4), "f"(l_row) : "memory");
        }
    }
    cluster_arrive();
    cluster_wait();
    // every partial's m and l first (all DSMEM loads in flight at once: one remote latency, not 3 CS NWG), then
    // the max and the sum
    float Ms[2];
    {
        float mv[2][CS * NWG], lv[2][CS * NWG];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int r = 0; r < CS; ++r)
#pragma unroll
                for (int w = 0; w < NWG; ++w) {
                    mv[h][r * NWG + w] = dsmem_ld_f32(dsmem_map(sRed + (RED_M(w) + rowl[h]) * 4, r));
                    lv[h][r * NWG + w] = dsmem_ld_f32(dsmem_map(sRed + (RED_L(w) + rowl[h]) * 4, r));
                }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float M = NEG_INF;
#pragma unroll
            for (int k = 0; k < CS * NWG; ++k) M = fmaxf(M, mv[h][k]);
            Ms[h] = (M == NEG_INF) ? 0.f : M * scale_log2;
            float l = 0.f;
#pragma unroll
            for (int k = 0; k < CS * NWG; ++k) l += lv[h][k] * ex2(mv[h][k] * scale_log2 - Ms[h]);  // empty: 0 * 0
            if ((lane & 3) == 0 && cg == 0) {
                asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sRed + (RED_MFIN + rowl[h]) * 4), "f"(M) : "memory");
                asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sRed + (RED_LFIN + rowl[h]) * 4), "f"(l) : "memory");
            }
        }
    }

    // ---- phase 2 (#941 step 5, once): O_w = sum_j (f_ij e^(m_ij - M)) V_j over this warpgroup's blocks; the
    // ring carries V_t as item u = T + t ----
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    if (Tw > 0) {
        u32 pa0[KN][4], pa1[KN][4];
        build_p(pa0, sF, sMb, cg, ctid, cw, lane, Ms, scale_log2);
        for (int i = 0; i < Tw; i += 2) {
            const int t0 = cg + NWG * i, u0 = T + t0;
            mbar_wait(FULL(u0 % stages), (u0 / stages) & 1);
            wgmma_fence_operand(o);
            issue_pv(o, pa0, sRing + (u0 % stages) * TILE_KV_BYTES);
            if (i + 1 < Tw) build_p(pa1, sF, sMb, t0 + NWG, ctid, cw, lane, Ms, scale_log2);  // during the product
            wgmma_wait<0>();
            wgmma_fence_operand(o);
            if (lane == 0) mbar_arrive(EMPTY(u0 % stages));
            if (i + 1 < Tw) {
                const int u1 = u0 + NWG;
                mbar_wait(FULL(u1 % stages), (u1 / stages) & 1);
                issue_pv(o, pa1, sRing + (u1 % stages) * TILE_KV_BYTES);
                if (i + 2 < Tw) build_p(pa0, sF, sMb, t0 + 2 * NWG, ctid, cw, lane, Ms, scale_log2);
                wgmma_wait<0>();
                wgmma_fence_operand(o);
                if (lane == 0) mbar_arrive(EMPTY(u1 % stages));
            }
        }
    }

    // ---- cluster reduction 2: the CTA's O_r (its warpgroups' sum) into the ring as fp32, 16-byte chunks
    // XOR-swizzled by row; then CTA r sums rows [r*64/CS, (r+1)*64/CS) of every rank's ----
    named_sync(1, 128 * NWG);  // every consumer warp's products are done reading the ring
    const u32 sO = sRing;
#if NWG == 2
    if (cg == 1) store_o(sO, o, rowl, lane);
    named_sync(1, 256);
    if (cg == 0) add_o(sO, o, rowl, lane);  // each thread reads back exactly what its twin of warpgroup 1 wrote
#else
    store_o(sO, o, rowl, lane);
#endif
    cluster_arrive();
    cluster_wait();
    u16* o_g = Og + (long long)bh * Nq * D;
    const int ct = tid - 128;  // 0 .. 128 NWG - 1
    {
        // a thread's items (16-byte chunks of the rank's rows), every rank's partial of each loaded first: all
        // D / (8 NWG) remote loads in flight at once (one DSMEM latency), then summed, scaled by 1 / l, written
        constexpr int TOTAL = ROWS_PER_RANK * (D / 4), ITEMS = (TOTAL + 128 * NWG - 1) / (128 * NWG);
        float4 x[ITEMS][CS];
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int idx = ct + it * 128 * NWG;
            const int r = rank * ROWS_PER_RANK + idx / (D / 4), c = idx % (D / 4);
            const u32 local = sO + r * (D * 4) + ((c ^ (r & 7)) << 4);
#pragma unroll
            for (int rr = 0; rr < CS; ++rr)
                if (idx < TOTAL) x[it][rr] = dsmem_ld_f32x4(dsmem_map(local, rr));
        }
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int idx = ct + it * 128 * NWG;
            const int r = rank * ROWS_PER_RANK + idx / (D / 4), c = idx % (D / 4);
            if (idx < TOTAL && m0 + r < Nq) {
                float4 acc = x[it][0];
#pragma unroll
                for (int rr = 1; rr < CS; ++rr) {
                    acc.x += x[it][rr].x;
                    acc.y += x[it][rr].y;
                    acc.z += x[it][rr].z;
                    acc.w += x[it][rr].w;
                }
                float l;
                asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(l) : "r"(sRed + (RED_LFIN + r) * 4) : "memory");
                const float inv = (l > 0.f) ? 1.f / l : 0.f;  // a row that saw no key (or NaN): O = 0
                uint2 val;
                val.x = pack2(acc.x * inv, acc.y * inv);
                val.y = pack2(acc.z * inv, acc.w * inv);
                *(uint2*)(o_g + (long long)(m0 + r) * D + c * 4) = val;
            }
        }
    }
    if (ct < ROWS_PER_RANK) {
        const int r = rank * ROWS_PER_RANK + ct;
        if (m0 + r < Nq) {
            float M, l;
            asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(M) : "r"(sRed + (RED_MFIN + r) * 4) : "memory");
            asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(l) : "r"(sRed + (RED_LFIN + r) * 4) : "memory");
            LSEg[(long long)bh * Nq + m0 + r] = (l > 0.f) ? M * scale + logf(l) : NEG_INF;
        }
    }
    cluster_sync();  // no CTA leaves while another may still read its partial O
#undef FULL
#undef EMPTY
}
