// tc_fa2.cuh -- what the two mma.sync kernels (fa2_tc.cu, v_once_tc.cu) share, one piece per line of
// FlashAttention-2 (Dao 2023) Algorithm 1: the lane addresses of the ldmatrix operands, S = Q_i K_j^T
// (FA2 Alg. 1 line 8), the causal/tail mask, the row max and exponentials of the online softmax
// (FA2 Alg. 1 line 9), P packed into A fragments and O += P V_j (FA2 Alg. 1 line 10), and the epilogue
// O / l, L = m + log l (FA2 Alg. 1 lines 12-15). The kernels differ in what they keep across key blocks:
// fa2_tc folds P V_j into O at once, v_once_tc stores P (its f_j) and multiplies by V in a second pass.
// The Hopper pair shares its pieces the same way through wgmma_fa2.cuh.
//
// Names are the papers': Br x Bc tiles (the BLOCK_M / BLOCK_N defines), Nq / Nk rows of Q / K, block i of
// Q (first row i0 = i Br), block j of K and V (first column j0 = j Bc), Tc_vis the key blocks block i
// visits, and the causal offset Nk - Nq (bottom-right: query r sees key c iff c <= r + Nk - Nq).
// Compile-time knobs (defines): HEAD_DIM (64|128), BLOCK_M (Br), BLOCK_N (Bc), NWARPS, IS_BF16, MIN_BLOCKS;
// each warp owns MT = Br / (16 NWARPS) consecutive m16 row tiles of the Q block.
#pragma once

// ---- the tile geometry; the including file may set BLOCK_M first (its own default) ----
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_M
#define BLOCK_M 128
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
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#define D HEAD_DIM
#define NTHREADS (32 * NWARPS)
#define MT (BLOCK_M / (16 * NWARPS))  // m16 tiles per warp
#define NT (BLOCK_N / 8)              // n8 tiles of S per warp
#define KD (D / 16)                   // k16 steps of S = Q K^T
#define KN (BLOCK_N / 16)             // k16 steps of O += P V
#define DT (D / 8)                    // n8 tiles of O
#define CH (D / 8)                    // 16-byte chunks per smem row

static_assert(D == 64 || D == 128, "HEAD_DIM must be 64 or 128");
static_assert(BLOCK_M % (16 * NWARPS) == 0 && MT >= 1, "BLOCK_M must be a multiple of 16*NWARPS");
static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16");
static_assert((BLOCK_M * CH) % NTHREADS == 0 && (BLOCK_N * CH) % NTHREADS == 0, "tile copy split");

constexpr int Br = BLOCK_M, Bc = BLOCK_N;  // the papers' tile names (FA2 Alg. 1 line 1)
#define TILE_KV_BYTES (BLOCK_N * D * 2)     // one K or V tile, fp16/bf16

#include "tc_common.cuh"  // PTX wrappers, quad reductions, swizzled tile copy

// What every thread knows about its Q block i, fixed for the whole kernel.
struct QBlock {
    int Nq, Nk;
    int i;           // Q block (FA2 Alg. 1 line 3: one CTA per i and per (batch, head) bh)
    long long bh;
    int i0;          // first row of Q block i: i * Br
    int causal_off;  // Nk - Nq
    int causal;      // 0 or 1
    float scale_log2;  // softmax scale * log2(e): exponentials are exp2 with the scale folded into an FFMA
    int lane, tid;
    int warp_row0;  // first row of this warp's MT m16 tiles inside the block
    int row_base;   // i0 + warp_row0
};

// Causal: the heavy (bottom) Q blocks start first, for a better tail balance.
__device__ __forceinline__ QBlock q_block(int Nq, int Nk, int causal, float scale_log2) {
    QBlock qb;
    qb.tid = threadIdx.x;
    qb.lane = qb.tid & 31;
    qb.i = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    qb.bh = blockIdx.y;
    qb.Nq = Nq; qb.Nk = Nk; qb.i0 = qb.i * Br; qb.causal_off = Nk - Nq; qb.causal = causal;
    qb.scale_log2 = scale_log2;
    qb.warp_row0 = (qb.tid >> 5) * MT * 16;
    qb.row_base = qb.i0 + qb.warp_row0;
    return qb;
}

