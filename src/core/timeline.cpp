#include "core/timeline.hpp"

#include <new>

namespace eventide::detail {

namespace {

class UnparkListener final : public OneShotListener {
 public:
  explicit UnparkListener(Ref<Parker> parker) noexcept : parker_(std::move(parker)) {}

 private:
  void run() noexcept override { parker_->unpark(); }

  Ref<Parker> parker_;
};

}  // namespace

Timeline::~Timeline() {
  // Work keeps its timeline alive, and every fence passes (work that cannot run fails), so
  // nothing should be left; whatever is, is freed (or dropped) unfired rather than leaked.
  while (Listener* l = pop_locked()) discard(l);
}

void Timeline::discard(Listener* listener) noexcept { listener->dropped(); }

// --- The heap ----------------------------------------------------------------------------
//
// A pairing heap whose nodes are the listeners: insertion O(1), removal of the lowest target
// and of any listener O(log n) amortized, and no allocation, ever.

Listener* Timeline::meld(Listener* a, Listener* b) noexcept {
  if (!a) return b;
  if (!b) return a;
  if (b->target_ < a->target_) std::swap(a, b);
  // b becomes a's first child.
  b->prev_ = a;
  b->sibling_ = a->child_;
  if (a->child_) a->child_->prev_ = b;
  a->child_ = b;
  a->sibling_ = nullptr;
  a->prev_ = nullptr;
  return a;
}

Listener* Timeline::merge_pairs(Listener* first) noexcept {
  // Two passes: meld the siblings in pairs from the left, keeping the pairs in a list (last
  // pair first) through sibling_; then meld that list into one heap.
  Listener* pairs = nullptr;
  while (first) {
    Listener* a = first;
    Listener* b = a->sibling_;
    first = b ? b->sibling_ : nullptr;
    a->sibling_ = a->prev_ = nullptr;
    if (b) b->sibling_ = b->prev_ = nullptr;
    Listener* m = meld(a, b);
    m->sibling_ = pairs;
    pairs = m;
  }
  Listener* root = nullptr;
  while (pairs) {
    Listener* next = pairs->sibling_;
    pairs->sibling_ = nullptr;
    root = meld(root, pairs);
    pairs = next;
  }
  return root;
}

void Timeline::link_locked(std::uint64_t seq, Listener* listener) noexcept {
  listener->target_ = seq;
  listener->id_ = next_id_++;
  listener->child_ = listener->sibling_ = listener->prev_ = nullptr;
  heap_ = meld(heap_, listener);
  listener->all_prev_ = nullptr;
  listener->all_next_ = all_;
  if (all_) all_->all_prev_ = listener;
  all_ = listener;
  min_target_.store(heap_->target_, std::memory_order_seq_cst);
}

void Timeline::remove_locked(Listener* listener) noexcept {
  if (listener == heap_) {
    heap_ = merge_pairs(listener->child_);
  } else {
    // Cut its subtree out: prev_ is its parent (first child) or its left sibling.
    Listener* prev = listener->prev_;
    if (prev->child_ == listener) {
      prev->child_ = listener->sibling_;
    } else {
      prev->sibling_ = listener->sibling_;
    }
    if (listener->sibling_) listener->sibling_->prev_ = prev;
    heap_ = meld(heap_, merge_pairs(listener->child_));
  }
  if (listener->all_prev_) {
    listener->all_prev_->all_next_ = listener->all_next_;
  } else {
    all_ = listener->all_next_;
  }
  if (listener->all_next_) listener->all_next_->all_prev_ = listener->all_prev_;
  listener->child_ = listener->sibling_ = listener->prev_ = nullptr;
  listener->all_prev_ = listener->all_next_ = nullptr;
  listener->id_ = 0;
  min_target_.store(heap_ ? heap_->target_ : kNone, std::memory_order_seq_cst);
}

Listener* Timeline::pop_locked() noexcept {
  Listener* top = heap_;
  if (top) remove_locked(top);
  return top;
}

// --- Listening ---------------------------------------------------------------------------

void Timeline::advance(std::uint64_t seq) noexcept {
  std::uint64_t current = counter_->load(std::memory_order_relaxed);
  while (current < seq) {
    // seq_cst pairs with listen(): either listen() sees the new value, or this sees its
    // target (the Dekker pattern), so no listener is missed.
    if (counter_->compare_exchange_weak(current, seq, std::memory_order_seq_cst)) break;
  }
  if (min_target_.load(std::memory_order_seq_cst) <= seq) notify();
}

std::uint64_t Timeline::listen(std::uint64_t seq, std::unique_ptr<OneShotListener> listener) noexcept {
  return insert(seq, listener.release());  // it owns itself from here (OneShotListener)
}

std::uint64_t Timeline::listen(std::uint64_t seq, Listener& listener) noexcept {
  return insert(seq, &listener);
}

std::uint64_t Timeline::insert(std::uint64_t seq, Listener* listener) noexcept {
  if (passed(seq)) {
    listener->fire();
    return 0;
  }
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    link_locked(seq, listener);
    id = listener->id_;
  }
  if (counter_->load(std::memory_order_seq_cst) >= seq) {
    notify();  // advance() may have run between the check above and the insertion
  } else {
    listener_added(seq);
  }
  return id;
}

bool Timeline::unpark_when_passed(std::uint64_t seq, const Ref<Parker>& parker) noexcept {
  if (passed(seq)) {
    parker->unpark();
    return true;
  }
  auto* listener = new (std::nothrow) UnparkListener(parker);
  if (!listener) return false;
  listen(seq, std::unique_ptr<OneShotListener>(listener));
  return true;
}

bool Timeline::unlisten(std::uint64_t id) noexcept {
  if (id == 0) return false;
  Listener* taken = nullptr;
  {
    std::lock_guard lock(mu_);
    for (Listener* l = all_; l; l = l->all_next_) {
      if (l->id_ == id) {
        taken = l;
        break;
      }
    }
    if (!taken) return false;  // fired, or being fired by notify()
    remove_locked(taken);
  }
  discard(taken);  // its destructor may release what it held: no lock of ours held
  return true;
}

void Timeline::notify() noexcept {
  // Nothing due: no lock (a GPU's watcher calls this on every turn of its loop). A listener
  // registered meanwhile is not missed: listen() checks the counter again after publishing
  // its target and notifies itself.
  if (min_target_.load(std::memory_order_seq_cst) > counter_->load(std::memory_order_seq_cst)) return;
  // The due listeners in target order, linked through sibling_: nothing is allocated here.
  Listener* due = nullptr;
  Listener** tail = &due;
  {
    std::lock_guard lock(mu_);
    const std::uint64_t done = completed();
    while (heap_ && heap_->target_ <= done) {
      Listener* l = pop_locked();
      *tail = l;
      tail = &l->sibling_;
    }
  }
  while (due) {
    // Read before firing: a listener may be registered again (relinked) from its own fire(),
    // or be gone once fire() returns.
    Listener* l = due;
    due = l->sibling_;
    l->sibling_ = nullptr;
    l->fire();
  }
}

}  // namespace eventide::detail
