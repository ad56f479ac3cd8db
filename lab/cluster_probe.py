"""Measure the three cluster constants the GPU model assumes (gpumodel/cluster_model.py), on the H200.

    PYTHONPATH=. python3 lab/cluster_probe.py          # writes $OUT/cluster_probe.json, prints a table

1. Residency: clusters of CS = 1, 2, 4, 8, 16 CTAs, each CTA holding 150 KB of dynamic shared memory (one
   per SM, as the cluster v_once kernel), spin 300 µs and record %smid and %globaltimer. From the records:
   the most clusters running at once (what cudaOccupancyMaxActiveClusters promises), and the GPCs (the SMs
   that ever share a cluster belong to one GPC: union-find over every run) -> gpc_sms.
2. DSMEM bandwidth: every CTA of a cluster reads rank (r+1) % CS's 128 KB of shared memory through
   ld.shared::cluster.v4 (16 B per thread, 8 loads in flight), 256 threads, on every SM at once:
   bytes per SM clock, per CS (CS = 1 reads its own smem through the cluster window: the local reference).
3. Barrier latency: barrier.cluster.arrive.release + barrier.cluster.wait.acquire, 2000 times in a row,
   256 threads per CTA: clock64 cycles per barrier, per CS.
Commit the JSON as results/cluster_probe.json: gpumodel/cluster_model.py then uses its gpc_sms,
dsmem_bytes_per_clk(_by_cs), barrier_cycles(_by_cs) and max_active_clusters_by_cs instead of its assumptions.
Needs: an sm_90 GPU, CuPy (NVRTC), nothing else; under 30 s.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1, 2, 4, 8, 16)
THREADS = 256
SPIN_NS = 300_000
RESIDENCY_SMEM = 150 * 1024
DSMEM_WORDS = 8192  # uint4: 128 KB per CTA
DSMEM_ITERS = 64
BARRIERS = 2000
NON_PORTABLE = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h, CUfunction_attribute)

SOURCE = r"""
extern "C" __global__ void __cluster_dims__(CS, 1, 1) residency(unsigned long long* rec, long long spin_ns) {
    extern __shared__ unsigned char smem[];
    unsigned smid;
    unsigned long long t0, t;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    smem[threadIdx.x] = (unsigned char)smid;  // the allocation is real
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < spin_ns);
    long long c1 = clock64();
    if (threadIdx.x == 0) {
        rec[4 * blockIdx.x + 0] = smid + smem[0] * 0ull;
        rec[4 * blockIdx.x + 1] = t0;
        rec[4 * blockIdx.x + 2] = t;
        rec[4 * blockIdx.x + 3] = (unsigned long long)(c1 - c0);
    }
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

extern "C" __global__ void __cluster_dims__(CS, 1, 1) dsmem_bw(long long* out, int iters, int words) {
    extern __shared__ uint4 buf[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = make_uint4(i, i + 1, i + 2, blockIdx.x);
    cluster_sync();
    unsigned rank, n;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    unsigned local = (unsigned)__cvta_generic_to_shared(buf), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"((rank + 1) % n));
    unsigned acc = 0;
    long long c0 = clock64();
    for (int it = 0; it < iters; ++it) {
        for (int i = threadIdx.x; i + 7 * blockDim.x < words; i += 8 * blockDim.x) {
            unsigned v[8][4];
#pragma unroll
            for (int u = 0; u < 8; ++u)
                asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[u][0]), "=r"(v[u][1]), "=r"(v[u][2]), "=r"(v[u][3])
                             : "r"(remote + 16u * (unsigned)(i + u * blockDim.x)) : "memory");
#pragma unroll
            for (int u = 0; u < 8; ++u) acc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
        }
    }
    long long c1 = clock64();
    cluster_sync();  // no CTA leaves while another reads its smem
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = c1 - c0; out[2 * blockIdx.x + 1] = acc; }
}

