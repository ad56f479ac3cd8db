// Standard attention's backward, teaching tier (FlashAttention paper, Algorithm 3). Mirrors
// variants/naive.py's backward: the fair "naive (unfused) backward" beside fa2_bwd.cu at the same tier.
//
// Five kernels, launched one after another (kernels/naive.py backward), with P (kept in HBM by the
// forward, naive.cu), dP and dS all Nq x Nk in HBM in the input dtype, as the reference stores them:
//   naive_bwd_dv   FA1 Alg. 3 line 1: dV = P^T dO      grid (Tc, B*H): key block j outer, visited Q blocks i
//   naive_bwd_dp   FA1 Alg. 3 line 2: dP = dO V^T      grid (Tc, Tr, B*H): one tile each; hidden tiles
//                                                      are written as 0 without loading dO, V
//   naive_bwd_ds   FA1 Alg. 3 line 3: dS = P o (dP - rowsum(P o dP))   grid (Nq, B*H): one block per row,
//                                                      the rows of P and dP held on chip (read once)
//   naive_bwd_dq   FA1 Alg. 3 line 4: dQ = scale dS K  grid (Tr, B*H): Q block i outer, visited key blocks j
//   naive_bwd_dk   FA1 Alg. 3 line 5: dK = scale dS^T Q grid (Tc, B*H): key block j outer, visited Q blocks i
// and FA1 Alg. 3 line 6 is the launcher's return.
//
// Nothing is recomputed: no exponentials; D_i = rowsum(P_i o dP_i) is computed the long way (FA2's
// rowsum(dO o O) is the shortcut). The five products run on the same float32 register micro-tiles as
// the forward teaching kernels and fa2_bwd.cu (teaching.cuh: tile_qk, tile_pv_ns, tile_tn_ns), so
// naive_bwd vs fa2_bwd compares the HBM traffic of P, dP, dS (Theta(Nq Nk) each way), not two GEMM engines.
//
// Causal: hidden P and dS tiles are zeros (P = 0 there, so dS = 0); the passes that read them skip them
// (counting/tiling.py k_blocks(i), q_blocks(j)). Within a visited tile the hidden entries of dP are
// computed (dO_i V_j^T knows no mask) but multiply P = 0. Rows that see no key have P = 0 (the forward's
// softmax), hence dS = 0 and dQ = 0. Tail rows and columns of a tile are zero-filled on chip and never
// written.
//
// Caveats (teaching tier): CUDA cores only; dP and dS in fp16/bf16 carry that dtype's rounding (the
// algorithm as the reference models it); the row pass uses 256 threads per row however short the row,
// and refuses rows longer than the shared memory holds (8 Nk bytes: Nk <= 29,000 at 227 KB).
#include "teaching.cuh"

// FA1 Alg. 3 line 1 and FA1 Alg. 3 line 5 share this body: out_j = factor * sum over visited i of M_ij^T X_i,
// with M the (Nq x Nk) matrix in HBM (P, then dS) and X the (Nq x d) input (dO, then Q). One block per
// (key block j, batch*head), key rows ty+16a and columns tx+16b of out_j per thread (registers).
template <int NS>
__device__ __forceinline__ void tn_pass(const T* __restrict__ m, const T* __restrict__ x, T* __restrict__ out,
                                        int n_q, int n_k, int d, float factor, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, ldp = BC + 1;
  float* Ms = smem;            // Br x ldp  M_ij (P or dS)
  float* Xs = Ms + BR * ldp;   // Br x ld   X_i (dO or Q)

  const int j = blockIdx.x;
  const long long bh = blockIdx.y;
  const int c0 = j * BC, cols = min(BC, n_k - c0), offset = n_k - n_q;
  const int t_r = cdiv(n_q, BR);
  // counting/tiling.py q_blocks(j): the Q blocks that visit K_j are a suffix; the earlier M tiles are 0
  const int i_first = causal ? min(max(0, c0 - offset) / BR, t_r - 1) : 0;

  float acc[CB][NS];
#pragma unroll
  for (int a = 0; a < CB; ++a)
#pragma unroll
    for (int b = 0; b < NS; ++b) acc[a][b] = 0.f;

  for (int i = i_first; i < t_r; ++i) {
    const int r0 = i * BR, rows = min(BR, n_q - r0);
    __syncthreads();  // the previous product is done with Ms, Xs
    load_tile(Ms, ldp, m + (bh * n_q + r0) * n_k + c0, n_k, rows, cols, BR, BC);
    load_tile(Xs, ld, x + (bh * n_q + r0) * d, d, rows, d, BR, d_pad);
    __syncthreads();
    tile_tn_ns<NS>(acc, Ms, ldp, Xs, ld);  // out_j += M_ij^T X_i
  }
#pragma unroll
  for (int a = 0; a < CB; ++a) {
    const int c = ty + TY * a;
    if (c >= cols) continue;
    T* Og = out + (bh * n_k + c0 + c) * d;
#pragma unroll
    for (int b = 0; b < NS; ++b)
      if (tx + TX * b < d) store_as(Og + tx + TX * b, acc[a][b] * factor);
  }
}

