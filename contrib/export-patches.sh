#!/usr/bin/env bash
# Export ucx-hcr as a patch series against pristine UCX 1.13.1, the way a UCX
# maintainer reviews it: one patch per feature, in dependency order, each
# with a UCX-style title (buildlib/pr/codestyle.yml: ^[0-9A-Z/_\-]*: \w) and
# a body that says why. A feature is one glue patch of contrib/ucx-glue/
# (its header, the text before the first diff, is the commit message) and
# the new files of src/ that come with it (the series table below).
#
#   export-patches.sh [-o OUTDIR] [-s UCX_SRC] [--apply-to DIR]
#                     [--build-each DIR]
#
# -o OUTDIR         where the series goes (default: build/patches)
# -s UCX_SRC        pristine UCX 1.13.1 tree (default: build/ucx/pristine,
#                   else fetched like the superbuild does)
# --apply-to DIR    copy UCX_SRC to DIR and apply the series there with
#                   patch -p1, to check it
# --build-each DIR  in DIR, apply the series one patch at a time with git am
#                   and build UCX after each (autogen and configure again
#                   after a patch that changes configure.ac or an .m4 file);
#                   prints the time each took
#
# It fails if a glue patch or a file of src/ is not in exactly one feature,
# or if a title breaks UCX's rule.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/patches
ucx_src=
apply_to=
build_each=
title_rule='^[0-9A-Z/_\-]*: \w'

# feature = glue patch : new files under src/ (directories or files)
series=(
    "0000-uct-ib-rc-verbs-export.patch:"
    "0001b-uct-ib-rc-verbs-post-in-error.patch:"
    "0003-ucs-mpool-bounded-grow-errors.patch:"
    "0004-ucp-proto-reconfig-replay.patch:"
    "0005-ucp-wireup-cm-any-device.patch:"
    "0007-ucp-proto-peer-failure.patch:"
    "0001-uct-api-put-notify.patch:"
    "0009-ucs-config-field-types.patch:ucs/config"
    "0006-ucs-rcache-is-cached.patch:"
    "0010-ucs-copy-engine.patch:ucs/copy"
    "0011-ucs-calib.patch:ucs/calib"
    "0002-uct-ib-md-open-hook.patch:"
    "0003-uct-ib-hcr-module.patch:uct/ib/hcr"
    "0012-tools-calib.patch:tools/calib"
    "0016-tools-perf-fresh-memory.patch:"
    "0013-ucp-proto-sppln.patch:ucp/proto ucp/rndv ucp/rma"
    "0014-ucp-rvma.patch:ucp/api ucp/rvma"
    "0020-test-gtest-put-notify.patch:"
)

usage() {
    echo "usage: $0 [-o OUTDIR] [-s UCX_SRC] [--apply-to DIR]" \
         "[--build-each DIR]" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
    -o) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    -s) [ $# -ge 2 ] || usage; ucx_src=$2; shift 2 ;;
    --apply-to) [ $# -ge 2 ] || usage; apply_to=$2; shift 2 ;;
    --build-each) [ $# -ge 2 ] || usage; build_each=$2; shift 2 ;;
    *) usage ;;
    esac
done

die() {
    echo "export-patches: $*" >&2
    exit 1
}

# the paths stay valid after the script changes directory
out=$(realpath -m "$out")
[ -z "$apply_to" ] || apply_to=$(realpath -m "$apply_to")
[ -z "$build_each" ] || build_each=$(realpath -m "$build_each")

# ---- the table against the tree: every glue patch and every file of src/
#      belongs to exactly one feature
glue=$top/contrib/ucx-glue
for entry in "${series[@]}"; do
    patch=${entry%%:*}
    [ -f "$glue/$patch" ] || die "$patch is in the series but not in $glue"
    title=$(head -n 1 "$glue/$patch")
    echo "$title" | grep -qP "$title_rule" ||
        die "$patch: title '$title' does not match $title_rule"
    [ -z "$(sed -n 2p "$glue/$patch")" ] && [ -n "$(sed -n 3p "$glue/$patch")" ] ||
        die "$patch: the title needs a blank line and a body that says why"
