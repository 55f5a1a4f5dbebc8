#!/bin/sh
# Generate the superbuild's configure script. UCX's own autogen.sh is run
# later, by `make`, inside the UCX tree the superbuild prepares.
set -e
cd "$(dirname "$0")"
mkdir -p config/m4 config/aux
autoreconf -fi
