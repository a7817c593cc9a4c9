// dragon-nccl-dist: the cuda kernels of the core's collective ops
// (dragon_core/src/ops/collective.cc) over NCCL, and three host ops the
// Python side of dragon_core.distributed uses to build communicators:
//   NcclVersion()                 -> int64[]  (opens libnccl; clear error if absent)
//   NcclUniqueId()                -> uint8[128] on cpu (a group's rank 0; sent to the
//                                    others by MPI or through the rendezvous store)
//   NcclCommInit(id uint8[128])   -> int64[2] {nranks, device} (attrs group, nranks,
//                                    rank, timeout_s, device, local_rank): the
//                                    communicator lives on the rank's GPU
//   NcclCommDestroy()             -> int64[] (attrs group, abort): frees the group's
//                                    communicator (destroy_process_group, issue 16)
// libnccl.so.2 is opened with dlopen at first use (never linked): the
// nvidia-nccl-cu13 wheel beside this package, $DRAGON_NCCL_LIBRARY, or the
// loader path. Communicators are non-blocking (config.blocking = 0) and every
// NCCL call is polled with ncclCommGetAsyncError against the group's timeout;
// on timeout the communicator is aborted and the op fails naming the rank and
// the collective. A kernel enqueued but never completed is the watchdog's
// (below): an event after each collective, polled against the timeout.
//
// The GPU of a communicator (issue 16, several GPUs per node): NcclCommInit
// makes the chosen device current on its thread (CUDA driver API, libcuda
// opened with dlopen: $DRAGON_CUDA_DRIVER_LIBRARY or libcuda.so.1) before
// ncclCommInitRankConfig, which takes the current device, and restores the
// thread's previous context afterwards. The collectives check that their
// tensor lives on that device.
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist_time.h"
#include "dl_load.h"
#include "dragon/plugin.hpp"

namespace {

using nccl_dist_time::DeadlineAfter;
using nccl_dist_time::SleepSeconds;

struct Nccl {
  void* handle = nullptr;
  std::string error;
  int version = 0;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclCommCuDevice) CommCuDevice = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

using dgdist::PluginDir;

template <typename F>
bool Sym(void* h, const char* name, F* out, std::string* err) {
  return dgdist::LoadSymbol(h, "libnccl", name, out, err);
}

Nccl& Lib() {
  static Nccl lib;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    const char* env = std::getenv("DRAGON_NCCL_LIBRARY");
    const std::string candidates[] = {
        env ? std::string(env) : std::string(),
        PluginDir() + "/../nvidia/nccl/lib/libnccl.so.2", "libnccl.so.2"};
    for (const auto& c : candidates) {
      if (c.empty()) continue;
      lib.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib.handle) break;
      const char* e = dlerror();
      tried += "\n  " + c + ": " + (e ? e : "?");
    }
    if (!lib.handle) {
      lib.error = "cannot open libnccl.so.2 (pip install nvidia-nccl-cu13, or set "
                  "DRAGON_NCCL_LIBRARY); tried:" + tried;
      return;
    }
    std::string& err = lib.error;
    void* h = lib.handle;
    bool ok = Sym(h, "ncclGetVersion", &lib.GetVersion, &err) &&
              Sym(h, "ncclGetUniqueId", &lib.GetUniqueId, &err) &&
              Sym(h, "ncclCommInitRankConfig", &lib.CommInitRankConfig, &err) &&
              Sym(h, "ncclCommGetAsyncError", &lib.CommGetAsyncError, &err) &&
              Sym(h, "ncclCommAbort", &lib.CommAbort, &err) &&
              Sym(h, "ncclCommDestroy", &lib.CommDestroy, &err) &&
              Sym(h, "ncclCommFinalize", &lib.CommFinalize, &err) &&
              Sym(h, "ncclGetErrorString", &lib.GetErrorString, &err) &&
              Sym(h, "ncclGetLastError", &lib.GetLastError, &err) &&
              Sym(h, "ncclCommCuDevice", &lib.CommCuDevice, &err) &&
              Sym(h, "ncclAllReduce", &lib.AllReduce, &err) &&
              Sym(h, "ncclBroadcast", &lib.Broadcast, &err) &&
              Sym(h, "ncclAllGather", &lib.AllGather, &err) &&
              Sym(h, "ncclReduceScatter", &lib.ReduceScatter, &err) &&
              Sym(h, "ncclSend", &lib.Send, &err) &&
              Sym(h, "ncclRecv", &lib.Recv, &err) &&
              Sym(h, "ncclGroupStart", &lib.GroupStart, &err) &&
              Sym(h, "ncclGroupEnd", &lib.GroupEnd, &err);
    if (ok && lib.GetVersion(&lib.version) != ncclSuccess) {
      ok = false;
      err = "ncclGetVersion failed";
    }
    // Non-blocking communicators and ncclCommInitRankConfig: NCCL >= 2.14.
    if (ok && lib.version < 21400) {
      ok = false;
      err = "libnccl " + std::to_string(lib.version) + " is too old (need >= 2.14)";
    }
    if (!ok) {
      dlclose(h);
      lib.handle = nullptr;
    }
  });
  return lib;
}

