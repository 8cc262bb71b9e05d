/*
 * Call stacks of allocations (CUCACHE_STACKS=native, python,
 * python+native): captured at each allocation, interned, symbolised only
 * when a report or snapshot is written.
 *
 * Capture: libunwind's unw_backtrace (Debian's libunwind8), the return
 * addresses only; Python frames as pystack.c's frame records, and in
 * python+native the native frames up to the first in the interpreter's
 * code.  A stack is interned (intern.c) in a table of distinct stacks and
 * the allocation carries its 32-bit id (core_block_info_t.site), so a
 * training loop that allocates from the same few places a million times
 * keeps a few stacks.  Lookups take no lock; insertions (a stack never
 * seen before) take a mutex.  The table is bounded (ST_STACKS_MAX stacks);
 * past it allocations get ST_STACK_DROPPED.
 *
 * Reports: a stack with Python frames is shown with the program's own
 * frames first (site_python says how the rest is folded).
 *
 * Symbolisation: libdw's Dwfl over the process's own modules
 * (/proc/self/maps): function, file and line where the module has debug
 * information, else the symbol table's name, else the module and offset;
 * an address in no module is "??".  Each address is symbolised once and
 * cached for the life of the process (a module unloaded and another loaded
 * at its address would show the first one's names).  Without libdw, dladdr:
 * function and module only.
 *
 * Both libraries are loaded with dlopen(RTLD_LOCAL) when stacks are first
 * asked for, never linked: libunwind.so.8 also defines _Unwind_Backtrace,
 * _Unwind_RaiseException and the rest of the C++ unwinding ABI, which a
 * preloaded library's dependency would put ahead of libgcc_s's for the
 * whole program; and nobody who leaves stacks off should load libdw's
 * half-dozen compression libraries.  Without libunwind.so.8,
 * st_stacks_enable fails with a message; without libdw.so.1 (or its
 * headers at build time), names come from dladdr.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hashtab.h"
#include "hostalloc.h"
#include "st.h"
#include "vec.h"

#ifdef CUCACHE_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

/* libunwind's local unwinder (libunwind-common.h's prototype). */
typedef int (*unw_backtrace_fn)(void **buffer, int size);
static unw_backtrace_fn stk_backtrace;

enum {
    STK_OWN_MAX = 16, /* cucache's own frames at most above the program's */
};

const st_stack_mode_row_t st_stack_modes[ST_STACKS_MODES] = {
    [ST_STACKS_OFF] = {"off", false, false},
    [ST_STACKS_NATIVE] = {"native", true, false},
    [ST_STACKS_PYTHON] = {"python", false, true},
    [ST_STACKS_PYTHON_NATIVE] = {"python+native", true, true},
};

/* A stack's key in the table: words[0] native return addresses (innermost
 * first) in words[1..], then Python frame records (pystack.c's ids), as
 * many as the key's length leaves. */
static struct {
    _Atomic int depth;    /* frames kept of each kind; 0: off (release: the table, mode and stk_backtrace are set) */
    st_stack_mode_t mode; /* what a stack holds; set before depth */
    st_intern_t table;    /* the stacks; ids from ST_STACK_FIRST on */
    uintptr_t own_lo, own_hi; /* cucache's code (libcucache.so's executable segment); empty in executables */
} stk;

/* ------------------------------------------------------------------------
 * Capture and interning
 * ---------------------------------------------------------------------- */

typedef struct seg_find_s {
    uintptr_t addr, lo, hi;
} seg_find_t;

static int seg_of(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    seg_find_t *f = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (f->addr >= lo && f->addr < hi) {
            f->lo = lo, f->hi = hi;
            return 1;
        }
    }
    return 0;
}

bool st_exec_segment(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
    seg_find_t f = {addr, 0, 0};
    dl_iterate_phdr(seg_of, &f);
    *lo = f.lo, *hi = f.hi;
    return f.hi > f.lo;
}

static bool dw_load(void);
static void stacks_atfork_child(void);

