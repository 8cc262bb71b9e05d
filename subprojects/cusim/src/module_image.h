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
 * A compressed fatbin entry (LZ4 or zstd: fatbin_decompress.h) is
 * decompressed into a buffer of its own and read like an uncompressed one.
 * Besides the names, sim_image_read reports what a kernel's image states
 * about it (registers, shared, local and parameter bytes, thread limits)
 * and the module's __device__ and __constant__ variables with their
 * initial bytes.
 * docs/simulator.md ("Modules") says what the layouts rest on.
 */
#ifndef CUCACHE_SIM_MODULE_IMAGE_H
#define CUCACHE_SIM_MODULE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cusim/cuda_api.h"

/* What parsing found besides the names. */
typedef struct sim_image_info_s {
    unsigned entries;    /* fatbin: code entries (cubin or PTX) */
    unsigned inflated;   /* fatbin: compressed entries decompressed and read */
    unsigned compressed; /* fatbin: entries skipped, compressed in a form not decoded here */
    unsigned other_arch; /* fatbin: entries left for another device (sim_image_read_for) */
    unsigned names;      /* names reported (repeats included) */
    char error[256];     /* why the image was refused, naming the entry, when known; else "" */
} sim_image_info_t;

/* Called once per kernel name found (a name may repeat: a fatbin holds the
 * same kernels as cubin and PTX).  name is not NUL-terminated, and valid
 * during the call only (a compressed entry's bytes are freed after it is
 * read). */
typedef void (*sim_image_name_fn)(void *arg, const char *name, size_t len);

/* What an image states about one kernel; 0 where it says nothing (PTX
 * states no register count).  docs/simulator.md, "Modules", says where
 * each value is read. */
typedef struct sim_kernel_info_s {
    unsigned regs;           /* registers a thread: cubin EIATTR_REGCOUNT */
    unsigned max_threads;    /* threads a block at most: EIATTR_MAX_THREADS/REQNTID, PTX .maxntid/.reqntid */
    unsigned shared_bytes;   /* static shared memory: .nv.shared.<name>, less the 1 KiB sm_80+ reserve */
    unsigned local_bytes;    /* local memory a thread: EIATTR_FRAME_SIZE */
    unsigned param_bytes;    /* the parameters' bytes: EIATTR_CBANK_PARAM_SIZE */
    unsigned const_bytes;    /* the module's __constant__ bytes (.nv.constant3) */
    unsigned binary_version; /* 10 * major + minor of the cubin's sm (90); PTX: the device's, or 0 */
    unsigned ptx_version;    /* the same of the PTX .target or the cubin's virtual architecture */
    bool cubin;              /* read from a cubin (a fatbin's PTX of the same kernel says less) */
} sim_kernel_info_t;

/* A __device__ or __constant__ variable the image defines (its name and
 * bytes valid during the call only, as above). */
typedef struct sim_global_info_s {
    const char *name; /* not NUL-terminated */
    size_t len;
    uint64_t size;    /* bytes */
    const void *init; /* its size initial bytes in the image, or NULL: zero */
    bool constant;    /* __constant__ */
} sim_global_info_t;

/* What sim_image_read reports: each kernel (a name may repeat, as above)
 * and each variable.  Either may be NULL. */
typedef struct sim_image_sink_s {
    void (*kernel)(void *arg, const char *name, size_t len, const sim_kernel_info_t *ki);
    void (*global)(void *arg, const sim_global_info_t *g);
} sim_image_sink_t;

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

/* sim_image_parse with what the image states about each kernel and its
 * variables. */
CUresult sim_image_read(const void *image, size_t len, const sim_image_sink_t *sink, void *arg, sim_image_info_t *info);

/* What a device of SM `dev` (90) does with a code entry of kind `kind`
 * (SIM_FATBIN_KIND_*) for SM `arch`, CUDA's rule, best case first: a
 * fatbin's entry of the best case is loaded, the highest arch of it.
 * `specific`: an arch-specific entry (sm_90a), which runs on its own SM
 * alone.  docs/simulator.md, "Modules". */
typedef enum sim_arch_use_e {
    SIM_ARCH_NONE,   /* not on this device */
    SIM_ARCH_LINKED, /* no SM stated: an entry of the simulator's linker output, which loads whole */
    SIM_ARCH_EXACT,  /* a cubin for the device's SM */
    SIM_ARCH_MINOR,  /* a cubin of the same major, of a lower minor: binary compatible */
    SIM_ARCH_JIT,    /* PTX of a virtual architecture not above the device's, compiled at load */
} sim_arch_use_t;
sim_arch_use_t sim_arch_use(unsigned kind, unsigned arch, bool specific, unsigned dev);

/* sim_image_read as a device of SM `sm` loads the image: of a fatbin, the
 * entries sim_arch_use picks (the others counted in other_arch); a cubin
 * only if the device can run it.  A kernel read from PTX states the
 * device's SM as its binary version.  CUDA_ERROR_NO_BINARY_FOR_GPU when
 * the image has no code for the device, CUDA_ERROR_OUT_OF_MEMORY; else as
 * sim_image_read. */
CUresult sim_image_read_for(const void *image, size_t len, unsigned sm, const sim_image_sink_t *sink, void *arg,
                            sim_image_info_t *info);

/* Each code entry of an image, as it would be put in a fatbin: a cubin or
 * PTX text is one entry (kind 2 or 1), a fatbin its cubin and PTX entries,
 * a compressed one decompressed (its flags then mark none) unless its
 * codec is not decoded here.  For the linker (driver_link.c).
 * CUDA_ERROR_INVALID_IMAGE as sim_image_parse. */
typedef void (*sim_image_entry_fn)(void *arg, unsigned kind, uint64_t flags, const void *payload, size_t size);
CUresult sim_image_entries(const void *image, size_t len, sim_image_entry_fn fn, void *arg);

/* The fatbin layout the entries above are written in. */
enum {
    SIM_FATBIN_MAGIC = 0xBA55ED50u,
    SIM_FATBIN_VERSION = 1,
    SIM_FATBIN_HEADER_SIZE = 16, /* u32 magic, u16 version, u16 header size, u64 entries' bytes */
    SIM_FATBIN_ENTRY_SIZE = 64,  /* u16 kind, u16 version, u32 header size, u64 payload size, ..., u64 flags at 40 */
    SIM_FATBIN_KIND_PTX = 1,
    SIM_FATBIN_KIND_ELF = 2,
    SIM_FATBIN_ARCH_SPECIFIC = 0x100000, /* entry flag: an arch-specific entry (sm_90a) */
};

#endif
