/*
 * The JIT linker: cuLinkCreate, cuLinkAddData, cuLinkAddFile,
 * cuLinkComplete, cuLinkDestroy (and their _v2 names).
 *
 * The device compiles nothing, so linking is collecting: each input (a
 * cubin, PTX text or a fatbin, as module_image.c reads them) is checked
 * against the type it was given as and becomes one or more entries of the
 * output, a fatbin container in the layout module_image.c reads (the
 * simulator's own: a real driver would hand back a linked cubin), which
 * cuModuleLoadData and cuLibraryLoadData accept and whose kernels are the
 * union of the inputs'.  An input that is not what its type says, or that
 * defines a kernel an earlier input defined, is CUDA_ERROR_INVALID_IMAGE
 * with one line naming it in the CU_JIT_ERROR_LOG_BUFFER given to
 * cuLinkCreate; host objects, archives and NVVM IR are
 * CUDA_ERROR_NOT_SUPPORTED.  docs/simulator.md, "Linker".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define SIM_MAGIC_LINK 0x4b4e494cu /* "LINK" */

/* The CUDA 5.5 names, which cuda.h declares only to the driver itself:
 * the arguments of the _v2 forms. */
SIM_API CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
                              CUlinkState *stateOut);
SIM_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                               unsigned int numOptions, CUjit_option *options, void **optionValues);
SIM_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
                               CUjit_option *options, void **optionValues);

struct CUlinkState_st {
    uint32_t magic;
    uint8_t *body; /* the output's entries so far */
    size_t len, cap;
    uint8_t *out; /* cuLinkComplete's image: valid until cuLinkDestroy */
    char **names; /* kernels defined so far (strdup'ed) */
    unsigned *from; /* the input that defined each */
    size_t nnames;
    unsigned inputs;
    char *error_log, *info_log; /* the buffers given to cuLinkCreate, or NULL */
    size_t error_size, info_size;
    void **error_used, **info_used; /* where the bytes written go back (the *_SIZE_BYTES values) */
};

/* Writes one line to the error log (truncated to its buffer). */
static void link_error(struct CUlinkState_st *l, const char *fmt, ...)
{
    if (!l->error_log || !l->error_size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->error_log, l->error_size, fmt, ap);
    va_end(ap);
    if (l->error_used)
        *l->error_used = (void *)(uintptr_t)(n < 0 ? 0 : (size_t)n < l->error_size ? (size_t)n + 1 : l->error_size);
}

