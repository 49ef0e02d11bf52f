#include "kan/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"
#include "kan/pykan.h"

#include <torch/cuda.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <tuple>
#include <vector>

namespace kan {
namespace {

constexpr const char* kFormatKey = "kanbench_format";
constexpr const char* kFormatName = "kanbench-kan-checkpoint";
constexpr const char* kVersionKey = "kanbench_format_version";
constexpr const char* kConfigKey = "kanbench_config";
constexpr const char* kModelKey = "model";
constexpr const char* kChecksumsKey = "kanbench_checksums"; // from format version 2
constexpr const char* kSymbolicKey = "kanbench_symbolic";   // from format version 4

// FNV-1a over a tensor's bytes: LibTorch's archive reader does not verify its zip records'
// CRC-32, so a flipped bit in a tensor would load silently without a checksum of our own.
std::string checksum(const torch::Tensor& tensor) {
  const auto cpu = tensor.detach().to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(cpu.data_ptr());
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t n = 0, size = cpu.nbytes(); n < size; ++n)
    hash = (hash ^ bytes[n]) * 0x100000001b3ULL;
  char text[32];
  std::snprintf(text, sizeof text, "fnv1a64:%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// Every parameter and buffer with its dotted name ("layers.0.coef") and whether it is a buffer.
std::vector<std::tuple<std::string, torch::Tensor, bool>> state_tensors(const KAN& model) {
  std::vector<std::tuple<std::string, torch::Tensor, bool>> tensors;
  for (const auto& p : model->named_parameters())
    tensors.emplace_back(p.key(), p.value(), false);
  for (const auto& b : model->named_buffers())
    tensors.emplace_back(b.key(), b.value(), true);
  return tensors;
}

// Refuses NaN and Inf in a model's state: such a model cannot be trained or updated further.
void check_finite_state(const std::string& name, const torch::Tensor& tensor,
                        const std::string& where) {
  if (tensor.is_meta() || !tensor.is_floating_point())
    return;
  const auto finite = torch::isfinite(tensor);
  if (finite.all().item<bool>())
    return;
  const auto nan = torch::isnan(tensor).sum().item<int64_t>();
  const auto inf = torch::logical_not(finite).sum().item<int64_t>() - nan;
  TORCH_CHECK(false, where, ": ", name, " contains ", nan, " NaN and ", inf,
              " Inf values; a model with non-finite parameters cannot be used (was it saved from a "
              "training run that diverged, or is the file corrupt?)");
}

// The tensor stored under a dotted name, read as it is in the file (its own dtype and shape).
torch::Tensor stored_tensor(torch::serialize::InputArchive& state, const std::string& name,
                            bool is_buffer, const std::string& path) {
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const auto dot = name.find('.', begin);
    parts.push_back(name.substr(begin, dot - begin));
    if (dot == std::string::npos)
      break;
    begin = dot + 1;
  }
  std::vector<torch::serialize::InputArchive> nested(parts.size() - 1);
  torch::serialize::InputArchive* archive = &state;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    TORCH_CHECK(archive->try_read(parts[i], nested[i]), "checkpoint '", path, "' has no ", name,
                ": the file does not match its configuration");
    archive = &nested[i];
  }
  torch::Tensor tensor;
  TORCH_CHECK(archive->try_read(parts.back(), tensor, is_buffer), "checkpoint '", path, "' has no ",
              name, ": the file does not match its configuration");
  return tensor;
}

// Per layer: null without symbolic state, else its function names as (out, in) lists (pykan's
// funs_name layout, the symbolic_mask's).
nlohmann::json symbolic_record(const KAN& model) {
  auto record = nlohmann::json::array();
  for (size_t l = 0; l < model->depth(); ++l) {
    const auto layer = model->layer(l);
    if (!layer->has_symbolic_state()) {
      record.push_back(nullptr);
      continue;
    }
    auto rows = nlohmann::json::array();
    for (int64_t j = 0; j < layer->options().out_dim(); ++j) {
      auto row = nlohmann::json::array();
      for (int64_t i = 0; i < layer->options().in_dim(); ++i)
        row.push_back(layer->symbolic_name(i, j));
      rows.push_back(row);
    }
    record.push_back(rows);
  }
  return record;
}

// Gives the layers the symbolic state the record names (masks 0 until the tensors are read).
void apply_symbolic_record(KAN& model, const std::string& text, const std::string& path) {
  const auto record = nlohmann::json::parse(text, nullptr, false);
  TORCH_CHECK(record.is_array() && record.size() == model->depth(), "checkpoint '", path,
              "' has a malformed symbolic record (expected one entry per layer, ", model->depth(),
              ")");
  for (size_t l = 0; l < model->depth(); ++l) {
    if (record[l].is_null())
      continue;
    auto layer = model->layer(l);
    const int64_t I = layer->options().in_dim(), O = layer->options().out_dim();
    TORCH_CHECK(record[l].is_array() && static_cast<int64_t>(record[l].size()) == O, "checkpoint '",
                path, "': the symbolic record of layer ", l, " is not ", O, " lists of ", I,
                " names");
    std::vector<int64_t> in, out;
    std::vector<std::string> names;
    for (int64_t j = 0; j < O; ++j) {
      const auto& row = record[l][j];
      TORCH_CHECK(row.is_array() && static_cast<int64_t>(row.size()) == I, "checkpoint '", path,
                  "': the symbolic record of layer ", l, " is not ", O, " lists of ", I, " names");
      for (int64_t i = 0; i < I; ++i) {
        TORCH_CHECK(row[i].is_string(), "checkpoint '", path, "': symbolic function of edge ", i,
                    " -> ", j, " of layer ", l, " is not a name");
        in.push_back(i);
        out.push_back(j);
        names.push_back(row[i].get<std::string>());
      }
    }
    try {
      layer->set_symbolic_edges(in, out, names, std::vector<double>(in.size(), 0.0));
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "checkpoint '", path, "', layer ", l, ": ",
                  io::first_line(e.what_without_backtrace()));
    }
  }
}

} // namespace

