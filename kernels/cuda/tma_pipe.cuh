// tma_pipe.cuh -- the TMA + mbarrier pipeline pieces of the warp-specialised Hopper kernels (fa2_wgmma_tma.cu,
// v_once_cluster.cu): the CUtensorMap argument type, mbarrier init / expect-tx / arrive / parity wait, one
// 64-column TMA panel load, and named barriers. Needs tc_common.cuh (u32) and wgmma_fa2.cuh (u64) first.
#pragma once

struct __align__(64) TensorMap { u64 opaque[16]; };  // CUtensorMap, filled on the host

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {  // arrive + expect `bytes` of TMA
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// until phase `parity` has completed: try_wait suspends the thread for a system-dependent time before it reports the
// phase incomplete and the loop tries again
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// one 64-column panel (box 64 x rows x 1 x 1) of a (d, N, H, B) tensor into smem, completion on `bar`
__device__ __forceinline__ void tma_load(u32 dst, const TensorMap* map, int col, int row, int h, int b, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
        ::"r"(dst), "l"((u64)map), "r"(col), "r"(row), "r"(h), "r"(b), "r"(bar) : "memory");
}
// one 64-column panel (box 64 x rows x 1 x 1) from smem into a (d, N, H, B) tensor (rows past N, columns past d
// clipped), in this thread's bulk group; smem must not change until bulk_wait_read says the copy has read it
__device__ __forceinline__ void tma_store(const TensorMap* map, u32 src, int col, int row, int h, int b) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"((u64)map), "r"(src), "r"(col), "r"(row), "r"(h), "r"(b) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// every bulk store of this thread complete (written, not only read): before the CTA exits and its smem goes
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
