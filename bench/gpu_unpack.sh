# . bench/gpu_unpack.sh DIR: what every GPU session script does first, on the GPU machine. DIR holds the
# binaries built here (strip, then xz: DIR/NAME.xz becomes /tmp/NAME) and the library cubins they need
# (DIR/cache/*.cubin.xz, from `dflc build examples/tiny.dfl -o X --arch sm_90a` with DFL_CACHE_DIR set:
# nothing compiles the library there). Sets B=DIR and DFL_CACHE_DIR.
B=${1:?usage: . bench/gpu_unpack.sh DIR}
for f in $B/*.xz; do [ -f "$f" ] && xz -dc "$f" > /tmp/$(basename "$f" .xz) && chmod +x /tmp/$(basename "$f" .xz); done
export DFL_CACHE_DIR=/tmp/dflc-cache
mkdir -p $DFL_CACHE_DIR
for f in $B/cache/*.cubin.xz; do [ -f "$f" ] && xz -dc "$f" > $DFL_CACHE_DIR/$(basename "$f" .xz); done
