// wgmma_bwd.cuh -- the device helpers both Hopper backward main kernels share, fa2_wgmma_bwd.cu (v3) and
// fa2_wgmma_bwd_ws.cu (v4): the async-proxy fence, a float2 shared load, the S^T / dP^T and dQ products and the
// packing of an accumulator into A fragments. Needs tc_common.cuh, wgmma.cuh and wgmma_fa2.cuh first, and the
// includer's tile macros: BLOCK_M (Br), BLOCK_N (Bc), KD (D / 16), KM (BLOCK_M / 16), KB (BLOCK_N / 16), DQ_N (the
// columns of one warpgroup's dQ slice).
#pragma once

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ float2 lds_f2(u32 addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}

// FA2 Alg. 2 line 10 and FA2 Alg. 2 line 13: X^T = A_j B_i^T for warpgroup wg's 64 key rows (A = K or V, B = Q or
// dO; both K-major; v4: wg is the consumer warpgroup)
__device__ __forceinline__ void issue_t(float (&x)[BLOCK_M / 2], u32 sA, u32 sB, int wg) {
    wgmma_fence();
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
        const u32 a = sA + (kd >> 2) * (BLOCK_N * 128) + wg * 64 * 128 + (kd & 3) * 32;
        const u32 b = sB + (kd >> 2) * (BLOCK_M * 128) + (kd & 3) * 32;
        wgmma_ss<BLOCK_M>(x, desc_sw128(a, 16, 1024), desc_sw128(b, 16, 1024), kd > 0);
    }
    wgmma_commit();
}

// FA2 Alg. 2 line 15: this warpgroup's 64 x DQ_N slice of dS K_j. A = dS read from the dS^T tile (query columns
// contiguous: MN-major), B = K_j (key rows = k, d contiguous: MN-major)
__device__ __forceinline__ void issue_dq(float (&dq)[DQ_N / 2], u32 sdS, u32 sK, int ms, int ns) {
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
        const u32 a = sdS + ms * (BLOCK_N * 128) + kb * 16 * 128;
        const u32 b = sK + ns * (DQ_N / 64) * (BLOCK_N * 128) + kb * 16 * 128;
        wgmma_ss_tt<DQ_N>(dq, desc_sw128(a, BLOCK_N * 128, 1024), desc_sw128(b, BLOCK_N * 128, 1024), kb > 0);
    }
    wgmma_commit();
}

// fp32 accumulator layout -> fp16/bf16 A fragments (the C layout of one wgmma is the A layout of the next)
__device__ __forceinline__ void pack_frag(u32 (&xa)[KM][4], const float (&x)[BLOCK_M / 2]) {
#pragma unroll
    for (int km = 0; km < KM; ++km) {
        xa[km][0] = pack2(x[8 * km + 0], x[8 * km + 1]);
        xa[km][1] = pack2(x[8 * km + 2], x[8 * km + 3]);
        xa[km][2] = pack2(x[8 * km + 4], x[8 * km + 5]);
        xa[km][3] = pack2(x[8 * km + 6], x[8 * km + 7]);
    }
}
