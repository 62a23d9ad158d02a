// Standalone (no torch): where cross_entropy's bf16 forward at [4096, 32000] loses to a plain read of its logits
// (session 35, H100: the bulk-copy forward kernel at 2.84 TB/s, myops sum(dim=-1) of the same logits at 3.02, Nsight
// Compute). Each kernel reads a bf16 [M, C] matrix (C a multiple of 8) row by row, one 256-thread CTA per row, and
// writes one float per row:
//   ldg sum / ldg fold:    4 16-byte loads in flight a thread (sum's row kernel), then the row's sum, or
//                          cross_entropy's fold (a running max on packed bf16 pairs, 2^(x log2 e - c) summed in fp32);
//   ldg fold + CE:         the fold with cross_entropy's target and logit read by thread 0 first (as the op does) or
//                          after the row's reductions, and its stats and loss written;
//   bulk sum / bulk fold:  thread 0 copies the row into shared memory by cp.async.bulk, one 16 KB group per mbarrier,
//                          and the threads take each group as it lands (cross_entropy's bulk_fwd_kernel without its
//                          target and loss); the shared memory each CTA asks for sets 1, 2 or 3 CTAs an SM;
//   bulk fold + CE:        the same with cross_entropy's target read (thread 0: the target, then its logit, from
//                          global memory) and its stats and loss written.
// Session 36, H100: ldg sum 98.7%, ldg fold 96.7%, bulk sum 99.8% (2 CTAs an SM), bulk fold 97.2% (2), 96.5% (3),
// where the op's row kernel (reduction "none") ran at about 92%; bulk fold + CE 96.5-96.7%; cross_entropy's own
// bulk_fwd_kernel in this harness 94.8-94.9% (uniform or normal logits), the op ("mean", bench) about 92.5%.
// Transport (ldg against bulk at the plain sum) and compute (sum against fold) come apart.
// Session 45 (for the H200, where the op's bf16 forward at [4096, 32000] takes a warp per row and stops at 88-89% of
// copy, 91.4 with its exps removed, while sum(dim=-1) reads the same logits at 99.3):
//   warp sum / warp fold:  a warp per task, 4 16-byte loads in flight a lane, 8 warps a CTA, 4 CTAs an SM; a task is
//                          a row, or with split S one of S consecutive parts of one (S tasks a row: more, shorter
//                          tasks, written as partial results), tasks in row order (a warp's neighbours read the same
//                          rows), or "by part" (task t: row t % M, part t / M: the chip reads part 0 of every row
//                          first);
//   real CE: warp / 64 / CTA: cross_entropy's stream_fwd_kernel as its launcher runs it, SUB = 32 / 64 / a CTA a row,
//                          alone (loss per row and stats); also at 6 and 8 CTAs an SM by launch bounds (they spill);
//   lean CE:               a candidate from cross_entropy.cu's pieces: a CTA a row, no row loop, the target read after
//                          the row's reductions (lean_fwd_kernel), at 4 / 6 / 8 CTAs an SM (52 registers; 40 with one
//                          spill reload in the fold's loop; 32 with more);
//   real CE op none / mean: myops_cross_entropy_cuda itself (no target check), reduction "none" (the row kernel) and
//                          "mean" (the row kernel, then the loss's reduction kernel as a programmatic dependent).
// Timed with CUDA events
// behind a 256 MB L2 flush by reading (median of 50), as % of a 1 GiB device-to-device cudaMemcpy timed in the run.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/bulk_read benchmarks/bulk_read.cu && /tmp/bulk_read [M C]
// (with cross_entropy's own kernel: add --expt-relaxed-constexpr -Icsrc/cuda -Icsrc)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_timer.cuh"

// With -Icsrc/cuda -Icsrc (and --expt-relaxed-constexpr), cross_entropy's own bulk_fwd_kernel joins the runs.
#if __has_include("cross_entropy.cu")
#include "cross_entropy.cu"
#define HAVE_REAL_CE 1
#endif

