/* rows.h: element access for the CPU row-wise kernels (norms, softmax, cross_entropy). They compute in fp64 for
 * every dtype (a row at a time; cheap next to the memory traffic, and as close to the float64 reference as it
 * gets) and round once when storing. Element i of a row is at p[i * col_stride]. */
#ifndef MYOPS_CPU_ROWS_H
#define MYOPS_CPU_ROWS_H

#include <math.h>
#include <stdlib.h>
#include "common.h"

static inline double myops_ld(int dtype, const void* p, int64_t i) {
  switch (dtype) {
    case MYOPS_F32: return ((const float*)p)[i];
    case MYOPS_F16: return myops_f16_to_f32(((const uint16_t*)p)[i]);
    case MYOPS_BF16: return myops_bf16_to_f32(((const uint16_t*)p)[i]);
    default: return ((const double*)p)[i];
  }
}

/* Stores v rounded to dtype (half types through fp32, as a GPU kernel computing in fp32 would). */
static inline void myops_st(int dtype, void* p, int64_t i, double v) {
  switch (dtype) {
    case MYOPS_F32: ((float*)p)[i] = (float)v; break;
    case MYOPS_F16: ((uint16_t*)p)[i] = myops_f32_to_f16((float)v); break;
    case MYOPS_BF16: ((uint16_t*)p)[i] = myops_f32_to_bf16((float)v); break;
    default: ((double*)p)[i] = v; break;
  }
}

/* v rounded to dtype and back (the value an eager op in dtype would have stored). */
static inline double myops_round(int dtype, double v) {
  switch (dtype) {
    case MYOPS_F32: return (float)v;
    case MYOPS_F16: return myops_f16_to_f32(myops_f32_to_f16((float)v));
    case MYOPS_BF16: return myops_bf16_to_f32(myops_f32_to_bf16((float)v));
    default: return v;
  }
}

/* n elements p[0], p[cs], ... as fp64 into dst, and back (rounded to dtype through fp32 for half types): one
 * dtype switch per row instead of per element, and plain loops the compiler vectorizes. */
static inline void myops_load_row(int dtype, const void* p, int64_t cs, int64_t n, double* dst) {
  int64_t i;
  switch (dtype) {
    case MYOPS_F32: { const float* s = (const float*)p; for (i = 0; i < n; ++i) dst[i] = s[i * cs]; break; }
    case MYOPS_F16: { const uint16_t* s = (const uint16_t*)p; for (i = 0; i < n; ++i) dst[i] = myops_f16_to_f32(s[i * cs]); break; }
    case MYOPS_BF16: { const uint16_t* s = (const uint16_t*)p; for (i = 0; i < n; ++i) dst[i] = myops_bf16_to_f32(s[i * cs]); break; }
    default: { const double* s = (const double*)p; for (i = 0; i < n; ++i) dst[i] = s[i * cs]; break; }
  }
}

static inline void myops_store_row(int dtype, void* p, int64_t cs, int64_t n, const double* src) {
  int64_t i;
  switch (dtype) {
    case MYOPS_F32: { float* d = (float*)p; for (i = 0; i < n; ++i) d[i * cs] = (float)src[i]; break; }
    case MYOPS_F16: { uint16_t* d = (uint16_t*)p; for (i = 0; i < n; ++i) d[i * cs] = myops_f32_to_f16((float)src[i]); break; }
    case MYOPS_BF16: { uint16_t* d = (uint16_t*)p; for (i = 0; i < n; ++i) d[i * cs] = myops_f32_to_bf16((float)src[i]); break; }
    default: { double* d = (double*)p; for (i = 0; i < n; ++i) d[i * cs] = src[i]; break; }
  }
}

/* Row r of an operand, as a byte pointer. */
static inline const char* myops_row(const myops_operand* o, int64_t r, int64_t es) {
  return (const char*)o->ptr + r * o->row_stride * es;
}
static inline char* myops_out_row(const myops_out_operand* o, int64_t r, int64_t es) {
  return (char*)o->ptr + r * o->row_stride * es;
}

/* Saved per-row statistics are fp32, or fp64 for fp64 tensors (like the CUDA kernels' acc_t). */
static inline double myops_ld_stat(int dtype, const void* p, int64_t i) {
  return dtype == MYOPS_F64 ? ((const double*)p)[i] : ((const float*)p)[i];
}
static inline void myops_st_stat(int dtype, void* p, int64_t i, double v) {
  if (dtype == MYOPS_F64) ((double*)p)[i] = v;
  else ((float*)p)[i] = (float)v;
}

#endif /* MYOPS_CPU_ROWS_H */
