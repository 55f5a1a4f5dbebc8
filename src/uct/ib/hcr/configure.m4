#
# Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
# See file LICENSE for terms.
#

#
# hcr: RC over verbs, a loadable uct_ib sub-module (libuct_ib_hcr.so).
# It reuses the RC base of libuct_ib, so it is built when RC is.
#
AS_IF([test "x$with_rc" != xno],
      [uct_ib_modules="${uct_ib_modules}:hcr"])

AM_CONDITIONAL([HAVE_TL_HCR], [test "x$with_rc" != xno])
AC_CONFIG_FILES([src/uct/ib/hcr/Makefile])
