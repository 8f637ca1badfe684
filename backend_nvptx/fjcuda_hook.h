/* fjcuda_hook.h -- the test-only hook between fusejit and the stand-in CUDA
 * driver of tests/driver (libfjcuda.so, loaded through FUSEJIT_LIBCUDA).
 *
 * A PTX interpreter is out of scope, so the stand-in runs a kernel through a
 * function that its user binds to each entry of a loaded module. Only the
 * stand-in exports FJCUDA_BIND_SYMBOL; a real driver never has it, and then
 * fusejit binds nothing (device.c looks the symbol up with dlsym after a
 * module loads, and binds each variant to the host emulator, emu.h).
 *
 *   int fjcuda_bind_entry(void *cumodule, const char *entry, fjcuda_run_fn run, void *ud, int variant)
 *
 * returns 0, or a CUresult: CUDA_ERROR_NOT_FOUND (500) for an entry the
 * module lacks, CUDA_ERROR_INVALID_HANDLE (400) for an unknown module. When
 * the stand-in executes a launch of that entry it calls run(ud, variant,
 * grid, block, dynamic shared bytes, the launch's parameters, each widened
 * to 64 bits, their count, the block order, its seed); a non-zero return is
 * the launch failing (CUDA_ERROR_LAUNCH_FAILED, 719, at the next
 * synchronisation). grid and block are the products of their three
 * dimensions. */
#ifndef FJ_NVPTX_FJCUDA_HOOK_H
#define FJ_NVPTX_FJCUDA_HOOK_H

#include <stdint.h>

/* The order in which the blocks of a launch run (the stand-in's FJCUDA_ORDER). */
enum { FJCUDA_ORDER_FORWARD = 0, FJCUDA_ORDER_REVERSE = 1, FJCUDA_ORDER_SHUFFLE = 2 };

typedef int (*fjcuda_run_fn)(void *ud, int variant, unsigned grid, unsigned block, unsigned shared,
                             const uint64_t *args, unsigned nargs, int order_mode, unsigned seed);
typedef int (*fjcuda_bind_fn)(void *cumodule, const char *entry, fjcuda_run_fn run, void *ud, int variant);

#define FJCUDA_BIND_SYMBOL "fjcuda_bind_entry"

#endif
