// eventide/detail/callback.hpp: a move-only `void()` callable.
//
// The runtime takes ownership of every callback handed to it (STYLE: callbacks own their
// callables), so it needs a holder that accepts move-only lambdas, which std::function
// does not. Not thread-safe; moved between threads by the runtime under its own locks.
#pragma once

#include <functional>
#include <memory>
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
  Callback() noexcept = default;

  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Callback> &&
                                              std::is_invocable_v<std::decay_t<F>&>>>
  Callback(F&& fn)  // NOLINT(google-explicit-constructor)
      : impl_(std::make_unique<Model<std::decay_t<F>>>(std::forward<F>(fn))) {}

  Callback(Callback&&) noexcept = default;
  Callback& operator=(Callback&&) noexcept = default;

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  void operator()() { impl_->call(); }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void call() = 0;
  };
  template <class F>
  struct Model final : Concept {
    explicit Model(F&& f) : fn(std::move(f)) {}
    explicit Model(const F& f) : fn(f) {}
    void call() override { fn(); }
    F fn;
  };
  std::unique_ptr<Concept> impl_;
};

}  // namespace eventide::detail
