#!/usr/bin/env python3
"""Symbol checks of the libraries that link core/hostalloc (run by meson).

  check_symbols.py exports LIB [--only REGEX] [--map VERSION_SCRIPT]
      LIB's dynamic symbol table defines none of the allocator's names
      (malloc, free, ..., mallocx, mallctl, je_*), and, with --only, nothing
      that REGEX does not match.  With --map, the table is exactly what the
      linker version script's global list says: every exported name matches
      an entry (entries with * are patterns), and every plain entry is
      exported.  It must define at least one symbol, so a broken nm or an
      empty table cannot pass.

  check_symbols.py cref MAPFILE
      MAPFILE is the linker map (-Wl,-Map=...,--cref) of a library.  No object
      linked into it, other than jemalloc's own and core/hostalloc.c, refers
      to malloc/free (or to a libc function that returns malloc'ed memory):
      library code allocates through hostalloc_* (core/hostalloc.h).  The map
      covers every object the linker used, so new code is checked as soon as
      it is linked in.

Why: libcucache.so links jemalloc's static archive, whose malloc/free are
unprefixed.  If they reached the export table, LD_PRELOAD=libcucache.so would
replace the host program's allocator; and inside the library `free` is
jemalloc's, so freeing a pointer that libc allocated (strdup, ...) would
corrupt memory.  Exit status: 0 ok, 1 a check failed, 2 usage or tool error.
"""
import argparse
import re
import subprocess
import sys

# Names that must never be exported by a library linking jemalloc, and never
# be called directly by library code.
ALLOCATOR_NAMES = {
    "malloc", "calloc", "realloc", "reallocarray", "free", "cfree",
    "aligned_alloc", "posix_memalign", "memalign", "valloc", "pvalloc",
    "malloc_usable_size", "malloc_conf", "malloc_message", "malloc_stats_print",
    "mallocx", "rallocx", "xallocx", "sallocx", "dallocx", "sdallocx", "nallocx",
    "mallctl", "mallctlnametomib", "mallctlbymib",
    # C++ operators new/delete (jemalloc's archive defines them too)
    "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
}
ALLOCATOR_PREFIXES = ("je_", "_Znw", "_Zna", "_Zdl", "_Zda", "__libc_malloc", "__libc_free")

# libc functions whose result the caller must free(): inside the library that
# free would be jemalloc's.
RETURNS_MALLOCED = {
    "strdup", "strndup", "asprintf", "vasprintf", "getline", "getdelim",
    "open_memstream", "scandir", "get_current_dir_name", "tempnam",
    "canonicalize_file_name", "backtrace_symbols",
}


def run_nm(nm, args):
    try:
        out = subprocess.run([nm] + args, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", "") or str(e)
        print(f"check_symbols: cannot run {nm} {' '.join(args)}: {err.strip()}", file=sys.stderr)
        sys.exit(2)
    return out.stdout


def forbidden_export(name):
    base = name.split("@")[0]
    return base in ALLOCATOR_NAMES or base.startswith(ALLOCATOR_PREFIXES)


def read_version_script(path):
    """The global entries of a linker version script (comments removed)."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    m = re.search(r"global\s*:(.*?)local\s*:", text, flags=re.S)
    if not m:
        return None
    return [e.strip() for e in m.group(1).split(";") if e.strip()]


def check_map(names, map_path):
    entries = read_version_script(map_path)
    if not entries:
        return [f"{map_path}: no global list found"]
    exact = {e for e in entries if "*" not in e}
    patterns = [re.compile("^" + re.escape(e).replace("\\*", ".*") + "$") for e in entries if "*" in e]
    failures = []
    bases = {n.split("@")[0] for n in names}
    for name in sorted(bases):
        if name not in exact and not any(p.match(name) for p in patterns):
            failures.append(f"exports {name}, which {map_path} does not list")
    for name in sorted(exact - bases):
        failures.append(f"{map_path} lists {name}, which is not exported (no definition, or hidden)")
    return failures


def check_exports(nm, lib, only, map_path=None):
    names = []
    for line in run_nm(nm, ["-D", "--defined-only", lib]).splitlines():
        fields = line.split()
        if len(fields) >= 3:
            names.append(fields[2])
    failures = []
    if not names:
        failures.append("the dynamic symbol table defines nothing (wrong file, or nm output not understood)")
    for name in names:
        if forbidden_export(name):
            failures.append(f"exports allocator symbol {name} "
                            "(jemalloc linked without -Wl,--exclude-libs? see core/meson.build)")
        elif only and not re.search(only, name):
            failures.append(f"exports {name}, which does not match {only} (see interpose/cucache.map)")
    if map_path:
        failures += check_map(names, map_path)
    print(f"{lib}: {len(names)} exported symbols: {' '.join(sorted(names))}")
    return failures


SHARED_OBJECT = re.compile(r"\.so(\.[0-9]+)*$")
# Objects allowed to refer to the allocator by name.
ALLOWED_REFERRERS = (re.compile(r"libjemalloc(_pic)?\.a\("), re.compile(r"(^|/)hostalloc\.c\.o\)?$"))


def parse_cref(path):
    """{symbol: [definer, referrer, ...]} from the map's cross reference table."""
    table, sym, seen = {}, None, False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("Cross Reference Table"):
                seen = True
                continue
            if not seen or not line.strip() or line.startswith("Symbol "):
                continue
            if line[0] not in " \t":
                fields = line.split(None, 1)
                sym = fields[0]
                table[sym] = [fields[1].strip()] if len(fields) > 1 else []
            elif sym is not None:
                table[sym].append(line.strip())
    return table if seen else None


def check_cref(mapfile):
    table = parse_cref(mapfile)
    if table is None:
        return [f"{mapfile} has no cross reference table (link with -Wl,-Map=FILE,--cref)"]
    if not any(s.startswith("cucache_") for s in table):
        return [f"{mapfile} lists no cucache_* symbol: not the map of libcucache.so?"]
    failures = []
    for sym, files in sorted(table.items()):
        if sym.split("@")[0] not in ALLOCATOR_NAMES | RETURNS_MALLOCED:
            continue
        for referrer in files[1:]:
            if SHARED_OBJECT.search(referrer):
                continue  # another shared library: resolves to glibc at run time
            if not any(r.search(referrer) for r in ALLOWED_REFERRERS):
                failures.append(f"{referrer} calls {sym} directly; use hostalloc_* (core/hostalloc.h)")
    print(f"{mapfile}: {len(table)} symbols cross-referenced")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nm", default="nm")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("exports")
    ex.add_argument("lib")
    ex.add_argument("--only", help="regular expression every exported name must match")
    ex.add_argument("--map", help="linker version script whose global list the exports must equal")
    cr = sub.add_parser("cref")
    cr.add_argument("mapfile")
    args = ap.parse_args()

    if args.cmd == "exports":
        failures = check_exports(args.nm, args.lib, args.only, args.map)
    else:
        failures = check_cref(args.mapfile)
    for f in failures:
        print(f"FAIL: {f}")
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
