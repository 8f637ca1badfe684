/* header.c -- compiled as C99 (-pedantic) and as C++ by CTest: fusejit.h
 * must stand alone in both. */
#include <fusejit/fusejit.h>

int fj_header_test(void);
int fj_header_test(void)
{
	fj_compile_options o;
	fj_tensor t;
	fj_attribute a;
	fj_value_info vi;
	fj_cache_stats cs;
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_HOST;
	t.dtype = FJ_TYPE_F32;
	a.kind = FJ_ATTR_SHAPE;
	vi.rank = 0;
	cs.kernels_compiled = 0;
	(void)a;
	(void)vi;
	(void)cs;
	return (int)t.dtype + FUSEJIT_VERSION_NUMBER + (fj_version() != 0) + (int)sizeof(fj_status);
}
