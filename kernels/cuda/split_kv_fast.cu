// split_kv_fast.cu -- split-KV decoding (Flash-Decoding) on tensor cores: mma.sync m16n8k16, ldmatrix, a
// STAGES-deep cp.async ring. Launched by kernels/split_kv_fast.py; the contract is kernels/_decode.py's; the
// teaching kernel split_kv.cu is the same algorithm written for reading.
//
// One CTA per (b, kv head h_kv, row tile rt, split s): grid (B H_kv, row_tiles, S), 4 warps.
//   GQA packing     the g = H / H_kv query heads of kv head h_kv times the Nq query rows are packed as rows
//                   p = (h - h_kv g) Nq + i, 16 per CTA (one m16 tile, padded with zero rows), so each K/V byte
//                   the CTA streams serves every head of the group.
//   FA2 Alg. 1 line 4   Q's 16 rows -> smem (cp.async) -> A fragments in registers (d <= 128)
//   FA2 Alg. 1 line 6   the BN-key tiles of this split's chunk [s chunk, min((s+1) chunk, L_b))
//   FA2 Alg. 1 line 7   K_j, V_j -> a STAGES-deep ring of swizzled smem tiles, 16-byte cp.async per row chunk;
//                       paged caches gather each row through block_table (any page size)
//   FA2 Alg. 1 line 8   S = Q K_j^T: warp w takes keys [w KW, (w+1) KW) of the tile (the warps split the keys, all
//                       share the 16 rows), ldmatrix (conflict-free: 16-byte chunk c of row r sits at c ^ (r % 8))
//   FA2 Alg. 1 line 9   online softmax per warp (m, l, alpha in fp32; exp2 with scale log2(e) folded in)
//   FA2 Alg. 1 line 10  O += P V_j with P re-used as the A operand, V_j through ldmatrix.trans
//   FA2 Alg. 1 lines 12-13  the 4 warps' (m, l, O) merged through smem into this split's (o_s, lse_s)
//   merge           S == 1: o, lse written at once. S > 1: (o_s, lse_s) to an fp32 workspace; the last CTA of the
//                   (b, h_kv, rt) tile to finish (an atomic counter, reset by that CTA) combines the S partials:
//                   lse = log sum_s exp(lse_s), o = sum_s exp(lse_s - lse) o_s.
// Causal is bottom-right per sequence (query i sees t iff t <= i + L_b - Nq). A row that sees nothing: o = 0,
// lse = -inf. fp16/bf16 storage, fp32 accumulation. Compile-time knobs: HEAD_DIM (64|128|256), IS_BF16, STAGES.
//
// Version log:
//   v1  the structure above. Sized for bytes in flight: a stage is K_j + V_j = 32 KB at d = 64 (BN = 128) and
//       d = 128 (BN = 64), 64 KB at d = 256 (BN = 64); STAGES = 3 keeps two stages (64-128 KB per CTA) loading
//       while one computes: 2 CTAs per SM at d <= 128. Measured on an H100 since (results/decode_speed/).
//   v2  a paged tile inside one page (page_size a multiple of BN) takes its page from block_table once per tile
//       (load_kv's one_page). Why: on an H100 (results/decode_speed/) the paged cache read at 66-75% of the copy
//       bandwidth at B = 8, caches >= 32k, where the contiguous one read 80-92%, and each row's lookup (a division and a dependent
//       load) stands before its cp.async. Checked by the CPU emulation (tests/test_split_kv_fast_emulated.py, pages
//       of 128 and 256); not yet run on a GPU: lab/decode_split_ab.py --base times it against v1 in one run.
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef IS_BF16
#define IS_BF16 0
#endif
#ifndef STAGES
#define STAGES 3
#endif

#define D HEAD_DIM
#define NWARPS 4
#define NTHREADS (32 * NWARPS)
#define CH (D / 8)                     // 16-byte chunks per row
#define KW (D == 64 ? 32 : 16)         // keys per warp per tile
#define BN (NWARPS * KW)               // keys per tile (Bc)
#define NT (KW / 8)                    // n8 tiles of a warp's S
#define KD (D / 16)                    // k16 steps of S = Q K^T
#define KN (KW / 16)                   // k16 steps of O += P V
#define DT (D / 8)                     // n8 tiles of O
#define QROWS 16                        // packed query rows per CTA
#define Q_IN_REGS (D <= 128)           // d = 256 reads Q's fragments from smem each tile (registers)
#define MIN_BLOCKS (D <= 128 ? 2 : 1)

