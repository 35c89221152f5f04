// Device and DType values, device discovery and the runtime's small functions.
#include <regex>
#include <sstream>
#include <string>
#include <unordered_set>

#include "test_util.hpp"

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
