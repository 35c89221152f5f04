// Tensor and the ops: results against naive references (matmul 2-D and batched, add, mul,
// creation, random numbers), host transfers, readiness, completion callbacks, str().
// One component's tests in one binary (one file per component), hence the length: every op
// is checked against a reference of its own.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test_util.hpp"

namespace {

// The CPU's tensors are what these tests are about (ctest also says EVENTIDE_DEVICE=cpu); run
// bare on a GPU machine, the binary keeps to the CPU as well, unless told otherwise.
const bool kOnTheCpu = ::setenv("EVENTIDE_DEVICE", "cpu", /*overwrite=*/0) == 0;

using namespace eventide_test;

// A tensor holding `values`: the pointer overload of from_host (the std::vector overload does
// not compile, see FromHostVectorOverloadChecksTheSize).
template <class T>
ev::Tensor from_vec(const std::vector<T>& values, ev::Shape shape) {
  ev::check_host_size(values.size(), shape);
  return ev::from_host(values.data(), std::move(shape));
}

template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> out(n);
  for (auto& x : out) x = static_cast<T>(dist(gen));
  return out;
}

// Naive (b, m, k) @ (b, k, n) in double.
std::vector<double> reference_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                     std::int64_t batch, std::int64_t m, std::int64_t k,
                                     std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(batch * m * n), 0.0);
  for (std::int64_t p = 0; p < batch; ++p)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          acc += a[static_cast<std::size_t>(p * m * k + i * k + q)] *
                 b[static_cast<std::size_t>(p * k * n + q * n + j)];
        }
        c[static_cast<std::size_t>(p * m * n + i * n + j)] = acc;
      }
  return c;
}

template <class T>
void check_matmul(std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                  bool batched) {
  SCOPED_TRACE("b=" + std::to_string(batch) + " m=" + std::to_string(m) + " k=" +
               std::to_string(k) + " n=" + std::to_string(n) +
               (std::is_same_v<T, float> ? " f32" : " f64"));
  auto av = random_values<T>(static_cast<std::size_t>(batch * m * k), 1);
  auto bv = random_values<T>(static_cast<std::size_t>(batch * k * n), 2);
  ev::Shape sa = batched ? ev::Shape{batch, m, k} : ev::Shape{m, k};
  ev::Shape sb = batched ? ev::Shape{batch, k, n} : ev::Shape{k, n};
  ev::Tensor a = from_vec(av, sa), b = from_vec(bv, sb);
  ev::Tensor c = ev::matmul(a, b);
  EXPECT_EQ(c.shape(), batched ? (ev::Shape{batch, m, n}) : (ev::Shape{m, n}));
  EXPECT_EQ(c.dtype(), ev::dtype_of<T>);
  std::vector<T> got = c.to_vector<T>();
  auto want = reference_matmul(std::vector<double>(av.begin(), av.end()),
                               std::vector<double>(bv.begin(), bv.end()), batch, m, k, n);
  ASSERT_EQ(got.size(), want.size());
  const double tol = (std::is_same_v<T, float> ? 1e-5 : 1e-12) * static_cast<double>(k + 1);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], tol) << "element " << i;
  }
}

TEST(TensorTest, MatmulMatchesANaiveReference) {
  run_with_deadline([] {
    const std::tuple<int, int, int> sizes[] = {{1, 1, 1},   {2, 3, 4},  {3, 5, 2},  {7, 1, 9},
                                               {1, 9, 1},   {17, 13, 11}, {64, 33, 65},
                                               {0, 3, 4},   {3, 4, 0},  {0, 0, 0}};
    for (auto [m, k, n] : sizes) {
      check_matmul<float>(1, m, k, n, false);
      check_matmul<double>(1, m, k, n, false);
    }
  });
}

TEST(TensorTest, MatmulWithAnEmptyInnerDimensionIsAllZeros) {
  run_with_deadline([] {
    // (3, 0) @ (0, 4): a sum of nothing. The output's memory starts uninitialized, so this
    // checks that the op writes the zeros.
    for (int round = 0; round < 3; ++round) {
      ev::Tensor junk = ev::full({3, 4}, 123.0);  // likely to leave non-zero bytes to reuse
      junk.wait();
      junk = ev::Tensor();
      ev::Tensor c = ev::matmul(ev::empty({3, 0}), ev::empty({0, 4}));
      EXPECT_EQ(c.shape(), (ev::Shape{3, 4}));
      EXPECT_EQ(c.to_vector<float>(), std::vector<float>(12, 0.0f));
      ev::Tensor d = ev::matmul(ev::empty({2, 2, 0}, ev::DType::f64),
                                ev::empty({2, 0, 3}, ev::DType::f64));
      EXPECT_EQ(d.to_vector<double>(), std::vector<double>(12, 0.0));
    }
    check_matmul<float>(1, 3, 0, 4, false);
    check_matmul<double>(2, 2, 0, 3, true);
  });
}

TEST(TensorTest, BatchedMatmulMatchesANaiveReference) {
  run_with_deadline([] {
    const std::tuple<int, int, int, int> sizes[] = {
        {1, 2, 3, 4}, {3, 5, 7, 2}, {4, 1, 1, 1}, {2, 9, 1, 3},
        {0, 2, 2, 2}, {2, 0, 3, 3}, {2, 3, 3, 0}, {5, 16, 17, 15}};
    for (auto [b, m, k, n] : sizes) {
      check_matmul<float>(b, m, k, n, true);
      check_matmul<double>(b, m, k, n, true);
    }
  });
}

