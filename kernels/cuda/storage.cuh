// storage.cuh -- float32 <-> STORAGE (float, __half, __nv_bfloat16): the teaching tier's loads and stores
// (teaching.cuh's kernels and split_kv.cu) compute in float32 whatever the tensors hold.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store_as(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_as(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
