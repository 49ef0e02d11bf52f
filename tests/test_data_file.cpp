// Users' data files: kan::load_dataset, kan::check_width and kan::RowReader (kan/data/data_file.h).
// Binary fixtures come from tools/data-fixtures/generate.py (tests/reference/data); CSV files and
// damaged copies of the fixtures are written here.
#include "kan/data/data_file.h"

#include "kan/bench/measure.h"
#include "kan/serialize/torch_file.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace kan {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(KAN_DATA_REFERENCE_DIR) + "/" + name;
}

// generate.py's arrays: table[i, j] = (4 i + j) / 8 - 3 (12 x 4), small[i, j] = 2 i + j (5 x 2).
torch::Tensor table() {
  auto i = torch::arange(12, torch::kFloat64).unsqueeze(1);
  auto j = torch::arange(4, torch::kFloat64).unsqueeze(0);
  return (4 * i + j) / 8 - 3;
}
torch::Tensor small() {
  return torch::arange(10, torch::kFloat64).reshape({5, 2});
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Rows of numbers as CSV text, at the 17 significant digits that read back as the same double.
std::string csv_text(const torch::Tensor& values, const std::string& header = "",
                     char delimiter = ',') {
  std::string text = header.empty() ? "" : header + "\n";
  const auto v = values.to(torch::kFloat64).contiguous();
  const auto* p = v.data_ptr<double>();
  char number[32];
  for (int64_t r = 0; r < v.size(0); ++r) {
    for (int64_t c = 0; c < v.size(1); ++c) {
      const int n = std::snprintf(number, sizeof number, "%.17g", p[r * v.size(1) + c]);
      if (c)
        text += delimiter;
      text.append(number, static_cast<size_t>(n));
    }
    text += '\n';
  }
  return text;
}

// A .npy file of `descr` and `shape` (a Python tuple's text) around raw data bytes.
std::string npy_bytes(const std::string& descr, const std::string& shape, const std::string& data,
                      bool fortran = false) {
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes += '\0';
  bytes += static_cast<char>(header.size() & 0xFF);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + data;
}

std::string doubles(const std::vector<double>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
}

// The one-line message of the c10::Error `f` throws; "" (and a test failure) when it throws none.
template <typename F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    const std::string message = e.msg();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "more than one line: " << message;
    return message;
  }
  ADD_FAILURE() << "no error";
  return "";
}

// The rows of `data` (train, then test) sorted by their first column: the file's rows, whatever
// the split.
torch::Tensor all_rows(const Dataset& d) {
  auto labels = [](const torch::Tensor& t) { return t.dim() == 1 ? t.unsqueeze(1) : t; };
  auto rows = torch::cat({torch::cat({d.train_input, labels(d.train_label).to(d.train_input)}, 1),
                          torch::cat({d.test_input, labels(d.test_label).to(d.test_input)}, 1)});
  return rows.index_select(0, std::get<1>(rows.select(1, 0).sort()));
}

class DataFile : public test::ScratchDirTest {
protected:
  std::string write(const std::string& name, const std::string& text) {
    write_bytes(path(name), text);
    return path(name);
  }
};

TEST_F(DataFile, CsvTakesAllButTheLastColumnAsInputsAndSplitsBySeededShuffle) {
  const auto file = write("data.csv", csv_text(table(), "a,b,c,y"));
  const auto loaded = load_dataset(file, LoadDatasetOptions().dtype(torch::kFloat64).seed(7));
  EXPECT_EQ(loaded.format, DataFormat::kCsv);
  EXPECT_EQ(loaded.path, file);
  EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(loaded.target_names, (std::vector<std::string>{"y"}));
  EXPECT_EQ(loaded.header_line, 1);
  EXPECT_EQ(loaded.classes, 0);
  // 12 rows, test fraction 0.2: round(2.4) = 2 test rows.
  EXPECT_EQ(loaded.train_rows, 10);
  EXPECT_EQ(loaded.test_rows, 2);
  const auto& d = loaded.data;
  EXPECT_EQ(d.train_input.sizes(), (std::vector<int64_t>{10, 3}));
  EXPECT_EQ(d.train_label.sizes(), (std::vector<int64_t>{10, 1}));
  EXPECT_EQ(d.test_input.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d.train_input.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::equal(all_rows(d), table()));
  // The documented split: train = rows perm[0:10], test = rows perm[10:12], perm = randperm(12).
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto perm = torch::randperm(12, generator, torch::kLong);
  const auto t = table();
  EXPECT_TRUE(torch::equal(d.train_input, t.index_select(0, perm.slice(0, 0, 10)).slice(1, 0, 3)));
  EXPECT_TRUE(torch::equal(d.test_label, t.index_select(0, perm.slice(0, 10)).slice(1, 3)));
  for (const auto* part : {"CSV, ','-separated, header on line 1 taken as column names",
                           "12 rows: 10 train, 2 test (seeded shuffle, seed 7, test fraction 0.2)",
                           "inputs a, b, c", "targets y"})
    EXPECT_NE(loaded.description.find(part), std::string::npos) << loaded.description;
}

