#pragma once
// Numeric CSV files, one row at a time, without LibTorch: the one CSV parser behind
// kan::load_dataset and kan::RowReader (kanbench predict). Errors are c10::Error, one line each,
// "FILE:LINE:COLUMN: problem (value '...')" (docs/formats.md, "Data files").

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kan::detail {

/// What the first non-blank line of a CSV file says about the whole file.
struct CsvLayout {
  /// ',', ';' or '\t': a tab when the first line holds one, else a semicolon when it holds one
  /// (decimal commas make commas ambiguous), else a comma.
  char delimiter = ',';
  /// Line (1-based) of the first non-blank line; 0 for a file without one.
  int64_t first_line = 0;
  /// Whether that line was taken as a header: one of its cells is neither empty nor a number.
  bool header = false;
  /// Cells per row, as the first line has them; 0 for a file without a non-blank line.
  int64_t columns = 0;
  /// The header's cells (unquoted, blanks trimmed); empty without a header.
  std::vector<std::string> names;
};

/// Reads the rows of a numeric CSV file a line at a time through a fixed buffer (a line may not
/// exceed kMaxLineBytes), parsing each selected cell with std::from_chars. Cells may be quoted
/// ("1.5"); blanks around them, CRLF line ends and a UTF-8 byte order mark are accepted; blank
/// lines may come before the first row and end the file, but not separate rows. Every value must be
/// a finite double.
class CsvReader {
public:
  static constexpr size_t kMaxLineBytes = size_t{64} << 20;

  /// Opens `path` and reads its first non-blank line (layout()); an unreadable path is an error.
  explicit CsvReader(std::string path);
  ~CsvReader();
  CsvReader(const CsvReader&) = delete;
  CsvReader& operator=(const CsvReader&) = delete;

  const std::string& path() const { return path_; }
  const CsvLayout& layout() const { return layout_; }

  /// The columns next() parses: values[i] receives column columns[i] (0-based, each below
  /// layout().columns, none twice); the other cells are only counted. Default: all, in order.
  void select(const std::vector<int64_t>& columns);

  /// Parses the selected cells of the next row into `values`; false at the end of the file.
  bool next(double* values);

  /// The line (1-based) of the row next() returned last.
  int64_t line() const { return line_; }
  /// "PATH:LINE:COLUMN" of `column` (0-based; printed from 1, as editors count) in that row.
  std::string where(int64_t column) const;
  /// " (column 'NAME')" when the file has a header, else "": for messages about a cell.
  std::string column_name(int64_t column) const;

  /// The rows of the file (its non-blank lines but the header), counted in a pass of its own
  /// that parses no number; errors in rows are next()'s to report.
  int64_t count_rows() const;

private:
  class Lines;
  const char* parse_cell(const char* p, const char* end, int64_t column, double& value);
  [[noreturn]] void fail_cell(int64_t column, const char* cell, const char* end,
                              const std::string& problem) const;

  std::string path_;
  CsvLayout layout_;
  std::unique_ptr<Lines> lines_;
  std::vector<int64_t> slots_; // per column: where next() stores it, -1: not stored
  int64_t line_ = 0;
  int64_t blank_line_ = 0; // the first blank line since the last row; 0: none
};

} // namespace kan::detail