done
for p in "$glue"/*.patch; do
    n=$(printf '%s\n' "${series[@]}" | grep -c "^$(basename "$p"):" || true)
    [ "$n" = 1 ] || die "$(basename "$p") is in the series $n times (must be 1)"
done

owner_of() { # file (relative to src/) -> the features that claim it
    local entry path
    for entry in "${series[@]}"; do
        for path in ${entry#*:}; do
            case $1 in
            "$path"|"$path"/*) echo "${entry%%:*}" ;;
            esac
        done
    done
}

files=$(cd "$top/src" && find . -type f ! -name '*~' ! -name '.*' |
        sed 's|^\./||' | sort)
for f in $files; do
    n=$(owner_of "$f" | wc -l)
    [ "$n" = 1 ] || die "src/$f belongs to $n features (must be 1)"
done

# ---- the series, one commit per feature on pristine UCX
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

git_repo() { # dir: a git repository holding pristine UCX
    cp -R --no-preserve=ownership "$ucx_src" "$1"
    git -C "$1" init -q
    git -C "$1" config user.name "ucx-hcr"
    git -C "$1" config user.email "ucx-hcr@localhost"
    git -C "$1" add -A
    git -C "$1" commit -q -m "UCX 1.13.1"
}

repo=$work/ucx
git_repo "$repo"
base=$(git -C "$repo" rev-parse HEAD)
for entry in "${series[@]}"; do
    patch=${entry%%:*}
    for f in $files; do
        if [ "$(owner_of "$f")" = "$patch" ]; then
            mkdir -p "$repo/src/$(dirname "$f")"
            cp "$top/src/$f" "$repo/src/$f"
        fi
    done
    # git apply, not patch: it refuses a malformed hunk
    GIT_CEILING_DIRECTORIES=$work git -C "$repo" apply -p1 "$glue/$patch" ||
        die "$patch does not apply after the features before it"
    git -C "$repo" add -A
    sed -n '/^\(diff \|--- \|Index: \)/q;p' "$glue/$patch" |
        git -C "$repo" commit -q -F -
done

# every title again, as a reviewer's tools read them
bad=$(git -C "$repo" log --format=%s "$base..HEAD" | grep -vP "$title_rule" ||
      true)
[ -z "$bad" ] || die "titles breaking $title_rule: $bad"

rm -rf "$out"
mkdir -p "$out"
git -C "$repo" format-patch -q -o "$out" "$base"
echo "export-patches: $(ls "$out" | wc -l) patches in $out"
git -C "$repo" log --reverse --format='  %s' "$base..HEAD"

if [ -n "$apply_to" ]; then
    rm -rf "$apply_to"
    cp -a "$ucx_src" "$apply_to"
    for p in "$out"/*.patch; do
        patch -d "$apply_to" -p1 -s --no-backup-if-mismatch < "$p" ||
            die "$(basename "$p") does not apply with patch -p1"
    done
    echo "export-patches: series applied with patch -p1 to $apply_to"
fi

if [ -n "$build_each" ]; then
    # The superbuild's configuration, prefix and compiler command included:
    # with ccache's base_dir above both trees, a file that is the same as in
    # the superbuild is then not compiled again (the tree is DIR/src and the
    # build DIR/build, as build/ucx/src and build/ucx/build are)
    prefix=$top/build/install
    if [ -f "$top/build/Makefile" ]; then
        prefix=$(sed -n 's/^prefix = //p' "$top/build/Makefile")
    fi
    cc=gcc
    command -v ccache > /dev/null && cc="$(command -v ccache) gcc"
    flags=(CC="$cc" --prefix="$prefix" --enable-maintainer-mode
           --disable-static --enable-mt --with-verbs --with-rdmacm
           --without-mlx5-dv --without-cuda --without-rocm --without-java
           --without-go --without-knem --without-xpmem --without-ugni
           --without-fuse3 --disable-doxygen-doc)
    rm -rf "$build_each"
    mkdir -p "$build_each"
    git_repo "$build_each/src"
    t_all=$(date +%s)
    for p in "$out"/*.patch; do
        t0=$(date +%s)
        git -C "$build_each/src" am -q "$p" ||
            die "$(basename "$p") does not apply with git am"
        if [ ! -f "$build_each/build/Makefile" ] ||
           git -C "$build_each/src" diff --name-only HEAD~1 |
               grep -qE '(^configure\.ac|\.m4)$'; then
            (cd "$build_each/src" && ./autogen.sh) \
                > "$build_each/autogen.log" 2>&1 ||
                die "$(basename "$p"): autogen failed" \
                    "($build_each/autogen.log)"
            mkdir -p "$build_each/build"
            (cd "$build_each/build" && ../src/configure "${flags[@]}") \
                > "$build_each/configure.log" 2>&1 ||
                die "$(basename "$p"): configure failed" \
                    "($build_each/configure.log)"
        fi
        make -C "$build_each/build" -j"$(nproc)" \
            > "$build_each/make.log" 2>&1 ||
            die "$(basename "$p"): build failed ($build_each/make.log)"
        echo "export-patches: built after $(basename "$p") in" \
             "$(( $(date +%s) - t0 )) s"
    done
    echo "export-patches: every patch built," \
         "$(( $(date +%s) - t_all )) s in all"
fi
