"""Loss functions (ONNX's NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).

Both take scores ``x`` (N, C, d1, ..., dk), integer class targets (N, d1, ..., dk) and an
optional per-class ``weight`` (C,). A target equal to ``ignore_index`` contributes 0 and does
not count in the ``mean`` (which divides by the sum of the weights of the counted targets).
``softmax_cross_entropy`` has two results, selected by ``output``: 0 the loss, 1 log_softmax(x)
over the class axis (one node per result ONNX's node names).
"""

from __future__ import annotations

import numpy as np

from neurenix_core.graph.opset.schema import Arrays, Attrs, Params, Shape, _def, _is_float

__all__: list[str] = []

_REDUCTIONS = ("none", "sum", "mean")


def _loss_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, target = s[0], s[1]
    if len(x) < 2 or target != x[:1] + x[2:]:
        raise ValueError(f"expects scores (N, C, d1...) and targets (N, d1...), got {x} and {target}")
    if not _is_float(d[0]) or d[1] not in ("int32", "int64"):
        raise ValueError(f"expects floating-point scores and int32/int64 targets, got {d[0]} and {d[1]}")
    if len(s) > 2 and (s[2] != (x[1],) or d[2] != d[0]):
        raise ValueError(f"weight must be ({x[1]},) {d[0]}, got {s[2]} {d[2]}")
    if a["reduction"] not in _REDUCTIONS:
        raise ValueError(f"reduction {a['reduction']!r} is not one of {_REDUCTIONS}")
    if a.get("output", 0) == 1:
        return x, d[0]
    return (target if a["reduction"] == "none" else ()), d[0]


def _nll(a: Attrs, logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    """The loss from log-probabilities ``logp`` (N, C, ...)."""
    ignore = a["ignore_index"]
    valid = np.ones(target.shape, bool) if ignore is None else target != ignore
    classes = logp.shape[1]
    if np.any(valid & ((target < 0) | (target >= classes))):
        raise ValueError(f"a target is outside the {classes} classes and is not ignore_index {ignore}")
    idx = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, np.expand_dims(idx, 1), axis=1)[:, 0]
    loss = np.where(valid, -picked, logp.dtype.type(0))
    if weight is not None:
        w = np.where(valid, weight[idx], weight.dtype.type(0)).astype(logp.dtype, copy=False)
    elif ignore is not None:
        w = valid.astype(logp.dtype)
    else:
        w = None
    if w is not None:
        loss = w * loss
    if a["reduction"] == "sum":
        return np.asarray(loss.sum(), logp.dtype)
    if a["reduction"] == "mean":
        return np.asarray(loss.mean() if w is None else loss.sum() / w.sum(), logp.dtype)
    return loss.astype(logp.dtype, copy=False)


def _nll_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    return _nll(a, x[0], x[1], x[2] if len(x) > 2 else None)


_def("nll_loss", "loss",
     "ONNX NegativeLogLikelihoodLoss: -x[n, target[n, ...], ...] times weight[target], 0 where target == ignore_index; "
     "reduction none / sum / mean (mean divides by the counted weights)",
     ("x", "target", "weight?"), _loss_rule, _nll_ref, attrs={"reduction": "mean", "ignore_index": None},
     flops=lambda a, s, o, p: 2 * int(np.prod(s[1])))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    # as ONNX's reference: log of the normalised exponentials (rounds where it rounds)
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return np.log(e / np.sum(e, axis=1, keepdims=True))


def _sce_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    logp = _log_softmax(x[0])
    if a["output"] == 1:
        return logp
    return _nll(a, logp, x[1], x[2] if len(x) > 2 else None)


def _sce_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if a["output"] not in (0, 1):
        raise ValueError(f"output {a['output']} is not 0 (loss) or 1 (log_prob)")
    return _loss_rule(a, s, d, p)


_def("softmax_cross_entropy", "loss",
     "ONNX SoftmaxCrossEntropyLoss: nll_loss of log_softmax(x) over axis 1; output 0 the loss, 1 the log-probabilities",
     ("x", "target", "weight?"), _sce_rule, _sce_ref, attrs={"reduction": "mean", "ignore_index": None, "output": 0},
     flops=lambda a, s, o, p: 4 * int(np.prod(s[0])))
