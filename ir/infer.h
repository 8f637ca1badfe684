/* infer.h -- helpers shared by the inference functions of ir/infer*.c. */
#ifndef FJ_INFER_H
#define FJ_INFER_H

#include "ir.h"

/* The attribute of spec index i (defaults filled in). */
static inline const fj_attr *fj_ic_attr(const fj_infer *ic, int i) { return &ic->attrs[i]; }
/* The attribute named `name` (defaults filled in); asserts it exists. */
const fj_attr *fj_ic_attr_named(const fj_infer *ic, const char *name);
/* Allocates a result type with rank dims (uninitialised sizes). */
bool fj_ic_out(fj_infer *ic, uint32_t i, fj_dtype dt, int rank);
/* Sets result i to a copy of t with dtype dt. */
bool fj_ic_out_like(fj_infer *ic, uint32_t i, const fj_type *t, fj_dtype dt);
/* Normalises dim d (negative counts from the end) for a tensor of rank
 * `rank`; PyTorch accepts dims -1 and 0 for rank 0. Records an error. */
fj_status fj_ic_dim(fj_infer *ic, int64_t d, int rank, int *out);
/* PyTorch's result_type over the operands whose bit is set in mask (weak
 * scalars and 0-d tensors rank lower than dimensioned tensors). */
fj_dtype fj_ic_result_type(const fj_infer *ic, uint32_t mask);
/* NumPy broadcasting of the operands in mask into *out (dtype left unset). */
fj_status fj_ic_broadcast(fj_infer *ic, uint32_t mask, fj_type *out);
/* The dtype float math on dt produces: floats stay, ints and bool -> f32. */
fj_dtype fj_ic_float_of(fj_dtype dt);

#endif
