// brainevent/check.h -- checks that throw instead of aborting.
//
//   BE_CHECK(cond) << "message" << value;   throws BE::CheckError
//   BE_CUDA_CHECK(cudaMemsetAsync(...));      throws BE::CudaError
//   BE_CHECK_KERNEL_LAUNCH();                 right after a kernel launch
//   BE_CHECK_KERNEL_LAUNCH_SYNC();            the same, after synchronizing
//
// BE::CheckError and BE::CudaError derive from BE::Error (a std::exception);
// kernix reports what() as a Python exception from the JAX call.  Defined in
// kernix/common.h.
#pragma once

#include "../kernix/common.h"
