#include "core/tensor_state.hpp"

#include <mutex>

namespace eventide::detail {

void Storage::recycle_after(Ref<Work> last_use) noexcept { (void)last_use; }

TensorState::~TensorState() {
  if (!storage || storage->escaped()) return;  // escaped: others' work on it is not seen
  // The latest unfinished use; none if the unfinished ones are on more than one timeline. No
  // lock: nobody else can reach a tensor being destroyed.
  // (Chosen by pointer: one reference taken at the end, not one per candidate.)
  Work* last = nullptr;
  auto add = [&last](const Ref<Work>& w) {
    if (!w || w->done()) return true;
    if (last && &last->timeline() != &w->timeline()) return false;
    if (!last || w->seq() > last->seq()) last = w.get();
    return true;
  };
  if (!add(writer_)) return;
  for (const Ref<Work>& r : readers_) {
    if (!add(r)) return;
  }
  if (last) storage->recycle_after(Ref<Work>(last));
}

void TensorState::use_for_read(const Ref<Work>& work, Work::Deps& deps) {
  std::lock_guard lock(mu_);
  // Also on the op's own timeline: the producer is done by then (streams run in order), but
  // its failure must still propagate.
  if (writer_) deps.push_back(Dep{writer_, DepKind::input});
  for (Ref<Work>& r : readers_) {
    if (&r->timeline() == &work->timeline()) {
      r = work;  // later on the same timeline: finishes after the one it replaces
      return;
    }
  }
  // Readers that have finished order nothing any more.
  std::erase_if(readers_, [](const Ref<Work>& r) { return r->done(); });
  readers_.push_back(work);
}

Ref<Work> TensorState::unsettled_besides(const Work& own, bool writing) const {
  std::lock_guard lock(mu_);
  if (writer_ && writer_.get() != &own && (!writer_->done() || writer_->error())) return writer_;
  if (writing) {
    for (const Ref<Work>& r : readers_) {
      if (r.get() != &own && !r->done()) return r;
    }
  }
  return nullptr;
}

void TensorState::use_for_write(const Ref<Work>& work, Work::Deps& deps, DepKind after_writer) {
  std::lock_guard lock(mu_);
  if (writer_ && writer_ != work) deps.push_back(Dep{writer_, after_writer});
  for (const Ref<Work>& r : readers_) {
    if (&r->timeline() != &work->timeline() && !r->done()) deps.push_back(Dep{r, DepKind::order});
  }
  readers_.clear();
  writer_ = work;
}

}  // namespace eventide::detail
