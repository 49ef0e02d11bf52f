#include "kan/diagnostics/device_audit.h"

#include "kan/io/json_fields.h"

#include "kan/io/json_reader.h"
#include "kan/nn/options.h"
#include "kan/nn/torchscript_model.h"
#include "kan/results/results_io.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <sstream>
#include <unordered_map>

namespace kan::diagnostics {
namespace {

// "cuda" (no index) accepts every CUDA device; "cuda:1" only that one.
bool on_expected_device(const torch::Tensor& t, torch::Device expected) {
  if (t.device().type() != expected.type())
    return false;
  return !expected.has_index() || t.device().index() == expected.index();
}

std::string plain_attribute_fix() {
  return "register it in the module's __init__ with self.register_buffer(name, tensor) (or make it "
         "an nn.Parameter), so that .to() moves it with the model";
}

std::string wrong_device_fix(TensorKind kind, const std::string& expected) {
  switch (kind) {
  case TensorKind::kParameter:
  case TensorKind::kBuffer:
    return "create the model on " + expected + " (KANOptions().device(" + expected +
           ")) or call model->to(" + expected +
           "); a tensor not registered with register_parameter/register_buffer is not moved "
           "by .to()";
  case TensorKind::kGradient:
    return "a gradient stays where it was computed: call model->zero_grad() after moving the "
           "model, then run backward again";
  case TensorKind::kOptimizerState:
    return "create the optimizer after moving the model to " + expected +
           ", or move its state with it";
  case TensorKind::kData:
    return "move the data with tensor.to(" + expected +
           ") (create_dataset: DatasetOptions().device(" + expected + "))";
  case TensorKind::kPlainAttribute:
    return plain_attribute_fix();
  }
  return "";
}

// "MulBackward0" for the output of a multiplication: the autograd node without its namespace.
std::string operation_name(const torch::Tensor& t) {
  if (!t.grad_fn())
    return "an operation";
  const auto name = t.grad_fn()->name();
  const auto colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

// The name of every parameter of `module`, by its TensorImpl (the optimisers' state key).
std::unordered_map<const void*, std::string> parameter_names(const torch::nn::Module& module,
                                                             const std::string& prefix) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& p : module.named_parameters()) {
    names[p.value().unsafeGetTensorImpl()] = prefix + "." + p.key();
  }
  return names;
}

} // namespace

std::string to_string(TensorKind value) {
  return io::name_of(value, kTensorKindNames);
}

std::string to_string(Problem value) {
  return io::name_of(value, kProblemNames);
}

DeviceAudit::DeviceAudit(torch::Device expected_device, std::optional<torch::Dtype> expected_dtype)
    : expected_device_(expected_device), expected_dtype_(expected_dtype) {
  report_.expected_device = expected_device.str();
}

void DeviceAudit::check(const std::string& name, TensorKind kind, const torch::Tensor& t) {
  if (!t.defined())
    return;
  auto& summary = report_.summary;
  ++summary.tensors_checked;
  const bool strided = t.layout() == torch::kStrided;
  summary.bytes_per_device[t.device().str()] += strided ? static_cast<int64_t>(t.nbytes()) : 0;
  if (!expected_dtype_ && kind == TensorKind::kParameter && t.is_floating_point()) {
    expected_dtype_ = t.scalar_type();
  }

  const std::string expected = expected_device_.str();
  auto add = [&](Problem problem, const std::string& message, const std::string& fix) {
    results::AuditFinding f;
    f.tensor = name;
    f.kind = to_string(kind);
    f.problem = to_string(problem);
    f.device = t.device().str();
    f.expected_device = expected;
    f.dtype = kan::to_string(t.scalar_type());
    f.shape = t.sizes().vec();
    f.message = message;
    f.fix = fix;
    report_.findings.push_back(std::move(f));
  };
  const std::string what = to_string(kind) + " " + name;
  if (!on_expected_device(t, expected_device_)) {
    add(Problem::kWrongDevice, what + " is on " + t.device().str() + ", expected " + expected,
        wrong_device_fix(kind, expected));
  }
  if (expected_dtype_ && t.is_floating_point() && t.scalar_type() != *expected_dtype_) {
    const std::string want = kan::to_string(*expected_dtype_);
    add(Problem::kWrongDtype,
        what + " is " + kan::to_string(t.scalar_type()) + ", the model is " + want,
        "convert it to " + want +
            " (tensor.to(dtype), Dataset::to(device, dtype)) or build everything with one dtype");
  }
  if (!strided) {
    add(Problem::kNonDense, what + " has layout " + c10::str(t.layout()) + ", expected strided",
        "convert it with .to_dense()");
  } else if (kind != TensorKind::kGradient && kind != TensorKind::kOptimizerState &&
             !t.is_contiguous()) {
    add(Problem::kNonContiguous,
        what + " is not contiguous (strides " + c10::str(t.strides()) + ")",
        "make it dense with .contiguous()");
  }
  if (kind == TensorKind::kPlainAttribute) {
    add(Problem::kNotModuleState,
        what +
            " is a tensor attribute that is neither a parameter nor a buffer: .to() leaves it "
            "on " +
            t.device().str() + " when the model moves",
        plain_attribute_fix());
  }
  if (kind == TensorKind::kParameter && !t.is_leaf()) {
    add(Problem::kNonLeafParameter,
        what + " is not a leaf tensor (it is the output of " + operation_name(t) +
            "), so the optimiser no longer updates it",
        "replace parameter values with copy_ under torch::NoGradGuard or set_data, never by "
        "assigning the result of an operation");
  }
}

