// FROZEN v1 of kernels/cuda/fa2_bwd.cu (as measured in results/bwd_kernels_vs_sdpa_grid: 25.0 / 17.9 TFLOP/s at N = 4096,
// d = 64 / 128, fp16, non-causal), kept unchanged as the baseline of lab/teach_bwd_ab.py's A/B. Not shipped:
// kernels/fa2.py launches fa2_bwd.cu. Its launcher is lab/teach_bwd_ab.py fa2_v1_backward.
//
// FlashAttention-2 backward, teaching tier (Dao 2023, Algorithm 2). Mirrors variants/fa2.py's backward.
//
// Three launches (kernels/fa2.py backward):
//   fa2_bwd_preprocess  FA2 Alg. 2 lines 3-4: dQ_acc = 0 (float32, HBM); D = rowsum(dO o O) (float32, HBM)
//   fa2_bwd             FA2 Alg. 2 lines 5-16 and FA2 Alg. 2 line 18: one block per (key block j,
//                       batch*head); the outer loop (FA2 Alg. 2 line 5) is the grid; K_j, V_j stay in
//                       shared memory, dK_j, dV_j in registers; the inner loop walks the Q blocks i
//   fa2_bwd_dq          FA2 Alg. 2 line 20: dQ = scale * dQ_acc, in the input dtype
//
// Per visited (i, j), five products (FA2 Alg. 2 line 10, FA2 Alg. 2 lines 12-13, FA2 Alg. 2 lines 15-16),
// all float32 FFMA:
//   S   = scale * Q_i K_j^T      rows ty+16a, key columns tx+16b per thread (as the forward)
//   P   = exp(S - L_i)           recomputed from the saved L (natural log of the scaled scores, the
//                                forward's lse), so no Nq x Nk matrix was kept
//   dP  = dO_i V_j^T             same mapping as S
//   dS  = P o (dP - D_i)         the softmax's chain rule with D_i = rowsum(dO_i o O_i) = rowsum(P o dP)
//   dV_j += P^T dO_i             key rows ty+16a, columns tx+16b per thread (registers)
//   dK_j += dS^T Q_i             same mapping (registers); times scale when written
//   dQ_i += dS K_j               float32 atomics into dQ_acc
//
// Why atomics for dQ: with key blocks outer, the Tc blocks of one (b, h) all add into every dQ_i
// at the same time. A block cannot own dQ_i as it owns dK_j, dV_j; the alternatives are a second
// pass with query blocks outer (recomputing S, P, dP: ~40% more FLOPs) or a lock per dQ_i. FA2 and FA3
// use float32 atomicAdd into an HBM accumulator, and so does this kernel; the price is that dQ's low
// bits depend on the order the blocks run (dK, dV are deterministic).
//
// Rows that see no key (causal, Nq > Nk) have L = -inf: P uses finite_or_zero(L) so exp(-inf - 0) = 0
// instead of NaN, and their dQ, and their share of dK, dV, are 0. Tail query rows (r >= Nq) are
// masked to P = 0 so they add nothing; tail key rows and padding columns are zero-filled and never
// written. Causal: Q blocks that see none of K_j are skipped (they are a prefix: i < i_first).
//
// Shared memory (float32, ld = D_PAD + 1 as the forward): K_j, V_j (Bc x ld) for the whole block,
// Q_i, dO_i (Br x ld) and P, dS (Br x (Bc + 1)) per step, L_i, D_i (Br): 162 KB at d = 128 (one block
// per SM), 98 KB at d <= 64 (two). Caveats (teaching tier): CUDA cores only, no double buffering,
// three barriers per step; a readable statement of Algorithm 2, not a fast one (see fa2_wgmma_bwd).
#include "../../kernels/cuda/teaching.cuh"  // the teaching tier's tiles, as v1 used them

#ifndef D_PAD
#define D_PAD 128  // 64 for d <= 64 (kernels/fa2.py sets it): halves the dK, dV, dQ registers
#endif
#define NS (D_PAD / TX)  // columns of a (rows x d) tile per thread

static_assert(D_PAD == 64 || D_PAD == 128, "D_PAD is 64 or 128");

