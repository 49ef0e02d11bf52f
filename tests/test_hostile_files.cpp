// Files crafted to crash or exhaust a reader, as found by mutating the project's own fixtures:
// each is refused by the command line with exit 2 and one line, quickly and within 100 MB more
// than a trivial refusal takes.
#include "checkpoint_test_util.h"
#include "cli_runner.h"
#include "test_util.h"

#include "kan/nn/memory.h"
#include "kan/serialize/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <sys/resource.h>
#include <torch/serialize/output-archive.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

namespace kan {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using Records = std::map<std::string, std::string>;

// --- Crafting files -------------------------------------------------------------------------

Records read_records(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  Records records;
  for (const auto& name : reader.getAllRecords()) {
    const auto [data, size] = reader.getRecord(name);
    records[name] = std::string(static_cast<const char*>(data.get()), size);
  }
  return records;
}

// A zip archive as torch.save and LibTorch write it, holding `records` (LibTorch adds its
// version records).
void write_records(const std::string& path, const Records& records) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (const auto& [name, bytes] : records)
    if (name != "version" && name != ".data/version" && name != ".data/serialization_id" &&
        name != "byteorder")
      writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

std::string le32(uint32_t n) {
  return {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
          static_cast<char>(n >> 24)};
}
std::string pickle_string(const std::string& s) {
  return "X" + le32(uint32_t(s.size())) + s;
}
std::string pickle_int(uint32_t n) {
  return "J" + le32(n);
}
std::string pickle_global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}

// A pickled tensor: a float64 storage `key` of `numel` elements, viewed with size, stride, offset.
std::string pickle_tensor(const std::string& key, uint32_t numel, const std::string& size,
                          const std::string& stride, uint32_t offset = 0,
                          const std::string& storage_type = "DoubleStorage") {
  return pickle_global("torch._utils", "_rebuild_tensor_v2") + "((" + pickle_string("storage") +
         pickle_global("torch", storage_type) + pickle_string(key) + pickle_string("cpu") +
         pickle_int(numel) + "tQ" + pickle_int(offset) + "(" + size + "t(" + stride + "t\x89" +
         pickle_global("collections", "OrderedDict") + ")RtR";
}

// A torch.save'd dict {key: tensor} whose tensor is pickled by `tensor`, plus `extra` records.
void write_state(const std::string& path, const std::string& key, const std::string& tensor,
                 Records extra = {}) {
  extra["data.pkl"] = "\x80\x02}(" + pickle_string(key) + tensor + "u.";
  write_records(path, extra);
}

// The first occurrence of `from` in `text` replaced by `to`; it must be there.
std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no " << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// --- Running kanbench on them ---------------------------------------------------------------

int64_t children_peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

class HostileFiles : public test::ScratchDirTest {
protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    std::ofstream(path("x.csv")) << "0.1,0.2\n";
    // The baseline: kanbench refusing a missing model, the least any refusal costs.
    const auto run = test::run_kanbench("predict --model " + path("missing.pt") + " --input " +
                                        path("x.csv") + " --out " + path("y.csv"));
    ASSERT_EQ(run.exit_code, 2) << run.output;
    baseline_rss_ = children_peak_rss_bytes();
  }

  // `kanbench ARGS` must refuse with exit 2 and one line containing every word, within a few
  // seconds and 100 MB more than the baseline.
  template <typename... Words> void expect_refused(const std::string& args, const Words&... words) {
    const auto start = std::chrono::steady_clock::now();
    const auto run = test::run_kanbench(args);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
    for (const std::string& word : {std::string(words)...})
      EXPECT_NE(run.output.find(word), std::string::npos)
          << "no '" << word << "' in " << run.output;
    EXPECT_LT(seconds, 5.0) << run.output;
    const int64_t extra = children_peak_rss_bytes() - baseline_rss_;
    EXPECT_LT(extra, int64_t{100} << 20)
        << format_bytes(extra) << " more than the baseline for " << args;
  }
  void expect_predict_refused(const std::string& model, const std::string& word) {
    expect_refused(
        "predict --model " + model + " --input " + path("x.csv") + " --out " + path("y.csv"), word);
  }

  // A copy of the reference pykan checkpoint "options" at path(name), for a test to damage.
  void copy_pykan(const std::string& name) const {
    for (const char* suffix : {"_config.yml", "_state", "_cache_data"})
      fs::copy_file(test::reference_checkpoint("options") + suffix, path(name) + suffix,
                    fs::copy_options::overwrite_existing);
  }
  std::string config_text(const std::string& name) const {
    std::ifstream in(path(name) + "_config.yml");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write_text(const std::string& file, const std::string& text) const {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  }

  // A kanbench checkpoint of a small trained KAN.
  std::string checkpoint(const std::string& name) const {
    save_checkpoint(KAN(KANOptions({2, 5, 1}).dtype(torch::kFloat64)), path(name));
    return path(name);
  }

  int64_t baseline_rss_ = 0;
};

