// torch.save files (pykan's states and cache data, create_dataset's dicts): the zip archive and
// its pickle, through kan::read_named_tensors and kan::read_tensor.
#include "fuzz_input.h"

#include "kan/serialize/torch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "state");
  kan::fuzz::read_or_refuse<c10::Error>([&] { kan::read_named_tensors(path); });
  kan::fuzz::read_or_refuse<c10::Error>([&] { kan::read_tensor(path); });
  return 0;
}
