// Standard attention, teaching tier (FlashAttention paper, Algorithm 0). Mirrors variants/naive.py.
//
// Three kernels, launched one after another, with S and P really materialised in HBM in the input
// dtype (as the reference stores them):
//   naive_scores   FA1 Alg. 0 line 1: S = scale * Q K^T, one thread block per Br x Bc tile (j, i, batch*head);
//                  a tile the causal mask hides entirely is written as -inf without loading Q, K
//   naive_softmax  FA1 Alg. 0 line 2: P = softmax(S) row by row, one thread block per query row; lse written
//   naive_pv       FA1 Alg. 0 line 3: O = P V, one thread block per Q block, looping over its visited K blocks
// and FA1 Alg. 0 line 4 is the launcher's return: O and lse are in HBM.
//
// HBM traffic: as variants/naive.py counts it - pass 1 reads Q_i and K_j per visited tile
// (Tc*Nq*d + Tr*Nk*d) and writes all of S; pass 2 reads S once and writes P and lse; pass 3 reads
// the visited P tiles and V_j per visited tile and writes O. No differences: the softmax holds its
// row of S in shared memory (the reference's "one float32 row of Nk" working set), so S is read
// once, and rows longer than the shared memory allows are refused by the launcher rather than read
// twice.
//
// Caveats: the products use the same float32 register micro-tiles as fa2.cu (no tensor cores),
// so naive vs fa2 compares the HBM traffic of S and P, not two different GEMM engines. S and P in
// fp16/bf16 carry that dtype's rounding (an S of 1e4 in fp16 is off by up to 4): that is the
// algorithm as the reference models it, not a kernel error. The softmax uses one block of 256
// threads per row even when the row is short.
#include "teaching.cuh"

// FA1 Alg. 0 line 1: S = scale * Q K^T (tile (i, j) of batch*head bh), written to HBM.
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_scores(const T* __restrict__ q, const T* __restrict__ k, T* __restrict__ s, int n_q, int n_k,
             int d, float scale, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, lds = BC + 1;
  float* Qs = smem;           // Br x ld   Q_i
  float* Ks = Qs + BR * ld;   // Bc x ld   K_j
  float* Ss = Ks + BC * ld;   // Br x lds  S_ij, staged so that HBM rows are written whole

  const int j = blockIdx.x, i = blockIdx.y;
  const long long bh = blockIdx.z;
  const int r0 = i * BR, rows = min(BR, n_q - r0), c0 = j * BC, cols = min(BC, n_k - c0);
  const int offset = n_k - n_q;
  const int t_vis = cdiv(visible_cols(r0, rows, n_k, offset, causal), BC);  // tiling.k_blocks(i)
  T* Sg = s + (bh * n_q + r0) * n_k + c0;

  if (j < t_vis) {  // a visited tile: load Q_i, K_j, compute
    load_tile(Qs, ld, q + (bh * n_q + r0) * d, d, rows, d, BR, d_pad);
    load_tile(Ks, ld, k + (bh * n_k + c0) * d, d, cols, d, BC, d_pad);
    __syncthreads();
    float S[RA][CB];
    tile_qk(S, Qs, Ks, ld, d);
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < CB; ++b)
        Ss[(ty + TY * a) * lds + tx + TX * b] =
            visible(r0 + ty + TY * a, c0 + tx + TX * b, c0 + cols, offset, causal)
                ? S[a][b] * scale : NEG_INF;
    __syncthreads();
  }
  // write the tile to HBM, one warp per row (a hidden tile is all -inf: written, not computed)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += NTHREADS / 32)
    for (int c = lane; c < cols; c += 32)
      store_as(Sg + (long long)r * n_k + c, j < t_vis ? Ss[r * lds + c] : NEG_INF);
}

// Block-wide reduction of one value per thread (op = max or sum); every thread gets the result.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float x, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = IS_MAX ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < NTHREADS / 32; ++w) x = IS_MAX ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

// FA1 Alg. 0 line 2: P = softmax(S) for query row (blockIdx.x) of batch*head blockIdx.y; lse = m + log l.
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_softmax(const T* __restrict__ s, T* __restrict__ p, float* __restrict__ lse, int n_q,
              int n_k) {
  extern __shared__ float row[];  // the row of S on chip: Nk float32
  __shared__ float scratch[NTHREADS / 32];
  const long long row_index = (long long)blockIdx.y * n_q + blockIdx.x;
  const T* Sg = s + row_index * n_k;
  T* Pg = p + row_index * n_k;

  float mx = NEG_INF;  // read S once, keeping it on chip
  for (int c = threadIdx.x; c < n_k; c += NTHREADS) {
    row[c] = to_f32(Sg[c]);
    mx = fmaxf(mx, row[c]);
  }
  const float m = block_reduce<true>(mx, scratch);  // m = rowmax(S)
  const float m_safe = finite_or_zero(m);
  float sum = 0.f;
  for (int c = threadIdx.x; c < n_k; c += NTHREADS) {
    row[c] = expf(row[c] - m_safe);  // exp(S - m): the same thread reads back its own entries
    sum += row[c];
  }
  const float l = block_reduce<false>(sum, scratch);  // l = rowsum(exp(S - m))
  const float inv_l = l == 0.f ? 1.f : 1.f / l;       // safe_div: a row that sees nothing stays 0
  for (int c = threadIdx.x; c < n_k; c += NTHREADS) store_as(Pg + c, row[c] * inv_l);
  if (threadIdx.x == 0) lse[row_index] = l == 0.f ? NEG_INF : m + logf(l);
}

// FA1 Alg. 0 line 3: O_i = sum over visited j of P_ij V_j (Q block blockIdx.x of batch*head blockIdx.y).
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_pv(const T* __restrict__ p, const T* __restrict__ v, T* __restrict__ o, int n_q, int n_k,
         int d, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, ldp = BC + 1;
  float* Ps = smem;            // Br x ldp  P_ij
  float* Vs = Ps + BR * ldp;   // Bc x ld   V_j

  const int t_r = cdiv(n_q, BR);
  const int i = t_r - 1 - blockIdx.x;  // heaviest causal blocks first
  const long long bh = blockIdx.y;
  const int r0 = i * BR, rows = min(BR, n_q - r0), offset = n_k - n_q;
  const int t_vis = cdiv(visible_cols(r0, rows, n_k, offset, causal), BC);
  const T* Pg = p + (bh * n_q + r0) * n_k;

  float O[RA][DV];
#pragma unroll
  for (int a = 0; a < RA; ++a)
#pragma unroll
    for (int b = 0; b < DV; ++b) O[a][b] = 0.f;

  for (int j = 0; j < t_vis; ++j) {  // hidden P tiles (all zeros) are skipped
    const int c0 = j * BC, cols = min(BC, n_k - c0);
    __syncthreads();  // the previous product is done with Ps, Vs
    load_tile(Ps, ldp, Pg + c0, n_k, rows, cols, BR, BC);
    load_tile(Vs, ld, v + (bh * n_k + c0) * d, d, cols, d, BC, d_pad);
    __syncthreads();
    tile_pv(O, Ps, ldp, Vs, ld, d_pad);  // O_i += P_ij V_j
  }
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    const int r = ty + TY * a;
    if (r >= rows) continue;
    T* Og = o + (bh * n_q + r0 + r) * d;
#pragma unroll
    for (int b = 0; b < DV; ++b)
      if (tx + TX * b < d) store_as(Og + tx + TX * b, O[a][b]);
  }
}
