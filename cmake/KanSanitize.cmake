# KAN_SANITIZE=address,undefined builds every kanbench target with those sanitizers (tools/
# sanitize.sh builds and runs the tests so). LibTorch itself is not instrumented: ASan sees our
# code's memory errors, UBSan our undefined behaviour. Off by default.
set(KAN_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (empty: none)")
if(KAN_SANITIZE)
  string(REPLACE ";" "," KAN_SANITIZE_FLAGS "${KAN_SANITIZE}")
  # Every finding stops the test that hit it, so ctest reports it as failed.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${KAN_SANITIZE_FLAGS}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${KAN_SANITIZE_FLAGS})
  message(STATUS "kanbench: sanitizers ${KAN_SANITIZE_FLAGS}")
endif()
