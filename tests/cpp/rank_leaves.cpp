// A rank of a two-rank job that leaves on an error before its part of an all_reduce, for
// test_distributed.py (issue 26, item 1): rank 0 waits for that part, so the job ends only if
// rank 1's way out ends it.
//
//   mpirun -np 2 rank_leaves HOW      HOW: throw (an uncaught C++ exception), exit (exit(3)),
//                                          return (main returns 1)
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <eventide/eventide.hpp>

namespace ev = eventide;

int main(int argc, char** argv) {
  const std::string how = argc > 1 ? argv[1] : "";
  if (how != "throw" && how != "exit" && how != "return") {
    std::fprintf(stderr, "usage: %s throw|exit|return\n", argv[0]);
    return 2;
  }
  ev::distributed::InitOptions options;
  options.device = ev::Device::cpu();
  ev::distributed::Communicator comm = ev::distributed::init(options);
  if (comm.rank() == 1) {
    if (how == "throw") throw std::runtime_error("boom before my part of the all_reduce");
    if (how == "exit") std::exit(3);
    return 1;
  }
  ev::Tensor out = comm.all_reduce(ev::ones({4}, ev::DType::f32, ev::Device::cpu()));
  out.wait();
  return 0;
}
