// SmallVector: a vector that keeps its first N elements inline. A Work's dependencies are
// usually one to three (its inputs' producers, the stream's gate), so keeping them in the
// Work saves an allocation on every op, as an event's one pending Work saves one on every
// record. Only what the runtime uses: push_back, iteration, erase_if, clear.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace eventide::detail {

template <class T, std::size_t N>
class SmallVector {
 public:
  SmallVector() noexcept = default;
  SmallVector(const SmallVector&) = delete;
  SmallVector& operator=(const SmallVector&) = delete;
  // Takes the elements (or the heap block) of `other`, which is left empty.
  SmallVector(SmallVector&& other) noexcept {
    if (other.data_ != other.inline_data()) {
      data_ = std::exchange(other.data_, other.inline_data());
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, N);
      return;
    }
    for (std::size_t i = 0; i < other.size_; ++i) {
      ::new (static_cast<void*>(data_ + i)) T(std::move(other.data_[i]));
    }
    size_ = other.size_;
    other.release();
  }
  ~SmallVector() { release(); }

  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

  void reserve(std::size_t n) {
    if (n > capacity_) grow(n);
  }
  void push_back(T value) {
    if (size_ == capacity_) grow(capacity_ * 2);
    ::new (static_cast<void*>(data_ + size_)) T(std::move(value));
    ++size_;
  }
  // Destroys the elements and gives back heap memory.
  void clear() noexcept { release(); }
  // Removes the elements `pred` holds for, keeping the others' order; allocates nothing (the
  // room stays). Returns how many went.
  template <class Pred>
  std::size_t erase_if(Pred&& pred) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < size_; ++i) {
      if (pred(data_[i])) continue;
      if (kept != i) data_[kept] = std::move(data_[i]);
      ++kept;
    }
    const std::size_t gone = size_ - kept;
    std::destroy(data_ + kept, data_ + size_);
    size_ = kept;
    return gone;
  }

 private:
  T* inline_data() noexcept { return std::launder(reinterpret_cast<T*>(inline_)); }

  void grow(std::size_t n) {
    T* bigger = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    for (std::size_t i = 0; i < size_; ++i) {
      ::new (static_cast<void*>(bigger + i)) T(std::move(data_[i]));
      data_[i].~T();
    }
    if (data_ != inline_data()) ::operator delete(data_, std::align_val_t(alignof(T)));
    data_ = bigger;
    capacity_ = n;
  }
  void release() noexcept {
    std::destroy(data_, data_ + size_);
    if (data_ != inline_data()) ::operator delete(data_, std::align_val_t(alignof(T)));
    data_ = inline_data();
    size_ = 0;
    capacity_ = N;
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = inline_data();
  std::size_t size_ = 0;
  std::size_t capacity_ = N;
};

}  // namespace eventide::detail
