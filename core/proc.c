/*
 * Processes as /proc tells them (proc.h).
 */
#include "proc.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool proc_stat(int32_t pid, uint64_t *start, char *state, char comm[16])
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
    if (!open_paren || !close_paren || close_paren < open_paren)
        return false;
    if (comm) {
        size_t len = (size_t)(close_paren - open_paren - 1);
        if (len > 15)
            len = 15;
        memcpy(comm, open_paren + 1, len);
        comm[len] = 0;
    }
    /* After the command: field 3 (state) ... field 22 (starttime). */
    char *p = close_paren + 1;
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return false;
        if (field == 3)
            *state = *p;
        if (field == 22) {
            char *end;
            *start = strtoull(p, &end, 10);
            return end != p;
        }
        while (*p && *p != ' ')
            p++;
    }
    return false;
}

bool proc_alive(int32_t pid, uint64_t start)
{
    uint64_t have;
    char state;
    if (pid <= 0 || !proc_stat(pid, &have, &state, NULL))
        return false;
    return have == start && state != 'Z' && state != 'X';
}
