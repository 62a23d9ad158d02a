/* softmax.h: softmax (log = 0) and log_softmax (log = 1) on the CPU, rows [M, N]: fp64 for fp64 rows, fp32 with
 * fp64 row sums for the others (exp: vmath.h); formulas in csrc/cuda/softmax.cuh. */
#ifndef MYOPS_CPU_SOFTMAX_H
#define MYOPS_CPU_SOFTMAX_H

#include "rows.h"

/* Rows stored in fp32 or narrower: a row's elementwise work in fp32, sixteen lanes a vector (the fp64 pipeline
 * below ran at half eager's speed). x - max is rounded to fp32 as in eager (exact for 16-bit inputs); the output is
 * within about 3 ulp of fp32, below the tests' floor of 4 at the scale of 1. The sum of exps: fp32 softmax's in fp64
 * over the stored exps (its relative error is every output's: max error against float64 0.67x eager's, 1.13x with
 * the blocked sum below); log_softmax's and 16-bit softmax's fused with the exps in fp32 blocks (MYOPS_SUMF_BLOCKED,
 * each block's total in fp64), whose error the output's rounding absorbs (log_softmax fp32 max error 1.05x eager's
 * over rows of 7-262144, as with fp64 sums). One thread, [1024, 1024], us: log_softmax fp32 435 -> 388-390 (eager
 * 396-404), bf16 510 -> 439-453; softmax bf16 503 -> 445-466. (Fused with fp64 sums, the exps did not vectorize.)
 * The exps (here, in log_softmax's backward and in cross_entropy's) take myops_expf_u20, a polynomial of eager's
 * degree (about 2.2 ulp against myops_expf's 1.1): cpu_ab, one thread, [1024, 1024], us: softmax fp32 415 -> 358,
 * bf16 455 -> 403; log_softmax fp32 373 -> 325, bf16 426 -> 376; log_softmax backward fp32 314 -> 266, bf16 407 ->
 * 362. Max error against float64 over eager's, fp32, randn rows: softmax forward 0.47 -> 0.68 (0.11 -> 0.18 at 8
 * randn), its backward 0.82 -> 1.11, log_softmax 1.01 -> 1.00, cross_entropy 0.55 -> 0.54 (session 41).
 * Rows whose least element is within 87 of the max (myops_maxf_mid: the max pass takes the min too) take
 * myops_expf_u20_mid, the same bits with 2^k as one factor (session 55; cpu_ab, one thread, us, 2-core EPYC VM, max
 * difference 0): softmax fp32 [1024, 4096] 1987 -> 1637, [1024, 1024] 368 -> 284, bf16 1716 -> 1457, 412 -> 346;
 * log_softmax fp32 1680 -> 1337, 332 -> 257, bf16 1661 -> 1313, 413 -> 334, fp16 1428 -> 1099; rows of 33 level.
 * The op on 2 threads, [1024, 4096], against eager: softmax bf16 711 / 896 us, fp32 841 / 893; log_softmax bf16
 * 627 / 818, fp32 745 / 1031; cross_entropy bf16 432 / 808. The choice is two loops: a select inside one loop,
 * though loop-invariant, computed both exps (1.03-1.11x). */
