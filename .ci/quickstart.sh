#!/usr/bin/env bash
# The README's quick start on a fresh clone of HEAD: its commands (step 1, the install into a fresh .venv, and
# step 2, the demo and the tour's files), taken from README.md verbatim, then the README's Python and
# IPython blocks with the interpreter step 1 installed — exactly the packages a new user has.
# Usage (as in .ci/run, after the tests):  bash .ci/quickstart.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/dpsql-quickstart.XXXXXX)"
trap 'rm -rf "$work"' EXIT

git clone --quiet "$repo" "$work/dpsql"  # the committed HEAD, as a new user gets it
cd "$work/dpsql"
python3 tests/end_to_end/readme_blocks.py --quick-start README.md > "$work/quickstart.sh"
echo "quickstart: running the README's quick start on a fresh clone:" >&2
cat "$work/quickstart.sh" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 bash -euo pipefail "$work/quickstart.sh" > "$work/quickstart.log" 2>&1 || { tail -n 50 "$work/quickstart.log" >&2; exit 1; }
MPLBACKEND=Agg DPSQL_PROGRESS=0 PLOOMBER_STATS_ENABLED=false PLOOMBER_VERSION_CHECK_DISABLED=true \
    .venv/bin/python tests/end_to_end/readme_blocks.py README.md > "$work/readme.json"
echo "quickstart: the quick start and the README's Python blocks ran with its packages" >&2
