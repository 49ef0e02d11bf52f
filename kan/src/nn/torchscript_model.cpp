#include "kan/nn/torchscript_model.h"

#include "detail/checks.h"
#include "kan/io/text.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdlib>
#include <functional>
#include <set>
#include <utility>
#include <vector>

namespace kan {
namespace {

// The line of a TorchScript error that says what failed: the interpreter's message is a
// traceback of the script's code, with the error itself on its last line.
std::string script_error(const std::string& what) {
  const std::string traceback = "The following operation failed in the TorchScript interpreter";
  if (what.rfind(traceback, 0) != 0)
    return io::first_line(what);
  auto end = what.find_last_not_of("\n ");
  const auto start = what.rfind('\n', end);
  return what.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// The interpreter rethrows a failing operation's error as a std::runtime_error: as a c10::Error
// again, an out-of-memory one as c10::OutOfMemoryError (what the suite and the sweep's max-batch
// search catch), prefixed with `what_failed`.
[[noreturn]] void rethrow_script_error(const std::string& what_failed, const std::string& what) {
  const auto line = io::elided(script_error(what), 300);
  if (line.find("out of memory") != std::string::npos)
    TORCH_CHECK_WITH(OutOfMemoryError, false, what_failed, line);
  TORCH_CHECK(false, what_failed, line);
  std::abort(); // not reached: TORCH_CHECK(false, ...) throws
}

// "__torch__.models.KANLinear" -> "models.KANLinear": the class as the user's code names it.
std::string class_name(const torch::jit::Module& script) {
  auto name = script.type()->name() ? script.type()->name()->qualifiedName() : std::string("?");
  const std::string prefix = "__torch__.";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// Every attribute slot of `script` and its submodules, depth first, with its dotted path.
void for_each_slot(const torch::jit::Module& script, const std::string& prefix,
                   const std::function<void(const torch::jit::Module&, size_t slot,
                                            const std::string& path)>& visit) {
  const auto& type = script.type();
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const auto path = prefix + type->getAttributeName(i);
    visit(script, i, path);
    const auto value = script._ivalue()->getSlot(i);
    if (type->getAttribute(i)->is_module() && value.isObject())
      for_each_slot(torch::jit::Module(value.toObject()), path + ".", visit);
  }
}

// Registers `script`'s parameters and buffers in `target` and its submodules as children of
// their own: the same tensors, so that both see every in-place update and set_data. A tensor
// shared by two submodules (tied weights) is registered once, where it is met first, as
// PyTorch's named_parameters() lists it once: an optimiser must step it once.
void mirror_into(torch::nn::Module& target, const torch::jit::Module& script,
                 std::set<const void*>& seen) {
  const auto& type = script.type();
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const auto& name = type->getAttributeName(i);
    const auto value = script._ivalue()->getSlot(i);
    if (type->getAttribute(i)->is_module() && value.isObject()) {
      const torch::jit::Module child(value.toObject());
      auto mirror = std::make_shared<torch::nn::Module>(class_name(child));
      mirror_into(*mirror, child, seen);
      target.register_module(name, mirror);
    } else if (value.isTensor() && !seen.insert(value.toTensor().unsafeGetTensorImpl()).second) {
      continue;
    } else if (value.isTensor() && type->is_parameter(i)) {
      const auto& tensor = value.toTensor();
      target.register_parameter(name, tensor, tensor.requires_grad());
    } else if (value.isTensor() && type->is_buffer(i)) {
      target.register_buffer(name, value.toTensor());
    }
  }
}

} // namespace

TorchScriptModelImpl::TorchScriptModelImpl(const torch::jit::Module& script, int64_t inputs,
                                           std::string source, std::optional<int64_t> outputs)
    : torch::nn::Module("kan::TorchScriptModel"),
      script_(std::make_unique<torch::jit::Module>(script)), inputs_(inputs),
      source_(std::move(source)) {
  TORCH_CHECK(inputs > 0, "TorchScript model '", source_, "': inputs = ", inputs,
              " must be positive (its input width: --inputs, or the data's)");
  TORCH_CHECK(script_->find_method("forward").has_value(), "TorchScript model '", source_,
              "' has no forward method");
  mirror();
  torch::nn::Module::train(script_->is_training()); // the mode it was saved in
  // One dtype for the whole model: what fit converts the data to, and what the precision axis
  // changes.
  std::optional<torch::Dtype> found;
  for (const auto& p : named_parameters()) {
    if (!p.value().is_floating_point())
      continue;
    TORCH_CHECK(!found || *found == p.value().scalar_type(), "TorchScript model '", source_,
                "': its parameters mix ", *found, " and ", p.value().scalar_type(), " (", p.key(),
                "); kanbench runs a model in one dtype");
    found = p.value().scalar_type();
  }
  if (found)
    detail::check_model_dtype(*found);
  outputs_ = outputs ? *outputs : probe_outputs();
}

int64_t TorchScriptModelImpl::probe_outputs() {
  // One sample in evaluation mode, without gradients, and every buffer as it was afterwards: a
  // model saved in training mode with batch norm takes one sample, and opening a file must not
  // move its running statistics.
  torch::NoGradGuard no_grad;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept;
  for (const auto& b : buffers())
    kept.emplace_back(b, b.clone());
  const bool training = script_->is_training();
  script_->eval();
  torch::Tensor y;
  try {
    const auto x =
        torch::zeros({1, inputs_}, torch::TensorOptions().dtype(dtype()).device(device()));
    auto out = script_->forward({x});
    TORCH_CHECK(out.isTensor(), "it returned ", out.tagKind(), ", not a tensor");
    y = out.toTensor();
  } catch (const std::exception& e) {
    script_->train(training);
    const std::string what = dynamic_cast<const c10::Error*>(&e) != nullptr
                                 ? static_cast<const c10::Error&>(e).what_without_backtrace()
                                 : e.what();
    TORCH_CHECK(false, "TorchScript model '", source_, "': forward on one sample of ", inputs_,
                " inputs failed: ", io::elided(script_error(what), 300), " (is ", inputs_,
                " its input width?)");
  }
  script_->train(training);
  for (auto& [buffer, value] : kept)
    buffer.copy_(value);
  TORCH_CHECK(y.dim() == 2 && y.size(0) == 1, "TorchScript model '", source_,
              "': forward on one sample of ", inputs_, " inputs returned a tensor of shape ",
              y.sizes(), "; kanbench needs (N, outputs)");
  return y.size(1);
}

TorchScriptModelImpl::~TorchScriptModelImpl() = default;

void TorchScriptModelImpl::mirror() {
  std::set<const void*> seen;
  mirror_into(*this, *script_, seen);
}

torch::Tensor TorchScriptModelImpl::forward(const torch::Tensor& x) {
  check_input(x, "input");
  c10::IValue out;
  try {
    out = script_->forward({x});
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    // The interpreter's own exception: a c10::Error like every other model's, so that callers
    // (the suite, the audit, the commands' exit codes) see one kind of failure.
    rethrow_script_error("TorchScript model '" + source_ + "': ", e.what());
  }
  TORCH_CHECK(out.isTensor(), "TorchScript model '", source_, "': forward returned ", out.tagKind(),
              ", not a tensor");
  auto y = out.toTensor();
  TORCH_CHECK(y.dim() == 2 && y.size(0) == x.size(0) && y.size(1) == outputs_,
              "TorchScript model '", source_, "': forward of ", x.size(0),
              " samples returned a tensor of shape ", y.sizes(), ", not (", x.size(0), ", ",
              outputs_, ")");
  return y;
}

void TorchScriptModelImpl::check_input(const torch::Tensor& x, const std::string& name) const {
  detail::check_points(x, name.c_str(), inputs(), dtype(), device());
}

torch::Device TorchScriptModelImpl::device() const {
  for (const auto& p : parameters())
    return p.device();
  for (const auto& b : buffers())
    return b.device();
  return torch::kCPU;
}

torch::Dtype TorchScriptModelImpl::dtype() const {
  for (const auto& p : parameters())
    if (p.is_floating_point())
      return p.scalar_type();
  for (const auto& b : buffers())
    if (b.is_floating_point())
      return b.scalar_type();
  return torch::kFloat32;
}

nlohmann::json TorchScriptModelImpl::config() const {
  auto listed = [](const auto& named) {
    auto list = nlohmann::json::array();
    for (const auto& item : named)
      list.push_back({{"name", item.key()}, {"shape", item.value().sizes().vec()}});
    return list;
  };
  auto plain = nlohmann::json::array();
  for (const auto& attribute : plain_tensor_attributes())
    plain.push_back({{"name", attribute.path}, {"shape", attribute.tensor.sizes().vec()}});
  return {{"kind", to_string(kind())},
          {"source", source_},
          {"class", class_name(*script_)},
          {"inputs", inputs_},
          {"outputs", outputs_},
          {"width", {inputs_, outputs_}},
          {"dtype", c10::toString(dtype())},
          {"parameters", listed(named_parameters())},
          {"buffers", listed(named_buffers())},
          {"plain_tensor_attributes", plain}};
}

std::shared_ptr<torch::nn::Module>
TorchScriptModelImpl::clone(const std::optional<torch::Device>& device) const {
  torch::jit::Module copy;
  {
    // Without gradient mode, so that the copied parameters are leaves, not clones' results.
    torch::NoGradGuard no_grad;
    copy = script_->deepcopy();
  }
  const auto from = script_->named_parameters(), to = copy.named_parameters();
  for (auto a = from.begin(), b = to.begin(); a != from.end() && b != to.end(); ++a, ++b)
    (*b).value.set_requires_grad((*a).value.requires_grad());
  // The copy's outputs are known: no sample runs through it again.
  auto model = std::make_shared<TorchScriptModelImpl>(copy, inputs_, source_, outputs_);
  model->train(is_training());
  if (device)
    model->to(*device);
  return model;
}

void TorchScriptModelImpl::train(bool on) {
  torch::nn::Module::train(on);
  script_->train(on);
}

void TorchScriptModelImpl::to(torch::Dtype dtype, bool non_blocking) {
  convert(std::nullopt, dtype, non_blocking);
}

void TorchScriptModelImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  convert(device, dtype, non_blocking);
}

