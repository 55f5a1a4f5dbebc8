#!/bin/bash
# The superpipeline with and without the asynchronous copy engine (issue 8),
# side by side in one run, on UCX_TLS=hcr over softverbs with the path forced
# to the superpipeline (bench/sppln-first-send.c): first-send bandwidth
# (buffers never used before) at 1 MiB and 8 MiB, and the CPU time per
# message of the sending thread and of the whole sending process (the copy
# engine's helper thread included). Configurations:
#   cpu     - the sender copies chunks into its staging slots itself;
#   thread  - UCX_RNDV_SPPLN_COPY_ASYNC=y, UCX_COPY_ENGINE=thread;
#   memcpy  - the engine's synchronous backend (the engine's own overhead);
#   auto    - the default: the measured model decides (ucx_hcr_calib shows
#             its choice; on a host where the helper thread's CPU time
#             cancels its overlap, it is the sender's own copy).
# RUNS runs (default 5), interleaved; the table shows medians. Writes
# bench/results/sppln-copy-engine.txt. Extra environment is passed through.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
bench_prepare
bench_cc_ucp "$tmp/sfs" "$bench_top/bench/sppln-first-send.c"

declare -A cfg=(
    [cpu]="UCX_RNDV_SPPLN_COPY_ASYNC=n"
    [thread]="UCX_RNDV_SPPLN_COPY_ASYNC=y UCX_COPY_ENGINE=thread"
    [memcpy]="UCX_RNDV_SPPLN_COPY_ASYNC=y UCX_COPY_ENGINE=memcpy"
    [auto]="UCX_RNDV_SPPLN_COPY_ASYNC=auto"
)
names="cpu thread memcpy auto"
base="$(softverbs_env) UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=hcr"
base="$base UCX_RNDV_SPPLN_PATH=sppln"

for r in $(seq "$RUNS"); do
    for n in $names; do
        # shellcheck disable=SC2086
        env $base ${cfg[$n]} timeout 300 "$tmp/sfs" -n 9 -b 3 \
            -s 1048576 -s 8388608 > "$tmp/$n.$r" ||
            { echo "$n run $r failed" >&2; exit 1; }
    done
done

python3 - "$tmp" "$RUNS" $names > "$out/sppln-copy-engine.txt" <<'PY'
import sys, statistics
tmp, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
data = {}
for n in names:
    rows = {}
    for r in range(1, runs + 1):
        for line in open(f"{tmp}/{n}.{r}"):
            f = line.split()
            rows.setdefault(int(f[0]), []).append([float(x) for x in f[1:]])
    data[n] = {s: [statistics.median(v[i] for v in vals) for i in range(4)]
               for s, vals in rows.items()}
print("# UCX_TLS=hcr, UCX_RNDV_SPPLN_PATH=sppln; medians of %d runs; first send"
      " = buffers never used before" % runs)
print("%-8s %-7s %12s %12s %14s %15s" % ("size", "copy", "first MB/s",
      "best MB/s", "thread CPU us", "process CPU us"))
for s in sorted(data[names[0]]):
    for n in names:
        f, b, ct, cp = data[n][s]
        print("%-8d %-7s %12.0f %12.0f %14.0f %15.0f" % (s, n, f, b, ct, cp))
print()
for s in sorted(data[names[0]]):
    c, t, a = data["cpu"][s], data["thread"][s], data["auto"][s]
    print("%d B: first send thread/cpu %.2f, auto/cpu %.2f; sending thread "
          "CPU thread/cpu %.2f, auto/cpu %.2f" % (s, t[0] / c[0], a[0] / c[0],
                                                 t[2] / c[2], a[2] / c[2]))
PY
cat "$out/sppln-copy-engine.txt"
