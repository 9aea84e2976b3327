"""A store in its own Python process, for tests with two contributing processes.

    python helper_store.py MASTERS SEGMENT_BYTES

Prints {"hostname": ..., "shm": ...} once set up, then answers one JSON line
per command line: {"cmd": "put", "key", "hex"}, {"cmd": "get", "key"},
{"cmd": "close"}. Closes the store when stdin ends.
"""

import json
import sys

from mooncake_rs.store import MooncakeDistributedStore


def say(doc):
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def main():
    masters, segment = sys.argv[1], int(sys.argv[2])
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", segment, 1 << 20, "tcp", "", masters)
    if rc != 0:
        say({"error": f"setup returned {rc}"})
        return 1
    say({"hostname": store.get_hostname(), "shm": store._segment_shm_path()})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "put":
            say({"rc": store.put(cmd["key"], bytes.fromhex(cmd["hex"]))})
        elif cmd["cmd"] == "get":
            say({"hex": store.get(cmd["key"]).hex()})
        elif cmd["cmd"] == "close":
            say({"rc": store.close()})
        else:
            say({"error": f"unknown command {cmd['cmd']!r}"})
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