template <class T>
void check_binary(const std::vector<T>& a, const std::vector<T>& b) {
  SCOPED_TRACE(std::string(ev::name(ev::dtype_of<T>)));
  const auto n = static_cast<std::int64_t>(a.size());
  ev::Tensor ta = from_vec(a, {n}), tb = from_vec(b, {n});
  std::vector<T> sum = ev::add(ta, tb).to_vector<T>();
  std::vector<T> prod = ev::mul(ta, tb).to_vector<T>();
  std::vector<T> sum_op = (ta + tb).to_vector<T>();
  std::vector<T> prod_op = (ta * tb).to_vector<T>();
  std::vector<T> diff = ev::sub(ta, tb).to_vector<T>();
  std::vector<T> diff_op = (ta - tb).to_vector<T>();
  std::vector<T> quot, quot_op;
  if constexpr (!std::is_integral_v<T>) {
    quot = ev::div(ta, tb).to_vector<T>();
    quot_op = (ta / tb).to_vector<T>();
  } else {
    EXPECT_THROW_MSG(ev::div(ta, tb), ev::InvalidArgument, "true division");
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    T want_sum, want_prod, want_diff;
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      want_sum = static_cast<T>(static_cast<U>(static_cast<U>(a[i]) + static_cast<U>(b[i])));
      want_prod = static_cast<T>(static_cast<U>(static_cast<U>(a[i]) * static_cast<U>(b[i])));
      want_diff = static_cast<T>(static_cast<U>(static_cast<U>(a[i]) - static_cast<U>(b[i])));
    } else {
      want_sum = a[i] + b[i];
      want_prod = a[i] * b[i];
      want_diff = a[i] - b[i];
      const T want_quot = a[i] / b[i];
      if (std::isnan(want_quot)) {
        EXPECT_TRUE(std::isnan(quot[i]) && std::isnan(quot_op[i])) << "div, element " << i;
      } else {
        EXPECT_EQ(quot[i], want_quot) << "div, element " << i;
        EXPECT_EQ(quot_op[i], want_quot);
      }
    }
    EXPECT_EQ(sum[i], want_sum) << "add, element " << i;
    EXPECT_EQ(prod[i], want_prod) << "mul, element " << i;
    EXPECT_EQ(diff[i], want_diff) << "sub, element " << i;
    EXPECT_EQ(sum_op[i], want_sum);
    EXPECT_EQ(prod_op[i], want_prod);
    EXPECT_EQ(diff_op[i], want_diff);
  }
}

TEST(TensorTest, ElementwiseOpsMatchTheReferenceForEveryNumericDtype) {
  run_with_deadline([] {
    check_binary<float>({1.5f, -2.0f, 0.0f, 3.25f, 1e30f}, {2.0f, 0.5f, -0.0f, -3.25f, 1e10f});
    check_binary<double>({1.5, -2.0, 1e300, 0.1}, {2.0, 0.5, 1e10, 0.2});
    const auto i32max = std::numeric_limits<std::int32_t>::max();
    const auto i32min = std::numeric_limits<std::int32_t>::min();
    check_binary<std::int32_t>({1, -7, i32max, i32min, 65536, 3},
                               {2, 3, 1, -1, 65536, -4});
    const auto i64max = std::numeric_limits<std::int64_t>::max();
    const auto i64min = std::numeric_limits<std::int64_t>::min();
    check_binary<std::int64_t>({1, -7, i64max, i64min, std::int64_t{1} << 32, 5},
                               {2, 3, 1, -1, std::int64_t{1} << 32, -6});
    // Odd lengths and bigger arrays (vectorized loops have tails).
    check_binary<float>(random_values<float>(1001, 3), random_values<float>(1001, 4));
    check_binary<double>(random_values<double>(33, 5), random_values<double>(33, 6));
  });
}

TEST(TensorTest, CastConvertsBetweenFloatingDtypesRoundingToNearestEven) {
  run_with_deadline([] {
    // 1 + 2^-8 is halfway between two bf16 values: the even one (1) wins.
    const std::vector<float> src{1.0f, -2.5f, 1.0f + 1.0f / 256, 70000.0f, 1e-8f};
    ev::Tensor t = ev::from_host(src, {5});
    ev::Tensor bf = ev::cast(t, ev::DType::bf16);
    EXPECT_EQ(bf.dtype(), ev::DType::bf16);
    const std::vector<float> back = ev::cast(bf, ev::DType::f32).to_vector<float>();
    EXPECT_EQ(back[0], 1.0f);
    EXPECT_EQ(back[1], -2.5f);
    EXPECT_EQ(back[2], 1.0f);
    EXPECT_EQ(back[3], 70144.0f);
    const std::vector<double> wide = ev::cast(ev::cast(t, ev::DType::f16), ev::DType::f64).to_vector<double>();
    EXPECT_EQ(wide[0], 1.0);
    EXPECT_TRUE(std::isinf(wide[3]));  // beyond f16's range
    EXPECT_NEAR(wide[4], 1e-8, 6e-8);  // an f16 subnormal
    EXPECT_THROW(ev::cast(ev::zeros({2}, ev::DType::i32), ev::DType::f32), ev::InvalidArgument);
    EXPECT_THROW(ev::cast(t, ev::DType::i64), ev::InvalidArgument);
  });
}

