// Host stand-in for CUDA's header: the emulated kernels run at STORAGE=float only, so these are declared, never defined.
#pragma once
struct __half { unsigned short x; };
float __half2float(__half);
__half __float2half_rn(float);
