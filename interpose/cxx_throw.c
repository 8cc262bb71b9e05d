/*
 * C++ exceptions thrown from C.  libcucache.so is C and links no C++
 * library (it is preloaded into every kind of program), so the exception
 * is made and thrown through the Itanium C++ ABI of the libraries the
 * process has loaded already, found at run time (never loaded here):
 * libstdc++'s __cxa_allocate_exception and __cxa_throw, and the
 * exception's typeinfo, constructor and destructor.  The unwinder then
 * crosses this file's frame and its caller's (torch_alloc.c), both built
 * with unwind tables (-fexceptions, interpose/meson.build) up to the C++
 * caller's handler.
 *
 * Which exception: one row per kind, the first whose entry points the
 * process has (cxx_kinds below).
 *
 *   PyTorch's c10::OutOfMemoryError, for an allocation that failed for
 *   lack of memory, where the process has PyTorch's c10 loaded: PyTorch's
 *   Python binding raises it as torch.OutOfMemoryError, as its own
 *   allocator's.  OutOfMemoryError only inherits c10::Error's
 *   constructors (no members of its own, inlined where PyTorch throws), so
 *   it is made as PyTorch's compiler makes it: c10::Error's exported
 *   constructor Error(std::string msg, Backtrace backtrace, const void
 *   *caller) builds the object (its mangled name carries the signature: a
 *   version whose constructor differs has no such name, and the next row
 *   serves), then the object's vtable pointer is set to
 *   OutOfMemoryError's.  The object's size is not exported; the storage
 *   asked for is several times c10::Error's in every version that has this
 *   constructor.
 *
 *   std::runtime_error, everywhere else libstdc++ is loaded: its layout is
 *   libstdc++'s ABI.  PyTorch's binding raises it as RuntimeError.
 *
 * Arguments by value of a type with a non-trivial copy (std::string,
 * std::shared_ptr) are passed in the Itanium ABI as the address of a
 * temporary the caller makes and destroys after the call: the message is
 * such a std::string (libstdc++'s own constructor and destructor), the
 * backtrace an empty shared_ptr (two null pointers, whose destruction does
 * nothing).
 */
#include "cxx_throw.h"
#include "log.h"

#include <dlfcn.h>
#include <link.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The entry points one kind of exception needs; a kind that needs no
 * c10 leaves those slots NULL. */
typedef struct cxx_abi_s {
    void *(*allocate_exception)(size_t size);
    void (*throw_exception)(void *obj, void *tinfo, void (*dtor)(void *)) __attribute__((noreturn));
    void *tinfo;                                 /* the thrown type's typeinfo */
    void (*construct)(void *obj, const char *s); /* std::runtime_error(const char *) */
    void (*destroy)(void *obj);                  /* the thrown type's complete-object destructor */
    /* c10::OutOfMemoryError */
    void (*string_make)(void *str, const char *s, const void *alloc); /* std::string(const char *, alloc) */
    void (*string_drop)(void *str);                                   /* ~std::string() */
    void (*error_make)(void *obj, void *msg, void *backtrace, const void *caller); /* c10::Error(...) */
    void **vtable;                                                                 /* OutOfMemoryError's */
} cxx_abi_t;

/* Where a name is looked up: libstdc++, or PyTorch's c10 libraries (any
 * soname they were built with: libc10.so, libc10.so.2.6, ...). */
typedef enum { CXX_IN_STDCXX, CXX_IN_C10, CXX_IN_C10_CUDA } cxx_lib_t;

typedef struct cxx_name_s {
    cxx_lib_t lib;
    const char *name;
    size_t slot;
} cxx_name_t;

#define CXX_STRING "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"

static const cxx_name_t cxx_stdcxx_names[] = {
    {CXX_IN_STDCXX, "__cxa_allocate_exception", offsetof(cxx_abi_t, allocate_exception)},
    {CXX_IN_STDCXX, "__cxa_throw", offsetof(cxx_abi_t, throw_exception)},
};

static const cxx_name_t cxx_runtime_error_names[] = {
    {CXX_IN_STDCXX, "_ZTISt13runtime_error", offsetof(cxx_abi_t, tinfo)},
    {CXX_IN_STDCXX, "_ZNSt13runtime_errorC1EPKc", offsetof(cxx_abi_t, construct)},
    {CXX_IN_STDCXX, "_ZNSt13runtime_errorD1Ev", offsetof(cxx_abi_t, destroy)},
};

static const cxx_name_t cxx_c10_oom_names[] = {
    {CXX_IN_STDCXX, "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EPKcRKS3_",
     offsetof(cxx_abi_t, string_make)},
    {CXX_IN_STDCXX, "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEED1Ev", offsetof(cxx_abi_t, string_drop)},
    {CXX_IN_C10, "_ZN3c105ErrorC1E" CXX_STRING "St10shared_ptrIKNS_9LazyValueIS6_EEEPKv",
     offsetof(cxx_abi_t, error_make)},
    {CXX_IN_C10_CUDA, "_ZTIN3c1016OutOfMemoryErrorE", offsetof(cxx_abi_t, tinfo)},
    {CXX_IN_C10_CUDA, "_ZTVN3c1016OutOfMemoryErrorE", offsetof(cxx_abi_t, vtable)},
};

/* std::string's storage in libstdc++ (pointer, length, 16-byte buffer),
 * with room to spare; std::shared_ptr's (two pointers). */