TEST(TensorTest, IntegerArithmeticWrapsAround) {
  run_with_deadline([] {
    ev::Tensor max32 = ev::full({1}, 2147483647.0, ev::DType::i32);
    ev::Tensor one32 = ev::ones({1}, ev::DType::i32);
    EXPECT_EQ(ev::add(max32, one32).to_vector<std::int32_t>()[0],
              std::numeric_limits<std::int32_t>::min());
    ev::Tensor big = ev::full({1}, 65536.0, ev::DType::i32);
    EXPECT_EQ(ev::mul(big, big).to_vector<std::int32_t>()[0], 0);
    std::vector<std::int64_t> m64{std::numeric_limits<std::int64_t>::max()};
    ev::Tensor max64 = from_vec(m64, {1});
    EXPECT_EQ(ev::add(max64, ev::ones({1}, ev::DType::i64)).to_vector<std::int64_t>()[0],
              std::numeric_limits<std::int64_t>::min());
  });
}

TEST(TensorTest, ElementwiseOpsOnMultiDimensionalAndEmptyTensors) {
  run_with_deadline([] {
    ev::Tensor a = ev::full({2, 3, 4}, 2.0), b = ev::full({2, 3, 4}, 3.0);
    ev::Tensor c = a * b + a;
    EXPECT_EQ(c.shape(), (ev::Shape{2, 3, 4}));
    EXPECT_EQ(c.to_vector<float>(), std::vector<float>(24, 8.0f));
    ev::Tensor e = ev::add(ev::zeros({0, 5}), ev::zeros({0, 5}));
    EXPECT_EQ(e.shape(), (ev::Shape{0, 5}));
    EXPECT_EQ(e.numel(), 0);
    EXPECT_TRUE(e.to_vector<float>().empty());
    ev::Tensor scalar = ev::add(ev::full({}, 1.5), ev::full({}, 2.0));  // 0-d
    EXPECT_EQ(scalar.dim(), 0);
    EXPECT_EQ(scalar.numel(), 1);
    EXPECT_EQ(scalar.to_vector<float>(), std::vector<float>{3.5f});
  });
}

template <class T>
void check_full(double value, T want) {
  const ev::DType dt = ev::dtype_of<T>;
  SCOPED_TRACE(std::string(ev::name(dt)));
  EXPECT_EQ(ev::full({2, 3}, value, dt).to_vector<T>(), std::vector<T>(6, want));
  EXPECT_EQ(ev::zeros({5}, dt).to_vector<T>(), std::vector<T>(5, T(0)));
  EXPECT_EQ(ev::ones({1, 1, 3}, dt).to_vector<T>(), std::vector<T>(3, T(1)));
  ev::Tensor e = ev::empty({4}, dt);
  e.wait();
  EXPECT_EQ(e.dtype(), dt);
  EXPECT_EQ(e.nbytes(), 4 * sizeof(T));
}

// The raw bits of an f16 or bf16 tensor, read on the host (a GPU tensor copied over first:
// its data_ptr is device memory).
std::vector<std::uint16_t> half_bits(const ev::Tensor& t) {
  ev::Tensor host = t.to(ev::Device::cpu());
  host.wait();
  const auto* p = static_cast<const std::uint16_t*>(host.data_ptr());
  return std::vector<std::uint16_t>(p, p + host.numel());
}

TEST(TensorTest, CreationWorksForEveryDtype) {
  run_with_deadline([] {
    check_full<float>(2.5, 2.5f);
    check_full<double>(-0.125, -0.125);
    check_full<std::int32_t>(-7.0, -7);
    check_full<std::int64_t>(1e15, 1'000'000'000'000'000);
    // f16 and bf16 can be created: check the bits.
    EXPECT_EQ(half_bits(ev::ones({3}, ev::DType::f16)), std::vector<std::uint16_t>(3, 0x3C00));
    EXPECT_EQ(half_bits(ev::zeros({2}, ev::DType::f16)), std::vector<std::uint16_t>(2, 0x0000));
    EXPECT_EQ(half_bits(ev::full({2}, 2.5, ev::DType::f16)), std::vector<std::uint16_t>(2, 0x4100));
    EXPECT_EQ(half_bits(ev::full({1}, -2.0, ev::DType::f16)), std::vector<std::uint16_t>{0xC000});
    EXPECT_EQ(half_bits(ev::full({1}, 65504.0, ev::DType::f16)),
              std::vector<std::uint16_t>{0x7BFF});  // largest finite f16
    EXPECT_EQ(half_bits(ev::full({1}, 1e6, ev::DType::f16)),
              std::vector<std::uint16_t>{0x7C00});  // overflows to +inf
    EXPECT_EQ(half_bits(ev::full({1}, 5.960464477539063e-08, ev::DType::f16)),
              std::vector<std::uint16_t>{0x0001});  // smallest subnormal
    EXPECT_EQ(half_bits(ev::ones({3}, ev::DType::bf16)), std::vector<std::uint16_t>(3, 0x3F80));
    EXPECT_EQ(half_bits(ev::zeros({2}, ev::DType::bf16)), std::vector<std::uint16_t>(2, 0x0000));
    EXPECT_EQ(half_bits(ev::full({2}, 2.5, ev::DType::bf16)),
              std::vector<std::uint16_t>(2, 0x4020));
    EXPECT_EQ(half_bits(ev::full({1}, -1.0, ev::DType::bf16)), std::vector<std::uint16_t>{0xBF80});
    ev::Tensor h = ev::empty({7}, ev::DType::f16);
    h.wait();
    EXPECT_EQ(h.nbytes(), 14u);
    EXPECT_EQ(ev::empty({7}, ev::DType::bf16).nbytes(), 14u);
  });
}

TEST(TensorTest, ShapeQueriesDescribeTheTensor) {
  ev::Tensor t = ev::zeros({2, 3, 4}, ev::DType::f64);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (ev::Shape{2, 3, 4}));
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 24u * 8u);
  EXPECT_EQ(t.dtype(), ev::DType::f64);
  EXPECT_EQ(t.device(), ev::Device::cpu());
  EXPECT_FALSE(ev::Tensor().defined());
  EXPECT_EQ(ev::numel({2, 3, 4}), 24);
  EXPECT_EQ(ev::numel({}), 1);
  EXPECT_EQ(ev::numel({5, 0}), 0);
  EXPECT_EQ(ev::to_string({512, 512}), "[512, 512]");
  EXPECT_EQ(ev::to_string({}), "[]");
  // Eight dimensions are allowed.
  EXPECT_EQ(ev::ones({1, 1, 1, 1, 1, 1, 1, 2}).numel(), 2);
}

