/*
 * The array formats the simulated device lays out, one row each: the bytes
 * of a channel, the channels the format fixes (0: NumChannels gives them,
 * 1, 2 or 4) and the runtime's channel kind.  The driver sizes arrays and
 * checks texture resources with it (driver_array.c, driver_texture.c), the
 * runtime turns channel descriptors into formats and back
 * (runtime_array.c).  Formats not listed (block-compressed, the planar and
 * packed video formats, 10-10-10-2) are not simulated: creating an array
 * of one is CUDA_ERROR_NOT_SUPPORTED.
 */
#ifndef CUCACHE_SIM_ARRAY_FORMAT_H
#define CUCACHE_SIM_ARRAY_FORMAT_H

#include <stddef.h>

#include "cusim/cuda_api.h"

typedef struct sim_format_s {
    CUarray_format format;
    unsigned channel_bytes;
    unsigned channels; /* 0: any of 1, 2, 4 (NumChannels) */
    enum cudaChannelFormatKind kind;
} sim_format_t;

static const sim_format_t sim_formats[] = {
    {CU_AD_FORMAT_UNSIGNED_INT8, 1, 0, cudaChannelFormatKindUnsigned},
    {CU_AD_FORMAT_UNSIGNED_INT16, 2, 0, cudaChannelFormatKindUnsigned},
    {CU_AD_FORMAT_UNSIGNED_INT32, 4, 0, cudaChannelFormatKindUnsigned},
    {CU_AD_FORMAT_SIGNED_INT8, 1, 0, cudaChannelFormatKindSigned},
    {CU_AD_FORMAT_SIGNED_INT16, 2, 0, cudaChannelFormatKindSigned},
    {CU_AD_FORMAT_SIGNED_INT32, 4, 0, cudaChannelFormatKindSigned},
    {CU_AD_FORMAT_HALF, 2, 0, cudaChannelFormatKindFloat},
    {CU_AD_FORMAT_FLOAT, 4, 0, cudaChannelFormatKindFloat},
    {CU_AD_FORMAT_UNORM_INT8X1, 1, 1, cudaChannelFormatKindUnsignedNormalized8X1},
    {CU_AD_FORMAT_UNORM_INT8X2, 1, 2, cudaChannelFormatKindUnsignedNormalized8X2},
    {CU_AD_FORMAT_UNORM_INT8X4, 1, 4, cudaChannelFormatKindUnsignedNormalized8X4},
    {CU_AD_FORMAT_UNORM_INT16X1, 2, 1, cudaChannelFormatKindUnsignedNormalized16X1},
    {CU_AD_FORMAT_UNORM_INT16X2, 2, 2, cudaChannelFormatKindUnsignedNormalized16X2},
    {CU_AD_FORMAT_UNORM_INT16X4, 2, 4, cudaChannelFormatKindUnsignedNormalized16X4},
    {CU_AD_FORMAT_SNORM_INT8X1, 1, 1, cudaChannelFormatKindSignedNormalized8X1},
    {CU_AD_FORMAT_SNORM_INT8X2, 1, 2, cudaChannelFormatKindSignedNormalized8X2},
    {CU_AD_FORMAT_SNORM_INT8X4, 1, 4, cudaChannelFormatKindSignedNormalized8X4},
    {CU_AD_FORMAT_SNORM_INT16X1, 2, 1, cudaChannelFormatKindSignedNormalized16X1},
    {CU_AD_FORMAT_SNORM_INT16X2, 2, 2, cudaChannelFormatKindSignedNormalized16X2},
    {CU_AD_FORMAT_SNORM_INT16X4, 2, 4, cudaChannelFormatKindSignedNormalized16X4},
};

/* The row of a format, or NULL when the simulator does not lay it out. */
static inline const sim_format_t *sim_format_find(CUarray_format f)
{
    for (size_t i = 0; i < sizeof sim_formats / sizeof sim_formats[0]; i++)
        if (sim_formats[i].format == f)
            return &sim_formats[i];
    return NULL;
}

/* The bytes of one element of format f with n channels, or 0 when the pair
 * is not a valid one (a fixed format with another count, 3 channels). */
static inline unsigned sim_format_elem(const sim_format_t *f, unsigned n)
{
    if (!f || (n != 1 && n != 2 && n != 4) || (f->channels && f->channels != n))
        return 0;
    return f->channel_bytes * n;
}

#endif
