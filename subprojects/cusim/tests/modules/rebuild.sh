#!/bin/sh
# Rebuilds the module fixtures from kernels.cu, symbols.cu and arches.cu with nvcc
# (the commands in README.md) and checks that each rebuilt image names the
# same kernels as the committed one (module_names reads both).  Exit 77 (skipped) without
# nvcc: CI has no CUDA toolkit.
#   rebuild.sh NVCC MODULE_NAMES FIXTURE_DIR
set -eu
nvcc=$1 names=$2 dir=$3
[ -x "$nvcc" ] || { echo "no nvcc at $nvcc: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -cubin -rdc=true -arch=sm_90 -o "$tmp/kernels.sm_90.cubin" "$dir/kernels.cu"
"$nvcc" -cubin -arch=sm_90 -o "$tmp/symbols.sm_90.cubin" "$dir/symbols.cu"
for m in kernels symbols; do
    "$nvcc" -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -o "$tmp/$m.fatbin" "$dir/$m.cu"
    "$nvcc" -ptx -arch=sm_90 -o "$tmp/$m.ptx" "$dir/$m.cu"
    "$nvcc" -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -Xfatbin=-compress-all --compress-mode=speed -o "$tmp/$m.lz4.fatbin" "$dir/$m.cu"
    "$nvcc" -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -Xfatbin=-compress-all -o "$tmp/$m.zstd.fatbin" "$dir/$m.cu"
done
"$nvcc" -fatbin -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_86,code=sm_86 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    -o "$tmp/arches.fatbin" "$dir/arches.cu"
"$nvcc" -fatbin -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=[sm_80,compute_80] \
    -gencode arch=compute_86,code=sm_86 -gencode arch=compute_100,code=compute_100 \
    -o "$tmp/arches_ptx.fatbin" "$dir/arches.cu"
"$nvcc" -fatbin -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_100,code=[sm_100,compute_100] -o "$tmp/arches_none.fatbin" "$dir/arches.cu"
"$nvcc" -fatbin -gencode arch=compute_90a,code=[sm_90a,compute_90a] -o "$tmp/arches_90a.fatbin" "$dir/arches.cu"
status=0
for f in kernels.sm_90.cubin kernels.fatbin kernels.ptx symbols.sm_90.cubin symbols.fatbin symbols.ptx \
    kernels.lz4.fatbin kernels.zstd.fatbin symbols.lz4.fatbin symbols.zstd.fatbin \
    arches.fatbin arches_ptx.fatbin arches_none.fatbin arches_90a.fatbin; do
    "$names" "$dir/$f" >"$tmp/$f.committed"
    "$names" "$tmp/$f" >"$tmp/$f.rebuilt"
    if ! diff -u "$tmp/$f.committed" "$tmp/$f.rebuilt"; then
        echo "FAIL: $f rebuilt by nvcc names other kernels than the committed one"
        status=1
    fi
    [ -s "$tmp/$f.committed" ] || { echo "FAIL: $f names no kernel"; status=1; }
done
[ $status = 0 ] && echo "the fixtures rebuilt by nvcc name the same kernels"
exit $status