// The few CUDA driver entry points that choose the GPU a communicator is
// created on (cudaSetDevice's effect: the device's primary context made
// current). Declared here with the driver's C types (CUresult is an int,
// 0 success; CUdevice an int; CUcontext a pointer), so no cuda.h and no
// link against libcuda: it is opened only when a device is chosen.
struct Driver {
  void* handle = nullptr;
  std::string error;
  using CUctx = void*;
  int (*Init)(unsigned) = nullptr;
  int (*DeviceGetCount)(int*) = nullptr;
  int (*DeviceGet)(int*, int) = nullptr;
  int (*DevicePrimaryCtxRetain)(CUctx*, int) = nullptr;
  int (*CtxGetCurrent)(CUctx*) = nullptr;
  int (*CtxSetCurrent)(CUctx) = nullptr;
  int (*GetErrorString)(int, const char**) = nullptr;
  // The watchdog's completion probes: an event recorded on the
  // collective's stream after it (CUevent/CUstream are pointers; a
  // cudaStream_t is a CUstream).
  int (*EventCreate)(void**, unsigned) = nullptr;
  int (*EventRecord)(void*, void*) = nullptr;
  int (*EventQuery)(void*) = nullptr;
  int (*EventDestroy)(void*) = nullptr;
  int (*StreamIsCapturing)(void*, int*) = nullptr;
  int init_result = 0;

  std::string Describe(int r) const {
    const char* s = nullptr;
    if (GetErrorString && GetErrorString(r, &s) == 0 && s) return s;
    return "CUDA driver error " + std::to_string(r);
  }
};

Driver& CudaDriver() {
  static Driver drv;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("DRAGON_CUDA_DRIVER_LIBRARY");
    const std::string path = env && *env ? env : "libcuda.so.1";
    drv.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!drv.handle) {
      const char* e = dlerror();
      drv.error = "cannot open the CUDA driver " + path + ": " + (e ? e : "?");
      return;
    }
    void* h = drv.handle;
    std::string& err = drv.error;
    const bool ok =
        dgdist::LoadSymbol(h, "libcuda", "cuInit", &drv.Init, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuDeviceGetCount", &drv.DeviceGetCount, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuDeviceGet", &drv.DeviceGet, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuDevicePrimaryCtxRetain",
                           &drv.DevicePrimaryCtxRetain, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuCtxGetCurrent", &drv.CtxGetCurrent, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuCtxSetCurrent", &drv.CtxSetCurrent, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuGetErrorString", &drv.GetErrorString, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuEventCreate", &drv.EventCreate, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuEventRecord", &drv.EventRecord, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuEventQuery", &drv.EventQuery, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuEventDestroy_v2", &drv.EventDestroy, &err) &&
        dgdist::LoadSymbol(h, "libcuda", "cuStreamIsCapturing", &drv.StreamIsCapturing, &err);
    if (!ok) {
      dlclose(h);
      drv.handle = nullptr;
      return;
    }
    drv.init_result = drv.Init(0);
    if (drv.init_result != 0) drv.error = "cuInit failed: " + drv.Describe(drv.init_result);
  });
  return drv;
}

// CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 when
// the driver cannot be opened or initialised (no GPU, no driver).
int VisibleDevices() {
  Driver& d = CudaDriver();
  if (!d.handle || d.init_result != 0) return 0;
  int n = 0;
  return d.DeviceGetCount(&n) == 0 ? n : 0;
}

