/* npycmp.c -- fj-npycmp OUT.npy REF.npy: IR.md §5's relative L2 error of OUT
 * against REF (same dtype and shape), against the dtype's tolerance (f32
 * 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12, integers and bools exact). Prints
 * one line; exit 0 within tolerance, 1 otherwise, 2 on a usage or read
 * error. Part of the GPU machine kit (scripts/build-gpu.sh): no Python there. */
#include <stdio.h>
#include <string.h>

#include "tools/npy.h"

static void type_str(const fj_tensor *t, char *buf, size_t size)
{
	size_t k = (size_t)snprintf(buf, size, "%s[", fj_scalar_type_name(t->dtype));
	for (int i = 0; i < t->rank && k < size; i++)
		k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? "," : "", (long long)t->sizes[i]);
	if (k < size)
		snprintf(buf + k, size - k, "]");
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fj-npycmp OUT.npy REF.npy\n");
		return 2;
	}
	fj_tensor a = {0}, b = {0};
	npy_error e;
	int rc = 2;
	if (npy_read(&e, argv[1], &a) != FJ_OK || npy_read(&e, argv[2], &b) != FJ_OK) {
		fprintf(stderr, "fj-npycmp: error: %s\n", e.msg);
		goto done;
	}
	if (a.dtype != b.dtype || a.rank != b.rank || memcmp(a.sizes, b.sizes, (size_t)a.rank * sizeof *a.sizes)) {
		char ta[128], tb[128];
		type_str(&a, ta, sizeof ta);
		type_str(&b, tb, sizeof tb);
		printf("MISMATCH %s: %s vs %s\n", argv[1], ta, tb);
		rc = 1;
		goto done;
	}
	int placed = 1;
	double err = fj_check_error(FJ_CHECK_ATEN, &a, &b, 0, &placed);
	double tol = fj_check_tolerance(FJ_CHECK_ATEN, a.dtype);
	rc = placed && err <= tol ? 0 : 1;
	printf("%s %s: rel_err %.3g (tolerance %.0e)%s\n", rc ? "FAIL" : "ok", argv[1], err, tol,
	       placed ? "" : ", NaN/inf placement differs");
done:
	npy_free(&a);
	npy_free(&b);
	return rc;
}