MYOPS_CPU_HOT void softmax_row_forward_f32(const float* v, float* y, float* e, int64_t N, int is_log, int narrow) {
  int mid;
  const float m = myops_maxf_mid(v, N, &mid);  /* NaN: skipped here, and exp(NaN - m) makes the sum NaN */
  double myops_sum_result_;
  if (is_log) {
    myops_sum_result_ = myops_exp_sumf(v, N, m, mid);
  } else if (narrow && mid) {
    MYOPS_SUMF_BLOCKED(N, (e[k] = myops_expf_u20_mid(v[k] - m)));
  } else if (narrow) {
    MYOPS_SUMF_BLOCKED(N, (e[k] = myops_expf_u20(v[k] - m)));
  } else {
    if (mid)
      for (int64_t i = 0; i < N; ++i) e[i] = myops_expf_u20_mid(v[i] - m);
    else
      for (int64_t i = 0; i < N; ++i) e[i] = myops_expf_u20(v[i] - m);
    myops_sum_result_ = myops_sumf(e, N);
  }
  const double s = myops_sum_result_;
  if (is_log) {
    const float ls = (float)log(s);  /* eager's two roundings: (x - max) - log-sum */
    for (int64_t i = 0; i < N; ++i) y[i] = (v[i] - m) - ls;
  } else {
    const float rs = (float)(1.0 / s);
    for (int64_t i = 0; i < N; ++i) y[i] = e[i] * rs;
  }
}

MYOPS_CPU_VEC static int softmax_rows_forward(const myops_out_operand* y, const myops_operand* x, int64_t M,
                                              int64_t N, int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t n1 = N > 0 ? N : 1;
  double* v = (double*)malloc((size_t)n1 * 2 * sizeof(double));  /* [N] the row, [N] exp scratch */
  if (v == NULL) return MYOPS_EARG;
  double* e = v + n1;
  for (int64_t r = 0; r < M && dtype != MYOPS_F64; ++r) { /* fp32 and narrower (unit-stride fp32 rows in place) */
    float *f = (float*)v, *fe = f + n1;  /* [N] the row, [N] exps, in the first half of the buffer */
    float* yv = myops_out_row_f32(y, r, dtype, es, f);
    softmax_row_forward_f32(myops_row_f32(x, r, N, dtype, es, f), yv, fe, N, is_log, dtype != MYOPS_F32);
    myops_put_row_f32(y, r, N, dtype, es, yv, f);
  }
  for (int64_t r = 0; r < M && dtype == MYOPS_F64; ++r) {
    myops_load_row(dtype, myops_row(x, r, es), x->col_stride, N, v);
    /* NaN needs no flag: max skips it, exp(NaN - m) is NaN, and so is the sum every output divides by. */
    const double m = myops_max(v, N);
    if (is_log) {
      const double ls = log(myops_exp_sum(e, v, N, m));
      for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - m) - ls;
    } else {
      /* one exp per element; a multiply by 1 / s, not a divide (vdivpd is slow) */
      const double rs = 1.0 / myops_exp_sum(v, v, N, m);
      for (int64_t i = 0; i < N; ++i) v[i] *= rs;
    }
    myops_store_row(dtype, myops_out_row(y, r, es), y->col_stride, N, v);
  }
  free(v);
  return MYOPS_OK;
}

/* The backward of rows stored in fp32 or narrower, like the forward: elementwise in fp32, the row's sum in fp32
 * blocks added in fp64 (MYOPS_SUMF_BLOCKED; the fp64 sum of 16 lanes it replaced ran at half the vector width: the
 * kernel alone, one thread, [1024, 1024], minimum of 100 calls, us: softmax bf16 200 -> 146, fp32 121 -> 122;
 * log_softmax fp32 325 -> 310, bf16 414 -> 380).
 *   softmax: dx = y (g - sum(g y)),   log_softmax: dx = g - exp(y) sum(g). */
MYOPS_CPU_HOT void softmax_row_backward_f32(const float* g, const float* v, float* dx, int64_t N, int is_log) {
  double myops_sum_result_;
  if (is_log) {  /* (dx may be g: in place) */
    MYOPS_SUMF_BLOCKED(N, g[k]);
    const float k = (float)myops_sum_result_;
    for (int64_t b = 0; b < N; b += 512) {  /* (blocks: the range check reads what the exps then read, from L1) */
      const int64_t e = b + 512 < N ? b + 512 : N;
      if (myops_within_87f(v + b, e - b))
        for (int64_t i = b; i < e; ++i) dx[i] = g[i] - myops_expf_u20_mid(v[i]) * k;
      else
        for (int64_t i = b; i < e; ++i) dx[i] = g[i] - myops_expf_u20(v[i]) * k;
    }
  } else {
    MYOPS_SUMF_BLOCKED(N, g[k] * v[k]);
    const float k = (float)myops_sum_result_;
    for (int64_t i = 0; i < N; ++i) dx[i] = v[i] * (g[i] - k);
  }
}

