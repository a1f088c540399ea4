// rlhls shim: the buffer-port types of aie_adf.hpp live in adf.h here.
#pragma once
#include "../adf.h"
