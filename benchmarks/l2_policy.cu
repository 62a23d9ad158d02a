// Standalone (no torch) A/B of load and store cache policies on an rms_norm-shaped fp32 forward over [M, N] (default
// 16384 x 4096): one row per CTA of NT threads with V 16-byte vectors each, the row kept in registers or re-read
// (Inductor's looped reduction), under each PTX load policy; a copy kernel under the same policies; a read-only
// row reduction; an L2-reuse probe run after the kernel (does an evict_last stream leave the next kernel less L2?).
// Times with CUDA events behind a 256 MB L2 flush (median of 60), as % of a 1 GiB cudaMemcpy measured in the run.
// This is where the row kernels' L2 evict_last policy came from (regrow.cuh, l2_last).
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/l2_policy benchmarks/l2_policy.cu && /tmp/l2_policy [M N [padMB [short]]]
// padMB: a gap between x and y (checks that the result is not an address-aliasing artifact); short: fewer variants.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cstdint>

#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ uint64_t pol_last() { uint64_t p; asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint64_t pol_first() { uint64_t p; asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint64_t pol_normal() { uint64_t p; asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint64_t pol_frac(float f) { uint64_t p; asm("createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %0, %1;" : "=l"(p) : "f"(f)); return p; }
__device__ __forceinline__ uint64_t pol_unch() { uint64_t p; asm("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;" : "=l"(p)); return p; }
template <int L1>  // load policy, see names[] in main
__device__ __forceinline__ float4 ld4(const float* p) {
  float4 v;
#define LDA(INSN, ...) asm(INSN " {%0,%1,%2,%3}, [%4]" __VA_ARGS__ ";" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)
  if constexpr (L1 == 0) v = *reinterpret_cast<const float4*>(p);
  else if constexpr (L1 == 1) LDA("ld.global.L1::evict_last.L2::cache_hint.v4.f32", ", %5"), "l"(pol_last()));
  else if constexpr (L1 == 2) LDA("ld.global.L1::evict_first.L2::cache_hint.v4.f32", ", %5"), "l"(pol_first()));
  else if constexpr (L1 == 3) LDA("ld.global.L1::no_allocate.v4.f32"));
  else if constexpr (L1 == 4) LDA("ld.global.L1::evict_last.v4.f32"));
  else if constexpr (L1 == 5) LDA("ld.global.L2::cache_hint.v4.f32", ", %5"), "l"(pol_last()));
  else if constexpr (L1 == 6) LDA("ld.global.L2::cache_hint.v4.f32", ", %5"), "l"(pol_first()));
  else if constexpr (L1 == 7) LDA("ld.global.nc.v4.f32"));
  else if constexpr (L1 == 8) LDA("ld.global.L2::256B.v4.f32"));
  else if constexpr (L1 == 9) LDA("ld.global.L1::evict_first.v4.f32"));
  else if constexpr (L1 == 11) LDA("ld.global.L2::cache_hint.v4.f32", ", %5"), "l"(pol_frac(0.5f)));
  else if constexpr (L1 == 12) LDA("ld.global.L2::cache_hint.v4.f32", ", %5"), "l"(pol_frac(0.25f)));
  else if constexpr (L1 == 13) LDA("ld.global.L2::cache_hint.v4.f32", ", %5"), "l"(pol_unch()));
  else if constexpr (L1 == 10) LDA("ld.global.L1::evict_normal.L2::cache_hint.v4.f32", ", %5"), "l"(pol_normal()));
#undef LDA
  return v;
}
template <int ST> __device__ __forceinline__ void st4(float* p, float4 v) {
  if constexpr (ST == 0) *reinterpret_cast<float4*>(p) = v;
  else if constexpr (ST == 1) asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
  else if constexpr (ST == 2) asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1,%2,%3,%4}, %5;" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(pol_first()) : "memory");
  else if constexpr (ST == 3) asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1,%2,%3,%4}, %5;" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(pol_last()) : "memory");
  else if constexpr (ST == 4) asm volatile("st.global.L1::no_allocate.v4.f32 [%0], {%1,%2,%3,%4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
template <int L1, int ST>
__global__ void copyh_kernel(float* __restrict__ d, const float* __restrict__ s, int64_t n) {
  for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 4; i < n; i += (int64_t)gridDim.x * blockDim.x * 4) st4<ST>(d + i, ld4<L1>(s + i));
}

