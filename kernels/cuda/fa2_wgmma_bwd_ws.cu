// fa2_wgmma_bwd_ws.cu -- v4 of the Hopper backward, the default main kernel at d = 64 and 128 (issue 42): FA3's
// warp-specialised main kernel (sm_90a), launched by kernels/fa2_wgmma_bwd.py (kernels/fa2_wgmma_bwd_ws.py: its builds).
// FlashAttention-3 (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao 2024): producer/consumer warp specialisation with
// setmaxnreg (its section 3.1) applied to the backward pass as its appendix describes it; the math is FA2's Alg. 2.
//
// The v3 backward (kernels/cuda/fa2_wgmma_bwd.cu: still the main kernel at d = 96, 256, deterministic=True and
// config=) with its two measured limits on the MMA warpgroups' critical path removed (docs/hopper-fa2-history.md,
// "The backward's version log": at d=128 N=16k on an H200, 423 TFLOP/s, 513 without the dQ bulk reduce, 596 without the dQ product):
//   * every thread there issued cp.async for Q_i, dO_i, L_i, D_i and met the others at a __syncthreads per step;
//   * the warpgroup that staged its dQ slice in smem waited for the previous step's reduce to have read it
//     (cp.async.bulk.wait_group.read by its own thread) and issued the reduce itself.
// Here warpgroup 0 is a producer (setmaxnreg.dec to PRODUCER_REGS): its warp 0 loads K_j, V_j once and
// Q_i, dO_i (TMA, 64-column panels, 128-byte swizzle) and L2_i, D_i (1-D bulk copies) into a STAGES-slot ring
// guarded by full/empty mbarriers; its warp 1 waits until a consumer warpgroup has staged its dQ slice in smem
// (mbarrier dq_full) and issues the cp.reduce.async.bulk .add.f32 of it, then frees the buffer (dq_empty) when
// the reduce has read it. The NWG = 2 consumer warpgroups (setmaxnreg.inc) run v3's step; the only barrier
// between them is the one that completes the dS^T tile for FA2 Alg. 2 line 15 (named barrier BAR_DS_FULL).
// GPU status: the GPU checks and timings in results/bwd_ws_v4 ran on the build with one empty_q arrive per consumer
// warp; this build (every consumer thread arrives on empty_q) has compiled and passed the CPU protocol model but not
// yet run on a GPU.
//
// FA2 paper (Dao 2023) Algorithm 2, main kernel, for one key block j (keys n0..n0+Bc-1), Bc = 64*NWG, consumer
// warpgroup c owning keys 64c..64c+63:
//   FA2 Alg. 2 line 6   load K_j, V_j                   -> producer warp 0: TMA, full_kv, resident all loop
//   FA2 Alg. 2 line 7   dK_j = 0, dV_j = 0              -> consumer registers (fp32)
//   FA2 Alg. 2 line 8   for i (hidden causal Q blocks skipped; GQA: for each query head of the group)
//   FA2 Alg. 2 line 9     load Q_i, dO_i, L_i, D_i      -> producer warp 0: TMA into slot t % STAGES after empty_q
//   FA2 Alg. 2 line 10    S^T = K_j Q_i^T               -> wgmma SS
//   FA2 Alg. 2 line 11    P^T = exp2(S^T*scale*log2e - L2_i), masked entries 0
//   FA2 Alg. 2 line 12    dV_j += P^T dO_i              -> wgmma RS (P^T from registers)
//   FA2 Alg. 2 line 13    dP^T = V_j dO_i^T             -> wgmma SS, issued with FA2 Alg. 2 line 10
//   FA2 Alg. 2 line 14    dS^T = P^T o (dP^T - D_i)     -> registers, and to the smem dS^T tile (DS_BUFS buffers)
//   FA2 Alg. 2 line 15    dQ_i += dS K_j                -> wgmma SS (both MN-major), 64 x DQ_N slice per warpgroup,
//                                                          staged in smem; producer warp 1 reduce-adds it to HBM
//   FA2 Alg. 2 line 16    dK_j += dS^T Q_i              -> wgmma RS (dS^T from registers)
//   FA2 Alg. 2 line 18    write dK_j (times scale), dV_j
// The pre kernel (FA2 Alg. 2 lines 3-4: D, L2 = lse*log2e, dQacc = 0) and the conversion of the fragment-ordered dQ
// accumulator are v3's (fa2_wgmma_bwd_pre, fa2_wgmma_bwd_dq_bulk, built with this file's HEAD_DIM,
// NWG, BR), so the dQ slice order here is DQ_BULK's: float4 j of thread t at (j*128 + t)*16 bytes.
//
// Synchronisation (every point, and why it is enough):
//   full_kv        count 1 + 2 tiles of TMA bytes; consumers wait parity 0 once (before the loop, even with no steps,
//                  so the CTA never exits with a TMA write in flight).
//   full_q[s]      count 1 + Q, dO, L2, D bytes; use u of slot s (step t = u*STAGES + s) completes phase u: consumers
//                  wait parity u & 1. TMA zero-fills rows past Nq (and K/V rows past Nk); the bytes still count.
//   empty_q[s]     count NCONS (every consumer thread, after the step's wgmma_wait<0>, which completes every
//                  product that read Q_i, dO_i; its L2_i, D_i reads were done before the dK product was issued; an
//                  arrive releases only its own thread's reads, so each thread arrives for its own). The producer
//                  waits parity (u-1) & 1 before use u > 0.
//   BAR_DS_FULL    named barrier, 256 consumer threads: each thread's dS^T stores, then fence.proxy.async (generic
//                  stores before the async proxy's wgmma reads), then bar.sync; then the dQ product reads the tile.
//   dS^T reuse     DS_BUFS=2: step t writes buffer t%2; a thread writes it again at step t+2 only after passing
//                  BAR_DS_FULL of step t+1, which every thread reaches after its own wgmma_wait<0> of step t (the
//                  dQ product of step t, the only reader, is complete). DS_BUFS=1: named barrier BAR_DS_EMPTY
//                  (256) before each step's stores, reached by every thread after its wgmma_wait<0> of step t-1.
//   dq_full[b][w]  count 128: every thread of consumer warpgroup w stores its part of the slice, fences
//                  (fence.proxy.async: generic stores before the bulk reduce reads them) and arrives (release);
//                  producer warp 1 waits (acquire) parity (t / DQ_BUFS) & 1, then issues the reduce.
//   dq_empty[b][w] count 1: producer warp 1 arrives after cp.async.bulk.wait_group.read 0 (the reduces of the step
//                  have read both slices); warpgroup w waits parity (u-1) & 1 before it overwrites buffer b at use
//                  u > 0. A phase cannot run two ahead: the next arrival on either barrier needs the other's.
//   exit           producer warp 1 waits for its reduces to be written (wait_group 0) before it exits, so the
//                  smem they read stays the CTA's; producer warp 0 exits after its last copy is issued (every copy
//                  is waited for by the consumers).
// Knobs: HEAD_DIM (64|128), BR (Br: 64|128), IS_BF16, STAGES (2|3), DS_BUFS (1|2), DQ_BUFS (1|2), PRODUCER_REGS,
// L2_HINT (evict_last on Q_i, dO_i and the dQ reduce-adds), ORDER (the steps' order: 0 t = h*T + (i - i_first), heads
// outer; 1 t = (Tr-1 - i)*G + h, heads inner: the loader's (i, hq), the reducer's tile and the consumers' m0 follow it),
// MERGED (1: S^T and dP^T waited together and P^T, dS^T computed in one pass, so P^T's fp32 copy dies as it is
// packed; 0: v3's order, the softmax overlapping dP^T's product; d = 64 needs 1 at 240 registers).
// NWG = 2 consumer warpgroups (Bc = 128). Causal is bottom-right (query i sees key j iff j <= i + Nk - Nq).
// grid = (Tc, B*H_kv); block = 128*(NWG+1) threads.

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
#ifndef DS_BUFS
#define DS_BUFS 2
#endif
#ifndef DQ_BUFS
#define DQ_BUFS 1
#endif
#ifndef MERGED  // 1: wait for S^T and dP^T together, then P^T and dS^T in one pass (fewer live registers)
#define MERGED 0
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 24
#endif
#ifndef L2_HINT  // 1: Q_i, dO_i loads and dQ's reduce-adds carry an L2 evict_last policy (FA3 does): every key block
#define L2_HINT 0  //    rereads Q_i, dO_i and adds into the same dQ tile
#endif