// key blocks Q block i visits: all Tc, or (causal) those its last row sees; hidden blocks are skipped
__device__ __forceinline__ int visible_key_blocks(const QBlock& qb) {
    int n_vis = qb.Nk;
    if (qb.causal) {
        const int r1 = min(qb.i0 + Br, qb.Nq);
        n_vis = max(0, min(qb.Nk, r1 + qb.causal_off));
    }
    return (n_vis + Bc - 1) / Bc;
}

// ldmatrix lane addresses. Row r, logical chunk c lives at byte r*2D + 16*(c ^ (r % 8)); every lane's
// rows step by multiples of 8 and its chunk is 2*k + hi, so chunk k of a lane is base ^ (k << 5)
// (tiles are 256-byte aligned). Q/K: A/B fragments of 16x16 (rows lane%16 | lane%8 + 8*(lane/16));
// V: transposed 16x16 (rows lane%8 + 8*((lane/8)%2), chunk lane/16).
__device__ __forceinline__ u32 lane_addr_q(u32 sQ, int warp_row0, int lane) {
    return sQ + (warp_row0 + (lane & 15)) * D * 2 + (((lane >> 4) ^ (lane & 7)) << 4);
}
__device__ __forceinline__ u32 lane_addr_k(u32 sK, int lane) {
    const int l7 = lane & 7;
    return sK + (l7 + ((lane >> 4) << 3)) * D * 2 + ((((lane >> 3) & 1) ^ l7) << 4);
}
__device__ __forceinline__ u32 lane_addr_v(u32 sV, int lane) {
    const int l7 = lane & 7;
    return sV + (l7 + (((lane >> 3) & 1) << 3)) * D * 2 + (((lane >> 4) ^ l7) << 4);
}

template <int R, int C>
__device__ __forceinline__ void zero_frags(float (&x)[R][C][4]) {
#pragma unroll
    for (int a = 0; a < R; ++a)
#pragma unroll
        for (int b = 0; b < C; ++b) x[a][b][0] = x[a][b][1] = x[a][b][2] = x[a][b][3] = 0.f;
}

// ---- FA2 Alg. 1 line 8: S = Q_i K_j^T, one k16 step at a time; q_frags(kd, a) gives Q's A fragments
// of step kd (from registers or from shared memory: the caller's choice) ----
template <class QFrags>
__device__ __forceinline__ void qk(float (&s)[MT][NT][4], QFrags q_frags, u32 aK) {
    zero_frags(s);
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
        u32 a[MT][4];
        q_frags(kd, a);
#pragma unroll
        for (int p = 0; p < NT / 2; ++p) {
            u32 b[4];
            ldsm_x4(b, (aK ^ (kd << 5)) + p * 16 * D * 2);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816(s[mt][2 * p], a[mt], b[0], b[1]);
                mma16816(s[mt][2 * p + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// ---- mask: key past Nk, or key c > r + Nk - Nq (causal) -> -inf ----
// column j0 + nt*8 + 2*(lane%4) + e is hidden iff it is past min(Nk - 1, row + Nk - Nq)
__device__ __forceinline__ void mask_s(float (&s)[MT][NT][4], const QBlock& qb, int j0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = qb.row_base + mt * 16 + (qb.lane >> 2) + h * 8;
            int lim = qb.Nk - 1;
            if (qb.causal) lim = min(lim, row + qb.causal_off);
            lim -= j0 + ((qb.lane & 3) << 1);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                if (nt * 8 > lim) s[mt][nt][2 * h] = NEG_INF;
                if (nt * 8 + 1 > lim) s[mt][nt][2 * h + 1] = NEG_INF;
            }
        }
}

// ---- FA2 Alg. 1 line 9, the two halves every variant needs: rowmax(S) over the quad that holds a row
// (rows g and g+8 of m tile mt are h = 0, 1), and P = exp(S - m) in place, returning this thread's
// part of rowsum(P) ----
__device__ __forceinline__ float row_max(const float (&s)[MT][NT][4], int mt, int h, float mx) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
    return quad_max(mx);
}
__device__ __forceinline__ float exp_row(float (&s)[MT][NT][4], int mt, int h, float scale_log2, float ms) {
    float rs = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        s[mt][nt][2 * h] = ex2(fmaf(s[mt][nt][2 * h], scale_log2, -ms));
        s[mt][nt][2 * h + 1] = ex2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -ms));
        rs += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
    }
    return rs;
}

