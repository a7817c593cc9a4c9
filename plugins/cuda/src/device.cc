// The stream-ordered device "cuda" (ABI 1.3; docs/devices.md, docs/cuda.md).
//
// Nothing here runs at load time: the CUDA runtime (linked statically)
// first opens the driver when the core asks for the device count, so
// `import dragon_core` costs nothing extra and a machine without a driver
// sees count 0 and a one-line reason (error_message), never output on
// stderr or a crash.
//
// Handles: streams are cudaStream_t (non-blocking, so they never serialise
// with the legacy NULL stream), events are cudaEvent_t. Each device has one
// default stream, created on first use and never destroyed. Kernels of this
// and other plugins (vision_ops) cast frame->stream to cudaStream_t.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "runtime.h"

namespace dragon_cuda {

// --------------------------------------------------------------- probe

namespace {

struct Probe {
  std::once_flag once;
  int32_t count = 0;
  std::string reason;
};
Probe& TheProbe() {
  static Probe* p = new Probe();  // never destroyed: used until exit
  return *p;
}

void RunProbe(Probe& p) {
  // The driver library first, for a reason that says what is missing
  // (without it the runtime only reports "insufficient driver").
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* e = dlerror();
    p.reason = std::string("no NVIDIA driver: libcuda.so.1 could not be loaded (") +
               (e ? e : "not found") + ")";
    return;
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave it for later calls
    p.reason = "the CUDA driver reports no usable device: cudaGetDeviceCount failed with " +
               ErrorText(e);
    return;
  }
  if (n <= 0) {
    p.reason = "the CUDA driver reports 0 devices (check CUDA_VISIBLE_DEVICES)";
    return;
  }
  p.count = n;
}

}  // namespace

int32_t DeviceCount() {
  Probe& p = TheProbe();
  std::call_once(p.once, [&] { RunProbe(p); });
  return p.count;
}

const std::string& Reason() {
  DeviceCount();
  return TheProbe().reason;
}

std::string ErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

namespace {
thread_local int32_t t_device = -1;
}

cudaError_t SetDevice(int32_t index) {
  if (index == t_device) return cudaSuccess;
  const cudaError_t e = cudaSetDevice(index);
  if (e == cudaSuccess) t_device = index;
  return e;
}

namespace {
const char* CheckOpName(int32_t op) {
  switch (op) {
    case kCheckGather: return "Gather";
    case kCheckEmbedding: return "Embedding";
    case kCheckOneHot: return "OneHot";
    case kCheckScatterAdd: return "ScatterAdd";
    case kCheckNllLoss: return "NllLoss";
    case kCheckSoftmaxCrossEntropy: return "SoftmaxCrossEntropy";
    default: return "a cuda kernel";
  }
}
std::mutex g_check_mu;
DeviceCheck* g_check = nullptr;
}  // namespace

DeviceCheck* DeviceCheckRecord(std::string* error) {
  std::lock_guard<std::mutex> lock(g_check_mu);
  if (g_check == nullptr) {
    void* p = nullptr;
    const cudaError_t e =
        cudaHostAlloc(&p, sizeof(DeviceCheck), cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      *error = "could not allocate the device-check record: " + ErrorText(e);
      return nullptr;
    }
    std::memset(p, 0, sizeof(DeviceCheck));
    g_check = static_cast<DeviceCheck*>(p);
  }
  return g_check;
}

// The pending device-side check failure as a message (and clears it), or "".
std::string TakeDeviceCheck() {
  std::lock_guard<std::mutex> lock(g_check_mu);
  if (g_check == nullptr) return "";
  volatile DeviceCheck* c = g_check;
  if (c->failed == 0) return "";
  std::string m = std::string(CheckOpName(c->op)) + " on cuda: index " +
                  std::to_string(c->value) + " (at flat position " + std::to_string(c->position) +
                  ") is outside [0, " + std::to_string(c->bound) +
                  ") (a device-side check; the output holds zeros there)";
  c->op = 0;
  c->value = c->bound = c->position = 0;
  c->failed = 0;
  return m;
}

// --------------------------------------------------------------- libraries

