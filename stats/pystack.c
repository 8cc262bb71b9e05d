/*
 * Python frames of allocations (CUCACHE_STACKS=python, python+native):
 * the calling thread's Python stack, read through the C API of the CPython
 * that runs in the process, with no build-time dependency on Python.
 *
 * Binding: the C API is looked up once with dlsym(RTLD_DEFAULT), when
 * stacks are enabled (the constructor, or cucache_record_memory_history):
 * Debian's /usr/bin/python3.11 exports it from the executable, other builds
 * from libpython3.X.so, loaded before any constructor runs.  Py_Version
 * (3.11 on) says which row of py_versions applies; an older Python, or a
 * process without one (a C program, a shell under cucache-run), binds
 * nothing and pays nothing per allocation.  A libpython loaded later with
 * dlopen is not seen.
 *
 * Which thread gets frames (st_py_capture; every case reads Py_IsInitialized
 * and the finalizing flag first and gives no frames during finalization):
 *
 *   the thread's state is current (it holds the GIL)  read them
 *   it has a state but does not hold the GIL          PyGILState_Ensure, read, Release
 *   Python does not know the thread                   none
 *   3.11 with a sub-interpreter created               none unless it holds the GIL
 *                                                     in the main interpreter
 *
 * Most allocations come without the GIL: numba calls the driver through
 * ctypes, CuPy's Cython wrappers call CUDA nogil, both releasing it.
 * Reading frames without it races on reference counts, so the thread takes
 * it for the capture: st_stack_capture runs before the allocator takes any
 * lock (interpose/diag.h, hook_site), so no cucache lock is held while it
 * waits, and the tables' mutexes are never held while calling Python.  The
 * wait is up to the interpreter's switch interval (5 ms by default) when
 * another thread runs Python.
 *
 * "Current": on 3.11, _PyThreadState_UncheckedGet returns the GIL holder's
 * state, process-wide; compared with PyGILState_GetThisThreadState (the
 * thread's own) it says whether this thread holds the GIL.  A thread
 * running in a sub-interpreter holds the GIL under another state, which
 * that comparison cannot tell from not holding it, and taking the GIL then
 * would wait for ourselves: once a sub-interpreter exists (3.11 then turns
 * PyGILState_Check's checking off, and it answers 1 always) a thread not
 * holding the GIL in the main interpreter gets no frames.  On 3.12 and
 * later the current state is the calling thread's own (thread-local):
 * non-NULL means it is attached, in whichever interpreter, and those are the
 * frames read.
 *
 * Finalization: no frames once the interpreter is finalizing.  A daemon
 * thread that passes that check just before finalization starts and then
 * waits for the GIL is ended by CPython when it gets it, exactly as it
 * would be when its ctypes call returned.
 *
 * The exception state is saved before and restored after the capture, so
 * that the program's pending exception (if any) is left as it was.
 *
 * Interning: file and function names are interned once each (strings),
 * and each (file, function, line) as a frame record; a stack holds record
 * ids (stack.c).  Both live as long as the process.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "st.h"

enum {
    PY_NAME_MAX = 1024, /* bytes of a file or function name kept */
    PY_CODE_CACHE = 64,  /* code objects whose names a thread remembers (a power of two) */
    PY_SITE_CACHE = 4096,/* (code object, instruction) pairs whose records a thread remembers (a power of two) */
};

/* A thread's recently seen code objects and their interned names, so that
 * a stack seen before costs no attribute lookups.  Each entry holds a
 * reference to its code object, so that its address is not reused while
 * it is here; only the main interpreter's code objects are kept (a
 * sub-interpreter's memory goes with it, whatever the reference count),
 * and an entry is replaced (its reference dropped) under the main
 * interpreter's GIL. */
typedef struct py_code_memo_s {
    void *code;
    uint32_t file, name;
} py_code_memo_t;
static __thread py_code_memo_t py_memo[PY_CODE_CACHE];

/* A thread's recently seen places in code, (code object, instruction
 * offset), and their frame records: a frame seen before costs neither the
 * line number (CPython finds it by reading the code's location table from
 * its start) nor the record's interning.  References and replacement as
 * py_memo's. */
