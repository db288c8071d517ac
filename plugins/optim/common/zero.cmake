# The ZeRO engine and the Adam-family helpers, compiled into each of the
# zero1, zero2 and zero3 plugins (static sources, no shared library).
set(PLAIT_ZERO_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR})
include(${CMAKE_CURRENT_LIST_DIR}/offload.cmake)
function(plait_add_zero_plugin name)
  set(d ${PLAIT_ZERO_COMMON_DIR})
  plait_add_plugin(optim ${name} SOURCES ${name}.c ${d}/zero_partition.c ${d}/zero_pool.c ${d}/zero_grads.c
    ${d}/zero_gather.c ${d}/zero_step.c ${d}/zero_export.c ${d}/zero_state.c ${d}/optim_common.c ${d}/bf16_moments.c)
  target_include_directories(plait-optim-${name} PRIVATE ${d})
  target_link_libraries(plait-optim-${name} PRIVATE m)
  plait_add_offload(plait-optim-${name})
endfunction()
