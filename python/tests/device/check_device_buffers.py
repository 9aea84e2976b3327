"""Device-memory checks for a machine with an NVIDIA GPU (not part of the
pytest suite: CI has no GPU). Run on such a machine with the mooncake_rs
wheel installed and a cluster's masters in MASTER_SERVER:

    MASTER_SERVER=127.0.0.1:50051 python3 check_device_buffers.py

Allocates GPU memory with the CUDA driver through ctypes (no torch), then
checks that `register_buffer` refuses it (the routes of this build read
and checksum bytes with the CPU, and the TCP lanes would hand a device
pointer to the kernel) and that host memory is still accepted. Prints one
JSON line; exits 1 if a check failed, 2 if there is no GPU."""

import ctypes
import json
import os
import sys

from mooncake_rs.store import MooncakeDistributedStore

INVALID_PARAMS = -600
SIZE = 64 << 20


def cuda():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(json.dumps({"skipped": f"no CUDA driver: {e}"}))
        sys.exit(2)
    check = lambda rc, what: rc == 0 or sys.exit(f"{what} failed: CUresult {rc}")
    check(lib.cuInit(0), "cuInit")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    check(lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    check(lib.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    ptr = ctypes.c_uint64()
    check(lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(SIZE)), "cuMemAlloc")
    return ptr.value


def main():
    device_ptr = cuda()
    host = ctypes.create_string_buffer(SIZE)
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", os.environ["MASTER_SERVER"])
    assert rc == 0, f"setup returned {rc}"
    results = {
        "device_register": store.register_buffer(device_ptr, SIZE),
        "host_register": store.register_buffer(ctypes.addressof(host), SIZE),
    }
    store.close()
    ok = results["device_register"] == INVALID_PARAMS and results["host_register"] == 0
    print(json.dumps({**results, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