DeviceAudit& DeviceAudit::module(const torch::nn::Module& module, const std::string& prefix) {
  for (const auto& p : module.named_parameters()) {
    const auto name = prefix + "." + p.key();
    check(name, TensorKind::kParameter, p.value());
    check(name + ".grad", TensorKind::kGradient, p.value().grad());
  }
  for (const auto& b : module.named_buffers()) {
    check(prefix + "." + b.key(), TensorKind::kBuffer, b.value());
  }
  // A TorchScript module's tensor attributes that are not its state: wrong wherever they are.
  if (const auto* script = dynamic_cast<const TorchScriptModelImpl*>(&module))
    for (const auto& attribute : script->plain_tensor_attributes())
      check(prefix + "." + attribute.path, TensorKind::kPlainAttribute, attribute.tensor);
  return *this;
}

DeviceAudit& DeviceAudit::optimizer(torch::optim::Optimizer& optimizer,
                                    const torch::nn::Module& module, const std::string& prefix) {
  const auto names = parameter_names(module, "model");
  for (const auto& [key, state] : optimizer.state()) {
    const auto found = names.find(key);
    const std::string owner =
        prefix + ".state[" + (found != names.end() ? found->second : std::string("?")) + "]";
    auto tensor = [&](const char* field, const torch::Tensor& t) {
      check(owner + "." + field, TensorKind::kOptimizerState, t);
    };
    auto tensors = [&](const char* field, const auto& list) {
      int64_t i = 0;
      for (const auto& t : list)
        check(owner + "." + field + "[" + std::to_string(i++) + "]", TensorKind::kOptimizerState,
              t);
    };
    if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      tensor("exp_avg", s->exp_avg());
      tensor("exp_avg_sq", s->exp_avg_sq());
      tensor("max_exp_avg_sq", s->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      tensor("exp_avg", s->exp_avg());
      tensor("exp_avg_sq", s->exp_avg_sq());
      tensor("max_exp_avg_sq", s->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<torch::optim::LBFGSParamState*>(state.get())) {
      tensor("d", s->d());
      tensor("H_diag", s->H_diag());
      tensor("prev_flat_grad", s->prev_flat_grad());
      tensors("old_dirs", s->old_dirs());
      tensors("old_stps", s->old_stps());
      tensors("ro", s->ro());
      if (s->al())
        tensors("al", *s->al());
    } else if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      tensor("momentum_buffer", s->momentum_buffer());
    } else if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(state.get())) {
      tensor("square_avg", s->square_avg());
      tensor("momentum_buffer", s->momentum_buffer());
      tensor("grad_avg", s->grad_avg());
    } else if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(state.get())) {
      tensor("sum", s->sum());
    }
  }
  return *this;
}

DeviceAudit& DeviceAudit::data(const std::string& name, const torch::Tensor& tensor) {
  check(name, TensorKind::kData, tensor);
  return *this;
}

