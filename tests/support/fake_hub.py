"""A fake Hugging Face hub for the download tests: the two huggingface_hub functions
localspec.models.hub uses, over a real cache layout, and the 16 KiB "model" it serves. The fixtures
that install it are in conftest.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx2
from huggingface_hub.errors import RemoteEntryNotFoundError

from localspec.models.catalog import ModelRef

REPO = "acme/tiny-GGUF"
DATA = bytes(range(256)) * 64  # 16 KiB "model"
DIGEST = hashlib.sha256(DATA).hexdigest()
SIZE = len(DATA)
CHUNK = 4096  # the fake hub sends 4 chunks


def ref(filename="tiny.gguf", sha256=DIGEST, size=SIZE) -> ModelRef:
    return ModelRef(
        repo=REPO, filename=filename, quant="F32", size_bytes=size, sha256=sha256, params="1M", family="tiny"
    )


class FakeHub:
    """The two huggingface_hub functions localspec.models.hub uses, over a real cache layout."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}
        self.calls = 0
        self.drop_at: int | None = None  # the connection breaks once this many bytes are in
        self.resume_from: dict[tuple[str, str], int] = {}

    def snapshot(self, cache_dir, repo, filename) -> Path:
        return Path(cache_dir) / f"models--{repo.replace('/', '--')}" / "snapshots" / "abc123" / filename

    def try_to_load_from_cache(self, repo, filename, cache_dir=None):
        path = self.snapshot(cache_dir, repo, filename)
        return str(path) if path.exists() else None

    def hf_hub_download(self, repo, filename, cache_dir=None, etag_timeout=None, endpoint=None, tqdm_class=None):
        self.calls += 1
        if (repo, filename) not in self.files:
            url = f"https://huggingface.co/{repo}/resolve/main/{filename}"
            raise RemoteEntryNotFoundError(
                "404 Entry Not Found", response=httpx2.Response(404, request=httpx2.Request("HEAD", url))
            )
        data = self.files[repo, filename]
        pos = self.resume_from.pop((repo, filename), 0)
        bar = tqdm_class(total=len(data), initial=pos)
        while pos < len(data):
            if self.drop_at is not None and pos >= self.drop_at:
                self.resume_from[repo, filename], self.drop_at = pos, None
                raise OSError("Connection reset by peer")
            bar.update(CHUNK)
            pos += CHUNK
        bar.close()
        blob = Path(cache_dir) / f"models--{repo.replace('/', '--')}" / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = self.snapshot(cache_dir, repo, filename)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(blob)
        return str(link)
