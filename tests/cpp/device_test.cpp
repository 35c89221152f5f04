// Device and DType values, device discovery (and why a device is not available, in words a
// user without a GPU understands) and the runtime's small functions.
#include <regex>
#include <sstream>
#include <string>
#include <unordered_set>

#include "test_util.hpp"

#if EVENTIDE_WITH_CUDA
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace {

using namespace eventide_test;

TEST(DeviceTest, ParsesTheDocumentedSpellings) {
  EXPECT_EQ(ev::Device("cpu"), ev::Device::cpu());
  EXPECT_EQ(ev::Device("cpu:0"), ev::Device::cpu());
  EXPECT_EQ(ev::Device("cuda"), ev::Device::cuda(0));
  EXPECT_EQ(ev::Device("cuda:0"), ev::Device::cuda(0));
  EXPECT_EQ(ev::Device("cuda:3"), ev::Device::cuda(3));
  EXPECT_EQ(ev::Device(std::string("cuda:12")).index(), 12);
  EXPECT_EQ(ev::Device(std::string_view("cpu")), ev::Device());
  EXPECT_TRUE(ev::Device::cpu().is_cpu());
  EXPECT_FALSE(ev::Device::cpu().is_cuda());
  EXPECT_TRUE(ev::Device::cuda(1).is_cuda());
  EXPECT_EQ(ev::Device::cuda(1).kind(), ev::DeviceKind::cuda);
  EXPECT_EQ(ev::Device::cuda(1).index(), 1);
  EXPECT_NE(ev::Device::cuda(0), ev::Device::cuda(1));
  EXPECT_NE(ev::Device::cuda(0), ev::Device::cpu());
}

TEST(DeviceTest, StrAndStreamOutputRoundTrip) {
  EXPECT_EQ(ev::Device::cpu().str(), "cpu");
  EXPECT_EQ(ev::Device::cuda(2).str(), "cuda:2");
  EXPECT_EQ(ev::Device(ev::Device::cuda(7).str()), ev::Device::cuda(7));
  std::ostringstream os;
  os << ev::Device::cuda(1) << " " << ev::Device::cpu() << " " << ev::DType::bf16;
  EXPECT_EQ(os.str(), "cuda:1 cpu bf16");
}

TEST(DeviceTest, HashesDistinguishDevices) {
  std::unordered_set<ev::Device> set{ev::Device::cpu(), ev::Device::cuda(0), ev::Device::cuda(1),
                                     ev::Device::cpu()};
  EXPECT_EQ(set.size(), 3u);
}

TEST(DeviceTest, TheCpuIsAlwaysAvailableAndListedFirst) {
  auto all = ev::devices();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front(), ev::Device::cpu());
  EXPECT_TRUE(ev::is_available(ev::Device::cpu()));
  for (const auto& d : all) EXPECT_TRUE(ev::is_available(d)) << d;
  auto info = ev::device_info(ev::Device::cpu());
  EXPECT_EQ(info.device, ev::Device::cpu());
  EXPECT_EQ(info.name, "cpu");
  EXPECT_FALSE(info.description.empty());
}

TEST(DeviceTest, DefaultDeviceIsCudaWhenPresentElseCpu) {
  if (std::getenv("EVENTIDE_DEVICE")) GTEST_SKIP() << "EVENTIDE_DEVICE is set in this environment";
  const ev::Device want = ev::is_available(ev::Device::cuda(0)) ? ev::Device::cuda(0) : ev::Device::cpu();
  EXPECT_EQ(ev::default_device(), want);
  EXPECT_EQ(ev::default_device(), ev::default_device());
  EXPECT_EQ(ev::ones({1}).device(), want);
}

// Why a cuda device is not available, here: without a driver CUDA says "CUDA driver version is
// insufficient for CUDA runtime version", which sends a user to update a driver they do not
// have. The words say what was not found and what to use, CUDA's name for it in parentheses.
TEST(DeviceTest, WithoutAGpuTheMessageSaysNoneWasFoundAndToUseTheCpu) {
  if (ev::is_available(ev::Device::cuda(0))) {
    GTEST_SKIP() << "a GPU is present: the no-GPU message is checked on a machine without one";
  }
  std::string why;
  try {
    ev::Event e(ev::Device::cuda(7));
  } catch (const ev::InvalidArgument& e) {
    why = e.what();
  }
  ASSERT_EQ(why.rfind("device cuda:7 is not available: ", 0), 0u) << why;
  if (!EVENTIDE_WITH_CUDA) {
    EXPECT_NE(why.find("this build of eventide has no CUDA backend"), std::string::npos) << why;
    return;
  }
  EXPECT_NE(why.find("no NVIDIA"), std::string::npos) << why;
  EXPECT_NE(why.find("was found"), std::string::npos) << why;
  EXPECT_NE(why.find("use the CPU, device \"cpu\" (EVENTIDE_DEVICE=cpu makes it the default)"), std::string::npos)
      << why;
  EXPECT_TRUE(std::regex_search(why, std::regex(R"(\(cudaGetDeviceCount: cudaError[A-Za-z]+ = [0-9]+\))"))) << why;
  EXPECT_EQ(why.find("insufficient"), std::string::npos) << why;
}

