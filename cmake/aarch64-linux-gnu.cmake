# Cross-compiling for 64-bit ARM Linux with Debian's cross gcc
# (gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-arm64-cross libstdc++6-arm64-cross).
#
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DIREE_HOST_BIN_DIR=<native install>/bin -DDYCL_IREE_SOURCE_DIR=...
#
# IREE's build runs host tools (iree-flatcc-cli, iree-c-embed-data) that must be built for the
# build machine first: a native build's `cmake --install` puts them in <prefix>/bin. Binaries run
# on x86 under `qemu-aarch64-static -L /usr/aarch64-linux-gnu`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(DYCL_CROSS_PREFIX "aarch64-linux-gnu-" CACHE STRING "Prefix of the cross compilers")
set(CMAKE_C_COMPILER "${DYCL_CROSS_PREFIX}gcc")
set(CMAKE_CXX_COMPILER "${DYCL_CROSS_PREFIX}g++")

# Libraries and headers come from the cross sysroot only; programs (python, tools) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)  # find_package(dycl_iree_runtime) from the cross prefix
# Try-runs of configure checks cannot execute aarch64 code without an emulator.
if(NOT CMAKE_CROSSCOMPILING_EMULATOR)
  find_program(_dycl_qemu qemu-aarch64-static qemu-aarch64)
  if(_dycl_qemu)
    set(CMAKE_CROSSCOMPILING_EMULATOR "${_dycl_qemu};-L;/usr/aarch64-linux-gnu")
  endif()
endif()
