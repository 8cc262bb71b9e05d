/*
 * The simulated libraries' one message sink (the driver's and the NVML's):
 * "cucache-sim: " and a line on stderr, formatted on the stack.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "shared.h"

void sim_log(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, "cucache-sim: ", 13);
    w = write(2, buf, (size_t)n);
    (void)w;
}
