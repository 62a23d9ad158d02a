// Standalone (no torch): where layer_norm's fp32 long-row backward loses against copy bandwidth. rr_bwd_long_kernel
// takes fp32 rows of 131073-262144 elements: one 512-thread CTA an SM in clusters of 16 (7 fit on the H100: 112
// SMs), the row's dy and x in registers (8 vectors each a thread), the dw and db sums in 128 KB of shared memory, one
// cluster reduction per row; forward+backward at [256, 262144] fp32 ran at 77.6-78.0% of copy (H100, session 36),
// against the forward's 94, and at 86.5 once this probe had found the weight's serial loads (session 38). Each run
// reads dy and x and writes dx, [M, N] fp32, and is reported as % of the 1 GiB copy by that traffic:
//   kernel, sums:     rr_bwd_long_kernel as the launcher runs it (weight, dw and db sums);
//   kernel, no sums:  the same with no parameter gradients (a frozen weight: K = 1, ws null);
//   kernel, no weight: the general variant (K = 0) with neither the sums nor the weight (no L2 loads of w);
//   stream:           the same grid and cluster geometry, each thread loading its 8 vectors of dy and x and writing
//                     dx = dy + x: the ceiling of this layout without any reduction;
//   stream + barrier: the same with one cluster barrier per row between the loads and the stores (the reduction's
//                     synchronization, without its data).
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc/cuda -Icsrc -o /tmp/lnp \
//     benchmarks/ln_long_probe.cu && /tmp/lnp [M N]
#include "probe_timer.cuh"
// (layer_norm.cu after the timer: its names stay in its own anonymous namespace)
#include "layer_norm.cu"

template <bool SYNC>
__global__ void __launch_bounds__(kLongCta) stream_kernel(float* __restrict__ dx,        // [M, N]
                                                          const float* __restrict__ dy,  // [M, N]
                                                          const float* __restrict__ x,   // [M, N]
                                                          int64_t M, int N, int tpr) {
  const rr::Lane l(tpr);
  for (int64_t r = l.first(); r < M; r += l.step()) {
    rr::Regs<float, 8> g, v;
    g.load(dy + r * N, N, l.t, tpr, 0.f);
    v.load(x + r * N, N, l.t, tpr, 0.f);
    if (SYNC) {
      asm volatile("barrier.cluster.arrive.aligned;\n" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int c = rr::Regs<float, 8>::col(s, l.t, tpr);
      if (c >= N) break;
      float a[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) a[e] = g.at(s, e) + v.at(s, e);
      rr::store(dx + r * N, c, a);
    }
  }
}

__global__ void fill_kernel(float* p, int64_t n, uint32_t seed) {  // pseudo-random values in about [-2, 2]
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    p[i] = (float)(probe_timer::hash32((uint32_t)i ^ seed) & 0xffff) / 16384.f - 2.f;
  }
}

int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? atoll(argv[1]) : 256;
  const int N = argc > 2 ? atoi(argv[2]) : 262144;
  const int64_t n = M * N;
  const rr::Geo g = rr_bwd_long_geo<float>(N);
  if (!g.ns) {
    printf("N = %d: rr_bwd_long_kernel does not take these rows\n", N);
    return 1;
  }
  float *dx, *dy, *x, *mean, *rstd, *w, *ws;
  CK(cudaMalloc(&dx, n * 4));
  CK(cudaMalloc(&dy, n * 4));
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&mean, M * 4));
  CK(cudaMalloc(&rstd, M * 4));
  CK(cudaMalloc(&w, (int64_t)N * 4));
  fill_kernel<<<1024, 256>>>(dy, n, 1u);
  fill_kernel<<<1024, 256>>>(x, n, 2u);
  fill_kernel<<<256, 256>>>(w, N, 3u);
  CK(cudaMemset(mean, 0, M * 4));
  fill_kernel<<<4, 256>>>(rstd, M, 4u);  // (any finite values: the timing does not depend on them)
  CK(cudaGetLastError());
  const probe_timer::Timer timer;
  const double copy_gbs = timer.copy_gbs();
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const auto sums = rr_bwd_long_kernel_for<float>(true, true), frozen = rr_bwd_long_kernel_for<float>(true, false),
             plain = rr_bwd_long_kernel_for<float>(false, false);
  const int64_t grid = rr::resident_grid(g, sums, M);
  if (grid <= 0) {
    printf("no resident grid for the long kernel\n");
    return 1;
  }
  CK(cudaMalloc(&ws, 2 * rr::owners(g, grid) * (int64_t)N * 4));
  printf("%s, [%lld, %d] fp32, grid %lld CTAs in clusters of %d, %d threads; 1 GiB copy %.1f GB/s\n", prop.name,
         (long long)M, N, (long long)grid, g.cluster, g.threads, copy_gbs);
  const auto report = [&](const char* name, float us) {
    const double gbs = 3.0 * n * 4 / us / 1e3;
    printf("%-20s %8.1f us %8.1f GB/s %6.1f%% of copy\n", name, us, gbs, gbs / copy_gbs * 100);
  };
  const float inv_n = 1.f / N;
  // one run of the long kernel (sums or plain) with the given dw/db workspace and weight (either may be null)
  const auto run_long = [&](const char* name, decltype(sums) kernel, float* ws_, const float* w_) {
    report(name, timer.median_us([&] {
             CK(rr::launch(g, grid, kernel, nullptr, dx, (int64_t)N, ws_, dy, (int64_t)N, x, (int64_t)N, mean, rstd,
                           w_, M, N, inv_n, g.tpr));
           }));
  };
  run_long("kernel, sums", sums, ws, w);
  run_long("kernel, no sums", frozen, nullptr, w);
  run_long("kernel, no weight", plain, nullptr, nullptr);
  rr::Geo gs = g;
  gs.smem = 0;
  const int64_t sgrid = rr::resident_grid(gs, stream_kernel<false>, M);
  const float *cdy = dy, *cx = x;
  report("stream", timer.median_us([&] {
           CK(rr::launch(gs, sgrid, stream_kernel<false>, nullptr, dx, cdy, cx, M, N, gs.tpr));
         }));
  report("stream + barrier", timer.median_us([&] {
           CK(rr::launch(gs, sgrid, stream_kernel<true>, nullptr, dx, cdy, cx, M, N, gs.tpr));
         }));
  printf("(stream grids: %lld CTAs)\n", (long long)sgrid);
  return 0;
}
