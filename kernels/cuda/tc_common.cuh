// tc_common.cuh -- what the tensor-core kernels (fa2_tc.cu, v_once_tc.cu) share: PTX wrappers for
// cp.async, ldmatrix, mma.sync m16n8k16 and fp16/bf16 packing, quad reductions, and the swizzled
// global -> shared tile copy. The including file defines first: HEAD_DIM as D, IS_BF16, NTHREADS and
// CH (16-byte chunks per row = D / 8). Only PTX and built-ins: no CUDA headers, so NVRTC needs no -I
// beyond this folder.
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;

#define NEG_INF (-__int_as_float(0x7f800000))

// ------------------------------------------------------------------------------------------------
// PTX wrappers
// ------------------------------------------------------------------------------------------------
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
// 16-byte async copy global -> shared; src_bytes = 0 zero-fills (rows past the end).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// D(16x8 f32) += A(16x16, row) * B(16x8, col)
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if IS_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// pack two floats: lo -> bits 0..15 (lower column index), hi -> bits 16..31
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
#if IS_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// element offset of (row, 16-byte chunk) in a swizzled [rows][D] tile: chunk ^= row % 8
__device__ __forceinline__ int swz(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }

// rows [row0, row0 + ROWS) of a (n_rows, D) matrix into a swizzled smem tile; rows >= n_rows are zeros.
// Thread t copies chunk t % CH of rows t / CH + i * (NTHREADS / CH): one base address, constant strides,
// and (NTHREADS / CH) % 8 == 0 keeps the swizzle term constant across i.
template <int ROWS>
__device__ __forceinline__ void load_tile(u32 s_tile, const u16* g, int row0, int n_rows, int tid) {
    constexpr int STEP = NTHREADS / CH;
    static_assert(NTHREADS % CH == 0 && STEP % 8 == 0 && ROWS % STEP == 0, "copy mapping");
    const int r = tid / CH, ch = tid % CH;
    const u16* src = g + (long long)(row0 + r) * D + ch * 8;
    const u32 dst = s_tile + 2 * swz(r, ch);
#pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const bool ok = row0 + r + i * STEP < n_rows;
        cp_async16(dst + i * STEP * D * 2, ok ? (const void*)(src + i * STEP * D) : (const void*)g, ok ? 16 : 0);
    }
}

// unpack a packed fp16/bf16 pair back to fp32 (lo = bits 0..15); scale2: the pair times f, rounded once
__device__ __forceinline__ void unpack2(u32 x, float& lo, float& hi) {
#if IS_BF16
    lo = __int_as_float((int)(x << 16));
    hi = __int_as_float((int)(x & 0xffff0000u));
#else
    u16 a, b;
    asm("mov.b32 {%0, %1}, %2;\n" : "=h"(a), "=h"(b) : "r"(x));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(lo) : "h"(a));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(hi) : "h"(b));
#endif
}
__device__ __forceinline__ u32 scale2(u32 x, float f) {
    float lo, hi;
    unpack2(x, lo, hi);
    return pack2(lo * f, hi * f);
}
