# The offloaded optimizer state ([optim] offload), compiled into adam and the
# ZeRO plugins. The host's AdamW must round as the device's does: no FMA
# contraction (clang contracts within an expression by default), and
# -fno-math-errno lets sqrtf be the instruction, which stays exact; the
# vector bodies choose their ISA at run time (offload_adamw.c).
# liburing where it is found (scripts/deps.sh installs it); without it the
# disk's reads and writes run on threads (plugins/optim/README.md).
# Included by each optimizer's directory: the check runs once, its target is
# global.
include_guard(GLOBAL)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PLAIT_LIBURING QUIET IMPORTED_TARGET GLOBAL liburing)
endif()
if(PLAIT_LIBURING_FOUND)
  message(STATUS "plait: liburing ${PLAIT_LIBURING_VERSION}: offload = nvme reads and writes through io_uring")
else()
  message(STATUS "plait: no liburing: offload = nvme reads and writes on threads (pread/pwrite)")
endif()
function(plait_add_offload target)
  set(d ${CMAKE_CURRENT_FUNCTION_LIST_DIR})
  target_sources(${target} PRIVATE ${d}/offload.c ${d}/offload_io.c ${d}/offload_uring.c ${d}/offload_adamw.c
                 ${d}/offload_copy.c)
  target_compile_options(${target} PRIVATE -ffp-contract=off -fno-math-errno)
  find_package(Threads REQUIRED)
  target_link_libraries(${target} PRIVATE Threads::Threads)
  if(TARGET PkgConfig::PLAIT_LIBURING)
    target_compile_definitions(${target} PRIVATE PLAIT_HAVE_LIBURING=1)
    target_link_libraries(${target} PRIVATE PkgConfig::PLAIT_LIBURING)
  endif()
endfunction()
