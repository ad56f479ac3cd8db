// wgmma_fa2.cuh -- what the two Hopper FA2 kernels (fa2_wgmma.cu, fa2_wgmma_tma.cu) share: the 128-byte
// swizzled tile layout and its wgmma descriptors, the two products of a step (S = Q K^T, O += P V), the
// masked online softmax, the O rescale, P packing, and the epilogue. They differ only in how tiles
// reach shared memory and how warpgroups are scheduled. The including file defines D, BLOCK_M, BLOCK_N,
// NT, KD, KN, CH and includes tc_common.cuh and wgmma.cuh first. O_N, the width of the O accumulator (the N
// of the P V product), defaults to D; fa2_wgmma_tma.cu pads it to 128 at d = 96 (V's panel 1 is zero-filled
// past column 96 by TMA, so columns 96..127 of O are zeros that the epilogue never writes).
#pragma once
#ifndef O_N
#define O_N D
#endif
// The softmax's knobs (off by default, both exact in the result):
//   RESCALE_THRESHOLD (integer, log2 units; 0 = off; FA4's): a row keeps the max m its exponentials use until a
//     block's max exceeds it by more than this, so P = 2^(s*scale_log2 - m) <= 2^RESCALE_THRESHOLD (fits
//     fp16/bf16; l and O are fp32), and O, l are rescaled only when m moves. lse = m*scale + ln(l) with
//     the m that was used, so o and lse are the same function of the scores.
//   ROW_SUM_MMA (0/1; fa2_wgmma_tma.cu at d = 64 only): l from the tensor core. The P V product runs 8
//     columns wider (O_N = d + 8) over a constant smem panel of ones beside V, so column d of O is the row
//     sum of the rounded P the product multiplies, already in every lane of a quad: the softmax's per-element
//     row-sum adds and the end's quad reduction go, and l is rescaled with O (diag(alpha) covers column d).
//     Exact in the result up to P's rounding, which l then shares with O (o = sum P~ v / sum P~); lse carries
//     it too, so fp16 only (2^-11; bf16's 2^-9 moved lse by 2.3-3.4e-3 on the H200: kernels/fa2_wgmma.py).
#ifndef RESCALE_THRESHOLD
#define RESCALE_THRESHOLD 0
#endif
#ifndef ROW_SUM_MMA
#define ROW_SUM_MMA 0
#endif
#define O_LIVE (D + 8 * ROW_SUM_MMA)  // columns of O that hold values; O_N may pad past them (d = 96)
static_assert(RESCALE_THRESHOLD >= 0 && RESCALE_THRESHOLD <= 15, "RESCALE_THRESHOLD: 0..15 (P <= 2^15 < fp16 max)");

typedef unsigned long long u64;

// byte offset of 16-byte chunk `ch` (0..CH-1) of row r in a 128B-swizzled tile of ROWS rows
template <int ROWS>
__device__ __forceinline__ u32 sw128(int r, int ch) {
    return (ch >> 3) * (ROWS * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4);
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle (PTX ISA "Matrix Descriptor Format")
__device__ __forceinline__ u64 desc_sw128(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) | ((u64)((sbo >> 4) & 0x3FFF) << 32) |
           (1ull << 62);
}

// DESC_STEP=1: one descriptor per operand tile, stepped by each k-slice's offset (CUTLASS's GmmaDescriptor does the
// same). Its address field is bits 0-13 = addr >> 4, and shared-window addresses stay below 2^18 (228 KB), so
// desc(a + off) == desc(a) + (off >> 4) with no carry out of the field. DESC_STEP=0 builds each descriptor from its
// address (and, mask, shift, or per wgmma: the uniform-datapath instructions ncu counted at N = 512).
#ifndef DESC_STEP
#define DESC_STEP 0
#endif
__device__ __forceinline__ u64 desc_step(u64 base, u32 off) { return base + (off >> 4); }

// ---- FA2 Alg. 1 line 8: S = Q_g K_j^T for this warpgroup's 64 rows (issued, not waited) ----
__device__ __forceinline__ void issue_qk(float (&s)[BLOCK_N / 2], u32 sQ, u32 sK, int wg) {
    wgmma_fence();
#if DESC_STEP
    const u64 dq = desc_sw128(sQ + wg * 64 * 128, 16, 1024), dk = desc_sw128(sK, 16, 1024);
#endif
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
#if DESC_STEP
        wgmma_ss<BLOCK_N>(s, desc_step(dq, (kd >> 2) * (BLOCK_M * 128) + (kd & 3) * 32),
                     desc_step(dk, (kd >> 2) * (BLOCK_N * 128) + (kd & 3) * 32), kd > 0);
#else
        const u32 a = sQ + (kd >> 2) * (BLOCK_M * 128) + wg * 64 * 128 + (kd & 3) * 32;
        const u32 b = sK + (kd >> 2) * (BLOCK_N * 128) + (kd & 3) * 32;
        wgmma_ss<BLOCK_N>(s, desc_sw128(a, 16, 1024), desc_sw128(b, 16, 1024), kd > 0);
#endif
    }
    wgmma_commit();
}

