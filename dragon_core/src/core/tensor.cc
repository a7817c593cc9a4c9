#include "tensor.h"

#include <algorithm>

#include "allocator.h"
#include "device.h"
#include "dispatch.h"
#include "stream.h"

namespace dragon {

namespace {
alignas(64) char kEmptyBlock[64];
}

std::shared_ptr<Storage> Storage::Allocate(DgDevice device, size_t bytes) {
  auto s = std::make_shared<Storage>(Token{});
  s->device_ = device;
  s->bytes_ = bytes;
  if (bytes == 0) {
    s->data_ = kEmptyBlock;  // a valid, never-dereferenced address
    return s;
  }
  s->allocator_ = &DeviceRegistry::Get().Allocator(device);
  s->home_stream = s->last_writer = CurrentStream(device);
  s->data_ = s->allocator_->Allocate(bytes, &s->rounded_, s->home_stream);
  return s;
}

std::shared_ptr<Storage> Storage::Wrap(DgDevice device, void* data,
                                       size_t bytes,
                                       std::function<void()> release) {
  auto s = std::make_shared<Storage>(Token{});
  s->device_ = device;
  s->data_ = data;
  s->bytes_ = bytes;
  s->release_ = release ? std::move(release) : [] {};
  return s;
}

Storage::~Storage() {
  if (release_) {
    release_();
  } else if (allocator_ != nullptr) {
    allocator_->Free(data_, rounded_, home_stream, users);
  }
}

std::shared_ptr<TensorImpl> TensorImpl::Empty(DgDevice device, DgDType dtype, Shape shape) {
  for (int64_t d : shape)
    if (d < 0)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("negative dimension in shape ", ShapeToString(shape)));
  int64_t n = NumElements(shape);
  auto storage = Storage::Allocate(device, static_cast<size_t>(n) * DTypeSize(dtype));
  Shape strides = ContiguousStrides(shape);
  return std::make_shared<TensorImpl>(std::move(storage), 0, dtype, std::move(shape),
                                      std::move(strides));
}

Shape ChannelsLastStrides(const Shape& shape) {
  const size_t r = shape.size();
  if (r != 4 && r != 5) return ContiguousStrides(shape);
  Shape strides(r);
  int64_t step = 1;
  strides[1] = step;
  step *= std::max<int64_t>(shape[1], 1);
  for (size_t d = r - 1; d >= 2; --d) {
    strides[d] = step;
    step *= std::max<int64_t>(shape[d], 1);
  }
  strides[0] = step;
  return strides;
}

std::shared_ptr<TensorImpl> TensorImpl::EmptyChannelsLast(DgDevice device, DgDType dtype,
                                                          Shape shape) {
  std::shared_ptr<TensorImpl> t = Empty(device, dtype, shape);
  t->strides_ = ChannelsLastStrides(t->shape_);
  return t;
}

bool TensorImpl::is_channels_last() const {
  const int32_t r = ndim();
  if (r != 4 && r != 5) return false;
  int64_t expected = 1;
  auto step = [&](int32_t d) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
    return true;
  };
  // PyTorch's test exactly (no shortcut for empty tensors, unlike
  // is_contiguous). Known difference: an empty tensor with a zero C, H or W
  // made channels-last here keeps nonzero strides after the zero size, where
  // torch's get 0, so it answers False where torch answers True (layout
  // metadata only: it has no elements, and is_contiguous() is True).
  if (!step(1)) return false;
  for (int32_t d = r - 1; d >= 2; --d)
    if (!step(d)) return false;
  return step(0);
}

bool TensorImpl::is_contiguous() const {
  // An empty tensor is contiguous whatever its strides (PyTorch's rule).
  for (int32_t i = 0; i < ndim(); ++i)
    if (shape_[i] == 0) return true;
  int64_t expected = 1;
  for (int32_t i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

DgTensorView TensorImpl::View() const {
  DgTensorView v{};
  v.struct_size = sizeof(DgTensorView);
  v.dtype = dtype_;
  v.data = storage_->data();
  v.byte_offset = byte_offset_;
  v.device = storage_->device();
  v.ndim = ndim();
  v.shape = shape_.data();
  v.strides = strides_.data();
  return v;
}

Tensor CopyTo(const Tensor& t, DgDevice device) {
  // A channels-last tensor is dense too: its bytes copy as they are and the
  // copy keeps the format (PyTorch's preserve_format).
  const bool channels_last = !t->is_contiguous() && t->is_channels_last();
  Tensor src = t->is_contiguous() || channels_last ? t : MakeContiguous(t);
  Tensor out = channels_last ? TensorImpl::EmptyChannelsLast(device, src->dtype(), src->shape())
                             : TensorImpl::Empty(device, src->dtype(), src->shape());
  CopyOrdered(*out->storage(), out->data(), *src->storage(), src->data(),
              static_cast<size_t>(src->numel()) * src->itemsize());
  return out;
}

}  // namespace dragon