#ifndef ORDER  // the (query head, i) step order: 0 = heads outer, i ascending; 1 = i descending from Tr-1, heads inner
#define ORDER 0  //    (every CTA of a kv head then reads tile (h, i) at the same step (Tr-1-i)*G + h: L2 reuse)
#endif

#ifndef LPT  // 1: grid (B*H_kv, Tc), key block j = blockIdx.y: every (b, kv head)'s key block 0 dispatched first, then
#define LPT 0  //    every key block 1, ...: causal GQA's longest CTAs first (the shipped kernel's LPT)
#endif
#define KEY_BLOCK (LPT ? blockIdx.y : blockIdx.x)  // j (unsigned, as blockIdx: the same code as before the knob)
#define GRID_ROW (LPT ? blockIdx.x : blockIdx.y)  // b * H_kv + kv head

#define D HEAD_DIM
#define BLOCK_N (64 * NWG)          // Bc: keys per CTA
#define BLOCK_M BR                  // Br: queries per step
#define NTHREADS (128 * (NWG + 1))  // warpgroup 0: producer; 1..NWG: consumers
#define NCONS (128 * NWG)           // consumer threads
#define CH (D / 8)
#define PANELS (D / 64)             // 64-column (128-byte) swizzle panels of a row
#define KD (D / 16)
#define NT (BLOCK_N / 8)
#define KN (BLOCK_N / 16)
#define NQ8 (BLOCK_M / 8)
#define KM (BLOCK_M / 16)
#define KB (BLOCK_N / 16)
#define MSL (BLOCK_M / 64)
#define NSL (NWG / MSL)
#define DQ_N (D / NSL)

