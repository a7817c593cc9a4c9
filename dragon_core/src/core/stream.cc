#include "stream.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "device.h"
#include "tensor.h"

namespace dragon {
namespace {

// What the core keeps per stream-ordered device (type, index).
struct DevState {
  std::mutex mu;
  void* default_stream = nullptr;
  bool has_default = false;
  std::vector<void*> pool;  // dg.Stream(device) round-robins over these
  size_t next = 0;
  std::vector<void*> events;  // idle event handles
  std::atomic<int64_t> device_syncs{0}, stream_syncs{0}, event_syncs{0},
      stream_waits{0}, events_created{0}, h2d_copies{0}, d2h_copies{0};
};

constexpr size_t kPoolSize = 8;

DevState& State(DgDevice d) {
  static std::mutex mu;
  static auto* states = new std::map<std::pair<int32_t, int32_t>,
                                     std::unique_ptr<DevState>>();  // leaked
  std::lock_guard<std::mutex> lock(mu);
  auto& p = (*states)[{d.type, d.index}];
  if (!p) p = std::make_unique<DevState>();
  return *p;
}

const DgDeviceDef& Def(DgDevice d) { return DeviceRegistry::Get().type(d.type).def; }

void Check(DgDevice d, DgStatus s, const char* what) {
  if (s != DG_OK) ThrowDeviceError(d, s, what);
}

// The calling thread's current streams: a short list, searched linearly.
struct ThreadStreams {
  std::vector<std::pair<DgDevice, void*>> current;
  DgDevice activated{-1, -1};
};
thread_local ThreadStreams t_streams;

std::mutex& StorageLock(const Storage* s) {
  static std::array<std::mutex, 64> stripes;
  return stripes[(reinterpret_cast<uintptr_t>(s) >> 6) % stripes.size()];
}

const char* StatusName(DgStatus s) {
  switch (s) {
    case DG_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DG_NOT_FOUND: return "NOT_FOUND";
    case DG_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DG_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case DG_INTERNAL: return "INTERNAL";
    case DG_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case DG_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case DG_UNAVAILABLE: return "UNAVAILABLE";
    case DG_ABORTED: return "ABORTED";
    case DG_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    default: return "UNKNOWN";
  }
}

}  // namespace

void ThrowDeviceError(DgDevice d, DgStatus code, const std::string& what) {
  const DgDeviceDef& def = Def(d);
  std::string detail;
  if (def.error_message) {
    const char* m = def.error_message(def.user_data, d.index);
    if (m && m[0]) detail = m;
  }
  throw CoreError(code == DG_OK ? DG_INTERNAL : code,
                  dg::Str(DeviceRegistry::Get().Name(d), ": ", what, " failed (",
                          StatusName(code), "): ",
                          detail.empty() ? "the device gave no message" : detail));
}

bool StreamOrdered(DgDevice d) {
  return d.type != 0 && (Def(d).flags & DG_DEVICE_STREAM_ORDERED) != 0;
}

void* DefaultStream(DgDevice d) {
  if (!StreamOrdered(d)) return nullptr;
  DevState& st = State(d);
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.has_default) {
    const DgDeviceDef& def = Def(d);
    if (!def.default_stream)
      throw CoreError(DG_INTERNAL, dg::Str(DeviceRegistry::Get().Name(d),
                                           ": a stream-ordered device without default_stream"));
    Check(d, def.default_stream(def.user_data, d.index, &st.default_stream),
          "default_stream");
    st.has_default = true;
  }
  return st.default_stream;
}

void* PoolStream(DgDevice d) {
  if (!StreamOrdered(d)) return nullptr;
  DevState& st = State(d);
  std::lock_guard<std::mutex> lock(st.mu);
  size_t slot = st.next++ % kPoolSize;
  if (slot >= st.pool.size()) {
    const DgDeviceDef& def = Def(d);
    void* s = nullptr;
    Check(d, def.stream_create(def.user_data, d.index, &s), "stream_create");
    st.pool.push_back(s);
  }
  return st.pool[slot];
}

void* CurrentStream(DgDevice d) {
  if (d.type == 0 || !StreamOrdered(d)) return nullptr;
  ThreadStreams& ts = t_streams;
  if (!SameDevice(ts.activated, d)) {
    const DgDeviceDef& def = Def(d);
    if (def.activate) Check(d, def.activate(def.user_data, d.index), "activate");
    ts.activated = d;
  }
  for (auto& kv : ts.current)
    if (SameDevice(kv.first, d)) return kv.second;
  void* s = DefaultStream(d);
  ts.current.emplace_back(d, s);
  return s;
}

