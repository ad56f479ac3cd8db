// Shared pieces of the four teaching kernels (naive, fa1, fa2, v_once).
//
// Compile-time knobs (set by kernels/_teaching.py through kernels/loader.py):
//   STORAGE   the HBM dtype of q, k, v, o (and S, P, f): float, __half or __nv_bfloat16
//   BR, BC    block sizes Br x Bc (multiples of 16, at most 128); default 64 x 64
// Everything on chip is float32 whatever STORAGE is.
//
// Thread mapping (the same in every kernel, so that a thread always reads back what it wrote):
// 256 threads as a 16 x 16 grid, tx = tid % 16, ty = tid / 16. A thread owns the rows
// ty, ty+16, ... (RA = Br/16 of them) and, of an S/P/f tile, the columns tx, tx+16, ... (CB = Bc/16);
// of an O tile, the columns tx, tx+16, ... below d. The 16 threads of one row are 16 consecutive
// lanes of one warp, so row max/sum are 4 butterfly shuffles.
//
// Shared-memory tiles are float32 with a leading dimension ld = d_pad + 1 (d_pad = 64 for d <= 64,
// else 128, columns d..d_pad zero-filled). The +1 makes ld odd, so 16 threads reading 16 different
// rows of a K tile at the same column hit 16 different banks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef STORAGE
#define STORAGE float
#endif
#ifndef BR
#define BR 64
#endif
#ifndef BC
#define BC 64
#endif

typedef STORAGE T;  // dtype in HBM

#define TX 16
#define TY 16
#define NTHREADS (TX * TY)
#define D_MAX 128
#define RA (BR / TY)   // rows of a tile per thread
#define CB (BC / TX)   // columns of an S tile per thread
#define DV (D_MAX / TX)  // columns of an O tile per thread (upper bound)

static_assert(BR % TY == 0 && BC % TX == 0, "Br and Bc must be multiples of 16");
static_assert(BR <= 128 && BC <= 128, "Br and Bc must be at most 128");

#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }
__device__ __forceinline__ int d_padded(int d) { return d <= 64 ? 64 : 128; }

#include "storage.cuh"  // to_f32, store_as: float32 <-> STORAGE

// The guard that keeps exp(-inf - (-inf)) from being NaN: a row with max -inf sees no key yet;
// using 0 makes all its exponentials exp(-inf) = 0 (variants/_common.py finite_or_zero).
__device__ __forceinline__ float finite_or_zero(float m) { return m == NEG_INF ? 0.f : m; }

// Row max / sum over the 16 lanes that hold one row (lanes differ only in their low 4 bits).
__device__ __forceinline__ float row_max16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float row_sum16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// Copy rows [0, rows) x columns [0, cols) of a row-major HBM tile (leading dimension src_ld) into a
// float32 shared tile (leading dimension ld), zero-filling up to pad_rows x pad_cols so that tail
// rows and padding columns contribute nothing to the products. One warp per row: 32 consecutive
// elements per load instruction (coalesced).
__device__ __forceinline__ void load_tile(float* dst, int ld, const T* __restrict__ src,
                                          long long src_ld, int rows, int cols, int pad_rows,
                                          int pad_cols) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < pad_rows; r += NTHREADS / 32)
    for (int c = lane; c < pad_cols; c += 32)
      dst[r * ld + c] = (r < rows && c < cols) ? to_f32(src[r * src_ld + c]) : 0.f;
}

// S[a][b] = sum_kk Qs[ty+16a][kk] * Ks[tx+16b][kk]: this thread's RA x CB entries of Q_i K_j^T.
__device__ __forceinline__ void tile_qk(float (&S)[RA][CB], const float* Qs, const float* Ks,
                                        int ld, int d) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll
  for (int a = 0; a < RA; ++a)
#pragma unroll
    for (int b = 0; b < CB; ++b) S[a][b] = 0.f;
#pragma unroll 4
  for (int kk = 0; kk < d; ++kk) {
    float qa[RA], kb[CB];
#pragma unroll
    for (int a = 0; a < RA; ++a) qa[a] = Qs[(ty + TY * a) * ld + kk];
#pragma unroll
    for (int b = 0; b < CB; ++b) kb[b] = Ks[(tx + TX * b) * ld + kk];
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < CB; ++b) S[a][b] = fmaf(qa[a], kb[b], S[a][b]);
  }
}

// O[a][b] += sum_k Ps[ty+16a][k] * Vs[k][tx+16b] for b < NS (NS = d_pad / 16 column slices).
template <int NS>
__device__ __forceinline__ void tile_pv_ns(float (&O)[RA][DV], const float* Ps, int ldp,
                                           const float* Vs, int ld) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll 4
  for (int kk = 0; kk < BC; ++kk) {
    float pa[RA], vb[NS];
#pragma unroll
    for (int a = 0; a < RA; ++a) pa[a] = Ps[(ty + TY * a) * ldp + kk];
#pragma unroll
    for (int b = 0; b < NS; ++b) vb[b] = Vs[kk * ld + tx + TX * b];
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < NS; ++b) O[a][b] = fmaf(pa[a], vb[b], O[a][b]);
  }
}

// acc[a][b] += sum_r A[r][ty+16a] * B[r][tx+16b] for b < NS: this thread's share of A^T B, with A a
// (Br x Bc) tile (leading dimension ldp) and B a (Br x d_pad) tile (ld). The backward's transposed
// products: dV_j += P^T dO_i (FA2 Alg. 2 line 12, FA1 Alg. 3 line 1) and dK_j += dS^T Q_i
// (FA2 Alg. 2 line 16, FA1 Alg. 3 line 5).
template <int NS>
__device__ __forceinline__ void tile_tn_ns(float (&acc)[CB][NS], const float* A, int ldp,
                                           const float* B, int ld) {
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

__device__ __forceinline__ void tile_pv(float (&O)[RA][DV], const float* Ps, int ldp,
                                        const float* Vs, int ld, int d_pad) {
  if (d_pad == 64)
    tile_pv_ns<64 / TX>(O, Ps, ldp, Vs, ld);
  else
    tile_pv_ns<128 / TX>(O, Ps, ldp, Vs, ld);
}

// Causal visibility (bottom-right, docs/design.md): query row r sees key column c iff c <= r + Nk - Nq.
__device__ __forceinline__ bool visible(int r, int c, int n_k_valid_cols_end, int offset,
                                        int causal) {
  return c < n_k_valid_cols_end && (!causal || c <= r + offset);
}

// Number of leading key columns that some row of Q block i sees (counting/tiling.py visible_cols).
__device__ __forceinline__ int visible_cols(int r0, int rows, int n_k, int offset, int causal) {
  return causal ? max(0, min(n_k, r0 + rows + offset)) : n_k;
}
