// eventide/detail/callback.hpp: a move-only `void()` callable.
//
// The runtime takes ownership of every callback handed to it (STYLE: callbacks own their
// callables), so it needs a holder that accepts move-only lambdas, which std::function
// does not. Callables of up to 64 bytes (an op's body: a few storage references and sizes)
// live inline, so enqueueing an op allocates nothing for its body. Not thread-safe; moved
// between threads by the runtime under its own locks.
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace eventide::detail {

// Callables that can be null: function pointers and std::function. The runtime refuses a null
// one at the call that hands it over, not later on its own thread.
template <class F>
inline constexpr bool is_nullable_callable = std::is_pointer_v<F>;
template <class R, class... A>
inline constexpr bool is_nullable_callable<std::function<R(A...)>> = true;

class Callback {
 public:
  static constexpr std::size_t kInlineSize = 64;

  Callback() noexcept = default;

  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Callback> &&
                                              std::is_invocable_v<std::decay_t<F>&>>>
  Callback(F&& fn) {  // NOLINT(google-explicit-constructor)
    using D = std::decay_t<F>;
    if constexpr (fits_inline<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(fn));
      ops_ = &kInlineOps<D>;
    } else {
      *reinterpret_cast<D**>(buf_) = new D(std::forward<F>(fn));
      ops_ = &kHeapOps<D>;
    }
  }

  Callback(Callback&& other) noexcept { take(other); }
  Callback& operator=(Callback&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  void operator()() { ops_->call(buf_); }

  // The callable if it is a `D` (as std::function::target), else null: the Python binding
  // finds its own callables among an event's callbacks this way. Only within the shared
  // library that made the Callback (the type's operations are compared by address).
  template <class D>
  D* target() noexcept {
    if constexpr (fits_inline<D>) {
      return ops_ == &kInlineOps<D> ? std::launder(reinterpret_cast<D*>(buf_)) : nullptr;
    } else {
      return ops_ == &kHeapOps<D> ? *reinterpret_cast<D**>(buf_) : nullptr;
    }
  }

 private:
  struct Ops {
    void (*call)(void* self);
    void (*move)(void* from, void* to) noexcept;  // leaves `from` destroyed
    void (*destroy)(void* self) noexcept;
  };

  template <class D>
  static constexpr bool fits_inline = sizeof(D) <= kInlineSize &&
                                      alignof(D) <= alignof(std::max_align_t) &&
                                      std::is_nothrow_move_constructible_v<D>;

  template <class D>
  static constexpr Ops kInlineOps{
      [](void* self) { (*std::launder(static_cast<D*>(self)))(); },
      [](void* from, void* to) noexcept {
        D* f = std::launder(static_cast<D*>(from));
        ::new (to) D(std::move(*f));
        f->~D();
      },
      [](void* self) noexcept { std::launder(static_cast<D*>(self))->~D(); }};

  template <class D>
  static constexpr Ops kHeapOps{
      [](void* self) { (**static_cast<D**>(self))(); },
      [](void* from, void* to) noexcept { *static_cast<D**>(to) = *static_cast<D**>(from); },
      [](void* self) noexcept { delete *static_cast<D**>(self); }};

  void take(Callback& other) noexcept {
    if (other.ops_) {
      other.ops_->move(other.buf_, buf_);
      ops_ = std::exchange(other.ops_, nullptr);
    }
  }
  void reset() noexcept {
    if (ops_) std::exchange(ops_, nullptr)->destroy(buf_);
  }

  alignas(std::max_align_t) unsigned char buf_[kInlineSize];
  const Ops* ops_ = nullptr;
};

}  // namespace eventide::detail
