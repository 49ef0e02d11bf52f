#include "kan/serialize/torch_file.h"

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"

#include "serialize/detail/torch_archive.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <set>

namespace kan {
namespace {

using Kind = detail::PickleValue::Kind;

// Writes `value` with LibTorch's pickler as torch.save would: untagged containers (tagged ones
// need torch.jit._pickle, which torch.load's weights_only mode refuses).
void write_torch_file(const std::string& path, const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
      nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> bytes;
  {
    caffe2::serialize::PyTorchStreamWriter archive([&](const void* data, size_t size) {
      const auto* begin = static_cast<const char*>(data);
      bytes.insert(bytes.end(), begin, begin + size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       archive);
    archive.writeEndOfFile();
  }
  try {
    io::AtomicFile file(path);
    file.write(bytes.data(), bytes.size());
    file.commit();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write '", path, "': ", io::first_line(e.what()));
  }
}

torch::Tensor cpu_copy(const torch::Tensor& tensor) {
  return tensor.detach().to(torch::kCPU).contiguous().clone();
}

} // namespace

NamedTensors read_named_tensors(const std::string& path) {
  const detail::TorchArchive archive(path);
  const auto& value = archive.root();
  TORCH_CHECK(value.kind == Kind::kDict, "'", path, "' holds ", detail::kind_name(value.kind),
              ", not a dict of named tensors");
  NamedTensors tensors;
  std::set<std::string> names;
  for (const auto& [key, item] : value.entries) {
    TORCH_CHECK(key->kind == Kind::kString, "'", path, "': a dict key that is ",
                detail::kind_name(key->kind), ", not a name");
    TORCH_CHECK(item->kind == Kind::kTensor, "'", path, "': '", io::elided(key->text), "' is ",
                detail::kind_name(item->kind), ", not a tensor");
    // Python keeps the last of two equal keys, a lookup here the first: refused.
    TORCH_CHECK(names.insert(key->text).second, "'", path, "': the key '", io::elided(key->text),
                "' appears twice");
    tensors.emplace_back(key->text, item->tensor);
  }
  return tensors;
}

torch::Tensor read_tensor(const std::string& path) {
  const detail::TorchArchive archive(path);
  const auto& value = archive.root();
  if (value.kind == Kind::kNone)
    return {};
  TORCH_CHECK(value.kind == Kind::kTensor, "'", path, "' holds ", detail::kind_name(value.kind),
              ", not a tensor");
  return value.tensor;
}

void write_named_tensors(const std::string& path, const NamedTensors& tensors) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(tensor.defined(), "cannot write '", path, "': tensor '", name, "' is undefined");
    dict.insert(name, cpu_copy(tensor));
  }
  write_torch_file(path, dict);
}

void write_tensor(const std::string& path, const torch::Tensor& tensor) {
  write_torch_file(path, tensor.defined() ? c10::IValue(cpu_copy(tensor)) : c10::IValue());
}

} // namespace kan
