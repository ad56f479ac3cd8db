// fa2_tc.cu -- FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async).
//
// FlashAttention-2 paper (Dao 2023), Algorithm 1, for one (batch, head) and one Q block i:
//   line 4   load Qi (Br x d) from HBM to on-chip SRAM                 -> cp.async, then registers (Q_IN_REGS)
//   line 5   on chip, O = 0, l = 0, m = -inf                            -> registers, fp32
//   line 6   for j = 1..Tc (here: j = Tc_visible-1 .. 0, masked blocks first, hidden blocks skipped)
//   line 7     load Kj, Vj from HBM to SRAM                             -> cp.async, 2-stage ring each
//   line 8     S = Qi Kj^T                                              -> mma.sync, S stays in registers
//   line 9     m_new = max(m, rowmax(S)), P = exp(S - m_new),
//              l = e^(m - m_new) l + rowsum(P)                          -> exp2 with log2(e)*scale folded in
//   line 10    O = diag(e^(m - m_new)) O + P Vj                         -> P re-used as the A operand (no smem trip)
//   line 12  O = diag(l)^-1 O                                           -> epilogue through smem, 16 B stores
//   line 13  L = m + log(l)                                             -> lse, float32 (B, H, Nq)
//   line 14-15 write Oi and Li to HBM
//
// Layout: q (B, H, Nq, d), k/v (B, H, Nk, d), o like q, lse (B, H, Nq); all contiguous. grid = (Tr, B*H).
// Causal is bottom-right: query i sees key j iff j <= i + Nk - Nq. Rows that see no key: o = 0, lse = -inf.
// Compile-time knobs (defines): HEAD_DIM (64|128), BLOCK_M, BLOCK_N, NWARPS, IS_BF16, Q_IN_REGS, MIN_BLOCKS.
// Each warp owns MT = BLOCK_M / (16 NWARPS) consecutive m16 row tiles of the Q block.
// The PTX wrappers and the tile copy are in tc_common.cuh (shared with v_once_tc.cu).
//
// Version log (details, predictions and negative results in bench/NOTES-tc.md):
//   v1  FA2 structure: 4 warps, Q via ldmatrix each step, S/P in registers, K and V each in a 2-stage
//       cp.async ring (loads issued one full step ahead), XOR-swizzled smem (conflict-free ldmatrix),
//       backward sweep over key blocks (masked blocks first), heavy causal blocks scheduled first.
//       Measured (H200, fp16, N=16k): d=64 317 TFLOP/s (Bc=128), d=128 335 (Bc=64) vs SDPA flash 302/342,
//       but 30-40% behind at N=2k: ~0.5 ms of host work per call (the loader hashed the source on every
//       launch) sat inside the CUDA-event window.
//   v2  launcher caches the loaded kernel and calls it raw (host work ~0.5 ms -> tens of us); mask as one
//       threshold per row (fewer registers); O rescale skipped when no row max of the warp moved (exact).
//       Sweep winners: d=64 Br=128 Bc=128, d=128 Br=128 Bc=64 (4 warps x 32 rows, Q from smem, 2 CTAs/SM).
//       Measured (fp16, vs SDPA flash, same run): d=64 1.11-1.20x non-causal / 0.98-1.14x causal at
//       N=2k..16k (336 TFLOP/s at 16k); d=128 1.00-1.09x / 0.98-1.04x (345-353 at 8k-16k). ncu: tensor
//       pipe 57.7% active (FA2 56.6%, cuDNN wgmma 76.0%). Spills 64-104 B (some inside the loop).
//   v3  kernel unchanged; the launch goes through cuLaunchKernel (kernels/loader.py): host work per call
//       84 -> 49 us (SDPA 23). fp16 vs SDPA flash, N=2k..16k, two runs: d=64 1.04-1.21x; d=128 level,
//       0.97-1.06x. Negative: 8 warps x 32 rows (Br=256, one CTA/SM) 1-21% slower at both head dims.

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
#ifndef Q_IN_REGS
#define Q_IN_REGS 0
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

#define TILE_Q_BYTES (BLOCK_M * D * 2)
#define TILE_KV_BYTES (BLOCK_N * D * 2)
// smem: [Q][K stage 0][K stage 1][V stage 0][V stage 1]
#define SMEM_BYTES (TILE_Q_BYTES + 4 * TILE_KV_BYTES)

#include "tc_common.cuh"  // PTX wrappers, quad reductions, swizzled tile copy

// ------------------------------------------------------------------------------------------------
// One step j of the inner loop (lines 8-10), MASK for the causal diagonal and the Nk tail.
// ------------------------------------------------------------------------------------------------
struct State {
    float o[MT][DT][4];  // O accumulator (fp32), C-fragment layout
    float m[MT][2];      // running row max (raw score units) of rows g and g+8 of each m tile
    float l[MT][2];      // running row sum, this thread's columns only (quad-reduced at the end)
#if Q_IN_REGS
    u32 q[MT][KD][4];    // Q A-fragments
#endif
};