// FA1 Alg. 3 line 1: load P and dO by blocks, dV_j = sum_i P_ij^T dO_i, write dV_j to HBM.
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_bwd_dv(const T* __restrict__ p, const T* __restrict__ dout, T* __restrict__ dv, int n_q, int n_k, int d,
             int causal) {
  if (d_padded(d) == 64)
    tn_pass<64 / TX>(p, dout, dv, n_q, n_k, d, 1.f, causal);
  else
    tn_pass<128 / TX>(p, dout, dv, n_q, n_k, d, 1.f, causal);
}

// FA1 Alg. 3 line 2: load dO_i and V_j, dP_ij = dO_i V_j^T, write dP_ij to HBM (a hidden tile: zeros,
// written, not computed). The grid and staging are naive_scores' (naive.cu FA1 Alg. 0 line 1).
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_bwd_dp(const T* __restrict__ dout, const T* __restrict__ v, T* __restrict__ dp, int n_q, int n_k, int d,
             int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, lds = BC + 1;
  float* dOs = smem;            // Br x ld   dO_i
  float* Vs = dOs + BR * ld;    // Bc x ld   V_j
  float* dPs = Vs + BC * ld;    // Br x lds  dP_ij, staged so that HBM rows are written whole

  const int j = blockIdx.x, i = blockIdx.y;
  const long long bh = blockIdx.z;
  const int r0 = i * BR, rows = min(BR, n_q - r0), c0 = j * BC, cols = min(BC, n_k - c0);
  const int t_vis = cdiv(visible_cols(r0, rows, n_k, n_k - n_q, causal), BC);  // tiling.k_blocks(i)
  T* dPg = dp + (bh * n_q + r0) * n_k + c0;

  if (j < t_vis) {
    load_tile(dOs, ld, dout + (bh * n_q + r0) * d, d, rows, d, BR, d_pad);
    load_tile(Vs, ld, v + (bh * n_k + c0) * d, d, cols, d, BC, d_pad);
    __syncthreads();
    float dP[RA][CB];
    tile_qk(dP, dOs, Vs, ld, d);
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < CB; ++b) dPs[(ty + TY * a) * lds + tx + TX * b] = dP[a][b];
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += NTHREADS / 32)
    for (int c = lane; c < cols; c += 32)
      store_as(dPg + (long long)r * n_k + c, j < t_vis ? dPs[r * lds + c] : 0.f);
}

// Sum of one value per thread over the block; every thread gets it. scratch: NTHREADS/32 floats of shared
// memory (carved from the dynamic buffer, not a static __shared__, so tests/emulate can run it).
__device__ __forceinline__ float block_sum(float x, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < NTHREADS / 32; ++w) x += scratch[w];
  return x;
}

