/*
 * Sizes in PyTorch's format, counts with thousands separators, and the
 * line sink's printf.
 */
#include <stdarg.h>
#include <stdio.h>

#include "st.h"

void st_fmt_size(char *buf, size_t len, uint64_t bytes)
{
    /* c10's format_size: the unit steps up past 1024 of the one below */
    const double v = (double)bytes;
    if (bytes <= 1024)
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
    else if (bytes <= ((uint64_t)1 << 20))
        snprintf(buf, len, "%.2f KiB", v / 1024.0);
    else if (bytes <= ((uint64_t)1 << 30))
        snprintf(buf, len, "%.2f MiB", v / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", v / 1073741824.0);
}

void st_fmt_count(char *buf, size_t len, uint64_t v)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    size_t k = 0;
    for (int i = 0; i < n && k + 2 < len; i++) {
        if (i && (n - i) % 3 == 0)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
}

void st_linef(st_sink_fn sink, void *ctx, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sink(ctx, line);
}

void st_fmt_first(char *buf, size_t len, uint64_t number, uint64_t allocs, uint32_t born)
{
    if (born)
        snprintf(buf, len, ", the first allocation %llu of %llu (t=%.2f s)", (unsigned long long)number,
                 (unsigned long long)allocs, (double)(born - 1) / 1000.0);
    else
        snprintf(buf, len, ", the first allocation %llu of %llu", (unsigned long long)number,
                 (unsigned long long)allocs);
}
