"""The text kernix puts in front of a CUDA file for inference (never written
to disk as is: see :data:`kernix.frontend.clangparse.PRELUDE_PATH`)."""

from __future__ import annotations

__all__ = ["CUDA_PRELUDE_REAL", "CUDA_PRELUDE_STUB", "SPACE_MARKERS", "SPACE_ANNOTATIONS"]

CUDA_PRELUDE_REAL = """\
// kernix inference prelude: what nvcc puts in front of every .cu file.
#include <cuda_runtime.h>
"""

# Used when no CUDA headers are installed: enough for signatures to parse.
CUDA_PRELUDE_STUB = """\
// kernix inference prelude (no CUDA headers found): stand-ins for signatures.
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __device_builtin__
#define __cudart_builtin__
#define CUDART_CB
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef enum cudaError { cudaSuccess = 0 } cudaError_t;
struct __half { unsigned short __x; };
struct __half2 { __half x, y; };
typedef __half half;
struct __nv_bfloat16 { unsigned short __x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};
extern const uint3 threadIdx, blockIdx;
extern const dim3 blockDim, gridDim;
extern const int warpSize;
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t);
const char* cudaGetErrorString(cudaError_t);
"""


# After nvcc's forced includes: the execution-space keywords also leave an
# ``annotate`` attribute that inference reads (``__global__`` kernels and
# ``__device__``-only functions cannot be exported); they keep their meaning.
SPACE_MARKERS = """\
#undef __global__
#define __global__ __attribute__((global, annotate("kernix.cuda.global")))
#undef __device__
#define __device__ __attribute__((device, annotate("kernix.cuda.device")))
#undef __host__
#define __host__ __attribute__((host, annotate("kernix.cuda.host")))
"""

#: The ``annotate`` texts :data:`SPACE_MARKERS` attaches.
SPACE_ANNOTATIONS = {"kernix.cuda.global": "global", "kernix.cuda.device": "device", "kernix.cuda.host": "host"}
