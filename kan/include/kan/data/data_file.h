#pragma once
/// Users' own data files: CSV, NumPy .npy and .npz, and pykan's create_dataset dict saved with
/// torch.save, read into a kan::Dataset by one function (docs/formats.md, "Data files").

#include "kan/data/dataset.h"
#include "kan/io/enum_names.h"

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kan {

namespace detail {
class RowSource;
} // namespace detail

/// The formats load_dataset reads, told apart by their content (not their extension).
enum class DataFormat {
  kCsv,  ///< text: numbers separated by commas, semicolons or tabs; an optional header line
  kNpy,  ///< one NumPy array (np.save)
  kNpz,  ///< NumPy arrays in a zip archive (np.savez, np.savez_compressed)
  kTorch ///< pykan's create_dataset dict saved with torch.save
};
/// Its names, each written once (to_string, the readers).
inline constexpr io::EnumName<DataFormat> kDataFormatNames[] = {{DataFormat::kCsv, "csv"},
                                                                {DataFormat::kNpy, "npy"},
                                                                {DataFormat::kNpz, "npz"},
                                                                {DataFormat::kTorch, "torch"}};
std::string to_string(DataFormat value);

/// Options of load_dataset. Example:
///   kan::LoadDatasetOptions().inputs("0-3").targets("label").classification(true)
struct LoadDatasetOptions {
  /// The input columns of a CSV file or a 2-D .npy array, separated by commas: indices from 0
  /// ("3"), inclusive ranges ("0-3"), header names ("x"), in the order given ("0-3,z"). "": every
  /// column that is not a target.
  TORCH_ARG(std::string, inputs) = "";
  /// The target columns, written as `inputs`; "": the last column.
  TORCH_ARG(std::string, targets) = "";
  /// A file holding the test set, read with the same column selections (any format but a
  /// complete dataset: pykan's dict or an .npz of its four keys). "": the test set is split off.
  TORCH_ARG(std::string, test_data) = "";
  /// Fraction of the rows held out as the test set, in (0, 1), by a seeded shuffle; unset: 0.2.
  /// Only without test_data, and not for a file that holds its own split.
  TORCH_ARG(std::optional<double>, test_fraction) = std::nullopt;
  /// Seed of the split's shuffle: one seed, one split, on every machine.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Targets are class labels: one target column of integers 0 .. classes - 1, returned as int64
  /// labels of shape (N) (for Loss::kCrossEntropy).
  TORCH_ARG(bool, classification) = false;
  /// With classification, the number of classes: every label is checked to lie below it. 0: the
  /// largest label + 1.
  TORCH_ARG(int64_t, classes) = 0;
  /// Of the inputs and of regression targets: torch::kFloat32 or torch::kFloat64.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat32;
  /// Where the tensors are returned.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// A data file's dataset, and what messages and records say about it.
struct LoadedDataset {
  /// Inputs (N, inputs); targets (N, outputs), or int64 labels (N) for classification.
  Dataset data;
  /// The file read (the path load_dataset was given).
  std::string path;
  DataFormat format = DataFormat::kCsv;
  /// The selected columns' names: a CSV header's, else the column indices ("0", "1", ...); for
  /// arrays held apart (x and y, pykan's keys) "x0", "x1", ... and "y0", ...
  std::vector<std::string> input_names, target_names;
  /// The CSV header's line (1-based); 0 when there is none (or the file is no CSV).
  int64_t header_line = 0;
  int64_t train_rows = 0, test_rows = 0;
  /// Classification: the number of classes (given, or the largest label + 1); 0: regression.
  int64_t classes = 0;
  /// One line for people, e.g. "data.csv: CSV, ','-separated, header on line 1; 1000 rows:
  /// 800 train, 200 test (seeded shuffle, seed 0); inputs x, y; target z".
  std::string description;

  int64_t inputs() const { return static_cast<int64_t>(input_names.size()); }
  int64_t targets() const { return static_cast<int64_t>(target_names.size()); }
};

/// Reads a data file (its format from its content: DataFormat) into a dataset:
/// - CSV: the delimiter (comma, semicolon or tab) and a header line (a first row with a cell
///   that is not a number) detected; the columns chosen by options.inputs() and targets().
/// - .npy: one 1-D or 2-D array (float32/64, int8-64, uint8-64, bool; either byte order; C or
///   Fortran order), its columns chosen as a CSV's.
/// - .npz: arrays 'x' and 'y' (N rows each), pykan's four keys, or one array read as an .npy.
/// - torch.save: pykan's create_dataset dict (train_input, train_label, test_input, test_label).
/// The test set: options.test_data()'s rows, the file's own (pykan's keys), or a seeded shuffle's
/// test_fraction of the rows (default 0.2). Bad input is a c10::Error of one line naming the
/// file, the line (or array index), the column and the value; nothing is returned then.
///
/// Example:
///   auto loaded = kan::load_dataset("data.csv", kan::LoadDatasetOptions().targets("y"));
///   kan::check_width(loaded, model->options().width().front(), model->options().width().back());
///   kan::fit(model, loaded.data, kan::FitOptions());
LoadedDataset load_dataset(const std::string& path,
                           const LoadDatasetOptions& options = LoadDatasetOptions());

/// Checks the data against a model of `inputs` inputs and `outputs` outputs: the input columns
/// must number `inputs`; regression targets `outputs`, class labels lie below `outputs`. An error
/// names the file and both counts.
void check_width(const LoadedDataset& data, int64_t inputs, int64_t outputs);

/// The rows of a CSV file or a .npy array, a chunk at a time, checked and reported as
/// load_dataset checks them (same parser): what `kanbench predict` streams, however large the
/// file. Every column is read; a Fortran-order array is read whole.
class RowReader {
public:
  /// Opens `path`; a file of another format is an error naming it.
  explicit RowReader(const std::string& path);
  ~RowReader();
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  DataFormat format() const;
  /// Values per row.
  int64_t columns() const;
  /// Whether a CSV file's first line was taken as a header.
  bool has_header() const;
  /// Error unless the rows have `count` values, naming the file, its count and `why` (e.g. "the
  /// model takes 2 inputs").
  void expect_columns(int64_t count, const std::string& why) const;
  /// Up to `max_rows` further rows as a (rows, columns()) float64 tensor on the CPU; no rows at
  /// the end of the file.
  torch::Tensor next(int64_t max_rows);
  /// Rows read so far.
  int64_t rows_read() const { return rows_read_; }

private:
  std::unique_ptr<detail::RowSource> source_;
  int64_t rows_read_ = 0;
};

} // namespace kan