TEST_F(DataFile, TheSplitIsReproducibleAndSizedByTheFraction) {
  const auto file = write("data.csv", csv_text(torch::rand({100, 3}, torch::kFloat64)));
  const auto a = load_dataset(file, LoadDatasetOptions().seed(3));
  const auto b = load_dataset(file, LoadDatasetOptions().seed(3));
  const auto c = load_dataset(file, LoadDatasetOptions().seed(4));
  EXPECT_TRUE(torch::equal(a.data.train_input, b.data.train_input));
  EXPECT_TRUE(torch::equal(a.data.test_label, b.data.test_label));
  EXPECT_FALSE(torch::equal(a.data.train_input, c.data.train_input));
  EXPECT_EQ(a.data.train_input.scalar_type(), torch::kFloat32); // the default dtype
  for (const auto& [fraction, test] :
       std::vector<std::pair<double, int64_t>>{{0.5, 50}, {0.25, 25}, {0.001, 1}, {0.999, 99}}) {
    const auto split = load_dataset(file, LoadDatasetOptions().test_fraction(fraction));
    EXPECT_EQ(split.test_rows, test) << fraction;
    EXPECT_EQ(split.train_rows, 100 - test) << fraction;
  }
}

TEST_F(DataFile, DelimitersHeadersAndLineEndsAreDetected) {
  const auto t = table();
  const auto f64 = LoadDatasetOptions().dtype(torch::kFloat64);
  // Semicolons, no header.
  auto loaded = load_dataset(write("semi.csv", csv_text(t, "", ';')), f64);
  EXPECT_EQ(loaded.header_line, 0);
  EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(loaded.target_names, (std::vector<std::string>{"3"}));
  EXPECT_NE(loaded.description.find("';'-separated, no header"), std::string::npos);
  EXPECT_TRUE(torch::equal(all_rows(loaded.data), t));
  // Tabs with a quoted header; a header of numbers but one name is still a header.
  loaded = load_dataset(write("tab.tsv", csv_text(t, "\"a\"\t\"b, c\"\t2\ty", '\t')), f64);
  EXPECT_EQ(loaded.header_line, 1);
  EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"a", "b, c", "2"}));
  EXPECT_NE(loaded.description.find("tab-separated"), std::string::npos);
  EXPECT_TRUE(torch::equal(all_rows(loaded.data), t));
  // A byte order mark, CRLF, blanks around cells, quoted numbers, '+' signs, blank lines at the
  // end.
  loaded = load_dataset(
      write("crlf.csv", "\xEF\xBB\xBFx , y\r\n 1.5 ,\"-2\"\r\n+3,4e0\r\n5,6\r\n\r\n  \n"), f64);
  EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"x"}));
  EXPECT_TRUE(torch::equal(
      all_rows(loaded.data),
      torch::tensor({1.5, -2.0, 3.0, 4.0, 5.0, 6.0}, torch::kFloat64).reshape({3, 2})));
}

TEST_F(DataFile, ColumnsAreSelectedByIndexRangeAndName) {
  const auto file = write("data.csv", csv_text(table(), "a,b,c,y"));
  const auto t = table();
  auto o = LoadDatasetOptions().dtype(torch::kFloat64).test_fraction(0.5);
  auto loaded = load_dataset(file, o.inputs("y, 0-1").targets("c"));
  EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"y", "a", "b"}));
  EXPECT_EQ(loaded.target_names, (std::vector<std::string>{"c"}));
  auto x = torch::cat({loaded.data.train_input, loaded.data.test_input});
  auto y = torch::cat({loaded.data.train_label, loaded.data.test_label});
  const auto order = std::get<1>(x.select(1, 1).sort());
  x = x.index_select(0, order);
  y = y.index_select(0, order);
  EXPECT_TRUE(torch::equal(x, torch::stack({t.select(1, 3), t.select(1, 0), t.select(1, 1)}, 1)));
  EXPECT_TRUE(torch::equal(y, t.slice(1, 2, 3)));
  // Targets only: the inputs are the other columns, in order.
  loaded = load_dataset(file, LoadDatasetOptions().targets("0"));
  EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"b", "c", "y"}));
  // Two targets, and inputs that leave a column out.
  loaded = load_dataset(file, LoadDatasetOptions().inputs("0").targets("2-3"));
  EXPECT_EQ(loaded.inputs(), 1);
  EXPECT_EQ(loaded.target_names, (std::vector<std::string>{"c", "y"}));
  EXPECT_EQ(loaded.data.train_label.sizes(), (std::vector<int64_t>{10, 2}));
}

