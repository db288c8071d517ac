# The offloaded optimizer state ([optim] offload), compiled into adam and the
# ZeRO plugins. The host's AdamW must round as the device's does: no FMA
# contraction (clang contracts within an expression by default), and
# -fno-math-errno lets the compiler vectorise sqrtf, which stays exact.
set(PLAIT_OFFLOAD_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR})
function(plait_add_offload target)
  set(d ${PLAIT_OFFLOAD_COMMON_DIR})
  target_sources(${target} PRIVATE ${d}/offload.c ${d}/offload_io.c ${d}/offload_adamw.c)
  target_compile_options(${target} PRIVATE -ffp-contract=off -fno-math-errno)
  find_package(Threads REQUIRED)
  target_link_libraries(${target} PRIVATE Threads::Threads)
endfunction()