namespace {

// The directory holding this plugin library (…/site-packages/dragon_cuda).
std::string PluginDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&PluginDir), &info) == 0 || !info.dli_fname)
    return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::vector<std::string> SearchDirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("DRAGON_CUDA_LIBRARY_PATH")) {
    std::string s = env;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  const std::string here = PluginDir();
  if (!here.empty()) {  // the nvidia-* wheels, installed beside this package
    for (const char* sub : {"/../nvidia/cu13/lib", "/../nvidia/cublas/lib",
                            "/../nvidia/cudnn/lib"})
      dirs.push_back(here + sub);
  }
  return dirs;
}

}  // namespace

void* OpenLibrary(const char* name, std::string* error) {
  std::string tried;
  for (const std::string& dir : SearchDirs()) {
    const std::string path = dir + "/" + name;
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    tried += " " + dir + ";";
  }
  if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  const char* e = dlerror();
  *error = std::string(name) + " was not found (searched DRAGON_CUDA_LIBRARY_PATH," +
           " the nvidia-* wheel folders:" + tried + " and the system loader path: " +
           (e ? e : "not found") + ")";
  return nullptr;
}

// --------------------------------------------------------------- device table

namespace {

thread_local std::string t_last_error;

DgStatus StatusOf(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return DG_OK;
    case cudaErrorMemoryAllocation: return DG_RESOURCE_EXHAUSTED;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle: return DG_INVALID_ARGUMENT;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return DG_UNAVAILABLE;
    default: return ContextLost(e) ? DG_ABORTED : DG_INTERNAL;
  }
}

// Records `what` failed with `e` for error_message and returns the status.
DgStatus Fail(cudaError_t e, const char* what, int32_t index) {
  (void)cudaGetLastError();  // clear a non-sticky error
  t_last_error = std::string("cuda:") + std::to_string(index) + ": " + what + ": " + ErrorText(e);
  return StatusOf(e);
}

#define DGC_TRY(call, what)                                   \
  do {                                                        \
    const cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) return Fail(e_, (what), index);    \
  } while (0)

DgStatus Enter(int32_t index) {
  const int32_t n = DeviceCount();
  if (index < 0 || index >= n) {
    t_last_error = "cuda:" + std::to_string(index) + " is not present (" + std::to_string(n) +
                   " device(s))" + (n == 0 ? ": " + Reason() : std::string());
    return n == 0 ? DG_UNAVAILABLE : DG_INVALID_ARGUMENT;
  }
  DGC_TRY(SetDevice(index), "cudaSetDevice");
  return DG_OK;
}

#define DGC_ENTER()                              \
  do {                                           \
    const DgStatus s_ = Enter(index);            \
    if (s_ != DG_OK) return s_;                  \
  } while (0)

int32_t Count(void*) { return DeviceCount(); }

DgStatus Alloc(void*, int32_t index, size_t bytes, void** ptr) {
  DGC_ENTER();
  // While this thread captures a graph (thread-local mode, below) cudaMalloc
  // counts as a potentially unsafe call and would invalidate the capture;
  // it is safe here (the memory is not freed before the graph is destroyed:
  // the core holds every block a capture touched), so it runs in relaxed
  // mode, as PyTorch's allocator does.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  DGC_TRY(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
  const cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 256);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  DGC_TRY(e, "cudaMalloc");
  return DG_OK;
}

void Free(void*, int32_t index, void* ptr) {
  if (!ptr || Enter(index) != DG_OK) return;
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

DgStatus Copy(int32_t index, void* dst, const void* src, size_t n, void* stream,
              cudaMemcpyKind kind, const char* what) {
  if (n == 0) return DG_OK;
  DGC_ENTER();
  // A copy from or to host memory recorded in a CUDA Graph would read (or
  // write) that host address again at every replay, long after the core
  // reused the buffer: refused while the stream captures (the core then
  // runs the function without a graph and says why).
  if (kind != cudaMemcpyDeviceToDevice && stream != nullptr) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    DGC_TRY(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st),
            "cudaStreamIsCapturing");
    if (st != cudaStreamCaptureStatusNone) {
      t_last_error = std::string("cuda:") + std::to_string(index) + ": " + what +
                     ": a copy between host and device memory cannot be recorded in a "
                     "CUDA Graph (the stream is capturing)";
      return DG_FAILED_PRECONDITION;
    }
  }
  // From pageable memory the runtime stages the source before it returns,
  // as the ABI asks of copy_h2d; from pinned memory (host_alloc) it reads
  // when the stream gets there.
  DGC_TRY(cudaMemcpyAsync(dst, src, n, kind, static_cast<cudaStream_t>(stream)), what);
  return DG_OK;
}

