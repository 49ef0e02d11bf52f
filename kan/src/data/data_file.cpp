#include "kan/data/data_file.h"

#include "data/detail/csv_reader.h"
#include "data/detail/npy_reader.h"
#include "detail/zip_reader.h"
#include "kan/io/text.h"
#include "kan/nn/options.h"
#include "kan/serialize/torch_file.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

namespace kan {
namespace {

std::string number_text(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);
  return error == std::errc() ? std::string(text, end) : "?";
}

std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : word.back() == 's' ? "es" : "s");
}

// Names joined by ", " for a message, elided in the middle when long.
std::string name_list(const std::vector<std::string>& names, size_t max_chars = 80) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i ? ", " : "") + names[i];
  return io::elided(text, max_chars);
}

} // namespace

namespace detail {

class Destination;

// Rows of numbers from one source (a CSV file, an array, a tensor), read whole into a
// Destination or row by row for RowReader. Its columns are those of the file; a selection maps
// each to a slot of the destination's rows (inputs first, then targets) or to none.
class RowSource {
public:
  virtual ~RowSource() = default;
  /// The file (or array) as messages call it.
  virtual const std::string& name() const = 0;
  virtual int64_t columns() const = 0;
  /// A CSV header's names; empty otherwise.
  virtual const std::vector<std::string>& header() const = 0;
  /// The CSV header's line; 0 without one.
  virtual int64_t header_line() const { return 0; }
  virtual int64_t rows() = 0;
  /// Reads every row, handing the value of column c to slot slots[c] (-1: not read).
  virtual void read(const std::vector<int64_t>& slots, Destination& destination) = 0;
  /// Up to max_rows further rows of every column into `out`; how many.
  virtual int64_t next_rows(double* out, int64_t max_rows) = 0;
};

// The four tensors of a dataset being filled: the source's rows land in train or test (a seeded
// shuffle's split, or all in one), each value checked and converted as it lands.
class Destination {
public:
  Destination(int64_t rows, int64_t inputs, int64_t targets, int64_t test_rows,
              const LoadDatasetOptions& o)
      : inputs_(inputs), targets_(targets), classification_(o.classification()),
        classes_(o.classes()), float32_(o.dtype() == torch::kFloat32) {
    const int64_t train_rows = rows - test_rows;
    if (test_rows > 0) {
      // Train takes rows perm[0 .. train_rows), test the rest, each in that order.
      auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed());
      const auto perm = torch::randperm(rows, generator, torch::kLong);
      position_.resize(rows);
      const auto* p = perm.data_ptr<int64_t>();
      for (int64_t i = 0; i < rows; ++i)
        position_[p[i]] = i;
    }
    split_ = train_rows;
    const auto floating = torch::TensorOptions().dtype(o.dtype());
    for (int part = 0; part < 2; ++part) {
      const int64_t n = part == 0 ? train_rows : test_rows;
      x_[part] = torch::empty({n, inputs}, floating);
      y_[part] =
          classification_ ? torch::empty({n}, torch::kLong) : torch::empty({n, targets}, floating);
      x_data_[part] = x_[part].data_ptr();
      y_data_[part] = y_[part].data_ptr();
    }
  }

  // The value of slot `slot` (inputs, then targets) of source row `row`; `where` says where it
  // came from, for an error.
  template <typename Where> void put(int64_t row, int64_t slot, double value, const Where& where) {
    int part = 0;
    int64_t index = row;
    if (!position_.empty()) {
      index = position_[row];
      part = index >= split_;
      index -= part ? split_ : 0;
    }
    if (slot < inputs_) {
      store(x_data_[part], index * inputs_ + slot, value, where);
    } else if (!classification_) {
      store(y_data_[part], index * targets_ + slot - inputs_, value, where);
    } else {
      TORCH_CHECK(value == std::trunc(value) && value >= 0, where(),
                  ": not a class label (class labels are integers 0, 1, 2, ...) (value '",
                  number_text(value), "')");
      TORCH_CHECK(classes_ > 0 ? value < static_cast<double>(classes_) : value < 0x1p62, where(),
                  ": class label out of range: there are ", classes_, " classes, 0 to ",
                  classes_ - 1, " (value '", number_text(value), "')");
      const auto label = static_cast<int64_t>(value);
      static_cast<int64_t*>(y_data_[part])[index] = label;
      max_label_ = std::max(max_label_, label);
    }
  }

  torch::Tensor inputs(int part) const { return x_[part]; }
  torch::Tensor targets(int part) const { return y_[part]; }
  int64_t max_label() const { return max_label_; }

private:
  template <typename Where>
  void store(void* data, int64_t offset, double value, const Where& where) {
    if (float32_) {
      TORCH_CHECK(std::abs(value) <= std::numeric_limits<float>::max(), where(),
                  ": out of float32's range (read the data as float64) (value '",
                  number_text(value), "')");
      static_cast<float*>(data)[offset] = static_cast<float>(value);
    } else {
      static_cast<double*>(data)[offset] = value;
    }
  }

