// v_once_tc.cu -- "multiply V once" (Dao-AILab/flash-attention issue #941) on tensor cores.
//
// For one (batch, head) and one Q block i (Br rows), as the issue proposes:
//   phase 1, for each visible key block j (forward):                        [issue: `for j in range(i+1)`]
//     S = Qi Kj^T                                          -> mma.sync m16n8k16, Q in registers
//     m_loc = rowmax(S); f_j = exp(S - m) ; l updated       -> registers, fp32; f_j stored as fp16/bf16
//       RESCALE_LAZY = 0 ('eager', the issue's code): m is the running max m_new; every earlier block
//         f_k (k < j) is multiplied by e^(m_old - m_new)   [issue: `fi_BLOCK[k] = fi_BLOCK[k] * exp(mi - mi_new)`]
//       RESCALE_LAZY = 1 ('lazy'): m is the block's own max m_j, kept per row and block; no earlier block
//         is touched
//     f_j goes to the f row: shared memory (PLACEMENT_SRAM = 1) or a global scratch buffer (= 0)
//   phase 2, for each visible block j:                                       [issue: `O = (fi / li) @ V`]
//     O += (f_j * c_j) Vj with V streamed block by block  -> mma.sync; c_j = 1 (eager) or e^(m_j - m) (lazy)
//   O = O / l, lse = m * scale + ln(l)                      (1/l is applied to the fp32 O, not to fp16 f:
//                                                            the same product, without f/l underflowing)
//
// The f row is thread-private: each thread stores exactly the A-fragment registers it will feed to the
// PV mma, 16 bytes per (m16 x k16) tile, lane-contiguous (conflict-free in smem, coalesced in HBM). So
// neither placement needs a barrier between writing f and reading it back, and eager rescaling is a
// private read-modify-write.
//
// smem: [2-slot ring of BLOCK_N x D tiles: K_0..K_{T-1} then V_0..V_{T-1}] [region], where region holds
// the Q staging tile first, then (lazy) the per-block row maxima (T x Br floats) and (sram) f (T x Br x Bc).
// Layout of q/k/v/o/lse as fa2_tc.cu; grid = (Tr, B*H); bottom-right causal; hidden key blocks skipped.
//
// Version log (details in bench/NOTES-tc.md):
//   v1  as above; Br = 64 (4 warps x 16 rows), Bc = 64, Q in registers, 2-slot cp.async ring.
//       Measured (H200 fp16, vs fa2_tc): 0.47-0.91x, never ahead; f fits in smem up to N=1536 (d=64) /
//       1024 (d=128) at 1 CTA/SM (tensor pipe 28%); spilled-lazy DRAM bytes = closed form within 1%;
//       spilled-eager runs at the DRAM bandwidth of its O(Tc^2) traffic. See docs/issue-941-verdict.md.

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef NWARPS
#define NWARPS 4
#endif
#ifndef IS_BF16
#define IS_BF16 0
#endif
#ifndef PLACEMENT_SRAM
#define PLACEMENT_SRAM 1
#endif
#ifndef RESCALE_LAZY
#define RESCALE_LAZY 1
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#define D HEAD_DIM
#define NTHREADS (32 * NWARPS)
#define MT (BLOCK_M / (16 * NWARPS))
#define NT (BLOCK_N / 8)
#define KD (D / 16)
#define KN (BLOCK_N / 16)
#define DT (D / 8)
#define CH (D / 8)
#define FRAGS_PER_WARP_BLOCK (MT * KN)  // uint4 per lane per key block

static_assert(D == 64 || D == 128, "HEAD_DIM must be 64 or 128");
static_assert(BLOCK_M % (16 * NWARPS) == 0 && MT >= 1, "BLOCK_M must be a multiple of 16*NWARPS");
static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16");

#define TILE_KV_BYTES (BLOCK_N * D * 2)
#define RING_BYTES (2 * TILE_KV_BYTES)

#include "tc_common.cuh"  // PTX wrappers, quad reductions, swizzled tile copy (as fa2_tc.cu)

// unpack a packed pair back to fp32 (lo = bits 0..15)
__device__ __forceinline__ void unpack2(u32 x, float& lo, float& hi) {
#if IS_BF16
    lo = __int_as_float((int)(x << 16));
    hi = __int_as_float((int)(x & 0xffff0000u));
#else
    u16 a, b;
    asm("mov.b32 {%0, %1}, %2;\n" : "=h"(a), "=h"(b) : "r"(x));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(lo) : "h"(a));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(hi) : "h"(b));
