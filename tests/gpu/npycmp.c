/* npycmp.c -- fj-npycmp OUT.npy REF.npy: IR.md §5's relative L2 error of OUT
 * against REF (same dtype and shape), against the dtype's tolerance (f32
 * 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12, integers and bools exact). Prints
 * one line; exit 0 within tolerance, 1 otherwise, 2 on a usage or read
 * error. Part of the GPU machine kit (scripts/build-gpu.sh): no Python there. */
#include <stdio.h>

#include "runtime/npy.h"
#include "runtime/tensor.h"

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fj-npycmp OUT.npy REF.npy\n");
		return 2;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_rt_tensor a = {0}, b = {0};
	int rc = 2;
	if (fj_npy_read(ctx, argv[1], &a) != FJ_OK || fj_npy_read(ctx, argv[2], &b) != FJ_OK) {
		fprintf(stderr, "fj-npycmp: %s\n", fj_context_error(ctx));
		goto done;
	}
	if (!fj_rt_tensor_same_type(&a, &b)) {
		char ta[128], tb[128];
		fj_rt_tensor_type_str(&a, ta, sizeof ta);
		fj_rt_tensor_type_str(&b, tb, sizeof tb);
		printf("MISMATCH %s: %s vs %s\n", argv[1], ta, tb);
		rc = 1;
		goto done;
	}
	bool placed = true;
	double err = fj_rt_rel_l2(&a, &b, &placed);
	double tol = fj_rt_tolerance(a.dtype);
	rc = placed && err <= tol ? 0 : 1;
	printf("%s %s: rel_err %.3g (tolerance %.0e)%s\n", rc ? "FAIL" : "ok", argv[1], err, tol,
	       placed ? "" : ", NaN/inf placement differs");
done:
	fj_rt_tensor_free(&a);
	fj_rt_tensor_free(&b);
	fj_context_destroy(ctx);
	return rc;
}
