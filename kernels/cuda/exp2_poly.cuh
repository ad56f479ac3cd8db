// exp2_poly.cuh -- 2^x on the FMA pipe instead of the MUFU (FlashAttention-4's trick; issue 14 item 1).
//
// Why: at d = 64 a step of FA2 Alg. 1 line 9 costs one ex2 per score, and the MUFU does 16 of those per clock
// per SM against 128 FMAs: the exponentials of a 64 x 128 S tile take as long as its two wgmma products
// (lab/NOTES-tc.md, fa2_wgmma v2). Evaluating a share of them with FMAs balances the two pipes.
//
// ex2_poly(x), x <= 15 (P = 2^(s*scale_log2 - m) <= 2^RESCALE_THRESHOLD):
//   x = max(x, -127)                       -inf (masked scores) and underflow land on -127
//   t = x + 1.5*2^23, rounded down         t's low mantissa bits hold n = floor(x) (two's complement)
//   f = x - (t - 1.5*2^23)                 in [0, 1), exact
//   p = 1 + f*(c1 + f*(c2 + ...))          minimax relative error for 2^f on [0, 1], c0 = 1 exactly
//   2^x = bits(p) + (bits(t) << 23)        adds n to p's exponent; (1.5*2^23) << 23 wraps to 0 mod 2^32
// c0 = 1 makes integers exact: 2^0 = 1 (the row max gets P = 1) and x = -127 gives bits 0x3F800000 -
// 127 << 23 = 0, so -inf gives exactly 0. Between -127 and -126 the result is a denormal under 2^-126.
// NaN inputs give 0 (fmaxf), where ex2.approx gives NaN; scores are NaN only for NaN inputs.
// Relative error of the fp32 coefficients below (kernels/exp2_poly.py recomputes it, tests/test_exp2_poly.py
// checks it against numpy's exp2): degree 3 8.6e-5, 4 2.9e-6, 5 8.3e-8, against the rounding of P to fp16
// (2^-11 = 4.9e-4) and bf16 (2^-8 = 3.9e-3). Default: degree 4 for fp16 (170x under), 3 for bf16 (45x).
// Cost: FMNMX, 3 FADD (one round-down), DEG FFMA, one shift-add: 8-9 instructions, no MUFU.
#pragma once

#ifndef EXP2_POLY_DEG
#define EXP2_POLY_DEG (IS_BF16 ? 3 : 4)
#endif
static_assert(EXP2_POLY_DEG >= 3 && EXP2_POLY_DEG <= 5, "EXP2_POLY_DEG: 3, 4 or 5");

// EXP2_POLY_C<deg>: c1..c<deg> (c0 = 1), fp32, minimax relative error on [0, 1] (Lawson's algorithm)
#define EXP2_POLY_C3 0.6951168f, 0.22764485f, 0.077067174f
#define EXP2_POLY_C4 0.69304484f, 0.24128021f, 0.052242447f, 0.013426701f
#define EXP2_POLY_C5 0.6931513f, 0.24016444f, 0.055799916f, 0.009017027f, 0.0018671317f

__device__ __forceinline__ float ex2_poly(float x) {
    x = fmaxf(x, -127.f);
    const float t = __fadd_rd(x, 12582912.f);
    const float f = x - (t - 12582912.f);
#if EXP2_POLY_DEG == 3
    const float c[3] = {EXP2_POLY_C3};
    float p = fmaf(fmaf(c[2], f, c[1]), f, c[0]);
#elif EXP2_POLY_DEG == 4
    const float c[4] = {EXP2_POLY_C4};
    float p = fmaf(fmaf(fmaf(c[3], f, c[2]), f, c[1]), f, c[0]);
#else
    const float c[5] = {EXP2_POLY_C5};
    float p = fmaf(fmaf(fmaf(fmaf(c[4], f, c[3]), f, c[2]), f, c[1]), f, c[0]);
#endif
    p = fmaf(p, f, 1.f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}
