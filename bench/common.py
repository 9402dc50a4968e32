"""Shared by the bench/ scripts: flags, the environment record, the result table and JSON, refusals."""
from __future__ import annotations

import argparse
import json
import os
import sys

import tfcnn  # noqa: F401  (quiets TensorFlow's C++ INFO lines before TensorFlow loads)


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", help="write the figures as JSON here")
    return p


def refuse(script: str, message: str) -> None:
    """A baseline (or tfcnn's side) that could not run: say so, and print no ratio."""
    sys.exit(f"{script}: error: {message}; no ratio reported")


def report(script: str, title: str, rows: list[dict], ratios: dict, output: str | None, **extra) -> dict:
    """Prints rows as a table and the ratios; writes everything as JSON to `output`."""
    from tfcnn.benchmark import environment

    bad = [(r["name"], k) for r in rows for k, v in r.items() if isinstance(v, float) and not v > 0]
    if bad:
        refuse(script, f"non-positive measurement {bad[0][1]} for {bad[0][0]}")
    env = environment()
    keys = [k for k in rows[0] if k != "name"]
    widths = [max(12, len(k) + 2) for k in keys]
    print(f"\n{title}  [{env['device']}, TensorFlow {env['tensorflow']}]")
    print(f"{'':<38}" + "".join(f"{k:>{w}}" for k, w in zip(keys, widths)))
    for row in rows:
        print(f"{row['name']:<38}" + "".join(f"{_fmt(row[k]):>{w}}" for k, w in zip(keys, widths)))
    for name, value in ratios.items():
        print(f"  ratio {name}: {value:.2f}x")
    result = {"benchmark": script, "title": title, "environment": env, "results": rows, "ratios": ratios, **extra}
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _fmt(value):
    return f"{value:,.1f}" if isinstance(value, float) else str(value)