namespace probe {  // (apart from cross_entropy.cu's names, where it is included)
constexpr int NT = 256, U = 4;  // threads a CTA, 16-byte vectors a thread per pass (a pass: 8192 bf16)
constexpr float kLog2e = 1.4426950408889634f;
constexpr uint32_t kNegInf2 = 0xff80ff80u;  // two bf16 -inf

__device__ __forceinline__ float ex2(float t) {
  float p;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(t));
  return p;
}
__device__ __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// A thread's running state: the plain sum in s (FOLD false), or (m, c = m log2 e, s = sum of 2^(x log2 e - c)).
struct State {
  float m = -INFINITY, c = 0.f, s = 0.f;
};
// Takes one pass of U vectors (invalid ones hold -inf pairs for the fold, zeros for the sum).
template <bool FOLD> __device__ __forceinline__ void take(const uint4 (&q)[U], State& st) {
  if constexpr (!FOLD) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t w[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) st.s += lo(w[i]) + hi(w[i]);
    }
  } else {
    __nv_bfloat162 m2;
    uint32_t ninf = kNegInf2;
    memcpy(&m2, &ninf, 4);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t w[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        __nv_bfloat162 b;
        memcpy(&b, &w[i], 4);
        m2 = __hmax2(m2, b);
      }
    }
    uint32_t mw;
    memcpy(&mw, &m2, 4);
    const float mx = fmaxf(st.m, fmaxf(lo(mw), hi(mw)));
    if (mx > st.m) {
      const float cn = mx * kLog2e;
      st.s = st.m == -INFINITY ? st.s : st.s * ex2(st.c - cn);
      st.c = cn;
      st.m = mx;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t w[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) st.s += ex2(fmaf(lo(w[i]), kLog2e, -st.c)) + ex2(fmaf(hi(w[i]), kLog2e, -st.c));
    }
  }
}
__device__ float block_reduce(float v, bool is_max, float* sh) {
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    const float x = __shfl_xor_sync(~0u, v, o);
    v = is_max ? fmaxf(v, x) : v + x;
  }
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  v = sh[0];
  for (int w = 1; w < NT / 32; ++w) v = is_max ? fmaxf(v, sh[w]) : v + sh[w];
  __syncthreads();
  return v;
}
// The row's result from every thread's state: its sum, or its log-sum-exp.
// CE (with FOLD): also cross_entropy's row output, from thread 0's target logit xt: the stats (max, log sum exp)
// in out[M + 2 r], out[M + 2 r + 1] and the loss in out[r].
template <bool FOLD, bool CE = false> __device__ void finish(State st, float* out, float* sh, float xt = 0.f) {
  if constexpr (!FOLD) {
    const float s = block_reduce(st.s, false, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
  } else {
    const float m = block_reduce(st.m, true, sh);
    const float s = block_reduce(st.m == -INFINITY ? 0.f : st.s * ex2(st.c - m * kLog2e), false, sh);
    if (threadIdx.x == 0) {
      const float ls = logf(s);
      if constexpr (CE) {
        out[gridDim.x + 2 * blockIdx.x] = m;
        out[gridDim.x + 2 * blockIdx.x + 1] = ls;
        out[blockIdx.x] = ls + m - xt;
      } else {
        out[blockIdx.x] = m + ls;
      }
    }
  }
}

// CE (with FOLD): cross_entropy's row output too (finish), thread 0 reading the row's target and then its logit
// from global memory at the start (CE 1: as the op's RowTarget) or after the row's reductions (CE 2).
template <bool FOLD, int CE = 0>
__global__ void __launch_bounds__(NT) ldg_kernel(float* __restrict__ out, const uint4* __restrict__ x, int nv,
                                                 const int64_t* __restrict__ target = nullptr) {
  __shared__ float sh[NT / 32];
  const uint4* row = x + (int64_t)blockIdx.x * nv;
  const auto logit = [&] {
    const int64_t t = target[blockIdx.x];
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[t]);
  };
  float xt = 0.f;
  if (CE == 1 && threadIdx.x == 0) xt = logit();
  const uint4 fill = FOLD ? make_uint4(kNegInf2, kNegInf2, kNegInf2, kNegInf2) : make_uint4(0, 0, 0, 0);
  State st;
  for (int j0 = 0; j0 < nv; j0 += NT * U) {
    uint4 q[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * NT + threadIdx.x;
      q[u] = j < nv ? row[j] : fill;
    }
    take<FOLD>(q, st);
  }
  if constexpr (CE == 2) {  // (the reductions of finish first: thread 0 reads after them)
    const float m = block_reduce(st.m, true, sh);
    const float sum = block_reduce(st.m == -INFINITY ? 0.f : st.s * ex2(st.c - m * kLog2e), false, sh);
    if (threadIdx.x == 0) {
      const float ls = logf(sum);
      out[gridDim.x + 2 * blockIdx.x] = m;
      out[gridDim.x + 2 * blockIdx.x + 1] = ls;
      out[blockIdx.x] = ls + m - logit();
    }
  } else {
    finish<FOLD, CE == 1>(st, out, sh, xt);
  }
}

