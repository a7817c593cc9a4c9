#include "tensor.h"

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

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (int32_t i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] == 0) return true;
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
  Tensor src = t->is_contiguous() ? t : MakeContiguous(t);
  Tensor out = TensorImpl::Empty(device, src->dtype(), src->shape());
  CopyOrdered(*out->storage(), out->data(), *src->storage(), src->data(),
              static_cast<size_t>(src->numel()) * src->itemsize());
  return out;
}

}  // namespace dragon
