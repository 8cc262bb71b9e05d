/*
 * Modules, libraries and kernels: cuModuleLoad, cuModuleLoadData,
 * cuModuleLoadDataEx, cuModuleLoadFatBinary, cuModuleGetFunction,
 * cuFuncGetName, cuFuncGetModule, cuModuleUnload; cuLibraryLoadData, cuLibraryLoadFromFile,
 * cuLibraryGetKernel, cuLibraryGetModule, cuKernelGetFunction,
 * cuKernelGetName, cuLibraryUnload; the variables cuModuleGetGlobal,
 * cuLibraryGetGlobal, cuLibraryGetManaged; and the launches
 * cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel (and
 * their _ptsz forms).
 *
 * The device runs no device code.  A module image (a cubin, a fatbin, PTX
 * text, or the simulator's own list of names: module_image.h) is read for
 * its kernel names, what it states about each kernel and its variables
 * (device memory of the module's context, set from the image's bytes);
 * a kernel is a timed operation: it occupies its
 * stream for the time CUCACHE_SIM_KERNEL_US gives its name (engine_stream.c
 * keeps the device's time), after what it is ordered behind, in graphs
 * too, and touches nothing the race detector can see (cucacheSimLaunchTimed
 * declares ranges for tests).  docs/simulator.md, "Modules".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusim/sim.h"
#include "driver.h"
#include "module_image.h"

/* ------------------------------------------------------------------------
 * Kernel names
 * ---------------------------------------------------------------------- */

/* Kernel names, kept for the process: queued and captured launches name
 * their kernel (op->what) after its module is gone. */
static char **names;
static size_t nnames;

static const char *name_intern(const char *p, size_t len)
{
    for (size_t i = 0; i < nnames; i++)
        if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
            return names[i];
    char *n = sim_xmalloc(len + 1);
    memcpy(n, p, len);
    n[len] = 0;
    names = realloc(names, (nnames + 1) * sizeof *names);
    if (!names)
        abort();
    names[nnames++] = n;
    return n;
}

/* The distinct kernel names of an image with what it states about each,
 * and its variables, copied (the reader's pointers last only the call: a
 * compressed entry's bytes go once read); interned under sim.lock once
 * the image is read: parsing runs without the lock. */
typedef struct name_set_s {
    struct {
        const char *p;
        size_t len;
        sim_kernel_info_t info;
    } * v;
    size_t n;
    sim_global_info_t *g;
    size_t ng;
    bool open; /* no name could be read: every entry was compressed in a form not decoded */
    char *buf; /* a file's bytes, or NULL */
} name_set_t;

/* A copy of bytes p[0, len) (NUL-terminated), or NULL for NULL. */
static void *bytes_copy(const void *p, size_t len)
{
    if (!p)
        return NULL;
    char *c = sim_xmalloc(len + 1);
    memcpy(c, p, len);
    c[len] = 0;
    return c;
}

/* A kernel name again (two entries the device loads, sm_90 and sm_90a;
 * a fatbin's cubin and PTX read for no device): what a cubin states wins
 * over PTX. */
static void name_set_add(void *arg, const char *p, size_t len, const sim_kernel_info_t *ki)
{
    name_set_t *set = arg;
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i].len == len && memcmp(set->v[i].p, p, len) == 0) {
            if (ki && ki->cubin && !set->v[i].info.cubin)
                set->v[i].info = *ki;
            return;
        }
    set->v = realloc(set->v, (set->n + 1) * sizeof *set->v);
    if (!set->v)
        abort();
    set->v[set->n].p = bytes_copy(p, len);
    set->v[set->n].len = len;
    memset(&set->v[set->n].info, 0, sizeof set->v[set->n].info);
    if (ki)
        set->v[set->n].info = *ki;
    set->n++;
}

/* A variable again (the cubin's and the PTX's): the first with initial
 * bytes wins. */