/* bf16 rows of unit column stride: the same fp32 arithmetic (the same bits) on elements widened as they are read and
 * rounded as they are stored, where the rows above went through fp32 buffers (a pass to widen dy, one to widen y,
 * one to round dx), which left softmax's bf16 backward at 2.3x eager's time (2 threads, [1024, 4096]: 696 against 302
 * us). cpu_ab, one thread, [1024, 4096], us (2-core Zen 4 VM): softmax 1121 -> 701, log_softmax 1879 -> 1685 (its
 * exps). */
MYOPS_CPU_HOT void softmax_row_backward_bf16(const uint16_t* g, const uint16_t* v, uint16_t* dx, int64_t N,
                                             int is_log) {
  double myops_sum_result_;
  if (is_log) {  /* (dx may be g: in place) */
    MYOPS_SUMF_BLOCKED(N, myops_bf16_to_f32(g[k]));
    const float k = (float)myops_sum_result_;
    for (int64_t b = 0; b < N; b += 512) {  /* (as softmax_row_backward_f32's) */
      const int64_t e = b + 512 < N ? b + 512 : N;
      if (myops_within_87_bf16(v + b, e - b))
        for (int64_t i = b; i < e; ++i)
          dx[i] = myops_f32_to_bf16(myops_bf16_to_f32(g[i]) - myops_expf_u20_mid(myops_bf16_to_f32(v[i])) * k);
      else
        for (int64_t i = b; i < e; ++i)
          dx[i] = myops_f32_to_bf16(myops_bf16_to_f32(g[i]) - myops_expf_u20(myops_bf16_to_f32(v[i])) * k);
    }
  } else {
    MYOPS_SUMF_BLOCKED(N, myops_bf16_to_f32(g[k]) * myops_bf16_to_f32(v[k]));
    const float k = (float)myops_sum_result_;
    for (int64_t i = 0; i < N; ++i)
      dx[i] = myops_f32_to_bf16(myops_bf16_to_f32(v[i]) * (myops_bf16_to_f32(g[i]) - k));
  }
}

/* log_softmax's fp16 rows of 4096 or more, unit column stride (F16C's conversions, common.h): blocks of 1024 elements
 * widened into L1-resident scratch gs, vs [1024] (the row's sum of dy over them, then dx over them again), where whole
 * rows went through row-sized buffers. The sum's blocks are MYOPS_SUMF_BLOCKED's, each total added in fp64 in order:
 * the same bits. cpu_ab, one thread, us (2-core EPYC VM): [1024, 4096] 2039 -> 1787, [256, 16384] 2573 -> 1908; not
 * shorter rows, which the buffers keep in L1 ([1024, 1024] 338 -> 395, [4096, 512] 688 -> 845), nor softmax, which
 * widens y in both passes ([1024, 4096] 984 -> 1110). */
MYOPS_CPU_HOT void log_softmax_row_backward_f16(const uint16_t* g, const uint16_t* v, uint16_t* dx, int64_t N,
                                                float* gs, float* vs) {
  double tot = 0.0;
  for (int64_t b = 0; b < N; b += 1024) {
    const int64_t n = N - b < 1024 ? N - b : 1024;
    double myops_sum_result_;
    myops_load_f16(g + b, 1, n, gs);
    MYOPS_SUMF_BLOCKED(n, gs[k]);
    tot += myops_sum_result_;
  }
  const float k = (float)tot;
  for (int64_t b = 0; b < N; b += 1024) {
    const int64_t n = N - b < 1024 ? N - b : 1024;
    myops_load_f16(g + b, 1, n, gs);
    myops_load_f16(v + b, 1, n, vs);
    if (myops_within_87f(vs, n))
      for (int64_t i = 0; i < n; ++i) gs[i] = gs[i] - myops_expf_u20_mid(vs[i]) * k;
    else
      for (int64_t i = 0; i < n; ++i) gs[i] = gs[i] - myops_expf_u20(vs[i]) * k;
    myops_store_f16(dx + b, 1, n, gs);
  }
}

