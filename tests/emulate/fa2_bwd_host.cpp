// kernels/cuda/fa2_bwd.cu's three kernels compiled as plain C++ and run on the CPU: one std::thread per CUDA
// thread, std::barrier for __syncthreads (and per warp, around the shuffles' exchange), std::atomic_ref for
// atomicAdd, shared memory poisoned before each block. It checks the kernels' index arithmetic, masks,
// barriers and the order of Algorithm 2's lines where there is no GPU (tests/test_fa2_bwd_emulated.py);
// float32 storage only.
//   g++ -std=c++20 -O2 -shared -fPIC -pthread -I tests/emulate/fake -I kernels/cuda -DSTORAGE=float
//       -DBR=64 -DBC=64 -DD_PAD=128 tests/emulate/fa2_bwd_host.cpp -o fa2_bwd_host.so
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
using std::max;
using std::min;

struct Dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local Dim3 threadIdx;
Dim3 blockIdx, gridDim;
static std::barrier<>* block_barrier;
static std::barrier<>* warp_barrier[8];  // NTHREADS / 32
static float shuffle_slot[256];          // NTHREADS

inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
// Every lane of a warp posts its value, the warp meets, each reads its partner's, the warp meets again.
inline float __shfl_xor_sync(unsigned, float x, int lane_mask) {
  const int t = threadIdx.x, w = t / 32;
  shuffle_slot[t] = x;
  warp_barrier[w]->arrive_and_wait();
  const float y = shuffle_slot[(t & ~31) | ((t & 31) ^ lane_mask)];
  warp_barrier[w]->arrive_and_wait();
  return y;
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __restrict__ __restrict
#include "fa2_bwd.cu"

float smem[(2 * BC + 2 * BR) * (D_PAD + 1) + 2 * BR * (BC + 1) + 2 * BR];

// One launch: grid (gx, gy) of NTHREADS-thread blocks, one block after another.
template <class Body>
static void launch(int gx, int gy, Body body) {
  static_assert(NTHREADS == 256, "the shuffle and warp arrays are sized for 256 threads");
  gridDim.x = gx;
  gridDim.y = gy;
  for (int y = 0; y < gy; ++y)
    for (int x = 0; x < gx; ++x) {
      blockIdx.x = x;
      blockIdx.y = y;
      std::barrier<> barrier(NTHREADS);
      block_barrier = &barrier;
      std::vector<std::unique_ptr<std::barrier<>>> warps;
      for (int w = 0; w < NTHREADS / 32; ++w) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        warp_barrier[w] = warps.back().get();
      }
      std::memset(smem, 0x7f, sizeof(smem));  // ~3e38 everywhere: a tile read before it is written shows
      std::vector<std::thread> threads;
      for (int t = 0; t < NTHREADS; ++t)
        threads.emplace_back([=] {
          threadIdx.x = t;
          body();
        });
      for (auto& t : threads) t.join();
    }
}

// The three launches of kernels/fa2.py backward, on the grid the caller gives (gx, gy): the launcher's own
// grids when tests/test_fa2_bwd_emulated.py routes kernels/fa2.py through here.
extern "C" void fa2_bwd_preprocess_launch(int gx, int gy, const float* o, const float* dout, float* dq_acc,
                                          float* delta, int n_q, int d) {
  launch(gx, gy, [=] { fa2_bwd_preprocess(o, dout, dq_acc, delta, n_q, d); });
}

extern "C" void fa2_bwd_launch(int gx, int gy, const float* q, const float* k, const float* v, const float* dout,
                               const float* lse, const float* delta, float* dq_acc, float* dk, float* dv, int n_q,
                               int n_k, int d, float scale, int causal) {
  launch(gx, gy, [=] { fa2_bwd(q, k, v, dout, lse, delta, dq_acc, dk, dv, n_q, n_k, d, scale, causal); });
}

extern "C" void fa2_bwd_dq_launch(int gx, int gy, const float* dq_acc, float* dq, long long n, float scale) {
  launch(gx, gy, [=] { fa2_bwd_dq(dq_acc, dq, n, scale); });
}

extern "C" long long shared_floats() { return sizeof(smem) / sizeof(float); }
extern "C" int block_k() { return BC; }
