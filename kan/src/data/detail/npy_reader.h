#pragma once
// NumPy's .npy format (format versions 1, 2 and 3), read from a ByteSource without LibTorch:
// the header checked against the bytes that follow it before anything is allocated, then the
// elements in storage order, converted to double a chunk at a time.

#include "detail/byte_source.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kan::detail {

/// What a .npy header says.
struct NpyHeader {
  std::string descr; ///< as written, e.g. "<f8"
  char kind = 'f';   ///< 'f' floating, 'i' signed, 'u' unsigned integer, 'b' bool
  int itemsize = 8;  ///< bytes per element
  bool swap = false; ///< stored in the other byte order than this machine's
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0; ///< bytes before the data (magic, version, header)

  int64_t numel() const;
  /// The shape as NumPy prints it: "(3, 4)", "(5,)", "()".
  std::string shape_text() const;
  /// "float64", "int32", "uint8", "bool", ...
  std::string dtype_name() const;
};

/// Reads and checks the header at the front of `source`: the magic string, the version, the
/// header dict ('descr', 'fortran_order', 'shape'), a dtype kanbench reads (float32, float64,
/// int8-64, uint8-64, bool; either byte order) and a data size that equals what the source holds
/// after the header. Any other byte sequence is an error naming the source.
NpyHeader read_npy_header(ByteSource& source);

/// The elements after a header, in storage order (row by row in C order, column by column in
/// Fortran order), as doubles.
class NpyElements {
public:
  NpyElements(ByteSource& source, NpyHeader header);
  /// Up to `n` further elements into `out`; how many (0: all were read).
  int64_t read(double* out, int64_t n);
  /// Elements read so far.
  int64_t position() const { return position_; }
  const NpyHeader& header() const { return header_; }

private:
  ByteSource& source_;
  NpyHeader header_;
  std::vector<char> raw_;
  int64_t position_ = 0;
};

} // namespace kan::detail