void* SetCurrentStream(DgDevice d, void* stream) {
  void* prev = CurrentStream(d);
  if (d.type == 0 || !StreamOrdered(d)) return nullptr;
  for (auto& kv : t_streams.current)
    if (SameDevice(kv.first, d)) kv.second = stream;
  return prev;
}

void SyncStream(DgDevice d, void* stream, const char* what) {
  const DgDeviceDef& def = Def(d);
  if (!StreamOrdered(d)) {
    SyncDevice(d, what);
    return;
  }
  State(d).stream_syncs.fetch_add(1, std::memory_order_relaxed);
  Check(d, def.stream_sync(def.user_data, d.index, stream), what);
}

void SyncDevice(DgDevice d, const char* what) {
  if (d.type == 0) return;
  const DgDeviceDef& def = Def(d);
  if (!def.synchronize) return;
  State(d).device_syncs.fetch_add(1, std::memory_order_relaxed);
  Check(d, def.synchronize(def.user_data, d.index), what);
}

bool CanCapture(DgDevice d) {
  if (!StreamOrdered(d)) return false;
  const DgDeviceDef& def = Def(d);
  return def.stream_begin_capture && def.stream_end_capture && def.graph_launch &&
         def.graph_destroy;
}

void BeginCapture(DgDevice d, void* stream) {
  const DgDeviceDef& def = Def(d);
  Check(d, def.stream_begin_capture(def.user_data, d.index, stream), "stream_begin_capture");
}

void* EndCapture(DgDevice d, void* stream, std::string* why) {
  const DgDeviceDef& def = Def(d);
  void* graph = nullptr;
  const DgStatus s = def.stream_end_capture(def.user_data, d.index, stream, &graph);
  if (s == DG_OK && graph != nullptr) return graph;
  std::string detail;
  if (def.error_message) {
    const char* m = def.error_message(def.user_data, d.index);
    if (m && m[0]) detail = m;
  }
  *why = dg::Str("stream_end_capture failed (", StatusName(s == DG_OK ? DG_INTERNAL : s),
                 "): ", detail.empty() ? "the device gave no message" : detail);
  if (graph != nullptr) (void)def.graph_destroy(def.user_data, d.index, graph);
  return nullptr;
}

void LaunchGraph(DgDevice d, void* graph, void* stream) {
  const DgDeviceDef& def = Def(d);
  Check(d, def.graph_launch(def.user_data, d.index, graph, stream), "graph_launch");
}

void DestroyGraph(DgDevice d, void* graph) {
  if (graph == nullptr) return;
  // A failure (e.g. the device runtime already unloaded at exit) leaves
  // nothing to clean up that the process could still use: ignored.
  const DgDeviceDef& def = Def(d);
  (void)def.graph_destroy(def.user_data, d.index, graph);
}

void* AcquireEvent(DgDevice d) {
  if (!StreamOrdered(d)) return nullptr;
  DevState& st = State(d);
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.events.empty()) {
      void* e = st.events.back();
      st.events.pop_back();
      return e;
    }
  }
  const DgDeviceDef& def = Def(d);
  void* e = nullptr;
  Check(d, def.event_create(def.user_data, d.index, &e), "event_create");
  st.events_created.fetch_add(1, std::memory_order_relaxed);
  return e;
}

void ReleaseEvent(DgDevice d, void* event) {
  if (!event) return;
  DevState& st = State(d);
  std::lock_guard<std::mutex> lock(st.mu);
  st.events.push_back(event);
}

void RecordEvent(DgDevice d, void* event, void* stream) {
  if (!event) return;
  const DgDeviceDef& def = Def(d);
  Check(d, def.event_record(def.user_data, d.index, event, stream), "event_record");
}

bool QueryEvent(DgDevice d, void* event) {
  if (!event) return true;
  const DgDeviceDef& def = Def(d);
  int32_t done = 0;
  Check(d, def.event_query(def.user_data, d.index, event, &done), "event_query");
  return done != 0;
}

void SyncEvent(DgDevice d, void* event) {
  if (!event) return;
  const DgDeviceDef& def = Def(d);
  State(d).event_syncs.fetch_add(1, std::memory_order_relaxed);
  Check(d, def.event_synchronize(def.user_data, d.index, event), "event_synchronize");
}

