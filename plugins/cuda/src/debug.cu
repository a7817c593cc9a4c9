// CudaDebugFault: a test-only op whose cuda kernel faults on purpose, so
// that the GPU tests can check what a user sees when a kernel loses the
// CUDA context (plugins/cuda/tests/test_cuda_runtime.py runs it in a
// subprocess). It exists only when DRAGON_CUDA_DEBUG_OPS=1 is set in the
// environment when the plugin is loaded; otherwise neither the schema nor
// the kernel is registered (docs/cuda.md, "Tests").
//
// y = CudaDebugFault(x, mode): y has x's shape and dtype.
//   mode "none"            copies x to y on the stream (no fault);
//   mode "illegal_address" a kernel stores to device address 16
//                          (cudaErrorIllegalAddress);
//   mode "trap"            a kernel executes __trap() (cudaErrorLaunchFailure).
// The fault is asynchronous: the call returns, and the error surfaces at
// the next stream_sync / event_synchronize / synchronize as AbortedError.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.cuh"

namespace dragon_cuda {
namespace {

constexpr const char* kOp = "CudaDebugFault";

bool KnownMode(const std::string& m) {
  return m == "none" || m == "illegal_address" || m == "trap";
}

// The address comes in as an argument so the compiler cannot drop the store.
__global__ void StoreTo(volatile int32_t* where) { *where = 1; }

__global__ void Trap() { __trap(); }

void FaultShape(dg::InferContext& ctx) {
  const std::string mode = ctx.s("mode");
  DG_CHECK(KnownMode(mode), DG_INVALID_ARGUMENT, "mode must be \"none\", "
           "\"illegal_address\" or \"trap\", got \"", mode, "\"");
  ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
}

void Fault(dg::KernelContext& ctx) {
  const std::string mode = ctx.s("mode");
  DG_CHECK(KnownMode(mode), DG_INVALID_ARGUMENT, kOp, " on cuda:", ctx.device().index,
           ": unknown mode \"", mode, "\"");
  cudaStream_t stream = Prepare(ctx);
  if (mode == "none") {
    const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
    DG_CHECK(x.is_contiguous(), DG_INVALID_ARGUMENT, kOp, ": x must be contiguous");
    const size_t bytes = static_cast<size_t>(x.numel()) * dg::DTypeSize(x.dtype());
    if (bytes == 0) return;
    const cudaError_t e = cudaMemcpyAsync(y.raw_data(), x.raw_data(), bytes,
                                          cudaMemcpyDeviceToDevice, stream);
    DG_CHECK(e == cudaSuccess, DG_INTERNAL, kOp, " on cuda:", ctx.device().index,
             ": cudaMemcpyAsync failed: ", ErrorText(e));
    return;
  }
  if (mode == "illegal_address") {
    StoreTo<<<1, 1, 0, stream>>>(reinterpret_cast<volatile int32_t*>(uintptr_t{16}));
  } else {
    Trap<<<1, 1, 0, stream>>>();
  }
  CheckLaunch(ctx);
}

// Registered from the init hook, before the core replays the plugin's
// static lists of schemas and kernels, so the op and its kernel join them
// only when the environment asks for them.
DgStatus RegisterDebugOps(const DgHostApi*, DgRegistrar*) {
  static bool added = false;
  const char* env = std::getenv("DRAGON_CUDA_DEBUG_OPS");
  if (added || env == nullptr || std::strcmp(env, "1") != 0) return DG_OK;
  added = true;
  dg::internal::NewOp(kOp)
      .Doc("Test only (registered when DRAGON_CUDA_DEBUG_OPS=1): a cuda kernel that "
           "faults on purpose. mode \"illegal_address\" stores to an invalid address, "
           "\"trap\" executes __trap(), \"none\" copies x to y.")
      .Input("x", dg::kAll, DG_ARG_NO_GRAD, "Any cuda tensor (contiguous for mode none).")
      .Output("y", dg::kAll, 0, "x's shape and dtype; x's values for mode none.")
      .Attr("mode", "illegal_address", "\"illegal_address\", \"trap\" or \"none\".")
      .Flags(DG_OP_NO_GRAD)
      .Shape(FaultShape);
  dg::internal::AddKernel(kOp, "cuda", dg::kAll, 0, 0, "CudaDebugFault", &Fault);
  return DG_OK;
}
DG_INIT_HOOK(&RegisterDebugOps);

}  // namespace
}  // namespace dragon_cuda
