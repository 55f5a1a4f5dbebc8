/**
 * Copyright (C) ucx-hcr contributors 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCS_CONFIG_FIELD_TYPES_H_
#define UCS_CONFIG_FIELD_TYPES_H_

#include <ucs/config/parser.h>
#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

/*
 * Configuration field types beside UCX's own (parser.h):
 *
 * - Strict numbers. UCX's parsers read "-1" as a size of 2^64-1 (UCX's
 *   "inf"), "-3" as 2^64-3, "-1" as a count of 2^32-1, and "nan" as a
 *   number. The types below refuse a minus sign, NaN and infinities with
 *   UCX's "Invalid value" error, and otherwise read what UCX's types read.
 *
 * - Renamed fields. A setting that got a new name keeps its old one for a
 *   release: the old name is an alias of the field (a NULL default, the
 *   same offset) whose type warns, once per process, that the name is
 *   deprecated and which name replaces it, then parses the value with the
 *   field's own type. `ucx_info -c -a` lists it as an alias.
 */


int ucs_config_sscanf_memunits_strict(const char *buf, void *dest,
                                      const void *arg);
int ucs_config_sscanf_uint_strict(const char *buf, void *dest, const void *arg);
int ucs_config_sscanf_count(const char *buf, void *dest, const void *arg);
int ucs_config_sscanf_double_strict(const char *buf, void *dest,
                                    const void *arg);
int ucs_config_sscanf_time_strict(const char *buf, void *dest, const void *arg);
int ucs_config_sscanf_double_auto_strict(const char *buf, void *dest,
                                         const void *arg);
int ucs_config_sprintf_double_auto(char *buf, size_t max, const void *src,
                                   const void *arg);


/* The value of a UCS_CONFIG_TYPE_DOUBLE_AUTO_STRICT field set to "auto" */
#define UCS_CONFIG_DBL_AUTO ((double)-1)


/* bytes: <number>[b|kb|mb|gb], "inf" or "auto"; never negative */
#define UCS_CONFIG_TYPE_MEMUNITS_STRICT                                        \
    {                                                                          \
        ucs_config_sscanf_memunits_strict, ucs_config_sprintf_memunits,        \
                ucs_config_clone_ulong, ucs_config_release_nop,                \
                ucs_config_help_generic,                                       \
                "memory units: <number>[b|kb|mb|gb], \"inf\", or \"auto\" "    \
                "(not "                                                        \
                "negative)"                                                    \
    }

/* an unsigned integer, 0 included, or "inf" */
#define UCS_CONFIG_TYPE_UINT_STRICT                                            \
    {                                                                          \
        ucs_config_sscanf_uint_strict, ucs_config_sprintf_uint,                \
                ucs_config_clone_uint, ucs_config_release_nop,                 \
                ucs_config_help_generic, "unsigned integer (not negative)"     \
    }

/* a number of threads, slots or entries: at least 1 */
#define UCS_CONFIG_TYPE_COUNT                                                  \
    {                                                                          \
        ucs_config_sscanf_count, ucs_config_sprintf_uint,                      \
                ucs_config_clone_uint, ucs_config_release_nop,                 \
                ucs_config_help_generic, "count: an integer of at least 1"     \
    }

/* a finite number, not negative */
#define UCS_CONFIG_TYPE_DOUBLE_STRICT                                          \
    {                                                                          \
        ucs_config_sscanf_double_strict, ucs_config_sprintf_double,            \
                ucs_config_clone_double, ucs_config_release_nop,               \
                ucs_config_help_generic,                                       \
                "floating point number, finite, not negative"                  \
    }

/* a finite number, not negative, or "auto" (UCS_CONFIG_DBL_AUTO) */
#define UCS_CONFIG_TYPE_DOUBLE_AUTO_STRICT                                     \
    {                                                                          \
        ucs_config_sscanf_double_auto_strict, ucs_config_sprintf_double_auto,  \
                ucs_config_clone_double, ucs_config_release_nop,               \
                ucs_config_help_generic,                                       \
                "floating point number, finite, not negative, or \"auto\""     \
    }

/* a time, finite and not negative */
#define UCS_CONFIG_TYPE_TIME_STRICT                                            \
    {                                                                          \
        ucs_config_sscanf_time_strict, ucs_config_sprintf_time,                \
                ucs_config_clone_double, ucs_config_release_nop,               \
                ucs_config_help_generic,                                       \
                "time value: <number>[s|us|ms|ns], not negative"               \
    }


/* What a renamed field's alias knows: both names, and the field's type */
typedef struct {
    const char *old_name; /* without the UCX_ prefix */
    const char *new_name; /* without the UCX_ prefix */
    const char *dfl_value; /* the field's default */
    ucs_config_parser_t parser; /* the type of the field */
    int warned; /* the deprecation was reported */
} ucs_config_renamed_t;


int ucs_config_sscanf_renamed(const char *buf, void *dest, const void *arg);
int ucs_config_sprintf_renamed(char *buf, size_t max, const void *src,
                               const void *arg);
ucs_status_t
ucs_config_clone_renamed(const void *src, void *dest, const void *arg);
void ucs_config_release_renamed(void *ptr, const void *arg);
void ucs_config_help_renamed(char *buf, size_t max, const void *arg);


/**
 * A table entry that keeps the old name of a renamed field: place it in the
 * same table as the field, before it, so that the new name wins when both
 * are set.
 *
 * The names are the whole names without the UCX_ prefix: the table must
 * have no prefix of its own (as UCP's context table and UCS' global ones).
 *
 * @param _old_name  Former name, without the UCX_ prefix.
 * @param _new_name  Current name of the field, without the UCX_ prefix.
 * @param _dfl_value Default of the field (as in the field's own entry): UCX
 *                   parses it into the field when the value given under the
 *                   old name is invalid.
 * @param _offset    Offset of the field (as in the field's own entry).
 * @param ...        Type of the field (as in the field's own entry; a
 *                   variadic argument, so that a type given by another
 *                   macro keeps its commas).
 */
#define UCS_CONFIG_RENAMED_FIELD(_old_name, _new_name, _dfl_value, _offset,    \
                                 ...)                                          \
    {                                                                          \
        _old_name, NULL, "Deprecated name of UCX_" _new_name ".", _offset,     \
        {                                                                      \
            ucs_config_sscanf_renamed, ucs_config_sprintf_renamed,             \
                    ucs_config_clone_renamed, ucs_config_release_renamed,      \
                    ucs_config_help_renamed, &(ucs_config_renamed_t)           \
            {                                                                  \
                _old_name, _new_name, _dfl_value, __VA_ARGS__, 0               \
            }                                                                  \
        }                                                                      \
    }

END_C_DECLS

#endif
