#!/usr/bin/env bash
# Install the Debian packages named on the command line, only those that are missing.
#
#   scripts/ensure_debian_packages.sh gcc-aarch64-linux-gnu qemu-user-static
#
# Idempotent: when every package is installed it prints nothing and changes nothing (no
# `apt-get update`, no root needed). Otherwise it runs `apt-get update` once and installs the
# missing ones, through sudo when not root. Exits non-zero when a package cannot be installed.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 PACKAGE..." >&2
    exit 2
fi

missing=()
for package in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing+=("$package")
    fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "$0: missing Debian packages (${missing[*]}) and no apt-get on this machine" >&2
    exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "$0: missing Debian packages (${missing[*]}); run as root or install sudo" >&2
        exit 1
    fi
    sudo=(sudo)
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
