#include "kan/nn/model.h"

#include "detail/parse_name.h"

#include <c10/util/Exception.h>

namespace kan {

std::string to_string(ModelKind value) {
  return io::name_of(value, kModelKindNames);
}

ModelKind model_kind_from_string(const std::string& name) {
  return detail::parse_name(name, kModelKindNames, "model kind");
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

std::optional<ObjectiveValues> Model::mse_objective(const torch::Tensor& /*x*/,
                                                    const torch::Tensor& /*labels*/,
                                                    double /*lamb*/,
                                                    const RegularizationOptions& /*weights*/) {
  return std::nullopt;
}

void Model::accumulate_grad(const torch::Tensor& parameter, const torch::Tensor& grad) {
  if (!parameter.requires_grad() || !grad.defined())
    return;
  auto& sum = parameter.mutable_grad();
  sum = sum.defined() ? sum + grad : grad;
}

void Model::update_grid_from_samples(const torch::Tensor& /*x*/, int64_t /*memory_budget*/) {
  TORCH_CHECK(false, "update_grid_from_samples: a ", to_string(kind()),
              " has no grid to update (has_grid() is false)");
}

} // namespace kan
