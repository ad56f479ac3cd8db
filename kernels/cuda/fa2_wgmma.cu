// fa2_wgmma.cu -- FlashAttention-2 forward on Hopper tensor cores (wgmma.mma_async, sm_90a).
//
// Same algorithm, same signature and same masking rules as fa2_tc.cu; what changes is the instruction.
// mma.sync (fa2_tc.cu) is a warp-wide 16x8x16 product with both operands in registers, so each warp
// first copies its B fragments out of shared memory with ldmatrix, and the instruction blocks the warp.
// wgmma is a warpgroup-wide (4 warps, 128 threads) 64xNx16 product that reads B (and optionally A)
// straight from shared memory through a 64-bit descriptor, and runs asynchronously: the warpgroup can
// do its softmax while the tensor cores work. That is the route to the third of Hopper's tensor
// throughput that mma.sync cannot reach (lab/NOTES-tc.md, "What stands in the way of cuDNN").
//
// FlashAttention-2 paper (Dao 2023), Algorithm 1, for one (batch, head) and one Q block i (Br = 64*NWG
// rows; warpgroup g owns rows 64g..64g+63, warp w of it rows 16w..16w+15):
//   FA2 Alg. 1 line 4   load Qi from HBM to SRAM                                  -> cp.async, stays in smem (A operand)
//   FA2 Alg. 1 line 5   on chip, O = 0, l = 0, m = -inf                            -> registers, fp32
//   FA2 Alg. 1 line 6   for j = Tc_visible-1 .. 0 (masked blocks first, hidden blocks skipped)
//   FA2 Alg. 1 line 7     load Kj, Vj from HBM to SRAM                             -> cp.async, STAGES-slot rings, STAGES-1 steps ahead
//   FA2 Alg. 1 line 8     S = Qi Kj^T                                              -> wgmma SS (A = Q, B = K, both K-major)
//   FA2 Alg. 1 line 9     m_new = max(m, rowmax(S)), P = exp(S - m_new), l = ...   -> registers, exp2 domain
//   FA2 Alg. 1 line 10    O = diag(e^(m - m_new)) O + P Vj                         -> wgmma RS (A = P from registers,
//                                                                          B = V, MN-major: no transpose copy)
//   FA2 Alg. 1 lines 12-15 O = diag(l)^-1 O, L = m + log l, write Oi, Li           -> staged through the warp's Q rows
//
// Overlap (OVERLAP=1, FA3 paper's "intra-warpgroup pipelining"): step j issues S_j = Q K_j^T and then
// O += P_{j+1} V_{j+1} (P of the previous step), waits for S_j only, and runs the softmax of S_j while the
// PV product is still on the tensor cores. The O rescale of FA2 Alg. 1 line 10 waits for that product to finish.
// OVERLAP=0 waits for both products before the softmax (the ablation).
//
// Shared memory layout: the 128-byte swizzle that wgmma descriptors understand. A tile of R rows x d
// columns is stored as d/64 panels of R rows x 64 columns (128 bytes per row); 16-byte chunk c of row r
// of a panel sits at r*128 + 16*(c ^ (r % 8)). Tiles are 1024-byte aligned (the swizzle is a function of
// address bits 4-9). Descriptors: K-major (Q, K): SBO = 1024 (next 8 rows), a k16 step adds 32 bytes
// inside the panel; MN-major (V as B of P V): LBO = next 64-column panel, SBO = next 8 k-rows.
//
// Layout of the arguments: q (B, H, Nq, d), k/v (B, H, Nk, d), o like q, lse (B, H, Nq), contiguous.
// grid = (Tr, B*H). Causal is bottom-right: query i sees key j iff j <= i + Nk - Nq.
// Compile-time knobs: HEAD_DIM (64|128), BLOCK_N (Bc: 64|96|128|192|256), NWG (warpgroups, Br = 64*NWG),
// IS_BF16, OVERLAP, STAGES (slots of the K and V rings), MIN_BLOCKS (CTAs per SM the register cap aims at).
//
// Superseded as forward()'s kernel by fa2_wgmma_tma.cu (TMA + warp specialisation, 1.3-1.5x faster at d = 128); kept
// as the readable step from fa2_tc.cu and the sm_90a kernel without TMA (kernels/fa2_wgmma.py named_build(d,
// "cp.async")). Its version log and sweeps: docs/hopper-fa2-history.md.

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef NWG
#define NWG 2
#endif
#ifndef IS_BF16
#define IS_BF16 0
#endif
#ifndef OVERLAP
#define OVERLAP 1
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#define D HEAD_DIM
#define BLOCK_M (64 * NWG)
#define NTHREADS (128 * NWG)
#define CH (D / 8)           // 16-byte chunks per row
#define NT (BLOCK_N / 8)     // n8 column tiles of S per thread row
#define KD (D / 16)          // k16 steps of S = Q K^T
#define KN (BLOCK_N / 16)    // k16 steps of O += P V

