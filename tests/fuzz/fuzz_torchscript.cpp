// TorchScript archives (`--model FILE.pt` of a PyTorch model) up to what kanbench checks itself:
// kan::load_torchscript without trust runs the bounded archive reader over the zip directory and
// both pickles, then refuses to hand the file to LibTorch's loader (which is not hardened, and
// which --trust-torchscript opts into). Every input must end in a c10::Error, never a crash.
#include "fuzz_input.h"

#include "kan/serialize/torchscript.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kan::fuzz::write_input(data, size, "model.pt");
  kan::fuzz::read_or_refuse<c10::Error>([&] { kan::is_torchscript_archive(path); });
  kan::fuzz::read_or_refuse<c10::Error>(
      [&] { kan::load_torchscript(path, kan::TorchScriptLoadOptions().inputs(2)); });
  return 0;
}