// Makes device `index`'s primary context current on this thread for the
// lifetime of the object (what cudaSetDevice does), and puts the thread's
// previous context back afterwards. The primary context stays retained:
// the CUDA runtime of the cuda plugin and of NCCL use the same one.
class DeviceScope {
 public:
  DeviceScope(int index, int rank) {
    Driver& d = CudaDriver();
    DG_CHECK(d.handle && d.init_result == 0, DG_UNAVAILABLE, "rank ", rank,
             ": NcclCommInit: cannot make cuda:", index, " current: ", d.error);
    int dev = 0;
    void* ctx = nullptr;
    int r = d.DeviceGet(&dev, index);
    if (r == 0) r = d.DevicePrimaryCtxRetain(&ctx, dev);
    if (r == 0 && d.CtxGetCurrent(&prev_) != 0) prev_ = nullptr;
    if (r == 0) r = d.CtxSetCurrent(ctx);
    DG_CHECK(r == 0, DG_UNAVAILABLE, "rank ", rank, ": NcclCommInit: cannot make cuda:",
             index, " current: ", d.Describe(r));
    set_ = true;
  }
  ~DeviceScope() {
    if (set_) CudaDriver().CtxSetCurrent(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  void* prev_ = nullptr;
  bool set_ = false;
};

// Why a process sees the devices it sees, for messages.
std::string VisibleNote(int n) {
  std::string note;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    note += std::string(" (CUDA_VISIBLE_DEVICES=") + v + ")";
  }
  if (n == 0 && !CudaDriver().error.empty()) note += " (" + CudaDriver().error + ")";
  return note;
}

// The GPU a rank's communicator is created on: `device` when given (>= 0,
// it must be visible), else `local_rank` modulo the visible devices (the
// rank's GPU on its node), else -1 (NCCL takes the thread's current device,
// as before; also where no GPU can be seen, so NCCL gives its own reason).
int ChooseDevice(int64_t device, int64_t local_rank, int rank) {
  if (device >= 0) {
    const int n = VisibleDevices();
    DG_CHECK(device < n, DG_INVALID_ARGUMENT, "rank ", rank, ": NcclCommInit: device_id cuda:",
             device, " is not visible to this process: it sees ", n, " CUDA device",
             n == 1 ? "" : "s", VisibleNote(n));
    return static_cast<int>(device);
  }
  if (local_rank >= 0) {
    const int n = VisibleDevices();
    if (n > 0) return static_cast<int>(local_rank % n);
  }
  return -1;
}

Nccl& Require(const char* op) {
  Nccl& lib = Lib();
  DG_CHECK(lib.handle, DG_UNAVAILABLE, op, ": ", lib.error);
  return lib;
}

// One rank's communicator of a process group. The table holds it by
// shared_ptr and every user holds a CommLease, so destroying or replacing
// the group's entry never frees a Comm another thread is using; `use`
// orders the NCCL calls on it (NCCL wants one caller at a time per
// communicator) and makes NcclCommDestroy wait for a collective in flight.
// `comm` is atomic because one path touches it without `use`: an aborting
// destroy that finds a collective stuck inside an NCCL call cuts it off
// with ncclCommAbort (what that function is for); whoever exchanges the
// handle out aborts or destroys it, exactly once.
struct Comm {
  std::atomic<ncclComm_t> comm{nullptr};  // null once destroyed or aborted
  int rank = 0, nranks = 1;
  int device = -1;  // the CUDA device the communicator lives on
  int64_t group = 0;
  double timeout_s = 300;
  int64_t seq = 0;  // collectives issued (under `use`), for messages
  // Why the watchdog aborted the communicator (under note_mu); later
  // collectives on it raise this.
  std::mutex note_mu;
  std::string note;
  std::mutex use;
  // Set by an aborting NcclCommDestroy: the collective settling on another
  // thread aborts the communicator itself and fails, instead of making the
  // destroy wait up to its timeout; it then sets aborted_on_request.
  std::atomic<bool> abort_requested{false};
  std::atomic<bool> aborted_on_request{false};
};
std::mutex g_mu;  // guards the table, not the Comms in it
std::map<int64_t, std::shared_ptr<Comm>> g_comms;

// What the watchdog said when it aborted `c` ("" when it did not).
std::string Note(Comm& c) {
  std::lock_guard<std::mutex> lock(c.note_mu);
  return c.note;
}

// Aborts `c`'s communicator unless another path already took it.
void AbortComm(Nccl& lib, Comm& c) {
  if (ncclComm_t h = c.comm.exchange(nullptr)) lib.CommAbort(h);
}

// Waits until the last NCCL call on `c` is no longer in progress. Fails
// naming the rank and collective when it does not complete within the
// timeout, when a destroy asks to abort, or when NCCL reports an error
// while it ran (a peer died, a network error): the communicator is then
// aborted, as NCCL requires after an asynchronous error, so later calls
// say so instead of queueing on a broken communicator. An error the call
// returned at once (a bad argument) leaves the communicator as it was.
void Settle(Nccl& lib, Comm& c, ncclResult_t r, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(c.timeout_s);
  const bool waited = r == ncclInProgress;
  while (r == ncclInProgress) {
    if (c.abort_requested.load(std::memory_order_acquire)) {
      AbortComm(lib, c);
      const std::string note = Note(c);
      DG_CHECK(note.empty(), DG_DEADLINE_EXCEEDED, what, " (NCCL) was aborted: ", note);
      c.aborted_on_request.store(true, std::memory_order_release);
      DG_CHECK(false, DG_ABORTED, "rank ", c.rank, ": ", what,
               " (NCCL) was aborted: destroy_process_group() aborted the process "
               "group's communicator");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      AbortComm(lib, c);
      DG_CHECK(false, DG_DEADLINE_EXCEEDED, "rank ", c.rank, ": ", what,
               " (NCCL) did not complete within ", c.timeout_s,
               " s; the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    const ncclComm_t h = c.comm.load();
    DG_CHECK(h != nullptr || Note(c).empty(), DG_DEADLINE_EXCEEDED, what,
             " (NCCL) was aborted: ", Note(c));
    DG_CHECK(h != nullptr, DG_ABORTED, "rank ", c.rank, ": ", what,
             " (NCCL) was aborted while in progress: destroy_process_group() aborted "
             "the process group's communicator");
    const ncclResult_t q = lib.CommGetAsyncError(h, &r);
    if (q != ncclSuccess) r = q;
  }
  if (r == ncclSuccess) return;
  const std::string last = lib.GetLastError(c.comm.load());
  if (waited) AbortComm(lib, c);
  DG_CHECK(false, DG_INTERNAL, "rank ", c.rank, ": ", what, " (NCCL) failed: ",
           lib.GetErrorString(r), ": ", last,
           waited ? "; the communicator was aborted" : "");
}

// The group's communicator, owned and locked for one collective.
class CommLease {
 public:
  CommLease(int64_t group, const char* op) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_comms.find(group);
      if (it != g_comms.end()) comm_ = it->second;
    }
    DG_CHECK(comm_ != nullptr, DG_FAILED_PRECONDITION, op,
             ": no NCCL communicator for process group ", group,
             " on this rank; call dragon_core.distributed.init_process_group("
             "backend='nccl') (and new_group) first");
    lock_ = std::unique_lock<std::mutex>(comm_->use);
    const std::string note = Note(*comm_);
    DG_CHECK(note.empty(), DG_DEADLINE_EXCEEDED, op, ": ", note,
             "; call dragon_core.distributed.init_process_group() again");
    DG_CHECK(comm_->comm.load() != nullptr, DG_FAILED_PRECONDITION, op,
             ": the NCCL communicator of process group ", group, " on rank ",
             comm_->rank, " was aborted (after a timeout, an NCCL error or an aborting "
             "destroy_process_group()); call dragon_core.distributed.init_process_group() "
             "again");
  }
  // A collective's tensor must live on the communicator's GPU: NCCL would
  // otherwise read another device's memory (or fail with an unclear error).
  void CheckDevice(const dg::KernelContext& ctx, int64_t group, const char* op) const {
    ++comm_->seq;
    const int dev = ctx.device().index;
    DG_CHECK(comm_->device < 0 || dev == comm_->device, DG_INVALID_ARGUMENT, op,
             ": the tensor is on cuda:", dev, " but rank ", comm_->rank,
             "'s NCCL communicator of process group ", group, " is on cuda:", comm_->device,
             "; move the tensor to cuda:", comm_->device, " (or pass device_id=cuda:", dev,
             " to init_process_group)");
  }
  Comm& operator*() const { return *comm_; }
  const std::shared_ptr<Comm>& shared() const { return comm_; }
  Comm* operator->() const { return comm_.get(); }

 private:
  std::shared_ptr<Comm> comm_;
  std::unique_lock<std::mutex> lock_;
};

// ------------------------------------------------------------ watchdog
//
// Settle covers an NCCL call until it has enqueued its kernel; a kernel
// that then never completes (a peer died or stopped answering after the
// enqueue) would hang whoever waits on the stream. After each collective
// the kernels record a CUDA event on its stream (driver API) and hand it
// here; one thread per process polls the events. An event still pending
// past the group's timeout aborts the communicator (its kernels return, so
// the stream moves again), is printed to stderr, makes later
// collectives on the group raise it, and ends the process after
// $DRAGON_DIST_ABORT_GRACE seconds (default 10; negative: never), as the
// MPI half does: the data of the aborted collective is not valid.
class Watchdog {
 public:
  static Watchdog& Get() {
    static Watchdog* w = new Watchdog();  // never destroyed: its thread may outlive main
    return *w;
  }

