# cmake -P script: installs the kanbench build KAN_BUILD_DIR into WORK_DIR/prefix, then configures,
# builds and runs the consumer project (CONSUMER_DIR) against that install.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGV}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
run(${CMAKE_COMMAND} --install "${KAN_BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
set(cuda_args "")
if(CUDA_ROOT)
  set(cuda_args "-DCUDAToolkit_ROOT=${CUDA_ROOT}")
endif()
# A sanitizer build's libraries need the sanitizer's runtime in whatever links them.
if(SANITIZE)
  list(APPEND cuda_args "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}"
       "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
# kanbench from the install; its dependencies where the build found them ('|'-separated), through
# the environment (a list in -D would be split into arguments on its way through run()).
if(DEPENDENCY_PREFIXES)
  string(REPLACE "|" ":" dependency_path "${DEPENDENCY_PREFIXES}")
  set(ENV{CMAKE_PREFIX_PATH} "${dependency_path}")
endif()
# What kanbench's own build uses and an installed kan must not need: a find_package of any of them
# fails here, as on a machine without them.
set(not_needed "")
foreach(package yaml-cpp ZLIB OpenMP Boost benchmark CLI11 GTest)
  list(APPEND not_needed "-DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON")
endforeach()
run(${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build" -G Ninja ${not_needed}
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DTorch_DIR=${TORCH_DIR}"
    ${cuda_args})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer" "${WORK_DIR}/written.txt")
file(READ "${WORK_DIR}/written.txt" written)
if(NOT written STREQUAL "consumer\n")
  message(FATAL_ERROR "the consumer's file holds '${written}'")
endif()
