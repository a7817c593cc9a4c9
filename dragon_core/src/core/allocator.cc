#include "allocator.h"

#include <cstdio>
#include <set>

#include "device.h"
#include "stream.h"

namespace dragon {
namespace {

// An event recorded on each of `users` other than `owner`: what the next
// owner of a freed block must wait for. Throws on a broken device.
Events RecordUsers(DgDevice dev, void* owner, const std::vector<void*>& users) {
  Events events;
  for (void* u : users) {
    if (u == owner) continue;
    events.push_back(std::make_shared<EventRef>(dev, AcquireEvent(dev)));
    RecordEvent(dev, events.back()->event, u);
  }
  return events;
}

// Orders `stream` after every earlier use of a cached block: the streams
// that recorded `events`, and `owner`, the stream it was freed on.
void WaitForUses(DgDevice dev, void* stream, void* owner, Events* events) {
  for (auto& e : *events) StreamWaitEvent(dev, stream, e->event);
  events->clear();  // the refs give the events back
  if (owner != stream) JoinStreams(dev, owner, stream);
}

}  // namespace

CachingAllocator::CachingAllocator(DeviceType* type, int32_t index)
    : type_(type),
      index_(index),
      device_{type->id, index},
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
  if (s != DG_OK && s != DG_RESOURCE_EXHAUSTED) {
    // Not a lack of memory (e.g. a CUDA context lost to an illegal
    // address): the device's own error, not "out of memory".
    ThrowDeviceError(device_, s, dg::Str("allocating ", bytes, " bytes"));
  }
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

void* CachingAllocator::Allocate(size_t bytes, size_t* rounded, void* stream) {
  size_t size = RoundSize(bytes);
  *rounded = size;
  if (ordered_ && size >= LargePool::kMinLarge) {
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
      WaitForUses(device_, stream, t.owner, &t.events);
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
    if (ordered_) WaitForUses(device_, stream, block.stream, &block.events);
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
  if (ordered_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!hold_streams_.empty()) {
      for (void* cap : hold_streams_) {
        bool used = stream == cap;
        for (void* u : users) used = used || u == cap;
        if (used) {  // still counted as allocated: the graph owns it
          held_.push_back({cap, HeldBlock{ptr, rounded, stream, users}});
          return;
        }
      }
    }
  }
  const bool large = ordered_ && rounded >= LargePool::kMinLarge;
  Events events;
  if (ordered_) {
    try {
      events = RecordUsers(device_, stream, users);
    } catch (const std::exception& e) {
      // A broken device: never hand this block out again (a large one
      // stays counted, as the pool still holds it).
      std::fprintf(stderr, "[dragon warning] %s; a block of %zu bytes is leaked\n",
                   e.what(), rounded);
      if (large) return;
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated -= static_cast<int64_t>(rounded);
      return;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (large) {
    stats_.allocated -= static_cast<int64_t>(large_.Release(ptr, stream, std::move(events)));
    return;
  }
  stats_.allocated -= static_cast<int64_t>(rounded);
  if (!ordered_ && rounded >= kDirectLimit) {
    stats_.reserved -= static_cast<int64_t>(rounded);
    ++stats_.num_frees;
    DeviceFree(ptr);
    return;
  }
  free_[rounded].push_back(Block{ptr, stream, std::move(events)});
}

void CachingAllocator::BeginHold(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_streams_.push_back(stream);
}

std::vector<CachingAllocator::HeldBlock> CachingAllocator::EndHold(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < hold_streams_.size(); ++i) {
    if (hold_streams_[i] == stream) {
      hold_streams_.erase(hold_streams_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  std::vector<HeldBlock> out;
  std::vector<std::pair<void*, HeldBlock>> keep;
  for (auto& h : held_) {
    if (h.first == stream) out.push_back(h.second);
    else keep.push_back(h);
  }
  held_.swap(keep);
  return out;
}

void CachingAllocator::ReleaseHeld(const std::vector<HeldBlock>& blocks, void* stream) {
  for (const HeldBlock& b : blocks) {
    std::vector<void*> users = b.users;
    bool known = stream == b.stream;
    for (void* u : users) known = known || u == stream;
    if (!known) users.push_back(stream);
    Free(b.ptr, b.rounded, b.stream, users);
  }
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
  std::vector<Block> blocks;  // small blocks and free large segments
  std::set<void*> streams;    // every stream that used them last
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : free_) {
      stats_.reserved -= static_cast<int64_t>(kv.first * kv.second.size());
      for (Block& b : kv.second) blocks.push_back(std::move(b));
    }
    free_.clear();
    for (auto& seg : large_.TakeFreeSegments()) {
      stats_.reserved -= static_cast<int64_t>(seg.size);
      streams.insert(seg.streams.begin(), seg.streams.end());
      blocks.push_back(Block{seg.base, seg.stream, std::move(seg.events)});
    }
  }
  if (ordered_) {
    // The device may still be using them: wait for their events and
    // streams (each once) -- a host wait, but not a device-wide one.
    for (Block& b : blocks) {
      streams.insert(b.stream);
      for (auto& e : b.events) SyncEvent(device_, e->event);
      b.events.clear();
    }
    for (void* s : streams) SyncStream(device_, s, "emptying the memory cache");
  }
  for (Block& b : blocks) DeviceFree(b.ptr);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_frees += static_cast<int64_t>(blocks.size());
}

}  // namespace dragon