static void name_set_global(void *arg, const sim_global_info_t *g)
{
    name_set_t *set = arg;
    for (size_t i = 0; i < set->ng; i++)
        if (set->g[i].len == g->len && memcmp(set->g[i].name, g->name, g->len) == 0) {
            if (!set->g[i].init && g->init && g->size == set->g[i].size)
                set->g[i].init = bytes_copy(g->init, (size_t)g->size);
            return;
        }
    set->g = realloc(set->g, (set->ng + 1) * sizeof *set->g);
    if (!set->g)
        abort();
    set->g[set->ng] = *g;
    set->g[set->ng].name = bytes_copy(g->name, g->len);
    set->g[set->ng].init = bytes_copy(g->init, (size_t)g->size);
    set->ng++;
}

static void name_set_free(name_set_t *set)
{
    for (size_t i = 0; i < set->n; i++)
        free((void *)set->v[i].p);
    for (size_t i = 0; i < set->ng; i++) {
        free((void *)set->g[i].name);
        free((void *)set->g[i].init);
    }
    free(set->v);
    free(set->g);
    free(set->buf);
}

/* Said once per process: a fatbin whose every entry was compressed in a
 * form not decoded here. */
static void open_image(void)
{
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        sim_log("module image: every entry of this fatbin is compressed in a form the simulated device cannot "
                "decompress (zstd needs libzstd.so.1); any kernel name is taken to be in it");
}

/* The SM of the current context's device (90): which entry of a fatbin
 * it loads (sim_arch_use); 0, every entry, before cuInit. */
