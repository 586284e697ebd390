"""Mutation testing of the code that decides GPUs: how much of it the unit tests pin down.

Each mutant is one small change to one module -- a flipped comparison (``<``/``<=``, ``>``/``>=``,
``==``/``!=``, ``is``/``is not``, ``in``/``not in``), ``and``/``or``, a ``not`` dropped or added to a
condition, an integer constant one higher or one lower, ``True``/``False``, ``min``/``max``, a
``return X`` made ``return None`` -- written into a temporary copy of ``src/kubegpu`` (the tree itself
is never touched: ``PYTHONPATH`` points at the copy). The unit tests that run the mutated lines (found
by one traced run of the module's tests, ``MODULES``) then run against it: a failing test kills the
mutant, one running past ``--timeout-s`` counts as killed too (listed apart), and a mutant every test
passes survives. Calls to the logger (log text is nobody's contract), decorators, annotations and
f-strings are not mutated.

Survivors judged equivalent (speed-only pruning, a bound that cannot change the answer) are listed in
``bench/mutation_equivalent.txt`` with the reason, matched by module, mutation and the line's text (not
its number), so a run reports only new ones; the score leaves them out.

Run: ``.venv/bin/python bench/mutation.py [--module allocate/exact.py] [--max-mutants 60]
[--budget-s 900] [--workers 1]`` (``make mutation`` runs every module). Ctrl-C stops at once and prints
what was measured (so does a TERM signal).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import benchcli

from kubegpu.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT_FILE = ROOT / "bench" / "mutation_equivalent.txt"

# module (under src/kubegpu) -> the unit tests that exercise it
MODULES: dict[str, tuple[str, ...]] = {
    "allocate/exact.py": ("tests/unit/allocate",),
    "extender/ledger.py": ("tests/unit/extender",),
    "deviceplugin/shares.py": (
        "tests/unit/deviceplugin/test_shares.py",
        "tests/unit/deviceplugin/test_share_capacity.py",
        "tests/unit/deviceplugin/test_shares_behaviour.py",
        "tests/unit/deviceplugin/test_plugin.py",
    ),
    "health/policy.py": ("tests/unit/health",),
    "health/tracker.py": ("tests/unit/health",),
}

_FLIP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}
_LOGGERS = frozenset({"log", "logger", "logging"})


# -- mutants -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Mutant:
    """One change: the source span ``[start, end)`` (line, byte column) replaced by ``text``."""

    module: str
    line: int
    end_line: int
    start: tuple[int, int]
    end: tuple[int, int]
    text: str
    what: str  # the mutation, in words ("'<' -> '<='")
    key: str  # stable description: the mutation and the line's text

    def where(self) -> str:
        return f"{self.module}:{self.line}"


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _skipped(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a logger call, an f-string, a decorator (``@dataclass(frozen=True)``: a shape mypy and
    the code's use pin), an annotation or ``__all__``: not mutated."""
    child, up = node, parents.get(node)
    while up is not None:
        if isinstance(up, ast.JoinedStr):
            return True
        if isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute):
            owner = up.func.value
            if isinstance(owner, ast.Name) and owner.id in _LOGGERS:
                return True
        if isinstance(up, ast.FunctionDef | ast.ClassDef) and child in up.decorator_list:
            return True
        if isinstance(up, ast.arg) and child is up.annotation:
            return True
        if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef) and child is up.returns:
            return True
        if isinstance(up, ast.AnnAssign) and child is up.annotation:
            return True
        if isinstance(up, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in up.targets
        ):
            return True
        child, up = up, parents.get(up)
    return False


def _conditions(tree: ast.AST) -> set[ast.AST]:
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.While | ast.IfExp):
            out.add(node.test)
        elif isinstance(node, ast.comprehension):
            out.update(node.ifs)
    return out


