// A vector with inline storage for the first N elements, for the
// dispatcher's per-call arrays (views, pointers) so that a typical call
// makes no heap allocation for them. Trivially copyable types only.
#ifndef DRAGON_CORE_SMALL_VECTOR_H_
#define DRAGON_CORE_SMALL_VECTOR_H_

#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

namespace dragon {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable<T>::value, "trivially copyable only");

 public:
  SmallVector() = default;
  explicit SmallVector(size_t n) { resize(n); }
  SmallVector(const SmallVector&) = delete;
  SmallVector& operator=(const SmallVector&) = delete;
  ~SmallVector() {
    if (data_ != inline_) std::free(data_);
  }
  // New elements are value-initialised (zero for PODs).
  void resize(size_t n) {
    reserve(n);
    if (n > size_) std::memset(static_cast<void*>(data_ + size_), 0, (n - size_) * sizeof(T));
    size_ = n;
  }
  void reserve(size_t n) {
    if (n <= cap_) return;
    T* p = static_cast<T*>(std::malloc(n * sizeof(T)));
    if (!p) throw std::bad_alloc();
    if (size_) std::memcpy(static_cast<void*>(p), data_, size_ * sizeof(T));
    if (data_ != inline_) std::free(data_);
    data_ = p;
    cap_ = n;
  }
  void push_back(const T& v) {
    if (size_ == cap_) reserve(cap_ * 2);
    data_[size_++] = v;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }

 private:
  T inline_[N];
  T* data_ = inline_;
  size_t size_ = 0;
  size_t cap_ = N;
};

}  // namespace dragon

#endif  // DRAGON_CORE_SMALL_VECTOR_H_