template <bool MASK>
__device__ __forceinline__ void fa2_step(State& st, u32 sQ, u32 sK, u32 sV, u32 sV_next, const u16* v_g,
                                         int n_next, int Nk, int n0, int row_base, int lane, int tid,
                                         int causal_off, bool causal, float scale_log2, int warp_row0,
                                         u32 sK_next2, const u16* k_g, int n_next2) {
    // ldmatrix lane addresses. Row r, logical chunk c lives at byte r*2D + 16*(c ^ (r % 8)); every lane's
    // rows step by multiples of 8 and its chunk is 2*k + hi, so chunk k of a lane is base ^ (k << 5)
    // (tiles are 256-byte aligned). Q/K: A/B fragments of 16x16 (rows lane%16 | lane%8 + 8*(lane/16));
    // V: transposed 16x16 (rows lane%8 + 8*((lane/8)%2), chunk lane/16).
    const int l7 = lane & 7;
    const u32 aQ = sQ + (warp_row0 + (lane & 15)) * D * 2 + (((lane >> 4) ^ l7) << 4);
    const u32 aK = sK + (l7 + ((lane >> 4) << 3)) * D * 2 + ((((lane >> 3) & 1) ^ l7) << 4);
    const u32 aV = sV + (l7 + (((lane >> 3) & 1) << 3)) * D * 2 + (((lane >> 4) ^ l7) << 4);
    (void)aQ;

    // ---- line 8: S = Q K^T ----
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
        u32 a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if Q_IN_REGS
            a[mt][0] = st.q[mt][kd][0]; a[mt][1] = st.q[mt][kd][1];
            a[mt][2] = st.q[mt][kd][2]; a[mt][3] = st.q[mt][kd][3];
#else
            ldsm_x4(a[mt], (aQ ^ (kd << 5)) + mt * 16 * D * 2);
#endif
        }
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
    // V of the next step streams in while this one does its softmax and PV (line 7, one step ahead)
    if (n_next >= 0) load_tile<BLOCK_N>(sV_next, v_g, n_next, Nk, tid);
    cp_async_commit();

    // ---- mask: key past Nk, or key j > i + Nk - Nq (causal) -> -inf ----
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

    // ---- line 9: online softmax (exp2 domain; FFMA folds scale*log2(e)) ----
    float alphas[MT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = st.m[mt][h];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            mx = quad_max(mx);
            const float ms = (mx == NEG_INF) ? 0.f : mx * scale_log2;
            const float alpha = ex2(st.m[mt][h] * scale_log2 - ms);  // 0 when the old max was -inf
            st.m[mt][h] = mx;
            float rs = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                s[mt][nt][2 * h] = ex2(fmaf(s[mt][nt][2 * h], scale_log2, -ms));
                s[mt][nt][2 * h + 1] = ex2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -ms));
                rs += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
            }
            st.l[mt][h] = st.l[mt][h] * alpha + rs;
            alphas[mt][h] = alpha;
            rescale |= (alpha != 1.f);
        }
    // line 10, first half: O = diag(e^(m - m_new)) O -- skipped (exactly) when no row max of the warp moved
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                st.o[mt][dt][0] *= alphas[mt][0];
                st.o[mt][dt][1] *= alphas[mt][0];
                st.o[mt][dt][2] *= alphas[mt][1];
                st.o[mt][dt][3] *= alphas[mt][1];
            }
    }

    // P (fp32 C fragments) -> fp16/bf16 A fragments now, so only half the registers live across the barrier
    u32 pa[MT][KN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kn = 0; kn < KN; ++kn) {
            pa[mt][kn][0] = pack2(s[mt][2 * kn][0], s[mt][2 * kn][1]);
            pa[mt][kn][1] = pack2(s[mt][2 * kn][2], s[mt][2 * kn][3]);
            pa[mt][kn][2] = pack2(s[mt][2 * kn + 1][0], s[mt][2 * kn + 1][1]);
            pa[mt][kn][3] = pack2(s[mt][2 * kn + 1][2], s[mt][2 * kn + 1][3]);
        }

    // ---- V of this step must have landed; all warps are past S (K slot free) ----
    cp_async_wait<2>();
    __syncthreads();
    // K of step j+2 into the K slot this step just used
    if (n_next2 >= 0) load_tile<BLOCK_N>(sK_next2, k_g, n_next2, Nk, tid);
    cp_async_commit();

    // ---- line 10, second half: O += P V, P from the S registers (C layout == A layout) ----
