// sum: out[m] = sum_k x[m * sM + k * sK]        x viewed as [M, K] (the registration layer moves the reduced
//      dims last and collapses them), out [M] contiguous, in x's dtype, accumulated in fp32 (fp64 for fp64).
//
// Two kernels, both writing fp32 partial sums to a workspace [splits, M] when K is split across blocks so that
// the chip fills (a full reduction, M = 1, would otherwise run on one block):
//   rows: sK == 1 (reduce along contiguous memory): a warp per row for short rows, a block per row (split) for
//         long ones; 16-byte loads when aligned; warp shuffles + one shared-memory step.
//   cols: sK != 1 (e.g. bias gradients, reduce over leading dims): 32 consecutive m per block across lanes
//         (coalesced when sM == 1), 8 k-slices across warps, combined in shared memory.
// A final pass adds the splits and converts to the output dtype.
#include "common.cuh"

namespace {
using namespace myops;

constexpr int kThreads = 256;
constexpr int64_t kWarpRowMaxK = 1024;  // rows up to this long get a warp each, 8 rows per block
constexpr int64_t kMinPerSplit = 16384; // elements per block below which splitting K costs more than it gives

struct Plan {
  bool rows;          // row kernel (sK == 1) or column kernel
  bool warp_per_row;  // row kernel: one warp per row
  int64_t splits;     // K split across this many blocks (1: write the output directly)
  int64_t gx;         // blocks along M
};

int sm_count() {
  static int count[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (count[dev] == 0) {
    int c = 0;
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || c <= 0) c = 132;
    count[dev] = c;
  }
  return count[dev];
}

Plan make_plan(int64_t M, int64_t K, int64_t sK) {
  Plan p;
  p.rows = (sK == 1 || K <= 1);
  p.warp_per_row = p.rows && K <= kWarpRowMaxK;
  p.gx = p.rows ? (p.warp_per_row ? ceil_div(M, kThreads / 32) : M) : ceil_div(M, 32);
  p.splits = 1;
  const int64_t target = 4LL * sm_count();  // blocks that keep every SM busy with a couple of waves
  if (!p.warp_per_row && p.gx < target && K > kMinPerSplit) {
    p.splits = std::min<int64_t>(ceil_div(target, p.gx), ceil_div(K, kMinPerSplit));
    p.splits = std::min<int64_t>(p.splits, 65535);
  }
  return p;
}

template <class T, int VEC> struct alignas(sizeof(T) * VEC) Vec { T v[VEC]; };

// Row kernel. Block (256): warp_per_row -> 8 rows, else one row (split) per block. grid (gx, splits).
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads) sum_rows_kernel(T* __restrict__ out,              // [M]
                                                            acc_t<T>* __restrict__ ws,        // [splits, M]
                                                            const T* __restrict__ x,          // [M, K], sK == 1
                                                            int64_t M, int64_t K, int64_t sM, bool warp_per_row) {
  using A = acc_t<T>;
  __shared__ A smem[32];
  int64_t m, k_begin, k_end;
  int lane, nthreads;
  const int64_t chunk = ceil_div(ceil_div(K, gridDim.y), VEC) * VEC;  // split boundaries stay vector-aligned
  if (warp_per_row) {
    m = (int64_t)blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
    lane = threadIdx.x & 31;
    nthreads = 32;
  } else {
    m = blockIdx.x;
    lane = threadIdx.x;
    nthreads = blockDim.x;
  }
  k_begin = (int64_t)blockIdx.y * chunk;
  k_end = std::min<int64_t>(K, k_begin + chunk);
  A acc = A(0);
  if (m < M) {
    const T* row = x + m * sM;
    int64_t k = k_begin + (int64_t)lane * VEC;
    // Four independent 16-byte loads in flight per thread before the adds that consume them.
    for (; k + (int64_t)3 * nthreads * VEC + VEC <= k_end; k += (int64_t)4 * nthreads * VEC) {
      Vec<T, VEC> v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = *reinterpret_cast<const Vec<T, VEC>*>(row + k + (int64_t)u * nthreads * VEC);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc += to_acc(v[u].v[e]);
    }
    for (; k < k_end; k += (int64_t)nthreads * VEC) {
      if (k + VEC <= k_end) {
        Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(row + k);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc += to_acc(v.v[e]);
      } else {
        for (int64_t kk = k; kk < k_end; ++kk) acc += to_acc(row[kk]);
      }
    }
  }
  if (warp_per_row) {
    acc = warp_sum(acc);
  } else {
    acc = block_sum(acc, smem);
  }
  if (m < M && lane == 0) {
    if (gridDim.y == 1) out[m] = from_acc<T>(acc);
    else ws[(int64_t)blockIdx.y * M + m] = acc;
  }
}

