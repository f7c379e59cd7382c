/* Small-row sgemm for measurements, preloaded ahead of OpenBLAS (runner/blas.py).
 *
 * OpenBLAS 0.3.21 (Debian bookworm) packs both operands on every sgemm call, even when
 * the left operand has one row: for a decode pass, whose matmuls have one to a few rows
 * (one per token), the packing costs more than the arithmetic. Its single-thread sgemm
 * also stays well below the kernels below at the shapes a pass computes (K or N the
 * hidden size), up to a few hundred rows.
 *
 * Row-major products are served here as follows, the rest go unchanged to the next
 * cblas_sgemm in the link order:
 *  - A not transposed, alpha 1, beta 0, at most MAX_ROWS rows, on an AVX2+FMA CPU: the
 *    kernels below, which read each weight once for up to four rows, called on blocks of
 *    at most four rows (a verify pass of k + 1 tokens, a prefill chunk);
 *  - otherwise at most SGEMV_ROWS rows: one cblas_sgemv per row;
 *  - otherwise the next sgemm (training's large and transposed products).
 * Results differ from sgemm only in summation order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
enum { MAX_ROWS = 256, SGEMV_ROWS = 4, KERNEL_ROWS = 4 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*kernel_fn)(int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc);

void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                 int);

static sgemm_fn next_sgemm;
static sgemv_fn next_sgemv;
static int has_simd;
static long served; /* calls served here rather than by the next sgemm: read by the tests */

long small_sgemm_calls(void) { return served; }

#if defined(__x86_64__)
/* C = A B, B stored K x N. C's rows accumulate in C (cache resident) while B streams by
   rows, four rows of B per sweep, so each vector of C is loaded and stored once per
   four k and each element of B is read once for all M rows. */
#define NN_KERNEL(NAME, M)                                                                           \
  __attribute__((target("avx2,fma"))) static void NAME(int N, int K, const float *A, int lda,        \
                                                       const float *B, int ldb, float *C, int ldc) { \
    const int nv = N & ~7;                                                                           \
    for (int m = 0; m < M; m++)                                                                      \
      for (int n = 0; n < N; n++) C[(size_t)m * ldc + n] = 0.0f;                                     \
    int k = 0;                                                                                       \
    for (; k + 4 <= K; k += 4) {                                                                     \
      const float *b0 = B + (size_t)k * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;         \
      __m256 a[M][4];                                                                                \
      for (int m = 0; m < M; m++)                                                                    \
        for (int j = 0; j < 4; j++) a[m][j] = _mm256_broadcast_ss(A + (size_t)m * lda + k + j);      \
      for (int n = 0; n < nv; n += 8) {                                                              \
        const __m256 x0 = _mm256_loadu_ps(b0 + n), x1 = _mm256_loadu_ps(b1 + n);                     \
        const __m256 x2 = _mm256_loadu_ps(b2 + n), x3 = _mm256_loadu_ps(b3 + n);                     \
        for (int m = 0; m < M; m++) {                                                                \
          float *c = C + (size_t)m * ldc + n;                                                        \
          __m256 s = _mm256_fmadd_ps(a[m][0], x0, _mm256_loadu_ps(c));                               \
          s = _mm256_fmadd_ps(a[m][1], x1, s);                                                       \
          s = _mm256_fmadd_ps(a[m][2], x2, s);                                                       \
          _mm256_storeu_ps(c, _mm256_fmadd_ps(a[m][3], x3, s));                                      \
        }                                                                                            \
      }                                                                                              \
      for (int n = nv; n < N; n++)                                                                   \
        for (int m = 0; m < M; m++) {                                                                \
          const float *am = A + (size_t)m * lda + k;                                                 \
          C[(size_t)m * ldc + n] += am[0] * b0[n] + am[1] * b1[n] + am[2] * b2[n] + am[3] * b3[n];   \
        }                                                                                            \
    }                                                                                                \
    for (; k < K; k++)                                                                               \
      for (int m = 0; m < M; m++)                                                                    \
        for (int n = 0; n < N; n++) C[(size_t)m * ldc + n] += A[(size_t)m * lda + k] * B[(size_t)k * ldb + n]; \
  }

__attribute__((target("avx2,fma"))) static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* C = A B^T, B stored N x K: four rows of B at a time, dot products along K against
   every row of A, so each element of B is read once for all M rows. */