void StreamWaitEvent(DgDevice d, void* stream, void* event) {
  if (!event) return;
  const DgDeviceDef& def = Def(d);
  State(d).stream_waits.fetch_add(1, std::memory_order_relaxed);
  Check(d, def.stream_wait_event(def.user_data, d.index, stream, event),
        "stream_wait_event");
}

float ElapsedMs(DgDevice d, void* start, void* end) {
  const DgDeviceDef& def = Def(d);
  if (!def.event_elapsed_ms)
    throw CoreError(DG_UNIMPLEMENTED,
                    dg::Str(DeviceRegistry::Get().Name(d), " does not time events"));
  float ms = 0;
  Check(d, def.event_elapsed_ms(def.user_data, d.index, start, end, &ms), "event_elapsed_ms");
  return ms;
}

void JoinStreams(DgDevice d, void* from, void* to) {
  if (from == to || !StreamOrdered(d)) return;
  void* e = AcquireEvent(d);
  try {
    RecordEvent(d, e, from);
    StreamWaitEvent(d, to, e);
  } catch (...) {
    ReleaseEvent(d, e);
    throw;
  }
  // The wait captured the event's state: the handle may be re-recorded.
  ReleaseEvent(d, e);
}

void UseOnStream(Storage& s, void* stream, bool write) {
  if (stream == nullptr) return;
  const DgDevice d = s.device();
  std::lock_guard<std::mutex> lock(StorageLock(&s));
  if (s.last_writer && s.last_writer != stream) JoinStreams(d, s.last_writer, stream);
  if (write) {
    // Write after read: earlier readers on other streams go first.
    if (s.home_stream && s.home_stream != stream && s.home_stream != s.last_writer)
      JoinStreams(d, s.home_stream, stream);
    for (void* u : s.users)
      if (u != stream && u != s.last_writer) JoinStreams(d, u, stream);
    s.last_writer = stream;
  }
  if (stream != s.home_stream) {
    bool known = false;
    for (void* u : s.users) known = known || u == stream;
    if (!known) s.users.push_back(stream);
  }
}

void CopyOrdered(Storage& dst, void* dst_ptr, Storage& src, const void* src_ptr,
                 size_t bytes) {
  if (bytes == 0) return;
  const DgDevice sd = src.device(), dd = dst.device();
  const bool s_async = StreamOrdered(sd), d_async = StreamOrdered(dd);
  if (!s_async && !d_async) {
    CopyBytes(dd, dst_ptr, sd, src_ptr, bytes);
    return;
  }
  if (sd.type == 0) {  // host -> device: src consumed when copy_h2d returns
    const DgDeviceDef& def = Def(dd);
    void* stream = CurrentStream(dd);
    UseOnStream(dst, stream, true);
    State(dd).h2d_copies.fetch_add(1, std::memory_order_relaxed);
    Check(dd, def.copy_h2d(def.user_data, dd.index, dst_ptr, src_ptr, bytes, stream),
          "copy to the device");
    return;
  }
  if (dd.type == 0) {  // device -> host: wait for this one stream only
    const DgDeviceDef& def = Def(sd);
    void* stream = CurrentStream(sd);
    UseOnStream(src, stream, false);
    State(sd).d2h_copies.fetch_add(1, std::memory_order_relaxed);
    Check(sd, def.copy_d2h(def.user_data, sd.index, dst_ptr, src_ptr, bytes, stream),
          "copy to the host");
    SyncStream(sd, stream, "waiting for a copy to the host");
    return;
  }
  if (SameDevice(sd, dd) && Def(sd).copy_d2d) {
    const DgDeviceDef& def = Def(sd);
    void* stream = CurrentStream(sd);
    UseOnStream(src, stream, false);
    UseOnStream(dst, stream, true);
    Check(sd, def.copy_d2d(def.user_data, sd.index, dst_ptr, src_ptr, bytes, stream),
          "device copy");
    return;
  }
  // Between two devices: stage through the host (peer copies: see
  // docs/abi.md, not used by the core yet).
  std::vector<char> staging(bytes);
  auto host = Storage::Wrap(kHost, staging.data(), bytes, nullptr);
  CopyOrdered(*host, staging.data(), src, src_ptr, bytes);
  CopyOrdered(dst, dst_ptr, *host, staging.data(), bytes);
}

