#include "allocator.h"

#include <cstdio>
#include <set>

#include "device.h"
#include "stream.h"

namespace dragon {

CachingAllocator::CachingAllocator(DeviceType* type, int32_t index)
    : type_(type),
      index_(index),
      ordered_(type->id != 0 && (type->def.flags & DG_DEVICE_STREAM_ORDERED) != 0) {}

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

void CachingAllocator::DeviceFree(void* p, void*) {
  type_->def.free(type_->def.user_data, index_, p);
}

void* CachingAllocator::Allocate(size_t bytes, size_t* rounded, void* stream) {
  size_t size = RoundSize(bytes);
  *rounded = size;
  if (ordered_ && size >= LargePool::kMinLarge) {
    const DgDevice dev{type_->id, index_};
    LargePool::Taken t;
    bool hit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.num_requests;
      hit = large_.Take(size, stream, &t);
      if (hit) {
        if (t.owner != stream) ++stats_.cross_stream_reuses;
        stats_.allocated += static_cast<int64_t>(t.size);
        if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
      }
    }
    if (hit) {
      for (auto& e : t.events) StreamWaitEvent(dev, stream, e->event);
      t.events.clear();  // the refs give the events back
      if (t.owner != stream) JoinStreams(dev, t.owner, stream);
      return t.ptr;
    }
    const size_t segment = LargePool::SegmentSize(size);
    void* p = DeviceAlloc(segment);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    stats_.reserved += static_cast<int64_t>(segment);
    stats_.allocated += static_cast<int64_t>(large_.AddSegment(p, segment, size, stream));
    if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
    return p;
  }
  Block block{nullptr, nullptr, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_requests;
    if (ordered_ || size < kDirectLimit) {
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        std::vector<Block>& blocks = it->second;
        // The newest block of this stream; else the newest of any stream.
        size_t pick = blocks.size() - 1;
        for (size_t i = blocks.size(); i-- > 0;) {
          if (blocks[i].stream == stream) {
            pick = i;
            break;
          }
        }
        block = std::move(blocks[pick]);
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(pick));
        if (block.stream != stream) ++stats_.cross_stream_reuses;
      }
    }
    if (block.ptr != nullptr) {
      stats_.allocated += static_cast<int64_t>(size);
      if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
    }
  }
  if (block.ptr != nullptr) {
    if (ordered_) {
      // Order the new owner after every earlier use, on the device.
      const DgDevice dev{type_->id, index_};
      for (void* e : block.events) {
        StreamWaitEvent(dev, stream, e);
        ReleaseEvent(dev, e);
      }
      if (block.stream != stream) JoinStreams(dev, block.stream, stream);
    }
    return block.ptr;
  }
  void* p = DeviceAlloc(size);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.num_allocs;
  stats_.allocated += static_cast<int64_t>(size);
  stats_.reserved += static_cast<int64_t>(size);
  if (stats_.allocated > stats_.peak) stats_.peak = stats_.allocated;
  return p;
}

void CachingAllocator::Free(void* ptr, size_t rounded, void* stream,
                            const std::vector<void*>& users) {
  if (ptr == nullptr) return;
  if (ordered_ && rounded >= LargePool::kMinLarge) {
    const DgDevice dev{type_->id, index_};
    Events events;
    try {
      for (void* u : users) {
        if (u == stream) continue;
        auto ref = std::make_shared<EventRef>(dev, AcquireEvent(dev));
        RecordEvent(dev, ref->event, u);
        events.push_back(std::move(ref));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[dragon warning] %s; a block of %zu bytes is leaked\n",
                   e.what(), rounded);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.allocated -= static_cast<int64_t>(large_.Release(ptr, stream, std::move(events)));
    return;
  }
  std::vector<void*> events;
  if (ordered_) {
    const DgDevice dev{type_->id, index_};
    try {
      for (void* u : users) {
        if (u == stream) continue;
        void* e = AcquireEvent(dev);
        events.push_back(e);
        RecordEvent(dev, e, u);
      }
    } catch (const std::exception& e) {
      // A broken device: never hand this block out again.
      std::fprintf(stderr, "[dragon warning] %s; a block of %zu bytes is leaked\n",
                   e.what(), rounded);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated -= static_cast<int64_t>(rounded);
      return;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated -= static_cast<int64_t>(rounded);
  if (!ordered_ && rounded >= kDirectLimit) {
    stats_.reserved -= static_cast<int64_t>(rounded);
    ++stats_.num_frees;
    DeviceFree(ptr, nullptr);
    return;
  }
  free_[rounded].push_back(Block{ptr, stream, std::move(events)});
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
  std::unordered_map<size_t, std::vector<Block>> blocks;
  std::vector<LargePool::Segment> segments;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    for (auto& kv : blocks)
      stats_.reserved -= static_cast<int64_t>(kv.first * kv.second.size());
    segments = large_.TakeFreeSegments();
    for (auto& seg : segments) stats_.reserved -= static_cast<int64_t>(seg.size);
  }
  if (!segments.empty()) {
    const DgDevice dev{type_->id, index_};
    std::set<void*> streams;
    for (auto& seg : segments) {
      streams.insert(seg.stream);
      for (auto& e : seg.events) SyncEvent(dev, e->event);
      seg.events.clear();
    }
    for (void* s : streams) SyncStream(dev, s, "emptying the memory cache");
    for (auto& seg : segments) DeviceFree(seg.base, seg.stream);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.num_frees += static_cast<int64_t>(segments.size());
  }
  if (ordered_) {
    // The device may still be using them: wait for their streams (each
    // once) and events -- a host wait, but not a device-wide one.
    const DgDevice dev{type_->id, index_};
    std::set<void*> streams;
    for (auto& kv : blocks) {
      for (Block& b : kv.second) {
        streams.insert(b.stream);
        for (void* e : b.events) {
          SyncEvent(dev, e);
          ReleaseEvent(dev, e);
        }
        b.events.clear();
      }
    }
    for (void* s : streams) SyncStream(dev, s, "emptying the memory cache");
  }
  int64_t n = 0;
  for (auto& kv : blocks)
    for (Block& b : kv.second) {
      DeviceFree(b.ptr, b.stream);
      ++n;
    }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_frees += n;
}

}  // namespace dragon
