#!/usr/bin/env bash
# Installs the Debian packages moetune builds with. Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libopenblas-dev
          libpcre2-dev libutf8proc-dev libyaml-cpp-dev zlib1g-dev libopenmpi-dev openmpi-bin)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CUDA is optional: with nvcc on the PATH (or in /usr/local/cuda) the GPU code is built too.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc found in /usr/local/cuda/bin (add it to PATH to see it here; the build finds it either way)"
fi