// A warp per task (see the header): task t's part of its row, U vectors a lane at a time, folded as take does; lane 0
// writes the task's sum, or its log-sum-exp, to out[t].
template <bool FOLD, bool BY_ROW>
__global__ void __launch_bounds__(NT, 4) warp_kernel(float* __restrict__ out, const uint4* __restrict__ x, int nv,
                                                     int M, int split) {
  const int64_t task = (int64_t)blockIdx.x * (NT / 32) + threadIdx.x / 32;
  if (task >= (int64_t)M * split) return;
  const int64_t row = BY_ROW ? task / split : task % M;
  const int part = (int)(BY_ROW ? task % split : task / M), lane = threadIdx.x & 31;
  const int v0 = (int)((int64_t)nv * part / split), v1 = (int)((int64_t)nv * (part + 1) / split);
  const uint4* xr = x + row * nv;
  const uint4 fill = FOLD ? make_uint4(kNegInf2, kNegInf2, kNegInf2, kNegInf2) : make_uint4(0, 0, 0, 0);
  State st;
  for (int j0 = v0; j0 < v1; j0 += 32 * U) {
    uint4 q[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * 32 + lane;
      q[u] = j < v1 ? xr[j] : fill;
    }
    take<FOLD>(q, st);
  }
  float m = st.m;
#pragma unroll
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  float v = FOLD ? (st.m == -INFINITY ? 0.f : st.s * ex2(st.c - m * kLog2e)) : st.s;
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  if (lane == 0) out[task] = FOLD ? m + logf(v) : v;
}

__device__ __forceinline__ unsigned saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// CE: as cross_entropy's bulk_fwd_kernel around the fold: thread 0 reads the row's target and then its logit from
// global memory (two dependent loads) after the copies are issued, and the row writes stats and loss (finish).
template <bool FOLD, bool CE = false>
__global__ void __launch_bounds__(NT) bulk_kernel(float* __restrict__ out, const uint4* __restrict__ x, int nv,
                                                  const int64_t* __restrict__ target = nullptr) {
  extern __shared__ __align__(128) uint4 buf[];  // [nv]
  __shared__ __align__(8) uint64_t bars[16];
  __shared__ float sh[NT / 32];
  const int vg = NT * U, ng = (nv + vg - 1) / vg;  // vectors a group, groups
  const uint4* row = x + (int64_t)blockIdx.x * nv;
  if (threadIdx.x == 0) {
    for (int g = 0; g < ng; ++g) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&bars[g])));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int g = 0; g < ng; ++g) {
      const unsigned bytes = (unsigned)(min(vg, nv - g * vg) * 16), bar = saddr(&bars[g]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       saddr(buf + g * vg)),
                   "l"(row + g * vg), "r"(bytes), "r"(bar)
                   : "memory");
    }
  }
  __syncthreads();
  float xt = 0.f;
  if (CE && threadIdx.x == 0) {
    const int64_t tg = target[blockIdx.x];
    xt = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[tg]);
  }
  const uint4 fill = FOLD ? make_uint4(kNegInf2, kNegInf2, kNegInf2, kNegInf2) : make_uint4(0, 0, 0, 0);
  State st;
  for (int g = 0; g < ng; ++g) {
    asm volatile(
        "{\n\t.reg .pred P;\nBR_WAIT:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], 0;\n\t"
        "@!P bra BR_WAIT;\n}" ::"r"(saddr(&bars[g]))
        : "memory");
    uint4 q[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = g * vg + u * NT + threadIdx.x;
      q[u] = j < nv ? buf[j] : fill;
    }
    take<FOLD>(q, st);
  }
  finish<FOLD, CE>(st, out, sh, xt);
}

