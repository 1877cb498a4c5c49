"""Measure kernix.check as mutation testing: correct kernels, and plausible one-change bugs in them.

The corpus is ``fixtures/mutants/``: correct C++ kernels with their JAX references and examples
(``corpus.py``) and bugs, each a textual patch of one kernel (``bugs.py``). For every correct kernel
this script runs ``kernix.check`` with its defaults (a failure there is a false alarm); for every bug
it applies the patch, and in a child process builds the mutated module and runs the same check. Each
bug is then

* ``reported``: the check failed (or raised a kernix error, as a refusal to pass);
* ``missed``: the check passed;
* ``caller crash``: the child died (a signal, an abort): the caller's process would have;
* ``caller hang``: the child ran past ``--timeout``;
* ``checker error``: the check raised something that is not a kernix error (a bug of the checker);
* ``build error``: the patched source does not build (a bug of the corpus: every bug must compile).

It prints one row per bug class and the totals: reported %, the missed bugs, the crashes, the false
alarms and the median time of a default check of each correct kernel.

The check is called as ``kernix.check(fn, reference, *inputs, strict=False, **attrs)`` (an attribute
named like one of check's own parameters goes in ``attrs=``); ``--thorough`` adds the most thorough
options the installed check documents (more drawn examples; each instantiation of a template with
its own dtype), and ``--option NAME=VALUE`` (a JSON or Python literal value) passes any option, so the
script works unchanged when check gains options. A template is checked through its dispatcher; when
the installed check refuses a dispatcher, the instantiation the example's dtype selects is checked
instead, and the result says so.

Usage::

    python bench/check_mutants.py [--jobs N] [--timeout S] [--thorough] [--option NAME=VALUE ...]
                                  [--kernels a,b] [--bugs kernel.bug,...] [--no-bugs] [--json FILE]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "fixtures" / "mutants"
MARK = "CHECK_MUTANTS_RESULT "
OUTCOMES = ("reported", "missed", "caller crash", "caller hang", "checker error", "build error")


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"mutants_{name}", MUTANTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def corpus() -> tuple[dict[str, dict[str, Any]], list[dict[str, str]], tuple[str, ...]]:
    """The kernels, the bugs and the bug classes of fixtures/mutants."""
    kernels = _module("corpus").KERNELS
    bugs = _module("bugs")
    return kernels, bugs.BUGS, bugs.CLASSES


def patched_source(kernel: dict[str, Any], bug: dict[str, str] | None) -> str:
    """The kernel's source, with the bug's patch applied (its ``find`` must occur exactly once)."""
    source = (MUTANTS / kernel["source"]).read_text()
    if bug is None:
        return source
    count = source.count(bug["find"])
    if count != 1:
        raise ValueError(f"bug {bug['kernel']}.{bug['name']}: its find text occurs {count} times in "
                         f"{kernel['source']} (it must occur once)")
    return source.replace(bug["find"], bug["replace"])


# -- the child: build one (mutated) kernel and check it -----------------------------------------

def _call_check(check: Any, fn: Any, reference: Any, inputs: tuple, attrs: dict[str, Any],
                options: dict[str, Any]) -> Any:
    params = inspect.signature(check).parameters
    keywords = {k: v for k, v in attrs.items() if k not in params}
    clashing = {k: v for k, v in attrs.items() if k in params}
    call = dict(options)
    call.update(keywords)
    if clashing:
        call["attrs"] = clashing
    return check(fn, reference, *inputs, **call)


def _rows(report: Any) -> tuple[bool, list[str], str]:
    """Whether a report passed, its failed checks and a short text, whatever the report's shape."""
    failed: list[str] = []
    try:
        for row in report:
            status = getattr(row, "status", None)
            if status == "failed" or getattr(row, "failed", False) is True:
                failed.append(getattr(row, "name", str(row)))
    except TypeError:
        pass
    ok = getattr(report, "ok", None)
    if ok is None:
        ok = not failed
    details = []
    for name in failed:
        try:
            details.append(f"{name}: {report[name].detail}")
        except Exception:  # noqa: BLE001 - a report without per-check rows
            details.append(name)
    return bool(ok), failed, " | ".join(details)[:1500]


