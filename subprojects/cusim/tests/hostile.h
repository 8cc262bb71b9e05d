/*
 * A hostile value for a setting, and the check that a refusal shows it
 * safely (src/config.c, show): the value opens with a terminal's escape
 * sequences (clear the screen, set the window title), control bytes, a DEL,
 * invalid UTF-8 and a right-to-left override, and is 10 KB long.  The same
 * bytes as cucache's tests/hostile.h, so the simulator's refusals are held
 * to cucache's standard.
 */
#ifndef CUSIM_TESTS_HOSTILE_H
#define CUSIM_TESTS_HOSTILE_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define HOSTILE_LEN 10240
#define HOSTILE_HEAD "\x1b[2J\x1b]0;owned\x07\r\t\x01\x7f\xff\xfe\xc3(\xe2\x80\xae"

/* "NAME=" followed by the hostile value, into out (HOSTILE_LEN + 64 bytes). */
static inline const char *hostile_setting(char *out, size_t len, const char *name)
{
    int k = snprintf(out, len, "%s=%s", name, HOSTILE_HEAD);
    size_t n = (size_t)k;
    while (n < strlen(name) + 1 + HOSTILE_LEN && n + 1 < len)
        out[n++] = 'A';
    out[n] = '\0';
    return out;
}

/* Whether `text` (a refusal) is bounded (under 1 KB), names `name`, holds
 * no control byte but newlines and no byte above 0x7e, and gives the
 * value's whole length; why says what is wrong. */
static inline bool hostile_shown_safely(const char *text, const char *name, char *why, size_t whylen)
{
    char total[32];
    snprintf(total, sizeof total, "(%d bytes)", HOSTILE_LEN);
    size_t n = strlen(text);
    if (n >= 1024)
        return snprintf(why, whylen, "%zu bytes of output: the value was echoed whole", n), false;
    if (!strstr(text, name))
        return snprintf(why, whylen, "%s is not named", name), false;
    if (!strstr(text, total))
        return snprintf(why, whylen, "the value's length %s is not given", total), false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if ((c < 0x20 && c != '\n') || c > 0x7e)
            return snprintf(why, whylen, "a raw byte 0x%02x at offset %zu", c, i), false;
    }
    return true;
}

#endif
