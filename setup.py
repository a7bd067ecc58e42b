"""Build step that pyproject.toml cannot say: the gRPC stubs of ``protos/`` are generated
into ``boltmq/v1/`` (gitignored) while the package is built, so ``pip install .`` from a
clean checkout ships them. ``make proto`` generates the same files, plus typing stubs."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
PROTOS = sorted((ROOT / "protos" / "boltmq" / "v1").glob("*.proto"))
OUT = ROOT / "boltmq" / "v1"


def generate_stubs() -> None:
    """Run protoc (from grpcio-tools, a build requirement) over protos/ unless up to date."""
    newest = max(p.stat().st_mtime for p in PROTOS)
    made = [OUT / f"{p.stem}_pb2.py" for p in PROTOS]
    if all(m.exists() and m.stat().st_mtime >= newest for m in made):
        return
    from grpc_tools import protoc

    args = ["protoc", f"-I{ROOT / 'protos'}", f"--python_out={ROOT}", f"--grpc_python_out={ROOT}"]
    if protoc.main([*args, *map(str, PROTOS)]) != 0:
        raise SystemExit("protoc failed on protos/boltmq/v1")
    (OUT / "__init__.py").touch()


class BuildWithStubs(build_py):
    def run(self) -> None:
        generate_stubs()
        if "boltmq.v1" not in self.packages:
            self.packages.append("boltmq.v1")
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