#define NT_KERNEL(NAME, M)                                                                           \
  __attribute__((target("avx2,fma"))) static void NAME(int N, int K, const float *A, int lda,        \
                                                       const float *B, int ldb, float *C, int ldc) { \
    const int kv = K & ~7;                                                                           \
    int n = 0;                                                                                       \
    for (; n + 4 <= N; n += 4) {                                                                     \
      const float *b0 = B + (size_t)n * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;         \
      __m256 acc[M][4];                                                                              \
      for (int m = 0; m < M; m++)                                                                    \
        for (int j = 0; j < 4; j++) acc[m][j] = _mm256_setzero_ps();                                 \
      for (int k = 0; k < kv; k += 8) {                                                              \
        const __m256 x0 = _mm256_loadu_ps(b0 + k), x1 = _mm256_loadu_ps(b1 + k);                     \
        const __m256 x2 = _mm256_loadu_ps(b2 + k), x3 = _mm256_loadu_ps(b3 + k);                     \
        for (int m = 0; m < M; m++) {                                                                \
          const __m256 a = _mm256_loadu_ps(A + (size_t)m * lda + k);                                 \
          acc[m][0] = _mm256_fmadd_ps(a, x0, acc[m][0]);                                             \
          acc[m][1] = _mm256_fmadd_ps(a, x1, acc[m][1]);                                             \
          acc[m][2] = _mm256_fmadd_ps(a, x2, acc[m][2]);                                             \
          acc[m][3] = _mm256_fmadd_ps(a, x3, acc[m][3]);                                             \
        }                                                                                            \
      }                                                                                              \
      for (int m = 0; m < M; m++)                                                                    \
        for (int j = 0; j < 4; j++) {                                                                \
          const float *am = A + (size_t)m * lda, *bj = B + (size_t)(n + j) * ldb;                    \
          float s = hsum(acc[m][j]);                                                                 \
          for (int k = kv; k < K; k++) s += am[k] * bj[k];                                           \
          C[(size_t)m * ldc + n + j] = s;                                                            \
        }                                                                                            \
    }                                                                                                \
    for (; n < N; n++)                                                                               \
      for (int m = 0; m < M; m++) {                                                                  \
        float s = 0.0f;                                                                              \
        for (int k = 0; k < K; k++) s += A[(size_t)m * lda + k] * B[(size_t)n * ldb + k];            \
        C[(size_t)m * ldc + n] = s;                                                                  \
      }                                                                                              \
  }

NN_KERNEL(nn1, 1)
NN_KERNEL(nn2, 2)
NN_KERNEL(nn3, 3)
NN_KERNEL(nn4, 4)
NT_KERNEL(nt1, 1)
NT_KERNEL(nt2, 2)
NT_KERNEL(nt3, 3)
NT_KERNEL(nt4, 4)
static const kernel_fn nn_kernels[KERNEL_ROWS + 1] = {NULL, nn1, nn2, nn3, nn4};
static const kernel_fn nt_kernels[KERNEL_ROWS + 1] = {NULL, nt1, nt2, nt3, nt4};
#endif

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
    fprintf(stderr, "small_sgemm_blas: no BLAS with cblas_sgemm is loaded behind this library\n");
    abort();
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  has_simd = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
}

/* Rows split into blocks of at most KERNEL_ROWS, as even as can be (9 rows: 3 + 3 + 3). */
static void kernel_blocks(const kernel_fn *kernels, int M, int N, int K, const float *A, int lda,
                          const float *B, int ldb, float *C, int ldc) {
  const int blocks = (M + KERNEL_ROWS - 1) / KERNEL_ROWS;
  for (int b = 0, done = 0; b < blocks; b++) {
    const int rows = (M - done) / (blocks - b);
    kernels[rows](N, K, A + (size_t)done * lda, lda, B, ldb, C + (size_t)done * ldc, ldc);
    done += rows;
  }
}

void cblas_sgemm(int order, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  if (next_sgemm == NULL) resolve();
  const int kernel = has_simd && trans_a == NO_TRANS && alpha == 1.0f && beta == 0.0f && M <= MAX_ROWS;
  if (order != ROW_MAJOR || next_sgemv == NULL || M < 1 || N < 1 || K < 1 || (M > SGEMV_ROWS && !kernel)) {
    next_sgemm(order, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  served++;
#if defined(__x86_64__)
  if (kernel) {
    kernel_blocks(trans_b == NO_TRANS ? nn_kernels : nt_kernels, M, N, K, A, lda, B, ldb, C, ldc);
    return;
  }
#endif
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
}
