// fa2_wgmma_bwd.cu -- FlashAttention-2 backward on Hopper tensor cores (wgmma.mma_async, sm_90a).
//
// FlashAttention-2 paper (Dao 2023), Algorithm 2, in three kernels (FA3's backward has the same split):
//   fa2_wgmma_bwd_pre   FA2 Alg. 2 line 4      D = rowsum(dO o O) (fp32, padded to Nq_pad), L2 = lse * log2(e) with
//                                   -inf (a row that saw no key) and padding mapped to +inf, so that
//                                   P = exp2(S*scale*log2e - L2) is exactly 0 there; zeroes the fp32 dQ
//                                   accumulator (FA2 Alg. 2 line 3: dQ = 0).
//   fa2_wgmma_bwd       FA2 Alg. 2 line 5 on one CTA per (key block j, b*h_kv); Bc = 64*NWG keys, warpgroup g owns
//                                   keys 64g..64g+63 and their dK_j, dV_j rows in registers (fp32).
//   fa2_wgmma_bwd_dq    FA2 Alg. 2 line 20  dQ = scale * dQacc, rounded to fp16/bf16.
//
// The main kernel, for one key block j (keys n0..n0+Bc-1):
//   FA2 Alg. 2 line 6   load K_j, V_j from HBM to SRAM                  -> cp.async, resident in smem for the whole loop
//   FA2 Alg. 2 line 7   dK_j = 0, dV_j = 0                              -> registers
//   FA2 Alg. 2 line 8   for i = first Q block that sees block j .. Tr-1 (hidden Q blocks above the causal diagonal skipped)
//   FA2 Alg. 2 line 9     load Q_i, dO_i, L_i, D_i                      -> cp.async, STAGES-slot ring, STAGES-1 blocks ahead
//   FA2 Alg. 2 line 10    S^T = K_j Q_i^T                               -> wgmma SS (A = K_j rows of this warpgroup, B = Q_i)
//   FA2 Alg. 2 line 11    P^T = exp(S^T * scale - L_i)                  -> registers, exp2 domain, masked entries 0
//   FA2 Alg. 2 line 12    dV_j += P^T dO_i                              -> wgmma RS (A = P^T from registers, B = dO_i MN-major)
//   FA2 Alg. 2 line 13    dP^T = V_j dO_i^T                             -> wgmma SS (issued with FA2 Alg. 2 line 10, before the softmax)
//   FA2 Alg. 2 line 14    dS^T = P^T o (dP^T - D_i)                     -> registers; also stored to smem (for FA2 Alg. 2 line 15)
//   FA2 Alg. 2 line 15    dQ_i += dS K_j                                -> wgmma SS, both operands MN-major (dS^T tile, K_j),
//                                                               then fp32 red.global.add.v2 into dQacc (HBM)
//   FA2 Alg. 2 line 16    dK_j += dS^T Q_i                              -> wgmma RS (A = dS^T from registers, B = Q_i MN-major)
//   FA2 Alg. 2 line 18    write dK_j (times scale), dV_j                -> from registers, fp16/bf16
// Computing S^T and dP^T (keys as the M dimension) rather than S and dP is FA3's trick: the accumulator
// layout of a wgmma is the register A layout of the next one, so P^T and dS^T feed dV and dK without
// touching shared memory; only dS goes through smem, once, for dQ.
//
// dQ: fp32 atomics into an HBM accumulator (FA2's and FA3's choice) rather than a second pass over the
// key blocks for dQ: a separate dQ pass recomputes S and dP (two more of the five products, +40% FLOPs)
// and re-reads K and V; the atomics cost Br*d fp32 reductions per (i, j) tile against 10*Br*Bc*d FLOPs.
// Each warpgroup computes a 64 x DQ_N slice of the Br x d tile (M slices when Br = 128, N slices when
// Br = 64), after a CTA barrier that completes the dS^T tile. Two ways to add it to HBM:
//   DQ_BULK=0  red.global.add.v2.f32 from registers (FA2's atomicAdd, two floats per instruction);
//   DQ_BULK=1  the slice goes to smem and one thread issues cp.reduce.async.bulk .add.f32 (a TMA
//              reduce, FA3's way) of the whole slice; the accumulator is then kept in fragment order
//              (fa2_wgmma_bwd_dq_bulk maps it back to rows). Also frees the registers the atomics'
//              addresses took: d=128 builds spill 0 B instead of 36.
// DQ_ABLATE (1: no atomics, 2: no dQ product) exists only to measure what dQ costs; its dQ is wrong.
//
// Layout of the arguments (v3): q, do_ (B, H, Nq, d) and k, v, dk, dv (B, H_kv, Nk, d) at any (batch, head, row)
// element strides (unit last stride, 16-byte rows: the launcher checks), passed as kernel arguments; o and dq the
// same in the pre and dq kernels. lse2, dd (B*H, Nq_pad) float; dqacc (B*H, Nq_pad, d) float. grid = (Tc, B*H_kv):
// grouped-query attention (query head h reads kv head h / G, G = H / H_kv) runs FA2 Alg. 2 line 8's loop once
// per query head of the group inside the CTA of key block j, so dK_j, dV_j sum over the group in registers
// (no repeated K/V, no atomics on dK/dV); the pre and dq kernels run over the B*H query heads. Causal is
// bottom-right: query i sees key j iff j <= i + Nk - Nq. Compile-time knobs: HEAD_DIM (64|128), NWG
// (warpgroups; Bc = 64*NWG), BR (Br: 64|128), STAGES (slots of the Q/dO ring), MIN_BLOCKS, IS_BF16,
// ORDER (the (query head, i) step order: 0 heads outer, i ascending; 1 i descending, heads inner; see q_block).
// Shared memory uses the 128-byte swizzle of wgmma_fa2.cuh (tiles of R rows x 64-column panels).
//
// DETERMINISTIC=1 (needs DQ_BULK=1): FA2 Alg. 2 line 15's dQ_i = sum_j dS_ij K_j is added in key-block order,
// so two runs give the same bits. A semaphore per (b*h, Q block i) in global memory counts the warpgroup
// reduces done; warpgroup w of key block j waits (ld.acquire spin, one thread) until it reads j*NWG -- all
// lower key blocks add into every Q block block j adds into, since causal hides a prefix of Q blocks from each
// key block, never a gap -- issues its bulk reduce-add, waits for it to be written (cp.async.bulk.wait_group 0,
// not .read), fences the async proxy and releases (red.release.gpu add 1). Slices of different warpgroups are
// disjoint, so their order within a key block does not matter. Progress: block j waits only on blocks < j of
// the same grid row, which are dispatched first; by induction on j each finishes every step, its waits being on
// still lower blocks, each of which processes the awaited tile. True in either ORDER: under ORDER=1 a lower block
// reaches it at the same step index (its step list is block j's followed by more steps, of lower i); under ORDER=0
// at a later one; under LPT (grid (B*H_kv, Tc)) every row's blocks < j are dispatched before any block j.
// Cost: the reduce no longer overlaps the next step (its issuing thread waits for the write), a CTA may stall
// behind the previous key block, a (B*H, Nq_pad/Br) int32 memset,
// and its own build (d=64 spills 104 B instead of 80). The default build does none of this.
//
// d = 96 (D_REAL=96) runs the HEAD_DIM=128 tiles: columns 96..127 are zero-filled by the tile loads (zero
// columns leave S, dP, P, dS unchanged), skipped by the o/do reads and the dq/dk/dv stores. d = 256 (NWG=1, BR=64,
// red atomics) runs three launches, PASS 0/1/2 (dK_j, dV_j columns 0..127 / 128..255 / dQ), each recomputing S^T
// and dP^T: its dK_j, dV_j and dQ slice do not fit beside them in registers (1.8x the MMA work; 0 B spilled).
// Version log: docs/hopper-fa2-history.md ("The backward's version log").

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef NWG
#define NWG 2
#endif
#ifndef BR
#define BR 64
#endif
#ifndef IS_BF16
#define IS_BF16 0
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef DQ_BULK  // 1: dQ slices staged in smem, one cp.reduce.async.bulk (TMA add) per warpgroup per step
#define DQ_BULK 0
#endif
#ifndef ROTATE  // 1: key block j starts its Q-block loop at its own offset, so concurrent CTAs reduce into
#define ROTATE 0    //    different dQ blocks instead of all into the same one at the same time
#endif
#ifndef DQ_V4  // DQ_BULK=0 only: lane pairs swap halves so each thread adds 4 contiguous floats (red .v4)
#define DQ_V4 0
#endif
#ifndef D_REAL  // the caller's head dim: 96 runs the HEAD_DIM=128 tiles with columns 96..127 zero-filled in smem
#define D_REAL HEAD_DIM
#endif
#ifndef PASS  // HEAD_DIM=256 only: 0 = dK_j, dV_j columns 0..127, 1 = columns 128..255, 2 = dQ (three launches)
#define PASS 0
#endif
#ifndef DETERMINISTIC  // 1 (DQ_BULK=1 only): dQ's reduce-adds into Q block i in key-block order (a semaphore per (b*h, i))
#define DETERMINISTIC 0
#endif
#ifndef ORDER  // the order of the (query head, Q block) steps of a key block: 0 = heads outer, i ascending; 1 = i
#define ORDER 0  // descending from Tr-1, the group's heads inner (every CTA of a kv head reads tile (h, i) at the same
#endif           // step (Tr-1-i)*G + h, so concurrent key blocks share Q_i, dO_i in L2; issue 42's causal GQA gap)
#ifndef LPT  // 1: grid (B*H_kv, Tc), key block j = blockIdx.y, so the x-fastest dispatch issues every (b, kv head)'s
#define LPT 0  //    key block 0, then every key block 1, ...: causal GQA's longest CTAs (G*Tr steps) first, not one
#endif         //    row's 0..Tc-1 after another's (a tail of long CTAs started late; issue 42's causal GQA gap)
#define KEY_BLOCK (LPT ? blockIdx.y : blockIdx.x)  // j (unsigned, as blockIdx: the same code as before the knob)
#ifndef DQ_ABLATE  // measurement only (wrong dQ): 1 = dQ product without the atomics, 2 = no dQ at all
#define DQ_ABLATE 0
#endif

