// A caching allocator per device, in the spirit of Paddle's chunked pool:
// freed blocks are kept in size-class free lists and handed out again;
// requests above kDirectLimit go straight to the device. Thread-safe.
//
// On stream-ordered devices (ABI 1.3) every block belongs to the stream it
// was allocated on. A freed block is handed out again on that stream at
// once (stream order makes it safe); another stream takes it only after
// waiting, on the device, for an event recorded on the owner (and on every
// other stream that used it). No size goes straight to the device there:
// blocks above 1 MiB come from a best-fit pool that splits device segments
// and merges freed neighbours (large_pool.h), so a steady state makes no
// device alloc/free and no host wait even when large sizes vary.
#ifndef DRAGON_CORE_ALLOCATOR_H_
#define DRAGON_CORE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "large_pool.h"

namespace dragon {

struct DeviceType;

struct MemoryStats {
  int64_t allocated = 0;   // bytes held by live blocks (rounded sizes)
  int64_t reserved = 0;    // allocated + cached free blocks
  int64_t peak = 0;        // max of allocated since start / reset_peak
  int64_t num_allocs = 0;  // device allocations (cache misses)
  int64_t num_requests = 0;
  int64_t num_frees = 0;   // device frees
  int64_t cross_stream_reuses = 0;  // blocks handed to another stream
};

class CachingAllocator {
 public:
  CachingAllocator(DeviceType* type, int32_t index);
  ~CachingAllocator();
  // Returns a block of at least `bytes` (64-byte aligned on the host).
  // Throws CoreError(RESOURCE_EXHAUSTED) naming the device and size.
  // `stream`: the caller's current stream (NULL on synchronous devices).
  void* Allocate(size_t bytes, size_t* rounded, void* stream = nullptr);
  // `stream`: the block's owner; `users`: other streams that used it.
  void Free(void* ptr, size_t rounded, void* stream = nullptr,
            const std::vector<void*>& users = {});
  MemoryStats Stats();
  void ResetPeak();
  // Returns every cached block to the device.
  void EmptyCache();

  // Graph capture (ABI 1.5). While a capture on `stream` is open, a block
  // freed on it (or used by it) is held instead of going back to the pool:
  // the recorded work reads and writes it again at every replay, so nobody
  // else may get it until the graph is destroyed. Allocation goes on
  // normally (a block taken during the capture is either freed during it,
  // and then held, or kept alive by the caller).
  struct HeldBlock {
    void* ptr;
    size_t rounded;
    void* stream;                // its owner
    std::vector<void*> users;    // other streams that used it
  };
  void BeginHold(void* stream);
  // Ends the hold on `stream` and hands over what it kept.
  std::vector<HeldBlock> EndHold(void* stream);
  // Gives held blocks back to the pool as freed by their owners, with
  // `stream` (where the last work using them was issued) among the users.
  void ReleaseHeld(const std::vector<HeldBlock>& blocks, void* stream);

  static size_t RoundSize(size_t bytes);
  static constexpr size_t kDirectLimit = size_t{64} << 20;

 private:
  void* DeviceAlloc(size_t bytes);
  void DeviceFree(void* p);
  struct Block {
    void* ptr;
    void* stream;   // owner
    Events events;  // recorded on other users at free time
  };

  DeviceType* type_;
  int32_t index_;
  DgDevice device_;
  std::mutex mu_;
  bool ordered_ = false;
  std::unordered_map<size_t, std::vector<Block>> free_;
  LargePool large_;  // stream-ordered devices: blocks >= LargePool::kMinLarge
  MemoryStats stats_;
  std::vector<void*> hold_streams_;  // open captures (guarded by mu_)
  std::vector<std::pair<void*, HeldBlock>> held_;  // (capture stream, block)
};

}  // namespace dragon

#endif  // DRAGON_CORE_ALLOCATOR_H_
