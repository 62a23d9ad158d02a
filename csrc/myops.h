/* myops.h: the C ABI between the registration layer (C++, torch headers) and the kernel library
 * (C11 / CUDA C, no torch headers). This is the only header both sides include.
 *
 * Kernel library symbols follow one pattern: myops_<op>[_<variant>]_<cpu|cuda>. Every launcher takes plain
 * pointers, int64 sizes and strides (in elements), a dtype code, and (CUDA) the stream last. Launchers return
 * 0 on success or a cudaError_t / MYOPS_E* code; the caller turns that into an exception.
 */
#ifndef MYOPS_H
#define MYOPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Data type codes. Stable: they cross the ABI. */
typedef enum {
  MYOPS_F32 = 0,
  MYOPS_F16 = 1,
  MYOPS_BF16 = 2,
  MYOPS_F64 = 3,
} myops_dtype;

/* Error codes for failures that are not CUDA errors. */
enum {
  MYOPS_OK = 0,
  MYOPS_EDTYPE = 100000, /* dtype not supported by this kernel */
  MYOPS_EARG = 100001,   /* argument outside what the kernel handles (a bug in the caller) */
};

/* Version of this ABI. The registration layer refuses a kernel library built against another one. */
#define MYOPS_ABI_VERSION 5

/* An operand of a 2-D strided elementwise problem [rows, cols]: element (r, c) lives at
 * ptr[r * row_stride + c * col_stride]. A bias broadcast over rows has row_stride 0. */
typedef struct {
  const void* ptr;
  int64_t row_stride;
  int64_t col_stride;
} myops_operand;

/* Same for an output (contiguous outputs have row_stride == cols, col_stride == 1). */
typedef struct {
  void* ptr;
  int64_t row_stride;
  int64_t col_stride;
} myops_out_operand;

#ifdef __cplusplus
}
#endif
#endif /* MYOPS_H */
