/* infer.h -- helpers shared by the inference functions of ir/infer*.c. */
#ifndef FJ_INFER_H
#define FJ_INFER_H

#include "ir.h"

/* The attribute of spec index i (defaults filled in). */
static inline const fj_attr *fj_ic_attr(const fj_infer *ic, int i) { return &ic->attrs[i]; }
/* The attribute named `name` (defaults filled in); asserts it exists. */
const fj_attr *fj_ic_attr_named(const fj_infer *ic, const char *name);
/* The attribute named `name`, or NULL when the op declares no such attribute. */
const fj_attr *fj_ic_attr_opt(const fj_infer *ic, const char *name);
/* Operand i's type, or NULL when it is `none` or left out. */
static inline const fj_type *fj_ic_in(const fj_infer *ic, uint32_t i) { return i < ic->nin ? ic->in[i] : NULL; }
/* A size held by an attribute (an int, or a symbolic FJ_AK_DIM). */
static inline fj_dim fj_ic_size(const fj_attr *a) { return a->kind == FJ_AK_DIM ? a->u.dim : fj_attr_as_int(a); }
/* Allocates a result type with rank dims (uninitialised sizes). */
bool fj_ic_out(fj_infer *ic, uint32_t i, fj_dtype dt, int rank);
/* Sets result i to a copy of t with dtype dt. */
bool fj_ic_out_like(fj_infer *ic, uint32_t i, const fj_type *t, fj_dtype dt);
/* Sets result i to dtype dt with the given sizes; FJ_ERR_NOMEM on failure. */
fj_status fj_ic_out_dims(fj_infer *ic, uint32_t i, fj_dtype dt, const fj_dim *dims, int rank);
/* Normalises dim d (negative counts from the end) for a tensor of rank
 * `rank`; PyTorch accepts dims -1 and 0 for rank 0. Records an error. */
fj_status fj_ic_dim(fj_infer *ic, int64_t d, int rank, int *out);
/* Normalises a list of dims (ints) into a bit mask, rejecting repeats. An
 * absent, `none` or empty list gives `all_if_empty ? every dim : none`. */
fj_status fj_ic_dim_mask(fj_infer *ic, const fj_attr *dims, int rank, bool all_if_empty, uint32_t *mask);

/* PyTorch's result_type (c10's ResultTypeState): dimensioned tensors rank
 * above 0-d tensors, which rank above weak scalars, within a category
 * (bool < integer < float). */
typedef struct fj_rtstate {
	fj_dtype dim, zero, wrapped; /* FJ_DT_COUNT: none yet */
} fj_rtstate;
void fj_rt_init(fj_rtstate *s);
void fj_rt_add(fj_rtstate *s, const fj_type *t);
/* A scalar attribute taking part as a weak scalar (clamp's min/max). */
void fj_rt_add_attr(fj_rtstate *s, const fj_attr *a);
fj_dtype fj_rt_result(const fj_rtstate *s);
/* result_type over the operands whose bit is set in mask. */
fj_dtype fj_ic_result_type(const fj_infer *ic, uint32_t mask);
/* NumPy broadcasting of the operands in mask into *out (dtype left unset). */
fj_status fj_ic_broadcast(fj_infer *ic, uint32_t mask, fj_type *out);
/* Broadcasts b (rank rb) into acc (rank *racc, at most FJ_MAX_RANK). */
fj_status fj_ic_broadcast_dims(fj_infer *ic, fj_dim *acc, int *racc, const fj_dim *b, int rb);
/* The dtype float math on dt produces: floats stay, ints and bool -> f32. */
fj_dtype fj_ic_float_of(fj_dtype dt);

/* Checks, each recording an error that names `what`. */
fj_status fj_ic_need_float(fj_infer *ic, const fj_type *t, const char *what);
fj_status fj_ic_need_index(fj_infer *ic, const fj_type *t, const char *what);
/* Writes "[2,N*4]" / "f32[2,N*4]" into buf. */
const char *fj_ic_shape_str(const fj_infer *ic, const fj_dim *dims, int rank, char *buf, size_t size);
const char *fj_ic_type_str(const fj_infer *ic, const fj_type *t, char *buf, size_t size);
const char *fj_ic_dim_str(const fj_infer *ic, fj_dim d, char *buf, size_t size);
/* Element count of a shape (symbolic products allowed); records an error on overflow. */
fj_status fj_ic_numel(fj_infer *ic, const fj_dim *dims, int rank, fj_dim *out);

#endif
