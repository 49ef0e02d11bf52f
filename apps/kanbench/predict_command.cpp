// `kanbench predict`: a model's outputs for the samples of a CSV file, written as CSV.
#include "commands.h"

#include "kan/checkpoint.h"
#include "kan/io/atomic_file.h"

#include <c10/util/Exception.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string_view>
#include <vector>

namespace kanbench {
namespace {

struct PredictArgs {
  std::string model;
  std::string input;
  std::string out;
  std::string device = "cpu";
  std::string dtype; // "": the model's own
};

// A chunk holds at most about this many values in the model's widest layer: the samples are
// read, evaluated and written a chunk at a time, so memory depends on the model, not the file.
constexpr int64_t kChunkValues = int64_t{1} << 20;

std::string_view trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos)
    return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The whole field as a double (an optional leading '+' too): std::errc() when it is one,
// result_out_of_range past a double's range (1e999), invalid_argument otherwise.
std::errc parse_number(std::string_view field, double& value) {
  if (field.size() > 1 && field[0] == '+' && field[1] != '-' && field[1] != '+')
    field.remove_prefix(1);
  const auto* end = field.data() + field.size();
  const auto [stop, error] = std::from_chars(field.data(), end, value);
  return stop != end || field.empty() ? std::errc::invalid_argument : error;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  for (size_t start = 0;;) {
    const auto comma = line.find(',', start);
    fields.push_back(trimmed(line.substr(start, comma - start)));
    if (comma == std::string_view::npos)
      return fields;
    start = comma + 1;
  }
}

// The samples of a CSV file, a chunk at a time: one sample per line, `columns` numbers separated
// by commas (blanks around them, CRLF line ends and a byte order mark allowed; no quoting). A first
// line of which no field is a number is a header. NaN and Inf are refused: a model's grid has no
// place for them. Blank lines at the end are ignored; elsewhere they are an error (they would shift
// the outputs against the input lines). Every error names the file, the line, the column and the
// value.
class CsvSamples {
public:
  CsvSamples(std::string path, int64_t columns) : path_(std::move(path)), columns_(columns) {
    std::error_code ec;
    TORCH_CHECK(!std::filesystem::is_directory(path_, ec), "cannot read --input ", path_,
                ": it is a folder");
    in_.open(path_);
    TORCH_CHECK(in_.is_open(), "cannot read --input ", path_, ": ", std::strerror(errno));
  }

  // Up to max_rows further samples, (rows, columns) float64; no rows at the end of the file.
  torch::Tensor next(int64_t max_rows) {
    std::vector<double> values;
    std::string line;
    int64_t rows = 0;
    while (rows < max_rows && std::getline(in_, line)) {
      ++line_;
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (line_ == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) // a UTF-8 byte order mark
        line.erase(0, 3);
      if (trimmed(line).empty()) {
        blank_line_ = blank_line_ ? blank_line_ : line_;
        continue;
      }
      TORCH_CHECK(blank_line_ == 0, path_, " line ", blank_line_,
                  ": blank line between samples (one sample per line; blank lines may only end "
                  "the file)");
      const auto fields = split_fields(line);
      if (line_ == 1 && is_header(fields))
        continue;
      read_row(fields, values);
      ++rows;
    }
    TORCH_CHECK(!in_.bad(), "cannot read --input ", path_, " after line ", line_, ": ",
                std::strerror(errno));
    samples_ += rows;
    return torch::from_blob(values.data(), {rows, columns_}, torch::kFloat64).clone();
  }

  bool has_header() const { return header_; }
  int64_t samples() const { return samples_; }

private:
  bool is_header(const std::vector<std::string_view>& fields) {
    double ignored = 0;
    if (std::any_of(fields.begin(), fields.end(),
                    [&](std::string_view f) { return parse_number(f, ignored) == std::errc(); }))
      return false;
    TORCH_CHECK(static_cast<int64_t>(fields.size()) == columns_, path_,
                " line 1: the header names ", fields.size(), " columns, but the model takes ",
                columns_, " inputs");
    header_ = true;
    return true;
  }

