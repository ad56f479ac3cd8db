// FlashAttention-2 forward, teaching tier (Dao 2023, Algorithm 1). Mirrors variants/fa2.py.
//
// One thread block per (Q block i, batch*head): the outer loop of Algorithm 1 (FA2 Alg. 1 line 3) is the grid.
// Grouped-query K/V (H_kv heads, H_kv dividing H): the block of query head h reads K/V of kv head h / (H / H_kv).
// The block streams K_j, V_j through shared memory (FA2 Alg. 1 lines 6-7) and keeps O_i, l_i, m_i in registers;
// the normalisation by l_i is deferred to the end (FA2 Alg. 1 line 12) and only O_i and L_i are written.
//
//   S = scale * Q_i K_j^T          (FA2 Alg. 1 line 8)   rows ty+16a, columns tx+16b of each thread
//   m_new = max(m, rowmax S)       (FA2 Alg. 1 line 9)   16-lane shuffles
//   P = exp(S - m_new), l = e^{m - m_new} l + rowsum P
//   O = e^{m - m_new} O + P V_j    (FA2 Alg. 1 line 10)  P goes through shared memory (every thread needs a row)
//
// HBM traffic: as variants/fa2.py counts it - Q_i read once, K_j and V_j read once per visited
// (i, j), O_i and L_i written once. No differences.
//
// Caveats (teaching tier): float32 FFMA on CUDA cores (no tensor cores), so both products run at
// the same ~15-20 TFLOP/s as naive.cu's and naive's extra S/P traffic is a small part of its time
// (see results/bench_kernels.md); at d > 64 one shared buffer holds K_j and then V_j, so V_j is
// loaded only after S is done (two blocks per SM overlap each other instead); no double buffering;
// expf, as the reference's exp (exp2f with a folded log2(e) measured no faster: v2 below).
// The grid is walked heaviest-first for causal (the last Q blocks see the most keys).
//
// Version notes (llm.c style):
//   v1  16x16 threads, 4x4 register micro-tiles, K and V share one buffer (83 KB at d=128,
//       so 2 blocks per SM), expf. H200, fp16, B*N=16k, non-causal: 15.2 TFLOP/s at d=64 N=4k
//       (a tie with naive: 36.1 vs 36.1 ms), 16.3 at N=16k; 20.1 / 21.4 at d=128.
//   v2  at d <= 64 (FA2_OWN_V=1, set by kernels/fa2.py), V_j in its own buffer, loaded with K_j (66 KB,
//       still 2 blocks per SM): one barrier and one exposed load latency less per step. Predicted ~5%
//       at d=64 (with exp2f ~10%). Measured, A/B in one run each (results/fa2_teaching_ab*.json,
//       N=4k fp16): own V 34.98 -> 33.84 ms and 34.86 -> 34.60 ms non-causal, 19.47 -> 18.83 and
//       19.53 -> 19.38 causal: 1-3%, less than predicted (the two blocks per SM already hid most of the
//       V load). exp2f for expf: +-0.3%, noise, so dropped. Negative: own_v as a runtime test on d cost
//       the d=128 path 5-10% (26.6 -> 27.9 ms, same 128 registers) though it never took the branch
//       there; as a compile-time define the d=128 build is v1's code (26.59 vs 26.69 ms).
//       fa2 vs naive at N=4k after v2: d=64 1.01x (34.72 vs 35.03 ms), d=128 1.06x, causal 1.10-1.16x.
#include "teaching.cuh"