  int64_t inputs_, targets_;
  bool classification_;
  int64_t classes_;
  bool float32_;
  std::vector<int64_t> position_; // per source row its place in perm; empty: no split
  int64_t split_ = 0;
  std::array<torch::Tensor, 2> x_, y_;
  std::array<void*, 2> x_data_{}, y_data_{}; // their data, float, double or int64_t
  int64_t max_label_ = -1;
};

namespace {

// A CSV file through the shared parser (data/detail/csv_reader.h).
class CsvRows final : public RowSource {
public:
  explicit CsvRows(const std::string& path) : reader_(path) {}

  const std::string& name() const override { return reader_.path(); }
  int64_t columns() const override { return reader_.layout().columns; }
  const std::vector<std::string>& header() const override { return reader_.layout().names; }
  int64_t header_line() const override {
    return reader_.layout().header ? reader_.layout().first_line : 0;
  }
  int64_t rows() override {
    if (rows_ < 0)
      rows_ = reader_.count_rows();
    return rows_;
  }
  const detail::CsvLayout& layout() const { return reader_.layout(); }

  void read(const std::vector<int64_t>& slots, Destination& destination) override {
    std::vector<int64_t> selected;
    std::vector<int64_t> slot_of;
    for (int64_t c = 0; c < static_cast<int64_t>(slots.size()); ++c)
      if (slots[c] >= 0) {
        selected.push_back(c);
        slot_of.push_back(slots[c]);
      }
    reader_.select(selected);
    std::vector<double> values(selected.size());
    const int64_t total = rows();
    int64_t row = 0;
    while (reader_.next(values.data())) {
      TORCH_CHECK(row < total, name(), ":", reader_.line(),
                  ": more rows than a first pass counted (did the file change while it was read?)");
      for (size_t i = 0; i < values.size(); ++i)
        destination.put(row, slot_of[i], values[i], [&] {
          return reader_.where(selected[i]) + reader_.column_name(selected[i]);
        });
      ++row;
    }
    TORCH_CHECK(row == total, name(), ": ", row, " rows read, ", total,
                " counted first (did the file change while it was read?)");
  }

  int64_t next_rows(double* out, int64_t max_rows) override {
    int64_t n = 0;
    while (n < max_rows && reader_.next(out + n * columns()))
      ++n;
    return n;
  }

private:
  detail::CsvReader reader_;
  int64_t rows_ = -1;
};

// A 1-D or 2-D NumPy array (a 1-D one is one column), its elements streamed in storage order.
class ArrayRows final : public RowSource {
public:
  // `name` is what messages put before "[row, column]": a path, or "data.npz['x']".
  ArrayRows(std::unique_ptr<detail::ByteSource> bytes, std::string name)
      : bytes_(std::move(bytes)), name_(std::move(name)),
        elements_(*bytes_, detail::read_npy_header(*bytes_)) {
    const auto& h = elements_.header();
    TORCH_CHECK(h.shape.size() == 1 || h.shape.size() == 2, name_, ": an array of shape ",
                h.shape_text(), "; a 2-D array (rows, columns) or a 1-D one (one column) is read");
    rows_ = h.shape[0];
    columns_ = h.shape.size() == 2 ? h.shape[1] : 1;
  }

  const std::string& name() const override { return name_; }
  int64_t columns() const override { return columns_; }
  const std::vector<std::string>& header() const override { return no_header_; }
  int64_t rows() override { return rows_; }
  const detail::NpyHeader& npy() const { return elements_.header(); }
  std::string describe() const {
    const auto& h = npy();
    return h.dtype_name() + " " + h.shape_text() +
           (h.fortran_order && h.shape.size() == 2 ? " (Fortran order)" : "");
  }

  void read(const std::vector<int64_t>& slots, Destination& destination) override {
    std::vector<double> chunk(1 << 16);
    const bool fortran = npy().fortran_order;
    for (int64_t k = elements_.position();;) {
      const int64_t n = elements_.read(chunk.data(), static_cast<int64_t>(chunk.size()));
      if (n == 0)
        break;
      for (int64_t i = 0; i < n; ++i, ++k) {
        const int64_t row = fortran ? k % rows_ : k / columns_;
        const int64_t column = fortran ? k / rows_ : k % columns_;
        const int64_t slot = slots[column];
        if (slot < 0)
          continue;
        const double value = chunk[i];
        auto where = [&] { return at(row, column); };
        TORCH_CHECK(std::isfinite(value), where(),
                    ": not a finite number (NaN and Inf are refused) (value '", number_text(value),
                    "')");
        destination.put(row, slot, value, where);
      }
    }
  }

