"""The array API 2024.12 signatures of every neurenix namespace function, and the generator that
turns a table row into a real Python function.

One table is the truth (like an ONNX op schema): the functions in ``ops``, ``linalg`` and ``fft``
are generated from it, the hand-written ones (creation, ``astype``, ``concat`` ...) are checked
against it by the tests, and the tests check the table against ``array_api_strict``. A generated
function has the standard's parameter names, positional-only (``/``) and keyword-only (``*``)
markers and defaults, so ``inspect.signature``, ``help()`` and IDEs show them and Python itself
rejects a misspelt keyword; its body hands the arguments to one dispatcher (``_call``).

Keyword arguments left at their default are not passed on: a backend's native op then uses its
own default (the standard's), and graph backends whose native ops take fewer keywords keep
working exactly as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["GENERATED_DOC", "GENERATED_OPS", "HANDWRITTEN", "SIGNATURES", "default_bindings", "function_source", "make_function", "parameters", "takes"]

_UNARY = "x, /"
_BINARY = "x1, x2, /"
_REDUCTION = "x, /, *, axis=None, keepdims=False"
_REDUCTION_DTYPE = "x, /, *, axis=None, dtype=None, keepdims=False"
_MOMENT = "x, /, *, axis=None, correction=0.0, keepdims=False"
_CUMULATIVE = "x, /, *, axis=None, dtype=None, include_initial=False"
_ARG = "x, /, *, axis=None, keepdims=False"
_SORT = "x, /, *, axis=-1, descending=False, stable=True"
_LIKE = "x, /, *, dtype=None, device=None"
_SHAPED = "shape, *, dtype=None, device=None"
_FFT_1D = "x, /, *, n=None, axis=-1, norm='backward'"
_FFT_ND = "x, /, *, s=None, axes=None, norm='backward'"
_FFT_FREQ = "n, /, *, d=1.0, dtype=None, device=None"
_FFT_SHIFT = "x, /, *, axes=None"

_UNARY_NAMES = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_invert", "ceil", "conj",
    "cos", "cosh", "exp", "expm1", "floor", "imag", "isfinite", "isinf", "isnan", "log", "log1p",
    "log2", "log10", "logical_not", "negative", "positive", "real", "reciprocal", "round", "sign",
    "signbit", "sin", "sinh", "square", "sqrt", "tan", "tanh", "trunc",
)
_BINARY_NAMES = (
    "add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal",
    "hypot", "less", "less_equal", "logaddexp", "logical_and", "logical_or", "logical_xor",
    "maximum", "minimum", "multiply", "nextafter", "not_equal", "pow", "remainder", "subtract",
    "matmul",
)

#: Qualified name (``"sum"``, ``"linalg.qr"``, ``"fft.rfft"``) -> the standard's parameter list.
SIGNATURES: dict[str, str] = {
    **{name: _UNARY for name in _UNARY_NAMES},
    **{name: _BINARY for name in _BINARY_NAMES},
    "clip": "x, /, min=None, max=None",
    # creation
    "arange": "start, /, stop=None, step=1, *, dtype=None, device=None",
    "asarray": "obj, /, *, dtype=None, device=None, copy=None",
    "empty": _SHAPED,
    "empty_like": _LIKE,
    "eye": "n_rows, n_cols=None, /, *, k=0, dtype=None, device=None",
    "from_dlpack": "x, /, *, device=None, copy=None",
    "full": "shape, fill_value, *, dtype=None, device=None",
    "full_like": "x, /, fill_value, *, dtype=None, device=None",
    "linspace": "start, stop, /, num, *, dtype=None, device=None, endpoint=True",
    "meshgrid": "*arrays, indexing='xy'",
    "ones": _SHAPED,
    "ones_like": _LIKE,
    "tril": "x, /, *, k=0",
    "triu": "x, /, *, k=0",
    "zeros": _SHAPED,
    "zeros_like": _LIKE,
    # data types
    "astype": "x, dtype, /, *, copy=True, device=None",
    "can_cast": "from_, to, /",
    "finfo": "type, /",
    "iinfo": "type, /",
    "isdtype": "dtype, kind",
    "result_type": "*arrays_and_dtypes",
    # linear algebra (main namespace)
    "matrix_transpose": _UNARY,
    "tensordot": "x1, x2, /, *, axes=2",
    "vecdot": "x1, x2, /, *, axis=-1",
    # manipulation
    "broadcast_arrays": "*arrays",
    "broadcast_to": "x, /, shape",
    "concat": "arrays, /, *, axis=0",
    "expand_dims": "x, /, axis",
    "flip": "x, /, *, axis=None",
    "moveaxis": "x, source, destination, /",
    "permute_dims": "x, /, axes",
    "repeat": "x, repeats, /, *, axis=None",
    "reshape": "x, /, shape, *, copy=None",
    "roll": "x, /, shift, *, axis=None",
    "squeeze": "x, /, axis",
    "stack": "arrays, /, *, axis=0",
    "tile": "x, repetitions, /",
    "unstack": "x, /, *, axis=0",
    # indexing, searching, sorting, sets
    "take": "x, indices, /, *, axis=None",
    "take_along_axis": "x, indices, /, *, axis=-1",
    "argmax": _ARG,
    "argmin": _ARG,
    "count_nonzero": _REDUCTION,
    "nonzero": _UNARY,
    "searchsorted": "x1, x2, /, *, side='left', sorter=None",
    "where": "condition, x1, x2, /",
    "argsort": _SORT,
    "sort": _SORT,
    "unique_all": _UNARY,
    "unique_counts": _UNARY,
    "unique_inverse": _UNARY,
    "unique_values": _UNARY,
    # statistics and utilities
    "cumulative_prod": _CUMULATIVE,
    "cumulative_sum": _CUMULATIVE,
    "max": _REDUCTION,
    "mean": _REDUCTION,
    "min": _REDUCTION,
    "prod": _REDUCTION_DTYPE,
    "std": _MOMENT,
    "sum": _REDUCTION_DTYPE,
    "var": _MOMENT,
    "all": _REDUCTION,
    "any": _REDUCTION,
    "diff": "x, /, *, axis=-1, n=1, prepend=None, append=None",
    # the linalg extension
    "linalg.cholesky": "x, /, *, upper=False",
    "linalg.cross": "x1, x2, /, *, axis=-1",
    "linalg.det": _UNARY,
    "linalg.diagonal": "x, /, *, offset=0",
    "linalg.eigh": _UNARY,
    "linalg.eigvalsh": _UNARY,
    "linalg.inv": _UNARY,
    "linalg.matmul": _BINARY,
    "linalg.matrix_norm": "x, /, *, keepdims=False, ord='fro'",
    "linalg.matrix_power": "x, n, /",
    "linalg.matrix_rank": "x, /, *, rtol=None",
    "linalg.matrix_transpose": _UNARY,
    "linalg.outer": _BINARY,
    "linalg.pinv": "x, /, *, rtol=None",
    "linalg.qr": "x, /, *, mode='reduced'",
    "linalg.slogdet": _UNARY,
    "linalg.solve": _BINARY,
    "linalg.svd": "x, /, *, full_matrices=True",
    "linalg.svdvals": _UNARY,
    "linalg.tensordot": "x1, x2, /, *, axes=2",
    "linalg.trace": "x, /, *, offset=0, dtype=None",
    "linalg.vecdot": "x1, x2, /, *, axis=-1",
    "linalg.vector_norm": "x, /, *, axis=None, keepdims=False, ord=2",
    # the fft extension
    **{f"fft.{name}": _FFT_1D for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")},
    **{f"fft.{name}": _FFT_ND for name in ("fftn", "ifftn", "rfftn", "irfftn")},
    "fft.fftfreq": _FFT_FREQ,
    "fft.rfftfreq": _FFT_FREQ,
    "fft.fftshift": _FFT_SHIFT,
    "fft.ifftshift": _FFT_SHIFT,
}

#: Functions written by hand (they need a device, a dtype translation or a sequence check) or
#: shared with the operators' flat hot path; every other row of SIGNATURES is generated.
HANDWRITTEN: frozenset[str] = frozenset({
    *_BINARY_NAMES, "arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full",
    "full_like", "linspace", "meshgrid", "ones", "ones_like", "zeros", "zeros_like", "astype",
    "can_cast", "finfo", "iinfo", "isdtype", "result_type", "broadcast_arrays", "concat", "stack",
    "fft.fftfreq", "fft.rfftfreq",
})

#: The main namespace's generated functions, in table order: written into
#: ``neurenix_core/tensor/_generated_ops.py`` by ``scripts/gen_ops.py`` (a test checks it is current).
GENERATED_OPS: tuple[str, ...] = tuple(q for q in SIGNATURES if "." not in q and q not in HANDWRITTEN)
#: The docstring of a generated function (``{}`` is its qualified name).
GENERATED_DOC = "Array API ``{}``, run by the backend of the argument tensors (others under the fallback policy)."


# Generated code names a parameter's default object ``_default_<param>`` (``make_function``, one
# namespace per function) or ``_<fn>_<param>`` (the generated module, one namespace for all);
# None/True/False are compared as constants instead (no global lookup on the call path).
_DEFAULT_NAME = "_default_{param}"
_SINGLETONS = ("None", "True", "False")


def parameters(qualname: str) -> inspect.Signature:
    """The standard's signature of ``qualname`` as an ``inspect.Signature`` (no annotations).

    For tests and tools; the import-time generator parses the table itself (``_parse``), since
    ``inspect`` costs about 0.25 ms per function and there are 150 of them.
    """
    namespace: dict[str, Any] = {}
    exec(f"def f({SIGNATURES[qualname]}): pass", {}, namespace)  # noqa: S102 - static table text
    return inspect.signature(namespace["f"])


def _parse(qualname: str) -> list[tuple[str, bool, str | None]]:
    """``(name, keyword_only, default source or None)`` per parameter of a table row (the rows
    use no commas inside defaults; a ``*args`` row is written by hand and refused here)."""
    out: list[tuple[str, bool, str | None]] = []
    keyword_only = False
    for item in (part.strip() for part in SIGNATURES[qualname].split(",")):
        if item == "/":
            continue
        if item == "*":
            keyword_only = True
            continue
        if item.startswith("*"):
            raise ValueError(f"{qualname}: a {item} signature is written by hand, not generated")
        name, eq, default = item.partition("=")
        if keyword_only and not eq:
            # None in 2024.12; the generator passes only defaulted keywords, so refuse rather than guess.
            raise ValueError(f"{qualname}: a required keyword-only parameter ({name}) is written by hand")
        out.append((name.strip(), keyword_only, default.strip() if eq else None))
    return out


def takes(qualname: str, parameter: str) -> bool:
    """True when the standard's ``qualname`` has a parameter named ``parameter``."""
    return any(name == parameter for name, _, _ in _parse(qualname))


