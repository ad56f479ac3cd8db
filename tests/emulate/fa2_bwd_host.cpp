// kernels/cuda/fa2_bwd.cu's main kernel (fa2_bwd) compiled as plain C++ and run on the CPU: one std::thread
// per CUDA thread, std::barrier for __syncthreads, std::atomic_ref for atomicAdd, shared memory poisoned
// before each block. It checks the kernel's index arithmetic, masks, barriers and the order of Algorithm 2's
// lines where there is no GPU (tests/test_fa2_bwd_emulated.py); float32 storage only.
//   g++ -std=c++20 -O2 -shared -fPIC -pthread -I tests/emulate/fake -I kernels/cuda -DSTORAGE=float
//       -DBR=64 -DBC=64 -DD_PAD=128 tests/emulate/fa2_bwd_host.cpp -o fa2_bwd_host.so
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
using std::max;
using std::min;

struct Dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local Dim3 threadIdx;
Dim3 blockIdx, gridDim;  // gridDim: only fa2_bwd_dq reads it (never run here)
static std::barrier<>* block_barrier;

inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __shfl_xor_sync(unsigned, float, int) { std::abort(); }  // fa2_bwd shuffles nothing
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __restrict__ __restrict
#include "fa2_bwd.cu"

float smem[(2 * BC + 2 * BR) * (D_PAD + 1) + 2 * BR * (BC + 1) + 2 * BR];

// The grid of kernels/fa2.py's launch, (Tc, B*H), one block after another.
extern "C" void fa2_bwd_grid(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                             const float* delta, float* dq_acc, float* dk, float* dv, int bh, int n_q, int n_k,
                             int d, float scale, int causal) {
  const int t_c = (n_k + BC - 1) / BC;
  for (int y = 0; y < bh; ++y)
    for (int x = 0; x < t_c; ++x) {
      blockIdx.x = x;
      blockIdx.y = y;
      std::barrier<> barrier(NTHREADS);
      block_barrier = &barrier;
      std::memset(smem, 0x7f, sizeof(smem));  // ~3e38 everywhere: a tile read before it is written shows
      std::vector<std::thread> threads;
      for (int t = 0; t < NTHREADS; ++t)
        threads.emplace_back([=] {
          threadIdx.x = t;
          fa2_bwd(q, k, v, dout, lse, delta, dq_acc, dk, dv, n_q, n_k, d, scale, causal);
        });
      for (auto& t : threads) t.join();
    }
}