  // Tracks the collective just enqueued on `stream` (nothing when the
  // driver's events are not available or the stream is being captured
  // into a CUDA graph: a replay is not tracked).
  void Track(const std::shared_ptr<Comm>& c, void* stream, const char* what) {
    Driver& d = CudaDriver();
    if (!d.handle || d.init_result != 0) return;
    int capturing = 0;
    if (d.StreamIsCapturing(stream, &capturing) != 0 || capturing != 0) return;
    void* ev = nullptr;
    if (d.EventCreate(&ev, 2 /* CU_EVENT_DISABLE_TIMING */) != 0) return;
    if (d.EventRecord(ev, stream) != 0) {
      d.EventDestroy(ev);
      return;
    }
    Pending p;
    p.comm = c;
    p.event = ev;
    if (d.CtxGetCurrent(&p.ctx) != 0) p.ctx = nullptr;
    p.what = std::string(what) + " #" + std::to_string(c->seq);
    p.deadline = DeadlineAfter(c->timeout_s);
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(std::move(p));
    if (!started_) {
      started_ = true;
      std::thread([this] { Loop(); }).detach();
    }
  }

 private:
  struct Pending {
    std::shared_ptr<Comm> comm;
    void* event = nullptr;
    void* ctx = nullptr;  // the context the event belongs to (current at record)
    std::string what;
    std::chrono::steady_clock::time_point deadline;
  };

  void Loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::vector<Pending> work;
      {
        std::lock_guard<std::mutex> lock(mu_);
        work.swap(items_);
      }
      std::vector<Pending> keep;
      for (Pending& p : work) {
        if (!Check(p)) keep.push_back(std::move(p));
      }
      if (keep.empty()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      // Items tracked meanwhile go after the ones kept, in issue order.
      keep.insert(keep.end(), std::make_move_iterator(items_.begin()),
                  std::make_move_iterator(items_.end()));
      items_.swap(keep);
    }
  }