static unsigned device_sm(void)
{
    CUdevice dev;
    int major, minor;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        dev = 0;
    if (cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
        return 0;
    return (unsigned)(10 * major + minor);
}

/* Reads an image of len bytes (a wrapper already followed) into its kernel
 * names, as the current context's device loads it. */
static CUresult image_names(const void *image, size_t len, name_set_t *set)
{
    sim_image_info_t info;
    static const sim_image_sink_t sink = {name_set_add, name_set_global};
    CUresult r = sim_image_read_for(image, len, device_sm(), &sink, set, &info);
    set->open = r == CUDA_SUCCESS && info.entries && info.compressed == info.entries;
    if (set->open)
        open_image();
    if (r != CUDA_SUCCESS && info.error[0])
        sim_log("module image refused: %s", info.error);
    return r;
}

/* An image by its address alone, as cuModuleLoadData gets it: a wrapper
 * is followed, and the image's length is what its header claims. */
static CUresult image_names_unbounded(const void *image, name_set_t *set)
{
    image = sim_image_unwrap(image);
    size_t len = sim_image_extent(image);
    if (!len)
        return CUDA_ERROR_INVALID_IMAGE;
    return image_names(image, len, set);
}

CUresult drv_file_read(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 65536;
            b = realloc(b, cap + 1);
            if (!b)
                abort();
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return CUDA_SUCCESS;
}

/* An image named by a file (its bytes stay in set->buf). */
static CUresult file_names(const char *path, name_set_t *set)
{
    size_t len;
    CUresult r = drv_file_read(path, &set->buf, &len);
    return r == CUDA_SUCCESS ? image_names(set->buf, len + 1, set) : r; /* the NUL ends a PTX text */
}

/* ------------------------------------------------------------------------
 * Modules
 * ---------------------------------------------------------------------- */

/* What a function is when its image says nothing: the documented
 * defaults (docs/simulator.md, "Kernel attributes"). */
static const sim_kernel_info_t unstated = {
    .regs = 32,
    .max_threads = 1024,
    .binary_version = 90,
    .ptx_version = 90,
};

static struct CUfunc_st *module_add(struct CUmod_st *m, const char *name, const sim_kernel_info_t *ki)
{
    struct CUfunc_st *f = sim_xcalloc(1, sizeof *f);
    f->magic = SIM_MAGIC_FUNC;
    f->mod = m;
    f->name = name;
    f->ns = sim_kernel_ns(name);
    f->info = ki ? *ki : unstated;
    if (!f->info.regs)
        f->info.regs = unstated.regs;
    if (!f->info.max_threads)
        f->info.max_threads = unstated.max_threads;
    if (!f->info.binary_version)
        f->info.binary_version = unstated.binary_version; /* PTX: compiled for the device */
    if (!f->info.ptx_version)
        f->info.ptx_version = f->info.binary_version;
    sim_func_defaults(f);
    m->funcs = realloc(m->funcs, (m->nfuncs + 1) * sizeof *m->funcs);
    if (!m->funcs)
        abort();
    m->funcs[m->nfuncs++] = f;
    handle_add(f, SIM_MAGIC_FUNC);
    return f;
}

static void module_free(struct CUmod_st *m)
{
    for (size_t i = 0; i < m->nfuncs; i++) {
        handle_del(m->funcs[i]);
        m->funcs[i]->magic = SIM_MAGIC_DEAD;
        free(m->funcs[i]);
    }
    free(m->funcs);
    for (size_t i = 0; i < m->nvars; i++) {
        sim_alloc_t *a = sim_alloc_exact(m->vars[i].addr);
        if (a && a->kind == SIM_ALLOC_MODULE)
            sim_alloc_release(a);
    }
    free(m->vars);
    handle_del(m);
    m->magic = SIM_MAGIC_DEAD;
    free(m);
}

/* A module of desc in ctx: a function per kernel, and device memory of
 * ctx's device for each variable, holding its initial bytes or zero. */
CUresult sim_module_new(struct CUctx_st *ctx, const sim_image_desc_t *desc, struct CUmod_st **out)
{
    struct CUmod_st *m = sim_xcalloc(1, sizeof *m);
    m->magic = SIM_MAGIC_MODULE;
    m->ctx = ctx;
    m->open = desc->open;
    handle_add(m, SIM_MAGIC_MODULE);
    for (size_t i = 0; i < desc->nnames; i++)
        module_add(m, desc->names[i], desc->infos ? &desc->infos[i] : NULL);
    m->vars = sim_xcalloc(desc->nglobals + 1, sizeof *m->vars);
    for (size_t i = 0; i < desc->nglobals; i++) {
        const sim_global_t *g = &desc->globals[i];
        sim_alloc_t *a;
        CUresult r = sim_dev_alloc(ctx->dev, g->size, SIM_ALLOC_MODULE, ctx, &a);
        if (r != CUDA_SUCCESS) {
            module_free(m);
            return r;
        }
        if (g->init)
            memcpy((void *)a->addr, g->init, g->size);
        else
            memset((void *)a->addr, 0, g->size);
        m->vars[m->nvars++] = (sim_modvar_t){g->name, a->addr, g->size};
    }
    *out = m;
    return CUDA_SUCCESS;
}

struct CUfunc_st *sim_module_function(struct CUmod_st *m, const char *name)
{
    for (size_t i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i]->name, name) == 0)
            return m->funcs[i];
    return m->open ? module_add(m, name_intern(name, strlen(name)), NULL) : NULL;
}

/* The set as a description (under sim.lock): names interned; the
 * variables' initial bytes copied when `copy` (a library outlives its
 * image), else pointing into the image.  Free with desc_free. */
static void desc_from_set(const name_set_t *set, bool copy, sim_image_desc_t *d)
{
    memset(d, 0, sizeof *d);
    d->names = sim_xcalloc(set->n + 1, sizeof *d->names);
    d->infos = sim_xcalloc(set->n + 1, sizeof *d->infos);
    for (size_t i = 0; i < set->n; i++) {
        d->names[i] = name_intern(set->v[i].p, set->v[i].len);
        d->infos[i] = set->v[i].info;
    }
    d->nnames = set->n;
    d->globals = sim_xcalloc(set->ng + 1, sizeof *d->globals);
    for (size_t i = 0; i < set->ng; i++) {
        const sim_global_info_t *g = &set->g[i];
        sim_global_t *o = &d->globals[i];
        o->name = name_intern(g->name, g->len);
        o->size = (size_t)g->size;
        o->constant = g->constant;
        if (g->init && copy) {
            o->init = sim_xmalloc(o->size);
            memcpy(o->init, g->init, o->size);
        } else {
            o->init = (uint8_t *)(uintptr_t)g->init;
        }
    }
    d->nglobals = set->ng;
    d->open = set->open;
}