typedef struct py_site_memo_s {
    void *code;
    int lasti;
    uint32_t rec;
} py_site_memo_t;
static __thread py_site_memo_t py_sites[PY_SITE_CACHE];

/* The C API used, the same in every version handled (PyObject * as void *). */
#define PY_FUNCS(X)                                                                                                    \
    X(Py_IsInitialized, int, (void))                                                                                   \
    X(PyGILState_GetThisThreadState, void *, (void))                                                                   \
    X(PyGILState_Check, int, (void))                                                                                   \
    X(PyGILState_Ensure, int, (void))                                                                                  \
    X(PyGILState_Release, void, (int))                                                                                 \
    X(PyThreadState_GetFrame, void *, (void *))                                                                        \
    X(PyFrame_GetCode, void *, (void *))                                                                               \
    X(PyFrame_GetBack, void *, (void *))                                                                               \
    X(PyFrame_GetLineNumber, int, (void *))                                                                            \
    X(PyFrame_GetLasti, int, (void *))                                                                                 \
    X(PyObject_GetAttrString, void *, (void *, const char *))                                                          \
    X(PyUnicode_AsUTF8AndSize, const char *, (void *, ssize_t *))                                                      \
    X(Py_DecRef, void, (void *))                                                                                       \
    X(Py_IncRef, void, (void *))                                                                                       \
    X(PyThreadState_GetInterpreter, void *, (void *))                                                                  \
    X(PyInterpreterState_Main, void *, (void))

/* What differs between versions: one row each, the last row whose version
 * the process's Python has applies. */
typedef struct py_version_s {
    unsigned long from;     /* Py_Version at least this (0xMMmm0000) */
    const char *current;    /* the current thread state, NULL without an error */
    const char *finalizing; /* whether finalization has begun */
    bool global_current;    /* current is the GIL holder's, process-wide (not the thread's own) */
    bool one_exception;     /* the exception saved as one object (GetRaisedException), not Fetch's three */
} py_version_t;

static const py_version_t py_versions[] = {
    {0x030b0000, "_PyThreadState_UncheckedGet", "_Py_IsFinalizing", true, false},
    {0x030c0000, "_PyThreadState_UncheckedGet", "_Py_IsFinalizing", false, true},
    {0x030d0000, "PyThreadState_GetUnchecked", "Py_IsFinalizing", false, true},
};

static struct {
#define PY_FIELD(name, ret, args) ret(*name) args;
    PY_FUNCS(PY_FIELD)
#undef PY_FIELD
    void *(*current)(void);
    int (*finalizing)(void);
    void (*err_fetch)(void **, void **, void **);
    void (*err_restore)(void *, void *, void *);
    void *(*err_get)(void);
    void (*err_set)(void *);
    const py_version_t *version;
    uintptr_t lo, hi; /* the interpreter's executable segment */
    bool bound;
} py;

static struct {
    st_intern_t strings; /* file and function names, with their NUL */
    st_intern_t frames;  /* py_rec_t */
    uint32_t unknown;    /* the string "?" */
} pyt;

/* A frame record's key. */
typedef struct py_rec_s {
    uint32_t file, name; /* pyt.strings ids */
    int32_t line;
} py_rec_t;

static pthread_once_t py_once = PTHREAD_ONCE_INIT;

static void *py_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

static void py_intern_atfork_child(void)
{
    st_intern_atfork_child(&pyt.strings);
    st_intern_atfork_child(&pyt.frames);
}