static_assert(D == 64 || D == 128, "HEAD_DIM must be 64 or 128");
static_assert(BLOCK_N == 64 || BLOCK_N == 96 || BLOCK_N == 128 || BLOCK_N == 192 || BLOCK_N == 256,
              "BLOCK_N must be a wgmma N of wgmma.cuh");
static_assert(NWG >= 1 && NWG <= 3, "1..3 warpgroups");
static_assert(STAGES >= 2 && STAGES <= 4, "2..4 ring slots");

#define TILE_Q_BYTES (BLOCK_M * D * 2)
#define TILE_KV_BYTES (BLOCK_N * D * 2)
// smem: [Q][K slots 0..STAGES-1][V slots 0..STAGES-1], each 1024-byte aligned (tile sizes are multiples)
#define SMEM_BYTES (TILE_Q_BYTES + 2 * STAGES * TILE_KV_BYTES)

#include "tc_common.cuh"  // cp.async, pack2, ex2, quad reductions
#include "wgmma.cuh"      // wgmma_ss / wgmma_rs / fence / commit / wait

#include "wgmma_fa2.cuh"   // layout, descriptors, the two products, softmax, epilogue

// rows [row0, row0 + ROWS) of a (n_rows, D) matrix into a swizzled tile; rows >= n_rows are zero-filled.
// Thread t copies chunk t % CH of rows t / CH + i * STEP; STEP % 8 == 0 keeps the swizzle term fixed.
template <int ROWS>
__device__ __forceinline__ void load_tile_sw128(u32 s_tile, const u16* g, int row0, int n_rows, int tid) {
    constexpr int STEP = NTHREADS / CH;
    static_assert(NTHREADS % CH == 0 && STEP % 8 == 0, "copy mapping");
    const int r = tid / CH, ch = tid % CH;
    const u16* src = g + (long long)(row0 + r) * D + ch * 8;
    const u32 dst = s_tile + sw128<ROWS>(r, ch);
#pragma unroll
    for (int i = 0; i < (ROWS + STEP - 1) / STEP; ++i) {
        if (ROWS % STEP == 0 || r + i * STEP < ROWS) {
            const bool ok = row0 + r + i * STEP < n_rows;
            cp_async16(dst + i * STEP * 128, ok ? (const void*)(src + i * STEP * D) : (const void*)g, ok ? 16 : 0);
        }
    }
}

// cp.async writes through the generic proxy, wgmma reads through the async proxy: order the two
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
fa2_wgmma_fwd(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
              u16* __restrict__ Og, float* __restrict__ LSEg, int Nq, int Nk, float scale_log2, float scale,
              int causal) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    // heavy (bottom) Q blocks first when causal: better tail balance
    const int m_block = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const long long bh = blockIdx.y;
    const int m0 = m_block * BLOCK_M;
    const u16* q_g = Qg + bh * Nq * D;
    const u16* k_g = Kg + bh * Nk * D;
    const u16* v_g = Vg + bh * Nk * D;
    const int causal_off = Nk - Nq;
    const bool is_causal = causal != 0;

    // 1024-byte aligned base (the dynamic smem window is, but do not rely on it)
    const u32 s_base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 sQ = s_base;
    const u32 sK0 = sQ + TILE_Q_BYTES;
    const u32 sV0 = sK0 + STAGES * TILE_KV_BYTES;

    int n_vis = Nk;  // key columns the last row of this block sees; hidden blocks are never visited
    if (is_causal) n_vis = max(0, min(Nk, min(m0 + BLOCK_M, Nq) + causal_off));
    const int T = (n_vis + BLOCK_N - 1) / BLOCK_N;  // key blocks visited, swept j = T-1 .. 0

    // FA2 Alg. 1 line 7 as a ring: step t (0..T) computes S_j with j = T-1-t and O += P_{j+1} V_{j+1}, so load group t
    // holds K_{T-1-t} and V_{T-t}, both in slot t % STAGES. Groups 0..STAGES-1 are issued up front; step
    // t >= 1 issues group t + STAGES-1 into the slot that step t-1 used (free after step t's barrier).
    auto issue_group = [&](int t) {
        if (t <= T - 1) load_tile_sw128<BLOCK_N>(sK0 + (t % STAGES) * TILE_KV_BYTES, k_g, (T - 1 - t) * BLOCK_N, Nk, tid);
        if (t >= 1 && t <= T) load_tile_sw128<BLOCK_N>(sV0 + (t % STAGES) * TILE_KV_BYTES, v_g, (T - t) * BLOCK_N, Nk, tid);
        cp_async_commit();  // always: every thread counts the same groups (empty ones included)
    };
    load_tile_sw128<BLOCK_M>(sQ, q_g, m0, Nq, tid);  // FA2 Alg. 1 line 4, in group 0
