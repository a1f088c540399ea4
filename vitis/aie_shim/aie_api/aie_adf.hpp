// rlhls shim: the stream/cascade helpers of aie_adf.hpp live in adf.h here.
#pragma once
#include "../adf.h"
