// create_dataset and the reference functions.
#include "kan/data/dataset.h"

#include "test_util.h"

#include <ATen/ATen.h>

namespace kan {
namespace {

TEST(Dataset, ShapesRangesAndLabels) {
  const auto& toy = reference_function("toy");
  const auto data = create_dataset(toy.f, DatasetOptions(2)
                                              .ranges({{-1, 1}, {2, 5}})
                                              .train_num(500)
                                              .test_num(40)
                                              .dtype(torch::kFloat64));
  EXPECT_EQ(data.train_input.sizes(), (std::vector<int64_t>{500, 2}));
  EXPECT_EQ(data.train_label.sizes(), (std::vector<int64_t>{500, 1}));
  EXPECT_EQ(data.test_input.sizes(), (std::vector<int64_t>{40, 2}));
  EXPECT_GE(data.train_input.select(1, 1).min().item<double>(), 2.0);
  EXPECT_LT(data.train_input.select(1, 1).max().item<double>(), 5.0);
  EXPECT_LT(data.train_input.select(1, 0).max().item<double>(), 1.0);
  const auto x = data.train_input;
  const auto expected = torch::exp(torch::sin(M_PI * x.select(1, 0)) + x.select(1, 1).square());
  EXPECT_LT(test::max_abs_diff(data.train_label.squeeze(1), expected), 1e-12);
}

TEST(Dataset, ToMovesAndConvertsEveryTensor) {
  const auto& toy = reference_function("toy");
  const auto data = create_dataset(toy.f, DatasetOptions(2).train_num(20).test_num(5));
  const auto f64 = data.to(torch::kFloat64);
  for (const auto& t : {f64.train_input, f64.train_label, f64.test_input, f64.test_label})
    EXPECT_EQ(t.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::equal(f64.train_input.to(torch::kFloat32), data.train_input));
  // The meta device stands in for another device on a machine without a GPU.
  const auto moved = data.to(torch::Device(torch::kMeta));
  for (const auto& t : {moved.train_input, moved.train_label, moved.test_input, moved.test_label})
    EXPECT_TRUE(t.is_meta());
  Dataset classes{data.train_input, torch::zeros({20}, torch::kLong), data.test_input,
                  torch::zeros({5}, torch::kLong)};
  EXPECT_EQ(classes.to(torch::kFloat64).train_label.scalar_type(), torch::kLong);
}

TEST(Dataset, SeedAndDtype) {
  const auto& f = reference_function("xy").f;
  const auto a = create_dataset(f, DatasetOptions(2).seed(3).dtype(torch::kFloat64));
  const auto b = create_dataset(f, DatasetOptions(2).seed(3).dtype(torch::kFloat64));
  const auto c = create_dataset(f, DatasetOptions(2).seed(4).dtype(torch::kFloat64));
  const auto d = create_dataset(f, DatasetOptions(2).seed(3));
  EXPECT_TRUE(torch::equal(a.train_input, b.train_input));
  EXPECT_TRUE(torch::equal(a.test_label, b.test_label));
  EXPECT_FALSE(torch::equal(a.train_input, c.train_input));
  EXPECT_EQ(d.train_input.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(a.train_input.to(torch::kFloat32), d.train_input));
  EXPECT_FALSE(torch::equal(a.train_input, a.test_input.narrow(0, 0, 1000)));
}

TEST(Dataset, HonoursTheDevice) {
  const auto data = create_dataset(reference_function("toy").f,
                                   DatasetOptions(2).train_num(5).test_num(5).device(torch::kMeta));
  EXPECT_TRUE(data.train_input.is_meta());
  EXPECT_TRUE(data.test_label.is_meta());
}

TEST(Dataset, ReferenceFunctions) {
  // The five built-in ones come first, then the catalogue's (test_function_catalogue.cpp).
  std::vector<std::string> names;
  for (const auto& f : reference_functions("builtin"))
    names.push_back(f.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"toy", "xy", "exp_sin4", "highdim100", "feynman_I.6.20a"}));
  EXPECT_EQ(reference_functions().front().name, "toy");
  // The standard normal density at 0, on pykan's range [-3, 3].
  const auto& feynman = reference_function("feynman_I.6.20a");
  EXPECT_NEAR(feynman.f(torch::zeros({1, 1}, torch::kFloat64)).item<double>(),
              1 / std::sqrt(2 * M_PI), 1e-15);
  const auto data = create_dataset(feynman.f, DatasetOptions(1).ranges(feynman.ranges));
  EXPECT_LT(data.train_input.min().item<double>(), -2.9);
  EXPECT_GT(data.train_input.max().item<double>(), 2.9);
  const auto& high = reference_function("highdim100");
  EXPECT_EQ(high.n_var, 100);
  const auto y = high.f(torch::ones({3, 100}, torch::kFloat64)); // sin^2(pi/2) = 1
  EXPECT_NEAR(y[0][0].item<double>(), std::exp(1.0), 1e-12);
  EXPECT_NEAR(
      reference_function("exp_sin4").f(torch::zeros({1, 4}, torch::kFloat64)).item<double>(), 1.0,
      1e-15);
  KAN_EXPECT_ERROR(reference_function("nope"), "unknown function 'nope'", "toy, xy");
}

TEST(Dataset, RejectsBadOptions) {
  const auto& f = reference_function("toy").f;
  KAN_EXPECT_ERROR(create_dataset(f, DatasetOptions(2).ranges({{1, -1}})), "[1, -1]");
  KAN_EXPECT_ERROR(create_dataset(f, DatasetOptions(2).ranges({{0, 1}, {0, 1}, {0, 1}})),
                   "n_var = 2");
  KAN_EXPECT_ERROR(create_dataset(f, DatasetOptions(2).train_num(-1)), "train_num", "-1");
  KAN_EXPECT_ERROR(create_dataset(f, DatasetOptions(2).dtype(torch::kInt64)), "dtype");
  KAN_EXPECT_ERROR(
      create_dataset([](const torch::Tensor& x) { return x.sum(); }, DatasetOptions(2)), "labels");
}

} // namespace
} // namespace kan