int st_stacks_enable(st_stack_mode_t mode, int depth, bool *on, char *err, size_t errlen)
{
    *on = false;
    if (mode <= ST_STACKS_OFF || mode >= ST_STACKS_MODES) {
        snprintf(err, errlen, "not a mode of call stacks");
        return -1;
    }
    if (depth < 1 || depth > ST_STACK_DEPTH_MAX) {
        snprintf(err, errlen, "a stack depth from 1 to %d", ST_STACK_DEPTH_MAX);
        return -1;
    }
    const st_stack_mode_row_t *row = &st_stack_modes[mode];
    /* Python frames only, and no interpreter: nothing to record, nothing
     * loaded (a shell or launcher under cucache-run) */
    bool python = row->python && st_py_bind();
    if (!row->native && !python)
        return 0;
    if (row->native && !stk_backtrace) {
        void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        unw_backtrace_fn fn = h ? (unw_backtrace_fn)dlsym(h, "unw_backtrace") : NULL;
        if (!fn) {
            const char *why = dlerror();
            snprintf(err, errlen, "cannot load libunwind.so.8 to record call stacks (Debian: libunwind8): %s",
                     why ? why : "no unw_backtrace in it");
            return -1;
        }
        stk_backtrace = fn;
    }
    if (st_intern_init(&stk.table, ST_STACKS_MAX - ST_STACK_FIRST) != 0) {
        snprintf(err, errlen, "no host memory for the stack table");
        return -1;
    }
#ifdef CUCACHE_IN_PRELOAD
    st_exec_segment((uintptr_t)&st_stacks_enable, &stk.own_lo, &stk.own_hi);
#endif
    /* libdw now, in the constructor, so that no allocation hook ever calls
     * dlopen (a report written while another thread is in dlopen would
     * wait for the loader's lock holding the symbol cache's) */
    if (row->native)
        dw_load();
    static bool atfork_set;
    if (!atfork_set && pthread_atfork(NULL, NULL, stacks_atfork_child) == 0)
        atfork_set = true;
    stk.mode = mode;
    atomic_store_explicit(&stk.depth, depth, memory_order_release);
    *on = true;
    return 0;
}

bool st_stacks_on(void)
{
    return atomic_load_explicit(&stk.depth, memory_order_acquire) > 0;
}

/* The table's ids start after the reserved ones (ST_STACK_DROPPED, ...). */
static uint32_t stk_intern(const uintptr_t *key, int words)
{
    uint32_t id = st_intern(&stk.table, key, (size_t)words * sizeof *key);
    return id ? id + (ST_STACK_FIRST - 1) : ST_STACK_DROPPED;
}

/* The native frames of the calling thread's stack into pc[0..depth), the
 * count; above them `skip` frames of the caller's own (st_stack_capture)
 * and cucache's. */
__attribute__((noinline)) static int stk_native(uintptr_t *pc, int depth, int skip)
{
    void *raw[ST_STACK_DEPTH_MAX + STK_OWN_MAX];
    int n = stk_backtrace(raw, depth + STK_OWN_MAX);
    /* drop the callers here, and in libcucache.so every frame of cucache's
     * own above the program's call */
    if (skip > n)
        skip = n;
    while (skip < n && (uintptr_t)raw[skip] >= stk.own_lo && (uintptr_t)raw[skip] < stk.own_hi)
        skip++;
    n -= skip;
    if (n > depth)
        n = depth;
    for (int i = 0; i < n; i++)
        pc[i] = (uintptr_t)raw[skip + i];
    return n > 0 ? n : 0;
}

