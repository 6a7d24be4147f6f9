#!/usr/bin/env bash
# StateLens entry point on Debian 12 (run as root, or with sudo available):
#   ./setup.sh gui     install what is missing, build, open the GUI on the bundled demo pair
#   ./setup.sh test    install what is missing, build, run the whole test suite (what CI runs)
# Also: ./setup.sh build | fuzz [SECONDS] | bench | screenshots [DIR]
#       ./setup.sh package        build the .deb (build-package/statelens_*.deb)
#       ./setup.sh package-test   build it, then install and check it in a clean Debian 12 root (slow)
set -euo pipefail
cd "$(dirname "$0")"

# Debian packages, and why: see HACKING.md "Dependencies".
PACKAGES=(
  cmake ninja-build g++ pkg-config
  qt6-base-dev libgl-dev libtorch-dev
  libsimdjson-dev rapidjson-dev libspdlog-dev libcli11-dev zlib1g-dev
  libpcre2-dev libyaml-cpp-dev libxxhash-dev
  python3-torch python3-numpy
  clang libfuzzer-14-dev libclang-rt-14-dev
  xvfb xauth time
)
# Only for `package` and `package-test`, so `test` does not install them: dpkg-shlibdeps (dpkg-dev) for the
# .deb's dependencies, help2man for the man page, desktop-file-utils and appstream to validate the desktop
# files, debootstrap for package-test's clean root (HACKING.md "Dependencies").
PACKAGE_PACKAGES=(dpkg-dev help2man desktop-file-utils appstream)
PACKAGE_TEST_PACKAGES=(debootstrap)

install_missing() { # install_missing [EXTRA_PACKAGE...]
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  local preset=$1
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
}

cpu_count() { nproc 2>/dev/null || echo 2; }

fuzz_smoke() {
  local seconds=${1:-10}
  build fuzz
  tests/fuzz/run_fuzzers.sh build-fuzz "$seconds"
}

case "${1:-}" in
  gui)
    install_missing
    build app
    if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
      echo
      echo "No display found, so the GUI cannot open here. Headless, the same demo looks like this:"
      echo "  build/app/statelens demo /tmp/statelens-demo"
      echo "  build/app/statelens diff /tmp/statelens-demo/checkpoint.pt /tmp/statelens-demo/model.pt"
      echo "  build/app/statelens suggest /tmp/statelens-demo/checkpoint.pt /tmp/statelens-demo/model.pt -o rules.yaml"
      echo "Or run the GUI on a virtual display: xvfb-run build/app/statelens"
      echo
      build/app/statelens demo /tmp/statelens-demo >/dev/null
      # diff exits 1 here on purpose: the demo checkpoint does not load into the demo model.
      build/app/statelens diff /tmp/statelens-demo/checkpoint.pt /tmp/statelens-demo/model.pt || true
      exit 0
    fi
    exec build/app/statelens
    ;;
  test)
    install_missing
    build dev
    ctest --preset dev -j "$(cpu_count)"
    build asan
    ctest --preset asan -j "$(cpu_count)"
    build core-only
    ctest --preset core-only -j "$(cpu_count)"
    fuzz_smoke "${FUZZ_SECONDS:-10}"
    echo "setup: all tests passed"
    ;;
  build)
    install_missing
    build app
    ;;
  fuzz)
    install_missing
    fuzz_smoke "${2:-300}"
    ;;
  screenshots)
    install_missing
    build dev
    tests/screenshots/take_screenshots.sh build/app/statelens "${2:-screenshots}"
    ;;
  package)
    install_missing "${PACKAGE_PACKAGES[@]}"
    build package
    cpack --preset package
    ls -l build-package/statelens_*.deb
    ;;
  package-test)
    install_missing "${PACKAGE_PACKAGES[@]}" "${PACKAGE_TEST_PACKAGES[@]}"
    build package
    cpack --preset package
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo tests/package/package_test.sh "$(ls -t build-package/statelens_*.deb | head -1)"
    ;;
  bench)
    install_missing
    build dev
    /usr/bin/python3 tests/bench/bench.py --statelens build/app/statelens
    ;;
  *)
    sed -n '2,8p' "$0"
    exit 2
    ;;
esac
