#include "kan/serialize/model_file.h"

#include "kan/serialize/checkpoint.h"
#include "kan/serialize/pykan.h"
#include "kan/serialize/torchscript.h"

#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <filesystem>

namespace kan {

std::string to_string(ModelFileKind kind) {
  switch (kind) {
  case ModelFileKind::kCheckpoint:
    return "kanbench checkpoint";
  case ModelFileKind::kPykan:
    return "pykan checkpoint";
  case ModelFileKind::kTorchScript:
    return "TorchScript archive";
  }
  return "?";
}

ModelFileKind model_file_kind(const std::string& path) {
  std::error_code ec;
  // A file at `path` wins over a pykan checkpoint of that prefix.
  if (!std::filesystem::exists(path, ec)) {
    TORCH_CHECK(is_pykan_checkpoint(path), "no model at '", path,
                "': no such file (a kanbench checkpoint or a TorchScript archive), and no '", path,
                "_config.yml' (a pykan checkpoint prefix)");
    return ModelFileKind::kPykan;
  }
  return is_torchscript_archive(path) ? ModelFileKind::kTorchScript : ModelFileKind::kCheckpoint;
}

KAN load_model(const std::string& path, torch::Device device) {
  switch (model_file_kind(path)) {
  case ModelFileKind::kPykan:
    return load_pykan(path, device);
  case ModelFileKind::kTorchScript:
    TORCH_CHECK(false, "'", path, "' is a TorchScript archive, not a KAN of kanbench or pykan: ",
                "open it with kan::open_model");
  case ModelFileKind::kCheckpoint:
    break;
  }
  return load_checkpoint(path, device);
}

std::shared_ptr<Model> open_model(const std::string& path, const ModelFileOptions& options) {
  std::shared_ptr<Model> model;
  switch (model_file_kind(path)) {
  case ModelFileKind::kPykan:
    model = load_pykan(path, options.device()).ptr();
    break;
  case ModelFileKind::kTorchScript:
    return load_torchscript(path, TorchScriptLoadOptions()
                                      .trusted(options.trust_torchscript())
                                      .inputs(options.inputs())
                                      .device(options.device()))
        .ptr();
  case ModelFileKind::kCheckpoint:
    model = load_any_checkpoint(path, options.device());
    break;
  }
  TORCH_CHECK(options.inputs() == 0 || options.inputs() == model->inputs(), "model '", path,
              "' takes ", model->inputs(), " inputs, not ", options.inputs(),
              " (--inputs, or the data's input columns)");
  return model;
}

void save_model(const Model& model, const std::function<void(const void*, size_t)>& write) {
  if (const auto* script = dynamic_cast<const TorchScriptModelImpl*>(&model))
    save_torchscript(*script, write);
  else
    save_checkpoint(model, write);
}

std::shared_ptr<Model> copy_model(const Model& model, torch::Device device, torch::Dtype dtype) {
  auto copy = std::dynamic_pointer_cast<Model>(model.module().clone());
  TORCH_INTERNAL_ASSERT(copy != nullptr, "a model's clone is not a kan::Model");
  copy->module().to(device, dtype);
  return copy;
}

} // namespace kan
