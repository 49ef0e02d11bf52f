#include "kan/nn/model.h"

#include <c10/util/Exception.h>

namespace kan {

std::string to_string(ModelKind kind) {
  switch (kind) {
  case ModelKind::kKAN:
    return "kan";
  case ModelKind::kMLP:
    return "mlp";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ModelKind ", static_cast<int>(kind));
}

ModelKind model_kind_from_string(const std::string& name) {
  for (const auto kind : {ModelKind::kKAN, ModelKind::kMLP})
    if (name == to_string(kind))
      return kind;
  TORCH_CHECK(false, "model kind must be kan or mlp, got '", name, "'");
}

int64_t Model::parameter_count() const {
  int64_t count = 0;
  for (const auto& p : module().parameters())
    if (p.requires_grad())
      count += p.numel();
  return count;
}

torch::Tensor Model::regularization(const RegularizationOptions& /*weights*/) const {
  return torch::zeros({}, torch::TensorOptions().device(device()).dtype(dtype()));
}

void Model::update_grid_from_samples(const torch::Tensor& /*x*/, int64_t /*memory_budget*/) {
  TORCH_CHECK(false, "update_grid_from_samples: a ", to_string(kind()),
              " has no grid to update (has_grid() is false)");
}

} // namespace kan