TEST_F(DataFile, UnselectedColumnsMayHoldText) {
  const auto file = write("names.csv", "name,x,y\n\"Smith, J\",1,2\nLee,3,4\n");
  const auto loaded =
      load_dataset(file, LoadDatasetOptions().inputs("x").targets("y").dtype(torch::kFloat64));
  EXPECT_TRUE(torch::equal(all_rows(loaded.data),
                           torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kFloat64).reshape({2, 2})));
}

TEST_F(DataFile, BadColumnSelectionsAreOneLineNamingTheSelection) {
  const auto file = write("data.csv", csv_text(table(), "a,b,c,y"));
  const auto bare = write("bare.csv", csv_text(table()));
  const std::vector<std::tuple<std::string, LoadDatasetOptions, std::string>> bad{
      {file, LoadDatasetOptions().inputs("0-4"),
       "inputs '0-4': column 0-4 is out of range: " + file + " has 4 columns (columns 0-3)"},
      {file, LoadDatasetOptions().targets("7"), "targets '7': column 7 is out of range"},
      {file, LoadDatasetOptions().inputs("a,z"),
       "inputs 'a,z': " + file + " has no column 'z' (its header, line 1, names a, b, c, y)"},
      {bare, LoadDatasetOptions().targets("y"),
       "targets 'y': 'y' is neither a column index nor a range, and " + bare +
           " has no header to name columns (columns 0-3)"},
      {file, LoadDatasetOptions().inputs("0,,2"), "inputs '0,,2': an empty item"},
      {file, LoadDatasetOptions().inputs("3-1"), "inputs '3-1': the range 3-1 runs backwards"},
      {file, LoadDatasetOptions().inputs("0,a"), "inputs '0,a': column 0 is selected twice"},
      {file, LoadDatasetOptions().inputs("0-2").targets("c"),
       "inputs '0-2' and targets 'c' overlap: column 2 ('c') is both"},
      {file, LoadDatasetOptions().inputs("a,y"),
       "inputs 'a,y' include column 3 ('y'), the default target (the last column)"},
      {file, LoadDatasetOptions().targets("2-3").classification(true),
       "classification takes one target column of class labels, got 2 (c, y)"},
  };
  for (const auto& [path, options, expected] : bad) {
    const auto message = error_of([&] { load_dataset(path, options); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  // A long header is elided in the middle.
  std::string header;
  for (int c = 0; c < 200; ++c)
    header += (c ? ",column_" : "column_") + std::to_string(c);
  const auto wide = write("wide.csv", header + "\n" + csv_text(torch::zeros({2, 200})));
  const auto message = error_of([&] { load_dataset(wide, LoadDatasetOptions().inputs("nope")); });
  EXPECT_NE(message.find("names column_0, column_1"), std::string::npos) << message;
  EXPECT_NE(message.find("..."), std::string::npos) << message;
  EXPECT_NE(message.find("column_198, column_199)"), std::string::npos) << message;
  EXPECT_LT(message.size(), 400u) << message;
}

// Every bad CSV: one line naming the file, the line, the column (from 1) and the value.
TEST_F(DataFile, BadCsvCellsAreOneLineNamingFileLineColumnAndValue) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"x,y\n1,2\n3,abc\n", "x.csv:3:2 (column 'y'): not a number (value 'abc')"},
      {"1,2\n3,abc\n", "x.csv:2:2: not a number (value 'abc')"},
      {"1,2\n3,4,5\n", "x.csv:2:3: one cell too many: line 1 has 2 cells (value '5')"},
      {"a,b\n1,2\n3,4,\n", "x.csv:3:3: one cell too many: the header (line 1) names 2 columns "
                           "(value '')"},
      {"1,2,3\n4,5\n", "x.csv:2:3: missing cell: the row has 2 cells, line 1 has 3 (row '4,5')"},
      {"1,2\n3,\n", "x.csv:2:2: empty cell (value '')"},
      {"1,nan\n3,4\n", "x.csv:1:2: not a finite number (NaN and Inf are refused) (value 'nan')"},
      {"a,b\n-inf,0\n3,4\n", "x.csv:2:1 (column 'a'): not a finite number"},
      {"1,2\n1e999,0\n", "x.csv:2:1: out of the range of a double (value '1e999')"},
      {"1;2\n1,5;3\n", "x.csv:2:1: not a number (decimal commas are not read: write 1.5, not 1,5) "
                       "(value '1,5')"},
      {"1,2\n\n3,4\n", "x.csv:2: blank line between rows (blank lines may only end the file)"},
      {"1,2\n3,0x10\n", "x.csv:2:2: not a number (value '0x10')"},
      {"1,2\n3,\x01\xff\n", "x.csv:2:2: not a number (value '\\x01\\xFF')"},
      {"", "x.csv': no rows (an empty file)"},
      {"\n \n", "x.csv': no rows (an empty file)"},
      {"a,b\n", "x.csv': no rows (only a header, line 1)"},
      {"1,2\n", "x.csv': 1 row, too few to split into train and test"},
  };
  for (const auto& [text, expected] : bad) {
    const auto file = write("x.csv", text);
    const auto message = error_of([&] { load_dataset(file); });
    EXPECT_NE(message.find(expected), std::string::npos) << text << ": " << message;
  }
  // A long value is quoted with its middle elided.
  const auto file = write("x.csv", "1,2\n3," + std::string(500, 'z') + "\n");
  const auto message = error_of([&] { load_dataset(file); });
  EXPECT_NE(message.find("(value 'zzzz"), std::string::npos) << message;
  EXPECT_NE(message.find("...zzz"), std::string::npos) << message;
  EXPECT_LT(message.size(), 200u) << message;
}

