// kernels/cuda/split_kv.cu's two kernels (split_kv_partial, split_kv_merge) compiled as plain C++ and run on the CPU
// (tests/emulate/cuda_host.h: one std::thread per CUDA thread, 256 per block, std::barrier for __syncthreads, shared
// memory poisoned before each block). It checks the index arithmetic (GQA packing, paged gather, splits, the
// workspace layout), the masks and the merge where there is no GPU (tests/test_split_kv_emulated.py).
//   g++ -std=c++20 -O1 -shared -fPIC -pthread -I tests/emulate -I tests/emulate/fake -I kernels/cuda
//       -DSTORAGE=float tests/emulate/split_kv_host.cpp -o split_kv_host.so
#define NTHREADS 256
#include "cuda_host.h"
#include "split_kv.cu"

#define SMEM_FLOATS (2 * BR * 256 + 2 * BC * 256 + BR * BC + 4 * BR)  // kernels/split_kv.py shared_bytes at d = 256
float smem[SMEM_FLOATS];

extern "C" void partial_launch(int gx, int gy, int gz, const T* q, const T* k, const T* v, const int* seqlens,
                               const int* table, float* ws_o, float* ws_lse, int H, int H_kv, int Nq, int Nk, int d,
                               float scale, int causal, int paged, int page_size, int max_pages, int chunk,
                               int n_splits, int row_tiles) {
  launch_blocks(gx, gy, gz, smem, sizeof(smem), [=] {
    split_kv_partial(q, k, v, seqlens, table, ws_o, ws_lse, H, H_kv, Nq, Nk, d, scale, causal, paged, page_size,
                     max_pages, chunk, n_splits, row_tiles);
  });
}

extern "C" void merge_launch(int gx, const float* ws_o, const float* ws_lse, T* o, float* lse, int H, int H_kv,
                             int Nq, int d, int n_splits, int row_tiles) {
  launch_blocks(gx, 1, 1, smem, sizeof(smem), [=] { split_kv_merge(ws_o, ws_lse, o, lse, H, H_kv, Nq, d, n_splits,
                                                                   row_tiles); });
}