// 1. A pickle nested 100,000 deep in a pykan state: refused at the nesting limit (without
// it, freeing such a nesting overflows the stack).
TEST_F(HostileFiles, APickleNestedDeepInAPykanStateIsRefused) {
  copy_pykan("deep");
  write_state(path("deep_state"), "act_fun.0.coef", "K\x01" + std::string(100000, '\x85'));
  expect_refused("import-pykan " + path("deep") + " --out " + path("out"), "deep_state",
                 "nested more than 100 deep");
}

// 2. A model.pt whose pickle nests 1,000,000 tuples: never reaches LibTorch's loader.
TEST_F(HostileFiles, APickleNestedDeepInACheckpointIsRefused) {
  auto records = read_records(checkpoint("model.pt"));
  records.at("data.pkl") = "\x80\x02K\x01" + std::string(1000000, '\x85') + ".";
  write_records(path("deep.pt"), records);
  expect_predict_refused(path("deep.pt"), "nested more than 100 deep");
}

// 3. Tensors their storage does not cover: an emptied record, a huge storage offset, a size
// pushed to 1,000,000.
TEST_F(HostileFiles, TensorsBeyondTheirRecordsAreRefused) {
  const auto records = read_records(checkpoint("model.pt"));
  const auto& pickle = records.at("data.pkl");

  auto emptied = records;
  emptied.at("data/0") = "";
  write_records(path("emptied.pt"), emptied);
  expect_predict_refused(path("emptied.pt"), "holds 0 bytes");

  // The first tensor is node_scale_0: storage '0' of 5 float64 (memo entry 20), offset 0, size
  // (5,).
  const auto first_view = "q\x14K\x00(K\x05t"s;
  auto offset = records;
  offset.at("data.pkl") =
      replace_once(pickle, first_view, "q\x14" + pickle_int(0x7fffff00) + "(K\x05t");
  write_records(path("offset.pt"), offset);
  expect_predict_refused(path("offset.pt"), "beyond its storage");

  auto size = records;
  size.at("data.pkl") =
      replace_once(pickle, first_view, "q\x14K\x00("s + pickle_int(1000000) + "t");
  write_records(path("size.pt"), size);
  expect_predict_refused(path("size.pt"), "beyond its storage");
}

// 4a. A pickle string that claims 2^31 - 1 bytes: refused before anything of that size exists.
TEST_F(HostileFiles, AHugeStringLengthIsRefusedBeforeItIsAllocated) {
  auto records = read_records(checkpoint("model.pt"));
  records.at("data.pkl") = "\x80\x02X" + le32(0x7fffffff) + "abc.";
  write_records(path("string.pt"), records);
  expect_predict_refused(path("string.pt"), "ends early");
}

// 4b. A 16 KB pykan state with a stride-0 tensor of 3e8 elements over one stored number.
TEST_F(HostileFiles, AnExpandedViewOfAFewBytesIsRefused) {
  copy_pykan("expanded");
  write_state(path("expanded_state"), "act_fun.0.coef",
              pickle_tensor("0", 1, pickle_int(300000000), "K\x00"s),
              {{"data/0", std::string(8, '\0')}});
  expect_refused("import-pykan " + path("expanded") + " --out " + path("out"), "expanded_state",
                 "300000000 elements over a storage of 1");
}

// 4c. Widths far beyond the stored tensors: a pykan configuration's and a checkpoint's.
TEST_F(HostileFiles, AWidthTheStoredTensorsCannotFillIsRefusedBeforeAllocating) {
  copy_pykan("wide");
  auto text = config_text("wide");
  const auto at = text.find("width:");
  ASSERT_NE(at, std::string::npos);
  write_text(path("wide_config.yml"), text.substr(0, at) + "width:\n- 10000000\n- 1\n");
  expect_refused("import-pykan " + path("wide") + " --out " + path("out"), "width [10000000, 1]",
                 "holds only");

  KAN model(KANOptions({2, 5, 1}).dtype(torch::kFloat64));
  auto config = to_json(model->options());
  config["width"] = {300000000, 1};
  test::write_version1_checkpoint(path("wide.pt"), config, *model);
  expect_predict_refused(path("wide.pt"), "holds only");

  // 10^18 multiplication nodes: their subnodes are counted at once, not one by one.
  config["width"] = {2, int64_t{1000000000000000000}, 1};
  config["mult"] = {0, int64_t{1000000000000000000}, 0};
  test::write_version1_checkpoint(path("mult.pt"), config, *model);
  expect_predict_refused(path("mult.pt"), "mult.pt");
}

