// The large-block pool of a stream-ordered device's caching allocator:
// best fit over free blocks carved from device segments, splitting a larger
// block and merging freed neighbours of the same stream, so that varying
// large sizes are served without device alloc/free calls.
//
// Not thread-safe: CachingAllocator calls it under its mutex. It calls no
// device function (events are released to the pool by EventRef).
#ifndef DRAGON_CORE_LARGE_POOL_H_
#define DRAGON_CORE_LARGE_POOL_H_

#include <cstddef>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace dragon {

// An event recorded on a stream that used a block; shared by the parts of
// a split block, returned to the device's event pool by the last owner.
struct EventRef {
  EventRef(DgDevice d, void* e) : device(d), event(e) {}
  ~EventRef();
  DgDevice device;
  void* event;
};
using Events = std::vector<std::shared_ptr<EventRef>>;

class LargePool {
 public:
  // Blocks of at least this size come from here; a split leaves at least
  // kMinSplit behind.
  static constexpr size_t kMinLarge = (size_t{1} << 20) + 1;
  static constexpr size_t kMinSplit = size_t{1} << 20;
  // The device allocation that serves a miss of `size` bytes.
  static size_t SegmentSize(size_t size);

  struct Taken {
    void* ptr = nullptr;
    size_t size = 0;        // the block's size (>= the request)
    void* owner = nullptr;  // the stream it was last freed on
    Events events;          // what the new owner must wait for
  };
  // Best fit on `stream`, else on any stream; false when nothing fits.
  bool Take(size_t size, void* stream, Taken* out);
  // A new segment; returns the size of the block handed out from its start.
  size_t AddSegment(void* base, size_t segment_size, size_t size, void* stream);
  // Frees a block (merging free neighbours of the same stream); returns its size.
  size_t Release(void* ptr, void* stream, Events events);

  struct Segment {
    void* base;
    size_t size;
    void* stream;
    Events events;                // of every piece
    std::vector<void*> streams;   // every piece's stream (pieces freed on
                                  // different streams stay unmerged)
  };
  // Removes and returns the segments that are entirely free, also those
  // whose free pieces belong to different streams.
  std::vector<Segment> TakeFreeSegments();

 private:
  struct Block {
    char* ptr;
    size_t size;
    bool free;
    void* stream;
    Events events;
    Block *prev = nullptr, *next = nullptr;  // neighbours in the segment
  };
  using Key = std::tuple<void*, size_t, char*>;  // (stream, size, ptr)
  void Insert(Block* b) { free_.insert(Key{b->stream, b->size, b->ptr}); }
  void Erase(Block* b) { free_.erase(Key{b->stream, b->size, b->ptr}); }
  Block* Absorb(Block* left, Block* right);  // right merges into left
  // Leaves the first `size` bytes in `b` and the rest in a free block,
  // when the rest is at least kMinSplit.
  void Split(Block* b, size_t size);

  std::set<Key> free_;
  std::unordered_map<void*, std::unique_ptr<Block>> blocks_;  // every block
};

}  // namespace dragon

#endif  // DRAGON_CORE_LARGE_POOL_H_
