// cluster.cuh -- thread-block cluster pieces (sm_90): the CTA's rank in its cluster, the cluster-wide barrier in its
// split arrive / wait form, and distributed-shared-memory (DSMEM) reads of another CTA's shared memory.
// PTX ISA: "mapa", "ld" with the .shared::cluster state space, "barrier.cluster". Needs tc_common.cuh (u32).
//
// Rules the users of this header rely on (CUDA programming guide, "Distributed Shared Memory"):
//   * every thread of every CTA of the cluster arrives at every cluster barrier (.aligned: whole warps);
//   * arrive.release / wait.acquire order this CTA's shared-memory writes before another CTA's reads;
//   * a CTA must not exit while another CTA may still read its shared memory: a last barrier before exit.
#pragma once

__device__ __forceinline__ u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_arrive() {
    __syncwarp();  // .aligned: the whole warp executes it together (after lane-divergent code)
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}
// the address of the same shared-memory location (a CTA-local address from smem_addr) in CTA `rank`
__device__ __forceinline__ u32 dsmem_map(u32 local, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(local), "r"(rank));
    return r;
}
__device__ __forceinline__ float dsmem_ld_f32(u32 remote) {
    float x;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(x) : "r"(remote) : "memory");
    return x;
}
__device__ __forceinline__ float4 dsmem_ld_f32x4(u32 remote) {
    float4 x;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w) : "r"(remote) : "memory");
    return x;
}
