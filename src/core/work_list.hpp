// WorkList: a first-in first-out list of Works linked through Work::next, holding a reference
// to each: pushing and popping allocate nothing (the device engine's held and in-flight
// lists, which must not fail where they are used). A Work is in one such list at a time.
//
// Thread-safety: none; its owner's lock guards it.
#pragma once

#include <cstddef>
#include <utility>

#include "core/ref.hpp"
#include "core/work.hpp"

namespace eventide::detail {

class WorkList {
 public:
  WorkList() noexcept = default;
  WorkList(const WorkList&) = delete;
  WorkList& operator=(const WorkList&) = delete;
  ~WorkList() {
    while (pop_front()) {
    }
  }
  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  Work* front() const noexcept { return head_; }  // then w->next
  void push_back(Ref<Work> work) noexcept {
    Work* w = work.detach();
    w->next = nullptr;
    (tail_ ? tail_->next : head_) = w;
    tail_ = w;
    ++size_;
  }
  Ref<Work> pop_front() noexcept {
    Work* w = head_;
    if (!w) return nullptr;
    head_ = w->next;
    if (!head_) tail_ = nullptr;
    w->next = nullptr;
    --size_;
    Ref<Work> taken(w);  // adopts the list's reference:
    w->release();        // Ref's constructor added one
    return taken;
  }
  void swap(WorkList& other) noexcept {
    std::swap(head_, other.head_);
    std::swap(tail_, other.tail_);
    std::swap(size_, other.size_);
  }

 private:
  Work* head_ = nullptr;
  Work* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace eventide::detail
