"""Judge a seeded sample of decided verdicts of ``bench_confirm_realcode.py`` by an independent check.

    python benchmarks/judge_confirm_realcode.py confirm-realcode-verdicts.json --sample 30 --seed 15

For each sampled verdict (confirmed or cleared) a fresh process of the scratch venv's Python runs
:data:`CHECK`: it imports the project module by its dotted name, takes the user's own kernel (for
a ``@wp.func``, a five-line wrapper kernel calling it), draws inputs a user would pass (standard
normal values, unit quaternions and rotations, integer indices ``i % n``, counts equal to the
thread count, structs filled field by field the same way, their array fields differentiated; for a
value-dependent finding the singular configuration a user meets: coincident points, zero vectors,
large exponents), and compares the full Jacobian from ``wp.Tape`` with central finite
differences at two steps in float64 arithmetic (an entry at a kink of the function, where the
one-sided quotients differ at both steps and AD lies between them, is not compared). It looks
for a converged disagreement over up to four input settings (integers ``i % N``; then ``i % N``
with the integers the definition compares with a constant of N or more (``JointType.FREE``) set
to it, a model of one kind; then every integer the same value: which branches run depends on
them), each finite, moving an output and running the flagged statement, and stops at
the first. None of warp-lint's runtime code is used; a generic definition is taken at the concrete
types the verdict names (``instantiated_as``), which fix no value. A confirmed verdict is judged
right when the check finds a converged disagreement, a cleared one when it finds none at any
setting and a non-zero Jacobian; anything else is printed for a human look and recorded as
``wrong`` (or ``undecided`` when the check cannot run the kernel). A verdict cleared with the
kernel's other hazards set aside (its evidence holds the isolation), or because the statement's
adjoint is that of its safe form (``same-as-safe-form``), says the kernel as written disagrees;
where the check finds that disagreement it cannot tell whose it is, and records ``undecided``
(``cleared-in-context``).
The judgements go to ``--out`` (JSON), one per verdict, with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realcode  # noqa: E402

CHECK = textwrap.dedent('''
    import importlib, inspect, json, os, re, sys, tempfile, textwrap, types, typing
    import numpy as np
    import warp as wp

    request = json.loads(sys.argv[1])
    wp.config.quiet = True
    wp.config.kernel_cache_dir = request["cache"]
    # Bounds-checked builds: where this check's own inputs index past an array, the check stops
    # (undecided) instead of judging values read from outside it.
    wp.config.mode = "debug"
    wp.init()
    module = importlib.import_module(request["module"])
    line, name, kind = request["line"], request["kernel"], request["kind"]

    def spans(func):
        try:
            lines, first = inspect.getsourcelines(func)
        except (OSError, TypeError):
            return False
        return func.__name__ == name and first <= line < first + len(lines)

    candidates = []
    context = wp._src.context
    for warp_module in list(context.user_modules.values()):
        pool = list(warp_module.kernels.values()) if kind == "kernel" else [
            o for f in warp_module.functions.values() for o in [f, *f.user_overloads.values()]]
        candidates += [k for k in pool if getattr(k, "func", None) is not None
                       and os.path.realpath(k.func.__code__.co_filename) == os.path.realpath(module.__file__)
                       and spans(k.func)]
    if not candidates:
        print(json.dumps({"outcome": "not-found"})); sys.exit(0)
    target = candidates[0]
    N = 4  # threads, integer values (indices i % N, counts N), and the extent of inner dimensions
    LENGTH = 8 * N  # the first dimension of every array: room for what kernels add to an index

    def is_struct(t):
        return hasattr(t, "vars") and hasattr(t, "cls")

    def arg_types(obj):
        if isinstance(obj, wp.Kernel):
            return [(a.label, a.type) for a in obj.adj.args]
        return list(obj.input_types.items())

    def generic(t):
        return t is typing.Any or (wp.types.is_array(t) and t.dtype is typing.Any)

    # A generic definition is checked at the types the verdict was reached at (its evidence names
    # them): the types decide nothing of the gradient, the inputs below are this check's own.
    names_seen = dict(vars(wp)) | dict(target.func.__globals__)

    def type_of(text):
        array = re.fullmatch(r"array\\(dtype=(\\w+), ndim=(\\d+)\\)", text)
        if array:
            return wp.array(dtype=type_of(array[1]), ndim=int(array[2]))
        found = names_seen.get(text)
        if found is None:
            found = next((s for m in context.user_modules.values() for s in m.structs.values()
                          if s.cls.__name__ == text), None)
        return found

    declared = request.get("types") or {}
    if any(generic(t) for _, t in arg_types(target)):
        concrete = {n: type_of(declared[n]) for n, t in arg_types(target) if generic(t) and n in declared}
        if len(concrete) < sum(1 for _, t in arg_types(target) if generic(t)) or None in concrete.values():
            print(json.dumps({"outcome": "generic", "types": declared})); sys.exit(0)
        if kind == "kernel":
            target = wp.overload(target, concrete)
        else:
            target = target.get_overload(tuple(concrete.get(n, t) for n, t in arg_types(target)), {}) or target

    def load_source(source, namespace, stem):
        directory = tempfile.mkdtemp(dir=request["cache"])  # removed with the cache by the caller
        path = os.path.join(directory, stem + ".py")
        open(path, "w").write(source)
        loaded = types.ModuleType(stem + "_" + str(abs(hash(path))))
        loaded.__dict__.update(namespace)
        loaded.__file__ = path
        sys.modules[loaded.__name__] = loaded
        exec(compile(source, path, "exec"), loaded.__dict__)
        return loaded

    def wrapper(func):
        # A kernel calling the function once per thread, each value argument read from an array;
        # integers are the thread index, structs pass by value.
        params, call = [], []
        names = {}
        for pname, t in arg_types(func):
            key = "_t_" + pname
            names[key] = t
            if wp.types.is_array(t):
                params.append(f"{pname}: {key}"); call.append(pname)
            elif t in (int, wp.int32):
                call.append("_i")
            elif is_struct(t) or t in (bool, wp.bool):
                params.append(f"{pname}: {key}"); call.append(pname)
            else:
                params.append(f"{pname}: wp.array(dtype={key})"); call.append(f"{pname}[_i]")
        func.build(None)
        returns = [v.type for v in (func.adj.return_var or [])]
        for k, t in enumerate(returns):
            names[f"_r_{k}"] = t
            params.append(f"ret{k}: wp.array(dtype=_r_{k})")
        body = f"_i = wp.tid()\\n"
        outs = ", ".join(f"r{k}" for k in range(len(returns)))
        body += (f"{outs} = _f({', '.join(call)})\\n" if returns else f"_f({', '.join(call)})\\n")
        body += "".join(f"ret{k}[_i] = r{k}\\n" for k in range(len(returns)))
        source = f"@wp.kernel\\ndef judge_wrapper({', '.join(params)}):\\n" + textwrap.indent(body, "    ")
        return load_source(source, dict(wp=wp, _f=func, **names), "judge_wrapper").judge_wrapper

    def counted_copy():
        # The definition with a counter before the flagged statement, to tell whether this
        # check's inputs run it at all (a statement they never run is not judged by them).
        import ast
        try:
            lines, first = inspect.getsourcelines(candidates[0].func)
        except (OSError, TypeError):
            return None
        tree = ast.parse(textwrap.dedent("".join(lines)))
        definition = tree.body[0]
        relative = line - first + 1

        def insert(block):
            for position, statement in enumerate(block):
                if statement.lineno == relative:
                    block.insert(position, ast.parse("wp.atomic_add(_judge_hits, 0, 1)").body[0])
                    return True
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(statement, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt) and insert(inner):
                        return True
            return False

        if not insert(definition.body):
            return None
        definition.args.args.append(ast.arg("_judge_hits", ast.parse("wp.array(dtype=wp.int32)", mode="eval").body))
        definition.name = "judge_counted"
        func = candidates[0].func
        namespace = dict(func.__globals__)
        for cell_name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            try:
                namespace[cell_name] = cell.cell_contents
            except ValueError:
                pass
        try:
            copy = load_source(ast.unparse(ast.fix_missing_locations(tree)), namespace, "judge_counted").judge_counted
            if concrete:
                if kind == "kernel":
                    copy = wp.overload(copy, {**concrete, "_judge_hits": wp.array(dtype=wp.int32)})
                else:
                    copy = copy.get_overload(tuple(concrete.get(n, t) for n, t in arg_types(copy)), {}) or copy
            return copy if kind == "kernel" else wrapper(copy)
        except Exception:
            return None

    concrete = locals().get("concrete") or {}
    kernel = wrapper(target) if kind == "func" else target
    arg_names = [pname for pname, _ in arg_types(kernel)]
    counted = counted_copy()

    rng = np.random.default_rng(request["seed"])
    singular = request["singular"]

    def scalar_of(dtype):
        return getattr(dtype, "_wp_scalar_type_", dtype)

    def is_float(dtype):
        return scalar_of(dtype) in (wp.float16, wp.float32, wp.float64)

    def floats(shape, dtype, mode):
        full = shape + tuple(getattr(dtype, "_shape_", ()))
        # The "zero" mode draws as "normal" does; only its vectors are set to zero afterwards.
        values = {"normal": lambda: rng.standard_normal(full), "zero": lambda: rng.standard_normal(full),
                  "unit": lambda: rng.uniform(0.1, 0.9, full), "positive": lambda: rng.uniform(0.5, 2.0, full)}[mode]()
        kind_name = getattr(dtype, "_wp_generic_type_str_", "")
        if kind_name == "quat_t":
            values /= np.linalg.norm(values, axis=-1, keepdims=True)
        if kind_name == "transform_t":
            values[..., 3:] /= np.linalg.norm(values[..., 3:], axis=-1, keepdims=True)
        return values

    def value(t, mode, where, float_arrays, ints):
        # A user's value of type t; float arrays (struct fields too) are recorded as slots.
        if wp.types.is_array(t):
            dtype = t.dtype
            shape = (LENGTH,) + (N,) * (t.ndim - 1)
            if is_float(dtype):
                float_arrays.append(where)
                return wp.array(floats(shape, dtype, mode).astype(np.float64), dtype=dtype, shape=shape,
                                requires_grad=True)
            # Indices i % N; or, where those never run the flagged statement, one value for every
            # element (a model of one kind: every joint FREE, every shape a BOX).
            values = np.arange(int(np.prod(shape))) % N
            if isinstance(ints, int):
                values = np.full(int(np.prod(shape)), ints)
            elif ints is not None and names_at(where) in ints[1]:
                values = np.full(int(np.prod(shape)), ints[0])
            return wp.array(values.reshape(shape), dtype=dtype)
        if is_struct(t):
            instance = t()
            for field, var in t.vars.items():
                setattr(instance, field, value(var.type, mode, where + (field,), float_arrays, ints))
            return instance
        if t in (int, wp.int32, wp.int64, wp.uint32):
            return ints[0] if isinstance(ints, tuple) and names_at(where) in ints[1] else N
        if t in (bool, wp.bool):
            return True
        if hasattr(t, "_shape_"):
            return t(*floats((1,), t, mode)[0].ravel().tolist())
        return float(floats((1,), wp.float32, mode)[0])

    def names_at(where):
        return (arg_names[where[0]], *where[1:])

    def kinds_compared():
        # Integer arrays and struct fields the definition compares (== or !=) with a constant
        # that indices i % N never take (N or more): JointType.FREE, GeoType.BOX. A model of one
        # kind sets them all to it while indices stay i % N.
        import ast
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(candidates[0].func)))
        except (OSError, TypeError, SyntaxError):
            return []
        namespace = dict(candidates[0].func.__globals__)

        def path(node):
            parts = []
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            return (node.id, *reversed(parts)) if isinstance(node, ast.Name) else None

        def constant(node):
            if isinstance(node, ast.Call) and len(node.args) == 1 and path(node.func) in (("int",), ("wp", "int32")):
                node = node.args[0]
            if isinstance(node, ast.Constant):
                return node.value if type(node.value) is int else None
            found = path(node)
            if found is None or found[0] not in namespace:
                return None
            value = namespace[found[0]]
            for part in found[1:]:
                value = getattr(value, part, None)
            return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None

        reads = {}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Subscript) and path(node.value.value)):
                reads[node.targets[0].id] = path(node.value.value)

        def read_from(node):
            if isinstance(node, ast.Subscript):
                return path(node.value)
            if isinstance(node, ast.Name):
                return reads.get(node.id)
            found = path(node)
            return found if found and len(found) > 1 else None  # a struct's field

        kinds = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
                for side, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                    value, source = constant(other), read_from(side)
                    if value is not None and value >= N and source is not None:
                        kinds.setdefault(value, set()).add(source)
        return [(value, frozenset(sources)) for value, sources in sorted(kinds.items())]

    def slot(arrays, where):
        found = arrays[where[0]]
        for field in where[1:]:
            found = getattr(found, field)
        return found

    def label(where):
        return ".".join([labels[where[0]], *where[1:]])

    def make(mode, ints=None):
        args, float_arrays = [], []
        for position, (pname, t) in enumerate(arg_types(kernel)):
            args.append(value(t, mode, (position,), float_arrays, ints))
        vectors = [slot(args, w) for w in float_arrays if hasattr(slot(args, w).dtype, "_shape_")]
        if singular == "sqrt-zero":
            # Coincident points: every vector array equal to the first of its type, and each one's
            # elements all equal (a collapsed element); a vector a @wp.func takes, or one passed by
            # value, is the zero vector (a point on the axis), and so is every vector in the "zero"
            # mode, tried first (a length taken of one vector alone is singular only there).
            for a in vectors[1:]:
                if a.dtype == vectors[0].dtype and a.shape == vectors[0].shape:
                    a.assign(vectors[0].numpy())
            for a in vectors:
                values = a.numpy().copy()
                flat = values.reshape((-1,) + values.shape[a.ndim:])
                flat[:] = 0.0 if kind == "func" or mode == "zero" else flat[0]
                a.assign(flat.reshape(values.shape))
            for position, a in enumerate(args):
                if not isinstance(a, wp.array) and hasattr(type(a), "_shape_"):
                    args[position] = type(a)(*([0.0] * int(np.prod(type(a)._shape_))))
        if singular == "unselected-nonfinite":
            for w in float_arrays:
                a = slot(args, w)
                if a.dtype in (wp.float32, wp.float64):
                    a.assign(a.numpy() * 100.0)
        return args, float_arrays

    def fresh_copy(a):
        if isinstance(a, wp.array):
            return wp.array(a.numpy(), dtype=a.dtype, shape=a.shape, requires_grad=a.requires_grad)
        if hasattr(a, "_cls") and is_struct(a._cls):
            copy = a._cls()
            for field in a._cls.vars:
                setattr(copy, field, fresh_copy(getattr(a, field)))
            return copy
        return a

    def run(args, overrides=None):
        fresh = [fresh_copy(a) for a in args]
        for where, values in (overrides or {}).items():
            slot(fresh, where).assign(values)
        return fresh

    dim = N if kind == "func" or "tid" in inspect.getsource(target.func) else 1
    func_types = [t for _, t in arg_types(target)] if kind == "func" else []
    if any(wp.types.is_array(t) for t in func_types) and not any(t in (int, wp.int32) for t in func_types):
        dim = 1  # every thread would get the same arrays and no index: a user calls it once per array
    labels = [a.label for a in kernel.adj.args]

    threads = dim

    def launch(args):
        wp.launch(kernel, dim=threads, inputs=args)
        wp.synchronize()

    def reached(args):
        hits = wp.zeros(1, dtype=wp.int32)
        by_label = dict(zip(labels, run(args)))
        wp.launch(counted, dim=threads, inputs=[hits if a.label == "_judge_hits" else by_label[a.label]
                                             for a in counted.adj.args])
        wp.synchronize()
        return int(hits.numpy()[0])

    def settings():
        # Input settings this check can use: the inputs are finite, move an output, and run the
        # flagged statement. One per integer setting (indices i % N, then every integer the same),
        # the first value mode that works: the integers decide which branches run.
        global threads
        last = ("no-output", None)
        for ints in [None, *kinds_compared(), *range(8)] if counted is not None else [None]:
            # With every integer the same, every thread would work on the same elements: one thread.
            threads = 1 if isinstance(ints, int) else dim
            for mode in ("zero", "normal", "unit", "positive") if singular == "sqrt-zero" else ("normal", "unit", "positive"):
                args, float_arrays = make(mode, ints)
                probe = run(args)
                launch(probe)
                outputs = [w for w in float_arrays
                           if not np.array_equal(slot(args, w).numpy(), slot(probe, w).numpy())]
                finite = all(np.all(np.isfinite(slot(probe, w).numpy())) for w in float_arrays)
                ran = reached(args) if counted is not None else None
                if finite and outputs and ran != 0:
                    yield {"mode": mode, "ints": ints, "threads": threads, "args": args,
                           "float_arrays": float_arrays, "outputs": outputs, "ran": ran}
                    break
                last = ("not-reached" if outputs and ran == 0 else "no-output", mode)
        settings.last = last

    def values(arrays, where):
        return slot(arrays, where).numpy().astype(np.float64).ravel()

    def compare(setting):
        # The full Jacobian from wp.Tape against central FD at two steps (a disagreement counts
        # where the two steps agree: FD has converged there).
        global threads
        threads = setting["threads"]
        args, inputs, outputs = setting["args"], list(setting["float_arrays"]), setting["outputs"]
        fd = {}
        at_base = run(args)
        launch(at_base)
        base_out = {out: values(at_base, out) for out in outputs}
        for inp in inputs:
            base = values(args, inp)
            shape = slot(args, inp).numpy().shape
            for j in range(base.size):
                columns = []
                for h in (1e-2 * max(1.0, abs(base[j])), 1e-3 * max(1.0, abs(base[j]))):
                    plus, minus = base.copy(), base.copy()
                    plus[j] += h
                    minus[j] -= h
                    up = run(args, {inp: plus.reshape(shape)})
                    launch(up)
                    down = run(args, {inp: minus.reshape(shape)})
                    launch(down)
                    columns.append({out: ((values(up, out) - values(down, out)) / (2 * h),
                                          (values(up, out) - base_out[out]) / h,
                                          (base_out[out] - values(down, out)) / h) for out in outputs})
                fd[(inp, j)] = columns
        worst = {"abs": 0.0, "where": None}
        nonzero = disagree = converged_disagree = False
        for out in outputs:
            out_size = values(args, out).size
            for k in range(out_size):
                copy = run(args)
                tape = wp.Tape()
                with tape:
                    launch(copy)
                seed = np.zeros(out_size)
                seed[k] = 1.0
                target_array = slot(copy, out)
                tape.backward(grads={target_array: wp.array(seed.reshape(target_array.numpy().shape),
                                                             dtype=target_array.dtype, shape=target_array.shape)})
                for inp in inputs:
                    ad = slot(copy, inp).grad.numpy().astype(np.float64).ravel()
                    for j in range(ad.size):
                        (coarse, *sides), (fine, *sides_half) = ((q[k] for q in column[out]) for column in fd[(inp, j)])
                        nonzero = nonzero or abs(coarse) > 1e-3 or abs(ad[j]) > 1e-3
                        bound = 2e-3 + 2e-2 * abs(coarse)
                        if np.isfinite(ad[j]) and abs(ad[j] - coarse) <= bound:
                            continue
                        # A kink (max(a, b) at a == b): the one-sided quotients differ by the same
                        # at both steps and AD takes a side or between; no derivative to compare.
                        gap, gap_half = abs(sides[0] - sides[1]), abs(sides_half[0] - sides_half[1])
                        if (gap > bound and gap_half > 0.75 * gap and np.isfinite(ad[j])
                                and min(*sides, *sides_half) - bound <= ad[j] <= max(*sides, *sides_half) + bound):
                            continue
                        disagree = True
                        if np.isfinite(coarse) and abs(coarse - fine) <= bound:
                            converged_disagree = True
                            error = abs(ad[j] - coarse) if np.isfinite(ad[j]) else float("inf")
                            if error >= worst["abs"]:
                                worst = {"abs": error, "where": f"d {label(out)}[{k}] / d {label(inp)}[{j}]",
                                         "ad": float(ad[j]), "fd": float(coarse)}
        ints = setting["ints"]
        described = ("i % N" if ints is None else f"all {ints}" if isinstance(ints, int) else
                     f"i % N, {', '.join(sorted('.'.join(p) for p in ints[1]))} all {ints[0]}")
        return {"mode": setting["mode"], "integers": described,
                "flagged_statement_ran": setting["ran"], "disagree": bool(converged_disagree),
                "unconverged_disagreement": bool(disagree and not converged_disagree), "nonzero": bool(nonzero),
                "worst": worst, "dim": setting["threads"]}

    # A confirmed verdict claims inputs exist where the gradient is wrong; a cleared one, that
    # the statement does not make it wrong. The check looks for a converged disagreement over
    # up to MAX_SETTINGS settings, stopping at the first; the same search for both verdicts.
    MAX_SETTINGS = 4
    checked = []
    for setting in settings():
        checked.append(compare(setting))
        if checked[-1]["disagree"] or len(checked) == MAX_SETTINGS:
            break
    if not checked:
        outcome, mode = settings.last
        print(json.dumps({"outcome": outcome, "mode": mode})); sys.exit(0)
    found = next((c for c in checked if c["disagree"]), None)
    summary = dict(found or max(checked, key=lambda c: c["worst"]["abs"]))
    summary.update(outcome="checked", settings_checked=len(checked),
                   disagree=found is not None, nonzero=any(c["nonzero"] for c in checked),
                   unconverged_disagreement=found is None and any(c["unconverged_disagreement"] for c in checked),
                   settings=[{k: c[k] for k in ("mode", "integers", "flagged_statement_ran", "disagree", "nonzero")}
                             for c in checked])
    print(json.dumps(summary, default=str))
''')


def dotted(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def judge(python: Path, number: int, path: str, finding: dict, cache: str) -> dict:
    """One decided verdict checked in a fresh interpreter: right, wrong or undecided."""
    confirmation = finding["confirmation"]
    evidence = confirmation["evidence"]
    singular = None
    if evidence.get("singular_point_hits") or "singular" in json.dumps(evidence.get("coverage_search", [])[-1:]):
        singular = {"WL110": "sqrt-zero", "WL109": "unselected-nonfinite"}.get(finding["code"])
    request = {"module": dotted(path), "kernel": finding["kernel"], "line": finding["line"],
               "kind": finding.get("function_kind") or "kernel", "seed": number, "cache": cache,
               "types": evidence.get("instantiated_as") or {},
               "singular": singular if confirmation["status"] == "confirmed" else None}
    try:
        run = subprocess.run([str(python), "-c", CHECK, json.dumps(request)], capture_output=True, text=True,
                             timeout=900)
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        check = json.loads(lines[-1]) if lines else {"outcome": "error", "stderr": run.stderr[-800:]}
    except subprocess.TimeoutExpired:
        check = {"outcome": "timeout"}
    status = confirmation["status"]
    # Cleared with the kernel's other hazards set aside, or as the same adjoint as the safe form's:
    # the verdict itself says the kernel as written disagrees (not this statement's doing), which
    # this check, running the kernel as written, cannot set apart from the statement judged.
    in_context = status == "cleared" and ("isolation" in evidence
                                          or confirmation["reason"].startswith("same-as-safe-form"))
    if check.get("outcome") != "checked":
        judgement = "undecided"
    elif status == "confirmed":
        judgement = "right" if check["disagree"] else "wrong"
    elif in_context and check["disagree"]:
        judgement = "undecided"
        check = {**check, "outcome": "cleared-in-context"}
    else:
        judgement = "right" if not check["disagree"] and check["nonzero"] else "wrong"
    print(f"{number:2d}. {judgement:9s} {status:9s} {finding['code']} {path}:{finding['line']} "
          f"{finding['kernel']}: {json.dumps(check)[:200]}")
    return {"path": path, "line": finding["line"], "code": finding["code"], "kernel": finding["kernel"],
            "status": status, "reason": confirmation["reason"][:300], "check": check, "judgement": judgement}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verdicts", type=Path, help="the --verdicts JSON of bench_confirm_realcode.py")
    parser.add_argument("--sample", type=int, default=30)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("confirm-realcode-judgements.json"))
    arguments = parser.parse_args(argv)

    python = realcode.ensure_env()
    document = json.loads(arguments.verdicts.read_text())
    decided = [(f["path"], finding) for f in document["files"] for finding in f["findings"]
               if finding["confirmation"]["status"] in ("confirmed", "cleared")]
    sample = random.Random(arguments.seed).sample(decided, min(arguments.sample, len(decided)))
    with tempfile.TemporaryDirectory(prefix="warp-lint-judge-") as cache:
        judgements = [judge(python, number, path, finding, cache)
                      for number, (path, finding) in enumerate(sample, start=1)]
    counts = {k: sum(1 for j in judgements if j["judgement"] == k) for k in ("right", "wrong", "undecided")}
    judged = counts["right"] + counts["wrong"]
    print(f"judged {judged} of {len(judgements)}: {counts['right']} right, {counts['wrong']} wrong "
          f"({counts['right'] / max(judged, 1):.0%} right); {counts['undecided']} undecided")
    arguments.out.write_text(json.dumps({"seed": arguments.seed, "counts": counts, "judgements": judgements},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
