"""Object detection: non-maximum suppression (ONNX NonMaxSuppression).

How many boxes survive depends on the boxes' and scores' values, so the result has no static
shape: like ``unique`` and ``nonzero`` the op runs on constants only (the importer folds it; a
model whose boxes are small graph inputs is built per value of them), and a graph node of it is
refused at shape inference.
"""

from __future__ import annotations

import numpy as np

from neurenix_core.graph.opset.schema import Arrays, Attrs, Params, Shape, _def

__all__: list[str] = []


def _nms_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    raise ValueError("non_max_suppression's output shape depends on its boxes' and scores' values; only constant inputs are supported")


def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_min, x_max, y_min, y_max) per box, in the boxes' own precision."""
    if center:  # [x_center, y_center, width, height]
        half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
        return boxes[:, 0] - half_w, boxes[:, 0] + half_w, boxes[:, 1] - half_h, boxes[:, 1] + half_h
    # [y1, x1, y2, x2] with either corner first
    return (np.minimum(boxes[:, 1], boxes[:, 3]), np.maximum(boxes[:, 1], boxes[:, 3]),
            np.minimum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 0], boxes[:, 2]))


def _overlaps(boxes: np.ndarray, center: bool, threshold: np.ndarray) -> np.ndarray:
    """[n, n] bool: box i suppresses box j (IoU above threshold), with ONNX's reference tests
    for empty intersections and degenerate boxes and its order of float operations."""
    x0, x1, y0, y1 = _corners(boxes, center)
    ix0, ix1 = np.maximum(x0[:, None], x0[None, :]), np.minimum(x1[:, None], x1[None, :])
    iy0, iy1 = np.maximum(y0[:, None], y0[None, :]), np.minimum(y1[:, None], y1[None, :])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area = (x1 - x0) * (y1 - y0)
    union = area[:, None] + area[None, :] - inter
    valid = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # masked by valid
        return valid & (inter / union > threshold)


def _select(scores: np.ndarray, suppress: np.ndarray, limit: int, threshold: np.ndarray | None) -> list[int]:
    """Greedy selection for one class: highest score first (ties: lower index first)."""
    order = np.argsort(-scores, kind="stable")
    if threshold is not None:
        order = order[scores[order] > threshold]
    kept: list[int] = []
    alive = np.ones(scores.shape[0], dtype=bool)
    for i in order:
        if len(kept) >= limit:
            break
        if alive[i]:
            kept.append(int(i))
            alive &= ~suppress[i]
    return kept


def _scalar(x: Arrays, i: int) -> np.ndarray | None:
    """Optional operand ``i`` as its first element (None when absent or empty, as ONNX reads it)."""
    return x[i].reshape(-1)[0] if len(x) > i and x[i] is not None and x[i].size else None


def _nms_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    boxes, scores = x[0], x[1]
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
        raise ValueError(f"non_max_suppression takes boxes [batch, boxes, 4] and scores [batch, classes, boxes], "
                         f"got {boxes.shape} and {scores.shape}")
    given = _scalar(x, 2)
    limit = 0 if given is None else max(int(given), 0)
    given_iou = _scalar(x, 3)
    iou = np.zeros((), boxes.dtype) if given_iou is None else given_iou
    score_threshold = _scalar(x, 4)
    found = []
    for batch in range(boxes.shape[0]):
        suppress = _overlaps(boxes[batch], bool(a["center_point_box"]), iou)
        for cls in range(scores.shape[1]):
            found += [(batch, cls, box) for box in _select(scores[batch, cls], suppress, limit, score_threshold)]
    return np.asarray(found, dtype=np.int64).reshape(-1, 3)


_def("non_max_suppression", "detection", "[selected, 3] int64 (batch, class, box) of the boxes kept per batch and class: by "
     "descending score above score_threshold, dropping a box whose IoU with a kept one exceeds iou_threshold, at most "
     "max_output_boxes_per_class (absent: 0); center_point_box picks [x_c, y_c, w, h] over [y1, x1, y2, x2] "
     "(ONNX NonMaxSuppression; constant inputs only: the output shape depends on the values)",
     ("boxes", "scores", "max_output_boxes_per_class?", "iou_threshold?", "score_threshold?"), _nms_rule, _nms_ref,
     attrs={"center_point_box": 0})
