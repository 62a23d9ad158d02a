// Standalone (no torch): how many thread-block clusters of each size the GPU runs at once
// (cudaOccupancyMaxActiveClusters), for CTAs of 512 threads at three shared-memory sizes (one, two and three CTAs per
// SM). A cluster's CTAs share a GPC, so sizes that do not divide the GPCs' SM counts leave SMs idle: on the H200,
// clusters of 16 run on 112 of its 132 SMs, of 4 or 8 on 120 (BENCHMARKS.md, session 23).
//   nvcc -O3 -arch=sm_90 -o /tmp/cluster_occupancy benchmarks/cluster_occupancy.cu && /tmp/cluster_occupancy
#include <cuda_runtime.h>
#include <cstdio>

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    const cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

__global__ void probe(float* p) {
  extern __shared__ float s[];
  if (p) p[threadIdx.x] = s[threadIdx.x];
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s: %d SMs\n", prop.name, prop.multiProcessorCount);
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  std::printf("shared KB  per SM  cluster: clusters / CTAs at once\n");
  for (const int kb : {200, 100, 60}) {
    std::printf("%9d  %6d ", kb, 228 / (kb + 1));
    for (const int c : {1, 2, 3, 4, 8, 16}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(c * 64);
      cfg.blockDim = dim3(512);
      cfg.dynamicSmemBytes = (size_t)kb * 1024;
      cudaLaunchAttribute a;
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = c;
      a.val.clusterDim.y = a.val.clusterDim.z = 1;
      cfg.attrs = &a;
      cfg.numAttrs = 1;
      int n = 0;
      CHECK(cudaOccupancyMaxActiveClusters(&n, probe, &cfg));
      std::printf("  %2d: %3d / %3d", c, n, n * c);
    }
    std::printf("\n");
  }
  return 0;
}
