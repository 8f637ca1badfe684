/* reference.h -- copies of a graph for numerical references (fusejit-run
 * --check=f64, IR.md §5): the same computation with every floating-point
 * value in f64, and a copy whose every rounding is simulated by a random
 * relative perturbation, so that a checker can measure how sensitive each
 * output is to the roundings it was computed through.
 *
 * Both add a new graph to the graph's module (sharing its symbols, so sizes
 * bind as they do for the original) and leave the original untouched. */
#ifndef FJ_PASS_REFERENCE_H
#define FJ_PASS_REFERENCE_H

#include "ir.h"

/* Adds @name to g's module: g with f64 for every floating-point parameter,
 * node result and float dtype attribute (_to_copy, convert_element_type,
 * full, sum's dtype ...); half_to_float is dropped (it would refuse an f64
 * input). Casts to integer or bool dtypes stay; prims.rand keeps its dtype
 * (the number of random bits depends on it). A float result an op still
 * gives in a narrower dtype (a float from integer operands alone, f32 by
 * PyTorch's default, or prims.rand) is converted to f64 right after it.
 * Parameters keep their names, order and annotations; results are in g's
 * order. Graphs holding fusion.kernel nodes are refused. */
fj_status fj_pass_clone_f64(const fj_graph *g, const char *name, fj_graph **out);

/* Adds @name to g's module: a copy of g (computing in any dtype) in which
 * every floating-point node result v but those of layout ops is replaced by
 * v * (1 + d), d uniform in [-delta, delta) drawn with prims.rand under
 * `seed` (a different stream for each value): Monte Carlo arithmetic, the
 * roundings of a run simulated at a chosen size. Parameters, names and
 * results are g's. */
fj_status fj_pass_clone_perturbed(const fj_graph *g, const char *name, double delta, uint64_t seed,
                                  fj_graph **out);

/* A graph name not used in m: base, else base_<k> for the first free k;
 * written into buf (size bytes). */
void fj_pass_fresh_graph_name(const fj_module *m, const char *base, char *buf, size_t size);

#endif
