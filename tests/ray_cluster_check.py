"""A two-node Ray cluster on this machine, as an operator would have it, and three runs on it.

Run by ``tests/test_ray_cluster.py`` in a process of its own (it must not share the test
session's local Ray); prints one JSON line of what it found. The nodes are two
``ray.cluster_utils.Cluster`` nodes (a head and a worker, each a raylet of its own with one
CPU and a resource naming it), which is what ``ray start --head`` and ``ray start
--address=...`` make; the runs connect with ``address=`` like any client of a cluster.

1. A 2×2 grid spread over both nodes: the answer is the oracle's, the cores are on both
   nodes, the edges listen on the node's address (not loopback), and an intruder at every
   actor's port is turned away: the listener reads its hello and answers with a challenge
   (so it was heard), then closes the connection on the wrong response. A probe that gets no
   challenge, or is never closed, counts against.
2. The same with a core killed mid-run: rebuilt, still the oracle's answer.

With ``--tls`` the cluster runs with Ray's TLS on (``RAY_USE_TLS=1`` and a certificate, key
and CA for every node and the driver, here one self-signed certificate for this machine's
addresses), as the Ray page of the docs describes: Ray's own gRPC traffic, the run's secret
with it, is then encrypted too.
"""

import datetime
import ipaddress
import json
import os
import socket
import struct
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(__file__))


def _node_ip() -> str:
    """This machine's address on its network (the one Ray takes for its node)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only a route is chosen
        return probe.getsockname()[0]


def use_tls(folder: str) -> None:
    """Ray's TLS on for this process and every Ray process it starts: a self-signed
    certificate for this machine's addresses, its key, and itself as the CA. Before Ray is
    imported: its core reads its configuration from the environment once."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "streamjoin test cluster")])
    ips = {"127.0.0.1", _node_ip()}
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost")] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(folder, "node.crt"), os.path.join(folder, "node.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    os.environ.update(
        RAY_USE_TLS="1",
        RAY_TLS_SERVER_CERT=cert_path,
        RAY_TLS_SERVER_KEY=key_path,
        RAY_TLS_CA_CERT=cert_path,
    )


if __name__ == "__main__" and "--tls" in sys.argv:
    _certs = tempfile.TemporaryDirectory(prefix="ray-tls-")  # removed at exit
    use_tls(_certs.name)


import ray  # noqa: E402
from faults import inject  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import streamjoin as sj  # noqa: E402
from streamjoin.runtime.ray import executor as ray_executor  # noqa: E402


class Probe(threading.Thread):
    """An intruder at ``address``, in a thread of its own (the listener reads its edges only
    once the run starts them): a hello that names a real sender (the channels module
    docstring, step 1), then a response made without the run's secret."""

    def __init__(self, address) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.challenge = b""
        self.after = b""
        self.closed = False
        self.start()

    def run(self) -> None:
        with socket.create_connection(self.address, timeout=30) as sock:
            name = b"emitter"
            sock.sendall(struct.pack("<4sBB32sB", b"SJCH", 2, 1, os.urandom(32), len(name)) + name)
            try:
                while len(self.challenge) < 64 and (chunk := sock.recv(64 - len(self.challenge))):
                    self.challenge += chunk
                sock.sendall(os.urandom(32))
                while chunk := sock.recv(4096):
                    self.after += chunk
                self.closed = True
            except ConnectionResetError:
                self.closed = True
            except TimeoutError:  # never answered or never closed: not turned away
                pass

    def turned_away(self) -> bool:
        """Heard (it got the challenge), refused (closed, nothing more sent)."""
        self.join(60)
        return len(self.challenge) == 64 and self.closed and not self.after


def main() -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, resources={"second": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        out = {
            "nodes": len([n for n in ray.nodes() if n["Alive"]]),
            "tls": os.environ.get("RAY_USE_TLS") == "1",
        }
        query = sj.Query(sj.band("x", 2), window=sj.CountWindow(300, 200))
        data = sj.sources.synthetic(8000, low=0, high=3000, seed=3)
        expected = sj.oracle.join(query, data)
        placed, listening, probes = {}, {}, []

        def on_listen(addresses):
            listening.update(addresses)
            probes.extend(Probe(a) for a in addresses.values())

        ray_executor.on_placed = placed.update
        ray_executor.on_listen = on_listen
        backend = ray_executor.Ray(address=cluster.address, placement="spread")
        result = sj.run(query, data, sj.topologies.grid(2, 2), backend=backend, batch_size=16)
        out["exact"] = bool(result.same_pairs(expected))
        cores = [n for n in placed if n.startswith("core")]
        out["core_nodes"] = len({placed[n] for n in cores})
        out["hosts"] = sorted({h for h, _ in listening.values()})
        out["intruders_turned_away"] = len(probes) == 5 and all(p.turned_away() for p in probes)
        ray_executor.on_listen = None

        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "fired")
            topo = inject(
                sj.topologies.grid(2, 2), "core1_1", fault="kill", after=2000, once=marker
            )
            result = sj.run(query, data, topo, backend=backend, batch_size=16)
            out["killed"] = os.path.exists(marker)
            out["exact_after_kill"] = bool(result.same_pairs(expected))
        print(json.dumps(out), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