template <int NT> __device__ __forceinline__ float block_sum(float v, float* sh) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  constexpr int W = NT / 32;
  if (W == 1) return v;
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();  // sh reused across rows
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < W ? sh[l] : 0.f;
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

// One row per CTA (ROWS rows per CTA in sequence), NT threads, V float4 per thread (NT * V * 4 == N).
// RELOAD: pass 2 re-reads x with policy L2P (else keeps it in registers); first pass with L1P.
template <int NT, int V, bool RELOAD, int L1P, int L2P, int ST, int MINB>
__global__ void __launch_bounds__(NT, MINB) rms_kernel(float* __restrict__ y, const float* __restrict__ x,
                                                      const float* __restrict__ w, int64_t M, int N, float eps) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const float* xr = x + r * N;
    float4 v[V];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = ld4<L1P>(xr + (i * NT + threadIdx.x) * 4);
#pragma unroll
    for (int i = 0; i < V; ++i) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    ss = block_sum<NT>(ss, sh);
    const float k = rsqrtf(ss / N + eps);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = (i * NT + threadIdx.x) * 4;
      float4 a = RELOAD ? ld4<L2P>(xr + c) : v[i];
      const float4 b = ld4<1>(w + c);
      a.x = a.x * k * b.x, a.y = a.y * k * b.y, a.z = a.z * k * b.z, a.w = a.w * k * b.w;
      st4<ST>(y + r * N + c, a);
    }
  }
}

template <int NT, int V, int L1P>
__global__ void __launch_bounds__(NT) rowsum_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t M, int N) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  float4 v[V];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = ld4<L1P>(x + r * N + (i * NT + threadIdx.x) * 4);
#pragma unroll
  for (int i = 0; i < V; ++i) ss += __expf(v[i].x) + __expf(v[i].y) + __expf(v[i].z) + __expf(v[i].w);
  ss = block_sum<NT>(ss, sh);
  if (threadIdx.x == 0) out[r] = ss;
}
// Reads a 24 MB buffer `reps` times (L2-resident after the first if the L2 lets it stay).
__global__ void probe_kernel(float* __restrict__ out, const float4* __restrict__ b, int64_t n, int reps) {
  float s = 0.f;
  for (int k = 0; k < reps; ++k)
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
      const float4 v = b[i];
      s += v.x + v.y + v.z + v.w;
    }
  if (s == 12345.f) out[0] = s;
}
__global__ void copy_kernel(float4* __restrict__ d, const float4* __restrict__ s, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) d[i] = s[i];
}
__global__ void sleep_kernel(int64_t ns) { for (int64_t t = 0; t < ns; t += 1000) __nanosleep(1000); }

