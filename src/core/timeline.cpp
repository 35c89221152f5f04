#include "core/timeline.hpp"

#include <algorithm>

namespace eventide::detail {

namespace {
constexpr auto kLater = [](const std::pair<std::uint64_t, Listener*>& a,
                           const std::pair<std::uint64_t, Listener*>& b) {
  return a.first > b.first;
};
}  // namespace

Timeline::~Timeline() {
  // Work keeps its timeline alive, and every fence passes (work that cannot run fails), so
  // nothing should be left; whatever is, is freed unfired rather than leaked.
  for (auto& [seq, listener] : heap_) delete listener;
}

void Timeline::advance(std::uint64_t seq) noexcept {
  std::uint64_t current = counter_->load(std::memory_order_relaxed);
  while (current < seq) {
    // seq_cst pairs with listen(): either listen() sees the new value, or this sees its
    // target (the Dekker pattern), so no listener is missed.
    if (counter_->compare_exchange_weak(current, seq, std::memory_order_seq_cst)) break;
  }
  if (min_target_.load(std::memory_order_seq_cst) <= seq) notify();
}

void Timeline::listen(std::uint64_t seq, std::unique_ptr<Listener> listener) {
  if (passed(seq)) {
    listener->fire();
    return;
  }
  {
    std::lock_guard lock(mu_);
    heap_.emplace_back(seq, listener.release());
    std::push_heap(heap_.begin(), heap_.end(), kLater);
    min_target_.store(heap_.front().first, std::memory_order_seq_cst);
  }
  if (counter_->load(std::memory_order_seq_cst) >= seq) {
    notify();  // advance() may have run between the check above and the insertion
  } else {
    listener_added();
  }
}

void Timeline::notify() noexcept {
  // Nothing due: no lock (a GPU's watcher calls this on every turn of its loop). A listener
  // registered meanwhile is not missed: listen() checks the counter again after publishing
  // its target and notifies itself.
  if (min_target_.load(std::memory_order_seq_cst) > counter_->load(std::memory_order_seq_cst)) return;
  std::vector<Listener*> due;
  {
    std::lock_guard lock(mu_);
    const std::uint64_t done = completed();
    while (!heap_.empty() && heap_.front().first <= done) {
      std::pop_heap(heap_.begin(), heap_.end(), kLater);
      due.push_back(heap_.back().second);
      heap_.pop_back();
    }
    min_target_.store(heap_.empty() ? kNone : heap_.front().first, std::memory_order_seq_cst);
  }
  for (Listener* l : due) {
    l->fire();
    delete l;
  }
}

}  // namespace eventide::detail

