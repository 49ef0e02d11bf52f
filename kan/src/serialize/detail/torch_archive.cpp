#include "serialize/detail/torch_archive.h"

#include "detail/zip_reader.h"

#include "kan/io/text.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

namespace kan::detail {

const PickleValue* PickleValue::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k->kind == Kind::kString && k->text == key)
      return v;
  return nullptr;
}

const char* kind_name(PickleValue::Kind kind) {
  using Kind = PickleValue::Kind;
  switch (kind) {
  case Kind::kNone:
    return "None";
  case Kind::kBool:
    return "a bool";
  case Kind::kInt:
    return "an int";
  case Kind::kFloat:
    return "a float";
  case Kind::kString:
    return "a string";
  case Kind::kTensor:
    return "a tensor";
  case Kind::kTuple:
    return "a tuple";
  case Kind::kList:
    return "a list";
  case Kind::kDict:
    return "a dict";
  case Kind::kGlobal:
    return "a class or function";
  case Kind::kObject:
    return "an object";
  }
  return "?";
}

namespace {

using Kind = PickleValue::Kind;

// LibTorch's own unpickler (torch::pickle_load, and the serialize archive's loader) reads what its
// pickler writes, but not a Python state_dict (it turns every collections.OrderedDict into None),
// it has no nesting limit (a deep pickle overflows the stack when freed), and the archive loader
// compiles the archive's TorchScript source. So pickles are read here, by a small unpickler that
// knows only the opcodes and globals torch.save and LibTorch's archives emit for tensors,
// containers and serialize modules (like Python's weights_only unpickler, it never runs code); the
// zip container is read by LibTorch (caffe2::serialize), each record's size checked first.

// The legacy storage class names both writers use for each dtype ("torch.FloatStorage").
std::optional<torch::Dtype> storage_dtype(const std::string& global) {
  static const std::map<std::string, torch::Dtype> dtypes = {
      {"torch.DoubleStorage", torch::kFloat64}, {"torch.FloatStorage", torch::kFloat32},
      {"torch.HalfStorage", torch::kFloat16},   {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kInt64},     {"torch.IntStorage", torch::kInt32},
      {"torch.ShortStorage", torch::kInt16},    {"torch.CharStorage", torch::kInt8},
      {"torch.ByteStorage", torch::kUInt8},     {"torch.BoolStorage", torch::kBool}};
  const auto found = dtypes.find(global);
  if (found == dtypes.end())
    return std::nullopt;
  return found->second;
}

// A record of the archive, read only after its size is checked against the file's: the zip's
// directory is part of the untrusted file, and LibTorch allocates whatever size it claims.
class Records {
public:
  Records(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive,
          uint64_t file_size)
      : path_(path), archive_(archive), file_size_(file_size) {}

