// eventide: asynchronous device work and its synchronization.
//
// Device work runs asynchronously on streams; events tell the host, other streams and
// callbacks when it is done and how long it took. Start with event.hpp (the state machine),
// then stream.hpp and tensor.hpp.
//
//   #include <eventide/eventide.hpp>
//   namespace ev = eventide;
//   ev::Tensor out = ev::matmul(ev::rand({512, 512}), ev::rand({512, 512}));
//   ev::Event e;
//   e.record(out);
//   e.wait();
//   double us = e.time_elapsed().count();
#pragma once

#include "eventide/device.hpp"
#include "eventide/dtype.hpp"
#include "eventide/errors.hpp"
#include "eventide/benchmark.hpp"
#include "eventide/event.hpp"
#include "eventide/graph.hpp"
#include "eventide/distributed.hpp"
#include "eventide/ipc.hpp"
#include "eventide/profiler.hpp"
#include "eventide/runtime.hpp"
#include "eventide/stream.hpp"
#include "eventide/tensor.hpp"
#include "eventide/version.hpp"
