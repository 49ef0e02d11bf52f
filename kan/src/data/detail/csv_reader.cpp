#include "data/detail/csv_reader.h"

#include "kan/io/text.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace kan::detail {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

bool is_blank_char(char c, char delimiter) {
  return c == ' ' || c == '\r' || (c == '\t' && delimiter != '\t');
}

bool is_blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// The end of the cell that starts at p: the next delimiter outside double quotes ("" inside
// quotes is a quote), or the end of the line.
const char* cell_end(const char* p, const char* end, char delimiter) {
  while (p < end && is_blank_char(*p, delimiter))
    ++p;
  if (p < end && *p == '"') {
    for (++p; p < end; ++p) {
      if (*p != '"')
        continue;
      if (p + 1 < end && p[1] == '"') {
        ++p;
        continue;
      }
      ++p;
      break;
    }
  }
  const void* found = std::memchr(p, delimiter, static_cast<size_t>(end - p));
  return found ? static_cast<const char*>(found) : end;
}

// A cell's text: blanks around it trimmed, then one pair of enclosing quotes removed ("" -> ").
std::string cell_text(const char* p, const char* end, char delimiter) {
  while (p < end && is_blank_char(*p, delimiter))
    ++p;
  while (end > p && is_blank_char(end[-1], delimiter))
    --end;
  if (end - p >= 2 && *p == '"' && end[-1] == '"') {
    std::string text;
    for (const char* q = p + 1; q < end - 1; ++q) {
      text += *q;
      if (*q == '"' && q + 1 < end - 1 && q[1] == '"')
        ++q;
    }
    return text;
  }
  return std::string(p, end);
}

enum class Number { kOk, kEmpty, kNotANumber, kOutOfRange, kNotFinite };

// The whole of `text` as a double: an optional '+', then what std::from_chars reads. A value too
// small for a double reads as strtod rounds it (0 or subnormal); too large is out of range.
Number parse_number(std::string_view text, double& value) {
  if (text.empty())
    return Number::kEmpty;
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+')
    text.remove_prefix(1);
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (stop != end || error == std::errc::invalid_argument)
    return Number::kNotANumber;
  if (error == std::errc::result_out_of_range) {
    const std::string copy(text);
    errno = 0;
    value = std::strtod(copy.c_str(), nullptr);
    if (std::isinf(value))
      return Number::kOutOfRange;
  }
  return std::isfinite(value) ? Number::kOk : Number::kNotFinite;
}

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

} // namespace

// The lines of a file through one buffer that grows only for a line longer than the buffer.
class CsvReader::Lines {
public:
  explicit Lines(const std::string& path) : path_(path) {
    std::error_code ec;
    TORCH_CHECK(!std::filesystem::is_directory(path, ec), "cannot read '", path,
                "': it is a folder");
    file_ = std::fopen(path.c_str(), "rb");
    TORCH_CHECK(file_ != nullptr, "cannot read '", path, "': ", std::strerror(errno));
    buffer_.resize(kChunkBytes);
  }
  ~Lines() { std::fclose(file_); }
  Lines(const Lines&) = delete;
  Lines& operator=(const Lines&) = delete;

  // The next line without its '\n' (and, on line 1, without a UTF-8 byte order mark); false at
  // the end of the file.
  bool next(std::string_view& line) {
    for (;;) {
      const char* begin = buffer_.data() + begin_;
      const void* newline = std::memchr(begin, '\n', end_ - begin_);
      if (newline != nullptr || (eof_ && begin_ < end_)) {
        const char* stop = newline ? static_cast<const char*>(newline) : buffer_.data() + end_;
        line = std::string_view(begin, static_cast<size_t>(stop - begin));
        begin_ = newline ? static_cast<size_t>(stop - buffer_.data()) + 1 : end_;
        if (++number_ == 1 && line.substr(0, 3) == "\xEF\xBB\xBF")
          line.remove_prefix(3);
        return true;
      }
      if (eof_)
        return false;
      fill();
    }
  }

private:
  void fill() {
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buffer_.size()) {
      TORCH_CHECK(buffer_.size() < kMaxLineBytes, path_, ":", number_ + 1, ": a line longer than ",
                  kMaxLineBytes >> 20, " MiB (not a CSV file of numbers?)");
      buffer_.resize(std::min(buffer_.size() * 2, kMaxLineBytes));
    }
    const size_t read = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_);
    TORCH_CHECK(read > 0 || !std::ferror(file_), "cannot read '", path_, "' after line ", number_,
                ": ", std::strerror(errno));
    end_ += read;
    eof_ = read == 0;
  }

  const std::string& path_;
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0; // the unread bytes of buffer_
  bool eof_ = false;
  int64_t number_ = 0; // lines returned
};

