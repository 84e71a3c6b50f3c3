"""A dataclass becomes a command line: each field a ``--flag``, its one-line docstring the help text."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap


def field_docs(cls) -> dict[str, str]:
    """The docstring written under each field of a dataclass (read from its source)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
            docs[node.target.id] = str(after.value.value).strip()
    return docs


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def parse(cls, argv=None, prog: str | None = None, description: str | None = None):
    """An instance of dataclass ``cls`` from ``argv`` (``--field value``; booleans take true/false too)."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = f.type if isinstance(f.type, type) else eval(f.type, {}, {})  # noqa: S307 (annotations of cls)
        if kind is bool:
            parser.add_argument(flag, type=_parse_bool, nargs="?", const=True, default=f.default,
                                help=docs.get(f.name, ""))
        elif kind in (int, float, str):
            parser.add_argument(flag, type=kind, default=f.default, help=docs.get(f.name, ""))
        else:  # optional str (e.g. "str | None"): empty means None
            parser.add_argument(flag, type=lambda t: t or None, default=f.default, help=docs.get(f.name, ""))
    return cls(**vars(parser.parse_args(argv))), parser