__attribute__((noinline)) uint32_t st_stack_capture(void)
{
    int depth = atomic_load_explicit(&stk.depth, memory_order_acquire);
    if (depth <= 0)
        return 0;
    const st_stack_mode_row_t *row = &st_stack_modes[stk.mode];
    uintptr_t key[1 + 2 * ST_STACK_DEPTH_MAX];
    int nn = 0, np = 0;
    /* this function's frame and stk_native's */
    if (row->native)
        nn = stk_native(key + 1, depth, 2);
    if (row->python) {
        uint32_t py[ST_STACK_DEPTH_MAX];
        np = st_py_capture(py, depth);
        if (np == 0 && !row->native)
            return ST_STACK_NO_PYTHON;
        /* with Python frames, the native ones up to the interpreter's */
        for (int i = 0; np > 0 && i < nn; i++)
            if (st_py_in_interpreter(key[1 + i])) {
                nn = i;
                break;
            }
        for (int i = 0; i < np; i++)
            key[1 + nn + i] = py[i];
    }
    if (nn + np == 0)
        return ST_STACK_DROPPED;
    key[0] = (uintptr_t)nn;
    return stk_intern(key, 1 + nn + np);
}

uint32_t st_stack_intern_mixed(const uintptr_t *pc, int n, const uint32_t *py, int np)
{
    if (n < 0 || np < 0 || n + np <= 0)
        return 0;
    uintptr_t key[1 + 2 * ST_STACK_DEPTH_MAX];
    n = n > ST_STACK_DEPTH_MAX ? ST_STACK_DEPTH_MAX : n;
    np = np > ST_STACK_DEPTH_MAX ? ST_STACK_DEPTH_MAX : np;
    key[0] = (uintptr_t)n;
    for (int i = 0; i < n; i++)
        key[1 + i] = pc[i];
    for (int i = 0; i < np; i++)
        key[1 + n + i] = py[i];
    uint32_t id = st_intern(&stk.table, key, (size_t)(1 + n + np) * sizeof *key);
    return id ? id + (ST_STACK_FIRST - 1) : 0;
}

uint32_t st_stack_intern(const uintptr_t *pc, int n)
{
    return st_stack_intern_mixed(pc, n, NULL, 0);
}

/* Stack id's key: its words, the count in *words; NULL for ids not kept. */
static const uintptr_t *stk_key(uint32_t id, size_t *words)
{
    if (id < ST_STACK_FIRST || id >= ST_STACKS_MAX)
        return NULL;
    size_t len;
    const uintptr_t *key = st_intern_key(&stk.table, id - (ST_STACK_FIRST - 1), &len);
    if (!key)
        return NULL;
    *words = len / sizeof *key;
    return key;
}

size_t st_stack_pcs(uint32_t id, const uintptr_t **pc)
{
    size_t words;
    const uintptr_t *key = stk_key(id, &words);
    if (!key)
        return 0;
    *pc = key + 1;
    return key[0];
}

/* ------------------------------------------------------------------------
 * Symbolisation
 * ---------------------------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    ht_t index;         /* pc -> its frame's number in frames */
    st_frame_t *frames; /* symbolised, n of cap */
    size_t n, cap;
#ifdef CUCACHE_HAVE_LIBDW
    Dwfl *dwfl;
#endif
} sym = {.lock = PTHREAD_MUTEX_INITIALIZER};

