/* splitmix.h -- the test programs' random numbers: splitmix64 (Steele, Lea
 * and Flood, 2014) on a state the caller keeps. */
#ifndef FJ_TEST_SPLITMIX_H
#define FJ_TEST_SPLITMIX_H

#include <stdint.h>

static inline uint64_t fj_test_splitmix(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif
