/* elementwise.h: the CPU twin of cuda/elementwise.cuh.
 *
 *   outs[k][r, c] = f(ins[0][r, c], ..., ins[NIN-1][r, c])_k     for r < rows, c < cols
 *
 * Rows are walked in chunks of MYOPS_EW_CHUNK columns: each operand chunk is converted into an fp32 (fp64 for
 * fp64 tensors) scratch buffer on the stack, the op's body runs over plain arrays (which the compiler
 * vectorizes), and the results are converted back; fp32 and fp64 operands of unit column stride are used in place
 * (and where all of them are, in spans of MYOPS_EW_SPAN).
 * The registration layer splits rows across threads. */
#ifndef MYOPS_CPU_ELEMENTWISE_H
#define MYOPS_CPU_ELEMENTWISE_H

#include "common.h"
#include "vmath.h"

/* 1024: chunks of 256 ran bf16 add at 160 us against 122 ([1024, 1024], 1 thread, 2-core EPYC VM); 2048 measured
 * about 3% faster again, 4096 50% slower. The fp32 buffers take 32 bytes per chunk element (32 KB at 1024), the
 * fp64 ones 64 (on the stack of every worker thread). */
#define MYOPS_EW_CHUNK 1024
#define MYOPS_EW_SPAN 8192 /* elements a body call when no buffer is involved (see myops_ew_cpu) */
#define MYOPS_EW_MAX_OPERANDS 4

typedef void (*myops_ew_f32_fn)(int64_t n, float* const* out, const float* const* in, const double* scalars);
typedef void (*myops_ew_f64_fn)(int64_t n, double* const* out, const double* const* in, const double* scalars);

/* colsum non-null: the last output is not stored but added, per column, to colsum [cols] (fp64): a bias
 * gradient's partial sums for the caller's share of the rows. */
MYOPS_CPU_VEC static int myops_ew_cpu(int nin, int nout, const myops_out_operand* outs, const myops_operand* ins,
                               int64_t rows, int64_t cols, int dtype, const double* scalars,
                               myops_ew_f32_fn f32, myops_ew_f64_fn f64, double* colsum) {
  const int64_t es = myops_dtype_size(dtype);
  const int nw = colsum ? nout - 1 : nout; /* outputs stored */
  if (es == 0) return MYOPS_EDTYPE;
  if (nin > MYOPS_EW_MAX_OPERANDS || nout > MYOPS_EW_MAX_OPERANDS || nw < 0) return MYOPS_EARG;
  if (dtype == MYOPS_F64) {
    double ib[MYOPS_EW_MAX_OPERANDS][MYOPS_EW_CHUNK], ob[MYOPS_EW_MAX_OPERANDS][MYOPS_EW_CHUNK];
    const double* ip[MYOPS_EW_MAX_OPERANDS];
    double* op[MYOPS_EW_MAX_OPERANDS];
    for (int k = 0; k < nout; ++k) op[k] = ob[k]; /* (outputs past nw: the summand, never stored) */
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += MYOPS_EW_CHUNK) {
        const int64_t n = cols - c0 < MYOPS_EW_CHUNK ? cols - c0 : MYOPS_EW_CHUNK;
        for (int i = 0; i < nin; ++i) {
          const double* s = (const double*)ins[i].ptr + r * ins[i].row_stride + c0 * ins[i].col_stride;
          if (ins[i].col_stride == 1) {
            ip[i] = s; /* (in place: see the fp32 loop) */
          } else {
            ip[i] = ib[i];
            for (int64_t e = 0; e < n; ++e) ib[i][e] = s[e * ins[i].col_stride];
          }
        }
        for (int k = 0; k < nw; ++k)
          op[k] = outs[k].col_stride == 1 ? (double*)outs[k].ptr + r * outs[k].row_stride + c0 : ob[k];
        f64(n, op, ip, scalars);
        for (int k = 0; k < nw; ++k) {
          if (outs[k].col_stride == 1) continue;
          double* d = (double*)outs[k].ptr + r * outs[k].row_stride + c0 * outs[k].col_stride;
          for (int64_t e = 0; e < n; ++e) d[e * outs[k].col_stride] = ob[k][e];
        }
        if (colsum)
          for (int64_t e = 0; e < n; ++e) colsum[c0 + e] += ob[nw][e];
      }
    }
    return MYOPS_OK;
  }
  float ib[MYOPS_EW_MAX_OPERANDS][MYOPS_EW_CHUNK], ob[MYOPS_EW_MAX_OPERANDS][MYOPS_EW_CHUNK];
  const float* ip[MYOPS_EW_MAX_OPERANDS];
  float* op[MYOPS_EW_MAX_OPERANDS];
  for (int k = 0; k < nout; ++k) op[k] = ob[k];
  /* fp32 operands of unit column stride are read and written in place: the copies into and out of the chunk
   * buffers made fp32 relu about 3x slower than eager (2-core EPYC VM). Outputs never alias inputs (the
   * registration layer asserts it): a two-output body may read in[i][e] after writing out[0][e]. */
  const int f32_direct = dtype == MYOPS_F32;
  /* Where every operand is used in place (and no summand needs the buffer), the body runs over MYOPS_EW_SPAN
   * elements a call instead of a chunk: its per-call costs (the call, the vectorized loop's alias checks, peel and
   * remainder) weighed on chunks of 256 (the chunk size then; fp32 add 115-116 -> 108-114 us, BENCHMARKS.md
   * session 32). */
  int all_direct = f32_direct && colsum == NULL;
  for (int i = 0; i < nin; ++i) all_direct = all_direct && ins[i].col_stride == 1;
  for (int k = 0; k < nw; ++k) all_direct = all_direct && outs[k].col_stride == 1;
  const int64_t span = all_direct ? MYOPS_EW_SPAN : MYOPS_EW_CHUNK;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += span) {
      const int64_t n = cols - c0 < span ? cols - c0 : span;
      for (int i = 0; i < nin; ++i) {
        const char* src = (const char*)ins[i].ptr + (r * ins[i].row_stride + c0 * ins[i].col_stride) * es;
        if (f32_direct && ins[i].col_stride == 1) {
          ip[i] = (const float*)src;
        } else {
          ip[i] = ib[i];
          myops_load_f32(dtype, src, ins[i].col_stride, n, ib[i]);
        }
      }
      for (int k = 0; k < nw; ++k)
        op[k] = f32_direct && outs[k].col_stride == 1 ? (float*)outs[k].ptr + r * outs[k].row_stride + c0 : ob[k];
      f32(n, op, ip, scalars);
      for (int k = 0; k < nw; ++k)
        if (op[k] == ob[k])
          myops_store_f32(dtype, (char*)outs[k].ptr + (r * outs[k].row_stride + c0 * outs[k].col_stride) * es,
                          outs[k].col_stride, n, ob[k]);
      if (colsum)
        for (int64_t e = 0; e < n; ++e) colsum[c0 + e] += (double)ob[nw][e];
    }
  }
  return MYOPS_OK;
}

/* Defines the op's fp32 and fp64 bodies and its C entry point `name` (the ABI every elementwise op shares).
 * BODY sees T (float or double), e (the element), in[i][e], out[k][e], s[j] (the op's scalars); MYOPS_EXP
 * (vmath.h) is exp in T's precision that vectorizes. */
#define MYOPS_EW_CPU_BODIES(name, BODY)                                                                   \
  MYOPS_CPU_VEC static void name##_f32(int64_t n, float* const* out, const float* const* in, const double* s) {        \
    typedef float T;                                                                                      \
    (void)s;                                                                                              \
    for (int64_t e = 0; e < n; ++e) { BODY }                                                              \
  }                                                                                                       \
  MYOPS_CPU_VEC static void name##_f64(int64_t n, double* const* out, const double* const* in, const double* s) {      \
    typedef double T;                                                                                     \
    (void)s;                                                                                              \
    for (int64_t e = 0; e < n; ++e) { BODY }                                                              \
  }
#define MYOPS_EW_CPU_ENTRY(name, NIN, NOUT, BODY)                                                          \
  MYOPS_EW_CPU_BODIES(name, BODY)                                                                         \
  int name(const myops_out_operand* outs, const myops_operand* ins, int64_t rows, int64_t cols, int dtype, \
           const double* scalars) {                                                                       \
    return myops_ew_cpu(NIN, NOUT, outs, ins, rows, cols, dtype, scalars, name##_f32, name##_f64, NULL); \
  }

/* An elementwise backward with a bias gradient (the twin of cuda/elementwise.cuh's MYOPS_EW_SUM_CUDA_ENTRY):
 * BODY's last output out[NOUT - 1] is the summand, added to colsum [cols] (fp64) instead of stored. */
#define MYOPS_EW_SUM_CPU_ENTRY(name, NIN, NOUT, BODY)                                                      \
  MYOPS_EW_CPU_BODIES(name, BODY)                                                                         \
  int name(const myops_out_operand* outs, const myops_operand* ins, int64_t rows, int64_t cols, int dtype, \
           const double* scalars, double* colsum) {                                                       \
    if (colsum == NULL) return MYOPS_EARG;                                                                \
    return myops_ew_cpu(NIN, NOUT, outs, ins, rows, cols, dtype, scalars, name##_f32, name##_f64, colsum); \
  }

#endif /* MYOPS_CPU_ELEMENTWISE_H */
