"""train_probe.py, then a record of where this rank ran, for the multi-host tests.

    python tests/scripts/host_probe.py CONFIG_JSON OUT_DIR [train_probe.py's options]

Runs train_probe.py's main unchanged, then writes OUT_DIR/host{rank}.json: the hostname and the address
it resolves to, the IPv4 addresses of each interface, the launcher's interface settings from the
environment, the peers of this process' established TCP connections (while Horovod still holds them:
who the rank really talked to), and whether the parent of the config's log_dir was read-only here.
"""
import json
import os
import socket
import sys

import psutil

import train_probe
from tfcnn import distributed

LAUNCHER_VARS = ("HOROVOD_HOSTNAME", "HOROVOD_GLOO_IFACE", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                 "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")


def tcp_connections() -> list:
    """[local address, remote address] of each established TCP connection of this process."""
    process = psutil.Process()
    connections = process.net_connections("tcp") if hasattr(process, "net_connections") else process.connections("tcp")
    return sorted({(c.laddr.ip, c.raddr.ip) for c in connections if c.raddr and c.status == psutil.CONN_ESTABLISHED})


def read_only(path) -> bool | None:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY) if path and os.path.isdir(path) else None


def where(config: dict) -> dict:
    hostname = socket.gethostname()
    log_dir = config.get("log_dir")
    return dict(rank=distributed.rank(), size=distributed.size(), hostname=hostname,
                address=socket.gethostbyname(hostname),
                interfaces={name: [a.address for a in addresses if a.family == socket.AF_INET]
                            for name, addresses in psutil.net_if_addrs().items()},
                env={var: os.environ.get(var) for var in LAUNCHER_VARS},
                tcp=tcp_connections(),
                log_parent_read_only=read_only(os.path.dirname(log_dir) if log_dir else None))


def main():
    train_probe.main()
    record = where(json.loads(sys.argv[1]))
    # No rank leaves (closing its connections) before every rank has recorded them.
    distributed.allreduce(0.0, name="host_probe_recorded")
    with open(os.path.join(sys.argv[2], f"host{distributed.rank()}.json"), "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