#define D HEAD_DIM
#define BLOCK_N (64 * NWG)   // Bc: keys per CTA
#define BLOCK_M BR           // Br: queries per step
#define NTHREADS (128 * NWG)
#define CH (D / 8)           // 16-byte chunks per row
#define KD (D / 16)          // k16 steps of S^T = K Q^T and dP^T = V dO^T
#define NT (BLOCK_N / 8)     // (wgmma_fa2.cuh's names; its forward helpers are unused here)
#define KN (BLOCK_N / 16)
#define NQ8 (BLOCK_M / 8)    // n8 column (query) tiles of S^T per thread row
#define KM (BLOCK_M / 16)    // k16 steps of dV += P^T dO and dK += dS^T Q
#define KB (BLOCK_N / 16)    // k16 steps of dQ += dS K
#define MSL (BLOCK_M / 64)   // 64-row slices of the dQ tile
#define NSL (NWG / MSL)      // column slices of the dQ tile
#define DQ_N (D / NSL)       // columns of the dQ slice of one warpgroup

static_assert(D == 64 || D == 128 || D == 256, "HEAD_DIM must be 64, 128 or 256");
// d = 256: dK_j, dV_j (64 x 256 fp32 each per warpgroup) and dQ do not fit beside S^T and dP^T in registers, so
// the loop runs three times (PASS), each recomputing S^T and dP^T: dK/dV columns 0..127, then 128..255, then dQ
#define DKV_N (D == 256 ? 128 : D)                 // columns of dK_j, dV_j this launch accumulates
#define DKV_OFF (D == 256 && PASS == 1 ? 128 : 0)  // ... starting at this column
#define DO_DKV (D != 256 || PASS < 2)              // this launch computes dK_j, dV_j (FA2 Alg. 2 line 12 and FA2 Alg. 2 line 16)
#define DO_DQ (D != 256 || PASS == 2)              // this launch computes dQ (FA2 Alg. 2 line 15)
static_assert(D != 256 || (NWG == 1 && BR == 64 && !DQ_BULK && !DETERMINISTIC && STAGES == 2 && PASS >= 0 && PASS <= 2),
              "HEAD_DIM=256: NWG=1, BR=64, STAGES=2, red atomics (DQ_BULK=0), PASS 0..2");
