"""Read access to /proc and /sys through an optional root, so that version and path
resolution can be tested against fake trees of other kernels."""

from __future__ import annotations

from pathlib import Path


class HostFS:
    """Maps absolute host paths (/proc/..., /sys/...) under `root` (default: the real `/`)."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)

    def path(self, host_path: str) -> Path:
        if self.root == Path("/"):
            return Path(host_path)
        return self.root / host_path.lstrip("/")

    def read_text(self, host_path: str, default: str | None = None) -> str:
        try:
            return self.path(host_path).read_text()
        except OSError:
            if default is None:
                raise
            return default

    def exists(self, host_path: str) -> bool:
        return self.path(host_path).exists()
