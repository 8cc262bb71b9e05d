#!/usr/bin/env python3
"""Writes the seed corpus of tests/core/fuzz_core.c into tests/core/fuzz_corpus/.

Each seed is a hand-made input in fuzz_core's encoding (see the comment at
the top of fuzz_core.c): a configuration byte, a capacity byte, then 4-byte
records [op, a, b, c].  Run it again after changing the encoding.
"""
import os

(ALLOC, FREE, RECORD, SYNC, COMPLETE, EMPTY, PCREATE, PUSE, PDESTROY, FAIL, IDLE, LOOKUP, BADFREE, USAGE, STATS,
 OBSERVER) = range(16)
NOW, FENCED, AFTER = range(3)


def alloc(shift, stream=1, base=4096):
    """base bytes (<= 65536) shifted left: allocates base << shift on stream."""
    b = (base - 1) & 0xFF
    c = (base - 1) >> 8
    return [ALLOC, (stream << 4) | shift, b, c]


def alloc_special(kind, stream=1, c=0):
    return [ALLOC, (stream << 4) | kind, 0, c]   # 12: 0 bytes, 13: huge, 14: > capacity, 15: 1 << (c % 28)


def free(idx, how=NOW, stream=0):
    return [FREE, how | (stream << 2), idx, 0]


def op(code, a=0, b=0, c=0):
    return [code, a, b, c]


SEEDS = {
    # alloc and free in every size class, lookups, refused frees, usage
    "basic": (0x00, 4, [op(OBSERVER, a=1), alloc(0), alloc(8), alloc(11), alloc(0, base=512), alloc(3, base=3000),
                        op(LOOKUP, b=0, c=17), op(LOOKUP, b=2, c=200), free(1), op(BADFREE, b=1, c=9),
                        op(BADFREE, b=0, c=3), op(USAGE), alloc(8), free(0), free(0), alloc_special(12),
                        op(USAGE), op(EMPTY, a=0), op(USAGE), op(STATS, a=3), op(STATS), op(OBSERVER, a=0)]),
    # fences: a busy device, fenced and cross-stream frees, the retry ladder waits
    "fenced": (0x00, 2, [op(IDLE, a=0), alloc(11), alloc(11), alloc(8, stream=2), free(0, FENCED),
                         free(0, AFTER, stream=3), alloc(11), alloc(11), op(COMPLETE), alloc(10),
                         free(0, FENCED), op(SYNC), op(USAGE), free(0, FENCED), op(EMPTY, a=1)]),
    # private pools: create, route, destroy with live blocks, free them after
    "pools": (0x00, 8, [op(PCREATE), op(PUSE, a=0, b=0), alloc(0), alloc(9), op(PUSE, a=1), alloc(0),
                        free(0), op(PDESTROY, b=0), op(USAGE), free(0), free(0), op(EMPTY, a=2, b=0),
                        op(PCREATE), op(PUSE, a=0, b=1), alloc(4), op(EMPTY, a=0), op(USAGE)]),
    # out of memory: a small device with a limit, failing backend, huge requests
    "oom": (0x08, 1, [alloc(11), alloc(11), alloc(11), op(FAIL, a=2, b=0), alloc(10), alloc(0),
                      op(FAIL, a=1, b=1), alloc(0, base=65536), alloc_special(13), alloc_special(14),
                      free(0), alloc(11), op(USAGE)]),
    # record_stream: a block used on other streams waits for the fence
    "streams": (0x01, 6, [op(IDLE, a=0), alloc(4, stream=1), op(RECORD, a=2, b=0), op(RECORD, a=3, b=0),
                          free(0, NOW), alloc(4, stream=2), alloc(4, stream=1), op(COMPLETE), alloc(4, stream=1),
                          free(1, AFTER, stream=1), alloc_special(15, stream=0, c=25), op(USAGE)]),
    # preallocate, oversize blocks, rounding divisions, fraction and GC threshold
    "strategies": (0x5f, 20, [alloc(11), alloc_special(15, c=26), alloc(9), alloc_special(15, c=24), free(1),
                              alloc(11), free(0), alloc_special(15, c=27), op(USAGE), op(EMPTY, a=0),
                              alloc(3, base=1200), alloc(3, base=1300), op(USAGE)]),
    "oversize": (0x85, 31, [alloc_special(15, c=25), alloc_special(15, c=25), free(0), alloc_special(15, c=24),
                            alloc(11, base=3000), free(0), free(0), alloc(11, base=5000), op(USAGE)]),
    # expandable segments (capacity byte's high bit): grow, free in the middle, unmap under pressure,
    # a failing map half way, pools, empty cache; and with 4 MiB large pages (bit 6)
    "expandable": (0x00, 0x80 | 4, [op(IDLE, a=0), alloc(11), alloc(9), alloc(11, stream=2), free(1, NOW),
                                    alloc(11, base=5000), op(FAIL, a=4, b=0), alloc(11, base=9000), alloc(0),
                                    free(0, FENCED), op(COMPLETE), alloc_special(14), op(USAGE), op(PCREATE),
                                    op(PUSE, a=0, b=0), alloc(10), op(PUSE, a=1), op(EMPTY, a=0), op(USAGE)]),
    "expandable_pages": (0x02, 0xc0 | 2, [alloc(8, base=3000), alloc(11, base=1000), free(0), alloc(10),
                                          op(SYNC), op(EMPTY, a=1), alloc(11, base=20000), op(USAGE)]),
    # shared pages (bit 5): holes whose page ends are lent to growing requests, on other streams once
    # idle, then freed, pressure and empty cache end the sharing
    "expandable_share": (0x00, 0xa0 | 3, [alloc(10, base=3000), alloc(10, base=1500), alloc(10, base=3500),
                                          alloc(10, base=2000, stream=2), free(1, NOW), op(SYNC),
                                          alloc(10, base=2600), alloc(10, base=2600, stream=3), free(0, FENCED),
                                          alloc(11, base=2600), op(COMPLETE), free(2, NOW), alloc_special(14),
                                          op(USAGE), free(0), op(SYNC), op(EMPTY, a=0), op(USAGE)]),
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_corpus")
    os.makedirs(out, exist_ok=True)
    for name, (conf, cap, records) in SEEDS.items():
        data = bytes([conf, cap] + [x for r in records for x in r])
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