// ---- FA2 Alg. 1 line 10, second half: O += P V_j, P from registers (issued, not waited) ----
// lbo: the byte offset from one 64-column panel of V to the next (ROW_SUM_MMA: to the panel of ones)
__device__ __forceinline__ void issue_pv(float (&o)[O_N / 2], const u32 (&pa)[KN][4], u32 sV,
                                         u32 lbo = BLOCK_N * 128) {
    wgmma_fence();
#if DESC_STEP
    const u64 dv = desc_sw128(sV, lbo, 1024);
#endif
#pragma unroll
    for (int kn = 0; kn < KN; ++kn) {
#if DESC_STEP
        wgmma_rs<O_N>(o, pa[kn], desc_step(dv, kn * 16 * 128), 1);
#else
        wgmma_rs<O_N>(o, pa[kn], desc_sw128(sV + kn * 16 * 128, lbo, 1024), 1);
#endif
    }
    wgmma_commit();
}

struct Softmax {
    float m[2];  // running row max (raw score units) of rows g and g+8 of the warp's 16
    float l[2];  // running row sum, this thread's columns only (quad-reduced at the end)
};

// ---- mask + FA2 Alg. 1 line 9 on S_j (in place: S becomes P, fp32); returns the per-row rescale factors ----
template <bool MASK>
__device__ __forceinline__ bool softmax_step(float (&s)[BLOCK_N / 2], Softmax& sm, float (&alpha)[2], int row0,
                                             int n0, int lane, int Nk, int causal_off, bool causal,
                                             float scale_log2) {
    if (MASK) {  // column n0 + 8nt + 2(lane%4) + e is hidden iff it is past min(Nk - 1, row + Nk - Nq)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + (lane >> 2) + h * 8;
            int lim = Nk - 1;
            if (causal) lim = min(lim, row + causal_off);
            lim -= n0 + ((lane & 3) << 1);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                if (nt * 8 > lim) s[4 * nt + 2 * h] = NEG_INF;
                if (nt * 8 + 1 > lim) s[4 * nt + 2 * h + 1] = NEG_INF;
            }
        }
    }
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = sm.m[h];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[4 * nt + 2 * h], s[4 * nt + 2 * h + 1]));
        mx = quad_max(mx);
#if RESCALE_THRESHOLD
        // -inf old max: +inf > T, the row moves (alpha = 0); both -inf: NaN > T is false, m stays -inf
        if ((mx - sm.m[h]) * scale_log2 > (float)RESCALE_THRESHOLD) {
            alpha[h] = ex2((sm.m[h] - mx) * scale_log2);
            sm.m[h] = mx;
        } else {
            alpha[h] = 1.f;
        }
        const float ms = (sm.m[h] == NEG_INF) ? 0.f : sm.m[h] * scale_log2;
#else
        const float ms = (mx == NEG_INF) ? 0.f : mx * scale_log2;
        alpha[h] = ex2(sm.m[h] * scale_log2 - ms);  // 0 when the old max was -inf
        sm.m[h] = mx;
#endif
        float rs = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            s[4 * nt + 2 * h] = ex2(fmaf(s[4 * nt + 2 * h], scale_log2, -ms));
            s[4 * nt + 2 * h + 1] = ex2(fmaf(s[4 * nt + 2 * h + 1], scale_log2, -ms));
            if (!ROW_SUM_MMA) rs += s[4 * nt + 2 * h] + s[4 * nt + 2 * h + 1];
        }
        if (!ROW_SUM_MMA) sm.l[h] = sm.l[h] * alpha[h] + rs;  // else: O's column d, rescaled with O
        moved |= (alpha[h] != 1.f);
    }
    return __any_sync(0xffffffffu, moved);
}

// FA2 Alg. 1 line 10, first half: O = diag(alpha) O
__device__ __forceinline__ void rescale_o(float (&o)[O_N / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int dt = 0; dt < O_LIVE / 8; ++dt) {  // O_N > O_LIVE: the padded columns are never written
        o[4 * dt + 0] *= alpha[0];
        o[4 * dt + 1] *= alpha[0];
        o[4 * dt + 2] *= alpha[1];
        o[4 * dt + 3] *= alpha[1];
    }
}

// P (fp32 accumulator layout) -> fp16/bf16 A fragments of P V (the C layout is the A layout)
__device__ __forceinline__ void pack_p(u32 (&pa)[KN][4], const float (&s)[BLOCK_N / 2]) {
#pragma unroll
    for (int kn = 0; kn < KN; ++kn) {
        pa[kn][0] = pack2(s[8 * kn + 0], s[8 * kn + 1]);
        pa[kn][1] = pack2(s[8 * kn + 2], s[8 * kn + 3]);
        pa[kn][2] = pack2(s[8 * kn + 4], s[8 * kn + 5]);
        pa[kn][3] = pack2(s[8 * kn + 6], s[8 * kn + 7]);
    }
}