#endif
}
__device__ __forceinline__ u32 scale2(u32 x, float f) {
    float lo, hi;
    unpack2(x, lo, hi);
    return pack2(lo * f, hi * f);
}

// f storage: one uint4 per (block j, warp, m tile, k16 tile, lane)
__device__ __forceinline__ int f_index(int j, int warp, int mt, int kn, int lane) {
    return (((j * NWARPS + warp) * MT + mt) * KN + kn) * 32 + lane;
}

#if PLACEMENT_SRAM
#define F_LOAD(idx) (sF[idx])
#define F_STORE(idx, val) (sF[idx] = (val))
#else
#define F_LOAD(idx) (gF[idx])
#define F_STORE(idx, val) (gF[idx] = (val))
#endif

// ------------------------------------------------------------------------------------------------
// phase 1, one key block: S = Q K^T, mask, softmax pieces, store f_j (and eager: rescale f_<j)
// ------------------------------------------------------------------------------------------------
template <bool MASK>
__device__ __forceinline__ void phase1_step(const u32 (&q)[MT][KD][4], float (&m_run)[MT][2], float (&l_run)[MT][2],
                                            u32 sK, int j, int Nk, int row_base, int lane, int warp, int causal_off,
                                            bool causal, float scale_log2, uint4* sF, uint4* gF, float* sMb) {
    const int l7 = lane & 7;
    const u32 aK = sK + (l7 + ((lane >> 4) << 3)) * D * 2 + ((((lane >> 3) & 1) ^ l7) << 4);
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
#pragma unroll
        for (int p = 0; p < NT / 2; ++p) {
            u32 b[4];
            ldsm_x4(b, (aK ^ (kd << 5)) + p * 16 * D * 2);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816(s[mt][2 * p], q[mt][kd], b[0], b[1]);
                mma16816(s[mt][2 * p + 1], q[mt][kd], b[2], b[3]);
            }
        }
    const int n0 = j * BLOCK_N;
    if (MASK) {  // column n0 + nt*8 + 2*(lane%4) + e is hidden iff it is past min(Nk - 1, row + Nk - Nq)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row_base + mt * 16 + (lane >> 2) + h * 8;
                int lim = Nk - 1;
                if (causal) lim = min(lim, row + causal_off);
                lim -= n0 + ((lane & 3) << 1);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    if (nt * 8 > lim) s[mt][nt][2 * h] = NEG_INF;
                    if (nt * 8 + 1 > lim) s[mt][nt][2 * h + 1] = NEG_INF;
                }
            }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        float fac[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mj = NEG_INF;  // issue: m_local = max(QKij)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mj = fmaxf(mj, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            mj = quad_max(mj);
            const float m_new = fmaxf(m_run[mt][h], mj);
            const float ms_new = (m_new == NEG_INF) ? 0.f : m_new * scale_log2;
#if RESCALE_LAZY
            // f_j = exp(S - m_j), l = l e^(m - m_new) + rowsum(f_j) e^(m_j - m_new); m_j kept for phase 2
            const float ms = (mj == NEG_INF) ? 0.f : mj * scale_log2;
            const float cj = (mj == NEG_INF) ? 0.f : ex2(ms - ms_new);  // 0 * inf guarded
            if ((lane & 3) == 0) sMb[j * BLOCK_M + (row_base % BLOCK_M) + mt * 16 + (lane >> 2) + h * 8] = mj;
#else
            // f_j = exp(S - m_new) directly (the issue's exp(S - m_local) e^(m_local - m_new) in one step)
            const float ms = ms_new;
            const float cj = 1.f;
#endif
            const float alpha = ex2(m_run[mt][h] * scale_log2 - ms_new);
            float rs = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[mt][nt][2 * h] = ex2(fmaf(s[mt][nt][2 * h], scale_log2, -ms));
                s[mt][nt][2 * h + 1] = ex2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -ms));
                rs += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
            }
            l_run[mt][h] = l_run[mt][h] * alpha + rs * cj;
            m_run[mt][h] = m_new;
            fac[h] = alpha;
        }
#if !RESCALE_LAZY
        // eager: f_k *= e^(m_old - m_new) for every earlier block k (rows g and g+8 of this m tile)
        for (int k = 0; k < j; ++k) {
#pragma unroll
            for (int kn = 0; kn < KN; ++kn) {
                const int idx = f_index(k, warp, mt, kn, lane);
                uint4 v = F_LOAD(idx);
                v.x = scale2(v.x, fac[0]); v.y = scale2(v.y, fac[1]);
                v.z = scale2(v.z, fac[0]); v.w = scale2(v.w, fac[1]);
                F_STORE(idx, v);
            }
        }
