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
// Version log (details in lab/NOTES-tc.md):
//   v1  as above; Br = 64 (4 warps x 16 rows), Bc = 64, Q in registers, 2-slot cp.async ring.
//       Measured (H200 fp16, vs fa2_tc): 0.47-0.91x, never ahead; f fits in smem up to N=1536 (d=64) /
//       1024 (d=128) at 1 CTA/SM (tensor pipe 28%); spilled-lazy DRAM bytes = closed form within 1%;
//       spilled-eager runs at the DRAM bandwidth of its O(Tc^2) traffic. See docs/issue-941-verdict.md.

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef PLACEMENT_SRAM
#define PLACEMENT_SRAM 1
#endif
#ifndef RESCALE_LAZY
#define RESCALE_LAZY 1
#endif

#include "tc_fa2.cuh"  // geometry, PTX wrappers, QK^T, mask, softmax pieces, PV, epilogue (shared with fa2_tc.cu)

#define FRAGS_PER_WARP_BLOCK (MT * KN)  // uint4 per lane per key block
#define RING_BYTES (2 * TILE_KV_BYTES)

// unpack2 / scale2 (a packed pair times a float, through fp32): tc_common.cuh

// f storage: one uint4 per (block j, warp, m tile, k16 tile, lane)
__device__ __forceinline__ int f_index(int j, int warp, int mt, int kn, int lane) {
    return (((j * NWARPS + warp) * MT + mt) * KN + kn) * 32 + lane;
}

#if PLACEMENT_SRAM
#define F_LOAD(idx) (fr.sF[idx])
#define F_STORE(idx, val) (fr.sF[idx] = (val))
#else
#define F_LOAD(idx) (fr.gF[idx])
#define F_STORE(idx, val) (fr.gF[idx] = (val))
#endif

// ------------------------------------------------------------------------------------------------
// phase 1, one key block j: S = Q_i K_j^T, mask, softmax pieces, store f_j (and eager: rescale f_<j)
// ------------------------------------------------------------------------------------------------
struct FRow {
    uint4* sF;       // the f row in shared memory (PLACEMENT_SRAM) ...
    uint4* gF;       // ... or this CTA's slice of the HBM scratch
    float* sMb;      // lazy: the block maxima m_j, Tc x Br floats in shared memory
    int warp;
};

