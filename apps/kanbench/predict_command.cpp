// `kanbench predict`: a model's outputs for the samples of a CSV file or a .npy array, written
// as CSV.
#include "commands.h"

#include "kan/data/data_file.h"
#include "kan/io/atomic_file.h"
#include "kan/serialize/model_file.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

namespace kanbench {
namespace {

struct PredictArgs {
  std::string model;
  std::string input;
  std::string out;
  std::string device = "cpu";
  std::string dtype; // "": the model's own
  bool trust_torchscript = false;
};

// A chunk holds at most about this many values in the model's widest layer: the samples are
// read, evaluated and written a chunk at a time, so memory depends on the model, not the file.
constexpr int64_t kChunkValues = int64_t{1} << 20;

// Rows of full float64 precision: 17 significant digits read back as the same double.
std::string csv_rows(const torch::Tensor& outputs) {
  const auto y = outputs.to(torch::kCPU, torch::kFloat64).contiguous();
  const auto* data = y.data_ptr<double>();
  std::string text;
  char number[32];
  for (int64_t r = 0; r < y.size(0); ++r) {
    for (int64_t c = 0; c < y.size(1); ++c) {
      const int n = std::snprintf(number, sizeof number, "%.17g", data[r * y.size(1) + c]);
      text.append(c ? "," : "").append(number, static_cast<size_t>(n));
    }
    text += '\n';
  }
  return text;
}

int predict(const PredictArgs& a) {
  kan::io::check_output_file(a.out, "--out");
  const auto device = parse_device(a.device);
  const auto kind = kan::model_file_kind(a.model); // no model is the first thing said
  // The samples through kan's data-file parser (docs/formats.md, "Data files"), a chunk at a
  // time: one sample per row, every value a finite number, errors naming line and column.
  std::error_code ec;
  TORCH_CHECK(!std::filesystem::is_directory(a.input, ec), "cannot read --input ", a.input,
              ": it is a folder");
  TORCH_CHECK(std::filesystem::exists(a.input, ec), "cannot read --input ", a.input,
              ": No such file or directory");
  kan::RowReader samples(a.input);
  // Any model; a TorchScript model's input width is the file's (its archive records none).
  const auto model = kan::open_model(
      a.model, kan::ModelFileOptions()
                   .device(device)
                   .trust_torchscript(a.trust_torchscript)
                   .inputs(kind == kan::ModelFileKind::kTorchScript ? samples.columns() : 0));
  if (!a.dtype.empty())
    model->module().to(kan::dtype_from_string(a.dtype));
  samples.expect_columns(model->inputs(),
                         "the model takes " + std::to_string(model->inputs()) + " inputs");
  // A chunk's values in the model's widest layer (a TorchScript model's layers are unknown: its
  // ends).
  int64_t widest = std::max(model->inputs(), model->outputs());
  const auto config = model->config();
  if (config.contains("width"))
    for (const auto& layer : config["width"])
      widest = std::max(widest, layer.get<int64_t>());

  kan::io::AtomicFile out(a.out);
  torch::NoGradGuard no_grad;
  const int64_t rows = std::max<int64_t>(1, kChunkValues / widest);
  for (bool first = true;; first = false) {
    const auto x = samples.next(rows);
    if (first && samples.has_header()) {
      std::string header;
      for (int64_t j = 0; j < model->outputs(); ++j)
        header += (j ? ",y" : "y") + std::to_string(j);
      out.write(header + "\n");
    }
    if (x.size(0) == 0)
      break;
    out.write(csv_rows(model->forward(x.to(device, model->dtype()))));
  }
  // No samples is no prediction: most likely the wrong file or a truncated one, so the previous
  // output stays and the exit code says so.
  TORCH_CHECK(samples.rows_read() > 0, "--input ", a.input, " holds no samples",
              samples.has_header() ? " (only a header)" : "");
  out.commit();
  std::cout << "predicted " << samples.rows_read() << " samples with " << a.model << " ("
            << kan::to_string(model->dtype()) << " on " << device << ") -> " << a.out << "\n";
  return 0;
}

} // namespace

void add_predict_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PredictArgs>();
  auto* cmd = app.add_subcommand(
      "predict", "Evaluate a model (a kanbench checkpoint, a pykan saveckpt prefix or a "
                 "TorchScript archive) on the "
                 "samples of a CSV file (one per line) or a .npy array (one per row), streamed, "
                 "and write its outputs as CSV (17 significant digits). Exit 0 done, 2 could not "
                 "(bad input named by line and column, no such model, no GPU)");
  cmd->add_option("--model", args->model,
                  "A kanbench checkpoint (model.pt, a KAN's or an MLP's), a pykan prefix, or a "
                  "TorchScript archive (with --trust-torchscript; its input width is --input's)")
      ->required();
  add_trust_torchscript_flag(*cmd, args->trust_torchscript);
  cmd->add_option("--input", args->input,
                  "Inputs: a CSV file, one sample per line, numbers separated by commas, "
                  "semicolons or tabs, an optional first line of column names; or a .npy array "
                  "(samples, inputs)")
      ->required();
  cmd->add_option("--out", args->out, "CSV of outputs (a header y0,y1,... when the input has one)")
      ->required();
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Evaluate in this dtype (default: the model's own)")
      ->check(CLI::IsMember({"float32", "float64"}));
  cmd->callback([args, &exit_code] { exit_code = predict(*args); });
}

} // namespace kanbench