static void desc_free(sim_image_desc_t *d, bool copied)
{
    for (size_t i = 0; copied && i < d->nglobals; i++)
        free(d->globals[i].init);
    free(d->globals);
    free(d->names);
    free(d->infos);
}

/* A module of the set's names in the current context, when r (reading
 * the image) succeeded; the set is freed. */
static CUresult module_load(CUmodule *module, CUresult r, name_set_t *set)
{
    sim_lock();
    struct CUctx_st *ctx = NULL;
    CUresult er = sim_ctx_get(&ctx);
    if (er == CUDA_SUCCESS && r == CUDA_SUCCESS) {
        sim_image_desc_t d;
        desc_from_set(set, false, &d);
        r = sim_module_new(ctx, &d, module);
        desc_free(&d, false);
    }
    sim_unlock();
    name_set_free(set);
    return er != CUDA_SUCCESS ? er : r;
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    name_set_t set = {0};
    return module_load(module, image_names_unbounded(image, &set), &set);
}

/* A fatbin container or its wrapper: read like any image. */
SIM_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    name_set_t set = {0};
    return module_load(module, file_names(fname, &set), &set);
}

/* JIT options: nothing is compiled, so the options are accepted and
 * ignored, except the outputs a caller reads afterwards: the log buffers
 * hold an empty text and their sizes say no byte of them was used. */
static CUresult jit_options(unsigned n, const CUjit_option *opt, void **val)
{
    if (n && (!opt || !val))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)opt[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        CUjit_option size_opt = opt[i] == CU_JIT_INFO_LOG_BUFFER    ? CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
                                : opt[i] == CU_JIT_ERROR_LOG_BUFFER ? CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
                                                                    : CU_JIT_NUM_OPTIONS;
        for (unsigned j = 0; j < n && size_opt != CU_JIT_NUM_OPTIONS; j++)
            if (opt[j] == size_opt && (uintptr_t)val[j] > 0 && val[i])
                *(char *)val[i] = 0;
    }
    for (unsigned i = 0; i < n; i++)
        if (opt[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || opt[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            val[i] = (void *)(uintptr_t)0;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
                                    void **optionValues)
{
    CUresult r = jit_options(numOptions, options, optionValues);
    return r != CUDA_SUCCESS ? r : cuModuleLoadData(module, image);
}

/* Any context may be current, or none: the module knows its own. */
SIM_API CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(hmod, SIM_MAGIC_MODULE))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    module_free(hmod);
    return drv_leave(CUDA_SUCCESS);
}

/* A destroyed context's modules go with it. */
void sim_modules_free_ctx(struct CUctx_st *ctx)
{
    void **list;
    size_t n = handle_list(SIM_MAGIC_MODULE, &list);
    for (size_t i = 0; i < n; i++)
        if (((struct CUmod_st *)list[i])->ctx == ctx)
            module_free(list[i]);
    free(list);
}

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    if (!hfunc || !name)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hmod, SIM_MAGIC_MODULE))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    struct CUfunc_st *f = sim_module_function(hmod, name);
    if (!f)
        return drv_leave(CUDA_ERROR_NOT_FOUND);
    *hfunc = f;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Libraries
 * ---------------------------------------------------------------------- */

/* Library options: the two CUDA defines are accepted (the image is read
 * at once, so whether it is preserved does not matter); a file cannot be
 * preserved (CUDA's answer). */
static CUresult library_options(unsigned n, const CUlibraryOption *opt, void **val, bool file)
{
    if (n && (!opt || !val))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)opt[i] >= CU_LIBRARY_NUM_OPTIONS || (file && opt[i] == CU_LIBRARY_BINARY_IS_PRESERVED))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A library of the set's names, when r (reading the image) succeeded;
 * the set is freed. */