static_assert(D == 64 || D == 128, "HEAD_DIM must be 64 or 128");
static_assert(NWG == 2, "two consumer warpgroups");
static_assert(BLOCK_M == 64 || BLOCK_M == 128, "BR must be 64 or 128");
static_assert(DQ_N == 64 || DQ_N == 128, "dQ slices must be whole 64-column swizzle panels");
static_assert(STAGES >= 2 && STAGES <= 3, "STAGES: 2..3");
static_assert(ORDER == 0 || ORDER == 1, "ORDER: 0 (heads outer, i ascending) or 1 (i descending, heads inner)");
static_assert(DS_BUFS >= 1 && DS_BUFS <= 2 && DQ_BUFS >= 1 && DQ_BUFS <= 2, "DS_BUFS, DQ_BUFS: 1 or 2");

// setmaxnreg (as fa2_wgmma_tma.cu): the CTA starts with REGS_AT_LAUNCH a thread; the producer gives back
// REGS_AT_LAUNCH - PRODUCER_REGS and the consumers take only that (setmaxnreg.inc waits for free registers:
// asking for more is a hang)
#define REGS_AT_LAUNCH ((65536 / NTHREADS) / 8 * 8)
#define CONSUMER_REGS_FIT ((REGS_AT_LAUNCH + (REGS_AT_LAUNCH - PRODUCER_REGS) / NWG) / 8 * 8)
#define CONSUMER_REGS (CONSUMER_REGS_FIT < 240 ? CONSUMER_REGS_FIT : 240)
static_assert(PRODUCER_REGS >= 24 && PRODUCER_REGS % 8 == 0, "PRODUCER_REGS: a multiple of 8, at least 24");
static_assert(NWG * (CONSUMER_REGS - REGS_AT_LAUNCH) <= REGS_AT_LAUNCH - PRODUCER_REGS, "setmaxnreg budget");

#define TILE_KV_BYTES (BLOCK_N * D * 2)
#define TILE_Q_BYTES (BLOCK_M * D * 2)
#define TILE_DS_BYTES (BLOCK_N * BLOCK_M * 2)
#define LD_BYTES (8 * BLOCK_M)           // L2_i then D_i, fp32, per slot
#define DQ_SLICE_BYTES (64 * DQ_N * 4)   // one warpgroup's fp32 dQ slice
#define N_BARS (1 + 2 * STAGES + 2 * DQ_BUFS * NWG)
// smem: [K][V][Q slots][dO slots][dS^T bufs][dQ bufs x NWG slices][L/D slots][mbarriers]; + 1 KB to align to 1024
#define SMEM_BYTES (2 * TILE_KV_BYTES + 2 * STAGES * TILE_Q_BYTES + DS_BUFS * TILE_DS_BYTES + \
                    DQ_BUFS * NWG * DQ_SLICE_BYTES + STAGES * LD_BYTES + 8 * N_BARS + 1024)
