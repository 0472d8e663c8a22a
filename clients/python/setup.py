"""Build step of the rankwatch client: generates the gRPC and protobuf modules.

`rankwatch.v1.rankwatch_pb2` and `rankwatch.v1.rankwatch_pb2_grpc` are compiled
with grpcio-tools from the repository's `proto/rankwatch/v1/rankwatch.proto`
each time the package is built; they are never checked in. An sdist carries a
copy of the .proto, so a wheel builds from it outside the repository too.
"""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_FILE = os.path.join("rankwatch", "v1", "rankwatch.proto")
# In an sdist the .proto sits beside setup.py; in the repository, two levels up.
PROTO_ROOTS = [os.path.join(HERE, "proto"), os.path.join(HERE, "..", "..", "proto")]


def proto_root() -> str:
    """The directory that holds `rankwatch/v1/rankwatch.proto`."""
    for root in PROTO_ROOTS:
        if os.path.isfile(os.path.join(root, PROTO_FILE)):
            return os.path.normpath(root)
    raise FileNotFoundError(f"{PROTO_FILE} not found under any of {PROTO_ROOTS}")


class BuildWithStubs(build_py):
    """Builds the package, then generates `rankwatch.v1` into the build tree."""

    def run(self) -> None:
        super().run()
        self.generate(self.build_lib)

    def generate(self, out_dir: str) -> None:
        """Compiles the .proto into `out_dir/rankwatch/v1` with grpcio-tools."""
        import grpc_tools
        from grpc_tools import protoc

        root = proto_root()
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        status = protoc.main([
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            os.path.join(root, PROTO_FILE),
        ])
        if status != 0:
            raise RuntimeError(f"grpc_tools.protoc failed on {PROTO_FILE} (exit {status})")
        package = os.path.join(out_dir, "rankwatch", "v1")
        with open(os.path.join(package, "__init__.py"), "w") as init:
            init.write('"""Modules generated from proto/rankwatch/v1/rankwatch.proto at build time."""\n')


class SdistWithProto(sdist):
    """An sdist that carries the .proto, so that it builds outside the repository."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        target = os.path.join(base_dir, "proto", PROTO_FILE)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(proto_root(), PROTO_FILE), target)


setup(cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProto})