// A grid the stored tensors do not have: refused at their shapes, before any initial fit of its
// size (pykan's initial coefficients cost G^3).
TEST_F(HostileFiles, AHugeGridIsRefusedWithoutItsInitialFit) {
  KAN model(KANOptions({2, 5, 1}).dtype(torch::kFloat64));
  auto config = to_json(model->options());
  config["grid"] = 5000; // within the size check's slack: its initial fit would take hours
  test::write_version1_checkpoint(path("grid.pt"), config, *model);
  expect_predict_refused(path("grid.pt"), "of shape");
}

// A storage key that is not a record name: LibTorch's reader would stop it at the NUL and read
// record 0 again for every such key.
TEST_F(HostileFiles, AStorageKeyThatIsNotARecordNameIsRefused) {
  copy_pykan("key");
  write_state(path("key_state"), "act_fun.0.coef", pickle_tensor("0\0x"s, 1, "K\x01", "K\x01"),
              {{"data/0", std::string(8, '\0')}});
  expect_refused("import-pykan " + path("key") + " --out " + path("out"), "key_state",
                 "not a record name");
}

// One record read as float64 by one tensor and float32 by the next: the second would otherwise
// silently be the first's type.
TEST_F(HostileFiles, AStorageReadAsTwoTypesIsRefused) {
  copy_pykan("types");
  Records records{{"data/0", std::string(8, '\0')}};
  records["data.pkl"] = "\x80\x02}(" + pickle_string("act_fun.0.coef") +
                        pickle_tensor("0", 1, "K\x01", "K\x01") + pickle_string("other") +
                        pickle_tensor("0", 2, "K\x02", "K\x01", 0, "FloatStorage") + "u.";
  write_records(path("types_state"), records);
  expect_refused("import-pykan " + path("types") + " --out " + path("out"), "types_state",
                 "two types or lengths");
}

// 5. An offending value is quoted in at most about 80 characters.
TEST_F(HostileFiles, ALongKeyIsElidedInTheMessage) {
  copy_pykan("long");
  write_state(path("long_state"), std::string(5000, 'k'), "N");
  const auto run = test::run_kanbench("import-pykan " + path("long") + " --out " + path("out"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("kkk...kkk"), std::string::npos) << run.output;
  EXPECT_LT(run.output.size(), 400u) << run.output;
}

// 6. Duplicate YAML keys: PyYAML takes the last, yaml-cpp the first; refused naming both lines.
TEST_F(HostileFiles, ADuplicateYamlKeyIsRefusedNamingBothLines) {
  copy_pykan("dup");
  const auto text = config_text("dup");
  const auto grid_line =
      std::count(text.begin(), text.begin() + text.find("\ngrid:") + 1, '\n') + 1;
  const auto last_line = std::count(text.begin(), text.end(), '\n') + 1;
  write_text(path("dup_config.yml"), text + "grid: 7\n");
  expect_refused("import-pykan " + path("dup") + " --out " + path("out"), "key 'grid'",
                 "appears twice, on lines " + std::to_string(grid_line) + " and " +
                     std::to_string(last_line));
}

// Aliases of aliases, 2^40 nodes to a reader that expands them: read in well under a second.
TEST_F(HostileFiles, YamlAliasesOfAliasesAreReadOnce) {
  copy_pykan("aliases");
  std::string bomb = "bomb0: &a0 [1, 1]\n";
  for (int level = 1; level <= 40; ++level)
    bomb += "bomb" + std::to_string(level) + ": &a" + std::to_string(level) + " [*a" +
            std::to_string(level - 1) + ", *a" + std::to_string(level - 1) + "]\n";
  write_text(path("aliases_config.yml"), config_text("aliases") + bomb);
  const auto start = std::chrono::steady_clock::now();
  const auto run = test::run_kanbench("import-pykan " + path("aliases") + " --out " + path("out"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

} // namespace
} // namespace kan