  bool has(const std::string& name) const {
    return guarded(name, [&] { return archive_.hasRecord(name); });
  }
  // Whether any record's name starts with `prefix` ("code/").
  bool has_folder(const std::string& prefix) const {
    const auto names = guarded(prefix, [&] { return archive_.getAllRecords(); });
    return std::any_of(names.begin(), names.end(),
                       [&](const std::string& name) { return name.rfind(prefix, 0) == 0; });
  }
  size_t size(const std::string& name) const {
    const size_t size = guarded(name, [&] { return archive_.getRecordSize(name); });
    TORCH_CHECK(size <= file_size_, "'", path_, "': its record ", io::elided(name), " claims ",
                size, " bytes, more than the whole file's ", file_size_, " (truncated or corrupt)");
    return size;
  }
  // The record's bytes, `size(name)` of them. Records never overlap in a file LibTorch or
  // torch.save wrote, so all that is read is at most the file's size.
  at::DataPtr read(const std::string& name) const {
    const size_t expected = size(name);
    TORCH_CHECK(expected <= file_size_ - read_, "'", path_, "': its records would hold more than ",
                "the whole file's ", file_size_, " bytes (a record read twice?)");
    read_ += expected;
    auto [bytes, size] = guarded(name, [&] { return archive_.getRecord(name); });
    TORCH_CHECK(size == expected, "'", path_, "': its record ", io::elided(name), " holds ", size,
                " bytes, not ", expected, " (truncated or corrupt)");
    return std::move(bytes);
  }

private:
  // LibTorch's zip errors do not name the file.
  template <typename F> auto guarded(const std::string& name, F f) const -> decltype(f()) {
    try {
      return f();
    } catch (const c10::Error& e) {
      TORCH_CHECK(
          false, "'", path_, "': cannot read its record ", io::elided(name),
          " (truncated or corrupt): ", io::elided(io::first_line(e.what_without_backtrace()), 200));
      throw;
    }
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  uint64_t file_size_;
  mutable uint64_t read_ = 0;
};

// The zip archive's directory, read by kan's own checked zip reader before LibTorch's reader
// sees the file: that one allocates whatever size a record claims (its version records as soon
// as it opens the file) and inflates compressed records. torch.save and LibTorch store the
// records kanbench or LibTorch's reader reads (the pickle, the tensors, the version and
// byteorder records) uncompressed, side by side; only LibTorch's TorchScript source, which
// nothing reads, is compressed, and it is small.
void check_zip_directory(const std::string& path, uint64_t file_size) {
  constexpr uint64_t kMaxCompressedRecord = uint64_t{1} << 20;
  const ZipReader zip(path);
  uint64_t stored = 0;
  for (const auto& entry : zip.entries()) {
    const auto& name = entry.name;
    const auto slash = name.find('/');
    const auto record = slash == std::string::npos ? name : name.substr(slash + 1);
    const bool read = record == "data.pkl" || record == "constants.pkl" || record == "version" ||
                      record == "byteorder" || record.rfind("data/", 0) == 0 ||
                      record.rfind("constants/", 0) == 0 || record.rfind(".data/", 0) == 0;
    if (entry.method == 0 && entry.compressed_size == entry.size) {
      TORCH_CHECK(entry.size <= file_size - stored, "'", path,
                  "': its records claim more bytes than the whole file's ", file_size);
      stored += entry.size;
      continue;
    }
    TORCH_CHECK(!read && entry.size <= kMaxCompressedRecord, "'", path, "': its record ",
                io::elided(name), " is compressed to ", entry.compressed_size, " of ", entry.size,
                " bytes; torch.save and LibTorch store it as it is");
  }
}

class Unpickler {
public:
  // `folder`: where the pickle's tensor storages are ("data/" for data.pkl, "constants/" for a
  // TorchScript archive's constants.pkl).
  Unpickler(const std::string& path, const Records& records, const TorchArchiveLimits& limits,
            const char* data, size_t size, std::vector<std::unique_ptr<PickleValue>>& values,
            std::string folder = "data/")
      : path_(path), records_(records), limits_(limits), data_(data), size_(size), values_(values),
        folder_(std::move(folder)) {}

  PickleValue* run() {
    for (;;) {
      const auto opcode = static_cast<unsigned char>(byte());
      if (opcode == '.') // STOP
        break;
      step(opcode);
    }
    fail_unless(stack_.size() == 1, "a pickle that leaves ", stack_.size(), " values");
    fail_unless(stack_.back() != nullptr, "a pickle that leaves a MARK");
    return stack_.back();
  }

  int64_t storage_bytes() const { return storage_bytes_; }

private:
  template <typename... Args> void fail_unless(bool ok, const Args&... what) {
    TORCH_CHECK(ok, "'", path_, "': not an archive kanbench can read (", c10::str(what...),
                " at byte ", pos_, " of its pickle)");
  }

