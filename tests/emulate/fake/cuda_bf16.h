// Host stand-in for CUDA's header: the emulated kernels run at STORAGE=float only, so these are declared, never defined.
#pragma once
struct __nv_bfloat16 { unsigned short x; };
float __bfloat162float(__nv_bfloat16);
__nv_bfloat16 __float2bfloat16_rn(float);