static float* flushbuf;
static bool g_flush = true;
template <class F> float time_us(F f, int R = 60) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int i = 0; i < R + 5; ++i) {
    if (g_flush) CK(cudaMemsetAsync(flushbuf, i, 256 << 20));
    sleep_kernel<<<1, 1>>>(200000);
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 5) ts.push_back(ms * 1000);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? atoll(argv[1]) : 16384;
  const int N = argc > 2 ? atoi(argv[2]) : 4096;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaMalloc(&flushbuf, 256 << 20));
  const size_t G = 1ull << 30;
  void *s, *d;
  CK(cudaMalloc(&s, G));
  CK(cudaMalloc(&d, G));
  CK(cudaMemset(s, 0, G));
  const float copy_us = time_us([&] { CK(cudaMemcpyAsync(d, s, G, cudaMemcpyDeviceToDevice)); });
  const double copy_bw = 2.0 * G / copy_us / 1e3;
  printf("copy 1GiB: %.1f us, %.1f GB/s\n", copy_us, copy_bw);
  const size_t bytes = (size_t)M * N * 4;
  float *x, *y, *w;
  const size_t pad = (argc > 3 ? atoll(argv[3]) : 0) << 20;
  const bool shortrun = argc > 4;
  CK(cudaMalloc(&x, 2 * bytes + pad));
  y = x + (bytes + pad) / 4;
  CK(cudaMalloc(&w, N * 4));
  std::vector<float> hx((size_t)M * N), hw(N);
  uint64_t st = 88172645463325252ull;
  auto rnd = [&] { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return ((st >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; };
  for (auto& v : hx) v = (float)rnd();
  for (auto& v : hw) v = (float)rnd();
  CK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(w, hw.data(), N * 4, cudaMemcpyHostToDevice));
  // reference rows
  std::vector<float> ref(4 * (size_t)N);
  for (int r = 0; r < 4; ++r) {
    const int64_t row = r * (M / 4) + 3;
    double ss = 0;
    for (int c = 0; c < N; ++c) ss += (double)hx[row * N + c] * hx[row * N + c];
    const double k = 1 / sqrt(ss / N + 1e-6);
    for (int c = 0; c < N; ++c) ref[r * N + c] = (float)(hx[row * N + c] * k * hw[c]);
  }
  auto report = [&](const char* name, float us) {
    std::vector<float> out(N);
    double err = 0;
    for (int r = 0; r < 4; ++r) {
      const int64_t row = r * (M / 4) + 3;
      CK(cudaMemcpy(out.data(), y + row * N, N * 4, cudaMemcpyDeviceToHost));
      for (int c = 0; c < N; ++c) err = std::max(err, (double)fabsf(out[c] - ref[r * N + c]));
    }
    printf("%-34s %8.1f us %7.1f GB/s %6.1f %% copy  maxerr %.2g\n", name, us, 2.0 * bytes / us / 1e3,
           100.0 * 2.0 * bytes / us / 1e3 / copy_bw, err);
  };
  {
    const float us = time_us([&] { copy_kernel<<<sms * 8, 256>>>((float4*)y, (const float4*)x, (int64_t)M * N / 4); });
    printf("%-34s %8.1f us %7.1f GB/s %6.1f %% copy\n", "copy kernel (same bytes)", us, 2.0 * bytes / us / 1e3,
           100.0 * 2.0 * bytes / us / 1e3 / copy_bw);
    const float us2 = time_us([&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); });
    printf("%-34s %8.1f us %7.1f GB/s %6.1f %% copy\n", "cudaMemcpy (same bytes)", us2, 2.0 * bytes / us2 / 1e3,
           100.0 * 2.0 * bytes / us2 / 1e3 / copy_bw);
  }
#define RUN(NAME, NT, V, RL, L1P, L2P, ST, MINB, GRID)                                                          \
  do {                                                                                                          \
    if ((NT) * (V) * 4 != N) break;                                                                             \
    CK(cudaMemset(y, 0xff, bytes));                                                                             \
    const unsigned g = (GRID);                                                                                  \
    report(NAME, time_us([&] { rms_kernel<NT, V, RL, L1P, L2P, ST, MINB><<<g, NT>>>(y, x, w, M, N, 1e-6f); })); \
  } while (0)
  const unsigned all = (unsigned)M;
  // load policies: 0 plain, 1 L1last+L2last, 2 L1first+L2first, 3 L1noalloc, 4 L1last, 5 L2last, 6 L2first, 7 nc,
  // 8 L2::256B, 9 L1first, 10 L1normal+L2normal, 11/12 L2last on a fraction 0.5/0.25, 13 L2unchanged;
  // stores: 0 plain, 1 cs, 2 L2first, 3 L2last, 4 L1noalloc
  // the row kept in registers, plain vs L2 evict_last
#define PAIR(NT, V) RUN("reg" #NT " plain", NT, V, false, 0, 0, 0, 1, all); RUN("reg" #NT " ld5", NT, V, false, 5, 0, 0, 1, all)
  PAIR(512, 2);
  PAIR(256, 4);
  PAIR(128, 8);
  RUN("ind512 reload hints", 512, 2, true, 1, 2, 0, 1, all);
  if (shortrun) {
    g_flush = false;
    RUN("noflush reg512 plain", 512, 2, false, 0, 0, 0, 1, all);
    RUN("noflush reg512 ld5", 512, 2, false, 5, 0, 0, 1, all);
    return 0;
  }
