/* fma_peak.c -- the FMA peak of this CPU, the baseline of bench/matmul/run:
 * a register-only loop of independent fused multiply-adds (no loads or
 * stores inside), on T threads at once, with 512-bit (AVX-512) or 256-bit
 * (AVX2) vectors.
 *
 *   fj-fma-peak avx512|avx2 THREADS   prints {"isa", "threads", "gflops"}
 *
 * 12 accumulators: more than the FMA latency (4 cycles) times the FMA ports
 * (2), so the loop is bound by throughput alone. Each thread runs ITERS
 * iterations (about 15 ms at 3.5 GHz); runs of all threads together repeat
 * for a quarter of a second of warm-up (a vCPU left idle while the caller
 * ran on one thread can take a while to run at full speed again: with a
 * single 15 ms warm-up run, two threads of AVX-512 once measured the speed
 * of one), then the result is the best of 4 more (flops of all threads /
 * wall time). */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ITERS = 1 << 22 };

typedef struct job {
	int wide;        /* 512-bit vectors, else 256 */
	double sink;     /* the accumulators' sum: keeps the loop alive */
} job;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define ACC12(T, SET, FMA, ADD, RED)                                                                   \
	T a0 = SET(1), a1 = SET(2), a2 = SET(3), a3 = SET(4), a4 = SET(5), a5 = SET(6), a6 = SET(7),      \
	  a7 = SET(8), a8 = SET(9), a9 = SET(10), a10 = SET(11), a11 = SET(12);                           \
	T m = SET(0.999999f), c = SET(1e-7f);                                                              \
	for (long i = 0; i < ITERS; i++) {                                                                 \
		a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                \
		a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                \
		a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);            \
	}                                                                                                  \
	T s = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(ADD(a8, a9), ADD(a10, a11))); \
	return RED(s);

__attribute__((target("avx512f"))) static float hsum_512(__m512 v) { return _mm512_reduce_add_ps(v); }
__attribute__((target("avx2"))) static float hsum_256(__m256 v)
{
	float f[8];
	_mm256_storeu_ps(f, v);
	return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

__attribute__((target("avx512f"))) static float loop512(void)
{
	ACC12(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, hsum_512)
}

__attribute__((target("avx2,fma"))) static float loop256(void)
{
	ACC12(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, hsum_256)
}

static void *run(void *arg)
{
	job *j = arg;
	j->sink += j->wide ? loop512() : loop256();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "avx512") && strcmp(argv[1], "avx2")) || atoi(argv[2]) < 1) {
		fprintf(stderr, "usage: fj-fma-peak avx512|avx2 THREADS\n");
		return 1;
	}
	int wide = strcmp(argv[1], "avx512") == 0, t = atoi(argv[2]);
	__builtin_cpu_init();
	if (wide ? !__builtin_cpu_supports("avx512f") : !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
		fprintf(stderr, "fj-fma-peak: this CPU has no %s\n", argv[1]);
		return 1;
	}
	pthread_t *th = calloc((size_t)t, sizeof *th);
	job *jobs = calloc((size_t)t, sizeof *jobs);
	if (!th || !jobs) {
		fprintf(stderr, "fj-fma-peak: out of memory\n");
		return 1;
	}
	double best = 0, sink = 0, t0 = now_s();
	int warm = 0;
	for (int rep = 0; rep < warm + 4; rep++) {
		double a = now_s();
		for (int k = 0; k < t; k++) {
			jobs[k].wide = wide;
			if (pthread_create(&th[k], NULL, run, &jobs[k]) != 0) {
				fprintf(stderr, "fj-fma-peak: cannot start a thread\n");
				return 1;
			}
		}
		for (int k = 0; k < t; k++)
			pthread_join(th[k], NULL);
		double s = now_s() - a;
		double flops = 2.0 * 12 * (wide ? 16 : 8) * (double)ITERS * t;
		if (a - t0 < 0.25) /* still warming up */
			warm++;
		else if (flops / s / 1e9 > best)
			best = flops / s / 1e9;
	}
	for (int k = 0; k < t; k++)
		sink += jobs[k].sink;
	printf("{\"isa\": \"%s\", \"threads\": %d, \"gflops\": %.2f, \"sink\": %g}\n", argv[1], t, best, sink);
	free(th);
	free(jobs);
	return 0;
}
