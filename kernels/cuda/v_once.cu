// "Multiply V once" (Dao-AILab/flash-attention issue #941), teaching tier. Mirrors variants/v_once.py.
//
// One thread block per (Q block i, batch*head), as FA2. Phase 1 builds the whole row of
// un-normalised probabilities f_i = [f_i0 | f_i1 | ...] (Br x visible Nk) with an online max and
// sum (#941 steps 1-4); phase 2 multiplies once: O_i = (f_i / l_i) V, streaming V_j block by block
// (#941 step 5).
//
// Compile-time knobs (kernels/v_once.py picks them):
//   V_ONCE_SRAM  1: the f row lives in shared memory in the input dtype (placement "sram");
//                0: f blocks are spilled to a global scratch buffer (B, H, Nq, Nk) ("hbm")
//   V_ONCE_LAZY  0: "eager", as the issue's code: when block j raises the running max, every
//                   earlier block f_ik (k < j) is multiplied by e^{m_old - m_new} (read and written
//                   back in HBM when spilled);
//                1: "lazy": f_ij stays relative to its own block max m_ij (kept on chip, Br x Tc
//                   floats) and is rescaled once, fused into phase 2: f_ij e^{m_ij - m_i} / l_i.
//
// HBM traffic: as variants/v_once.py counts it - Q_i read once, K_j and V_j once per visited
// (i, j), O_i and lse written once; spilled: each f block written once and read once for the
// product, plus, eager, one read and one write of every earlier block at every later block
// ((Tc-1)Tc/2 block reads and writes per Q block). No differences. Each thread reads back only
// the f elements it wrote itself (the fixed mapping of teaching.cuh), so the spilled row needs no
// barrier between its writes and reads.
//
// Caveats: the issue adds EPSILON to each block sum; this does not (as the reference). Like the
// reference, f is rounded to the input dtype every time it is stored, eager rescales included.
// The shared f row is sized for all Tc blocks (the most any Q block visits), row stride padded by
// 4 bytes against bank conflicts; Q_i's buffer is reused for the f tile of phase 2.
#include "teaching.cuh"

#ifndef V_ONCE_SRAM
#define V_ONCE_SRAM 1
#endif
#ifndef V_ONCE_LAZY
#define V_ONCE_LAZY 0
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS, 2)  // registers for 2 blocks per SM (as fa2)
v_once_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
               T* __restrict__ o, float* __restrict__ lse, T* __restrict__ f_hbm, int n_q, int n_k,
               int d, float scale, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, ldp = BC + 1;
  const int t_c = cdiv(n_k, BC);
  float* Qs = smem;                                   // Br x max(ld, ldp): Q_i, then the f tile
  float* KVs = Qs + BR * max(ld, ldp);                // Bc x ld: K_j in phase 1, V_j in phase 2
  float* block_max = KVs + BC * ld;                   // Br x Tc (lazy only): m_ij per block
  T* f_sram = (T*)(block_max + (V_ONCE_LAZY ? BR * t_c : 0));  // Br x f_ld (sram only)
  const int f_ld = t_c * BC + 4 / (int)sizeof(T);     // the +4 bytes shift rows across banks
  float* Ps = Qs;                                     // phase 2: (f_ij / l_i) as float32

  const int t_r = cdiv(n_q, BR);
  const int i = t_r - 1 - blockIdx.x;  // heaviest causal blocks first
  const long long bh = blockIdx.y;
  const int r0 = i * BR, rows = min(BR, n_q - r0), offset = n_k - n_q;
  const int t_vis = cdiv(visible_cols(r0, rows, n_k, offset, causal), BC);  // tiling.k_blocks(i)
  const T* Kg = k + bh * n_k * d;
  const T* Vg = v + bh * n_k * d;
  T* fg = f_hbm + (bh * n_q + r0) * n_k;  // this Q block's rows of the scratch (hbm only)

  // f element (row r of the block, column c of block n): in SRAM, or in the HBM scratch
  auto f_at = [&](int r, int n, int c) -> T* {
    return V_ONCE_SRAM ? f_sram + r * f_ld + n * BC + c : fg + (long long)r * n_k + n * BC + c;
  };
  // the rows and columns of block n this thread may touch (the HBM scratch has no padding)
  auto f_exists = [&](int r, int n, int c) -> bool {
    return V_ONCE_SRAM || (r < rows && n * BC + c < n_k);
  };

  load_tile(Qs, ld, q + (bh * n_q + r0) * d, d, rows, d, BR, d_pad);
  float m[RA], l[RA];
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    m[a] = NEG_INF;  // the reference's "mi is None": a Q block with no visible key keeps these
    l[a] = 0.f;
  }

  for (int n = 0; n < t_vis; ++n) {  // the visible K blocks j = n (a prefix)
    const int c0 = n * BC, cols = min(BC, n_k - c0);
    __syncthreads();  // the previous step is done with KVs
    load_tile(KVs, ld, Kg + (long long)c0 * d, d, cols, d, BC, d_pad);
    __syncthreads();
    // step 1: QK_ij = scale * Q_i K_j^T, masked on the diagonal blocks and the tail
    float S[RA][CB];
    tile_qk(S, Qs, KVs, ld, d);
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      float mx = NEG_INF;
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        S[a][b] = visible(r0 + ty + TY * a, c0 + tx + TX * b, c0 + cols, offset, causal)
                      ? S[a][b] * scale : NEG_INF;
        mx = fmaxf(mx, S[a][b]);
      }
      // step 2: block-local max, exponentials and sum
      const float m_local = row_max16(mx);
      float sum = 0.f;
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        S[a][b] = expf(S[a][b] - finite_or_zero(m_local));  // f_ij, relative to m_local
        sum += S[a][b];
      }
      const float l_local = row_sum16(sum);
      const int r = ty + TY * a;
      if (n == 0) {  // step 3: the first block initialises m_i, l_i
        m[a] = m_local;
        l[a] = l_local;
      } else {  // step 4: merge block j into the running max and sum
        const float m_new = fmaxf(m_local, m[a]);
        const float m_safe = finite_or_zero(m_new);
        const float alpha = expf(m[a] - m_safe);   // e^{m_i - m_new}
        const float beta = expf(m_local - m_safe);  // e^{m_local - m_new}
        l[a] = alpha * l[a] + beta * l_local;
        if (!V_ONCE_LAZY) {  // eager: rescale every earlier f block now, and this one
          for (int kk = 0; kk < n; ++kk)
#pragma unroll
            for (int b = 0; b < CB; ++b)
              if (f_exists(r, kk, tx + TX * b)) {
                T* f = f_at(r, kk, tx + TX * b);
                store_as(f, to_f32(*f) * alpha);
              }
#pragma unroll
          for (int b = 0; b < CB; ++b) S[a][b] *= beta;
        }
        m[a] = m_new;
      }
      if (V_ONCE_LAZY && tx == 0) block_max[r * t_c + n] = m_local;  // lazy: keep m_ij
