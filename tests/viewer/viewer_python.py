"""A Python program that allocates device memory through ctypes, for
scripts/check-viewer's case with Python frames (CUCACHE_STACKS=python): the
snapshot's blocks should name these functions and this file.

    viewer_python.py [STEPS]

It loads the CUDA runtime the environment gives (cucache-run --sim puts the
simulated one on LD_LIBRARY_PATH) and exits 0 when every call succeeded.
"""
import ctypes
import sys

MIB = 1 << 20
rt = ctypes.CDLL("libcudart.so.12")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
failures = 0


def cuda_malloc(nbytes):
    global failures
    p = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(p), nbytes) != 0:
        failures += 1
    return p


def load_weights():
    return [cuda_malloc(16 * MIB) for _ in range(2)]


def forward(step):
    acts = [cuda_malloc((2 + (step + k) % 5) * MIB) for k in range(4)]
    for a in reversed(acts):
        rt.cudaFree(a)


def train(steps):
    weights = load_weights()
    for i in range(steps):
        forward(i)
    return weights


if __name__ == "__main__":
    kept = train(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    sys.exit(1 if failures else 0)
