#!/usr/bin/env bash
# hcr extends UCX's rc_verbs; it must not carry copies of it. This check
# compares every C file of src/uct/ib/hcr/ with UCX 1.13.1's src/uct/ib/rc/
# (base, verbs and mlx5) after renaming hcr to rc_verbs, and fails on any run
# of three or more non-trivial lines found verbatim in UCX.
#
#   check-no-copy.sh [UCX_SRC]    (default: build/ucx/pristine)
#
# A line is compared without its comments and without any whitespace, so
# that re-indented or re-aligned copies are found too. Trivial lines are
# left out of the runs: blank lines, comments, lines of only braces,
# parentheses, commas and semicolons, the #include / config.h boilerplate
# that every UCX source file starts with, and the control flow that every
# UCX function shares (return of a name, "if (status != UCS_OK) {", goto,
# labels, break, continue, else), and the new/delete function declarations
# of a UCS class, whose argument lists repeat the class init's.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
ucx_src=${1:-$top/build/ucx/pristine}
ours=$top/src/uct/ib/hcr
min_run=3

if [ ! -d "$ucx_src/src/uct/ib/rc" ]; then
    echo "check-no-copy: no UCX source at $ucx_src (run contrib/setup.sh," \
         "or pass the pristine UCX 1.13.1 tree)" >&2
    exit 2
fi

theirs=$(find "$ucx_src/src/uct/ib/rc" -name '*.[ch]' | sort)
mine=$(find "$ours" -maxdepth 1 -name '*.[ch]' | sort)
if [ -z "$mine" ]; then
    echo "check-no-copy: no C files in $ours" >&2
    exit 2
fi

# The first pass (UCX's files) records every window of min_run consecutive
# non-trivial lines; the second (ours, renamed) reports the windows found
# there, merged into runs.
# shellcheck disable=SC2086
awk -v min_run="$min_run" -v ucx_src="$ucx_src/" -v top="$top/" '
function code_of(line,    out, s, e) {
    out = ""
    while (line != "") {
        if (in_comment) {
            e = index(line, "*/")
            if (e == 0) {
                return out
            }
            line       = substr(line, e + 2)
            in_comment = 0
            continue
        }
        s = index(line, "/*")
        e = index(line, "//")
        if ((e > 0) && ((s == 0) || (e < s))) {
            return out substr(line, 1, e - 1)
        }
        if (s == 0) {
            return out line
        }
        out        = out substr(line, 1, s - 1) " "
        line       = substr(line, s + 2)
        in_comment = 1
    }
    return out
}
function trivial(code) {
    if (code ~ /^[{}();,]*$/) {
        return 1
    }
    if (code ~ /^#(include|ifdefHAVE_CONFIG_H|endif)/) {
        return 1
    }
    return (code ~ /^(return[A-Za-z_0-9]*;|if\(status!=UCS_OK\)\{|goto[a-z_0-9]+;|[a-z_0-9]+:|break;|continue;|\}?else\{?)$/)
}
function report() {
    printf("%s:%d-%d: %d lines as in %s\n", name, run_start, run_end,
           run_lines, run_from)
    runs++
    copied += run_lines
    run_start = 0
}
FNR == 1 {
    if (run_start != 0) {
        report()
    }
    in_comment    = 0
    in_class_decl = 0
    n             = 0
    mine       = (substr(FILENAME, 1, length(ucx_src)) != ucx_src)
    name       = substr(FILENAME, length(mine ? top : ucx_src) + 1)
}
{
    line = $0
    if (mine) {
        gsub(/hcr/, "rc_verbs", line)
        gsub(/HCR/, "RC_VERBS", line)
    }
    code = code_of(line)
    gsub(/[ \t\r]+/, "", code)
    if (code ~ /^(static)?UCS_CLASS_(DEFINE|DECLARE)_(NAMED_)?(NEW|DELETE)_FUNC\(/) {
        in_class_decl = 1
    }
    if (in_class_decl) {
        in_class_decl = (index(code, ");") == 0)
        next
    }
    if ((code == "") || trivial(code)) {
        next
    }
    code_n[++n] = code
    line_n[n]   = FNR
    if (mine) {
        checked++
    }
    if (n < min_run) {
        next
    }
    key = code_n[n - 2] SUBSEP code_n[n - 1] SUBSEP code_n[n]
    if (!mine) {
        if (!(key in where)) {
            where[key] = name ":" line_n[n - 2]
        }
        next
    }
    if (key in where) {
        if (run_start == 0) {
            run_start = line_n[n - 2]
            run_from  = where[key]
            run_lines = min_run
        } else {
            run_lines++
        }
        run_end = FNR
    } else if (run_start != 0) {
        report()
    }
}
END {
    if (run_start != 0) {
        report()
    }
    printf("check-no-copy: %d non-trivial lines of src/uct/ib/hcr checked, " \
           "%d runs (%d lines) found in UCX src/uct/ib/rc\n", checked, runs,
           copied)
    exit (runs > 0)
}
' $theirs $mine
