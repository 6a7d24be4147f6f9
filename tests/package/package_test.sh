#!/usr/bin/env bash
# The .deb as a user installs it, in a clean Debian 12 root: debootstrap (from the mirror this machine's apt
# uses), `apt install ./statelens_*.deb` (its dependencies from Debian's archive, Recommends included, as
# apt does by default), then inside the root:
#   - the .deb's Depends (from dpkg-shlibdeps) hold the Qt, simdjson and yaml-cpp runtime packages, and
#     LibTorch is only recommended;
#   - `statelens ls` on a committed fixture lists its tensors; `statelens diff` on the demo pair exits 1
#     with the demo's failed load; a TorchScript archive lists through the installed LibTorch plugin;
#   - `python3 -c "import statelens_dump"` finds the installed helper, which dumps a real model that
#     `statelens ls` reads; `statelens dump-helper` names it and writes an identical copy elsewhere;
#   - the menu entry's Exec line, run under Xvfb on the demo pair, opens the window (its title names both
#     files) and a screenshot of the screen is saved (imagemagick's import) and must not be blank;
#   - desktop-file-validate, appstreamcli validate, and xdg-mime: a .safetensors and a .pt (and a .bin
#     and a DCP .metadata, by content) get StateLens's types, and StateLens is their default application;
#   - with LibTorch removed, a TorchScript archive fails with one line saying what to install (exit 2, no
#     crash) while everything else still works; purging the package leaves none of its files behind.
# Every check can fail; the script exits 1 when any did. The test tools (xvfb, imagemagick, xdg-utils,
# desktop-file-utils, appstream) are installed into the root only after the package's own checks ran.
#
# Usage, as root: tests/package/package_test.sh [DEB]   (./setup.sh package-test builds the .deb, then runs this)
# Slow (a few minutes, and network for the root and its packages): run it before a release and after
# changing install rules or resources/packaging/. Work folder: $STATELENS_PACKAGE_TEST_DIR (default
# /var/tmp/statelens-package-test); the debootstrap and apt download caches there are reused by later runs
# (the root itself is made fresh every time), and the screenshot is left there as window.png.
set -uo pipefail
cd "$(dirname "$0")/../.."
src=$PWD

deb=${1:-}
if [ -z "$deb" ]; then
  deb=$(ls -t build-package/statelens_*.deb 2>/dev/null | head -1)
fi
[ -n "$deb" ] && [ -f "$deb" ] || { echo "package_test: no .deb (build one with ./setup.sh package, or name it)" >&2; exit 2; }
deb=$(realpath "$deb")
[ "$(id -u)" -eq 0 ] || { echo "package_test: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "package_test: needs debootstrap (apt install debootstrap)" >&2; exit 2; }

work=${STATELENS_PACKAGE_TEST_DIR:-/var/tmp/statelens-package-test}
root=$work/root
mkdir -p "$work/debootstrap-cache" "$work/apt-archives/partial"
started=$(date +%s)
log=$work/log.txt
: >"$log"
note() { echo "[$(($(date +%s) - started))s] $*" | tee -a "$log"; }

# --- the root, and its cleanup ------------------------------------------------------------------------
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -lR "${mounted[i]}" 2>/dev/null
  done
  mounted=()
}
# The root is deleted only when nothing is mounted under it (a bind mount of /dev must never be emptied).
remove_root() {
  unmount_all
  if grep -qF " $root/" /proc/mounts || grep -qF " $root " /proc/mounts; then
    echo "package_test: $root still has mounts; left as it is" >&2
    return 1
  fi
  rm -rf --one-file-system "$root"
}
trap 'unmount_all' EXIT
mount_into() { # mount_into TARGET mount-args...
  local target=$root$1
  shift
  mkdir -p "$target"
  mount "$@" "$target" && mounted+=("$target")
}

# The mirror this machine's apt uses for bookworm (deb822 .sources first, then one-line sources.list).
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/{u=$2} /^Suites:/{if ($0 ~ /[ ]bookworm([ ]|$)/) {print u; exit}}' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}

[ -d "$root" ] && { remove_root || exit 2; }
note "debootstrap bookworm from $mirror"
if ! debootstrap --variant=minbase --cache-dir="$work/debootstrap-cache" bookworm "$root" "$mirror" >>"$log" 2>&1; then
  tail -20 "$log"
  echo "package_test: debootstrap failed (log: $log)" >&2
  exit 2
