// Intrusive reference counting for the runtime's hot objects (Work, Timeline, Parker).
//
// Ops, fences and listeners pass these around on every enqueue and record; an intrusive count
// costs one atomic per copy and no control block. Thread-safety: the count is atomic; the
// object itself is as thread-safe as its own members. The last release deletes, through the
// virtual destructor.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace eventide::detail {

class RefCounted {
 public:
  RefCounted() noexcept = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;

  void add_ref() const noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() const noexcept {
    // acq_rel: the deleting thread must see every write made through other references.
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // Whether the caller's reference is the only one: then nobody else can take another (a
  // reference is copied only from a reference).
  bool only_reference() const noexcept { return refs_.load(std::memory_order_acquire) == 1; }

 protected:
  virtual ~RefCounted() = default;

 private:
  mutable std::atomic<std::uint32_t> refs_{0};
};

template <class T>
class Ref {
 public:
  Ref() noexcept = default;
  Ref(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)
  explicit Ref(T* p) noexcept : p_(p) {
    if (p_) p_->add_ref();
  }
  Ref(const Ref& o) noexcept : Ref(o.p_) {}
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <class U>
  Ref(Ref<U> o) noexcept : p_(o.detach()) {}  // NOLINT(google-explicit-constructor)
  ~Ref() {
    if (p_) p_->release();
  }
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  T* detach() noexcept { return std::exchange(p_, nullptr); }
  // Whether this is the only reference to its object (RefCounted::only_reference).
  bool unique() const noexcept { return p_ && p_->only_reference(); }

  friend bool operator==(const Ref& a, const Ref& b) noexcept { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

template <class T, class... Args>
Ref<T> make_ref(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

}  // namespace eventide::detail
