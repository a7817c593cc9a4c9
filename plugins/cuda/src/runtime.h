// Host-side state of the cuda plugin shared by the device table
// (device.cc), the library loader (OpenLibrary, in device.cc) and the kernels: the lazy
// probe of the driver, the calling thread's current device, and error text.
#ifndef DRAGON_CUDA_RUNTIME_H_
#define DRAGON_CUDA_RUNTIME_H_

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace dragon_cuda {

// Number of CUDA devices, probed once on first use (never at load). 0 when
// there is no driver or no device; Reason() then says why in one line.
int32_t DeviceCount();
const std::string& Reason();

// Makes `index` the calling thread's current CUDA device (cached per thread,
// so repeated calls cost nothing). Returns the CUDA status.
cudaError_t SetDevice(int32_t index);

// "cudaErrorIllegalAddress: an illegal memory access was encountered".
std::string ErrorText(cudaError_t e);

// A shared library opened with dlopen: the directories of
// DRAGON_CUDA_LIBRARY_PATH, then the nvidia-* wheels' folders next to this
// plugin's package, then the system loader path. `name` is e.g.
// "libcublas.so.13". Returns NULL and sets *error when it is not found.
void* OpenLibrary(const char* name, std::string* error);

// Sets *fn to the function `symbol` of `lib` (opened by OpenLibrary as
// `lib_name`); false, with *error saying which, when the library lacks it.
template <typename F>
bool ResolveSymbol(void* lib, const char* lib_name, const char* symbol, F* fn,
                   std::string* error) {
  *fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (*fn == nullptr) *error = std::string(lib_name) + " lacks " + symbol;
  return *fn != nullptr;
}

// The advice appended to OpenLibrary's error for a library of the wheel
// `wheel` (e.g. "nvidia-cublas").
inline std::string InstallHint(const char* wheel) {
  return std::string("; install it with `pip install ") + wheel +
         "` (a dependency of dragon-cuda) or point DRAGON_CUDA_LIBRARY_PATH at its folder";
}

// A failed device-side check (an index out of range) recorded by a kernel
// in mapped host memory; the first failure wins. The device table reports
// it (DG_OUT_OF_RANGE) at the next stream_sync, event_synchronize or
// synchronize, as the ABI's asynchronous failures, then clears it.
struct DeviceCheck {
  int32_t failed;  // 0, or 1 once a kernel claimed the record
  int32_t op;      // a CheckOp
  int64_t value, bound, position;
};
enum CheckOp : int32_t { kCheckGather = 1, kCheckEmbedding, kCheckOneHot, kCheckScatterAdd,
                         kCheckNllLoss, kCheckSoftmaxCrossEntropy };

// The record, mapped into every device's address space (allocated on first
// use; NULL with an error message when that fails).
DeviceCheck* DeviceCheckRecord(std::string* error);

// Whether `e` means the CUDA context is lost (an illegal address, trap or
// assert of some kernel): every later call returns it again. The device
// table and the kernels' launch checks both report it as DG_ABORTED.
inline bool ContextLost(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout: return true;
    default: return false;
  }
}

// A library handle (cuBLAS, cuDNN) of one (device, stream), with a lock:
// calls on one handle from several host threads (graph workers sharing a
// stream) do not overlap.
template <typename H>
struct StreamHandle {
  std::mutex mu;
  H h = nullptr;
};

// The table of handles of library `Lib` (a tag type: CublasLib in
// matmul.cu, CudnnLib in cudnn.cu), never destroyed (handles live until
// exit). One table per library, not per handle type: the plugin declares
// cuBLAS's and cuDNN's handles itself, both as void*, and a table keyed by
// the handle type alone was one table for both (one static per template
// instance across the plugin's objects), so whichever library came second
// on a (device, stream) was handed the other library's handle.
template <typename Lib, typename H>
struct HandleTable {
  std::mutex mu;
  std::map<std::pair<int32_t, cudaStream_t>, std::unique_ptr<StreamHandle<H>>> map;
  static HandleTable& Get() {
    static HandleTable* table = new HandleTable();
    return *table;
  }
};

// Library Lib's handle (of type H) for (device, stream): made on first use
// by `make(H*)`, which creates it and binds it to the stream (and throws on
// failure, leaving no entry).
template <typename Lib, typename H, typename Make>
StreamHandle<H>& HandleFor(int32_t device, cudaStream_t stream, Make&& make) {
  HandleTable<Lib, H>& table = HandleTable<Lib, H>::Get();
  std::lock_guard<std::mutex> lock(table.mu);
  auto& slot = table.map[{device, stream}];
  if (!slot) {
    auto h = std::make_unique<StreamHandle<H>>();
    make(&h->h);
    slot = std::move(h);
  }
  return *slot;
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_RUNTIME_H_
