/*
 * The module image reader (src/module_image.c) under libFuzzer: any bytes
 * are parsed as an image of exactly their length, and the answer is a
 * success or CUDA_ERROR_INVALID_IMAGE, never a read outside them.  Seeds:
 * tests/modules (the images nvcc made).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "module_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ignore(void *arg, const char *name, size_t len)
{
    (void)arg;
    volatile char c = len ? name[len - 1] : 0; /* the name lies in the image */
    (void)c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    CUresult r = sim_image_parse(data, size, ignore, NULL, NULL);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_IMAGE)
        abort();
    return 0;
}
