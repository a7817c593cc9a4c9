// A caching allocator per device, in the spirit of Paddle's chunked pool:
// freed blocks are kept in size-class free lists and handed out again;
// requests above kDirectLimit go straight to the device. Thread-safe.
#ifndef DRAGON_CORE_ALLOCATOR_H_
#define DRAGON_CORE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace dragon {

struct DeviceType;

struct MemoryStats {
  int64_t allocated = 0;   // bytes held by live blocks (rounded sizes)
  int64_t reserved = 0;    // allocated + cached free blocks
  int64_t peak = 0;        // max of allocated since start / reset_peak
  int64_t num_allocs = 0;  // device allocations (cache misses)
  int64_t num_requests = 0;
};

class CachingAllocator {
 public:
  CachingAllocator(DeviceType* type, int32_t index);
  ~CachingAllocator();
  // Returns a block of at least `bytes` (64-byte aligned on the host).
  // Throws CoreError(RESOURCE_EXHAUSTED) naming the device and size.
  void* Allocate(size_t bytes, size_t* rounded);
  void Free(void* ptr, size_t rounded);
  MemoryStats Stats();
  void ResetPeak();
  // Returns every cached block to the device.
  void EmptyCache();

  static size_t RoundSize(size_t bytes);
  static constexpr size_t kDirectLimit = size_t{64} << 20;

 private:
  void* DeviceAlloc(size_t bytes);
  void DeviceFree(void* p);

  DeviceType* type_;
  int32_t index_;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  MemoryStats stats_;
};

}  // namespace dragon

#endif  // DRAGON_CORE_ALLOCATOR_H_
