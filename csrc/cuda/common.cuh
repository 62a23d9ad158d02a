// common.cuh: what every CUDA kernel file shares: storage types, fp32 accumulation, dtype dispatch, the launch
// check. Plain CUDA C++: no torch headers (a kernel file rebuilds in ~2 s instead of ~50 s).
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>
#include "../myops.h"

namespace myops {

// Half types are stored as __half / __nv_bfloat16 and computed in fp32; fp64 stays fp64.
template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <class T> using acc_t = typename Acc<T>::type;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_acc(acc_t<T> v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls f(T{}) with T the storage type for a myops_dtype code; returns MYOPS_EDTYPE for anything else.
// With Only >= 0, only that dtype code is instantiated (a translation unit holding one dtype's kernels).
template <int Only = -1, class F> int dispatch_dtype(int dtype, F&& f) {
  if (Only >= 0 && dtype != Only) return MYOPS_EDTYPE;
  switch (dtype) {
    case MYOPS_F32: if constexpr (Only < 0 || Only == MYOPS_F32) return f(float{}); break;
    case MYOPS_F16: if constexpr (Only < 0 || Only == MYOPS_F16) return f(__half{}); break;
    case MYOPS_BF16: if constexpr (Only < 0 || Only == MYOPS_BF16) return f(__nv_bfloat16{}); break;
    case MYOPS_F64: if constexpr (Only < 0 || Only == MYOPS_F64) return f(double{}); break;
    default: break;
  }
  return MYOPS_EDTYPE;
}

// Every launcher ends with this: a bad launch configuration or an earlier sticky error surfaces here, at the op
// that caused it, instead of at some later unrelated call.
inline int launch_status() { return (int)cudaGetLastError(); }

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Programmatic dependent launches (Hopper and later): a kernel launched so (cudaLaunchAttributeProgrammaticStream-
// Serialization) may start while the kernel before it on the stream runs its last CTAs, so that its launch latency
// overlaps that tail; it must call pdl_wait() before it touches global memory, which returns once that kernel has
// completed and its writes are visible (at once for a kernel launched plainly). pdl_on(): the current device takes
// them and MYOPS_PDL is not 0 (read once; 0 launches every kernel plainly, for A/B runs).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// A tuning knob: environment variable `name` if it is an integer v with ok(v), else dflt (unset, empty, or anything
// else, such as "abc" or "2x"). Callers read it once per process (a function-local static).
template <class Ok> int env_knob(const char* name, int dflt, Ok ok) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return dflt;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  return *end == '\0' && v >= INT_MIN && v <= INT_MAX && ok((int)v) ? (int)v : dflt;
}

// Lets the programmatic dependent launched after this kernel start once every CTA of this one has run this (instead
// of once they have all exited): for a long kernel followed by a small dependent that waits in pdl_wait().
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
inline bool pdl_on() {
  static const bool on = [] {
    const char* e = std::getenv("MYOPS_PDL");
    return !(e && e[0] == '0' && e[1] == 0);
  }();
  static signed char takes[64] = {0};  // per device: 0 unknown, 1 yes, -1 no
  int dev = 0;
  if (!on || cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (takes[dev] == 0) {
    int major = 0;
    takes[dev] = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9
                     ? 1 : -1;
  }
  return takes[dev] > 0;
}
// Appends the programmatic-dependent-launch attribute to cfg where pdl_on(): attrs holds cfg's cfg.numAttrs
// attributes and has room for one more.
inline void add_pdl(cudaLaunchConfig_t& cfg, cudaLaunchAttribute* attrs) {
  if (!pdl_on()) return;
  attrs[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs += 1;
}

// kernel<<<grid, block, 0, stream>>>(args...) as a programmatic dependent of the kernel before it on the stream where
// pdl_on(), plainly otherwise: for kernels whose first access to global memory follows pdl_wait(). A launch error or
// an earlier sticky one is returned (launch_status).
template <class... KArgs, class... Args>
int launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  add_pdl(cfg, &attr);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  return e != cudaSuccess ? (int)e : launch_status();
}

// Multiprocessors of the current device (the caller's device guard selects it); cached per device.
inline int sm_count() {
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

// Peak DRAM bandwidth per SM of the current device, GB/s (from its memory clock and bus width; cached per device),
// or 0 if unknown. Tells an H200 (37) from an H100 (25) where a policy measured them apart.
inline double dram_gbs_per_sm() {
  static double per_sm[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0.0;
  if (per_sm[dev] == 0.0) {
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      per_sm[dev] = -1.0;
    } else {
      per_sm[dev] = 2.0 * khz * 1e3 * (bits / 8) / 1e9 / sm_count();  // (double data rate)
    }
  }
  return per_sm[dev] > 0.0 ? per_sm[dev] : 0.0;
}
// Whether the current device has over 30 GB/s of peak DRAM bandwidth per SM (the H200's 37, not the H100's 25): the
// line along which cross_entropy's warp-per-row policy and rope's heads per thread were measured apart.
inline bool dram_rich_sms() { return dram_gbs_per_sm() > 30.0; }

// 16-byte vector of VEC elements: one LDG.128 / STG.128 per thread and operand.
template <class T, int VEC> struct alignas(sizeof(T) * VEC) Vec { T v[VEC]; };

// Fast math for activations, overloaded on the accumulation type: fp32 takes the MUFU intrinsics, fp64 the IEEE
// functions.
//   exp_fast: __expf, relative error about (2 + 1.2 |x|) * 2^-24 (from rounding x * log2(e)); inf above exp(88);
//             results below 2^-126 may flush to 0.
//   div_fast: __fdividef, a reciprocal and a multiply (2 ulp) for |b| in [2^-126, 2^126]; it returns 0 for larger
//             |b|, so callers keep b below that.
__device__ __forceinline__ float exp_fast(float x) { return __expf(x); }
__device__ __forceinline__ double exp_fast(double x) { return exp(x); }
__device__ __forceinline__ float div_fast(float a, float b) { return __fdividef(a, b); }
__device__ __forceinline__ double div_fast(double a, double b) { return a / b; }

// The L2 policy of a kernel's streamed input loads (host side: l2_last): evict_last keeps the lines just read ahead
// of the output lines written beside them in L2's eviction order, so that written lines leave for HBM first;
// evict_unchanged is what a plain load does. A policy is a register operand, so one code path serves both.
// -DMYOPS_L2_HINTED_FIRST=1 (A/B, not measured yet): those loads take evict_first instead, as sum's one-pass rows
// (sum.cu) and Inductor's single reads do.
#ifndef MYOPS_L2_HINTED_FIRST
#define MYOPS_L2_HINTED_FIRST 0
#endif
struct L2Hint {
  uint64_t pol;
};
// evict_first: for a read-only stream that nothing reads again (a plain reduction's input), whose lines then leave
// L2 before the lines around them.
__device__ __forceinline__ L2Hint l2_first() {
  uint64_t a;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(a));
  return {a};
}
__device__ __forceinline__ L2Hint l2_hint(bool last) {
  uint64_t a, b;  // (no inputs: made once per kernel)
  if (MYOPS_L2_HINTED_FIRST) a = l2_first().pol;
  else asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(a));
  asm("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;" : "=l"(b));
  return {last ? a : b};
}
struct NoHint {};  // a plain load
__device__ __forceinline__ uint4 ld16(const void* p, NoHint) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 ld16(const void* p, L2Hint h) {
  uint4 q;
  asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
      : "l"(p), "l"(h.pol));
  return q;
}

// VEC elements at p (VEC > 1: one 16-byte load, p 16-byte aligned) under the L2 policy h.
template <class T, int VEC> __device__ __forceinline__ Vec<T, VEC> load_vec(const T* p, L2Hint h) {
  if constexpr (VEC > 1) {
    static_assert(sizeof(Vec<T, VEC>) == 16, "vectors are 16 bytes");
    const uint4 q = ld16(p, h);
    Vec<T, VEC> v;
    memcpy(&v, &q, 16);
    return v;
  } else {
    return Vec<T, 1>{{*p}};
  }
}

// Whether a kernel's streamed loads take the L2 evict_last policy (L2Hint), by the bytes the op reads. Taken by the
// forward kernels of the norms, softmax and log_softmax (register, staged and long-row), softmax's backward,
// cross_entropy's backward, rope's flat kernel and the elementwise kernels; not by the norms' backward (rms_norm
// bf16 [16384, 4096] forward+backward 85.6 -> 75.0% of copy with dy and x hinted) nor cross_entropy's forward (it
// only reads: no written lines to make room for). Paired runs against plain loads, % of copy (torch 2.11): H200
// forwards +2 to +4 at [16384, 4096] (rms_norm fp32 93.5 -> 97.1, softmax bf16 90.1 -> 94.2), N = 65536 and 262144,
// and at [2048 to 8192, 4096]; H100 +1 to +2. The exception: softmax fp32 N = 262144, 1.5 points slower on both
// (with the policy off as well). Inductor's reductions load with the same policy. MYOPS_L2_LAST_MB=n takes it from n
// MB read (default 0: always; a large n never).
inline bool l2_last(int64_t bytes_read) {
  static const int64_t from_mb = [] {
    const char* e = std::getenv("MYOPS_L2_LAST_MB");
    char* end = nullptr;
    const long long v = e && *e ? std::strtoll(e, &end, 10) : 0;
    return e && *e && *end == '\0' && v >= 0 ? (int64_t)v : (int64_t)0;
  }();
  return bytes_read >= (from_mb << 20);
}

}  // namespace myops

namespace myops {

template <class A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024): shuffles inside each warp, one shared
// slot per warp, then the first warp reduces the slots. Every thread gets the result. `smem` holds 32 values.
template <class A> __device__ __forceinline__ A block_sum(A v, A* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < nwarps ? smem[lane] : A{};
  return warp_sum(v);
}

}  // namespace myops