#pragma unroll
    for (int t = 0; t < STAGES; ++t) issue_group(t);

    // FA2 Alg. 1 line 5
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    Softmax sm;
    sm.m[0] = sm.m[1] = NEG_INF;
    sm.l[0] = sm.l[1] = 0.f;
    const int row0 = m0 + warp * 16;  // first row of this warp (warpgroup g: warps 4g..4g+3)
    float s[BLOCK_N / 2];
    u32 pa[KN][4];
    float alpha[2];

    if (T > 0) {
        // step 0 (j = T-1): S and its softmax; its P V is issued in step 1
        cp_async_wait<STAGES - 1>();  // group 0 (Q, K_{T-1}) landed
        fence_proxy_async();
        __syncthreads();
        issue_qk(s, sQ, sK0, wg);
        wgmma_wait<0>();
        wgmma_fence_operand(s);
        const int n0 = (T - 1) * BLOCK_N;
        const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
        if (need_mask) softmax_step<true>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
        else softmax_step<false>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
        pack_p(pa, s);
    }
    // FA2 Alg. 1 line 6: step t does S_j = Q K_j^T and O += P_{j+1} V_{j+1}
    for (int t = 1; t < T; ++t) {
        const int j = T - 1 - t, n0 = j * BLOCK_N, slot = t % STAGES;
        cp_async_wait<STAGES - 2>();  // group t (K_j, V_{j+1}) landed
        fence_proxy_async();
        __syncthreads();  // ... for every thread; and every warpgroup is done with step t-1's slot
        issue_qk(s, sQ, sK0 + slot * TILE_KV_BYTES, wg);
        wgmma_fence_operand(o);
        issue_pv(o, pa, sV0 + slot * TILE_KV_BYTES);
        issue_group(t + STAGES - 1);
#if OVERLAP
        wgmma_wait<1>();  // S_j done; P_{j+1} V_{j+1} may still run during the softmax
#else
        wgmma_wait<0>();
#endif
        wgmma_fence_operand(s);
        const bool need_mask = (n0 + BLOCK_N > Nk) || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
        const bool moved = need_mask
            ? softmax_step<true>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2)
            : softmax_step<false>(s, sm, alpha, row0, n0, lane, Nk, causal_off, is_causal, scale_log2);
        wgmma_wait<0>();  // P_{j+1} V_{j+1} done: O and the P registers are free
        wgmma_fence_operand(o);
        if (moved) rescale_o(o, alpha);  // exact skip: alpha = 1 for every row of the warp
        pack_p(pa, s);
    }
    if (T > 0) {  // step T: the last P V (block j = 0)
        cp_async_wait<STAGES - 2>();
        fence_proxy_async();
        __syncthreads();
        wgmma_fence_operand(o);
        issue_pv(o, pa, sV0 + (T % STAGES) * TILE_KV_BYTES);
        wgmma_wait<0>();
        wgmma_fence_operand(o);
    }
    cp_async_wait<0>();
    __syncthreads();  // every Q copy has landed and every warpgroup is done with Q before rows are reused

    write_o_lse(o, sm, sQ, Og, LSEg, bh, m0, Nq, warp, lane, scale);
}
