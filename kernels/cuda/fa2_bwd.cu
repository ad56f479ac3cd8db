// FlashAttention-2 backward, teaching tier (Dao 2023, Algorithm 2). Mirrors variants/fa2.py's backward.
//
// Three launches (kernels/fa2.py backward):
//   fa2_bwd_preprocess  FA2 Alg. 2 lines 3-4: dQ_acc = 0 (float32, HBM); D = rowsum(dO o O) (float32, HBM)
//   fa2_bwd             FA2 Alg. 2 lines 5-16 and FA2 Alg. 2 line 18: one block per (key block j,
//                       batch*kv head); the outer loop (FA2 Alg. 2 line 5) is the grid; K_j, V_j stay in
//                       shared memory, dK_j, dV_j in registers; the inner loop walks the Q blocks i, once per
//                       query head of the kv head's group (grouped-query attention, below)
//   fa2_bwd_dq          FA2 Alg. 2 line 20: dQ = scale * dQ_acc, in the input dtype
//
// Per visited (i, j), five products (FA2 Alg. 2 line 10, FA2 Alg. 2 lines 12-13, FA2 Alg. 2 lines 15-16),
// all float32 FFMA on 16 x 16 threads:
//   S   = scale * Q_i K_j^T      rows ty+16a, key columns tx+16b per thread (as the forward)
//   P   = exp(S - L_i)           recomputed from the saved L (natural log of the scaled scores, the
//                                forward's lse), so no Nq x Nk matrix was kept
//   dP  = dO_i V_j^T             same mapping as S
//   dS  = P o (dP - D_i)         the softmax's chain rule with D_i = rowsum(dO_i o O_i) = rowsum(P o dP)
//   dV_j += P^T dO_i             key rows ty+16a, columns 4tx+64g+e (e < 4) per thread (registers)
//   dK_j += dS^T Q_i             same mapping (registers); times scale when written
//   dQ_i += dS K_j               rows RA ty + a (RA = Br/16 consecutive rows), columns 4tx+64g+e;
//                                float32 atomics into dQ_acc
//
// Why atomics for dQ: with key blocks outer, the Tc blocks of one (b, h) all add into every dQ_i
// at the same time. A block cannot own dQ_i as it owns dK_j, dV_j; the alternatives are a second
// pass with query blocks outer (recomputing S, P, dP: ~40% more FLOPs) or a lock per dQ_i. FA2 and FA3
// use float32 atomicAdd into an HBM accumulator, and so does this kernel; the price is that dQ's low
// bits depend on the order the blocks run (dK, dV are deterministic).
//
// Grouped-query and multi-query attention (k, v with H_kv heads, H_kv dividing H; group = H / H_kv): query head
// h reads kv head h / group, so dK_j, dV_j of kv head h_kv sum over the group's query heads h_kv*group ..
// h_kv*group + group - 1. The block that owns key block j of kv head h_kv runs FA2 Alg. 2 line 8's loop once per
// query head of its group, adding into the same dK_j, dV_j registers: K_j, V_j are loaded once, never repeated
// per query head, and no two blocks write one dK_j (no atomics on dK, dV). group = 1 is plain attention.
//
// Rows that see no key (causal, Nq > Nk) have L = -inf: P uses finite_or_zero(L) so exp(-inf - 0) = 0
// instead of NaN, and their dQ, and their share of dK, dV, are 0. Tail query rows (r >= Nq) are
// masked to P = 0 so they add nothing; tail key rows and padding columns are zero-filled and never
// written. Causal: Q blocks that see none of K_j are skipped (they are a prefix: i < i_first).
//
// Why the products read float4: shared memory delivers 128 bytes per clock per SM, and at v1's scalar
// reads (two per FFMA pair in Q_i K_j^T) it, not the FFMA pipe, set the pace. Each product now reads 4
// consecutive elements of its reduction index per load: Q_i K_j^T and dO_i V_j^T read rows of Q_i, K_j,
// dO_i, V_j 4 columns at a time; P^T dO_i and dS^T Q_i read P and dS transposed (stored as P^T, dS^T:
// key rows, query columns) 4 query rows at a time, and dO_i, Q_i, K_j 4 head columns at a time, which is
// why a thread owns the columns 4tx..4tx+3 (+64) of dK_j, dV_j, dQ_i. Leading dimensions are d_pad + 4
// and Br + 4 floats: multiples of 4 (float4 alignment) whose bank offset of 4 words per row keeps 8
// rows' float4 reads in 8 distinct bank quads.
//
// Shared memory (float32): K_j, V_j (Bc x (d_pad+4)) for the whole block, Q_i, dO_i (Br x (d_pad+4)) and
// P^T, dS^T (Bc x (Br+4)) per step, L_i, D_i (Br): at 64 x 64, 170 KB at d = 128 (one block per SM) and
// 105 KB at d <= 64 (two); at 32 x 32 (v4's default for d > 64) 77 KB (two); v3 adds the staging of
// Q_{i+1}, dO_{i+1}. Caveats (teaching tier): CUDA cores only, three barriers per step; a readable
// statement of Algorithm 2 (see fa2_wgmma_bwd for a fast one).
//
// Version log (llm.c style; H200, fp16, batch*N = 16k, hidden 2048, lab/teach_bwd_ab.py):
//   v1  (kept as lab/cuda/fa2_bwd_v1.cu for the A/B) scalar shared reads, ld = d_pad + 1, P and dS row-major,
//       scalar dQ atomics. Measured (results/bwd_kernels_vs_sdpa_grid, backward TFLOP/s, N = 4096): 25.0 (d = 64)
//       and 17.9 (d = 128) non-causal, 24.6 / 18.5 causal.
//   v2  float4 shared reads along each product's reduction index, P^T and dS^T stored transposed, dK, dV,
//       dQ columns 4tx+64g+e per thread (dQ rows: RA consecutive ones, read from dS^T as float4/float2), dQ added
//       with one float4 atomicAdd per 4 columns (sm_90; scalar when d % 4 != 0). Shared-memory wavefronts
//       per warp and step at d = 128: 4352 (v1) -> ~1700, against 2560 cycles of FFMA issue. Measured
//       (H200, commit b751920, before the dQ-rows change; results/sessions/visit2; TFLOP/s at N = 2k/4k/8k):
//       d = 64 29.9/30.2/30.0 non-causal (v1 25.4/25.0/25.4), 28.2/29.0/29.2 causal (v1 24.0/24.7/24.6);
//       d = 128 19.1/19.8/21.2 (v1 17.7/18.1/19.0), 19.6/20.6/20.7 causal: 1.2x at d = 64, 1.1x at d = 128.
//   v3  FA2_PREFETCH (kernels/fa2.py prefetch(): fp16/bf16 at d_pad = 128 with d % 8 == 0, where the staging
//       costs no block per SM): Q_{i+1}, dO_{i+1} are copied HBM -> shared memory (cp.async, input dtype,
//       2 Br d_pad 2 bytes: 32 KB at 64 x 64, 203 KB in all) while step i computes, then widened to float32
//       at the top of step i+1; at one block per SM nothing else hid that load. Not at d <= 64 (the staging
//       would cost the second block per SM) nor for float32 inputs (64 KB of staging at 64 x 64).
//       Measured (H200, fp16, d = 128, N = 4k/8k, results/bwd_teaching_ab/v3_v4_staging_tiles/; TFLOP/s non-causal | causal):
//       at 64 x 64, 29.9/29.8 | 29.2/30.4 against v2's 20.1/21.4 | 21.0/21.1: 1.39-1.49x. At one block per SM the
//       load of the next Q_i, dO_i was what the 8 warps waited on.
//   v4  The H200 measured v2 (commit b751920, results/sessions/visit2) at 30 TFLOP/s for d = 64 (v1: 25) but
//       19-21 for d = 128 (v1: 18-19), below the teaching naive's 24 there: at 64 x 64, d = 128 holds one
//       block (8 warps) per SM, and its barriers and load latencies have nothing to hide behind (naive's
//       small kernels run several blocks per SM). kernels/fa2.py's default at d_pad = 128 becomes Br = Bc =
//       32: 77 KB of shared memory (93 KB with v3's staging) and 128 registers (MIN_BLOCKS = 2), so two
//       blocks per SM, for about half the reuse per shared read (6 wavefronts per 16 FFMA in Q_i K_j^T, 12
//       per 64 at 64 x 64) and twice the dQ atomics. The v2 float4 reads and the v3 prefetch are kept.
//       Measured (same run as v3; v4 was chosen before v3 was timed): 32 x 32 with the staging 21.7/22.0 |
//       21.6/21.7, without it 21.0/21.3 | 20.9/21.1; 48 x 32 (two blocks) 23.3/23.6 | 22.7/23.2; 64 x 32 (one)
//       22.4/22.6 | 22.5/22.5. Negative: the second block per SM bought less than v3's staging at 64 x 64
//       (0.73x of it), because halving the tile halves the reuse per shared read and doubles the dQ atomics.
//   v5  kernels/fa2.py backward_blocks(): 64 x 64 with the v3 staging wherever it applies (16-bit inputs, d_pad
//       = 128, d % 8 == 0, 16-byte aligned q and dO); 32 x 32 only where it does not (float32 inputs, d % 8 != 0).
//       Against the teaching naive backward in that run (23.9 | 21.2-21.8 TFLOP/s): 1.25x | 1.34-1.43x.
//   Considered, not built: Q, K, V, dO tiles in the input dtype in shared memory (halving it to ~100 KB at
//   d = 128) would not give d = 128 a second block per SM: registers already hold it to one (200 per
//   thread x 256 threads; two blocks need <= 128, and dK_j, dV_j alone take 64), and every product would pay
//   a 16 -> 32-bit conversion per element read.
#include "teaching.cuh"

