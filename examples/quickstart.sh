#!/usr/bin/env bash
# Fresh Debian machine → a compiled model checked against onnxruntime.
# Installs the system packages (gcc, the ARM cross toolchains, qemu, OpenSSH, CMake) and the Python packages (into .venv),
# builds an example model (MLPerf Tiny ResNet-8, random weights) with a script, compiles it for this
# machine and for a Cortex-M4, runs both through their C entry point (the M4 under qemu), and benchmarks it on
# a Cortex-M4 microcontroller board (qemu standing in for the board: loader, UART console, cycle counter).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends gcc libc6-dev binutils python3 python3-venv \
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross \
    gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-user qemu-system-arm openssh-server openssh-client \
    llvm-19 cmake make >/dev/null

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

.venv/bin/python examples/zoo.py resnet8 -o models
.venv/bin/aot build models/resnet8.onnx --target host -o build/resnet8
.venv/bin/aot run models/resnet8.onnx --target host
.venv/bin/aot run models/resnet8.onnx --target cortex-m4
.venv/bin/aot bench models/resnet8.onnx --board qemu-m4-uart --repeat 3    # a Cortex-M4 board, qemu standing in
