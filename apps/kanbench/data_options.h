#pragma once
// The data-file options that `fit` and `run --model` share: one spelling, one help text and one
// set of checks for a user's own data (kan::load_dataset, docs/formats.md "Data files").

#include "kan/data/data_file.h"
#include "kan/train/fit.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace kanbench {

struct DataArgs {
  std::string data; ///< "": no file (a reference function, or the suite's workloads)
  std::string inputs, targets, test_data;
  std::optional<double> test_fraction;
  std::string loss = "mse"; ///< "mse", "cross-entropy" (or kan's "cross_entropy")

  kan::Loss loss_kind() const { return loss == "mse" ? kan::Loss::kMSE : kan::Loss::kCrossEntropy; }
  /// The column selections and the split; the caller sets the seed, dtype and device.
  kan::LoadDatasetOptions load_options() const;
  /// Refuses a selection or split option given without --data (--inputs there is a width).
  void check_needs_data() const;
  /// Without --data, --inputs N is the input width of a seeded regression on a TorchScript model
  /// (its file does not record one): N, or 0 where --inputs is not given. An error unless N is an
  /// integer >= 1. With --data: 0 (the width is the data's).
  int64_t width_without_data() const;
};

/// --data (with `data_help`), --inputs, --targets, --test-data, --test-fraction and --loss (with
/// `loss_help`), bound onto `args`. Returns the --data option (for excludes/needs).
CLI::Option* add_data_options(CLI::App* command, DataArgs& args, const std::string& data_help,
                              const std::string& loss_help);

} // namespace kanbench
