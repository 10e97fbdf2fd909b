/* The daemon's config file (YAML: flag name -> value or list of values). */
#ifndef FUNCD_PLATFORM_CONFIG_FILE_H
#define FUNCD_PLATFORM_CONFIG_FILE_H

#include <stddef.h>

#include "funcd/common.h"

/* Turns the file's text into a NULL-terminated list of "--flag=value" (or
 * "--flag" for `true`) arguments; `false` drops the flag. On failure returns
 * FUNCD_EINVAL with `err` naming the line or key. Free with
 * funcd_config_file_free. */
int funcd_config_file_parse(const char *text, size_t len, char ***out, char *err,
                            size_t errlen);
void funcd_config_file_free(char **args);

#endif
