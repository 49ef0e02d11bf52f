#pragma once
// Checkpoints of format version 1 written by hand, for tests of what loading refuses and of old
// files: the configuration as given (a test may make it contradict the tensors) and the model's
// state, without checksums.

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/serialize/output-archive.h>

#include <string>

namespace kan::test {

inline void write_version1_checkpoint(const std::string& path, const nlohmann::json& config,
                                      const torch::nn::Module& model) {
  torch::serialize::OutputArchive archive, state;
  archive.write("kanbench_format", c10::IValue(std::string("kanbench-kan-checkpoint")));
  archive.write("kanbench_format_version", c10::IValue(int64_t{1}));
  archive.write("kanbench_config", c10::IValue(config.dump()));
  model.save(state);
  archive.write("model", state);
  archive.save_to(path);
}

} // namespace kan::test
