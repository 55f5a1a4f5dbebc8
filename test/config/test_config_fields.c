/*
 * The configuration field types of src/ucs/config/field_types.h: strict
 * numbers refuse what UCX's parsers would read as huge values, and a
 * renamed field keeps its old name for a release with one warning.
 */
#include "th.h"

#include <ucs/config/field_types.h>
#include <ucs/debug/log_def.h>
#include <ucp/api/ucp.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned count;
    size_t size;
    double ratio;
    double time;
} cfgt_opts_t;

static ucs_config_field_t cfgt_table[] = {
        UCS_CONFIG_RENAMED_FIELD("CFGT_OLD_COUNT", "CFGT_COUNT", "2",
                                 ucs_offsetof(cfgt_opts_t, count),
                                 UCS_CONFIG_TYPE_COUNT),

        UCS_CONFIG_RENAMED_FIELD("CFGT_OLD_SIZE", "CFGT_SIZE", "4k",
                                 ucs_offsetof(cfgt_opts_t, size),
                                 UCS_CONFIG_TYPE_MEMUNITS_STRICT),

        {"CFGT_COUNT", "2", "a count", ucs_offsetof(cfgt_opts_t, count),
         UCS_CONFIG_TYPE_COUNT},

        {"CFGT_SIZE", "4k", "a size", ucs_offsetof(cfgt_opts_t, size),
         UCS_CONFIG_TYPE_MEMUNITS_STRICT},

        {"CFGT_RATIO", "1.5", "a ratio", ucs_offsetof(cfgt_opts_t, ratio),
         UCS_CONFIG_TYPE_DOUBLE_STRICT},

        {"CFGT_TIME", "1ms", "a time", ucs_offsetof(cfgt_opts_t, time),
         UCS_CONFIG_TYPE_TIME_STRICT},

        {NULL}};

/* warnings that name a deprecated setting, as UCX's log delivered them */
static int cfgt_deprecations;
static char cfgt_last_warning[256];

