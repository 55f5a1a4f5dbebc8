#!/bin/sh
# Overlay this repository's src/ onto a UCX source tree with symbolic links,
# so that editing a file here is seen by UCX's make as a change to that file
# (and nothing else is rebuilt). Links left behind by files that were removed
# from src/ are deleted. Idempotent and cheap: it runs on every `make`.
#
#   overlay.sh REPO_SRC_DIR UCX_SRC_DIR
set -eu
from=$1
to=$2

# nothing to overlay yet
[ -d "$from" ] || exit 0

cd "$from"
find . -type f ! -name '*~' ! -name '.*' | while read -r f; do
    f=${f#./}
    dst=$to/$f
    if [ "$(readlink "$dst" 2>/dev/null)" != "$from/$f" ]; then
        mkdir -p "$(dirname "$dst")"
        # replace atomically: a concurrent run sees the old or the new link
        ln -sfn "$from/$f" "$dst.overlay.$$"
        mv -f "$dst.overlay.$$" "$dst"
    fi
done

# Remove dangling links that point into the overlay.
find "$to" -type l | while read -r l; do
    case "$(readlink "$l")" in
    "$from"/*) [ -e "$l" ] || rm -f "$l" ;;
    esac
done