#ifndef D_PAD
#define D_PAD 128  // 64 for d <= 64 (kernels/fa2.py sets it): halves the dK, dV, dQ registers
#endif
#define NS (D_PAD / TX)  // columns of a (rows x d) tile per thread
#define NG (D_PAD / 64)  // of them, groups of 4 consecutive columns: x = 4 tx + 64 g + e
#define LDK (D_PAD + 4)  // row stride of K_j, V_j, Q_i, dO_i (floats)
#define LDT (BR + 4)     // row stride of P^T, dS^T (floats)

static_assert(D_PAD == 64 || D_PAD == 128, "D_PAD is 64 or 128");

#ifndef FA2_PREFETCH
// 1: stage Q_{i+1}, dO_{i+1} with cp.async during step i (kernels/fa2.py: 16-bit, d_pad 128, d % 8 == 0)
#define FA2_PREFETCH 0
#endif
static_assert(!FA2_PREFETCH || (sizeof(T) == 2 && D_PAD == 128), "the staging buffer fits at 16 bits, d_pad = 128");

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80+); bytes < 16
// zero-fills the rest (0: a tail row, nothing is read). The emulator (tests/emulate) copies synchronously.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, int bytes) {
#ifdef __CUDA_ARCH__
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
#else
  std::memset(dst, 0, 16);
  std::memcpy(dst, src, bytes);
