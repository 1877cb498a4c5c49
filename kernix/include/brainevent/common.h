// brainevent/common.h -- kernix's implementation of brainevent's C++ API.
//
// Sources written against brainevent's headers build with kernix's alone:
// the same header names (brainevent/common.h, tensor.h, check.h, dispatch.h,
// dtypes.h), the same macros (BE_CHECK, BE_CUDA_CHECK, BE_CHECK_KERNEL_LAUNCH,
// block-form BE_DISPATCH_*) and BE::Tensor methods.  kernix's own lambda-form
// dispatch macros (BE_DISPATCH_FLOATING_TYPES, ...) are available too.
//
// When a project ships its own brainevent/ headers and passes their directory
// with extra_include_paths, those are found first and this file is not used.
#pragma once

#include "tensor.h"
#include "check.h"
#include "dispatch.h"