// FA2 Alg. 2 lines 3-4: zero the float32 dQ accumulator and write D_i = rowsum(dO_i o O_i).
// One warp per row, 8 rows per block; grid (cdiv(Nq, 8), B*H).
extern "C" __global__ void __launch_bounds__(NTHREADS)
fa2_bwd_preprocess(const T* __restrict__ o, const T* __restrict__ dout, float* __restrict__ dq_acc,
                   float* __restrict__ delta, int n_q, int d) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x * (NTHREADS / 32) + warp;
  if (r >= n_q) return;
  const long long row = (long long)blockIdx.y * n_q + r;
  float sum = 0.f;
  for (int c = lane; c < d; c += 32) {
    sum = fmaf(to_f32(dout[row * d + c]), to_f32(o[row * d + c]), sum);
    dq_acc[row * d + c] = 0.f;  // FA2 Alg. 2 line 3: dQ = (0) in HBM
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[row] = sum;  // FA2 Alg. 2 line 4: D = rowsum(dO o O), written to HBM
}

// acc[a][b] += sum_r A[r][ty+16a] * B[r][tx+16b]: this thread's share of A^T B, A (Br x ldp), B (Br x ld).
// dV_j += P^T dO_i (FA2 Alg. 2 line 12) and dK_j += dS^T Q_i (FA2 Alg. 2 line 16).
__device__ __forceinline__ void tile_tn(float (&acc)[CB][NS], const float* A, int ldp, const float* B,
                                        int ld) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll 4
  for (int r = 0; r < BR; ++r) {
    float x[CB], y[NS];
#pragma unroll
    for (int a = 0; a < CB; ++a) x[a] = A[r * ldp + ty + TY * a];
#pragma unroll
    for (int b = 0; b < NS; ++b) y[b] = B[r * ld + tx + TX * b];
#pragma unroll
    for (int a = 0; a < CB; ++a)
#pragma unroll
      for (int b = 0; b < NS; ++b) acc[a][b] = fmaf(x[a], y[b], acc[a][b]);
  }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, D_PAD == 64 ? 2 : 1)
fa2_bwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
        const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
        float* __restrict__ dq_acc, T* __restrict__ dk, T* __restrict__ dv, int n_q, int n_k, int d,
        float scale, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int ld = D_PAD + 1, ldp = BC + 1;
  float* Ks = smem;             // Bc x ld   K_j
  float* Vs = Ks + BC * ld;     // Bc x ld   V_j
  float* Qs = Vs + BC * ld;     // Br x ld   Q_i
  float* dOs = Qs + BR * ld;    // Br x ld   dO_i
  float* Ps = dOs + BR * ld;    // Br x ldp  P_i^(j)
  float* dSs = Ps + BR * ldp;   // Br x ldp  dS_i^(j)
  float* Ls = dSs + BR * ldp;   // Br        L_i
  float* Ds = Ls + BR;          // Br        D_i

  // FA2 Alg. 2 line 5: this block's key block j and (batch, head). Block j = 0 sees the most Q blocks under the
  // causal mask, so the grid's natural order is already heaviest first.
  const int j = blockIdx.x;
  const long long bh = blockIdx.y;
  const int c0 = j * BC, cols = min(BC, n_k - c0), offset = n_k - n_q;
  const int t_r = cdiv(n_q, BR);
  // counting/tiling.py q_blocks(j): Q block i visits K_j iff its last row sees column c0
  const int i_first = causal ? min(max(0, c0 - offset) / BR, t_r - 1) : 0;

  // FA2 Alg. 2 line 6: load K_j, V_j from HBM to on-chip SRAM (zero-filled tails and padding)
  load_tile(Ks, ld, k + (bh * n_k + c0) * d, d, cols, d, BC, D_PAD);
  load_tile(Vs, ld, v + (bh * n_k + c0) * d, d, cols, d, BC, D_PAD);

  // FA2 Alg. 2 line 7: on chip, dK_j = 0, dV_j = 0 (Bc x d): key rows ty+16a, columns tx+16b of each thread
  float dK[CB][NS], dV[CB][NS];
#pragma unroll
  for (int a = 0; a < CB; ++a)