static_assert(SMEM_BYTES <= 227 * 1024, "over the 227 KB an H100/H200 CTA may have");

#include "tc_common.cuh"  // pack2, ex2
#include "wgmma.cuh"      // wgmma_ss / wgmma_ss_tt / wgmma_rs / fence / commit / wait
#include "wgmma_fa2.cuh"  // sw128 layout, desc_sw128
#include "tma_pipe.cuh"   // TensorMap, mbarriers, TMA loads, bulk groups, named barriers

#define BAR_DS_FULL 1   // named barriers of the NCONS consumer threads (0 is __syncthreads)
#define BAR_DS_EMPTY 2

// a contiguous global -> shared bulk copy (bytes and addresses multiples of 16), completion on `bar`
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_reduce_add_f32(float* gdst, u32 ssrc, int bytes) {
#if L2_HINT
    asm volatile("{\n.reg .b64 pol;\ncreatepolicy.fractional.L2::evict_last.b64 pol, 1.0;\n"
                 "cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, pol;\n}\n"
                 ::"l"(gdst), "r"(ssrc), "r"(bytes) : "memory");
#else
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(gdst), "r"(ssrc), "r"(bytes) : "memory");
#endif
    bulk_commit();
}
// tma_load (tma_pipe.cuh) with, under L2_HINT, an evict_last policy: the Q_i, dO_i every key block rereads
__device__ __forceinline__ void tma_load_q(u32 dst, const TensorMap* map, int col, int row, int h, int b, u32 bar) {
#if L2_HINT
    asm volatile(
        "{\n.reg .b64 pol;\ncreatepolicy.fractional.L2::evict_last.b64 pol, 1.0;\n"
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3, %4, %5}], [%6], pol;\n}\n"
        ::"r"(dst), "l"((u64)map), "r"(col), "r"(row), "r"(h), "r"(b), "r"(bar) : "memory");
#else
    tma_load(dst, map, col, row, h, b, bar);
#endif
}

#include "wgmma_bwd.cuh"  // fence_proxy_async, lds_f2, issue_t (S^T, dP^T), issue_dq (dQ), pack_frag

// FA2 Alg. 2 line 12 and FA2 Alg. 2 line 16: acc += X^T B_i, X^T from registers, B = dO_i or Q_i (MN-major)
__device__ __forceinline__ void issue_acc(float (&acc)[D / 2], const u32 (&xa)[KM][4], u32 sB) {
    wgmma_fence();
#pragma unroll
    for (int km = 0; km < KM; ++km) wgmma_rs<D>(acc, xa[km], desc_sw128(sB + km * 16 * 128, BLOCK_M * 128, 1024), 1);
    wgmma_commit();
}

// FA2 Alg. 2 line 11 for one element: P^T = exp2(S^T * scale * log2e - L2_i); a hidden (key, query) pair (causal,
// bottom-right: key > query + Nk - Nq) and key padding (key >= Nk; TMA zero-filled its K row) -> 0
__device__ __forceinline__ float p_elem(float sv, float l2, float scale_log2, bool need_mask, int key, int q, int Nk,
                                        bool is_causal, int causal_off) {
    float p = ex2(fmaf(sv, scale_log2, -l2));
    if (need_mask && (key >= Nk || (is_causal && key > q + causal_off))) p = 0.f;
    return p;
}
// x through a register the compiler cannot see into: a value recomputed from it each step is not hoisted out of the
// loop (at the consumers' 240 registers, hoisted dS^T store addresses were spilled and reloaded every step)
__device__ __forceinline__ int opaque(int x) {
    int y;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}
