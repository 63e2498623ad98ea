# `cmake --install` gives a package other projects find with `find_package(dycl_iree_runtime)`:
#   lib/libdycl_runtime.a, lib/libiree_runtime_unified.a (IREE's runtime in one archive),
#   include/ (dycl_runtime.h and IREE's runtime headers), bin/ (IREE's host tools, native builds),
#   lib/cmake/dycl_iree_runtime/ (targets dycl_iree_runtime::dycl_runtime and ::iree_runtime, and
#   dycl_add_bundle).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_dycl_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/dycl_iree_runtime")

install(TARGETS dycl_runtime EXPORT dycl_iree_runtimeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT dycl_iree_runtimeTargets NAMESPACE dycl_iree_runtime:: DESTINATION ${_dycl_cmake_dir})

# IREE's runtime: its unified archive and the headers of runtime/src (sources and generated).
# The unified archive leaves out flatcc's verifier (a library of its own), which loading a vmfb uses.
install(FILES $<TARGET_FILE:iree_runtime_unified> $<TARGET_FILE:flatcc_parsing> DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY "${_dycl_iree_source}/runtime/src/iree" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.inc")
install(DIRECTORY "${CMAKE_BINARY_DIR}/iree/runtime/src/iree" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.inc")
# The macros IREE's headers were compiled with (IREE_THREADING_ENABLE, the system allocator, ...),
# evaluated at generate time: the property holds generator expressions.
file(GENERATE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/dycl_iree_runtimeDefinitions.cmake"
  CONTENT "set(_dycl_iree_definitions \"$<TARGET_GENEX_EVAL:iree_runtime_unified,$<TARGET_PROPERTY:iree_runtime_unified,INTERFACE_COMPILE_DEFINITIONS>>\")\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/dycl_iree_runtimeDefinitions.cmake" DESTINATION ${_dycl_cmake_dir})
set(DYCL_IREE_ARCHIVE_NAME "${CMAKE_STATIC_LIBRARY_PREFIX}iree_runtime_unified${CMAKE_STATIC_LIBRARY_SUFFIX}")
set(DYCL_FLATCC_ARCHIVE_NAME "${CMAKE_STATIC_LIBRARY_PREFIX}flatcc_parsing${CMAKE_STATIC_LIBRARY_SUFFIX}")

# Host tools for building bundles on the build machine: only a native build can run its own.
if(NOT CMAKE_CROSSCOMPILING)
  install(PROGRAMS $<TARGET_FILE:iree-c-embed-data> DESTINATION ${CMAKE_INSTALL_BINDIR})
  if(TARGET iree-flatcc-cli)
    install(PROGRAMS $<TARGET_FILE:iree-flatcc-cli> DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
  # `all` builds them, so that `cmake --install` finds them.
  add_custom_target(dycl_host_tools ALL DEPENDS iree-c-embed-data)
  if(TARGET iree-flatcc-cli)
    add_dependencies(dycl_host_tools iree-flatcc-cli)
  endif()
endif()

install(FILES "${CMAKE_CURRENT_LIST_DIR}/DyclBundle.cmake" DESTINATION ${_dycl_cmake_dir})
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/dycl_iree_runtimeConfig.cmake.in"
  "${CMAKE_CURRENT_BINARY_DIR}/dycl_iree_runtimeConfig.cmake"
  INSTALL_DESTINATION ${_dycl_cmake_dir})
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/dycl_iree_runtimeConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/dycl_iree_runtimeConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/dycl_iree_runtimeConfigVersion.cmake"
  DESTINATION ${_dycl_cmake_dir})