/* softmax's 16-bit rows of unit column stride where the CPU has AVX-512 and F16C (myops_f16c() == 2): widened in
 * registers as read, dx rounded as stored (bf16: myops_f32_to_bf16's integer rounding, 16 lanes), where fp16 rows
 * went through fp32 buffers (2.2x eager's time, 2 threads, [1024, 4096]) and bf16 through the C loops above. The
 * sum's lanes, blocks and tree are MYOPS_SUMF_BLOCKED's (lanes 0-15 and 16-31 in two registers, a block's tail and
 * tree on its 32 floats), products and sums rounded apart as there (no FMA): the same bits. cpu_ab, one thread, us
 * (2-core EPYC VM): fp16 [1024, 4096] 1327 -> 501, [1024, 1024] 171 -> 102, [4096, 33] 153 -> 122; bf16 against
 * the C loops above, [1024, 4096] 677 -> 597, [1024, 1024] 169 -> 147, [4096, 33] 138 -> 140.
 * (log_softmax's exps stay in C: its polynomial is the compiler's vectorization of myops_expf_u20.) */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define MYOPS_X16 __attribute__((target("avx512f,avx,f16c"), unused))
MYOPS_X16 static inline __m512 myops_x16_load(const uint16_t* p, int bf) {
  const __m256i h = _mm256_loadu_si256((const __m256i*)p);
  return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}
