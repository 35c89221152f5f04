// Every C++ line of API.md, compiled against the installed package and run; and the
// version the headers say (version.hpp) is the library's.
#include <eventide/eventide.hpp>

#include <cstdio>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace ev = eventide;

int main() {
  ev::Device d = ev::default_device();
  ev::Device c = ev::Device::cpu();
  (void)c;
  ev::Tensor a = ev::rand({512, 512}, ev::DType::f32, d);
  ev::Tensor b = ev::randn({512, 512}, ev::DType::f32, d);
  ev::Tensor z = ev::zeros({4}, ev::DType::f32, d);
  ev::Tensor o = ev::ones({4});
  ev::Tensor f = ev::full({4}, 2.0, ev::DType::f64);
  ev::Tensor e0 = ev::empty({4});
  float host_data[4] = {1, 2, 3, 4};
  ev::Tensor h = ev::from_host(host_data, {4});
  ev::Tensor out = ev::matmul(a, b);
  ev::Tensor sum = ev::add(z, o);
  ev::Tensor prod = ev::mul(o, h);
  ev::Tensor batched = ev::matmul(ev::rand({2, 3, 4}), ev::rand({2, 4, 5}));
  std::vector<float> host = out.to_vector<float>();
  ev::Tensor same = out.to(d);

  ev::Event e(std::nullopt, ev::EventOptions{.enable_timing = true});
  e.record(out);
  e.wait();
  bool done = e.poll() && e.completed();
  bool finished_in_time = e.wait_for(std::chrono::milliseconds(10));
  auto us = e.time_elapsed().count();
  std::exception_ptr err = e.error();
  std::optional<ev::Device> dev = e.device();
  ev::Event e1, e2;
  e1.record(sum);
  e2.record(prod);
  ev::wait_all({e1, e2});
  std::vector<ev::Event> list{e1, e2};
  bool all = ev::wait_all_for(list, std::chrono::seconds(10));
  std::optional<std::size_t> any = ev::wait_any(list, std::chrono::seconds(10));
  auto ms = e1.elapsed_time(e2).count();
  (void)ms;
  e.reset();
  e1.add_callback([] {});
  out.add_completion_callback([] {});
  ev::synchronize();
  ev::synchronize(d);

  ev::Stream s(d);
  ev::UserEvent u;
  s.wait(u);
  {
    ev::StreamGuard g(s);
    ev::Tensor gated = ev::add(sum, sum);
    u.set();
    gated.wait();
  }
  ev::UserEvent u2;
  u2.fail(std::make_exception_ptr(std::runtime_error("consumer")));
  s.synchronize();
  bool idle = s.query();
  ev::Stream cur = ev::Stream::current(d);
  (void)cur;

  bool ok = done && finished_in_time && us > 0 && !err && dev == d && all && any && idle &&
            !e.completed() && host.size() == 512 * 512 && same.device() == d &&
            batched.shape() == ev::Shape{2, 3, 5} && e0.numel() == 4 && f.dtype() == ev::DType::f64 &&
            ev::version() == std::string_view(EVENTIDE_VERSION_STRING);
  std::printf("consumer of eventide %s: %s (matmul %.1f us)\n", std::string(ev::version()).c_str(),
              ok ? "ok" : "FAILED", us);
  return ok ? 0 : 1;
}
