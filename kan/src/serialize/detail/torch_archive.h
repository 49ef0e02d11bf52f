#pragma once
// The one reader of zip archives with a pickle and tensor records: Python's torch.save files
// (pykan's states, its datasets) and LibTorch's serialize archives (kanbench's checkpoints). A file
// from anywhere is untrusted: everything is checked against limits and against the archive's
// actual records before anything is allocated from it, and no pickled code is ever run.

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kan::detail {

/// One unpickled Python object. Values belong to their TorchArchive, which frees them one by one:
/// no recursion, however deep the nesting or cyclic the references.
struct PickleValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTensor,
    kTuple,
    kList,
    kDict,
    kGlobal, ///< a class or function named by the pickle ("module.name" in text)
    kObject, ///< an instance of a LibTorch serialize module class: its attributes in entries
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text; ///< a string; a global's or an object's class name
  torch::Tensor tensor;
  std::vector<PickleValue*> items;                            ///< tuple, list
  std::vector<std::pair<PickleValue*, PickleValue*>> entries; ///< dict or object, in order
  size_t depth = 1; ///< containers nested in it, counted when it was built, plus one

  /// The entry of a dict or object whose key is the string `key`; nullptr where there is none.
  const PickleValue* find(const std::string& key) const;
};

/// "None", "a tensor", "a dict", ...: what a message calls a value of that kind.
const char* kind_name(PickleValue::Kind kind);

/// What an archive may hold before it is refused as hostile. The defaults exceed what pykan and
/// kanbench write by orders of magnitude (their pickles nest fewer than 10 deep and hold
/// kilobytes: tensor data lives in records of their own).
struct TorchArchiveLimits {
  size_t max_depth = 100;
  size_t max_values = 1'000'000;
  uint64_t max_pickle_bytes = uint64_t{64} << 20;
};

/// A torch.save or LibTorch archive, read whole and validated: its pickle (data.pkl) within the
/// limits, every tensor's storage record present and as large as the pickle says, every tensor
/// inside its storage and holding no more elements than it (an expanded view of a small record
/// would let a small file demand any amount of memory downstream). Tensors are CPU views of the
/// storages, shared as the file shares them (as torch.load does). Any problem is a c10::Error
/// naming the file and, for the pickle, the byte offset.
class TorchArchive {
public:
  explicit TorchArchive(const std::string& path, const TorchArchiveLimits& limits = {});
  ~TorchArchive();
  TorchArchive(TorchArchive&&) noexcept;
  TorchArchive& operator=(TorchArchive&&) noexcept;

  /// The pickled object (never null).
  const PickleValue& root() const { return *root_; }
  const std::string& path() const { return path_; }
  /// The bytes of every tensor storage the archive holds: what a model read from it can fill.
  int64_t storage_bytes() const { return storage_bytes_; }
  /// A TorchScript archive's tensor constants (constants.pkl), checked like root(); nullptr where
  /// the archive has none.
  const PickleValue* constants() const { return constants_; }
  /// Whether the archive holds TorchScript code (code/...): LibTorch archives and TorchScript
  /// modules do, torch.save files do not.
  bool has_code() const { return has_code_; }

private:
  std::string path_;
  std::vector<std::unique_ptr<PickleValue>> values_;
  PickleValue* root_ = nullptr;
  PickleValue* constants_ = nullptr;
  int64_t storage_bytes_ = 0;
  bool has_code_ = false;
};

/// Whether a file holding `stored_bytes` of tensors can fill a model its configuration says
/// needs `implied_bytes`: loaders ask before allocating the model, so that a corrupt or hostile
/// width is refused at the size of the file. The slack covers tensors a file may lack (older
/// formats' identity affine parameters, buffers rebuilt on load).
inline bool stored_bytes_cover(int64_t implied_bytes, int64_t stored_bytes) {
  return implied_bytes / 2 <= stored_bytes + (int64_t{1} << 20);
}

} // namespace kan::detail