void save_checkpoint(const KAN& model, const std::function<void(const void*, size_t)>& write) {
  auto options = model->options();
  options.dtype(model->dtype());
  nlohmann::json checksums;
  for (const auto& [name, tensor, is_buffer] : state_tensors(model)) {
    (void)is_buffer;
    check_finite_state(name, tensor, "checkpoint not written");
    checksums[name] = checksum(tensor);
  }
  torch::serialize::OutputArchive archive;
  archive.write(kFormatKey, c10::IValue(std::string(kFormatName)));
  archive.write(kVersionKey, c10::IValue(kCheckpointFormatVersion));
  archive.write(kConfigKey, c10::IValue(to_json(options).dump()));
  archive.write(kChecksumsKey, c10::IValue(checksums.dump()));
  archive.write(kSymbolicKey, c10::IValue(symbolic_record(model).dump()));
  torch::serialize::OutputArchive state;
  model->save(state);
  archive.write(kModelKey, state);
  // LibTorch's archive writer must never see a failed write: it retries the write in its
  // destructor, and an exception there aborts the program. So a failure is kept, the rest of
  // the archive is dropped, and the failure is thrown once the writer is done.
  std::exception_ptr failure;
  archive.save_to([&](const void* data, size_t size) -> size_t {
    if (!failure) {
      try {
        write(data, size);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    return size;
  });
  if (failure)
    std::rethrow_exception(failure);
}

void save_checkpoint(const KAN& model, const std::string& path) {
  try {
    io::AtomicFile file(path);
    save_checkpoint(model, [&](const void* data, size_t size) { file.write(data, size); });
    file.commit();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write checkpoint '", path, "': ", io::first_line(e.what()));
  }
}

KAN load_checkpoint(const std::string& path, torch::Device device) {
  TORCH_CHECK(!device.is_cuda() || torch::cuda::is_available(), "cannot load checkpoint '", path,
              "' onto ", device, ": no usable CUDA device here (kanbench env says why)");
  TORCH_CHECK(!device.is_cuda() || !device.has_index() ||
                  device.index() < static_cast<int>(torch::cuda::device_count()),
              "cannot load checkpoint '", path, "' onto ", device, ": only ",
              torch::cuda::device_count(), " CUDA device(s) are visible");
  std::error_code ec;
  TORCH_CHECK(!std::filesystem::is_directory(path, ec), "cannot read checkpoint '", path,
              "': it is a folder, not a checkpoint file");
  TORCH_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read checkpoint '", path,
              "': no such file");
  TORCH_CHECK(std::filesystem::file_size(path, ec) > 0, "cannot read checkpoint '", path,
              "': the file is empty");
  // Read on the CPU, checked there, then moved: a corrupt file never reaches the device.
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "cannot read checkpoint '", path,
                "': not a readable LibTorch archive (truncated or foreign file?): ",
                io::first_line(e.what_without_backtrace()));
  }

  c10::IValue format, version, config, checksums_record;
  TORCH_CHECK(archive.try_read(kFormatKey, format) && format.isString() &&
                  format.toStringRef() == kFormatName,
              "'", path, "' is a LibTorch archive but not a kanbench checkpoint");
  TORCH_CHECK(archive.try_read(kVersionKey, version) && version.isInt() && version.toInt() >= 1 &&
                  version.toInt() <= kCheckpointFormatVersion,
              "checkpoint '", path, "' has format version ",
              version.isInt() ? std::to_string(version.toInt()) : std::string("?"),
              "; this kanbench reads versions 1 to ", kCheckpointFormatVersion);
  TORCH_CHECK(archive.try_read(kConfigKey, config) && config.isString(), "checkpoint '", path,
              "' has no configuration record");
  KANOptions options({1, 1});
  try {
    options = kan_options_from_json(nlohmann::json::parse(config.toStringRef()));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "checkpoint '", path,
                "' has a malformed configuration: ", io::first_line(e.what()));
  }
  // Version 1 files carry no checksums; from version 2 on every tensor has one.
  nlohmann::json checksums = nlohmann::json::object();
  if (version.toInt() >= 2) {
    TORCH_CHECK(archive.try_read(kChecksumsKey, checksums_record) && checksums_record.isString(),
                "checkpoint '", path, "' has no checksum record");
    checksums = nlohmann::json::parse(checksums_record.toStringRef(), nullptr, false);
    TORCH_CHECK(checksums.is_object(), "checkpoint '", path, "' has a malformed checksum record");
  }

  KAN model(options.device(device));
  // Version 4 names each layer's symbolic functions; before, no edge was symbolic.
  if (version.toInt() >= 4) {
    c10::IValue symbolic;
    TORCH_CHECK(archive.try_read(kSymbolicKey, symbolic) && symbolic.isString(), "checkpoint '",
                path, "' has no symbolic record");
    apply_symbolic_record(model, symbolic.toStringRef(), path);
  }
  torch::serialize::InputArchive state;
  TORCH_CHECK(archive.try_read(kModelKey, state), "checkpoint '", path, "' has no model state");
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor, is_buffer] : state_tensors(model)) {
    // Before version 3 there were no affine parameters: the model's identity ones stay.
    if (version.toInt() < 3 && name.rfind("layers.", 0) != 0)
      continue;
    const auto stored = stored_tensor(state, name, is_buffer, path);
    TORCH_CHECK(stored.scalar_type() == options.dtype() && stored.sizes() == tensor.sizes(),
                "checkpoint '", path, "': ", name, " is ", to_string(stored.scalar_type()),
                " of shape ", stored.sizes(), " but its configuration implies ",
                to_string(options.dtype()), " of shape ", tensor.sizes(),
                "; the file is inconsistent (nothing is converted silently)");
    check_finite_state(name, stored, "checkpoint '" + path + "'");
    if (version.toInt() >= 2) {
      TORCH_CHECK(checksums.contains(name) && checksums[name].is_string(), "checkpoint '", path,
                  "' has no checksum for ", name);
      TORCH_CHECK(checksums[name].get<std::string>() == checksum(stored), "checkpoint '", path,
                  "': ", name, " does not match its checksum: the file is corrupt");
    }
    tensor.copy_(stored);
  }
  for (size_t l = 0; l < model->depth(); ++l)
    model->layer(l)->sync_symbolic_mask();
  return model;
}

KAN load_model(const std::string& path, torch::Device device) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && is_pykan_checkpoint(path))
    return load_pykan(path, device);
  TORCH_CHECK(std::filesystem::exists(path, ec), "no model at '", path,
              "': no such file (a kanbench checkpoint), and no '", path,
              "_config.yml' (a pykan checkpoint prefix)");
  return load_checkpoint(path, device);
}

} // namespace kan