// two dS^T elements (key row r, query columns 8*nt + 2*(lane%4) + 0, 1) into the swizzled dS^T tile
__device__ __forceinline__ void store_ds(u32 sdS, int r, int nt, int lane, float a, float b) {
    const u32 addr = sdS + sw128<BLOCK_N>(r, nt) + ((lane & 3) << 2);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pack2(a, b)) : "memory");
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
fa2_wgmma_bwd_ws(const __grid_constant__ TensorMap tmQ, const __grid_constant__ TensorMap tmK,
                 const __grid_constant__ TensorMap tmV, const __grid_constant__ TensorMap tmdO,
                 const float* __restrict__ L2g, const float* __restrict__ Dg, float* __restrict__ dQacc,
                 u16* __restrict__ dKg, u16* __restrict__ dVg, int Nq, int Nk, int Nq_pad, float scale_log2,
                 float scale, int causal, int H, int G, long long dk_sb, long long dk_sh, long long dk_sr,
                 long long dv_sb, long long dv_sh, long long dv_sr) {
    extern __shared__ __align__(1024) unsigned char smem[];
    // the warp index through a shuffle from lane 0 (CUTLASS's canonical_warp_idx_sync): ptxas then knows it, the
    // warpgroup and every wgmma descriptor built from them are warp-uniform, and keeps those in uniform registers
    // (built from tid >> 5 they took regular registers, which the consumers' 240 could not spare)
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xffffffffu, tid >> 5, 0), wg = warp >> 2;
    const int n0 = KEY_BLOCK * BLOCK_N;
    const int causal_off = Nk - Nq;
    const bool is_causal = causal != 0;

    const u32 s_base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 sK = s_base, sV = sK + TILE_KV_BYTES;
    const u32 sQ0 = sV + TILE_KV_BYTES, sdO0 = sQ0 + STAGES * TILE_Q_BYTES;
    const u32 sdS0 = sdO0 + STAGES * TILE_Q_BYTES, sdQ0 = sdS0 + DS_BUFS * TILE_DS_BYTES;
    const u32 sLD0 = sdQ0 + DQ_BUFS * NWG * DQ_SLICE_BYTES, bar0 = sLD0 + STAGES * LD_BYTES;
#define FULL_KV (bar0)
#define FULL_Q(s) (bar0 + 8 * (1 + (s)))
#define EMPTY_Q(s) (bar0 + 8 * (1 + STAGES + (s)))
#define DQ_FULL(b, w) (bar0 + 8 * (1 + 2 * STAGES + (b) * NWG + (w)))
#define DQ_EMPTY(b, w) (bar0 + 8 * (1 + 2 * STAGES + DQ_BUFS * NWG + (b) * NWG + (w)))

    // FA2 Alg. 2 line 8: the first query that sees key n0 is n0 - causal_off; Q blocks above it are hidden
    const int i_first = is_causal ? max(0, n0 - causal_off) / BLOCK_M : 0;
    const int T = (Nq + BLOCK_M - 1) / BLOCK_M - i_first;
    const int TG = T > 0 ? G * T : 0;  // steps: every (query head of the group, i) pair (GQA), in ORDER

    if (tid == 0) {
        mbar_init(FULL_KV, 1);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(FULL_Q(s), 1);
            mbar_init(EMPTY_Q(s), NCONS);  // every consumer thread (each releases its own L2_i, D_i reads)
        }
#pragma unroll
        for (int b = 0; b < DQ_BUFS; ++b)