fi
# The same archive sections as this machine (bookworm-updates and security too, so the versions the .deb's
# dependencies were taken from are there); daemons never start inside the root.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
security=$(grep -hoE 'https?://[^ ]*debian-security' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
if [ -n "$security" ]; then
  printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$security" >>"$root/etc/apt/sources.list.d/debian.sources"
fi
# The `apt` command deletes what it downloaded once installed; kept, for the next run's cache.
echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' >"$root/etc/apt/apt.conf.d/01statelens-keep-debs"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mount_into /proc -t proc proc || exit 2
mount_into /dev --rbind /dev && mount --make-rslave "$root/dev" || exit 2
mount_into /var/cache/apt/archives --bind "$work/apt-archives" || exit 2 # downloads kept for later runs

# Runs a shell command inside the root, in a plain environment.
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/bash -c "$1"
}

# --- checks --------------------------------------------------------------------------------------------
failures=0
passed=0
check() { # check NAME COMMAND: COMMAND runs on the host, its output goes to the log
  local name=$1
  shift
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
    note "ok: $name"
  else
    failures=$((failures + 1))
    note "FAIL: $name"
    printf '%s\n' "$out" | sed 's/^/    /' | tail -30 | tee -a "$log"
  fi
  printf '%s\n' "$out" >>"$log"
}
# Fails, printing `out`, unless `out` holds every pattern (grep -E).
holds() {
  local out=$1 p
  shift
  for p in "$@"; do
    grep -qE -- "$p" <<<"$out" || { printf '%s\nexpected to find: %s\n' "$out" "$p"; return 1; }
  done
  printf '%s\n' "$out"
}

deb_fields() {
  local depends recommends
  depends=$(dpkg-deb -f "$deb" Depends) recommends=$(dpkg-deb -f "$deb" Recommends)
  echo "Depends: $depends"
  echo "Recommends: $recommends"
  holds "$depends" '(^|, )libqt6widgets6 ' '(^|, )libsimdjson14 ' '(^|, )libyaml-cpp0\.7 ' '(^|, )libc6 ' >/dev/null || return 1
  holds "$recommends" '(^|, )libtorch' 'python3-torch' >/dev/null || return 1
  if grep -q libtorch <<<"$depends"; then echo "LibTorch must not be a Depends"; return 1; fi
}
check "the .deb depends on Debian 12's runtime packages and only recommends LibTorch" deb_fields
note ".deb: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"

cp "$deb" "$root/tmp/"
note "apt install ./$(basename "$deb") in the clean root"
if ! in_root "apt-get update -qq && cd /tmp && apt install -y ./$(basename "$deb")" >>"$log" 2>&1; then
  tail -30 "$log"
  echo "package_test: installing the .deb failed (log: $log)" >&2
  exit 1
fi
note "installed: $(in_root "dpkg-query -W -f='\${Installed-Size}\n' | awk '{s+=\$1} END {print int(s/1024)}'") MiB in the root; statelens $(in_root "dpkg-query -W -f='\${Installed-Size}' statelens") KiB"

# Inputs, copied into the root: a committed fixture, a TorchScript archive, a legacy torch file, a DCP save.
mkdir -p "$root/tmp/in"
cp tests/fixtures/safetensors/all_dtypes.safetensors tests/fixtures/torchscript/nested.pt "$root/tmp/in/"
cp tests/fixtures/torch/proto4.legacy.pt "$root/tmp/in/legacy.bin"
cp tests/fixtures/dcp/t113_flat/.metadata "$root/tmp/in/.metadata"
version_runs() { holds "$(in_root 'statelens --version')" "^statelens $(dpkg-deb -f "$deb" Version)\$"; }
check "statelens --version" version_runs

# The names of a JSON document's entries (ls --format json), one per line, sorted.
entry_names() { /usr/bin/python3 -c 'import json, sys; print("\n".join(sorted(e["name"] for e in json.load(sys.stdin)["entries"])))'; }

ls_fixture() {
  local out names expected
  out=$(in_root 'statelens ls /tmp/in/all_dtypes.safetensors --format json') || { echo "$out"; return 1; }
  names=$(entry_names <<<"$out")
  expected=$(entry_names <tests/fixtures/safetensors/all_dtypes.expected.json)
  [ -n "$names" ] && [ "$names" = "$expected" ] || { echo "listed: $names"; echo "expected: $expected"; return 1; }
  in_root 'statelens ls /tmp/in/all_dtypes.safetensors'
}
check "statelens ls on a committed fixture lists its tensors" ls_fixture