static_assert(D == 64 || D == 128 || D == 256, "HEAD_DIM must be 64, 128 or 256");
static_assert(STAGES >= 2, "at least double buffering");

#ifdef FA_EMULATE  // the CPU emulation (tests/emulate/split_kv_fast_host.cpp): the same functions in plain C++
#include "tc_common_host.cuh"
#else
#include "tc_common.cuh"  // cp.async, ldmatrix, mma.sync, pack2, ex2, quad reductions, swz
#endif

#define TILE_BYTES (BN * D * 2)
#define STAGE_BYTES (2 * TILE_BYTES)       // K_j then V_j
#define Q_BYTES (QROWS * D * 2)
#define SMEM_BYTES (Q_BYTES + STAGES * STAGE_BYTES + 128)  // + sLse, s_last
// the epilogue's fp32 O of every warp, plus m and l, reuse the ring
static_assert(NWARPS * QROWS * D * 4 + 2 * NWARPS * QROWS * 4 <= STAGES * STAGE_BYTES, "epilogue fits the ring");

// What every thread of a CTA knows.
struct Ctx {
    int b, hk, rt, s, H, H_kv, Nq, g, R;
    int L, start, end;     // the sequence's length, this split's positions [start, end)
    int paged, page_size;
    const int* bt;         // this sequence's block_table row
    long long kv_base;     // contiguous: element offset of (b, h_kv, position 0)
    int tid, lane, warp;
};

// element offset of cache position t (both layouts)
__device__ __forceinline__ long long kv_row(const Ctx& c, int t) {
    if (c.paged) {
        const int page = __ldg(c.bt + t / c.page_size);
        return (((long long)page * c.H_kv + c.hk) * c.page_size + t % c.page_size) * D;
    }
    return c.kv_base + (long long)t * D;
}

// FA2 Alg. 1 line 7: positions [t0, t0 + BN) of K and V into one ring stage; positions >= end are zero rows.
// Thread t copies chunk t % CH of rows t / CH + i (NTHREADS / CH); a row's address is computed once for K and V.
// A paged tile inside one page (page_size a multiple of BN: t0 is BN-aligned, since a split starts on a page) takes
// its page from block_table once, not per row: one dependent load and one division per tile instead of BN / STEP
// (each row's lookup otherwise stands between the thread and its cp.async).
__device__ __forceinline__ void load_kv(u32 sK, const u16* __restrict__ Kg, const u16* __restrict__ Vg, const Ctx& c,
                                        int t0) {
    constexpr int STEP = NTHREADS / CH;
    const int r0 = c.tid / CH, ch = c.tid % CH;
    const bool one_page = c.paged && c.page_size % BN == 0;
    long long tile_base = 0;  // element offset of position t0 when one_page
    if (one_page) {
        const int page = __ldg(c.bt + t0 / c.page_size);
        tile_base = (((long long)page * c.H_kv + c.hk) * c.page_size + t0 % c.page_size) * D;
    }
#pragma unroll
    for (int i = 0; i < BN / STEP; ++i) {
        const int r = r0 + i * STEP, t = t0 + r;
        const bool ok = t < c.end;
        const long long row = one_page ? tile_base + (long long)r * D : kv_row(c, t);
        const long long off = ok ? row + ch * 8 : 0;
        const u32 dst = sK + 2 * swz(r, ch);
        cp_async16(dst, Kg + off, ok ? 16 : 0);
        cp_async16(dst + TILE_BYTES, Vg + off, ok ? 16 : 0);
    }
}