using probe_timer::hash32;
// Pseudo-random logits: uniform in about [-8, 8], or (normal) standard normal (Box-Muller), as the op's benchmark.
__global__ void fill_kernel(__nv_bfloat16* x, int64_t n, bool normal) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const uint32_t h = hash32((uint32_t)i);
    if (!normal) {
      x[i] = __float2bfloat16((float)(h & 0xffff) / 4096.f - 8.f);
    } else {
      const float u1 = ((h >> 8) + 1) * 0x1p-24f, u2 = (hash32(h ^ 0x9e3779b9u) >> 8) * 0x1p-24f;
      x[i] = __float2bfloat16(sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
    }
  }
}
}  // namespace probe

#ifdef HAVE_REAL_CE
// cross_entropy's bulk_fwd_kernel (bf16, no smoothing) as it was before reduce_ms (the pair in one pass of
// OnlineSoftmaxOp through rr::RowReduce), with one part changed, to find its cost against the probe's fold + CE:
// VAR 0 as it was; 1 without the out-of-range redo path; 2 the (max, sum) pair reduced as the probe does (a block
// maximum, then a block sum of the rescaled sums: what reduce_ms took from this); 3 without the target (thread 0
// reads nothing).
template <int VAR>
__global__ void __launch_bounds__(kStreamThreads, 2) real_variant(float* __restrict__ loss, float* __restrict__ stats,
                                                                  const __nv_bfloat16* __restrict__ x, int64_t xs,
                                                                  const int64_t* __restrict__ target, int C) {
  using T = __nv_bfloat16;
  using A = float;
  constexpr int U = 4, THREADS = kStreamThreads, G = THREADS * U * 8;
  extern __shared__ __align__(128) unsigned char bulk_row[];
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  __shared__ __align__(8) uint64_t bars[kBulkGroups];
  __shared__ float sh[THREADS / 32];
  const int64_t r = blockIdx.x;
  const int ng = (C + G - 1) / G;
  const T* __restrict__ xr = x + r * xs;
  if (threadIdx.x == 0) {
    for (int g = 0; g < ng; ++g) rp::mbar_init(rr::smem_addr(&bars[g]), 1);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int g = 0; g < ng; ++g) {
      const unsigned bar = rr::smem_addr(&bars[g]), bytes = (unsigned)(min(G, C - g * G) * 2);
      rp::mbar_expect(bar, bytes);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       rr::smem_addr(bulk_row + (size_t)g * G * 2)),
                   "l"(xr + (int64_t)g * G), "r"(bytes), "r"(bar)
                   : "memory");
    }
  }
  __syncthreads();
  rr::RowReduce red(red_buf, THREADS);
  const RowTarget<T> rt(VAR != 3 && threadIdx.x == 0, target, r, 1, xr, C, -100);
  const auto landed = [&](int g) { rr::mbar_wait(rr::smem_addr(&bars[g]), 0); };
  const T* row = reinterpret_cast<const T*>(bulk_row);
  const Pair<A> none{neg_inf<A>(), A(0)};
  A sx;
  Pair<A> ms;
  if constexpr (VAR == 2) {
    const Pair<A> p = row_share<T, false, true, U>(row, C, threadIdx.x, THREADS, sx, landed);
    const float m = probe::block_reduce(p.a, true, sh);
    ms = {m, probe::block_reduce(p.a == neg_inf<A>() ? 0.f : p.b * exp_of<T>(p.a - m), false, sh)};
  } else {
    ms = red(row_share<T, false, true, U>(row, C, threadIdx.x, THREADS, sx, landed), OnlineSoftmaxOp<T>{}, none);
    if (VAR != 1 && !(ms.b < INFINITY))
      ms = red(row_share<T, false, false, U>(row, C, threadIdx.x, THREADS, sx, landed), OnlineSoftmaxOp<T>{}, none);
  }
  if (threadIdx.x == 0) finish_row<T, false>(loss, stats, r, ms, A(0), rt, C, -100, 0.f);
}
#endif