static CUresult library_load(CUlibrary *library, CUresult r, name_set_t *set)
{
    sim_lock();
    CUresult er = sim_check_init();
    if (er == CUDA_SUCCESS && r == CUDA_SUCCESS) {
        struct CUlib_st *lib = sim_xcalloc(1, sizeof *lib);
        lib->magic = SIM_MAGIC_LIBRARY;
        desc_from_set(set, true, &lib->desc);
        handle_add(lib, SIM_MAGIC_LIBRARY);
        *library = lib;
    }
    sim_unlock();
    name_set_free(set);
    return er != CUDA_SUCCESS ? er : r;
}

SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                   void **libraryOptionValues, unsigned int numLibraryOptions)
{
    if (!library || !code)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = jit_options(numJitOptions, jitOptions, jitOptionsValues);
    if (r == CUDA_SUCCESS)
        r = library_options(numLibraryOptions, libraryOptions, libraryOptionValues, false);
    if (r != CUDA_SUCCESS)
        return r;
    name_set_t set = {0};
    return library_load(library, image_names_unbounded(code, &set), &set);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                       void **jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                       unsigned int numLibraryOptions)
{
    if (!library || !fileName)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = jit_options(numJitOptions, jitOptions, jitOptionsValues);
    if (r == CUDA_SUCCESS)
        r = library_options(numLibraryOptions, libraryOptions, libraryOptionValues, true);
    if (r != CUDA_SUCCESS)
        return r;
    name_set_t set = {0};
    return library_load(library, file_names(fileName, &set), &set);
}

/* The library's module in ctx, made on first use (under sim.lock); NULL
 * when its variables do not fit in the device. */
static struct CUmod_st *library_module(struct CUlib_st *lib, struct CUctx_st *ctx)
{
    void **list;
    size_t n = handle_list(SIM_MAGIC_MODULE, &list);
    struct CUmod_st *m = NULL;
    for (size_t i = 0; i < n && !m; i++)
        if (((struct CUmod_st *)list[i])->lib == lib && ((struct CUmod_st *)list[i])->ctx == ctx)
            m = list[i];
    free(list);
    if (!m && sim_module_new(ctx, &lib->desc, &m) == CUDA_SUCCESS)
        m->lib = lib;
    return m;
}

SIM_API CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_is(library, SIM_MAGIC_LIBRARY))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    void **list;
    size_t n = handle_list(SIM_MAGIC_MODULE, &list);
    for (size_t i = 0; i < n; i++)
        if (((struct CUmod_st *)list[i])->lib == library)
            module_free(list[i]);
    free(list);
    for (size_t i = 0; i < library->nkernels; i++) {
        handle_del(library->kernels[i]);
        library->kernels[i]->magic = SIM_MAGIC_DEAD;
        free(library->kernels[i]);
    }
    free(library->kernels);
    desc_free(&library->desc, true);
    handle_del(library);
    library->magic = SIM_MAGIC_DEAD;
    free(library);
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pKernel || !name)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(library, SIM_MAGIC_LIBRARY))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    for (size_t i = 0; i < library->nkernels; i++)
        if (strcmp(library->kernels[i]->name, name) == 0) {
            *pKernel = library->kernels[i];
            return drv_leave(CUDA_SUCCESS);
        }
    const char *interned = NULL;
    for (size_t i = 0; i < library->desc.nnames && !interned; i++)
        if (strcmp(library->desc.names[i], name) == 0)
            interned = library->desc.names[i];
    if (!interned && library->desc.open)
        interned = name_intern(name, strlen(name));
    if (!interned)
        return drv_leave(CUDA_ERROR_NOT_FOUND);
    struct CUkern_st *k = sim_xcalloc(1, sizeof *k);
    k->magic = SIM_MAGIC_KERNEL;
    k->lib = library;
    k->name = interned;
    library->kernels = realloc(library->kernels, (library->nkernels + 1) * sizeof *library->kernels);
    if (!library->kernels)
        abort();
    library->kernels[library->nkernels++] = k;
    handle_add(k, SIM_MAGIC_KERNEL);
    *pKernel = k;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pMod)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(library, SIM_MAGIC_LIBRARY))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    *pMod = library_module(library, ctx);
    return drv_leave(*pMod ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

/* The function of kernel k in ctx (under sim.lock), or NULL. */
struct CUfunc_st *sim_kernel_function(struct CUkern_st *k, struct CUctx_st *ctx)
{
    struct CUmod_st *m = library_module(k->lib, ctx);
    return m ? sim_module_function(m, k->name) : NULL;
}

SIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pFunc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(kernel, SIM_MAGIC_KERNEL))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    struct CUfunc_st *f = sim_kernel_function(kernel, ctx);
    if (!f)
        return drv_leave(CUDA_ERROR_NOT_FOUND);
    *pFunc = f;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || !hfunc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hfunc, SIM_MAGIC_KERNEL))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    *name = hfunc->name;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || !hfunc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hfunc, SIM_MAGIC_FUNC))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    *name = hfunc->name;
    return drv_leave(CUDA_SUCCESS);
}

