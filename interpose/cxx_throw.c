/*
 * std::runtime_error thrown from C.  libcucache.so is C and links no C++
 * library (it is preloaded into every kind of program), so the exception
 * is made and thrown through the Itanium C++ ABI of the libstdc++ the
 * process has loaded already, found at run time by its soname with
 * RTLD_NOLOAD (never loaded here): __cxa_allocate_exception, the
 * exception's typeinfo, constructor and destructor, __cxa_throw.  The
 * unwinder then crosses this file's frame and its caller's
 * (torch_alloc.c), both built with unwind tables (-fexceptions,
 * interpose/meson.build) up to the C++ caller's handler.
 *
 * std::runtime_error rather than c10::OutOfMemoryError: PyTorch exports
 * no constructor of its OutOfMemoryError (it is inherited, inlined where
 * PyTorch throws), and making one would mean guessing c10::Error's
 * layout, which changes between versions; std::runtime_error's is
 * libstdc++'s ABI.  PyTorch's Python binding turns it into a RuntimeError
 * with its what().
 */
#include "cxx_throw.h"
#include "log.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* libstdc++'s entry points, one row each: the mangled name and the slot. */
typedef struct cxx_abi_s {
    void *(*allocate_exception)(size_t size);
    void (*throw_exception)(void *obj, void *tinfo, void (*dtor)(void *)) __attribute__((noreturn));
    void *tinfo;                                    /* typeinfo for std::runtime_error */
    void (*construct)(void *obj, const char *what); /* runtime_error(const char *) */
    void (*destroy)(void *obj);                     /* ~runtime_error(), complete object */
} cxx_abi_t;

static const struct {
    const char *name;
    size_t slot;
} cxx_names[] = {
    {"__cxa_allocate_exception", offsetof(cxx_abi_t, allocate_exception)},
    {"__cxa_throw", offsetof(cxx_abi_t, throw_exception)},
    {"_ZTISt13runtime_error", offsetof(cxx_abi_t, tinfo)},
    {"_ZNSt13runtime_errorC1EPKc", offsetof(cxx_abi_t, construct)},
    {"_ZNSt13runtime_errorD1Ev", offsetof(cxx_abi_t, destroy)},
};

/* std::runtime_error is two pointers in libstdc++ (its vtable, its
 * reference-counted message); the storage asked for has room to spare,
 * the rest unused. */
enum { CXX_ERROR_ROOM = 64 };

static atomic_bool cxx_missing_said;

/* The entry points, when the process has libstdc++ loaded: true, or false
 * (none loaded: silently; one missing: said once). */
static bool cxx_abi_find(cxx_abi_t *abi)
{
    void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return false;
    const char *missing = NULL;
    for (size_t i = 0; i < sizeof cxx_names / sizeof cxx_names[0] && !missing; i++) {
        void *p = dlsym(h, cxx_names[i].name);
        if (p)
            *(void **)((char *)abi + cxx_names[i].slot) = p;
        else
            missing = cxx_names[i].name;
    }
    /* the handle only found it: libstdc++ stays loaded, held by whoever
     * loaded it (the C++ caller among them) */
    dlclose(h);
    if (missing && !atomic_exchange(&cxx_missing_said, true))
        hook_log("libstdc++ is loaded but has no %s: a failed allocation returns NULL to its C++ caller", missing);
    return !missing;
}

void hook_cxx_throw(const char *what)
{
    cxx_abi_t abi;
    if (!cxx_abi_find(&abi))
        return;
    void *obj = abi.allocate_exception(CXX_ERROR_ROOM);
    abi.construct(obj, what);
    abi.throw_exception(obj, abi.tinfo, abi.destroy);
}
