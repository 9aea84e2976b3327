"""Device-memory checks for a machine with an NVIDIA GPU (not part of the
pytest suite: CI has no GPU). Run on such a machine with the mooncake_rs
wheel installed and a cluster's masters in MASTER_SERVER:

    MASTER_SERVER=127.0.0.1:50051 python3 check_device_buffers.py

Allocates GPU memory with the CUDA driver through ctypes (no torch), fills
it with known bytes, registers it with `register_buffer`, and checks that
objects put from device memory read back byte for byte, into device memory
and into host memory, through the single and the batch calls; that a read
that fails leaves the device buffer as it was; and that host memory is
still accepted. Prints one JSON line; exits 1 if a check failed, 2 if there
is no GPU."""

import ctypes
import json
import os
import sys

from mooncake_rs.store import MooncakeDistributedStore

SIZE = 64 << 20
OBJECT = 4 << 20


class Cuda:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            print(json.dumps({"skipped": f"no CUDA driver: {e}"}))
            sys.exit(2)
        self.check(self.lib.cuInit(0), "cuInit")
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self.check(self.lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.check(self.lib.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")

    @staticmethod
    def check(rc, what):
        if rc != 0:
            sys.exit(f"{what} failed: CUresult {rc}")

    def alloc(self, size):
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
        return ptr.value

    def upload(self, dst, data):
        self.check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dst), data, ctypes.c_size_t(len(data))), "cuMemcpyHtoD")

    def download(self, src, size):
        out = ctypes.create_string_buffer(size)
        self.check(self.lib.cuMemcpyDtoH_v2(out, ctypes.c_uint64(src), ctypes.c_size_t(size)), "cuMemcpyDtoH")
        return out.raw


def pattern(seed, size):
    return bytes((seed * 31 + i * 7) % 251 for i in range(4096)) * (size // 4096)


def main():
    cuda = Cuda()
    source, dest = cuda.alloc(SIZE), cuda.alloc(SIZE)
    host = ctypes.create_string_buffer(SIZE)
    first, second = pattern(1, OBJECT), pattern(2, OBJECT)
    cuda.upload(source, first)
    cuda.upload(source + OBJECT, second)
    cuda.upload(dest, b"\x00" * (2 * OBJECT))

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", os.environ["MASTER_SERVER"])
    assert rc == 0, f"setup returned {rc}"
    results = {
        "register_source": store.register_buffer(source, SIZE),
        "register_dest": store.register_buffer(dest, SIZE),
        "register_host": store.register_buffer(ctypes.addressof(host), SIZE),
    }
    store.remove_all(False)
    results["put_from"] = store.put_from("gpu/one", source, OBJECT)
    results["get_into"] = store.get_into("gpu/one", dest, OBJECT)
    results["get_into_bytes_ok"] = cuda.download(dest, OBJECT) == first
    results["get_into_host"] = store.get_into("gpu/one", ctypes.addressof(host), OBJECT)
    results["get_into_host_bytes_ok"] = host.raw[:OBJECT] == first
    results["batch_put_from"] = store.batch_put_from(["gpu/a", "gpu/b"], [source, source + OBJECT], [OBJECT] * 2)
    results["batch_get_into"] = store.batch_get_into(["gpu/b", "gpu/a"], [dest, dest + OBJECT], [OBJECT] * 2)
    results["batch_bytes_ok"] = cuda.download(dest, 2 * OBJECT) == second + first
    # A read that fails (no such key) leaves the device bytes as they were.
    results["get_missing"] = store.get_into("gpu/missing", dest, OBJECT)
    results["missing_left_alone"] = cuda.download(dest, OBJECT) == second
    store.close()

    ok = (
        all(results[k] == 0 for k in ("register_source", "register_dest", "register_host", "put_from"))
        and results["get_into"] == OBJECT
        and results["get_into_host"] == OBJECT
        and results["batch_put_from"] == [0, 0]
        and results["batch_get_into"] == [OBJECT, OBJECT]
        and results["get_missing"] < 0
        and all(results[k] for k in results if k.endswith("_ok") or k == "missing_left_alone")
    )
    print(json.dumps({**results, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
