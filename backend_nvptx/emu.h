/* emu.h -- a host emulator of the GPU kernels, for tests on machines with no
 * GPU: the same region templates (region_gpu.c) compiled for the host CPU
 * with emulated target hooks, run with one OS thread per GPU thread.
 *
 * Blocks run one after another; the threads of a block run at once
 * (pthreads), so barriers (pthread barriers), warp shuffles (an exchange
 * through a per-warp slot array between two warp barriers), tensor-core mma
 * (the lanes' fragments exchanged the same way, the product computed in
 * software per the PTX fragment layout) and shared memory (a module global,
 * shared by the block's threads) behave as on a GPU. Grid and block sizes
 * are scaled down (grid <= 2, block <= 64; split reductions keep up to 5
 * blocks, so several chunks per tile; matmul and the transpose tiles keep
 * their blocks, with grid <= 4): every template is a grid-stride loop. Math
 * calls the host's libm, not libdevice. Device memory is host memory; device
 * pointers are host addresses. */
#ifndef FJ_NVPTX_EMU_H
#define FJ_NVPTX_EMU_H

#include "backend_nvptx/device.h"
#include "backend_nvptx/fjcuda_hook.h"

typedef struct fj_nvptx_emu fj_nvptx_emu;

fj_status fj_nvptx_emu_create(fj_context *ctx, fj_nvptx_emu **out);
void fj_nvptx_emu_destroy(fj_nvptx_emu *e);
/* The emulator as a GPU device (device.h): no events (no --bench), no dtod
 * (copies are staged through the host), synchronous (a caller's stream is
 * accepted and changes nothing); enter/leave let one caller at a
 * time run (the kernels' shared memory is one global per module). e must
 * outlive the device's users; fj_nvptx_device_open's copy frees e on close. */
fj_nvptx_device fj_nvptx_emu_device(fj_nvptx_emu *e);

/* For the stand-in CUDA driver of tests (fjcuda_hook.h), which runs a
 * launch's blocks in a hostile order at its real geometry:
 * fj_nvptx_emu_prepare compiles region `node` of g for the host (its
 * variants in the order of fj_nvptx_emit_region); fj_nvptx_emu_run runs
 * variant `variant` of a prepared kernel, its blocks in order_mode
 * (FJCUDA_ORDER_*, seed for a shuffle), at the real grid and block when the
 * launch has at most FJ_NVPTX_EMU_REAL_THREADS threads in all (and at most
 * 1024 per block), else scaled down as the emulator device's launches are.
 * fj_nvptx_emu_hook_run is fj_nvptx_emu_run as an fjcuda_run_fn, ud being
 * the prepared kernel (0 on success). One run at a time per emulator. */
#define FJ_NVPTX_EMU_REAL_THREADS 16384u
fj_status fj_nvptx_emu_prepare(fj_nvptx_emu *e, const fj_graph *g, uint32_t node, void **kern, int *nvariants);
fj_status fj_nvptx_emu_run(fj_nvptx_emu *e, void *kern, int variant, unsigned grid, unsigned block,
                           const uint64_t *args, int order_mode, unsigned seed);
int fj_nvptx_emu_hook_run(void *ud, int variant, unsigned grid, unsigned block, unsigned shared,
                          const uint64_t *args, unsigned nargs, int order_mode, unsigned seed);

#endif
