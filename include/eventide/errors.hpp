// eventide/errors.hpp: the exceptions eventide throws.
//
// Every error derives from `eventide::Error` (a `std::runtime_error`), so one `catch` takes
// them all. The kinds say whose fault it is:
//
//   InvalidArgument  the caller passed something wrong: a shape, dtype or device mismatch,
//                    an unknown device string, a null callback.
//   StateError       the call does not fit the object's state: waiting on an empty event,
//                    resetting a pending one, reading the time of an unfinished one.
//   DeviceError      the device or its driver failed (allocation, a native call). Carries
//                    the native call and status where there is one.
//   OpError          device work did not complete: an op threw, or it was skipped because
//                    something it depends on failed. `cause()` is the original exception.
//   Cancelled        a coroutine's wait was withdrawn because its std::stop_token was stopped
//                    (eventide/coro.hpp); the work and the event it waited for are untouched.
//                    C++ only: Python's awaits are cancelled the asyncio way.
//
// Messages name the objects involved ("add#7 on cpu stream 2", "event on cpu"), so an error
// read in a log says where it came from. Thread-safety: these are plain values.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace eventide {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class StateError : public Error {
 public:
  using Error::Error;
};

class DeviceError : public Error {
 public:
  // `call` is the native function that failed ("cudaMallocAsync"), `status` its status code
  // (0 where there is none).
  DeviceError(const std::string& message, std::string call = {}, long status = 0)
      : Error(message), call_(std::move(call)), status_(status) {}

  const std::string& call() const noexcept { return call_; }
  long status() const noexcept { return status_; }

 private:
  std::string call_;
  long status_ = 0;
};

class OpError : public Error {
 public:
  // `op` names the work that failed ("matmul#3 on cpu stream 1"); `cause` is the exception
  // that made it fail (the op's own, or that of the work it depended on).
  OpError(const std::string& message, std::string op, std::exception_ptr cause = nullptr)
      : Error(message), op_(std::move(op)), cause_(std::move(cause)) {}

  const std::string& op() const noexcept { return op_; }
  std::exception_ptr cause() const noexcept { return cause_; }

 private:
  std::string op_;
  std::exception_ptr cause_;
};

class Cancelled : public Error {
 public:
  using Error::Error;
};

}  // namespace eventide