static ucs_log_func_rc_t cfgt_log(const char *file, unsigned line,
                                  const char *function, ucs_log_level_t level,
                                  const ucs_log_component_config_t *comp_conf,
                                  const char *message, va_list ap)
{
    char buf[256];

    if (level == UCS_LOG_LEVEL_WARN) {
        vsnprintf(buf, sizeof(buf), message, ap);
        if (strstr(buf, "deprecated") != NULL) {
            ++cfgt_deprecations;
            snprintf(cfgt_last_warning, sizeof(cfgt_last_warning), "%s", buf);
        }
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

static ucs_status_t cfgt_read(cfgt_opts_t *opts)
{
    return ucs_config_parser_fill_opts(opts, cfgt_table, "UCX_", "", 0);
}

static void cfgt_clear_env(void)
{
    unsetenv("UCX_CFGT_OLD_COUNT");
    unsetenv("UCX_CFGT_OLD_SIZE");
    unsetenv("UCX_CFGT_COUNT");
    unsetenv("UCX_CFGT_SIZE");
    unsetenv("UCX_CFGT_RATIO");
    unsetenv("UCX_CFGT_TIME");
}

/* the old name sets the field, and says once that it is deprecated and
 * what replaces it; the new name wins when both are set */
TH_TEST(config_fields, renamed_keeps_old_name)
{
    cfgt_opts_t opts;
    int i;

    cfgt_clear_env();
    ucs_log_push_handler(cfgt_log);

    TH_ASSERT_EQ(cfgt_read(&opts), UCS_OK);
    TH_ASSERT_EQ(opts.count, 2);
    TH_ASSERT_EQ(opts.size, 4096);
    TH_ASSERT_EQ(cfgt_deprecations, 0);
    ucs_config_parser_release_opts(&opts, cfgt_table);

    setenv("UCX_CFGT_OLD_COUNT", "7", 1);
    setenv("UCX_CFGT_OLD_SIZE", "64k", 1);
    for (i = 0; i < 3; ++i) {
        TH_ASSERT_EQ(cfgt_read(&opts), UCS_OK);
        TH_ASSERT_EQ(opts.count, 7);
        TH_ASSERT_EQ(opts.size, 65536);
        ucs_config_parser_release_opts(&opts, cfgt_table);
    }
    /* one warning per old name, however often the table is read */
    TH_ASSERT_EQ(cfgt_deprecations, 2);
    TH_ASSERT(strstr(cfgt_last_warning, "UCX_CFGT_OLD_SIZE") != NULL);
    TH_ASSERT(strstr(cfgt_last_warning, "use UCX_CFGT_SIZE") != NULL);

    setenv("UCX_CFGT_COUNT", "9", 1);
    TH_ASSERT_EQ(cfgt_read(&opts), UCS_OK);
    TH_ASSERT_EQ(opts.count, 9);
    ucs_config_parser_release_opts(&opts, cfgt_table);

    /* the old name takes the field's own type: a bad value is refused */
    unsetenv("UCX_CFGT_COUNT");
    setenv("UCX_CFGT_OLD_COUNT", "0", 1);
    TH_ASSERT_EQ(cfgt_read(&opts), UCS_ERR_INVALID_PARAM);

    ucs_log_pop_handler();
    cfgt_clear_env();
}

/* what UCX's parsers would read as 2^64-1, 2^32-1 or NaN is refused; what
 * they read as a number is read the same way */
TH_TEST(config_fields, strict_numbers)
{
    static const struct {
        const char *name;
        const char *value;
        int valid;
    } cases[] = {
            {"UCX_CFGT_SIZE", "-1", 0},    {"UCX_CFGT_SIZE", "-3", 0},
            {"UCX_CFGT_SIZE", "1m", 1},    {"UCX_CFGT_SIZE", "inf", 1},
            {"UCX_CFGT_COUNT", "-1", 0},   {"UCX_CFGT_COUNT", "0", 0},
            {"UCX_CFGT_COUNT", "inf", 0},  {"UCX_CFGT_COUNT", "3", 1},
            {"UCX_CFGT_RATIO", "nan", 0},  {"UCX_CFGT_RATIO", "inf", 0},
            {"UCX_CFGT_RATIO", "-0.5", 0}, {"UCX_CFGT_RATIO", "0.25", 1},
            {"UCX_CFGT_TIME", "-1us", 0},  {"UCX_CFGT_TIME", "2us", 1},
    };
    cfgt_opts_t opts;
    ucs_status_t status;
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        cfgt_clear_env();
        setenv(cases[i].name, cases[i].value, 1);
        status = cfgt_read(&opts);
        th_log("%s=%s: %s", cases[i].name, cases[i].value,
               ucs_status_string(status));
        if (!cases[i].valid) {
            TH_ASSERT_EQ(status, UCS_ERR_INVALID_PARAM);
            continue;
        }
        TH_ASSERT_EQ(status, UCS_OK);
        ucs_config_parser_release_opts(&opts, cfgt_table);
    }

    /* and the valid ones mean what UCX's types mean */
    cfgt_clear_env();
    setenv("UCX_CFGT_SIZE", "1m", 1);
    setenv("UCX_CFGT_RATIO", "0.25", 1);
    setenv("UCX_CFGT_TIME", "2us", 1);
    TH_ASSERT_EQ(cfgt_read(&opts), UCS_OK);
    TH_ASSERT_EQ(opts.size, 1048576);
    TH_ASSERT_DBL(opts.ratio, ==, 0.25);
    TH_ASSERT_DBL(opts.time, ==, 2e-6);
    ucs_config_parser_release_opts(&opts, cfgt_table);
    cfgt_clear_env();
}

/* every renamed alias in a table, and the field it names */
static int cfgt_check_renamed(ucs_config_field_t *fields, const char *table)
{
    const ucs_config_renamed_t *renamed;
    ucs_config_field_t *alias, *field;
    int count = 0;

    for (alias = fields; alias->name != NULL; ++alias) {
        if (alias->parser.read == ucs_config_sscanf_table) {
            count += cfgt_check_renamed((ucs_config_field_t *)alias->parser.arg,
                                        table);
            continue;
        }
        if (alias->parser.read != ucs_config_sscanf_renamed) {
            continue;
        }

        renamed = alias->parser.arg;
        TH_ASSERT(alias->dfl_value == NULL); /* what makes it an alias */
        TH_ASSERT_STR_EQ(alias->name, renamed->old_name);
        for (field = fields; field->name != NULL; ++field) {
            if (!strcmp(field->name, renamed->new_name)) {
                break;
            }
        }
        if (field->name == NULL) {
            TH_FAIL("%s: %s renames %s, which the table does not have", table,
                    alias->name, renamed->new_name);
        }
        th_log("%s: %s -> %s (default '%s')", table, alias->name, field->name,
               field->dfl_value);
        TH_ASSERT_EQ(field->offset, alias->offset);
        TH_ASSERT_STR_EQ(field->dfl_value, renamed->dfl_value);
        TH_ASSERT(field->parser.read == renamed->parser.read);
        TH_ASSERT(field->parser.arg == renamed->parser.arg);
        ++count;
    }
    return count;
}

/* the renamed names of every table libucs, libuct and libucp register
 * (copy engine, calibration, protocols, RVMA) name a field of the same
 * table, at the same place, with the same default and type */
TH_TEST(config_fields, renamed_tables_consistent)
{
    ucs_config_global_list_entry_t *entry;
    ucp_config_t *config;
    int count = 0;

    /* libucp's tables are registered once it is loaded */
    TH_ASSERT_EQ(ucp_config_read(NULL, NULL, &config), UCS_OK);
    ucp_config_release(config);

    ucs_list_for_each(entry, &ucs_config_global_list, list) {
        if (entry->table == NULL) {
            continue; /* a component's table that is not loaded yet */
        }
        count += cfgt_check_renamed(entry->table, entry->name);
    }
    /* the copy engine's and the calibration's, at least */
    TH_ASSERT_GE(count, 11);
}
