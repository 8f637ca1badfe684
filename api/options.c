/* options.c -- the versioned structs of the public API (fusejit.h's ABI
 * policy): their *_init functions, and reading and writing them by the
 * caller's struct_size.
 *
 * A caller built against an older header passes a smaller struct: the
 * library reads the fields its struct_size covers and takes the defaults
 * for the others (fj_api_copy_in); a struct the library fills is written
 * only as far as the caller's struct_size goes (fj_api_copy_out). fj_tensor
 * is read the same way, with struct_size 0 meaning its first layout. */
#include <string.h>

#include "api/api.h"

bool fj_api_copy_in(void *dst, size_t size, const void *src, uint32_t src_size)
{
	if (src_size < sizeof(uint32_t))
		return false;
	memcpy(dst, src, src_size < size ? src_size : size);
	return true;
}

void fj_api_copy_out(void *dst, const void *src, size_t size)
{
	uint32_t have;
	memcpy(&have, dst, sizeof have);
	if (have <= sizeof have)
		return;
	memcpy((char *)dst + sizeof have, (const char *)src + sizeof have, (have < size ? have : size) - sizeof have);
}

void fj_tensor_init(fj_tensor *t)
{
	if (!t)
		return;
	memset(t, 0, sizeof *t);
	t->struct_size = sizeof *t;
}

void fj_run_options_init(fj_run_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof *o);
	o->struct_size = sizeof *o;
}

fj_status fj_api_run_options(fj_context *ctx, const fj_run_options *o, fj_run_options *out)
{
	fj_run_options_init(out);
	if (o && !fj_api_copy_in(out, sizeof *out, o, o->struct_size))
		return fj_api_arg_error(ctx, "fj_run_options", "options not initialised (fj_run_options_init)");
	out->struct_size = sizeof *out;
	return FJ_OK;
}

void fj_program_stats_init(fj_program_stats *s)
{
	if (!s)
		return;
	memset(s, 0, sizeof *s);
	s->struct_size = sizeof *s;
}

void fj_bench_options_init(fj_bench_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof *o);
	o->struct_size = sizeof *o;
}

void fj_bench_result_init(fj_bench_result *r)
{
	if (!r)
		return;
	memset(r, 0, sizeof *r);
	r->struct_size = sizeof *r;
}

void fj_reference_options_init(fj_reference_options *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof *o);
	o->struct_size = sizeof *o;
}
