// kanbench checkpoints (model.pt of a KAN or an MLP), through kan::load_any_checkpoint, which
// `predict --model`, `run --model`, `audit --checkpoint` and `export-pykan` use.
#include "fuzz_input.h"

#include "kan/serialize/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "model.pt");
  kan::fuzz::read_or_refuse<c10::Error>([&] { kan::load_any_checkpoint(path); });
  return 0;
}
