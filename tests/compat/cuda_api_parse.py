"""Parser of the CUDA declarations for the compat checks (python3 only):
cucache's include/cucache/cuda_api.h and the simulator's
subprojects/cusim/include/cusim/cuda_api.h, which have the same form.

The header has three sections (see its top comment).  Section 2, between
`#ifndef <PREFIX>_CUDA_CHECK_AGAINST_REAL` (CUCACHE_ or CUSIM_) and its
`#endif /* <PREFIX>_CUDA_CHECK_AGAINST_REAL */`, holds the enum and struct
bodies; section 3, after it, the function prototypes.  The parser
understands exactly the forms the header uses and stops with an error on
anything else, so that a declaration it cannot read is never silently left
unchecked.
"""
import re

GUARD_BEGIN = re.compile(r"^#ifndef ([A-Z]+_CUDA_CHECK_AGAINST_REAL)$", re.M)
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


class ParseError(Exception):
    pass


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_sections(text):
    """(section 2, section 3) of the header, comments removed."""
    m = GUARD_BEGIN.search(text)
    if not m:
        raise ParseError("cannot find section 2: expected '#ifndef <PREFIX>_CUDA_CHECK_AGAINST_REAL'")
    guard_end = f"#endif /* {m.group(1)} */"
    end = text.find(guard_end, m.end())
    if end < 0:
        raise ParseError(f"cannot find the end of section 2: expected '{guard_end}'")
    return strip_comments(text[m.end():end]), strip_comments(text[end + len(guard_end):])


def parse_enum_body(tag, body):
    names = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(rf"({IDENT})(\s*=\s*[^=].*)?", item, flags=re.S)
        if not m:
            raise ParseError(f"enum {tag}: cannot read enumerator '{item}'")
        names.append(m.group(1))
    if not names:
        raise ParseError(f"enum {tag}: no enumerators")
    return names


def nested_blocks(tag, body):
    """body with each member that is an untagged struct or union
    (`struct { ... } name;`, `union { ... } name;`, nested to any depth)
    taken out, and [(field name, declaration)] of the fields inside them,
    as name.field, or as field when the member has no name (C11's
    anonymous members, `union { ... };`)."""
    fields, out, pos = [], [], 0
    for m in re.finditer(r"\b(?:struct|union)\s*\{", body):
        if m.start() < pos:
            continue  # inside a block already taken out
        depth, end = 1, m.end()
        while depth:
            if end >= len(body):
                raise ParseError(f"{tag}: unbalanced braces")
            depth += {"{": 1, "}": -1}.get(body[end], 0)
            end += 1
        name = re.match(rf"\s*({IDENT})?\s*;", body[end:])
        if not name:
            raise ParseError(f"{tag}: a nested struct or union not followed by a member name and ';'")
        member = name.group(1)  # None: an anonymous member, its fields named as the parent's (C11)
        for sub, decl in parse_struct_body(f"{tag}.{member or '(anonymous)'}", body[m.end():end - 1]):
            fields.append((f"{member}.{sub}" if member else sub, decl))
        out.append(body[pos:m.start()])
        pos = end + name.end()
    out.append(body[pos:])
    return "".join(out), fields


def parse_struct_body(tag, body):
    """[(field name, declaration)] of a struct or union body.  A member that
    is an anonymous struct or union gives its own fields as name.field."""
    body, fields = nested_blocks(tag, body)
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        if any(c in decl for c in ",:(){}"):
            raise ParseError(f"struct {tag}: declaration '{decl}' is not a plain single field "
                             "(teach tests/compat/cuda_api_parse.py to read it)")
        m = re.fullmatch(rf"(.*[\s*])({IDENT})\s*((?:\[[^\]]+\]\s*)*)", decl)
        if not m or not m.group(1).strip():
            raise ParseError(f"struct {tag}: cannot read field declaration '{decl}'")
        fields.append((m.group(2), decl))
    if not fields:
        raise ParseError(f"struct {tag}: no fields")
    return fields


def parse_bodies(section2):
    """([(enum tag, [enumerator])], [(kind, tag, body, [(field, decl)])]),
    kind "struct" or "union"."""
    enums, structs = [], []
    pos = 0
    for m in re.finditer(rf"\b(enum|struct|union)\s+({IDENT})\s*\{{", section2):
        if m.start() < pos:
            continue  # a nested body, read with its parent
        between = section2[pos:m.start()].strip()
        if between:
            raise ParseError(f"section 2 has something other than enum/struct/union bodies: '{between[:80]}'")
        kind, tag = m.groups()
        depth, end = 1, m.end()
        while depth:
            if end >= len(section2):
                raise ParseError(f"{kind} {tag}: unbalanced braces")
            depth += {"{": 1, "}": -1}.get(section2[end], 0)
            end += 1
        semi = re.match(r"\s*;", section2[end:])
        if not semi:
            raise ParseError(f"{kind} {tag}: expected ';' after the body")
        pos = end + semi.end()
        body = section2[m.end():end - 1]
        if kind == "enum":
            if "{" in body:
                raise ParseError(f"{kind} {tag}: nested braces are not supported")
            enums.append((tag, parse_enum_body(tag, body)))
        else:
            structs.append((kind, tag, body.strip(), parse_struct_body(tag, body)))
    rest = section2[pos:].strip()
    if rest:
        raise ParseError(f"section 2 has something other than enum/struct/union bodies: '{rest[:80]}'")
    if not enums:
        raise ParseError("no enum bodies found in section 2: refusing to check nothing")
    if not structs:
        raise ParseError("no struct bodies found in section 2: refusing to check nothing")
    return enums, structs


def parse_functions(section3):
    """Names of the functions declared in section 3."""
    text = "\n".join(l for l in section3.splitlines() if not l.lstrip().startswith("#"))
    text = re.sub(r'extern\s+"C"\s*\{|\}', " ", text)
    names = []
    for decl in text.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        m = re.match(rf"(?:const\s+)?(?:struct\s+)?{IDENT}\s*\**\s*({IDENT})\s*\(", decl)
        if not m:
            raise ParseError(f"section 3: cannot read prototype '{decl[:80]}'")
        names.append(m.group(1))
    if not names:
        raise ParseError("no prototypes found in section 3: refusing to check nothing")
    return names


def parse_header(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    section2, section3 = split_sections(text)
    enums, structs = parse_bodies(section2)
    return enums, structs, parse_functions(section3)