#ifndef FA2_OWN_V
#define FA2_OWN_V 0  // 1: V_j gets its own shared buffer (the launcher sets it for d <= 64)
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS, 2)  // 2 blocks per SM: 2 x 83 KB of shared memory at d=128
fa2_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
            T* __restrict__ o, float* __restrict__ lse, int n_q, int n_k, int d, float scale,
            int causal, int group) {  // group = H / H_kv query heads per kv head (1: K/V have H heads)
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, ldp = BC + 1;
  float* Qs = smem;              // Br x ld    Q_i
  float* KVs = Qs + BR * ld;     // Bc x ld    K_j (and V_j after it unless FA2_OWN_V)
  float* Ps = KVs + BC * ld;     // Br x ldp   P~_ij
#if FA2_OWN_V
  float* Vs = Ps + BR * ldp;     // Bc x ld    V_j, its own buffer (d <= 64 only: kernels/fa2.py sizes it)
#else
  float* Vs = KVs;
#endif

  // FA2 Alg. 1 line 3: this block's Q block i (heaviest first) and (batch, head)
  const int t_r = cdiv(n_q, BR);  // FA2 Alg. 1 line 1: Tr blocks of Br = BR rows, Tc of Bc = BC
  const int i = t_r - 1 - blockIdx.x;
  const long long bh = blockIdx.y;
  const int r0 = i * BR, rows = min(BR, n_q - r0), offset = n_k - n_q;
  const int t_vis = cdiv(visible_cols(r0, rows, n_k, offset, causal), BC);  // tiling.k_blocks(i)
  // grouped-query K/V: query head h of batch b reads kv head h / group, and b*H + h over group is b*H_kv + h/group
  const long long bh_kv = bh / group;
  const T* Kg = k + bh_kv * n_k * d;
  const T* Vg = v + bh_kv * n_k * d;

  // FA2 Alg. 1 line 4: load Q_i from HBM to on-chip SRAM
  load_tile(Qs, ld, q + (bh * n_q + r0) * d, d, rows, d, BR, d_pad);

  // FA2 Alg. 1 line 5: on chip, O_i = 0, l_i = 0, m_i = -inf
  float O[RA][DV], l[RA], m[RA];
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    l[a] = 0.f;
    m[a] = NEG_INF;
#pragma unroll
    for (int b = 0; b < DV; ++b) O[a][b] = 0.f;
  }

  for (int j = 0; j < t_vis; ++j) {  // FA2 Alg. 1 line 6: for 1 <= j <= Tc (hidden blocks skipped)
    const int c0 = j * BC, cols = min(BC, n_k - c0);
    __syncthreads();  // the previous step is done with KVs and Ps
    // FA2 Alg. 1 line 7: load K_j (and, with its own buffer, V_j) from HBM to on-chip SRAM
    load_tile(KVs, ld, Kg + (long long)c0 * d, d, cols, d, BC, d_pad);
#if FA2_OWN_V
    load_tile(Vs, ld, Vg + (long long)c0 * d, d, cols, d, BC, d_pad);
#endif
    __syncthreads();

    // FA2 Alg. 1 line 8: S_i^(j) = scale * Q_i K_j^T, masked entries (tails, causal) = -inf
    float S[RA][CB];
    tile_qk(S, Qs, KVs, ld, d);
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < CB; ++b)
        S[a][b] = visible(r0 + ty + TY * a, c0 + tx + TX * b, c0 + cols, offset, causal)
                      ? S[a][b] * scale : NEG_INF;

    // FA2 Alg. 1 line 9: m_i^(j) = max(m_i^(j-1), rowmax(S)); P~ = exp(S - m_i^(j));
    //         l_i^(j) = e^{m_i^(j-1) - m_i^(j)} l_i^(j-1) + rowsum(P~)
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      float mx = NEG_INF;
#pragma unroll
      for (int b = 0; b < CB; ++b) mx = fmaxf(mx, S[a][b]);
      const float m_new = fmaxf(m[a], row_max16(mx));
      const float m_safe = finite_or_zero(m_new);
      float sum = 0.f;
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        const float p = expf(S[a][b] - m_safe);
        Ps[(ty + TY * a) * ldp + tx + TX * b] = p;
        sum += p;
      }
      const float alpha = expf(m[a] - m_safe);  // e^{m_i^(j-1) - m_i^(j)}
      l[a] = alpha * l[a] + row_sum16(sum);
#pragma unroll
      for (int b = 0; b < DV; ++b) O[a][b] *= alpha;  // FA2 Alg. 1 line 10, first term: diag(alpha) O
      m[a] = m_new;
    }
    __syncthreads();  // every thread is done with K_j; P~ is complete in Ps
#if !FA2_OWN_V
    // FA2 Alg. 1 line 7 (second half): load V_j into the buffer K_j used
    load_tile(KVs, ld, Vg + (long long)c0 * d, d, cols, d, BC, d_pad);
    __syncthreads();
#endif
    // FA2 Alg. 1 line 10, second term: O_i += P~ V_j
    tile_pv(O, Ps, ldp, Vs, ld, d_pad);
  }

  // FA2 Alg. 1 line 12: O_i = diag(l_i)^-1 O_i;  FA2 Alg. 1 line 13: L_i = m_i + log(l_i);  FA2 Alg. 1 lines 14-15: write O_i, L_i
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    const int r = ty + TY * a;
    if (r >= rows) continue;
    const float inv_l = l[a] == 0.f ? 0.f : 1.f / l[a];  // a row that sees no key: O = 0
    T* Og = o + (bh * n_q + r0 + r) * d;
#pragma unroll
    for (int b = 0; b < DV; ++b) {
      const int c = tx + TX * b;
      if (c < d) store_as(Og + c, O[a][b] * inv_l);
    }
    if (tx == 0) lse[bh * n_q + r0 + r] = l[a] == 0.f ? NEG_INF : m[a] + logf(l[a]);
  }
}  // FA2 Alg. 1 line 17: O and L are in HBM
