#include "data/detail/npy_reader.h"

#include "kan/io/text.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

namespace kan::detail {
namespace {

// NumPy itself refuses headers over 10000 bytes unless told otherwise; this leaves room.
constexpr uint32_t kMaxHeaderBytes = uint32_t{1} << 20;
constexpr size_t kMaxDims = 32;
constexpr int64_t kChunkElements = int64_t{1} << 16;

bool little_endian_machine() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// The header dict, a Python literal such as
//   {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
// parsed as strictly as NumPy writes it (Python 2's 3L integers too).
class DictParser {
public:
  DictParser(const std::string& text, const std::string& name) : text_(text), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    bool descr = false, order = false, shape = false;
    expect('{');
    while (!take('}')) {
      const auto key = string_literal();
      expect(':');
      if (key == "descr") {
        fail_unless(!descr, "'descr' twice");
        skip_blanks();
        fail_unless(pos_ < text_.size() && text_[pos_] != '[',
                    "a structured dtype (a 'descr' list), which is not read");
        h.descr = string_literal();
        descr = true;
      } else if (key == "fortran_order") {
        fail_unless(!order, "'fortran_order' twice");
        h.fortran_order = boolean();
        order = true;
      } else if (key == "shape") {
        fail_unless(!shape, "'shape' twice");
        h.shape = tuple();
        shape = true;
      } else {
        fail_unless(false, "an unknown key '", io::elided(key), "'");
      }
      if (!take(',')) {
        expect('}');
        break;
      }
    }
    fail_unless(descr && order && shape, "no ",
                !descr   ? "'descr'"
                : !order ? "'fortran_order'"
                         : "'shape'");
    skip_blanks();
    fail_unless(pos_ == text_.size(), "text after the header dict");
    return h;
  }

private:
  template <typename... Args> void fail_unless(bool ok, const Args&... what) {
    TORCH_CHECK(ok, name_, ": not a .npy header kanbench reads: ", c10::str(what...), " (header '",
                io::elided(text_), "')");
  }
  void skip_blanks() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool take(char c) {
    skip_blanks();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) { fail_unless(take(c), "'", c, "' expected at character ", pos_ + 1); }
  std::string string_literal() {
    skip_blanks();
    fail_unless(pos_ < text_.size() && (text_[pos_] == '\'' || text_[pos_] == '"'),
                "a string expected at character ", pos_ + 1);
    const char quote = text_[pos_++];
    const auto end = text_.find(quote, pos_);
    fail_unless(end != std::string::npos, "an unterminated string");
    auto value = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_blanks();
    for (const auto& [word, value] : {std::pair<const char*, bool>{"True", true}, {"False", false}})
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    fail_unless(false, "True or False expected at character ", pos_ + 1);
    return false;
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> values;
    while (!take(')')) {
      skip_blanks();
      fail_unless(pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])),
                  "a dimension expected at character ", pos_ + 1);
      int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        fail_unless(value <= (std::numeric_limits<int64_t>::max() - 9) / 10,
                    "a dimension too large");
        value = value * 10 + (text_[pos_++] - '0');
      }
      if (pos_ < text_.size() && text_[pos_] == 'L')
        ++pos_;
      fail_unless(values.size() < kMaxDims, "more than ", kMaxDims, " dimensions");
      values.push_back(value);
      if (!take(',')) {
        expect(')');
        break;
      }
    }
    return values;
  }

  const std::string& text_;
  const std::string& name_;
  size_t pos_ = 0;
};

uint64_t little_endian(const unsigned char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes; i-- > 0;)
    value = (value << 8) | p[i];
  return value;
}

template <typename T> double element(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return static_cast<double>(value);
}

} // namespace

int64_t NpyHeader::numel() const {
  int64_t n = 1;
  for (const auto d : shape)
    n *= d; // read_npy_header checked that the product fits
  return n;
}

