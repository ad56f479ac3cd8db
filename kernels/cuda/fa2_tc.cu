// fa2_tc.cu -- FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async).
//
// FlashAttention-2 paper (Dao 2023), Algorithm 1, for one (batch, head) and one Q block i:
//   FA2 Alg. 1 line 4      load Qi (Br x d) from HBM to on-chip SRAM     -> cp.async, then registers (Q_IN_REGS)
//   FA2 Alg. 1 line 5      on chip, O = 0, l = 0, m = -inf                -> registers, fp32
//   FA2 Alg. 1 line 6      for j = 1..Tc (here: j = Tc_vis-1 .. 0, masked blocks first, hidden blocks skipped)
//   FA2 Alg. 1 line 7        load Kj, Vj from HBM to SRAM                 -> cp.async, 2-stage ring each
//   FA2 Alg. 1 line 8        S = Qi Kj^T                                  -> mma.sync, S stays in registers
//   FA2 Alg. 1 line 9        m_new = max(m, rowmax(S)), P = exp(S - m_new),
//                            l = e^(m - m_new) l + rowsum(P)              -> exp2 with log2(e)*scale folded in
//   FA2 Alg. 1 line 10       O = diag(e^(m - m_new)) O + P Vj             -> P re-used as the A operand (no smem)
//   FA2 Alg. 1 line 12     O = diag(l)^-1 O                               -> epilogue through smem, 16 B stores
//   FA2 Alg. 1 line 13     L = m + log(l)                                 -> lse, float32 (B, H, Nq)
//   FA2 Alg. 1 lines 14-15 write Oi and Li to HBM
//
// Layout: q (B, H, Nq, d), k/v (B, H, Nk, d), o like q, lse (B, H, Nq); all contiguous. grid = (Tr, B*H).
// Causal is bottom-right: query i sees key j iff j <= i + Nk - Nq. Rows that see no key: o = 0, lse = -inf.
// Compile-time knobs (defines): HEAD_DIM (64|128), BLOCK_M, BLOCK_N, NWARPS, IS_BF16, Q_IN_REGS, MIN_BLOCKS;
// CTA_TRACE (a probe: when each CTA ran, lab/cta_trace.py).
// Each warp owns MT = BLOCK_M / (16 NWARPS) consecutive m16 row tiles of the Q block.
// The tile geometry, the PTX wrappers and the pieces of a step are shared with v_once_tc.cu
// (tc_fa2.cuh, tc_common.cuh).
//
// Version log (details, predictions and negative results in lab/NOTES-tc.md):
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

#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef Q_IN_REGS
#define Q_IN_REGS 0
#endif
#include "cta_trace.cuh"  // CTA_TRACE=1: when each CTA ran (lab/cta_trace.py)

#include "tc_fa2.cuh"  // geometry, PTX wrappers, QK^T, mask, softmax pieces, PV, epilogue (shared with v_once_tc.cu)

#define TILE_Q_BYTES (BLOCK_M * D * 2)
// smem: [Q][K stage 0][K stage 1][V stage 0][V stage 1]
#define SMEM_BYTES (TILE_Q_BYTES + 4 * TILE_KV_BYTES)

struct State {
    float o[MT][DT][4];  // O accumulator (fp32), C-fragment layout
    float m[MT][2];      // running row max (raw score units) of rows g and g+8 of each m tile
    float l[MT][2];      // running row sum, this thread's columns only (quad-reduced at the end)
#if Q_IN_REGS
    u32 q[MT][KD][4];    // Q A-fragments
#endif
};

// One step of the sweep: key block j in its ring slots, and what streams in while it computes
// (FA2 Alg. 1 line 7 runs one step ahead for V and two for K).
struct Step {
    int j0;            // first key column of block j
    u32 sK, sV;        // K_j, V_j in shared memory
    u32 sV_next;       // the V slot the next block's V_{j-1} loads into
    int j0_next;       // first column of V_{j-1} (-1: none)
    int j0_next2;      // first column of K_{j-2}, loaded into sK once S is done (-1: none)
};

// ------------------------------------------------------------------------------------------------
// One step j of the inner loop (FA2 Alg. 1 lines 8-10), MASK for the causal diagonal and the Nk tail.
// ------------------------------------------------------------------------------------------------
template <bool MASK>
__device__ __forceinline__ void fa2_step(State& st, const QBlock& qb, const Step& sp, u32 sQ, const u16* k_g,
                                         const u16* v_g) {
    const u32 aQ = lane_addr_q(sQ, qb.warp_row0, qb.lane);
    const u32 aK = lane_addr_k(sp.sK, qb.lane);
    const u32 aV = lane_addr_v(sp.sV, qb.lane);
    (void)aQ;

    // ---- FA2 Alg. 1 line 8: S = Q_i K_j^T ----
    float s[MT][NT][4];
    qk(s, [&](int kd, u32 (&a)[MT][4]) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if Q_IN_REGS
            a[mt][0] = st.q[mt][kd][0]; a[mt][1] = st.q[mt][kd][1];
            a[mt][2] = st.q[mt][kd][2]; a[mt][3] = st.q[mt][kd][3];
#else
            ldsm_x4(a[mt], (aQ ^ (kd << 5)) + mt * 16 * D * 2);
#endif
        }
    }, aK);
    // V of the next step streams in while this one does its softmax and PV (FA2 Alg. 1 line 7, one step ahead)
    if (sp.j0_next >= 0) load_tile<Bc>(sp.sV_next, v_g, sp.j0_next, qb.Nk, qb.tid);
    cp_async_commit();

    if (MASK) mask_s(s, qb, sp.j0);

    // ---- FA2 Alg. 1 line 9: online softmax (exp2 domain; FFMA folds scale*log2(e)) ----
    float alphas[MT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float mx = row_max(s, mt, h, st.m[mt][h]);
            const float ms = (mx == NEG_INF) ? 0.f : mx * qb.scale_log2;
            const float alpha = ex2(st.m[mt][h] * qb.scale_log2 - ms);  // 0 when the old max was -inf
            st.m[mt][h] = mx;
            const float rs = exp_row(s, mt, h, qb.scale_log2, ms);
            st.l[mt][h] = st.l[mt][h] * alpha + rs;
            alphas[mt][h] = alpha;
            rescale |= (alpha != 1.f);
        }
    // FA2 Alg. 1 line 10, first half: O = diag(e^(m - m_new)) O -- skipped (exactly) when no row max of the warp moved
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
            const uint4 f = p_frag(s, mt, kn);
            pa[mt][kn][0] = f.x; pa[mt][kn][1] = f.y; pa[mt][kn][2] = f.z; pa[mt][kn][3] = f.w;
        }

    // ---- V of this step must have landed; all warps are past S (K slot free) ----
    cp_async_wait<2>();
    __syncthreads();
    // K of step j-2 into the K slot this step just used
    if (sp.j0_next2 >= 0) load_tile<Bc>(sp.sK, k_g, sp.j0_next2, qb.Nk, qb.tid);
    cp_async_commit();

    // ---- FA2 Alg. 1 line 10, second half: O += P V_j ----
    pv(st.o, pa, aV);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