// A lean candidate for cross_entropy's 16-bit forward, from cross_entropy.cu's own pieces (row_stats, finish_row):
// a CTA a row and no row loop (grid = M), the row's target and logit read after its reductions (RowTarget at the
// start keeps them live through the fold), no smoothing. MINB: the CTAs an SM its launch bounds ask for.
template <class T, int MINB>
__global__ void __launch_bounds__(kStreamThreads, MINB) lean_fwd_kernel(float* __restrict__ loss,          // [M]
                                                                        float* __restrict__ stats,         // [M, 2]
                                                                        const T* __restrict__ x, int64_t xs,  // [M, C]
                                                                        const int64_t* __restrict__ target,   // [M]
                                                                        int C, int64_t ignore_index) {
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  rr::RowReduce red(red_buf, kStreamThreads);
  const int64_t r = blockIdx.x;
  const T* __restrict__ xr = x + r * xs;
  float sum_x;
  const Pair<float> ms = row_stats<T, false, 4>(red, xr, C, (int)threadIdx.x, kStreamThreads, sum_x, [](int) {});
  if (threadIdx.x == 0) {
    const RowTarget<T> rt(true, target, r, 1, xr, C, ignore_index);
    finish_row<T, false>(loss, stats, r, ms, sum_x, rt, C, ignore_index, 0.f);
  }
}

