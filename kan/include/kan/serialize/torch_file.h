#pragma once
/// Files in the format of Python's torch.save (a zip archive holding a pickle and one record per
/// tensor storage, torch >= 1.6), read and written without Python (docs/formats.md, "torch.save
/// files"). What pykan's saveckpt and create_dataset users write: a dict or OrderedDict of named
/// tensors, one tensor, or None.

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace kan {

/// Named tensors in the order of the file.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// A torch.save'd dict or OrderedDict of str -> Tensor (a state_dict, a dataset), on the CPU.
/// As torch.load, the tensors are views of the file's storages (copied from the file): tensors
/// that share a storage in the file share it here, and a view may be non-contiguous.
/// Only tensors, dicts, tuples, lists, strings, numbers, booleans and None are read; any other
/// pickled object (arbitrary code in Python) is refused. A missing, truncated or foreign file, or
/// one holding something else, is an error naming the file and what was found.
NamedTensors read_named_tensors(const std::string& path);

/// A torch.save'd tensor, on the CPU; undefined for a saved None.
torch::Tensor read_tensor(const std::string& path);

/// Writes `tensors` as a plain dict that Python's torch.load (weights_only=True, its default)
/// reads; contiguous copies, atomically (kan::io::AtomicFile).
void write_named_tensors(const std::string& path, const NamedTensors& tensors);

/// Writes one tensor, or None for an undefined one, as torch.save would.
void write_tensor(const std::string& path, const torch::Tensor& tensor);

} // namespace kan