extern "C" __global__ void __cluster_dims__(CS, 1, 1) barrier_lat(long long* out, int reps) {
    cluster_sync();
    long long c0 = clock64();
    for (int r = 0; r < reps; ++r) cluster_sync();
    long long c1 = clock64();
    if (threadIdx.x == 0) out[blockIdx.x] = c1 - c0;
}
"""


def _module(cp, cs: int):
    return cp.RawModule(code=SOURCE, options=("-std=c++17", f"-DCS={cs}"))  # CuPy adds -arch=sm_90


def _kernel(mod, name: str, smem: int):
    from cupy_backends.cuda.api import driver

    k = mod.get_function(name)
    k.max_dynamic_shared_size_bytes = smem
    driver.funcSetAttribute(k.kernel.ptr, NON_PORTABLE, 1)  # CS = 16 (Hopper's non-portable size)
    return k


def _max_overlap(starts, ends, cs) -> int:
    """The most clusters running at once: CTAs alive at an instant, / CS (all CTAs of a cluster start together)."""
    events = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends], key=lambda x: (x[0], x[1]))
    live = most = 0
    for _, step in events:
        live += step
        most = max(most, live)
    return most // cs


def _gpcs(pairs, sms: int) -> list[int]:
    parent = list(range(sms))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for group in pairs:
        for a in group[1:]:
            parent[find(a)] = find(group[0])
    sizes = {}
    for s in range(sms):
        sizes[find(s)] = sizes.get(find(s), 0) + 1
    return sorted(sizes.values(), reverse=True)


def main() -> int:
    import cupy as cp

    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="cluster_probe_"))
    out.mkdir(parents=True, exist_ok=True)
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = int(props["multiProcessorCount"])
    if props["major"] != 9:
        print(f"cluster_probe: needs an sm_90 GPU, found {name} (cc {props['major']}.{props['minor']})")
        return 2
    res = dict(device=name, sms=sms, threads=THREADS, max_active_clusters_by_cs={}, smem_per_cta_residency=RESIDENCY_SMEM,
               dsmem_bytes_per_clk_by_cs={}, barrier_cycles_by_cs={}, clock_hz_measured=None)
    cluster_sets, clocks = [], []
    t_start = time.time()
    for cs in SIZES:
        mod = _module(cp, cs)
        # 1. residency: 4 waves' worth of 1-CTA-per-SM clusters
        k = _kernel(mod, "residency", RESIDENCY_SMEM)
        ctas = (4 * sms // cs) * cs
        rec = cp.full(4 * ctas, 0xFFFFFFFFFFFFFFFF, dtype=cp.uint64)  # poisoned: a CTA that never ran shows
        k((ctas,), (THREADS,), (rec, cp.int64(SPIN_NS)), shared_mem=RESIDENCY_SMEM)
        cp.cuda.Device().synchronize()
        r = rec.get().reshape(ctas, 4)
        assert (r[:, 0] < sms).all(), "a CTA never recorded (poison left)"
        res["max_active_clusters_by_cs"][str(cs)] = _max_overlap(r[:, 1].tolist(), r[:, 2].tolist(), cs)
        cluster_sets += [sorted(set(r[i:i + cs, 0].tolist())) for i in range(0, ctas, cs)]
        clocks += [float(c) / (float(e) - float(s)) * 1e9 for s, e, c in zip(r[:, 1], r[:, 2], r[:, 3]) if e > s]
        # 2. DSMEM bandwidth: every SM reading its neighbour's smem at once
        k = _kernel(mod, "dsmem_bw", DSMEM_WORDS * 16)
        ctas = (sms // cs) * cs
        o = cp.zeros(2 * ctas, dtype=cp.int64)
        k((ctas,), (THREADS,), (o, cp.int32(2), cp.int32(DSMEM_WORDS)), shared_mem=DSMEM_WORDS * 16)  # warm-up
        k((ctas,), (THREADS,), (o, cp.int32(DSMEM_ITERS), cp.int32(DSMEM_WORDS)), shared_mem=DSMEM_WORDS * 16)
        cp.cuda.Device().synchronize()
        cyc = o.get()[0::2]
        per_cta = DSMEM_ITERS * DSMEM_WORDS * 16
        res["dsmem_bytes_per_clk_by_cs"][str(cs)] = float(per_cta / cyc.mean())
        # 3. barrier latency
        k = _kernel(mod, "barrier_lat", 0)
        o = cp.zeros(ctas, dtype=cp.int64)
        k((ctas,), (THREADS,), (o, cp.int32(BARRIERS)))
        cp.cuda.Device().synchronize()
        res["barrier_cycles_by_cs"][str(cs)] = float(o.get().mean() / BARRIERS)
    res["gpc_sms"] = _gpcs(cluster_sets, sms)
    res["clock_hz_measured"] = sorted(clocks)[len(clocks) // 2]
    big = str(max(SIZES))
    res["dsmem_bytes_per_clk"] = res["dsmem_bytes_per_clk_by_cs"][big]
    res["barrier_cycles"] = res["barrier_cycles_by_cs"][big]
    res["wall_s"] = time.time() - t_start
    res["method"] = __doc__.split("\n\n")[1] if __doc__ else ""
    (out / "cluster_probe.json").write_text(json.dumps(res, indent=1) + "\n")
    print(f"cluster_probe on {name}: {sms} SMs, GPCs (SMs each) {res['gpc_sms']}, SM clock "
          f"{res['clock_hz_measured'] / 1e9:.3f} GHz -> {out / 'cluster_probe.json'}")
    print(f"{'CS':>3} {'clusters at once':>17} {'SMs busy':>9} {'DSMEM B/clk/SM':>15} {'barrier cycles':>15}")
    for cs in SIZES:
        n = res["max_active_clusters_by_cs"][str(cs)]
        print(f"{cs:>3} {n:>17} {n * cs:>9} {res['dsmem_bytes_per_clk_by_cs'][str(cs)]:>15.2f} "
              f"{res['barrier_cycles_by_cs'][str(cs)]:>15.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
