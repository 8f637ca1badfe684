/* verify_pass.c -- the `verify` pass: fj_verify_module as a pipeline step
 * (types, shapes, SSA, op arity and attributes; IR.md §4). It changes nothing;
 * every problem is recorded on the context. O(size of the module). */
#include "passes/pass.h"

fj_status fj_pass_verify(fj_pass_run *r)
{
	return fj_verify_module(r->m);
}