#endif
}
__device__ __forceinline__ void copies_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void copies_wait_all() {  // this thread's copies have landed (then a barrier: everyone's)
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group 0;\n" ::);
#endif
}

// Stage the Br rows at src (the first `rows` of them real) of a (Nq x d) input into a (Br x D_PAD) shared tile
// in the input dtype, 8 elements per copy: rows past `rows` and columns past d are zero-filled. Needs
// d % 8 == 0 (16-byte aligned rows).
__device__ __forceinline__ void stage_tile(T* dst, const T* __restrict__ src, int rows, int d) {
  for (int e = threadIdx.x; e < BR * D_PAD / 8; e += NTHREADS) {
    const int r = e / (D_PAD / 8), c = 8 * (e % (D_PAD / 8));
    const bool in = r < rows && c < d;
    copy16_async(dst + r * D_PAD + c, in ? src + (long long)r * d + c : src, in ? 16 : 0);
  }
}

// The staged tile to its float32 tile (row stride LDK), all D_PAD columns (the staging zero-filled them).
__device__ __forceinline__ void unstage_tile(float* dst, const T* src) {
  for (int e = threadIdx.x; e < BR * D_PAD; e += NTHREADS) dst[(e / D_PAD) * LDK + e % D_PAD] = to_f32(src[e]);
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
// Component i of v; i is a compile-time constant after unrolling, so this is a register, not a branch.
__device__ __forceinline__ float at(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

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

// acc[a][b] = sum_kk A[ty+16a][kk] * B[tx+16b][kk] (A Br x LDK, B Bc x LDK): S = Q_i K_j^T, dP = dO_i V_j^T.
// kk runs to d rounded up to 4; the columns past d are zero-filled.
__device__ __forceinline__ void tile_nt(float (&acc)[RA][CB], const float* A, const float* B, int d) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll
  for (int a = 0; a < RA; ++a)
#pragma unroll
    for (int b = 0; b < CB; ++b) acc[a][b] = 0.f;
#pragma unroll 2
  for (int kk = 0; kk < d; kk += 4) {
    float4 x[RA], y[CB];
#pragma unroll
    for (int a = 0; a < RA; ++a) x[a] = ld4(A + (ty + TY * a) * LDK + kk);
#pragma unroll
    for (int b = 0; b < CB; ++b) y[b] = ld4(B + (tx + TX * b) * LDK + kk);
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int b = 0; b < CB; ++b) acc[a][b] = fmaf(at(x[a], e), at(y[b], e), acc[a][b]);
  }
}

