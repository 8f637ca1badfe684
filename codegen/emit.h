/* emit.h -- the per-node kernel emitters of the reference executor, by family.
 * codegen/kernel.c maps each op to one of them (a table keyed by op); each
 * dispatches on k->node->op for the ops of its family. */
#ifndef FJ_EMIT_H
#define FJ_EMIT_H

#include "cg.h"

/* codegen/emit_pointwise.c: every pointwise aten/prims op (through the scalar
 * lowering table), where, clamp, masked_fill, _to_copy, convert_element_type,
 * the pointwise *_backward ops. */
fj_status fj_cg_emit_pointwise(fj_cg *cg, fj_cg_kernel *k);
/* codegen/emit_layout.c: view/reshape/permute/transpose/t/expand/unsqueeze/
 * squeeze/slice/cat/flip/clone/detach/alias/_reshape_alias/_unsafe_view and the
 * prims layout ops (broadcast_in_dim, reshape, transpose, squeeze, slice, cat,
 * pad, rev); sources: full, *_like, new_*, arange, prims.full, prims.iota. */
fj_status fj_cg_emit_layout(fj_cg *cg, fj_cg_kernel *k);
/* codegen/emit_reduce.c: sum mean amax amin prod logsumexp var var_mean argmax
 * argmin (aten and prims); cumsum (aten and prims). f32 accumulates in f64. */
fj_status fj_cg_emit_reduction(fj_cg *cg, fj_cg_kernel *k);
fj_status fj_cg_emit_cumsum(fj_cg *cg, fj_cg_kernel *k);
/* codegen/emit_norm.c: softmax/_softmax/log_softmax/_log_softmax and their
 * backward data ops; native_layer_norm, layer_norm, rms_norm,
 * native_layer_norm_backward; native_batch_norm,
 * _native_batch_norm_legit_functional, native_batch_norm_backward;
 * nll_loss_forward, nll_loss_backward. */
fj_status fj_cg_emit_norm(fj_cg *cg, fj_cg_kernel *k);
/* codegen/emit_matmul.c: mm bmm addmm matmul linear prims.matmul (blocked,
 * vectorisable; no BLAS). */
fj_status fj_cg_emit_matmul(fj_cg *cg, fj_cg_kernel *k);
/* codegen/emit_index.c: embedding, gather, index_select, scatter_add,
 * index_add, embedding_dense_backward, prims.take/gather/scatter_add/index_add.
 * Out-of-range indices (negative ones too) set FJ_KERR_INDEX, never access
 * memory out of bounds. */
fj_status fj_cg_emit_index(fj_cg *cg, fj_cg_kernel *k);
/* codegen/emit_random.c: native_dropout, prims.rand (Philox-4x32-10). */
fj_status fj_cg_emit_random(fj_cg *cg, fj_cg_kernel *k);

#endif