TEST(TensorTest, RandIsUniformInZeroOne) {
  run_with_deadline([] {
    const std::int64_t n = 200'003;  // odd: the last Philox block is partly used
    {
      auto v = ev::rand({n}).to_vector<float>();
      double sum = 0;
      for (float x : v) {
        ASSERT_GE(x, 0.0f);
        ASSERT_LT(x, 1.0f);
        sum += x;
      }
      EXPECT_NEAR(sum / static_cast<double>(n), 0.5, 0.01);
      EXPECT_GT(std::set<float>(v.begin(), v.end()).size(), static_cast<std::size_t>(n / 2));
    }
    {
      auto v = ev::rand({n}, ev::DType::f64).to_vector<double>();
      double sum = 0, below_tenth = 0;
      for (double x : v) {
        ASSERT_GE(x, 0.0);
        ASSERT_LT(x, 1.0);
        sum += x;
        below_tenth += x < 0.1;
      }
      EXPECT_NEAR(sum / static_cast<double>(n), 0.5, 0.01);
      EXPECT_NEAR(below_tenth / static_cast<double>(n), 0.1, 0.01);
    }
  });
}

template <class T>
void check_standard_normal(std::int64_t n) {
  SCOPED_TRACE(std::string(ev::name(ev::dtype_of<T>)));
  auto v = ev::randn({n}, ev::dtype_of<T>).template to_vector<T>();
  double sum = 0, sq = 0, within_one = 0;
  for (T x : v) {
    ASSERT_TRUE(std::isfinite(static_cast<double>(x)));
    sum += static_cast<double>(x);
    sq += static_cast<double>(x) * static_cast<double>(x);
    within_one += std::abs(static_cast<double>(x)) < 1.0;
  }
  const double mean = sum / static_cast<double>(n);
  const double var = sq / static_cast<double>(n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.02);
  EXPECT_NEAR(within_one / static_cast<double>(n), 0.6827, 0.01);
}

TEST(TensorTest, RandnIsStandardNormal) {
  run_with_deadline([] {
    check_standard_normal<float>(200'001);
    check_standard_normal<double>(200'001);
  });
}

TEST(TensorTest, ManualSeedMakesDrawsReproducible) {
  run_with_deadline([] {
    ev::manual_seed(1234);
    auto a1 = ev::rand({1000}).to_vector<float>();
    auto b1 = ev::randn({3, 7}, ev::DType::f64).to_vector<double>();
    auto c1 = ev::rand({5}, ev::DType::f64).to_vector<double>();
    ev::manual_seed(1234);
    auto a2 = ev::rand({1000}).to_vector<float>();
    auto b2 = ev::randn({3, 7}, ev::DType::f64).to_vector<double>();
    auto c2 = ev::rand({5}, ev::DType::f64).to_vector<double>();
    EXPECT_EQ(a1, a2);
    EXPECT_EQ(b1, b2);
    EXPECT_EQ(c1, c2);
    // Consecutive draws differ, and so do other seeds.
    EXPECT_NE(ev::rand({1000}).to_vector<float>(), a1);
    ev::manual_seed(4321);
    EXPECT_NE(ev::rand({1000}).to_vector<float>(), a1);
    // The per-device form seeds the same generator.
    ev::manual_seed(1234, ev::Device::cpu());
    EXPECT_EQ(ev::rand({1000}).to_vector<float>(), a1);
  });
}

TEST(TensorTest, ManualSeedDrawsDoNotDependOnTheStreamOrThread) {
  run_with_deadline([] {
    ev::manual_seed(99);
    auto want = ev::randn({257}).to_vector<float>();
    ev::manual_seed(99);
    std::vector<float> got;
    std::thread([&] {
      ev::Stream s;
      ev::StreamGuard g(s);
      got = ev::randn({257}).to_vector<float>();
    }).join();
    EXPECT_EQ(got, want);
  });
}

template <class T>
void check_from_host_roundtrip(const std::vector<T>& values) {
  SCOPED_TRACE(std::string(ev::name(ev::dtype_of<T>)));
  const auto n = static_cast<std::int64_t>(values.size());
  EXPECT_EQ(ev::from_host(values.data(), {n}).template to_vector<T>(), values);
  EXPECT_EQ(ev::from_host(static_cast<const void*>(values.data()), {n}, ev::dtype_of<T>)
                .template to_vector<T>(),
            values);
}

TEST(TensorTest, FromHostCopiesTheDataOfEveryDtype) {
  run_with_deadline([] {
    check_from_host_roundtrip<float>({1.0f, -2.5f, 3.0f});
    check_from_host_roundtrip<double>({1e-300, 2.0});
    check_from_host_roundtrip<std::int32_t>({-1, 0, 1, 2147483647});
    check_from_host_roundtrip<std::int64_t>({std::numeric_limits<std::int64_t>::min(), 7});
    std::vector<float> m{1, 2, 3, 4, 5, 6};
    ev::Tensor t = ev::from_host(m.data(), {2, 3});
    EXPECT_EQ(t.shape(), (ev::Shape{2, 3}));
    EXPECT_EQ(t.to_vector<float>(), m);
    // Zero elements.
    EXPECT_TRUE(ev::from_host(std::vector<float>{}.data(), {0}).to_vector<float>().empty());
    EXPECT_TRUE(ev::from_host(static_cast<const float*>(nullptr), {0, 3}).to_vector<float>().empty());
  });
}

TEST(TensorTest, FromHostLetsTheCallerReuseTheBufferAtOnce) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    std::vector<float> buf{1, 2, 3};
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::from_host(buf.data(), {3});
    }
    EXPECT_FALSE(t.ready()) << "ready only when the stream reaches the op";
    std::fill(buf.begin(), buf.end(), -1.0f);  // reused before the op ran
    buf = std::vector<float>();
    gate.set();
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  });
}