#pragma unroll
    for (int b = 0; b < NS; ++b) dK[a][b] = dV[a][b] = 0.f;

  for (int i = i_first; i < t_r; ++i) {  // FA2 Alg. 2 line 8: for 1 <= i <= Tr (hidden Q blocks skipped)
    const int r0 = i * BR, rows = min(BR, n_q - r0);
    const long long row0 = bh * n_q + r0;
    __syncthreads();  // the previous step is done with Qs, dOs, Ps, dSs
    // FA2 Alg. 2 line 9: load Q_i, dO_i, L_i, D_i from HBM to on-chip SRAM (dQ_i is read-modify-written by
    // the atomics of FA2 Alg. 2 line 15 instead of being loaded)
    load_tile(Qs, ld, q + row0 * d, d, rows, d, BR, D_PAD);
    load_tile(dOs, ld, dout + row0 * d, d, rows, d, BR, D_PAD);
    for (int r = threadIdx.x; r < BR; r += NTHREADS) {
      Ls[r] = r < rows ? finite_or_zero(lse[row0 + r]) : 0.f;  // L = -inf: a row that sees no key
      Ds[r] = r < rows ? delta[row0 + r] : 0.f;
    }
    __syncthreads();

    // FA2 Alg. 2 line 10: S_i^(j) = scale * Q_i K_j^T
    float P[RA][CB], dP[RA][CB];
    tile_qk(P, Qs, Ks, ld, d);
    // FA2 Alg. 2 line 13 (computed here, before the barrier, since it needs only dO_i and V_j):
    // dP_i^(j) = dO_i V_j^T
    tile_qk(dP, dOs, Vs, ld, d);
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      const int r = ty + TY * a;
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        const int c = tx + TX * b;
        // FA2 Alg. 2 line 11: P_i^(j) = exp(S_i^(j) - L_i); hidden entries (causal, tails) are 0
        const bool seen = r < rows && visible(r0 + r, c0 + c, c0 + cols, offset, causal);
        const float p = seen ? expf(P[a][b] * scale - Ls[r]) : 0.f;
        P[a][b] = p;
        Ps[r * ldp + c] = p;
        // FA2 Alg. 2 line 14: dS_i^(j) = P_i^(j) o (dP_i^(j) - D_i)
        dSs[r * ldp + c] = p * (dP[a][b] - Ds[r]);
      }
    }
    __syncthreads();  // P and dS complete: every thread needs whole columns of them below

    // FA2 Alg. 2 line 12: dV_j <- dV_j + (P_i^(j))^T dO_i
    tile_tn(dV, Ps, ldp, dOs, ld);

    // FA2 Alg. 2 line 15: dQ_i <- dQ_i + dS_i^(j) K_j, added into the float32 accumulator in HBM (atomics: the
    // other key blocks of this (b, h) add into the same dQ_i concurrently). The scale is applied
    // once, by fa2_bwd_dq.
    float dQ[RA][DV];
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < DV; ++b) dQ[a][b] = 0.f;
    tile_pv_ns<NS>(dQ, dSs, ldp, Ks, ld);
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      const int r = ty + TY * a;
      if (r >= rows) continue;
#pragma unroll
      for (int b = 0; b < NS; ++b) {
        const int c = tx + TX * b;
        if (c < d) atomicAdd(dq_acc + (row0 + r) * d + c, dQ[a][b]);
      }
    }

    // FA2 Alg. 2 line 16: dK_j <- dK_j + (dS_i^(j))^T Q_i
    tile_tn(dK, dSs, ldp, Qs, ld);
  }  // end for (over the Q blocks i)

  // FA2 Alg. 2 line 18: write dK_j (times the scale of S = scale * Q K^T), dV_j to HBM
#pragma unroll
  for (int a = 0; a < CB; ++a) {
    const int c = ty + TY * a;
    if (c >= cols) continue;
    T* dKg = dk + (bh * n_k + c0 + c) * d;
    T* dVg = dv + (bh * n_k + c0 + c) * d;
#pragma unroll
    for (int b = 0; b < NS; ++b) {
      const int x = tx + TX * b;
      if (x < d) {
        store_as(dKg + x, dK[a][b] * scale);
        store_as(dVg + x, dV[a][b]);
      }
    }
  }
}

// FA2 Alg. 2 line 20: dQ = scale * dQ_acc in the input dtype (the accumulator stays float32 until every key
// block has added into it). Grid-stride over B*H*Nq*d elements.
extern "C" __global__ void __launch_bounds__(NTHREADS)
fa2_bwd_dq(const float* __restrict__ dq_acc, T* __restrict__ dq, long long n, float scale) {
  for (long long e = blockIdx.x * (long long)NTHREADS + threadIdx.x; e < n;
       e += (long long)gridDim.x * NTHREADS)
    store_as(dq + e, dq_acc[e] * scale);
}