enum { CXX_STRING_ROOM = 64, CXX_SHARED_PTR_ROOM = 16 };

/* c10::OutOfMemoryError: c10::Error's constructor, then OutOfMemoryError's
 * vtable and destructor. */
static void make_c10_oom(cxx_abi_t *abi, void *obj, const char *what)
{
    alignas(16) unsigned char msg[CXX_STRING_ROOM];
    alignas(16) unsigned char backtrace[CXX_SHARED_PTR_ROOM] = {0};
    char alloc = 0; /* std::allocator<char>: empty */
    abi->string_make(msg, what, &alloc);
    abi->error_make(obj, msg, backtrace, NULL);
    abi->string_drop(msg);
    *(void ***)obj = abi->vtable + 2; /* past the offset to top and the typeinfo */
    abi->destroy = (void (*)(void *))abi->vtable[2];
}

static void make_runtime_error(cxx_abi_t *abi, void *obj, const char *what)
{
    abi->construct(obj, what);
}

/* One row per kind of exception, in the order they are tried: which
 * failures it carries, the names it needs, how big its storage is, how it
 * is made in that storage. */
typedef struct cxx_kind_s {
    bool out_of_memory; /* only for HOOK_CXX_OUT_OF_MEMORY */
    const cxx_name_t *names;
    size_t nnames;
    size_t room; /* bytes asked of __cxa_allocate_exception */
    void (*make)(cxx_abi_t *abi, void *obj, const char *what);
} cxx_kind_t;

static const cxx_kind_t cxx_kinds[] = {
    {true, cxx_c10_oom_names, sizeof cxx_c10_oom_names / sizeof cxx_c10_oom_names[0], 1024, make_c10_oom},
    {false, cxx_runtime_error_names, sizeof cxx_runtime_error_names / sizeof cxx_runtime_error_names[0], 64,
     make_runtime_error},
};

/* The path of the first loaded object whose file name starts with
 * `prefix` followed by ".so" (then nothing or a version). */
typedef struct cxx_find_s {
    const char *prefix;
    char path[512];
} cxx_find_t;

static int cxx_find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    cxx_find_t *f = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name)
        return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    size_t n = strlen(f->prefix);
    if (strncmp(base, f->prefix, n) != 0 || strncmp(base + n, ".so", 3) != 0 ||
        (base[n + 3] != '\0' && base[n + 3] != '.'))
        return 0;
    if (strlen(name) >= sizeof f->path)
        return 0;
    strcpy(f->path, name);
    return 1;
}

/* A handle on a library the process has loaded, or NULL. */
static void *cxx_lib_open(cxx_lib_t lib)
{
    if (lib == CXX_IN_STDCXX)
        return dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    cxx_find_t f = {lib == CXX_IN_C10 ? "libc10" : "libc10_cuda", {0}};
    if (!dl_iterate_phdr(cxx_find_object, &f))
        return NULL;
    return dlopen(f.path, RTLD_LAZY | RTLD_NOLOAD);
}

static atomic_bool cxx_missing_said;

/* Fills the slots of `names`: true, or false where a library is not
 * loaded (silently) or lacks a name (`*missing` names it). */
static bool cxx_names_find(cxx_abi_t *abi, const cxx_name_t *names, size_t n, const char **missing)
{
    for (size_t i = 0; i < n; i++) {
        void *h = cxx_lib_open(names[i].lib);
        if (!h)
            return false;
        void *p = dlsym(h, names[i].name);
        /* the handle only found it: the library stays loaded, held by
         * whoever loaded it (the C++ caller among them) */
        dlclose(h);
        if (!p) {
            *missing = names[i].name;
            return false;
        }
        *(void **)((char *)abi + names[i].slot) = p;
    }
    return true;
}

/* The first kind this failure may be thrown as whose entry points the
 * process has, its slots filled in *abi; or NULL (no libstdc++ loaded:
 * silently; libstdc++ without one of its names: said once). */
static const cxx_kind_t *cxx_kind_find(hook_cxx_failure_t failure, cxx_abi_t *abi)
{
    const char *missing = NULL;
    cxx_abi_t found = {0};
    bool have =
        cxx_names_find(&found, cxx_stdcxx_names, sizeof cxx_stdcxx_names / sizeof cxx_stdcxx_names[0], &missing);
    for (size_t k = 0; have && k < sizeof cxx_kinds / sizeof cxx_kinds[0]; k++) {
        const cxx_kind_t *kind = &cxx_kinds[k];
        if (kind->out_of_memory && failure != HOOK_CXX_OUT_OF_MEMORY)
            continue;
        *abi = found;
        const char *lacks = NULL;
        if (cxx_names_find(abi, kind->names, kind->nnames, &lacks))
            return kind;
        if (!kind->out_of_memory) /* PyTorch's names are optional; libstdc++'s are not */
            missing = lacks;
    }
    if (missing && !atomic_exchange(&cxx_missing_said, true))
        hook_log("libstdc++ is loaded but has no %s: a failed allocation returns NULL to its C++ caller", missing);
    return NULL;
}

void hook_cxx_throw(hook_cxx_failure_t failure, const char *what)
{
    cxx_abi_t abi;
    const cxx_kind_t *kind = cxx_kind_find(failure, &abi);
    if (!kind)
        return;
    void *obj = abi.allocate_exception(kind->room);
    memset(obj, 0, kind->room);
    kind->make(&abi, obj, what);
    abi.throw_exception(obj, abi.tinfo, abi.destroy);
}
