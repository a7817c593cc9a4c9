// Dragon plugin mkldnn: oneDNN kernels for the core's standard ops on cpu,
// registered at priority kPriority (above cpu_eigen). Each op family has
// its own file (matmul.cc, conv.cc, pool.cc, norm.cc, ...); common.h holds
// the engine, the primitive cache and the scratchpad handling they share.
#include "common.h"

DG_PLUGIN("mkldnn", "0.1.0")
