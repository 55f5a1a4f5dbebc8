#!/usr/bin/env bash
# UCX's code style on new and changed lines: formats, with clang-format-14
# and .clang-format (UCX's, less the seven keys that need UCX's patched
# clang-format), only the lines of C files changed since BASE, as UCX's own CI
# does for a pull request, and fails if that changes anything.
#
#   check-format.sh [--fix] [BASE]
#
# BASE defaults to the commit that adopted .clang-format, so that every line
# written or changed since is checked and older ones are not. --fix formats
# those lines in the work tree instead. The files checked are this
# repository's C code (src/, contrib/, test/, bench/); the glue patches are
# not, since a line they add to one of UCX's tables or macro lists follows
# its neighbours there, which clang-format-14 would reflow with it.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

fix=0
if [ "${1:-}" = "--fix" ]; then
    fix=1
    shift
fi
base=${1:-}

cf=$(command -v clang-format-14 || true)
gcf=$(command -v git-clang-format-14 || true)
if [ -z "$cf" ] || [ -z "$gcf" ]; then
    echo "check-format: clang-format-14 is not installed" \
         "(contrib/install-deps.sh installs it)" >&2
    exit 2
fi

if [ -z "$base" ]; then
    if ! git rev-parse --git-dir > /dev/null 2>&1; then
        echo "check-format: not a git checkout, nothing to compare with" >&2
        exit 0
    fi
    base=$(git log --diff-filter=A --format=%H -- .clang-format | tail -n 1)
    if [ -z "$base" ]; then
        echo "check-format: no commit adds .clang-format (a shallow clone?);" \
             "pass the commit to compare with" >&2
        exit 2
    fi
fi

files=$(git diff --name-only --diff-filter=AMR "$base" -- \
            'src/*.[ch]' 'contrib/*.[ch]' 'test/*.[ch]' 'bench/*.[ch]')
if [ -z "$files" ]; then
    echo "check-format: no C file changed since $(git rev-parse --short "$base")"
    exit 0
fi

# shellcheck disable=SC2086
if [ $fix = 1 ]; then
    "$gcf" --binary "$cf" --style file --force "$base" -- $files
    exit 0
fi

# shellcheck disable=SC2086
out=$("$gcf" --binary "$cf" --style file --diff "$base" -- $files)
case $out in
"no modified files to format"|"clang-format did not modify any files"|"")
    echo "check-format: lines changed since $(git rev-parse --short "$base")" \
         "in $(echo "$files" | wc -l) files follow .clang-format"
    exit 0
    ;;
esac

echo "$out"
echo "check-format: the lines above do not follow .clang-format;" \
     "contrib/check-format.sh --fix formats them" >&2
exit 1
