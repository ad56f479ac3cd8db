// kernels/cuda/naive_bwd.cu's five kernels compiled as plain C++ and run on the CPU (tests/emulate/cuda_host.h),
// float32, fp16 or bf16 storage (STORAGE; tests/emulate/fake has host fp16/bf16): the index arithmetic,
// masks, barriers and the order of FA1 Alg. 3's lines, checked without a GPU by tests/test_naive_bwd_emulated.py.
//   g++ -std=c++20 -O1 -shared -fPIC -pthread -I tests/emulate -I tests/emulate/fake -I kernels/cuda -DSTORAGE=float
//       -DBR=64 -DBC=64 tests/emulate/naive_bwd_host.cpp -o naive_bwd_host.so
#include "cuda_host.h"
#include "naive_bwd.cu"

#define SMEM_FLOATS 32768  // the largest carving: naive_bwd_ds's 2 Nk + 8 (Nk <= 16380) or a tile pass's
float smem[SMEM_FLOATS];

static_assert(NTHREADS == 256, "cuda_host.h is sized for 256 threads");

#define LAUNCH(gx, gy, gz, call) launch_blocks(gx, gy, gz, smem, sizeof(smem), [=] { call; })

extern "C" void naive_bwd_dv_launch(int gx, int gy, const T* p, const T* dout, T* dv, int n_q,
                                    int n_k, int d, int causal) {
  LAUNCH(gx, gy, 1, naive_bwd_dv(p, dout, dv, n_q, n_k, d, causal));
}
extern "C" void naive_bwd_dp_launch(int gx, int gy, int gz, const T* dout, const T* v, T* dp,
                                    int n_q, int n_k, int d, int causal) {
  LAUNCH(gx, gy, gz, naive_bwd_dp(dout, v, dp, n_q, n_k, d, causal));
}
extern "C" void naive_bwd_ds_launch(int gx, int gy, const T* p, const T* dp, T* ds, int n_q,
                                    int n_k) {
  LAUNCH(gx, gy, 1, naive_bwd_ds(p, dp, ds, n_q, n_k));
}
extern "C" void naive_bwd_dq_launch(int gx, int gy, const T* ds, const T* k, T* dq, int n_q,
                                    int n_k, int d, float scale, int causal) {
  LAUNCH(gx, gy, 1, naive_bwd_dq(ds, k, dq, n_q, n_k, d, scale, causal));
}
extern "C" void naive_bwd_dk_launch(int gx, int gy, const T* ds, const T* q, T* dk, int n_q,
                                    int n_k, int d, float scale, int causal) {
  LAUNCH(gx, gy, 1, naive_bwd_dk(ds, q, dk, n_q, n_k, d, scale, causal));
}
extern "C" long long shared_floats() { return SMEM_FLOATS; }