  int64_t next_rows(double* out, int64_t max_rows) override {
    const int64_t n = std::min(max_rows, rows_ - next_row_);
    if (n <= 0)
      return 0;
    if (npy().fortran_order && columns_ > 1) {
      // Column after column: the whole array, once, as rows.
      if (whole_.empty()) {
        whole_.resize(static_cast<size_t>(rows_ * columns_));
        std::vector<double> chunk(1 << 16);
        for (int64_t k = 0;;) {
          const int64_t got = elements_.read(chunk.data(), static_cast<int64_t>(chunk.size()));
          if (got == 0)
            break;
          for (int64_t i = 0; i < got; ++i, ++k)
            whole_[(k % rows_) * columns_ + k / rows_] = chunk[i];
        }
      }
      std::copy_n(whole_.data() + next_row_ * columns_, n * columns_, out);
    } else {
      for (int64_t done = 0; done < n * columns_;)
        done += elements_.read(out + done, n * columns_ - done);
    }
    for (int64_t i = 0; i < n * columns_; ++i)
      TORCH_CHECK(std::isfinite(out[i]), at(next_row_ + i / columns_, i % columns_),
                  ": not a finite number (NaN and Inf are refused) (value '", number_text(out[i]),
                  "')");
    next_row_ += n;
    return n;
  }

private:
  std::string at(int64_t row, int64_t column) const {
    return name_ + "[" + std::to_string(row) +
           (npy().shape.size() == 2 ? ", " + std::to_string(column) : "") + "]";
  }

  std::unique_ptr<detail::ByteSource> bytes_;
  std::string name_;
  detail::NpyElements elements_;
  int64_t rows_ = 0, columns_ = 0, next_row_ = 0;
  std::vector<double> whole_;
  std::vector<std::string> no_header_;
};

// A tensor of a torch.save'd dict, as float64 rows (a 1-D tensor is one column).
class TensorRows final : public RowSource {
public:
  TensorRows(const torch::Tensor& tensor, std::string name) : name_(std::move(name)) {
    TORCH_CHECK(tensor.defined(), name_, ": None, not a tensor");
    TORCH_CHECK(tensor.dim() == 1 || tensor.dim() == 2, name_, ": a tensor of shape ",
                tensor.sizes(), "; a 2-D tensor (rows, columns) or a 1-D one is read");
    TORCH_CHECK(!tensor.is_complex(), name_, ": a complex tensor");
    one_dim_ = tensor.dim() == 1;
    values_ = (one_dim_ ? tensor.unsqueeze(1) : tensor).to(torch::kFloat64).contiguous();
  }
  const std::string& name() const override { return name_; }
  int64_t columns() const override { return values_.size(1); }
  const std::vector<std::string>& header() const override { return no_header_; }
  int64_t rows() override { return values_.size(0); }

  void read(const std::vector<int64_t>& slots, Destination& destination) override {
    const auto* v = values_.data_ptr<double>();
    const int64_t columns = values_.size(1);
    for (int64_t r = 0; r < values_.size(0); ++r)
      for (int64_t c = 0; c < columns; ++c) {
        if (slots[c] < 0)
          continue;
        const double value = v[r * columns + c];
        auto where = [&] {
          return name_ + "[" + std::to_string(r) + (one_dim_ ? "" : ", " + std::to_string(c)) + "]";
        };
        TORCH_CHECK(std::isfinite(value), where(),
                    ": not a finite number (NaN and Inf are refused) (value '", number_text(value),
                    "')");
        destination.put(r, slots[c], value, where);
      }
  }
  int64_t next_rows(double*, int64_t) override {
    TORCH_INTERNAL_ASSERT(false, "a torch.save'd dict is not streamed");
    return 0;
  }

private:
  std::string name_;
  torch::Tensor values_;
  bool one_dim_ = false;
  std::vector<std::string> no_header_;
};

} // namespace
} // namespace detail

