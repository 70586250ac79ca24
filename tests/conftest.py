from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"benchmark data {path} is absent (it lives in ../shared/data beside "
                    f"the repository)")
    return path
