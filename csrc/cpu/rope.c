/* rope: out = x * cos + rotate_half(x) * sin (Hugging Face Llama form), x and out [B, S, H, D] with any B, S, H
 * strides (D contiguous), cos/sin [B, S, D] with any strides; the math and the pairing are in cuda/rope.cu:
 *   forward:  out[d1] = a cos[d1] - b sin[d1],  out[d2] = b cos[d2] + a sin[d2]      (a, b) = (x[d1], x[d2])
 *   backward: the same with sin'[d1] = -sin[d2], sin'[d2] = -sin[d1] (the transposed rotation; x is the gradient)
 * NeoX pairs (i, i + D/2), interleaved (GPT-J) pairs (2i, 2i + 1): in both, pair i's first element sits at
 * i * step and its second `second` elements further on, so one strided loop serves both.
 *
 * The registration layer splits the B * S positions across threads: this entry point runs positions
 * [p_begin, p_end). Per position, up to MYOPS_ROPE_CHUNK pairs of cos/sin are widened into fp32 (fp64 for fp64)
 * scratch rows once and reused for all H heads. */
#include "common.h"
#include "vmath.h"

#define MYOPS_ROPE_CHUNK 256

MYOPS_CPU_HOT void rope_load_f64(int dtype, const void* p, int64_t cs, int64_t n, double* dst) {
  (void)dtype;
  const double* s = (const double*)p;
  for (int64_t k = 0; k < n; ++k) dst[k] = s[k * cs];
}

MYOPS_CPU_HOT void rope_store_f64(int dtype, void* p, int64_t cs, int64_t n, const double* src) {
  (void)dtype;
  double* d = (double*)p;
  for (int64_t k = 0; k < n; ++k) d[k * cs] = src[k];
}

/* Defines NAME(...): the position loop for accumulation type T with loaders LOAD / STORE
 * (dtype, pointer, stride in elements, count, buffer). Pointers are byte pointers; offsets are in elements. */
#define MYOPS_ROPE_CPU_IMPL(NAME, T, LOAD, STORE)                                                             \
  MYOPS_CPU_VEC static void NAME(char* out, const char* x, const char* cos, const char* sin,                  \
                                 const int64_t* shape, const int64_t* xs, const int64_t* os,                  \
                                 const int64_t* cs, const int64_t* ss, int interleaved, int backward,         \
                                 int64_t p_begin, int64_t p_end, int dtype, int64_t es) {                     \
    const int64_t S = shape[1], H = shape[2], half = shape[3] / 2;                                            \
    const int64_t step = interleaved ? 2 : 1, second = interleaved ? 1 : half;                                \
    T c1[MYOPS_ROPE_CHUNK], c2[MYOPS_ROPE_CHUNK], s1[MYOPS_ROPE_CHUNK], s2[MYOPS_ROPE_CHUNK];                 \
    T a[MYOPS_ROPE_CHUNK], b[MYOPS_ROPE_CHUNK], o1[MYOPS_ROPE_CHUNK], o2[MYOPS_ROPE_CHUNK];                   \
    for (int64_t p = p_begin; p < p_end; ++p) {                                                               \
      const int64_t bi = p / S, si = p % S;                                                                   \
      const char* xp = x + (bi * xs[0] + si * xs[1]) * es;  /* [H, D] of this position */                    \
      char* op = out + (bi * os[0] + si * os[1]) * es;      /* [H, D] */                                      \
      const char* cp = cos + (bi * cs[0] + si * cs[1]) * es; /* [D] */                                        \
      const char* sp = sin + (bi * ss[0] + si * ss[1]) * es; /* [D] */                                        \
      for (int64_t i0 = 0; i0 < half; i0 += MYOPS_ROPE_CHUNK) {                                               \
        const int64_t n = half - i0 < MYOPS_ROPE_CHUNK ? half - i0 : MYOPS_ROPE_CHUNK;                        \
        const int64_t d1 = i0 * step, d2 = d1 + second; /* first pair of the chunk: its two elements */       \
        LOAD(dtype, cp + d1 * cs[2] * es, step * cs[2], n, c1);                                               \
        LOAD(dtype, cp + d2 * cs[2] * es, step * cs[2], n, c2);                                               \
        LOAD(dtype, sp + d1 * ss[2] * es, step * ss[2], n, backward ? s2 : s1);                               \
        LOAD(dtype, sp + d2 * ss[2] * es, step * ss[2], n, backward ? s1 : s2);                               \
        if (backward)                                                                                         \
          for (int64_t k = 0; k < n; ++k) {                                                                   \
            s1[k] = -s1[k];                                                                                   \
            s2[k] = -s2[k];                                                                                   \
          }                                                                                                   \
        for (int64_t h = 0; h < H; ++h) {                                                                     \
          LOAD(dtype, xp + (h * xs[2] + d1) * es, step, n, a);                                                \
          LOAD(dtype, xp + (h * xs[2] + d2) * es, step, n, b);                                                \
          for (int64_t k = 0; k < n; ++k) {                                                                   \
            o1[k] = a[k] * c1[k] - b[k] * s1[k];                                                              \
            o2[k] = b[k] * c2[k] + a[k] * s2[k];                                                              \
          }                                                                                                   \
          STORE(dtype, op + (h * os[2] + d1) * es, step, n, o1);                                              \
          STORE(dtype, op + (h * os[2] + d2) * es, step, n, o2);                                              \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }

MYOPS_ROPE_CPU_IMPL(rope_f32, float, myops_load_f32, myops_store_f32)
MYOPS_ROPE_CPU_IMPL(rope_f64, double, rope_load_f64, rope_store_f64)

/* shape [4] = (B, S, H, D); x_strides / out_strides [3] = the B, S, H strides (D stride 1); cos_strides /
 * sin_strides [3] = the B, S, D strides; in elements. Runs positions p = b * S + s in [p_begin, p_end). */
int myops_rope_cpu(void* out, const void* x, const void* cos, const void* sin, const int64_t* shape,
                   const int64_t* x_strides, const int64_t* out_strides, const int64_t* cos_strides,
                   const int64_t* sin_strides, int interleaved, int backward, int64_t p_begin, int64_t p_end,
                   int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  if (shape[3] % 2 != 0 || p_begin < 0 || p_end > shape[0] * shape[1]) return MYOPS_EARG;
  if (shape[1] <= 0 || shape[2] <= 0 || shape[3] <= 0) return MYOPS_OK;
  if (dtype == MYOPS_F64) {
    rope_f64((char*)out, (const char*)x, (const char*)cos, (const char*)sin, shape, x_strides, out_strides,
             cos_strides, sin_strides, interleaved, backward, p_begin, p_end, dtype, es);
  } else {
    rope_f32((char*)out, (const char*)x, (const char*)cos, (const char*)sin, shape, x_strides, out_strides,
             cos_strides, sin_strides, interleaved, backward, p_begin, p_end, dtype, es);
  }
  return MYOPS_OK;
}
