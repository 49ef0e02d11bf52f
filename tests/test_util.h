#pragma once
// Helpers shared by the test files: pykan reference data and GPU skips.

#include "kan/dataset.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/types.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kan::test {

/// One of the pykan reference files in tests/reference/pykan (copied from
/// shared/reference/pykan; regenerate there, never edit).
inline nlohmann::json load_reference(const std::string& name) {
  const std::string path = std::string(KAN_REFERENCE_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open reference file " + path);
  return nlohmann::json::parse(in);
}

/// A nested JSON array of numbers (or booleans) as a float64 tensor.
inline torch::Tensor to_tensor(const nlohmann::json& j) {
  if (!j.is_array())
    return torch::tensor(j.is_boolean() ? double(j.get<bool>()) : j.get<double>(), torch::kFloat64);
  std::vector<torch::Tensor> rows;
  for (const auto& e : j)
    rows.push_back(to_tensor(e));
  if (rows.empty())
    return torch::empty({0}, torch::kFloat64);
  return torch::stack(rows);
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU, torch::kFloat64) - b.to(torch::kCPU, torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

/// 64 training and 16 test points of pykan's toy function.
inline Dataset toy_data(torch::Dtype dtype = torch::kFloat32, torch::Device device = torch::kCPU) {
  return create_dataset(reference_function("toy").f,
                        DatasetOptions(2).train_num(64).test_num(16).dtype(dtype).device(device));
}

/// A fixture with a fresh scratch folder per test, removed afterwards.
class ScratchDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kanbench_test_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

} // namespace kan::test

/// Skips a *_CUDA test, visibly, where no GPU is usable.
#define KAN_REQUIRE_CUDA()                                                                         \
  do {                                                                                             \
    if (!torch::cuda::is_available())                                                              \
      GTEST_SKIP() << "no CUDA device available";                                                  \
  } while (0)

/// Expects `statement` to throw c10::Error whose message contains every given fragment.
#define KAN_EXPECT_ERROR(statement, ...)                                                           \
  do {                                                                                             \
    try {                                                                                          \
      statement;                                                                                   \
      ADD_FAILURE() << "expected an error from: " #statement;                                      \
    } catch (const c10::Error& e) {                                                                \
      const std::string message = e.what_without_backtrace();                                      \
      for (const std::string fragment : {__VA_ARGS__}) {                                           \
        EXPECT_NE(message.find(fragment), std::string::npos)                                       \
            << "message lacks '" << fragment << "': " << message;                                  \
      }                                                                                            \
    }                                                                                              \
  } while (0)
