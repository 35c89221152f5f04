// Device-wide synchronization (tutorial point 10): synchronize() waits for all the work queued
// on a device, on every stream. The tutorial spells it torch.cuda.synchronize() for an Apple
// GPU, which runs no CUDA; eventide's works whatever the backend.
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({512, 512}), b = ev::randn({512, 512});
  ev::Tensor output = ev::matmul(a, b);

  ev::Stream other;  // work on a second stream is waited for too
  ev::Tensor output2;
  {
    ev::StreamGuard guard(other);
    output2 = ev::matmul(b, a);
  }

  ev::synchronize();  // every device; ev::synchronize(device) for one

  bool ok = output.ready() && output2.ready();
  std::printf("after synchronize(): output ready %s, output2 ready %s\n",
              output.ready() ? "true" : "false", output2.ready() ? "true" : "false");
  return ok ? 0 : 1;
}