void TorchScriptModelImpl::convert(std::optional<torch::Device> device, torch::Dtype dtype,
                                   bool non_blocking) {
  auto move = [&](torch::Tensor tensor) {
    const auto type = tensor.is_floating_point() ? dtype : tensor.scalar_type();
    tensor.set_data(tensor.to(device.value_or(tensor.device()), type, non_blocking));
  };
  for (const auto& p : named_parameters())
    move(p.value());
  for (const auto& b : named_buffers())
    move(b.value());
}

void TorchScriptModelImpl::pretty_print(std::ostream& stream) const {
  stream << "kan::TorchScriptModel(" << class_name(*script_) << " from " << source_ << ", "
         << inputs_ << " -> " << outputs_ << ")";
}

std::vector<NamedScriptTensor> TorchScriptModelImpl::plain_tensor_attributes() const {
  std::vector<NamedScriptTensor> found;
  for_each_slot(*script_, "",
                [&](const torch::jit::Module& owner, size_t slot, const std::string& path) {
                  const auto& type = owner.type();
                  const auto value = owner._ivalue()->getSlot(slot);
                  if (value.isTensor() && !type->is_parameter(slot) && !type->is_buffer(slot))
                    found.push_back({path, value.toTensor()});
                });
  return found;
}

} // namespace kan
