// The CUDA runtime pieces a teaching kernel uses, as plain C++ for the CPU emulators (tests/emulate/*_host.cpp):
// one std::thread per CUDA thread, std::barrier for __syncthreads (and per warp, around the shuffles'
// exchange), std::atomic_ref for atomicAdd. Include it, then the .cu file, then define the shared-memory
// array `smem` the kernels' `extern __shared__ float smem[]` names, then call launch(gx, gy, body).
#pragma once
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
thread_local Dim3 threadIdx, blockIdx;  // blockIdx per thread: each walks the grid in the same order
Dim3 gridDim;
static std::barrier<>* block_barrier;
static std::barrier<>* warp_barrier[8];  // NTHREADS / 32
static float shuffle_slot[256];          // NTHREADS

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float4 atomicAdd(float4* p, float4 v) {  // sm_90's vector atomicAdd: four float atomics here
  float* f = &p->x;
  return {std::atomic_ref<float>(f[0]).fetch_add(v.x), std::atomic_ref<float>(f[1]).fetch_add(v.y),
          std::atomic_ref<float>(f[2]).fetch_add(v.z), std::atomic_ref<float>(f[3]).fetch_add(v.w)};
}

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

// One launch: grid (gx, gy, gz) of NT-thread blocks (NT <= 256), one block after another, run by NT std::threads
// made once per launch. Before each block, `shared` (the block's shared memory, bytes) is poisoned to ~3e38 so that
// a tile read before it is written shows; the barriers around the poisoning keep blocks apart.
template <int NT = 256, class Body>
static void launch_blocks(int gx, int gy, int gz, void* shared, size_t shared_bytes, Body body) {
  static_assert(NT % 32 == 0 && NT <= 256, "whole warps, at most 256 threads (shuffle_slot, warp_barrier)");
  gridDim.x = gx;
  gridDim.y = gy;
  gridDim.z = gz;
  std::barrier<> barrier(NT);
  block_barrier = &barrier;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (int w = 0; w < NT / 32; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(32));
    warp_barrier[w] = warps.back().get();
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < NT; ++t)
    threads.emplace_back([=, &barrier] {
      threadIdx.x = t;
      for (int z = 0; z < gz; ++z)
        for (int y = 0; y < gy; ++y)
          for (int x = 0; x < gx; ++x) {
            blockIdx.x = x;
            blockIdx.y = y;
            blockIdx.z = z;
            barrier.arrive_and_wait();  // every thread has left the previous block
            if (t == 0) std::memset(shared, 0x7f, shared_bytes);
            barrier.arrive_and_wait();
            body();
          }
    });
  for (auto& t : threads) t.join();
}