DgStatus CopyH2D(void*, int32_t index, void* dst, const void* src, size_t n, void* stream) {
  return Copy(index, dst, src, n, stream, cudaMemcpyHostToDevice, "copy_h2d");
}
DgStatus CopyD2H(void*, int32_t index, void* dst, const void* src, size_t n, void* stream) {
  return Copy(index, dst, src, n, stream, cudaMemcpyDeviceToHost, "copy_d2h");
}
DgStatus CopyD2D(void*, int32_t index, void* dst, const void* src, size_t n, void* stream) {
  return Copy(index, dst, src, n, stream, cudaMemcpyDeviceToDevice, "copy_d2d");
}

DgStatus Memset(void*, int32_t index, void* dst, int32_t value, size_t n, void* stream) {
  if (n == 0) return DG_OK;
  DGC_ENTER();
  DGC_TRY(cudaMemsetAsync(dst, value, n, static_cast<cudaStream_t>(stream)), "memset");
  return DG_OK;
}

DgStatus CopyPeer(void*, int32_t index, void* dst, int32_t src_index, const void* src,
                  size_t n, void* stream) {
  if (n == 0) return DG_OK;
  DGC_ENTER();
  DGC_TRY(cudaMemcpyPeerAsync(dst, index, src, src_index, n, static_cast<cudaStream_t>(stream)),
          "copy_peer");
  return DG_OK;
}

DgStatus StreamCreate(void*, int32_t index, void** stream) {
  DGC_ENTER();
  cudaStream_t s = nullptr;
  DGC_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  *stream = s;
  return DG_OK;
}

struct DefaultStreams {
  std::mutex mu;
  std::vector<cudaStream_t> streams;
};
DefaultStreams& TheDefaults() {
  static DefaultStreams* d = new DefaultStreams();  // never destroyed
  return *d;
}

DgStatus DefaultStream(void*, int32_t index, void** stream) {
  DGC_ENTER();
  DefaultStreams& d = TheDefaults();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.streams.size() <= static_cast<size_t>(index)) d.streams.resize(index + 1, nullptr);
  if (!d.streams[index]) {
    cudaStream_t s = nullptr;
    DGC_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "default stream");
    d.streams[index] = s;
  }
  *stream = d.streams[index];
  return DG_OK;
}

DgStatus StreamDestroy(void*, int32_t index, void* stream) {
  DGC_ENTER();
  {
    DefaultStreams& d = TheDefaults();
    std::lock_guard<std::mutex> lock(d.mu);
    if (static_cast<size_t>(index) < d.streams.size() && d.streams[index] == stream) {
      t_last_error = "the default stream of a cuda device is never destroyed";
      return DG_INVALID_ARGUMENT;
    }
  }
  DGC_TRY(cudaStreamDestroy(static_cast<cudaStream_t>(stream)), "cudaStreamDestroy");
  return DG_OK;
}

// After a successful wait: a failed device-side check becomes the wait's
// (asynchronous) failure.
DgStatus Checked() {
  std::string m = TakeDeviceCheck();
  if (m.empty()) return DG_OK;
  t_last_error = std::move(m);
  return DG_OUT_OF_RANGE;
}

DgStatus StreamSync(void*, int32_t index, void* stream) {
  DGC_ENTER();
  DGC_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "stream_sync");
  return Checked();
}

DgStatus Synchronize(void*, int32_t index) {
  DGC_ENTER();
  DGC_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return Checked();
}

DgStatus Activate(void*, int32_t index) {
  DGC_ENTER();
  return DG_OK;
}

