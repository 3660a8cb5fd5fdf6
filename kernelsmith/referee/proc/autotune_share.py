"""The base's autotune choices: made once per run on the trusted side, handed on as data.

Triton's autotuner benchmarks every config of a kernel the first time a process calls it with a new
key (the values of its `key` arguments and the tensors' dtypes), compiling each config first:
Liger-Kernel's MoE GEMMs have 32 configs per kernel and shape. Left alone, every referee process that
runs the base would tune it again (the oracle, every runner, every later worker's oracle), and each
may choose another config, so the A/A copy and the judge's own base timing (check b) would time other
binaries than the base's.

So the base is tuned in the oracle, which never runs candidate code, and its choices travel as a table:
kernel -> per key, the index of the chosen config in the kernel's own config list and that config's
text (`Tuning.table`). The other processes put each choice into the kernel's `Autotuner.cache` before
the kernel runs with that key (`Tuning.seed`): a later worker's oracle (the parent hands the table on,
as it does the base's binaries) and every runner, for the base, its A/A copy and the checkout's
modules they share with a candidate. A choice is taken only where the kernel's own list holds a config
of that text at that index. A candidate's own kernels are tuned in its runner, and nothing a runner
tunes reaches a trusted process: it only reports, for the verdict, which choices it was given and
which it made (`Tuning.report`).

Triton's own result cache (`cache_results`: a JSON file per kernel beside the binaries) is not used:
Triton turns it off under the interpreter, and a file in a cache folder is what the runner must never
hand on.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
from numbers import Integral
from types import ModuleType

# loader.py names an operator file's module `<package>._ks_<tag>_<stem>`: the base's tag is "base",
# its A/A copy's "aa", a candidate's "c<id>".
_LOADED = re.compile(r"\._ks_([A-Za-z0-9]+)_")
_TRUSTED_TAGS = ("base", "aa")
_MODULE_DICT = ModuleType.__dict__["__dict__"]  # a module's namespace, read without running its code
# Bounds of a table or report another process sends.
MAX_KERNELS, MAX_KEYS, MAX_KEY_LEN, MAX_TEXT = 512, 4096, 64, 1000


def kernel_name(tuner) -> tuple[str, bool]:
    """(the kernel's name, alike in every process and for the base's A/A copy; whether it is a
    candidate's own kernel)."""
    fn = tuner
    for _ in range(16):  # Autotuner -> (Heuristics ->) JITFunction or InterpretedFunction -> function
        if inspect.isfunction(fn):
            break
        fn = getattr(fn, "fn", None)
    module = str(getattr(fn, "__module__", None) or "?")
    qualname = str(getattr(fn, "__qualname__", None) or "?")
    tag = _LOADED.search(module)
    if tag is None:
        return f"{module}.{qualname}", False
    return f"{_LOADED.sub('.', module, count=1)}.{qualname}", tag.group(1) not in _TRUSTED_TAGS


def _tuners_of(value, kinds) -> list:
    """The Autotuners in `value` (an Autotuner, or Heuristics over one, in either order)."""
    autotuner, heuristics = kinds
    found = []
    for _ in range(8):
        kind = type(value)  # type(), never isinstance: no code of the object runs
        if issubclass(kind, autotuner):
            found.append(value)
        elif not issubclass(kind, heuristics):
            break
        value = getattr(value, "__dict__", {}).get("fn")
    return found


def plain_key(key) -> list | None:
    """An autotune key as JSON values (ints, finite floats, short strings, booleans, None); None for a
    key with anything else in it (left for the process to tune)."""
    if not isinstance(key, tuple) or len(key) > MAX_KEY_LEN:
        return None
    out = []
    for v in key:
        if isinstance(v, bool) or v is None or (type(v) is str and len(v) <= 200):
            out.append(v)
        elif isinstance(v, Integral):
            out.append(int(v))
        elif type(v) is float and math.isfinite(v):
            out.append(v)
        else:
            return None
    return out


def _index(configs: list, config) -> int | None:
    for i, c in enumerate(configs):
        if c is config:
            return i
    text = str(config)  # a pruning function may hand back copies of the kernel's configs
    return next((i for i, c in enumerate(configs) if str(c) == text), None)


def table_size(table: dict) -> int:
    """How many (kernel, key) choices a table holds."""
    return sum(len(entry["chosen"]) for entry in table.values())


class Tuning:
    """The autotuned kernels this process loaded after it was made: choices given, choices made."""

    def __init__(self):
        self.before = set(sys.modules)  # made before the harness and the base load: theirs are the rest
        self.given: dict[int, tuple[object, set]] = {}  # id(tuner) -> (tuner, keys given); held: ids stay

    def kernels(self) -> list[tuple[str, bool, object]]:
        """(name, a candidate's own, tuner) of every autotuned kernel of more than one config in the
        modules loaded since this object was made."""
        try:
            from triton.runtime.autotuner import Autotuner, Heuristics
        except ImportError:  # pragma: no cover - every supported triton has the autotuner
            return []
        out, seen = [], set()
        for name, module in list(sys.modules.items()):
            if name in self.before or not issubclass(type(module), ModuleType):
                continue
            space = _MODULE_DICT.__get__(module)  # never a lazy module's own attribute lookup
            for value in list(space.values()):
                for tuner in _tuners_of(value, (Autotuner, Heuristics)):
                    configs = vars(tuner).get("configs")
                    if id(tuner) in seen or not isinstance(configs, list) or len(configs) < 2:
                        continue
                    seen.add(id(tuner))
                    out.append((*kernel_name(tuner), tuner))
        return out

    def seed(self, table: dict) -> int:
        """Put the table's choices into the cache of each kernel of that name (never a candidate's
        own) that has not chosen for that key itself; returns how many were put."""
        n = 0
        for name, own, tuner in self.kernels():
            entry = table.get(name)
            if own or entry is None or len(tuner.configs) != entry["configs"]:
                continue
            for key, index, text in entry["chosen"]:
                k = tuple(key)
                if k in tuner.cache or not 0 <= index < len(tuner.configs) \
                        or str(tuner.configs[index]) != text:
                    continue
                tuner.cache[k] = tuner.configs[index]
                self.given.setdefault(id(tuner), (tuner, set()))[1].add(k)
                n += 1
        return n

    def table(self) -> dict:
        """The choices of every kernel but a candidate's own, as a table (for trusted processes)."""
        out: dict = {}
        for name, own, tuner in self.kernels():
            if own:
                continue
            configs = tuner.configs
            entry = out.setdefault(name, {"configs": len(configs), "chosen": []})
            if entry["configs"] != len(configs):
                continue
            have = {json.dumps(k) for k, _, _ in entry["chosen"]}
            for key, config in list(tuner.cache.items()):
                plain, index = plain_key(key), _index(configs, config)
                if plain is not None and index is not None and json.dumps(plain) not in have:
                    entry["chosen"].append([plain, index, str(configs[index])])
                    have.add(json.dumps(plain))
        return {name: entry for name, entry in out.items() if entry["chosen"]}

    def counts(self) -> dict:
        """Autotuned kernels, and the (kernel, key) choices given to this process and made here."""
        kernels = self.kernels()
        given = sum(len(keys) for _, keys in self.given.values())
        chosen = sum(len(tuner.cache) for _, own, tuner in kernels if not own)
        return {"kernels": len(kernels), "given": given, "tuned": chosen - given}

    def report(self) -> dict:
        """{kernel: {key: {"config", "source"}}}: each choice in this process, "shared" where it was
        given, "tuned" where this process benchmarked the configs (the base's or its A/A copy's, which
        share a name: "tuned" where either was); a candidate's own kernels are named "... (candidate)"."""
        out: dict = {}
        for name, own, tuner in self.kernels():
            given = self.given.get(id(tuner), (None, set()))[1]
            for key, config in list(tuner.cache.items()):
                label = json.dumps(plain_key(key) or [str(v) for v in key])[:MAX_TEXT]
                choices = out.setdefault(f"{name} (candidate)" if own else name, {})
                if choices.get(label, {}).get("source") != "tuned":
                    choices[label] = {"config": str(config)[:MAX_TEXT],
                                      "source": "shared" if key in given else "tuned"}
        return out


def _text(value, what: str) -> str:
    if type(value) is not str or len(value) > MAX_TEXT:
        raise ValueError(f"{what}: not a string of at most {MAX_TEXT} characters")
    return value


def checked_table(data) -> dict:
    """A table another process sent, every field checked (ValueError names the first bad one)."""
    if not isinstance(data, dict) or len(data) > MAX_KERNELS:
        raise ValueError(f"not a map of at most {MAX_KERNELS} kernels")
    out = {}
    for name, entry in data.items():
        _text(name, "kernel name")
        if not (isinstance(entry, dict) and set(entry) == {"configs", "chosen"}
                and type(entry["configs"]) is int and 2 <= entry["configs"] <= 1 << 20
                and isinstance(entry["chosen"], list) and len(entry["chosen"]) <= MAX_KEYS):
            raise ValueError(f"{name[:80]}: not {{configs, chosen}}")
        chosen = []
        for item in entry["chosen"]:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], list)
                    and plain_key(tuple(item[0])) == item[0] and type(item[1]) is int
                    and 0 <= item[1] < entry["configs"]):
                raise ValueError(f"{name[:80]}: a choice is not [key, config index, config text]")
            chosen.append([item[0], item[1], _text(item[2], f"{name[:80]}: config text")])
        out[name] = {"configs": entry["configs"], "chosen": chosen}
    return out


def checked_report(data) -> dict:
    """A runner's report, bounded: only {kernel: {key: {"config": text, "source": shared|tuned}}}
    entries are kept (it is the runner's account, for the verdict's details only)."""
    out: dict = {}
    if not isinstance(data, dict):
        return out
    for name, keys in list(data.items())[:MAX_KERNELS]:
        if type(name) is not str or len(name) > MAX_TEXT or not isinstance(keys, dict):
            continue
        for key, choice in list(keys.items())[:MAX_KEYS]:
            if type(key) is str and len(key) <= MAX_TEXT and isinstance(choice, dict) \
                    and set(choice) == {"config", "source"} and choice["source"] in ("shared", "tuned") \
                    and type(choice["config"]) is str and len(choice["config"]) <= MAX_TEXT:
                out.setdefault(name, {})[key] = {"config": choice["config"], "source": choice["source"]}
    return out
