# One INTERFACE target carries the project's warning flags; every kanbench target links it.
add_library(kan_warnings INTERFACE)
target_compile_options(kan_warnings INTERFACE -Wall -Wextra
                       $<$<BOOL:${KAN_WARNINGS_AS_ERRORS}>:-Werror>)