DgStatus EventCreate(void*, int32_t index, void** event) {
  DGC_ENTER();
  cudaEvent_t e = nullptr;
  // Timing stays on: Function.profile reads elapsed times of these events.
  DGC_TRY(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate");
  *event = e;
  return DG_OK;
}
DgStatus EventDestroy(void*, int32_t index, void* event) {
  DGC_ENTER();
  DGC_TRY(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
  return DG_OK;
}
DgStatus EventRecord(void*, int32_t index, void* event, void* stream) {
  DGC_ENTER();
  DGC_TRY(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
          "cudaEventRecord");
  return DG_OK;
}
DgStatus EventQuery(void*, int32_t index, void* event, int32_t* done) {
  DGC_ENTER();
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = 0;
    return DG_OK;
  }
  DGC_TRY(e, "cudaEventQuery");
  *done = 1;
  return DG_OK;
}
DgStatus EventSync(void*, int32_t index, void* event) {
  DGC_ENTER();
  DGC_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "event_synchronize");
  return Checked();
}
DgStatus StreamWaitEvent(void*, int32_t index, void* stream, void* event) {
  DGC_ENTER();
  DGC_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                              static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent");
  return DG_OK;
}
DgStatus EventElapsed(void*, int32_t index, void* a, void* b, float* ms) {
  DGC_ENTER();
  DGC_TRY(cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(a), static_cast<cudaEvent_t>(b)),
          "cudaEventElapsedTime");
  return DG_OK;
}

DgStatus HostAlloc(void*, int32_t index, size_t bytes, void** ptr) {
  DGC_ENTER();
  DGC_TRY(cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc");
  return DG_OK;
}
void HostFree(void*, int32_t, void* ptr) {
  if (ptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

DgStatus GetAttribute(void*, int32_t index, int32_t attr, int64_t* value) {
  DGC_ENTER();
  int v = 0;
  switch (attr) {
    case DG_DEVICE_ATTR_COMPUTE_UNITS:
      DGC_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, index), "attribute");
      *value = v;
      return DG_OK;
    case DG_DEVICE_ATTR_TOTAL_MEMORY: {
      size_t free_b = 0, total = 0;
      DGC_TRY(cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo");
      *value = static_cast<int64_t>(total);
      return DG_OK;
    }
    case DG_DEVICE_ATTR_COMPUTE_CAPABILITY: {
      int minor = 0;
      DGC_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, index), "attribute");
      DGC_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index),
              "attribute");
      *value = v * 10 + minor;
      return DG_OK;
    }
    case DG_DEVICE_ATTR_MAX_STREAMS: *value = 0; return DG_OK;
    case DG_DEVICE_ATTR_MEMORY_ALIGNMENT: *value = 256; return DG_OK;
    case DG_DEVICE_ATTR_UNIFIED_ADDRESSING:
      DGC_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrUnifiedAddressing, index), "attribute");
      *value = v;
      return DG_OK;
    default:
      t_last_error = "cuda: unknown device attribute " + std::to_string(attr);
      return DG_NOT_FOUND;
  }
}

DgStatus MemoryInfo(void*, int32_t index, size_t* free_bytes, size_t* total_bytes) {
  DGC_ENTER();
  DGC_TRY(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
  return DG_OK;
}

// ---- graph capture (ABI 1.5): CUDA Graphs.
//
// Thread-local capture mode: a potentially unsafe call (a host wait, a
// synchronous copy, cudaMalloc outside Alloc's relaxed guard) made by the
// capturing thread fails and invalidates the capture -- the core then runs
// the function normally and reports why -- while other threads (a data
// loader, another stream's work) are not disturbed, as they would be by
// the global mode. Relaxed mode would record such calls silently and give
// a graph that does not do what the run did.
DgStatus BeginCapture(void*, int32_t index, void* stream) {
  DGC_ENTER();
  if (stream == nullptr) {
    t_last_error = "cuda: stream_begin_capture needs a stream (the legacy NULL stream cannot "
                   "be captured)";
    return DG_INVALID_ARGUMENT;
  }
  DGC_TRY(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream),
                                 cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture");
  return DG_OK;
}

DgStatus EndCapture(void*, int32_t index, void* stream, void** graph) {
  *graph = nullptr;
  DGC_ENTER();
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g);
  if (e != cudaSuccess) {
    if (g) (void)cudaGraphDestroy(g);
    return Fail(e, "cudaStreamEndCapture (something issued during the capture could not be "
                   "recorded)", index);
  }
  if (g == nullptr) {
    t_last_error = "cuda: cudaStreamEndCapture returned no graph";
    return DG_INTERNAL;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);  // the executable graph keeps what it needs
  DGC_TRY(ie, "cudaGraphInstantiate");
  *graph = exec;
  return DG_OK;
}

