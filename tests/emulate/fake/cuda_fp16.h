// Host stand-in for CUDA's header, so the CPU emulators (tests/emulate) run fp16 storage: g++'s _Float16 rounds
// float -> half to nearest even, as __float2half_rn does.
#pragma once
struct __half { _Float16 v; };
inline float __half2float(__half h) { return static_cast<float>(h.v); }
inline __half __float2half_rn(float f) { return {static_cast<_Float16>(f)}; }