static CUresult link_create(unsigned n, CUjit_option *opt, void **val, CUlinkState *out)
{
    if (!out || (n && (!opt || !val)))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)opt[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    struct CUlinkState_st *l = sim_xcalloc(1, sizeof *l);
    l->magic = SIM_MAGIC_LINK;
    for (unsigned i = 0; i < n; i++) {
        if (opt[i] == CU_JIT_ERROR_LOG_BUFFER)
            l->error_log = val[i];
        else if (opt[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
            l->error_size = (size_t)(uintptr_t)val[i];
            l->error_used = &val[i];
        } else if (opt[i] == CU_JIT_INFO_LOG_BUFFER)
            l->info_log = val[i];
        else if (opt[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) {
            l->info_size = (size_t)(uintptr_t)val[i];
            l->info_used = &val[i];
        }
    }
    if (l->error_log && l->error_size)
        l->error_log[0] = 0;
    if (l->info_log && l->info_size)
        l->info_log[0] = 0;
    if (l->error_used)
        *l->error_used = 0;
    if (l->info_used)
        *l->info_used = 0;
    handle_add(l, SIM_MAGIC_LINK);
    *out = l;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                                 CUlinkState *stateOut)
{
    return link_create(numOptions, options, optionValues, stateOut);
}

/* The CUDA 5.5 name: the same arguments. */
SIM_API CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
                              CUlinkState *stateOut)
{
    return link_create(numOptions, options, optionValues, stateOut);
}

/* One row per input type: the entries it may hold, and its name in logs. */
static const struct {
    bool supported;
    unsigned kinds;    /* bit SIM_FATBIN_KIND_*: which entries */
    bool container;    /* a fatbin (several entries) */
    const char *what;
} input_types[CU_JIT_NUM_INPUT_TYPES] = {
    [CU_JIT_INPUT_CUBIN] = {true, 1u << SIM_FATBIN_KIND_ELF, false, "a cubin"},
    [CU_JIT_INPUT_PTX] = {true, 1u << SIM_FATBIN_KIND_PTX, false, "PTX"},
    [CU_JIT_INPUT_FATBINARY] = {true, 1u << SIM_FATBIN_KIND_ELF | 1u << SIM_FATBIN_KIND_PTX, true, "a fatbin"},
    [CU_JIT_INPUT_OBJECT] = {false, 0, false, "a host object"},
    [CU_JIT_INPUT_LIBRARY] = {false, 0, false, "an archive"},
    [CU_JIT_INPUT_NVVM] = {false, 0, false, "NVVM IR"},
};

/* What an input holds, gathered before anything is added. */
typedef struct input_s {
    unsigned kinds; /* bits of the entries' kinds */
    unsigned entries;
    char **names; /* its kernels (strdup'ed, distinct) */
    size_t nnames;
    struct CUlinkState_st *l; /* appends its entries when set */
} input_t;

static void input_entry(void *arg, unsigned kind, uint64_t flags, const void *payload, size_t size)
{
    input_t *in = arg;
    in->kinds |= 1u << kind;
    in->entries++;
    struct CUlinkState_st *l = in->l;
    if (!l)
        return;
    size_t need = SIM_FATBIN_ENTRY_SIZE + size;
    if (l->cap - l->len < need) {
        l->cap = (l->len + need) * 2;
        l->body = realloc(l->body, l->cap);
        if (!l->body)
            abort();
    }
    uint8_t *e = l->body + l->len;
    memset(e, 0, SIM_FATBIN_ENTRY_SIZE);
    uint16_t k = (uint16_t)kind, version = 1;
    uint32_t hsize = SIM_FATBIN_ENTRY_SIZE;
    uint64_t psize = size;
    memcpy(e, &k, 2); /* little-endian hosts only (cuda_api.h: x86_64, aarch64) */
    memcpy(e + 2, &version, 2);
    memcpy(e + 4, &hsize, 4);
    memcpy(e + 8, &psize, 8);
    memcpy(e + 40, &flags, 8);
    memcpy(e + SIM_FATBIN_ENTRY_SIZE, payload, size);
    l->len += need;
}

static void input_name(void *arg, const char *name, size_t len)
{
    input_t *in = arg;
    for (size_t i = 0; i < in->nnames; i++)
        if (strlen(in->names[i]) == len && memcmp(in->names[i], name, len) == 0)
            return;
    in->names = realloc(in->names, (in->nnames + 1) * sizeof *in->names);
    if (!in->names || !(in->names[in->nnames] = strndup(name, len)))
        abort();
    in->nnames++;
}

static void input_free(input_t *in)
{
    for (size_t i = 0; i < in->nnames; i++)
        free(in->names[i]);
    free(in->names);
}

/* Checks an input of type `type` and appends it (under sim.lock). */
static CUresult link_add(struct CUlinkState_st *l, CUjitInputType type, const void *data, size_t size,
                         const char *name)
{
    if ((unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
        return CUDA_ERROR_INVALID_VALUE;
    name = name ? name : "(unnamed)";
    if (!input_types[type].supported) {
        link_error(l, "cuLinkAddData: input '%s' is %s: the simulated linker takes cubins, fatbins and PTX", name,
                   input_types[type].what);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    input_t in = {0};
    CUresult r = sim_image_entries(data, size, input_entry, &in);
    if (r == CUDA_SUCCESS)
        r = sim_image_parse(data, size, input_name, &in, NULL);
    uint32_t magic = 0;
    memcpy(&magic, data, size < 4 ? size : 4);
    bool container = magic == SIM_FATBIN_MAGIC;
    if (r != CUDA_SUCCESS || (in.kinds & ~input_types[type].kinds) || container != input_types[type].container) {
        link_error(l, "cuLinkAddData: input '%s' is not %s the simulated device reads", name,
                   input_types[type].what);
        input_free(&in);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    for (size_t i = 0; i < in.nnames; i++)
        for (size_t j = 0; j < l->nnames; j++)
            if (strcmp(in.names[i], l->names[j]) == 0) {
                link_error(l, "cuLinkAddData: input '%s' defines kernel '%s', which input %u already defines", name,
                           in.names[i], l->from[j] + 1);
                input_free(&in);
                return CUDA_ERROR_INVALID_IMAGE;
            }
    in.l = l;
    sim_image_entries(data, size, input_entry, &in);
    l->names = realloc(l->names, (l->nnames + in.nnames) * sizeof *l->names);
    l->from = realloc(l->from, (l->nnames + in.nnames) * sizeof *l->from);
    if (!l->names || !l->from)
        abort();
    for (size_t i = 0; i < in.nnames; i++) {
        l->names[l->nnames] = in.names[i];
        l->from[l->nnames++] = l->inputs;
    }
    free(in.names); /* the strings moved to l */
    l->inputs++;
    return CUDA_SUCCESS;
}

/* Options given to one input: the JIT options, accepted and ignored. */
static CUresult add_options(unsigned n, const CUjit_option *opt, void **val)
{
    if (n && (!opt || !val))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)opt[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult link_add_data(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                              unsigned n, CUjit_option *opt, void **val)
{
    CUresult r = add_options(n, opt, val);
    if (r != CUDA_SUCCESS)
        return r;
    r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(state, SIM_MAGIC_LINK))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (!data || !size)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    return drv_leave(link_add(state, type, data, size, name));
}

SIM_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                                  unsigned int numOptions, CUjit_option *options, void **optionValues)
{
    return link_add_data(state, type, data, size, name, numOptions, options, optionValues);
}

SIM_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                               unsigned int numOptions, CUjit_option *options, void **optionValues)
{
    return link_add_data(state, type, data, size, name, numOptions, options, optionValues);
}

static CUresult link_add_file(CUlinkState state, CUjitInputType type, const char *path, unsigned n,
                              CUjit_option *opt, void **val)
{
    CUresult r = add_options(n, opt, val);
    if (r != CUDA_SUCCESS)
        return r;
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    char *buf = NULL;
    size_t len = 0;
    CUresult file_r = drv_file_read(path, &buf, &len);
    r = drv_enter_any();
    if (r != CUDA_SUCCESS) {
        free(buf);
        return r;
    }
    if (!handle_is(state, SIM_MAGIC_LINK))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (file_r != CUDA_SUCCESS) {
        link_error(state, "cuLinkAddFile: cannot read '%s'", path);
        r = CUDA_ERROR_FILE_NOT_FOUND;
    } else {
        /* drv_file_read ends the bytes with a NUL, which ends a PTX text */
        r = link_add(state, type, buf, type == CU_JIT_INPUT_PTX ? len + 1 : len, path);
    }
    sim_unlock();
    free(buf);
    return r;
}

SIM_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
                                  CUjit_option *options, void **optionValues)
{
    return link_add_file(state, type, path, numOptions, options, optionValues);
}

SIM_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
                               CUjit_option *options, void **optionValues)
{
    return link_add_file(state, type, path, numOptions, options, optionValues);
}

/* The container: a 16-byte header, then the entries. */
SIM_API CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(state, SIM_MAGIC_LINK))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (!cubinOut || !sizeOut)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!state->inputs) {
        link_error(state, "cuLinkComplete: no input was added");
        return drv_leave(CUDA_ERROR_INVALID_IMAGE);
    }
    free(state->out);
    state->out = sim_xmalloc(SIM_FATBIN_HEADER_SIZE + state->len);
    uint32_t magic = SIM_FATBIN_MAGIC;
    uint16_t version = SIM_FATBIN_VERSION, hsize = SIM_FATBIN_HEADER_SIZE;
    uint64_t body = state->len;
    memcpy(state->out, &magic, 4);
    memcpy(state->out + 4, &version, 2);
    memcpy(state->out + 6, &hsize, 2);
    memcpy(state->out + 8, &body, 8);
    memcpy(state->out + SIM_FATBIN_HEADER_SIZE, state->body, state->len);
    *cubinOut = state->out;
    *sizeOut = SIM_FATBIN_HEADER_SIZE + state->len;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuLinkDestroy(CUlinkState state)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_take(state, SIM_MAGIC_LINK))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    for (size_t i = 0; i < state->nnames; i++)
        free(state->names[i]);
    free(state->names);
    free(state->from);
    free(state->body);
    free(state->out);
    state->magic = SIM_MAGIC_DEAD;
    free(state);
    return drv_leave(CUDA_SUCCESS);
}