// ---- FA2 Alg. 1 lines 12-15: O / l, lse = m*scale + ln(l); warp `w` (16 rows of the Q block) stages its rows through
// the Q tile (its own rows only, which no other warp reads once its last S product is done) ----
// row_inv_lse: for accumulator row half h of warp w, its row r of the Q tile, lse = m*scale + ln(l) to global memory
// (-inf for a row that saw no key) and 1 / l returned (0 there, so the row's O is 0)
__device__ __forceinline__ float row_inv_lse(const float (&o)[O_N / 2], const Softmax& sm, int h, int w, int lane,
                                             float* __restrict__ LSEg, long long bh, int m0, int Nq, float scale,
                                             int& r) {
    const float l = ROW_SUM_MMA ? o[4 * (D / 8) + 2 * h] : quad_sum(sm.l[h]);
    const bool empty = !(l > 0.f);  // row saw no key (or NaN)
    const float inv = empty ? 0.f : 1.f / l;
    r = w * 16 + (lane >> 2) + h * 8;  // row within the Q tile
    if ((lane & 3) == 0 && m0 + r < Nq) LSEg[bh * Nq + m0 + r] = empty ? NEG_INF : sm.m[h] * scale + logf(l);
    return inv;
}
// stage_o_lse: O / l into the staging tile (swizzled as the Q tile TMA loads) and lse to global memory
__device__ __forceinline__ void stage_o_lse(const float (&o)[O_N / 2], const Softmax& sm, u32 sQ,
                                            float* __restrict__ LSEg, long long bh, int m0, int Nq, int w, int lane,
                                            float scale) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int r;
        const float inv = row_inv_lse(o, sm, h, w, lane, LSEg, bh, m0, Nq, scale, r);
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            const u32 addr = sQ + sw128<BLOCK_M>(r, dt) + ((lane & 3) << 2);
            const u32 val = pack2(o[4 * dt + 2 * h] * inv, o[4 * dt + 2 * h + 1] * inv);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(val) : "memory");
        }
    }
}
// write_o_lse_direct (O_DIRECT): O / l from the accumulator to global memory, no smem. A thread holds columns
// 8 dt + 2 (lane % 4) + {0, 1} of rows lane / 4 and lane / 4 + 8; each 4 x 4 block of 32-bit words is first transposed
// within the quad (two butterfly rounds, xor 2 then xor 1), so lane q holds 16-byte chunk 4g + q of its row and each
// quad writes 64 contiguous bytes per store (its 4-byte words stored as they are ran 1.03-1.13x the time)
__device__ __forceinline__ void write_o_lse_direct(const float (&o)[O_N / 2], const Softmax& sm, u16* __restrict__ Og,
                                                   float* __restrict__ LSEg, long long bh, int m0, int Nq, int w,
                                                   int lane, float scale) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int r;
        const float inv = row_inv_lse(o, sm, h, w, lane, LSEg, bh, m0, Nq, scale, r);
        const bool in = m0 + r < Nq;
        u16* row = Og + (bh * Nq + m0 + r) * D;
        static_assert(D % 32 == 0, "O_DIRECT: whole groups of four 8-column blocks");
        const bool b1 = lane & 2, b0 = lane & 1;
#pragma unroll
        for (int g = 0; g < D / 32; ++g) {  // the shuffles run in every lane: rows past Nq only skip the store
            u32 v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) v[i] = pack2(o[4 * (4 * g + i) + 2 * h] * inv, o[4 * (4 * g + i) + 2 * h + 1] * inv);
#pragma unroll
            for (int k = 0; k < 2; ++k) {  // lanes q, q ^ 2 swap the 2 x 2 blocks off their diagonal
                const u32 got = __shfl_xor_sync(0xffffffffu, b1 ? v[k] : v[k + 2], 2);
                if (b1) v[k] = got; else v[k + 2] = got;
            }
#pragma unroll
            for (int k = 0; k < 4; k += 2) {  // then lanes q, q ^ 1 swap within each 2 x 2 block
                const u32 got = __shfl_xor_sync(0xffffffffu, b0 ? v[k] : v[k + 1], 1);
                if (b0) v[k] = got; else v[k + 1] = got;
            }
            if (in) *reinterpret_cast<uint4*>(row + (4 * g + (lane & 3)) * 8) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}
__device__ __forceinline__ void write_o_lse(const float (&o)[O_N / 2], const Softmax& sm, u32 sQ, u16* __restrict__ Og,
                                            float* __restrict__ LSEg, long long bh, int m0, int Nq, int w, int lane,
                                            float scale) {
    stage_o_lse(o, sm, sQ, LSEg, bh, m0, Nq, w, lane, scale);
    __syncwarp();
    u16* o_g = Og + bh * Nq * D;
#pragma unroll
    for (int i = 0; i < 16 * CH / 32; ++i) {
        const int c = lane + i * 32;
        const int r = w * 16 + c / CH, ch = c % CH;
        if (m0 + r < Nq) {
            uint4 val;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w) : "r"(sQ + sw128<BLOCK_M>(r, ch)));
            *(uint4*)(o_g + (long long)(m0 + r) * D + ch * 8) = val;
        }
    }
}
