"""A picture of the placement: one self-contained HTML page (inline SVG drawn by inline
JS, no network) showing the entry function as a graph, each node coloured by the backend
that runs it: partitions as boxes listing their ops, kernel and estimated cost, host
steps marked as round trips (synchronize, download, NumPy, upload), and Collage's
estimate beside the eager partitioner's. Given a ``Profile`` (``Executable.profile``),
each partition and host step also shows its measured time per run, ``n/a`` where the
device has no clock (the simulated device). ``Executable.report_graph()`` and
``partita-run --report-graph`` write it; people read a placement faster as a graph
than as a table, as they read a model in Netron.
"""

from __future__ import annotations

import html
import json
from typing import Any

from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

from partita.report import format_seconds

__all__ = ["placement_graph", "render_html"]

BACKEND_COLOURS = {
    "cutlass": "#76b900", "cublas": "#1f77b4", "cudnn": "#9467bd", "tensorrt": "#d62728",
    "cuda": "#ff7f0e", "host": "#7f7f7f", "input": "#ffffff", "output": "#ffffff",
}


def _reference_ops(module: Any, symbol: str) -> list[str]:
    for op in module.ops:
        if isinstance(op, FuncOp) and op.sym_name.data == f"{symbol}_reference":
            return [inner.name for inner in op.walk() if inner.name.startswith("nn.")]
    return []


def _measured(seconds: float | None) -> str:
    return "n/a" if seconds is None else format_seconds(seconds)


def placement_graph(exe: Any, profile: Any = None) -> dict[str, Any]:
    """The graph the page draws, as plain data (also what tests inspect). ``profile``
    (a ``partita.runtime.profile.Profile`` of ``exe``): the measured time of each call."""
    report = exe.report()
    measured = profile.by_op() if profile is not None else {}
    rows = {row.symbol: row for row in report.rows}
    function = exe.entry_function()
    nodes: list[dict[str, Any]] = []
    edges: list[tuple[int, int]] = []
    producer: dict[SSAValue, int] = {}

    def add(node: dict[str, Any], op: Operation | None, operands: list[SSAValue]) -> int:
        index = len(nodes)
        node["id"] = index
        nodes.append(node)
        for value in operands:
            if value in producer and (producer[value], index) not in edges:
                edges.append((producer[value], index))
        if op is not None:
            for result in op.results:
                producer[result] = index
        return index

    for arg in function.body.block.args:
        index = add({"kind": "input", "backend": "input", "label": f"%{arg.name_hint or arg.index}", "type": str(arg.type)}, None, [])
        producer[arg] = index
    for op_index, op in enumerate(function.body.block.ops):
        if op.name == "byoc.call_extern":
            symbol = op.properties["callee"].root_reference.data  # type: ignore[attr-defined]
            row = rows.get(symbol)
            backend = row.target.split()[0] if row is not None else "extern"
            add({
                "kind": "partition", "backend": backend, "label": symbol,
                "ops": [name.removeprefix("nn.") for name in (row.ops if row is not None else _reference_ops(exe.module, symbol))],
                "kernel": (row.kernel if row is not None else None) or "none: its reference body on the host",
                # No compiled kernel: the host runs the body, a round trip like a host step.
                "roundtrip": row is None or row.kernel is None,
                "cost": format_seconds(row.cost) if row is not None else "-",
                "calls": row.calls if row is not None else 1,
                "measured": _measured(measured.get(op_index)) if profile is not None else None,
            }, op, list(op.inputs))  # type: ignore[attr-defined]
        elif op.name == "nn.constant":
            continue  # weights: inputs of what uses them, not steps
        elif op.name == "nn.reshape":  # a view of its input's buffer: no step, no copy
            if op.operands[0] in producer:
                producer[op.results[0]] = producer[op.operands[0]]
        elif op.name.startswith("nn."):
            add({"kind": "host", "backend": "host", "label": op.name.removeprefix("nn."), "ops": [op.name],
                 "kernel": "NumPy (host round trip)", "cost": "-", "calls": 1, "roundtrip": True,
                 "measured": _measured(measured.get(op_index)) if profile is not None else None},
                op, list(op.operands))
        elif isinstance(op, ReturnOp):
            for k, value in enumerate(op.operands):
                add({"kind": "output", "backend": "output", "label": f"result {k}", "type": str(value.type)}, None, [value])
        elif op.results:  # allocations, shape arithmetic: pass the producer through
            for value in op.operands:
                if value in producer:
                    for result in op.results:
                        producer.setdefault(result, producer[value])
    groups = []
    if exe.collage is not None:
        for function in exe.collage.functions:
            for group in function.groups:
                groups.append({"function": function.name, "kind": group.kind, "target": group.target,
                               "ops": [name.removeprefix("nn.") for name in group.ops],
                               "cost": format_seconds(group.cost), "symbol": group.symbol or ""})
    return {
        "title": f"@{exe.entry}",
        "collage_groups": groups,
        "nodes": nodes,
        "edges": edges,
        "colours": BACKEND_COLOURS,
        "execution": report.execution,
        "collage": format_seconds(report.collage_total) if report.collage_total is not None else None,
        "eager": format_seconds(report.eager_total) if report.eager_total is not None else None,
        "estimated": format_seconds(report.total_cost),
        # Device time per run from the profile's events; none without a profile or a clock.
        "measured": format_seconds(profile.total) if profile is not None and profile.measured else None,
        "measured_note": (profile.note if profile is not None else "not profiled: partita-run --profile"),
        "host_steps": sum(1 for n in nodes if n.get("roundtrip")),
    }