// acc[a][4g+e] += sum_r At[ty+16a][r] * X[r][4tx+64g+e] (At Bc x LDT, the transpose of a Br x Bc tile;
// X Br x LDK): dV_j += P^T dO_i (FA2 Alg. 2 line 12) and dK_j += dS^T Q_i (FA2 Alg. 2 line 16).
__device__ __forceinline__ void tile_tn(float (&acc)[CB][NS], const float* At, const float* X) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll 2
  for (int r = 0; r < BR; r += 4) {
    float4 p[CB];
#pragma unroll
    for (int a = 0; a < CB; ++a) p[a] = ld4(At + (ty + TY * a) * LDT + r);
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      float4 x[NG];
#pragma unroll
      for (int g = 0; g < NG; ++g) x[g] = ld4(X + (r + rr) * LDK + 4 * tx + 64 * g);
#pragma unroll
      for (int a = 0; a < CB; ++a)
#pragma unroll
        for (int g = 0; g < NG; ++g)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[a][4 * g + e] = fmaf(at(p[a], rr), at(x[g], e), acc[a][4 * g + e]);
    }
  }
}

// acc[a][4g+e] = sum_c dS[RA ty + a][c] * K[c][4tx+64g+e]: dQ_i's share of this key block (FA2 Alg. 2 line 15).
// Here a thread owns RA consecutive query rows (not every 16th), so that dS^T's column c holds its RA values
// side by side: one float4 read per 4 rows when RA is a multiple of 4 (Br = 64, 128), float2 per 2 rows
// (Br = 32, 96), else scalar reads.
__device__ __forceinline__ void tile_dq(float (&acc)[RA][NS], const float* dSt, const float* K) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll
  for (int a = 0; a < RA; ++a)
#pragma unroll
    for (int b = 0; b < NS; ++b) acc[a][b] = 0.f;
#pragma unroll 4
  for (int c = 0; c < BC; ++c) {
    float s[RA];
    if constexpr (RA % 4 == 0) {
#pragma unroll
      for (int a = 0; a < RA; a += 4) {
        const float4 s4 = ld4(dSt + c * LDT + RA * ty + a);
        s[a] = s4.x, s[a + 1] = s4.y, s[a + 2] = s4.z, s[a + 3] = s4.w;
      }
    } else if constexpr (RA % 2 == 0) {  // Br = 32, 96: float2
#pragma unroll
      for (int a = 0; a < RA; a += 2) {
        const float2 s2 = *reinterpret_cast<const float2*>(dSt + c * LDT + RA * ty + a);
        s[a] = s2.x, s[a + 1] = s2.y;
      }
    } else {
#pragma unroll
      for (int a = 0; a < RA; ++a) s[a] = dSt[c * LDT + RA * ty + a];
    }
    float4 k[NG];
#pragma unroll
    for (int g = 0; g < NG; ++g) k[g] = ld4(K + c * LDK + 4 * tx + 64 * g);
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int g = 0; g < NG; ++g)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][4 * g + e] = fmaf(s[a], at(k[g], e), acc[a][4 * g + e]);
  }
}