static_assert(BLOCK_M == 64 || BLOCK_M == 128, "BR must be 64 or 128");
static_assert(NWG >= 1 && NWG <= 2, "1..2 warpgroups");
static_assert(NWG % MSL == 0, "every 64-row slice of dQ needs a warpgroup");
static_assert(DQ_N == 64 || DQ_N == 128 || (D == 256 && DQ_N == 256), "dQ slices must be whole 64-column swizzle panels");
static_assert(STAGES >= 2 && STAGES <= 3, "2..3 ring slots");
static_assert(D_REAL == D || (D == 128 && D_REAL == 96), "D_REAL: HEAD_DIM, or 96 on the 128 tiles");
#define COL_OK(c) (D_REAL == D || (c) < D_REAL)  // column c (a multiple of 8, or its pair) is the caller's
static_assert(ORDER == 0 || ORDER == 1, "ORDER: 0 (heads outer, i ascending) or 1 (i descending, heads inner)");
static_assert(!(ORDER && ROTATE), "ROTATE rotates ORDER=0's ascending i; ORDER=1 has no rotation");
static_assert(!DETERMINISTIC || DQ_BULK, "DETERMINISTIC orders the bulk reduce-adds: needs DQ_BULK=1");

#define TILE_KV_BYTES (BLOCK_N * D * 2)
#define TILE_Q_BYTES (BLOCK_M * D * 2)
#define TILE_DS_BYTES (BLOCK_N * BLOCK_M * 2)
#define LD_BYTES (8 * BLOCK_M)  // L2_i then D_i, fp32, per slot
#define DQ_SLICE_BYTES (64 * DQ_N * 4)  // one warpgroup's fp32 dQ slice (DQ_BULK)
// smem: [K][V][Q slots][dO slots][dS^T][dQ slices if DQ_BULK][L/D slots]; tiles are multiples of 1024 bytes
#define SMEM_BYTES (2 * TILE_KV_BYTES + 2 * STAGES * TILE_Q_BYTES + TILE_DS_BYTES + DQ_BULK * NWG * DQ_SLICE_BYTES + \
                    STAGES * LD_BYTES)