  PickleValue* make(Kind kind) {
    fail_unless(values_.size() < limits_.max_values, "more than ", limits_.max_values, " objects");
    values_.push_back(std::make_unique<PickleValue>());
    values_.back()->kind = kind;
    return values_.back().get();
  }
  // Every slot of every container counts against the object limit, so that a memoized value
  // used over and over cannot make the work quadratic in the pickle's size.
  void count_slots(size_t n) {
    slots_ += n;
    fail_unless(slots_ <= limits_.max_values, "containers of more than ", limits_.max_values,
                " entries in all");
  }
  // Puts `item` into `container`, which is then at least one level deeper than it.
  void nest(PickleValue* container, const PickleValue* item) {
    count_slots(1);
    container->depth = std::max(container->depth, item->depth + 1);
    fail_unless(container->depth <= limits_.max_depth, "containers nested more than ",
                limits_.max_depth, " deep");
  }

  char byte() {
    fail_unless(pos_ < size_, "the pickle ends early");
    return data_[pos_++];
  }
  const char* bytes(uint64_t n) {
    fail_unless(n <= size_ - pos_, "the pickle ends early");
    pos_ += n;
    return data_ + pos_ - n;
  }
  uint64_t unsigned_le(size_t n) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes(n));
    uint64_t value = 0;
    for (size_t i = n; i-- > 0;)
      value = (value << 8) | p[i];
    return value;
  }
  std::string line() {
    const char* begin = data_ + pos_;
    while (byte() != '\n') {
    }
    return {begin, static_cast<size_t>(data_ + pos_ - 1 - begin)};
  }

  PickleValue* pop() {
    fail_unless(!stack_.empty() && stack_.back() != nullptr, "an empty stack");
    auto* value = stack_.back();
    stack_.pop_back();
    return value;
  }
  PickleValue* top() {
    fail_unless(!stack_.empty() && stack_.back() != nullptr, "an empty stack");
    return stack_.back();
  }
  // The values above the last MARK (a nullptr on the stack), which is removed.
  std::vector<PickleValue*> pop_to_mark() {
    size_t mark = stack_.size();
    while (mark > 0 && stack_[mark - 1] != nullptr)
      --mark;
    fail_unless(mark > 0, "a missing MARK");
    std::vector<PickleValue*> values(stack_.begin() + static_cast<std::ptrdiff_t>(mark),
                                     stack_.end());
    stack_.resize(mark - 1);
    return values;
  }
  void push_tuple(const std::vector<PickleValue*>& items) {
    auto* tuple = make(Kind::kTuple);
    for (auto* item : items)
      nest(tuple, item);
    tuple->items = items;
    stack_.push_back(tuple);
  }
  void append(PickleValue* list, const std::vector<PickleValue*>& items) {
    fail_unless(list->kind == Kind::kList, "APPEND to ", kind_name(list->kind));
    for (auto* item : items) {
      nest(list, item);
      list->items.push_back(item);
    }
  }
  void memo_put(uint64_t index) {
    fail_unless(memo_.size() < limits_.max_values || memo_.count(index), "more than ",
                limits_.max_values, " memo entries");
    memo_[index] = top();
  }
  void memo_get(uint64_t index) {
    const auto found = memo_.find(index);
    fail_unless(found != memo_.end(), "a reference to memo entry ", index, " never stored");
    push(found->second);
  }
  void set_items(PickleValue* dict, const std::vector<PickleValue*>& pairs) {
    fail_unless(dict->kind == Kind::kDict, "SETITEMS on ", kind_name(dict->kind));
    fail_unless(pairs.size() % 2 == 0, "an odd number of dict items");
    for (size_t i = 0; i < pairs.size(); i += 2) {
      nest(dict, pairs[i]);
      nest(dict, pairs[i + 1]);
      dict->entries.emplace_back(pairs[i], pairs[i + 1]);
    }
  }
  void push(PickleValue* value) {
    fail_unless(stack_.size() < limits_.max_values, "a stack of more than ", limits_.max_values,
                " values");
    stack_.push_back(value);
  }