// Two blocks per SM where the shared memory allows it (an SM has 228 KB, 1 KB of it reserved per block: at most
// 113 KB each): d <= 64 at 64 x 64, d = 128 at 32 x 32 (v4). Registers must then stay within 128 per thread.
#define SMEM_BYTES (4 * ((2 * BC + 2 * BR) * LDK + 2 * BC * LDT + 2 * BR) + (FA2_PREFETCH ? 4 * BR * D_PAD : 0))
#define MIN_BLOCKS (SMEM_BYTES <= 113 * 1024 ? 2 : 1)

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
fa2_bwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
        const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
        float* __restrict__ dq_acc, T* __restrict__ dk, T* __restrict__ dv, int n_q, int n_k, int d,
        float scale, int causal, int group) {  // group = H / H_kv query heads per kv head (1: equal heads)
  extern __shared__ float4 smem4[];  // float4: the carving below keeps every tile 16-byte aligned
  float* smem = reinterpret_cast<float*>(smem4);
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  float* Ks = smem;             // Bc x LDK  K_j
  float* Vs = Ks + BC * LDK;    // Bc x LDK  V_j
  float* Qs = Vs + BC * LDK;    // Br x LDK  Q_i
  float* dOs = Qs + BR * LDK;   // Br x LDK  dO_i
  float* Pt = dOs + BR * LDK;   // Bc x LDT  (P_i^(j))^T
  float* dSt = Pt + BC * LDT;   // Bc x LDT  (dS_i^(j))^T
  float* Ls = dSt + BC * LDT;   // Br        L_i
  float* Ds = Ls + BR;          // Br        D_i
#if FA2_PREFETCH
  T* Qst = reinterpret_cast<T*>(Ds + BR);  // Br x D_PAD  Q_{i+1} staged (input dtype), in flight during step i
  T* dOst = Qst + BR * D_PAD;              // Br x D_PAD  dO_{i+1} staged
#endif

  // FA2 Alg. 2 line 5: this block's key block j and (batch, kv head). Block j = 0 sees the most Q blocks under the
  // causal mask, so the grid's natural order is already heaviest first.
  const int j = blockIdx.x;
  const long long bh_kv = blockIdx.y;  // b*H_kv + h_kv; its query heads are b*H + h_kv*group + g = bh_kv*group + g
  const int c0 = j * BC, cols = min(BC, n_k - c0), offset = n_k - n_q;
  const int t_r = cdiv(n_q, BR);
  // counting/tiling.py q_blocks(j): Q block i visits K_j iff its last row sees column c0
  const int i_first = causal ? min(max(0, c0 - offset) / BR, t_r - 1) : 0;

  // FA2 Alg. 2 line 6: load K_j, V_j from HBM to on-chip SRAM (zero-filled tails and padding)
  load_tile(Ks, LDK, k + (bh_kv * n_k + c0) * d, d, cols, d, BC, D_PAD);
  load_tile(Vs, LDK, v + (bh_kv * n_k + c0) * d, d, cols, d, BC, D_PAD);

  // FA2 Alg. 2 line 7: on chip, dK_j = 0, dV_j = 0 (Bc x d): key rows ty+16a, columns 4tx+64g+e of each thread
  float dK[CB][NS], dV[CB][NS];
#pragma unroll
  for (int a = 0; a < CB; ++a)
#pragma unroll
    for (int b = 0; b < NS; ++b) dK[a][b] = dV[a][b] = 0.f;
#if FA2_PREFETCH
  {  // the first query head's first Q block starts on its way before the loops
    const int r0 = i_first * BR;
    stage_tile(Qst, q + (bh_kv * group * n_q + r0) * d, min(BR, n_q - r0), d);
    stage_tile(dOst, dout + (bh_kv * group * n_q + r0) * d, min(BR, n_q - r0), d);
    copies_commit();
  }
#endif

  // FA2 Alg. 2 line 8's loop over the Q blocks i (hidden ones skipped), once per query head of the group (one pass
  // without grouped-query K/V), as one loop of steps: step t is query head t / n_i of the group, Q block i_first +
  // t % n_i (one counter: the nested loops' extra live registers spilled the 128-register builds)
  const int n_i = t_r - i_first, steps = n_i * group;
  for (int t = 0; t < steps; ++t) {
    const int i = i_first + t % n_i;
    const long long bh = bh_kv * group + t / n_i;  // (batch, query head): the row index of q, dO, L, D, dQ
    const int r0 = i * BR, rows = min(BR, n_q - r0);
    const long long row0 = bh * n_q + r0;
    // FA2 Alg. 2 line 9: load Q_i, dO_i, L_i, D_i from HBM to on-chip SRAM (dQ_i is read-modify-written by
    // the atomics of FA2 Alg. 2 line 15 instead of being loaded)
#if FA2_PREFETCH
    copies_wait_all();
    __syncthreads();  // Q_i, dO_i staged by every thread; the previous step is done with Qs, dOs, Pt, dSt
    unstage_tile(Qs, Qst);
    unstage_tile(dOs, dOst);
#else
    __syncthreads();  // the previous step is done with Qs, dOs, Pt, dSt
    load_tile(Qs, LDK, q + row0 * d, d, rows, d, BR, D_PAD);
    load_tile(dOs, LDK, dout + row0 * d, d, rows, d, BR, D_PAD);
#endif
    for (int r = threadIdx.x; r < BR; r += NTHREADS) {
      Ls[r] = r < rows ? finite_or_zero(lse[row0 + r]) : 0.f;  // L = -inf: a row that sees no key
      Ds[r] = r < rows ? delta[row0 + r] : 0.f;
    }
    __syncthreads();
#if FA2_PREFETCH
    // the next step's Q, dO travel while this step computes (the staging buffer is free again): Q_{i+1} of this
    // query head, or after its last block the next query head's first block i_first
    if (t + 1 < steps) {
      const int r1 = (i_first + (t + 1) % n_i) * BR;
      const long long row1 = (bh_kv * group + (t + 1) / n_i) * n_q + r1;
      stage_tile(Qst, q + row1 * d, min(BR, n_q - r1), d);
      stage_tile(dOst, dout + row1 * d, min(BR, n_q - r1), d);
    }
    copies_commit();
#endif

    // FA2 Alg. 2 line 10: S_i^(j) = scale * Q_i K_j^T
    float P[RA][CB], dP[RA][CB];
    tile_nt(P, Qs, Ks, d);
    // FA2 Alg. 2 line 13 (computed here, before the barrier, since it needs only dO_i and V_j):
    // dP_i^(j) = dO_i V_j^T
    tile_nt(dP, dOs, Vs, d);
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      const int r = ty + TY * a;
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        const int c = tx + TX * b;
        // FA2 Alg. 2 line 11: P_i^(j) = exp(S_i^(j) - L_i); hidden entries (causal, tails) are 0
        const bool seen = r < rows && visible(r0 + r, c0 + c, c0 + cols, offset, causal);
        const float p = seen ? expf(P[a][b] * scale - Ls[r]) : 0.f;
        Pt[c * LDT + r] = p;
        // FA2 Alg. 2 line 14: dS_i^(j) = P_i^(j) o (dP_i^(j) - D_i)
        dSt[c * LDT + r] = p * (dP[a][b] - Ds[r]);
      }
    }
    __syncthreads();  // P and dS complete: every thread needs whole columns of them below

    // FA2 Alg. 2 line 12: dV_j <- dV_j + (P_i^(j))^T dO_i
    tile_tn(dV, Pt, dOs);

    // FA2 Alg. 2 line 15: dQ_i <- dQ_i + dS_i^(j) K_j, added into the float32 accumulator in HBM (atomics: the
    // other key blocks of this (b, h) add into the same dQ_i concurrently). The scale is applied
    // once, by fa2_bwd_dq.
    float dQ[RA][NS];
    tile_dq(dQ, dSt, Ks);
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      const int r = RA * ty + a;  // tile_dq's rows
      if (r >= rows) continue;
      float* dQg = dq_acc + (row0 + r) * d;
