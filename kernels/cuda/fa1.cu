// FlashAttention-1 forward, teaching tier (Dao et al. 2022, Algorithm 1 as printed). Mirrors
// variants/fa1.py.
//
// One thread block per (batch, head), as the paper parallelises it: the block runs both loops of
// Algorithm 1 itself, K_j, V_j outer (FA1 Alg. 1 line 5), Q_i inner (FA1 Alg. 1 line 7). The running O_i (output dtype),
// l_i and m_i live in HBM and make a round trip at every visited (j, i): read at FA1 Alg. 1 line 8, written
// back at FA1 Alg. 1 lines 12-13. An epilogue (not in Algorithm 1) turns l, m into lse = m + log l.
//
//   FA1 Alg. 1 line 9   S_ij = scale * Q_i K_j^T
//   FA1 Alg. 1 line 10  m~ = rowmax(S), P~ = exp(S - m~), l~ = rowsum(P~)
//   FA1 Alg. 1 line 11  m_new = max(m_i, m~), l_new = e^{m_i - m_new} l_i + e^{m~ - m_new} l~
//   FA1 Alg. 1 line 12  O_i = diag(l_new)^-1 (diag(l_i) e^{m_i - m_new} O_i + e^{m~ - m_new} P~ V_j)
//   FA1 Alg. 1 line 13  l_i = l_new, m_i = m_new
//
// HBM traffic: as variants/fa1.py counts it (FA1 Alg. 1 line 2 initialisation; K_j, V_j once per j; Q_i, O_i,
// l_i, m_i read and O_i, l_i, m_i written per visited (j, i); the lse epilogue reads l, m once).
// No differences. Each thread reads back only the O_i elements it wrote itself (the fixed thread
// mapping of teaching.cuh), and the barrier between FA1 Alg. 1 line 8's reads and FA1 Alg. 1 line 13's writes orders
// the l, m round trip between the 16 threads of a row.
//
// Caveats: B*H thread blocks use at most B*H of the GPU's 132 SMs (the limit FA2 removes by
// parallelising over Q blocks too); each SM's block works alone, so the loads are not hidden.
#include "teaching.cuh"

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)  // one block per SM: B*H blocks, 115 KB
fa1_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
            T* __restrict__ o, float* __restrict__ l_hbm, float* __restrict__ m_hbm,
            float* __restrict__ lse, int n_q, int n_k, int d, float scale, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, ldp = BC + 1;
  float* Ks = smem;            // Bc x ld   K_j
  float* Vs = Ks + BC * ld;    // Bc x ld   V_j
  float* Qs = Vs + BC * ld;    // Br x ld   Q_i
  float* Ps = Qs + BR * ld;    // Br x ldp  P~_ij

  const long long bh = blockIdx.x;
  // FA1 Alg. 1 line 1: Br = BR, Bc = BC are compile-time (kernels/fa1.py picks them; closed_forms.fa1_blocks
  // derives the paper's from M)
  const int t_r = cdiv(n_q, BR), t_c = cdiv(n_k, BC), offset = n_k - n_q;
  const T* Qg = q + bh * n_q * d;
  const T* Kg = k + bh * n_k * d;
  const T* Vg = v + bh * n_k * d;
  T* Og = o + bh * n_q * d;
  float* lg = l_hbm + bh * n_q;
  float* mg = m_hbm + bh * n_q;

  // FA1 Alg. 1 line 2: initialise O = 0, l = 0, m = -inf in HBM
  for (long long e = threadIdx.x; e < (long long)n_q * d; e += NTHREADS) store_as(Og + e, 0.f);
  for (int r = threadIdx.x; r < n_q; r += NTHREADS) {
    lg[r] = 0.f;
    mg[r] = NEG_INF;
  }

  for (int j = 0; j < t_c; ++j) {  // FA1 Alg. 1 line 5: for 1 <= j <= Tc
    const int c0 = j * BC, cols = min(BC, n_k - c0);
    __syncthreads();  // FA1 Alg. 1 line 2's writes / the previous j's reads of Ks, Vs are done
    // FA1 Alg. 1 line 6: load K_j, V_j from HBM to on-chip SRAM
    load_tile(Ks, ld, Kg + (long long)c0 * d, d, cols, d, BC, d_pad);
    load_tile(Vs, ld, Vg + (long long)c0 * d, d, cols, d, BC, d_pad);
    // FA1 Alg. 1 line 7: for 1 <= i <= Tr, skipping the Q blocks the mask hides (tiling.q_blocks(j), a suffix)
    const int i_first = causal ? min(max(0, c0 - offset) / BR, t_r - 1) : 0;
    for (int i = i_first; i < t_r; ++i) {
      const int r0 = i * BR, rows = min(BR, n_q - r0);
      // FA1 Alg. 1 line 8: load Q_i, O_i, l_i, m_i from HBM (O_i, l_i, m_i straight into registers)
      load_tile(Qs, ld, Qg + (long long)r0 * d, d, rows, d, BR, d_pad);
      float Oi[RA][DV], li[RA], mi[RA];
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const int r = ty + TY * a;
        li[a] = r < rows ? lg[r0 + r] : 0.f;
        mi[a] = r < rows ? mg[r0 + r] : NEG_INF;
#pragma unroll
        for (int b = 0; b < DV; ++b) {
          const int c = tx + TX * b;
          Oi[a][b] = (r < rows && c < d) ? to_f32(Og[(long long)(r0 + r) * d + c]) : 0.f;
        }
      }
      __syncthreads();  // Q_i (and K_j, V_j) are in SRAM

      // FA1 Alg. 1 line 9: S_ij = scale * Q_i K_j^T (masked entries -inf)
      float S[RA][CB];
      tile_qk(S, Qs, Ks, ld, d);
      float m_new[RA], l_new[RA], alpha[RA], beta[RA];
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const int r = r0 + ty + TY * a;
        // FA1 Alg. 1 line 10: m~_ij = rowmax(S_ij), P~_ij = exp(S_ij - m~_ij), l~_ij = rowsum(P~_ij)
        float mx = NEG_INF;
#pragma unroll
        for (int b = 0; b < CB; ++b) {
          S[a][b] = visible(r, c0 + tx + TX * b, c0 + cols, offset, causal) ? S[a][b] * scale
                                                                             : NEG_INF;
          mx = fmaxf(mx, S[a][b]);
        }
        const float m_tilde = row_max16(mx);
        float sum = 0.f;
#pragma unroll
        for (int b = 0; b < CB; ++b) {
          const float p = expf(S[a][b] - finite_or_zero(m_tilde));
          Ps[(ty + TY * a) * ldp + tx + TX * b] = p;
          sum += p;
        }
        const float l_tilde = row_sum16(sum);
        // FA1 Alg. 1 line 11: m_new = max(m_i, m~), l_new = e^{m_i - m_new} l_i + e^{m~ - m_new} l~
        m_new[a] = fmaxf(mi[a], m_tilde);
        const float m_safe = finite_or_zero(m_new[a]);
        alpha[a] = expf(mi[a] - m_safe);
        beta[a] = expf(m_tilde - m_safe);
        l_new[a] = alpha[a] * li[a] + beta[a] * l_tilde;
      }
      __syncthreads();  // P~ complete in Ps; every thread's line-8 reads precede FA1 Alg. 1 line 13's writes

      // FA1 Alg. 1 line 12: O_i = diag(l_new)^-1 (diag(l_i) e^{m_i - m_new} O_i + e^{m~ - m_new} P~ V_j)
      float PV[RA][DV];
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int b = 0; b < DV; ++b) PV[a][b] = 0.f;
      tile_pv(PV, Ps, ldp, Vs, ld, d_pad);
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const int r = ty + TY * a;
        if (r >= rows) continue;
        const float inv_l = l_new[a] == 0.f ? 1.f : 1.f / l_new[a];  // safe_div
#pragma unroll
        for (int b = 0; b < DV; ++b) {
          const int c = tx + TX * b;
          if (c < d)
            store_as(Og + (long long)(r0 + r) * d + c,
                     (li[a] * alpha[a] * Oi[a][b] + beta[a] * PV[a][b]) * inv_l);
        }
        // FA1 Alg. 1 line 13: write l_i = l_new, m_i = m_new to HBM
        if (tx == 0) {
          lg[r0 + r] = l_new[a];
          mg[r0 + r] = m_new[a];
        }
      }
      __syncthreads();  // the next i overwrites Qs and Ps
    }
  }

  // epilogue (beyond FA1 Alg. 1 line 16): lse = m + log l, one pass over the statistics
  __syncthreads();  // the last line-13 writes are visible to every thread of the block
  for (int r = threadIdx.x; r < n_q; r += NTHREADS) {
    const float l = lg[r];
    lse[bh * n_q + r] = l == 0.f ? NEG_INF : mg[r] + logf(l);
  }
}