SIM_API CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!hmod || !hfunc)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hfunc, SIM_MAGIC_FUNC))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    *hmod = hfunc->mod;
    return drv_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------
 * Variables
 * ---------------------------------------------------------------------- */

/* The variable of m by that name: its address and size. */
static CUresult module_global(struct CUmod_st *m, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
    for (size_t i = 0; i < m->nvars; i++)
        if (strcmp(m->vars[i].name, name) == 0) {
            if (dptr)
                *dptr = m->vars[i].addr;
            if (bytes)
                *bytes = m->vars[i].size;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    (void)ctx;
    if (!name || (!dptr && !bytes))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(hmod, SIM_MAGIC_MODULE))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    return drv_leave(module_global(hmod, name, dptr, bytes));
}

/* A library's variable in the current context (its module made there). */
SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || (!dptr && !bytes))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(library, SIM_MAGIC_LIBRARY))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    struct CUmod_st *m = library_module(library, ctx);
    return drv_leave(m ? module_global(m, name, dptr, bytes) : CUDA_ERROR_OUT_OF_MEMORY);
}

/* __managed__ variables: the images the simulator reads declare none. */
SIM_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    CUresult r = drv_enter_any();
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || (!dptr && !bytes))
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (!handle_is(library, SIM_MAGIC_LIBRARY))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    return drv_leave(CUDA_ERROR_NOT_FOUND);
}

/* The runtime's private function tables: the simulated device has none
 * (its runtime never asks). */
SIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------
 * Launches
 * ---------------------------------------------------------------------- */

/* How a launch runs besides its grid: cooperatively (all blocks resident
 * at once), and in clusters of these dimensions (0: none asked). */
typedef struct launch_opts_s {
    bool cooperative;
    unsigned cluster[3];
} launch_opts_t;

/* Queues a kernel on h (a stream of the current device): f's time, or
 * `ns` when f is NULL.  f, when not NULL, must be a kernel of a module of
 * the current context or a library's kernel (CUkernel); the grid
 * and block must be non-empty, with at most 1024 threads a block (and no
 * more than f allows), and its dynamic shared memory within f's limit; a
 * cooperative grid must fit on the device at once, and a cluster must
 * divide the grid. */