#pragma unroll
      for (int g = 0; g < NG; ++g) {
        const int x = 4 * tx + 64 * g;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
        if ((d & 3) == 0) {  // the 4 columns are all below d or all past it, and 16-byte aligned
          if (x < d) atomicAdd(reinterpret_cast<float4*>(dQg + x),
                               make_float4(dQ[a][4 * g], dQ[a][4 * g + 1], dQ[a][4 * g + 2], dQ[a][4 * g + 3]));
          continue;
        }
#endif
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (x + e < d) atomicAdd(dQg + x + e, dQ[a][4 * g + e]);
      }
    }

    // FA2 Alg. 2 line 16: dK_j <- dK_j + (dS_i^(j))^T Q_i
    tile_tn(dK, dSt, Qs);
  }  // end for (over the steps: the group's query heads, and each one's Q blocks i)

  // FA2 Alg. 2 line 18: write dK_j (times the scale of S = scale * Q K^T), dV_j to HBM
#pragma unroll
  for (int a = 0; a < CB; ++a) {
    const int c = ty + TY * a;
    if (c >= cols) continue;
    T* dKg = dk + (bh_kv * n_k + c0 + c) * d;
    T* dVg = dv + (bh_kv * n_k + c0 + c) * d;
#pragma unroll
    for (int b = 0; b < NS; ++b) {
      const int x = 4 * tx + 64 * (b / 4) + b % 4;
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
