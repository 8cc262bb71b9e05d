/*
 * Module images: what cuModuleLoadData and the runtime's registration hand
 * the device, read for their kernel names only (the device runs no device
 * code).  Four kinds are recognised by their first bytes:
 *
 *   the simulator's own list   CUCACHE_SIM_MODULE_MAGIC, a name a line
 *   an ELF cubin               "\x7f" "ELF", 64-bit little-endian, EM_CUDA
 *   a fatbin container         0xBA55ED50, entries each a cubin or PTX
 *   a fatbin wrapper           0x466243B1, pointing at a container (what
 *                              nvcc's host stub registers)
 *   PTX text                   .version and .target directives, a
 *                              NUL-terminated text
 *
 * The bytes are untrusted: every read is checked against the image's
 * length, and a corrupt or truncated image is CUDA_ERROR_INVALID_IMAGE.
 * docs/simulator.md ("Modules") says what the layouts rest on.
 */
#ifndef CUCACHE_SIM_MODULE_IMAGE_H
#define CUCACHE_SIM_MODULE_IMAGE_H

#include <stddef.h>

#include "cucache/cuda_api.h"

/* What parsing found besides the names. */
typedef struct sim_image_info_s {
    unsigned entries;    /* fatbin: code entries (cubin or PTX) */
    unsigned compressed; /* fatbin: entries skipped, their payload compressed */
    unsigned names;      /* names reported (repeats included) */
} sim_image_info_t;

/* Called once per kernel name found (a name may repeat: a fatbin holds the
 * same kernels as cubin and PTX).  name is not NUL-terminated. */
typedef void (*sim_image_name_fn)(void *arg, const char *name, size_t len);

/* The length the image claims for itself, read from its header (the
 * wrapper's container, a PTX text's bytes with the NUL, the ELF's furthest
 * table); 0 when the first bytes are none of the kinds.  Reads as far as
 * the header says, as CUDA does with a pointer and no length: callers that
 * know the length use sim_image_parse alone. */
size_t sim_image_extent(const void *image);

/* The image the wrapper 0x466243B1 points at, or image itself. */
const void *sim_image_unwrap(const void *image);

/* Reports each kernel name of the image's len bytes (a wrapper is not
 * followed here: pass sim_image_unwrap's answer).  CUDA_SUCCESS,
 * CUDA_ERROR_INVALID_IMAGE (unknown kind, corrupt or truncated).  info may
 * be NULL. */
CUresult sim_image_parse(const void *image, size_t len, sim_image_name_fn fn, void *arg, sim_image_info_t *info);

#endif