static CUresult kernel(struct CUfunc_st *f, uint64_t ns, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, const launch_opts_t *opts, CUstream h, void (*fn)(void *), void *arg,
                       const struct cucache_sim_access *acc, unsigned nacc, bool ptds)
{
    struct CUctx_st *ctx;
    CUresult r = drv_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (f && handle_is(f, SIM_MAGIC_KERNEL)) { /* a CUkernel cast to CUfunction: its function in ctx */
        f = sim_kernel_function((struct CUkern_st *)f, ctx);
        if (!f)
            return drv_leave(CUDA_ERROR_OUT_OF_MEMORY); /* its module's variables do not fit */
    }
    if (f && !handle_is(f, SIM_MAGIC_FUNC))
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    if (f && f->mod->ctx != ctx)
        return drv_leave(CUDA_ERROR_INVALID_HANDLE);
    /* an H100's limits: grid 2^31-1 x 65535 x 65535, block 1024 x 1024 x
     * 64 and 1024 threads */
    static const unsigned grid_max[3] = {0x7fffffffu, 65535, 65535}, block_max[3] = {1024, 1024, 64};
    for (int i = 0; i < 3; i++)
        if (grid[i] == 0 || block[i] == 0 || grid[i] > grid_max[i] || block[i] > block_max[i])
            return drv_leave(CUDA_ERROR_INVALID_VALUE);
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads > 1024)
        return drv_leave(CUDA_ERROR_INVALID_VALUE);
    if (f) {
        int per_sm = sim_occupancy_blocks(f, (int)threads, shared);
        if (per_sm == 0)
            return drv_leave(CUDA_ERROR_INVALID_VALUE); /* too many threads, registers or shared bytes for a block */
        uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
        if (opts && opts->cooperative && blocks > (uint64_t)per_sm * (unsigned)sim_device_sms())
            return drv_leave(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
        for (int i = 0; opts && opts->cluster[0] && i < 3; i++)
            if (!opts->cluster[i] || grid[i] % opts->cluster[i])
                return drv_leave(CUDA_ERROR_INVALID_CLUSTER_SIZE);
        if (opts && (uint64_t)opts->cluster[0] * opts->cluster[1] * opts->cluster[2] >
                        (uint64_t)(f->nonportable_cluster ? 16 : 8))
            return drv_leave(CUDA_ERROR_INVALID_CLUSTER_SIZE);
    }
    struct CUstream_st *s = NULL;
    r = sim_stream_resolve(ctx, h, ptds, &s);
    if (r == CUDA_SUCCESS && s->ctx->dev != ctx->dev)
        r = CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        r = drv_access_ok(s, acc, nacc);
    if (r != CUDA_SUCCESS)
        return drv_leave(r);
    sim_op_t *fault = drv_peer_fault(s, acc, nacc);
    if (fault) /* another device's memory without access (driver_peer.c) */
        return drv_leave(sim_enqueue(s, fault));
    sim_op_t *op = sim_op_new(SIM_OP_KERNEL, f ? f->name : "timed kernel");
    op->dur_ns = f ? f->ns : ns;
    op->fn = fn;
    op->arg = arg;
    drv_access_set(op, acc, nacc);
    return drv_leave(sim_enqueue(s, op));
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                       const launch_opts_t *opts, CUstream h, void **params, void **extra, bool ptds)
{
    sim_lock();
    CUresult r = sim_check_init();
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (params && extra) /* cuda.h: one way of passing the parameters, not both */
        return CUDA_ERROR_INVALID_VALUE;
    return kernel(f, 0, grid, block, shared, opts, h, NULL, NULL, NULL, 0, ptds);
}

static CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned shared, CUstream h, void **params, void **extra, bool ptds)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, shared, NULL, h, params, extra, ptds);
}

DRV_PTSZ(cuLaunchKernel, launch_kernel,
         (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
          unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
          void **kernelParams, void **extra),
         (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,
          extra))

static CUresult launch_cooperative(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream h, void **params, bool ptds)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    const launch_opts_t opts = {true, {0, 0, 0}};
    return launch(f, grid, block, shared, &opts, h, params, NULL, ptds);
}

DRV_PTSZ(cuLaunchCooperativeKernel, launch_cooperative,
         (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
          unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
          void **kernelParams),
         (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams))

/* CUlaunchAttribute as cuda.h lays it out (cuda_api.h keeps it opaque):
 * an id, padding to 8 bytes, a union of 64.  The runtime's
 * cudaLaunchAttribute is the same. */
typedef struct launch_attr_s {
    int id;
    char pad[4];
    union {
        char pad[64];
        int i;
        struct {
            unsigned x, y, z;
        } dim;
    } v;
} launch_attr_t;
_Static_assert(sizeof(launch_attr_t) == 72, "CUlaunchAttribute is 72 bytes");

