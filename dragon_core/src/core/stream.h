// Streams and events of stream-ordered devices (ABI 1.3, docs/abi.md).
//
// Every thread has a current stream per device, by default the device's
// default_stream; kernels (DgCallFrame.stream) and copies go to it. The
// core never waits for a stream-ordered device except at host-visible
// points: a copy to the host waits for the one stream that carried it
// (after joining the stream that last wrote the source), an explicit
// Stream/Event synchronize, and the allocator's return of memory to the
// device. On devices without DG_DEVICE_STREAM_ORDERED every function here
// is a no-op or keeps the synchronous contract of ABI 1.0-1.2.
#ifndef DRAGON_CORE_STREAM_H_
#define DRAGON_CORE_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common.h"

namespace dragon {

class Storage;
struct DeviceType;

bool StreamOrdered(DgDevice d);

// The calling thread's current stream on `d` (NULL on synchronous devices
// and the host). Activates `d` for the thread (DgDeviceDef.activate) the
// first time this thread works on it.
void* CurrentStream(DgDevice d);
// Makes `stream` current on `d` for this thread; returns the previous one.
void* SetCurrentStream(DgDevice d, void* stream);
// The device's default stream (NULL on synchronous devices).
void* DefaultStream(DgDevice d);
// A stream of the device's pool (created on first use, never destroyed, as
// PyTorch's stream pool): `dg.Stream(device)`.
void* PoolStream(DgDevice d);

// Blocks until `stream` has finished; errors carry the device's message.
void SyncStream(DgDevice d, void* stream, const char* what);
// Device-wide synchronize (counted: steady state must make none).
void SyncDevice(DgDevice d, const char* what);

// Events (pooled handles; NULL on synchronous devices).
void* AcquireEvent(DgDevice d);
void ReleaseEvent(DgDevice d, void* event);
void RecordEvent(DgDevice d, void* event, void* stream);
bool QueryEvent(DgDevice d, void* event);
void SyncEvent(DgDevice d, void* event);
void StreamWaitEvent(DgDevice d, void* stream, void* event);
float ElapsedMs(DgDevice d, void* start, void* end);
// Work issued on `to` from now on waits for what was issued on `from`.
void JoinStreams(DgDevice d, void* from, void* to);

// Orders a use of `s` on `stream`: joins the stream that last wrote it,
// notes `stream` among its users, and (write) becomes its last writer.
void UseOnStream(Storage& s, void* stream, bool write);

// Copies bytes between storages of any two devices, ordered on the current
// streams; returns once the host may read a host destination. Throws.
void CopyOrdered(Storage& dst, void* dst_ptr, Storage& src,
                 const void* src_ptr, size_t bytes);

// Pinned host memory (DgDeviceDef.host_alloc of a device type): host
// storage that a stream-ordered device may read after the copy call
// returned. Freeing it waits for the copies still reading it.
std::shared_ptr<Storage> AllocatePinned(DgDevice pin_device, size_t bytes);
bool IsPinned(const Storage& s);
// The first registered device type with host_alloc ({-1,-1} when none).
DgDevice DefaultPinDevice();
// Host -> stream-ordered device without waiting for the host buffer to be
// consumed when `src` is pinned; otherwise as CopyOrdered.
void CopyNonBlocking(Storage& dst, void* dst_ptr, Storage& src,
                     const void* src_ptr, size_t bytes);

// DLPack export of a storage (`__dlpack__(stream=...)`): with a consumer
// stream handle of the same device, that stream waits (on the device) for
// the storage's last writer; with none, the host waits for that one
// writer stream; -1 means the consumer orders it itself.
void PrepareExport(Storage& s, bool has_stream, intptr_t consumer_stream);

// Throws CoreError(code) whose message adds the device's error_message.
[[noreturn]] void ThrowDeviceError(DgDevice d, DgStatus code,
                                   const std::string& what);

// Graph capture (ABI 1.5, optional DgDeviceDef entries; docs/devices.md).
// True when `d` is stream-ordered and offers all four capture entries.
bool CanCapture(DgDevice d);
// Throws CoreError (with the device's message) when the device refuses.
void BeginCapture(DgDevice d, void* stream);
// Ends the capture on `stream` (always). Returns the graph handle, or NULL
// with *why set to the device's explanation when the capture failed.
void* EndCapture(DgDevice d, void* stream, std::string* why);
void LaunchGraph(DgDevice d, void* graph, void* stream);
// Never throws (used from destructors); a failure is ignored.
void DestroyGraph(DgDevice d, void* graph);

// Counters of one device (dg.memory.stats()).
struct StreamCounters {
  int64_t device_syncs = 0;  // DgDeviceDef.synchronize calls by the core
  int64_t stream_syncs = 0;  // stream_sync calls (host-visible points)
  int64_t event_syncs = 0;   // event_synchronize calls
  int64_t stream_waits = 0;  // stream_wait_event calls (no host wait)
  int64_t events_created = 0;  // event_create calls (handles are pooled)
  int64_t h2d_copies = 0;  // copy_h2d calls by the core (stream-ordered devices)
  int64_t d2h_copies = 0;  // copy_d2h calls by the core (stream-ordered devices)
};
StreamCounters GetStreamCounters(DgDevice d);

}  // namespace dragon

#endif  // DRAGON_CORE_STREAM_H_