// FA1 Alg. 3 line 3: for query row blockIdx.x of batch*head blockIdx.y, read the rows of P and dP once
// (kept on chip), D = rowsum(P o dP), write dS = P o (dP - D).
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_bwd_ds(const T* __restrict__ p, const T* __restrict__ dp, T* __restrict__ ds, int n_q, int n_k) {
  extern __shared__ float smem[];
  float* Prow = smem;             // Nk  the row of P
  float* dProw = Prow + n_k;      // Nk  the row of dP
  float* scratch = dProw + n_k;   // NTHREADS / 32
  const long long row = (long long)blockIdx.y * n_q + blockIdx.x;
  float sum = 0.f;
  for (int c = threadIdx.x; c < n_k; c += NTHREADS) {  // each thread reads back only its own entries
    Prow[c] = to_f32(p[row * n_k + c]);
    dProw[c] = to_f32(dp[row * n_k + c]);
    sum = fmaf(Prow[c], dProw[c], sum);
  }
  const float D = block_sum(sum, scratch);  // D_i = rowsum(P_i o dP_i) (= rowsum(dO_i o O_i))
  for (int c = threadIdx.x; c < n_k; c += NTHREADS) store_as(ds + row * n_k + c, Prow[c] * (dProw[c] - D));
}

// FA1 Alg. 3 line 4: load dS and K by blocks, dQ_i = scale * sum over visited j of dS_ij K_j, write dQ_i.
// The grid and loop are naive_pv's (naive.cu FA1 Alg. 0 line 3) with P -> dS, V -> K.
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_bwd_dq(const T* __restrict__ ds, const T* __restrict__ k, T* __restrict__ dq, int n_q, int n_k, int d,
             float scale, int causal) {
  extern __shared__ float smem[];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int d_pad = d_padded(d), ld = d_pad + 1, ldp = BC + 1;
  float* dSs = smem;            // Br x ldp  dS_ij
  float* Ks = dSs + BR * ldp;   // Bc x ld   K_j

  const int t_r = cdiv(n_q, BR);
  const int i = t_r - 1 - blockIdx.x;  // heaviest causal blocks first
  const long long bh = blockIdx.y;
  const int r0 = i * BR, rows = min(BR, n_q - r0);
  const int t_vis = cdiv(visible_cols(r0, rows, n_k, n_k - n_q, causal), BC);  // tiling.k_blocks(i)
  const T* dSg = ds + (bh * n_q + r0) * n_k;

  float dQ[RA][DV];
#pragma unroll
  for (int a = 0; a < RA; ++a)
#pragma unroll
    for (int b = 0; b < DV; ++b) dQ[a][b] = 0.f;

  for (int j = 0; j < t_vis; ++j) {  // hidden dS tiles (all zeros) are skipped
    const int c0 = j * BC, cols = min(BC, n_k - c0);
    __syncthreads();  // the previous product is done with dSs, Ks
    load_tile(dSs, ldp, dSg + c0, n_k, rows, cols, BR, BC);
    load_tile(Ks, ld, k + (bh * n_k + c0) * d, d, cols, d, BC, d_pad);
    __syncthreads();
    tile_pv(dQ, dSs, ldp, Ks, ld, d_pad);  // dQ_i += dS_ij K_j
  }
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    const int r = ty + TY * a;
    if (r >= rows) continue;
    T* dQg = dq + (bh * n_q + r0 + r) * d;
#pragma unroll
    for (int b = 0; b < DV; ++b)
      if (tx + TX * b < d) store_as(dQg + tx + TX * b, dQ[a][b] * scale);
  }
}

// FA1 Alg. 3 line 5: load dS and Q by blocks, dK_j = scale * sum_i dS_ij^T Q_i, write dK_j to HBM.
extern "C" __global__ void __launch_bounds__(NTHREADS)
naive_bwd_dk(const T* __restrict__ ds, const T* __restrict__ q, T* __restrict__ dk, int n_q, int n_k, int d,
             float scale, int causal) {
  if (d_padded(d) == 64)
    tn_pass<64 / TX>(ds, q, dk, n_q, n_k, d, scale, causal);
  else
    tn_pass<128 / TX>(ds, q, dk, n_q, n_k, d, scale, causal);
}
