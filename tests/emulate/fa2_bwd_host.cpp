// kernels/cuda/fa2_bwd.cu's three kernels compiled as plain C++ and run on the CPU (tests/emulate/cuda_host.h:
// one std::thread per CUDA thread, std::barrier for __syncthreads and per warp around the shuffles,
// std::atomic_ref for atomicAdd, shared memory poisoned before each block). It checks the kernels' index
// arithmetic, masks, barriers and the order of Algorithm 2's lines where there is no GPU
// (tests/test_fa2_bwd_emulated.py); float32, fp16 or bf16 storage (STORAGE).
//   g++ -std=c++20 -O2 -shared -fPIC -pthread -I tests/emulate -I tests/emulate/fake -I kernels/cuda
//       -DSTORAGE=float -DBR=64 -DBC=64 -DD_PAD=128 tests/emulate/fa2_bwd_host.cpp -o fa2_bwd_host.so
#include "cuda_host.h"
#include "fa2_bwd.cu"

// fa2_bwd.cu's carving; FA2_PREFETCH adds two 16-bit Br x D_PAD staging tiles (Br x D_PAD floats)
#define SMEM_FLOATS ((2 * BC + 2 * BR) * (D_PAD + 4) + 2 * BC * (BR + 4) + 2 * BR + (FA2_PREFETCH ? BR * D_PAD : 0))
float4 smem4[SMEM_FLOATS / 4];

static_assert(NTHREADS == 256, "cuda_host.h is sized for 256 threads");

#define LAUNCH(gx, gy, call) launch_blocks(gx, gy, 1, smem4, sizeof(smem4), [=] { call; })

// The three launches of kernels/fa2.py backward, on the grid the caller gives (gx, gy): the launcher's own
// grids when tests/test_fa2_bwd_emulated.py routes kernels/fa2.py through here.
extern "C" void fa2_bwd_preprocess_launch(int gx, int gy, const T* o, const T* dout, float* dq_acc,
                                          float* delta, int n_q, int d) {
  LAUNCH(gx, gy, fa2_bwd_preprocess(o, dout, dq_acc, delta, n_q, d));
}

extern "C" void fa2_bwd_launch(int gx, int gy, const T* q, const T* k, const T* v, const T* dout,
                               const float* lse, const float* delta, float* dq_acc, T* dk, T* dv, int n_q,
                               int n_k, int d, float scale, int causal, int group) {
  LAUNCH(gx, gy, fa2_bwd(q, k, v, dout, lse, delta, dq_acc, dk, dv, n_q, n_k, d, scale, causal, group));
}

extern "C" void fa2_bwd_dq_launch(int gx, int gy, const float* dq_acc, T* dq, long long n, float scale) {
  LAUNCH(gx, gy, fa2_bwd_dq(dq_acc, dq, n, scale));
}

extern "C" long long shared_floats() { return SMEM_FLOATS; }
extern "C" int block_k() { return BC; }
