#include "kan/torch_file.h"

#include "kan/io/atomic_file.h"
#include "kan/io/text.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>

namespace kan {
namespace {

// LibTorch's own unpickler (torch::pickle_load) reads what its pickler writes, but not a Python
// state_dict: it turns every collections.OrderedDict into None (it expects one only as a tensor's
// backward hooks) and treats BUILD as a call, so the OrderedDict's _metadata breaks it. So the
// pickle is read here, by a small unpickler that knows only the opcodes and globals torch.save
// emits for tensors and containers (like Python's weights_only unpickler, it never runs code);
// the zip archive and its records are still read by LibTorch (caffe2::serialize).

// One unpickled Python object.
struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTensor, kTuple, kList, kDict, kGlobal };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text; // a string, or a global's "module.name"
  torch::Tensor tensor;
  std::vector<ValuePtr> items;                        // tuple, list
  std::vector<std::pair<ValuePtr, ValuePtr>> entries; // dict, in insertion order
};

ValuePtr make(Value::Kind kind) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  return value;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
  case Value::Kind::kNone:
    return "None";
  case Value::Kind::kBool:
    return "a bool";
  case Value::Kind::kInt:
    return "an int";
  case Value::Kind::kFloat:
    return "a float";
  case Value::Kind::kString:
    return "a string";
  case Value::Kind::kTensor:
    return "a tensor";
  case Value::Kind::kTuple:
    return "a tuple";
  case Value::Kind::kList:
    return "a list";
  case Value::Kind::kDict:
    return "a dict";
  case Value::Kind::kGlobal:
    return "a class or function";
  }
  return "?";
}

// The legacy storage class names torch.save writes for each dtype ("torch.FloatStorage").
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

class Unpickler {
public:
  Unpickler(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive,
            const char* data, size_t size)
      : path_(path), archive_(archive), data_(data), size_(size) {}

  ValuePtr run() {
    for (;;) {
      const auto opcode = static_cast<unsigned char>(byte());
      if (opcode == '.') // STOP
        break;
      step(opcode);
    }
    fail_unless(stack_.size() == 1, "a pickle that leaves ", stack_.size(), " values");
    return stack_.back();
  }

private:
  template <typename... Args> void fail_unless(bool ok, const Args&... what) {
    TORCH_CHECK(ok, "'", path_, "': not a torch.save file kanbench can read (", c10::str(what...),
                " at byte ", pos_, " of its pickle)");
  }

  char byte() {
    fail_unless(pos_ < size_, "the pickle ends early");
    return data_[pos_++];
  }
  const char* bytes(size_t n) {
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
    std::string text;
    for (char c = byte(); c != '\n'; c = byte())
      text += c;
    return text;
  }

