"""Proves the simulated libnvidia-ml.so.1 from Python's ctypes, as pynvml
and monitoring scripts load it: by SONAME, with the struct layouts of
NVIDIA's nvml.h declared here (not the simulator's header), on a shared
device (CUCACHE_SIM_SHARED) where tests/ipc_peer holds memory.  Checks
the count, name and UUID, nvmlDeviceGetMemoryInfo and its _v2 struct, and
nvmlDeviceGetComputeRunningProcesses_v3 listing the peer with its bytes.
Exit status 0 on success, 1 with a message otherwise."""

import ctypes
import os
import subprocess
import sys

MIB = 1 << 20
CAP = 1 << 30


class Memory(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):  # nvmlMemory_v2_t
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2 layout), the _v3 call's
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


MEMORY_V2 = ctypes.sizeof(MemoryV2) | 2 << 24  # NVML_STRUCT_VERSION(Memory, 2)
NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7


def fail(msg):
    print("nvml_ctypes: " + msg, file=sys.stderr)
    sys.exit(1)


def ok(rc, what):
    if rc != NVML_SUCCESS:
        fail("%s returned %d (%s)" % (what, rc, nvml.nvmlErrorString(rc)))


def main():
    global nvml
    key = "simtest-nvml-py-%d" % os.getpid()
    os.environ["CUCACHE_SIM_SHARED"] = key
    path = "/dev/shm/cucache-sim-%d-%s" % (os.geteuid(), key)
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlErrorString.restype = ctypes.c_char_p
    ok(nvml.nvmlInit_v2(), "nvmlInit_v2")
    peer = subprocess.Popen([os.environ["SIMTEST_IPC_PEER"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, bufsize=1)
    try:
        count = ctypes.c_uint()
        ok(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        if count.value != 2:
            fail("%d devices, expected 2" % count.value)
        dev = ctypes.c_void_p()
        ok(nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)), "nvmlDeviceGetHandleByIndex_v2")
        buf = ctypes.create_string_buffer(96)
        ok(nvml.nvmlDeviceGetName(dev, buf, 96), "nvmlDeviceGetName")
        if b"cucache" not in buf.value:
            fail("name %r" % buf.value)
        ok(nvml.nvmlDeviceGetUUID(dev, buf, 96), "nvmlDeviceGetUUID")
        uuid = buf.value
        if not uuid.startswith(b"GPU-") or len(uuid) != 40:
            fail("UUID %r" % uuid)
        same = ctypes.c_void_p()
        ok(nvml.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid), ctypes.byref(same)), "nvmlDeviceGetHandleByUUID")
        if same.value != dev.value:
            fail("the UUID's handle is another device's")

        peer.stdin.write("alloc %x\n" % (300 * MIB))
        answer = peer.stdout.readline().split()
        if not answer or answer[0] != "ok":
            fail("the peer's allocation: %r" % answer)
        mem = Memory()
        ok(nvml.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem)), "nvmlDeviceGetMemoryInfo")
        if (mem.total, mem.used, mem.free) != (CAP, 300 * MIB, CAP - 300 * MIB):
            fail("memory total %d used %d free %d" % (mem.total, mem.used, mem.free))
        mem2 = MemoryV2(version=MEMORY_V2)
        ok(nvml.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(mem2)), "nvmlDeviceGetMemoryInfo_v2")
        if (mem2.total, mem2.reserved, mem2.used, mem2.free) != (CAP, 0, 300 * MIB, CAP - 300 * MIB):
            fail("memory v2 total %d reserved %d used %d free %d" % (mem2.total, mem2.reserved, mem2.used, mem2.free))

        n = ctypes.c_uint(0)
        rc = nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), None)
        if rc != NVML_ERROR_INSUFFICIENT_SIZE or n.value != 1:
            fail("the count query returned %d with %d processes" % (rc, n.value))
        infos = (ProcessInfo * 4)()
        n = ctypes.c_uint(4)
        ok(nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), infos),
           "nvmlDeviceGetComputeRunningProcesses_v3")
        got = [(infos[i].pid, infos[i].usedGpuMemory, infos[i].gpuInstanceId) for i in range(n.value)]
        if got != [(peer.pid, 300 * MIB, 0xFFFFFFFF)]:
            fail("processes %r, expected the peer %d with %d bytes" % (got, peer.pid, 300 * MIB))
    finally:
        peer.kill()
        peer.wait()
    n = ctypes.c_uint(0)
    ok(nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), None), "the count after the peer died")
    ok(nvml.nvmlShutdown(), "nvmlShutdown")
    os.unlink(path)
    print("nvml_ctypes: ok")


main()