TEST_F(DataFile, BadOptionsAreOneLineNamingTheOption) {
  const auto file = write("data.csv", csv_text(table()));
  const std::vector<std::pair<LoadDatasetOptions, std::string>> bad{
      {LoadDatasetOptions().test_fraction(0), "test fraction must lie in (0, 1), got 0"},
      {LoadDatasetOptions().test_fraction(1), "test fraction must lie in (0, 1), got 1"},
      {LoadDatasetOptions().test_fraction(-0.5), "got -0.5"},
      {LoadDatasetOptions().test_fraction(0.3).test_data(file),
       "test fraction 0.3 and test data '" + file + "' are alternatives"},
      {LoadDatasetOptions().classes(3), "classes 3 needs classification"},
      {LoadDatasetOptions().dtype(torch::kFloat16), "dtype must be float32 or float64"},
  };
  for (const auto& [options, expected] : bad) {
    const auto message = error_of([&] { load_dataset(file, options); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { load_dataset(path("none.csv")); }).find("no such file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_dataset(dir_.string()); }).find("it is a folder"),
            std::string::npos);
}

TEST_F(DataFile, NpyInEveryLayoutReadsTheSameTable) {
  for (const auto* name : {"table.npy", "table_float32.npy", "table_fortran.npy",
                           "table_big_endian.npy", "table_v2.npy", "table_v3.npy"}) {
    const auto loaded = load_dataset(fixture(name), LoadDatasetOptions().dtype(torch::kFloat64));
    EXPECT_EQ(loaded.format, DataFormat::kNpy) << name;
    EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"0", "1", "2"})) << name;
    EXPECT_TRUE(torch::equal(all_rows(loaded.data), table())) << name;
  }
  const auto loaded =
      load_dataset(fixture("table_fortran.npy"), LoadDatasetOptions().inputs("3,1").targets("0"));
  EXPECT_NE(loaded.description.find("NumPy .npy, float64 (12, 4) (Fortran order)"),
            std::string::npos)
      << loaded.description;
  const auto x = torch::cat({loaded.data.train_input, loaded.data.test_input});
  const auto order = std::get<1>(x.select(1, 0).sort());
  EXPECT_TRUE(torch::equal(
      x.index_select(0, order),
      torch::stack({table().select(1, 3), table().select(1, 1)}, 1).to(torch::kFloat32)));
}

TEST_F(DataFile, NpyOfEveryIntegerTypeAndByteOrder) {
  for (const auto* type :
       {"i1", "u1", "le_i2", "be_i2", "le_i4", "be_i4", "le_i8", "be_i8", "le_u2", "be_u2", "le_u4",
        "be_u4", "le_u8", "be_u8", "le_f4", "be_f4"}) {
    const auto name = "small_" + std::string(type) + ".npy";
    const auto loaded = load_dataset(fixture(name), LoadDatasetOptions().dtype(torch::kFloat64));
    EXPECT_TRUE(torch::equal(all_rows(loaded.data), small())) << name;
  }
  const auto loaded = load_dataset(fixture("small_bool.npy"));
  EXPECT_TRUE(torch::equal(
      all_rows(loaded.data),
      torch::tensor({0.f, 1.f, 0.f, 1.f, 0.f, 1.f, 0.f, 1.f, 0.f, 1.f}).reshape({5, 2})));
}