diff_demo() {
  local out rc
  in_root 'statelens demo /tmp/demo' || return 1
  out=$(in_root 'statelens diff /tmp/demo/checkpoint.pt /tmp/demo/model.pt --format json')
  rc=$?
  [ $rc -eq 1 ] || { echo "exit $rc, expected 1 (the demo checkpoint does not load)"; echo "$out"; return 1; }
  /usr/bin/python3 -c 'import json, sys; s = json.load(sys.stdin)["summary"]; print(s); assert not s["load_succeeds"] and s["missing"] > 0 and s["unexpected"] > 0' <<<"$out" || return 1
  in_root 'statelens diff /tmp/demo/checkpoint.pt /tmp/demo/model.pt'
  return 0
}
check "statelens diff on the demo pair reports the failed load (exit 1)" diff_demo

torchscript_reads() { holds "$(in_root 'statelens ls /tmp/in/nested.pt' 2>&1)" 'weight'; }
check "a TorchScript archive lists through the installed LibTorch plugin" torchscript_reads

helper_imports() {
  local out
  out=$(in_root 'cd / && python3 -c "import statelens_dump; print(statelens_dump.__file__)"') || { echo "$out"; return 1; }
  holds "$out" '^/usr/lib/python3/dist-packages/statelens_dump\.py$' || return 1
  in_root 'cd / && python3 -c "import torch, statelens_dump; statelens_dump.dump(torch.nn.Sequential(torch.nn.Linear(3, 4)), \"/tmp/model.sldump.json\")"' || return 1
  holds "$(in_root 'statelens ls /tmp/model.sldump.json')" '0\.weight' '0\.bias'
}
check "python3 -c 'import statelens_dump' (the installed helper) dumps a model statelens reads" helper_imports

dump_helper() {
  holds "$(in_root 'statelens dump-helper 2>/dev/null')" '^/usr/lib/python3/dist-packages/statelens_dump\.py$' || return 1
  in_root 'statelens dump-helper /tmp/venv/site-packages && cmp /tmp/venv/site-packages/statelens_dump.py /usr/lib/python3/dist-packages/statelens_dump.py'
}
check "statelens dump-helper names the installed helper and writes an identical copy" dump_helper

man_page() { in_root 'test -s /usr/share/man/man1/statelens.1 && grep -qF ".SS \"statelens dump-helper\"" /usr/share/man/man1/statelens.1'; }
check "the man page is installed" man_page

# --- the desktop: test tools, installed only now --------------------------------------------------------
note "installing the test tools into the root (xvfb, imagemagick, xdg-utils, desktop-file-utils, appstream)"
if ! in_root 'apt-get install -y --no-install-recommends xvfb xauth x11-utils imagemagick xdg-utils libfile-mimeinfo-perl desktop-file-utils appstream' >>"$log" 2>&1; then
  tail -20 "$log"
  echo "package_test: installing the test tools failed (log: $log)" >&2
  exit 1
fi
desktop=$(in_root 'ls /usr/share/applications/*.desktop | xargs grep -l "^Exec=statelens"' | head -1)
note "desktop entry: $desktop"

check "desktop-file-validate" in_root "desktop-file-validate $desktop"
# --no-net: the screenshot's URL is a placeholder until the project has a home page (resources/packaging/CMakeLists.txt).
check "appstreamcli validate" in_root 'appstreamcli validate --no-net /usr/share/metainfo/*.metainfo.xml'

mime_types() {
  local wrong="" pair type
  cp "$root/tmp/in/all_dtypes.safetensors" "$root/tmp/in/model.safetensors"
  cp "$root/tmp/demo/model.pt" "$root/tmp/in/model.pt"
  cp "$root/tmp/demo/model.pt" "$root/tmp/in/pytorch_model.bin"
  for pair in model.safetensors=application/x-safetensors model.pt=application/x-pytorch-checkpoint \
      pytorch_model.bin=application/x-pytorch-checkpoint legacy.bin=application/x-pytorch-checkpoint \
      .metadata=application/x-pytorch-dcp-metadata; do
    type=$(in_root "xdg-mime query filetype /tmp/in/${pair%%=*}")
    echo "${pair%%=*}: $type"
    [ "$type" = "${pair#*=}" ] || wrong+=" ${pair%%=*}"
  done
  for type in application/x-safetensors application/x-pytorch-checkpoint; do
    local app
    app=$(in_root "xdg-mime query default $type")
    echo "default for $type: $app"
    [ "$app" = "$(basename "$desktop")" ] || wrong+=" default($type)"
  done
  [ -z "$wrong" ] || { echo "wrong:$wrong"; return 1; }
}
check "xdg-mime: .safetensors and .pt (and .bin, .metadata by content) open with StateLens" mime_types