def _changes(node: ast.AST, conditions: set[ast.AST]) -> Iterator[tuple[ast.AST, str]]:
    """The mutated copies of ``node`` (same kind of position) and what each changes."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            flip = _FLIP.get(type(op))
            if flip is None:
                continue
            ops = list(node.ops)
            ops[i] = flip()
            where = f" (comparison {i + 1})" if len(node.ops) > 1 else ""
            yield (
                ast.Compare(left=node.left, ops=ops, comparators=node.comparators),
                f"'{_SYMBOL[type(op)]}' -> '{_SYMBOL[flip]}'{where}",
            )
    elif isinstance(node, ast.BoolOp):
        other, words = (ast.Or(), "and -> or") if isinstance(node.op, ast.And) else (ast.And(), "or -> and")
        yield ast.BoolOp(op=other, values=node.values), words
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node.operand, "not dropped"
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield ast.Constant(value=not node.value), f"{node.value} -> {not node.value}"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for step in (1, -1):
            yield ast.Constant(value=node.value + step), f"{node.value} -> {node.value + step}"
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
        and not node.keywords
    ):
        other = "max" if node.func.id == "min" else "min"
        yield ast.Call(func=ast.Name(id=other), args=node.args, keywords=[]), f"{node.func.id} -> {other}"
    if node in conditions and not (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        yield ast.UnaryOp(op=ast.Not(), operand=node), "not added"


def mutants(module: str, source: bytes) -> list[Mutant]:
    """Every mutant of ``source`` (the text of ``module``), in source order."""
    tree = ast.parse(source)
    parents = _parents(tree)
    conditions = _conditions(tree)
    lines = source.splitlines()
    found: list[Mutant] = []
    seen: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr | ast.Return) or _skipped(node, parents):
            continue
        if node.end_lineno is None or node.end_col_offset is None:
            continue
        if isinstance(node, ast.Return):
            if node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None):
                continue
            options: list[tuple[str, str]] = [("return (None)", "return X -> return None")]
        else:
            options = [(f"({ast.unparse(new)})", what) for new, what in _changes(node, conditions)]
        span = node.end_lineno - node.lineno
        text_of_line = lines[node.lineno - 1].decode("utf-8", "replace").strip()
        for plain, what in options:
            # keep every later line where it was: the replacement ends in ")"
            text = f"{plain[:-1]}{chr(10) * span})" if span else plain
            seg = ast.unparse(node) if not isinstance(node, ast.Return) else "return"
            seg = seg if len(seg) <= 50 else seg[:47] + "..."
            key = f"{what} in `{seg}` @ {text_of_line}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key = f"{key} #{seen[key]}"
            found.append(
                Mutant(
                    module=module,
                    line=node.lineno,
                    end_line=node.end_lineno,
                    start=(node.lineno, node.col_offset),
                    end=(node.end_lineno, node.end_col_offset),
                    text=text,
                    what=what,
                    key=key,
                )
            )
    found.sort(key=lambda m: (m.start, m.what))
    return [m for m in found if _compiles(apply(source, m))]


def apply(source: bytes, mutant: Mutant) -> bytes:
    """``source`` with ``mutant``'s span replaced (columns are byte offsets, as ``ast`` gives them)."""
    lines = source.splitlines(keepends=True)
    (l0, c0), (l1, c1) = mutant.start, mutant.end
    head = b"".join(lines[: l0 - 1]) + lines[l0 - 1][:c0]
    tail = lines[l1 - 1][c1:] + b"".join(lines[l1:])
    return head + mutant.text.encode() + tail


