// Dragon plugin dragon_vision_ops: detection and segmentation ops.
//
// Every op here is defined by this plugin (schema, shape rule, doc) through
// the ABI; the core knows none of them. Each op family lives in its own
// file(s) with its CPU kernels (roi_ops.cc + roi.cc, nms.cc, deform_conv.cc +
// gemm.cc, resample.cc); the CUDA kernels are in cuda/*.cu and are compiled
// only when nvcc is found.
#include "dragon/plugin.hpp"

DG_PLUGIN("vision_ops", "0.1.0")