#pragma unroll
    for (int kn = 0; kn < KN; ++kn) {
#pragma unroll
        for (int p = 0; p < DT / 2; ++p) {
            u32 b[4];
            ldsm_x4_t(b, (aV ^ (p << 5)) + kn * 16 * D * 2);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816(st.o[mt][2 * p], pa[mt][kn], b[0], b[1]);
                mma16816(st.o[mt][2 * p + 1], pa[mt][kn], b[2], b[3]);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
fa2_tc_fwd(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
           u16* __restrict__ Og, float* __restrict__ LSEg, int Nq, int Nk, float scale_log2, float scale,
           int causal) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // heavy (bottom) Q blocks first when causal: better tail balance
    const int m_block = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const long long bh = blockIdx.y;
    const int m0 = m_block * BLOCK_M;
    const u16* q_g = Qg + bh * Nq * D;
    const u16* k_g = Kg + bh * Nk * D;
    const u16* v_g = Vg + bh * Nk * D;
    const int causal_off = Nk - Nq;

    const u32 sQ = smem_addr(smem);
    const u32 sK0 = sQ + TILE_Q_BYTES;
    const u32 sV0 = sK0 + 2 * TILE_KV_BYTES;

    // visible key columns of this Q block (its last row sees most); hidden blocks are never visited
    int n_vis = Nk;
    if (causal) {
        const int r1 = min(m0 + BLOCK_M, Nq);
        n_vis = max(0, min(Nk, r1 + causal_off));
    }
    const int T = (n_vis + BLOCK_N - 1) / BLOCK_N;  // key blocks visited, swept j = T-1 .. 0

    // line 4 + line 7 (prologue): Q and K_{T-1}; then V_{T-1}; then K_{T-2}
    load_tile<BLOCK_M>(sQ, q_g, m0, Nq, tid);
    if (T > 0) load_tile<BLOCK_N>(sK0, k_g, (T - 1) * BLOCK_N, Nk, tid);
    cp_async_commit();
    if (T > 0) load_tile<BLOCK_N>(sV0, v_g, (T - 1) * BLOCK_N, Nk, tid);
    cp_async_commit();
    if (T > 1) load_tile<BLOCK_N>(sK0 + TILE_KV_BYTES, k_g, (T - 2) * BLOCK_N, Nk, tid);
    cp_async_commit();

    // line 5
    State st;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        st.m[mt][0] = st.m[mt][1] = NEG_INF;
        st.l[mt][0] = st.l[mt][1] = 0.f;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) st.o[mt][dt][0] = st.o[mt][dt][1] = st.o[mt][dt][2] = st.o[mt][dt][3] = 0.f;
    }
    const int warp_row0 = warp * MT * 16;
    const int row_base = m0 + warp_row0;

#if Q_IN_REGS
    cp_async_wait<2>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kd = 0; kd < KD; ++kd)
            ldsm_x4(st.q[mt][kd], sQ + 2 * swz(warp_row0 + mt * 16 + (lane & 15), kd * 2 + (lane >> 4)));
#endif

    // line 6: key blocks that need a mask (causal diagonal, Nk tail) are the last ones; sweep backward
    for (int it = 0; it < T; ++it) {
        const int j = T - 1 - it;
        const int n0 = j * BLOCK_N;
        const int slot = it & 1;
        cp_async_wait<2>();  // K_j landed (pending at most: V_j, K_{j-1})
        __syncthreads();
        const bool need_mask = (n0 + BLOCK_N > Nk) || (causal && n0 + BLOCK_N - 1 > m0 + causal_off);
        const int n_next = (j >= 1) ? n0 - BLOCK_N : -1;
        const int n_next2 = (j >= 2) ? n0 - 2 * BLOCK_N : -1;
        const u32 sK = sK0 + slot * TILE_KV_BYTES, sV = sV0 + slot * TILE_KV_BYTES;
        const u32 sVn = sV0 + (slot ^ 1) * TILE_KV_BYTES;
        if (need_mask)
            fa2_step<true>(st, sQ, sK, sV, sVn, v_g, n_next, Nk, n0, row_base, lane, tid, causal_off, causal != 0,
                           scale_log2, warp_row0, sK, k_g, n_next2);
        else
            fa2_step<false>(st, sQ, sK, sV, sVn, v_g, n_next, Nk, n0, row_base, lane, tid, causal_off, causal != 0,
                            scale_log2, warp_row0, sK, k_g, n_next2);
    }
    cp_async_wait<0>();
    __syncthreads();  // every Q-row copy has landed before a warp overwrites its rows (also when T == 0)

    // ---- lines 12-15: O / l, lse = m*scale + ln(l), written through smem (the warp's own Q rows) ----
    __syncwarp();
    u16* sQp = (u16*)smem;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(st.l[mt][h]);
            const bool empty = !(l > 0.f);  // row saw no key (or NaN)
            const float inv = empty ? 0.f : 1.f / l;
            const int r = warp_row0 + mt * 16 + (lane >> 2) + h * 8;
            if ((lane & 3) == 0 && m0 + r < Nq)
                LSEg[bh * Nq + m0 + r] = empty ? NEG_INF : st.m[mt][h] * scale + logf(l);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const int col = dt * 8 + ((lane & 3) << 1);
                *(u32*)(sQp + swz(r, col >> 3) + (col & 7)) = pack2(st.o[mt][dt][2 * h] * inv, st.o[mt][dt][2 * h + 1] * inv);
            }
        }
    __syncwarp();
    u16* o_g = Og + bh * Nq * D;
#pragma unroll
    for (int i = 0; i < MT * 16 * CH / 32; ++i) {
        const int c = lane + i * 32;
        const int r = warp_row0 + c / CH, ch = c % CH;
        if (m0 + r < Nq) {
            const uint4 val = *(const uint4*)(sQp + swz(r, ch));
            *(uint4*)(o_g + (long long)(m0 + r) * D + ch * 8) = val;
        }
    }
}