static char *sym_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = hostalloc_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* C++ names as people read them, where the process has a demangler (any
 * program with libstdc++ loaded; PyTorch's); a symbol's version
 * ("__libc_start_main@@GLIBC_2.34") left out. */
static char *sym_name(const char *raw)
{
    char plain_c[256];
    const char *at = raw ? strchr(raw, '@') : NULL;
    if (at && (size_t)(at - raw) < sizeof plain_c) {
        memcpy(plain_c, raw, (size_t)(at - raw));
        plain_c[at - raw] = '\0';
        raw = plain_c;
    }
    if (raw && raw[0] == '_' && raw[1] == 'Z') {
        typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
        demangle_fn dm = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
        int status = -1;
        char *plain = dm ? dm(raw, NULL, NULL, &status) : NULL;
        if (plain && status == 0) {
            char *d = sym_strdup(plain);
            hostalloc_free_foreign(plain); /* the demangler used the process's malloc */
            return d;
        }
        hostalloc_free_foreign(plain);
    }
    return sym_strdup(raw ? raw : "??");
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

#ifdef CUCACHE_HAVE_LIBDW
/* A source file as an absolute path: a relative name (as the compiler saw
 * it, "../src/x.c") joined to the compilation directory, "." and ".."
 * folded away. */
static char *source_path(const char *file, const char *dir)
{
    char joined[4096];
    if (file[0] == '/' || !dir || !*dir)
        snprintf(joined, sizeof joined, "%s", file);
    else
        snprintf(joined, sizeof joined, "%s/%s", dir, file);
    char out[4096];
    size_t n = 0;
    for (const char *p = joined; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if ((len == 1 && p[0] == '.') || len == 0) {
            /* nothing */
        } else if (len == 2 && p[0] == '.' && p[1] == '.' && (joined[0] == '/' || n > 0) &&
                   !(n >= 2 && out[n - 1] == '.' && out[n - 2] == '.' && (n == 2 || out[n - 3] == '/'))) {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--; /* the slash */
        } else if (n + len + 2 < sizeof out) {
            if (n > 0 || joined[0] == '/')
                out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len + (e ? 1 : 0);
    }
    out[n] = '\0';
    return sym_strdup(n ? out : joined);
}

/* libdw's functions, from libdw.so.1 loaded when the first name is looked
 * up (the header gives their types; the library is never linked). */
#define DW_FUNCS(X)                                                                                                    \
    X(dwfl_begin)                                                                                                      \
    X(dwfl_linux_proc_find_elf)                                                                                        \
    X(dwfl_standard_find_debuginfo)                                                                                    \
    X(dwfl_report_begin)                                                                                               \
    X(dwfl_linux_proc_report)                                                                                          \
    X(dwfl_report_end)                                                                                                 \
    X(dwfl_addrmodule)                                                                                                 \
    X(dwfl_module_info)                                                                                                \
    X(dwfl_module_addrinfo)                                                                                            \
    X(dwfl_module_getsrc)                                                                                              \
    X(dwfl_lineinfo)                                                                                                   \
    X(dwfl_line_comp_dir)

static struct {
#define DW_FIELD(f) __typeof__(&f) f;
    DW_FUNCS(DW_FIELD)
#undef DW_FIELD
    int state; /* 0: not tried, 1: loaded, -1: not there (dladdr instead) */
} dw;

static bool dw_load(void)
{
    if (dw.state)
        return dw.state > 0;
    dw.state = -1;
    void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return false;
#define DW_SYM(f)                                                                                                      \
    if (!(*(void **)&dw.f = dlsym(h, #f)))                                                                             \
        return false;
    DW_FUNCS(DW_SYM)
#undef DW_SYM
    dw.state = 1;
    return true;
}

static char *dwfl_debuginfo_path;
static Dwfl_Callbacks dwfl_cb;

/* The process's modules, read again (a module loaded since). */
static bool dwfl_refresh(void)
{
    if (!sym.dwfl) {
        dwfl_cb = (Dwfl_Callbacks){.find_elf = dw.dwfl_linux_proc_find_elf,
                                   .find_debuginfo = dw.dwfl_standard_find_debuginfo,
                                   .debuginfo_path = &dwfl_debuginfo_path};
        if (!(sym.dwfl = dw.dwfl_begin(&dwfl_cb)))
            return false;
    }
    dw.dwfl_report_begin(sym.dwfl);
    int rc = dw.dwfl_linux_proc_report(sym.dwfl, getpid());
    dw.dwfl_report_end(sym.dwfl, NULL, NULL);
    return rc == 0;
}

static void sym_lookup_dladdr(uintptr_t pc, st_frame_t *f);

static void sym_lookup(uintptr_t pc, st_frame_t *f)
{
    if (!dw_load()) {
        sym_lookup_dladdr(pc, f);
        return;
    }
    /* a return address: the call is the byte before it */
    Dwarf_Addr a = pc - 1;
    Dwfl_Module *m = sym.dwfl ? dw.dwfl_addrmodule(sym.dwfl, a) : NULL;
    if (!m && dwfl_refresh())
        m = dw.dwfl_addrmodule(sym.dwfl, a);
    if (!m) {
        f->name = sym_strdup("??");
        return;
    }
    Dwarf_Addr base = 0;
    const char *mod = dw.dwfl_module_info(m, NULL, &base, NULL, NULL, NULL, NULL, NULL);
    f->module = sym_strdup(mod ? base_name(mod) : "??");
    f->offset = (uintptr_t)(a + 1 - base);
    GElf_Off off = 0;
    GElf_Sym s;
    f->name = sym_name(dw.dwfl_module_addrinfo(m, a, &off, &s, NULL, NULL, NULL));
    Dwfl_Line *line = dw.dwfl_module_getsrc(m, a);
    int lineno = 0;
    const char *file = line ? dw.dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL) : NULL;
    if (file && lineno > 0) {
        f->file = source_path(file, dw.dwfl_line_comp_dir(line));
        f->line = lineno;
    }
}
#else
static void sym_lookup_dladdr(uintptr_t pc, st_frame_t *f);

static bool dw_load(void)
{
    return false; /* built without libdw's header: dladdr */
}

static void sym_lookup(uintptr_t pc, st_frame_t *f)
{
    sym_lookup_dladdr(pc, f);
}
#endif

/* A fork child: another thread of the parent may have held either lock. */
static void stacks_atfork_child(void)
{
    st_intern_atfork_child(&stk.table);
    pthread_mutex_init(&sym.lock, NULL);
}

/* Names from the dynamic symbol tables only: exported functions, no file
 * or line. */
static void sym_lookup_dladdr(uintptr_t pc, st_frame_t *f)
{
    Dl_info info;
    if (!dladdr((void *)(pc - 1), &info) || !info.dli_fname) {
        f->name = sym_strdup("??");
        return;
    }
    f->module = sym_strdup(base_name(info.dli_fname));
    f->offset = pc - (uintptr_t)info.dli_fbase;
    f->name = sym_name(info.dli_sname);
}

/* The frame at pc, symbolised once; under sym.lock. */
static st_frame_t sym_get(uintptr_t pc)
{
    st_frame_t none = {.name = "??", .pc = pc};
    uint64_t i;
    if (pc == 0)
        return none;
    if (ht_get(&sym.index, pc, &i))
        return sym.frames[i];
    /* room first, so that a frame symbolised is always kept */
    if (!vec_reserve((void **)&sym.frames, &sym.cap, sym.n + 1, sizeof *sym.frames) ||
        !ht_reserve(&sym.index, sym.n + 1))
        return none;
    st_frame_t f = {.pc = pc};
    sym_lookup(pc, &f);
    if (!f.name)
        f.name = "??"; /* no host memory for the name */
    sym.frames[sym.n] = f;
    ht_put(&sym.index, pc, sym.n++);
    return f;
}

size_t st_stack_frames(uint32_t id, st_frame_t *out, size_t max)
{
    size_t words;
    const uintptr_t *key = stk_key(id, &words);
    if (!key)
        return 0;
    size_t nn = key[0], n = 0;
    pthread_mutex_lock(&sym.lock);
    for (; n < nn && n < max; n++)
        out[n] = sym_get(key[1 + n]);
    pthread_mutex_unlock(&sym.lock);
    for (size_t i = 1 + nn; i < words && n < max; i++)
        if (st_py_frame((uint32_t)key[i], &out[n]))
            n++;
    return n;
}

/* A Python file as reports show it: its base name, with its directory for
 * a package's __init__.py or __main__.py (which says nothing alone). */
static const char *py_shown_name(const char *path)
{
    const char *base = base_name(path);
    if (base > path + 1 && (strcmp(base, "__init__.py") == 0 || strcmp(base, "__main__.py") == 0)) {
        const char *dir = base - 1;
        while (dir > path && dir[-1] != '/')
            dir--;
        return dir;
    }
    return base;
}

void st_frame_text(const st_frame_t *f, char *buf, size_t len)
{
    if (f->python)
        snprintf(buf, len, "%s (%s:%d)", f->name, py_shown_name(f->file), f->line);
    else if (f->file)
        snprintf(buf, len, "%s (%s:%d)", f->name, base_name(f->file), f->line);
    else if (f->module)
        snprintf(buf, len, "%s (%s+0x%llx)", f->name, f->module, (unsigned long long)f->offset);
    else
        snprintf(buf, len, "%s (0x%llx)", f->name, (unsigned long long)f->pc);
}

/* ------------------------------------------------------------------------
 * Live allocations by call site, for the OOM and leak reports
 * ---------------------------------------------------------------------- */

static int site_cmp(const void *a, const void *b)
{
    const core_block_info_t *x = *(const core_block_info_t *const *)a, *y = *(const core_block_info_t *const *)b;
    if (x->site != y->site)
        return x->site < y->site ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

static int group_bytes_cmp(const void *a, const void *b)
{
    const st_site_group_t *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

const core_block_info_t **st_live_blocks(const core_layout_t *l, size_t n, int (*cmp)(const void *, const void *))
{
    const core_block_info_t **live = hostalloc_malloc(n * sizeof *live);
    if (!live)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < l->nblocks; i++)
        if (l->blocks[i].state == CORE_BLOCK_ALLOCATED)
            live[k++] = &l->blocks[i];
    qsort(live, n, sizeof *live, cmp);
    return live;
}

size_t st_group_by_site(const core_layout_t *l, st_site_group_t **out)
{
    *out = NULL;
    size_t n = 0;
    bool any = false;
    for (size_t i = 0; i < l->nblocks; i++)
        if (l->blocks[i].state == CORE_BLOCK_ALLOCATED)
            n++, any |= l->blocks[i].site != 0;
    if (!any)
        return 0;
    const core_block_info_t **live = st_live_blocks(l, n, site_cmp);
    st_site_group_t *g = hostalloc_malloc(n * sizeof *g);
    if (!live || !g) {
        hostalloc_free(live);
        hostalloc_free(g);
        return 0;
    }
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        const core_block_info_t *b = live[i];
        if (ng && g[ng - 1].site == b->site) {
            st_site_group_t *x = &g[ng - 1];
            x->count++;
            x->bytes += b->requested;
            x->min = b->requested < x->min ? b->requested : x->min;
            x->max = b->requested > x->max ? b->requested : x->max;
        } else {
            g[ng++] = (st_site_group_t){b->site, 1, b->requested, b->requested, b->requested, b->number, b->born};
        }
    }
    hostalloc_free(live);
    qsort(g, ng, sizeof *g, group_bytes_cmp);
    *out = g;
    return ng;
}

static const char *frames_word(size_t n)
{
    return n == 1 ? "frame" : "frames";
}

enum { FRAMES_SHOWN = 4 }; /* frames listed per call site */

/* A native stack: its innermost frames, then how many more. */
static void site_native(uint32_t site, size_t depth, st_sink_fn sink, void *ctx)
{
    st_frame_t f[FRAMES_SHOWN];
    size_t nf = st_stack_frames(site, f, FRAMES_SHOWN);
    for (size_t k = 0; k < nf; k++) {
        char text[512];
        st_frame_text(&f[k], text, sizeof text);
        st_linef(sink, ctx, "      %s", text);
    }
    if (depth > nf)
        st_linef(sink, ctx, "      ... %zu more %s", depth - nf, frames_word(depth - nf));
}

/* A stack with Python frames: what the user needs first is their own
 * line.  The native frames below the interpreter (python+native) fold into
 * one line naming the innermost; runs of library frames (installed
 * packages, the standard library: st_py_library) fold into one line naming
 * where the run starts, unless every frame is library code; then the first
 * FRAMES_SHOWN frames left, and how many more. */
static void site_python(const uintptr_t *key, size_t words, st_sink_fn sink, void *ctx)
{
    size_t nn = key[0], np = words - 1 - nn;
    char text[512];
    if (nn) {
        st_frame_t inner;
        pthread_mutex_lock(&sym.lock);
        inner = sym_get(key[1]);
        pthread_mutex_unlock(&sym.lock);
        st_frame_text(&inner, text, sizeof text);
        st_linef(sink, ctx, "      ... %zu native %s, innermost %s", nn, frames_word(nn), text);
    }
    st_frame_t f[ST_STACK_DEPTH_MAX];
    size_t n = 0;
    bool any_own = false;
    for (size_t i = 0; i < np && n < ST_STACK_DEPTH_MAX; i++)
        if (st_py_frame((uint32_t)key[1 + nn + i], &f[n])) {
            const char *where;
            any_own |= !st_py_library(f[n].file, &where);
            n++;
        }
    size_t shown = 0, folded = 0, i = 0;
    const char *fold_at = NULL;
    for (; i < n && shown < FRAMES_SHOWN; i++) {
        const char *where;
        if (any_own && st_py_library(f[i].file, &where)) {
            if (!folded++)
                fold_at = where;
            continue;
        }
        if (folded)
            st_linef(sink, ctx, "      ... %zu library %s, from %s", folded, frames_word(folded), fold_at);
        folded = 0;
        st_frame_text(&f[i], text, sizeof text);
        st_linef(sink, ctx, "      %s", text);
        shown++;
    }
    size_t more = folded + (n - i);
    if (more)
        st_linef(sink, ctx, "      ... %zu more %s", more, frames_word(more));
}

/* A kept stack's frames, Python's when it has them. */
static void site_frames(uint32_t site, const uintptr_t *key, size_t words, st_sink_fn sink, void *ctx)
{
    if (words > 1 + key[0])
        site_python(key, words, sink, ctx);
    else
        site_native(site, key[0], sink, ctx);
}

void st_site_stack(uint32_t site, const char *what, st_sink_fn sink, void *ctx)
{
    size_t words;
    const uintptr_t *key = stk_key(site, &words);
    if (site == ST_STACK_NO_PYTHON) {
        st_linef(sink, ctx, "%s: no Python frames (a thread Python does not know, such as autograd's)", what);
        return;
    }
    if (!key)
        return; /* no stacks taken: nothing to say */
    st_linef(sink, ctx, "%s, at", what);
    site_frames(site, key, words, sink, ctx);
}

void st_site_lines(const st_site_group_t *g, size_t ng, size_t rows, uint64_t allocs, st_sink_fn sink, void *ctx)
{
    size_t rest = 0, rest_bytes = 0;
    for (size_t i = 0; i < ng; i++) {
        if (i >= rows) {
            rest += g[i].count, rest_bytes += g[i].bytes;
            continue;
        }
        char total[32], lo[32], hi[32];
        st_fmt_size(total, sizeof total, g[i].bytes);
        st_fmt_size(lo, sizeof lo, g[i].min);
        st_fmt_size(hi, sizeof hi, g[i].max);
        char sizes[96];
        if (g[i].min == g[i].max)
            snprintf(sizes, sizeof sizes, "%zu x %s", g[i].count, lo);
        else
            snprintf(sizes, sizeof sizes, "%zu allocations of %s to %s", g[i].count, lo, hi);
        char first[96] = "";
        if (allocs)
            st_fmt_first(first, sizeof first, g[i].first, allocs, g[i].born);
        size_t words;
        const uintptr_t *key = stk_key(g[i].site, &words);
        if (g[i].site == ST_STACK_NO_PYTHON) {
            st_linef(sink, ctx, "  %s = %s%s, no Python frames (a thread Python does not know, or at shutdown)", sizes,
                     total, first);
            continue;
        }
        if (!key) {
            st_linef(sink, ctx, "  %s = %s%s, call stack not recorded", sizes, total, first);
            continue;
        }
        st_linef(sink, ctx, "  %s = %s%s, at", sizes, total, first);
        site_frames(g[i].site, key, words, sink, ctx);
    }
    if (rest) {
        char t[32];
        st_fmt_size(t, sizeof t, rest_bytes);
        st_linef(sink, ctx, "  ... %zu more call %s: %zu %s, %s", ng - rows, ng - rows == 1 ? "site" : "sites", rest,
                 rest == 1 ? "allocation" : "allocations", t);
    }
}