  void step(unsigned char opcode) {
    switch (opcode) {
    case 0x80: // PROTO
      fail_unless(static_cast<unsigned char>(byte()) <= 5, "an unknown pickle protocol");
      return;
    case 0x95: // FRAME (protocol 4): only a length hint
      bytes(8);
      return;
    case '(': // MARK
      push(nullptr);
      return;
    case 'N':
      push(make(Kind::kNone));
      return;
    case 0x88: // NEWTRUE
    case 0x89: // NEWFALSE
    {
      auto* value = make(Kind::kBool);
      value->boolean = opcode == 0x88;
      push(value);
      return;
    }
    case 'K': // BININT1
    case 'M': // BININT2
    case 'J': // BININT
    {
      const size_t n = opcode == 'K' ? 1 : opcode == 'M' ? 2 : 4;
      auto* value = make(Kind::kInt);
      value->integer = static_cast<int64_t>(unsigned_le(n));
      if (n == 4)
        value->integer = static_cast<int32_t>(value->integer);
      push(value);
      return;
    }
    case 0x8a: // LONG1: a little-endian two's complement integer of n bytes
    {
      const auto n = static_cast<size_t>(static_cast<unsigned char>(byte()));
      fail_unless(n <= 8, "an integer of ", n, " bytes");
      auto* value = make(Kind::kInt);
      const uint64_t raw = n == 0 ? 0 : unsigned_le(n);
      const bool negative = n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1;
      value->integer = static_cast<int64_t>(negative ? raw | (~uint64_t{0} << (8 * n)) : raw);
      push(value);
      return;
    }
    case 'G': // BINFLOAT: big-endian double
    {
      const auto* p = reinterpret_cast<const unsigned char*>(bytes(8));
      uint64_t bits = 0;
      for (size_t i = 0; i < 8; ++i)
        bits = (bits << 8) | p[i];
      auto* value = make(Kind::kFloat);
      std::memcpy(&value->real, &bits, sizeof bits);
      push(value);
      return;
    }
    case 'X':  // BINUNICODE
    case 0x8c: // SHORT_BINUNICODE
    case 0x8d: // BINUNICODE8
    {
      // bytes() checks the length against what is left before anything is allocated.
      const uint64_t n = unsigned_le(opcode == 'X' ? 4 : opcode == 0x8c ? 1 : 8);
      const char* text = bytes(n);
      auto* value = make(Kind::kString);
      value->text.assign(text, n);
      push(value);
      return;
    }
    case ')': // EMPTY_TUPLE
      push_tuple({});
      return;
    case 0x85: // TUPLE1
    case 0x86: // TUPLE2
    case 0x87: // TUPLE3
    {
      std::vector<PickleValue*> items(opcode - 0x84);
      for (size_t i = items.size(); i-- > 0;)
        items[i] = pop();
      push_tuple(items);
      return;
    }
    case 't': // TUPLE
      push_tuple(pop_to_mark());
      return;
    case ']': // EMPTY_LIST
      push(make(Kind::kList));
      return;
    case 'a': // APPEND
    {
      auto* item = pop();
      append(top(), {item});
      return;
    }
    case 'e': // APPENDS
    {
      const auto items = pop_to_mark();
      append(top(), items);
      return;
    }
    case '}': // EMPTY_DICT
      push(make(Kind::kDict));
      return;
    case 's': // SETITEM
    {
      auto* value = pop();
      auto* key = pop();
      set_items(top(), {key, value});
      return;
    }
    case 'u': // SETITEMS
    {
      const auto pairs = pop_to_mark();
      set_items(top(), pairs);
      return;
    }
    case 'q': // BINPUT
      memo_put(static_cast<unsigned char>(byte()));
      return;
    case 'r': // LONG_BINPUT
      memo_put(unsigned_le(4));
      return;
    case 0x94: // MEMOIZE
      memo_put(memo_.size());
      return;
    case 'h': // BINGET
      memo_get(static_cast<unsigned char>(byte()));
      return;
    case 'j': // LONG_BINGET
      memo_get(unsigned_le(4));
      return;
    case 'c': // GLOBAL
    {
      auto* global = make(Kind::kGlobal);
      const auto module = line();
      global->text = module + "." + line();
      push(global);
      return;
    }
    case 'Q': // BINPERSID: a tensor storage
      push(storage(pop()));
      return;
    case 'R': // REDUCE: callable(*args)
    {
      auto* args = pop();
      auto* callable = pop();
      push(call(callable, args));
      return;
    }
    case 0x81: // NEWOBJ: cls.__new__(cls, *args), a LibTorch serialize module
    {
      auto* args = pop();
      auto* cls = pop();
      fail_unless(cls->kind == Kind::kGlobal && cls->text.rfind("__torch__.", 0) == 0,
                  "an object of ", cls->kind == Kind::kGlobal ? io::elided(cls->text) : "?",
                  ", which is not a LibTorch module (kanbench runs no pickled code)");
      fail_unless(args->kind == Kind::kTuple && args->items.empty(),
                  "a module created with arguments");
      auto* object = make(Kind::kObject);
      object->text = cls->text;
      push(object);
      return;
    }
    case 'b': // BUILD: an object's attributes; on a dict, the OrderedDict's _metadata (ignored)
    {
      auto* state = pop();
      auto* target = top();
      if (target->kind == Kind::kDict)
        return;
      fail_unless(target->kind == Kind::kObject, "BUILD on ", kind_name(target->kind));
      fail_unless(state->kind == Kind::kDict, "a module state that is ", kind_name(state->kind));
      fail_unless(target->entries.empty(), "a module built twice");
      nest(target, state);
      count_slots(state->entries.size());
      target->entries = state->entries;
      return;
    }
    default:
      fail_unless(false, "pickle opcode 0x", c10::str(std::hex, static_cast<int>(opcode)),
                  ", which torch.save of tensors does not write");
    }
  }

