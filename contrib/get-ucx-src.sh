#!/usr/bin/env bash
# Obtain a pristine UCX 1.13.1 source tree for the superbuild.
#
#   get-ucx-src.sh DEST [SRC]
#
# With SRC (configure --with-ucx-src=DIR), that unpacked tree is copied.
# Otherwise Debian's source package `ucx` is fetched with `apt-get source`,
# through a private deb-src list derived from the machine's own apt sources:
# the system's apt configuration is never edited and no host name is written
# here. The result is verified to be UCX 1.13.1 and left in DEST.
set -euo pipefail

UCX_VERSION=1.13.1
dest=${1:?usage: get-ucx-src.sh DEST [SRC]}
src=${2:-}
work=${dest}.tmp

die() {
    echo "" >&2
    echo "error: $*" >&2
    echo "" >&2
    echo "ucx-hcr needs a UCX ${UCX_VERSION} source tree. Either:" >&2
    echo "  - pass an unpacked tree: ./configure --with-ucx-src=/path/to/ucx-${UCX_VERSION}" >&2
    echo "  - or make Debian's source package reachable: the machine's apt sources" >&2
    echo "    (/etc/apt/sources.list, /etc/apt/sources.list.d/) must name a Debian" >&2
    echo "    12 (bookworm) archive that serves 'ucx ${UCX_VERSION}' sources," >&2
    echo "    and dpkg-dev must be installed (contrib/install-deps.sh does that)." >&2
    # keep $work for its logs
    exit 1
}

check_version() {
    local tree=$1 ver
    [ -f "$tree/configure.ac" ] || die "'$tree' is not a UCX source tree (no configure.ac)"
    ver=$(sed -n 's/^define(\[ucx_ver_\(major\|minor\|patch\)\], \[\?\([0-9]*\)\]\?).*/\2/p' \
          "$tree/configure.ac" | paste -sd. -)
    [ "$ver" = "$UCX_VERSION" ] || \
        die "'$tree' holds UCX '${ver:-unknown}', not ${UCX_VERSION}"
}

# The apt configuration directory the sources are derived from; tests point
# it elsewhere to check the failure paths.
apt_etc=${GET_UCX_SRC_APT_ETC:-/etc/apt}

# Turn the machine's Debian "deb" entries into "deb-src" entries, in both the
# deb822 (.sources) and the one-line (.list) formats.
make_src_list() {
    local out=$1 f
    : > "$out/sources.list"
    for f in "$apt_etc"/sources.list "$apt_etc"/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -n 's/^[[:space:]]*deb\([[:space:]]\)/deb-src\1/p' "$f" | \
            grep -i debian >> "$out/sources.list" || true
    done
    for f in "$apt_etc"/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        grep -qi debian "$f" || continue
        # deb822 stanzas are separated by blank lines; keep stanzas of type
        # deb and rewrite their Types line.
        awk 'BEGIN { RS=""; ORS="\n\n" }
             /(^|\n)Types:[^\n]*deb([ \n]|$)/ {
                 sub(/Types:[^\n]*/, "Types: deb-src"); print }' \
            "$f" > "$out/parts/$(basename "$f")"
    done
}

rm -rf "$work"
mkdir -p "$work"

if [ -n "$src" ]; then
    [ -d "$src" ] || die "--with-ucx-src: '$src' is not a directory"
    check_version "$src"
    [ ! -f "$src/config.status" ] || \
        die "'$src' was configured in place; run 'make distclean' there or pass a clean tree"
    echo "get-ucx-src: copying UCX source from $src"
    cp -R --no-preserve=ownership "$src" "$work/ucx"
else
    command -v apt-get >/dev/null || die "apt-get not found and no --with-ucx-src given"
    command -v dpkg-source >/dev/null || die "dpkg-source not found (install dpkg-dev)"
    apt=$work/apt
    mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial" "$work/dl"
    make_src_list "$apt"
    if [ ! -s "$apt/sources.list" ] && [ -z "$(ls -A "$apt/parts")" ]; then
        die "no Debian entry found in the apt sources under $apt_etc"
    fi
    aptopts=(-o "Dir::Etc::SourceList=$apt/sources.list"
             -o "Dir::Etc::SourceParts=$apt/parts"
             -o "Dir::State::Lists=$apt/lists"
             -o "Dir::Cache=$apt/cache"
             -o "APT::Get::List-Cleanup=0"
             -o "Acquire::Retries=2"
             -o "Acquire::http::Timeout=30")
    echo "get-ucx-src: fetching Debian source package ucx ${UCX_VERSION}"
    apt-get -q "${aptopts[@]}" update >"$work/apt-update.log" 2>&1 || \
        die "apt-get update with the derived deb-src list failed (see $work/apt-update.log)"
    (cd "$work/dl" && apt-get -q "${aptopts[@]}" source --download-only ucx \
        >"$work/apt-source.log" 2>&1) || \
        die "'apt-get source ucx' failed: the Debian archive named in $apt_etc is not
       reachable or does not serve the source (see $work/apt-source.log
       and $work/apt-update.log)"
    orig=$(ls "$work"/dl/ucx_${UCX_VERSION}.orig.tar.* 2>/dev/null | head -n1)
    [ -n "$orig" ] || die "the downloaded source package has no ucx_${UCX_VERSION}.orig tarball"
    # Use upstream's tarball as it is: Debian's packaging patches are not part
    # of pristine UCX.
    mkdir -p "$work/unpack"
    tar -C "$work/unpack" --no-same-owner -xf "$orig"
    top=$(ls -d "$work"/unpack/*/ | head -n1)
    mv "$top" "$work/ucx"
    check_version "$work/ucx"
fi

# Debian's orig tarball (and a tree unpacked with dpkg-source) keeps upstream's
# debian/ folder as debian.upstream/; UCX's autogen.sh/automake need it back
# at debian/ (rules.in, control.in, ...).
if [ -d "$work/ucx/debian.upstream" ] && [ ! -e "$work/ucx/debian/rules.in" ]; then
    rm -rf "$work/ucx/debian"
    mv "$work/ucx/debian.upstream" "$work/ucx/debian"
fi

rm -rf "$dest"
mv "$work/ucx" "$dest"
rm -rf "$work"
echo "get-ucx-src: UCX ${UCX_VERSION} source ready in $dest"
