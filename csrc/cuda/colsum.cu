// colsum: the last step of the norms' weight and bias gradients (not an op of its own).
//
//   out_k[n] = sum over r of ws[k][r][n]      ws [K][R][N] contiguous in acc_t (fp32; fp64 for fp64), K = 1 or 2
//                                             out_k [N] contiguous in the op's dtype (rounded once)
//
// The backward kernels leave one row of per-column partial sums per CTA (R = a few hundred rows). Summing them with
// two at::sum calls and two dtype conversions took 4 launches and about 19 us per layer_norm backward at
// [16384, 4096] bf16 on the H100 (the sums ran at about 0.5 TB/s); this is one launch. (The sum op's column kernel,
// sum.cu, writes its input's dtype and one strided output: it would still take a launch per k and a conversion.)
// A warp owns 32 columns of one k and, with wr - 1 other warps, strides over the rows (each warp load one 128-byte
// line, four in flight per thread); shared memory then combines the wr partial sums in a fixed order (deterministic).
// The workspace is a row per CTA or cluster of the backward. Short rows: R = 132-660 on an H200 and wr = 32 (at 8
// warps, four rounds of loads per warp took colsum 12.2 us at [65536, 1024] bf16, H200, 1 MB; 4.0 us at 32). Long
// rows: a few tens at most (a row per cluster of 4-16 CTAs), where 32 warps left most warps idle in N / 32 CTAs of
// 1024 threads: 70 us at [256, 262144] (layer_norm bf16, H200), 9.8 us now. So wr = R / 4 rounded up to a power of
// two (at most 32), and a CTA of fewer than 8 warps takes 8 / wr column groups. The sums are
// fp64, rounded once: in fp32 the partial sums' rounding broke the 2x-eager rule where a column's total cancels
// (add_rms_norm fp32 [194, 2]: dw error 2.0e-6 against eager's 6.1e-7, |dw| 0.51, R = a few hundred rows of ~1).
#include "common.cuh"

namespace {
using namespace myops;

constexpr int kMaxWarps = 32;

// Geometry: wr warps stride over the rows of each 32-column group, cg groups per CTA (cg * wr >= 8 warps).
struct ColsumGeo {
  int wr, cg;
};

inline ColsumGeo colsum_geo(int64_t R) {
  int wr = 1;  // four loads in flight per warp: a warp per 4 rows, at most 32
  while (wr < kMaxWarps && wr * 4 < R) wr *= 2;
  return {wr, wr >= 8 ? 1 : 8 / wr};
}

// V columns per lane: V = 1, or (MYOPS_COLSUM_VEC) 16-byte loads of V fp32 (or V / 2 fp64) partial sums each, V
// times fewer threads and CTAs for the same rows. Long rows leave a few rows of partial sums (R = 7 at
// [256, 262144]), so each thread at V = 1 loads about R / wr values: its launch and index work, not its bytes,
// dominate.
// H100, clean flush, two rounds, layer_norm forward+backward % of copy, V = 1 -> 4: bf16 N = 65536 83.8 / 84.0 ->
// 84.6 / 85.0, N = 262144 84.4 / 84.4 -> 85.2 / 85.2, fp32 N = 65536 92.1 / 92.0 -> 93.3 / 92.4 (session 33).
// Only where the vector grid still gives every SM a CTA: short rows leave hundreds of rows of partial sums (wr = 32,
// one column group a CTA), where V = 4 left N / 128 CTAs (32 at N = 4096) each loading 4x the bytes: rms_norm bf16
// forward+backward at [16384, 4096] 96.4 / 96.6 -> 95.5 / 95.4, layer_norm 94.8 / 94.8 -> 94.1 / 94.1, fp32 0.2-0.4
// points lower (H100, session 33; this condition itself not yet GPU-run). -DMYOPS_COLSUM_VEC=1 builds V = 1
// alone, for an A/B. Each column's sums are the same, in the same order, at every V.
#ifndef MYOPS_COLSUM_VEC
#define MYOPS_COLSUM_VEC 4
#endif
template <class A, int V> struct ColVec {
  A v[V];
};
template <class A, class T, int V>
__global__ void __launch_bounds__(kMaxWarps * 32) colsum_kernel(T* __restrict__ out0,      // [N]
                                                                 T* __restrict__ out1,      // [N] or null (K = 1)
                                                                 const A* __restrict__ ws,  // [K, R, N]
                                                                 int64_t R, int64_t N, int wr, int cg) {
  __shared__ double part[kMaxWarps][32 * V];
  pdl_wait();  // (a programmatic dependent of the backward kernel that writes ws: see below)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp % cg, rw = warp / cg;
  const int64_t n = (((int64_t)blockIdx.x * cg + g) * 32 + lane) * V;  // (N % V == 0: whole vectors)
  const A* __restrict__ src = ws + (int64_t)blockIdx.y * R * N;
  double s[4][V] = {};
  if (n < N) {
    int64_t r = rw;
    for (; r + 3 * wr < R; r += 4 * wr) {
      ColVec<A, V> x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = *reinterpret_cast<const ColVec<A, V>*>(src + (r + u * wr) * N + n);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < V; ++e) s[u][e] += x[u].v[e];
    }
    for (; r < R; r += wr) {
      const ColVec<A, V> x = *reinterpret_cast<const ColVec<A, V>*>(src + r * N + n);
#pragma unroll
      for (int e = 0; e < V; ++e) s[0][e] += x.v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) part[warp][lane * V + e] = (s[0][e] + s[1][e]) + (s[2][e] + s[3][e]);
  __syncthreads();
  if (rw == 0 && n < N) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      double t = 0.0;
      for (int j = 0; j < wr; ++j) t += part[j * cg + g][lane * V + e];
      (blockIdx.y ? out1 : out0)[n + e] = from_acc<T>(static_cast<A>(t));
    }
  }
}
}  // namespace