_SCRIPT = r"""
(function () {
  const data = JSON.parse(document.getElementById("placement-data").textContent);
  const svgNS = "http://www.w3.org/2000/svg";
  const layer = new Array(data.nodes.length).fill(0);
  for (const [a, b] of data.edges) { if (a < b) layer[b] = Math.max(layer[b], layer[a] + 1); }
  data.nodes.forEach((n, i) => { if (n.kind === "output") layer[i] = Math.max(...layer) ; });
  const rows = {};
  const pos = data.nodes.map((n, i) => { const l = layer[i]; rows[l] = (rows[l] || 0) + 1;
                                          return [rows[l] - 1, l]; });
  const W = 340, H = 116, GX = 30, GY = 40;
  const width = Math.max(...Object.values(rows)) * (W + GX) + GX;
  const height = (Math.max(...layer) + 1) * (H + GY) + GY;
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("width", width); svg.setAttribute("height", height); svg.setAttribute("id", "placement");
  const xy = i => [GX + pos[i][0] * (W + GX), GY + pos[i][1] * (H + GY)];
  for (const [a, b] of data.edges) {
    const [x1, y1] = xy(a), [x2, y2] = xy(b);
    const line = document.createElementNS(svgNS, "line");
    line.setAttribute("x1", x1 + W / 2); line.setAttribute("y1", y1 + H);
    line.setAttribute("x2", x2 + W / 2); line.setAttribute("y2", y2);
    line.setAttribute("class", "edge"); svg.appendChild(line);
  }
  data.nodes.forEach((n, i) => {
    const [x, y] = xy(i);
    const g = document.createElementNS(svgNS, "g");
    g.setAttribute("class", "node " + n.kind); g.setAttribute("data-backend", n.backend);
    g.setAttribute("data-label", n.label);
    const rect = document.createElementNS(svgNS, "rect");
    rect.setAttribute("x", x); rect.setAttribute("y", y); rect.setAttribute("width", W);
    rect.setAttribute("height", n.kind === "partition" || n.kind === "host" ? H : 36);
    rect.setAttribute("rx", 6); rect.setAttribute("fill", data.colours[n.backend] || "#cccccc");
    if (n.roundtrip) rect.setAttribute("stroke-dasharray", "6 3");
    g.appendChild(rect);
    const lines = n.kind === "partition" || n.kind === "host"
      ? [n.label + "  [" + n.backend + "]", (n.ops || []).join(", "), "kernel: " + n.kernel,
         "est. " + n.cost + (n.calls > 1 ? ", function shared by " + n.calls + " calls" : "") +
         (n.roundtrip ? "  (host round trip)" : "")].concat(n.measured ? ["measured: " + n.measured + " per run"] : [])
      : [n.label + "  " + (n.type || "")];
    lines.forEach((t, k) => {
      const text = document.createElementNS(svgNS, "text");
      text.setAttribute("x", x + 8); text.setAttribute("y", y + 18 + k * 20);
      text.textContent = t.length > 44 ? t.slice(0, 43) + "\u2026" : t;
      g.appendChild(text);
    });
    const title = document.createElementNS(svgNS, "title");
    title.textContent = lines.join("\n"); g.appendChild(title);
    svg.appendChild(g);
  });
  document.getElementById("graph").appendChild(svg);
  const legend = document.getElementById("legend");
  const used = [...new Set(data.nodes.map(n => n.backend))].filter(b => b !== "input" && b !== "output");
  for (const b of used) {
    const item = document.createElement("span");
    item.className = "legend-item"; item.setAttribute("data-backend", b);
    item.style.background = data.colours[b] || "#cccccc"; item.textContent = b;
    legend.appendChild(item);
  }
  const calls = data.nodes.filter(n => n.kind === "partition");
  const parts = new Set(calls.map(n => n.label)).size;
  document.getElementById("summary").textContent =
    parts + " partition(s) in " + calls.length + " call(s), " + data.host_steps + " host round trip(s); estimated " + data.estimated +
    (data.collage ? "; Collage " + data.collage + " vs eager " + (data.eager || "n/a") : "") +
    "; measured: " + (data.measured || "n/a (" + data.measured_note + ")");
  // Collage's choice, group by group, under the totals that compare it with eager's.
  if (data.collage_groups.length) {
    const table = document.createElement("table");
    table.id = "collage-choice";
    const head = table.insertRow();
    for (const h of ["function", "placed as", "target", "ops", "est. cost"]) {
      const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
    }
    for (const g of data.collage_groups) {
      const row = table.insertRow();
      row.setAttribute("data-target", g.target);
      for (const v of [g.function, g.kind + (g.symbol ? " @" + g.symbol : ""), g.target, g.ops.join(", "), g.cost]) {
        row.insertCell().textContent = v;
      }
      row.cells[2].style.background = data.colours[g.target.split(" ")[0]] || "#eeeeee";
    }
    const caption = table.createCaption();
    caption.textContent = "Collage's choice: " + data.collage + " estimated, eager partitioner: " + (data.eager || "n/a");
    document.getElementById("collage").appendChild(table);
  }
  document.body.setAttribute("data-rendered", "true");
})();
"""

