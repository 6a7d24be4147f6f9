#!/usr/bin/env bash
# Renders the main window under Xvfb into PNGs, to be looked at before a change lands (HACKING.md, "Working
# on the window"; what the window shows: docs/window.md). Each picture is taken at 1600x1000 and at 1280x720
# (NAME-1600x1000.png, NAME-1280x720.png):
#   demo            the bundled demo pair as a first launch shows it: pairs on one line, the first selected
#   demo-applied    the same pair after Apply All (every suggested rule loaded), the rule editor raised
#   dcp-compiled    a torch 2.6 DCP of a torch.compile'd model against the plain model
#   titan-hf        a torchtitan DCP against the HF-named model (pairs from the suggestions)
#   ranks-live      a per-rank FSDP2 set (torch 2.6, two rank files) against a live dump of the model
#   100k            a 100,000-row pair (made by tests/bench/bench.py) with its 20 rules
# Usage: tests/screenshots/take_screenshots.sh [STATELENS_BINARY] [OUTPUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-build/app/statelens}")
out=${2:-screenshots}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t2=tests/fixtures/torch2
shot() { # NAME ARGS...
    local name=$1
    shift
    for size in 1600x1000 1280x720; do
        xvfb-run -a -s "-screen 0 1700x1100x24" "$bin" --size "$size" --screenshot "$out/$name-$size.png" "$@"
    done
}

shot demo
"$bin" demo "$work/demo" >/dev/null
"$bin" suggest "$work/demo/checkpoint.pt" "$work/demo/model.pt" -o "$work/demo/rules.yaml" 2>/dev/null
shot demo-applied --dock rules --rules "$work/demo/rules.yaml" "$work/demo/checkpoint.pt" "$work/demo/model.pt"
shot dcp-compiled "$t2/dcp/dcp_compiled" "$t2/models/titan_plain.pt"
shot titan-hf "$t2/dcp/dcp_titan" "$t2/models/hf.sldump.json"
shot ranks-live "$t2/fsdp2/compiled_model_rank0.pt" "$t2/fsdp2/compiled_model_rank1.pt" "$t2/fsdp2/fsdp2_rank0.sldump.json"
if [ "${SKIP_100K:-}" != 1 ]; then
    /usr/bin/python3 tests/bench/bench.py --generate diff-pair "$work/100k" 100000
    shot 100k --rules "$work/100k/rules.json" "$work/100k/a.safetensors" "$work/100k/b.safetensors"
fi
echo "screenshots in $out"
