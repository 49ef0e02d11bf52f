#include "kan/serialize/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/serialize/output-archive.h>

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"
#include "kan/nn/memory.h"
#include "kan/serialize/pykan.h"

#include "detail/initial_values.h"
#include "detail/saturate.h"
#include "serialize/detail/checkpoint_format.h"
#include "serialize/detail/torch_archive.h"

#include <torch/cuda.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <tuple>
#include <vector>

namespace kan {
namespace {

constexpr const char* kFormatKey = detail::kCheckpointFormatKey;
constexpr const char* kFormatName = detail::kCheckpointFormatName;
constexpr const char* kVersionKey = "kanbench_format_version";
constexpr const char* kConfigKey = "kanbench_config";
constexpr const char* kModelKey = "model";
constexpr const char* kChecksumsKey = "kanbench_checksums"; // from format version 2
constexpr const char* kSymbolicKey = "kanbench_symbolic";   // from format version 4
constexpr const char* kKindKey = "kanbench_model_kind";     // from format version 5

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
std::vector<std::tuple<std::string, torch::Tensor, bool>>
state_tensors(const torch::nn::Module& model) {
  std::vector<std::tuple<std::string, torch::Tensor, bool>> tensors;
  for (const auto& p : model.named_parameters())
    tensors.emplace_back(p.key(), p.value(), false);
  for (const auto& b : model.named_buffers())
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

// The tensor stored under a dotted name ("layers.0.coef": attribute coef of module 0 of module
// layers), read as it is in the file (its own dtype and shape).
torch::Tensor stored_tensor(const detail::PickleValue& state, const std::string& name,
                            const std::string& path) {
  const detail::PickleValue* value = &state;
  for (size_t begin = 0; value != nullptr;) {
    const auto dot = name.find('.', begin);
    value = value->kind == detail::PickleValue::Kind::kObject
                ? value->find(name.substr(begin, dot - begin))
                : nullptr;
    if (dot == std::string::npos)
      break;
    begin = dot + 1;
  }
  TORCH_CHECK(value != nullptr && value->kind == detail::PickleValue::Kind::kTensor, "checkpoint '",
              path, "' has no ", name, ": the file does not match its configuration");
  return value->tensor;
}

// Per layer: null without symbolic state, else its function names as (out, in) lists (pykan's
// funs_name layout, the symbolic_mask's).
nlohmann::json symbolic_record(const KANImpl& model) {
  auto record = nlohmann::json::array();
  for (size_t l = 0; l < model.depth(); ++l) {
    const auto layer = model.layer(l);
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

// The whole archive of any model: its kind, its configuration (model.config(), in its dtype),
// the checksums and its state; `symbolic` is a KAN's symbolic record.
void write_archive(const Model& model, const nlohmann::json& symbolic,
                   const std::function<void(const void*, size_t)>& write) {
  nlohmann::json checksums;
  for (const auto& [name, tensor, is_buffer] : state_tensors(model.module())) {
    (void)is_buffer;
    check_finite_state(name, tensor, "checkpoint not written");
    checksums[name] = checksum(tensor);
  }
  torch::serialize::OutputArchive archive;
  archive.write(kFormatKey, c10::IValue(std::string(kFormatName)));
  archive.write(kVersionKey, c10::IValue(kCheckpointFormatVersion));
  archive.write(kKindKey, c10::IValue(to_string(model.kind())));
  archive.write(kConfigKey, c10::IValue(model.config().dump()));
  archive.write(kChecksumsKey, c10::IValue(checksums.dump()));
  if (!symbolic.is_null())
    archive.write(kSymbolicKey, c10::IValue(symbolic.dump()));
  torch::serialize::OutputArchive state;
  model.module().save(state);
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

void save_to_file(
    const std::string& path,
    const std::function<void(const std::function<void(const void*, size_t)>&)>& save) {
  try {
    io::AtomicFile file(path);
    save([&](const void* data, size_t size) { file.write(data, size); });
    file.commit();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write checkpoint '", path, "': ", io::first_line(e.what()));
  }
}

// A checkpoint file opened and its records read, before any model is built from it.
struct OpenedCheckpoint {
  explicit OpenedCheckpoint(detail::TorchArchive archive) : archive(std::move(archive)) {}

  detail::TorchArchive archive;
  int64_t version = 0;
  ModelKind kind = ModelKind::kKAN;
  nlohmann::json config;
  nlohmann::json checksums = nlohmann::json::object(); // none before version 2

  // The top-level record `key` where it is of `kind`, else nullptr.
  const detail::PickleValue* record(const char* key, detail::PickleValue::Kind kind) const {
    const auto* value = archive.root().find(key);
    return value != nullptr && value->kind == kind ? value : nullptr;
  }
  // The string record `key`; a missing one is an error naming the file and `what` it is.
  const std::string& text(const char* key, const std::string& path, const char* what) const {
    const auto* value = record(key, detail::PickleValue::Kind::kString);
    TORCH_CHECK(value != nullptr, "checkpoint '", path, "' has no ", what, " record");
    return value->text;
  }
};

detail::TorchArchive read_archive(const std::string& path) {
  try {
    return detail::TorchArchive(path);
  } catch (const c10::Error& e) {
    // The archive's messages start with the path.
    auto message = io::first_line(e.what_without_backtrace());
    const auto named = "'" + path + "': ";
    if (message.rfind(named, 0) == 0)
      message = message.substr(named.size());
    TORCH_CHECK(false, "cannot read checkpoint '", path, "': ", message);
    throw;
  }
}

// Opens `path` on the CPU (a corrupt file never reaches the device) and checks what every
// checkpoint has, for a model to be loaded onto `device`. The file is read by kan's own archive
// reader (serialize/detail/torch_archive.h), never by LibTorch's serialize loader: a checkpoint
// holds only strings, integers and tensors in nested modules, which that reader validates against
// its records and limits, while LibTorch's loader compiles the archive's TorchScript code and
// unpickles with no nesting limit.
OpenedCheckpoint open_checkpoint(const std::string& path, torch::Device device) {
  TORCH_CHECK(!device.is_cuda() || torch::cuda::is_available(), "cannot load checkpoint '", path,
              "' onto ", device, ": no usable CUDA device here (kanbench env says why)");
  TORCH_CHECK(!device.is_cuda() || !device.has_index() ||
                  device.index() < static_cast<int>(torch::cuda::device_count()),
              "cannot load checkpoint '", path, "' onto ", device, ": only ",
              torch::cuda::device_count(), " CUDA device(s) are visible");
  // A missing, empty or folder path is refused by the archive reader.
  OpenedCheckpoint opened{read_archive(path)};

  using Kind = detail::PickleValue::Kind;
  const auto* format = opened.archive.root().kind == Kind::kObject
                           ? opened.record(kFormatKey, Kind::kString)
                           : nullptr;
  TORCH_CHECK(format != nullptr && format->text == kFormatName, "'", path,
              "' is a LibTorch archive but not a kanbench checkpoint");
  const auto* version = opened.record(kVersionKey, Kind::kInt);
  TORCH_CHECK(version != nullptr && version->integer >= 1 &&
                  version->integer <= kCheckpointFormatVersion,
              "checkpoint '", path, "' has format version ",
              version != nullptr ? std::to_string(version->integer) : std::string("?"),
              "; this kanbench reads versions 1 to ", kCheckpointFormatVersion);
  opened.version = version->integer;
  // Version 5 says which model the file holds; every file before holds a KAN.
  if (opened.version >= 5) {
    const auto& kind = opened.text(kKindKey, path, "model kind");
    // A checkpoint holds kanbench's own models; a TorchScript module is an archive of its own.
    const bool known = kind == to_string(ModelKind::kKAN) || kind == to_string(ModelKind::kMLP);
    TORCH_CHECK(known, "checkpoint '", path, "' has a malformed model kind record: '",
                io::elided(kind), "' (kan or mlp)");
    opened.kind = model_kind_from_string(kind);
  }
  opened.config =
      nlohmann::json::parse(opened.text(kConfigKey, path, "configuration"), nullptr, false);
  TORCH_CHECK(!opened.config.is_discarded(), "checkpoint '", path,
              "' has a malformed configuration: not JSON");
  return opened;
}

// Version 1 files carry no checksums; from version 2 on every tensor has one. Read after the
// configuration, so that a malformed one is named first.
void read_checksums(OpenedCheckpoint& opened, const std::string& path) {
  if (opened.version < 2)
    return;
  opened.checksums =
      nlohmann::json::parse(opened.text(kChecksumsKey, path, "checksum"), nullptr, false);
  TORCH_CHECK(opened.checksums.is_object(), "checkpoint '", path,
              "' has a malformed checksum record");
}

// The model's options from the configuration record; an error names the file and the key.
template <typename Read>
auto read_config(const OpenedCheckpoint& opened, const std::string& path, Read read)
    -> decltype(read(opened.config)) {
  try {
    return read(opened.config);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "checkpoint '", path,
                "' has a malformed configuration: ", io::first_line(e.what()));
  }
}

// Refuses a file of another kind of model than the loader's, naming the loader to use.
void check_kind(const OpenedCheckpoint& opened, ModelKind wanted, const std::string& path) {
  if (opened.kind == wanted)
    return;
  const char* loader =
      opened.kind == ModelKind::kMLP ? "kan::load_mlp_checkpoint" : "kan::load_checkpoint";
  TORCH_CHECK(false, "checkpoint '", path, "' holds a model of kind ", to_string(opened.kind),
              ", not ", to_string(wanted), ": load it with ", loader,
              " (or kan::load_any_checkpoint)");
}

// Refuses a configuration whose model would need far more memory than the file holds tensors.
void check_size_against_file(int64_t implied_bytes, const std::string& model,
                             const OpenedCheckpoint& opened, const std::string& path) {
  const int64_t stored = opened.archive.storage_bytes();
  TORCH_CHECK(detail::stored_bytes_cover(implied_bytes, stored), "checkpoint '", path,
              "': its configuration (", model, ") implies ", format_bytes(implied_bytes),
              " of parameters and buffers, but the file holds only ", format_bytes(stored),
              " of tensors; the file is corrupt");
}

// Copies every tensor the model has from the file's state, each checked against the model's
// dtype and shape, then its checksum (before anything else reads its values), then for NaN or
// Inf. `skip` names tensors older files lack.
void read_state(torch::nn::Module& model, OpenedCheckpoint& opened, torch::Dtype dtype,
                const std::string& path,
                const std::function<bool(const std::string&)>& skip = nullptr) {
  read_checksums(opened, path);
  const auto* state = opened.record(kModelKey, detail::PickleValue::Kind::kObject);
  TORCH_CHECK(state != nullptr, "checkpoint '", path, "' has no model state");
  torch::NoGradGuard no_grad;
  const auto& checksums = opened.checksums;
  for (const auto& [name, tensor, is_buffer] : state_tensors(model)) {
    (void)is_buffer;
    if (skip && skip(name))
      continue;
    const auto stored = stored_tensor(*state, name, path);
    TORCH_CHECK(stored.scalar_type() == dtype && stored.sizes() == tensor.sizes(), "checkpoint '",
                path, "': ", name, " is ", to_string(stored.scalar_type()), " of shape ",
                stored.sizes(), " but its configuration implies ", to_string(dtype), " of shape ",
                tensor.sizes(), "; the file is inconsistent (nothing is converted silently)");
    if (opened.version >= 2) {
      TORCH_CHECK(checksums.contains(name) && checksums[name].is_string(), "checkpoint '", path,
                  "' has no checksum for ", name);
      TORCH_CHECK(checksums[name].get<std::string>() == checksum(stored), "checkpoint '", path,
                  "': ", name, " does not match its checksum: the file is corrupt");
    }
    check_finite_state(name, stored, "checkpoint '" + path + "'");
    tensor.copy_(stored);
  }
}

KAN load_kan(OpenedCheckpoint& opened, const std::string& path, torch::Device device) {
  check_kind(opened, ModelKind::kKAN, path);
  auto options = read_config(
      opened, path, [](const nlohmann::json& config) { return kan_options_from_json(config); });
  check_size_against_file(estimate_model_memory(options).total(),
                          "width " + c10::str(c10::IntArrayRef(options.width())) + ", grid " +
                              std::to_string(options.grid()),
                          opened, path);
  const detail::SkipInitialValues every_value_comes_from_the_file;
  KAN model(options.device(device));
  // Version 4 names each layer's symbolic functions; before, no edge was symbolic.
  if (opened.version >= 4) {
    apply_symbolic_record(model, opened.text(kSymbolicKey, path, "symbolic"), path);
  }
  // Before version 3 there were no affine parameters: the model's identity ones stay.
  const int64_t version = opened.version;
  read_state(*model, opened, options.dtype(), path, [version](const std::string& name) {
    return version < 3 && name.rfind("layers.", 0) != 0;
  });
  for (size_t l = 0; l < model->depth(); ++l)
    model->layer(l)->sync_symbolic_mask();
  return model;
}

MLP load_mlp(OpenedCheckpoint& opened, const std::string& path, torch::Device device) {
  check_kind(opened, ModelKind::kMLP, path);
  auto options = read_config(
      opened, path, [](const nlohmann::json& config) { return mlp_options_from_json(config); });
  check_size_against_file(detail::sat_mul(mlp_parameter_count(options.width()),
                                          static_cast<int64_t>(c10::elementSize(options.dtype()))),
                          "width " + c10::str(c10::IntArrayRef(options.width())), opened, path);
  MLP model(options.device(device));
  read_state(*model, opened, options.dtype(), path);
  return model;
}

} // namespace

void save_checkpoint(const KAN& model, const std::function<void(const void*, size_t)>& write) {
  write_archive(*model, symbolic_record(*model), write);
}

void save_checkpoint(const MLP& model, const std::function<void(const void*, size_t)>& write) {
  write_archive(*model, nullptr, write);
}

void save_checkpoint(const Model& model, const std::function<void(const void*, size_t)>& write) {
  if (const auto* kan = dynamic_cast<const KANImpl*>(&model)) {
    write_archive(model, symbolic_record(*kan), write);
    return;
  }
  TORCH_CHECK(model.kind() == ModelKind::kMLP, "save_checkpoint: a model of kind ",
              to_string(model.kind()), " has no checkpoint format");
  write_archive(model, nullptr, write);
}

void save_checkpoint(const KAN& model, const std::string& path) {
  save_to_file(path, [&](const auto& write) { save_checkpoint(model, write); });
}

void save_checkpoint(const MLP& model, const std::string& path) {
  save_to_file(path, [&](const auto& write) { save_checkpoint(model, write); });
}

void save_checkpoint(const Model& model, const std::string& path) {
  save_to_file(path, [&](const auto& write) { save_checkpoint(model, write); });
}

ModelKind checkpoint_model_kind(const std::string& path) {
  return open_checkpoint(path, torch::kCPU).kind;
}

KAN load_checkpoint(const std::string& path, torch::Device device) {
  auto opened = open_checkpoint(path, device);
  return load_kan(opened, path, device);
}

MLP load_mlp_checkpoint(const std::string& path, torch::Device device) {
  auto opened = open_checkpoint(path, device);
  return load_mlp(opened, path, device);
}

std::shared_ptr<Model> load_any_checkpoint(const std::string& path, torch::Device device) {
  auto opened = open_checkpoint(path, device);
  if (opened.kind == ModelKind::kMLP)
    return load_mlp(opened, path, device).ptr();
  return load_kan(opened, path, device).ptr();
}

} // namespace kan
