#!/usr/bin/env bash
# Renders the main window under Xvfb into PNGs, to be looked at before a change lands:
#   demo.png        the bundled demo pair as a first launch shows it (the first difference selected)
#   demo-rules.png  the same pair with the suggested rules loaded, the rule editor raised
#   100k.png        a 100,000-row pair (made by tests/bench/bench.py) with its 20 rules
# Usage: tests/screenshots/take_screenshots.sh [STATELENS_BINARY] [OUTPUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-build/app/statelens}")
out=${2:-screenshots}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shot() { xvfb-run -a -s "-screen 0 1600x1000x24" "$bin" --screenshot "$@"; }

shot "$out/demo.png"
"$bin" demo "$work/demo" >/dev/null
"$bin" suggest "$work/demo/checkpoint.pt" "$work/demo/model.pt" -o "$work/demo/rules.yaml" 2>/dev/null
shot "$out/demo-rules.png" --dock rules --rules "$work/demo/rules.yaml" "$work/demo/checkpoint.pt" "$work/demo/model.pt"
/usr/bin/python3 tests/bench/bench.py --generate diff-pair "$work/100k" 100000
shot "$out/100k.png" --rules "$work/100k/rules.json" "$work/100k/a.safetensors" "$work/100k/b.safetensors"
echo "screenshots in $out: demo.png demo-rules.png 100k.png"