  // True when `p` is settled (completed, or its communicator is gone or
  // aborted here); its event is then destroyed.
  bool Check(Pending& p) {
    Driver& d = CudaDriver();
    Comm& c = *p.comm;
    const ncclComm_t h = c.comm.load();
    // Queries and destroys run in the event's context, as on the thread
    // that recorded it.
    if (p.ctx) d.CtxSetCurrent(p.ctx);
    std::string failure;
    if (h == nullptr) {
      // destroyed or aborted by another path, which reported it
    } else {
      const int q = d.EventQuery(p.event);
      if (q == 0) {
        // completed
      } else if (q != 600 /* CUDA_ERROR_NOT_READY */) {
        // The event cannot be queried (a device error, which the stream's
        // next synchronisation reports, or a driver misuse): the collective
        // is no longer followed, rather than aborted on a wrong guess.
        static std::once_flag warned;
        std::call_once(warned, [&] {
          std::fprintf(stderr, "dragon-nccl-dist: the NCCL watchdog cannot query the event "
                       "of %s (%s); such collectives are not followed\n", p.what.c_str(),
                       d.Describe(q).c_str());
          std::fflush(stderr);
        });
      } else {
        // (NCCL's asynchronous errors are not polled here: the handle could
        // be freed by a destroy on another thread meanwhile. A peer's
        // failure that NCCL reports also leaves the kernel pending.)
        if (std::chrono::steady_clock::now() > p.deadline) {
          std::ostringstream t;
          t << c.timeout_s;
          failure = p.what + " (NCCL) was enqueued on cuda:" + std::to_string(c.device) +
                    " but did not complete on the GPU within " + t.str() +
                    " s (a peer died or stopped answering)";
        } else {
          return false;
        }
      }
    }
    if (!failure.empty()) Fail(c, failure);
    d.EventDestroy(p.event);
    return true;
  }

  void Fail(Comm& c, const std::string& failure) {
    const std::string msg = "rank " + std::to_string(c.rank) + ": " + failure +
                            " on process group " + std::to_string(c.group) +
                            "; the watchdog aborted the communicator";
    {
      std::lock_guard<std::mutex> lock(c.note_mu);
      if (c.note.empty()) c.note = msg;
    }
    // As an aborting destroy does: a collective settling on another thread
    // sees the request and aborts itself (raising this message); one stuck
    // inside an NCCL call is cut off after 2 s.
    c.abort_requested.store(true, std::memory_order_release);
    {
      std::unique_lock<std::mutex> use(c.use, std::defer_lock);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!use.try_lock() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      AbortComm(Lib(), c);
    }
    const char* env = std::getenv("DRAGON_DIST_ABORT_GRACE");
    const double grace = env && *env ? std::atof(env) : 10.0;
    std::fprintf(stderr, "dragon-nccl-dist: %s%s\n", msg.c_str(),
                 grace >= 0 ? "; the process ends after the grace period" : "");
    std::fflush(stderr);
    if (grace < 0) return;
    static std::once_flag once;
    std::call_once(once, [grace, msg] {
      std::thread([grace, msg] {
        SleepSeconds(grace);
        std::fprintf(stderr, "dragon-nccl-dist: ending the process %.3g s after: %s\n", grace,
                     msg.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }).detach();
    });
  }

  std::mutex mu_;
  std::vector<Pending> items_;
  bool started_ = false;
};

// After a collective's NCCL call was enqueued: count it and let the
// watchdog follow its kernel.
void Enqueued(const CommLease& lease, dg::KernelContext& ctx, const char* what) {
  Watchdog::Get().Track(lease.shared(), ctx.stream(), what);
}

bool NcclType(DgDType d, ncclDataType_t* t) {
  switch (d) {
    case DG_INT8: *t = ncclInt8; return true;
    case DG_UINT8: case DG_BOOL: *t = ncclUint8; return true;
    case DG_INT32: *t = ncclInt32; return true;
    case DG_INT64: *t = ncclInt64; return true;
    case DG_FLOAT16: *t = ncclFloat16; return true;
    case DG_BFLOAT16: *t = ncclBfloat16; return true;
    case DG_FLOAT32: *t = ncclFloat32; return true;
    case DG_FLOAT64: *t = ncclFloat64; return true;
    default: return false;
  }
}

ncclRedOp_t RedOp(const std::string& op, DgDType d, const char* name) {
  if (d == DG_BOOL) {
    DG_CHECK(op == "max" || op == "min", DG_INVALID_ARGUMENT, name,
             ": reduce_op '", op, "' is not defined for bool (max is or, min is and)");
  }
  if (op == "sum") return ncclSum;
  if (op == "prod") return ncclProd;
  if (op == "max") return ncclMax;
  if (op == "min") return ncclMin;
  DG_CHECK(op == "avg", DG_INVALID_ARGUMENT, name, ": unknown reduce_op '", op, "'");
  DG_CHECK(d == DG_FLOAT16 || d == DG_BFLOAT16 || d == DG_FLOAT32 || d == DG_FLOAT64,
           DG_INVALID_ARGUMENT, name, ": reduce_op 'avg' needs a floating tensor");
  return ncclAvg;
}

// Reductions need an NCCL element type; data movement goes as bytes.
ncclDataType_t ReduceType(DgDType d, const char* name) {
  ncclDataType_t t;
  DG_CHECK(NcclType(d, &t), DG_INVALID_ARGUMENT, name,
           ": NCCL has no reduction for int16 tensors");
  return t;
}

size_t Bytes(const dg::TensorRef& t) {
  size_t item = 1;
  switch (t.dtype()) {
    case DG_INT16: case DG_FLOAT16: case DG_BFLOAT16: item = 2; break;
    case DG_INT32: case DG_FLOAT32: item = 4; break;
    case DG_INT64: case DG_FLOAT64: item = 8; break;
    default: item = 1;
  }
  return item * static_cast<size_t>(t.numel());
}

cudaStream_t Stream(dg::KernelContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream());
}

void AllReduceKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("CollectiveAllReduce");
  const CommLease lease(ctx.i("group"), "CollectiveAllReduce");
  lease.CheckDevice(ctx, ctx.i("group"), "CollectiveAllReduce");
  Comm& c = *lease;
  const auto x = ctx.input(0), y = ctx.output(0);
  const ncclDataType_t t = ReduceType(x.dtype(), "CollectiveAllReduce");
  const ncclRedOp_t op = RedOp(ctx.s("reduce_op"), x.dtype(), "CollectiveAllReduce");
  Settle(lib, c, lib.AllReduce(x.raw_data(), y.raw_data(), x.numel(), t, op, c.comm,
                               Stream(ctx)), "all_reduce");
  Enqueued(lease, ctx, "all_reduce");
}

void BroadcastKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("CollectiveBroadcast");
  const CommLease lease(ctx.i("group"), "CollectiveBroadcast");
  lease.CheckDevice(ctx, ctx.i("group"), "CollectiveBroadcast");
  Comm& c = *lease;
  const auto x = ctx.input(0), y = ctx.output(0);
  Settle(lib, c, lib.Broadcast(x.raw_data(), y.raw_data(), Bytes(x), ncclUint8,
                               static_cast<int>(ctx.i("src")), c.comm, Stream(ctx)),
         "broadcast");
  Enqueued(lease, ctx, "broadcast");
}

void AllGatherKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("CollectiveAllGather");
  const CommLease lease(ctx.i("group"), "CollectiveAllGather");
  lease.CheckDevice(ctx, ctx.i("group"), "CollectiveAllGather");
  Comm& c = *lease;
  const auto x = ctx.input(0), y = ctx.output(0);
  Settle(lib, c, lib.AllGather(x.raw_data(), y.raw_data(), Bytes(x), ncclUint8, c.comm,
                               Stream(ctx)), "all_gather");
  Enqueued(lease, ctx, "all_gather");
}

void ReduceScatterKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("CollectiveReduceScatter");
  const CommLease lease(ctx.i("group"), "CollectiveReduceScatter");
  lease.CheckDevice(ctx, ctx.i("group"), "CollectiveReduceScatter");
  Comm& c = *lease;
  const auto x = ctx.input(0), y = ctx.output(0);
  const ncclDataType_t t = ReduceType(x.dtype(), "CollectiveReduceScatter");
  const ncclRedOp_t op = RedOp(ctx.s("reduce_op"), x.dtype(), "CollectiveReduceScatter");
  Settle(lib, c, lib.ReduceScatter(x.raw_data(), y.raw_data(), y.numel(), t, op, c.comm,
                                   Stream(ctx)), "reduce_scatter");
  Enqueued(lease, ctx, "reduce_scatter");
}

void AllToAllKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("CollectiveAllToAll");
  const CommLease lease(ctx.i("group"), "CollectiveAllToAll");
  lease.CheckDevice(ctx, ctx.i("group"), "CollectiveAllToAll");
  Comm& c = *lease;
  const auto x = ctx.input(0), y = ctx.output(0);
  const size_t block = Bytes(x) / static_cast<size_t>(c.nranks);
  const char* in = static_cast<const char*>(x.raw_data());
  char* out = static_cast<char*>(y.raw_data());
  Settle(lib, c, lib.GroupStart(), "all_to_all");
  for (int peer = 0; peer < c.nranks; ++peer) {
    Settle(lib, c, lib.Send(in + peer * block, block, ncclUint8, peer, c.comm, Stream(ctx)),
           "all_to_all");
    Settle(lib, c, lib.Recv(out + peer * block, block, ncclUint8, peer, c.comm, Stream(ctx)),
           "all_to_all");
  }
  Settle(lib, c, lib.GroupEnd(), "all_to_all");
  Enqueued(lease, ctx, "all_to_all");
}

// ------------------------------------------------------------ host ops

void NcclVersionShape(dg::InferContext& ctx) { ctx.set_output(0, DG_INT64, {}); }
void NcclVersionKernel(dg::KernelContext& ctx) {
  *ctx.output(0).data<int64_t>() = Require("NcclVersion").version;
}

void NcclUniqueIdShape(dg::InferContext& ctx) {
  ctx.set_output(0, DG_UINT8, {static_cast<int64_t>(sizeof(ncclUniqueId))});
}
void NcclUniqueIdKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("NcclUniqueId");
  ncclUniqueId id;
  const ncclResult_t r = lib.GetUniqueId(&id);
  DG_CHECK(r == ncclSuccess, DG_UNAVAILABLE, "NcclUniqueId: ncclGetUniqueId failed: ",
           lib.GetErrorString(r));
  std::memcpy(ctx.output(0).raw_data(), &id, sizeof(id));
}

