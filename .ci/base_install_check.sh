#!/usr/bin/env bash
# The base install (`pip install -e .`, no extras) as a new user gets it: a fresh virtual environment runs
# README's first command exactly as README.md writes it (the first ```bash block under '## Set up'), then
# every command that draws nothing on the bundled samples. Any traceback or non-zero exit fails the check.
# The commands that draw (export --html/--png/--svg, diff --html, app) must instead say in one line which
# extra to install and exit 2. Run alone: .ci/base_install_check.sh (BASE_VENV=dir picks the environment's
# folder, default .venv-base/; BASE_REUSE=1 keeps an existing one instead of recreating it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
VENV=${BASE_VENV:-.venv-base}
DRAWING_LIBS="plotly streamlit kaleido"
SAMPLE=sample_traces/ag-gemm/host-sync
OTHER=sample_traces/ag-gemm/sync-before-loop
NSYS_SAMPLE=sample_traces/ag-gemm-nsys/sync-in-loop

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlapscope-base-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OVERLAPSCOPE_CACHE_DIR="$WORK/cache"  # a cold cache of its own: the first analyze parses every file
unset PYTHONPATH  # only what the install put in the environment may be importable
failures=0

fail() {
  echo "base-install: FAIL: $*"
  failures=$((failures + 1))
}

# README's first command: the lines of the first ```bash block after the '## Set up' heading.
readme_first_command() {
  awk '/^## Set up[[:space:]]*$/ { setup = 1; next }
       setup && /^## / { exit }
       setup && !inblock && /^```bash[[:space:]]*$/ { inblock = 1; next }
       inblock && /^```/ { exit }
       inblock { print }' README.md
}

# check NAME CMD...: run one command; it must exit 0 and print no traceback.
check() {
  local name=$1
  shift
  local log="$WORK/$name"
  local rc=0
  "$@" >"$log.out" 2>"$log.err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$name: exit $rc: $*"
    tail -n 20 "$log.err"
  elif grep -q "Traceback (most recent call last)" "$log.out" "$log.err"; then
    fail "$name: printed a traceback: $*"
    grep -h -A 20 "Traceback (most recent call last)" "$log.out" "$log.err" | head -n 40
  else
    echo "base-install: ok   $name ($(wc -c <"$log.out") bytes out)"
  fi
}

# needs_extra NAME CMD...: a drawing command on the base install: exit 2 and one stderr line naming the extra.
needs_extra() {
  local name=$1
  shift
  local log="$WORK/$name"
  local rc=0
  "$@" >"$log.out" 2>"$log.err" || rc=$?
  local lines
  lines=$(grep -c . "$log.err" || true)
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -qF "pip install -e '.[app]'" "$log.err"; then
    fail "$name: expected exit 2 and one line naming the app extra, got exit $rc and $lines lines: $*"
    head -n 20 "$log.err"
  else
    echo "base-install: ok   $name (exit 2: $(cat "$log.err"))"
  fi
}

echo "base-install: fresh virtual environment $VENV ($("$PYTHON" --version))"
if [[ "${BASE_REUSE:-0}" != 1 || ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv --clear "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

first=$(readme_first_command)
if [[ -z "$first" ]]; then
  echo "base-install: FAIL: no \`\`\`bash block under '## Set up' in README.md"
  exit 1
fi
echo "base-install: README's first command: $first"
check readme-first-command bash -c "$first"
grep -m 1 -A 6 "^overlap" "$WORK/readme-first-command.out" || true

# The check means something only if the environment really lacks the drawing libraries.
for lib in $DRAWING_LIBS; do
  if python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$lib') is None)"; then
    echo "base-install: FAIL: $lib is installed in $VENV: the base install must not bring it"
    exit 1
  fi
done

out="$WORK/outputs"
mkdir -p "$out"
for fmt in table json md csv; do
  check "analyze-$fmt" overlapscope analyze "$SAMPLE" -f "$fmt"
done
check analyze-nsys-no-cache overlapscope analyze "$NSYS_SAMPLE" --no-cache --streams
check analyze-tables overlapscope analyze "$SAMPLE" -f json --tables "$out/tables"
for fmt in table json md; do
  check "diff-$fmt" overlapscope diff "$SAMPLE" "$OTHER" -f "$fmt"
done
check diff-timeline overlapscope diff "$SAMPLE" "$OTHER" --timeline "$out/timeline.csv"
for fmt in table json md; do
  check "whatif-$fmt" overlapscope whatif "$SAMPLE" --fix host-syncs --fix compute-speed=1.5 -f "$fmt"
done
check export-perfetto overlapscope export "$SAMPLE" --perfetto "$out/trace.json.gz" --collectives-csv "$out/coll.csv"
check cache-info overlapscope cache info
check cache-clear overlapscope cache clear
check run-help overlapscope run --help
check sweep-help overlapscope sweep --help
check algorithms overlapscope algorithms
check app-help overlapscope app --help
check export-help overlapscope export --help

needs_extra export-html overlapscope export "$SAMPLE" --html "$out/report.html"
needs_extra export-png overlapscope export "$SAMPLE" --png "$out/timeline.png"
needs_extra export-svg-diff overlapscope export --diff "$SAMPLE" "$OTHER" --svg "$out/diff.svg"
needs_extra diff-html overlapscope diff "$SAMPLE" "$OTHER" --html "$out/diff.html"
needs_extra app overlapscope app "$SAMPLE" --dry-run

if [[ -n "$(git -C "$ROOT" status --porcelain -- sample_traces 2>/dev/null)" ]]; then
  fail "the commands changed files under sample_traces/"
fi
if [[ $failures -ne 0 ]]; then
  echo "base-install: $failures check(s) failed"
  exit 1
fi
echo "base-install: every check passed"
