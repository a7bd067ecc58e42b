"""Build step that pyproject.toml cannot say: the gRPC stubs of ``protos/`` are generated
into ``boltmq/v1/`` and ``boltmq/rocketmq/v2/`` (gitignored) while the package is built, so
``pip install .`` from a clean checkout ships them. ``make proto`` generates the same files,
plus typing stubs."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
PACKAGES = ("boltmq.v1", "boltmq.rocketmq", "boltmq.rocketmq.v2")
"""The generated packages (``boltmq.rocketmq`` only holds ``v2``)."""
PROTOS = sorted(
    [
        *(ROOT / "protos" / "boltmq" / "v1").glob("*.proto"),
        *(ROOT / "protos" / "boltmq" / "rocketmq" / "v2").glob("*.proto"),
    ]
)


def generate_stubs() -> None:
    """Run protoc (from grpcio-tools, a build requirement) over protos/ unless up to date."""
    newest = max(p.stat().st_mtime for p in PROTOS)
    made = [ROOT / p.relative_to(ROOT / "protos").with_name(f"{p.stem}_pb2.py") for p in PROTOS]
    if all(m.exists() and m.stat().st_mtime >= newest for m in made):
        return
    from importlib.resources import files

    from grpc_tools import protoc

    well_known = files("grpc_tools") / "_proto"  # google/protobuf/*.proto
    args = ["protoc", f"-I{ROOT / 'protos'}", f"-I{well_known}"]
    args += [f"--python_out={ROOT}", f"--grpc_python_out={ROOT}"]
    if protoc.main([*args, *map(str, PROTOS)]) != 0:
        raise SystemExit("protoc failed on protos/")
    for package in PACKAGES:
        (ROOT / package.replace(".", "/") / "__init__.py").touch()


class BuildWithStubs(build_py):
    def run(self) -> None:
        generate_stubs()
        for package in PACKAGES:
            if package not in self.packages:
                self.packages.append(package)
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
