// kernels/cuda/split_kv_fast.cu compiled as plain C++ and run on the CPU (tests/emulate/cuda_host.h for the threads
// and barriers, tests/emulate/tc_common_host.cuh for cp.async, ldmatrix, mma.sync): one std::thread per CUDA thread,
// 128 per block, blocks one after another (z, y, x order: the last split of a tile finishes last and merges).
// tests/test_split_kv_fast_emulated.py drives it.
//   g++ -std=c++20 -O1 -shared -fPIC -pthread -I tests/emulate -I tests/emulate/fake -I kernels/cuda -DFA_EMULATE
//       -DHEAD_DIM=64 -DIS_BF16=0 tests/emulate/split_kv_fast_host.cpp -o split_kv_fast_host.so
#include "cuda_host.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "split_kv_fast.cu"

alignas(1024) unsigned char smem[SMEM_BYTES];

extern "C" void fast_launch(int gx, int gy, int gz, const u16* q, const u16* k, const u16* v, const int* seqlens,
                            const int* table, u16* o, float* lse, float* ws_o, float* ws_lse, int* counters, int H,
                            int H_kv, int Nq, int Nk, int page_size, int max_pages, int paged, int chunk,
                            int n_splits, int row_tiles, float scale_log2, float scale, int causal) {
  launch_blocks<NTHREADS>(gx, gy, gz, smem, sizeof(smem), [=] {
    split_kv_fast(q, k, v, seqlens, table, o, lse, ws_o, ws_lse, counters, H, H_kv, Nq, Nk, page_size, max_pages,
                  paged, chunk, n_splits, row_tiles, scale_log2, scale, causal);
  });
}