  // ('storage', torch.FloatStorage, key, location, numel) -> a flat tensor of the record.
  PickleValue* storage(const PickleValue* id) {
    fail_unless(id->kind == Kind::kTuple && id->items.size() == 5 &&
                    id->items[0]->kind == Kind::kString && id->items[0]->text == "storage" &&
                    id->items[1]->kind == Kind::kGlobal && id->items[2]->kind == Kind::kString &&
                    id->items[4]->kind == Kind::kInt,
                "a persistent id that is not a tensor storage");
    const auto dtype = storage_dtype(id->items[1]->text);
    fail_unless(dtype.has_value(), "a storage of type ", io::elided(id->items[1]->text));
    const auto& key = id->items[2]->text;
    // Keys are record names ("0", "1", ...); anything else could name one record many times
    // (LibTorch's reader stops a name at its first NUL byte).
    fail_unless(!key.empty() && key.size() <= 64 &&
                    std::all_of(key.begin(), key.end(),
                                [](char c) {
                                  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                                }),
                "a storage key that is not a record name: '", io::elided(key), "'");
    auto& cached = storages_[key];
    if (!cached.defined()) {
      const int64_t numel = id->items[4]->integer;
      fail_unless(numel >= 0, "a storage of ", numel, " elements");
      const std::string record = folder_ + key;
      fail_unless(numel == 0 || records_.has(record), "no record ", io::elided(record));
      // The pickle's element count is checked against the record before it sizes anything.
      const auto itemsize = static_cast<int64_t>(c10::elementSize(*dtype));
      const size_t size = numel == 0 ? 0 : records_.size(record);
      TORCH_CHECK(numel <= std::numeric_limits<int64_t>::max() / itemsize &&
                      size == static_cast<size_t>(numel * itemsize),
                  "'", path_, "': the record of storage ", io::elided(key), " holds ", size,
                  " bytes, not ", numel, " x ", itemsize, " (truncated or corrupt)");
      cached = torch::empty({numel}, torch::TensorOptions().dtype(*dtype));
      if (numel > 0) {
        const auto bytes = records_.read(record);
        std::memcpy(cached.data_ptr(), bytes.get(), size);
      }
      storage_bytes_ += static_cast<int64_t>(size);
    }
    // One record read as two types or lengths would make the second reference's tensors silently
    // the first's.
    fail_unless(cached.scalar_type() == *dtype && cached.numel() == id->items[4]->integer,
                "storage ", io::elided(key), " referenced as two types or lengths");
    auto* value = make(Kind::kTensor);
    value->tensor = cached;
    return value;
  }