std::string NpyHeader::shape_text() const {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

std::string NpyHeader::dtype_name() const {
  if (kind == 'b')
    return "bool";
  return std::string(kind == 'f'   ? "float"
                     : kind == 'i' ? "int"
                                   : "uint") +
         std::to_string(itemsize * 8);
}

NpyHeader read_npy_header(ByteSource& source) {
  const auto& name = source.name();
  unsigned char fixed[12] = {};
  const auto size = source.size();
  TORCH_CHECK(size >= 10, name, ": not a .npy file (", size, " bytes, too short for its header)");
  read_exactly(source, reinterpret_cast<char*>(fixed), 10, "the .npy header");
  TORCH_CHECK(std::memcmp(fixed, "\x93NUMPY", 6) == 0, name,
              ": not a .npy file (it does not start with \\x93NUMPY)");
  const int major = fixed[6];
  TORCH_CHECK(major >= 1 && major <= 3, name, ": .npy format version ", major, ".", int(fixed[7]),
              ", which is not read (versions 1, 2 and 3 are)");
  uint64_t header_bytes = little_endian(fixed + 8, 2);
  uint64_t offset = 10;
  if (major >= 2) {
    read_exactly(source, reinterpret_cast<char*>(fixed + 10), 2, "the .npy header");
    header_bytes = little_endian(fixed + 8, 4);
    offset = 12;
  }
  TORCH_CHECK(header_bytes <= kMaxHeaderBytes && header_bytes <= size - offset, name,
              ": a .npy header of ", header_bytes, " bytes in a file of ", size,
              " (corrupt or truncated)");
  std::string text(header_bytes, '\0');
  read_exactly(source, text.data(), header_bytes, "the .npy header");
  offset += header_bytes;

  auto header = DictParser(text, name).parse();
  header.data_offset = offset;
  // The dtype: a byte order ('<', '>', '|' or '='), a kind, a size in bytes.
  const auto& d = header.descr;
  const bool ordered = d.size() == 3 && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=');
  const char kind = ordered ? d[1] : '?';
  const int itemsize = ordered ? d[2] - '0' : 0;
  const bool known = (kind == 'f' && (itemsize == 4 || itemsize == 8)) ||
                     ((kind == 'i' || kind == 'u') &&
                      (itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8)) ||
                     (kind == 'b' && itemsize == 1);
  TORCH_CHECK(known, name, ": an array of dtype '", io::elided(d),
              "', which is not read (float32, float64, int8 to int64, uint8 to uint64 and bool "
              "are; save float16 as float32)");
  header.kind = kind;
  header.itemsize = itemsize;
  header.swap =
      itemsize > 1 && d[0] != '=' && d[0] != '|' && (d[0] == '<') != little_endian_machine();
  // The data must be exactly what the shape says: checked before any allocation of that size.
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto dim : header.shape) {
    overflow = overflow || (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / dim);
    numel = overflow ? numel : numel * dim;
  }
  const uint64_t data_bytes = size - offset;
  TORCH_CHECK(!overflow && numel * itemsize == data_bytes, name, ": the header's shape ",
              header.shape_text(), " of ", header.dtype_name(), " needs ",
              overflow ? std::string("more than 2^64") : std::to_string(numel * itemsize),
              " bytes of data, the file holds ", data_bytes, " after the header ",
              data_bytes < numel * itemsize ? "(truncated)" : "(corrupt)");
  return header;
}

NpyElements::NpyElements(ByteSource& source, NpyHeader header)
    : source_(source), header_(std::move(header)) {}

int64_t NpyElements::read(double* out, int64_t n) {
  n = std::min({n, kChunkElements, header_.numel() - position_});
  if (n <= 0)
    return 0;
  const int size = header_.itemsize;
  raw_.resize(static_cast<size_t>(n) * size);
  read_exactly(source_, raw_.data(), raw_.size(), "the array's data");
  char* p = raw_.data();
  if (header_.swap)
    for (int64_t i = 0; i < n; ++i)
      std::reverse(p + i * size, p + (i + 1) * size);
  for (int64_t i = 0; i < n; ++i, p += size) {
    switch (header_.kind * 16 + size) {
    case 'f' * 16 + 4:
      out[i] = element<float>(p);
      break;
    case 'f' * 16 + 8:
      out[i] = element<double>(p);
      break;
    case 'i' * 16 + 1:
      out[i] = element<int8_t>(p);
      break;
    case 'i' * 16 + 2:
      out[i] = element<int16_t>(p);
      break;
    case 'i' * 16 + 4:
      out[i] = element<int32_t>(p);
      break;
    case 'i' * 16 + 8:
      out[i] = element<int64_t>(p);
      break;
    case 'b' * 16 + 1:
      out[i] = *p != 0 ? 1.0 : 0.0;
      break;
    case 'u' * 16 + 1:
      out[i] = element<uint8_t>(p);
      break;
    case 'u' * 16 + 2:
      out[i] = element<uint16_t>(p);
      break;
    case 'u' * 16 + 4:
      out[i] = element<uint32_t>(p);
      break;
    case 'u' * 16 + 8:
      out[i] = element<uint64_t>(p);
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "dtype ", header_.descr, " passed the header check");
    }
  }
  position_ += n;
  return n;
}

} // namespace kan::detail