def _compiles(source: bytes) -> bool:
    try:
        compile(source, "<mutant>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


# -- the equivalent survivors ------------------------------------------------------------------------


def load_equivalent(path: Path) -> dict[tuple[str, str], str]:
    """``module | mutation @ line text | reason`` per line (``#`` comments) -> {(module, key): reason}."""
    out: dict[tuple[str, str], str] = {}
    if not path.exists():
        return out
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or not all(parts):
            raise InputError(f"{path}:{number}: expected 'module | mutation @ line text | reason'")
        out[(parts[0], parts[1])] = parts[2]
    return out


# -- running tests -----------------------------------------------------------------------------------

_TRACER = '''
"""pytest plugin: which tests run which lines of one file (the mutation runner's coverage)."""
import json, os, sys, threading
import pytest

_TARGET = os.environ["MUTATION_TRACE_FILE"]
_current = [""]
_hits = {}


def _local(frame, event, arg):
    if event == "line":
        _hits.setdefault(frame.f_lineno, set()).add(_current[0])
    return _local


def _global(frame, event, arg):
    if frame.f_code.co_filename == _TARGET:
        _hits.setdefault(frame.f_lineno, set()).add(_current[0])
        return _local
    return None


sys.settrace(_global)
threading.settrace(_global)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    yield
    _current[0] = ""


def pytest_sessionfinish(session, exitstatus):
    sys.settrace(None)
    threading.settrace(None)
    with open(os.environ["MUTATION_TRACE_OUT"], "w") as out:
        json.dump({str(k): sorted(v) for k, v in _hits.items()}, out)
'''


@dataclass(kw_only=True)
class Workspace:
    """A copy of the package (``root/kubegpu``) that one worker mutates, one mutant at a time."""

    root: Path
    package: Path  # the package copied (src/kubegpu)
    procs: set[subprocess.Popen[bytes]] = field(default_factory=set)

    @classmethod
    def create(cls, base: Path, package: Path, name: str) -> Workspace:
        root = base / name
        shutil.copytree(package, root / package.name)
        return cls(root=root, package=package)

    def file(self, module: str) -> Path:
        return self.root / self.package.name / module

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), str(self.root / "_plugins")])
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(self.root / "_hypothesis")
        env.update(extra or {})
        return env

    @contextlib.contextmanager
    def mutated(self, module: str, source: bytes) -> Iterator[None]:
        target = self.file(module)
        original = target.read_bytes()
        cache = target.parent / "__pycache__"
        self._drop_cache(cache, target.stem)
        target.write_bytes(source)
        try:
            yield
        finally:
            target.write_bytes(original)
            self._drop_cache(cache, target.stem)

    @staticmethod
    def _drop_cache(cache: Path, stem: str) -> None:
        for pyc in cache.glob(f"{stem}.*.pyc") if cache.is_dir() else ():
            pyc.unlink(missing_ok=True)


def pytest_command(tests: Sequence[str], *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "--hypothesis-seed=0",
        "-o",
        "timeout=0",
        *extra,
        *tests,
    ]


def run_tests(
    ws: Workspace, cwd: Path, tests: Sequence[str], timeout_s: float, env: dict[str, str] | None = None
) -> str:
    """``passed``, ``failed`` or ``timeout``; the process group is ended on a timeout or Ctrl-C."""
    proc = subprocess.Popen(
        pytest_command(tests),
        cwd=cwd,
        env=ws.env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ws.procs.add(proc)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return "timeout"
    except BaseException:
        _stop(proc)
        raise
    finally:
        ws.procs.discard(proc)
    return "passed" if code == 0 else "failed"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@dataclass(frozen=True, kw_only=True)
class Baseline:
    tests: tuple[str, ...]
    seconds: float
    hits: dict[int, frozenset[str]]  # line -> test node ids running it ("" = at import)


def baseline(ws: Workspace, cwd: Path, module: str, tests: Sequence[str], timeout_s: float) -> Baseline:
    """One traced run of ``tests`` on the unmutated copy: they must pass; which tests run which line."""
    plugins = ws.root / "_plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "mutation_trace.py").write_text(_TRACER)
    out = ws.root / "_trace.json"
    env = {"MUTATION_TRACE_FILE": str(ws.file(module)), "MUTATION_TRACE_OUT": str(out)}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            pytest_command(tests, "-p", "mutation_trace"),
            cwd=cwd,
            env=ws.env(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputError(f"{module}: its tests ran past {timeout_s:.0f} s unmutated") from None
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-15:])
        raise InputError(f"{module}: its tests fail before any mutation ({' '.join(tests)}):\n{tail}")
    raw = json.loads(out.read_text())
    hits = {int(k): frozenset(v) for k, v in raw.items()}
    if not hits:
        raise InputError(f"{module}: the tests never ran the copy in {ws.root} (is PYTHONPATH overridden?)")
    return Baseline(tests=tuple(tests), seconds=seconds, hits=hits)


def tests_for(mutant: Mutant, base: Baseline, cwd: Path) -> list[str] | None:
    """The tests running the mutant's lines (all of them for lines run at import); None: no test does."""
    ids: set[str] = set()
    for line in range(mutant.line, mutant.end_line + 1):
        ids |= base.hits.get(line, frozenset())
    if not ids:
        return None
    if "" in ids:
        return list(base.tests)
    return [str(cwd / i) for i in sorted(ids)]


