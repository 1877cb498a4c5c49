// Compatibility alias: sources written for `brainevent/common.h` compile unchanged.
#pragma once
#include "kernix/common.h"
