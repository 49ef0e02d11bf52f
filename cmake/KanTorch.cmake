# LibTorch, found through torch.utils.cmake_prefix_path (tools/setup.sh passes it as
# CMAKE_PREFIX_PATH). The CUDA build of LibTorch needs the CUDA toolkit at configure time.
# LibTorch's CMake turns TORCH_CUDA_ARCH_LIST into nvcc -gencode flags for every .cu file; its
# default list starts at sm_50, which CUDA 13's nvcc rejects. kanbench's kernels are built for the
# GPUs people have: A100 (8.0), A10/RTX 30xx (8.6), L4/L40/RTX 40xx (8.9), H100/H200 (9.0), plus
# PTX for anything newer; a GPU outside the list gets a clear error naming its compute capability
# and this list. Set TORCH_CUDA_ARCH_LIST (variable or environment) to change it.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;8.6;8.9;9.0+PTX")
endif()
find_package(Torch 2.11 REQUIRED)

# One precompiled header for every target that includes LibTorch: a LibTorch translation
# unit costs ~20 s and ~1 GB with g++, most of it in these headers.
set(KAN_TORCH_PCH_HEADERS
    <ATen/ATen.h>
    <torch/nn/module.h>
    <torch/nn/cloneable.h>
    <torch/nn/pimpl.h>
    <torch/optim/adam.h>
    <torch/optim/lbfgs.h>
    <torch/serialize.h>
    <nlohmann/json.hpp>)

# kan_use_torch_pch(target): give target the shared LibTorch precompiled header.
function(kan_use_torch_pch target)
  target_precompile_headers(${target} PRIVATE ${KAN_TORCH_PCH_HEADERS})
endfunction()