TEST(TensorTest, FromHostSizeChecksAndNullData) {
  // The size check behind the std::vector overload.
  EXPECT_THROW_MSG(ev::check_host_size(5, {2, 3}), ev::InvalidArgument, "5", "[2, 3]", "6");
  EXPECT_THROW_MSG(ev::check_host_size(5, {4}), ev::InvalidArgument, "5");
  EXPECT_NO_THROW(ev::check_host_size(6, {2, 3}));
  EXPECT_NO_THROW(ev::check_host_size(1, {}));
  EXPECT_THROW_MSG(ev::from_host(static_cast<const float*>(nullptr), {2}), ev::InvalidArgument,
                   "null");
}

// Regression test; this used to fail: the std::vector overload of from_host does not compile. It calls check_host_size(),
// which include/eventide/tensor.hpp declares only after the template (tensor.hpp, the
// `from_host(const std::vector<T>&, ...)` template, then `void check_host_size(...)` below
// it). The call is dependent, so it is looked up at the template's definition (nothing found)
// and by ADL at instantiation, whose only associated namespace is std (size_t and
// std::vector<int64_t>): "'check_host_size' was not declared in this scope ... no
// declarations were found by argument-dependent lookup". Every use is a compile error. Fix:
// declare check_host_size before the template (or call eventide::check_host_size).
TEST(TensorTest, FromHostVectorOverloadChecksTheSize) {
  run_with_deadline([] {
    std::vector<float> v{1, 2, 3, 4, 5, 6};
    EXPECT_EQ(ev::from_host(v, {2, 3}).to_vector<float>(), v);
    std::vector<std::int64_t> w{7, -8};
    EXPECT_EQ(ev::from_host(w, {2}).to_vector<std::int64_t>(), w);
    EXPECT_THROW_MSG(ev::from_host(v, {5}), ev::InvalidArgument, "6", "[5]");
    EXPECT_THROW_MSG(ev::from_host(v, {2, 2}), ev::InvalidArgument, "6", "[2, 2]");
  });
}

TEST(TensorTest, ToVectorOfTheWrongTypeIsInvalidArgument) {
  run_with_deadline([] {
    ev::Tensor t = ev::ones({2});
    EXPECT_THROW_MSG(t.to_vector<double>(), ev::InvalidArgument, "f32", "f64");
    EXPECT_THROW_MSG(t.to_vector<std::int32_t>(), ev::InvalidArgument, "f32", "i32");
    EXPECT_THROW(ev::ones({1}, ev::DType::f16).to_vector<float>(), ev::InvalidArgument);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, 1.0f)) << "still usable";
  });
}

TEST(TensorTest, ToTheSameDeviceReturnsTheSameTensor) {
  run_with_deadline([] {
    ev::Tensor t = ev::ones({3});
    ev::Tensor u = t.to(ev::Device::cpu());
    EXPECT_EQ(u.state(), t.state());
    EXPECT_EQ(t.to("cpu").state(), t.state());
    EXPECT_EQ(t.to("cpu:0").state(), t.state());
  });
}

TEST(TensorTest, DataGivesTheCpuMemory) {
  run_with_deadline([] {
    ev::Tensor t = ev::full({4}, 3.0, ev::DType::i32);
    t.wait();
    EXPECT_EQ(static_cast<void*>(t.data<std::int32_t>()), t.data_ptr());
    EXPECT_EQ(t.data<std::int32_t>()[3], 3);
    EXPECT_THROW_MSG(t.data<float>(), ev::InvalidArgument, "i32", "f32");
    // Copies share memory.
    ev::Tensor copy = t;
    EXPECT_EQ(copy.data_ptr(), t.data_ptr());
  });
}