#include "tc_common.cuh"  // cp.async, pack2, ex2
#include "wgmma.cuh"      // wgmma_ss / wgmma_ss_tt / wgmma_rs / fence / commit / wait
#include "wgmma_fa2.cuh"  // sw128 layout, desc_sw128
#include "tma_pipe.cuh"   // bulk groups (commit, wait for the read, wait for all), named barriers

#define LOG2E_F 1.4426950408889634f
#define POS_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float u16_to_f32(u16 x) {
#if IS_BF16
    return __uint_as_float((u32)x << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x));
    return f;
#endif
}

// ------------------------------------------------------------------------------------------------
// FA2 Alg. 2 line 4 (and FA2 Alg. 2 line 3's dQ = 0): one block per 64 rows of one (b, h); CH threads per row
// ------------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(128)
fa2_wgmma_bwd_pre(const u16* __restrict__ Og, const u16* __restrict__ dOg, const float* __restrict__ LSEg,
                  float* __restrict__ L2g, float* __restrict__ Dg, float* __restrict__ dQacc, int Nq, int Nq_pad,
                  int H, long long o_sb, long long o_sh, long long o_sr, long long do_sb, long long do_sh,
                  long long do_sr) {
    const long long bh = blockIdx.y, b = bh / H, h = bh % H;
    const int ch = threadIdx.x % CH, rsub = threadIdx.x / CH;
    const int r_end = min(Nq_pad, (int)blockIdx.x * 64 + 64);
    for (int r = blockIdx.x * 64 + rsub; r < r_end; r += 128 / CH) {
        float acc = 0.f;
        if (r < Nq && COL_OK(ch * 8)) {  // padding columns (D_REAL < D) add 0 to D
            const uint4 o4 = *(const uint4*)(Og + b * o_sb + h * o_sh + r * o_sr + ch * 8);
            const uint4 g4 = *(const uint4*)(dOg + b * do_sb + h * do_sh + r * do_sr + ch * 8);
            const u32 ow[4] = {o4.x, o4.y, o4.z, o4.w}, gw[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                acc = fmaf(u16_to_f32(ow[e] & 0xffff), u16_to_f32(gw[e] & 0xffff), acc);
                acc = fmaf(u16_to_f32(ow[e] >> 16), u16_to_f32(gw[e] >> 16), acc);
            }
        }
#pragma unroll
        for (int w = 1; w < CH; w <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w);  // CH lanes of one row
        if (ch == 0) {
            float l2 = POS_INF;  // padding: P = 0
            if (r < Nq) {
                const float lse = LSEg[bh * Nq + r];
                l2 = (lse == NEG_INF) ? POS_INF : lse * LOG2E_F;  // a row that saw no key: P = 0, not NaN
            }
            L2g[bh * Nq_pad + r] = l2;
            Dg[bh * Nq_pad + r] = acc;
        }
        float4* z = (float4*)(dQacc + (bh * Nq_pad + r) * D + ch * 8);
        z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
        z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// ------------------------------------------------------------------------------------------------
// after the main kernel: dQ = scale * dQacc in the input dtype
// ------------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(128)
fa2_wgmma_bwd_dq(const float* __restrict__ dQacc, u16* __restrict__ dQg, int Nq, int Nq_pad, float scale, int H,
                 long long dq_sb, long long dq_sh, long long dq_sr) {
    const long long bh = blockIdx.y;
    u16* dq_g = dQg + (bh / H) * dq_sb + (bh % H) * dq_sh;
    const int ch = threadIdx.x % CH, rsub = threadIdx.x / CH;
    const int r_end = min(Nq, (int)blockIdx.x * 64 + 64);
    for (int r = blockIdx.x * 64 + rsub; r < r_end; r += 128 / CH) {
        const float4* src = (const float4*)(dQacc + (bh * Nq_pad + r) * D + ch * 8);
        const float4 a = src[0], b = src[1];
        uint4 out;
        out.x = pack2(a.x * scale, a.y * scale);
        out.y = pack2(a.z * scale, a.w * scale);
        out.z = pack2(b.x * scale, b.y * scale);
        out.w = pack2(b.z * scale, b.w * scale);
        if (COL_OK(ch * 8)) *(uint4*)(dq_g + r * dq_sr + ch * 8) = out;
    }
}

// DQ_BULK's accumulator: per (b*h, Q block i, warpgroup slice) 64*DQ_N floats in the order the slice leaves
// the registers: float4 j of thread t (dq[4j..4j+3]) at (j*128 + t)*4, so the smem staging is conflict-free
// and the reduce is one contiguous bulk copy. This kernel maps it back to rows: grid = (Nq_pad/Br, B*H).
extern "C" __global__ void __launch_bounds__(128)
fa2_wgmma_bwd_dq_bulk(const float* __restrict__ dQacc, u16* __restrict__ dQg, int Nq, int Nq_pad, float scale,
                      int H, long long dq_sb, long long dq_sh, long long dq_sr) {
    const long long bh = blockIdx.y;
    u16* dq_g = dQg + (bh / H) * dq_sb + (bh % H) * dq_sh;
    const int i = blockIdx.x, t = threadIdx.x, wq = t >> 5, lane = t & 31;
    const float* src = dQacc + ((bh * (Nq_pad / BLOCK_M) + i) * NWG) * (64 * DQ_N);
#pragma unroll
    for (int w = 0; w < NWG; ++w) {
        const int ms = w % MSL, ns = w / MSL;
        const int r0 = i * BLOCK_M + ms * 64 + wq * 16 + (lane >> 2);
        for (int j = 0; j < DQ_N / 8; ++j) {
            const float4 f = *(const float4*)(src + w * (64 * DQ_N) + (j * 128 + t) * 4);
            const int col = ns * DQ_N + 8 * j + 2 * (lane & 3);
            if (!COL_OK(col)) continue;
            if (r0 < Nq) *(u32*)(dq_g + r0 * dq_sr + col) = pack2(f.x * scale, f.y * scale);
            if (r0 + 8 < Nq) *(u32*)(dq_g + (r0 + 8) * dq_sr + col) = pack2(f.z * scale, f.w * scale);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// main kernel helpers
// ------------------------------------------------------------------------------------------------
// rows [row0, row0 + ROWS) of a (n_rows, D) matrix with row stride ld (elements; 16-byte rows, checked by the
// launcher) into a swizzled tile; rows >= n_rows are zero-filled
template <int ROWS>
__device__ __forceinline__ void load_tile_sw128(u32 s_tile, const u16* g, long long ld, int row0, int n_rows, int tid) {
    constexpr int STEP = NTHREADS / CH;
    static_assert(NTHREADS % CH == 0 && ROWS % STEP == 0, "copy mapping");
    const int r = tid / CH, ch = tid % CH;
    const u16* src = g + (long long)(row0 + r) * ld + ch * 8;
    const u32 dst = s_tile + sw128<ROWS>(r, ch);
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const bool ok = row0 + r + i * STEP < n_rows && COL_OK(ch * 8);  // D_REAL < D: zero columns, so S, dP
                                                                         // and the padding columns' products are 0
        // STEP % 8 == 0: the swizzle of row r + i*STEP is row r's; else (d = 256: 4 rows per pass) its own
        const u32 d_i = STEP % 8 == 0 ? dst + i * STEP * 128 : s_tile + sw128<ROWS>(r + i * STEP, ch);
        cp_async16(d_i, ok ? (const void*)(src + i * STEP * ld) : (const void*)g, ok ? 16 : 0);
    }
}

__device__ __forceinline__ void bulk_reduce_add_f32(float* gdst, u32 ssrc, int bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(gdst), "r"(ssrc), "r"(bytes) : "memory");
    bulk_commit();
}

// DETERMINISTIC's semaphore: an acquire load and a release add at GPU scope, and a fence between the proxies
__device__ __forceinline__ int ld_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_add(int* p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ctaid_y() {  // the grid row (b, kv head): %ctaid.y, or %ctaid.x under LPT
    unsigned y;
#if LPT
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(y));
#else
    asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(y));
#endif
    return y;
}
__device__ __forceinline__ void fence_proxy_async_all() { asm volatile("fence.proxy.async;\n" ::: "memory"); }

__device__ __forceinline__ void red_add_v4(float* addr, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}
__device__ __forceinline__ void red_add_v2(float* addr, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

#include "wgmma_bwd.cuh"  // fence_proxy_async, lds_f2, issue_t (S^T, dP^T), issue_dq (dQ), pack_frag

// FA2 Alg. 2 line 12 and FA2 Alg. 2 line 16: acc += X^T B_i, X^T from registers, B = dO_i or Q_i (k = query rows, d contiguous: MN-major)
__device__ __forceinline__ void issue_acc(float (&acc)[DKV_N / 2], const u32 (&xa)[KM][4], u32 sB) {
    sB += (DKV_OFF / 64) * (BLOCK_M * 128);  // d = 256, PASS 1: B's columns 128..255 (panels 2, 3)
    wgmma_fence();
#pragma unroll
    for (int km = 0; km < KM; ++km) wgmma_rs<DKV_N>(acc, xa[km], desc_sw128(sB + km * 16 * 128, BLOCK_M * 128, 1024), 1);
    wgmma_commit();
}

// ------------------------------------------------------------------------------------------------
// FA2 Alg. 2 line 5 on: the loop over key blocks, one per CTA
// ------------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
fa2_wgmma_bwd(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
              const u16* __restrict__ dOg, const float* __restrict__ L2g, const float* __restrict__ Dg,
              float* __restrict__ dQacc, u16* __restrict__ dKg, u16* __restrict__ dVg, int Nq, int Nk, int Nq_pad,
              float scale_log2, float scale, int causal, int H, int G, int* __restrict__ sem,
              long long q_sb, long long q_sh, long long q_sr, long long k_sb, long long k_sh, long long k_sr,
              long long v_sb, long long v_sh, long long v_sr, long long do_sb, long long do_sh, long long do_sr,
              long long dk_sb, long long dk_sh, long long dk_sr, long long dv_sb, long long dv_sh, long long dv_sr) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, wq = warp & 3;
    // grid.y (grid.x under LPT) = B * H_kv: (b, kv head hk). Re-read from %ctaid.y (.x) where used (a volatile read
    // cannot be hoisted), so b, hk and b*H + hk*G (the group's first query head) are not held in registers across the
    // loop (at d=64 the loop runs at the 255-register cap: keeping them live spilled more)
    auto b_of = [&]() { return (int)(ctaid_y() / (unsigned)(H / G)); };
    auto hk_of = [&]() { return (int)(ctaid_y() % (unsigned)(H / G)); };
    auto bh0_of = [&]() { const unsigned y = ctaid_y(), hkv = H / G; return (long long)(y / hkv) * H + (y % hkv) * G; };
    const int n0 = KEY_BLOCK * BLOCK_N;  // causal: low key blocks see the most Q blocks and start first
    const int causal_off = Nk - Nq;
    const bool is_causal = causal != 0;

    const u32 s_base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 sK = s_base, sV = sK + TILE_KV_BYTES;
    const u32 sQ0 = sV + TILE_KV_BYTES, sdO0 = sQ0 + STAGES * TILE_Q_BYTES;
    const u32 sdS = sdO0 + STAGES * TILE_Q_BYTES, sdQ0 = sdS + TILE_DS_BYTES;
    const u32 sLD0 = sdQ0 + DQ_BULK * NWG * DQ_SLICE_BYTES;

    // FA2 Alg. 2 line 8: the first query that sees key n0 is n0 - causal_off; Q blocks above it are hidden
    const int i_first = is_causal ? max(0, n0 - causal_off) / BLOCK_M : 0;
    const int T = (Nq + BLOCK_M - 1) / BLOCK_M - i_first;
    const int TG = T > 0 ? G * T : 0;  // steps: every (query head of the group, i) pair (GQA: dK_j, dV_j sum over it)
    const int rot = ROTATE ? (int)(KEY_BLOCK % (unsigned)max(T, 1)) : 0;
    // FA2 Alg. 2 line 8's i of step t and its query head (of the group: 0..G-1); the only places t is mapped.
    // ORDER=0: t = h*T + (i - i_first). ORDER=1: t = (Tr-1 - i)*G + h, the same step in every key block that sees
    // tile (h, i) (Tr - 1 = i_first + T - 1)
    auto q_block = [&](int t) {
        if (ORDER) return i_first + T - 1 - t / G;
        const int u = t % T;
        return i_first + (ROTATE ? (u + rot) % T : u);
    };
    auto head_of = [&](int t) { return ORDER ? t % G : t / T; };

    // FA2 Alg. 2 line 9 as a ring: group t holds Q_i, dO_i, L_i, D_i of i = q_block(t) in slot t % STAGES
    auto issue_group = [&](int t) {
        if (t < TG) {
            const int m0 = q_block(t) * BLOCK_M, slot = t % STAGES, b = b_of(), hq = hk_of() * G + head_of(t);
            load_tile_sw128<BLOCK_M>(sQ0 + slot * TILE_Q_BYTES, Qg + b * q_sb + hq * q_sh, q_sr, m0, Nq, tid);
            load_tile_sw128<BLOCK_M>(sdO0 + slot * TILE_Q_BYTES, dOg + b * do_sb + hq * do_sh, do_sr, m0, Nq, tid);
            const float* l_g = L2g + ((long long)b * H + hq) * Nq_pad;
            const float* d_g = Dg + ((long long)b * H + hq) * Nq_pad;
            const u32 sl = sLD0 + slot * LD_BYTES;
            if (tid < BLOCK_M / 4) cp_async16(sl + tid * 16, l_g + m0 + tid * 4, 16);  // padded: in bounds
            else if (tid < BLOCK_M / 2) cp_async16(sl + tid * 16, d_g + m0 + (tid - BLOCK_M / 4) * 4, 16);
        }
        cp_async_commit();  // always: every thread counts the same groups
    };
    // FA2 Alg. 2 line 6, in group 0
    load_tile_sw128<BLOCK_N>(sK, Kg + b_of() * k_sb + hk_of() * k_sh, k_sr, n0, Nk, tid);
    load_tile_sw128<BLOCK_N>(sV, Vg + b_of() * v_sb + hk_of() * v_sh, v_sr, n0, Nk, tid);
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) issue_group(t);

    // FA2 Alg. 2 line 7
    float dk[DKV_N / 2], dv[DKV_N / 2];
#pragma unroll
    for (int x = 0; x < DKV_N / 2; ++x) dk[x] = dv[x] = 0.f;

    const int key_l = wg * 64 + wq * 16 + (lane >> 2);  // this thread's key rows: key_l, key_l + 8 (of the block)
    const int ms = wg % MSL, ns = wg / MSL;             // this warpgroup's slice of the dQ tile
    const bool key_tail = n0 + BLOCK_N > Nk;

    for (int t = 0; t < TG; ++t) {  // (GQA) for each query head of the group: FA2 Alg. 2 line 8's for i
        const int m0 = q_block(t) * BLOCK_M, slot = t % STAGES;
        // this step's (b, query head): bh_of() where it is used (late: not live through the MMAs)
        auto bh_of = [&]() { return bh0_of() + head_of(t); };
        cp_async_wait<STAGES - 2>();  // group t landed (this thread's copies)
        fence_proxy_async();
        __syncthreads();  // ... everyone's; and every warpgroup is done with slot (t-1) % STAGES and dS^T
        issue_group(t + STAGES - 1);
        const u32 sQ = sQ0 + slot * TILE_Q_BYTES, sdO = sdO0 + slot * TILE_Q_BYTES;
        const u32 sL = sLD0 + slot * LD_BYTES, sDd = sL + 4 * BLOCK_M;

        float s[BLOCK_M / 2], dp[BLOCK_M / 2];
        issue_t(s, sK, sQ, wg);    // FA2 Alg. 2 line 10
        issue_t(dp, sV, sdO, wg);  // FA2 Alg. 2 line 13, on the tensor cores during FA2 Alg. 2 line 11
        wgmma_wait<1>();
        wgmma_fence_operand(s);

        // FA2 Alg. 2 line 11: P^T = exp2(S^T * scale * log2e - L2_i); hidden (key, query) pairs and key padding -> 0
        const bool need_mask = key_tail || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
#pragma unroll
        for (int nt = 0; nt < NQ8; ++nt) {
            const int c = 8 * nt + 2 * (lane & 3);  // query column (of the block) of elements e = 0, 1
            const float2 l2 = lds_f2(sL + c * 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float p0 = ex2(fmaf(s[4 * nt + 2 * h], scale_log2, -l2.x));
                float p1 = ex2(fmaf(s[4 * nt + 2 * h + 1], scale_log2, -l2.y));
                if (need_mask) {
                    const int key = n0 + key_l + 8 * h, q = m0 + c;
                    if (key >= Nk || (is_causal && key > q + causal_off)) p0 = 0.f;
                    if (key >= Nk || (is_causal && key > q + 1 + causal_off)) p1 = 0.f;
                }
                s[4 * nt + 2 * h] = p0;
                s[4 * nt + 2 * h + 1] = p1;
            }
        }
        if (DO_DKV) {
            u32 pa[KM][4];
            pack_frag(pa, s);
            wgmma_fence_operand(dv);
            issue_acc(dv, pa, sdO);  // FA2 Alg. 2 line 12
            wgmma_wait<1>();         // S^T, dP^T done; dV may still run
        } else {
            wgmma_wait<0>();         // d = 256 PASS 2: dP^T done
        }
        wgmma_fence_operand(dp);

        // FA2 Alg. 2 line 14: dS^T = P^T o (dP^T - D_i); stored transposed-as-is (rows = keys) for FA2 Alg. 2 line 15
#pragma unroll
        for (int nt = 0; nt < NQ8; ++nt) {
            const int c = 8 * nt + 2 * (lane & 3);
            const float2 dd = lds_f2(sDd + c * 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                dp[4 * nt + 2 * h] = s[4 * nt + 2 * h] * (dp[4 * nt + 2 * h] - dd.x);
                dp[4 * nt + 2 * h + 1] = s[4 * nt + 2 * h + 1] * (dp[4 * nt + 2 * h + 1] - dd.y);
                const u32 addr = sdS + sw128<BLOCK_N>(key_l + 8 * h, nt) + ((lane & 3) << 2);
                if (DO_DQ) asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pack2(dp[4 * nt + 2 * h], dp[4 * nt + 2 * h + 1]))
                             : "memory");
            }
        }
        if (DO_DKV) {
            u32 dsa[KM][4];
            pack_frag(dsa, dp);
            wgmma_fence_operand(dk);
            issue_acc(dk, dsa, sQ);  // FA2 Alg. 2 line 16
        }
#if DQ_ABLATE == 2 || !DO_DQ
        wgmma_wait<0>();
        wgmma_fence_operand(dk);
        wgmma_fence_operand(dv);
#else
        fence_proxy_async();     // the dS^T stores (generic proxy) before wgmma reads them (async proxy)
        __syncthreads();         // the whole dS^T tile is written

        float dq[DQ_N / 2];
        issue_dq(dq, sdS, sK, ms, ns);  // FA2 Alg. 2 line 15
        wgmma_wait<0>();
        wgmma_fence_operand(dq);
        if (DO_DKV) {  // (d = 256 PASS 2 has no dK_j, dV_j: a fence would keep them live)
            wgmma_fence_operand(dk);
            wgmma_fence_operand(dv);
        }
#if DQ_BULK
        if (DQ_ABLATE == 0) {
            const u32 sdq = sdQ0 + wg * DQ_SLICE_BYTES;
            const int t128 = tid & 127;
            if (t128 == 0) bulk_wait_read();  // the previous step's reduce has read this slice
            named_sync(1 + wg, 128);
#pragma unroll
            for (int j = 0; j < DQ_N / 8; ++j)
                asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"r"(sdq + (j * 128 + t128) * 16),
                             "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3]) : "memory");
            fence_proxy_async();  // generic-proxy stores before the bulk copy (async proxy) reads them
            named_sync(1 + wg, 128);
            if (t128 == 0) {
                const long long bh = bh_of();
#if DETERMINISTIC  // FA2 Alg. 2 line 15's sum over j in key-block order: wait for key blocks 0..j-1 (all of which
                   // add into Q block i: causal hides a prefix of Q blocks from each key block, never a gap)
                int* sem_i = sem + bh * (Nq_pad / BLOCK_M) + m0 / BLOCK_M;
                while (ld_acquire(sem_i) < (int)KEY_BLOCK * NWG) {}
                fence_proxy_async_all();  // the acquire (generic proxy) before the bulk reduce (async proxy)
#endif
                bulk_reduce_add_f32(dQacc + ((bh * (Nq_pad / BLOCK_M) + m0 / BLOCK_M) * NWG + wg) * (64 * DQ_N), sdq,
                                    DQ_SLICE_BYTES);
#if DETERMINISTIC
                bulk_wait_all();          // the reduce is written to global, not only read from smem
                fence_proxy_async_all();  // ... and ordered before the release (generic proxy)
                red_release_add(sem_i, 1);
#endif
            }
        }
#elif DQ_V4
        if (DQ_ABLATE == 0) {  // even lane: row g, cols 4c'..4c'+3; odd lane: row g+8, same cols (c' = lane%4 / 2)
            const bool odd = lane & 1;
            const int row = m0 + ms * 64 + wq * 16 + (lane >> 2) + (odd ? 8 : 0);
            float* dst = dQacc + bh_of() * Nq_pad * D + (long long)row * D + ns * DQ_N + 4 * ((lane & 3) >> 1);
#pragma unroll
            for (int nt = 0; nt < DQ_N / 8; ++nt) {
                const float r0 = __shfl_xor_sync(0xffffffffu, odd ? dq[4 * nt] : dq[4 * nt + 2], 1);
                const float r1 = __shfl_xor_sync(0xffffffffu, odd ? dq[4 * nt + 1] : dq[4 * nt + 3], 1);
                if (row < Nq) {
                    if (odd) red_add_v4(dst + 8 * nt, r0, r1, dq[4 * nt + 2], dq[4 * nt + 3]);
                    else red_add_v4(dst + 8 * nt, dq[4 * nt], dq[4 * nt + 1], r0, r1);
                }
            }
        }
#else
#pragma unroll
        for (int h = 0; h < 2 && DQ_ABLATE == 0; ++h) {
            const int row = m0 + ms * 64 + wq * 16 + (lane >> 2) + 8 * h;
            if (row < Nq) {
                float* dst = dQacc + bh_of() * Nq_pad * D + (long long)row * D + ns * DQ_N + 2 * (lane & 3);
#pragma unroll
                for (int nt = 0; nt < DQ_N / 8; ++nt) red_add_v2(dst + 8 * nt, dq[4 * nt + 2 * h], dq[4 * nt + 2 * h + 1]);
            }
        }
#endif
#if DQ_ABLATE == 1
        if (dq[0] == 12345.f) dQacc[bh_of() * Nq_pad * D] = dq[1];  // keeps the dQ product alive without its atomics
#endif
#endif
    }
    cp_async_wait<0>();
#if DQ_BULK
    if ((tid & 127) == 0) bulk_wait_all();  // the smem slices stay valid until the reduces are done
#endif

    // FA2 Alg. 2 line 18: dK_j = scale * sum dS^T Q (the scores were S * scale), dV_j
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = n0 + key_l + 8 * h;
        if (key < Nk) {
            const int b = b_of(), hk = hk_of();
            u16* dk_row = dKg + b * dk_sb + hk * dk_sh + key * dk_sr + DKV_OFF + 2 * (lane & 3);
            u16* dv_row = dVg + b * dv_sb + hk * dv_sh + key * dv_sr + DKV_OFF + 2 * (lane & 3);
#pragma unroll
            for (int dt = 0; dt < (D_REAL < D ? D_REAL : DKV_N) / 8 && DO_DKV; ++dt) {  // D_REAL < D: padding
                                                                                      // columns (all 0) not stored
                *(u32*)(dk_row + 8 * dt) = pack2(dk[4 * dt + 2 * h] * scale, dk[4 * dt + 2 * h + 1] * scale);
                *(u32*)(dv_row + 8 * dt) = pack2(dv[4 * dt + 2 * h], dv[4 * dt + 2 * h + 1]);
            }
        }
    }
}