#else
        (void)fac;
#endif
        // store f_j in A-fragment order
#pragma unroll
        for (int kn = 0; kn < KN; ++kn) {
            uint4 v;
            v.x = pack2(s[mt][2 * kn][0], s[mt][2 * kn][1]);
            v.y = pack2(s[mt][2 * kn][2], s[mt][2 * kn][3]);
            v.z = pack2(s[mt][2 * kn + 1][0], s[mt][2 * kn + 1][1]);
            v.w = pack2(s[mt][2 * kn + 1][2], s[mt][2 * kn + 1][3]);
            F_STORE(f_index(j, warp, mt, kn, lane), v);
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
v_once_tc_fwd(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
              u16* __restrict__ Og, float* __restrict__ LSEg, uint4* __restrict__ Fg, int Nq, int Nk,
              float scale_log2, float scale, int causal, int tc_alloc) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m_block = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const long long bh = blockIdx.y;
    const int m0 = m_block * BLOCK_M;
    const u16* q_g = Qg + bh * Nq * D;
    const u16* k_g = Kg + bh * Nk * D;
    const u16* v_g = Vg + bh * Nk * D;
    const int causal_off = Nk - Nq;

    const u32 sRing = smem_addr(smem);
    unsigned char* region = smem + RING_BYTES;
    const u32 sRegion = sRing + RING_BYTES;
    float* sMb = (float*)region;  // lazy: T x BLOCK_M row maxima
#if RESCALE_LAZY
    const int mb_bytes = ((tc_alloc * BLOCK_M * 4 + 127) / 128) * 128;
#else
    const int mb_bytes = 0;
#endif
    uint4* sF = (uint4*)(region + mb_bytes);
    // this CTA's slice of the HBM scratch (Tc blocks of Br x Bc), used when PLACEMENT_SRAM == 0
    uint4* gF = Fg + ((bh * gridDim.x + m_block) * (long long)tc_alloc) * (BLOCK_M * BLOCK_N / 8);
    (void)sF; (void)gF;

    int n_vis = Nk;
    if (causal) {
        const int r1 = min(m0 + BLOCK_M, Nq);
        n_vis = max(0, min(Nk, r1 + causal_off));
    }
    const int T = (n_vis + BLOCK_N - 1) / BLOCK_N;

    // Q (staged in the region) and the first ring tile
    load_tile<BLOCK_M>(sRegion, q_g, m0, Nq, tid);
    if (T > 0) load_tile<BLOCK_N>(sRing, k_g, 0, Nk, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    const int warp_row0 = warp * MT * 16;
    const int row_base = m0 + warp_row0;
    u32 q[MT][KD][4];
    {
        const int l7 = lane & 7;
        const u32 aQ = sRegion + (warp_row0 + (lane & 15)) * D * 2 + (((lane >> 4) ^ l7) << 4);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kd = 0; kd < KD; ++kd) ldsm_x4(q[mt][kd], (aQ ^ (kd << 5)) + mt * 16 * D * 2);
    }
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) m_run[mt][0] = m_run[mt][1] = NEG_INF, l_run[mt][0] = l_run[mt][1] = 0.f;

    // ---- phase 1: tiles u = 0..T-1 are K_u; the ring then carries V_0.. ----
    for (int j = 0; j < T; ++j) {
        cp_async_wait<0>();
        __syncthreads();  // tile j landed; every warp is done with tile j-1 (and, at j = 0, with the Q staging)
        const int nxt = j + 1;  // next ring tile: K_{j+1}, or V_0 after the last K
        const u32 slot_next = sRing + (nxt & 1) * TILE_KV_BYTES;
        if (nxt < T) load_tile<BLOCK_N>(slot_next, k_g, nxt * BLOCK_N, Nk, tid);
        else load_tile<BLOCK_N>(slot_next, v_g, 0, Nk, tid);
        cp_async_commit();
        const u32 sK = sRing + (j & 1) * TILE_KV_BYTES;
        const int n0 = j * BLOCK_N;
        const bool need_mask = (n0 + BLOCK_N > Nk) || (causal && n0 + BLOCK_N - 1 > m0 + causal_off);
        if (need_mask)
            phase1_step<true>(q, m_run, l_run, sK, j, Nk, row_base, lane, warp, causal_off, causal != 0, scale_log2, sF, gF, sMb);
        else
            phase1_step<false>(q, m_run, l_run, sK, j, Nk, row_base, lane, warp, causal_off, causal != 0, scale_log2, sF, gF, sMb);
    }

    // ---- phase 2: O = sum_j (f_j c_j) V_j ----
    float o[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
    float ms_fin[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) ms_fin[mt][h] = (m_run[mt][h] == NEG_INF) ? 0.f : m_run[mt][h] * scale_log2;

    const int l7 = lane & 7;
#if !PLACEMENT_SRAM
    uint4 fnext[MT][KN];  // HBM: f_{j+1} is fetched while block j multiplies
    if (T > 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kn = 0; kn < KN; ++kn) fnext[mt][kn] = gF[f_index(0, warp, mt, kn, lane)];
    }
