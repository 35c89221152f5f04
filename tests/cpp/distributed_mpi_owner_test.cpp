// A program that starts and ends MPI itself, and uses eventide's communicator in between:
// eventide must leave MPI to it (no MPI call after the program's MPI_Finalize, also at exit,
// where eventide's own finalize runs). Run by ctest under mpirun -np 2; exits 0 when all is well.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "eventide/eventide.hpp"

namespace ev = eventide;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ev::distributed::InitOptions options;
  options.device = ev::Device::cpu();
  ev::distributed::Communicator comm = ev::distributed::init(options);
  std::vector<float> v = comm.all_reduce(ev::ones({4}, ev::DType::f32, ev::Device::cpu())).to_vector<float>();
  if (v[0] != static_cast<float>(comm.size())) {
    std::fprintf(stderr, "all_reduce gave %g, not %d\n", v[0], comm.size());
    return 1;
  }
  // The program ends MPI first, eventide's communicator still alive; at exit eventide's
  // finalize must see that and call nothing of MPI.
  MPI_Finalize();
  std::printf("rank %d: ok\n", comm.rank());
  return 0;
}
