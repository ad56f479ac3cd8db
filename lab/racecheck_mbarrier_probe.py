"""Does compute-sanitizer's racecheck see an mbarrier hand-off of a shared-memory word as synchronisation?

    PYTHONPATH=. compute-sanitizer --tool racecheck python lab/racecheck_mbarrier_probe.py

fa2_wgmma_tma.cu's persistent builds pass each tile index from the producer thread to the consumer warps through
a shared-memory slot: the producer stores it and arrives on TILE_FULL (count 1); every consumer thread waits on
TILE_FULL and loads it; each consumer warp then meets at __syncwarp and its lane 0 arrives on TILE_EMPTY (count:
consumer warps), which the producer waits on before it stores into the slot again. Under the PTX memory model the
arrive is a release and the wait an acquire, and __syncwarp orders the other lanes' loads before lane 0's arrive.
racecheck reported hazards between that store and those loads (results/persist_short/racecheck), only
where a slot was reused. This probe runs the same protocol in isolation, in three forms, so the report can be
read: "warp" (lane 0 arrives for its warp after __syncwarp, as the kernel does), "thread" (every consumer
thread arrives; count: consumer threads) and "control" ("thread" plus a store into the other slot that waits for
nothing: a real race, which racecheck must flag). "warp" and "thread" check that every consumer saw every value.
"""
from __future__ import annotations

import sys

import cupy as cp

SRC = r"""
typedef unsigned int u32;
__device__ __forceinline__ u32 saddr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void init(u32 bar, int n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(n) : "memory");
}
__device__ __forceinline__ void arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void wait(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred p;\nW:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n"
                 ::"r"(bar), "r"(parity) : "memory");
}
// MODE 0: lane 0 of each consumer warp arrives after __syncwarp; 1: every consumer thread arrives; 2: as 1, and the
// producer also stores into the other slot without waiting for its readers (the control: a real race)
extern "C" __global__ void probe(int iters, int* bad) {
    __shared__ __align__(8) unsigned long long bars[4];  // full[2], empty[2]
    __shared__ int slot[2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, consumers = blockDim.x - 32;
    const u32 full0 = saddr(&bars[0]), empty0 = saddr(&bars[2]);
    if (tid == 0) {
        for (int i = 0; i < 2; ++i) {
            init(full0 + 8 * i, 1);
            init(empty0 + 8 * i, MODE != 0 ? consumers : consumers / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp == 0) {
        if (lane == 0) {
            for (int k = 0; k < iters; ++k) {
                if (k >= 2) wait(empty0 + 8 * (k & 1), ((k >> 1) - 1) & 1);
                volatile int* s = slot;
                s[k & 1] = 1000 + k;
                arrive(full0 + 8 * (k & 1));
                if (MODE == 2 && k >= 1) s[(k + 1) & 1] = -1;  // readers of tile k-1 may still be loading it
            }
        }
        return;
    }
    for (int k = 0; k < iters; ++k) {
        wait(full0 + 8 * (k & 1), (k >> 1) & 1);
        const int v = ((volatile int*)slot)[k & 1];
        if (v != 1000 + k && MODE != 2) atomicAdd(bad, 1);
        if (MODE == 0) {
            __syncwarp();
            if (lane == 0) arrive(empty0 + 8 * (k & 1));
        } else {
            arrive(empty0 + 8 * (k & 1));
        }
    }
}
"""


def main() -> int:
    from bench import harness

    if harness.no_gpu("racecheck_mbarrier_probe"):  # one line and exit 2, not the traceback of the first CUDA call
        return 2
    bad_total = 0
    for mode, name in ((0, "warp"), (1, "thread"), (2, "control")):
        mod = cp.RawModule(code=SRC, options=("-std=c++17", f"-DMODE={mode}", "--gpu-architecture=sm_90"))
        fn = mod.get_function("probe")
        bad = cp.zeros(1, dtype=cp.int32)
        print(f"@@PROBE mode={name}", flush=True)
        fn((1,), (160,), (cp.int32(8), bad))
        cp.cuda.runtime.deviceSynchronize()
        print(f"mode={name} wrong values={int(bad.get()[0])}", flush=True)
        bad_total += int(bad.get()[0])
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