#pragma unroll
            for (int w = 0; w < NWG; ++w) {
                mbar_init(DQ_FULL(b, w), 128);  // every thread of consumer warpgroup w
                mbar_init(DQ_EMPTY(b, w), 1);   // the reducing thread
            }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the only CTA-wide barrier: from here producer and consumers run apart

    if (wg == 0) {
        // ------------------------------------------------------------------------------------------ producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        const int hkv = H / G, b = GRID_ROW / hkv, hk = GRID_ROW % hkv;
        if (warp == 0 && lane == 0) {
            // FA2 Alg. 2 line 6
            mbar_expect_tx(FULL_KV, 2 * TILE_KV_BYTES);
#pragma unroll
            for (int p = 0; p < PANELS; ++p) {
                tma_load(sK + p * BLOCK_N * 128, &tmK, p * 64, n0, hk, b, FULL_KV);
                tma_load(sV + p * BLOCK_N * 128, &tmV, p * 64, n0, hk, b, FULL_KV);
            }
            // FA2 Alg. 2 line 9 as a ring: step t's Q_i, dO_i, L2_i, D_i into slot t % STAGES. (i, hq) step along
            // with t (ORDER=0: i over i_first..Tr-1, then the group's next query head; ORDER=1: the group's heads,
            // then the next lower i) rather than from t % T, t / T: the divisions' registers spilled at the producer's 24
            // tests/test_bwd_order.py's v4_loader / v4_reducer copy these two counters' loops: change them together
            int i = ORDER ? i_first + T - 1 : i_first, hq = hk * G;
            for (int t = 0; t < TG; ++t) {
                const int slot = t % STAGES, use = t / STAGES;
                if (use > 0) mbar_wait(EMPTY_Q(slot), (use - 1) & 1);  // step t - STAGES is done with the slot
                const int m0 = i * BLOCK_M;
                const u32 full = FULL_Q(slot), sl = sLD0 + slot * LD_BYTES;
                mbar_expect_tx(full, 2 * TILE_Q_BYTES + LD_BYTES);
#pragma unroll
                for (int p = 0; p < PANELS; ++p) {
                    tma_load_q(sQ0 + slot * TILE_Q_BYTES + p * BLOCK_M * 128, &tmQ, p * 64, m0, hq, b, full);
                    tma_load_q(sdO0 + slot * TILE_Q_BYTES + p * BLOCK_M * 128, &tmdO, p * 64, m0, hq, b, full);
                }
                const long long row = ((long long)b * H + hq) * Nq_pad + m0;  // padded to Nq_pad: in bounds
                bulk_load(sl, L2g + row, 4 * BLOCK_M, full);
                bulk_load(sl + 4 * BLOCK_M, Dg + row, 4 * BLOCK_M, full);
#if ORDER
                if (++hq == hk * G + G) hq -= G, --i;  // the group's first query head, Q block i - 1
#else
                if (++i == i_first + T) i = i_first, ++hq;
#endif
            }
        } else if (warp == 1 && lane == 0) {
            // FA2 Alg. 2 line 15's sum over j: each step's NWG slices, reduce-added into the fragment-ordered dQacc
            // dQacc's tile (b*H + hq, i): (b*H + hq) * Tr_pad + i, Tr_pad = Nq_pad / Br; stepped as the loader steps
            const int tr_pad = Nq_pad / BLOCK_M;
            long long tile = ((long long)b * H + hk * G) * tr_pad + (ORDER ? i_first + T - 1 : i_first);
            int i = ORDER ? 0 : i_first;  // ORDER=1: the head of the group (0..G-1) instead
            for (int t = 0; t < TG; ++t) {
                const int buf = t % DQ_BUFS, use = t / DQ_BUFS;
#pragma unroll
                for (int w = 0; w < NWG; ++w) {
                    mbar_wait(DQ_FULL(buf, w), use & 1);
                    bulk_reduce_add_f32(dQacc + (tile * NWG + w) * (64 * DQ_N), sdQ0 + (buf * NWG + w) * DQ_SLICE_BYTES,
                                        DQ_SLICE_BYTES);
                }
#if ORDER
                if (++i == G) i = 0, tile -= (long long)(G - 1) * tr_pad + 1;  // the group's first head, Q block i - 1
                else tile += tr_pad;                                         // the group's next query head
#else
                if (++i == i_first + T) i = i_first, tile += tr_pad - T + 1;  // the group's next query head
                else ++tile;
#endif
                bulk_wait_read();  // both slices read: the buffer may be overwritten
#pragma unroll
                for (int w = 0; w < NWG; ++w) mbar_arrive(DQ_EMPTY(buf, w));
            }
            bulk_wait_all();  // written, not only read: the smem stays valid until then
        }
        return;
    }

    // ---------------------------------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
    const int cg = wg - 1, wq = warp & 3;
    // FA2 Alg. 2 line 7
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int x = 0; x < D / 2; ++x) dk[x] = dv[x] = 0.f;

    const int key_l = cg * 64 + wq * 16 + (lane >> 2);  // this thread's key rows: key_l, key_l + 8 (of the block)
    const int ms = cg % MSL, ns = cg / MSL;             // this warpgroup's slice of the dQ tile
    const bool key_tail = n0 + BLOCK_N > Nk;
    mbar_wait(FULL_KV, 0);

    for (int t = 0; t < TG; ++t) {
        const int m0 = (ORDER ? i_first + T - 1 - t / G : i_first + t % T) * BLOCK_M, slot = t % STAGES;
        const u32 sQ = sQ0 + slot * TILE_Q_BYTES, sdO = sdO0 + slot * TILE_Q_BYTES;
        const u32 sL = sLD0 + slot * LD_BYTES, sDd = sL + 4 * BLOCK_M;
        const u32 sdS = sdS0 + (t % DS_BUFS) * TILE_DS_BYTES;
        // this thread's lane-dependent offsets, recomputed each step from an opaque copy of tid: hoisted out of the
        // loop, they were spilled at the consumers' 240 registers and reloaded every step
        const int tr = opaque(tid), ln = tr & 31, t128 = tr & 127;
        const int key_r = cg * 64 + ((tr >> 5) & 3) * 16 + (ln >> 2);  // = key_l
        mbar_wait(FULL_Q(slot), (t / STAGES) & 1);

        float s[BLOCK_M / 2], dp[BLOCK_M / 2];
        issue_t(s, sK, sQ, cg);    // FA2 Alg. 2 line 10
        issue_t(dp, sV, sdO, cg);  // FA2 Alg. 2 line 13, on the tensor cores during FA2 Alg. 2 line 11
        const bool need_mask = key_tail || (is_causal && n0 + BLOCK_N - 1 > m0 + causal_off);
#if MERGED
        wgmma_wait<0>();  // S^T and dP^T: P^T and dS^T in one pass, so P^T's fp32 copy dies as it is packed
        wgmma_fence_operand(s);
        wgmma_fence_operand(dp);
#if DS_BUFS == 1
        named_sync(BAR_DS_EMPTY, NCONS);  // every dQ product of step t-1 has read the dS^T tile
#endif
#pragma unroll
        for (int nt = 0; nt < NQ8; ++nt) {
            const int c = 8 * nt + 2 * (ln & 3);  // query column (of the block) of elements e = 0, 1
            const float2 l2 = lds_f2(sL + c * 4), dd = lds_f2(sDd + c * 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float p0 = p_elem(s[4 * nt + 2 * h], l2.x, scale_log2, need_mask, n0 + key_l + 8 * h, m0 + c, Nk,
                                  is_causal, causal_off);
                float p1 = p_elem(s[4 * nt + 2 * h + 1], l2.y, scale_log2, need_mask, n0 + key_l + 8 * h,
                                  m0 + c + 1, Nk, is_causal, causal_off);
                s[4 * nt + 2 * h] = p0;  // FA2 Alg. 2 line 11
                s[4 * nt + 2 * h + 1] = p1;
                dp[4 * nt + 2 * h] = p0 * (dp[4 * nt + 2 * h] - dd.x);  // FA2 Alg. 2 line 14
                dp[4 * nt + 2 * h + 1] = p1 * (dp[4 * nt + 2 * h + 1] - dd.y);
                store_ds(sdS, key_r + 8 * h, nt, ln, dp[4 * nt + 2 * h], dp[4 * nt + 2 * h + 1]);
            }
        }
        {
            u32 pa[KM][4];
            pack_frag(pa, s);
            wgmma_fence_operand(dv);
            issue_acc(dv, pa, sdO);  // FA2 Alg. 2 line 12
        }
#else
        wgmma_wait<1>();
        wgmma_fence_operand(s);
        // FA2 Alg. 2 line 11: P^T = exp2(S^T * scale * log2e - L2_i); hidden (key, query) pairs and key padding -> 0
#pragma unroll
        for (int nt = 0; nt < NQ8; ++nt) {
            const int c = 8 * nt + 2 * (ln & 3);
            const float2 l2 = lds_f2(sL + c * 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                s[4 * nt + 2 * h] = p_elem(s[4 * nt + 2 * h], l2.x, scale_log2, need_mask, n0 + key_l + 8 * h, m0 + c,
                                           Nk, is_causal, causal_off);
                s[4 * nt + 2 * h + 1] = p_elem(s[4 * nt + 2 * h + 1], l2.y, scale_log2, need_mask, n0 + key_l + 8 * h,
                                               m0 + c + 1, Nk, is_causal, causal_off);
            }
        }
        {
            u32 pa[KM][4];
            pack_frag(pa, s);
            wgmma_fence_operand(dv);
            issue_acc(dv, pa, sdO);  // FA2 Alg. 2 line 12
        }
        wgmma_wait<1>();  // S^T, dP^T done; dV may still run
        wgmma_fence_operand(dp);
#if DS_BUFS == 1
        named_sync(BAR_DS_EMPTY, NCONS);  // every dQ product of step t-1 has read the dS^T tile
#endif
        // FA2 Alg. 2 line 14: dS^T = P^T o (dP^T - D_i), stored as is (rows = keys) for FA2 Alg. 2 line 15
#pragma unroll
        for (int nt = 0; nt < NQ8; ++nt) {
            const int c = 8 * nt + 2 * (ln & 3);
            const float2 dd = lds_f2(sDd + c * 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                dp[4 * nt + 2 * h] = s[4 * nt + 2 * h] * (dp[4 * nt + 2 * h] - dd.x);
                dp[4 * nt + 2 * h + 1] = s[4 * nt + 2 * h + 1] * (dp[4 * nt + 2 * h + 1] - dd.y);
                store_ds(sdS, key_r + 8 * h, nt, ln, dp[4 * nt + 2 * h], dp[4 * nt + 2 * h + 1]);
            }
        }
#endif
        {
            u32 dsa[KM][4];
            pack_frag(dsa, dp);
            wgmma_fence_operand(dk);
            issue_acc(dk, dsa, sQ);  // FA2 Alg. 2 line 16
        }
        fence_proxy_async();              // the dS^T stores (generic proxy) before wgmma reads them (async proxy)
        named_sync(BAR_DS_FULL, NCONS);   // ... and both warpgroups' rows are written

        float dq[DQ_N / 2];
        issue_dq(dq, sdS, sK, ms, ns);  // FA2 Alg. 2 line 15
        wgmma_wait<0>();
        wgmma_fence_operand(dq);
        wgmma_fence_operand(dk);
        wgmma_fence_operand(dv);
        // every thread arrives: an arrive releases only its own thread's earlier reads (PTX memory model), so one
        // arrive per warp would leave the other lanes' ld.shared of L2_i, D_i unordered before the next bulk copy
        mbar_arrive(EMPTY_Q(slot));  // this thread's products have read Q_i, dO_i; its L2_i, D_i reads are done

        // the slice to smem in fragment order; producer warp 1 reduce-adds it into dQacc
        const int buf = t % DQ_BUFS, use = t / DQ_BUFS;
        if (use > 0) mbar_wait(DQ_EMPTY(buf, cg), (use - 1) & 1);  // the reduce of step t - DQ_BUFS has read it
        const u32 sdq = sdQ0 + (buf * NWG + cg) * DQ_SLICE_BYTES;
#pragma unroll
        for (int j = 0; j < DQ_N / 8; ++j)
            asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"r"(sdq + (j * 128 + t128) * 16),
                         "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3]) : "memory");
        fence_proxy_async();  // generic-proxy stores before the bulk reduce (async proxy) reads them
        mbar_arrive(DQ_FULL(buf, cg));
    }

    // FA2 Alg. 2 line 18: dK_j = scale * sum dS^T Q (the scores were S * scale), dV_j
    const int hkv = H / G, b = GRID_ROW / hkv, hk = GRID_ROW % hkv;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = n0 + key_l + 8 * h;
        if (key < Nk) {
            u16* dk_row = dKg + b * dk_sb + hk * dk_sh + key * dk_sr + 2 * (lane & 3);
            u16* dv_row = dVg + b * dv_sb + hk * dv_sh + key * dv_sr + 2 * (lane & 3);
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                *(u32*)(dk_row + 8 * dt) = pack2(dk[4 * dt + 2 * h] * scale, dk[4 * dt + 2 * h + 1] * scale);
                *(u32*)(dv_row + 8 * dt) = pack2(dv[4 * dt + 2 * h], dv[4 * dt + 2 * h + 1]);
            }
        }
    }
}