  std::vector<int64_t> int_tuple(const PickleValue* value, const char* what) {
    fail_unless(value->kind == Kind::kTuple, what, " that is not a tuple");
    fail_unless(value->items.size() <= 64, what, " of ", value->items.size(),
                " dimensions (at most 64)");
    std::vector<int64_t> ints;
    for (const auto* item : value->items) {
      fail_unless(item->kind == Kind::kInt, what, " that holds ", kind_name(item->kind));
      ints.push_back(item->integer);
    }
    return ints;
  }

  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) -> a view
  // of the storage that lies inside it and holds no more elements than it.
  PickleValue* rebuild_tensor(const std::vector<PickleValue*>& a) {
    fail_unless(a.size() >= 4 && a[0]->kind == Kind::kTensor && a[1]->kind == Kind::kInt,
                "malformed _rebuild_tensor_v2 arguments");
    const auto& storage = a[0]->tensor;
    const int64_t offset = a[1]->integer;
    const auto size = int_tuple(a[2], "a tensor size");
    const auto stride = int_tuple(a[3], "a tensor stride");
    fail_unless(size.size() == stride.size(), "a tensor whose size and stride differ in length");
    fail_unless(size.size() <= 64, "a tensor of ", size.size(), " dimensions (at most 64)");
    int64_t last = offset, numel = 1;
    bool empty = false, overflow = false;
    for (size_t d = 0; d < size.size(); ++d) {
      fail_unless(size[d] >= 0 && stride[d] >= 0, "a negative tensor size or stride");
      empty = empty || size[d] == 0;
      int64_t extent = 0;
      overflow = overflow || __builtin_mul_overflow(size[d] - 1, stride[d], &extent) ||
                 __builtin_add_overflow(last, extent, &last) ||
                 __builtin_mul_overflow(numel, size[d], &numel);
    }
    auto* value = make(Kind::kTensor);
    if (empty) {
      value->tensor = torch::empty(size, storage.options());
      return value;
    }
    fail_unless(!overflow, "a tensor size and stride past 2^63");
    fail_unless(offset >= 0 && last < storage.numel(), "a tensor beyond its storage of ",
                storage.numel(), " elements");
    fail_unless(numel <= storage.numel(), "a tensor of ", numel, " elements over a storage of ",
                storage.numel(), " (an expanded view, which neither pykan nor kanbench writes)");
    value->tensor = storage.as_strided(size, stride, offset);
    return value;
  }

  // The few callables torch.save emits for tensors and containers; anything else is refused.
  PickleValue* call(const PickleValue* callable, const PickleValue* args) {
    fail_unless(callable->kind == Kind::kGlobal, "a call of ", kind_name(callable->kind));
    fail_unless(args->kind == Kind::kTuple, "call arguments that are not a tuple");
    const auto& name = callable->text;
    const auto& a = args->items;
    if (name == "collections.OrderedDict") {
      fail_unless(a.empty(), "OrderedDict called with arguments");
      return make(Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2")
      return rebuild_tensor(a);
    // TorchScript's pickler tags a typed container with its type: (value, "List[int]").
    if (name == "torch.jit._pickle.restore_type_tag") {
      fail_unless(a.size() == 2, "malformed restore_type_tag arguments");
      return a[0];
    }
    // Older TorchScript archives build typed lists from a plain list.
    if (name == "torch.jit._pickle.build_intlist" || name == "torch.jit._pickle.build_doublelist" ||
        name == "torch.jit._pickle.build_boollist" ||
        name == "torch.jit._pickle.build_tensorlist") {
      fail_unless(a.size() == 1 && a[0]->kind == Kind::kList, "malformed ", io::elided(name),
                  " arguments");
      return a[0];
    }
    if (name == "torch._utils._rebuild_parameter") { // (data, requires_grad, backward_hooks)
      fail_unless(!a.empty() && a[0]->kind == Kind::kTensor,
                  "malformed _rebuild_parameter arguments");
      return a[0];
    }
    fail_unless(false, "a call of ", io::elided(name),
                ", which is not a tensor or container (kanbench runs no pickled code)");
    return nullptr;
  }

  const std::string& path_;
  const Records& records_;
  const TorchArchiveLimits& limits_;
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  std::vector<std::unique_ptr<PickleValue>>& values_;
  std::string folder_;
  std::vector<PickleValue*> stack_; // nullptr marks a MARK
  std::map<uint64_t, PickleValue*> memo_;
  std::map<std::string, torch::Tensor> storages_;
  int64_t storage_bytes_ = 0;
  size_t slots_ = 0;
};

} // namespace

