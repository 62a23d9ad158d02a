// probe_timer.cuh: the index hash and the timing of the standalone probes (bulk_read.cu, ln_long_probe.cu): CUDA events around one
// launch behind a 256 MB L2 flush by reading (L2 left clean, as benchmarks/bench.py's default), median of 50 after 5
// warm-up launches; the device-to-device cudaMemcpy of 1 GiB timed the same way, the reference for % of copy.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

// x: a cudaError_t, or a myops launcher's status (a cudaError_t, or MYOPS_E* from 100000)
#define CK(x)                                                                                         \
  do {                                                                                                \
    const int e_ = (int)(x);                                                                          \
    if (e_) {                                                                                         \
      printf("%s:%d error %d: %s\n", __FILE__, __LINE__, e_,                                          \
             e_ < 100000 ? cudaGetErrorString((cudaError_t)e_) : "myops status");                      \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

namespace probe_timer {

// A hash of an element's index: the probes' pseudo-random inputs.
__host__ __device__ __forceinline__ uint32_t hash32(uint32_t h) {
  h *= 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

__global__ void flush_kernel(const float4* p, int64_t n, float* sink) {  // reads the flush buffer: L2 left clean
  float a = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    a += p[i].x;
  if (a == 1234.5f) *sink = a;
}

struct Timer {
  static constexpr int64_t kFlush = (256 << 20) / 16;  // float4s
  float4* flush = nullptr;
  float* sink = nullptr;
  Timer() {
    CK(cudaMalloc(&flush, kFlush * 16));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(flush, 0, kFlush * 16));
  }
  // Median time of launch() in us.
  template <class F> float median_us(F launch) const {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 5; ++i) launch();
    std::vector<float> t;
    for (int i = 0; i < 50; ++i) {
      flush_kernel<<<1024, 256>>>(flush, kFlush, sink);
      CK(cudaEventRecord(a));
      launch();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms * 1e3f);
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
  // GB/s of a 1 GiB device-to-device copy (read + write).
  double copy_gbs() const {
    char *src, *dst;
    CK(cudaMalloc(&src, 1 << 30));
    CK(cudaMalloc(&dst, 1 << 30));
    const float us = median_us([&] { CK(cudaMemcpyAsync(dst, src, 1 << 30, cudaMemcpyDeviceToDevice)); });
    CK(cudaFree(src));
    CK(cudaFree(dst));
    return 2.0 * (1 << 30) / us / 1e3;
  }
};

}  // namespace probe_timer
