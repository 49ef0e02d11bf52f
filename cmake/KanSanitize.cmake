# KAN_SANITIZE=address,undefined builds every kanbench target with those sanitizers (tools/
# sanitize.sh builds and runs the tests so). LibTorch itself is not instrumented: ASan sees our
# code's memory errors, UBSan our undefined behaviour. Off by default.
set(KAN_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (empty: none)")
# A fuzzing build (KAN_BUILD_FUZZERS): clang's libFuzzer coverage in every library, and ASan + UBSan
# unless KAN_SANITIZE says otherwise; the fuzz targets link libFuzzer itself (tests/fuzz).
if(KAN_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KAN_BUILD_FUZZERS needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with -DCMAKE_CXX_COMPILER=clang++-14 (tools/fuzz.sh does)")
  endif()
  if(NOT KAN_SANITIZE)
    set(KAN_SANITIZE address,undefined)
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
if(KAN_SANITIZE)
  string(REPLACE ";" "," KAN_SANITIZE_FLAGS "${KAN_SANITIZE}")
  # Every finding stops the test that hit it, so ctest reports it as failed.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${KAN_SANITIZE_FLAGS}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${KAN_SANITIZE_FLAGS})
  message(STATUS "kanbench: sanitizers ${KAN_SANITIZE_FLAGS}")
endif()