CsvReader::CsvReader(std::string path) : path_(std::move(path)) {
  // The layout from the first non-blank line, then the file again from its start for next().
  {
    Lines lines(path_);
    std::string_view line;
    for (int64_t number = 1; lines.next(line); ++number) {
      if (is_blank_line(line))
        continue;
      layout_.first_line = number;
      break;
    }
    if (layout_.first_line > 0) {
      auto& d = layout_.delimiter;
      bool quoted = false;
      bool tab = false, semicolon = false;
      for (const char c : line) {
        quoted = c == '"' ? !quoted : quoted;
        tab = tab || (!quoted && c == '\t');
        semicolon = semicolon || (!quoted && c == ';');
      }
      d = tab ? '\t' : semicolon ? ';' : ',';
      std::vector<std::string> cells;
      const char* p = line.data();
      const char* end = p + line.size();
      while (end > p && end[-1] == '\r')
        --end;
      for (;;) {
        const char* stop = cell_end(p, end, d);
        cells.push_back(cell_text(p, stop, d));
        if (stop == end)
          break;
        p = stop + 1;
      }
      double ignored = 0;
      layout_.header = std::any_of(cells.begin(), cells.end(), [&](const std::string& cell) {
        return parse_number(cell, ignored) == Number::kNotANumber;
      });
      layout_.columns = static_cast<int64_t>(cells.size());
      if (layout_.header)
        layout_.names = std::move(cells);
    }
  }
  lines_ = std::make_unique<Lines>(path_);
  slots_.resize(layout_.columns);
  for (int64_t c = 0; c < layout_.columns; ++c)
    slots_[c] = c;
}

CsvReader::~CsvReader() = default;

void CsvReader::select(const std::vector<int64_t>& columns) {
  std::fill(slots_.begin(), slots_.end(), -1);
  for (size_t i = 0; i < columns.size(); ++i) {
    const int64_t c = columns[i];
    TORCH_INTERNAL_ASSERT(c >= 0 && c < layout_.columns && slots_[c] < 0, "column ", c,
                          " selected twice or out of range");
    slots_[c] = static_cast<int64_t>(i);
  }
}

std::string CsvReader::where(int64_t column) const {
  return path_ + ":" + std::to_string(line_) + ":" + std::to_string(column + 1);
}

std::string CsvReader::column_name(int64_t column) const {
  if (!layout_.header || column >= static_cast<int64_t>(layout_.names.size()))
    return "";
  return " (column '" + io::elided(layout_.names[column]) + "')";
}

void CsvReader::fail_cell(int64_t column, const char* cell, const char* end,
                          const std::string& problem) const {
  const auto text = std::string_view(cell, static_cast<size_t>(end - cell));
  TORCH_CHECK(false, where(column), column_name(column), ": ", problem, " (value '",
              io::elided(text), "')");
}

// Parses the cell of `column` that starts at p; returns the delimiter after it or `end`.
const char* CsvReader::parse_cell(const char* p, const char* end, int64_t column, double& value) {
  const char d = layout_.delimiter;
  // The common case first: a plain number right up to the delimiter.
  if (p < end && (std::isdigit(static_cast<unsigned char>(*p)) || *p == '-' || *p == '.')) {
    const auto [stop, error] = std::from_chars(p, end, value);
    if (error == std::errc() && (stop == end || *stop == d) && std::isfinite(value))
      return stop;
  }
  const char* stop = cell_end(p, end, d);
  const auto text = cell_text(p, stop, d);
  switch (parse_number(text, value)) {
  case Number::kOk:
    return stop;
  case Number::kEmpty:
    fail_cell(column, p, stop, "empty cell");
  case Number::kOutOfRange:
    fail_cell(column, p, stop, "out of the range of a double");
  case Number::kNotFinite:
    fail_cell(column, p, stop, "not a finite number (NaN and Inf are refused)");
  case Number::kNotANumber:
    break;
  }
  fail_cell(column, p, stop,
            d == ';' && text.find(',') != std::string::npos
                ? "not a number (decimal commas are not read: write 1.5, not 1,5)"
                : "not a number");
}

bool CsvReader::next(double* values) {
  std::string_view line;
  while (lines_->next(line)) {
    ++line_;
    if (is_blank_line(line)) {
      if (line_ > layout_.first_line) // blank lines before the first row shift nothing
        blank_line_ = blank_line_ ? blank_line_ : line_;
      continue;
    }
    TORCH_CHECK(blank_line_ == 0, path_, ":", blank_line_,
                ": blank line between rows (blank lines may only end the file)");
    if (line_ == layout_.first_line && layout_.header)
      continue;
    const char* p = line.data();
    const char* end = p + line.size();
    while (end > p && end[-1] == '\r')
      --end;
    const char* row = p;
    const int64_t columns = layout_.columns;
    for (int64_t c = 0;; ++c) {
      if (c == columns) {
        const auto why = layout_.header ? "the header (line " + std::to_string(layout_.first_line) +
                                              ") names " + plural(columns, "column")
                                        : "line " + std::to_string(layout_.first_line) + " has " +
                                              plural(columns, "cell");
        fail_cell(c, p, cell_end(p, end, layout_.delimiter), "one cell too many: " + why);
      }
      const int64_t slot = slots_[c];
      p = slot < 0 ? cell_end(p, end, layout_.delimiter) : parse_cell(p, end, c, values[slot]);
      if (p == end) {
        if (c + 1 < columns) {
          const auto why = layout_.header
                               ? "the header (line " + std::to_string(layout_.first_line) +
                                     ") names " + std::to_string(columns)
                               : "line " + std::to_string(layout_.first_line) + " has " +
                                     std::to_string(columns);
          TORCH_CHECK(false, where(c + 1), ": missing cell: the row has ", plural(c + 1, "cell"),
                      ", ", why, " (row '", io::elided(std::string_view(row, end - row)), "')");
        }
        break;
      }
      ++p;
    }
    return true;
  }
  return false;
}

int64_t CsvReader::count_rows() const {
  Lines lines(path_);
  std::string_view line;
  int64_t rows = 0;
  while (lines.next(line))
    rows += !is_blank_line(line);
  return rows - (layout_.header ? 1 : 0);
}

} // namespace kan::detail