TEST(TensorTest, StrDescribesDtypeShapeDeviceAndState) {
  run_with_deadline([] {
    ev::Tensor t = ev::zeros({512, 512});
    t.wait();
    EXPECT_EQ(t.str(), "Tensor(f32[512, 512], cpu, ready)");
    EXPECT_EQ(ev::Tensor().str(), "Tensor(undefined)");
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor p;
    {
      ev::StreamGuard g(s);
      p = ev::ones({2}, ev::DType::i64);
    }
    EXPECT_EQ(p.str(), "Tensor(i64[2], cpu, pending)");
    gate.set();
    p.wait();
    EXPECT_EQ(p.str(), "Tensor(i64[2], cpu, ready)");
    ev::Tensor f = ev::empty({1});
    ev::Stream().enqueue("boom", [] { throw UserError("x"); }, {}, {f});
    EXPECT_THROW(f.wait(), ev::OpError);
    EXPECT_EQ(f.str(), "Tensor(f32[1], cpu, failed)");
  });
}

TEST(TensorTest, ReadyWaitAndErrorFollowTheProducer) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::full({2}, 6.0);
    }
    EXPECT_FALSE(t.ready());
    EXPECT_EQ(t.error(), nullptr);
    std::thread setter([&] {
      std::this_thread::sleep_for(20ms);
      gate.set();
    });
    t.wait();
    EXPECT_TRUE(t.ready());
    EXPECT_EQ(t.error(), nullptr);
    setter.join();
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, 6.0f));
  });
}

TEST(TensorTest, AFailedProducerMakesToVectorThrow) {
  run_with_deadline([] {
    ev::Tensor t = ev::empty({3});
    ev::Stream s;
    s.enqueue("bad", [] { throw UserError("producer failed"); }, {}, {t});
    auto err = capture([&] { (void)t.to_vector<float>(); });
    ASSERT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err)));
    EXPECT_TRUE(t.ready()) << "a failed producer has finished";
    EXPECT_TRUE(holds<ev::OpError>(t.error()));
    // Ops computed from it fail too, and so does what is computed from those.
    ev::Tensor u = ev::add(t, t);
    ev::Tensor v = ev::mul(u, u);
    err = capture([&] { (void)v.to_vector<float>(); });
    EXPECT_TRUE(holds<ev::OpError>(err)) << what(err);
    EXPECT_TRUE(holds<UserError>(op_cause(err))) << what(err);
  });
}

TEST(TensorTest, CompletionCallbacksRunOnceWhenTheProducerFinishes) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::ones({8});
    }
    std::atomic<int> calls{0};
    std::atomic<bool> ready_inside{false};
    Flag done;
    t.add_completion_callback([&, t] {
      ready_inside = t.ready();
      calls.fetch_add(1);
      done.set();
    });
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(calls.load(), 0);
    gate.set();
    EXPECT_TRUE(done.wait_for(30s));
    EXPECT_TRUE(ready_inside.load());
    // Already finished: runs anyway (on the runtime's thread).
    Flag later;
    t.add_completion_callback([&] { later.set(); });
    EXPECT_TRUE(later.wait_for(30s));
    ev::synchronize();
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(calls.load(), 1);
  });
}

TEST(TensorTest, CompletionCallbacksRunAlsoWhenTheProducerFailed) {
  run_with_deadline([] {
    ev::Tensor t = ev::empty({1});
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    s.enqueue("bad", [] { throw UserError("x"); }, {}, {t});
    Flag called;
    std::exception_ptr seen;
    t.add_completion_callback([&, t] {
      seen = t.error();
      called.set();
    });
    gate.set();
    EXPECT_TRUE(called.wait_for(30s));
    EXPECT_TRUE(holds<ev::OpError>(seen));
  });
}

}  // namespace

// --- Tensors over memory eventide did not allocate -------------------------------------------

TEST(ExternalTensorTest, SharesTheMemoryAndReleasesTheOwnerWhenTheLastUserIsDone) {
  run_with_deadline([] {
    auto data = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
    std::weak_ptr<std::vector<float>> alive = data;
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Tensor sum;
    {
      ev::Tensor t = ev::from_external({data->data(), data}, {2, 2}, ev::DType::f32, ev::Device::cpu());
      data.reset();
      EXPECT_TRUE(t.ready()) << "memory whose contents are final is ready at once";
      EXPECT_EQ(t.data_ptr(), alive.lock()->data());
      EXPECT_EQ(t.access(), ev::Access::read_write);
      ev::StreamGuard g(s);
      sum = t + t;  // held behind the gate: the op keeps the memory
    }
    EXPECT_FALSE(alive.expired()) << "the owner was released while an op still reads the memory";
    gate.set();
    EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
    s.synchronize();
    // The op has let go of its inputs by the time its stream is synchronized... or soon after,
    // on the worker that ran it.
    for (int i = 0; i < 1000 && !alive.expired(); ++i) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(alive.expired()) << "the owner outlived every tensor and op using the memory";
  });
}

TEST(ExternalTensorTest, ReadOnlyMemoryIsAnInputAndSaysSo) {
  const std::vector<double> data{1.5, 2.5};
  ev::Tensor t = ev::from_external({const_cast<double*>(data.data()), nullptr, ev::Access::read_only},
                                   {2}, ev::DType::f64, ev::Device::cpu());
  EXPECT_EQ(t.access(), ev::Access::read_only);
  ev::Tensor doubled = t + t;
  EXPECT_EQ(doubled.access(), ev::Access::read_write) << "an op's output is eventide's own memory";
  EXPECT_EQ(doubled.to_vector<double>(), (std::vector<double>{3.0, 5.0}));
}

// --- In place: the _out forms and copy_ ----------------------------------------------------

