/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "field_types.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>
#include <math.h>
#include <string.h>
#include <strings.h>


/* a minus sign anywhere: UCX's parsers would take it as a huge value */
static int ucs_config_is_negative(const char *buf)
{
    return strchr(buf, '-') != NULL;
}

int ucs_config_sscanf_memunits_strict(const char *buf, void *dest,
                                      const void *arg)
{
    return !ucs_config_is_negative(buf) &&
           ucs_config_sscanf_memunits(buf, dest, arg);
}

int ucs_config_sscanf_uint_strict(const char *buf, void *dest, const void *arg)
{
    return !ucs_config_is_negative(buf) &&
           (ucs_config_sscanf_uint(buf, dest, arg) == 1);
}

int ucs_config_sscanf_count(const char *buf, void *dest, const void *arg)
{
    /* "inf" threads or queue entries would be 2^32-1 of them */
    return strcasecmp(buf, UCS_NUMERIC_INF_STR) &&
           ucs_config_sscanf_uint_strict(buf, dest, arg) &&
           (*(unsigned *)dest >= 1);
}

int ucs_config_sscanf_double_strict(const char *buf, void *dest,
                                    const void *arg)
{
    double value;

    if ((ucs_config_sscanf_double(buf, &value, arg) != 1) || !isfinite(value) ||
        (value < 0)) {
        return 0;
    }

    *(double *)dest = value;
    return 1;
}

int ucs_config_sscanf_time_strict(const char *buf, void *dest, const void *arg)
{
    double value;

    if (!ucs_config_sscanf_time(buf, &value, arg) || !isfinite(value) ||
        (value < 0)) {
        return 0;
    }

    *(double *)dest = value;
    return 1;
}

int ucs_config_sscanf_double_auto_strict(const char *buf, void *dest,
                                         const void *arg)
{
    if (!strcasecmp(buf, UCS_VALUE_AUTO_STR)) {
        *(double *)dest = UCS_CONFIG_DBL_AUTO;
        return 1;
    }

    return ucs_config_sscanf_double_strict(buf, dest, arg);
}

int ucs_config_sprintf_double_auto(char *buf, size_t max, const void *src,
                                   const void *arg)
{
    if (*(const double *)src == UCS_CONFIG_DBL_AUTO) {
        return snprintf(buf, max, "%s", UCS_VALUE_AUTO_STR);
    }

    return ucs_config_sprintf_double(buf, max, src, arg);
}


int ucs_config_sscanf_renamed(const char *buf, void *dest, const void *arg)
{
    /* the table's entry is static and writable (a compound literal at file
     * scope); only the report flag changes */
    ucs_config_renamed_t *renamed = (ucs_config_renamed_t *)arg;

    if (buf == NULL) {
        /* UCX restores the default of an alias whose value was refused
         * with the alias' own default, which is NULL */
        return renamed->parser.read(renamed->dfl_value, dest,
                                    renamed->parser.arg);
    }

    if (!renamed->warned) {
        renamed->warned = 1;
        ucs_warn("%s%s is deprecated, use %s%s (it takes the same values)",
                 UCS_DEFAULT_ENV_PREFIX, renamed->old_name,
                 UCS_DEFAULT_ENV_PREFIX, renamed->new_name);
    }

    return renamed->parser.read(buf, dest, renamed->parser.arg);
}

int ucs_config_sprintf_renamed(char *buf, size_t max, const void *src,
                               const void *arg)
{
    const ucs_config_renamed_t *renamed = arg;

    return renamed->parser.write(buf, max, src, renamed->parser.arg);
}

ucs_status_t
ucs_config_clone_renamed(const void *src, void *dest, const void *arg)
{
    const ucs_config_renamed_t *renamed = arg;

    return renamed->parser.clone(src, dest, renamed->parser.arg);
}

void ucs_config_release_renamed(void *ptr, const void *arg)
{
    const ucs_config_renamed_t *renamed = arg;

    renamed->parser.release(ptr, renamed->parser.arg);
}

void ucs_config_help_renamed(char *buf, size_t max, const void *arg)
{
    const ucs_config_renamed_t *renamed = arg;

    renamed->parser.help(buf, max, renamed->parser.arg);
}
