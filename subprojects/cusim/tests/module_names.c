/*
 * Prints the kernel names src/module_image.c reads in a module image file
 * (a cubin, a fatbin, PTX), one a line, sorted, repeats removed: the test
 * that rebuilds the fixtures with nvcc compares them with the committed
 * images' names.  Usage: module_names FILE; exit 1 when the image is
 * refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module_image.h"

static char **names;
static size_t nnames;

static void add(void *arg, const char *name, size_t len)
{
    (void)arg;
    names = realloc(names, (nnames + 1) * sizeof *names);
    if (!names || !(names[nnames] = strndup(name, len)))
        abort();
    nnames++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "module_names: cannot open %s\n", argv[1]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc(1, (size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        return 2;
    fclose(f);
    sim_image_info_t info;
    if (sim_image_parse(buf, (size_t)n + 1, add, NULL, &info) != CUDA_SUCCESS) {
        fprintf(stderr, "module_names: %s is not an image the simulated device reads%s%s\n", argv[1],
                info.error[0] ? ": " : "", info.error);
        free(buf);
        return 1;
    }
    qsort(names, nnames, sizeof *names, by_name);
    for (size_t i = 0; i < nnames; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0)
            printf("%s\n", names[i]);
    free(buf);
    return 0;
}