  ValuePtr pop() {
    fail_unless(!stack_.empty() && stack_.back() != nullptr, "an empty stack");
    auto value = stack_.back();
    stack_.pop_back();
    return value;
  }
  ValuePtr& top() {
    fail_unless(!stack_.empty() && stack_.back() != nullptr, "an empty stack");
    return stack_.back();
  }
  // The values above the last MARK (a nullptr on the stack), which is removed.
  std::vector<ValuePtr> pop_to_mark() {
    std::vector<ValuePtr> values;
    for (;;) {
      fail_unless(!stack_.empty(), "a missing MARK");
      auto value = stack_.back();
      stack_.pop_back();
      if (value == nullptr)
        break;
      values.insert(values.begin(), std::move(value));
    }
    return values;
  }
  void push_tuple(std::vector<ValuePtr> items) {
    auto tuple = make(Value::Kind::kTuple);
    tuple->items = std::move(items);
    stack_.push_back(std::move(tuple));
  }
  void memo_put(uint64_t index) { memo_[index] = top(); }
  void memo_get(uint64_t index) {
    const auto found = memo_.find(index);
    fail_unless(found != memo_.end(), "a reference to memo entry ", index, " never stored");
    stack_.push_back(found->second);
  }
  void set_items(ValuePtr& dict, const std::vector<ValuePtr>& pairs) {
    fail_unless(dict->kind == Value::Kind::kDict, "SETITEMS on ", kind_name(dict->kind));
    fail_unless(pairs.size() % 2 == 0, "an odd number of dict items");
    for (size_t i = 0; i < pairs.size(); i += 2)
      dict->entries.emplace_back(pairs[i], pairs[i + 1]);
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
      stack_.push_back(nullptr);
      return;
    case 'N':
      stack_.push_back(make(Value::Kind::kNone));
      return;
    case 0x88: // NEWTRUE
    case 0x89: // NEWFALSE
      stack_.push_back(make(Value::Kind::kBool));
      stack_.back()->boolean = opcode == 0x88;
      return;
    case 'K': // BININT1
    case 'M': // BININT2
    case 'J': // BININT
    {
      const size_t n = opcode == 'K' ? 1 : opcode == 'M' ? 2 : 4;
      auto value = make(Value::Kind::kInt);
      value->integer = static_cast<int64_t>(unsigned_le(n));
      if (n == 4)
        value->integer = static_cast<int32_t>(value->integer);
      stack_.push_back(std::move(value));
      return;
    }
    case 0x8a: // LONG1: a little-endian two's complement integer of n bytes
    {
      const auto n = static_cast<size_t>(static_cast<unsigned char>(byte()));
      fail_unless(n <= 8, "an integer of ", n, " bytes");
      auto value = make(Value::Kind::kInt);
      const uint64_t raw = n == 0 ? 0 : unsigned_le(n);
      const bool negative = n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1;
      value->integer = static_cast<int64_t>(negative ? raw | (~uint64_t{0} << (8 * n)) : raw);
      stack_.push_back(std::move(value));
      return;
    }
    case 'G': // BINFLOAT: big-endian double
    {
      const auto* p = reinterpret_cast<const unsigned char*>(bytes(8));
      uint64_t bits = 0;
      for (size_t i = 0; i < 8; ++i)
        bits = (bits << 8) | p[i];
      auto value = make(Value::Kind::kFloat);
      std::memcpy(&value->real, &bits, sizeof bits);
      stack_.push_back(std::move(value));
      return;
    }
    case 'X':  // BINUNICODE
    case 0x8c: // SHORT_BINUNICODE
    case 0x8d: // BINUNICODE8
    {
      const size_t n = unsigned_le(opcode == 'X' ? 4 : opcode == 0x8c ? 1 : 8);
      auto value = make(Value::Kind::kString);
      value->text.assign(bytes(n), n);
      stack_.push_back(std::move(value));
      return;
    }
    case ')':
      push_tuple({});
      return;
    case 0x85: // TUPLE1
    case 0x86: // TUPLE2
    case 0x87: // TUPLE3
    {
      std::vector<ValuePtr> items(opcode - 0x84);
      for (size_t i = items.size(); i-- > 0;)
        items[i] = pop();
      push_tuple(std::move(items));
      return;
    }
    case 't':
      push_tuple(pop_to_mark());
      return;
    case ']':
      stack_.push_back(make(Value::Kind::kList));
      return;
    case 'a': // APPEND
    {
      auto item = pop();
      fail_unless(top()->kind == Value::Kind::kList, "APPEND to ", kind_name(top()->kind));
      top()->items.push_back(std::move(item));
      return;
    }
    case 'e': // APPENDS
    {
      auto items = pop_to_mark();
      fail_unless(top()->kind == Value::Kind::kList, "APPENDS to ", kind_name(top()->kind));
      for (auto& item : items)
        top()->items.push_back(std::move(item));
      return;
    }
    case '}':
      stack_.push_back(make(Value::Kind::kDict));
      return;
    case 's': // SETITEM
    {
      auto value = pop();
      auto key = pop();
      set_items(top(), {key, value});
      return;
    }
    case 'u': // SETITEMS
    {
      auto pairs = pop_to_mark();
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
      auto global = make(Value::Kind::kGlobal);
      const auto module = line();
      global->text = module + "." + line();
      stack_.push_back(std::move(global));
      return;
    }
    case 'Q': // BINPERSID: a tensor storage
      stack_.push_back(storage(pop()));
      return;
    case 'R': // REDUCE: callable(*args)
    {
      auto args = pop();
      auto callable = pop();
      stack_.push_back(call(callable, args));
      return;
    }
    case 'b': // BUILD: sets an object's attributes (the OrderedDict's _metadata): ignored
      pop();
      fail_unless(top()->kind == Value::Kind::kDict, "BUILD on ", kind_name(top()->kind));
      return;
    default:
      fail_unless(false, "pickle opcode 0x", c10::str(std::hex, static_cast<int>(opcode)),
                  ", which torch.save of tensors does not write");
    }
  }

  // ('storage', torch.FloatStorage, key, location, numel) -> a flat tensor of the record.
  ValuePtr storage(const ValuePtr& id) {
    fail_unless(id->kind == Value::Kind::kTuple && id->items.size() == 5 &&
                    id->items[0]->kind == Value::Kind::kString && id->items[0]->text == "storage" &&
                    id->items[1]->kind == Value::Kind::kGlobal &&
                    id->items[2]->kind == Value::Kind::kString &&
                    id->items[4]->kind == Value::Kind::kInt,
                "a persistent id that is not a tensor storage");
    const auto dtype = storage_dtype(id->items[1]->text);
    fail_unless(dtype.has_value(), "a storage of type ", id->items[1]->text);
    const auto& key = id->items[2]->text;
    auto& cached = storages_[key];
    if (!cached.defined()) {
      const int64_t numel = id->items[4]->integer;
      fail_unless(numel >= 0, "a storage of ", numel, " elements");
      const std::string record = "data/" + key;
      fail_unless(numel == 0 || archive_.hasRecord(record), "no record ", record);
      // The pickle's element count is checked against the record before it sizes anything.
      const auto itemsize = static_cast<int64_t>(c10::elementSize(*dtype));
      const auto size = numel == 0 ? 0 : archive_.getRecordSize(record);
      TORCH_CHECK(numel <= std::numeric_limits<int64_t>::max() / itemsize &&
                      size == static_cast<size_t>(numel * itemsize),
                  "'", path_, "': the record of storage ", key, " holds ", size, " bytes, not ",
                  numel, " x ", itemsize, " (truncated or corrupt)");
      cached = torch::empty({numel}, torch::TensorOptions().dtype(*dtype));
      if (numel > 0) {
        const auto [bytes, read] = archive_.getRecord(record);
        TORCH_CHECK(read == size, "'", path_, "': the record of storage ", key, " holds ", read,
                    " bytes, not ", size, " (truncated or corrupt)");
        std::memcpy(cached.data_ptr(), bytes.get(), size);
      }
    }
    auto value = make(Value::Kind::kTensor);
    value->tensor = cached;
    return value;
  }

  std::vector<int64_t> int_tuple(const ValuePtr& value, const char* what) {
    fail_unless(value->kind == Value::Kind::kTuple, what, " that is not a tuple");
    std::vector<int64_t> ints;
    for (const auto& item : value->items) {
      fail_unless(item->kind == Value::Kind::kInt, what, " that holds ", kind_name(item->kind));
      ints.push_back(item->integer);
    }
    return ints;
  }

  // The few callables torch.save emits for tensors and containers; anything else is refused.
  ValuePtr call(const ValuePtr& callable, const ValuePtr& args) {
    fail_unless(callable->kind == Value::Kind::kGlobal, "a call of ", kind_name(callable->kind));
    fail_unless(args->kind == Value::Kind::kTuple, "call arguments that are not a tuple");
    const auto& name = callable->text;
    const auto& a = args->items;
    if (name == "collections.OrderedDict") {
      fail_unless(a.empty(), "OrderedDict called with arguments");
      return make(Value::Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      fail_unless(a.size() >= 4 && a[0]->kind == Value::Kind::kTensor &&
                      a[1]->kind == Value::Kind::kInt,
                  "malformed _rebuild_tensor_v2 arguments");
      const auto& storage = a[0]->tensor;
      const auto size = int_tuple(a[2], "a tensor size");
      const auto stride = int_tuple(a[3], "a tensor stride");
      fail_unless(size.size() == stride.size(), "a tensor whose size and stride differ in length");
      int64_t last = a[1]->integer;
      bool empty = false, overflow = false;
      for (size_t d = 0; d < size.size(); ++d) {
        fail_unless(size[d] >= 0 && stride[d] >= 0, "a negative tensor size or stride");
        empty = empty || size[d] == 0;
        int64_t extent = 0;
        overflow = overflow || __builtin_mul_overflow(size[d] - 1, stride[d], &extent) ||
                   __builtin_add_overflow(last, extent, &last);
      }
      fail_unless(empty || !overflow, "a tensor size and stride past 2^63");
      fail_unless(empty || (a[1]->integer >= 0 && last < storage.numel()),
                  "a tensor beyond its storage of ", storage.numel(), " elements");
      auto value = make(Value::Kind::kTensor);
      value->tensor = empty ? torch::empty(size, storage.options())
                            : storage.as_strided(size, stride, a[1]->integer).clone();
      return value;
    }
    if (name == "torch._utils._rebuild_parameter") { // (data, requires_grad, backward_hooks)
      fail_unless(!a.empty() && a[0]->kind == Value::Kind::kTensor,
                  "malformed _rebuild_parameter arguments");
      return a[0];
    }
    fail_unless(false, "a call of ", name,
                ", which is not a tensor or container (kanbench runs no pickled code)");
    return nullptr;
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_; // nullptr marks a MARK
  std::map<uint64_t, ValuePtr> memo_;
  std::map<std::string, torch::Tensor> storages_;
};

// The object a torch.save file at `path` holds.
ValuePtr read_torch_file(const std::string& path) {
  std::error_code ec;
  TORCH_CHECK(std::filesystem::is_regular_file(path, ec), "cannot read '", path,
              "': ", std::filesystem::is_directory(path, ec) ? "it is a folder" : "no such file");
  TORCH_CHECK(std::filesystem::file_size(path, ec) > 0, "cannot read '", path,
              "': the file is empty");
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "'", path,
                "': not a torch.save file (truncated, or saved with "
                "_use_new_zipfile_serialization=False?): ",
                io::first_line(e.what_without_backtrace()));
  }
  if (archive->hasRecord("byteorder")) {
    const auto [order, size] = archive->getRecord("byteorder");
    TORCH_CHECK(std::string(static_cast<const char*>(order.get()), size) == "little", "'", path,
                "': tensors saved big-endian cannot be read here");
  }
  TORCH_CHECK(archive->hasRecord("data.pkl"), "'", path,
              "' is a zip archive but not a torch.save file (no data.pkl)");
  try {
    const auto [pickle, size] = archive->getRecord("data.pkl");
    return Unpickler(path, *archive, static_cast<const char*>(pickle.get()), size).run();
  } catch (const c10::Error&) {
    throw; // already names the file
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "'", path, "': cannot read its records: ", io::first_line(e.what()));
  }
  return nullptr;
}