TEST(InPlaceTest, AddOutAccumulatesIntoItsInputWithoutNewMemory) {
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({256});
    ev::Tensor one = ev::ones({256});
    void* memory = x.data_ptr();
    for (int i = 0; i < 10; ++i) {
      ev::Tensor r = ev::add_out(x, x, one);
      EXPECT_EQ(r.state(), x.state()) << "an _out form returns its out";
    }
    EXPECT_EQ(x.to_vector<float>(), std::vector<float>(256, 10.0f));
    EXPECT_EQ(x.data_ptr(), memory);
    ev::mul_out(x, x, x);
    ev::sub_out(x, x, one);
    ev::div_out(x, x, ev::full({256}, 3.0));
    EXPECT_EQ(x.to_vector<float>(), std::vector<float>(256, 33.0f));
  });
}

TEST(InPlaceTest, MatmulOutWritesTheProductAndRefusesToOverwriteAnInput) {
  run_with_deadline([] {
    ev::Tensor a = ev::from_host(std::vector<float>{1, 2, 3, 4}, {2, 2});
    ev::Tensor b = ev::from_host(std::vector<float>{5, 6, 7, 8}, {2, 2});
    ev::Tensor out = ev::full({2, 2}, -1.0);
    ev::matmul_out(out, a, b);
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{19, 22, 43, 50}));
    auto err = capture([&] { (void)ev::matmul_out(a, a, b); });
    ASSERT_TRUE(holds<ev::InvalidArgument>(err));
    EXPECT_NE(what(err).find("one of the inputs"), std::string::npos) << what(err);
    // Two tensors over one buffer are one memory: refused too.
    std::vector<float> buffer{1, 2, 3, 4};
    ev::Tensor view1 = ev::from_external({buffer.data(), nullptr}, {2, 2}, ev::DType::f32, ev::Device::cpu());
    ev::Tensor view2 = ev::from_external({buffer.data(), nullptr}, {2, 2}, ev::DType::f32, ev::Device::cpu());
    err = capture([&] { (void)ev::matmul_out(view2, view1, b); });
    EXPECT_TRUE(holds<ev::InvalidArgument>(err)) << what(err);
    ev::Tensor half1 = ev::from_external({buffer.data(), nullptr}, {2}, ev::DType::f32, ev::Device::cpu());
    ev::Tensor half2 = ev::from_external({buffer.data() + 1, nullptr}, {2}, ev::DType::f32, ev::Device::cpu());
    err = capture([&] { (void)ev::add_out(half2, half1, half1); });
    ASSERT_TRUE(holds<ev::InvalidArgument>(err)) << what(err);
    EXPECT_NE(what(err).find("overlaps an input in part"), std::string::npos) << what(err);
    err = capture([&] { half2.copy_(half1); });
    ASSERT_TRUE(holds<ev::InvalidArgument>(err)) << what(err);
    EXPECT_NE(what(err).find("different offsets"), std::string::npos) << what(err);
    EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4})) << "nothing was launched";
  });
}

TEST(InPlaceTest, AnOutOfAnotherShapeDtypeOrMemoryIsRefusedNamingIt) {
  run_with_deadline([] {
    ev::Tensor a = ev::ones({2, 3});
    auto expect_refused = [](const std::function<void()>& f, const std::string& words) {
      auto err = capture(f);
      ASSERT_TRUE(holds<ev::InvalidArgument>(err)) << words;
      EXPECT_NE(what(err).find(words), std::string::npos) << what(err);
    };
    ev::Tensor wrong_shape = ev::zeros({3, 2});
    expect_refused([&] { ev::add_out(wrong_shape, a, a); }, "out has shape [3, 2], the result has shape [2, 3]");
    ev::Tensor wrong_dtype = ev::zeros({2, 3}, ev::DType::f64);
    expect_refused([&] { ev::add_out(wrong_dtype, a, a); }, "out is f64, the result is f32");
    expect_refused([&] { ev::cast_out(ev::zeros({2, 3}, ev::DType::i32), a); }, "floating dtypes");
    expect_refused([&] { ev::add_out(ev::Tensor(), a, a); }, "out is an undefined tensor");
    const std::vector<float> data(6, 1.0f);
    ev::Tensor lent = ev::from_external({const_cast<float*>(data.data()), nullptr, ev::Access::read_only},
                                        {2, 3}, ev::DType::f32, ev::Device::cpu());
    expect_refused([&] { ev::add_out(lent, a, a); }, "read-only");
    expect_refused([&] { lent.copy_(a); }, "read-only");
    expect_refused([&] { ev::zeros_out(lent); }, "read-only");
    expect_refused([&] { ev::rand_out(ev::zeros({2}, ev::DType::i64)); }, "needs a floating dtype");
  });
}

TEST(InPlaceTest, CreationIntoOutWritesItsValues) {
  run_with_deadline([] {
    ev::Tensor t = ev::empty({64});
    ev::full_out(t, 2.5);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(64, 2.5f));
    ev::zeros_out(t);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(64, 0.0f));
    ev::ones_out(t);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(64, 1.0f));
    ev::manual_seed(7);
    ev::Tensor fresh = ev::randn({64});
    ev::manual_seed(7);
    ev::randn_out(t);
    EXPECT_EQ(t.to_vector<float>(), fresh.to_vector<float>()) << "the same numbers as a new tensor";
    ev::rand_out(t);
    for (float v : t.to_vector<float>()) EXPECT_TRUE(v >= 0.0f && v < 1.0f) << v;
  });
}

