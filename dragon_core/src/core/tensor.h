// Tensor: a refcounted view (shape, strides, dtype, byte offset) over
// refcounted Storage on one device. Strides are in elements, as in DLPack.
#ifndef DRAGON_CORE_TENSOR_H_
#define DRAGON_CORE_TENSOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "common.h"

namespace dragon {

// A block of device memory. Either from the device's caching allocator, or
// external (NumPy/DLPack) with a deleter that releases the owner.
class CachingAllocator;

class Storage {
  struct Token {};

 public:
  explicit Storage(Token) {}
  static std::shared_ptr<Storage> Allocate(DgDevice device, size_t bytes);
  static std::shared_ptr<Storage> Wrap(DgDevice device, void* data,
                                       size_t bytes,
                                       std::function<void()> release);
  ~Storage();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DgDevice device() const { return device_; }
  bool external() const { return static_cast<bool>(release_); }
  // Memory that must never be written: a view of a read-only NumPy array
  // (immutable bytes, a read-only memmap) or a DLPack tensor flagged
  // read-only. NumPy views of it are read-only and the dispatcher never
  // reuses it for an op's output; copies of it are writable.
  bool read_only() const { return read_only_; }
  void set_read_only(bool v) { read_only_ = v; }

  // Version counter of the memory, for autograd: bumped by every in-place
  // write the front end performs (PyTorch's version counter). Shared by
  // every tensor over this storage (a tensor and its views). Written and
  // read under the GIL.
  int64_t version = 0;
  // A writable view of the memory was handed out (NumPy's numpy()/__array__,
  // DLPack): writes through it bypass `version`, so nothing may assume the
  // bytes are unchanged while `version` is (the autocast cast cache skips
  // such storage). Never cleared. Written and read under the GIL.
  bool exported = false;

  // Stream tracking on stream-ordered devices (stream.h); all NULL/empty
  // elsewhere. `home`: the stream the block was allocated on (the
  // allocator returns it to that stream's pool); `last_writer`: the stream
  // of the last kernel or copy that wrote it; `users`: other streams that
  // touched it (the allocator makes the next owner wait for them).
  // Guarded by StorageLock (stream.cc).
  void* home_stream = nullptr;
  void* last_writer = nullptr;
  std::vector<void*> users;

 private:
  DgDevice device_{0, 0};
  CachingAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t rounded_ = 0;  // allocator size class; 0 for external/empty
  bool read_only_ = false;
  std::function<void()> release_;
};

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, int64_t byte_offset,
             DgDType dtype, Shape shape, Shape strides)
      : storage_(std::move(storage)),
        byte_offset_(byte_offset),
        dtype_(dtype),
        shape_(std::move(shape)),
        strides_(std::move(strides)) {}

  // A new contiguous tensor on `device` (uninitialised memory).
  static std::shared_ptr<TensorImpl> Empty(DgDevice device, DgDType dtype, Shape shape);
  // A new channels-last tensor (4-D or 5-D `shape`, logical NCHW / NCDHW,
  // strides of the dense NHWC / NDHWC layout; uninitialised memory).
  static std::shared_ptr<TensorImpl> EmptyChannelsLast(DgDevice device, DgDType dtype,
                                                       Shape shape);

  DgDType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int32_t ndim() const { return static_cast<int32_t>(shape_.size()); }
  int64_t numel() const { return NumElements(shape_); }
  int64_t byte_offset() const { return byte_offset_; }
  size_t itemsize() const { return DTypeSize(dtype_); }
  DgDevice device() const { return storage_->device(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  void* data() const {
    return static_cast<char*>(storage_->data()) + byte_offset_;
  }
  bool is_contiguous() const;
  // Memory format (docs/devices.md, "Memory format"): a 4-D (5-D) tensor
  // whose strides are those of the dense NHWC (NDHWC) layout over its
  // NCHW (NCDHW) shape. Axes of size 1 are ignored, as is_contiguous does,
  // so a tensor may be both (C == 1, or H == W == 1). PyTorch's rule.
  bool is_channels_last() const;
  // Channels-last and not contiguous: the layouts really differ. The
  // dispatcher propagates channels-last only for these.
  bool is_strictly_channels_last() const { return !is_contiguous() && is_channels_last(); }
  // The ABI view; valid while this tensor lives and is not reshaped.
  DgTensorView View() const;
  // Identity for the front end (autograd and tracing key on it): unique for
  // the life of the process, unlike the object's address, which the
  // allocator reuses. Rebinding a tensor to new storage keeps it.
  uint64_t uid = NextUid();
  // Autograd state, owned by the front end (opaque to the runtime).
  bool requires_grad = false;
  std::shared_ptr<void> autograd;
  // The tensor's version (autograd's check that a saved input was not
  // modified) is its storage's version plus this offset: rebinding the
  // tensor to other storage (assign, `.data =`) sets it so that the
  // version seen through this tensor still increases.
  int64_t version_offset = 0;
  int64_t version() const { return storage_->version + version_offset; }

  // Rebinds to new metadata over the same storage (no copy).
  void SetMeta(DgDType dtype, Shape shape, Shape strides) {
    dtype_ = dtype;
    shape_ = std::move(shape);
    strides_ = std::move(strides);
  }

 private:
  static uint64_t NextUid() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  std::shared_ptr<Storage> storage_;
  int64_t byte_offset_;
  DgDType dtype_;
  Shape shape_, strides_;
};

using Tensor = std::shared_ptr<TensorImpl>;

// The strides of the dense channels-last layout of a 4-D or 5-D shape
// (axis 1 innermost, then the spatial axes, then axis 0); the contiguous
// strides for any other rank.
Shape ChannelsLastStrides(const Shape& shape);

// A dense copy of `t` on `device` (bytes only; needs `t` contiguous or a
// Contiguous kernel on t's device, which the dispatcher provides). A
// channels-last `t` gives a channels-last copy (its bytes are dense).
Tensor CopyTo(const Tensor& t, DgDevice device);

}  // namespace dragon

#endif  // DRAGON_CORE_TENSOR_H_