# -- the run -----------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Result:
    module: str
    tried: int = 0
    killed: int = 0
    timeouts: int = 0
    survived: list[Mutant] = field(default_factory=list)  # new survivors
    equivalent: list[Mutant] = field(default_factory=list)  # survivors listed as equivalent
    uncovered: int = 0  # survivors (new ones) on lines no test runs
    not_run: int = 0  # left out by the budget or Ctrl-C
    error: str | None = None  # why the module was not measured

    @property
    def score(self) -> float | None:
        judged = self.tried - len(self.equivalent)
        return 100.0 * (self.killed + self.timeouts) / judged if judged else None


def table(results: Sequence[Result]) -> str:
    """The summary, at most 80 columns."""
    head = (
        f"{'module':<24} {'tried':>5} {'killed':>10} {'survived':>8} {'not run':>7} {'equiv':>5} {'score':>7}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        if r.error is not None:
            rows.append(f"{r.module:<24} {r.error}")
            continue
        killed = f"{r.killed}" + (f"+{r.timeouts}t" if r.timeouts else "")
        score = "-" if r.score is None else f"{r.score:.1f} %"
        rows.append(
            f"{r.module:<24} {r.tried:>5} {killed:>10} {len(r.survived):>8} {r.uncovered:>7} "
            f"{len(r.equivalent):>5} {score:>7}"
        )
    rows += [
        "killed: a test failed (+Nt: ran past the timeout); survived: new survivors;",
        "not run: of those, on lines no test runs; equiv: listed in",
        "bench/mutation_equivalent.txt; score = killed / (tried - equiv)",
    ]
    return "\n".join(rows)


def survivors_text(results: Sequence[Result]) -> str:
    lines: list[str] = []
    for r in results:
        for m in r.survived:
            lines.append(f"  {m.where()}: {m.key}")
    return "survivors:\n" + "\n".join(lines) if lines else "survivors: none new"


@dataclass(kw_only=True)
class Options:
    modules: tuple[str, ...]
    max_mutants: int | None
    budget_s: float | None
    workers: int
    timeout_s: float | None
    seed: int
    equivalent: Path
    package: Path = ROOT / "src" / "kubegpu"
    cwd: Path = ROOT
    tests: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(MODULES))


def run(opts: Options, say: Callable[[str], None] = print) -> list[Result]:
    """Every module of ``opts`` in turn; the results so far are in the list even after Ctrl-C."""
    equivalent = load_equivalent(opts.equivalent)
    results: list[Result] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kubegpu-mutation-") as tmp:
        spaces = [Workspace.create(Path(tmp), opts.package, f"w{i}") for i in range(opts.workers)]
        try:
            for module in opts.modules:
                result = Result(module=module)
                results.append(result)
                try:
                    _run_module(
                        opts,
                        module=module,
                        spaces=spaces,
                        equivalent=equivalent,
                        result=result,
                        started=started,
                        say=say,
                    )
                except InputError as exc:  # its tests fail unmutated: the next module still runs
                    result.error = "its tests fail before any mutation"
                    say(f"{exc}")
        except KeyboardInterrupt:
            for ws in spaces:
                for proc in list(ws.procs):
                    _stop(proc)
            say("interrupted: what was measured so far")
            raise _Interrupted(results) from None
    return results


class _Interrupted(Exception):
    def __init__(self, results: list[Result]) -> None:
        super().__init__("interrupted")
        self.results = results


