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

typedef struct fj_nvptx_emu fj_nvptx_emu;

fj_status fj_nvptx_emu_create(fj_context *ctx, fj_nvptx_emu **out);
void fj_nvptx_emu_destroy(fj_nvptx_emu *e);
/* The emulator as a GPU device (device.h): no events (no --bench), no dtod
 * (copies are staged through the host), synchronous (a caller's stream is
 * accepted and changes nothing); enter/leave let one caller at a
 * time run (the kernels' shared memory is one global per module). e must
 * outlive the device's users; fj_nvptx_device_open's copy frees e on close. */
fj_nvptx_device fj_nvptx_emu_device(fj_nvptx_emu *e);

#endif