// colsum is a programmatic dependent launch (pdl_on(), common.cuh) of the backward kernel before it, which writes ws:
// its launch overlaps that kernel's tail. H200, bf16 forward+backward, % of copy, plain -> dependent (colsum alone):
// layer_norm N = 1024 88.3 -> 89.1, [16384, 4096] 86.6 -> 87.2, N = 768 83.7 -> 84.2; rms_norm 90.6 -> 91.3,
// 90.3 -> 91.0, 83.6 -> 84.1.
// out1 null: K = 1. ws in acc_t of dtype (the outputs' dtype).
extern "C" int myops_colsum_cuda(void* out0, void* out1, const void* ws, int64_t R, int64_t N, int dtype,
                                 void* stream) {
  if (N <= 0) return MYOPS_OK;
  if (R < 0 || ceil_div(N, (int64_t)32) > INT32_MAX) return MYOPS_EARG;
  return dispatch_dtype(dtype, [&](auto tag) -> int {
    using T = decltype(tag);
    using A = acc_t<T>;
    const ColsumGeo geo = colsum_geo(R);
    dim3 grid((unsigned)ceil_div(N, (int64_t)32 * geo.cg), out1 ? 2 : 1);
    const auto launch = [&](auto kernel) -> int {
      return launch_pdl(kernel, grid, dim3(geo.wr * geo.cg * 32), static_cast<cudaStream_t>(stream),
                        static_cast<T*>(out0), static_cast<T*>(out1), static_cast<const A*>(ws), R, N, geo.wr, geo.cg);
    };
    if constexpr (MYOPS_COLSUM_VEC > 1) {  // (16 bytes a lane: 4 fp32 or 2 fp64 columns, where N and ws allow)
      constexpr int V = (int)(16 / sizeof(A));
      const int64_t vec_ctas = ceil_div(N, (int64_t)32 * geo.cg * V);
      if (N % V == 0 && reinterpret_cast<uintptr_t>(ws) % 16 == 0 && vec_ctas >= sm_count()) {
        grid.x = (unsigned)vec_ctas;
        return launch(colsum_kernel<A, T, V>);
      }
    }
    return launch(colsum_kernel<A, T, 1>);
  });
}