DeviceAudit& DeviceAudit::dataset(const Dataset& d, const std::string& prefix) {
  return data(prefix + ".train_input", d.train_input)
      .data(prefix + ".train_label", d.train_label)
      .data(prefix + ".test_input", d.test_input)
      .data(prefix + ".test_label", d.test_label);
}

AuditReport DeviceAudit::report() const {
  auto report = report_;
  report.expected_dtype = expected_dtype_ ? kan::to_string(*expected_dtype_) : "";
  report.summary.findings = static_cast<int64_t>(report.findings.size());
  return report;
}

AuditReport audit(const torch::nn::Module& module, torch::Device expected_device) {
  return DeviceAudit(expected_device).module(module).report();
}

bool is_device_mismatch(const c10::Error& error) {
  const std::string message = error.what_without_backtrace();
  return message.find("Expected all tensors to be on the same device") != std::string::npos ||
         (message.find("Tensor on device ") != std::string::npos &&
          message.find("is not on the expected device") != std::string::npos);
}

void diagnose_device_errors(const std::function<void()>& fn,
                            const std::function<AuditReport()>& make_report) {
  try {
    fn();
  } catch (const c10::Error& error) {
    if (!is_device_mismatch(error))
      throw;
    const auto report = make_report();
    const std::string original = error.what_without_backtrace();
    const std::string libtorch = original.substr(0, original.find('\n'));
    if (report.clean()) {
      TORCH_CHECK(false, "device mismatch, but the audit against ", report.expected_device,
                  " found every parameter, buffer, gradient, optimiser state and data tensor in "
                  "place: a tensor made inside the computation is on the wrong device (LibTorch: ",
                  libtorch, ")");
    }
    std::string names;
    for (const auto& f : report.findings) {
      if (f.problem != to_string(Problem::kWrongDevice))
        continue;
      names += "\n  " + f.message + ". Fix: " + f.fix;
    }
    TORCH_CHECK(false, "device mismatch: ", report.summary.findings,
                " misplaced or faulty tensor(s)", names, "\n(LibTorch: ", libtorch, ")");
  }
}

// Each struct's keys, for both directions (kan/io/json_fields.h); static, found by
// argument-dependent lookup beside their structs.

template <typename Fields> static void fields(Fields& f, AuditSummary& s) {
  f.required("tensors_checked", s.tensors_checked, io::Bound::kNonNegative);
  f.required("bytes_per_device", s.bytes_per_device, io::Bound::kNonNegative);
  f.required("findings", s.findings, io::Bound::kNonNegative);
}

template <typename Fields> static void fields(Fields& f, AuditReport& r) {
  f.required("expected_device", r.expected_device);
  f.required("expected_dtype", r.expected_dtype);
  f.required("findings", r.findings);
  f.required("summary", r.summary);
  if constexpr (Fields::reading()) {
    // A static audit's finding names one of its own tensor kinds and problems.
    for (size_t i = 0; i < r.findings.size(); ++i) {
      const auto at = io::index_path(f.path_of("findings"), i);
      io::enum_from_string(r.findings[i].kind, kTensorKindNames, at + ".kind");
      io::enum_from_string(r.findings[i].problem, kProblemNames, at + ".problem");
    }
    if (r.summary.findings != static_cast<int64_t>(r.findings.size()))
      throw io::JsonError("", f.path_of("summary") + ".findings",
                          std::to_string(r.summary.findings) + " but the report lists " +
                              std::to_string(r.findings.size()));
  }
}

AuditReport audit_report_from_json(const nlohmann::json& json, const std::string& path) {
  return io::read_object<AuditReport>(json, path, /*lenient=*/false);
}

nlohmann::json AuditReport::to_json() const {
  return io::write_object(*this);
}

std::string AuditReport::to_text() const {
  std::ostringstream out;
  for (const auto& f : findings) {
    out << "[" << f.problem << "] " << f.message << ". Fix: " << f.fix << "\n";
  }
  out << "audit against " << expected_device << ": " << summary.tensors_checked
      << " tensors checked (";
  const char* separator = "";
  for (const auto& [device, bytes] : summary.bytes_per_device) {
    out << separator << device << " " << bytes << " bytes";
    separator = ", ";
  }
  out << "), " << findings.size() << (findings.size() == 1 ? " finding" : " findings") << "\n";
  return out.str();
}

} // namespace kan::diagnostics
