#pragma once
// A loader builds a model only to overwrite every value from a file, and pykan's initial
// coefficients are a least-squares fit whose cost grows as G^3: without this, a file's grid could
// buy hours of work before its tensors are compared with the model. While a SkipInitialValues
// lives on a thread, new KAN layers get their shapes and grids but zero coefficients.

namespace kan::detail {

/// Whether KAN layers built on this thread now skip their initial fit.
inline bool& initial_values_skipped() {
  thread_local bool skipped = false;
  return skipped;
}

/// Skips the initial fit of KAN layers built on this thread during its lifetime.
class SkipInitialValues {
public:
  SkipInitialValues() : previous_(initial_values_skipped()) { initial_values_skipped() = true; }
  ~SkipInitialValues() { initial_values_skipped() = previous_; }
  SkipInitialValues(const SkipInitialValues&) = delete;
  SkipInitialValues& operator=(const SkipInitialValues&) = delete;

private:
  bool previous_;
};

} // namespace kan::detail
