// Split-KV decoding (Flash-Decoding), teaching tier. Mirrors variants/split_kv.py; launched by kernels/split_kv.py.
//
// The cache positions of a sequence are cut into S chunks (splits). One thread block per (b, kv head h_kv, row
// tile rt, split s) runs FA2's inner loop (FA2 Alg. 1 lines 6-10) over the Bc-key tiles of its chunk and writes a
// partial (o_s, lse_s) to an fp32 workspace; a second small kernel (split_kv_merge) combines the S partials:
//   lse = log sum_s exp(lse_s),   o = sum_s exp(lse_s - lse) o_s.
//
// GQA packing: the g = H / H_kv query heads that read kv head h_kv, times the Nq query rows, are one tile of
// packed rows p = (h - h_kv g) Nq + i (16 per block), so each K/V byte a block loads serves all g heads.
//
// Caches: contiguous k, v (B, H_kv, Nk, d), or paged k, v (num_pages, H_kv, page_size, d) where position t of
// sequence b sits in page block_table[b, t / page_size], slot t % page_size.
// Causal is bottom-right per sequence: query i sees t iff t <= i + L_b - Nq. A row that sees nothing: o = 0, lse = -inf.
//
// Everything on chip is float32 (STORAGE is the HBM dtype: float, __half, __nv_bfloat16); d <= 256.
// Readable first: shared memory holds Q, K_j, V_j, S/P and O; one thread per row runs the online softmax.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "storage.cuh"  // to_f32, store_as

#ifndef STORAGE
#define STORAGE float
#endif
typedef STORAGE T;

#define BR 16        // packed query rows per block
#define BC 32        // keys per tile (Bc)
#ifndef NTHREADS
#define NTHREADS 128  // tests/emulate/split_kv_host.cpp runs it with 256 (cuda_host.h's block)
#endif
#define NEG_INF (-__int_as_float(0x7f800000))

