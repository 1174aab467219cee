#!/usr/bin/env bash
# An arm64 CPython 3.11 with numpy and onnxruntime (the official aarch64 wheels from PyPI) that runs under
# qemu-aarch64, for benchmarks/arm_peer.py: onnxruntime as a Raspberry Pi user runs it. Nothing is installed
# system-wide except dpkg's arm64 architecture (for `apt-get download`); the tree is unpacked from Debian's
# .debs and the wheels into DIR. Needs root and the network.
#
#   bash benchmarks/arm64_python.sh DIR [ONNXRUNTIME_VERSION] [NUMPY_VERSION]
#
# DIR/cpuinfo.cortex-a72, DIR/cpuinfo.cortex-a76 (which declares the dot product, asimddp) and
# DIR/cpuinfo.neoverse-n2 (the dot product and the int8 matrix multiply, i8mm; SVE2 at 128 bits) are what
# onnxruntime's cpuinfo reads in place of the host's x86 /proc/cpuinfo (a bind mount in a private mount
# namespace), or it crashes on import.
set -euo pipefail
dir=$(realpath -m "${1:?usage: arm64_python.sh DIR [ONNXRUNTIME_VERSION] [NUMPY_VERSION]}")
ort=${2:-$(python3 -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null || echo 1.32.0)}
numpy_version=${3:-2.4.6}
mkdir -p "$dir/debs" "$dir/root" "$dir/site" "$dir/wheels"
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
apt-get update -qq
cd "$dir/debs"
apt-get download -qq libc6:arm64 libgcc-s1:arm64 libstdc++6:arm64 libgomp1:arm64 \
  python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64 \
  libexpat1:arm64 zlib1g:arm64 libffi8:arm64 libssl3:arm64 libbz2-1.0:arm64 liblzma5:arm64 libsqlite3-0:arm64 \
  libncursesw6:arm64 libtinfo6:arm64 libreadline8:arm64 libuuid1:arm64 libcrypt1:arm64 libnsl2:arm64 libtirpc3:arm64 \
  libdb5.3:arm64 libgdbm6:arm64 libgssapi-krb5-2:arm64 libkrb5-3:arm64 libk5crypto3:arm64 libkrb5support0:arm64 \
  libcom-err2:arm64 libkeyutils1:arm64 2>&1 | grep -v '^W:' || true
for deb in *.deb; do dpkg-deb -x "$deb" "$dir/root"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 --platform manylinux2014_aarch64 \
  "onnxruntime==$ort" "numpy==$numpy_version" -d "$dir/wheels"
for wheel in "$dir"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$dir/site"; done
cpuinfo() {  # features, variant, part, revision: two cores of an Arm Cortex-A
  for core in 0 1; do
    printf 'processor\t: %s\nBogoMIPS\t: 108.00\nFeatures\t: %s\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: %s\nCPU part\t: %s\nCPU revision\t: %s\n\n' \
      "$core" "$1" "$2" "$3" "$4"
  done
}
cpuinfo "fp asimd evtstrm crc32 cpuid" 0x0 0xd08 3 > "$dir/cpuinfo.cortex-a72"
cpuinfo "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp" 0x4 0xd0b 1 \
  > "$dir/cpuinfo.cortex-a76"
cpuinfo "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 \
sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 \
flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti" 0x0 0xd49 0 > "$dir/cpuinfo.neoverse-n2"
unshare -m sh -c "mount --bind '$dir/cpuinfo.cortex-a72' /proc/cpuinfo && exec qemu-aarch64 -cpu cortex-a72 -L '$dir/root' \
  -E PYTHONPATH='$dir/site' '$dir/root/usr/bin/python3.11' -c 'import numpy, onnxruntime; print(\"arm64 python ok: numpy\", numpy.__version__, \"onnxruntime\", onnxruntime.__version__)'"
