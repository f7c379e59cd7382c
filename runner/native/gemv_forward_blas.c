/* GEMM -> GEMV forwarding for cblas_sgemm, preloaded ahead of OpenBLAS for measurements.
 *
 * OpenBLAS 0.3.21 (Debian bookworm) packs both operands on every sgemm call, even when
 * the left operand has a single row: for a decode pass, whose matmuls have one to a
 * few rows, the packing costs more than the arithmetic (a 128 x 4096 product with one
 * row: 168 us as sgemm, 35 us as sgemv, measured here). Newer OpenBLAS releases forward
 * such calls to gemv themselves; this file does the same for older ones. A row-major
 * product with at most GEMV_MAX_ROWS rows (4, measured best for the engine's decode
 * passes against 1 and 8) becomes one cblas_sgemv per row; anything else goes to the
 * next cblas_sgemm in the link order, unchanged. Results differ from sgemm only in
 * summation order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
enum { GEMV_MAX_ROWS = 4 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);

void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                 int);

static sgemm_fn next_sgemm;
static sgemv_fn next_sgemv;
static long forwarded; /* calls served by gemv: read by the tests through ctypes */

long gemv_forward_calls(void) { return forwarded; }

/* The first other loaded object exporting both functions: RTLD_NEXT finds a BLAS that
   is preloaded after this one, but not one dlopen'ed with RTLD_LOCAL (MLX's own BLAS,
   loaded by the Python extension), which this search over loaded objects does. */
static int find_blas(struct dl_phdr_info *info, size_t size, void *self) {
  (void)size;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0') return 0;
  void *handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == NULL) return 0;
  sgemm_fn gemm = (sgemm_fn)dlsym(handle, "cblas_sgemm");
  sgemv_fn gemv = (sgemv_fn)dlsym(handle, "cblas_sgemv");
  dlclose(handle);
  if (gemm == NULL || gemv == NULL || (void *)gemm == self) return 0;
  next_sgemm = gemm;
  next_sgemv = gemv;
  return 1;
}

static void resolve(void) {
  next_sgemm = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
  next_sgemv = (sgemv_fn)dlsym(RTLD_NEXT, "cblas_sgemv");
  if (next_sgemm == NULL || next_sgemv == NULL) dl_iterate_phdr(find_blas, (void *)cblas_sgemm);
  if (next_sgemm == NULL) {
    fprintf(stderr, "gemv_forward_blas: no BLAS with cblas_sgemm is loaded behind this library\n");
    abort();
  }
}

void cblas_sgemm(int order, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  if (next_sgemm == NULL) resolve();
  if (order != ROW_MAJOR || next_sgemv == NULL || M < 1 || M > GEMV_MAX_ROWS || N < 1 || K < 1) {
    next_sgemm(order, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  for (int i = 0; i < M; i++) {
    /* Row i of op(A): a row of A, or a column of A when A is transposed. */
    const float *a = trans_a == NO_TRANS ? A + (size_t)i * lda : A + i;
    int inc_a = trans_a == NO_TRANS ? 1 : lda;
    float *c = C + (size_t)i * ldc;
    if (trans_b == NO_TRANS) /* B is K x N: c = B^T a */
      next_sgemv(ROW_MAJOR, TRANS, K, N, alpha, B, ldb, a, inc_a, beta, c, 1);
    else /* B is stored N x K: c = B a */
      next_sgemv(ROW_MAJOR, NO_TRANS, N, K, alpha, B, ldb, a, inc_a, beta, c, 1);
  }
  forwarded++;
}