def function_source(qualname: str, dispatch: str, default_name: str = _DEFAULT_NAME, doc: str | None = None) -> str:
    """The source of ``qualname``'s function: the standard's signature, and a body that calls
    ``dispatch(qualname, positional_args[, keyword_args])``.

    Parameters without a default are passed positionally; one with a default is passed by
    keyword only when the caller gave another object than the default (see the module docstring).
    A non-singleton default is compared by identity with the global ``default_name`` (formatted
    with ``fn`` and ``param``), which the caller binds to the function's own default object.
    """
    params = _parse(qualname)
    name = qualname.rsplit(".", 1)[-1]
    positional = [n for n, _, default in params if default is None]
    differs = {
        n: f"{n} is not {default if default in _SINGLETONS else default_name.format(fn=name, param=n)}"
        for n, _, default in params if default is not None
    }
    args = "(" + "".join(f"{n}, " for n in positional) + ")"
    body = [f"    return {dispatch}({qualname!r}, {args})"]
    if differs:
        # The common call leaves every keyword at its default: no dictionary to build.
        body = [
            f"    if not ({' or '.join(differs.values())}):",
            f"        return {dispatch}({qualname!r}, {args})",
            "    kw = {}",
            *(f"    if {test}: kw[{n!r}] = {n}" for n, test in differs.items()),
            f"    return {dispatch}({qualname!r}, {args}, kw)",
        ]
    if doc is not None:
        body.insert(0, f"    {_docstring(doc)}")
    return f"def {name}({SIGNATURES[qualname]}):\n" + "\n".join(body) + "\n"