TEST_F(DataFile, BadNpyIsOneLineNamingTheFile) {
  const auto table_bytes = read_bytes(fixture("table.npy"));
  const std::vector<double> values = {1, 2, 3, 4, 5, std::nan(""), 7, 8};
  const std::vector<std::pair<std::string, std::string>> bad{
      {table_bytes.substr(0, table_bytes.size() - 8),
       "the header's shape (12, 4) of float64 needs 384 bytes of data, the file holds 376 after "
       "the header (truncated)"},
      {table_bytes + "x", "the file holds 385 after the header (corrupt)"},
      {table_bytes.substr(0, 40), "a .npy header of 118 bytes in a file of 40"},
      {npy_bytes("<f8", "(4, 2)", doubles(values)),
       "x.npy[2, 1]: not a finite number (NaN and Inf are refused) (value 'nan')"},
      {npy_bytes("<f8", "(2, 2, 2)", doubles(values)),
       "an array of shape (2, 2, 2); a 2-D array (rows, columns) or a 1-D one (one column)"},
      {npy_bytes("<f2", "(4,)", std::string(8, '\0')),
       "an array of dtype '<f2', which is not read"},
      {npy_bytes("<U3", "(4,)", std::string(48, '\0')), "dtype '<U3'"},
      {npy_bytes("<f8", "(99999999999, 99999999999)", ""), "needs more than 2^64 bytes"},
      {npy_bytes("<f8", "(999999999999999999999999, 1)", ""), "a dimension too large"},
      {npy_bytes("<f8", "(-1, 2)", ""), "a dimension expected at character"},
      {"\x93NUMPY\x04", "too short for its header"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10) + std::string(16, ' '),
       ".npy format version 4.0, which is not read"},
  };
  for (const auto& [bytes, expected] : bad) {
    const auto file = write("x.npy", bytes);
    const auto message = error_of([&] { load_dataset(file); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(file), std::string::npos) << message;
  }
  // A structured dtype's descr is a list.
  auto header = std::string("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }");
  const auto structured = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) +
                          '\0' + header + std::string(8, 'x');
  const auto file = write("s.npy", structured);
  EXPECT_NE(error_of([&] { load_dataset(file); }).find("a structured dtype"), std::string::npos);
}

TEST_F(DataFile, NpzOfXAndYStoredOrCompressed) {
  for (const auto* name : {"xy.npz", "xy_compressed.npz"}) {
    const auto loaded = load_dataset(fixture(name), LoadDatasetOptions().dtype(torch::kFloat64));
    EXPECT_EQ(loaded.format, DataFormat::kNpz) << name;
    EXPECT_EQ(loaded.input_names, (std::vector<std::string>{"x0", "x1", "x2"}));
    EXPECT_EQ(loaded.target_names, (std::vector<std::string>{"y0"}));
    EXPECT_EQ(loaded.train_rows + loaded.test_rows, 12);
    EXPECT_TRUE(torch::equal(all_rows(loaded.data), table())) << name;
  }
  const auto one = load_dataset(fixture("one_array.npz"), LoadDatasetOptions().targets("0"));
  EXPECT_NE(one.description.find("one array 'arr_0' float64 (12, 4)"), std::string::npos)
      << one.description;
  EXPECT_EQ(one.inputs(), 3);
  // A 1-D array is one column: a target without inputs.
  EXPECT_NE(error_of([&] {
              load_dataset(fixture("labels_1d.npy"));
            }).find("labels_1d.npy: 1 column, so no inputs besides the target"),
            std::string::npos);
  const auto message =
      error_of([&] { load_dataset(fixture("xy.npz"), LoadDatasetOptions().inputs("0")); });
  EXPECT_NE(message.find("inputs '0' does not apply to " + fixture("xy.npz") +
                         ": it holds arrays x and y"),
            std::string::npos)
      << message;
}

TEST_F(DataFile, NpzAndTorchFilesOfPykansKeysBringTheirOwnSplit) {
  const auto loaded =
      load_dataset(fixture("pykan.npz"), LoadDatasetOptions().dtype(torch::kFloat64));
  EXPECT_EQ(loaded.train_rows, 8);
  EXPECT_EQ(loaded.test_rows, 4);
  EXPECT_TRUE(torch::equal(loaded.data.train_input, table().slice(0, 0, 8).slice(1, 0, 3)));
  EXPECT_TRUE(torch::equal(loaded.data.test_label, table().slice(0, 8).slice(1, 3)));

  const std::string pt = std::string(KAN_REFERENCE_DIR) + "/create_dataset.pt";
  const auto torch_file = load_dataset(pt);
  EXPECT_EQ(torch_file.format, DataFormat::kTorch);
  EXPECT_EQ(torch_file.train_rows, 64);
  EXPECT_EQ(torch_file.test_rows, 32);
  EXPECT_EQ(torch_file.input_names, (std::vector<std::string>{"x0", "x1"}));
  EXPECT_NE(torch_file.description.find("pykan's create_dataset dict (torch.save)"),
            std::string::npos);
  for (const auto& options : {LoadDatasetOptions().test_fraction(0.5),
                              LoadDatasetOptions().test_data(fixture("table.npy"))}) {
    const auto message = error_of([&] { load_dataset(pt, options); });
    EXPECT_NE(message.find("holds its own test set"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] {
              load_dataset(pt, LoadDatasetOptions().targets("1"));
            }).find("targets '1' does not apply to"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_dataset(fixture("table.npy"), LoadDatasetOptions().test_data(pt));
            }).find("holds a whole dataset"),
            std::string::npos);
  // A dict missing a key, and one with a NaN.
  const auto x = torch::rand({4, 2}), y = torch::rand({4, 1});
  write_named_tensors(path("missing.pt"), {{"train_input", x}, {"train_label", y}});
  EXPECT_NE(error_of([&] {
              load_dataset(path("missing.pt"));
            }).find("no tensor 'test_input' (the file holds train_input, train_label)"),
            std::string::npos);
  auto nan = y.clone();
  nan[2][0] = std::nan("");
  write_named_tensors(
      path("nan.pt"),
      {{"train_input", x}, {"train_label", y}, {"test_input", x}, {"test_label", nan}});
  EXPECT_NE(error_of([&] {
              load_dataset(path("nan.pt"));
            }).find("nan.pt['test_label'][2, 0]: not a finite number"),
            std::string::npos);
}