// ldmatrix lane addresses (tc_fa2.cuh's): Q/K A/B fragments of 16x16, V transposed 16x16
__device__ __forceinline__ u32 lane_addr_q(u32 sQ, int lane) {
    return sQ + (lane & 15) * D * 2 + (((lane >> 4) ^ (lane & 7)) << 4);
}
__device__ __forceinline__ u32 lane_addr_k(u32 sK, int lane) {
    const int l7 = lane & 7;
    return sK + (l7 + ((lane >> 4) << 3)) * D * 2 + ((((lane >> 3) & 1) ^ l7) << 4);
}
__device__ __forceinline__ u32 lane_addr_v(u32 sV, int lane) {
    const int l7 = lane & 7;
    return sV + (l7 + (((lane >> 3) & 1) << 3)) * D * 2 + (((lane >> 4) ^ l7) << 4);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
split_kv_fast(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
              const int* __restrict__ seqlens, const int* __restrict__ block_table, u16* __restrict__ Og,
              float* __restrict__ LSEg, float* __restrict__ ws_o, float* __restrict__ ws_lse, int* __restrict__ counters,
              int H, int H_kv, int Nq, int Nk, int page_size, int max_pages, int paged, int chunk, int n_splits,
              int row_tiles, float scale_log2, float scale, int causal) {
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sLse = (float*)(smem + Q_BYTES + STAGES * STAGE_BYTES);  // QROWS: each row's lse
    int* s_last = (int*)(sLse + QROWS);                              // this CTA merges the splits
    Ctx c;
    c.tid = threadIdx.x; c.lane = c.tid & 31; c.warp = c.tid >> 5;
    c.b = blockIdx.x / H_kv; c.hk = blockIdx.x % H_kv; c.rt = blockIdx.y; c.s = blockIdx.z;
    c.H = H; c.H_kv = H_kv; c.Nq = Nq; c.g = H / H_kv; c.R = c.g * Nq;
    c.L = seqlens[c.b];
    c.start = c.s * chunk;
    c.end = min(c.start + chunk, c.L);
    c.paged = paged; c.page_size = page_size;
    c.bt = block_table + (long long)c.b * max_pages;
    c.kv_base = ((long long)c.b * H_kv + c.hk) * Nk * D;
    if (causal) {  // no row of this tile sees past its largest query index i + L - Nq
        int i_max = 0;
        for (int r = 0; r < QROWS; ++r) {
            const int p = c.rt * QROWS + r;
            if (p < c.R) i_max = max(i_max, p % Nq);
        }
        c.end = min(c.end, i_max + c.L - Nq + 1);
    }
    const int n_tiles = c.end > c.start ? (c.end - c.start + BN - 1) / BN : 0;

    const u32 sQ = smem_addr(smem);
    const u32 sRing = sQ + Q_BYTES;

    // FA2 Alg. 1 line 4: the 16 packed query rows (zero rows past R), in the first commit group
    for (int e = c.tid; e < QROWS * CH; e += NTHREADS) {
        const int r = e / CH, ch = e % CH, p = c.rt * QROWS + r;
        const bool ok = p < c.R;
        const long long off = ok ? (((long long)c.b * H + c.hk * c.g + p / Nq) * Nq + p % Nq) * D + ch * 8 : 0;
        cp_async16(sQ + 2 * swz(r, ch), Qg + off, ok ? 16 : 0);
    }
    // FA2 Alg. 1 line 7, prologue: the first STAGES - 1 tiles (one commit group each, empty past the last tile)
#pragma unroll
    for (int j = 0; j < STAGES - 1; ++j) {
        if (j < n_tiles) load_kv(sRing + j * STAGE_BYTES, Kg, Vg, c, c.start + j * BN);
        cp_async_commit();
    }

    // FA2 Alg. 1 line 5: this warp's m, l (thread-partial until the end), O
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    // the last position each of this thread's two rows (lane / 4, lane / 4 + 8) sees; -1: none (a padding row)
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = c.rt * QROWS + (c.lane >> 2) + 8 * h;
        int last = c.end - 1;
        if (causal) last = min(last, p % Nq + c.L - Nq);
        lim[h] = p < c.R ? last : -1;
    }
    const u32 aQ = lane_addr_q(sQ, c.lane);
#if Q_IN_REGS
    u32 qf[KD][4];
    cp_async_wait<STAGES - 2>();  // Q was in the first group
    __syncthreads();
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) ldsm_x4(qf[kd], aQ ^ (kd << 5));
#endif

    for (int j = 0; j < n_tiles; ++j) {  // FA2 Alg. 1 line 6
        cp_async_wait<STAGES - 2>();  // tile j has landed
        __syncthreads();              // ... for every thread, and every warp is done with tile j - 1's slot
        {
            const int jn = j + STAGES - 1;  // FA2 Alg. 1 line 7, STAGES - 1 tiles ahead, into tile j - 1's slot
            if (jn < n_tiles) load_kv(sRing + (jn % STAGES) * STAGE_BYTES, Kg, Vg, c, c.start + jn * BN);
            cp_async_commit();
        }
        const u32 sK = sRing + (j % STAGES) * STAGE_BYTES + c.warp * KW * D * 2;  // this warp's KW keys
        const u32 aK = lane_addr_k(sK, c.lane), aV = lane_addr_v(sK + TILE_BYTES, c.lane);
        const int t_w = c.start + j * BN + c.warp * KW;  // this warp's first position

        // ---- FA2 Alg. 1 line 8: S = Q K_j^T (raw scores; the scale is folded into the exponent) ----
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
#if Q_IN_REGS
            const u32 (&a)[4] = qf[kd];
#else
            u32 a[4];
            ldsm_x4(a, aQ ^ (kd << 5));
#endif
#pragma unroll
            for (int pp = 0; pp < NT / 2; ++pp) {
                u32 bk[4];
                ldsm_x4(bk, (aK ^ (kd << 5)) + pp * 16 * D * 2);
                mma16816(s[2 * pp], a, bk[0], bk[1]);
                mma16816(s[2 * pp + 1], a, bk[2], bk[3]);
            }
        }
        // mask: position t_w + nt 8 + 2 (lane % 4) + e is hidden from row h iff it is past lim[h]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int rel = lim[h] - t_w - ((c.lane & 3) << 1);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                if (nt * 8 > rel) s[nt][2 * h] = NEG_INF;
                if (nt * 8 + 1 > rel) s[nt][2 * h + 1] = NEG_INF;
            }
        }
        // ---- FA2 Alg. 1 line 9: m_new = max(m, rowmax S), P = exp(S - m_new), l = alpha l + rowsum P ----
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = m[h];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
            mx = quad_max(mx);
            const float ms = mx == NEG_INF ? 0.f : mx * scale_log2;  // a row that sees nothing yet: every exp is 0
            alpha[h] = ex2(m[h] * scale_log2 - ms);
            m[h] = mx;
            float rs = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[nt][2 * h] = ex2(fmaf(s[nt][2 * h], scale_log2, -ms));
                s[nt][2 * h + 1] = ex2(fmaf(s[nt][2 * h + 1], scale_log2, -ms));
                rs += s[nt][2 * h] + s[nt][2 * h + 1];
            }
            l[h] = l[h] * alpha[h] + rs;
        }
        // ---- FA2 Alg. 1 line 10: O = diag(alpha) O + P V_j ----
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            o[dt][0] *= alpha[0]; o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1]; o[dt][3] *= alpha[1];
        }