DgStatus GraphLaunch(void*, int32_t index, void* graph, void* stream) {
  DGC_ENTER();
  DGC_TRY(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph),
                          static_cast<cudaStream_t>(stream)),
          "cudaGraphLaunch");
  return DG_OK;
}

DgStatus GraphDestroy(void*, int32_t index, void* graph) {
  if (graph == nullptr) return DG_OK;
  DGC_ENTER();
  DGC_TRY(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)), "cudaGraphExecDestroy");
  return DG_OK;
}

// "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB, 132 SMs, driver 13.0, runtime 13.0)"
DgStatus Describe(void*, int32_t index, char* buf, size_t len) {
  DGC_ENTER();
  cudaDeviceProp p{};
  DGC_TRY(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  if (buf && len)
    std::snprintf(buf, len, "%s (sm_%d%d, %.1f GiB, %d SMs, driver %d.%d, runtime %d.%d)",
                  p.name, p.major, p.minor,
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                  p.multiProcessorCount, driver / 1000, (driver % 1000) / 10, runtime / 1000,
                  (runtime % 1000) / 10);
  return DG_OK;
}

// The last failure on this thread; with no device present, why.
const char* ErrorMessage(void*, int32_t) {
  if (t_last_error.empty() && DeviceCount() == 0) return Reason().c_str();
  return t_last_error.c_str();
}

DgDeviceDef Device() {
  DgDeviceDef d{};
  d.struct_size = sizeof(DgDeviceDef);
  d.name = "cuda";
  d.count = &Count;
  d.alloc = &Alloc;
  d.free = &Free;
  d.copy_h2d = &CopyH2D;
  d.copy_d2h = &CopyD2H;
  d.copy_d2d = &CopyD2D;
  d.memset = &Memset;
  d.stream_create = &StreamCreate;
  d.stream_destroy = &StreamDestroy;
  d.stream_sync = &StreamSync;
  d.synchronize = &Synchronize;
  d.describe = &Describe;
  d.host_accessible = 0;
  d.dlpack_device_type = 2;  // kDLCUDA
  d.flags = DG_DEVICE_STREAM_ORDERED;
  d.activate = &Activate;
  d.default_stream = &DefaultStream;
  d.event_create = &EventCreate;
  d.event_destroy = &EventDestroy;
  d.event_record = &EventRecord;
  d.event_query = &EventQuery;
  d.event_synchronize = &EventSync;
  d.stream_wait_event = &StreamWaitEvent;
  d.event_elapsed_ms = &EventElapsed;
  d.host_alloc = &HostAlloc;
  d.host_free = &HostFree;
  d.copy_peer = &CopyPeer;
  d.get_attribute = &GetAttribute;
  d.memory_info = &MemoryInfo;
  d.error_message = &ErrorMessage;
  d.stream_begin_capture = &BeginCapture;
  d.stream_end_capture = &EndCapture;
  d.graph_launch = &GraphLaunch;
  d.graph_destroy = &GraphDestroy;
  return d;
}

DgStatus RegisterDevice(const DgHostApi*, DgRegistrar* reg) {
  const DgDeviceDef d = Device();
  return reg->register_device(reg->ctx, &d);
}
DG_INIT_HOOK(&RegisterDevice);

}  // namespace
}  // namespace dragon_cuda

// Needs host ABI 1.3 (streams, events): an older core would treat the
// device as synchronous and run kernels that return before they finish.
DG_PLUGIN_EX("cuda", "0.1.0", 3)
