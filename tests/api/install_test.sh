#!/bin/sh
# install_test.sh CMAKE BUILD_DIR SOURCE_DIR CC [FLAGS] -- cmake --install into a
# temporary prefix, then build examples/embed.c out of tree twice (pkg-config,
# and a CMake project with find_package(fusejit)) and run both.
set -e
CMAKE=$1 BUILD=$2 SRC=$3 CC=$4 FLAGS=${5:-}
command -v pkg-config >/dev/null 2>&1 || { echo "skip: pkg-config not installed"; exit 77; }
T=$(mktemp -d /tmp/fj-install.XXXXXX)
trap 'rm -rf "$T"' EXIT
"$CMAKE" --install "$BUILD" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { cat "$T/install.log"; exit 1; }
PC=$(dirname "$(find "$T/prefix" -name fusejit.pc | head -1)")
LIBDIR=$(dirname "$PC")
test -f "$T/prefix/include/fusejit/fusejit.h"
test -n "$(find "$T/prefix" -name fusejitConfig.cmake)"
test -n "$(find "$T/prefix" -name fusejitConfigVersion.cmake)"

# 1. pkg-config
export PKG_CONFIG_PATH="$PC"
echo "pkg-config fusejit: $(pkg-config --modversion fusejit) $(pkg-config --cflags --libs fusejit)"
$CC $FLAGS -std=c99 -Wall -Wextra -pedantic -Werror -o "$T/embed_pc" "$SRC/examples/embed.c" \
  $(pkg-config --cflags --libs fusejit) -lm -Wl,-rpath,"$LIBDIR"
"$T/embed_pc"

# 2. find_package(fusejit)
mkdir -p "$T/proj"
cat >"$T/proj/CMakeLists.txt" <<EOC
cmake_minimum_required(VERSION 3.20)
project(consumer LANGUAGES C)
find_package(fusejit 0.1 REQUIRED)
add_executable(embed_cmake $SRC/examples/embed.c)
target_link_libraries(embed_cmake PRIVATE fusejit::fusejit m)
EOC
"$CMAKE" -S "$T/proj" -B "$T/proj/build" -DCMAKE_PREFIX_PATH="$T/prefix" -DCMAKE_BUILD_RPATH="$LIBDIR" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" \
  >"$T/cfg.log" 2>&1 || { cat "$T/cfg.log"; exit 1; }
"$CMAKE" --build "$T/proj/build" >"$T/build.log" 2>&1 || { cat "$T/build.log"; exit 1; }
"$T/proj/build/embed_cmake"
echo "install test: ok"