void NcclCommInitShape(dg::InferContext& ctx) {
  const auto s = ctx.input(0).shape();
  DG_CHECK(ctx.input(0).dtype() == DG_UINT8 && s.size() == 1 &&
               s[0] == static_cast<int64_t>(sizeof(ncclUniqueId)),
           DG_INVALID_ARGUMENT, "NcclCommInit: unique_id must be uint8[",
           sizeof(ncclUniqueId), "]");
  ctx.set_output(0, DG_INT64, {2});
}
void NcclCommInitKernel(dg::KernelContext& ctx) {
  Nccl& lib = Require("NcclCommInit");
  const int64_t group = ctx.i("group");
  auto made = std::make_shared<Comm>();
  Comm& c = *made;
  c.nranks = static_cast<int>(ctx.i("nranks"));
  c.rank = static_cast<int>(ctx.i("rank"));
  c.timeout_s = ctx.f("timeout_s");
  c.group = group;
  DG_CHECK(c.nranks >= 1 && c.rank >= 0 && c.rank < c.nranks, DG_INVALID_ARGUMENT,
           "NcclCommInit: rank ", c.rank, " of ", c.nranks);
  ncclUniqueId id;
  std::memcpy(&id, ctx.input(0).raw_data(), sizeof(id));
  const int device = ChooseDevice(ctx.i("device"), ctx.i("local_rank"), c.rank);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t raw = nullptr;
  ncclResult_t r;
  {
    // ncclCommInitRankConfig creates the communicator on the calling
    // thread's current device (its own init thread inherits it).
    std::unique_ptr<DeviceScope> scope;
    if (device >= 0) scope = std::make_unique<DeviceScope>(device, c.rank);
    r = lib.CommInitRankConfig(&raw, c.nranks, id, c.rank, &config);
  }
  DG_CHECK(r == ncclSuccess || r == ncclInProgress, DG_UNAVAILABLE, "rank ", c.rank,
           ": NcclCommInit: ncclCommInitRankConfig failed", device >= 0 ? " on cuda:" : "",
           device >= 0 ? std::to_string(device) : std::string(), ": ",
           lib.GetErrorString(r), ": ", lib.GetLastError(nullptr));
  c.comm.store(raw);
  if (r == ncclInProgress) lib.CommGetAsyncError(raw, &r);
  Settle(lib, c, r, "communicator creation");  // a failure aborts (frees) it
  // The device NCCL bound the communicator to (the chosen one, or the
  // thread's current device when none was chosen).
  int bound = -1;
  r = lib.CommCuDevice(raw, &bound);
  if (r != ncclSuccess || (device >= 0 && bound != device)) {
    AbortComm(lib, c);
    DG_CHECK(false, DG_INTERNAL, "rank ", c.rank, ": NcclCommInit: the communicator ",
             r != ncclSuccess ? std::string("has no device: ") + lib.GetErrorString(r)
                              : "is on cuda:" + std::to_string(bound) + ", not the chosen cuda:" +
                                    std::to_string(device));
  }
  c.device = bound;
  std::shared_ptr<Comm> old;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    old = std::exchange(g_comms[group], made);
  }
  if (old) {  // re-initialised: free the previous one once nobody uses it
    std::lock_guard<std::mutex> use(old->use);
    // Its result is not checked: after a failed ncclCommDestroy the handle
    // may be half freed, so nothing may call NCCL on it again.
    if (ncclComm_t h = old->comm.exchange(nullptr)) lib.CommDestroy(h);
  }
  int64_t* out = ctx.output(0).data<int64_t>();
  out[0] = c.nranks;
  out[1] = c.device;
}

// Frees this rank's communicator of `group` (destroy_process_group, for the
// world and every sub-group): ncclCommFinalize, polled against the group's
// timeout, then ncclCommDestroy. With `abort` (the failure path: peers may
// be gone and a finalize would wait for them), or when the finalize fails
// or times out, ncclCommAbort instead. Idempotent: a group without a
// communicator (never made, already freed, aborted by a timed-out
// collective or an NCCL error) gives 0 and calls no NCCL function, so it
// works where libnccl cannot even be opened. Output: 0 nothing to free,
// 1 destroyed, 2 aborted as asked (by this call or by the collective it
// stopped), 3 aborted after a failed or timed-out finalize.
void NcclCommDestroyShape(dg::InferContext& ctx) { ctx.set_output(0, DG_INT64, {}); }
void NcclCommDestroyKernel(dg::KernelContext& ctx) {
  const int64_t group = ctx.i("group");
  const bool abort = ctx.b("abort");
  std::shared_ptr<Comm> held;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_comms.find(group);
    if (it != g_comms.end()) {
      held = std::move(it->second);
      g_comms.erase(it);
    }
  }
  int64_t* out = ctx.output(0).data<int64_t>();
  *out = 0;
  if (!held) return;
  // Waits for a collective in flight on another thread: bounded by its
  // timeout; with abort, by one poll (it sees abort_requested and aborts
  // itself) or, when it is stuck inside an NCCL call, by kAbortWait, after
  // which the handle is taken and aborted without the lock, cutting it off.
  std::unique_lock<std::mutex> use(held->use, std::defer_lock);
  if (abort) {
    // Polled with try_lock, not a timed lock: std::timed_mutex needs
    // pthread_mutex_clocklock (glibc 2.30), newer than the wheel's
    // manylinux_2_28 allows.
    held->abort_requested.store(true, std::memory_order_release);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!use.try_lock() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  } else {
    use.lock();
  }
  Comm c;
  c.rank = held->rank;
  c.timeout_s = held->timeout_s;
  c.comm.store(held->comm.exchange(nullptr));
  if (!c.comm.load()) {
    if (held->aborted_on_request.load(std::memory_order_acquire)) *out = 2;
    return;
  }
  Nccl& lib = Require("NcclCommDestroy");  // opened: it made c.comm
  if (abort) {
    lib.CommAbort(c.comm);
    *out = 2;
    return;
  }
  ncclResult_t r = lib.CommFinalize(c.comm);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(c.timeout_s);
  while (r == ncclInProgress && std::chrono::steady_clock::now() <= deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (lib.CommGetAsyncError(c.comm, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    lib.CommAbort(c.comm);
    *out = 3;
    return;
  }
  r = lib.CommDestroy(c.comm);
  DG_CHECK(r == ncclSuccess, DG_INTERNAL, "rank ", c.rank, ": NcclCommDestroy: ncclCommDestroy "
           "of process group ", group, " failed: ", lib.GetErrorString(r), ": ",
           lib.GetLastError(nullptr));
  *out = 1;
}

}  // namespace

