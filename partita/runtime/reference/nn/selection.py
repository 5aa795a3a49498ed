"""NumPy references of the ops whose result sizes depend on values (``nonzero``,
``unique``, ``non_max_suppression``, ``choose``): the launch plan runs these on the host at a stage
boundary, so they are also what a GPU run computes."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import compute_type, store


def unique(x: np.ndarray, axis: int, sorted_: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Unique along ``axis``: (values, first indices, inverse indices, counts)."""
    wide = compute_type(x)  # bf16 / f16 sort (and view as rows) exactly as f32
    values, index, inverse, counts = np.unique(wide, axis=axis, return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)
    inverse = inverse.reshape(-1)
    if not sorted_:  # in order of first occurrence
        order = np.argsort(index, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values, index, counts, inverse = np.take(values, order, axis=axis), index[order], counts[order], rank[inverse]
    return values.astype(x.dtype), index, inverse, counts


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(y1, x1, y2, x2) with y1 <= y2 and x1 <= x2, in f32 (what onnxruntime computes in)."""
    b = boxes.astype(np.float32)
    if center_point_box:
        xc, yc, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_per_class: int, iou_threshold: float,
                        score_threshold: float, center_point_box: int) -> np.ndarray:
    """ONNX NonMaxSuppression: ``[batch, class, box]`` rows of the kept boxes."""
    rows: list[tuple[int, int, int]] = []
    iou_threshold = np.float32(iou_threshold)
    for b in range(scores.shape[0]):
        y1, x1, y2, x2 = _corners(boxes[b], center_point_box)
        area = (y2 - y1) * (x2 - x1)
        for c in range(scores.shape[1]):
            s = scores[b, c].astype(np.float32)
            order = np.argsort(-s, kind="stable")  # ties: the lower index first
            order = order[s[order] > score_threshold]
            kept: list[int] = []
            for i in order:
                if len(kept) >= max_per_class:
                    break
                if kept:
                    k = np.asarray(kept)
                    h = np.maximum(np.float32(0), np.minimum(y2[i], y2[k]) - np.maximum(y1[i], y1[k]))
                    w = np.maximum(np.float32(0), np.minimum(x2[i], x2[k]) - np.maximum(x1[i], x1[k]))
                    inter = h * w
                    union = area[i] + area[k] - inter
                    with np.errstate(divide="ignore", invalid="ignore"):
                        iou = np.where(union > 0, inter / union, np.float32(0))
                    if np.any(iou > iou_threshold):
                        continue
                kept.append(int(i))
            rows.extend((b, c, i) for i in kept)
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def _scalar(value: np.ndarray, default: Any) -> Any:
    flat = np.asarray(value).reshape(-1)
    return flat[0].item() if flat.size else default


@register_impls
class SelectionFunctions(InterpreterFunctions):
    """References of the data-dependent selection ops."""

    @impl(nn.NonZeroOp)
    def run_nonzero(self, interpreter: Interpreter, op: nn.NonZeroOp, args: tuple[Any, ...]):
        (x,) = args
        return store(op, np.stack(np.nonzero(compute_type(x) != 0)).reshape(x.ndim, -1))

    @impl(nn.UniqueOp)
    def run_unique(self, interpreter: Interpreter, op: nn.UniqueOp, args: tuple[Any, ...]):
        (x,) = args
        results = unique(x, op.axis % x.ndim, bool(op.sorted))
        return store(op, results[nn.UNIQUE_RESULTS.index(op.output)])

    @impl(nn.NonMaxSuppressionOp)
    def run_non_max_suppression(self, interpreter: Interpreter, op: nn.NonMaxSuppressionOp, args: tuple[Any, ...]):
        boxes, scores, max_out, iou, score = args
        return store(op, non_max_suppression(boxes, scores, int(_scalar(max_out, 0)), float(_scalar(iou, 0.0)),
                                             float(_scalar(score, -np.inf)), op.center_point_box))

    @impl(nn.ChooseOp)
    def run_choose(self, interpreter: Interpreter, op: nn.ChooseOp, args: tuple[Any, ...]):
        condition, on_true, on_false = args
        return store(op, np.array(on_true if bool(_scalar(condition, False)) else on_false, copy=True))
