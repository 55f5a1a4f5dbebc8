#!/usr/bin/env bash
# Export ucx-hcr as a patch series against pristine UCX 1.13.1, ready for an
# upstream-style review: one patch per directory of new files from src/, then
# the glue patches (changes to UCX's own files, contrib/ucx-glue/*.patch, each
# with its description) that wire them into the build. The series applies with `patch -p1` (or
# `git am`) to a pristine UCX 1.13.1 tree.
#
#   export-patches.sh [-o OUTDIR] [-s UCX_SRC] [--apply-to DIR]
#
# -o OUTDIR      where the series goes (default: build/patches)
# -s UCX_SRC     pristine UCX 1.13.1 tree (default: build/ucx/pristine, else
#                fetched like the superbuild does)
# --apply-to DIR also copy UCX_SRC to DIR and apply the series there with
#                patch -p1, to check it (then e.g. ./autogen.sh && configure)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/patches
ucx_src=
apply_to=

while [ $# -gt 0 ]; do
    case $1 in
    -o) out=$2; shift 2 ;;
    -s) ucx_src=$2; shift 2 ;;
    --apply-to) apply_to=$2; shift 2 ;;
    *) echo "usage: $0 [-o OUTDIR] [-s UCX_SRC] [--apply-to DIR]" >&2; exit 2 ;;
    esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "$ucx_src" ]; then
    if [ -f "$top/build/ucx/pristine/configure.ac" ]; then
        ucx_src=$top/build/ucx/pristine
    else
        "$top/contrib/get-ucx-src.sh" "$work/pristine"
        ucx_src=$work/pristine
    fi
fi

# A git repository holding pristine UCX; every patch becomes one commit.
repo=$work/ucx
cp -R --no-preserve=ownership "$ucx_src" "$repo"
cd "$repo"
git init -q
git config user.name "ucx-hcr"
git config user.email "ucx-hcr@localhost"
git add -A
git commit -q -m "UCX 1.13.1"
base=$(git rev-parse HEAD)

# 1. new files, one commit per directory, in path order: they come first
#    because they are inert until the glue wires them into the build, so
#    every commit of the series builds
[ -d "$top/src" ] || mkdir -p "$work/empty-src"
(cd "$top/src" 2>/dev/null || cd "$work/empty-src"; find . -type f ! -name '*~' ! -name '.*' | sed 's|^\./||' |
    sort) > "$work/files"
for dir in $(xargs -r -n1 dirname < "$work/files" | sort -u); do
    grep "^$dir/[^/]*\$" "$work/files" | while read -r f; do
        mkdir -p "src/$(dirname "$f")"
        cp "$top/src/$f" "src/$f"
    done
    git add -A
    if ! git diff --cached --quiet; then
        git commit -q -m "src/$dir: add ucx-hcr files" \
            -m "$(grep "^$dir/[^/]*\$" "$work/files" | sed 's|^|  src/|')"
    fi
done

# 2. glue: the patch header (text before the first diff) is the message
for p in "$top"/contrib/ucx-glue/*.patch; do
    [ -f "$p" ] || continue
    # git apply, not patch: it refuses a malformed hunk
    git apply -p1 "$p"
    msg=$(sed -n '/^\(diff \|--- \|Index: \)/q;p' "$p")
    [ -n "$msg" ] || msg="glue: $(basename "$p" .patch)"
    git add -A
    git commit -q -m "$msg"
done

rm -rf "$out"
mkdir -p "$out"
git format-patch -q -o "$out" "$base"
n=$(ls "$out" | wc -l)
echo "export-patches: $n patches in $out"
ls "$out" | sed 's/^/  /'

if [ -n "$apply_to" ]; then
    rm -rf "$apply_to"
    cp -a "$ucx_src" "$apply_to"
    for p in "$out"/*.patch; do
        [ -f "$p" ] || continue
        patch -d "$apply_to" -p1 -s --no-backup-if-mismatch < "$p"
    done
    echo "export-patches: series applied with patch -p1 to $apply_to"
fi
