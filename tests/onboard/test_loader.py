"""The one loader: base and candidate as sibling modules, parent __init__ never run."""

import sys
from pathlib import Path

import pytest

from kernelsmith.loader import HeavyImportError, load_operator_module


def _tree(tmp_path: Path) -> Path:
    pkg = tmp_path / "engine" / "kernels"
    pkg.mkdir(parents=True)
    (tmp_path / "engine" / "__init__.py").write_text("import tqdm_not_installed_anywhere\n")
    (pkg / "__init__.py").write_text("raise RuntimeError('package init must not run')\n")
    (pkg / "helpers.py").write_text("SCALE = 3\n")
    (pkg / "op.py").write_text(
        "import os\nfrom .helpers import SCALE\n"
        "HERE = os.path.dirname(__file__)\n"
        "def op(x):\n    return x * SCALE\n")
    return tmp_path


def test_base_and_candidate_side_by_side(tmp_path):
    root = _tree(tmp_path)
    base = load_operator_module(root, "engine/kernels/op.py", tag="base")
    cand_src = tmp_path / "cands" / "c1.py"
    cand = load_operator_module(root, "engine/kernels/op.py", tag="c1", source_path=cand_src,
                                code="from .helpers import SCALE\ndef op(x):\n    return x * SCALE + 1\n")
    assert base.op(2) == 6 and cand.op(2) == 7
    assert base.__name__ != cand.__name__ and base.__package__ == cand.__package__ == "engine.kernels"
    assert base.HERE == str(root / "engine" / "kernels")  # __file__ is the real path
    assert cand.op.__code__.co_filename == str(cand_src)  # Triton reads source from here
    for name in list(sys.modules):
        if name.startswith("engine"):
            del sys.modules[name]


def test_heavy_import_is_reported(tmp_path):
    (tmp_path / "k.py").write_text("import orjson_not_installed\n")
    with pytest.raises(HeavyImportError, match=r"stubs: \{orjson_not_installed: path\}"):
        load_operator_module(tmp_path, "k.py")


def test_stub_stands_in(tmp_path):
    (tmp_path / "k.py").write_text("from heavy_mod.enums import Mode\nVALUE = Mode.FAST\n")
    stub = tmp_path / "stub_enums.py"
    stub.write_text("class Mode:\n    FAST = 7\n")
    mod = load_operator_module(tmp_path, "k.py", stubs={"heavy_mod.enums": stub})
    assert mod.VALUE == 7
    for name in ("heavy_mod", "heavy_mod.enums"):
        sys.modules.pop(name, None)
