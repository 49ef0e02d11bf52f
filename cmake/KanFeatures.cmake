# Optional CUDA-side features, found at configure time and written to the generated
# kan/config.h: NVTX3 ranges (header-only) and CUPTI activity tracing.
option(KAN_WITH_NVTX "Use NVTX3 ranges where the CUDA toolkit's headers are found" ON)
option(KAN_WITH_CUPTI "Use CUPTI activity tracing where the library is found" ON)

find_package(CUDAToolkit QUIET)
set(KAN_HAS_NVTX OFF)
set(KAN_HAS_CUPTI OFF)
if(KAN_WITH_NVTX AND CUDAToolkit_FOUND)
  find_path(KAN_NVTX3_INCLUDE_DIR nvtx3/nvToolsExt.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(KAN_NVTX3_INCLUDE_DIR)
    set(KAN_HAS_NVTX ON)
  endif()
endif()
if(KAN_WITH_CUPTI AND TARGET CUDA::cupti)
  set(KAN_HAS_CUPTI ON)
  # Written into the installed kanbenchConfig.cmake, so that consumers find the same CUPTI.
  get_filename_component(KAN_CUDATOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
message(STATUS "kanbench: NVTX3 ${KAN_HAS_NVTX}, CUPTI ${KAN_HAS_CUPTI}")

set(KAN_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/generated)
configure_file(${CMAKE_CURRENT_LIST_DIR}/config.h.in ${KAN_GENERATED_INCLUDE_DIR}/kan/config.h)
