#include "large_pool.h"

#include "stream.h"

namespace dragon {

EventRef::~EventRef() { ReleaseEvent(device, event); }

size_t LargePool::SegmentSize(size_t size) {
  constexpr size_t kSmallSegment = size_t{16} << 20;
  constexpr size_t kGranule = size_t{2} << 20;
  if (size <= kSmallSegment / 2) return kSmallSegment;
  return (size + kGranule - 1) / kGranule * kGranule;
}

bool LargePool::Take(size_t size, void* stream, Taken* out) {
  Block* b = nullptr;
  auto it = free_.lower_bound(Key{stream, size, nullptr});
  if (it != free_.end() && std::get<0>(*it) == stream) {
    b = blocks_.at(std::get<2>(*it)).get();
  } else {  // best fit among the other streams' blocks
    for (const Key& k : free_) {
      if (std::get<1>(k) < size) continue;
      Block* c = blocks_.at(std::get<2>(k)).get();
      if (!b || c->size < b->size) b = c;
    }
  }
  if (!b) return false;
  Erase(b);
  Split(b, size);
  b->free = false;
  out->ptr = b->ptr;
  out->size = b->size;
  out->owner = b->stream;
  out->events = std::move(b->events);
  b->events.clear();
  b->stream = stream;
  return true;
}

size_t LargePool::AddSegment(void* base, size_t segment_size, size_t size, void* stream) {
  auto b = std::make_unique<Block>();
  b->ptr = static_cast<char*>(base);
  b->size = segment_size;
  b->free = false;
  b->stream = stream;
  Block* raw = b.get();
  blocks_[b->ptr] = std::move(b);
  Split(raw, size);
  return raw->size;
}

void LargePool::Split(Block* b, size_t size) {
  if (b->size - size < kMinSplit) return;
  auto rest = std::make_unique<Block>();
  rest->ptr = b->ptr + size;
  rest->size = b->size - size;
  rest->free = true;
  rest->stream = b->stream;
  rest->events = b->events;  // the same earlier users (shared refs)
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest.get();
  b->next = rest.get();
  b->size = size;
  Insert(rest.get());
  blocks_[rest->ptr] = std::move(rest);
}

LargePool::Block* LargePool::Absorb(Block* left, Block* right) {
  left->size += right->size;
  left->events.insert(left->events.end(), right->events.begin(), right->events.end());
  left->next = right->next;
  if (right->next) right->next->prev = left;
  blocks_.erase(right->ptr);
  return left;
}

size_t LargePool::Release(void* ptr, void* stream, Events events) {
  Block* b = blocks_.at(ptr).get();
  const size_t size = b->size;
  b->free = true;
  b->stream = stream;
  b->events.insert(b->events.end(), events.begin(), events.end());
  if (b->prev && b->prev->free && b->prev->stream == b->stream) {
    Erase(b->prev);
    b = Absorb(b->prev, b);
  }
  if (b->next && b->next->free && b->next->stream == b->stream) {
    Erase(b->next);
    b = Absorb(b, b->next);
  }
  Insert(b);
  return size;
}

std::vector<LargePool::Segment> LargePool::TakeFreeSegments() {
  std::vector<Block*> heads;
  for (auto& kv : blocks_) {
    if (!kv.second->prev) heads.push_back(kv.second.get());
  }
  std::vector<Segment> out;
  for (Block* head : heads) {
    bool all_free = true;
    size_t size = 0;
    for (Block* b = head; b; b = b->next) {
      all_free = all_free && b->free;
      size += b->size;
    }
    if (!all_free) continue;
    Segment seg{head->ptr, size, head->stream, {}, {}};
    for (Block* b = head; b;) {
      Block* next = b->next;
      Erase(b);
      seg.streams.push_back(b->stream);
      for (auto& e : b->events) seg.events.push_back(std::move(e));
      blocks_.erase(static_cast<void*>(b->ptr));  // destroys b
      b = next;
    }
    out.push_back(std::move(seg));
  }
  return out;
}

}  // namespace dragon
