#pragma once
// The record that marks a LibTorch archive as a kanbench checkpoint (kan/serialize/checkpoint.h):
// read by the checkpoint loader, and by the TorchScript loader to tell a checkpoint from a
// PyTorch module, since both are TorchScript modules in a zip archive.

namespace kan::detail {

inline constexpr const char* kCheckpointFormatKey = "kanbench_format";
inline constexpr const char* kCheckpointFormatName = "kanbench-kan-checkpoint";

} // namespace kan::detail