/* One row per launch attribute id: what a launch does with it.  COOPERATIVE
 * and CLUSTER_DIMENSION are checked as CUDA checks them; the others are
 * accepted and have no effect on the simulated device (a priority, a
 * memory synchronisation domain, a programmatic or completion event that
 * is not recorded). */
typedef enum attr_use_e { ATTR_IGNORED, ATTR_COOPERATIVE, ATTR_CLUSTER } attr_use_t;
static const attr_use_t launch_attr_use[] = {
    [0] = ATTR_IGNORED,  /* IGNORE */
    [1] = ATTR_IGNORED,  /* ACCESS_POLICY_WINDOW */
    [2] = ATTR_COOPERATIVE,
    [3] = ATTR_IGNORED,  /* SYNCHRONIZATION_POLICY */
    [4] = ATTR_CLUSTER,  /* CLUSTER_DIMENSION */
    [5] = ATTR_IGNORED,  /* CLUSTER_SCHEDULING_POLICY_PREFERENCE */
    [6] = ATTR_IGNORED,  /* PROGRAMMATIC_STREAM_SERIALIZATION */
    [7] = ATTR_IGNORED,  /* PROGRAMMATIC_EVENT */
    [8] = ATTR_IGNORED,  /* PRIORITY */
    [9] = ATTR_IGNORED,  /* MEM_SYNC_DOMAIN_MAP */
    [10] = ATTR_IGNORED, /* MEM_SYNC_DOMAIN */
    [11] = ATTR_IGNORED, /* PREFERRED_CLUSTER_DIMENSION */
    [12] = ATTR_IGNORED, /* LAUNCH_COMPLETION_EVENT */
    [13] = ATTR_IGNORED, /* DEVICE_UPDATABLE_KERNEL_NODE */
    [14] = ATTR_IGNORED, /* PREFERRED_SHARED_MEMORY_CARVEOUT */
    [15] = ATTR_IGNORED,
    [16] = ATTR_IGNORED, /* NVLINK_UTIL_CENTRIC_SCHEDULING */
};

/* The options a configuration's attributes ask for; false for an unknown
 * attribute id. */
static bool launch_options(const CUlaunchConfig *config, launch_opts_t *opts)
{
    memset(opts, 0, sizeof *opts);
    const launch_attr_t *a = (const launch_attr_t *)(const void *)config->attrs;
    for (unsigned i = 0; i < config->numAttrs; i++) {
        if (a[i].id < 0 || (size_t)a[i].id >= sizeof launch_attr_use / sizeof launch_attr_use[0])
            return false;
        if (launch_attr_use[a[i].id] == ATTR_COOPERATIVE)
            opts->cooperative = a[i].v.i != 0;
        else if (launch_attr_use[a[i].id] == ATTR_CLUSTER) {
            opts->cluster[0] = a[i].v.dim.x;
            opts->cluster[1] = a[i].v.dim.y;
            opts->cluster[2] = a[i].v.dim.z;
        }
    }
    return true;
}

void sim_launch_cluster_dims(const CUlaunchConfig *config, unsigned dims[3])
{
    launch_opts_t opts;
    if (config->attrs && launch_options(config, &opts) && opts.cluster[0])
        memcpy(dims, opts.cluster, sizeof opts.cluster);
}

static CUresult launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra, bool ptds)
{
    launch_opts_t opts;
    if (!config || (config->numAttrs && !config->attrs) || !launch_options(config, &opts))
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(f, grid, block, config->sharedMemBytes, &opts, config->hStream, params, extra, ptds);
}

DRV_PTSZ(cuLaunchKernelEx, launch_kernel_ex,
         (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
         (config, f, kernelParams, extra))

SIM_API CUresult cucacheSimLaunchTimed(CUstream hStream, unsigned int us, void (*fn)(void *), void *arg,
                                       const struct cucache_sim_access *acc, unsigned int nacc)
{
    const unsigned one[3] = {1, 1, 1};
    return kernel(NULL, (uint64_t)us * 1000u, one, one, 0, NULL, hStream, fn, arg, acc, nacc, false);
}