MYOPS_X16 static inline void myops_x16_store(uint16_t* p, __m512 x, int bf) {
  if (!bf) {
    _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    return;
  }
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                 _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_storeu_si256((__m256i*)p, _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q)));
}
MYOPS_X16 static inline float myops_x16_get(const uint16_t* p, int bf) {
  return bf ? myops_bf16_to_f32(*p) : _cvtsh_ss(*p);
}
MYOPS_X16 static inline uint16_t myops_x16_put(float x, int bf) {
  return bf ? myops_f32_to_bf16(x) : _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
MYOPS_X16 static void softmax_row_backward_x16(const uint16_t* g, const uint16_t* v, uint16_t* dx, int64_t N,
                                               int bf) {
  double tot = 0.0;
  for (int64_t b = 0; b < N; b += 1024) {
    const int64_t e = b + 1024 < N ? b + 1024 : N;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = b;
    for (; i + 32 <= e; i += 32) {
      a0 = _mm512_add_ps(a0, _mm512_mul_ps(myops_x16_load(g + i, bf), myops_x16_load(v + i, bf)));
      a1 = _mm512_add_ps(a1, _mm512_mul_ps(myops_x16_load(g + i + 16, bf), myops_x16_load(v + i + 16, bf)));
    }
    float acc[32];
    _mm512_storeu_ps(acc, a0);
    _mm512_storeu_ps(acc + 16, a1);
    for (int64_t k = i; k < e; ++k) acc[k - i] += myops_x16_get(g + k, bf) * myops_x16_get(v + k, bf);
    for (int s = 16; s > 0; s >>= 1)
      for (int j = 0; j < s; ++j) acc[j] += acc[j + s];
    tot += (double)acc[0];
  }
  const float k = (float)tot;
  const __m512 kv = _mm512_set1_ps(k);
  int64_t i = 0;
  for (; i + 16 <= N; i += 16)
    myops_x16_store(dx + i, _mm512_mul_ps(myops_x16_load(v + i, bf), _mm512_sub_ps(myops_x16_load(g + i, bf), kv)),
                    bf);
  for (; i < N; ++i) dx[i] = myops_x16_put(myops_x16_get(v + i, bf) * (myops_x16_get(g + i, bf) - k), bf);
}
#undef MYOPS_X16
#else
static void softmax_row_backward_x16(const uint16_t* g, const uint16_t* v, uint16_t* dx, int64_t N, int bf) {
  (void)g, (void)v, (void)dx, (void)N, (void)bf;
}
#endif

MYOPS_CPU_VEC static int softmax_rows_backward(const myops_out_operand* dx, const myops_operand* dy,
                                               const myops_operand* y, int64_t M, int64_t N, int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t n1 = N > 0 ? N : 1;
  /* [N] dy (then dx), [N] y (log_softmax's fp16 rows, N >= 4096, take two [1024] floats of it as scratch) */
  double* g = (double*)malloc((size_t)n1 * 2 * sizeof(double));
  if (g == NULL) return MYOPS_EARG;
  double* v = g + n1;
  const int x16 = (dtype == MYOPS_F16 || dtype == MYOPS_BF16) && !is_log && myops_f16c() == 2;
  const int direct = (dtype == MYOPS_BF16 || (dtype == MYOPS_F16 && is_log && N >= 4096) || x16) &&
                     dx->col_stride == 1 && dy->col_stride == 1 && y->col_stride == 1;
  for (int64_t r = 0; r < M && direct; ++r) {
    const uint16_t *gr = (const uint16_t*)myops_row(dy, r, es), *vr = (const uint16_t*)myops_row(y, r, es);
    uint16_t* dr = (uint16_t*)myops_out_row(dx, r, es);
    if (x16) softmax_row_backward_x16(gr, vr, dr, N, dtype == MYOPS_BF16);
    else if (dtype == MYOPS_BF16) softmax_row_backward_bf16(gr, vr, dr, N, is_log);
    else log_softmax_row_backward_f16(gr, vr, dr, N, (float*)g, (float*)g + 1024);
  }
  for (int64_t r = 0; r < M && dtype != MYOPS_F64 && !direct; ++r) { /* fp32 and narrower (unit-stride fp32 in place) */
    float *gf = (float*)g, *vf = gf + n1;  /* [N] dy (then dx), [N] y, in the first half of the buffer */
    float* dv = myops_out_row_f32(dx, r, dtype, es, gf);
    softmax_row_backward_f32(myops_row_f32(dy, r, N, dtype, es, gf), myops_row_f32(y, r, N, dtype, es, vf), dv, N,
                             is_log);
    myops_put_row_f32(dx, r, N, dtype, es, dv, gf);
  }
  for (int64_t r = 0; r < M && dtype == MYOPS_F64; ++r) {
    myops_load_row(dtype, myops_row(dy, r, es), dy->col_stride, N, g);
    myops_load_row(dtype, myops_row(y, r, es), y->col_stride, N, v);
    if (is_log) {
      const double k = myops_sum(g, N);
      for (int64_t i = 0; i < N; ++i) g[i] -= myops_exp(v[i]) * k;
    } else {
      const double k = myops_dot(g, v, N);
      for (int64_t i = 0; i < N; ++i) g[i] = v[i] * (g[i] - k);
    }
    myops_store_row(dtype, myops_out_row(dx, r, es), dx->col_stride, N, g);
  }
  free(g);
  return MYOPS_OK;
}

/* A dim that is not innermost in memory: a dense [A, D, B] in memory order, B > 1 (dim 0 of a row-major [D, B], or
 * the last dim of a transposed view), the output in the same layout (eager's). Columns [c0, c1) of the A * B, in
 * tiles of up to SOFTMAX_TILE_BYTES / es consecutive columns of one a (softmax_tile), each column's statistics
 * vectorized across the tile: for fp32 and narrower, passes over the tile's D rows of contiguous elements (the max,
 * the sum of exps in fp32 blocks of SOFTMAX_COL_BLOCK rows added in fp64, the outputs; the tile's D x 256 bytes stay
 * in L2 between passes), the formulas of softmax_row_forward_f32 and softmax_row_backward_f32 (their exps without
 * the _mid variant); fp64 gathers each tile into rows for the row kernels above (softmax_tile_move). Replaces a copy
 * of the tensor to rows along the dim and an output in that moved layout. Softmax over dim 0 of [4096, 1024], 2
 * threads (2-core EPYC VM), us, before -> after (eager): bf16 forward 2754 -> 1373 (1406), forward+backward 12315 ->
 * 3412 (3629); fp32 4112 -> 2139 (3982), 18147 -> 8969 (8486), with softmax's exps kept for the outputs (without:
 * fp32 forward 4030). (Tiles of 512 bytes: no better. Narrow columns, B es under 64 bytes: rows, csrc/ops/softmax.h.)
 */
#define SOFTMAX_TILE_BYTES 256
#define SOFTMAX_COL_BLOCK 32
#define SOFTMAX_EXP_BYTES (8 << 20)
static void softmax_tile_move(char* rows, char* t, int64_t D, int64_t B, int64_t n, int64_t es, int gather) {
#define SOFTMAX_MOVE(U)                                                 \
  do {                                                                  \
    U* r_ = (U*)rows;                                                   \
    U* t_ = (U*)t;                                                      \
    for (int64_t d = 0; d < D; ++d)                                     \
      for (int64_t j = 0; j < n; ++j)                                   \
        if (gather) r_[j * D + d] = t_[d * B + j];                      \
        else t_[d * B + j] = r_[j * D + d];                             \
  } while (0)
  if (es == 2) SOFTMAX_MOVE(uint16_t);
  else if (es == 4) SOFTMAX_MOVE(uint32_t);
  else SOFTMAX_MOVE(uint64_t);
#undef SOFTMAX_MOVE
}
/* The tile of columns [c, c + n) of one a from column c of [c0, c1): its byte offset (n at most SOFTMAX_TILE_BYTES /
 * es). */
static int64_t softmax_tile(int64_t c, int64_t c1, int64_t D, int64_t B, int64_t es, int64_t* n) {
  const int64_t a = c / B, b = c % B, t = SOFTMAX_TILE_BYTES / es;
  const int64_t m = B - b < t ? B - b : t;
  *n = c1 - c < m ? c1 - c : m;
  return (a * D * B + b) * es;
}
#define SOFTMAX_TILE_MAX (SOFTMAX_TILE_BYTES / 2)
/* s[j] = column j's sum over the tile's D rows of f[j] += TERM (BODY: row d's loads first), in fp32 blocks of
 * SOFTMAX_COL_BLOCK rows added in fp64 (f: the block's fp32 sums). */
#define SOFTMAX_COL_SUMS(BODY, TERM)                                             \
  do {                                                                           \
    for (int64_t j = 0; j < n; ++j) s[j] = 0.0;                                  \
    for (int64_t d0 = 0; d0 < D; d0 += SOFTMAX_COL_BLOCK) {                      \
      const int64_t d1 = d0 + SOFTMAX_COL_BLOCK < D ? d0 + SOFTMAX_COL_BLOCK : D; \
      for (int64_t j = 0; j < n; ++j) f[j] = 0.f;                                \
      for (int64_t d = d0; d < d1; ++d) {                                        \
        BODY;                                                                    \
        for (int64_t j = 0; j < n; ++j) f[j] += TERM;                            \
      }                                                                          \
      for (int64_t j = 0; j < n; ++j) s[j] += (double)f[j];                      \
    }                                                                            \
  } while (0)
/* Bytes of scratch an operand for columns [c0, c1) of B: fp64 a tile's [n, D] rows (n no more than the columns
 * there are: a full tile's 256 D bytes, three of them in the backward, ran out of memory at [2^25, 2]), else one row
 * of the tile in fp32. */
static int64_t softmax_tile_scratch(int64_t D, int64_t B, int64_t c0, int64_t c1, int dtype) {
  if (dtype != MYOPS_F64) return SOFTMAX_TILE_MAX * (int64_t)sizeof(float);
  int64_t n = SOFTMAX_TILE_BYTES / 8;
  n = B < n ? B : n;
  n = c1 - c0 < n ? c1 - c0 : n;
  return 8 * (n > 0 ? n : 1) * (D > 0 ? D : 1);
}
/* One tile's forward, fp32 and narrower: x and y at the tile's first column, rows of stride B elements; ex (softmax,
 * or NULL) [D, n] scratch that keeps the sum's exps for the outputs (one exp an element, as the row kernel). */
MYOPS_CPU_HOT void softmax_tile_forward(char* y, const char* x, int64_t D, int64_t B, int64_t n, int dtype,
                                        int64_t es, int is_log, float* v, float* ex) {
  float m[SOFTMAX_TILE_MAX], f[SOFTMAX_TILE_MAX], k[SOFTMAX_TILE_MAX];
  double s[SOFTMAX_TILE_MAX];
  for (int64_t j = 0; j < n; ++j) m[j] = -INFINITY;
  for (int64_t d = 0; d < D; ++d) {  /* NaN: skipped here, and exp(NaN - m) makes the sum NaN */
    myops_load_f32(dtype, x + d * B * es, 1, n, v);
    for (int64_t j = 0; j < n; ++j) m[j] = v[j] > m[j] ? v[j] : m[j];
  }
  if (ex) {
    float* e = ex;
    SOFTMAX_COL_SUMS((myops_load_f32(dtype, x + d * B * es, 1, n, v), e = ex + d * n),
                     (e[j] = myops_expf_u20(v[j] - m[j])));
  } else {
    SOFTMAX_COL_SUMS(myops_load_f32(dtype, x + d * B * es, 1, n, v), myops_expf_u20(v[j] - m[j]));
  }
  for (int64_t j = 0; j < n; ++j) k[j] = is_log ? (float)log(s[j]) : (float)(1.0 / s[j]);
  for (int64_t d = 0; d < D; ++d) {
    if (ex) {
      const float* e = ex + d * n;
      for (int64_t j = 0; j < n; ++j) v[j] = e[j] * k[j];
    } else {
      myops_load_f32(dtype, x + d * B * es, 1, n, v);
      if (is_log)
        for (int64_t j = 0; j < n; ++j) v[j] = (v[j] - m[j]) - k[j];  /* eager's two roundings */
      else
        for (int64_t j = 0; j < n; ++j) v[j] = myops_expf_u20(v[j] - m[j]) * k[j];
    }
    myops_store_f32(dtype, y + d * B * es, 1, n, v);
  }
}
/* One tile's backward, fp32 and narrower: softmax dx = y (g - sum(g y)), log_softmax dx = g - exp(y) sum(g). */
MYOPS_CPU_HOT void softmax_tile_backward(char* dx, const char* dy, const char* y, int64_t D, int64_t B, int64_t n,
                                         int dtype, int64_t es, int is_log, float* g, float* v) {
  float f[SOFTMAX_TILE_MAX], k[SOFTMAX_TILE_MAX];
  double s[SOFTMAX_TILE_MAX];
  if (is_log)
    SOFTMAX_COL_SUMS(myops_load_f32(dtype, dy + d * B * es, 1, n, g), g[j]);
  else
    SOFTMAX_COL_SUMS((myops_load_f32(dtype, dy + d * B * es, 1, n, g), myops_load_f32(dtype, y + d * B * es, 1, n, v)),
                     g[j] * v[j]);
  for (int64_t j = 0; j < n; ++j) k[j] = (float)s[j];
  for (int64_t d = 0; d < D; ++d) {
    myops_load_f32(dtype, dy + d * B * es, 1, n, g);
    myops_load_f32(dtype, y + d * B * es, 1, n, v);
    if (is_log)
      for (int64_t j = 0; j < n; ++j) g[j] = g[j] - myops_expf_u20(v[j]) * k[j];
    else
      for (int64_t j = 0; j < n; ++j) g[j] = v[j] * (g[j] - k[j]);
    myops_store_f32(dtype, dx + d * B * es, 1, n, g);
  }
}
MYOPS_CPU_VEC static int softmax_cols_forward(void* y, const void* x, int64_t D, int64_t B, int64_t c0, int64_t c1,
                                              int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  /* softmax's exps kept for the outputs where [D, SOFTMAX_TILE_MAX] floats take at most SOFTMAX_EXP_BYTES */
  const int keep = !is_log && dtype != MYOPS_F64 && D * SOFTMAX_TILE_MAX * 4 <= SOFTMAX_EXP_BYTES;
  const int64_t row = softmax_tile_scratch(D, B, c0, c1, dtype);
  char* buf = (char*)malloc((size_t)(row + (keep ? D * SOFTMAX_TILE_MAX * 4 : 0)));  /* fp64: [n, D] rows; else a row */
  if (buf == NULL) return MYOPS_EARG;
  int rc = MYOPS_OK;
  for (int64_t c = c0, n = 0; c < c1 && rc == MYOPS_OK; c += n) {
    const int64_t off = softmax_tile(c, c1, D, B, es, &n);
    if (dtype != MYOPS_F64) {
      softmax_tile_forward((char*)y + off, (const char*)x + off, D, B, n, dtype, es, is_log, (float*)buf,
                           keep ? (float*)(buf + row) : NULL);
      continue;
    }
    softmax_tile_move(buf, (char*)x + off, D, B, n, es, 1);
    const myops_operand xo = {buf, D, 1};
    const myops_out_operand yo = {buf, D, 1};
    rc = softmax_rows_forward(&yo, &xo, n, D, dtype, is_log);
    softmax_tile_move(buf, (char*)y + off, D, B, n, es, 0);
  }
  free(buf);
  return rc;
}
MYOPS_CPU_VEC static int softmax_cols_backward(void* dx, const void* dy, const void* y, int64_t D, int64_t B,
                                               int64_t c0, int64_t c1, int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t tile = softmax_tile_scratch(D, B, c0, c1, dtype);
  char* buf = (char*)malloc((size_t)(3 * tile));  /* fp64: [n, D] rows of dy, of y, of dx; else a row of each */
  if (buf == NULL) return MYOPS_EARG;
  int rc = MYOPS_OK;
  for (int64_t c = c0, n = 0; c < c1 && rc == MYOPS_OK; c += n) {
    const int64_t off = softmax_tile(c, c1, D, B, es, &n);
    if (dtype != MYOPS_F64) {
      softmax_tile_backward((char*)dx + off, (const char*)dy + off, (const char*)y + off, D, B, n, dtype, es, is_log,
                            (float*)buf, (float*)(buf + tile));
      continue;
    }
    softmax_tile_move(buf, (char*)dy + off, D, B, n, es, 1);
    softmax_tile_move(buf + tile, (char*)y + off, D, B, n, es, 1);
    const myops_operand go = {buf, D, 1}, vo = {buf + tile, D, 1};
    const myops_out_operand dxo = {buf + 2 * tile, D, 1};
    rc = softmax_rows_backward(&dxo, &go, &vo, n, D, dtype, is_log);
    softmax_tile_move(buf + 2 * tile, (char*)dx + off, D, B, n, es, 0);
  }
  free(buf);
  return rc;
}

#endif /* MYOPS_CPU_SOFTMAX_H */