TEST(InPlaceTest, CastOutConvertsIntoOutsDtype) {
  run_with_deadline([] {
    ev::Tensor x = ev::from_host(std::vector<double>{1.5, -2.25}, {2});
    ev::Tensor f = ev::zeros({2}, ev::DType::f32);
    ev::cast_out(f, x);
    EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.5f, -2.25f}));
  });
}

TEST(InPlaceTest, CopyWritesTheSourcesValuesIntoTheSameMemory) {
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({4});
    void* memory = x.data_ptr();
    ev::Tensor& r = x.copy_(ev::from_host(std::vector<float>{1, 2, 3, 4}, {4}));
    EXPECT_EQ(&r, &x);
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(x.data_ptr(), memory);
    x.copy_(x);  // itself: nothing to do
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    auto err = capture([&] { x.copy_(ev::zeros({5})); });
    ASSERT_TRUE(holds<ev::InvalidArgument>(err));
    EXPECT_NE(what(err).find("shape [5], this tensor [4]"), std::string::npos) << what(err);
    err = capture([&] { x.copy_(ev::zeros({4}, ev::DType::f64)); });
    ASSERT_TRUE(holds<ev::InvalidArgument>(err));
    EXPECT_NE(what(err).find("cast_out"), std::string::npos) << what(err);
  });
}

// Write after read: an in-place write waits for the ops that still read the old values, on
// any stream, and the write after write for the earlier writer.
TEST(InPlaceTest, AnInPlaceWriteWaitsForEveryEarlierReaderOnAnyStream) {
  run_with_deadline([] {
    ev::Tensor x = ev::full({1024}, 1.0);
    x.wait();
    ev::UserEvent gate;
    ev::Stream held = gated_stream(gate);
    ev::Tensor y;
    {
      ev::StreamGuard g(held);
      y = ev::mul(x, x);  // reads x's old values once the gate opens
    }
    ev::Tensor copied;
    ev::Stream other, third;
    {
      ev::StreamGuard g(other);
      ev::full_out(x, 5.0);  // must wait for the held reader
    }
    {
      ev::StreamGuard g(third);
      copied = ev::empty({1024});
      copied.copy_(x);  // and this read, on a third stream, for the write
    }
    EXPECT_FALSE(x.ready()) << "the write ran before a reader of the old values";
    gate.set();
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(1024, 1.0f));
    EXPECT_EQ(x.to_vector<float>(), std::vector<float>(1024, 5.0f));
    EXPECT_EQ(copied.to_vector<float>(), std::vector<float>(1024, 5.0f));
  });
}

// Overwriting a tensor whole does not inherit its failed writer's error; reading it does.
TEST(InPlaceTest, AWholeOverwriteOfAFailedTensorSucceedsButAnUpdateOfItFails) {
  run_with_deadline([] {
    ev::Tensor t = ev::empty({3});
    ev::Stream().enqueue("bad", [] { throw UserError("producer failed"); }, {}, {t});
    auto err = capture([&] { t.wait(); });
    ASSERT_TRUE(holds<ev::OpError>(err));
    ev::Tensor u = ev::empty({3});
    ev::Stream().enqueue("bad too", [] { throw UserError("second"); }, {}, {u});
    ev::full_out(t, 4.0);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 4.0f)) << "a whole overwrite starts afresh";
    ev::add_out(u, u, t);  // reads u: its failure is this op's
    err = capture([&] { u.wait(); });
    EXPECT_TRUE(holds<ev::OpError>(err)) << what(err);
  });
}

TEST(ExternalTensorTest, MemoryStillBeingProducedOnAStreamIsReadyWhenThatWorkIs) {
  run_with_deadline([] {
    auto data = std::make_shared<std::vector<float>>(4, 0.0f);
    ev::UserEvent gate;
    ev::Stream producer = gated_stream(gate);
    // Another library's work on the producer stream fills the memory (here: an enqueued
    // function, which eventide does not know writes it).
    producer.enqueue("fill", [data] { std::fill(data->begin(), data->end(), 7.0f); });
    ev::Tensor t = ev::from_external({data->data(), data}, {4}, ev::DType::f32, producer);
    EXPECT_FALSE(t.ready());
    ev::Tensor doubled = t + t;  // on the default stream: waits for the producer stream
    EXPECT_FALSE(doubled.wait_for(20ms));
    gate.set();
    EXPECT_EQ(doubled.to_vector<float>(), (std::vector<float>(4, 14.0f)));
  });
}

TEST(ExternalTensorTest, BadDescriptionsAreRefusedBeforeAnythingIsMade) {
  float x = 0;
  auto owner = std::make_shared<int>(0);
  std::weak_ptr<int> alive = owner;
  EXPECT_THROW_MSG((void)ev::from_external({nullptr, nullptr}, {2}, ev::DType::f32, ev::Device::cpu()),
                   ev::InvalidArgument, "null data pointer");
  EXPECT_THROW((void)ev::from_external({&x, nullptr}, {-1}, ev::DType::f32, ev::Device::cpu()),
               ev::InvalidArgument);
  EXPECT_THROW_MSG((void)ev::from_external({&x, std::move(owner)}, {1}, ev::DType::f32, ev::Device::cuda(63)),
                   ev::InvalidArgument, "not available");
  EXPECT_TRUE(alive.expired()) << "a refused call kept the owner";
  // An empty tensor needs no memory.
  EXPECT_EQ(ev::from_external({nullptr, nullptr}, {0, 3}, ev::DType::f32, ev::Device::cpu()).numel(), 0);
}
