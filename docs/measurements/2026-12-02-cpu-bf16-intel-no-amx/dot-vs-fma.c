/* The issue rate of vdpbf16ps against vfmadd231ps on zmm registers: twelve
 * independent accumulators each, so that neither waits on a latency.
 * Build: gcc -O2 dot-vs-fma.c -o dot-vs-fma (needs an assembler that knows
 * AVX512_BF16; runs only on a CPU that has it). */
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define TWELVE(OP)                                                                                                     \
    OP " %%zmm30,%%zmm31,%%zmm0\n" OP " %%zmm30,%%zmm31,%%zmm1\n" OP " %%zmm30,%%zmm31,%%zmm2\n" OP                    \
       " %%zmm30,%%zmm31,%%zmm3\n" OP " %%zmm30,%%zmm31,%%zmm4\n" OP " %%zmm30,%%zmm31,%%zmm5\n" OP                    \
       " %%zmm30,%%zmm31,%%zmm6\n" OP " %%zmm30,%%zmm31,%%zmm7\n" OP " %%zmm30,%%zmm31,%%zmm8\n" OP                    \
       " %%zmm30,%%zmm31,%%zmm9\n" OP " %%zmm30,%%zmm31,%%zmm10\n" OP " %%zmm30,%%zmm31,%%zmm11\n"
#define CLOBBERS "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"

int main(void) {
    const long n = 100000000;
    double t = now();
    __asm__ volatile("mov %0, %%rcx\n1:\n" TWELVE("vfmadd231ps") "dec %%rcx\njnz 1b\n" ::"r"(n) : CLOBBERS);
    const double fma = now() - t;
    t = now();
    __asm__ volatile("mov %0, %%rcx\n1:\n" TWELVE("vdpbf16ps") "dec %%rcx\njnz 1b\n" ::"r"(n) : CLOBBERS);
    const double dot = now() - t;
    printf("vfmadd231ps zmm: %.2f G/s = %.1f GFLOP/s; vdpbf16ps zmm: %.2f G/s = %.1f GFLOP/s\n", n * 12 / fma / 1e9,
           n * 12 * 32 / fma / 1e9, n * 12 / dot / 1e9, n * 12 * 64 / dot / 1e9);
    return 0;
}
