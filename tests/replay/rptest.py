"""What tests/replay's Python checks share: a failure list, cucache-replay
runs, and the expected-error check."""
import subprocess

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def replay(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=240)
    if p.returncode < 0:
        failures.append(f"cucache-replay {args} died of signal {-p.returncode}")
    return p


def expect_error(binary, path, *want):
    """cucache-replay PATH exits 1 with every string of want on stderr."""
    p = replay(binary, path)
    ok = p.returncode == 1 and all(w in p.stderr for w in want)
    check(ok, f"{path}: exit {p.returncode}, stderr {p.stderr.strip()!r}, expected {want}")
    if ok:
        print(f"{path}: {p.stderr.strip()}")