int main(int argc, char** argv) {
  using namespace probe;
  const int M = argc > 1 ? atoi(argv[1]) : 4096, C = argc > 2 ? atoi(argv[2]) : 32000;
  if (C % 8 != 0 || C * 2 > 200 * 1024) {
    printf("C must be a multiple of 8, at most 100 KB of bf16\n");
    return 1;
  }
  const int nv = C / 8;
  const int64_t n = (int64_t)M * C;
  __nv_bfloat16* x;
  float* out;
  CK(cudaMalloc(&x, n * 2));
  CK(cudaMalloc(&out, M * 12));  // (CE: loss [M], then stats [M, 2])
  int64_t* target;
  CK(cudaMalloc(&target, M * 8));
  {
    std::vector<int64_t> ht(M);
    for (int r = 0; r < M; ++r) ht[r] = (int64_t)(((uint64_t)r * 2654435761u) % (uint64_t)C);
    CK(cudaMemcpy(target, ht.data(), M * 8, cudaMemcpyHostToDevice));
  }
  fill_kernel<<<1024, 256>>>(x, n, false);
  CK(cudaGetLastError());
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const probe_timer::Timer timer;
  const double copy_gbs = timer.copy_gbs();
  printf("%s, [%d, %d] bf16 (%.1f MB), 1 GiB copy %.1f GB/s\n", prop.name, M, C, n * 2 / 1e6, copy_gbs);
  const auto report = [&](const char* name, float us) {
    const double gbs = n * 2 / us / 1e3;
    printf("%-28s %8.1f us %8.1f GB/s %6.1f%% of copy\n", name, us, gbs, gbs / copy_gbs * 100);
  };
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  report("ldg sum", timer.median_us([&] { ldg_kernel<false><<<M, NT>>>(out, xv, nv); }));
  report("ldg fold", timer.median_us([&] { ldg_kernel<true><<<M, NT>>>(out, xv, nv); }));
  report("ldg fold + CE, target first", timer.median_us([&] { ldg_kernel<true, 1><<<M, NT>>>(out, xv, nv, target); }));
  report("ldg fold + CE, target last", timer.median_us([&] { ldg_kernel<true, 2><<<M, NT>>>(out, xv, nv, target); }));
  float* parts;  // (the warp kernels' partial results: M * 8 at most)
  CK(cudaMalloc(&parts, (size_t)M * 8 * 4));
  for (int split = 1; split <= 8; split *= 2) {
    const unsigned grid = (unsigned)(((int64_t)M * split + NT / 32 - 1) / (NT / 32));
    char name[64];
    snprintf(name, sizeof name, "warp sum, split %d", split);
    report(name, timer.median_us([&] { warp_kernel<false, true><<<grid, NT>>>(parts, xv, nv, M, split); }));
    snprintf(name, sizeof name, "warp fold, split %d", split);
    report(name, timer.median_us([&] { warp_kernel<true, true><<<grid, NT>>>(parts, xv, nv, M, split); }));
    if (split == 1) continue;
    snprintf(name, sizeof name, "warp fold, split %d by part", split);
    report(name, timer.median_us([&] { warp_kernel<true, false><<<grid, NT>>>(parts, xv, nv, M, split); }));
  }
  CK(cudaGetLastError());
  const int row_bytes = nv * 16;
  CK(cudaFuncSetAttribute(bulk_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CK(cudaFuncSetAttribute(bulk_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CK(cudaFuncSetAttribute(bulk_kernel<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  for (int per_sm = 1; per_sm <= 3; ++per_sm) {
    // the dynamic shared memory that leaves room for per_sm CTAs an SM and no more (about 227 KB an SM)
    const int smem = std::max(row_bytes, per_sm == 3 ? row_bytes : (int)(220 * 1024 / (per_sm + 1)) + 1024);
    int fit = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, bulk_kernel<true>, NT, smem));
    char name[64];
    snprintf(name, sizeof name, "bulk sum, %d CTAs/SM", fit);
    report(name, timer.median_us([&] { bulk_kernel<false><<<M, NT, smem>>>(out, xv, nv); }));
    snprintf(name, sizeof name, "bulk fold, %d CTAs/SM", fit);
    report(name, timer.median_us([&] { bulk_kernel<true><<<M, NT, smem>>>(out, xv, nv); }));
    snprintf(name, sizeof name, "bulk fold + CE, %d CTAs/SM", fit);
    report(name, timer.median_us([&] { bulk_kernel<true, true><<<M, NT, smem>>>(out, xv, nv, target); }));
  }
#ifdef HAVE_REAL_CE
  {  // cross_entropy's kernel as its launcher runs it (2 CTAs an SM), uniform then normal logits; the probe's fold too
    const int smem = std::max(C * 2, kBulkSmemFloor);
    const auto real = bulk_fwd_kernel<__nv_bfloat16, false>;
    CK(cudaFuncSetAttribute(real, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    float* stats = out + M;
    for (int normal = 0; normal < 2; ++normal) {
      if (normal) {
        fill_kernel<<<1024, 256>>>(x, n, true);
        CK(cudaGetLastError());
      }
      report(normal ? "real CE kernel, normal" : "real CE kernel, uniform",
             timer.median_us([&] { real<<<M, kStreamThreads, smem>>>(out, stats, x, C, target, 1, C, -100, 0.f); }));
      report(normal ? "bulk fold + CE, normal" : "bulk fold + CE, uniform",
             timer.median_us([&] { bulk_kernel<true, true><<<M, NT, smem>>>(out, xv, nv, target); }));
    }
    const auto variant = [&](const char* name, auto kernel) {
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      report(name, timer.median_us([&] { kernel<<<M, kStreamThreads, smem>>>(out, stats, x, C, target, C); }));
    };
    {  // the stream kernel as the launcher runs it, alone, then the op (no target check) as it runs
      using T = __nv_bfloat16;
      const auto stream = [&](const char* name, auto kernel, int rows) {
        const unsigned grid = (unsigned)((M + rows - 1) / rows);
        report(name, timer.median_us([&] {
          kernel<<<grid, kStreamThreads>>>(out, stats, x, C, target, 1, M, C, -100, 0.f, kStreamThreads / rows);
        }));
        CK(cudaGetLastError());
      };
      stream("real CE: warp a row", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 32>, 8);
      stream("real CE: 64 threads a row", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 64>, 4);
      stream("real CE: a CTA a row", stream_fwd_kernel<T, false, false>, 1);
      const auto lean = [&](const char* name, auto kernel) {
        report(name, timer.median_us([&] { kernel<<<M, kStreamThreads>>>(out, stats, x, C, target, C, -100); }));
        CK(cudaGetLastError());
      };
      lean("lean CE: a CTA a row, 4/SM", lean_fwd_kernel<T, 4>);
      lean("lean CE: a CTA a row, 6/SM", lean_fwd_kernel<T, 6>);
      lean("lean CE: a CTA a row, 8/SM", lean_fwd_kernel<T, 8>);
      // (more CTAs an SM by launch bounds: ptxas spills; session 46, H200, all slower)
      stream("real CE: warp a row, 6/SM", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 32, 6>, 8);
      stream("real CE: warp a row, 8/SM", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 32, 8>, 8);
      stream("real CE: 64 a row, 6/SM", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 64, 6>, 4);
      stream("real CE: 64 a row, 8/SM", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 64, 8>, 4);
      stream("real CE: CTA a row, 6/SM", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 0, 6>, 1);
      stream("real CE: CTA a row, 8/SM", stream_fwd_kernel<T, false, false, 4, kStreamThreads, 0, 8>, 1);
    }
    variant("real: one-pass pair", real_variant<0>);
    variant("real: no redo path", real_variant<1>);
    variant("real: probe's reductions", real_variant<2>);
    variant("real: no target", real_variant<3>);
    {  // the op last (a failed launch ends the run)
      void* loss;
      CK(cudaMalloc(&loss, 4));
      int64_t bad = 0;
      const myops_operand xo{x, C, 1};
      for (int mean = 0; mean < 2; ++mean)
        report(mean ? "real CE op, mean" : "real CE op, none", timer.median_us([&] {
                 CK(myops_cross_entropy_cuda(mean ? loss : nullptr, 1, out, stats, nullptr, 0, &bad, xo, target, 1, M,
                                             C, -100, 0.0, MYOPS_BF16, nullptr));
               }));
      CK(cudaFree(loss));
    }
    fill_kernel<<<1024, 256>>>(x, n, false);
    CK(cudaGetLastError());
  }
#endif
  // a check of the fold against the host, row 0 (log-sum-exp)
  bulk_kernel<true><<<M, NT, row_bytes>>>(out, xv, nv);
  CK(cudaGetLastError());
  std::vector<__nv_bfloat16> h(C);
  CK(cudaMemcpy(h.data(), x, C * 2, cudaMemcpyDeviceToHost));
  double mx = -INFINITY, s = 0;
  for (int j = 0; j < C; ++j) mx = std::max(mx, (double)__bfloat162float(h[j]));
  for (int j = 0; j < C; ++j) s += std::exp((double)__bfloat162float(h[j]) - mx);
  float got;
  CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
  printf("row 0 log-sum-exp: %.6f (host %.6f)\n", got, mx + std::log(s));
  return 0;
}