// Column kernel. Block (32, 8): lanes over m, warps over k. grid (ceil(M / 32), splits).
template <class T>
__global__ void __launch_bounds__(kThreads) sum_cols_kernel(T* __restrict__ out,        // [M]
                                                            acc_t<T>* __restrict__ ws,  // [splits, M]
                                                            const T* __restrict__ x,    // [M, K] strided
                                                            int64_t M, int64_t K, int64_t sM, int64_t sK) {
  using A = acc_t<T>;
  __shared__ A smem[8][33];  // +1 column: the transposed read below hits 8 different banks
  const int64_t m = (int64_t)blockIdx.x * 32 + threadIdx.x;
  const int64_t chunk = ceil_div(K, gridDim.y);
  const int64_t k_begin = (int64_t)blockIdx.y * chunk, k_end = std::min<int64_t>(K, k_begin + chunk);
  A acc[4] = {A(0), A(0), A(0), A(0)};
  if (m < M) {
    const T* col = x + m * sM;
    int64_t k = k_begin + threadIdx.y;
    for (; k + 24 < k_end; k += 32) {
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[u] += to_acc(col[(k + 8 * u) * sK]);
    }
    for (; k < k_end; k += 8) acc[0] += to_acc(col[k * sK]);
  }
  smem[threadIdx.y][threadIdx.x] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  __syncthreads();
  if (threadIdx.y == 0 && m < M) {
    A s = A(0);
#pragma unroll
    for (int w = 0; w < 8; ++w) s += smem[w][threadIdx.x];
    if (gridDim.y == 1) out[m] = from_acc<T>(s);
    else ws[(int64_t)blockIdx.y * M + m] = s;
  }
}

template <class T>
__global__ void sum_splits_kernel(T* __restrict__ out, const acc_t<T>* __restrict__ ws, int64_t M, int64_t splits) {
  const int64_t m = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  acc_t<T> s = 0;
  for (int64_t i = 0; i < splits; ++i) s += ws[i * M + m];
  out[m] = from_acc<T>(s);
}

template <class T>
int sum_typed(T* out, const T* x, int64_t M, int64_t K, int64_t sM, int64_t sK, void* workspace, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const Plan p = make_plan(M, K, sK);
  if (p.gx > 0x7fffffff) return MYOPS_EARG;
  if (p.splits > 1 && workspace == nullptr) return MYOPS_EARG;
  auto* ws = static_cast<acc_t<T>*>(workspace);
  const dim3 grid((unsigned)p.gx, (unsigned)p.splits);
  if (p.rows) {
    const bool vec = (reinterpret_cast<uintptr_t>(x) % 16 == 0) && (M == 1 || sM % VEC == 0);
    if (vec) sum_rows_kernel<T, VEC><<<grid, kThreads, 0, stream>>>(out, ws, x, M, K, sM, p.warp_per_row);
    else sum_rows_kernel<T, 1><<<grid, kThreads, 0, stream>>>(out, ws, x, M, K, sM, p.warp_per_row);
  } else {
    sum_cols_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(out, ws, x, M, K, sM, sK);
  }
  if (p.splits > 1) {
    int rc = launch_status();
    if (rc) return rc;
    sum_splits_kernel<T><<<(unsigned)ceil_div(M, 256), 256, 0, stream>>>(out, ws, M, p.splits);
  }
  return launch_status();
}
}  // namespace

// Bytes of workspace myops_sum_cuda needs for this problem on the current device (0: none).
extern "C" int64_t myops_sum_workspace_cuda(int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  (void)sM;
  const Plan p = make_plan(M, K, sK);
  if (p.splits <= 1) return 0;
  return p.splits * M * (dtype == MYOPS_F64 ? 8 : 4);
}

extern "C" int myops_sum_cuda(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype,
                              void* workspace, void* stream) {
  if (M <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return sum_typed<T>(static_cast<T*>(out), static_cast<const T*>(x), M, K, sM, sK, workspace,
                        static_cast<cudaStream_t>(stream));
  });
}