// Writes `value` with LibTorch's pickler as torch.save would: untagged containers (tagged ones
// need torch.jit._pickle, which torch.load's weights_only mode refuses).
void write_torch_file(const std::string& path, const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
      nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> bytes;
  {
    caffe2::serialize::PyTorchStreamWriter archive([&](const void* data, size_t size) {
      const auto* begin = static_cast<const char*>(data);
      bytes.insert(bytes.end(), begin, begin + size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       archive);
    archive.writeEndOfFile();
  }
  try {
    io::AtomicFile file(path);
    file.write(bytes.data(), bytes.size());
    file.commit();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write '", path, "': ", io::first_line(e.what()));
  }
}

torch::Tensor cpu_copy(const torch::Tensor& tensor) {
  return tensor.detach().to(torch::kCPU).contiguous().clone();
}

} // namespace

NamedTensors read_named_tensors(const std::string& path) {
  const auto value = read_torch_file(path);
  TORCH_CHECK(value->kind == Value::Kind::kDict, "'", path, "' holds ", kind_name(value->kind),
              ", not a dict of named tensors");
  NamedTensors tensors;
  for (const auto& [key, item] : value->entries) {
    TORCH_CHECK(key->kind == Value::Kind::kString, "'", path, "': a dict key that is ",
                kind_name(key->kind), ", not a name");
    TORCH_CHECK(item->kind == Value::Kind::kTensor, "'", path, "': '", key->text, "' is ",
                kind_name(item->kind), ", not a tensor");
    tensors.emplace_back(key->text, item->tensor);
  }
  return tensors;
}

torch::Tensor read_tensor(const std::string& path) {
  const auto value = read_torch_file(path);
  if (value->kind == Value::Kind::kNone)
    return {};
  TORCH_CHECK(value->kind == Value::Kind::kTensor, "'", path, "' holds ", kind_name(value->kind),
              ", not a tensor");
  return value->tensor;
}

void write_named_tensors(const std::string& path, const NamedTensors& tensors) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(tensor.defined(), "cannot write '", path, "': tensor '", name, "' is undefined");
    dict.insert(name, cpu_copy(tensor));
  }
  write_torch_file(path, dict);
}

void write_tensor(const std::string& path, const torch::Tensor& tensor) {
  write_torch_file(path, tensor.defined() ? c10::IValue(cpu_copy(tensor)) : c10::IValue());
}

} // namespace kan