#if EVENTIDE_WITH_CUDA
namespace cuda = eventide::backends::cuda;

TEST(CudaAvailabilityTextTest, NoDriverSaysNoDriverOrGpuWasFound) {
  EXPECT_EQ(cuda::explain_no_device(cudaErrorInsufficientDriver, 0, 13000, nullptr),
            "no NVIDIA driver or GPU was found on this machine (cudaGetDeviceCount: "
            "cudaErrorInsufficientDriver = 35), so there are no cuda:N devices here: use the CPU, "
            "device \"cpu\" (EVENTIDE_DEVICE=cpu makes it the default)");
  const std::string stub = cuda::explain_no_device(cudaErrorStubLibrary, 0, 13000, nullptr);
  EXPECT_EQ(stub.rfind("no NVIDIA driver was found on this machine, only the CUDA toolkit's stub", 0), 0u) << stub;
  EXPECT_NE(stub.find("(cudaGetDeviceCount: cudaErrorStubLibrary = 34)"), std::string::npos) << stub;
}

TEST(CudaAvailabilityTextTest, AnOldDriverIsToldApartFromNone) {
  const std::string old = cuda::explain_no_device(cudaErrorInsufficientDriver, 12040, 13000, nullptr);
  EXPECT_EQ(old.rfind("the NVIDIA driver supports CUDA up to 12.4, older than the CUDA 13.0 runtime", 0), 0u) << old;
  EXPECT_NE(old.find("update the driver, or use the CPU"), std::string::npos) << old;
}

TEST(CudaAvailabilityTextTest, ADriverWithoutGpusSaysSoAndNamesCudaVisibleDevices) {
  const std::string none = cuda::explain_no_device(cudaErrorNoDevice, 12040, 13000, nullptr);
  EXPECT_EQ(none.rfind("no NVIDIA GPU was found on this machine (its NVIDIA driver, for CUDA 12.4, sees none) "
                       "(cudaGetDeviceCount: cudaErrorNoDevice = 100)", 0), 0u) << none;
  const std::string hidden = cuda::explain_no_device(cudaErrorNoDevice, 12040, 13000, "");
  EXPECT_EQ(hidden.rfind("no GPU that CUDA_VISIBLE_DEVICES=\"\" names was found", 0), 0u) << hidden;
}

// A GPU machine with fewer devices than asked for: "device cuda:7 is not available: ...".
TEST(CudaAvailabilityTextTest, APastTheLastDeviceNamesTheDevicesThereAre) {
  EXPECT_EQ(cuda::explain_missing_device(1, nullptr), "this machine has 1 CUDA device, cuda:0");
  EXPECT_EQ(cuda::explain_missing_device(2, nullptr), "this machine has 2 CUDA devices, cuda:0 and cuda:1");
  EXPECT_EQ(cuda::explain_missing_device(8, nullptr), "this machine has 8 CUDA devices, cuda:0 to cuda:7");
  EXPECT_EQ(cuda::explain_missing_device(2, "5,3"),
            "this process sees 2 CUDA devices, cuda:0 and cuda:1 (CUDA_VISIBLE_DEVICES=5,3, numbered "
            "from 0 in that order)");
}
#endif

TEST(DTypeTest, SizesNamesAndParsing) {
  EXPECT_EQ(ev::itemsize(ev::DType::f32), 4u);
  EXPECT_EQ(ev::itemsize(ev::DType::f64), 8u);
  EXPECT_EQ(ev::itemsize(ev::DType::i32), 4u);
  EXPECT_EQ(ev::itemsize(ev::DType::i64), 8u);
  EXPECT_EQ(ev::itemsize(ev::DType::f16), 2u);
  EXPECT_EQ(ev::itemsize(ev::DType::bf16), 2u);
  EXPECT_TRUE(ev::is_floating(ev::DType::bf16));
  EXPECT_FALSE(ev::is_floating(ev::DType::i64));
  for (auto dt : {ev::DType::f32, ev::DType::f64, ev::DType::i32, ev::DType::i64, ev::DType::f16,
                  ev::DType::bf16}) {
    EXPECT_EQ(ev::parse_dtype(ev::name(dt)), dt) << ev::name(dt);
  }
  EXPECT_EQ(ev::parse_dtype("float32"), ev::DType::f32);
  EXPECT_EQ(ev::parse_dtype("double"), ev::DType::f64);
  EXPECT_EQ(ev::parse_dtype("int64"), ev::DType::i64);
  EXPECT_EQ(ev::parse_dtype("half"), ev::DType::f16);
  EXPECT_EQ(ev::parse_dtype("bfloat16"), ev::DType::bf16);
  static_assert(ev::dtype_of<float> == ev::DType::f32);
  static_assert(ev::dtype_of<std::int64_t> == ev::DType::i64);
}

TEST(RuntimeTest, VersionIsSemantic) {
  const std::string v(ev::version());
  EXPECT_TRUE(std::regex_match(v, std::regex(R"(\d+\.\d+\.\d+)"))) << v;
}

}  // namespace
