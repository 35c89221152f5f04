// Seed: "Other ways: torch.cuda.synchronize()" (point 10):
//   output = torch.mps.matmul(a, b); torch.cuda.synchronize(); print(output)
// The seed claims MPS runs on CUDA kernels, which is false; eventide's synchronize() waits
// for all work on every stream of a device, whatever the backend.
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