namespace {

using detail::RowSource;

constexpr std::array<const char*, 4> kPykanKeys = {"train_input", "train_label", "test_input",
                                                   "test_label"};

// A data file opened: one table (CSV, .npy, an .npz of one array) whose columns are selected,
// x and y (an .npz), or pykan's four arrays (.npz or torch.save).
struct Opened {
  std::string path;
  DataFormat format = DataFormat::kCsv;
  std::string what; // the format for people: "CSV, ','-separated, header on line 1"
  std::unique_ptr<detail::ZipReader> zip;
  std::unique_ptr<RowSource> table;
  std::unique_ptr<RowSource> x, y;
  std::array<std::unique_ptr<RowSource>, 4> pykan; // kPykanKeys' order
  /// pykan's four arrays: the file brings its own train/test split.
  bool has_pykan_split() const { return pykan[0] != nullptr; }
};

DataFormat detect_format(const std::string& path) {
  std::error_code ec;
  TORCH_CHECK(!std::filesystem::is_directory(path, ec), "cannot read '", path, "': it is a folder");
  TORCH_CHECK(std::filesystem::exists(path, ec), "cannot read '", path, "': no such file");
  char magic[6] = {};
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.is_open(), "cannot read '", path, "': ", std::strerror(errno));
  in.read(magic, sizeof magic);
  const auto got = in.gcount();
  if (got == 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0)
    return DataFormat::kNpy;
  if (got >= 4 && (std::memcmp(magic, "PK\3\4", 4) == 0 || std::memcmp(magic, "PK\5\6", 4) == 0)) {
    detail::ZipReader zip(path);
    for (const auto& e : zip.entries()) // torch.save: ARCHIVE/data.pkl
      if (e.name.size() >= 9 && e.name.compare(e.name.size() - 9, 9, "/data.pkl") == 0)
        return DataFormat::kTorch;
    return DataFormat::kNpz;
  }
  TORCH_CHECK(
      !(got >= 2 && static_cast<unsigned char>(magic[0]) == 0x80 && magic[1] >= 2 && magic[1] <= 5),
      "'", path,
      "': a pickle (torch.save's legacy format?), which is not read: save it again with "
      "torch.save's default zip format");
  return DataFormat::kCsv;
}

std::string csv_what(const detail::CsvLayout& layout) {
  const std::string delimiter =
      layout.delimiter == '\t' ? "tab" : std::string("'") + layout.delimiter + "'";
  return "CSV, " + delimiter + "-separated, " +
         (layout.header
              ? "header on line " + std::to_string(layout.first_line) + " taken as column names"
              : std::string("no header"));
}

Opened open_data(const std::string& path) {
  Opened o;
  o.path = path;
  o.format = detect_format(path);
  switch (o.format) {
  case DataFormat::kCsv: {
    auto csv = std::make_unique<detail::CsvRows>(path);
    o.what = csv_what(csv->layout());
    o.table = std::move(csv);
    break;
  }
  case DataFormat::kNpy: {
    auto array = std::make_unique<detail::ArrayRows>(detail::open_file_source(path), path);
    o.what = "NumPy .npy, " + array->describe();
    o.table = std::move(array);
    break;
  }
  case DataFormat::kNpz: {
    o.zip = std::make_unique<detail::ZipReader>(path);
    std::vector<std::string> names;
    for (const auto& e : o.zip->entries())
      names.push_back(e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0
                          ? e.name.substr(0, e.name.size() - 4)
                          : e.name);
    auto array = [&](const std::string& key) -> std::unique_ptr<detail::ArrayRows> {
      const auto* entry = o.zip->find(key + ".npy");
      if (entry == nullptr)
        return nullptr;
      return std::make_unique<detail::ArrayRows>(o.zip->open(*entry), path + "['" + key + "']");
    };
    if (o.zip->find("train_input.npy") || o.zip->find("test_label.npy")) {
      for (size_t i = 0; i < kPykanKeys.size(); ++i) {
        o.pykan[i] = array(kPykanKeys[i]);
        TORCH_CHECK(o.pykan[i], "'", path, "': no array '", kPykanKeys[i],
                    "' (an .npz of pykan's keys holds train_input, train_label, test_input and "
                    "test_label; this one holds ",
                    name_list(names), ")");
      }
      o.what = "NumPy .npz of pykan's train_input, train_label, test_input, test_label";
    } else if (o.zip->find("x.npy") && o.zip->find("y.npy")) {
      auto x = array("x"), y = array("y");
      o.what = "NumPy .npz, x " + x->describe() + " and y " + y->describe();
      o.x = std::move(x);
      o.y = std::move(y);
    } else {
      TORCH_CHECK(names.size() == 1 && o.zip->entries()[0].name != names[0], "'", path,
                  "': an .npz read as data holds arrays x and y, pykan's train_input, "
                  "train_label, test_input and test_label, or one array; this one holds ",
                  names.empty() ? "none" : name_list(names));
      auto table = array(names[0]);
      o.what = "NumPy .npz, one array '" + io::elided(names[0]) + "' " + table->describe();
      o.table = std::move(table);
    }
    break;
  }
  case DataFormat::kTorch: {
    const auto tensors = read_named_tensors(path);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : tensors)
      names.push_back(name);
    for (size_t i = 0; i < kPykanKeys.size(); ++i) {
      const auto found = std::find_if(tensors.begin(), tensors.end(), [&](const auto& named) {
        return named.first == kPykanKeys[i];
      });
      TORCH_CHECK(found != tensors.end(), "'", path, "': no tensor '", kPykanKeys[i],
                  "' (the file holds ", names.empty() ? "none" : name_list(names),
                  "); a torch.save'd dataset is pykan's create_dataset dict (train_input, "
                  "train_label, test_input, test_label)");
      o.pykan[i] = std::make_unique<detail::TensorRows>(
          found->second, path + "['" + std::string(kPykanKeys[i]) + "']");
    }
    o.what = "pykan's create_dataset dict (torch.save)";
    break;
  }
  }
  return o;
}