fa2_tc_fwd(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
           u16* __restrict__ Og, float* __restrict__ LSEg, int Nq, int Nk, float scale_log2, float scale,
           int causal) {
    extern __shared__ __align__(1024) unsigned char smem[];
    TRACE_START(threadIdx.x == 0);
    const QBlock qb = q_block(Nq, Nk, causal, scale_log2);
    const int tid = qb.tid;
    const long long bh = qb.bh;
    const u16* q_g = Qg + bh * Nq * D;
    const u16* k_g = Kg + bh * Nk * D;
    const u16* v_g = Vg + bh * Nk * D;

    const u32 sQ = smem_addr(smem);
    const u32 sK0 = sQ + TILE_Q_BYTES;
    const u32 sV0 = sK0 + 2 * TILE_KV_BYTES;

    const int Tc_vis = visible_key_blocks(qb);  // swept j = Tc_vis-1 .. 0

    // FA2 Alg. 1 line 4 + FA2 Alg. 1 line 7 (prologue): Q_i and K_{Tc_vis-1}; then V_{Tc_vis-1}; then K_{Tc_vis-2}
    load_tile<Br>(sQ, q_g, qb.i0, Nq, tid);
    if (Tc_vis > 0) load_tile<Bc>(sK0, k_g, (Tc_vis - 1) * Bc, Nk, tid);
    cp_async_commit();
    if (Tc_vis > 0) load_tile<Bc>(sV0, v_g, (Tc_vis - 1) * Bc, Nk, tid);
    cp_async_commit();
    if (Tc_vis > 1) load_tile<Bc>(sK0 + TILE_KV_BYTES, k_g, (Tc_vis - 2) * Bc, Nk, tid);
    cp_async_commit();

    // FA2 Alg. 1 line 5
    State st;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        st.m[mt][0] = st.m[mt][1] = NEG_INF;
        st.l[mt][0] = st.l[mt][1] = 0.f;
    }
    zero_frags(st.o);

#if Q_IN_REGS
    cp_async_wait<2>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kd = 0; kd < KD; ++kd)
            ldsm_x4(st.q[mt][kd], sQ + 2 * swz(qb.warp_row0 + mt * 16 + (qb.lane & 15), kd * 2 + (qb.lane >> 4)));
#endif

    // FA2 Alg. 1 line 6: key blocks that need a mask (causal diagonal, Nk tail) are the last ones; sweep backward
    for (int it = 0; it < Tc_vis; ++it) {
        const int j = Tc_vis - 1 - it;
        const int j0 = j * Bc;
        const int slot = it & 1;
        TRACE_STEP(threadIdx.x == 0, it, Tc_vis);
        cp_async_wait<2>();  // K_j landed (pending at most: V_j, K_{j-1})
        __syncthreads();
        // the Nk tail, or a column past some row's causal limit (kept inline: as a function ptxas spills more)
        const bool need_mask = (j0 + Bc > Nk) || (causal && j0 + Bc - 1 > qb.i0 + qb.causal_off);
        Step sp;
        sp.j0 = j0;
        sp.j0_next = (j >= 1) ? j0 - Bc : -1;
        sp.j0_next2 = (j >= 2) ? j0 - 2 * Bc : -1;
        sp.sK = sK0 + slot * TILE_KV_BYTES;
        sp.sV = sV0 + slot * TILE_KV_BYTES;
        sp.sV_next = sV0 + (slot ^ 1) * TILE_KV_BYTES;
        if (need_mask)
            fa2_step<true>(st, qb, sp, sQ, k_g, v_g);
        else
            fa2_step<false>(st, qb, sp, sQ, k_g, v_g);
    }
    cp_async_wait<0>();
    __syncthreads();  // every Q-row copy has landed before a warp overwrites its rows (also when Tc_vis == 0)

    // ---- FA2 Alg. 1 lines 12-15: O / l and L through smem (the warp's own Q rows) ----
    __syncwarp();
    epilogue_stage(st.o, st.m, st.l, (u16*)smem, LSEg, qb, scale);
    __syncwarp();
    epilogue_store((const u16*)smem, Og, qb);
    TRACE_END(threadIdx.x == 0, Tc_vis);
}