// P (fp32 C fragments of m tile mt, key columns 16 kn .. 16 kn + 15) as the fp16/bf16 A fragment of the
// P V product: the C layout of two n8 tiles is the A layout of one k16 step (no shared-memory trip)
__device__ __forceinline__ uint4 p_frag(const float (&s)[MT][NT][4], int mt, int kn) {
    uint4 v;
    v.x = pack2(s[mt][2 * kn][0], s[mt][2 * kn][1]);
    v.y = pack2(s[mt][2 * kn][2], s[mt][2 * kn][3]);
    v.z = pack2(s[mt][2 * kn + 1][0], s[mt][2 * kn + 1][1]);
    v.w = pack2(s[mt][2 * kn + 1][2], s[mt][2 * kn + 1][3]);
    return v;
}

// ---- FA2 Alg. 1 line 10, second half: O += P V_j, P as A fragments, V_j through ldmatrix.trans ----
__device__ __forceinline__ void pv(float (&o)[MT][DT][4], const u32 (&pa)[MT][KN][4], u32 aV) {
#pragma unroll
    for (int kn = 0; kn < KN; ++kn) {
#pragma unroll
        for (int p = 0; p < DT / 2; ++p) {
            u32 b[4];
            ldsm_x4_t(b, (aV ^ (p << 5)) + kn * 16 * D * 2);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816(o[mt][2 * p], pa[mt][kn], b[0], b[1]);
                mma16816(o[mt][2 * p + 1], pa[mt][kn], b[2], b[3]);
            }
        }
    }
}

// ---- FA2 Alg. 1 lines 12-13: O_i = diag(l)^-1 O, L_i = m scale + ln(l) (m in raw score units), written:
// L straight to HBM (FA2 Alg. 1 line 15), O into the warp's own rows of the swizzled tile sO, which
// epilogue_store then copies out; the caller syncs in between (a warp or the block, as sO is shared) ----
__device__ __forceinline__ void epilogue_stage(const float (&o)[MT][DT][4], const float (&m)[MT][2],
                                               const float (&l_part)[MT][2], u16* sO, float* LSEg,
                                               const QBlock& qb, float scale) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(l_part[mt][h]);
            const bool empty = !(l > 0.f);  // row saw no key (or NaN)
            const float inv = empty ? 0.f : 1.f / l;
            const int r = qb.warp_row0 + mt * 16 + (qb.lane >> 2) + h * 8;
            if ((qb.lane & 3) == 0 && qb.i0 + r < qb.Nq)
                LSEg[qb.bh * qb.Nq + qb.i0 + r] = empty ? NEG_INF : m[mt][h] * scale + logf(l);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const int col = dt * 8 + ((qb.lane & 3) << 1);
                *(u32*)(sO + swz(r, col >> 3) + (col & 7)) = pack2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
            }
        }
}
// ---- FA2 Alg. 1 line 14: write O_i, 16-byte stores of the warp's rows ----
__device__ __forceinline__ void epilogue_store(const u16* sO, u16* Og, const QBlock& qb) {
    u16* o_g = Og + qb.bh * qb.Nq * D;
#pragma unroll
    for (int it = 0; it < MT * 16 * CH / 32; ++it) {
        const int c = qb.lane + it * 32;
        const int r = qb.warp_row0 + c / CH, ch = c % CH;
        if (qb.i0 + r < qb.Nq) {
            const uint4 val = *(const uint4*)(sO + swz(r, ch));
            *(uint4*)(o_g + (long long)(qb.i0 + r) * D + ch * 8) = val;
        }
    }
}  // FA2 Alg. 1 line 17: O and L are in HBM
