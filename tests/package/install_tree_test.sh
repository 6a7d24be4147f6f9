#!/usr/bin/env bash
# tst_install_tree: `cmake --install` of this build into a temporary DESTDIR, then the installed files and
# the installed statelens run from there, a few seconds in all (the slow test of the .deb in a clean Debian
# root is package_test.sh). Checks: the file list is exactly resources/packaging/CMakeLists.txt's expected list (a
# missing rule, or a stray file such as a test binary, fails); the installed statelens finds its GUI module
# and LibTorch plugin in the install layout (a screenshot through the GUI module, a TorchScript archive
# listed through the plugin) and its installed dump helper; the man page has every subcommand and formats
# without warnings; the desktop entry, AppStream metadata and MIME types validate and resolve (each skipped,
# saying so, when its tool is not installed: CI's ./setup.sh test does not install them).
# Usage: install_tree_test.sh BUILD_DIR SOURCE_DIR EXPECTED_LIST PREFIX
set -uo pipefail
build=$1 src=$2 expected=$3 prefix=$4

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
skip() { echo "skipped: $*"; }
has() { grep -qxF "$1" "$expected"; }

if ! DESTDIR="$tmp/dest" cmake --install "$build" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "FAIL: cmake --install $build"
  exit 1
fi
root="$tmp/dest$prefix"
bin="$root/bin/statelens"
# In the asan preset the installed binary is the sanitized one: this test is about where things are
# installed and found, so what Qt and fontconfig keep until exit is not reported here (other suites check
# StateLens's own leaks).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# The installed files, exactly.
(cd "$root" && find . \( -type f -o -type l \) | sed 's|^\./||' | LC_ALL=C sort) >"$tmp/actual"
LC_ALL=C sort "$expected" >"$tmp/expected"
if diff -u "$tmp/expected" "$tmp/actual"; then pass "installed files ($(wc -l <"$tmp/actual"))"; else fail "installed files differ from $expected"; fi

out=$("$bin" --version 2>&1) && [[ $out == statelens\ * ]] && pass "installed statelens runs: $out" || fail "installed statelens --version: $out"

# The dump helper, where the install put it.
helper=$(grep '/statelens_dump.py$' "$expected")
out=$("$bin" dump-helper 2>/dev/null)
if [ "$out" = "$root/$helper" ] && cmp -s "$out" "$src/resources/python/statelens_dump.py"; then
  pass "statelens dump-helper names the installed helper"
else
  fail "statelens dump-helper printed '$out', expected $root/$helper (identical to resources/python/statelens_dump.py)"
fi

# The GUI module, from the install layout (the build tree's is not beside this executable).
if grep -q '/libstatelens-gui.so$' "$expected"; then
  if QT_QPA_PLATFORM=offscreen timeout 120 "$bin" --screenshot "$tmp/window.png" >"$tmp/gui.log" 2>&1 && [ -s "$tmp/window.png" ]; then
    pass "the installed GUI module opens the window (offscreen screenshot)"
  else
    cat "$tmp/gui.log"
    fail "the installed statelens could not show its window"
  fi
fi

# The LibTorch plugin, through the installed statelens's TorchScript worker.
if grep -q '/libstatelens-torch.so$' "$expected"; then
  if out=$(env -u STATELENS_TORCH_PLUGIN -u STATELENS_TORCHSCRIPT_WORKER timeout 120 "$bin" ls "$src/tests/fixtures/torchscript/nested.pt" 2>&1) && [ -n "$out" ]; then
    pass "the installed LibTorch plugin reads a TorchScript archive"
  else
    echo "$out"
    fail "the installed statelens could not read a TorchScript archive"
  fi
fi

# The man page: every subcommand, and groff finds nothing to warn about.
man=$(grep '/man1/statelens.1$' "$expected")
if [ -n "$man" ]; then
  missing=""
  for command in ls diff suggest rules stats demo dump-helper; do
    grep -qF ".SS \"statelens $command\"" "$root/$man" || missing+=" $command"
  done
  [ -z "$missing" ] && pass "man page has every subcommand" || fail "man page lacks:$missing"
  if command -v groff >/dev/null; then
    warnings=$(groff -man -Tutf8 -ww -z "$root/$man" 2>&1)
    [ -z "$warnings" ] && pass "man page formats without warnings" || fail "groff: $warnings"
  fi
else
  skip "man page (help2man was not found when this build was configured)"
fi

desktop=$(grep '^.*/applications/.*\.desktop$' "$expected")
if [ -n "$desktop" ]; then
  if command -v desktop-file-validate >/dev/null; then
    # Hints (two main categories, as asked for) are not failures; errors and warnings are.
    out=$(desktop-file-validate "$root/$desktop" 2>&1)
    [ $? -eq 0 ] && ! grep -qE 'error:|warning:' <<<"$out" && pass "desktop-file-validate" || fail "desktop-file-validate: $out"
  else
    skip "desktop-file-validate (apt install desktop-file-utils)"
  fi
  metainfo=$(grep '/metainfo/.*\.xml$' "$expected")
  if command -v appstreamcli >/dev/null; then
    # --no-net: the screenshot's URL is a placeholder (resources/packaging/CMakeLists.txt), not reachable yet.
    out=$(appstreamcli validate --no-net "$root/$metainfo" 2>&1) && pass "appstreamcli validate" || fail "appstreamcli validate: $out"
  else
    skip "appstreamcli validate (apt install appstream)"
  fi
  mimexml=$(grep '/mime/packages/statelens.xml$' "$expected")
  if command -v update-mime-database >/dev/null && command -v gio >/dev/null && [ -f /usr/share/mime/packages/freedesktop.org.xml ]; then
    mkdir -p "$tmp/xdg/mime/packages" "$tmp/files"
    cp /usr/share/mime/packages/freedesktop.org.xml "$root/$mimexml" "$tmp/xdg/mime/packages/"
    update-mime-database "$tmp/xdg/mime" >/dev/null 2>&1
    cp "$src/tests/fixtures/safetensors/all_dtypes.safetensors" "$tmp/files/a.safetensors"
    cp "$src/tests/fixtures/torch/proto4.legacy.pt" "$tmp/files/legacy.bin" # a .bin known by its content
    cp "$src/resources/demo/model.pt" "$tmp/files/zip.bin"
    cp "$src/tests/fixtures/dcp/t113_flat/.metadata" "$tmp/files/.metadata"
    wrong=""
    for pair in a.safetensors=application/x-safetensors legacy.bin=application/x-pytorch-checkpoint \
        zip.bin=application/x-pytorch-checkpoint .metadata=application/x-pytorch-dcp-metadata; do
      type=$(XDG_DATA_HOME="$tmp/xdg" XDG_DATA_DIRS="$tmp/xdg" gio info -a standard::content-type "$tmp/files/${pair%%=*}" 2>&1 | sed -n 's/.*standard::content-type: //p')
      [ "$type" = "${pair#*=}" ] || wrong+=" ${pair%%=*} is '$type', not ${pair#*=};"
    done
    [ -z "$wrong" ] && pass "MIME types resolve (safetensors, .bin by content, DCP .metadata)" || fail "MIME:$wrong"
  else
    skip "MIME lookup (needs update-mime-database and gio)"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all install-tree checks passed"