namespace {

// A pinned block and the events of the copies that may still read it.
struct PinnedBlock {
  DgDevice device;  // whose host_alloc gave it
  void* ptr = nullptr;
  std::mutex mu;
  std::vector<std::pair<DgDevice, void*>> events;  // (device of the copy, event)
};

std::mutex g_pinned_mu;
std::map<const void*, std::shared_ptr<PinnedBlock>>& Pinned() {
  static auto* m = new std::map<const void*, std::shared_ptr<PinnedBlock>>();
  return *m;
}

std::shared_ptr<PinnedBlock> FindPinned(const void* p) {
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  auto it = Pinned().find(p);
  return it == Pinned().end() ? nullptr : it->second;
}

}  // namespace

DgDevice DefaultPinDevice() {
  auto& reg = DeviceRegistry::Get();
  for (int32_t id = 1; id < reg.size(); ++id)
    if (reg.type(id).def.host_alloc && reg.type(id).def.host_free) return DgDevice{id, 0};
  return DgDevice{-1, -1};
}

std::shared_ptr<Storage> AllocatePinned(DgDevice d, size_t bytes) {
  const DgDeviceDef& def = Def(d);
  if (!def.host_alloc || !def.host_free)
    throw CoreError(DG_UNIMPLEMENTED, dg::Str(DeviceRegistry::Get().Name(d),
                                              " provides no pinned host memory"));
  auto block = std::make_shared<PinnedBlock>();
  block->device = d;
  Check(d, def.host_alloc(def.user_data, d.index, bytes ? bytes : 1, &block->ptr),
        "pinned host allocation");
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    Pinned()[block->ptr] = block;
  }
  return Storage::Wrap(kHost, block->ptr, bytes, [block] {
    {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      Pinned().erase(block->ptr);
    }
    try {  // copies still reading it go first (a host wait only then)
      for (auto& de : block->events) {
        SyncEvent(de.first, de.second);
        ReleaseEvent(de.first, de.second);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[dragon warning] %s\n", e.what());
    }
    const DgDeviceDef& def = Def(block->device);
    def.host_free(def.user_data, block->device.index, block->ptr);
  });
}

bool IsPinned(const Storage& s) { return s.device().type == 0 && FindPinned(s.data()) != nullptr; }

void CopyNonBlocking(Storage& dst, void* dst_ptr, Storage& src, const void* src_ptr,
                     size_t bytes) {
  const DgDevice dd = dst.device();
  std::shared_ptr<PinnedBlock> block =
      src.device().type == 0 && StreamOrdered(dd) ? FindPinned(src.data()) : nullptr;
  if (!block || bytes == 0) {
    CopyOrdered(dst, dst_ptr, src, src_ptr, bytes);
    return;
  }
  const DgDeviceDef& def = Def(dd);
  void* stream = CurrentStream(dd);
  UseOnStream(dst, stream, true);
  State(dd).h2d_copies.fetch_add(1, std::memory_order_relaxed);
  Check(dd, def.copy_h2d(def.user_data, dd.index, dst_ptr, src_ptr, bytes, stream),
        "non-blocking copy to the device");
  void* e = AcquireEvent(dd);
  RecordEvent(dd, e, stream);
  std::lock_guard<std::mutex> lock(block->mu);
  // Forget the copies that are done; keep the new one.
  std::vector<std::pair<DgDevice, void*>> pending;
  for (auto& de : block->events) {
    if (QueryEvent(de.first, de.second)) ReleaseEvent(de.first, de.second);
    else pending.push_back(de);
  }
  pending.emplace_back(dd, e);
  block->events.swap(pending);
}

void PrepareExport(Storage& s, bool has_stream, intptr_t consumer_stream) {
  const DgDevice d = s.device();
  if (!StreamOrdered(d) || (has_stream && consumer_stream == -1)) return;
  void* writer;
  {
    std::lock_guard<std::mutex> lock(StorageLock(&s));
    writer = s.last_writer;
  }
  if (writer == nullptr) return;
  if (has_stream)  // joins the writer; the allocator waits for the consumer too
    UseOnStream(s, reinterpret_cast<void*>(consumer_stream), false);
  else
    SyncStream(d, writer, "DLPack export");
}

StreamCounters GetStreamCounters(DgDevice d) {
  StreamCounters c;
  if (d.type == 0) return c;
  DevState& st = State(d);
  c.device_syncs = st.device_syncs.load();
  c.stream_syncs = st.stream_syncs.load();
  c.event_syncs = st.event_syncs.load();
  c.stream_waits = st.stream_waits.load();
  c.events_created = st.events_created.load();
  c.h2d_copies = st.h2d_copies.load();
  c.d2h_copies = st.d2h_copies.load();
  return c;
}

}  // namespace dragon
