#include "kan/serialize/torchscript.h"

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"

#include "detail/byte_source.h"
#include "detail/zip_reader.h"
#include "serialize/detail/checkpoint_format.h"
#include "serialize/detail/torch_archive.h"

#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/cuda.h>

#include <cstdio>
#include <filesystem>

namespace kan {
namespace {

// The archive as kanbench's bounded reader sees it: an error names the file and the problem.
bool holds_torchscript_module(const detail::TorchArchive& archive) {
  const auto& root = archive.root();
  return archive.has_code() && root.kind == detail::PickleValue::Kind::kObject &&
         root.find(detail::kCheckpointFormatKey) == nullptr;
}

} // namespace

bool is_torchscript_archive(const std::string& path) {
  // Told from the zip directory and the pickle's bytes alone, without reading the tensors: every
  // model file is classified before it is loaded. A file whose directory cannot be read is not
  // called TorchScript: the checkpoint reader then names what is wrong with it.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || !detail::ZipReader::looks_like_zip(path))
    return false;
  try {
    const detail::ZipReader zip(path);
    const detail::ZipReader::Entry* pickle = nullptr;
    bool code = false;
    for (const auto& entry : zip.entries()) {
      const auto slash = entry.name.find('/');
      const auto record = slash == std::string::npos ? entry.name : entry.name.substr(slash + 1);
      code = code || record.rfind("code/", 0) == 0;
      if (record == "data.pkl")
        pickle = &entry;
    }
    constexpr uint64_t kMaxPickle = uint64_t{64} << 20; // TorchArchiveLimits' default
    if (!code || pickle == nullptr || pickle->size > kMaxPickle)
      return false;
    auto source = zip.open(*pickle);
    std::string bytes(static_cast<size_t>(pickle->size), '\0');
    detail::read_exactly(*source, bytes.data(), bytes.size(), "data.pkl");
    // A kanbench checkpoint's pickle holds its format record's key.
    return bytes.find(detail::kCheckpointFormatKey) == std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

TorchScriptModel load_torchscript(const std::string& path, const TorchScriptLoadOptions& options) {
  const auto& device = options.device();
  TORCH_CHECK(!device.is_cuda() || torch::cuda::is_available(), "cannot load '", path, "' onto ",
              device, ": no usable CUDA device here (kanbench env says why)");
  {
    // kanbench's own reader first: LibTorch's allocates what records claim and unpickles with
    // no limits.
    const detail::TorchArchive archive(path);
    TORCH_CHECK(holds_torchscript_module(archive), "'", path,
                "' is not a TorchScript archive (torch.jit.save writes one): ",
                archive.root().find(detail::kCheckpointFormatKey) != nullptr
                    ? "it is a kanbench checkpoint"
                    : "it holds no TorchScript module");
  }
  TORCH_CHECK(options.trusted(), "'", path,
              "' is a TorchScript archive: a program that LibTorch compiles and runs, and its "
              "loader is not hardened against crafted files; load it only if you trust where it "
              "came from, with --trust-torchscript (TorchScriptLoadOptions::trusted in C++)");
  TORCH_CHECK(options.inputs() > 0, "TorchScript model '", path,
              "': its input width is not recorded in the file; give --inputs N or --data "
              "(TorchScriptLoadOptions::inputs in C++)");
  torch::jit::Module script;
  try {
    script = torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "cannot load TorchScript model '", path,
                "': ", io::elided(io::first_line(e.what_without_backtrace()), 300));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "cannot load TorchScript model '", path,
                "': ", io::elided(io::first_line(e.what()), 300));
  }
  TorchScriptModel model(script, options.inputs(), path);
  if (device != torch::Device(torch::kCPU))
    model->to(device);
  return model;
}

void save_torchscript(const TorchScriptModelImpl& model,
                      const std::function<void(const void*, size_t)>& write) {
  try {
    torch::jit::ExportModule(model.script(), [&](const void* data, size_t size) {
      write(data, size);
      return size;
    });
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "cannot write TorchScript model of '", model.source(),
                "': ", io::first_line(e.what_without_backtrace()));
  }
}

void save_torchscript(const TorchScriptModelImpl& model, const std::string& path) {
  io::AtomicFile file(path);
  save_torchscript(model, [&](const void* data, size_t size) { file.write(data, size); });
  file.commit();
}

} // namespace kan