def _run_module(
    opts: Options,
    *,
    module: str,
    spaces: list[Workspace],
    equivalent: dict[tuple[str, str], str],
    result: Result,
    started: float,
    say: Callable[[str], None],
) -> None:
    tests = [t for t in opts.tests[module] if (opts.cwd / t.split("::")[0]).exists()]
    source = (opts.package / module).read_bytes()
    every = mutants(module, source)
    chosen = every
    if opts.max_mutants is not None and len(every) > opts.max_mutants:
        picked = random.Random(opts.seed).sample(range(len(every)), opts.max_mutants)
        chosen = [every[i] for i in sorted(picked)]
    say(f"{module}: {len(every)} mutants, trying {len(chosen)}; baseline run of {' '.join(tests)}")
    base = baseline(spaces[0], opts.cwd, module, tests, timeout_s=1800)
    timeout_s = opts.timeout_s or max(30.0, 3 * base.seconds + 10)
    say(f"{module}: baseline {base.seconds:.1f} s; a mutant running past {timeout_s:.0f} s counts as killed")
    lock = threading.Lock()
    free = list(spaces)

    def one(m: Mutant) -> tuple[Mutant, str]:
        which = tests_for(m, base, opts.cwd)
        if which is None:
            return m, "uncovered"
        with lock:
            ws = free.pop()
        try:
            with ws.mutated(module, apply(source, m)):
                return m, run_tests(ws, opts.cwd, which, timeout_s)
        finally:
            with lock:
                free.append(ws)

    def record(m: Mutant, outcome: str) -> None:
        result.tried += 1
        if outcome == "failed":
            result.killed += 1
        elif outcome == "timeout":
            result.timeouts += 1
        elif (module, m.key) in equivalent:
            result.equivalent.append(m)
        else:
            result.survived.append(m)
            result.uncovered += outcome == "uncovered"
        mark = {"failed": "killed", "timeout": "killed (timeout)"}.get(outcome, "SURVIVED")
        if mark == "SURVIVED" and (module, m.key) in equivalent:
            mark = "survived (equivalent)"
        say(
            f"[{result.tried}/{len(chosen)}] killed {result.killed + result.timeouts} "
            f"survived {len(result.survived) + len(result.equivalent)}  {m.where()} {m.what}: {mark}"
        )

    def over_budget() -> bool:
        return opts.budget_s is not None and time.monotonic() - started > opts.budget_s

    queue = list(chosen)
    if opts.workers == 1:
        while queue and not over_budget():
            record(*one(queue.pop(0)))
    else:
        pool = ThreadPoolExecutor(max_workers=opts.workers)
        running: set[Future[tuple[Mutant, str]]] = set()
        try:
            while queue or running:
                while queue and len(running) < opts.workers and not over_budget():
                    running.add(pool.submit(one, queue.pop(0)))
                if not running:
                    break
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    record(*f.result())
        except BaseException:  # Ctrl-C: end the tests running now, start no more
            pool.shutdown(wait=False, cancel_futures=True)
            for ws in spaces:
                for proc in list(ws.procs):
                    _stop(proc)
            raise
        pool.shutdown()
    result.not_run = len(queue)
    if queue:
        say(f"{module}: budget spent; {len(queue)} mutants not tried")
    elif len(chosen) == len(every):  # every mutant tried: entries no survivor matched are stale
        matched = {m.key for m in result.equivalent}
        for mod, key in sorted(equivalent):
            if mod == module and key not in matched:
                say(f"{module}: listed as equivalent but no longer surviving (remove it): {key}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])

    def refuse(message: str) -> NoReturn:  # one line, as benchcli's errors
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    parser.error = refuse  # type: ignore[method-assign]
    parser.add_argument(
        "--module",
        action="append",
        choices=sorted(MODULES),
        help="a module under src/kubegpu (repeatable; default: all)",
    )
    parser.add_argument("--max-mutants", type=benchcli.count, help="per module, sampled with --seed")
    parser.add_argument("--seed", type=benchcli.seed, default=0)
    parser.add_argument("--budget-s", type=benchcli.positive, help="stop starting mutants after this")
    parser.add_argument("--timeout-s", type=benchcli.positive, help="per mutant (default: 3x the baseline)")
    parser.add_argument("--workers", type=benchcli.count, default=1)
    parser.add_argument("--equivalent", type=Path, default=EQUIVALENT_FILE)
    args = parser.parse_args()
    opts = Options(
        modules=tuple(args.module or MODULES),
        max_mutants=args.max_mutants,
        budget_s=args.budget_s,
        workers=args.workers,
        timeout_s=args.timeout_s,
        seed=args.seed,
        equivalent=args.equivalent,
    )
    load_equivalent(opts.equivalent)  # a malformed file is refused before any work

    def stop(signum: int, frame: object) -> None:  # TERM stops as Ctrl-C does: tests ended, table printed
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        results = run(opts)
    except _Interrupted as stop:
        print(table(stop.results))
        print(survivors_text(stop.results))
        return 130
    print(table(results))
    print(survivors_text(results))
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
