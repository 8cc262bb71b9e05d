/*
 * The tokenizer of CUCACHE_CONF on its own: a test seam, shared by conf.c
 * and tests/core/test_conf.c so that both see one declaration.  Nothing else
 * should tokenise CUCACHE_CONF: use conf_parse (conf.h).
 *
 * Calls item() once per item, in order, with the trimmed key and value (not
 * NUL-terminated) and the 1-based column of the key.  Returns 0; -1 with err
 * written on a syntax error; or the first nonzero value item() returned.
 */
#ifndef CUCACHE_CORE_CONF_INTERNAL_H
#define CUCACHE_CORE_CONF_INTERNAL_H

#include <stddef.h>

typedef int (*conf_item_fn)(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, size_t col);
int conf_tokenize(const char *text, conf_item_fn item, void *ctx, char *err, size_t errlen);

#endif
