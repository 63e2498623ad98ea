# dycl_add_bundle(<target> BUNDLE <path> [NAME <c_name>] [TARGET <bundle_target>])
#
# Makes <target>, a static library holding one dycl_iree bundle: its vmfb embedded with
# iree-c-embed-data and the code `python -m dycl_iree.emit_c` generates from its manifest,
# `<c_name>.h` / `<c_name>.c` (the typed function `<c_name>_run`, `<c_name>_create`, the
# signature). An application links <target> and includes "<c_name>.h":
#
#   dycl_add_bundle(early_exit_model BUNDLE ${CMAKE_CURRENT_SOURCE_DIR}/early_exit.dycl)
#   target_link_libraries(my_app PRIVATE early_exit_model)
#
# NAME defaults to the bundle folder's name without ".dycl", made a C identifier. TARGET picks
# the bundle's vmfb; by default the llvm-cpu vmfb for CMAKE_SYSTEM_PROCESSOR (a cross-compile to
# aarch64 takes the bundle's `llvm-cpu:aarch64-...` vmfb). Code is regenerated when the bundle's
# manifest changes.
#
# Needs: DYCL_PYTHON, a Python that imports dycl_iree (the one that exported the bundle; it reads
# the manifest only: no torch is imported), and iree-c-embed-data for the build machine
# (DYCL_EMBED_DATA_EXECUTABLE; found in IREE_HOST_BIN_DIR, this package, or PATH: the
# iree-base-runtime wheel has one).

include_guard(GLOBAL)

set(_DYCL_BUNDLE_SOURCE_ROOT "${CMAKE_CURRENT_LIST_DIR}/..")

function(_dycl_find_tools)
  if(NOT DYCL_PYTHON)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(DYCL_PYTHON "${Python3_EXECUTABLE}" CACHE FILEPATH "Python that imports dycl_iree (runs dycl_iree.emit_c)")
  endif()
  if(NOT DYCL_EMBED_DATA_EXECUTABLE)
    if(TARGET iree-c-embed-data AND NOT CMAKE_CROSSCOMPILING)
      set(_tool iree-c-embed-data)  # built in this project, next to IREE's runtime
    else()
      find_program(_tool iree-c-embed-data
        HINTS ${IREE_HOST_BIN_DIR} ${DYCL_IREE_RUNTIME_HOST_BIN_DIR} NO_CACHE)
    endif()
    if(NOT _tool)
      message(FATAL_ERROR "dycl_add_bundle needs iree-c-embed-data for the build machine: set "
                          "DYCL_EMBED_DATA_EXECUTABLE or IREE_HOST_BIN_DIR (pip's iree-base-runtime has one)")
    endif()
    set(DYCL_EMBED_DATA_EXECUTABLE "${_tool}" CACHE STRING "iree-c-embed-data for the build machine")
  endif()
endfunction()

function(dycl_add_bundle target)
  cmake_parse_arguments(PARSE_ARGV 1 _RULE "" "BUNDLE;NAME;TARGET" "")
  if(NOT _RULE_BUNDLE)
    message(FATAL_ERROR "dycl_add_bundle(${target}): BUNDLE <path to a .dycl folder> is required")
  endif()
  get_filename_component(_bundle "${_RULE_BUNDLE}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${_bundle}/manifest.json")
    message(FATAL_ERROR "dycl_add_bundle(${target}): ${_bundle} is not a dycl_iree bundle (no manifest.json)")
  endif()
  set(_name "${_RULE_NAME}")
  if(NOT _name)
    get_filename_component(_name "${_bundle}" NAME)
    string(REGEX REPLACE "\\.dycl$" "" _name "${_name}")
    string(MAKE_C_IDENTIFIER "${_name}" _name)
  endif()
  set(_selection --cpu "${CMAKE_SYSTEM_PROCESSOR}")
  if(_RULE_TARGET)
    set(_selection --target "${_RULE_TARGET}")
  endif()
  _dycl_find_tools()

  set(_out "${CMAKE_CURRENT_BINARY_DIR}/${target}.dycl_c")
  # The generator is torch-free; PYTHONPATH lets a source checkout's dycl_iree work uninstalled.
  add_custom_command(
    OUTPUT "${_out}/${_name}.h" "${_out}/${_name}.c" "${_out}/${_name}.vmfb"
    COMMAND ${CMAKE_COMMAND} -E env "PYTHONPATH=${DYCL_GENERATOR_PYTHONPATH}"
            "${DYCL_PYTHON}" -m dycl_iree.emit_c "${_bundle}" -o "${_out}" --name "${_name}" ${_selection}
            --copy-vmfb
    DEPENDS "${_bundle}/manifest.json"
    COMMENT "Generating C for bundle ${_bundle}"
    VERBATIM)
  add_custom_command(
    OUTPUT "${_out}/${_name}_vmfb.h" "${_out}/${_name}_vmfb.c"
    COMMAND "${DYCL_EMBED_DATA_EXECUTABLE}" "--output_header=${_out}/${_name}_vmfb.h"
            "--output_impl=${_out}/${_name}_vmfb.c" "--identifier=${_name}_vmfb" --flatten "${_out}/${_name}.vmfb"
    DEPENDS "${_out}/${_name}.vmfb" ${DYCL_EMBED_DATA_EXECUTABLE}
    COMMENT "Embedding ${_name}.vmfb"
    VERBATIM)
  add_library(${target} STATIC "${_out}/${_name}.c" "${_out}/${_name}_vmfb.c")
  target_include_directories(${target} PUBLIC "${_out}")
  target_link_libraries(${target} PUBLIC dycl_iree_runtime::dycl_runtime)
endfunction()