template <bool MASK>
__device__ __forceinline__ void phase1_step(const u32 (&q)[MT][KD][4], float (&m_run)[MT][2], float (&l_run)[MT][2],
                                            const FRow& fr, const QBlock& qb, u32 sK, int j) {
    const int lane = qb.lane, warp = fr.warp;
    const float scale_log2 = qb.scale_log2;
    // FA2 Alg. 1 line 8 with Q_i in registers    [issue: QKij = Qi @ Kj^T]
    float s[MT][NT][4];
    qk(s, [&](int kd, u32 (&a)[MT][4]) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            a[mt][0] = q[mt][kd][0]; a[mt][1] = q[mt][kd][1]; a[mt][2] = q[mt][kd][2]; a[mt][3] = q[mt][kd][3];
        }
    }, lane_addr_k(sK, lane));
    const int j0 = j * Bc;
    if (MASK) mask_s(s, qb, j0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        float fac[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float mj = row_max(s, mt, h, NEG_INF);  // issue: m_local = max(QKij)
            const float m_new = fmaxf(m_run[mt][h], mj);
            const float ms_new = (m_new == NEG_INF) ? 0.f : m_new * scale_log2;
#if RESCALE_LAZY
            // f_j = exp(S - m_j), l = l e^(m - m_new) + rowsum(f_j) e^(m_j - m_new); m_j kept for phase 2
            const float ms = (mj == NEG_INF) ? 0.f : mj * scale_log2;
            const float cj = (mj == NEG_INF) ? 0.f : ex2(ms - ms_new);  // 0 * inf guarded
            if ((lane & 3) == 0) fr.sMb[j * Br + (qb.row_base % Br) + mt * 16 + (lane >> 2) + h * 8] = mj;
#else
            // f_j = exp(S - m_new) directly (the issue's exp(S - m_local) e^(m_local - m_new) in one step)
            const float ms = ms_new;
            const float cj = 1.f;
#endif
            const float alpha = ex2(m_run[mt][h] * scale_log2 - ms_new);
            const float rs = exp_row(s, mt, h, scale_log2, ms);
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
        for (int kn = 0; kn < KN; ++kn) F_STORE(f_index(j, warp, mt, kn, lane), p_frag(s, mt, kn));
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
v_once_tc_fwd(const u16* __restrict__ Qg, const u16* __restrict__ Kg, const u16* __restrict__ Vg,
              u16* __restrict__ Og, float* __restrict__ LSEg, uint4* __restrict__ Fg, int Nq, int Nk,
              float scale_log2, float scale, int causal, int tc_alloc) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const QBlock qb = q_block(Nq, Nk, causal, scale_log2);
    const int tid = qb.tid, lane = qb.lane, warp = tid >> 5, warp_row0 = qb.warp_row0;
    const long long bh = qb.bh;
    const u16* q_g = Qg + bh * Nq * D;
    const u16* k_g = Kg + bh * Nk * D;
    const u16* v_g = Vg + bh * Nk * D;

    const u32 sRing = smem_addr(smem);
    unsigned char* region = smem + RING_BYTES;
    const u32 sRegion = sRing + RING_BYTES;
    FRow fr;
    fr.sMb = (float*)region;  // lazy: Tc x Br row maxima
#if RESCALE_LAZY
    const int mb_bytes = ((tc_alloc * Br * 4 + 127) / 128) * 128;
#else
    const int mb_bytes = 0;
#endif
    fr.sF = (uint4*)(region + mb_bytes);
    // this CTA's slice of the HBM scratch (Tc blocks of Br x Bc), used when PLACEMENT_SRAM == 0
    fr.gF = Fg + ((bh * gridDim.x + qb.i) * (long long)tc_alloc) * (Br * Bc / 8);
    fr.warp = warp;

    const int Tc_vis = visible_key_blocks(qb);

    // Q_i (staged in the region) and the first ring tile
    load_tile<Br>(sRegion, q_g, qb.i0, Nq, tid);
    if (Tc_vis > 0) load_tile<Bc>(sRing, k_g, 0, Nk, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    u32 q[MT][KD][4];
    {
        const u32 aQ = lane_addr_q(sRegion, warp_row0, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kd = 0; kd < KD; ++kd) ldsm_x4(q[mt][kd], (aQ ^ (kd << 5)) + mt * 16 * D * 2);
    }
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) m_run[mt][0] = m_run[mt][1] = NEG_INF, l_run[mt][0] = l_run[mt][1] = 0.f;

    // ---- phase 1: ring tiles u = 0..Tc_vis-1 are K_u; the ring then carries V_0.. ----
    for (int j = 0; j < Tc_vis; ++j) {
        cp_async_wait<0>();
        __syncthreads();  // tile j landed; every warp is done with tile j-1 (and, at j = 0, with the Q staging)
        const int nxt = j + 1;  // next ring tile: K_{j+1}, or V_0 after the last K
        const u32 slot_next = sRing + (nxt & 1) * TILE_KV_BYTES;
        if (nxt < Tc_vis) load_tile<Bc>(slot_next, k_g, nxt * Bc, Nk, tid);
        else load_tile<Bc>(slot_next, v_g, 0, Nk, tid);
        cp_async_commit();
        const u32 sK = sRing + (j & 1) * TILE_KV_BYTES;
        const int j0 = j * Bc;  // the Nk tail, or a column past some row's causal limit (inline: see fa2_tc.cu)
        if ((j0 + Bc > Nk) || (causal && j0 + Bc - 1 > qb.i0 + qb.causal_off))
            phase1_step<true>(q, m_run, l_run, fr, qb, sK, j);
        else
            phase1_step<false>(q, m_run, l_run, fr, qb, sK, j);
    }

    // ---- phase 2: O = sum_j (f_j c_j) V_j    [issue: O = (fi / li) @ V; FA2 Alg. 1 line 10, second half] ----
    float o[MT][DT][4];
    zero_frags(o);
    float ms_fin[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) ms_fin[mt][h] = (m_run[mt][h] == NEG_INF) ? 0.f : m_run[mt][h] * scale_log2;

#if !PLACEMENT_SRAM
    uint4 fnext[MT][KN];  // HBM: f_{j+1} is fetched while block j multiplies
    if (Tc_vis > 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kn = 0; kn < KN; ++kn) fnext[mt][kn] = fr.gF[f_index(0, warp, mt, kn, lane)];
    }
#endif
    for (int j = 0; j < Tc_vis; ++j) {
        cp_async_wait<0>();
        __syncthreads();  // V_j landed; everyone is done with the previous tile
        const int nxt = j + 1;
        if (nxt < Tc_vis) load_tile<Bc>(sRing + ((Tc_vis + nxt) & 1) * TILE_KV_BYTES, v_g, nxt * Bc, Nk, tid);
        cp_async_commit();
        const u32 aV = lane_addr_v(sRing + ((Tc_vis + j) & 1) * TILE_KV_BYTES, lane);
        u32 a[MT][KN][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if RESCALE_LAZY
            float c[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float mj = fr.sMb[j * Br + warp_row0 + mt * 16 + (lane >> 2) + h * 8];
                c[h] = (mj == NEG_INF) ? 0.f : ex2(mj * scale_log2 - ms_fin[mt][h]);
            }
#endif
#pragma unroll
            for (int kn = 0; kn < KN; ++kn) {
#if PLACEMENT_SRAM
                uint4 v = fr.sF[f_index(j, warp, mt, kn, lane)];
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
        if (nxt < Tc_vis) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kn = 0; kn < KN; ++kn) fnext[mt][kn] = fr.gF[f_index(nxt, warp, mt, kn, lane)];
        }
#endif
        pv(o, a, aV);
    }
    cp_async_wait<0>();
    __syncthreads();  // all ring traffic done; the region's Q rows are free for the epilogue

    // ---- epilogue (FA2 Alg. 1 lines 12-15): O / l, L; through smem (the warp's own rows of the Q staging) ----
    epilogue_stage(o, m_run, l_run, (u16*)region, LSEg, qb, scale);
    __syncthreads();  // the region is shared with other warps' f / row-max data: order it whole
    epilogue_store((const u16*)region, Og, qb);
}