#endif
    for (int j = 0; j < T; ++j) {
        cp_async_wait<0>();
        __syncthreads();  // V_j landed; everyone is done with the previous tile
        const int nxt = j + 1;
        if (nxt < T) load_tile<BLOCK_N>(sRing + ((T + nxt) & 1) * TILE_KV_BYTES, v_g, nxt * BLOCK_N, Nk, tid);
        cp_async_commit();
        const u32 sV = sRing + ((T + j) & 1) * TILE_KV_BYTES;
        const u32 aV = sV + (l7 + (((lane >> 3) & 1) << 3)) * D * 2 + (((lane >> 4) ^ l7) << 4);
        u32 a[MT][KN][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if RESCALE_LAZY
            float c[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float mj = sMb[j * BLOCK_M + warp_row0 + mt * 16 + (lane >> 2) + h * 8];
                c[h] = (mj == NEG_INF) ? 0.f : ex2(mj * scale_log2 - ms_fin[mt][h]);
            }
#endif
#pragma unroll
            for (int kn = 0; kn < KN; ++kn) {
#if PLACEMENT_SRAM
                uint4 v = sF[f_index(j, warp, mt, kn, lane)];
#else
                uint4 v = fnext[mt][kn];
#endif
#if RESCALE_LAZY
                v.x = scale2(v.x, c[0]); v.y = scale2(v.y, c[1]);
                v.z = scale2(v.z, c[0]); v.w = scale2(v.w, c[1]);
#endif
                a[mt][kn][0] = v.x; a[mt][kn][1] = v.y; a[mt][kn][2] = v.z; a[mt][kn][3] = v.w;
            }
        }
#if !PLACEMENT_SRAM
        if (nxt < T) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kn = 0; kn < KN; ++kn) fnext[mt][kn] = gF[f_index(nxt, warp, mt, kn, lane)];
        }
#endif
#pragma unroll
        for (int kn = 0; kn < KN; ++kn)
#pragma unroll
            for (int p = 0; p < DT / 2; ++p) {
                u32 b[4];
                ldsm_x4_t(b, (aV ^ (p << 5)) + kn * 16 * D * 2);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816(o[mt][2 * p], a[mt][kn], b[0], b[1]);
                    mma16816(o[mt][2 * p + 1], a[mt][kn], b[2], b[3]);
                }
            }
    }
    cp_async_wait<0>();
    __syncthreads();  // all ring traffic done; the region's Q rows are free for the epilogue

    // ---- epilogue: O / l, lse; through smem (the region: the warp's own rows of the Q staging) ----
    u16* sO = (u16*)region;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(l_run[mt][h]);
            const bool empty = !(l > 0.f);
            const float inv = empty ? 0.f : 1.f / l;
            const int r = warp_row0 + mt * 16 + (lane >> 2) + h * 8;
            if ((lane & 3) == 0 && m0 + r < Nq)
                LSEg[bh * Nq + m0 + r] = empty ? NEG_INF : m_run[mt][h] * scale + logf(l);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const int col = dt * 8 + ((lane & 3) << 1);
                *(u32*)(sO + swz(r, col >> 3) + (col & 7)) = pack2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
            }
        }
    __syncthreads();  // the region is shared with other warps' f / row-max data: order it whole
    u16* o_g = Og + bh * Nq * D;
#pragma unroll
    for (int i = 0; i < MT * 16 * CH / 32; ++i) {
        const int c = lane + i * 32;
        const int r = warp_row0 + c / CH, ch = c % CH;
        if (m0 + r < Nq) {
            const uint4 val = *(const uint4*)(sO + swz(r, ch));
            *(uint4*)(o_g + (long long)(m0 + r) * D + ch * 8) = val;
        }
    }
}