#pragma unroll
        for (int kn = 0; kn < KN; ++kn) {
            u32 pa[4];  // the C layout of two n8 tiles is the A layout of one k16 step
            pa[0] = pack2(s[2 * kn][0], s[2 * kn][1]);
            pa[1] = pack2(s[2 * kn][2], s[2 * kn][3]);
            pa[2] = pack2(s[2 * kn + 1][0], s[2 * kn + 1][1]);
            pa[3] = pack2(s[2 * kn + 1][2], s[2 * kn + 1][3]);
#pragma unroll
            for (int pp = 0; pp < DT / 2; ++pp) {
                u32 bv[4];
                ldsm_x4_t(bv, (aV ^ (pp << 5)) + kn * 16 * D * 2);
                mma16816(o[2 * pp], pa, bv[0], bv[1]);
                mma16816(o[2 * pp + 1], pa, bv[2], bv[3]);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: the warps' partial results go there

    // ---- FA2 Alg. 1 lines 12-13 for the CTA: merge the 4 warps' (m, l, O) ----
    float* sW = (float*)(smem + Q_BYTES);      // NWARPS x QROWS x D, unnormalised O of each warp
    float* sM = sW + NWARPS * QROWS * D;        // NWARPS x QROWS, m (raw score units)
    float* sL = sM + NWARPS * QROWS;            // NWARPS x QROWS, l
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = (c.lane >> 2) + 8 * h;
        const float lsum = quad_sum(l[h]);
        if ((c.lane & 3) == 0) {
            sM[c.warp * QROWS + r] = m[h];
            sL[c.warp * QROWS + r] = lsum;
        }
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            const int col = dt * 8 + ((c.lane & 3) << 1);
            *(float2*)(sW + (c.warp * QROWS + r) * D + col) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
        }
    }
    __syncthreads();
    // row r's CTA result: M = max_w m_w, f_w = e^{(m_w - M) scale}, o = sum_w f_w O_w / sum_w f_w l_w
    for (int e = c.tid; e < QROWS * D / 4; e += NTHREADS) {
        const int r = e / (D / 4), col = (e % (D / 4)) * 4;
        float M = NEG_INF;
#pragma unroll
        for (int w = 0; w < NWARPS; ++w) M = fmaxf(M, sM[w * QROWS + r]);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        float lsum = 0.f;
        if (M != NEG_INF) {
#pragma unroll
            for (int w = 0; w < NWARPS; ++w) {
                const float f = ex2((sM[w * QROWS + r] - M) * scale_log2);
                const float4 x = *(const float4*)(sW + (w * QROWS + r) * D + col);
                lsum += f * sL[w * QROWS + r];
                acc.x += f * x.x; acc.y += f * x.y; acc.z += f * x.z; acc.w += f * x.w;
            }
        }
        const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
        acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
        *(float4*)(sW + r * D + col) = acc;  // warp 0's slot: only this thread reads and writes (r, col..col+3)
        if (col == 0) sLse[r] = lsum > 0.f ? M * scale + logf(lsum) : NEG_INF;
    }
    __syncthreads();

    const long long tile = ((long long)c.b * H_kv + c.hk) * row_tiles + c.rt;
    if (n_splits > 1) {
        // this split's (o_s, lse_s) to the workspace, the tile's real rows only (g Nq of the 16: 4 at decode with
        // g = 4, Nq = 1); the last CTA of the tile to finish merges
        const int nv = min(QROWS, c.R - c.rt * QROWS);
        const long long row0 = (tile * n_splits + c.s) * QROWS;
        for (int e = c.tid; e < nv * D / 4; e += NTHREADS)
            *(float4*)(ws_o + row0 * D + e * 4) = *(const float4*)(sW + e * 4);
        if (c.tid < nv) ws_lse[row0 + c.tid] = sLse[c.tid];
        __threadfence();  // the partial is visible device-wide before the counter says so
        __syncthreads();
        if (c.tid == 0) *s_last = atomicAdd(counters + tile, 1) == n_splits - 1;
        __syncthreads();
        if (!*s_last) return;
        __threadfence();
        // lse = log sum_s exp(lse_s): 8 threads per row (consecutive lanes), strided over s; every split wrote its
        // lse_s (-inf for an empty one), read past L1 (__ldcg: other SMs wrote them)
        {
            const int r = c.tid / 8, sub = c.tid % 8;  // 16 rows x 8 = NTHREADS
            const int n_s = r < nv ? n_splits : 0;     // (all lanes reach the shuffles)
            const float* lr = ws_lse + tile * n_splits * QROWS + r;
            float mx = NEG_INF;
#pragma unroll 4
            for (int s = sub; s < n_s; s += 8) mx = fmaxf(mx, __ldcg(lr + s * QROWS));
#pragma unroll
            for (int off = 1; off < 8; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float tot = 0.f;
            if (mx != NEG_INF) {
#pragma unroll 4
                for (int s = sub; s < n_s; s += 8) tot += expf(__ldcg(lr + s * QROWS) - mx);
            }
#pragma unroll
            for (int off = 1; off < 8; off <<= 1) tot += __shfl_xor_sync(0xffffffffu, tot, off);
            if (sub == 0) sLse[r] = mx == NEG_INF ? NEG_INF : mx + logf(tot);
        }
        __syncthreads();
        // o = sum_s exp(lse_s - lse) o_s, into sW (warp 0's slot) for the store below; unrolled so that several
        // splits' loads are in flight at once (one L2 round trip per split would be ~0.5 us each)
        for (int e = c.tid; e < nv * D / 4; e += NTHREADS) {
            const int r = e / (D / 4), col = (e % (D / 4)) * 4;
            const float L = sLse[r];
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            if (L != NEG_INF) {
#pragma unroll 8
                for (int s = 0; s < n_splits; ++s) {
                    const long long row = (tile * n_splits + s) * QROWS + r;
                    const float f = expf(__ldcg(ws_lse + row) - L);  // an empty split: 0 (and its o_s is 0)
                    const float4 x = __ldcg((const float4*)(ws_o + row * D + col));
                    acc.x += f * x.x; acc.y += f * x.y; acc.z += f * x.z; acc.w += f * x.w;
                }
            }
            *(float4*)(sW + r * D + col) = acc;
        }
        if (c.tid == 0) counters[tile] = 0;  // ready for the next launch
        __syncthreads();
    }
    // FA2 Alg. 1 lines 14-15: o (16-byte stores) and lse of the tile's real rows
    for (int e = c.tid; e < QROWS * CH; e += NTHREADS) {
        const int r = e / CH, ch = e % CH, p = c.rt * QROWS + r;
        if (p >= c.R) continue;
        const float* x = sW + r * D + ch * 8;
        uint4 val;
        val.x = pack2(x[0], x[1]); val.y = pack2(x[2], x[3]); val.z = pack2(x[4], x[5]); val.w = pack2(x[6], x[7]);
        *(uint4*)(Og + (((long long)c.b * H + c.hk * c.g + p / Nq) * Nq + p % Nq) * D + ch * 8) = val;
    }
    if (c.tid < QROWS) {
        const int p = c.rt * QROWS + c.tid;
        if (p < c.R) LSEg[((long long)c.b * H + c.hk * c.g + p / Nq) * Nq + p % Nq] = sLse[c.tid];
    }
}