  void read_row(const std::vector<std::string_view>& fields, std::vector<double>& values) const {
    const auto count = static_cast<int64_t>(fields.size());
    TORCH_CHECK(count <= columns_, path_, " line ", line_, ", column ", columns_ + 1, ": '",
                shown(fields[columns_]), "' is one value too many: the model takes ", columns_,
                " inputs per sample");
    TORCH_CHECK(count == columns_, path_, " line ", line_, ": ", count,
                count == 1 ? " value" : " values", ", but the model takes ", columns_,
                " inputs per sample");
    for (int64_t c = 0; c < count; ++c) {
      const auto field = fields[c];
      double value = 0;
      TORCH_CHECK(!field.empty(), path_, " line ", line_, ", column ", c + 1, ": empty value");
      const auto error = parse_number(field, value);
      TORCH_CHECK(error != std::errc::result_out_of_range, path_, " line ", line_, ", column ",
                  c + 1, ": '", shown(field), "' is out of the range of a double");
      TORCH_CHECK(error == std::errc(), path_, " line ", line_, ", column ", c + 1, ": '",
                  shown(field), "' is not a number");
      TORCH_CHECK(std::isfinite(value), path_, " line ", line_, ", column ", c + 1, ": '",
                  shown(field), "' is not a finite number (NaN and Inf are refused)");
      values.push_back(value);
    }
  }

  static std::string shown(std::string_view field) {
    return field.size() <= 40 ? std::string(field) : std::string(field.substr(0, 37)) + "...";
  }

  std::string path_;
  int64_t columns_;
  std::ifstream in_;
  int64_t line_ = 0;       // the last line read, 1-based
  int64_t blank_line_ = 0; // the first of the blank lines since the last sample; 0: none
  int64_t samples_ = 0;
  bool header_ = false;
};

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
  auto model = kan::load_model(a.model, device);
  if (!a.dtype.empty())
    model->to(kan::dtype_from_string(a.dtype));
  const auto& width = model->options().width();
  CsvSamples samples(a.input, width.front());

  kan::io::AtomicFile out(a.out);
  torch::NoGradGuard no_grad;
  const int64_t rows =
      std::max<int64_t>(1, kChunkValues / *std::max_element(width.begin(), width.end()));
  for (bool first = true;; first = false) {
    const auto x = samples.next(rows);
    if (first && samples.has_header()) {
      std::string header;
      for (int64_t j = 0; j < width.back(); ++j)
        header += (j ? ",y" : "y") + std::to_string(j);
      out.write(header + "\n");
    }
    if (x.size(0) == 0)
      break;
    out.write(csv_rows(model->forward(x.to(device, model->dtype()))));
  }
  // No samples is no prediction: most likely the wrong file or a truncated one, so the previous
  // output stays and the exit code says so.
  TORCH_CHECK(samples.samples() > 0, "--input ", a.input, " holds no samples",
              samples.has_header() ? " (only a header)" : "");
  out.commit();
  std::cout << "predicted " << samples.samples() << " samples with " << a.model << " ("
            << kan::to_string(model->dtype()) << " on " << device << ") -> " << a.out << "\n";
  return 0;
}

} // namespace

void add_predict_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PredictArgs>();
  auto* cmd = app.add_subcommand(
      "predict", "Evaluate a model (a kanbench checkpoint or a pykan saveckpt prefix) on the "
                 "samples of a CSV file, one per line, and write its outputs as CSV (17 "
                 "significant digits). Exit 0 done, 2 could not (bad input named by line and "
                 "column, no such model, no GPU)");
  cmd->add_option("--model", args->model, "A kanbench checkpoint (model.pt) or a pykan prefix")
      ->required();
  cmd->add_option("--input", args->input,
                  "CSV of inputs: one sample per line, numbers separated by commas; an optional "
                  "first line of column names")
      ->required();
  cmd->add_option("--out", args->out, "CSV of outputs (a header y0,y1,... when the input has one)")
      ->required();
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Evaluate in this dtype (default: the model's own)")
      ->check(CLI::IsMember({"float32", "float64"}));
  cmd->callback([args, &exit_code] { exit_code = predict(*args); });
}

} // namespace kanbench
