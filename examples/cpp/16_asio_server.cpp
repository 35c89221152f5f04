// A server that answers requests from device work without a thread per request: asio
// coroutines on one io_context thread launch eventide work and co_await it
// (eventide/asio.hpp), so the thread serves other connections while the device computes.
//
// Each request is a line "<n>"; the server multiplies two n x n matrices of ones on the
// default device (a GPU where there is one) and answers "<n> <sum>" (the sum is n^3) once the
// product has finished. Clients in the same program send a few requests each and check the
// answers; the program ends when they are done.
#include <asio.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <eventide/asio.hpp>
#include <eventide/eventide.hpp>

namespace ev = eventide;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

int g_served = 0;      // on the io_context's thread only
int g_failures = 0;

// One request: the work is enqueued at once; the coroutine is suspended, not a thread
// blocked, until it has finished.
awaitable<std::string> answer(int n) {
  ev::Tensor ones = ev::ones({n, n}, ev::DType::f32);
  ev::Tensor product = ev::matmul(ones, ones);   // every element is n
  ev::Tensor total = ev::matmul(ev::ones({1, n}), ev::matmul(product, ev::ones({n, 1})));
  co_await ev::async_wait(total, use_awaitable);  // resumes on this io_context's thread
  const float sum = total.to_vector<float>()[0];  // finished: no wait
  co_return std::to_string(n) + " " + std::to_string(static_cast<long long>(sum)) + "\n";
}

awaitable<void> session(tcp::socket socket) {
  std::string buffer;
  try {
    for (;;) {
      std::size_t length = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), '\n', use_awaitable);
      const std::string request = buffer.substr(0, length - 1);
      buffer.erase(0, length);
      std::string reply;
      try {
        // co_await rethrows the work's error (an OpError: out of device memory, ...); a
        // server answers it instead of letting it end io.run().
        reply = co_await answer(std::stoi(request));
      } catch (const std::exception& e) {
        reply = request + " error: " + e.what() + "\n";
      }
      co_await asio::async_write(socket, asio::buffer(reply), use_awaitable);
      ++g_served;
    }
  } catch (const asio::system_error&) {
    // The client closed the connection.
  }
}

awaitable<void> listen(tcp::acceptor& acceptor) {
  try {
    for (;;) {
      tcp::socket socket = co_await acceptor.async_accept(use_awaitable);
      asio::co_spawn(acceptor.get_executor(), session(std::move(socket)), asio::detached);
    }
  } catch (const asio::system_error&) {
    // The acceptor was closed: the clients are done.
  }
}

awaitable<void> client(tcp::endpoint server, std::vector<int> sizes, int& clients_left, tcp::acceptor& acceptor) {
  tcp::socket socket(acceptor.get_executor());
  co_await socket.async_connect(server, use_awaitable);
  std::string buffer;
  for (int n : sizes) {
    std::string request = std::to_string(n) + "\n";
    co_await asio::async_write(socket, asio::buffer(request), use_awaitable);
    std::size_t length = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), '\n', use_awaitable);
    const std::string line = buffer.substr(0, length - 1);
    buffer.erase(0, length);
    const long long want = static_cast<long long>(n) * n * n;
    if (line != std::to_string(n) + " " + std::to_string(want)) {
      std::printf("request %d: expected \"%d %lld\", got \"%s\"\n", n, n, want, line.c_str());
      ++g_failures;
    }
  }
  if (--clients_left == 0) acceptor.close();  // the last client done: stop listening
}

}  // namespace

int main() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  asio::co_spawn(io, listen(acceptor), asio::detached);
  const std::vector<std::vector<int>> requests = {{64, 128, 8}, {256, 16}, {32, 96, 200, 1}};
  int clients_left = static_cast<int>(requests.size());
  for (const auto& sizes : requests) {
    asio::co_spawn(io, client(acceptor.local_endpoint(), sizes, clients_left, acceptor), asio::detached);
  }
  io.run();  // one thread serves every connection
  std::printf("served %d requests on %s from one io_context thread, each answered once its "
              "matmuls had finished\n", g_served, ev::default_device().str().c_str());
  if (g_failures != 0 || g_served != 9) {
    std::printf("%d wrong answers\n", g_failures);
    return 1;
  }
  return 0;
}