def _thorough(check: Any, kernel: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(check).parameters
    options: dict[str, Any] = {}
    if "examples" in params:
        options["examples"] = 100
    return options


def child(kernel_name: str, bug_name: str | None, thorough: bool, extra: dict[str, Any]) -> dict[str, Any]:
    kernels, bugs, _ = corpus()
    kernel = kernels[kernel_name]
    bug = None if bug_name is None else next(b for b in bugs if b["kernel"] == kernel_name and b["name"] == bug_name)
    import jax

    if kernel["x64"]:
        jax.config.update("jax_enable_x64", True)
    import numpy as np

    import kernix

    source = patched_source(kernel, bug)
    result: dict[str, Any] = {"kernel": kernel_name, "bug": bug_name}
    # kept until the check is over: a checker may build the sources again (kernix.check's sanitizer driver)
    keep = tempfile.TemporaryDirectory(prefix="kernix-mutant-")
    for tmp in (keep.name,):
        path = Path(tmp) / kernel["source"]
        path.write_text(source)
        start = time.perf_counter()
        try:
            # a name of its own: children building other bugs of the kernel do not wait on its build lock
            module = kernix.load_cpp_file(path, name=f"mutant_{kernel_name}_{bug_name or 'correct'}")
        except Exception as exc:  # noqa: BLE001 - a patch that does not build is reported as such
            return {**result, "outcome": "build error", "detail": f"{type(exc).__name__}: {exc}"[-2000:]}
        result["build_s"] = round(time.perf_counter() - start, 2)
    inputs = kernel["inputs"]()
    options = {"strict": False, **kernel["options"]}
    if thorough:
        options.update(_thorough(kernix.check, kernel))
    options.update(extra)
    # (name of the function checked, its inputs): the dispatcher, or each member when checking thoroughly
    # a checker that takes one instantiation only.
    targets = [(kernel["function"], inputs)]
    checked, outcomes, failed_all, details, seconds = [], [], [], [], 0.0
    while targets:
        name, xs = targets.pop(0)
        start = time.perf_counter()
        try:
            report = _call_check(kernix.check, getattr(module, name), kernel["reference"], xs, kernel["attrs"],
                                 options)
        except kernix.CallError as exc:
            if name == kernel["function"] and kernel["fallback"]:
                seconds += time.perf_counter() - start
                note = f"{name} refused ({str(exc).splitlines()[0][:200]})"
                checked.append(note)
                if thorough and kernel["members"]:
                    targets += [(m, tuple(np.asarray(x).astype(d) if np.asarray(x).dtype.kind == "f" else x
                                          for x in inputs)) for m, d in kernel["members"].items()]
                else:
                    targets.append((kernel["fallback"], inputs))
                continue
            outcomes.append("reported")
            details.append(f"{name}: raised {type(exc).__name__}: {exc}"[:1500])
        except kernix.KernixError as exc:  # CheckError with strict checking, or another refusal
            report = getattr(exc, "report", None)
            if report is None:
                outcomes.append("reported")
                details.append(f"{name}: raised {type(exc).__name__}: {exc}"[:1500])
            else:
                ok, failed, text = _rows(report)
                outcomes.append("missed" if ok else "reported")
                failed_all += failed
                details.append(text)
        except Exception as exc:  # noqa: BLE001
            outcomes.append("checker error")
            details.append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        else:
            ok, failed, text = _rows(report)
            outcomes.append("missed" if ok else "reported")
            failed_all += failed
            if text:
                details.append(f"{name}: {text}")
        seconds += time.perf_counter() - start
        checked.append(name)
    outcome = ("checker error" if "checker error" in outcomes else
               "reported" if "reported" in outcomes else "missed")
    return {**result, "outcome": outcome, "failed": failed_all, "checked": checked,
            "detail": " || ".join(details)[:3000], "check_s": round(seconds, 2)}


# -- the parent: run the children, classify, print --------------------------------------------------

def run_one(kernel: str, bug: str | None, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", kernel, bug or "-"]
    if args.thorough:
        command.append("--thorough")
    for option in args.option:
        command += ["--option", option]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group: it and what it started
        out, err = proc.communicate()
        return {"kernel": kernel, "bug": bug, "outcome": "caller hang",
                "detail": f"no result within {args.timeout} s; stderr: {err[-800:]}",
                "wall_s": round(time.perf_counter() - start, 1)}
    wall = round(time.perf_counter() - start, 1)
    lines = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    result = json.loads(lines[-1]) if lines else None
    if proc.returncode != 0:
        how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        after = f" after the check returned ({result['outcome']})" if result else ""
        return {"kernel": kernel, "bug": bug, "outcome": "caller crash", "wall_s": wall,
                "detail": f"{how}{after}; stderr: {err.strip()[-1200:]}"}
    if result is None:
        return {"kernel": kernel, "bug": bug, "outcome": "checker error", "wall_s": wall,
                "detail": f"no result printed; stderr: {err[-1200:]}"}
    result["wall_s"] = wall
    return result


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "-"


def summarize(correct: list[dict[str, Any]], mutants: list[dict[str, Any]], bugs: list[dict[str, str]],
              classes: tuple[str, ...]) -> str:
    lines = []
    false_alarms = [r for r in correct if r["outcome"] != "missed"]
    lines.append(f"correct kernels: {len(correct)} checked, {len(false_alarms)} false alarm(s)")
    for r in false_alarms:
        lines.append(f"  FALSE ALARM {r['kernel']}: {r['outcome']}: {r.get('detail', '')[:600]}")
    times = {r["kernel"]: r.get("check_s") for r in correct if r.get("check_s") is not None}
    if times:
        lines.append(f"median check time per kernel: {statistics.median(times.values()):.1f} s "
                     f"(min {min(times.values()):.1f}, max {max(times.values()):.1f}); "
                     + ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items())))
    if not mutants:
        return "\n".join(lines)
    by_class: dict[str, Counter] = defaultdict(Counter)
    klass = {(b["kernel"], b["name"]): b["class"] for b in bugs}
    for r in mutants:
        by_class[klass[(r["kernel"], r["bug"])]][r["outcome"]] += 1
    header = f"{'class':22} {'bugs':>4} " + " ".join(f"{o:>13}" for o in OUTCOMES) + f" {'reported %':>10}"
    lines += ["", header, "-" * len(header)]
    total: Counter = Counter()
    for c in classes:
        counts = by_class.get(c)
        if not counts:
            continue
        total.update(counts)
        n = sum(counts.values())
        lines.append(f"{c:22} {n:>4} " + " ".join(f"{counts[o]:>13}" for o in OUTCOMES)
                     + f" {_percent(counts['reported'], n - counts['build error']):>10}")
    n = sum(total.values())
    lines.append("-" * len(header))
    lines.append(f"{'total':22} {n:>4} " + " ".join(f"{total[o]:>13}" for o in OUTCOMES)
                 + f" {_percent(total['reported'], n - total['build error']):>10}")
    for outcome in OUTCOMES[1:]:
        rows = [r for r in mutants if r["outcome"] == outcome]
        if rows:
            lines += ["", f"{outcome} ({len(rows)}):"]
            for r in rows:
                c = klass[(r["kernel"], r["bug"])]
                detail = "" if outcome == "missed" else f": {r.get('detail', '')[:400]}"
                lines.append(f"  {r['kernel']}.{r['bug']} [{c}]{detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="children run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per child, build included (default 300)")
    parser.add_argument("--thorough", action="store_true", help="the most thorough options check documents")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="an option for kernix.check (value: JSON or a Python literal); repeatable")
    parser.add_argument("--kernels", help="comma-separated kernel names (default: all)")
    parser.add_argument("--bugs", help="comma-separated kernel.bug names (default: all of the kernels)")
    parser.add_argument("--no-bugs", action="store_true", help="check the correct kernels only")
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--child", nargs=2, metavar=("KERNEL", "BUG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    extra = {}
    for option in args.option:
        name, _, value = option.partition("=")
        try:
            extra[name] = json.loads(value)
        except json.JSONDecodeError:
            extra[name] = ast.literal_eval(value)
    if args.child:
        kernel, bug = args.child
        result = child(kernel, None if bug == "-" else bug, args.thorough, extra)
        sys.stdout.flush()
        print(MARK + json.dumps(result), flush=True)
        return 0

    kernels, bugs, classes = corpus()
    names = args.kernels.split(",") if args.kernels else list(kernels)
    unknown = [k for k in names if k not in kernels]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; the kernels: {', '.join(kernels)}")
    for bug in bugs:  # every patch applies before anything runs
        patched_source(kernels[bug["kernel"]], bug)
    chosen = [b for b in bugs if b["kernel"] in names]
    if args.bugs:
        wanted = set(args.bugs.split(","))
        chosen = [b for b in chosen if f"{b['kernel']}.{b['name']}" in wanted]
        names = sorted({b["kernel"] for b in chosen}, key=list(kernels).index) if not args.kernels else names
    if args.no_bugs:
        chosen = []
    jobs = [(k, None) for k in names] + [(b["kernel"], b["name"]) for b in chosen]
    print(f"kernix.check on {len(names)} correct kernel(s) and {len(chosen)} bug(s), {args.jobs} at a time"
          f"{' (thorough)' if args.thorough else ''}{' options ' + str(extra) if extra else ''}", flush=True)
    start = time.perf_counter()
    results: list[dict[str, Any]] = []

    def one(job: tuple[str, str | None]) -> dict[str, Any]:
        r = run_one(job[0], job[1], args)
        label = f"{job[0]}.{job[1]}" if job[1] else f"{job[0]} (correct)"
        failed = ",".join(r.get("failed", []))
        outcome = r["outcome"] if job[1] else {"missed": "passed", "reported": "FALSE ALARM"}.get(r["outcome"],
                                                                                                 r["outcome"])
        print(f"  {label:50} {outcome:13} {failed:40} {r.get('check_s', '')!s:>6} s check, "
              f"{r.get('wall_s', '')} s in all", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, jobs))
    correct = [r for r in results if r["bug"] is None]
    mutants = [r for r in results if r["bug"] is not None]
    print()
    print(summarize(correct, mutants, bugs, classes))
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
