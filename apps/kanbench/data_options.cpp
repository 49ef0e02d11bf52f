#include "data_options.h"

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace kanbench {

kan::LoadDatasetOptions DataArgs::load_options() const {
  auto options =
      kan::LoadDatasetOptions().inputs(inputs).targets(targets).test_data(test_data).classification(
          loss_kind() == kan::Loss::kCrossEntropy);
  if (test_fraction)
    options.test_fraction(*test_fraction);
  return options;
}

void DataArgs::check_needs_data() const {
  for (const auto& [name, given] : {std::pair<const char*, bool>{"--targets", !targets.empty()},
                                    {"--test-data", !test_data.empty()},
                                    {"--test-fraction", test_fraction.has_value()}})
    TORCH_CHECK(!given || !data.empty(), name, " needs --data (the file it reads)");
}

int64_t DataArgs::width_without_data() const {
  if (!data.empty() || inputs.empty())
    return 0;
  size_t used = 0;
  int64_t width = 0;
  try {
    width = std::stoll(inputs, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == inputs.size() && width >= 1,
              "--inputs needs --data (the file it reads), or is the input width N of a "
              "TorchScript --model without it; got '",
              inputs, "'");
  return width;
}

CLI::Option* add_data_options(CLI::App* command, DataArgs& args, const std::string& data_help,
                              const std::string& loss_help) {
  auto* data = command->add_option("--data", args.data, data_help);
  command->add_option("--inputs", args.inputs,
                      "Input columns of --data (CSV, .npy): indices from 0, ranges, header names, "
                      "e.g. 0-3,5 or x,y (default: all but the targets); without --data, the "
                      "input width N of a TorchScript --model");
  command->add_option("--targets", args.targets,
                      "Target columns of --data, written as --inputs (default: the last column)");
  command->add_option("--test-data", args.test_data,
                      "The test set, a file read as --data is (default: split off --data)");
  command->add_option_function<double>(
      "--test-fraction", [&args](const double& fraction) { args.test_fraction = fraction; },
      "Fraction of --data's rows held out as the test set by a seeded shuffle, in (0, 1) "
      "(default 0.2, without --test-data)");
  command->add_option("--loss", args.loss, loss_help)
      ->check(CLI::IsMember({"mse", "cross-entropy", "cross_entropy"}))
      ->capture_default_str();
  return data;
}

} // namespace kanbench