// Element offset of cache position t of sequence b, kv head hk: the one place that knows the two cache layouts.
__device__ __forceinline__ long long kv_offset(int b, int hk, int t, int H_kv, int Nk, int d, int paged,
                                               const int* __restrict__ block_table, int page_size, int max_pages) {
  if (paged) {
    const int page = block_table[(long long)b * max_pages + t / page_size];
    return (((long long)page * H_kv + hk) * page_size + t % page_size) * d;
  }
  return (((long long)b * H_kv + hk) * Nk + t) * d;
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
split_kv_partial(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 const int* __restrict__ cache_seqlens, const int* __restrict__ block_table,
                 float* __restrict__ ws_o, float* __restrict__ ws_lse, int H, int H_kv, int Nq, int Nk, int d,
                 float scale, int causal, int paged, int page_size, int max_pages, int chunk, int n_splits,
                 int row_tiles) {
  extern __shared__ float smem[];
  float* Qs = smem;              // BR x d   the packed query rows
  float* Ks = Qs + BR * d;       // BC x d   K_j
  float* Vs = Ks + BC * d;       // BC x d   V_j
  float* Os = Vs + BC * d;       // BR x d   O (unnormalised)
  float* Ss = Os + BR * d;       // BR x BC  S, then P~
  float* m = Ss + BR * BC;       // BR       m_i
  float* l = m + BR;             // BR       l_i
  float* alpha = l + BR;         // BR       e^{m_old - m_new}
  int* lim = (int*)(alpha + BR);  // BR      the last position row r sees (-1: none)

  const int tid = threadIdx.x;
  const int b = blockIdx.x / H_kv, hk = blockIdx.x % H_kv, rt = blockIdx.y, s = blockIdx.z;
  const int g = H / H_kv, R = g * Nq;
  const int L = cache_seqlens[b];
  const int start = s * chunk, end = min(start + chunk, L);  // this split's positions [start, end)

  // FA2 Alg. 1 line 4: load the packed rows of Q; each row's visibility limit (causal, bottom-right per sequence)
  for (int e = tid; e < BR * d; e += NTHREADS) {
    const int r = e / d, c = e % d, p = rt * BR + r;
    float x = 0.f;
    if (p < R) x = to_f32(q[(((long long)b * H + hk * g + p / Nq) * Nq + p % Nq) * d + c]);
    Qs[e] = x;
    Os[e] = 0.f;  // FA2 Alg. 1 line 5: O = 0
  }
  if (tid < BR) {
    const int p = rt * BR + tid;
    int last = end - 1;
    if (causal) last = min(last, p % Nq + L - Nq);
    lim[tid] = p < R ? last : -1;
    m[tid] = NEG_INF;  // FA2 Alg. 1 line 5: m = -inf, l = 0
    l[tid] = 0.f;
  }
  __syncthreads();

  for (int c0 = start; c0 < end; c0 += BC) {  // FA2 Alg. 1 line 6: the key tiles of this split
    // FA2 Alg. 1 line 7: load K_j, V_j (positions past the split's end are zeros and masked below)
    for (int e = tid; e < BC * d; e += NTHREADS) {
      const int jj = e / d, c = e % d, t = c0 + jj;
      float kx = 0.f, vx = 0.f;
      if (t < end) {
        const long long off = kv_offset(b, hk, t, H_kv, Nk, d, paged, block_table, page_size, max_pages) + c;
        kx = to_f32(k[off]);
        vx = to_f32(v[off]);
      }
      Ks[e] = kx;
      Vs[e] = vx;
    }
    __syncthreads();
    // FA2 Alg. 1 line 8: S = scale Q K_j^T, hidden positions -inf
    for (int e = tid; e < BR * BC; e += NTHREADS) {
      const int r = e / BC, jj = e % BC;
      float acc = 0.f;
      for (int c = 0; c < d; ++c) acc = fmaf(Qs[r * d + c], Ks[jj * d + c], acc);
      Ss[e] = (c0 + jj <= lim[r]) ? acc * scale : NEG_INF;
    }
    __syncthreads();
    // FA2 Alg. 1 line 9: m_new = max(m, rowmax S), P~ = exp(S - m_new), l = e^{m - m_new} l + rowsum P~
    if (tid < BR) {
      const int r = tid;
      float m_new = m[r];
      for (int jj = 0; jj < BC; ++jj) m_new = fmaxf(m_new, Ss[r * BC + jj]);
      const float m_safe = m_new == NEG_INF ? 0.f : m_new;  // a row that sees nothing yet: every exp is 0
      float sum = 0.f;
      for (int jj = 0; jj < BC; ++jj) {
        const float p = expf(Ss[r * BC + jj] - m_safe);
        Ss[r * BC + jj] = p;
        sum += p;
      }
      alpha[r] = expf(m[r] - m_safe);
      l[r] = alpha[r] * l[r] + sum;
      m[r] = m_new;
    }
    __syncthreads();
    // FA2 Alg. 1 line 10: O = diag(e^{m_old - m_new}) O + P~ V_j
    for (int e = tid; e < BR * d; e += NTHREADS) {
      const int r = e / d, c = e % d;
      float acc = alpha[r] * Os[e];
      for (int jj = 0; jj < BC; ++jj) acc = fmaf(Ss[r * BC + jj], Vs[jj * d + c], acc);
      Os[e] = acc;
    }
    __syncthreads();  // K_j, V_j, P~ free for the next tile
  }

  // FA2 Alg. 1 lines 12-13 for this split: o_s = O / l, lse_s = m + log l; an empty split: o_s = 0, lse_s = -inf
  const long long tile = ((long long)b * H_kv + hk) * row_tiles + rt;
  const long long row0 = (tile * n_splits + s) * BR;
  for (int e = tid; e < BR * d; e += NTHREADS) {
    const int r = e / d;
    ws_o[row0 * d + e] = l[r] > 0.f ? Os[e] / l[r] : 0.f;
  }
  if (tid < BR) ws_lse[row0 + tid] = l[tid] > 0.f ? m[tid] + logf(l[tid]) : NEG_INF;
}

// The merge: one block per packed row (tile, r); lse = log sum_s exp(lse_s), o = sum_s exp(lse_s - lse) o_s.
extern "C" __global__ void __launch_bounds__(NTHREADS)
split_kv_merge(const float* __restrict__ ws_o, const float* __restrict__ ws_lse, T* __restrict__ o,
               float* __restrict__ lse, int H, int H_kv, int Nq, int d, int n_splits, int row_tiles) {
  const long long tile = blockIdx.x / BR;
  const int r = blockIdx.x % BR;
  const int rt = tile % row_tiles, bhk = tile / row_tiles, b = bhk / H_kv, hk = bhk % H_kv;
  const int g = H / H_kv, p = rt * BR + r;
  if (p >= g * Nq) return;  // a padding row of the last tile
  const long long out_row = ((long long)b * H + hk * g + p / Nq) * Nq + p % Nq;

  float mx = NEG_INF;  // every thread reduces the S lse_s itself: S is small
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, ws_lse[(tile * n_splits + s) * BR + r]);
  float total = 0.f;
  if (mx != NEG_INF)
    for (int s = 0; s < n_splits; ++s) total += expf(ws_lse[(tile * n_splits + s) * BR + r] - mx);
  const float L = mx == NEG_INF ? NEG_INF : mx + logf(total);
  for (int c = threadIdx.x; c < d; c += NTHREADS) {
    float acc = 0.f;
    if (L != NEG_INF)
      for (int s = 0; s < n_splits; ++s) {
        const long long row = (tile * n_splits + s) * BR + r;
        acc += expf(ws_lse[row] - L) * ws_o[row * d + c];
      }
    store_as(o + out_row * d + c, acc);
  }
  if (threadIdx.x == 0) lse[out_row] = L;
}
