// Data files of `fit --data`, `run --data` and `predict --input`: CSV, .npy, .npz and pykan's
// dataset dict, told apart by their content, through kan::load_dataset and the streaming
// kan::RowReader.
#include "fuzz_input.h"

#include "kan/data/data_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "data");
  kan::fuzz::read_or_refuse<c10::Error>([&] { kan::load_dataset(path); });
  kan::fuzz::read_or_refuse<c10::Error>([&] {
    kan::RowReader rows(path);
    while (rows.next(64).size(0) > 0) {
    }
  });
  return 0;
}