_STYLE = """
body { font-family: sans-serif; margin: 16px; }
.edge { stroke: #444; stroke-width: 1.5; }
.node rect { stroke: #222; stroke-width: 1; }
.node text { font-size: 12px; font-family: monospace; }
#collage-choice { border-collapse: collapse; margin-top: 16px; }
#collage-choice td, #collage-choice th { border: 1px solid #888; padding: 2px 8px; font-size: 12px; }
.legend-item { display: inline-block; padding: 2px 8px; margin-right: 6px; border: 1px solid #222; }
"""


def render_html(data: dict[str, Any]) -> str:
    """The page: data as JSON in the page, drawn by the inline script."""
    payload = json.dumps(data).replace("</", "<\\/")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>Partita placement of {html.escape(data['title'])}</title><style>{_STYLE}</style></head>\n"
        f"<body><h1>Placement of {html.escape(data['title'])}</h1>\n"
        f"<p id=\"execution\">{html.escape(data['execution'].splitlines()[0] if data['execution'] else '')}</p>\n"
        "<p id=\"summary\"></p><div id=\"legend\"></div><div id=\"graph\"></div><div id=\"collage\"></div>\n"
        f"<script type=\"application/json\" id=\"placement-data\">{payload}</script>\n"
        f"<script>{_SCRIPT}</script>\n</body></html>\n"
    )
