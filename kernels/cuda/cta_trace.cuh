// cta_trace.cuh -- CTA_TRACE=1 (stop 29, lab/cta_trace.py): when each CTA of a one-tile-per-CTA grid ran.
// The kernel names the thread that writes each word (fa2_tc: thread 0): %globaltimer (ns, one clock for every SM) at
// the CTA's start, before the key steps Tc/4, Tc/2 and 3 Tc/4 of its sweep, and at its end, then its SM and its step
// count, into g_cta_trace, CTA c = blockIdx.x + gridDim.x * blockIdx.y at words [8c, 8c + 7). The K/V re-reads the
// L2 keeps depend on how far co-resident CTAs drift apart (lab/l2_sim.py walks the recorded schedule). Off (0):
// nothing here is compiled.
#pragma once
#ifndef CTA_TRACE
#define CTA_TRACE 0
#endif
#if CTA_TRACE
#define CTA_TRACE_MAX (1 << 17)  // CTAs recorded; lab/cta_trace.py holds the same number (a test ties them)
#define CTA_TRACE_WORDS 8        // t_start, t_quarter, t_half, t_three_quarters, t_end, smid, steps, unused
__device__ unsigned long long g_cta_trace[CTA_TRACE_MAX * CTA_TRACE_WORDS];
__device__ __forceinline__ void trace_word(bool me, int w, unsigned long long v) {
    const unsigned cta = blockIdx.x + gridDim.x * blockIdx.y;
    if (me && cta < CTA_TRACE_MAX) g_cta_trace[(unsigned long long)cta * CTA_TRACE_WORDS + w] = v;
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned trace_smid() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
// at the top of key step t of T: the quarter marks (several at once when T < 4)
__device__ __forceinline__ void trace_step(bool me, int t, int T) {
    if (t == T / 4) trace_word(me, 1, global_ns());
    if (t == T / 2) trace_word(me, 2, global_ns());
    if (t == 3 * T / 4) trace_word(me, 3, global_ns());
}
// the CTA's end: its time, SM and step count
__device__ __forceinline__ void trace_end(bool me, int T) {
    trace_word(me, 4, global_ns());
    trace_word(me, 5, trace_smid());
    trace_word(me, 6, (unsigned long long)T);
}
#define TRACE_START(me) trace_word((me), 0, global_ns())
#define TRACE_STEP(me, t, T) trace_step((me), (t), (T))
#define TRACE_END(me, T) trace_end((me), (T))
#else
#define TRACE_START(me) ((void)0)
#define TRACE_STEP(me, t, T) ((void)0)
#define TRACE_END(me, T) ((void)0)
#endif
