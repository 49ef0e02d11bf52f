// pykan's checkpoint configuration (PREFIX_config.yml, YAML), through kan::load_pykan with the
// state of the reference checkpoint "options" beside it, as `import-pykan` and `fit --pykan` read
// a prefix.
#include "fuzz_input.h"

#include "kan/serialize/pykan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string prefix = [] {
    const auto prefix = (kan::fuzz::scratch_dir() / "model").string();
    for (const char* suffix : {"_state", "_cache_data"})
      std::filesystem::copy_file(KAN_FUZZ_PYKAN_STATE + std::string(suffix), prefix + suffix,
                                 std::filesystem::copy_options::overwrite_existing);
    return prefix;
  }();
  kan::fuzz::write_input(data, size, "model_config.yml");
  kan::fuzz::read_or_refuse<c10::Error>([&] { kan::load_pykan(prefix); });
  return 0;
}
