#include "allocator.h"

#include "device.h"

namespace dragon {

CachingAllocator::CachingAllocator(DeviceType* type, int32_t index)
    : type_(type), index_(index) {}

CachingAllocator::~CachingAllocator() {
  // Process exit: device plugins may already be gone; leak cached blocks.
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes <= 512) return 512;
  if (bytes <= (size_t{1} << 20)) {
    // Powers of two and the midpoints between them (waste < 50%).
    size_t p = 512;
    while (p < bytes) {
      size_t mid = p + p / 2;
      if (bytes <= mid) return mid;
      p <<= 1;
    }
    return p;
  }
  const size_t chunk = size_t{1} << 16;  // 64 KiB granules above 1 MiB
  return (bytes + chunk - 1) / chunk * chunk;
}

void* CachingAllocator::DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  DgStatus s = type_->def.alloc(type_->def.user_data, index_, bytes, &p);
  if (s != DG_OK || p == nullptr) {
    // Give cached memory back and try once more.
    EmptyCache();
    s = type_->def.alloc(type_->def.user_data, index_, bytes, &p);
  }
  if (s != DG_OK || p == nullptr) {
    throw CoreError(DG_RESOURCE_EXHAUSTED,
                    dg::Str("out of memory on ", type_->name, ":", index_,
                            ": could not allocate ", bytes, " bytes (",
                            stats_.allocated, " bytes in use)"));
  }
  return p;
}

void CachingAllocator::DeviceFree(void* p) {
  type_->def.free(type_->def.user_data, index_, p);
}

void* CachingAllocator::Allocate(size_t bytes, size_t* rounded) {
  size_t size = RoundSize(bytes);
  *rounded = size;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_requests;
    if (size < kDirectLimit) {
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
      }
    }
    if (p != nullptr) {
      stats_.allocated += static_cast<int64_t>(size);
      if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
      return p;
    }
  }
  p = DeviceAlloc(size);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.num_allocs;
  stats_.allocated += static_cast<int64_t>(size);
  stats_.reserved += static_cast<int64_t>(size);
  if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
  return p;
}

void CachingAllocator::Free(void* ptr, size_t rounded) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated -= static_cast<int64_t>(rounded);
  if (rounded >= kDirectLimit) {
    stats_.reserved -= static_cast<int64_t>(rounded);
    DeviceFree(ptr);
    return;
  }
  free_[rounded].push_back(ptr);
}

MemoryStats CachingAllocator::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.allocated;
}

void CachingAllocator::EmptyCache() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    for (auto& kv : blocks)
      stats_.reserved -= static_cast<int64_t>(kv.first * kv.second.size());
  }
  for (auto& kv : blocks)
    for (void* p : kv.second) DeviceFree(p);
}

}  // namespace dragon