static void py_bind_once(void)
{
    const unsigned long *version = py_sym("Py_Version");
    if (!version)
        return;
    const py_version_t *row = NULL;
    for (size_t i = 0; i < sizeof py_versions / sizeof *py_versions; i++)
        if (*version >= py_versions[i].from)
            row = &py_versions[i];
    if (!row)
        return; /* before 3.11 */
#define PY_SYM(name, ret, args)                                                                                        \
    if (!(*(void **)&py.name = py_sym(#name)))                                                                         \
        return;
    PY_FUNCS(PY_SYM)
#undef PY_SYM
    *(void **)&py.current = py_sym(row->current);
    *(void **)&py.finalizing = py_sym(row->finalizing);
    if (row->one_exception) {
        *(void **)&py.err_get = py_sym("PyErr_GetRaisedException");
        *(void **)&py.err_set = py_sym("PyErr_SetRaisedException");
    } else {
        *(void **)&py.err_fetch = py_sym("PyErr_Fetch");
        *(void **)&py.err_restore = py_sym("PyErr_Restore");
    }
    if (!py.current || !py.finalizing || !((py.err_get && py.err_set) || (py.err_fetch && py.err_restore)))
        return;
    if (!st_exec_segment((uintptr_t)py.PyFrame_GetBack, &py.lo, &py.hi))
        return;
    if (st_intern_init(&pyt.strings, ST_PY_STRINGS_MAX) != 0 || st_intern_init(&pyt.frames, ST_PY_FRAMES_MAX) != 0)
        return;
    pyt.unknown = st_intern(&pyt.strings, "?", 2);
    pthread_atfork(NULL, NULL, py_intern_atfork_child);
    py.version = row;
    py.bound = true;
}

bool st_py_bind(void)
{
    pthread_once(&py_once, py_bind_once);
    return py.bound;
}

bool st_py_in_interpreter(uintptr_t pc)
{
    return py.bound && pc >= py.lo && pc < py.hi;
}

/* ------------------------------------------------------------------------
 * Capture (with the GIL held)
 * ---------------------------------------------------------------------- */

/* The attribute `attr` of a code object (a str), interned. */
static uint32_t py_code_string(void *code, const char *attr)
{
    void *s = py.PyObject_GetAttrString(code, attr);
    if (!s)
        return pyt.unknown;
    ssize_t len = 0;
    const char *utf8 = py.PyUnicode_AsUTF8AndSize(s, &len);
    uint32_t id = pyt.unknown;
    if (utf8 && len >= 0) {
        char buf[PY_NAME_MAX];
        size_t n = (size_t)len < sizeof buf - 1 ? (size_t)len : sizeof buf - 1;
        memcpy(buf, utf8, n);
        buf[n] = '\0';
        id = st_intern(&pyt.strings, buf, n + 1);
    }
    py.Py_DecRef(s);
    return id ? id : pyt.unknown;
}

/* The record of code object `code` at line `line` (names from py_memo when
 * main); 0 when the table is full. */
static uint32_t py_code_record(void *code, int line, bool main)
{
    py_rec_t r = {.line = line};
    py_code_memo_t *m = &py_memo[((uintptr_t)code >> 4) & (PY_CODE_CACHE - 1)];
    if (main && m->code == code) {
        r.file = m->file, r.name = m->name;
    } else {
        r.file = py_code_string(code, "co_filename");
        r.name = py_code_string(code, "co_qualname");
        if (main) {
            if (m->code)
                py.Py_DecRef(m->code);
            py.Py_IncRef(code);
            *m = (py_code_memo_t){code, r.file, r.name};
        }
    }
    return st_intern(&pyt.frames, &r, sizeof r);
}

/* Frame f as a record id; 0 when the table is full.  main: the thread
 * runs in the main interpreter (py_memo and py_sites may be used). */
static uint32_t py_frame_record(void *f, bool main)
{
    void *code = py.PyFrame_GetCode(f);
    if (!code)
        return 0;
    int lasti = py.PyFrame_GetLasti(f);
    py_site_memo_t *s = &py_sites[(((uintptr_t)code >> 4) ^ ((uintptr_t)lasti * 0x9e3779b1u)) & (PY_SITE_CACHE - 1)];
    uint32_t rec;
    if (main && lasti >= 0 && s->code == code && s->lasti == lasti) {
        rec = s->rec;
    } else {
        rec = py_code_record(code, py.PyFrame_GetLineNumber(f), main);
        if (main && lasti >= 0 && rec) {
            if (s->code)
                py.Py_DecRef(s->code);
            py.Py_IncRef(code);
            *s = (py_site_memo_t){code, lasti, rec};
        }
    }
    py.Py_DecRef(code);
    return rec;
}

/* The frames of thread state ts, innermost first. */
static int py_walk(void *ts, uint32_t *out, int max)
{
    void *saved = NULL, *type = NULL, *value = NULL, *tb = NULL;
    if (py.version->one_exception)
        saved = py.err_get();
    else
        py.err_fetch(&type, &value, &tb);
    int n = 0;
    bool main = py.PyThreadState_GetInterpreter(ts) == py.PyInterpreterState_Main();
    void *f = py.PyThreadState_GetFrame(ts);
    while (f && n < max) {
        uint32_t rec = py_frame_record(f, main);
        if (!rec)
            break;
        out[n++] = rec;
        void *back = py.PyFrame_GetBack(f);
        py.Py_DecRef(f);
        f = back;
    }
    if (f)
        py.Py_DecRef(f);
    /* drops whatever the reads above raised */
    if (py.version->one_exception)
        py.err_set(saved);
    else
        py.err_restore(type, value, tb);
    return n;
}

int st_py_capture(uint32_t *out, int max)
{
    if (!py.bound || !py.Py_IsInitialized() || py.finalizing())
        return 0;
    void *cur = py.current();
    void *mine = py.PyGILState_GetThisThreadState();
    if (py.version->global_current) {
        if (!mine)
            return 0; /* a thread Python does not know */
        if (cur == mine)
            return py_walk(cur, out, max);
        /* cur is another thread's, or this thread's in a sub-interpreter;
         * PyGILState_Check answering 1 here means its checks are off: a
         * sub-interpreter exists, and the two cannot be told apart */
        if (py.PyGILState_Check())
            return 0;
    } else {
        if (cur)
            return py_walk(cur, out, max); /* attached: its interpreter's frames */
        if (!mine)
            return 0;
    }
    int g = py.PyGILState_Ensure();
    int n = py_walk(mine, out, max);
    py.PyGILState_Release(g);
    return n;
}

/* ------------------------------------------------------------------------
 * Records
 * ---------------------------------------------------------------------- */

static const char *py_string(uint32_t id)
{
    size_t len;
    const char *s = st_intern_key(&pyt.strings, id, &len);
    return s ? s : "?";
}

bool st_py_frame(uint32_t rec, st_frame_t *f)
{
    size_t len;
    const py_rec_t *r = st_intern_key(&pyt.frames, rec, &len);
    if (!r || len != sizeof *r)
        return false;
    *f = (st_frame_t){.name = py_string(r->name), .file = py_string(r->file), .line = r->line, .python = true};
    return true;
}

uint32_t st_py_intern(const char *file, const char *name, int line)
{
    if (st_intern_init(&pyt.strings, ST_PY_STRINGS_MAX) != 0 || st_intern_init(&pyt.frames, ST_PY_FRAMES_MAX) != 0)
        return 0;
    py_rec_t r = {st_intern(&pyt.strings, file, strlen(file) + 1), st_intern(&pyt.strings, name, strlen(name) + 1),
                  line};
    return r.file && r.name ? st_intern(&pyt.frames, &r, sizeof r) : 0;
}

/* Library code, one row per kind of place: where a path contains `marker`,
 * what follows it (then past `skip_to` when set: the version directory)
 * names the package. */
static const struct {
    const char *marker;
    char skip_to; /* '\0': none */
} py_library_dirs[] = {
    {"/site-packages/", '\0'}, /* pip, venvs, pyenv */
    {"/dist-packages/", '\0'}, /* Debian's packages */
    {"/lib/python3.", '/'},    /* the standard library: .../lib/python3.11/ctypes/__init__.py */
    {"<frozen ", '\0'},        /* importlib's frozen modules */
};

bool st_py_library(const char *file, const char **where)
{
    for (size_t i = 0; i < sizeof py_library_dirs / sizeof *py_library_dirs; i++) {
        const char *p = strstr(file, py_library_dirs[i].marker);
        if (!p)
            continue;
        p += strlen(py_library_dirs[i].marker);
        if (py_library_dirs[i].skip_to) {
            const char *s = strchr(p, py_library_dirs[i].skip_to);
            p = s ? s + 1 : p;
        }
        *where = py_library_dirs[i].marker[0] == '<' ? file : p;
        return true;
    }
    return false;
}
