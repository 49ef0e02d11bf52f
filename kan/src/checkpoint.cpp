#include "kan/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>

namespace kan {
namespace {

constexpr const char* kFormatKey = "kanbench_format";
constexpr const char* kFormatName = "kanbench-kan-checkpoint";
constexpr const char* kVersionKey = "kanbench_format_version";
constexpr const char* kConfigKey = "kanbench_config";
constexpr const char* kModelKey = "model";

std::string dtype_name(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? "float64" : "float32";
}

torch::Dtype dtype_from_name(const std::string& name) {
  if (name == "float64")
    return torch::kFloat64;
  if (name == "float32")
    return torch::kFloat32;
  TORCH_CHECK(false, "dtype must be float32 or float64, got '", name, "'");
}

// The first line of a LibTorch message: the rest is a C++ backtrace.
std::string first_line(const std::string& message) {
  return message.substr(0, message.find('\n'));
}

template <typename T> T required(const nlohmann::json& json, const char* key) {
  TORCH_CHECK(json.contains(key), "KAN configuration is missing the key '", key, "'");
  try {
    return json.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "KAN configuration key '", key, "' has the wrong type: ", e.what());
  }
}

void check_shapes(const KAN& model, const std::string& path) {
  for (size_t l = 0; l < model->depth(); ++l) {
    const auto layer = model->layer(l);
    const auto& o = layer->options();
    const std::vector<std::pair<const char*, std::pair<torch::Tensor, std::vector<int64_t>>>>
        expected{{"grid", {layer->grid, {o.in_dim(), o.grid() + 2 * o.k() + 1}}},
                 {"mask", {layer->mask, {o.in_dim(), o.out_dim()}}},
                 {"coef", {layer->coef, {o.in_dim(), o.out_dim(), o.grid() + o.k()}}},
                 {"scale_base", {layer->scale_base, {o.in_dim(), o.out_dim()}}},
                 {"scale_sp", {layer->scale_sp, {o.in_dim(), o.out_dim()}}}};
    for (const auto& [name, tensor_and_shape] : expected) {
      const auto& [tensor, shape] = tensor_and_shape;
      TORCH_CHECK(tensor.sizes() == c10::IntArrayRef(shape) && tensor.scalar_type() == o.dtype(),
                  "checkpoint '", path, "': layers.", l, ".", name, " is ", tensor.scalar_type(),
                  " of shape ", tensor.sizes(), " but its configuration implies ", o.dtype(),
                  " of shape ", c10::IntArrayRef(shape));
    }
  }
}

} // namespace

nlohmann::json to_json(const KANOptions& o) {
  return {{"width", o.width()},
          {"grid", o.grid()},
          {"k", o.k()},
          {"seed", o.seed()},
          {"noise_scale", o.noise_scale()},
          {"scale_base_mu", o.scale_base_mu()},
          {"scale_base_sigma", o.scale_base_sigma()},
          {"scale_sp", o.scale_sp()},
          {"base_fun", to_string(o.base_fun())},
          {"grid_eps", o.grid_eps()},
          {"grid_range", o.grid_range()},
          {"sp_trainable", o.sp_trainable()},
          {"sb_trainable", o.sb_trainable()},
          {"dtype", dtype_name(o.dtype())},
          {"backend", to_string(o.backend())}};
}

KANOptions kan_options_from_json(const nlohmann::json& j) {
  TORCH_CHECK(j.is_object(), "KAN configuration must be a JSON object, got ", j.type_name());
  return KANOptions(required<std::vector<int64_t>>(j, "width"))
      .grid(required<int64_t>(j, "grid"))
      .k(required<int64_t>(j, "k"))
      .seed(required<uint64_t>(j, "seed"))
      .noise_scale(required<double>(j, "noise_scale"))
      .scale_base_mu(required<double>(j, "scale_base_mu"))
      .scale_base_sigma(required<double>(j, "scale_base_sigma"))
      .scale_sp(required<double>(j, "scale_sp"))
      .base_fun(base_function_from_string(required<std::string>(j, "base_fun")))
      .grid_eps(required<double>(j, "grid_eps"))
      .grid_range(required<GridRange>(j, "grid_range"))
      .sp_trainable(required<bool>(j, "sp_trainable"))
      .sb_trainable(required<bool>(j, "sb_trainable"))
      .dtype(dtype_from_name(required<std::string>(j, "dtype")))
      // Files written before the backend option existed read as the default, "fused".
      .backend(spline_backend_from_string(
          j.contains("backend") ? required<std::string>(j, "backend") : std::string("fused")));
}

void save_checkpoint(const KAN& model, const std::string& path) {
  auto options = model->options();
  options.dtype(model->dtype());
  torch::serialize::OutputArchive archive;
  archive.write(kFormatKey, c10::IValue(std::string(kFormatName)));
  archive.write(kVersionKey, c10::IValue(kCheckpointFormatVersion));
  archive.write(kConfigKey, c10::IValue(to_json(options).dump()));
  torch::serialize::OutputArchive state;
  model->save(state);
  archive.write(kModelKey, state);
  try {
    archive.save_to(path);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "cannot write checkpoint '", path,
                "': ", first_line(e.what_without_backtrace()));
  }
}

KAN load_checkpoint(const std::string& path, torch::Device device) {
  std::error_code ec;
  TORCH_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read checkpoint '", path,
              "': no such file");
  TORCH_CHECK(std::filesystem::file_size(path, ec) > 0, "cannot read checkpoint '", path,
              "': the file is empty");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "cannot read checkpoint '", path,
                "': not a readable LibTorch archive (truncated or foreign file?): ",
                first_line(e.what_without_backtrace()));
  }

  c10::IValue format, version, config;
  TORCH_CHECK(archive.try_read(kFormatKey, format) && format.isString() &&
                  format.toStringRef() == kFormatName,
              "'", path, "' is a LibTorch archive but not a kanbench checkpoint");
  TORCH_CHECK(archive.try_read(kVersionKey, version) && version.isInt() &&
                  version.toInt() == kCheckpointFormatVersion,
              "checkpoint '", path, "' has format version ",
              version.isInt() ? std::to_string(version.toInt()) : std::string("?"),
              "; this kanbench reads version ", kCheckpointFormatVersion);
  TORCH_CHECK(archive.try_read(kConfigKey, config) && config.isString(), "checkpoint '", path,
              "' has no configuration record");

  KANOptions options({1, 1});
  try {
    options = kan_options_from_json(nlohmann::json::parse(config.toStringRef()));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "checkpoint '", path,
                "' has a malformed configuration: ", first_line(e.what()));
  }
  KAN model(options.device(device));
  torch::serialize::InputArchive state;
  TORCH_CHECK(archive.try_read(kModelKey, state), "checkpoint '", path, "' has no model state");
  try {
    model->load(state);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "checkpoint '", path,
                "' does not match its configuration: ", first_line(e.what_without_backtrace()));
  }
  check_shapes(model, path);
  return model;
}

} // namespace kan