// One column selection, "0-3,5,name", resolved against a table's header (or its indices).
std::vector<int64_t> resolve_columns(const std::string& text, const char* option,
                                     const RowSource& table) {
  const int64_t columns = table.columns();
  const auto& header = table.header();
  const auto fail_unless = [&](bool ok, const std::string& problem) {
    TORCH_CHECK(ok, option, " '", io::elided(text), "': ", problem);
  };
  auto index_of = [&](const std::string& item) -> int64_t {
    const auto first = std::find(header.begin(), header.end(), item);
    if (first == header.end())
      return -1;
    fail_unless(std::find(first + 1, header.end(), item) == header.end(),
                table.name() + "'s header (line " + std::to_string(table.header_line()) +
                    ") names two columns '" + io::elided(item) + "': select them by index");
    return first - header.begin();
  };
  auto number = [](const std::string& item, int64_t& value) {
    const auto* end = item.data() + item.size();
    const auto [stop, error] = std::from_chars(item.data(), end, value);
    return !item.empty() && stop == end && error == std::errc() && value >= 0;
  };
  const std::string range_text =
      columns == 1 ? "column 0" : "columns 0-" + std::to_string(columns - 1);
  auto in_range = [&](int64_t c, const std::string& item) {
    fail_unless(c < columns, "column " + io::elided(item) + " is out of range: " + table.name() +
                                 " has " + plural(columns, "column") + " (" + range_text + ")");
  };
  std::vector<int64_t> selected;
  for (size_t start = 0;;) {
    const auto comma = text.find(',', start);
    auto item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto first = item.find_first_not_of(" \t");
    item = first == std::string::npos
               ? ""
               : item.substr(first, item.find_last_not_of(" \t") - first + 1);
    fail_unless(!item.empty(), "an empty item (write e.g. 0-3,5 or x,y)");
    // Digits are an index and digits-digits a range, whatever the header says; anything else
    // is a header name.
    int64_t a = 0, b = 0;
    const auto dash = item.find('-', 1);
    if (number(item, a)) {
      in_range(a, item);
      selected.push_back(a);
    } else if (dash != std::string::npos && number(item.substr(0, dash), a) &&
               number(item.substr(dash + 1), b)) {
      fail_unless(a <= b, "the range " + item + " runs backwards (write " + std::to_string(b) +
                              "-" + std::to_string(a) + ")");
      in_range(b, item);
      for (int64_t c = a; c <= b; ++c)
        selected.push_back(c);
    } else if (const int64_t named = index_of(item); named >= 0) {
      selected.push_back(named);
    } else {
      fail_unless(!header.empty(),
                  "'" + io::elided(item) + "' is neither a column index nor a range, and " +
                      table.name() + " has no header to name columns (" + range_text + ")");
      fail_unless(false, table.name() + " has no column '" + io::elided(item) +
                             "' (its header, line " + std::to_string(table.header_line()) +
                             ", names " + name_list(header) + ")");
    }
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  for (size_t i = 0; i < selected.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      fail_unless(selected[i] != selected[j],
                  "column " + std::to_string(selected[i]) + " is selected twice");
  return selected;
}

std::string column_name(const RowSource& table, int64_t c) {
  return table.header().empty() ? std::to_string(c) : table.header()[c];
}

// Which slot each column of a source fills, and the names of inputs and targets.
struct Plan {
  std::vector<int64_t> slots;            // table: per column
  std::vector<int64_t> x_slots, y_slots; // x and y
  std::vector<std::string> input_names, target_names;
};

Plan plan_columns(const Opened& data, const LoadDatasetOptions& o) {
  Plan plan;
  if (data.table) {
    const auto& table = *data.table;
    const int64_t columns = table.columns();
    TORCH_CHECK(columns > 0 || data.format != DataFormat::kCsv, "'", data.path,
                "': no rows (an empty file)");
    TORCH_CHECK(columns >= 2 || !o.inputs().empty(), table.name(), ": ", plural(columns, "column"),
                ", so no inputs besides the target (a dataset needs input and target columns)");
    std::vector<int64_t> targets = o.targets().empty()
                                       ? std::vector<int64_t>{columns - 1}
                                       : resolve_columns(o.targets(), "targets", table);
    std::vector<int64_t> inputs;
    if (o.inputs().empty()) {
      for (int64_t c = 0; c < columns; ++c)
        if (std::find(targets.begin(), targets.end(), c) == targets.end())
          inputs.push_back(c);
      TORCH_CHECK(!inputs.empty(), "targets '", io::elided(o.targets()), "' leave ", table.name(),
                  " no input columns");
    } else {
      inputs = resolve_columns(o.inputs(), "inputs", table);
    }
    for (const auto c : inputs) {
      const bool overlap = std::find(targets.begin(), targets.end(), c) != targets.end();
      TORCH_CHECK(!overlap || !o.targets().empty(), "inputs '", io::elided(o.inputs()),
                  "' include column ", c, " ('", io::elided(column_name(table, c)),
                  "'), the default target (the last column): select the targets too");
      TORCH_CHECK(!overlap, "inputs '", io::elided(o.inputs()), "' and targets '",
                  io::elided(o.targets()), "' overlap: column ", c, " ('",
                  io::elided(column_name(table, c)),
                  "') is both (a model that sees its target learns nothing)");
    }
    plan.slots.assign(columns, -1);
    for (size_t i = 0; i < inputs.size(); ++i) {
      plan.slots[inputs[i]] = static_cast<int64_t>(i);
      plan.input_names.push_back(column_name(table, inputs[i]));
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      plan.slots[targets[i]] = static_cast<int64_t>(inputs.size() + i);
      plan.target_names.push_back(column_name(table, targets[i]));
    }
    return plan;
  }
  const auto held_apart = data.has_pykan_split()
                              ? "pykan's train_input, train_label, test_input and "
                                "test_label"
                              : "arrays x and y";
  TORCH_CHECK(o.inputs().empty(), "inputs '", io::elided(o.inputs()), "' does not apply to ",
              data.path, ": it holds ", held_apart, " (inputs and targets apart)");
  TORCH_CHECK(o.targets().empty(), "targets '", io::elided(o.targets()), "' does not apply to ",
              data.path, ": it holds ", held_apart, " (inputs and targets apart)");
  const auto& x = data.x ? *data.x : *data.pykan[0];
  const auto& y = data.y ? *data.y : *data.pykan[1];
  TORCH_CHECK(x.columns() > 0 && y.columns() > 0, (x.columns() > 0 ? y : x).name(),
              ": no columns (a dataset needs inputs and targets)");
  for (int64_t c = 0; c < x.columns(); ++c) {
    plan.x_slots.push_back(c);
    plan.input_names.push_back("x" + std::to_string(c));
  }
  for (int64_t c = 0; c < y.columns(); ++c) {
    plan.y_slots.push_back(x.columns() + c);
    plan.target_names.push_back("y" + std::to_string(c));
  }
  return plan;
}

// The rows of a table or of x and y (which must agree).
int64_t count_rows(RowSource& x, RowSource* y) {
  const int64_t rows = x.rows();
  if (y != nullptr)
    TORCH_CHECK(y->rows() == rows, y->name(), ": ", plural(y->rows(), "row"), ", but ", x.name(),
                " has ", rows, " (one target row per input row)");
  return rows;
}

void check_not_empty(const Opened& data, RowSource& x, int64_t rows) {
  if (rows > 0)
    return;
  TORCH_CHECK(data.format != DataFormat::kCsv, "'", data.path, "': no rows (",
              x.header_line() > 0 ? "only a header, line " + std::to_string(x.header_line())
                                  : std::string("an empty file"),
              ")");
  TORCH_CHECK(false, x.name(), ": no rows (an array of 0 rows)");
}

void fill(Opened& data, const Plan& plan, detail::Destination& destination) {
  if (data.table) {
    data.table->read(plan.slots, destination);
  } else {
    data.x->read(plan.x_slots, destination);
    data.y->read(plan.y_slots, destination);
  }
}

void check_classification(const Plan& plan, const std::string& path) {
  TORCH_CHECK(plan.target_names.size() == 1, path,
              ": classification takes one target column of class labels, got ",
              plan.target_names.size(), " (", name_list(plan.target_names), ")");
}

void check_load_options(const LoadDatasetOptions& o) {
  TORCH_CHECK(o.dtype() == torch::kFloat32 || o.dtype() == torch::kFloat64,
              "load_dataset: dtype must be float32 or float64, got ", to_string(o.dtype()));
  TORCH_CHECK(!o.test_fraction() || (*o.test_fraction() > 0 && *o.test_fraction() < 1),
              "test fraction must lie in (0, 1), got ",
              o.test_fraction() ? number_text(*o.test_fraction()) : "");
  TORCH_CHECK(!o.test_fraction() || o.test_data().empty(), "test fraction ",
              number_text(o.test_fraction().value_or(0)), " and test data '", o.test_data(),
              "' are alternatives: the test set is split off the data or read from a file");
  TORCH_CHECK(o.classes() >= 0, "classes must be >= 0 (0: the largest label + 1), got ",
              o.classes());
  TORCH_CHECK(o.classes() == 0 || o.classification(), "classes ", o.classes(),
              " needs classification");
}

// The rows read into train and test sets.
struct Split {
  Dataset data;
  int64_t max_label = -1; // the largest class label read (classification)
  std::string text;       // for people: "800 train, 200 test rows"
};

// pykan's four arrays: a test set of their own.
Split read_pykan_split(Opened& data, const Plan& plan, const LoadDatasetOptions& o) {
  const auto& path = data.path;
  const int64_t inputs = static_cast<int64_t>(plan.input_names.size());
  const int64_t targets = static_cast<int64_t>(plan.target_names.size());
  TORCH_CHECK(o.test_data().empty() && !o.test_fraction(), "'", path,
              "' holds its own test set (pykan's test_input and test_label), so ",
              o.test_data().empty() ? "a test fraction" : "test data '" + o.test_data() + "'",
              " does not apply");
  std::array<int64_t, 2> rows{};
  for (int part = 0; part < 2; ++part) {
    auto& x = *data.pykan[2 * part];
    auto& y = *data.pykan[2 * part + 1];
    rows[part] = count_rows(x, &y);
    TORCH_CHECK(x.columns() == inputs && y.columns() == targets, x.name(), " and ", y.name(), ": ",
                x.columns(), " and ", y.columns(), " columns, but ", data.pykan[0]->name(), " and ",
                data.pykan[1]->name(), " have ", inputs, " and ", targets);
    if (part == 0)
      check_not_empty(data, x, rows[0]);
  }
  Split split;
  for (int part = 0; part < 2; ++part) {
    detail::Destination destination(rows[part], inputs, targets, 0, o);
    data.pykan[2 * part]->read(plan.x_slots, destination);
    data.pykan[2 * part + 1]->read(plan.y_slots, destination);
    (part == 0 ? split.data.train_input : split.data.test_input) = destination.inputs(0);
    (part == 0 ? split.data.train_label : split.data.test_label) = destination.targets(0);
    split.max_label = std::max(split.max_label, destination.max_label());
  }
  split.text = std::to_string(rows[0]) + " train, " + std::to_string(rows[1]) + " test rows";
  return split;
}

// A test data file, opened and its columns checked against the data's.
struct TestFile {
  Opened data;
  Plan plan;
  int64_t rows = 0;
};

TestFile open_test_file(const Plan& plan, const std::string& path, const LoadDatasetOptions& o) {
  TestFile test;
  test.data = open_data(o.test_data());
  TORCH_CHECK(!test.data.has_pykan_split(), "test data '", o.test_data(),
              "' holds a whole dataset (pykan's train and test arrays): give it as the data");
  test.plan = plan_columns(test.data, o);
  TORCH_CHECK(test.plan.input_names.size() == plan.input_names.size() &&
                  test.plan.target_names.size() == plan.target_names.size(),
              "test data '", o.test_data(),
              "': ", plural(static_cast<int64_t>(test.plan.input_names.size()), "input"), " and ",
              plural(static_cast<int64_t>(test.plan.target_names.size()), "target"), ", but '",
              path, "' has ", static_cast<int64_t>(plan.input_names.size()), " and ",
              static_cast<int64_t>(plan.target_names.size()));
  RowSource& x = test.data.table ? *test.data.table : *test.data.x;
  test.rows = count_rows(x, test.data.table ? nullptr : test.data.y.get());
  check_not_empty(test.data, x, test.rows);
  return test;
}

// A table, or x and y: the test set split off it, or read from the test data file.
Split read_and_split(Opened& data, const Plan& plan, const LoadDatasetOptions& o) {
  const auto& path = data.path;
  const int64_t inputs = static_cast<int64_t>(plan.input_names.size());
  const int64_t targets = static_cast<int64_t>(plan.target_names.size());
  Split split;
  RowSource& x = data.table ? *data.table : *data.x;
  const int64_t rows = count_rows(x, data.table ? nullptr : data.y.get());
  check_not_empty(data, x, rows);
  int64_t test_rows = 0;
  if (o.test_data().empty()) {
    const double fraction = o.test_fraction().value_or(0.2);
    TORCH_CHECK(rows >= 2, "'", path, "': 1 row, too few to split into train and test (give a ",
                "test data file)");
    test_rows =
        std::clamp<int64_t>(std::llround(static_cast<double>(rows) * fraction), 1, rows - 1);
    split.text = std::to_string(rows) + " rows: " + std::to_string(rows - test_rows) + " train, " +
                 std::to_string(test_rows) + " test (seeded shuffle, seed " +
                 std::to_string(o.seed()) + ", test fraction " + number_text(fraction) + ")";
  }
  // A test file is opened and checked before the data is read: its mistakes cost no parse.
  std::optional<TestFile> test;
  if (!o.test_data().empty()) {
    test = open_test_file(plan, path, o);
    split.text = std::to_string(rows) + " train rows; test set " + o.test_data() + " (" +
                 test->data.what + ", " + plural(test->rows, "row") + ")";
  }
  detail::Destination destination(rows, inputs, targets, test_rows, o);
  fill(data, plan, destination);
  split.max_label = destination.max_label();
  split.data.train_input = destination.inputs(0);
  split.data.train_label = destination.targets(0);
  if (!test) {
    split.data.test_input = destination.inputs(1);
    split.data.test_label = destination.targets(1);
  } else {
    detail::Destination test_destination(test->rows, inputs, targets, 0, o);
    fill(test->data, test->plan, test_destination);
    split.max_label = std::max(split.max_label, test_destination.max_label());
    split.data.test_input = test_destination.inputs(0);
    split.data.test_label = test_destination.targets(0);
  }
  return split;
}

} // namespace

std::string to_string(DataFormat value) {
  return io::name_of(value, kDataFormatNames);
}

LoadedDataset load_dataset(const std::string& path, const LoadDatasetOptions& o) {
  check_load_options(o);
  auto data = open_data(path);
  LoadedDataset result;
  result.path = path;
  result.format = data.format;
  const auto plan = plan_columns(data, o);
  if (o.classification())
    check_classification(plan, path);
  auto split =
      data.has_pykan_split() ? read_pykan_split(data, plan, o) : read_and_split(data, plan, o);
  result.data = std::move(split.data);

  result.input_names = plan.input_names;
  result.target_names = plan.target_names;
  result.header_line = data.table ? data.table->header_line() : 0;
  result.train_rows = result.data.train_input.size(0);
  result.test_rows = result.data.test_input.size(0);
  if (o.classification())
    result.classes = o.classes() > 0 ? o.classes() : split.max_label + 1;
  result.description = path + ": " + data.what + "; " + split.text + "; inputs " +
                       name_list(result.input_names, 60) + "; " +
                       (o.classification() ? "class labels " + name_list(result.target_names) +
                                                 " (" + plural(result.classes, "class") + ")"
                                           : "targets " + name_list(result.target_names, 60));
  if (o.device() != torch::Device(torch::kCPU))
    result.data = result.data.to(o.device());
  return result;
}

void check_width(const LoadedDataset& data, int64_t inputs, int64_t outputs) {
  const auto& source = data.path;
  const auto model =
      "the model takes " + plural(inputs, "input") + " and gives " + plural(outputs, "output");
  if (data.classes > 0) {
    TORCH_CHECK(data.inputs() == inputs && data.classes <= outputs, source, ": ", model,
                ", but the data has ", plural(data.inputs(), "input column"), " and ",
                plural(data.classes, "class"), " (one output per class)");
    return;
  }
  TORCH_CHECK(data.inputs() == inputs && data.targets() == outputs, source, ": ", model,
              ", but the data has ", plural(data.inputs(), "input column"), " (",
              name_list(data.input_names, 40), ") and ", plural(data.targets(), "target column"),
              " (", name_list(data.target_names, 40), ")");
}

RowReader::RowReader(const std::string& path) {
  const auto format = detect_format(path);
  TORCH_CHECK(format == DataFormat::kCsv || format == DataFormat::kNpy, "'", path, "' is ",
              format == DataFormat::kNpz ? "an .npz archive" : "a torch.save file",
              "; rows are read from a CSV file or a .npy array");
  if (format == DataFormat::kCsv)
    source_ = std::make_unique<detail::CsvRows>(path);
  else
    source_ = std::make_unique<detail::ArrayRows>(detail::open_file_source(path), path);
}

RowReader::~RowReader() = default;

DataFormat RowReader::format() const {
  return dynamic_cast<const detail::CsvRows*>(source_.get()) ? DataFormat::kCsv : DataFormat::kNpy;
}

int64_t RowReader::columns() const {
  return source_->columns();
}

bool RowReader::has_header() const {
  return source_->header_line() > 0;
}

void RowReader::expect_columns(int64_t count, const std::string& why) const {
  const auto* csv = dynamic_cast<const detail::CsvRows*>(source_.get());
  if (csv == nullptr) {
    TORCH_CHECK(source_->columns() == count, source_->name(), ": an array of ",
                plural(source_->columns(), "column"), ", but ", why);
    return;
  }
  const auto& layout = csv->layout();
  if (layout.columns == 0)
    return; // no rows: next() returns none
  TORCH_CHECK(layout.columns == count, csv->name(), ":", layout.first_line, ": ",
              layout.header ? "the header names " + plural(layout.columns, "column")
                            : plural(layout.columns, "value") + " per row",
              ", but ", why);
}

torch::Tensor RowReader::next(int64_t max_rows) {
  const int64_t columns = std::max<int64_t>(source_->columns(), 1);
  auto rows = torch::empty({max_rows, columns}, torch::kFloat64);
  const int64_t n = source_->next_rows(rows.data_ptr<double>(), max_rows);
  rows_read_ += n;
  return n == max_rows ? rows : rows.narrow(0, 0, n).clone();
}

} // namespace kan
