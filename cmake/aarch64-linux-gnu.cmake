# cmake/aarch64-linux-gnu.cmake: cross-compiling for AArch64 Linux with Debian's cross compiler
# (g++-aarch64-linux-gnu) against Debian's arm64 library packages (multiarch: headers in
# /usr/include, libraries and .pc files in /usr/lib/aarch64-linux-gnu). scripts/cross-build
# installs both. Programs (glslc for the Vulkan shaders) are the host's.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Tests and try-runs under user-mode emulation.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