#define REG(L, S) RUN("reg512 ld" #L " st" #S, 512, 2, false, L, 0, S, 1, all)
  REG(1, 0); REG(2, 0); REG(4, 0); REG(5, 0); REG(6, 0); REG(7, 0); REG(8, 0); REG(9, 0); REG(10, 0);
  REG(1, 1); REG(1, 2); REG(1, 3); REG(1, 4); REG(5, 2); REG(0, 2); REG(0, 3);
  RUN("reg128 ld1", 128, 8, false, 1, 0, 0, 1, all);
  RUN("reg256 ld1", 256, 4, false, 1, 0, 0, 1, all);
  RUN("reg1024 ld1", 1024, 1, false, 1, 0, 0, 1, all);
  RUN("reg128 persistent 16/SM ld1", 128, 8, false, 1, 0, 0, 1, sms * 16);
  RUN("reg512 persistent 4/SM ld1", 512, 2, false, 1, 0, 0, 1, sms * 4);
#define CPY(L, S) report("copyh ld" #L " st" #S, time_us([&] { copyh_kernel<L, S><<<sms * 8, 256>>>(y, x, (int64_t)M * N); }))
  CPY(0, 0); CPY(5, 0);
  REG(11, 0); REG(12, 0); REG(13, 0);
  RUN("reg128 ld11", 128, 8, false, 11, 0, 0, 1, all);
  // read-only rows (CE-like)
  if (N == 4096) {
    float* o; CK(cudaMalloc(&o, M * 4));
    printf("rowsum ld0 %.1f us  ld5 %.1f us  ld1 %.1f us (read-only: %.1f%% / %.1f%% of copy)\n",
           time_us([&] { rowsum_kernel<256, 4, 0><<<all, 256>>>(o, x, M, N); }), time_us([&] { rowsum_kernel<256, 4, 5><<<all, 256>>>(o, x, M, N); }),
           time_us([&] { rowsum_kernel<256, 4, 1><<<all, 256>>>(o, x, M, N); }),
           100.0 * bytes / time_us([&] { rowsum_kernel<256, 4, 0><<<all, 256>>>(o, x, M, N); }) / 1e3 / copy_bw,
           100.0 * bytes / time_us([&] { rowsum_kernel<256, 4, 5><<<all, 256>>>(o, x, M, N); }) / 1e3 / copy_bw);
    // downstream L2: an rms kernel, then the probe over 24 MB read 4 times (timed alone)
    float* pb; CK(cudaMalloc(&pb, 24 << 20)); CK(cudaMemset(pb, 0, 24 << 20));
    for (int pol = 0; pol < 3; ++pol) {
      cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
      std::vector<float> ts;
      for (int i = 0; i < 30; ++i) {
        if (pol == 0) rms_kernel<512, 2, false, 0, 0, 0, 1><<<all, 512>>>(y, x, w, M, N, 1e-6f);
        else if (pol == 1) rms_kernel<512, 2, false, 5, 0, 0, 1><<<all, 512>>>(y, x, w, M, N, 1e-6f);
        else rms_kernel<512, 2, false, 11, 0, 0, 1><<<all, 512>>>(y, x, w, M, N, 1e-6f);
        CK(cudaEventRecord(a));
        probe_kernel<<<sms * 4, 512>>>(o, (const float4*)pb, (24 << 20) / 16, 4);
        CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b)); ts.push_back(ms * 1000);
      }
      std::sort(ts.begin(), ts.end());
      printf("probe (24 MB x4) after rms with load policy %s: %.1f us\n", pol == 0 ? "plain" : pol == 1 ? "evict_last" : "evict_last 0.5", ts[15]);
    }
  }
  g_flush = false;
  printf("-- no flush between runs --\n");
  RUN("reg512 plain", 512, 2, false, 0, 0, 0, 1, all);
  REG(5, 0); REG(11, 0);
  RUN("ind512 reload hints", 512, 2, true, 1, 2, 0, 1, all);
  return 0;
}
