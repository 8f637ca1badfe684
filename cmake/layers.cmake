# layers.cmake -- one library per folder, in ARCHITECTURE.md's order.
#
# Each folder compiles as its own object library, and sees only the folders
# below it: its include path is a directory of links to those folders alone
# (build/layers/<folder>/), so `#include "runtime/program.h"` from
# backend_host/ does not build. The shared and static libfusejit are linked
# from these object libraries, in this order.
#
# fj_layer(FOLDER [LLVM] BELOW folders...)
set(FJ_LAYERS "")
function(fj_layer folder)
  cmake_parse_arguments(L "LLVM" "" "BELOW" ${ARGN})
  set(dir ${PROJECT_BINARY_DIR}/layers/${folder})
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir})
  foreach(f ${folder} ${L_BELOW})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${f} ${dir}/${f} SYMBOLIC)
  endforeach()
  file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.c)
  add_library(fj_${folder} OBJECT ${srcs})
  # ir/ is on every path: "ir.h" is the base header of every box.
  target_include_directories(fj_${folder} PRIVATE ${dir} ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/ir)
  if(L_LLVM)
    target_include_directories(fj_${folder} SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS})
  endif()
  target_compile_definitions(fj_${folder} PRIVATE FJ_BUILDING_LIBRARY)
  set(FJ_LAYERS ${FJ_LAYERS} fj_${folder} PARENT_SCOPE)
endfunction()

fj_layer(ir)
fj_layer(frontend BELOW ir)
fj_layer(passes BELOW ir)
fj_layer(codegen LLVM BELOW ir)
fj_layer(cache BELOW ir)
fj_layer(backend_host LLVM BELOW ir codegen cache)
fj_layer(backend_nvptx LLVM BELOW ir codegen cache)
fj_layer(runtime LLVM BELOW ir passes codegen cache backend_host backend_nvptx)
fj_layer(api LLVM BELOW ir frontend passes codegen cache backend_host backend_nvptx runtime)
