// Capture once, replay many times: a small step (y = (x + 1) * 2, accumulated) is captured
// into a graph; each input is copied into the graph's input tensor, the graph replayed, and
// its output read, with noise the graph draws afresh at each replay (as eager rand would
// then). Each replay is an Event: waited for, timed. On the default device: the CPU, or
// a GPU, where the capture records into a CUDA graph and each replay is one graph launch.
#include <eventide/eventide.hpp>

#include <cstdio>
#include <vector>

namespace ev = eventide;

int main() {
  const ev::Device device = ev::default_device();
  ev::Tensor input = ev::zeros({1024}, ev::DType::f32, device);   // the graph reads it at each replay
  ev::Tensor total = ev::zeros({1024}, ev::DType::f32, device);   // and accumulates into this one
  ev::Tensor one = ev::ones({1024}, ev::DType::f32, device);
  ev::Tensor two = ev::full({1024}, 2.0, ev::DType::f32, device);
  ev::Tensor step_out, noise;
  ev::Graph step;
  {
    ev::Capture capture(device);  // a stream of its own, current here; nothing runs
    step_out = ev::mul(ev::add(input, one), two);  // the graph's own tensor
    ev::add_out(total, total, step_out);
    noise = ev::rand({1024}, ev::DType::f32, device);  // new numbers at every replay
    step = capture.end();
  }
  std::printf("%s\n", step.str().c_str());

  double device_us = 0;
  std::vector<float> last_noise;
  for (int i = 0; i < 5; ++i) {
    input.copy_(ev::full({1024}, static_cast<double>(i), ev::DType::f32, device));  // new data, same memory
    ev::Event done = step.replay();
    done.wait();
    device_us += done.time_elapsed().count();
    const std::vector<float> drawn = noise.to_vector<float>();
    std::printf("replay %d: step_out[0] = %.0f, total[0] = %.0f, noise[0] = %.3f\n", i,
                step_out.to_vector<float>()[0], total.to_vector<float>()[0], drawn[0]);
    if (drawn == last_noise) {
      std::fprintf(stderr, "replay %d drew the numbers of the replay before\n", i);
      return 1;
    }
    last_noise = drawn;
  }
  // total = sum over i of (i + 1) * 2 = 2 * (1 + 2 + 3 + 4 + 5) = 30
  const std::vector<float> t = total.to_vector<float>();
  if (t[0] != 30.0f || t[1023] != 30.0f) {
    std::fprintf(stderr, "expected total 30, got %.1f\n", t[0]);
    return 1;
  }
  std::printf("5 replays, %.1f us of device time in all\nok\n", device_us);
  return 0;
}
