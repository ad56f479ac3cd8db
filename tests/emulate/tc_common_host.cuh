// kernels/cuda/tc_common.cuh's PTX wrappers as plain C++, for the CPU emulation of split_kv_fast.cu
// (tests/emulate/split_kv_fast_host.cpp, after cuda_host.h). Shared memory is the byte array `smem`; a "shared
// address" is an offset into it. cp.async copies at once (so a wrong ring slot overwrites a tile still in use and
// shows); ldmatrix and mma.sync are warp collectives: every lane posts its operands, the warp meets, each lane
// computes its own fragment from the PTX ISA's layouts (m8n8 b16 matrices; m16n8k16 A row, B col, C f32), the warp
// meets again.
#pragma once
#include <cstdint>

typedef unsigned int u32;
typedef unsigned short u16;
#define NEG_INF (-__int_as_float(0x7f800000))
#define __align__(n)

extern unsigned char smem[];

struct alignas(16) uint4 { u32 x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
template <class P> inline P __ldg(const P* p) { return *p; }
template <class P> inline P __ldcg(const P* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }

inline u32 smem_addr(const void* p) { return (u32)((const unsigned char*)p - smem); }
inline void cp_async16(u32 dst, const void* src, int src_bytes) {
    std::memset(smem + dst, 0, 16);
    std::memcpy(smem + dst, src, src_bytes);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}

// ---- fp16 / bf16 bits <-> float ----
inline float half_bits(u16 h) {
#if IS_BF16
    return __int_as_float((int)((u32)h << 16));
#else
    _Float16 f;
    std::memcpy(&f, &h, 2);
    return (float)f;
#endif
}
inline u16 bits_of(float x) {
#if IS_BF16
    return __float2bfloat16_rn(x).x;
#else
    _Float16 f = (_Float16)x;
    u16 h;
    std::memcpy(&h, &f, 2);
    return h;
#endif
}
inline u32 pack2(float lo, float hi) { return (u32)bits_of(lo) | ((u32)bits_of(hi) << 16); }
inline float ex2(float x) { return exp2f(x); }
inline float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
inline float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
inline int swz(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }

// ---- warp collectives ----
static u32 lane_addr_slot[256];
static u32 lane_regs[256][6];

inline u16 smem_b16(u32 addr, int col) { u16 h; std::memcpy(&h, smem + addr + 2 * col, 2); return h; }

template <bool TRANS>
inline void ldsm(u32 (&r)[4], u32 addr) {
    const int t = threadIdx.x, w = t / 32, l = t & 31, base = t & ~31;
    lane_addr_slot[t] = addr;
    warp_barrier[w]->arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        const u32* rows = lane_addr_slot + base + 8 * i;  // matrix i: the row addresses of lanes 8i .. 8i+7
        u16 lo, hi;
        if (!TRANS) {  // lane l: row l / 4, columns 2 (l % 4), +1
            lo = smem_b16(rows[l / 4], 2 * (l % 4));
            hi = smem_b16(rows[l / 4], 2 * (l % 4) + 1);
        } else {  // lane l: rows 2 (l % 4), +1 of column l / 4
            lo = smem_b16(rows[2 * (l % 4)], l / 4);
            hi = smem_b16(rows[2 * (l % 4) + 1], l / 4);
        }
        r[i] = (u32)lo | ((u32)hi << 16);
    }
    warp_barrier[w]->arrive_and_wait();
}
inline void ldsm_x4(u32 (&r)[4], u32 addr) { ldsm<false>(r, addr); }
inline void ldsm_x4_t(u32 (&r)[4], u32 addr) { ldsm<true>(r, addr); }

inline float lo_of(u32 x) { return half_bits((u16)(x & 0xffff)); }
inline float hi_of(u32 x) { return half_bits((u16)(x >> 16)); }

// D(16x8 f32) += A(16x16) B(16x8): lane = 4 g + t holds A (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..),
// B (k = 2t.., n = g), (k = 2t+8.., n = g), C (g, 2t..), (g+8, 2t..)
inline void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    const int t = threadIdx.x, w = t / 32, l = t & 31, base = t & ~31;
    for (int i = 0; i < 4; ++i) lane_regs[t][i] = a[i];
    lane_regs[t][4] = b0;
    lane_regs[t][5] = b1;
    warp_barrier[w]->arrive_and_wait();
    auto A = [&](int row, int k) {
        const int g = row % 8, hr = row / 8, kk = k % 8, hk = k / 8;
        const u32 x = lane_regs[base + 4 * g + kk / 2][hr + 2 * hk];
        return kk % 2 ? hi_of(x) : lo_of(x);
    };
    auto B = [&](int k, int n) {
        const int kk = k % 8, hk = k / 8;
        const u32 x = lane_regs[base + 4 * n + kk / 2][4 + hk];
        return kk % 2 ? hi_of(x) : lo_of(x);
    };
    const int g = l / 4, tt = l % 4;
    float out[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * tt + (e % 2);
        float acc = c[e];
        for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
        out[e] = acc;
    }
    warp_barrier[w]->arrive_and_wait();
    for (int e = 0; e < 4; ++e) c[e] = out[e];
}