#pragma unroll
      for (int b = 0; b < CB; ++b)  // store f_ij (rounded to the input dtype)
        if (f_exists(r, n, tx + TX * b)) store_as(f_at(r, n, tx + TX * b), S[a][b]);
    }
  }

  // step 5: O_i = (f_i / l_i) V, with V streamed block by block
  float O[RA][DV];
#pragma unroll
  for (int a = 0; a < RA; ++a)
#pragma unroll
    for (int b = 0; b < DV; ++b) O[a][b] = 0.f;
  for (int n = 0; n < t_vis; ++n) {
    const int c0 = n * BC, cols = min(BC, n_k - c0);
    __syncthreads();  // phase 1 / the previous product is done with Qs (= Ps), KVs, block_max
    load_tile(KVs, ld, Vg + (long long)c0 * d, d, cols, d, BC, d_pad);
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      const int r = ty + TY * a;
      // eager: f_ij / l_i;  lazy: the one rescale, fused with the division: f_ij e^{m_ij - m_i} / l_i
      const float factor = (V_ONCE_LAZY ? expf(block_max[r * t_c + n] - finite_or_zero(m[a])) : 1.f)
                           / (l[a] == 0.f ? 1.f : l[a]);  // safe_div
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        const int c = tx + TX * b;
        Ps[r * ldp + c] = (c < cols && f_exists(r, n, c)) ? to_f32(*f_at(r, n, c)) * factor : 0.f;
      }
    }
    __syncthreads();
    tile_pv(O, Ps, ldp, KVs, ld, d_pad);  // O_i += (f_ij / l_i) V_j
  }

#pragma unroll
  for (int a = 0; a < RA; ++a) {
    const int r = ty + TY * a;
    if (r >= rows) continue;
    T* Og = o + (bh * n_q + r0 + r) * d;
#pragma unroll
    for (int b = 0; b < DV; ++b)
      if (tx + TX * b < d) store_as(Og + tx + TX * b, O[a][b]);
    if (tx == 0) lse[bh * n_q + r0 + r] = l[a] == 0.f ? NEG_INF : m[a] + logf(l[a]);
  }
}