def default_bindings(qualname: str, default_name: str = _DEFAULT_NAME) -> list[tuple[str, str]]:
    """``(global name, expression)`` per non-singleton default of ``qualname``'s function: the
    expression reads the default object back from the function (``__defaults__`` /
    ``__kwdefaults__``), so the identity test in its body compares with that very object."""
    name = qualname.rsplit(".", 1)[-1]
    return [
        (default_name.format(fn=name, param=n), f"{name}.__kwdefaults__[{n!r}]" if index is None else f"{name}.__defaults__[{index}]")
        for n, index in _compared_defaults(qualname)
    ]


def _compared_defaults(qualname: str) -> list[tuple[str, int | None]]:
    """``(parameter, index in __defaults__ or None for keyword-only)`` per non-singleton default."""
    out: list[tuple[str, int | None]] = []
    index = 0
    for n, keyword_only, default in _parse(qualname):
        if default is None:
            continue
        if default not in _SINGLETONS:
            out.append((n, None if keyword_only else index))
        index += 0 if keyword_only else 1
    return out


def _docstring(doc: str) -> str:
    if '"""' in doc or "\\" in doc:
        raise ValueError(f"docstring {doc!r} cannot be written as plain triple-quoted source")
    return f'"""{doc}"""'


def make_function(qualname: str, dispatch: Callable[..., Any], doc: str, module: str | None = None) -> Callable[..., Any]:
    """A function with ``qualname``'s standard signature whose body is
    ``dispatch(qualname, positional_args, keyword_args)``, attributed to ``module`` (where it is
    exported, so ``pickle`` and ``help()`` find it).

    Made at run time (``linalg``, ``fft`` and tests); the main namespace's functions are the same
    source, written once into ``_generated_ops.py`` by ``scripts/gen_ops.py``.
    """
    name = qualname.rsplit(".", 1)[-1]
    env: dict[str, Any] = {"_dispatch": dispatch, "__name__": module}
    source = function_source(qualname, "_dispatch")
    exec(compile(source, f"<array API {qualname}>", "exec"), env)  # noqa: S102 - static table text
    fn: Callable[..., Any] = env[name]
    # The checks compare with the function's own default objects: a second parse of the table
    # would make equal but distinct float constants, and ``is`` against a literal is a warning.
    for n, index in _compared_defaults(qualname):
        env[_DEFAULT_NAME.format(fn=name, param=n)] = fn.__kwdefaults__[n] if index is None else fn.__defaults__[index]  # type: ignore[index]
    fn.__doc__ = doc
    return fn
