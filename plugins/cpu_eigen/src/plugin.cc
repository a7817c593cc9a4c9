// The cpu_eigen plugin's entry point. Kernels register themselves at
// static-initialisation time (DG_KERNEL in each src/*.cc); the entry point
// defined here replays them into the core's registrar.
#include "dragon/plugin.hpp"

DG_PLUGIN("cpu_eigen", "0.1.0")