TEST_F(DataFile, DamagedNpzIsOneLineNamingTheFile) {
  const auto stored = read_bytes(fixture("xy.npz"));
  const auto compressed = read_bytes(fixture("xy_compressed.npz"));
  auto flipped = [](std::string bytes, size_t at) {
    bytes[at] = static_cast<char>(bytes[at] ^ 0x40);
    return bytes;
  };
  // x.npy's data in xy.npz: after its local header (30 bytes, the name, a zip64 extra of 20) and
  // the .npy header (128 bytes).
  const std::vector<std::pair<std::string, std::string>> bad{
      {flipped(stored, 30 + 5 + 20 + 128 + 3), "corrupt: CRC-32"},
      {stored.substr(0, stored.size() / 2), "not a zip archive kanbench can read"},
      {flipped(compressed, 80), "corrupt"},
      {std::string("PK\5\6") + std::string(18, '\0'), "holds none"},
  };
  for (const auto& [bytes, expected] : bad) {
    const auto file = write("x.npz", bytes);
    const auto message = error_of([&] { load_dataset(file); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(file), std::string::npos) << message;
  }
}

TEST_F(DataFile, ClassLabelsAreInt64AndChecked) {
  std::string text = "u,v,label\n";
  for (int i = 0; i < 30; ++i)
    text += std::to_string(i) + "," + std::to_string(i * 0.5) + "," + std::to_string(i % 4) + "\n";
  const auto file = write("classes.csv", text);
  const auto loaded = load_dataset(file, LoadDatasetOptions().classification(true));
  EXPECT_EQ(loaded.classes, 4);
  EXPECT_EQ(loaded.data.train_label.scalar_type(), torch::kLong);
  EXPECT_EQ(loaded.data.train_label.dim(), 1);
  EXPECT_TRUE(torch::equal(loaded.data.train_label,
                           loaded.data.train_input.select(1, 0).to(torch::kLong) % 4));
  EXPECT_NE(loaded.description.find("class labels label (4 classes)"), std::string::npos)
      << loaded.description;
  EXPECT_EQ(load_dataset(file, LoadDatasetOptions().classification(true).classes(6)).classes, 6);
  // From an .npz of integer labels, and a 1-D array of them.
  const auto npz = load_dataset(fixture("classes.npz"), LoadDatasetOptions().classification(true));
  EXPECT_EQ(npz.classes, 3);
  EXPECT_TRUE(torch::equal(
      npz.data.train_label,
      ((npz.data.train_input.select(1, 0).to(torch::kFloat64) + 3) * 2).round().to(torch::kLong) %
          3));

  const std::vector<std::tuple<std::string, LoadDatasetOptions, std::string>> bad{
      {"a,label\n1,0\n2,1.5\n", LoadDatasetOptions().classification(true),
       "c.csv:3:2 (column 'label'): not a class label (class labels are integers 0, 1, 2, ...) "
       "(value '1.5')"},
      {"a,label\n1,0\n2,-1\n", LoadDatasetOptions().classification(true),
       "c.csv:3:2 (column 'label'): not a class label"},
      {"a,label\n1,0\n2,3\n", LoadDatasetOptions().classification(true).classes(3),
       "c.csv:3:2 (column 'label'): class label out of range: there are 3 classes, 0 to 2 "
       "(value '3')"},
  };
  for (const auto& [csv, options, expected] : bad) {
    const auto c = write("c.csv", csv);
    const auto message = error_of([&] { load_dataset(c, options); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST_F(DataFile, ATestFileIsReadWithTheSameColumns) {
  const auto train = write("train.csv", csv_text(table(), "a,b,c,y"));
  // The test file's columns in another order: selected by name, they line up.
  const auto reordered = table()
                             .index_select(0, torch::arange(3))
                             .index_select(1, torch::tensor({3, 2, 1, 0}, torch::kLong));
  const auto test = write("test.csv", csv_text(reordered, "y,c,b,a"));
  const auto loaded = load_dataset(
      train,
      LoadDatasetOptions().inputs("a,b").targets("y").test_data(test).dtype(torch::kFloat64));
  EXPECT_EQ(loaded.train_rows, 12);
  EXPECT_EQ(loaded.test_rows, 3);
  EXPECT_TRUE(torch::equal(loaded.data.train_input, table().slice(1, 0, 2))); // file order
  EXPECT_TRUE(torch::equal(loaded.data.test_input, table().slice(0, 0, 3).slice(1, 0, 2)));
  EXPECT_TRUE(torch::equal(loaded.data.test_label, table().slice(0, 0, 3).slice(1, 3)));
  EXPECT_NE(loaded.description.find("12 train rows; test set " + test), std::string::npos)
      << loaded.description;
  // Any format: an .npy test set for CSV training data.
  const auto npy = load_dataset(write("plain.csv", csv_text(table())),
                                LoadDatasetOptions().test_data(fixture("table.npy")));
  EXPECT_EQ(npy.test_rows, 12);
  // Another column count is an error naming both files' counts.
  const auto narrow = write("narrow.csv", csv_text(table().slice(1, 0, 3)));
  const auto message =
      error_of([&] { load_dataset(train, LoadDatasetOptions().test_data(narrow)); });
  EXPECT_NE(message.find("test data '" + narrow + "': 2 inputs and 1 target, but '" + train +
                         "' has 3 and 1"),
            std::string::npos)
      << message;
}

TEST_F(DataFile, Float32OverflowIsAnErrorAndTheDeviceIsHonoured) {
  const auto file = write("big.csv", "a,b\n1,2\n3,1e39\n");
  const auto message = error_of([&] { load_dataset(file); });
  EXPECT_NE(message.find("big.csv:3:2 (column 'b'): out of float32's range (read the data as "
                         "float64) (value '1e+39')"),
            std::string::npos)
      << message;
  const auto loaded =
      load_dataset(file, LoadDatasetOptions().dtype(torch::kFloat64).device(torch::kMeta));
  EXPECT_TRUE(loaded.data.train_input.is_meta());
  EXPECT_TRUE(loaded.data.test_label.is_meta());
}

TEST_F(DataFile, CheckWidthNamesBothCounts) {
  const auto file = write("data.csv", csv_text(table(), "a,b,c,y"));
  const auto loaded = load_dataset(file);
  check_width(loaded, 3, 1);
  auto message = error_of([&] { check_width(loaded, 2, 1); });
  EXPECT_NE(message.find(file + ": the model takes 2 inputs and gives 1 output, but the data has "
                                "3 input columns (a, b, c) and 1 target column (y)"),
            std::string::npos)
      << message;
  message = error_of([&] { check_width(loaded, 3, 2); });
  EXPECT_NE(message.find("gives 2 outputs"), std::string::npos) << message;
  const auto classes =
      load_dataset(fixture("classes.npz"), LoadDatasetOptions().classification(true));
  check_width(classes, 3, 3);
  check_width(classes, 3, 5); // a class the data does not hold is fine
  message = error_of([&] { check_width(classes, 3, 2); });
  EXPECT_NE(message.find("the model takes 3 inputs and gives 2 outputs, but the data has 3 input "
                         "columns and 3 classes (one output per class)"),
            std::string::npos)
      << message;
}

TEST_F(DataFile, LargeFilesCrossEveryBufferBoundary) {
  // Rows of varying width through the reader's 1 MiB buffer, and one line longer than it.
  const int64_t rows = 60000;
  const auto values = torch::rand({rows, 5}, torch::kFloat64) * 2000 - 1000;
  const auto file = write("large.csv", csv_text(values, "a,b,c,d,e"));
  const auto loaded = load_dataset(file, LoadDatasetOptions().dtype(torch::kFloat64));
  EXPECT_EQ(loaded.train_rows + loaded.test_rows, rows);
  EXPECT_TRUE(torch::equal(all_rows(loaded.data),
                           values.index_select(0, std::get<1>(values.select(1, 0).sort()))));
  const auto wide = torch::rand({3, 100000}, torch::kFloat64);
  const auto long_lines =
      load_dataset(write("wide.csv", csv_text(wide)), LoadDatasetOptions().dtype(torch::kFloat64));
  EXPECT_EQ(long_lines.inputs(), 99999);
  EXPECT_TRUE(torch::equal(all_rows(long_lines.data),
                           wide.index_select(0, std::get<1>(wide.select(1, 0).sort()))));
}

// The bound on memory: a load's peak extra resident memory at most twice the tensors it returns
// (the file streams through a fixed buffer; rows land straight in their split).
TEST_F(DataFile, PeakMemoryStaysUnderTwiceTheTensors) {
  const auto f64 = LoadDatasetOptions().dtype(torch::kFloat64);
  load_dataset(write("warm.csv", csv_text(table())), f64); // one-time initialisation
  const auto file = write("large.csv", csv_text(torch::rand({200000, 10}, torch::kFloat64)));
  bench::PeakMemory peak(torch::kCPU);
  const auto loaded = load_dataset(file, f64);
  const auto bytes = peak.bytes();
  if (!bytes)
    GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
  const auto& d = loaded.data;
  const auto tensors = static_cast<int64_t>(d.train_input.nbytes() + d.train_label.nbytes() +
                                            d.test_input.nbytes() + d.test_label.nbytes());
  EXPECT_EQ(tensors, 200000 * 10 * 8);
  EXPECT_LE(*bytes, 2 * tensors) << "peak " << *bytes << " bytes for " << tensors;
}

TEST_F(DataFile, RowReaderStreamsCsvAndNpy) {
  const auto values = torch::rand({1000, 3}, torch::kFloat64);
  RowReader csv(write("x.csv", csv_text(values, "a,b,c")));
  EXPECT_EQ(csv.format(), DataFormat::kCsv);
  EXPECT_TRUE(csv.has_header());
  EXPECT_EQ(csv.columns(), 3);
  csv.expect_columns(3, "the model takes 3 inputs");
  std::vector<torch::Tensor> chunks;
  for (auto chunk = csv.next(300); chunk.size(0) > 0; chunk = csv.next(300))
    chunks.push_back(chunk);
  EXPECT_EQ(chunks.size(), 4u);
  EXPECT_EQ(csv.rows_read(), 1000);
  EXPECT_TRUE(torch::equal(torch::cat(chunks), values));
  const auto message = error_of([&] { csv.expect_columns(2, "the model takes 2 inputs"); });
  EXPECT_NE(message.find("x.csv:1: the header names 3 columns, but the model takes 2 inputs"),
            std::string::npos)
      << message;

  for (const auto* name : {"table.npy", "table_fortran.npy", "table_float32.npy"}) {
    RowReader npy(fixture(name));
    EXPECT_EQ(npy.format(), DataFormat::kNpy);
    EXPECT_FALSE(npy.has_header());
    const auto first = npy.next(5);
    const auto rest = npy.next(100);
    EXPECT_EQ(npy.next(100).size(0), 0);
    EXPECT_TRUE(torch::equal(torch::cat({first, rest}), table())) << name;
  }
  RowReader npy(fixture("table.npy"));
  EXPECT_NE(error_of([&] {
              npy.expect_columns(2, "the model takes 2 inputs");
            }).find("table.npy: an array of 4 columns, but the model takes 2 inputs"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              RowReader reader(fixture("xy.npz"));
            }).find("is an .npz archive; rows are read from a CSV file or a .npy array"),
            std::string::npos);
}

// No byte sequence crashes a reader: damaged copies of every fixture are each refused with a
// c10::Error (or read, where the damage leaves a valid file).
TEST_F(DataFile, DamagedFilesAreRefusedWithoutCrashing) {
  std::mt19937_64 random(1);
  std::vector<std::string> originals;
  for (const auto* name : {"table.npy", "table_fortran.npy", "xy.npz", "xy_compressed.npz",
                           "pykan.npz", "one_array.npz"})
    originals.push_back(read_bytes(fixture(name)));
  originals.push_back(csv_text(table(), "a,b,\"c\",y"));
  originals.push_back(read_bytes(std::string(KAN_REFERENCE_DIR) + "/create_dataset.pt"));
  int refused = 0, read = 0;
  for (int trial = 0; trial < 600; ++trial) {
    auto bytes = originals[trial % originals.size()];
    switch (random() % 4) {
    case 0: // truncated
      bytes.resize(random() % (bytes.size() + 1));
      break;
    case 1: // a few bytes changed
      for (int k = 0; k < 1 + static_cast<int>(random() % 4); ++k)
        bytes[random() % bytes.size()] = static_cast<char>(random());
      break;
    case 2: // a byte changed to 0xFF or 0x00 (sizes and counts at their extremes)
      bytes[random() % bytes.size()] = random() % 2 ? '\xFF' : '\0';
      break;
    default: // a slice of random bytes
      for (size_t k = random() % bytes.size(), end = std::min(bytes.size(), k + 16); k < end; ++k)
        bytes[k] = static_cast<char>(random());
    }
    const auto file = write("fuzz", bytes);
    try {
      load_dataset(file, LoadDatasetOptions().classification(trial % 7 == 0));
      ++read;
    } catch (const c10::Error& e) {
      EXPECT_EQ(e.msg().find('\n'), std::string::npos) << e.msg();
      ++refused;
    }
    try {
      RowReader reader(file);
      while (reader.next(7).size(0) > 0) {
      }
    } catch (const c10::Error&) {
    }
  }
  EXPECT_GT(refused, 100);
  EXPECT_EQ(read + refused, 600);
}

} // namespace
} // namespace kan