DG_OP(NcclVersion)
    .Doc("The version of the NCCL library dragon-nccl-dist opened "
         "(major*10000 + minor*100 + patch); fails naming what was tried when "
         "libnccl.so.2 cannot be opened.")
    .Output("version", dg::Bit(DG_INT64), 0, "0-d int64.")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD)
    .Shape(NcclVersionShape);

DG_OP(NcclUniqueId)
    .Doc("A fresh ncclUniqueId (drawn by a process group's rank 0; the other ranks "
         "receive it by MPI or through the rendezvous store).")
    .Output("unique_id", dg::Bit(DG_UINT8), 0, "uint8[128].")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD)
    .Shape(NcclUniqueIdShape);

DG_OP(NcclCommInit)
    .Doc("Creates this rank's non-blocking NCCL communicator for a process group.")
    .Input("unique_id", dg::Bit(DG_UINT8), DG_ARG_NO_GRAD, "uint8[128] from NcclUniqueId.")
    .Output("info", dg::Bit(DG_INT64), 0,
            "int64[2]: the communicator's size and the CUDA device index it lives on.")
    .RequiredAttr("group", DG_ATTR_INT, "Process-group id.")
    .RequiredAttr("nranks", DG_ATTR_INT, "Number of ranks.")
    .RequiredAttr("rank", DG_ATTR_INT, "This rank in the group.")
    .Attr("timeout_s", 300.0, "Seconds any NCCL call may stay in progress.")
    .Attr("device", int64_t{-1},
          "The CUDA device index to create the communicator on (-1: from local_rank).")
    .Attr("local_rank", int64_t{-1},
          "The rank's index on its node: device = local_rank modulo the visible CUDA "
          "devices when `device` is -1 (-1 too: the thread's current device).")
    .Flags(DG_OP_COLLECTIVE | DG_OP_NO_GRAD)  // every rank calls it; runs without the GIL
    .Shape(NcclCommInitShape);

DG_OP(NcclCommDestroy)
    .Doc("Frees this rank's NCCL communicator of a process group (ncclCommFinalize then "
         "ncclCommDestroy; ncclCommAbort with abort, or when the finalize fails or times "
         "out). Idempotent: 0 when the group has none.")
    .Output("result", dg::Bit(DG_INT64), 0,
            "0-d int64: 0 nothing to free, 1 destroyed, 2 aborted as asked, 3 aborted "
            "after a failed or timed-out finalize.")
    .RequiredAttr("group", DG_ATTR_INT, "Process-group id.")
    .Attr("abort", false, "Abort (the failure path) instead of finalizing.")
    .Flags(DG_OP_COLLECTIVE | DG_OP_NO_GRAD)  // may wait up to the timeout: no GIL
    .Shape(NcclCommDestroyShape);

DG_KERNEL_MASK("NcclVersion", "cpu", dg::kAll, 0, 0, NcclVersionKernel);
DG_KERNEL_MASK("NcclUniqueId", "cpu", dg::kAll, 0, 0, NcclUniqueIdKernel);
DG_KERNEL_MASK("NcclCommInit", "cpu", dg::Bit(DG_UINT8), 0, 0, NcclCommInitKernel);
DG_KERNEL_MASK("NcclCommDestroy", "cpu", dg::kAll, 0, 0, NcclCommDestroyKernel);

DG_KERNEL_MASK("CollectiveAllReduce", "cuda", dg::kAll, 0, 0, AllReduceKernel);
DG_KERNEL_MASK("CollectiveBroadcast", "cuda", dg::kAll, 0, 0, BroadcastKernel);
DG_KERNEL_MASK("CollectiveAllGather", "cuda", dg::kAll, 0, 0, AllGatherKernel);
DG_KERNEL_MASK("CollectiveReduceScatter", "cuda", dg::kAll, 0, 0, ReduceScatterKernel);
DG_KERNEL_MASK("CollectiveAllToAll", "cuda", dg::kAll, 0, 0, AllToAllKernel);