# The menu entry's command line (Exec, with %F as the launcher fills it), on the demo pair, under Xvfb, with no
# window manager: the window sits at the top left of the screen, which import saves.
cat >"$root/tmp/gui.sh" <<'EOF'
#!/bin/bash
# gui.sh "COMMAND LINE": runs it, waits for a StateLens window titled with the demo pair, saves the screen.
$1 >/tmp/gui.log 2>&1 &
app=$!
title=""
for _ in $(seq 1 120); do
  # The main window's title names both sides ("checkpoint.pt → model.pt · unsaved rules — StateLens"); Qt's
  # 1x1 group leader window is titled "StateLens" alone.
  title=$(xwininfo -root -tree | grep -o '"[^"]*checkpoint\.pt[^"]*model\.pt[^"]*StateLens"' | head -1)
  [ -n "$title" ] && break
  kill -0 $app 2>/dev/null || break
  sleep 0.5
done
sleep 3 # the comparison runs in the background, then the window paints it
echo "title: $title"
import -window root /tmp/window.png
kill $app 2>/dev/null
wait $app 2>/dev/null
true
EOF
gui() {
  local exec title colours
  exec=$(in_root "sed -n 's/^Exec=//p' $desktop")
  exec=${exec//%F//tmp/demo/checkpoint.pt /tmp/demo/model.pt}
  echo "launching: $exec"
  rm -f "$root/tmp/window.png" "$work/window.png"
  in_root "xvfb-run -a -s '-screen 0 1600x1000x24' bash /tmp/gui.sh '$exec'" >"$work/gui.out" 2>&1
  cat "$work/gui.out"
  in_root 'cat /tmp/gui.log'
  title=$(sed -n 's/^title: //p' "$work/gui.out")
  [[ $title == *checkpoint.pt*model.pt* ]] || { echo "no StateLens window titled with the demo pair"; return 1; }
  [ -s "$root/tmp/window.png" ] || { echo "no screenshot"; return 1; }
  cp "$root/tmp/window.png" "$work/window.png"
  colours=$(in_root "convert /tmp/window.png -format %k info:")
  echo "screenshot: $work/window.png, $colours colours"
  [ "${colours:-0}" -gt 50 ] || { echo "the screenshot is (nearly) blank"; return 1; }
}
check "the menu entry opens the window on the demo pair under Xvfb (screenshot saved)" gui

# --- without LibTorch, and removal ----------------------------------------------------------------------
note "removing LibTorch (a Recommends) from the root"
in_root 'apt-get remove -y "libtorch*"' >>"$log" 2>&1
no_libtorch() {
  local out rc
  in_root 'dpkg-query -W -f="\${Status}" statelens' | grep -q "install ok installed" || { echo "statelens was removed with LibTorch"; return 1; }
  out=$(in_root 'statelens ls /tmp/in/nested.pt 2>&1')
  rc=$?
  echo "exit $rc: $out"
  [ $rc -eq 2 ] || { echo "expected exit 2 (a clear error), not $rc"; return 1; }
  [ "$(wc -l <<<"$out")" -eq 1 ] || { echo "expected one line"; return 1; }
  holds "$out" 'TorchScript' 'LibTorch is not installed' 'apt install libtorch' >/dev/null || return 1
  in_root 'statelens ls /tmp/in/all_dtypes.safetensors >/dev/null' || { echo "safetensors no longer lists"; return 1; }
}
check "without LibTorch a TorchScript archive gives one clear line (exit 2), the rest still works" no_libtorch

purge() {
  in_root 'apt-get purge -y statelens' >/dev/null || return 1
  local left
  left=$(in_root 'ls -d /usr/bin/statelens /usr/lib/*/statelens /usr/lib/statelens /usr/lib/python3/dist-packages/statelens_dump.py /usr/lib/python3/dist-packages/__pycache__/statelens_dump.* /usr/share/applications/*StateLens* /usr/share/mime/packages/statelens.xml 2>/dev/null')
  [ -z "$left" ] || { echo "left behind: $left"; return 1; }
}
check "purging the package leaves none of its files (the helper's bytecode included)" purge

unmount_all
note "$passed passed, $failures failed, in $(($(date +%s) - started)) s; log: $log; screenshot: $work/window.png"
[ "$failures" -eq 0 ] && remove_root
[ "$failures" -eq 0 ] || exit 1
