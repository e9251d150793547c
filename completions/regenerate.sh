#!/usr/bin/env bash
# Regenerate the shell completion scripts from the click command tree.
# Run after adding or renaming commands or options; tests/test_completions.py
# fails while these files are out of date.
#
#   completions/regenerate.sh            # uses `wfsched` on PATH
#   WFSCHED=.venv/bin/wfsched completions/regenerate.sh
set -euo pipefail
cd "$(dirname "$0")"
wfsched="${WFSCHED:-wfsched}"
for shell in bash zsh fish; do
    _WFSCHED_COMPLETE="${shell}_source" "$wfsched" > "wfsched.${shell}"
done
echo "regenerated: wfsched.bash wfsched.zsh wfsched.fish"