TorchArchive::TorchArchive(const std::string& path, const TorchArchiveLimits& limits)
    : path_(path) {
  std::error_code ec;
  TORCH_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read '", path,
              "': ", std::filesystem::is_directory(path, ec) ? "it is a folder" : "no such file");
  const auto file_size = std::filesystem::file_size(path, ec);
  TORCH_CHECK(!ec && file_size > 0, "cannot read '", path, "': the file is empty");
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  const auto refuse = [&](const std::string& why) {
    TORCH_CHECK(false, "'", path,
                "': not a torch.save file or LibTorch archive (truncated, foreign, or saved with "
                "_use_new_zipfile_serialization=False?): ",
                io::elided(io::first_line(why), 200));
  };
  try {
    check_zip_directory(path, file_size);
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    refuse(e.what_without_backtrace());
  } catch (const std::exception& e) { // LibTorch's version parsing throws std::out_of_range
    refuse(e.what());
  }
  try {
    const Records records(path_, *archive, file_size);
    if (records.has("byteorder")) {
      const size_t size = records.size("byteorder");
      TORCH_CHECK(size <= 16, "'", path, "': a malformed byteorder record");
      const auto order = records.read("byteorder");
      TORCH_CHECK(std::string(static_cast<const char*>(order.get()), size) == "little", "'", path,
                  "': tensors saved big-endian cannot be read here");
    }
    TORCH_CHECK(records.has("data.pkl"), "'", path,
                "' is a zip archive but not a torch.save file (no data.pkl)");
    const size_t size = records.size("data.pkl");
    TORCH_CHECK(size <= limits.max_pickle_bytes, "'", path, "': its pickle (data.pkl) holds ", size,
                " bytes, more than kanbench reads (", limits.max_pickle_bytes, ")");
    const auto pickle = records.read("data.pkl");
    Unpickler unpickler(path_, records, limits, static_cast<const char*>(pickle.get()), size,
                        values_);
    root_ = unpickler.run();
    storage_bytes_ = unpickler.storage_bytes();
    // A TorchScript archive's tensor constants: checked as data.pkl is, before LibTorch's loader.
    if (records.has("constants.pkl")) {
      const size_t constants_size = records.size("constants.pkl");
      TORCH_CHECK(constants_size <= limits.max_pickle_bytes, "'", path,
                  "': its constants pickle (constants.pkl) holds ", constants_size,
                  " bytes, more than kanbench reads (", limits.max_pickle_bytes, ")");
      const auto constants_pickle = records.read("constants.pkl");
      Unpickler constants_unpickler(path_, records, limits,
                                    static_cast<const char*>(constants_pickle.get()),
                                    constants_size, values_, "constants/");
      constants_ = constants_unpickler.run();
      storage_bytes_ += constants_unpickler.storage_bytes();
    }
    has_code_ = records.has_folder("code/");
  } catch (const c10::Error&) {
    throw; // already names the file
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "'", path, "': cannot read its records: ", io::first_line(e.what()));
  }
}

TorchArchive::~TorchArchive() = default;
TorchArchive::TorchArchive(TorchArchive&&) noexcept = default;
TorchArchive& TorchArchive::operator=(TorchArchive&&) noexcept = default;

} // namespace kan::detail
