# One INTERFACE target carries the project's warning flags; every kanbench target links it.
add_library(kan_warnings INTERFACE)
# C++ only: nvcc does not take these flags, and LibTorch's headers are not warning-clean under it.
target_compile_options(kan_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
                       $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${KAN_WARNINGS_AS_ERRORS}>>:-Werror>)
